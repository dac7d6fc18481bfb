"""Many simulated members: what a member outside the round costs and receives.

With ``network.model_push = "participants"`` a member outside the next round receives the decided block but not
the new model; the network still draws that push's randomness, so the ledger stays what it is with the full push
(unless a member would have fetched a model it missed: ``NetworkConfig.model_push``). Members share what is pure:
the chain context's memos, the round rules (a height's client sample and next committee), the genesis state, the
initial model blob, the decoded global model; local datasets are index arrays into the pool, made when a member
trains.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import numpy as np
import pytest

from consensus import LocalProtocolError
from ledger import redrawn_committee
from learning import partition_dataset, partition_spec, vector_to_blob
from sim import Simulation, load_scenario, verify_ledger
from node._errors import ConfigFileError
from node.core import Transmit
from learning._rng import RngTree
from sim._scenario import LinkConfig
from sim._world import MemberData, World

SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"


def _scale(members: int, rounds: int, clients: int = 20, steps: int = 2, **network: object):
    sc = load_scenario(SCENARIOS / "scale_10k.toml", members=members, rounds=rounds)
    return dataclasses.replace(
        sc,
        protocol=dataclasses.replace(sc.protocol, params={"clients": clients}),
        training=dataclasses.replace(sc.training, steps=steps),
        network=dataclasses.replace(sc.network, **network),
    )


def _parse(traffic: str) -> dict[str, tuple[int, int]]:
    out = {}
    for item in traffic.split():
        kind, counts = item.split("=")
        n, b = counts.split("/")
        out[kind] = (int(n), int(b))
    return out


def test_traffic_by_kind_per_round_adds_up_to_the_totals():
    res = Simulation(load_scenario(SCENARIOS / "quickstart.toml", rounds=2), workers=0).run()
    assert len(res.traffic_by_round) == len(res.rounds) == 2
    for m, t in zip(res.rounds, res.traffic_by_round):
        assert _parse(m.traffic) == t
        assert set(t) <= {"pbft", "model", "update", "scores", "want", "blobs"}
        assert {"pbft", "update", "scores"} <= set(t)  # committee mode: updates, score rows, pBFT every round
    # the cumulative counters at the last round are the rounds' sums; the run's totals add what was sent after it
    last = res.rounds[-1]
    assert last.bytes_sent == sum(b for t in res.traffic_by_round for _, b in t.values())
    assert last.messages == sum(n for t in res.traffic_by_round for n, _ in t.values())
    for kind, total in res.bytes_by_kind.items():
        assert sum(t.get(kind, (0, 0))[1] for t in res.traffic_by_round) <= total


@pytest.mark.parametrize("name", ["quickstart.toml", "committee_crash.toml"])
def test_a_member_outside_the_next_round_gets_the_block_but_no_model_and_the_ledger_is_the_same(name):
    sc = load_scenario(SCENARIOS / name, rounds=3)
    assert sc.network.model_push == "all"  # the default: every member gets the model
    lean = Simulation(sc, workers=0, models_for_all=False)
    full = Simulation(sc, workers=0, models_for_all=True)
    pushes = {(run, role): 0 for run in ("lean", "full") for role in (True, False)}  # (run, to a member with a role)

    def watch(s, run):
        send = s._send

        def watched(frm, fx, *, tampered=False):
            if fx.kind == "model":
                # the proposer pushes while committing: its status already shows the next round
                nxt = s.nodes[frm].status()
                pushes[(run, fx.to in nxt.trainers or fx.to in nxt.committee)] += 1
            send(frm, fx, tampered=tampered)

        s._send = watched

    watch(lean, "lean")
    watch(full, "full")
    res, full_res = lean.run(), full.run()
    # the lean run pushes to every member with a role, as the full one does, and to no one else; the full run also
    # pushed to members without a role, the pushes the lean one left out
    assert pushes[("lean", True)] == pushes[("full", True)] > 0
    assert pushes[("lean", False)] == 0 < pushes[("full", False)]
    full = full_res
    # the cut changes no ledger: the same head (so every block), the same decisions round by round
    assert res.head_hash == full.head_hash
    assert [(m.accepted, m.committee, m.view) for m in res.rounds] == [(m.accepted, m.committee, m.view) for m in full.rounds]
    assert res.bytes_by_kind["model"] < full.bytes_by_kind["model"]
    assert res.bytes_by_kind["pbft"] == full.bytes_by_kind["pbft"]  # everyone still receives every block
    assert res.messages_by_kind.get("want", 0) == full.messages_by_kind.get("want", 0)  # nobody fetches it instead


def _watch_decided(s: Simulation) -> dict[tuple[int, str, str], tuple[int, int, str]]:
    """Wrap ``s._send``: every block (a proposal or a decided push) and every ``decided_header`` sent, keyed by
    ``(height, sender, receiver)``, as ``(round index it is counted in, bytes, "block" | "header")``."""
    sent: dict[tuple[int, str, str], tuple[int, int, str]] = {}
    send = s._send

    def watch(frm, fx, *, tampered=False):
        if fx.kind == "pbft" and isinstance(fx, Transmit):
            msg = s._decoder.decode(fx.data).pbft
            r = len(s.traffic_by_round)  # the round whose traffic this send is counted in
            if msg.block is not None:
                sent[(msg.block.header.height, frm, fx.to)] = (r, len(fx.data), "block")
            elif msg.signed is not None and msg.signed.kind == "decided_header":  # pushed while committing
                sent[(s.nodes[frm].chain_state.height, frm, fx.to)] = (r, len(fx.data), "header")
        send(frm, fx, tampered=tampered)

    s._send = watch
    return sent


def test_members_outside_the_next_round_get_headers_and_the_ledger_is_the_same():
    """``network.outsiders = "headers"``: the proposer sends a member outside the next round the block's header
    and certificate (``decided_header``), a member with a role the whole block; every member follows the chain,
    and the ledger is the one whole blocks give.

    The bytes are checked by exact accounting, which holds whatever the CPU's training bits make of the run (they
    pick the clients and committees, so how many members get headers): each header replaces the block the same
    sender sent the same member in the same round of the whole-blocks run, is at most a fifth of its size, and
    the pBFT bytes of each round fall by exactly what those replacements save."""
    blocks = Simulation(_scale(300, 3, outsiders="blocks"), workers=0)
    whole_sent = _watch_decided(blocks)
    whole = blocks.run()
    s = Simulation(_scale(300, 3, outsiders="headers"), workers=0)
    kinds = {"decided_header": 0, "block": 0}
    send = s._send

    def watch(frm, fx, *, tampered=False):
        if fx.kind == "pbft" and isinstance(fx, Transmit):
            msg = s._decoder.decode(fx.data).pbft
            if msg.block is not None or (msg.signed is not None and msg.signed.kind == "decided_header"):
                nxt = s.nodes[frm].status()  # the proposer pushes while committing: it shows the next round
                has_role = fx.to in nxt.trainers or fx.to in nxt.committee
                header = msg.block is None
                if fx.to not in s.nodes[frm].replica.status().committee or header:
                    assert header != has_role, (fx.to, has_role)
                kinds["decided_header" if header else "block"] += 1
        send(frm, fx, tampered=tampered)

    s._send = watch
    got_sent = _watch_decided(s)
    res = s.run()
    assert kinds["decided_header"] > 2 * 250 and kinds["block"] > 0
    assert res.head_hash == whole.head_hash
    assert [(m.accepted, m.committee, m.view) for m in res.rounds] == [(m.accepted, m.committee, m.view) for m in whole.rounds]
    saved = [0] * len(res.rounds)
    for key, (r, size, what) in got_sent.items():
        if what == "header":
            assert whole_sent[key][0] == r and whole_sent[key][2] == "block", (key, whole_sent.get(key))
            assert 5 * size <= whole_sent[key][1], (size, whole_sent[key])
            saved[r] += whole_sent[key][1] - size
        else:
            assert whole_sent[key] == (r, size, what), key  # a member with a role gets the very same block
    assert sum(saved) > 0
    for r, (got, full) in enumerate(zip(res.traffic_by_round, whole.traffic_by_round)):
        assert got["pbft"][0] == full["pbft"][0] and got["pbft"][1] == full["pbft"][1] - saved[r], (r, got, full, saved)
    # every member followed the chain, by headers or whole blocks: at the end each holds block 2 or the head, one
    # hash per height (the run stops as soon as the ledger has block 3: its announcements are still on the way)
    heads = {(n.chain_state.height, n.chain_state.head_hash) for n in s.nodes.values()}
    assert {h for h, _ in heads} <= {2, 3} and len(heads) == len({h for h, _ in heads}) and (3, res.head_hash) in heads


def test_headers_under_a_corrupt_coordinator_give_the_ledger_whole_blocks_give():
    """A corrupt coordinator each round (view changes, evidence, validators from outside the round): members that
    follow by headers end on the ledger of members that take whole blocks."""
    sc = load_scenario(SCENARIOS / "coordinator_corrupt.toml", rounds=6)
    runs = {}
    for outsiders in ("blocks", "headers"):
        net = dataclasses.replace(sc.network, model_push="participants", outsiders=outsiders)
        runs[outsiders] = Simulation(dataclasses.replace(sc, network=net), workers=0).run()
    b, h = runs["blocks"], runs["headers"]
    assert h.view_changes > 0 and h.evidence > 0
    assert (h.head_hash, h.view_changes, h.evidence) == (b.head_hash, b.view_changes, b.evidence)
    assert h.bytes_by_kind["pbft"] < b.bytes_by_kind["pbft"]


def test_skipping_idle_ticks_is_ticking_them():
    """The simulator does not tick a member whose next ticks do nothing (``NodeCore.idle_ticks``) and catches
    its clock up instead (``skip_ticks``): the member is then exactly as ticked, and acts the same after."""
    sc = _scale(100, 1, outsiders="headers")  # (a lazy member outside the round sleeps for good: test_lazy_*)
    a, b = Simulation(sc, workers=0), Simulation(sc, workers=0)
    first = a.nodes[a.peers[0]].status()
    pid = next(p for p in a.peers if p not in first.committee and p not in first.trainers)
    na, nb = a.nodes[pid], b.nodes[pid]
    assert na.start() == nb.start() == []
    idle = na.idle_ticks()
    assert idle > 0 and idle == nb.idle_ticks()
    for _ in range(idle):
        assert na.tick() == []
    nb.skip_ticks(idle)
    assert na.status() == nb.status() and na.replica.status() == nb.replica.status()
    assert na.idle_ticks() == nb.idle_ticks() == 0
    fa, fb = na.tick(), nb.tick()  # the sync deadline: it asks a validator for the block, the same way
    assert fa and [(e.to, e.data) for e in fa] == [(e.to, e.data) for e in fb]
    with pytest.raises(LocalProtocolError):
        nb.skip_ticks(nb.idle_ticks() + 1)
    validator = a.nodes[first.committee[0]]
    validator.start()
    assert validator.idle_ticks() == 0
    with pytest.raises(LocalProtocolError):
        validator.skip_ticks(1)


def test_five_hundred_members_cost_what_their_rounds_need_not_the_square_of_the_members():
    Simulation(_scale(100, 1), workers=0)  # imports and the dataset loaded outside the measurement
    sc = _scale(500, 2, clients=20)
    c0 = time.process_time()
    s = Simulation(sc, workers=0)
    res = s.run()
    cpu = time.process_time() - c0
    # before, every node hashed the 500-member genesis and ranked every member for each height's plan
    # (3.0 s of CPU for this build and run at commit 42acaa5 on a 2-core machine); now about 0.4 s
    assert cpu < 1.5, f"500 members, 2 rounds took {cpu:.2f} s of CPU"
    model_push = len(vector_to_blob(s.theta0)) + 128  # one model blob in an envelope
    committee = sc.protocol.committee_size
    for t in res.traffic_by_round:
        n, b = t.get("model", (0, 0))
        assert n <= 20 + committee and b <= n * model_push, t  # the next round's members only, not all 500
    # one global model object shared by the members that hold it (the validators keep the one they computed)
    held = {id(node.model) for node in s.nodes.values() if node.model is not None}
    assert len(held) <= committee + 2, len(held)
    assert sum(node.model is None for node in s.nodes.values()) > 400
    # local datasets made for the members that trained only
    trained = {s.index[p] % sc.data.local_datasets for p, (_, t) in res.acceptance.items() if t}
    assert isinstance(s.client_data, MemberData) and len(s.client_data._made) <= len(trained) + committee


def test_member_data_is_the_partition_bit_for_bit_and_shared_by_index():
    sc = load_scenario(SCENARIOS / "scale_10k.toml", members=250, rounds=1)
    world = World.build(sc)
    data = world.client_data
    assert len(data) == 250
    rng = RngTree(sc.seed)
    part = partition_dataset(partition_spec("iid", {"num_clients": 100}), world.train,
                             seed=rng.child("partition").seed64() % 2**32)
    expect = part.client_datasets(world.train)
    for i in (0, 1, 99, 100, 199, 249):
        d, e = data[i], expect[i % 100]
        assert np.array_equal(d.x.numpy(), e.x.numpy()) and np.array_equal(d.y.numpy(), e.y.numpy())
        assert data.size(i) == len(e) and np.array_equal(data.labels(i), e.labels)
    assert data[7] is data[107]  # one made copy per local dataset
    with pytest.raises(IndexError):
        data[250]
    with pytest.raises(ConfigFileError, match="local_datasets exceeds members"):
        load_scenario(SCENARIOS / "scale_10k.toml", members=50)


def test_link_latencies_drawn_row_by_row_equal_the_full_matrix():
    sc = _scale(120, 1, latency_spread=0.7, bandwidth_spread=0.3, links=(LinkConfig(a=3, b=5, latency_ms=7.5),))
    s = Simulation(sc, workers=0)
    n = sc.members
    lrng = RngTree(sc.seed).child("links").numpy()
    dense = sc.network.latency_ms * (1.0 + sc.network.latency_spread * lrng.random((n, n)))
    uplink = sc.network.bandwidth_mbps / (1.0 + sc.network.bandwidth_spread * lrng.random(n))
    for link in sc.network.links:
        dense[link.a, link.b] = dense[link.b, link.a] = link.latency_ms
    assert np.array_equal(s._uplink_mbps, uplink)
    for a in (0, 3, 5, 77, 119):
        assert [s._latency_ms(a, b) for b in range(n)] == dense[a].tolist()


def test_lazy_members_outside_the_round_receive_nothing_and_catch_up_when_a_role_wakes_them():
    """``network.outsiders = "lazy"``: the proposer sends nothing to a member outside the next round; a member
    woken by the block before its round catches up by headers from the sender in time to take its role (every
    sampled client's update is accepted, no view change); a member never sampled receives nothing at all and
    stays at the genesis. The same seed gives the same ledger, which verifies."""
    sc = _scale(300, 4, outsiders="lazy")
    s = Simulation(sc, workers=0)
    received: dict[str, int] = {}
    header_asks = 0
    send = s._send

    def watch(frm, fx, *, tampered=False):
        nonlocal header_asks
        if isinstance(fx, Transmit):
            received.setdefault(fx.to, []).append((fx.kind, s.nodes[frm].chain_state.height))
            if fx.kind == "pbft":
                msg = s._decoder.decode(fx.data).pbft
                if msg.block is not None and fx.to not in s.nodes[frm].replica.status().committee:
                    nxt = s.nodes[frm].status()  # a pushed block goes only to a member with a role next
                    assert fx.to in nxt.trainers or fx.to in nxt.committee, fx.to
                header_asks += msg.signed is not None and msg.signed.kind == "header_sync_request"
        send(frm, fx, tampered=tampered)

    s._send = watch
    res = s.run()
    assert [(m.accepted, m.view) for m in res.rounds] == [(20, 0)] * 4
    assert header_asks > 0
    asleep = [p for p, n in s.nodes.items() if n.chain_state.height == 0]
    # never sampled: nothing received, but the last block's push to round 5's members (the run ends with block 4)
    assert len(asleep) > 100 and all(h == 4 for p in asleep for _, h in received.get(p, ()))
    assert sum(1 for p in asleep if p not in received) > 100
    first = s.nodes[asleep[0]].status()  # (their round is the first: its trainers wait for block 1 on a timer)
    idle = [p for p in asleep if p not in received and p not in first.trainers and p not in first.committee]
    # asleep for good, but for those on the committee re-drawn for their height: they wake after
    # redraw_ticks at it, to re-draw it if it is still undecided then
    assert len(idle) > 100 and all(s.nodes[p].idle_ticks() > 10**9 or _on_redraw(s.nodes[p], s.genesis) for p in idle)
    assert sum(1 for p in idle if s.nodes[p].idle_ticks() > 10**9) > 100
    again = Simulation(sc, workers=0).run()
    assert again.head_hash == res.head_hash
    with pytest.raises(ValueError, match='outsiders = "lazy" needs model_push'):
        _scale(300, 1, outsiders="lazy", model_push="all")


def test_a_member_without_a_role_costs_no_node_until_a_message_wakes_it():
    """With lazy members the simulator makes a member's node at its first input (``sim._engine._Members``): the
    nodes made are those of round 1's members and of the members a message reached, no others; and the run is
    the one in which every node is made at the start (same ledger head, traffic and acceptance). A member deferred
    wrongly (one with a role at height 1) is refused where its node is made."""
    sc = _scale(300, 6, outsiders="lazy")
    s = Simulation(sc, workers=0)
    deferred = s.nodes.deferred
    assert 300 - len(deferred) < 40  # round 1's 20 clients and 7 validators, and the member made to ask .lazy
    assert len(s.nodes.made()) == 300 - len(deferred)
    reached: dict[str, set[int]] = {}  # member -> the sender's heights of the messages sent to it
    send = s._send

    def watch(frm, fx, *, tampered=False):
        if isinstance(fx, Transmit):
            reached.setdefault(fx.to, set()).add(s.nodes[frm].chain_state.height)
        send(frm, fx, tampered=tampered)

    s._send = watch
    res = s.run()
    made = {n.peer_id for n in s.nodes.made()}
    assert made - (set(s.peers) - deferred) <= set(reached)
    # reached but not made: only by the last block's push to round 7's members, still in flight when the run ended
    assert all(reached[p] == {6} for p in (deferred & set(reached)) - made)
    assert len(made) < 250  # 6 rounds of 20 clients: many of the 300 never get a role
    assert not s._last_upload  # each trainer's last upload is kept for an equivocate fault only
    every = Simulation(sc, workers=0)
    every.nodes.deferred = frozenset()  # every node made and started at the start, as before
    again = every.run()
    assert len(every.nodes.made()) == 300
    assert again.head_hash == res.head_hash
    assert again.traffic_by_round == res.traffic_by_round and again.acceptance == res.acceptance
    wrong = Simulation(sc, workers=0)
    trainer = next(iter(wrong.nodes[wrong.peers[0]].status().trainers))
    wrong = Simulation(sc, workers=0)
    wrong.nodes.deferred = frozenset({trainer})
    wrong.nodes._made.pop(trainer)  # (made at set-up as a member of round 1: make it again, deferred)
    with pytest.raises(LocalProtocolError, match="deferred but acts at the genesis"):
        wrong.nodes[trainer]


def _on_redraw(node, genesis) -> bool:
    """Does ``node`` sit on the committee re-drawn for its height (its one timer while it sleeps)?"""
    return node.peer_id in redrawn_committee(genesis, node.chain_state.height + 1, 1)


def test_a_lazy_client_sleeps_once_its_update_is_sent_and_asks_for_headers_only_when_woken():
    """A lazy client has no part left in its round once its update went to the committee (``NodeCore._role_left``):
    it sleeps then, with no sync timer (``Replica.rest``), instead of waking on that timer to fetch the block that
    ends the round, which it does not need. So every ``header_sync_request`` comes from a member that was shown a
    later height (a role woke it), where every client used to send one more on its timer after its round (8
    rounds here: 140 requests, 561 headers and 1,724 consensus messages in all; before, 1,891 consensus
    messages). Nothing a round needs is lost: every update accepted, no view change, the same ledger again."""
    sc = _scale(300, 8, outsiders="lazy")
    s = Simulation(sc, workers=0)
    slept_after_upload: list[str] = []
    asks: list[tuple[str, bool]] = []  # (asker, shown a later height when it asked)
    finish, send = s._finish_training, s._send

    def trained(peer, job, handle):
        finish(peer, job, handle)
        node = s.nodes[peer]
        if job.fl_round == node.chain_state.height + 1 and peer not in node.replica.status().committee:
            assert node._dormant() and (node.idle_ticks() > 10**9 or _on_redraw(node, s.genesis)), \
                "a client with its update sent sleeps, no timer (but the re-draw's, on its committee)"
            slept_after_upload.append(peer)

    def watch(frm, fx, *, tampered=False):
        if isinstance(fx, Transmit) and fx.detail == "header_sync_request":
            asks.append((frm, s.nodes[frm].replica.behind))
        send(frm, fx, tampered=tampered)

    s._finish_training, s._send = trained, watch
    res = s.run()
    assert [(m.accepted, m.view) for m in res.rounds] == [(20, 0)] * 8
    assert len(slept_after_upload) > 100  # the clients of 8 rounds, but those also in a committee
    assert asks and all(behind for _, behind in asks), [a for a in asks if not a[1]][:3]
    sent = {k: sum(t.get(k, (0, 0))[0] for t in res.consensus_by_round) for k in ("header_sync_request", "decided_header")}
    assert sent["header_sync_request"] == len(asks) and sent["decided_header"] > 0
    assert sum(n for t in res.consensus_by_round for n, _ in t.values()) == sum(t["pbft"][0] for t in res.traffic_by_round)
    assert Simulation(sc, workers=0).run().head_hash == res.head_hash


_UNDER_LOSS = """
import dataclasses, json, sys
sys.path.insert(0, "tests/sim")
from test_scale import _scale
from sim import Simulation
out = {}
for seed in (0, 1):
    sc = dataclasses.replace(_scale(300, 8, outsiders="lazy", drop=0.1), seed=seed)
    out[seed] = [m.accepted for m in Simulation(sc, workers=0).run().rounds]
print(json.dumps(out))
"""


def test_under_loss_the_primary_wakes_again_the_lazy_clients_it_has_not_heard_from(in_reproducible_mode):
    """A lazy client learns of its role only from the push of the block before its round; under 10 % loss a lost push
    cost the round its update (133 and 135 of 160 accepted over these two seeds without the retry). The primary of each
    height sends that block again, half way to the collect deadline, to the sampled clients it holds no update from
    (``NodeCore._maybe_nudge``): 157 and 146 of 160 here. Loss-free runs send no retry (their ledgers are unchanged:
    ``benchmarks/heads.py``). (Before validators waited for inputs on their way, both seeds gave 157: a validator
    refused every proposal whose update blobs had not reached it yet, so nearly every height took 1 to 5 view changes
    (146 and 134 in all), and the later views' primaries collected the late updates; a validator now waits for a missing
    blob within the view's timer, the heights decide in view 0 or 1 (11 and 33 view changes), and an update that reaches
    the primary after its deadline misses its round.)

    In reproducible mode: which clients are sampled and which messages are lost follow the training bits, and by
    default those differ between CPUs (seed 0 gave 151 with PyTorch's portable kernels forced, 155 with its
    AVX-512 ones, on one AMD machine)."""
    for seed, accepted in in_reproducible_mode(_UNDER_LOSS).items():
        assert sum(accepted) >= 144, (seed, accepted)  # 90 % of 8 rounds x 20 clients


def test_lazy_members_that_sleep_hold_no_blobs_of_their_past_rounds(tmp_path):
    """A member outside the round sheds what its past rounds left it (``OutsiderPolicy.shed_asleep``): the blobs held by all
    members stop growing with the rounds, a dormant member holds its head's model at most, and nothing a later
    round needs is lost (every update accepted, no view change, the ledger verifies)."""
    sc = _scale(300, 10, outsiders="lazy")
    held_by_round: list[int] = []
    sims: list[Simulation] = []

    def count(_m):
        held_by_round.append(sum(len(n._blobs._blobs) for n in sims[0].nodes.values()))

    s = Simulation(sc, workers=0, on_round=count, ledger_dir=tmp_path / "ledger")
    sims.append(s)
    res = s.run()
    ok, line = verify_ledger(tmp_path / "ledger")
    assert ok, line
    assert [(m.accepted, m.view) for m in res.rounds] == [(20, 0)] * 10
    took_part = [n for n in s.nodes.values() if n.chain_state.height > 0 and n._dormant()]
    assert len(took_part) > 50, "members that took part in a round and sleep now"
    for n in took_part:
        state = n.chain_state
        assert set(n._blobs._blobs) <= {state.model_digest, state.state_digest}, "a sleeper keeps its head's model only"
    # without shedding every member that ever took part keeps its rounds' blobs (a validator all 20 updates): the
    # count grows each round (460, 644, ..., 2135 here) instead of staying near one round's work (355-685)
    assert max(held_by_round[4:]) <= 1.5 * max(held_by_round[:4]), held_by_round


def test_lazy_members_under_a_corrupt_coordinator():
    """A corrupt coordinator each round (view changes, evidence; validators woken from sleep to judge it): with
    lazy members every round still commits, the evidence reaches the ledger, and the members that follow
    the chain agree on it."""
    sc = load_scenario(SCENARIOS / "coordinator_corrupt.toml", rounds=6)
    net = dataclasses.replace(sc.network, model_push="participants", outsiders="lazy")
    s = Simulation(dataclasses.replace(sc, network=net), workers=0)
    res = s.run()
    assert [m.fl_round for m in res.rounds] == list(range(1, 7))
    assert res.view_changes > 0 and res.evidence > 0
    heads = {}
    for n in s.nodes.values():
        heads.setdefault(n.chain_state.height, set()).add(n.chain_state.head_hash)
    assert all(len(h) == 1 for h in heads.values()) and heads[6] == {res.head_hash}
