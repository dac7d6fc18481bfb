"""Committees fixed per epoch (``protocol.params.committee_epoch``, ``node._rounds.committee_epoch_of``): every
block names the committee that certified it except the last of each epoch, which draws the next from the block
before it; lazy members skip to the last header of each epoch; the ledger re-executes; bad values fail when the
scenario or the genesis loads."""

import dataclasses
from pathlib import Path

import pytest

from consensus import sample_committee
from learning._errors import ConfigError
from learning.strategies import HOST_PARAM_KEYS, strategy_from_params
from ledger import ChainContext, genesis_committee
from ledger.store import open_ledger
from node._errors import ConfigFileError
from node._rounds import RoundRules, committee_epoch_of
from sim import Simulation, load_scenario, verify_ledger

SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"


def _scenario(params, *, rounds=8, members=40, outsiders="lazy"):
    sc = load_scenario(SCENARIOS / "coordinator_fedavg.toml", rounds=rounds, members=members)
    sc = dataclasses.replace(sc, protocol=dataclasses.replace(sc.protocol, params=params))
    return dataclasses.replace(sc, network=dataclasses.replace(sc.network, outsiders=outsiders, model_push="participants"))


def test_committees_change_at_epoch_ends_only_and_the_ledger_verifies(tmp_path):
    params = {"clients": 5, "committee_epoch": 3, "sampling_rule": "draw"}
    sim = Simulation(_scenario(params), ledger_dir=tmp_path / "a")
    res = sim.run()
    g = sim.genesis
    store, _ = open_ledger(tmp_path / "a", readonly=True)
    with store:
        committee, named = genesis_committee(g), []
        for h in range(1, store.height() + 1):
            b = store.get(h)
            assert {sig.signer for sig in b.certificate.signatures} <= set(committee), f"block {h}: its epoch's committee"
            if h % 3:
                assert b.payload.next_committee == committee, f"block {h} names the committee that certified it"
            else:
                seed = g.hash() + h.to_bytes(8, "big")  # the genesis hash and the height: no proposer feeds it
                assert b.payload.next_committee == sample_committee(g.member_ids, seed, g.protocol.committee_size,
                                                                    rule="draw")
            named.append(b.payload.next_committee)
            committee = b.payload.next_committee
    assert len(set(named)) >= 3, "new committees at heights 3 and 6"
    ok, line = verify_ledger(tmp_path / "a")
    assert ok and "re-executed" in line, line

    # lazy members skipped: some member is at the head having decided fewer heights than it passed
    skipped = [p for p, n in sim.nodes.items() if n.replica.status().decided < n.replica.status().height - 1]
    assert skipped, "no member skipped a height"
    assert all(n.replica.chain_state.height <= len(res.rounds) for n in sim.nodes.values())

    # the same seed, the same ledger
    again = Simulation(_scenario(params), ledger_dir=tmp_path / "b").run()
    assert again.head_hash == res.head_hash


def test_an_epoch_of_one_draws_a_committee_at_every_height(tmp_path):
    """``committee_epoch = 1`` is the rule without the key (another genesis, so another chain: the rule is compared)."""
    sim = Simulation(_scenario({"clients": 5, "committee_epoch": 1}, rounds=4), ledger_dir=tmp_path / "a")
    sim.run()
    g = sim.genesis
    store, _ = open_ledger(tmp_path / "a", readonly=True)
    with store:
        for h in range(1, store.height() + 1):
            b = store.get(h)
            assert b.payload.next_committee == sample_committee(g.member_ids, g.hash() + h.to_bytes(8, "big"),
                                                                g.protocol.committee_size)


def test_bad_committee_epoch_is_rejected_when_the_scenario_or_the_genesis_loads(tmp_path):
    text = (SCENARIOS / "coordinator_fedavg.toml").read_text()
    for literal in ("0", "-2", "1.5", "true", '"4"', "[4]", "1000001"):
        bad = tmp_path / "bad.toml"
        bad.write_text(text.replace("params = { clients = 20 }", f"params = {{ clients = 20, committee_epoch = {literal} }}"))
        with pytest.raises(ConfigFileError, match=r"bad\.toml: protocol: protocol\.params\.committee_epoch must be an int"):
            load_scenario(bad)
    g = Simulation(_scenario({"clients": 5, "committee_epoch": 4}, rounds=1)).genesis
    assert RoundRules(g).committee_epoch == 4
    g_bad = dataclasses.replace(g, protocol=dataclasses.replace(g.protocol, params={"clients": 5, "committee_epoch": 0}))
    with pytest.raises(ConfigError, match="committee_epoch must be an int"):
        RoundRules(g_bad, ctx=ChainContext(g_bad))
    committee = load_scenario(SCENARIOS / "quickstart.toml")
    with pytest.raises(ValueError, match="coordinator mode only"):
        dataclasses.replace(committee.protocol, params={**committee.protocol.params, "committee_epoch": 2})
    assert committee_epoch_of({}, mode="coordinator") == 1 and "committee_epoch" in HOST_PARAM_KEYS
    assert strategy_from_params("fedavg", {"clients": 3, "committee_epoch": 5}) == strategy_from_params(
        "fedavg", {"clients": 3}
    )
