"""Experiment-seeded client sampling (``protocol.params.sampling_seed``, ``node._rounds.sampling_seed_of``):
two chains with the same members and seed ask the same clients in every round whatever their algorithms, the
ledgers still verify with re-execution, the default (genesis-seeded) sampling without the key, and
bad values fail when the scenario or the genesis loads. Also the sampling rule (``protocol.params.sampling_rule``,
``node._rounds.sampling_rule_of``)."""

import dataclasses
from pathlib import Path

import pytest

from consensus import CmflParams, sample_committee, sample_training_clients
from learning._errors import ConfigError
from learning.strategies import HOST_PARAM_KEYS, strategy_from_params
from ledger import ChainContext, genesis_committee
from ledger.store import open_ledger
from node._errors import ConfigFileError
from node._rounds import RoundRules, sampling_rule_of, sampling_seed_of, seeded_sampling_hash
from sim import Simulation, load_scenario, verify_ledger

SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"


def _scenario(algorithm, params, *, rounds=5, members=12, availability=""):
    sc = load_scenario(SCENARIOS / "coordinator_fedavg.toml", rounds=rounds, members=members)
    proto = dataclasses.replace(sc.protocol, algorithm=algorithm, params=params)
    adv = dataclasses.replace(sc.adversary, availability=availability)
    return dataclasses.replace(sc, protocol=proto, adversary=adv)


def _blocks(path):
    """Per height: (sampled clients of the round record, model digest, block hash)."""
    store, _ = open_ledger(path, readonly=True)
    with store:
        out = []
        for h in range(1, store.height() + 1):
            b = store.get(h)
            out.append((tuple(b.payload.record["clients"]), b.payload.model_digest, b.hash()))
        return out


def _run(tmp_path, name, algorithm, params, **kw):
    sim = Simulation(_scenario(algorithm, params, **kw), ledger_dir=tmp_path / name)
    res = sim.run()
    return sim, res, _blocks(tmp_path / name)


def test_same_sampling_seed_samples_the_same_clients_across_algorithms_and_verifies(tmp_path):
    _, _, fedavg = _run(tmp_path, "fedavg", "fedavg", {"clients": 5, "sampling_seed": 7})
    sim, _, fedro = _run(tmp_path, "fedro", "fedro", {"clients": 5, "f": 1, "aggregator": "median", "sampling_seed": 7})
    clients_a, models_a, heads_a = zip(*fedavg, strict=True)
    clients_b, models_b, heads_b = zip(*fedro, strict=True)
    assert len(clients_a) == 5
    assert clients_a == clients_b, "same members and sampling_seed: the same clients every round"
    assert len(set(clients_a)) > 1, "the sample still changes from round to round"
    assert models_a[0] != models_b[0] and not set(heads_a) & set(heads_b), "two different chains"
    # the sample is the seeded rule's, not the chain's
    members = sim.genesis.member_ids
    for h, clients in enumerate(clients_a, start=1):
        assert clients == sample_training_clients(members, (), seeded_sampling_hash(7), h, 5)
    for name in ("fedavg", "fedro"):
        ok, line = verify_ledger(tmp_path / name)
        assert ok and "re-executed" in line, line
    # another seed draws other clients
    _, _, other = _run(tmp_path, "seed8", "fedavg", {"clients": 5, "sampling_seed": 8})
    assert [c for c, _, _ in other] != list(clients_a)


def test_without_the_key_the_sample_follows_the_genesis_hash_and_the_height(tmp_path):
    _, _, fedavg = _run(tmp_path, "fedavg", "fedavg", {"clients": 5}, rounds=4)
    sim, _, fedro = _run(tmp_path, "fedro", "fedro", {"clients": 5, "f": 1, "aggregator": "median"}, rounds=4)
    members = sim.genesis.member_ids
    for h, (clients, _, _) in enumerate(fedro, start=1):
        # never the previous block's hash, which its proposer could grind
        assert clients == sample_training_clients(members, (), sim.genesis.hash(), h, 5), "the default rule"
    assert len({c for c, _, _ in fedro}) > 1, "the sample changes from height to height"
    # each chain draws from its own genesis: the same members, other samples (unpaired)
    assert [c for c, _, _ in fedavg] != [c for c, _, _ in fedro]
    rules = RoundRules(sim.genesis)
    assert rules.sampling_hash is None


def test_semi_synchronous_strategy_keeps_busy_trainers_out_of_the_seeded_sample(tmp_path):
    params = {"clients": 6, "max_staleness": 2, "sampling_seed": 3}
    sim, res, blocks = _run(tmp_path, "l", "fedasync", params, rounds=8, availability="stragglers(max_delay=2, seed=1)")
    assert sum(m.stale_accepted for m in res.rounds) > 0
    asked = {h: c for h, (c, _, _) in enumerate(blocks, start=1)}
    store, _ = open_ledger(tmp_path / "l", readonly=True)
    busy_rounds = 0
    with store:
        for h, clients in asked.items():
            # a trainer of round h-1 or h-2 whose update no earlier block included is still busy: not asked again
            done = {(u.peer, u.fl_round) for k in range(1, h) for u in store.get(k).payload.updates}
            busy = {p for tau in (h - 2, h - 1) if tau >= 1 for p in asked[tau] if (p, tau) not in done}
            assert not busy & set(clients), (h, busy, clients)
            busy_rounds += bool(busy)
    assert busy_rounds > 0, "the stragglers kept some trainers busy"
    members = sim.genesis.member_ids
    assert asked[1] == sample_training_clients(members, (), seeded_sampling_hash(3), 1, 6)
    ok, line = verify_ledger(tmp_path / "l")
    assert ok, line


@pytest.mark.parametrize("literal", ["-1", "1.5", "true", '"3"', "[1]", str(2**64)])
def test_bad_sampling_seed_is_rejected_when_the_scenario_loads(tmp_path, literal):
    text = (SCENARIOS / "coordinator_fedavg.toml").read_text()
    bad = tmp_path / "bad.toml"
    bad.write_text(text.replace("params = { clients = 20 }", f"params = {{ clients = 20, sampling_seed = {literal} }}"))
    with pytest.raises(ConfigFileError, match=r"bad\.toml: protocol: protocol\.params\.sampling_seed must be a non-negative int"):
        load_scenario(bad)


def test_bad_sampling_seed_is_rejected_when_the_genesis_loads():
    sim = Simulation(_scenario("fedavg", {"clients": 5, "sampling_seed": 0}, rounds=1))
    g = sim.genesis
    assert RoundRules(g).sampling_hash == seeded_sampling_hash(0)
    for bad in (-3, 2.0, False, "0"):
        g_bad = dataclasses.replace(g, protocol=dataclasses.replace(g.protocol, params={"clients": 5, "sampling_seed": bad}))
        with pytest.raises(ConfigError, match="sampling_seed must be a non-negative int"):
            RoundRules(g_bad, ctx=ChainContext(g_bad))
    committee = load_scenario(SCENARIOS / "quickstart.toml")
    assert committee.protocol.mode == "committee"
    with pytest.raises(ValueError, match="coordinator mode only"):
        dataclasses.replace(committee.protocol, params={**committee.protocol.params, "sampling_seed": 1})


def test_strategies_never_see_the_host_keys():
    assert "sampling_seed" in HOST_PARAM_KEYS
    assert sampling_seed_of({"clients": 3}) is None and sampling_seed_of({"sampling_seed": 0}) == 0
    assert strategy_from_params("fedavg", {"clients": 3, "sampling_seed": 5}) == strategy_from_params(
        "fedavg", {"clients": 3}
    )
    with pytest.raises(ConfigError, match="clients must be int"):  # other keys still reach the strategy's check
        strategy_from_params("fedavg", {"clients": "3", "sampling_seed": 5})


# --- protocol.params.sampling_rule ------------------------------------------------------------------------


def test_draw_rule_samples_what_it_says_and_the_ledgers_verify(tmp_path):
    """``sampling_rule = "draw"`` in both modes: the clients of each block are the draw rule's from the genesis
    hash and the height, the committees too (coordinator mode), and every ledger re-executes (the auditor reads the rule
    from the genesis)."""
    sim, _, blocks = _run(tmp_path, "coord", "fedavg", {"clients": 5, "sampling_rule": "draw"}, rounds=4, members=20)
    members, g, c = sim.genesis.member_ids, sim.genesis.hash(), sim.genesis.protocol.committee_size
    store, _ = open_ledger(tmp_path / "coord", readonly=True)
    with store:
        for h, (clients, _, _) in enumerate(blocks, start=1):
            assert clients == sample_training_clients(members, (), g, h, 5, rule="draw")
            seed = g + h.to_bytes(8, "big")
            assert store.get(h).payload.next_committee == sample_committee(members, seed, c, rule="draw")
    ok, line = verify_ledger(tmp_path / "coord")
    assert ok and "re-executed" in line, line

    sc = load_scenario(SCENARIOS / "quickstart.toml", rounds=3)
    sc = dataclasses.replace(sc, protocol=dataclasses.replace(sc.protocol, params={**sc.protocol.params, "sampling_rule": "draw"}))
    Simulation(sc, ledger_dir=tmp_path / "cmfl").run()
    ok, line = verify_ledger(tmp_path / "cmfl")
    assert ok and "re-executed" in line, line
    store, _ = open_ledger(tmp_path / "cmfl", readonly=True)
    with store:
        g = store.genesis()
        committee, n = genesis_committee(g), CmflParams.from_genesis(g).training_size
        trainers = sample_training_clients(g.member_ids, committee, g.hash(), 1, n, rule="draw")
        sent = {u.peer for u in store.get(1).payload.updates}
        assert sent and sent <= set(trainers), "round 1's updates come from the draw rule's trainers"
        assert trainers != sample_training_clients(g.member_ids, committee, g.hash(), 1, n)


def test_bad_sampling_rule_is_rejected_when_the_scenario_or_the_genesis_loads(tmp_path):
    text = (SCENARIOS / "coordinator_fedavg.toml").read_text()
    for literal in ('"Draw"', '""', "1", "true", '["draw"]'):
        bad = tmp_path / "bad.toml"
        bad.write_text(text.replace("params = { clients = 20 }", f"params = {{ clients = 20, sampling_rule = {literal} }}"))
        with pytest.raises(ConfigFileError, match=r"bad\.toml: protocol: protocol\.params\.sampling_rule must be one of"):
            load_scenario(bad)
    g = Simulation(_scenario("fedavg", {"clients": 5, "sampling_rule": "draw"}, rounds=1)).genesis
    assert RoundRules(g).sampling_rule == "draw"
    g_bad = dataclasses.replace(g, protocol=dataclasses.replace(g.protocol, params={"clients": 5, "sampling_rule": "hash"}))
    with pytest.raises(ConfigError, match="sampling_rule must be one of"):
        RoundRules(g_bad, ctx=ChainContext(g_bad))
    assert sampling_rule_of({}) == "rank" and "sampling_rule" in HOST_PARAM_KEYS
