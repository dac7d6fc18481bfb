"""Byzantine peers against real node cores in the simulator.

A Byzantine peer runs the honest node code, and the fuzzer (``sim._fuzz``) tampers with what it sends the
way a real Byzantine peer can: its own score rows, votes, pre-prepares and update commitments changed and
re-signed with its own key, others' signed messages changed (so they no longer verify), replays, garbage,
fabricated evidence against honest peers built from their genuine signatures. After every step the fuzzer
checks that no evidence names an honest peer; an exception out of a node core ends the run with a
traceback; at the end every round is committed by the honest nodes, none of them ever refused its own
proposal, and the results ledger verifies with re-execution - except that a Byzantine member's lying score
row, which the validators cannot check live, is named by the audit's recheck of the rows against the stored
updates (``node.reexec.recheck_score_rows``): the chain must pass every other check, and every such finding
must name a Byzantine member, never an honest one.

Replay a failure: the parameters are in the test id (scenario, committee size, Byzantine count, seed).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from ledger import audit_chain, genesis_committee, primary
from ledger.store import open_ledger
from node.reexec import reexecutor_for
from sim import Simulation, load_scenario, verify_ledger
from sim._fuzz import MUTATIONS, FuzzSpec

SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"


def _scenario(name: str, *, rounds: int, committee_size: int | None = None, members: int | None = None):
    """A ready scenario with another committee size, or (coordinator mode) fewer members, all of them sampled."""
    sc = load_scenario(SCENARIOS / f"{name}.toml", rounds=rounds)
    if committee_size is None:
        return sc
    p = sc.protocol
    params = dict(p.params)
    overrides = {}
    if members is not None:
        assert p.mode == "coordinator"
        params["clients"] = members
        overrides["members"] = members
    protocol = {
        "mode": p.mode, "algorithm": p.algorithm, "quorum": p.quorum, "tick_ms": p.tick_ms,
        "timeout_ticks_train": p.timeout_ticks_train, "params": params, "committee_size": committee_size,
    }
    return load_scenario(SCENARIOS / f"{name}.toml", rounds=rounds, protocol=protocol, **overrides)


def _fuzzed_run(sc, spec: FuzzSpec, ledger_dir: Path, totals: Counter):
    sim = Simulation(sc, workers=0, ledger_dir=ledger_dir, fuzz=spec)
    res = sim.run()  # an exception out of a node core, a FuzzViolation or a LivenessError fails the test here
    assert [m.fl_round for m in res.rounds] == list(range(1, sc.rounds + 1)), "the honest nodes stopped committing"
    fuzzer = sim.fuzzer
    assert fuzzer is not None and fuzzer.steps > 0, "the Byzantine peers never sent anything"
    for pid, node in sim.nodes.items():
        assert "own proposal refused" not in node.status().dropped, f"n{sim.index[pid]} refused its own proposal"
    store, blobs = open_ledger(ledger_dir, readonly=True)
    with store:
        report = audit_chain(store.genesis(), store.iter_rows(), blobs=blobs,
                             reexecutor=reexecutor_for(store.genesis(), public=sim.public_eval))
    assert report.chain_valid, report.line()
    framed = [f for f in report.findings if not fuzzer.byzantine(f.offender, f.height)]
    assert not framed, framed  # the row recheck names Byzantine members only
    assert report.ok == (not report.findings) and (report.ok or report.first_bad_height == report.findings[0].height)
    if report.ok:
        assert verify_ledger(ledger_dir, public=sim.public_eval) == (True, report.line())
    totals["runs"] += 1
    totals["lying rows"] += len(report.findings)
    totals["rounds"] += len(res.rounds)
    totals["messages"] += fuzzer.steps
    totals["tampered"] += sum(v for k, v in fuzzer.counts.items() if k != "consistent" and not k.startswith("fabricate."))
    totals["fabricated"] += sum(v for k, v in fuzzer.counts.items() if k.startswith("fabricate."))
    totals["evidence checked"] += fuzzer.evidence_checked
    return sim, res, report


def _genesis_committee(sc) -> list[int]:
    """The genesis committee by member index, without the members the scenario's own faults already control."""
    probe = Simulation(sc, workers=0)
    taken = {target for target, _ in probe._faults}
    return sorted(probe.index[p] for p in genesis_committee(probe.genesis) if p not in taken), probe


def test_a_member_that_misquotes_a_trainer_in_its_score_row_is_blamed_not_the_trainer(tmp_path, fuzz_totals):
    """A framing attempt: quickstart, 3 rounds; a committee member changes a trainer's commitment inside
    its own score row (n_samples + 1, the trainer's signature kept) and re-signs the row. Before the fix the
    proposer built equivocation evidence against the trainer, its own replica refused the proposal and
    LocalProtocolError aborted the run."""
    sc = _scenario("quickstart", rounds=3)
    committee, probe = _genesis_committee(sc)
    first_primary = probe.index[primary(genesis_committee(probe.genesis), probe.genesis.hash(), 1, 0)]
    forger = next(i for i in committee if i != first_primary)  # its row reaches the honest primary
    sim, res, _ = _fuzzed_run(sc, FuzzSpec(members=(forger,), seed=0, rate=1.0, only=("scores.frame_client",)), tmp_path / "ledger", fuzz_totals)
    forger_id = probe.peers_by_index(forger)
    assert sim.fuzzer.counts.get("scores.frame_client", 0) >= 1
    assert sim.fuzzer.accused.get(("invalid_score_row", forger_id), 0) >= 1, sim.fuzzer.accused
    assert {offender for _, offender in sim.fuzzer.accused} == {forger_id}
    dropped = sum(n.status().dropped.get("ForgedScoreRow", 0) for n in sim.nodes.values())
    assert dropped >= 1, "no node saw the forged row"


def test_a_member_whose_score_row_lies_is_named_by_the_audit_and_no_one_else(tmp_path, fuzz_totals):
    """Quickstart, 3 rounds; a committee member (not the first primary) scales, zeroes or drops the distances of
    every score row it sends, re-signed. The validators cannot check a row's distances (they lack the member's own
    update), so lying rows are committed; the audit recomputes every row from the blobs the store keeps and names
    that member, and only it, while every other check of the chain passes."""
    sc = _scenario("quickstart", rounds=3)
    committee, probe = _genesis_committee(sc)
    first_primary = probe.index[primary(genesis_committee(probe.genesis), probe.genesis.hash(), 1, 0)]
    liar = next(i for i in committee if i != first_primary)
    spec = FuzzSpec(members=(liar,), seed=0, rate=1.0, only=("scores.distance",))
    sim, _, report = _fuzzed_run(sc, spec, tmp_path / "ledger", fuzz_totals)
    assert sim.fuzzer.counts.get("scores.distance", 0) >= 1
    assert report.findings and {f.offender for f in report.findings} == {probe.peers_by_index(liar)}, report.line()
    assert not report.ok and report.chain_valid and report.line().startswith(f"FAIL at height {report.findings[0].height}: ")


CONFIGS = [
    # (scenario, committee size, Byzantine peers, seeds): at most f = (C - 1) // 3 of them in any committee
    ("quickstart", 4, 1, (0, 1)),
    ("quickstart", 7, 2, (0, 1)),
    ("coordinator_fedavg", 4, 1, (0, 1)),
    ("coordinator_fedavg", 7, 2, (0,)),
    ("coordinator_fedavg", 10, 3, (0,)),  # 10 members, all validating: Byzantine primaries in many views
]


@pytest.mark.parametrize(
    "name,committee_size,byzantine,seed",
    [(n, c, b, s) for n, c, b, seeds in CONFIGS for s in seeds],
)
def test_byzantine_peers_cannot_crash_stall_or_frame_honest_nodes(tmp_path, fuzz_totals, name, committee_size, byzantine, seed):
    sc = _scenario(name, rounds=6, committee_size=committee_size, members=10 if committee_size == 10 else None)
    committee, _ = _genesis_committee(sc)
    members = tuple(committee[(seed + j) % len(committee)] for j in range(byzantine))
    sim, _, _ = _fuzzed_run(sc, FuzzSpec(members=members, seed=seed, rate=0.7), tmp_path / "ledger", fuzz_totals)
    assert sum(v for k, v in sim.fuzzer.counts.items() if k not in ("consistent",)) > 0


def test_fabricated_evidence_against_honest_peers_never_reaches_the_ledger(tmp_path, fuzz_totals):
    """The Byzantine peers only fabricate evidence (in their proposals) and tamper with votes: invalid_proposal
    from an honest primary's genuine pre-prepare, invalid_score_row from a genuine row, equivocation from two
    unrelated genuine messages, unknown kinds. Coordinator mode, 10 members who all validate, 3 of them
    Byzantine (f = 3), so that they are the primary of many views."""
    sc = _scenario("coordinator_fedavg", rounds=8, committee_size=10, members=10)
    spec = FuzzSpec(members=(1, 4, 7), seed=3, rate=1.0, only=("pbft.fabricated_evidence", "pbft.vote_block"))
    sim, res, _ = _fuzzed_run(sc, spec, tmp_path / "ledger", fuzz_totals)
    fabricated = {k: v for k, v in sim.fuzzer.counts.items() if k.startswith("fabricate.")}
    assert sum(fabricated.values()) >= 3, sim.fuzzer.counts
    assert sum(m.view for m in res.rounds) >= 1, "no proposal with fabricated evidence was refused"


def test_tampered_have_and_refused_envelopes_accuse_nobody_and_stall_nothing(tmp_path, fuzz_totals):
    """The two envelopes of the Byzantine-peer hardening under a Byzantine minority: ``have`` (the update commitments a
    validator tells the primary of) with changed digests or rounds, or 64 made-up commitments; ``refused`` (a proposal
    relayed with the evidence of its refusal) with a changed payload, or an honest primary's genuine pre-prepare relayed
    as if it had been refused. Every view-0 coordinator is corrupt from round 2 (so validators do relay refusals), and
    two of the seven validators tamper with everything of these kinds they send."""
    sc = _scenario("coordinator_corrupt", rounds=6)
    spec = FuzzSpec(members=(1, 4), seed=5, rate=1.0,
                    only=("have.digest", "have.fl_round", "have.flood", "refused.payload", "refused.honest"))
    sim, res, _ = _fuzzed_run(sc, spec, tmp_path / "ledger", fuzz_totals)
    counts = sim.fuzzer.counts
    assert sum(v for k, v in counts.items() if k.startswith("have.")) > 0, counts
    assert sum(v for k, v in counts.items() if k.startswith("refused.")) > 0, counts
    # (the invariants - no evidence against an honest peer, every round committed, the audit - are _fuzzed_run's)
    assert all(m.evidence >= 1 for m in res.rounds[1:]), "the corrupt coordinators' evidence still reaches the blocks"


@pytest.mark.parametrize(("seed", "outsiders"), [(0, "headers"), (1, "headers"), (2, "lazy")])
def test_byzantine_peers_against_members_that_follow_by_headers(tmp_path, fuzz_totals, seed, outsiders):
    """Members outside the round follow the chain by ``decided_header`` (``network.outsiders = "headers"``), or
    sleep and catch up by headers when a role wakes them (``"lazy"``: Byzantine members then serve the headers
    too): 40 members, 10 clients sampled per round, a committee of 7 with 2 Byzantine members whose pushes
    (headers among them) the fuzzer tampers with. Nothing crashes, the honest nodes commit every round, the
    ledger verifies."""
    base = _scenario("coordinator_fedavg", rounds=6, committee_size=7)
    params = dict(base.protocol.params, clients=10)
    protocol = {
        "mode": base.protocol.mode, "algorithm": base.protocol.algorithm, "quorum": base.protocol.quorum,
        "tick_ms": base.protocol.tick_ms, "timeout_ticks_train": base.protocol.timeout_ticks_train,
        "params": params, "committee_size": 7,
    }
    network = {"model_push": "participants", "outsiders": outsiders}
    sc = load_scenario(SCENARIOS / "coordinator_fedavg.toml", rounds=6, members=40, protocol=protocol, network=network)
    committee, _ = _genesis_committee(sc)
    members = tuple(committee[(seed + j) % len(committee)] for j in range(2))
    sim, _, _ = _fuzzed_run(sc, FuzzSpec(members=members, seed=seed, rate=0.7), tmp_path / "ledger", fuzz_totals)
    followed = sum(n.replica.status().decided for n in sim.nodes.values())
    if outsiders == "headers":
        assert followed >= 40 * 5, followed  # every member moved with the chain, by headers or blocks
    else:  # a member follows only up to its last role
        assert followed < 40 * 5, followed


def test_fuzz_spec_is_validated():
    with pytest.raises(ValueError, match="unknown fuzz mutation"):
        FuzzSpec(members=(1,), only=("scores.nope",))
    with pytest.raises(ValueError, match="rate"):
        FuzzSpec(members=(1,), rate=1.5)
    assert "scores.frame_client" in MUTATIONS and "update.bad_blob" in MUTATIONS


CAMPAIGN = [
    # (scenario, committee size, Byzantine peers, members override, mutations): the scenario's own faults
    # (coordinator_corrupt's corrupt coordinator, committee_crash's crashed member) count towards f
    ("quickstart", 4, 1, None, ()),
    ("quickstart", 7, 2, None, ()),
    ("coordinator_fedavg", 4, 1, None, ()),
    ("coordinator_fedavg", 7, 2, None, ()),
    ("coordinator_fedavg", 10, 3, 10, ()),
    ("coordinator_fedavg", 10, 3, 10, ("pbft.fabricated_evidence", "pbft.model_digest", "pbft.drop_update",
                                       "pbft.next_committee", "scores.frame_client")),
    ("coordinator_corrupt", 7, 1, None, ()),
    ("committee_crash", 7, 1, None, ()),
]


@pytest.mark.slow
@pytest.mark.parametrize("name,committee_size,byzantine,members,only", CAMPAIGN)
def test_byzantine_fuzz_campaign(tmp_path, fuzz_totals, name, committee_size, byzantine, members, only):
    """The long run: 25 seeds per configuration, 10 rounds each."""
    sc = _scenario(name, rounds=10, committee_size=committee_size, members=members)
    committee, _ = _genesis_committee(sc)
    for seed in range(25):
        chosen = tuple(committee[(seed + j) % len(committee)] for j in range(byzantine))
        spec = FuzzSpec(members=chosen, seed=seed, rate=1.0 if only else 0.7, only=only)
        _fuzzed_run(sc, spec, tmp_path / f"ledger-{seed}", fuzz_totals)
