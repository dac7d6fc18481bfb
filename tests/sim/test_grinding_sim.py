"""A proposer that grinds its block time buys nothing (whole simulations).

Every height's coordinator (view-0 primary) grinds: it tries up to 3,000 block times within the validators' drift and
proposes the first whose block hash would have made it the next height's primary under the former rule
(``node.adversary.grind_for_next_primary``). Against that rule it won at every height where it sat on the next
committee. Under the chain rules
now, the run's roles are the clean run's, height by height: the same proposers, views, trainers and next committees,
although the grinding blocks carry other times and so other hashes; and the ledger re-executes.
"""

import dataclasses
from pathlib import Path

from ledger import primary
from ledger.store import open_ledger
from sim import Simulation, load_scenario, verify_ledger
from sim._scenario import FaultConfig

SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"


def _run(tmp: Path, faults) -> tuple[list, object]:
    sc = load_scenario(SCENARIOS / "coordinator_fedavg.toml", rounds=12, members=12)
    sc = dataclasses.replace(sc, adversary=dataclasses.replace(sc.adversary, faults=tuple(faults)))
    res = Simulation(sc, ledger_dir=tmp).run()
    assert len(res.rounds) == 12
    store, _ = open_ledger(tmp, readonly=True)
    with store:
        blocks = [store.get(h) for h in range(1, store.height() + 1)]
    ok, line = verify_ledger(tmp)
    assert ok and "re-executed" in line, line
    return blocks, res


def _roles(b) -> tuple:
    return (b.header.height, b.header.proposer, b.header.view, tuple(b.payload.record["clients"]),
            tuple(b.payload.next_committee))


def test_a_grinding_coordinator_changes_no_role(tmp_path):
    clean, _ = _run(tmp_path / "clean", [])
    ground, res = _run(tmp_path / "ground", [FaultConfig(target="coordinator", kind="grind", tries=3000)])
    assert [_roles(b) for b in ground] == [_roles(b) for b in clean]
    # it did grind, and against the old rule it would have won wherever it could (it sits on the next committee):
    # the block hash it picked names it the next primary
    assert len(res.ground) >= 11, res.ground
    wins = {h for h, _, won in res.ground if won}
    eligible = {b.header.height for b in ground if b.header.proposer in b.payload.next_committee}
    assert len(eligible) >= 2 and wins == eligible, (res.ground, eligible)
    by_height = {b.header.height: b for b in ground}
    for h in wins:
        b = by_height[h]
        assert primary(b.payload.next_committee, b.hash(), h + 1, 0) == b.header.proposer
    assert any(g.header.time_ms != c.header.time_ms for g, c in zip(ground, clean)), "the ground times are other"
    assert [b.hash() for b in ground] != [b.hash() for b in clean]
