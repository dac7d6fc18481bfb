"""A replica's votes survive a restart: ``Replica.durable()``, ``Replica(..., restore=...)`` and the vote log.

pBFT keeps each replica's log in stable storage [Castro & Liskov, OSDI '99, §4.4-4.5], so that a replica
that crashes and recovers is correct rather than faulty. docs/design.md, "Durability": the vote log is written
and fsynced before a vote leaves the node, and a restarted replica never signs two different things for
one (height, view). The cluster persists each replica's record after every call into it and before that
call's messages are sent, and checks after every send that no honest member signed two different
messages for one (kind, height, view), across restarts (``Cluster._check_signed``).
"""

from __future__ import annotations

import os

import pytest

from consensus import KIND_COMMIT, KIND_PREPARE, KIND_VIEW_CHANGE, Broadcast, Message, Phase, Replica, parse
from consensus._replica import DurableStateError
from consensus.testing import BEHAVIOURS, Cluster, Faults, InvariantViolation, SplitMix64
from ledger import decode, encode
from node.runtime._votelog import VoteLog, VoteLogError

LOSSY = Faults(drop=0.05, duplicate=0.05, delay_ticks_max=2)


def sent_messages(record: bytes) -> dict[tuple[str, int], bytes]:
    """(kind, view) -> encoded message of every message in a durable record."""
    out = {}
    for m in decode(record)["sent"]:
        s = m["signed"]
        out[(s["kind"], s["view"])] = encode(m)
    return out


def replica_from(c: Cluster, peer: str, record: bytes | None) -> Replica:
    """A new incarnation of ``peer`` outside the cluster (same state, key and config)."""
    old = c.replicas[peer]
    return Replica(ctx=c.ctx, key=c.keys[peer], state=old.chain_state, config=c.config, restore=record)


def between_prepare_and_commit(c: Cluster, min_height: int) -> str | None:
    """An honest member that has sent PREPARE but not COMMIT in its current (height, view)."""
    for p in c.honest:
        st = c.replicas[p].status()
        if st.height >= min_height and st.phase is Phase.PREPARE and (p, KIND_PREPARE, st.height, st.view) in c.signed:
            return p
    return None


def assert_live(c: Cluster, heights: int = 3, slack: int = 1) -> None:
    """Each of the next ``heights`` heights decides at every live honest replica within the bound."""
    bound = slack * c.liveness_bound_ticks()
    for _ in range(heights):
        target = c.min_height() + 1
        assert c.run_until(lambda: c.min_height() >= target, bound), (
            f"{c.replay_line()}\nliveness: height {target} not decided within {bound} ticks"
        )


def assert_agree(c: Cluster) -> None:
    chains = [[b.header.hash() for b in c.chains[p]] for p in c.honest]
    longest = max(chains, key=len)
    assert all(ch == longest[: len(ch)] for ch in chains)


# --- the test: a committee member restarted between its PREPARE and its COMMIT ---------------


@pytest.mark.parametrize("seed", range(6))
def test_restart_between_prepare_and_commit(seed, explored):
    c = Cluster(size=4, seed=seed, faults=LOSSY)
    found = c.run_until(lambda: between_prepare_and_commit(c, 2 + seed % 3) is not None, 2000)
    assert found, c.replay_line()
    p = between_prepare_and_commit(c, 2 + seed % 3)
    assert p is not None
    st = c.replicas[p].status()
    h, v = st.height, st.view
    prepare = c.signed[(p, KIND_PREPARE, h, v)]
    before = sent_messages(c.persisted[p])
    assert (KIND_PREPARE, v) in before and (KIND_COMMIT, v) not in before  # on disk before it was sent

    c.restart(p)

    st = c.replicas[p].status()
    assert (st.height, st.view, st.phase) == (h, v + 1, Phase.VIEW_CHANGE)  # the liveness cost: one view change
    assert (p, KIND_VIEW_CHANGE, h, v + 1) in c.signed
    after = sent_messages(c.persisted[p])
    assert all(after[k] == m for k, m in before.items())  # the same bytes: retransmissions are identical
    assert_live(c)
    assert c.min_height() >= h  # the height it was restarted in is decided everywhere, and more after it
    assert c.signed[(p, KIND_PREPARE, h, v)] == prepare
    assert (p, KIND_COMMIT, h, v) not in c.signed  # it never committed in the view it left
    assert_agree(c)
    explored.add(c)


COMMITS_LOST = Faults(drop=0.2, duplicate=0.05, delay_ticks_max=3, drop_kind=((KIND_COMMIT, 0.6),))


@pytest.mark.parametrize("seed,kind", [(1, "pre_prepare"), (2, "pre_prepare"), (11, "view_change")])
@pytest.mark.parametrize("forget", [False, True])
def test_restart_between_prepare_and_commit_after_a_view_change(seed, kind, forget):
    """The same restart in a view >= 1 (commits mostly lost, so views change). A member that forgets its
    votes starts again in view 0 and signs again what it had signed there or in view 1, differently:
    as the primary of view 0 a pre-prepare with a later time, or a VIEW-CHANGE to view 1 without the
    certificate it had prepared. Seeds found by a search over 40 (9 of them equivocate this way, since the
    primary is a hash of the genesis and the height);
    with the vote log none does."""
    c = Cluster(size=4, seed=seed, faults=COMMITS_LOST)

    def restartable() -> str | None:
        p = between_prepare_and_commit(c, 2)
        return p if p is not None and c.replicas[p].status().view >= 1 else None

    assert c.run_until(lambda: restartable() is not None, 3000), c.replay_line()
    p = restartable()
    assert p is not None
    if forget:
        with pytest.raises(InvariantViolation, match=f"equivocation: honest {p} sent two different {kind}"):
            c.restart(p, forget=True)
            c.heal()
            assert_live(c, slack=2)
    else:
        c.restart(p)
        c.heal()
        assert_live(c, slack=2)
        assert_agree(c)


def _committed_at_one_member(*, check: bool = True) -> tuple[Cluster, str, tuple[str, str, str]]:
    """Height 1 decided by member A alone (the COMMITs to everyone else are lost); the primary and R are
    prepared, X saw nothing. Returns the cluster, A, and (primary, R, X)."""
    c = Cluster(size=4, seed=0, faults=Faults(reorder=False), check=check)
    p0 = c.replicas[c.peers[0]].status().primary
    a, r, x = [p for p in c.peers if p != p0]
    c.isolate(x)
    while c.queue:
        c.drop_where(lambda src, dst, m: m.kind == KIND_COMMIT and dst != a)
        c.deliver_all(max_events=1)
    assert [c.height(p) for p in (a, p0, r, x)] == [1, 0, 0, 0]
    assert c.replicas[p0].status().phase is Phase.COMMIT and c.replicas[r].status().phase is Phase.COMMIT
    c.tick()
    c.tick()  # a proposal made now would carry another time
    c.heal()
    c.isolate(a)  # A is slow: the others must not need it
    return c, a, (p0, r, x)


def test_prepared_members_that_forget_break_agreement():
    """Without the vote log, two honest restarts are two faults in a committee of 4: the primary proposes
    again at (1, 0), differently (equivocation), and the members that forgot they prepared decide another
    block at height 1 than the one A decided."""
    c, a, (p0, r, x) = _committed_at_one_member()
    with pytest.raises(InvariantViolation, match=f"equivocation: honest {p0} sent two different pre_prepare"):
        c.restart(p0, forget=True)

    c, a, (p0, r, x) = _committed_at_one_member(check=False)
    c.restart(p0, forget=True)
    c.restart(r, forget=True)
    assert c.run_until(lambda: all(c.height(p) >= 1 for p in (p0, r, x)), 200)
    assert c.chains[p0][0].header.hash() != c.chains[a][0].header.hash()
    with pytest.raises(InvariantViolation, match="agreement"):
        c.check_invariants()


def test_prepared_members_that_remember_keep_agreement(explored):
    """The same run with the vote log: both restarted members carry their prepared certificate into the
    view change, the next primary re-proposes A's block, and everyone decides it."""
    c, a, (p0, r, x) = _committed_at_one_member()
    c.restart(p0)
    c.restart(r)
    for p in (p0, r):
        st = c.replicas[p].status()
        assert (st.view, st.phase) == (1, Phase.VIEW_CHANGE)
    assert c.run_until(lambda: all(c.height(p) >= 1 for p in (p0, r, x)), 4 * c.liveness_bound_ticks())
    assert {c.chains[p][0].header.hash() for p in c.peers} == {c.chains[a][0].header.hash()}
    assert c.chains[x][0].certificate.view >= 1  # decided after the view change
    c.heal()
    assert_live(c)
    assert_agree(c)
    explored.add(c)


# --- restarts at random moments ----------------------------------------------------------------------


def run_restarts(
    seed: int,
    *,
    size: int = 4,
    members: int | None = None,
    restarts: int = 3,
    byzantine: str | None = None,
    events: int = 300,
) -> Cluster:
    """``restarts`` times: run a seeded number of events, then restart a seeded honest member (now and then
    after some downtime, now and then twice in a row); then heal and check liveness. With ``members``
    beyond ``size`` the committee rotates, so some restarts hit observers and newcomers."""
    rng = SplitMix64(seed ^ 0xD0AB1E)
    f = (size - 1) // 3
    byz: dict[int, str] = {}
    while byzantine is not None and len(byz) < f:
        byz[rng.randrange(members or size)] = byzantine
    c = Cluster(size=size, members=members, rotate=members is not None, seed=seed, faults=LOSSY, byzantine=byz)
    for _ in range(restarts):
        for _ in range(rng.randrange(events)):
            c.step()
        p = c.honest[rng.randrange(len(c.honest))]
        if rng.chance(0.3):
            c.crash(p)
            c.run(1 + rng.randrange(20))
        c.restart(p)
        if rng.chance(0.2):
            c.step()
            c.restart(p)
    c.heal()
    assert_live(c, slack=2)
    assert_agree(c)
    return c


@pytest.mark.parametrize("seed", range(20))
def test_restarts_at_random_moments(seed, explored):
    explored.add(run_restarts(seed))


@pytest.mark.parametrize("seed", range(4))
def test_restarts_with_byzantine_members(seed, explored):
    explored.add(run_restarts(seed, size=4, byzantine=BEHAVIOURS[seed % len(BEHAVIOURS)]))


@pytest.mark.parametrize("seed", range(4))
def test_restarts_with_rotating_committees(seed, explored):
    explored.add(run_restarts(seed, size=4, members=6, restarts=4))


@pytest.mark.slow
@pytest.mark.parametrize("size", [4, 7])
@pytest.mark.parametrize("byzantine", [None, *BEHAVIOURS])
@pytest.mark.parametrize("seed", range(25))
def test_restart_sweep(size, byzantine, seed, explored):
    explored.add(run_restarts(1000 + seed, size=size, restarts=6, byzantine=byzantine, events=600))


@pytest.mark.slow
@pytest.mark.parametrize("byzantine", [None, "equivocate", "silent"])
@pytest.mark.parametrize("seed", range(20))
def test_restart_sweep_rotating(byzantine, seed, explored):
    explored.add(run_restarts(2000 + seed, size=4, members=7, restarts=6, byzantine=byzantine, events=600))


# --- the durable record -------------------------------------------------------------------------------


def _prepared_replica(seed: int = 3) -> tuple[Cluster, str]:
    c = Cluster(size=4, seed=seed, faults=LOSSY)

    def committing() -> str | None:
        for p in c.honest:
            st = c.replicas[p].status()
            if st.height >= 2 and st.phase is Phase.COMMIT:
                return p
        return None

    assert c.run_until(lambda: committing() is not None, 2000)
    p = committing()
    assert p is not None
    return c, p


def test_durable_round_trip():
    c, p = _prepared_replica()
    old = c.replicas[p]
    st = old.status()
    rec = old.durable()
    assert decode(rec)["prepared"] is not None and (KIND_COMMIT, st.view) in sent_messages(rec)

    r2 = replica_from(c, p, rec)
    assert r2.durable_version == 1
    fx = r2.start()
    assert r2.durable_version == 2  # signed its VIEW-CHANGE in start(), not in the constructor
    (vc,) = [e.message for e in fx if isinstance(e, Broadcast)]
    parsed = parse(Message.decode(vc.encode()))  # as a peer gets it
    assert vc.kind == KIND_VIEW_CHANGE and parsed.signed.view == st.view + 1
    assert parsed.prepared is not None  # the certificate it prepared before the restart
    commit = decode(sent_messages(rec)[(KIND_COMMIT, st.view)])
    assert parsed.prepared.pre_prepare.block_hash == commit["signed"]["body"]["block_hash"]
    rec2 = r2.durable()
    assert decode(rec2)["prepared"] == decode(rec)["prepared"]
    old_sent, new_sent = sent_messages(rec), sent_messages(rec2)
    assert set(new_sent) - set(old_sent) == {(KIND_VIEW_CHANGE, st.view + 1)}
    assert all(new_sent[k] == m for k, m in old_sent.items())

    # Restarted again before anything else: the same view change, the very same VIEW-CHANGE bytes.
    r3 = replica_from(c, p, rec2)
    fx3 = r3.start()
    assert [e.message.encode() for e in fx3 if isinstance(e, Broadcast)] == [vc.encode()]
    assert (r3.status().view, r3.status().phase) == (st.view + 1, Phase.VIEW_CHANGE)
    assert r3.durable() == rec2


def test_fresh_and_stale_records_start_afresh():
    c = Cluster(size=4, seed=2)
    p = next(q for q in c.peers if q != c.replicas[q].status().primary)
    rec = c.replicas[p].durable()  # height 1, view 0: the primary's pre-prepare has not reached it yet
    assert decode(rec)["sent"] == ()
    again = replica_from(c, p, rec)
    assert again.durable() == rec and again.status().phase is Phase.PROPOSE and again.start() == []

    c.run_until(lambda: c.height(p) >= 2, 500)
    stale = rec  # height 1 is decided now
    r = replica_from(c, p, stale)
    assert r.status().view == 0 and r.status().height == c.height(p) + 1
    assert r.durable() == replica_from(c, p, None).durable()


def test_future_record_is_refused():
    """A record ahead of the block store: the host lost decided blocks (it stores a block before it saves
    the next height's record), so the votes of the lost heights are gone too; the replica refuses."""
    c, p = _prepared_replica()
    rec = c.replicas[p].durable()
    earlier = Cluster(size=4, seed=3)  # the same chain and keys, still at height 0
    old = earlier.replicas[p]
    for data in (rec, encode(dict(decode(rec), sent=(), prepared=None))):
        with pytest.raises(DurableStateError, match="the block store ends at height 0"):
            Replica(ctx=earlier.ctx, key=earlier.keys[p], state=old.chain_state, restore=data)


def _edit(rec: bytes, **changes) -> bytes:
    v = dict(decode(rec))
    v.update(changes)
    return encode(v)


def test_malformed_records_raise_one_clear_error():
    c, p = _prepared_replica()
    rec = c.replicas[p].durable()
    v = decode(rec)
    other = next(q for q in c.honest if q != p and decode(c.replicas[q].durable())["sent"])
    foreign = decode(c.replicas[other].durable())["sent"][0]
    sent = v["sent"]
    flipped = dict(sent[0], signed=dict(sent[0]["signed"], signature=bytes(64)))
    no_commit = tuple(m for m in sent if m["signed"]["kind"] != KIND_COMMIT)
    short_proof = dict(v["prepared"], prepares=v["prepared"]["prepares"][:0])
    cases = {
        "empty": (b"", "malformed"),
        "garbage": (b"\x93\x01\x02", "malformed"),
        "truncated": (rec[: len(rec) // 2], "malformed"),
        "not bytes": ("text", "expected bytes"),
        "format": (_edit(rec, format=2), "unsupported format"),
        "chain": (_edit(rec, chain_id="another-chain"), "of chain"),
        "member": (_edit(rec, signer=other), "of member"),
        "foreign vote": (_edit(rec, sent=(*sent, foreign)), "does not belong"),
        "bad signature": (_edit(rec, sent=(flipped, *sent[1:])), "signature"),
        "duplicate": (_edit(rec, sent=(*sent, sent[0])), "two "),
        "negative view": (_edit(rec, view=-1), "out of range"),
        "height 0": (_edit(rec, height=0), "out of range"),
        "certificate without its commit": (_edit(rec, sent=no_commit), "without its own COMMIT"),
        "short certificate": (_edit(rec, prepared=short_proof), "prepared certificate"),
        "unknown field": (_edit(rec, extra=1), "unknown field"),
    }
    for name, (data, match) in cases.items():
        with pytest.raises(DurableStateError, match=match) as e:
            replica_from(c, p, data)
        assert isinstance(e.value, ValueError) and "\n" not in str(e.value), name
        assert str(e.value).startswith(f"vote record of {p}: "), name


def test_corrupt_records_never_crash_obscurely():
    """Seeded bit flips and truncations: a clear DurableStateError, or a record that still restores safely."""
    c, p = _prepared_replica()
    rec = c.replicas[p].durable()
    rng = SplitMix64(7)
    for i in range(300):
        data = bytearray(rec)
        if i % 5 == 0:
            data = data[: rng.randrange(len(data))]
        else:
            data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
        try:
            r = replica_from(c, p, bytes(data))
        except DurableStateError as e:
            assert "\n" not in str(e)
            continue
        r.start()
        # It restored: nothing it had signed may be contradicted by what it now holds.
        kept = sent_messages(rec)
        for k, m in sent_messages(r.durable()).items():
            assert kept.get(k, m) == m


def test_durable_version_changes_exactly_when_the_record_does():
    c = Cluster(size=4, seed=11, faults=LOSSY, byzantine={2: "equivocate"})
    last: dict[str, tuple[int, bytes]] = {}
    for _ in range(600):
        c.step()
        for p in c.honest:
            r = c.replicas[p]
            v, d = r.durable_version, r.durable()
            if p in last:
                lv, ld = last[p]
                assert (v == lv) == (d == ld), (p, v, lv)
                assert v >= lv
            last[p] = (v, d)
    assert c.min_height() >= 3


def test_every_vote_is_persisted_before_it_is_sent():
    """What leaves a member is in its vote log already, or is of a height it decided in the same batch
    (the host stores the block before it saves the record and sends): a vote for a decided height binds
    nothing any more."""

    class Checked(Cluster):
        def _send(self, src, to, message):  # noqa: ANN001
            s = message.signed
            if src in self.honest and s is not None and s.signer == src and s.kind != "sync_request":
                if s.height < decode(self.persisted[src])["height"]:
                    assert self.replicas[src].chain_state.height >= s.height
                else:
                    on_disk = sent_messages(self.persisted[src])
                    assert on_disk.get((s.kind, s.view)) == message.encode(), (src, s.kind, s.height, s.view)
            super()._send(src, to, message)

    c = Checked(size=4, seed=5, faults=LOSSY)
    rng = SplitMix64(5)
    for _ in range(4):
        c.run(40)
        c.restart(c.honest[rng.randrange(len(c.honest))])
    c.heal()
    assert_live(c, slack=2)


# --- the vote log file ----------------------------------------------------------------------------------


def test_vote_log_round_trip_and_restart(tmp_path):
    c, p = _prepared_replica()
    log = VoteLog(tmp_path / "votes.bin")
    assert log.load() is None
    log.save(c.persisted[p])
    log.save(c.replicas[p].durable())
    assert log.load() == c.replicas[p].durable()
    assert not log.temp_path.exists()
    r = replica_from(c, p, VoteLog(tmp_path / "votes.bin").load())
    assert r.start() and r.status().phase is Phase.VIEW_CHANGE


def test_vote_log_ignores_a_leftover_temp_file(tmp_path):
    log = VoteLog(tmp_path / "votes.bin")
    log.save(b"first record")
    log.temp_path.write_bytes(b"half a new rec")  # a crash between writing the temp file and the rename
    assert log.load() == b"first record"
    log.save(b"second record")
    assert log.load() == b"second record" and not log.temp_path.exists()
    only_temp = VoteLog(tmp_path / "other.bin")
    only_temp.temp_path.write_bytes(b"x" * 80)  # the very first save crashed before its rename
    assert only_temp.load() is None


@pytest.mark.parametrize(
    "damage,match",
    [
        (lambda b: b[:-1], "torn: .* of .* record bytes"),
        (lambda b: b[:10], "torn: 10 bytes, shorter than the header"),
        (lambda b: b[:30], "torn: 30 bytes, shorter than the header"),
        (lambda b: b"", "empty file"),
        (lambda b: b[:-3] + bytes([b[-3] ^ 0x10]) + b[-2:], "checksum mismatch"),
        (lambda b: b + b"\x00", "trailing bytes"),
        (lambda b: b"SQLite format 3\x00" + b[16:], "not a concilium vote log"),
        (lambda b: b[:18] + b"\x07" + b[19:], "unsupported format 7"),
        (lambda b: b[:19] + (1 << 40).to_bytes(8, "big") + b[27:], "exceeds"),
    ],
)
def test_vote_log_detects_torn_and_corrupt_files(tmp_path, damage, match):
    path = tmp_path / "votes.bin"
    log = VoteLog(path)
    log.save(b"a durable record " * 20)
    path.write_bytes(damage(path.read_bytes()))
    with pytest.raises(VoteLogError, match=match) as e:
        log.load()
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(f"vote log {path}: ")


def test_vote_log_save_failure_is_one_line(tmp_path):
    log = VoteLog(tmp_path / "missing-dir" / "votes.bin")
    with pytest.raises(VoteLogError, match="cannot save") as e:
        log.save(b"record")
    assert "\n" not in str(e.value)
    (tmp_path / "votes.bin").mkdir()
    with pytest.raises(VoteLogError, match="is a directory"):
        VoteLog(tmp_path / "votes.bin").load()
    if os.geteuid() != 0:  # root reads anything
        f = tmp_path / "locked.bin"
        VoteLog(f).save(b"r")
        f.chmod(0)
        with pytest.raises(VoteLogError, match="cannot read"):
            VoteLog(f).load()
