"""A proposer grinding its block cannot choose who does what next.

The attacker is the proposer of a real coordinator-mode block (a FedAvg ledger of the simulator, whose members'
keys the test holds, so every variant is a block the chain accepts: re-signed by the proposer and certified by the
committee). It varies every field it controls: the header's ``time_ms`` and view (as the primary of that view), and
the payload's model digest, round record, strategy-state digest, evidence and which of the round's signed updates
it includes. For each (height, view) it must get exactly one candidate for everything the next heights sample: the
next height's primary of each view, its trainers, and the committee of the height after (with
``committee_epoch`` = 1, a fresh draw every height). The variants do differ where the old rule looked: thousands
of distinct block hashes, which used to feed the primary and the samples.

Committee mode's election is the CMFL ranking of the score rows, not a sample: ``tests/sim/test_row_inclusion.py``
checks that the primary cannot steer it through the rows it includes.
"""

import dataclasses
import random
from pathlib import Path

import pytest

from ledger import (
    Block,
    Certificate,
    ChainContext,
    apply_block,
    genesis_state,
    make_header,
    primary,
    sign_commit,
)
from ledger.store import open_ledger
from node._rounds import RoundRules
from sim import Simulation, load_scenario
from sim._world import scenario_keys

SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"
TRIES = 3000


@pytest.fixture(scope="module")
def chain(tmp_path_factory):
    scenario = load_scenario(SCENARIOS / "coordinator_fedavg.toml", rounds=3, members=12)
    out = tmp_path_factory.mktemp("grind")
    sim = Simulation(scenario, ledger_dir=out / "ledger")
    sim.run()
    store, _ = open_ledger(out / "ledger", readonly=True)
    with store:
        blocks = [store.get(h) for h in range(1, store.height() + 1)]
    keys = {k.peer_id: k for k in scenario_keys(scenario)}
    return sim.genesis, blocks, keys


def _variant(rng: random.Random, ctx: ChainContext, before, block: Block, keys) -> Block:
    hd, pl = block.header, block.payload
    view = rng.randrange(4)
    updates = tuple(u for u in pl.updates if rng.random() < 0.7)
    payload = dataclasses.replace(
        pl,
        updates=updates,
        model_digest=rng.randbytes(32),
        record={**pl.record, "grind": rng.randrange(1 << 62)},
        state_digest=rng.choice([None, rng.randbytes(32)]),
        evidence=(),
    )
    proposer = primary(before.committee, ctx.genesis_hash, hd.height, view)
    header = make_header(
        chain_id=hd.chain_id, height=hd.height, prev_hash=hd.prev_hash, view=view, proposer=proposer,
        time_ms=before.time_ms + rng.randrange(1 << 40), payload=payload,
    )
    q = ctx.quorum(len(before.committee))
    sigs = tuple(sign_commit(keys[s], hd.chain_id, hd.height, view, header.hash()) for s in sorted(before.committee)[:q])
    cert = Certificate(height=hd.height, view=view, block_hash=header.hash(), signatures=sigs)
    return Block(header=header, payload=payload, certificate=cert)


def test_a_proposer_grinding_every_field_gets_one_candidate_per_height_and_view(chain):
    genesis, blocks, keys = chain
    ctx = ChainContext(genesis)
    rules = RoundRules(genesis, ctx=ctx)
    assert rules.committee_epoch == 1 and not rules.committee_mode
    state = genesis_state(ctx)
    state = apply_block(ctx, state, blocks[0])  # the attacker proposes block 2
    before, honest = state, blocks[1]
    rng = random.Random(31)
    hashes: set[bytes] = set()
    candidates: dict[tuple[str, int], set[object]] = {}
    for _ in range(TRIES):
        block = _variant(rng, ctx, before, honest, keys)
        after = apply_block(ctx, before, block)  # every structural rule: the chain takes this block
        hashes.add(after.head_hash)
        h = after.height + 1
        plan = rules.plan(after)
        candidates.setdefault(("trainers", h), set()).add(plan.trainers)
        candidates.setdefault(("committee", h + 1), set()).add(rules.next_committee_coordinator(after))
        for v in range(len(after.committee)):
            candidates.setdefault((f"primary of view {v}", h), set()).add(primary(after.committee, ctx.genesis_hash, h, v))
    assert len(hashes) == TRIES, "every try is another block hash"
    assert {k: len(v) for k, v in candidates.items()} == {k: 1 for k in candidates}
    # and the one candidate is the honest chain's: the block actually decided at height 2 gives the same
    after = apply_block(ctx, before, honest)
    assert candidates[("trainers", 3)] == {rules.plan(after).trainers}
    assert candidates[("committee", 4)] == {rules.next_committee_coordinator(after)}
    # the primary of the next height moves only with the view: a full rotation of the committee
    assert len({next(iter(candidates[(f"primary of view {v}", 3)])) for v in range(len(after.committee))}) == len(after.committee)
