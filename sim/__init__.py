"""Deterministic simulation: no trio, no libp2p, no wall clock in the protocol path, no global RNG.

:class:`Simulation` runs N real node cores (committee, pBFT, signatures, ledger) over an in-memory
network in virtual time; :func:`run_scenario` is the main job (``concilium sim run``);
:class:`LedgerDemo` generates signed demo chains for ledger tests and benchmarks.
"""

from sim._engine import LivenessError, RoundMetrics, SimResult, Simulation
from sim._ledger_demo import LedgerDemo, demo_genesis, tensor_blob
from sim._rng import RngTree
from sim._run import public_eval_for_ledger, run_scenario, verify_ledger, write_results
from sim._scenario import Scenario, bundled_scenario_names, default_scenario_path, load_scenario, resolve_scenario

__all__ = [
    "LedgerDemo",
    "LivenessError",
    "RngTree",
    "RoundMetrics",
    "Scenario",
    "SimResult",
    "Simulation",
    "bundled_scenario_names",
    "default_scenario_path",
    "demo_genesis",
    "load_scenario",
    "public_eval_for_ledger",
    "resolve_scenario",
    "run_scenario",
    "tensor_blob",
    "verify_ledger",
    "write_results",
]
