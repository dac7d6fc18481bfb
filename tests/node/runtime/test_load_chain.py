"""A node restarted from its data directory resumes the chain as the live nodes have it:
for a semi-synchronous strategy that includes the staleness window its next round is planned from."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import numpy as np

from node.runtime._node import LEDGER_DIR, load_chain
from sim import Simulation, load_scenario

SCENARIOS = Path(__file__).resolve().parents[3] / "scenarios"


def test_a_restarted_node_rebuilds_the_staleness_window_the_live_nodes_keep(tmp_path: Path) -> None:
    sc = load_scenario(SCENARIOS / "coordinator_fedavg.toml", rounds=8, members=12)
    proto = dataclasses.replace(sc.protocol, algorithm="fedasync", params={"clients": 6, "max_staleness": 2})
    adv = dataclasses.replace(sc.adversary, availability="stragglers(max_delay=2, seed=1)")
    sim = Simulation(dataclasses.replace(sc, protocol=proto, adversary=adv), ledger_dir=tmp_path / "sim")
    res = sim.run()
    assert sum(m.stale_accepted for m in res.rounds) > 0, "the run must have stale updates to be a test"

    data_dir = tmp_path / "node"
    shutil.copytree(tmp_path / "sim", data_dir / LEDGER_DIR)
    chain = load_chain(sim.genesis, data_dir, sim.theta0)
    try:
        assert chain.state.height == 8 and chain.state.head_hash == sim.head_hash
        assert chain.history is not None and chain.history.window == 2
        # every live node that stored the last block keeps this window
        lives = [n._history for n in sim.nodes.values() if n.chain_state.height == 8]
        assert lives
        live = lives[0]
        assert chain.history.plans == live.plans
        assert chain.history.included == live.included
        assert chain.history.models.keys() == live.models.keys() == {7, 8}
        for h, model in live.models.items():
            np.testing.assert_array_equal(chain.history.models[h], model)
        assert chain.history.busy(9) == live.busy(9) and live.busy(9), "stragglers still out at height 9"
    finally:
        chain.store.close()

    # a synchronous strategy keeps no window
    plain = Simulation(load_scenario(SCENARIOS / "coordinator_fedavg.toml", rounds=2, members=6),
                       ledger_dir=tmp_path / "sync")  # fmt: skip
    plain.run()
    shutil.copytree(tmp_path / "sync", tmp_path / "sync-node" / LEDGER_DIR)
    chain = load_chain(plain.genesis, tmp_path / "sync-node", plain.theta0)
    chain.store.close()
    assert chain.history is None and chain.state.height == 2
