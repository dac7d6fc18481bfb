"""No view change without a fault, and the two re-draw rules that keep lazy members in step.

* A backup whose host lacks an input to judge a proposal (a node's update blob still on its way from its trainer,
  which a pre-prepare may overtake; the previous model) neither votes nor refuses: its verdict
  (``RequestVerdict``, :meth:`Replica.verdict`) is :class:`consensus.Pending`, the replica waits, the host answers
  again once the input is here, and the view's timer bounds the wait (the proposal is refused at its expiry, as before). Before, such a backup
  refused at once and asked for a view change: 6 view changes in a fault-free ``sim run testnet``.
* A replica that is not on a re-drawn committee shows it the height with its last signed message (a lazy member
  that slept through heights wakes to it), and a lazy observer keeps a re-draw timer only if it sits on the next
  attempt's committee (docs/sampling.md, "A committee that cannot reach quorum").
"""

from __future__ import annotations

import pytest

from consensus import (
    KIND_HEADER_SYNC,
    KIND_PREPARE,
    KIND_VIEW_CHANGE,
    Broadcast,
    Pending,
    Phase,
    Proposal,
    Replica,
    ReportMisbehavior,
    RequestVerdict,
    Send,
)
from consensus._messages import pre_prepare_message
from consensus.testing import Cluster, Faults
from ledger import ATTEMPT_VIEWS, apply_block, genesis_committee, genesis_state, make_header, primary

R = 120  # redraw_ticks: several view-change timeouts of the cluster's replica config


def _primary_of_height_1(c: Cluster) -> str:
    return primary(genesis_committee(c.genesis), c.genesis.hash(), 1, 0)


def _decided_all(c: Cluster, height: int) -> bool:
    return all(c.height(p) >= height for p in c.live_honest())


def _view_changes(c: Cluster) -> int:
    return sum(c.replicas[p].status().view_changes for p in c.peers)


# --- a pending verdict -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(4))
def test_inputs_that_come_after_the_pre_prepare_cost_no_view_change(seed):
    """Every backup's inputs arrive 3 ticks after each proposal (the propose timer is 10): each height decides in
    view 0, with no refusal and no view change."""
    c = Cluster(size=4, seed=seed, late_inputs=3)
    assert c.run_until(lambda: _decided_all(c, 5), 5 * c.liveness_bound_ticks())
    assert [b.header.view for b in c.chains[c.honest[0]]] == [0] * len(c.chains[c.honest[0]])
    assert _view_changes(c) == 0 and c.refusals == 0 and not c.evidence


def test_inputs_later_than_the_view_timer_refuse_and_the_next_view_decides():
    """Inputs that come only after the view's timer (12 ticks; the propose timer is 10, 20 in view 1): every backup
    refuses the view-0 proposal when its timer expires, with the pending reason, and view 1 decides."""
    c = Cluster(size=4, seed=1, late_inputs=12)
    assert c.run_until(lambda: _decided_all(c, 2), 5 * c.liveness_bound_ticks())
    assert [b.header.view for b in c.chains[c.honest[0]][:2]] == [1, 1]
    for p in c.peers:
        if p != _primary_of_height_1(c):
            (r,) = [x for x in c.replicas[p].status().refusals if x.height == 1]
            assert (r.view, r.reason) == (0, "update blobs on their way")


@pytest.mark.parametrize("seed", range(4))
def test_late_inputs_under_loss_and_byzantine_members_keep_the_invariants(seed):
    """Seeded sweeps: late inputs with a lossy, reordering network and a Byzantine member; the cluster checks
    agreement, validity, certificates and evidence after every event, and the chain goes on."""
    kinds = ["equivocate", "silent", "wrong_proposal", "forge"]
    c = Cluster(size=4, seed=500 + seed, late_inputs=1 + seed % 3, byzantine={seed % 4: kinds[seed]},
                faults=Faults(drop=0.1, duplicate=0.05, delay_ticks_max=2))
    assert c.run_until(lambda: _decided_all(c, 4), 12 * c.liveness_bound_ticks()), c.replay_line()


class _Host:
    """A backup's host whose update blobs come late: its verdict is Pending until ``here``."""

    def __init__(self) -> None:
        self.here = False
        self.calls = 0

    def judge(self, proposal: Proposal) -> str | Pending | None:
        self.calls += 1
        return None if self.here else Pending("update blob of a trainer missing")


def _backup_and_pre_prepare(c: Cluster):
    st = genesis_state(c.ctx)
    prim = _primary_of_height_1(c)
    me = next(p for p in c.peers if p != prim)
    r = Replica(ctx=c.ctx, key=c.keys[me], state=st, config=c.config)
    payload = c.honest_payload(st, 0, prim)
    hd = make_header(chain_id=c.genesis.chain_id, height=1, prev_hash=st.head_hash, view=0, proposer=prim, time_ms=1,
                     payload=payload)
    return r, prim, pre_prepare_message(c.keys[prim], c.genesis.chain_id, 1, 0, hd, payload), Proposal(hd, payload)


def _kinds(fx) -> list[str]:  # noqa: ANN001
    return [e.message.kind for e in fx if isinstance(e, (Send, Broadcast))]


def _asked(fx) -> list[Proposal]:  # noqa: ANN001
    return [e.proposal for e in fx if isinstance(e, RequestVerdict)]


def test_a_pending_verdict_waits_is_asked_again_and_votes_once_the_input_is_here():
    c = Cluster(size=4, seed=0, auto_propose=False, check=False)
    host = _Host()
    r, prim, pp, proposal = _backup_and_pre_prepare(c)
    bh = proposal.block_hash
    assert r.verdict(bh, None) == [] and r.waiting is None  # nothing waits: a verdict nobody asked for does nothing
    fx = r.step(pp, sender=prim)
    assert _asked(fx) == [proposal] and _kinds(fx) == []  # validity is an input: asked, not called
    s = r.status()
    assert (s.phase, s.view, s.view_changes, s.refusals) == (Phase.PROPOSE, 0, 0, ())
    assert r.waiting == proposal
    assert r.verdict(bh, host.judge(proposal)) == [] and r.waiting == proposal  # still missing: still waiting
    assert _asked(r.step(pp, sender=prim)) == [proposal]  # the primary's retransmission: asked again (input here?)
    host.here = True
    fx = r.verdict(bh, host.judge(proposal))
    assert _kinds(fx) == [KIND_PREPARE] and r.waiting is None and r.status().phase is Phase.PREPARE
    assert host.calls == 2
    assert r.step(pp, sender=prim) == [] and r.verdict(bh, "too late") == []  # a verdict reached is kept
    assert r.status().phase is Phase.PREPARE and r.status().refusals == ()


def test_a_refusing_verdict_reports_the_proposal_and_changes_the_view():
    c = Cluster(size=4, seed=0, auto_propose=False, check=False)
    r, prim, pp, proposal = _backup_and_pre_prepare(c)
    r.step(pp, sender=prim)
    fx = r.verdict(proposal.block_hash, "aggregate differs from re-execution")
    (report,) = [e for e in fx if isinstance(e, ReportMisbehavior)]
    assert report.evidence.reason == "aggregate differs from re-execution" and report.evidence.offender == prim
    assert _kinds(fx) == [KIND_VIEW_CHANGE] and r.status().view == 1 and r.waiting is None


def test_an_input_that_never_comes_is_refused_when_the_view_timer_expires():
    c = Cluster(size=4, seed=0, auto_propose=False, check=False)
    host = _Host()
    r, prim, pp, proposal = _backup_and_pre_prepare(c)
    r.step(pp, sender=prim)
    r.verdict(proposal.block_hash, host.judge(proposal))
    fx = []
    while not fx:
        fx = r.tick()
    assert r.status().now_tick == c.config.timeout_ticks_start + c.config.timeout_ticks_propose
    (report,) = [e for e in fx if isinstance(e, ReportMisbehavior)]
    assert report.evidence.kind == "invalid_proposal" and report.evidence.reason == "update blob of a trainer missing"
    assert _kinds(fx) == [KIND_VIEW_CHANGE] and r.status().view == 1 and r.waiting is None
    (refusal,) = r.status().refusals
    assert (refusal.view, refusal.proposer, refusal.reason) == (0, prim, "update blob of a trainer missing")
    host.here = True
    assert r.verdict(proposal.block_hash, host.judge(proposal)) == []  # the view moved on: nothing to judge
    assert r.status().view == 1 and r.status().phase is Phase.VIEW_CHANGE


def test_a_host_that_never_answers_costs_a_view_change_and_nothing_else():
    c = Cluster(size=4, seed=0, auto_propose=False, check=False)
    r, prim, pp, _ = _backup_and_pre_prepare(c)
    r.step(pp, sender=prim)
    fx = []
    while not fx:
        fx = r.tick()
    (report,) = [e for e in fx if isinstance(e, ReportMisbehavior)]
    assert report.evidence.reason == "the host has not judged the proposal yet"
    assert _kinds(fx) == [KIND_VIEW_CHANGE] and r.status().view == 1


# --- re-drawn committees and lazy members --------------------------------------------------------------------------


def _rotating_chain() -> tuple[Cluster, list]:
    c = Cluster(size=4, members=10, seed=3, rotate=True, redraw_ticks=R)
    assert c.run_until(lambda: _decided_all(c, 4), 4 * c.liveness_bound_ticks())
    states = [genesis_state(c.ctx)]
    for b in c.chains[c.honest[0]][:4]:
        states.append(apply_block(c.ctx, states[-1], b))
    return c, states


def _lazy(c: Cluster, me: str, state) -> Replica:  # noqa: ANN001
    return Replica(ctx=c.ctx, key=c.keys[me], state=state, config=c.config,
                   next_committee=c.expected_committee, needs_payload=lambda st: False, lazy=True)


def test_a_replica_off_the_re_drawn_committee_shows_it_the_height_and_wakes_a_lazy_sleeper():
    """A member of height 5's committee that is not on the committee re-drawn for it (attempt 1) sends that committee
    the last message it signed at height 5 when the height is re-drawn. A lazy member of the re-drawn committee that
    slept at height 1 wakes to it: it asks the sender for the headers up to height 5."""
    c, states = _rotating_chain()
    st = states[4]
    k1 = c.ctx.view_committee(st, 5, ATTEMPT_VIEWS)
    old = next(p for p in st.committee if p not in k1)
    r = _lazy(c, old, st)  # (lazy or not: a member of the height's committee keeps its timers)
    shown = []
    for _ in range(R):
        fx = r.tick()
        if r.status().attempt == 1:
            shown = [e for e in fx if isinstance(e, Broadcast) and set(e.to) == set(k1)]
            break
    assert r.status().attempt == 1 and not r.status().in_committee
    (show,) = shown
    last = show.message.signed
    assert (last.kind, last.height, last.signer) == (KIND_VIEW_CHANGE, 5, old)
    assert last.view == r.status().view_changes  # its highest view of attempt 0 (no quorum came: one per timer)

    k1_at_1 = c.ctx.view_committee(states[0], 1, ATTEMPT_VIEWS)  # (on it, it would keep a re-draw timer at height 1)
    sleeper = next(p for p in k1 if p not in states[0].committee and p not in k1_at_1 and p != old)
    z = _lazy(c, sleeper, states[0])
    assert z.idle_ticks() > 10**12  # asleep at height 1: no role, no timer
    fx = z.step(show.message, sender=old)
    (ask,) = [e for e in fx if isinstance(e, Send)]
    assert ask.to == old and ask.message.signed.kind == KIND_HEADER_SYNC and ask.message.signed.height == 1
    assert z.idle_ticks() < c.config.timeout_ticks_sync  # awake: catching up on its retry timer


def test_a_lazy_observer_keeps_a_re_draw_timer_only_on_the_next_attempts_committee():
    """Outside height 1's committee, a lazy member on the committee re-drawn for it wakes at ``redraw_ticks``
    (and enters the attempt); one that is not sleeps through it, and through every later re-draw. Once an attempt it
    sat on moves to a committee without it, it sleeps again (it shows that committee the height first)."""
    c = Cluster(size=4, members=16, seed=3, redraw_ticks=R)  # (16 members: one sits on attempt 1's committee alone)
    st = genesis_state(c.ctx)
    k = {a: set(c.ctx.view_committee(st, 1, a * ATTEMPT_VIEWS)) for a in (1, 2, 3)}
    off = next(p for p in c.peers if p not in st.committee and p not in k[1])
    r = _lazy(c, off, st)
    assert r.idle_ticks() > 10**12
    r.skip_ticks(10 * R)
    assert r.tick() == [] and r.status().attempt == 0 and r.idle_ticks() > 10**12

    on = next((p for p in c.peers if p not in st.committee and p in k[1] and p not in k[2] and p not in k[3]), None)
    assert on is not None, "no member outside attempts 0, 2 and 3 on attempt 1's committee (another genesis)"
    r = _lazy(c, on, st)
    assert r.idle_ticks() == R - 1
    r.skip_ticks(R - 1)
    fx = r.tick()
    assert r.status().attempt == 1 and r.status().in_committee and _kinds(fx) == [KIND_VIEW_CHANGE]
    while r.status().attempt == 1:  # alone in attempt 1: no quorum, it stays until the next re-draw
        fx = r.tick()
    assert r.status().attempt == 2 and not r.status().in_committee
    (show,) = [e for e in fx if isinstance(e, Broadcast)]
    assert set(show.to) == k[2] and show.message.signed.view == ATTEMPT_VIEWS  # its VIEW-CHANGE of attempt 1
    assert r.idle_ticks() > 10**12  # not on attempt 3's committee, no role: asleep, no sync timer either
