"""A committee that cannot reach quorum does not stall the chain for ever, whole simulations.

Two of the four members of height 3's committee are down for round 3 (a ``drop`` fault: they neither send nor vote),
so it has no quorum of 3. After the genesis' ``redraw_ticks`` at that height (here the default: 10 times the train,
propose and view-change timeouts), a committee re-drawn from every member by the genesis hash, the height and the
attempt takes the height over and decides it as a skipped round (``RoundRules.skip_payload``: no update, the model
unchanged); the members come back at height 4, the chain goes on, nobody is accused, and the ledger re-executes. With ``redraw_ticks = 0`` the same
run stalls at height 3 (plain pBFT: ``LivenessError``).
"""

from __future__ import annotations

import dataclasses
import struct
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from consensus import sample_committee
from ledger import ATTEMPT_VIEWS, ChainContext, genesis_state
from ledger.store import open_ledger
from node.explorer import create_app
from sim import LivenessError, Simulation, load_scenario, verify_ledger
from sim._scenario import FaultConfig
from sim._world import World

SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"
STALLED = 3


def _scenario(name: str, rounds: int, *, down=(), redraw: int | None = None):
    sc = load_scenario(SCENARIOS / f"{name}.toml", rounds=rounds)
    params = dict(sc.protocol.params)
    if redraw is not None:
        params["redraw_ticks"] = redraw
    faults = tuple(FaultConfig(target=f"member:{i}", kind="drop", from_round=STALLED, until_round=STALLED) for i in down)
    return dataclasses.replace(sc, protocol=dataclasses.replace(sc.protocol, params=params),
                               adversary=dataclasses.replace(sc.adversary, faults=faults))


def _blocks(path: Path) -> list:
    store, _ = open_ledger(path, readonly=True)
    with store:
        return [store.get(h) for h in range(1, store.height() + 1)]


def _check_redrawn(blocks: list, world: World, down: list[int], rounds: int) -> None:
    assert len(blocks) == rounds
    downs = {world.keys[i].peer_id for i in down}
    ctx = ChainContext(world.genesis)
    before = blocks[STALLED - 2]  # the block that named height 3's committee
    assert downs <= set(before.payload.next_committee)
    b = blocks[STALLED - 1]
    assert b.header.view >= ATTEMPT_VIEWS and b.certificate.view >= ATTEMPT_VIEWS, "decided by a re-drawn committee"
    signers = {s.signer for s in b.certificate.signatures}
    state = dataclasses.replace(genesis_state(ctx), height=STALLED - 1, committee=before.payload.next_committee)
    assert signers <= set(ctx.view_committee(state, STALLED, b.certificate.view)) and not signers & downs
    assert b.payload.updates == () and dict(b.payload.record) == {"skipped": b.header.view // ATTEMPT_VIEWS}
    assert b.payload.model_digest == before.payload.model_digest, "the model is unchanged over the skipped round"
    assert all(bl.header.view < ATTEMPT_VIEWS and bl.payload.updates for bl in blocks[STALLED:]), "rounds go on"
    assert not [ev for bl in blocks for ev in bl.payload.evidence], "nobody is accused"


def _run_with_two_down(name: str, k3, ledger: Path) -> list:
    """Run ``name`` for 6 rounds with two of height 3's committee ``k3`` down from round 3; check it went on."""
    world = World.build(_scenario(name, 6))
    index = {k.peer_id: i for i, k in enumerate(world.keys)}
    down = sorted(index[p] for p in k3)[:2]
    res = Simulation(_scenario(name, 6, down=down), ledger_dir=ledger).run()
    assert [m.view >= ATTEMPT_VIEWS for m in res.rounds] == [h == STALLED for h in range(1, 7)]
    blocks = _blocks(ledger)
    _check_redrawn(blocks, world, down, 6)
    ok, line = verify_ledger(ledger)
    assert ok and "re-executed" in line, line
    return blocks


def test_coordinator_mode_a_committee_short_of_quorum_is_re_drawn_and_the_chain_goes_on(tmp_path):
    # coordinator mode: height 3's committee, named by block 2, is the genesis hash's and 2's
    # (RoundRules.next_committee_coordinator)
    g = World.build(_scenario("coordinator_fedavg", 6)).genesis
    k3 = sample_committee(g.member_ids, g.hash() + struct.pack(">Q", STALLED - 1), g.protocol.committee_size)
    blocks = _run_with_two_down("coordinator_fedavg", k3, tmp_path / "l")
    # the explorer shows the re-drawn committee, the one named for the height, and the skip
    c = TestClient(create_app(tmp_path / "l"))
    page = c.get(f"/api/blocks/{STALLED}/page").json()
    b = blocks[STALLED - 1]
    assert page["attempt"] >= 1 and page["named_committee"] == sorted(k3)
    assert {s.signer for s in b.certificate.signatures} <= set(page["committee"]) != set(k3)
    html = c.get(f"/blocks/{STALLED}").text
    assert 'id="redrawn"' in html and "skipped round" in html and "committee attempt" in html
    signer = b.certificate.signatures[0].signer
    rows = c.get(f"/api/members/{signer}").json()["rows"]
    assert any(r["height"] == STALLED and any(x.startswith("committee, signed") for x in r["roles"]) for r in rows)


def test_committee_mode_a_committee_short_of_quorum_is_re_drawn_and_the_chain_goes_on(tmp_path):
    # committee mode elects each committee from the round's scores: a clean run shows height 3's (the same genesis,
    # and the runs are the same up to round 3)
    Simulation(_scenario("quickstart", 6), ledger_dir=tmp_path / "clean").run()
    k3 = _blocks(tmp_path / "clean")[STALLED - 2].payload.next_committee
    blocks = _run_with_two_down("quickstart", k3, tmp_path / "l")
    # committee mode names the re-drawn committee as the next one (it just showed it reaches quorum)
    b = blocks[STALLED - 1]
    assert {s.signer for s in b.certificate.signatures} <= set(b.payload.next_committee)


def test_without_redraw_the_same_run_stalls(tmp_path):
    world = World.build(_scenario("coordinator_fedavg", 4, redraw=0))
    g = world.genesis
    k3 = sample_committee(g.member_ids, g.hash() + struct.pack(">Q", STALLED - 1), g.protocol.committee_size)
    index = {k.peer_id: i for i, k in enumerate(world.keys)}
    down = sorted(index[p] for p in k3)[:2]
    with pytest.raises(LivenessError, match=f"height {STALLED}"):
        Simulation(_scenario("coordinator_fedavg", 4, down=down, redraw=0), ledger_dir=tmp_path / "l").run()
