"""A seeded tree of random generators: one root seed, a named child for every consumer.

``RngTree(seed).child("client", 7, "batches")`` always yields the same stream, independent of how many
other children were drawn or in which order (FoundationDB/TigerBeetle style: a seed replays everything).
Seeds are derived by SHA-256 of the path, never from a global generator.
"""

from __future__ import annotations

import hashlib
import random

import numpy as np

__all__ = ["RngTree"]


class RngTree:
    """Derives independent, reproducible generators from a root seed and a path of labels."""

    __slots__ = ("_path", "seed")

    def __init__(self, seed: int, _path: tuple[str, ...] = ()) -> None:
        if not isinstance(seed, int) or seed < 0:
            raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
        self.seed = seed
        self._path = _path

    def child(self, *labels: object) -> RngTree:
        return RngTree(self.seed, self._path + tuple(str(x) for x in labels))

    def seed64(self) -> int:
        """A 64-bit seed for this node of the tree."""
        h = hashlib.sha256(f"concilium-rng/{self.seed}/".encode() + "\x1f".join(self._path).encode())
        return int.from_bytes(h.digest()[:8], "big")

    def numpy(self) -> np.random.Generator:
        return np.random.Generator(np.random.PCG64(self.seed64()))

    def python(self) -> random.Random:
        return random.Random(self.seed64())

    def torch(self):  # noqa: ANN201 - torch imported lazily: sim must not pay for torch unless training
        import torch

        g = torch.Generator()
        g.manual_seed(self.seed64() & 0x7FFF_FFFF_FFFF_FFFF)
        return g

    def __repr__(self) -> str:
        return f"RngTree(seed={self.seed}, path={'/'.join(self._path) or '.'})"
