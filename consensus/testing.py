"""Test and simulation support for :mod:`consensus` (as ``trio.testing``): a deterministic cluster.

:class:`Cluster` runs replicas over a seeded faulty network with Byzantine members and checks the
safety invariants after every event; see :mod:`consensus._cluster`. Pure and deterministic like the
rest of the package (its PRNG is :class:`SplitMix64`, not the ``random`` module), so ``sim/`` can
reuse it.
"""

from consensus._cluster import BEHAVIOURS, Cluster, Faults, InvariantViolation, SplitMix64, default_replica_config

__all__ = ["BEHAVIOURS", "Cluster", "Faults", "InvariantViolation", "SplitMix64", "default_replica_config"]
