"""Selective delivery and row picking cannot move a chain off view 0 or steer its election.

* ``skip_primary``: five trainers send their valid updates to every validator but the view-0 primary. Validators
  tell the primary of every update they hold (``have``), it fetches those it lacks, and it is judged only on what
  it was told: >= 95 % of blocks commit at view 0 (before: every block the attackers trained in went to view 1),
  the skipping trainers' updates are in the blocks, nobody is accused, and the ledger re-executes.
* ``omit_rows``: a CMFL primary leaves one score row out of its proposal (a consistent proposal on the rows it kept,
  so re-execution alone would pass it). The validators that told it of that row refuse it, every such height moves
  to view 1, and each committed block carries every row the committee signed in time.
"""

import dataclasses
from pathlib import Path

from consensus import KIND_SCORES
from ledger.store import open_ledger
from sim import Simulation, load_scenario, verify_ledger
from sim._scenario import FaultConfig

SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"
SKIPPERS = (1, 2, 3, 4, 5)


def _with_faults(path: Path, faults, **kw):
    sc = load_scenario(path, **kw)
    return dataclasses.replace(sc, adversary=dataclasses.replace(sc.adversary, faults=tuple(faults)))


def test_trainers_that_skip_the_primary_cannot_force_view_changes(tmp_path):
    faults = [FaultConfig(target=f"member:{i}", kind="skip_primary") for i in SKIPPERS]
    sim = Simulation(_with_faults(SCENARIOS / "coordinator_fedavg.toml", faults, rounds=20, members=12),
                     ledger_dir=tmp_path / "l")
    res = sim.run()
    assert len(res.rounds) == 20
    at_view_0 = sum(m.view == 0 for m in res.rounds)
    assert at_view_0 >= 0.95 * len(res.rounds), [m.view for m in res.rounds]
    assert sum(m.evidence for m in res.rounds) == 0, "nobody is accused: the primary never had those updates"
    skippers = {sim.peers_by_index(i) for i in SKIPPERS}
    store, _ = open_ledger(tmp_path / "l", readonly=True)
    with store:
        blocks = [store.get(h) for h in range(1, store.height() + 1)]
    sampled = [(b, skippers & set(b.payload.record["clients"])) for b in blocks]
    assert sum(len(s) for _, s in sampled) >= 10, "the skipping trainers were sampled"
    # their updates reached the primary through the validators: in the block whenever they trained
    assert all(s <= {u.peer for u in b.payload.updates} for b, s in sampled), "the skipped updates are included"
    ok, line = verify_ledger(tmp_path / "l")
    assert ok and "re-executed" in line, line


def test_a_primary_that_leaves_out_a_score_row_is_refused(tmp_path):
    faults = [FaultConfig(target="coordinator", kind="omit_rows", from_round=2)]
    sim = Simulation(_with_faults(SCENARIOS / "quickstart.toml", faults, rounds=6), ledger_dir=tmp_path / "l")
    res = sim.run()
    assert len(res.rounds) == 6
    assert res.rounds[0].view == 0
    assert all(m.view >= 1 for m in res.rounds[1:]), [m.view for m in res.rounds]
    assert sum(m.evidence for m in res.rounds) == 0, "a refusal for an omission accuses nobody"
    store, _ = open_ledger(tmp_path / "l", readonly=True)
    with store:
        for h in range(1, store.height() + 1):
            b = store.get(h)
            rows = {a.signer for a in b.payload.attestations if a.kind == KIND_SCORES}
            assert len(rows) == store.genesis().protocol.committee_size, (h, rows)
    ok, line = verify_ledger(tmp_path / "l")
    assert ok and "re-executed" in line, line
