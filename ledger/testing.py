"""Test and demo support for :mod:`ledger` (as ``consensus.testing``): a deterministic multi-member chain
generator, the ledger demo (``concilium ledger demo``) and the fixture of ledger tests.

It plays every member of a network with derived keys (``KeyPair.derive``) and produces fully signed,
valid blocks: ``updates_per_block`` signed update commitments whose blobs are real canonical tensor blobs,
a commit certificate from a quorum of the committee named by the previous block, and the next committee
drawn from the block hash. Same arguments ⇒ same blocks, bit for bit (no clock, no global RNG).

This is not the training simulator (that is ``concilium sim``); it exists so the ledger, its store, its
audit and its benchmark can be exercised on realistic chains before and independently of training. It imports
only ``ledger`` and the standard library (an import-linter contract in ``pyproject.toml``), so a ledger test that
uses it loads neither the simulator nor torch.
"""

from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass

from ledger import (
    Block,
    ChainContext,
    ChainState,
    Genesis,
    KeyPair,
    Member,
    ModelSpec,
    Payload,
    ProtocolParams,
    TensorEntry,
    apply_block,
    encode_tensors,
    genesis_state,
    hash_tagged,
    make_certificate,
    make_header,
    primary,
    quorum_size,
    sha256,
    sign_commit,
    sign_update,
)

__all__ = ["LedgerDemo", "demo_genesis", "tensor_blob"]


def tensor_blob(label: bytes, n_floats: int) -> bytes:
    """A canonical tensor blob of ``n_floats`` float32 values derived from ``label`` (finite, in [-1, 1))."""
    need = 4 * n_floats
    stream = bytearray()
    counter = 0
    while len(stream) < need:
        stream += hashlib.sha256(label + struct.pack(">Q", counter)).digest()
        counter += 1
    ints = struct.unpack(f"<{n_floats}I", bytes(stream[:need]))
    floats = [((i >> 8) / float(1 << 23)) - 1.0 for i in ints]
    data = struct.pack(f"<{n_floats}f", *floats)
    return encode_tensors([TensorEntry("delta", "F32", (n_floats,), data)])


def demo_genesis(
    keys: list[KeyPair],
    *,
    chain_id: str = "concilium-demo",
    committee_size: int = 4,
    quorum: str = "bft",
    model_digest: bytes | None = None,
) -> Genesis:
    members = tuple(sorted((Member(peer_id=k.peer_id, public_key=k.public_key) for k in keys), key=lambda m: m.peer_id))
    return Genesis(
        chain_id=chain_id,
        genesis_time_ms=0,
        members=members,
        # "demo": no real training behind these rounds, so an auditor has nothing to re-execute
        protocol=ProtocolParams(mode="coordinator", algorithm="demo", committee_size=committee_size, quorum=quorum),
        model=ModelSpec(name="mlp", digest=model_digest or sha256(b"concilium-demo-initial-model")),
    )


@dataclass
class LedgerDemo:
    """Generates the blocks of a demo chain one at a time (``next_block``)."""

    members: int = 10
    committee_size: int = 4
    updates_per_block: int = 6
    floats_per_update: int = 256
    chain_id: str = "concilium-demo"
    seed: int = 0
    quorum: str = "bft"

    def __post_init__(self) -> None:
        if not 1 <= self.committee_size <= self.members:
            raise ValueError("need 1 <= committee_size <= members")
        if not 0 <= self.updates_per_block <= self.members:
            raise ValueError("need 0 <= updates_per_block <= members")
        self.keys = [KeyPair.derive(f"demo-{self.seed}-{i}") for i in range(self.members)]
        self.by_id = {k.peer_id: k for k in self.keys}
        self.genesis = demo_genesis(
            self.keys, chain_id=self.chain_id, committee_size=self.committee_size, quorum=self.quorum
        )
        self.ctx = ChainContext(self.genesis)
        self.state: ChainState = genesis_state(self.ctx)

    def next_block(self, *, check: bool = False) -> tuple[Block, dict[bytes, bytes]]:
        """The next block and the blobs it references (digest → bytes). Advances the state."""
        st = self.state
        h = st.height + 1
        ids = sorted(self.by_id)
        # training clients and next committee: ranked by a hash of the previous block (derived, not RNG)
        ranked = sorted(ids, key=lambda p: hash_tagged(b"demo-sample", st.head_hash + p.encode()))
        trainers = sorted(ranked[: self.updates_per_block])
        blobs: dict[bytes, bytes] = {}
        updates = []
        for p in trainers:
            blob = tensor_blob(st.head_hash + p.encode(), self.floats_per_update)
            d = sha256(blob)
            blobs[d] = blob
            updates.append(sign_update(self.by_id[p], self.chain_id, h, d, 32 + (d[0] % 64)))
        model = tensor_blob(b"model" + st.head_hash, self.floats_per_update)
        model_digest = sha256(model)
        blobs[model_digest] = model
        next_committee = tuple(sorted(ranked[-self.committee_size :]))
        payload = Payload(
            updates=tuple(updates),
            model_digest=model_digest,
            next_committee=next_committee,
            record={"accepted": tuple(trainers), "demo": True},
        )
        view = 0
        header = make_header(
            chain_id=self.chain_id,
            height=h,
            prev_hash=st.head_hash,
            view=view,
            proposer=primary(st.committee, self.ctx.genesis_hash, h, view),
            time_ms=st.time_ms + 1000,
            payload=payload,
        )
        bh = header.hash()
        q = quorum_size(len(st.committee), self.quorum)
        signers = sorted(st.committee)[:q]
        cert = make_certificate(header, [sign_commit(self.by_id[s], self.chain_id, h, view, bh) for s in signers])
        block = Block(header=header, payload=payload, certificate=cert)
        if check:
            self.state = apply_block(self.ctx, st, block)
        else:
            self.state = ChainState(
                height=h,
                head_hash=bh,
                time_ms=header.time_ms,
                committee=next_committee,
                model_digest=model_digest,
                state_digest=None,
            )
        return block, blobs
