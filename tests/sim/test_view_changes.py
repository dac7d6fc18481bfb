"""No view change without a fault: fault-free runs of the bundled scenarios decide every height in
view 0.

Before, a validator refused a proposal at once when an update blob it includes had not reached it yet (the trainer's
update and the primary's pre-prepare race to it), and asked for a view change: ``concilium sim run testnet`` gave 6
view changes in 20 rounds, and a block of view 1 at height 9, without any fault. A validator now waits for the
missing input within the view's timer (``consensus.Pending``). What these runs check is timing alone (who proposes
and when messages arrive), which training bits do not move; Byzantine *updates* (``sself_backdoor``) are not a
protocol fault.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from sim import Simulation, load_scenario

SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"


def _assert_no_view_change(sc) -> None:  # noqa: ANN001
    sim = Simulation(sc, workers=0)
    res = sim.run()
    refusals = [(n.peer_id, r) for n in sim.nodes.made() for r in n.replica.status().refusals]
    assert res.view_changes == 0 and not refusals, (sc.name, sc.seed, res.view_changes, refusals[:3])
    assert [m.view for m in res.rounds] == [0] * sc.rounds
    assert res.evidence == 0


@pytest.mark.parametrize("seed", range(4))
def test_a_fault_free_testnet_run_has_no_view_change(seed):
    _assert_no_view_change(load_scenario(SCENARIOS / "testnet.toml", seed=seed))


@pytest.mark.parametrize("network", [{"jitter_ms": 50, "bandwidth_mbps": 10}, {"latency_ms": 200, "jitter_ms": 100}])
def test_a_fault_free_testnet_on_slower_links_has_no_view_change(network):
    """Links with jitter and a narrow uplink (an update of 10 kB takes 8 ms to send): the timers (a 1 s propose
    timer, 10 s to train and collect) still cover them."""
    sets = [f"network.{k}={v}" for k, v in network.items()]
    for seed in range(2):
        _assert_no_view_change(load_scenario(SCENARIOS / "testnet.toml", seed=seed, rounds=10, sets=sets))


@pytest.mark.parametrize(("name", "rounds"), [("coordinator_fedavg", 10), ("quickstart", 10), ("sself_backdoor", 20)])
def test_fault_free_bundled_scenarios_have_no_view_change(name, rounds):
    _assert_no_view_change(load_scenario(SCENARIOS / f"{name}.toml", rounds=rounds))
