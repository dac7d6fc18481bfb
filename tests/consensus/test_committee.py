"""CMFL committee mechanism: cmfl spec §7.8 deterministic unit tests (items cited per test), sizes, sampling."""

from __future__ import annotations

import dataclasses
import math
import random

import pytest

from consensus import (
    EVIDENCE_KINDS,
    KIND_INVALID_SCORE_ROW,
    SLOT_KINDS,
    CmflParams,
    CommitteeConfigError,
    ForgedScoreRow,
    RemoteProtocolError,
    ScoreRow,
    check_cmfl_payload,
    cmfl_record,
    combine_scores,
    committee_sizes,
    coordinator,
    decide_round,
    elect_committee,
    election_window,
    parse_score_row,
    rank_clients,
    round_half_up,
    SAMPLING_RULES,
    sample_committee,
    sample_training_clients,
    select_clients,
    score_row_blobs,
    sign_score_row,
    check_evidence_claim,
    update_equivocation_evidence,
    verify_score_row,
)
from ledger import (
    COMMITTEE_MODE,
    ChainContext,
    Evidence,
    Genesis,
    KeyPair,
    Member,
    ModelSpec,
    Payload,
    ProtocolParams,
    SignatureError,
    SignedMessage,
    check_evidence,
    primary,
    sha256,
    sign_bytes,
    sign_update,
)

CHAIN = "cmfl-test"


def _sq(a: list[float], b: list[float]) -> float:
    return math.fsum((x - y) ** 2 for x, y in zip(a, b))


def _row(member: str, height: int, distances: dict[str, float]) -> ScoreRow:
    return ScoreRow(member, height, distances, {}, b"\0" * 32)


# --- §7.8 item 1: scoring identities -------------------------------------------------------------


def test_eq8_equals_centroid_form_and_harmonic_mean():
    """Item 1: C/Σ‖g−r_c‖² = 1/(‖g−r̄‖² + V) = C/Σ(1/P_k^c), rtol 1e-9."""
    rng = random.Random(7)
    dim, c = 20, 12
    refs = [[rng.gauss(0, 1) for _ in range(dim)] for _ in range(c)]
    centroid = [math.fsum(r[i] for r in refs) / c for i in range(dim)]
    spread = math.fsum(_sq(r, centroid) for r in refs) / c
    for k in range(18):
        g = [rng.gauss(0, 1.5) for _ in range(dim)]
        rows = [_row(f"m{j:02d}", 1, {"k": _sq(g, refs[j])}) for j in range(c)]
        p = combine_scores(rows, ["k"], method="mean")["k"]
        assert p == pytest.approx(1 / (_sq(g, centroid) + spread), rel=1e-9)
        p_c = [1 / _sq(g, r) for r in refs]  # eq. 7
        assert p == pytest.approx(c / math.fsum(1 / x for x in p_c), rel=1e-9)


def test_median_score_and_floor():
    rows = [_row(f"m{j}", 1, {"a": d, "b": 0.0}) for j, d in enumerate([1.0, 9.0, 4.0, 100.0])]
    s = combine_scores(rows, ["a", "b"], method="median")
    assert s["a"] == 1 / 6.5  # mean of the two middle distances 4 and 9
    assert math.isfinite(s["b"]) and s["b"] == 1 / 1e-300  # identical vectors: floored, no division by 0


def test_scores_ignore_row_order_and_need_rows_min():
    rng = random.Random(3)
    rows = [_row(f"m{j}", 1, {f"k{i}": rng.random() * 10 for i in range(9)}) for j in range(7)]
    a = combine_scores(rows, [f"k{i}" for i in range(9)])
    b = combine_scores(list(reversed(rows)), [f"k{i}" for i in reversed(range(9))])
    assert a == b  # fsum: exactly rounded, order independent (§2.8.3)
    partial = rows[:2] + [_row("m9", 1, {"k0": 1.0})]
    assert set(combine_scores(partial, ["k0", "k1"], rows_min=3)) == {"k0"}


# --- §7.8 item 2: selection with ties ------------------------------------------------------------


def test_selection_strategies_with_ties_by_id():
    scores = {"e": 5.0, "a": 1.0, "d": 3.0, "b": 3.0, "c": 3.0, "f": 0.5}
    assert rank_clients(scores) == ("e", "b", "c", "d", "a", "f")
    assert select_clients(scores, 3, "I") == ("b", "c", "e")  # top-3: e, then ties b, c by id
    assert select_clients(scores, 3, "II") == ("a", "b", "f")  # bottom-3 by (P, id): f, a, then b
    with pytest.raises(CommitteeConfigError):
        select_clients(scores, 2, "III")


# --- §7.8 item 3: election window -----------------------------------------------------------------


@pytest.mark.parametrize(("n", "c"), [(18, 12), (21, 9), (65, 43), (9, 6), (15, 15)])
def test_election_window_is_the_middle(n, c):
    start, stop = election_window(n, c)
    assert (start, stop) == ((n - c) // 2, (n - c) // 2 + c)
    assert stop - start == c
    assert (start, stop) == (int(n / 2 - c / 2), int(n / 2 + c / 2))  # the authors' code
    ranked = tuple(f"k{i:02d}" for i in range(n))
    assert elect_committee(ranked, c) == tuple(sorted(ranked[start:stop]))


# --- §7.8 item 4: size rules ----------------------------------------------------------------------


def test_sizes_and_rounding():
    assert committee_sizes(300) == committee_sizes(300, active_rate=0.1, committee_rate=0.4, aggregation_rate=0.4)
    s = committee_sizes(300)
    assert (s.active, s.committee, s.training, s.aggregation, s.f) == (30, 12, 18, 7, 3)  # 0.4·18 = 7.2 -> 7
    s = committee_sizes(300, committee_rate=0.3)
    assert (s.committee, s.training, s.aggregation) == (9, 21, 8)
    s = committee_sizes(1081, committee_rate=0.4)
    assert (s.active, s.committee, s.training) == (108, 43, 65)  # the paper's efficiency setup
    assert committee_sizes(1081, alpha_base="active").aggregation == 43  # the authors' code: α of N_act
    assert round_half_up(6.5) == 7 and round(6.5) == 6  # not banker's rounding
    s = committee_sizes(120, committee_rate=0.5)
    assert s.committee == s.training == 6  # ω = 50 %: C = n, the election keeps everyone
    with pytest.raises(CommitteeConfigError, match="ω must be <= 50"):
        committee_sizes(130, committee_rate=0.5)  # 13 active: C = round_half_up(6.5) = 7 > n = 6
    with pytest.raises(CommitteeConfigError, match="ω must be <= 50"):
        committee_sizes(300, committee_rate=0.6)
    with pytest.raises(CommitteeConfigError):
        committee_sizes(300, aggregation_rate=0.0)  # m < 1
    with pytest.raises(CommitteeConfigError):
        committee_sizes(300, aggregation_rate=0.95, alpha_base="active")  # m > n


# --- sampling, coordinator ------------------------------------------------------------------------


def test_training_sampling_is_derived_and_excludes_the_committee():
    members = [f"p{i:03d}" for i in range(300)]
    committee = members[:12]
    a = sample_training_clients(members, committee, b"\1" * 32, 5, 18)
    assert a == sample_training_clients(list(reversed(members)), committee, b"\1" * 32, 5, 18)
    assert len(a) == 18 and not set(a) & set(committee) and list(a) == sorted(a)
    assert a != sample_training_clients(members, committee, b"\2" * 32, 5, 18)
    assert a != sample_training_clients(members, committee, b"\1" * 32, 6, 18)
    with pytest.raises(CommitteeConfigError):
        sample_training_clients(members[:20], committee, b"\1" * 32, 5, 9)


def test_draw_rule_is_derived_excludes_and_differs_from_rank():
    members = [f"p{i:04d}" for i in range(2000)]
    committee = members[:7]
    a = sample_training_clients(members, committee, b"\1" * 32, 5, 100, rule="draw")
    assert a == sample_training_clients(list(reversed(members)) + members[:50], committee, b"\1" * 32, 5, 100, rule="draw")
    assert len(a) == 100 and len(set(a)) == 100 and not set(a) & set(committee) and list(a) == sorted(a)
    assert a != sample_training_clients(members, committee, b"\2" * 32, 5, 100, rule="draw")
    assert a != sample_training_clients(members, committee, b"\1" * 32, 6, 100, rule="draw")
    assert a != sample_training_clients(members, committee, b"\1" * 32, 5, 100), "another rule, another sample"
    c = sample_committee(members, b"\3" * 40, 7, exclude=members[::2], rule="draw")
    assert len(c) == 7 and not set(c) & set(members[::2]) and list(c) == sorted(c)
    # every eligible member, and no more: the shuffle ends after N steps whatever is excluded
    everyone = sample_training_clients(members[:30], members[:3], b"\4" * 32, 1, 27, rule="draw")
    assert everyone == tuple(members[3:30])
    with pytest.raises(CommitteeConfigError, match="from 27 non-committee"):
        sample_training_clients(members[:30], members[:3], b"\4" * 32, 1, 28, rule="draw")
    with pytest.raises(CommitteeConfigError, match="of 3 from 2 members"):
        sample_committee(members[:4], b"\4" * 32, 3, exclude=members[1:3] + ["not-a-member"], rule="draw")
    with pytest.raises(CommitteeConfigError, match="unknown sampling rule"):
        sample_committee(members, b"\4" * 32, 3, rule="Draw")
    assert SAMPLING_RULES == ("rank", "draw")


def test_draw_rule_is_uniform():
    """Each of 9 eligible members is drawn 3 times in 9 over 6,000 seeds: a chi-square test at 9 - 1 degrees of
    freedom (its 99.9 % quantile is 26.1), and no pair of members is favoured over another (36 pairs)."""
    members = list("abcdefghij")
    counts = dict.fromkeys(members[1:], 0)
    pairs: dict[tuple[str, str], int] = {}
    seeds = 6000
    for i in range(seeds):
        got = sample_training_clients(members, ["a"], i.to_bytes(8, "big") * 4, 1, 3, rule="draw")
        for m in got:
            counts[m] += 1
        for x in range(3):
            for y in range(x + 1, 3):
                pairs[got[x], got[y]] = pairs.get((got[x], got[y]), 0) + 1
    expected = seeds * 3 / 9
    chi2 = sum((n - expected) ** 2 / expected for n in counts.values())
    assert chi2 < 26.1, counts
    pair_expected = seeds * 3 / 36  # each draw holds 3 of the 36 pairs
    pair_chi2 = sum((n - pair_expected) ** 2 / pair_expected for n in pairs.values())
    assert len(pairs) == 36 and pair_chi2 < 66.6, pairs  # 35 degrees of freedom, 99.9 % quantile


def test_coordinator_is_the_primary_and_rotates_with_the_view():
    committee = sample_committee([f"p{i:02d}" for i in range(40)], b"\3" * 32, 7, exclude=["p00", "p01"])
    assert len(committee) == 7 and not {"p00", "p01"} & set(committee)
    seen = [coordinator(committee, b"\4" * 32, 9, v) for v in range(7)]
    assert sorted(seen) == sorted(committee)  # a view change moves to the next member
    assert seen[0] == primary(committee, b"\4" * 32, 9, 0)  # what the ledger verifies


# --- signed rows, decision, validation ------------------------------------------------------------


def _genesis(n: int, c: int) -> tuple[Genesis, list[KeyPair]]:
    keys = sorted((KeyPair.derive(f"cmfl-{i}") for i in range(n)), key=lambda k: k.peer_id)
    g = Genesis(
        chain_id=CHAIN,
        genesis_time_ms=0,
        members=tuple(Member(peer_id=k.peer_id, public_key=k.public_key) for k in keys),
        protocol=ProtocolParams(
            mode=COMMITTEE_MODE,
            algorithm="cmfl",
            committee_size=c,
            params={"training_size": 9, "aggregation_rate": 0.4, "rows_min": 3},
        ),
        model=ModelSpec(name="m", digest=sha256(b"m")),
    )
    return g, keys


class _Round:
    """One CMFL round with signed rows: committee of 4, 9 training clients, one client equivocating."""

    def __init__(self, *, equivocate: bool = False, seed: int = 0) -> None:
        g, keys = _genesis(13, 4)
        self.ctx = ChainContext(g)
        self.params = CmflParams.from_genesis(g)
        self.height = 3
        self.committee = tuple(k.peer_id for k in keys[:4])
        self.training = tuple(k.peer_id for k in keys[4:])
        by_id = {k.peer_id: k for k in keys}
        rng = random.Random(seed)
        dim = 6
        self.deltas = {k: [rng.gauss(0, 1) for _ in range(dim)] for k in self.training}
        refs = {c: [rng.gauss(0, 0.5) for _ in range(dim)] for c in self.committee}
        commits = {k: sign_update(by_id[k], CHAIN, self.height, sha256(repr(self.deltas[k]).encode()), 10 + i) for i, k in enumerate(self.training)}
        self.rows = []
        for j, c in enumerate(self.committee):
            ups = dict(commits)
            if equivocate and j == 0:  # training client 0 sent member 0 another update
                k0 = self.training[0]
                ups[k0] = sign_update(by_id[k0], CHAIN, self.height, sha256(b"other"), 10)
            self.rows.append(
                sign_score_row(
                    by_id[c],
                    CHAIN,
                    self.height,
                    distances={k: _sq(self.deltas[k], refs[c]) for k in self.training},
                    updates=ups,
                    reference=sha256(repr(refs[c]).encode()),
                )
            )
        self.commits = commits

    def payload(self, *, rows=None, tamper=None) -> Payload:
        rows = self.rows if rows is None else rows
        d = decide_round([parse_score_row(r) for r in rows], training=self.training, committee=self.committee, params=self.params)
        record = cmfl_record(d, training=self.training, params=self.params)
        nxt = d.next_committee
        if tamper == "accepted":
            record["accepted"] = sorted(set(self.training) - set(d.accepted))[: len(d.accepted)]
        if tamper == "committee":
            nxt = tuple(sorted(d.ranked[: len(nxt)]))  # the top instead of the middle window
        return Payload(
            updates=tuple(self.commits[k] for k in d.accepted),
            model_digest=sha256(b"aggregate"),
            next_committee=nxt,
            record=record,
            attestations=tuple(rows),
        )

    def check(self, payload: Payload) -> str | None:
        return check_cmfl_payload(self.ctx, payload, height=self.height, committee=self.committee, training=self.training, params=self.params)


def test_cmfl_payload_reexecutes():
    r = _Round()
    assert r.params.rows_min == 3 and r.params.aggregation_size == 4  # round_half_up(0.4 · 9)
    assert r.check(r.payload()) is None
    assert "record differs" in r.check(r.payload(tamper="accepted"))
    assert "next committee" in r.check(r.payload(tamper="committee"))
    too_few = dataclasses.replace(r.payload(), attestations=tuple(r.rows[:2]))
    assert "at least 3" in r.check(too_few)


def test_score_row_blobs_name_every_reference_and_scored_update_once():
    """What a committed block's store keeps so the audit can recompute every row."""
    r = _Round(equivocate=True)
    named = score_row_blobs(tuple(reversed(r.rows)) + (r.rows[0],))  # any order, a row twice
    members = sorted(r.committee)
    refs = [(m, w, d) for m, w, d in named if w == m]
    assert [m for m, _, _ in refs] == members and len({d for _, _, d in refs}) == 4
    ups = [(m, w, d) for m, w, d in named if w != m]
    assert {d for _, _, d in ups} == {c.digest for c in r.commits.values()} | {sha256(b"other")}
    assert len(named) == len({d for _, _, d in named}) == 4 + len(r.training) + 1  # each digest once
    first = {parse_score_row(x).member: x for x in r.rows}
    assert all(w in parse_score_row(first[m]).updates for m, w, _ in ups)  # named by a row that scored it
    garbage = dataclasses.replace(r.rows[1], body={"distances": {}})  # a row that does not parse is skipped
    assert {m for m, _, _ in score_row_blobs((garbage,))} == set()


def test_decision_is_independent_of_row_arrival_order():
    """Item 8: same rows, different arrival orders -> byte-identical decision."""
    r = _Round(seed=4)
    rows = [parse_score_row(x) for x in r.rows]
    a = decide_round(rows, training=r.training, committee=r.committee, params=r.params)
    b = decide_round(rows[::-1], training=list(reversed(r.training)), committee=r.committee, params=r.params)
    assert a == b


def test_equivocating_training_client_is_excluded_with_evidence():
    """Item 7: two different signed digests for one (t, k) -> k excluded, the pair is ledger evidence."""
    r = _Round(equivocate=True)
    rows = [parse_score_row(x) for x in r.rows]
    d = decide_round(rows, training=r.training, committee=r.committee, params=r.params)
    k0 = r.training[0]
    assert k0 in d.excluded and k0 not in d.scores and k0 not in d.accepted
    (a, b), = d.equivocations
    ev = update_equivocation_evidence(a, b)
    check_evidence(r.ctx, r.height, ev)  # the ledger accepts it as is
    assert r.check(r.payload()) is None


def test_crafted_reference_steers_mean_but_not_median():
    """Item 9: one member reporting distances to r_bad = C·z − Σ_honest r_c puts z first under the mean
    score, not under the median while malicious members < C/2."""
    rng = random.Random(11)
    dim, c = 8, 7
    honest_refs = [[rng.gauss(0, 0.3) for _ in range(dim)] for _ in range(c - 1)]
    clients = {f"k{i}": [rng.gauss(0, 0.3) for _ in range(dim)] for i in range(12)}
    z = [5.0] * dim  # the malicious update
    clients["mal"] = z
    bad_ref = [c * z[i] - math.fsum(r[i] for r in honest_refs) for i in range(dim)]
    refs = honest_refs + [bad_ref]
    rows = [_row(f"m{j}", 1, {k: _sq(v, refs[j]) for k, v in clients.items()}) for j in range(c)]
    assert rank_clients(combine_scores(rows, list(clients), method="mean"))[0] == "mal"
    assert rank_clients(combine_scores(rows, list(clients), method="median"))[0] != "mal"


def test_non_finite_distances_are_rejected_before_scoring():
    """Item 10: NaN/inf/negative distances make the row invalid; they never reach the sort."""
    key = KeyPair.derive("row")
    for bad in (float("nan"), float("inf"), -1.0):
        body = {"distances": {"k": bad}, "reference": b"\0" * 32, "updates": {"k": (b"\1" * 32, 1, b"\2" * 64)}}
        with pytest.raises((RemoteProtocolError, ValueError)):
            parse_score_row(SignedMessage(signer=key.peer_id, kind="cmfl_scores", height=1, view=0, body=body, signature=b"\0" * 64))


# --- a member cannot frame a client through its own score row ---------------------------------


def _misquote(r: _Round, member_index: int, client_index: int = 0) -> SignedMessage:
    """Member ``member_index``'s row with client ``client_index``'s n_samples changed (the client's signature
    kept), re-signed by the member: what a Byzantine committee member can send."""
    g, keys = _genesis(13, 4)
    by_id = {k.peer_id: k for k in keys}
    row = parse_score_row(r.rows[member_index])
    k = r.training[client_index]
    u = row.updates[k]
    forged = dict(row.updates)
    forged[k] = dataclasses.replace(u, n_samples=u.n_samples + 1)
    return sign_score_row(by_id[row.member], CHAIN, r.height, distances=row.distances, updates=forged, reference=row.reference)


def test_a_row_that_misquotes_a_client_is_the_members_provable_fault():
    r = _Round()
    bad = _misquote(r, 1)
    for good in r.rows:
        assert verify_score_row(r.ctx, good).member == good.signer
    with pytest.raises(ForgedScoreRow) as exc:
        verify_score_row(r.ctx, bad)
    ev = exc.value.evidence
    assert ev.kind == KIND_INVALID_SCORE_ROW and ev.offender == bad.signer and ev.exhibits == (bad,)
    assert r.training[0] in ev.reason
    check_evidence(r.ctx, r.height, ev)  # the ledger's form checks accept it
    assert check_evidence_claim(r.ctx, ev) is None  # and its claim holds for anyone who checks
    # A proposal that carries the forged row is refused (before the fix: equivocation against the client).
    payload = r.payload(rows=[r.rows[0], bad, r.rows[2], r.rows[3]])
    assert "did not sign" in r.check(payload)
    # Without it, the three honest rows decide: no equivocation, the client is ranked.
    d = decide_round([verify_score_row(r.ctx, x) for x in (r.rows[0], r.rows[2], r.rows[3])],
                     training=r.training, committee=r.committee, params=r.params)
    assert d.equivocations == () and r.training[0] in d.scores


def test_malformed_signed_rows_are_the_signers_fault_and_bad_row_signatures_blame_nobody():
    r = _Round()
    g, keys = _genesis(13, 4)
    member = next(k for k in keys if k.peer_id == r.committee[0])
    body = {"distances": {"k": -1.0}, "reference": b"\0" * 32, "updates": {"k": (b"\1" * 32, 1, b"\2" * 64)}}
    signed = SignedMessage(signer=member.peer_id, kind="cmfl_scores", height=r.height, view=0, body=body,
                           signature=member.sign(sign_bytes(CHAIN, "cmfl_scores", r.height, 0, body)))
    with pytest.raises(ForgedScoreRow) as exc:
        verify_score_row(r.ctx, signed)
    assert exc.value.evidence.offender == member.peer_id and "malformed" in exc.value.evidence.reason
    unsigned = dataclasses.replace(r.rows[0], signature=b"\0" * 64)
    with pytest.raises(SignatureError):
        verify_score_row(r.ctx, unsigned)


def test_evidence_claims_anyone_can_check():
    r = _Round()
    g, keys = _genesis(13, 4)
    key = keys[5]

    def signed(kind: str, body: object, height: int = 2, view: int = 0) -> SignedMessage:
        return SignedMessage(signer=key.peer_id, kind=kind, height=height, view=view, body=body,
                             signature=key.sign(sign_bytes(CHAIN, kind, height, view, body)))

    def evidence(kind: str, *exhibits: SignedMessage) -> Evidence:
        x = exhibits[0]
        return Evidence(kind=kind, offender=x.signer, height=x.height, view=x.view,
                        exhibits=tuple(sorted(exhibits, key=lambda m: m.encode())), reason="test")

    # equivocation: only over messages an honest member signs once per slot
    votes = evidence("equivocation", signed("prepare", {"block_hash": b"\1" * 32}), signed("prepare", {"block_hash": b"\2" * 32}))
    check_evidence(r.ctx, 3, votes)
    assert check_evidence_claim(r.ctx, votes) is None
    other = evidence("equivocation", signed("status", {"n": 1}), signed("status", {"n": 2}))
    check_evidence(r.ctx, 3, other)  # well formed ...
    assert "may sign more than once" in check_evidence_claim(r.ctx, other)  # ... but proves nothing
    # invalid_score_row: the exhibited row must really be invalid
    honest_row = r.rows[2]
    framed = Evidence(kind="invalid_score_row", offender=honest_row.signer, height=honest_row.height, view=0,
                      exhibits=(honest_row,), reason="fabricated")
    assert "is valid" in check_evidence_claim(r.ctx, framed)
    # invalid_proposal: the exhibit must be the primary's pre-prepare of that height and view
    pp = evidence("invalid_proposal", signed("pre_prepare", {"header": {}}))
    assert check_evidence_claim(r.ctx, pp) is None
    assert "pre_prepare" in check_evidence_claim(r.ctx, evidence("invalid_proposal", signed("commit", {"block_hash": b"\1" * 32})))
    # kinds honest members never produce
    assert "unknown evidence kind" in check_evidence_claim(r.ctx, evidence("laziness", signed("prepare", {"block_hash": b"\1" * 32})))
    assert set(EVIDENCE_KINDS) == {"equivocation", "invalid_proposal", "invalid_score_row"}
    assert {"update", "cmfl_scores", "pre_prepare", "prepare", "commit"} <= SLOT_KINDS
    assert "sync_request" not in SLOT_KINDS
