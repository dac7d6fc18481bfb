"""Server algorithms run by an elected coordinator: the algorithm state is a blob
referenced from every block, so a replaced coordinator resumes it exactly; semi-synchronous strategies take
stale updates; clients' private state and the server state both flow through the real node cores."""

import dataclasses
from pathlib import Path

from ledger.store import open_ledger
from sim import Simulation, load_scenario, verify_ledger

SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"


def _scenario(algorithm, params, *, rounds=6, faults=(), availability="", members=12, **extra):
    sc = load_scenario(SCENARIOS / "coordinator_fedavg.toml", rounds=rounds, members=members)
    proto = dataclasses.replace(sc.protocol, algorithm=algorithm, params=params)
    adv = dataclasses.replace(sc.adversary, faults=tuple(faults), availability=availability)
    return dataclasses.replace(sc, protocol=proto, adversary=adv, **extra)


def _model_digests(path):
    store, _ = open_ledger(path, readonly=True)
    with store:
        return [store.get(h).payload.model_digest for h in range(1, store.height() + 1)], [
            store.get(h).payload.state_digest for h in range(1, store.height() + 1)
        ], [store.get(h).header.view for h in range(1, store.height() + 1)]


def test_a_replaced_coordinator_resumes_the_algorithm_state_exactly(tmp_path):
    from sim._scenario import FaultConfig

    params = {"lr": 0.05, "local_steps": 10}
    clean = Simulation(_scenario("mimic", params), ledger_dir=tmp_path / "clean")
    clean.run()
    # a corrupt coordinator from round 3 on: every view-0 proposal is a wrong aggregate that the validators
    # refuse; the next primary takes over with the state the previous block committed
    corrupt = FaultConfig(target="coordinator", kind="corrupt", from_round=3)
    faulty = Simulation(_scenario("mimic", params, faults=[corrupt]), ledger_dir=tmp_path / "faulty")
    faulty.run()
    m_clean, s_clean, v_clean = _model_digests(tmp_path / "clean")
    m_faulty, s_faulty, v_faulty = _model_digests(tmp_path / "faulty")
    assert all(s is not None for s in s_clean), "MimiC keeps its corrections in a state blob in every block"
    assert v_clean == [0] * 6 and all(v >= 1 for v in v_faulty[2:]), (v_clean, v_faulty)
    # every round's coordinator (from round 3 a replacement) computed the very same model and state as the
    # clean run's: same updates, same committed state in, same state out
    assert m_faulty == m_clean and s_faulty == s_clean
    assert faulty.corruptions >= 4
    ok, line = verify_ledger(tmp_path / "faulty")
    assert ok, line


def test_scaffold_server_state_reaches_the_clients_and_verifies(tmp_path):
    sim = Simulation(_scenario("scaffold", {"lr": 0.05}, rounds=5), ledger_dir=tmp_path / "l")
    res = sim.run()
    assert res.bytes_by_kind["update"] > 0
    _, states, _ = _model_digests(tmp_path / "l")
    assert len(set(states)) == 5, "the control variate changes every round"
    assert sum(1 for v in sim._client_state.values() if v is not None) >= 10, "clients keep their c_i"
    ok, line = verify_ledger(tmp_path / "l")
    assert ok, line
    fedavg = Simulation(_scenario("fedavg", {}, rounds=5)).run()  # IID data: SCAFFOLD learns like FedAvg
    assert res.final_accuracy >= fedavg.final_accuracy - 0.1, (res.final_accuracy, fedavg.final_accuracy)
    assert res.rounds[-1].accuracy > res.rounds[0].accuracy + 0.1


def test_semi_synchronous_fedasync_takes_stale_updates_from_stragglers(tmp_path):
    sc = _scenario(
        "fedasync", {"clients": 6, "max_staleness": 2}, rounds=8, availability="stragglers(max_delay=2, seed=1)"
    )
    sim = Simulation(sc, ledger_dir=tmp_path / "l")
    res = sim.run()
    stale = sum(m.stale_accepted for m in res.rounds)
    delayed = sum(m.delayed for m in res.rounds)
    assert delayed > 0 and stale > 0, (delayed, stale)
    store, _ = open_ledger(tmp_path / "l", readonly=True)
    with store:
        for h in range(1, store.height() + 1):
            ups = store.get(h).payload.updates
            assert all(h - 2 <= u.fl_round <= h for u in ups), "only updates inside the staleness window"
            keys = [(u.peer, u.fl_round) for u in ups]
            assert len(keys) == len(set(keys))
    ok, line = verify_ledger(tmp_path / "l")  # re-execution rebuilds the staleness history block by block
    assert ok, line
    # a synchronous strategy drops the same late updates
    sync = Simulation(_scenario("fedavg", {"clients": 6}, rounds=8, availability="stragglers(max_delay=2, seed=1)")).run()
    assert sum(m.stale_accepted for m in sync.rounds) == 0 and sum(m.rejected for m in sync.rounds) > 0


def test_a_per_round_adversary_controls_exactly_that_many_sampled_clients_each_round():
    sc = _scenario("fedavg", {"clients": 8}, rounds=4, members=12)
    adv = dataclasses.replace(sc.adversary, per_round=2, data_attack="label_flip(num_classes=10)")
    res = Simulation(dataclasses.replace(sc, adversary=adv)).run()
    assert [m.byzantine_trainers for m in res.rounds] == [2, 2, 2, 2]
    assert res.byzantine == ()  # no fixed Byzantine set
    clean = Simulation(sc).run()
    assert res.head_hash != clean.head_hash  # the poisoned jobs changed the updates


def test_a_coordinator_crashing_every_round_does_not_stop_the_chain(tmp_path):
    from sim._scenario import FaultConfig

    crash = FaultConfig(target="coordinator", kind="drop", from_round=3)  # each height's view-0 primary is down
    sim = Simulation(_scenario("fedavg", {}, rounds=6, faults=[crash]), ledger_dir=tmp_path / "l")
    res = sim.run()
    assert [m.fl_round for m in res.rounds] == list(range(1, 7))
    assert all(m.view >= 1 for m in res.rounds[2:]), [m.view for m in res.rounds]
    ok, line = verify_ledger(tmp_path / "l")
    assert ok, line
