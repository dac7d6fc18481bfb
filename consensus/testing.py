"""Test and simulation support for :mod:`consensus` (as ``trio.testing``): a deterministic cluster.

:class:`Cluster` runs replicas over a seeded faulty network with Byzantine members and checks the
safety invariants after every event; see :mod:`consensus._cluster`. :func:`agree` answers a replica's
``RequestVerdict`` effects at once, for a test that drives one replica by hand. Pure and deterministic like the
rest of the package (its PRNG is :class:`SplitMix64`, not the ``random`` module), so ``sim/`` can
reuse it.
"""

from consensus._cluster import BEHAVIOURS, Cluster, Faults, InvariantViolation, SplitMix64, agree, default_replica_config

__all__ = ["BEHAVIOURS", "Cluster", "Faults", "InvariantViolation", "SplitMix64", "agree", "default_replica_config"]
