"""Deterministic simulation: no trio, no libp2p, no wall clock in the protocol path, no global RNG.

:class:`Simulation` runs N real node cores (committee, pBFT, signatures, ledger) over an in-memory
network in virtual time; :func:`run_scenario` is the main job (``concilium sim run``). Signed demo chains for
ledger tests and benchmarks come from :mod:`ledger.testing`.
"""

from sim._engine import LivenessError, RoundMetrics, SimResult, Simulation
from sim._ray import GPU_FRACTION_DEFAULT, RayClusterError, RayExecutor
from learning import RngTree
from sim._run import (
    accuracy_plot, ledger_verdict, metric_columns, public_eval_for_ledger, results_folder, run_scenario, scenario_toml, verify_ledger,
    write_results, write_scenario,
)
from sim._scenario import (
    PAPER_ALIASES, Scenario, bundled_scenario_names, current_scenario_name, default_scenario_path, load_scenario,
    resolve_scenario,
)
from sim._sweep import parse_grid, parse_seeds, run_sweep
from sim._world import World, byzantine_indices, check_network_adversary
from node.world import resolve_device

__all__ = [
    "accuracy_plot",
    "GPU_FRACTION_DEFAULT",
    "PAPER_ALIASES",
    "LivenessError",
    "RayClusterError",
    "RayExecutor",
    "RngTree",
    "RoundMetrics",
    "Scenario",
    "SimResult",
    "Simulation",
    "World",
    "bundled_scenario_names",
    "byzantine_indices",
    "check_network_adversary",
    "current_scenario_name",
    "default_scenario_path",
    "parse_grid",
    "parse_seeds",
    "run_sweep",
    "resolve_device",
    "load_scenario",
    "metric_columns",
    "public_eval_for_ledger",
    "resolve_scenario",
    "results_folder",
    "run_scenario",
    "scenario_toml",
    "verify_ledger",
    "ledger_verdict",
    "write_scenario",
    "write_results",
]
