"""The simulator's network model and protocol faults: per-link latency, partitions that
heal, equivocating committee members. Real node cores, pBFT, signatures; small digits/MLP runs."""

import math
from pathlib import Path

from ledger import audit_chain
from ledger.store import open_ledger
from node.reexec import reexecutor_for
from sim import Simulation, load_scenario, verify_ledger

SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"


def _scenario(name, **overrides):
    return load_scenario(SCENARIOS / name, **overrides)


def _committee_indices(sc):
    sim = Simulation(sc)
    return sorted(sim.index[p] for p in sim._committee)


def test_a_member_behind_a_slow_link_misses_every_deadline_while_the_others_are_accepted():
    sc = _scenario("coordinator_fedavg.toml", rounds=4)
    slow = max(set(range(20)) - set(_committee_indices(sc)))  # a plain client, never a validator at height 1
    links = [{"a": slow, "b": j, "latency_ms": 5000.0} for j in range(20) if j != slow]
    res = Simulation(_scenario("coordinator_fedavg.toml", rounds=4, network={"latency_ms": 20, "links": links})).run()
    slow_peer = next(p for p, i in res.member_index.items() if i == slow)
    accepted, trained = res.acceptance[slow_peer]
    assert trained == 4 and accepted == 0, (accepted, trained)
    others = [a for p, (a, t) in res.acceptance.items() if p != slow_peer]
    assert sum(others) >= 19 * 4 - 4, "the other clients must be accepted (nearly) every round"


def test_a_partition_without_quorum_stalls_the_chain_which_resumes_after_it_heals(tmp_path):
    class Stop(Exception):
        pass

    def stop_after_2(m):
        if m.fl_round == 2:
            raise Stop

    before = Simulation(_scenario("coordinator_fedavg.toml", rounds=6), on_round=stop_after_2)
    try:  # the same trace up to the partition: who validates height 3
        before.run()
    except Stop:
        pass
    committee = sorted(before.index[p] for p in before._committee)
    half = tuple(committee[: len(committee) // 2])  # no side keeps a bft quorum of the committee
    part = {"groups": [list(half)], "from_round": 3, "duration_ms": 8000.0}
    sc = _scenario("coordinator_fedavg.toml", rounds=6, network={"latency_ms": 20, "partitions": [part]})
    sim = Simulation(sc, ledger_dir=tmp_path / "ledger")
    res = sim.run()
    assert [m.fl_round for m in res.rounds] == list(range(1, 7))
    assert sim.partitioned > 0
    gap = res.rounds[2].virtual_time_s - res.rounds[1].virtual_time_s  # round 3 waited for the heal
    normal = res.rounds[1].virtual_time_s - res.rounds[0].virtual_time_s
    assert gap >= 8.0 > 3 * normal, (gap, normal)
    assert res.view_changes > 0
    assert not math.isnan(res.final_accuracy)
    ok, line = verify_ledger(tmp_path / "ledger")
    assert ok, line


def test_an_equivocating_committee_member_is_caught_with_evidence_and_the_chain_goes_on(tmp_path):
    fault = {"target": "committee", "kind": "equivocate", "from_round": 1}
    sc = _scenario("quickstart.toml", rounds=5, adversary={"faults": [fault]})
    sim = Simulation(sc, ledger_dir=tmp_path / "ledger")
    res = sim.run()
    assert [m.fl_round for m in res.rounds] == list(range(1, 6))
    assert sim.equivocations > 0
    assert res.evidence >= 1, "conflicting signed messages must end up as evidence in a block"
    store, _ = open_ledger(tmp_path / "ledger", readonly=True)
    with store:
        kinds = {ev.kind for h in range(1, store.height() + 1) for ev in store.get(h).payload.evidence}
    assert "equivocation" in kinds
    # the chain holds one of the member's two score rows, whose distances the stored updates contradict: the audit
    # names that member and no one else, and every other check passes
    store, blobs = open_ledger(tmp_path / "ledger", readonly=True)
    with store:
        report = audit_chain(store.genesis(), store.iter_rows(), blobs=blobs, reexecutor=reexecutor_for(store.genesis()))
    equivocator = {sim.peers_by_index(i) for i in range(len(sim.peers)) if sim.scenario_faulty(sim.peers_by_index(i), 1)}
    assert report.chain_valid, report.line()
    assert {f.offender for f in report.findings} <= equivocator, report.findings
    ok, line = verify_ledger(tmp_path / "ledger")
    assert ok == (not report.findings), line
