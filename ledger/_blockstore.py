"""The block store contract and an in-memory implementation.

A store keeps the genesis and the blocks ``1..height`` as canonical bytes. It checks two invariants on
append **and** again when blocks are read back (TigerStyle pairs): heights are contiguous, and every
block's ``prev_hash`` is the previous block's hash. It does *not* verify signatures or certificates:
that is :func:`ledger.apply_block`'s job, run by nodes before appending and by the auditor on reading.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol, runtime_checkable

from ledger._errors import StoreError
from ledger._types import Block, Genesis

__all__ = ["BlockStore", "MemoryBlockStore", "check_append"]


@runtime_checkable
class BlockStore(Protocol):
    """Durable, append-only storage of one chain."""

    def genesis(self) -> Genesis: ...

    def height(self) -> int:
        """Height of the last stored block (0 = only the genesis)."""
        ...

    def head_hash(self) -> bytes:
        """Hash of the last stored block (the genesis hash at height 0)."""
        ...

    def append(self, block: Block) -> None:
        """Store ``block`` as height ``height() + 1``; raises StoreError if it does not link."""
        ...

    def get_raw(self, height: int) -> bytes:
        """Canonical bytes of block ``height`` exactly as stored (for audits)."""
        ...

    def get(self, height: int) -> Block: ...

    def iter_raw(self, start: int = 1) -> Iterator[tuple[int, bytes]]:
        """``(height, bytes)`` for every stored block from ``start`` upward, in order."""
        ...

    def close(self) -> None: ...


def check_append(store_height: int, head_hash: bytes, block: Block) -> None:
    """The write-side invariant: ``block`` is the next height and links to the head."""
    if block.header.height != store_height + 1:
        raise StoreError(f"cannot append height {block.header.height} after height {store_height}")
    if block.header.prev_hash != head_hash:
        raise StoreError(f"block {block.header.height} does not link to the stored head")


class MemoryBlockStore:
    """A :class:`BlockStore` in memory (tests, simulations that do not keep their ledger)."""

    def __init__(self, genesis: Genesis) -> None:
        self._genesis = genesis
        self._raw: list[bytes] = []
        self._hashes: list[bytes] = [genesis.hash()]

    def genesis(self) -> Genesis:
        return self._genesis

    def height(self) -> int:
        return len(self._raw)

    def head_hash(self) -> bytes:
        return self._hashes[-1]

    def append(self, block: Block) -> None:
        check_append(self.height(), self.head_hash(), block)
        self._raw.append(block.encode())
        self._hashes.append(block.hash())

    def get_raw(self, height: int) -> bytes:
        if not 1 <= height <= len(self._raw):
            raise StoreError(f"no block at height {height} (store height {len(self._raw)})")
        return self._raw[height - 1]

    def get(self, height: int) -> Block:
        return Block.decode(self.get_raw(height))

    def iter_raw(self, start: int = 1) -> Iterator[tuple[int, bytes]]:
        for h in range(max(start, 1), len(self._raw) + 1):
            yield h, self._raw[h - 1]

    def close(self) -> None:
        pass
