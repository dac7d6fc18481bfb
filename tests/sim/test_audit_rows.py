"""The audit rechecks every committee score row against the updates the store keeps.

A real results ledger (the quickstart: committee mode, 20 members, two Byzantine clients sending the negated
model, 3 rounds), whose members' keys the test holds (the scenario derives them). The store keeps every blob a
block's score rows name - each member's reference (its own update, what its distances are measured from) and
every update it scored, rejected ones too - and ``concilium ledger verify`` recomputes each row from them:

* a score row changed to lie about one distance and signed again with its member's key (the block re-bound to it
  and its certificate signed again by its signers, as a Byzantine quorum could) fails at its height, naming the
  member, although the committee's decision still re-executes from the rows as signed;
* a missing or corrupted reference or scored update is a ``FAIL`` line naming the row's member, never a traceback.
"""

import dataclasses
import re
import shutil
import sqlite3
from pathlib import Path

import pytest

from concilium.cli import main
from consensus import parse_score_row, score_row_blobs, sign_score_row
from ledger import audit_chain, decode_block, sign_commit
from ledger.store import open_ledger
from node.reexec import reexecutor_for
from sim import load_scenario, run_scenario
from sim._world import byzantine_indices, scenario_keys

ROOT = Path(__file__).resolve().parents[2]
ROUNDS = 3


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    out = tmp_path_factory.mktemp("rows") / "run"
    summary = run_scenario(ROOT / "scenarios" / "quickstart.toml", out=out, rounds=ROUNDS, progress=False, plots=False)
    assert summary["ledger_verified"], summary["ledger_verdict"]
    scenario = load_scenario(out / "scenario.toml")
    keys = {k.peer_id: k for k in scenario_keys(scenario)}
    store, _ = open_ledger(out / "ledger", readonly=True)
    with store:
        genesis = store.genesis()
        blocks = {h: store.get(h) for h in range(1, store.height() + 1)}
    by_name = {m.name: m.peer_id for m in genesis.members}
    byzantine = {by_name[f"node-{i}"] for i in byzantine_indices(scenario, genesis)}
    return out, keys, blocks, byzantine


def _copy(results, tmp_path: Path) -> Path:
    out = results[0]
    folder = tmp_path / "copy"
    if folder.exists():
        shutil.rmtree(folder)
    shutil.copytree(out, folder)
    return folder


def _verify(folder: Path, capsys, *extra: str) -> tuple[int, str]:
    capsys.readouterr()
    code = main(["ledger", "verify", str(folder / "ledger"), *extra])
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1 and re.match(r"^(OK: chain |FAIL at height \d+: )", out[0]), out
    return code, out[0]


def _blob_path(folder: Path, digest: bytes) -> Path:
    return folder / "ledger" / "blobs" / digest.hex()[:2] / digest.hex()[2:]


def test_every_scored_update_and_every_reference_is_stored_and_the_rows_recheck(results, tmp_path):
    out, _, blocks, byzantine = results
    rejected_byzantine = 0
    for h, block in blocks.items():
        named = score_row_blobs(block.payload.attestations)
        rows = [parse_score_row(a) for a in block.payload.attestations]
        assert {m for m, _, _ in named} == {r.member for r in rows} and len(rows) >= 3
        accepted = {u.peer for u in block.payload.updates}
        scored = {k for r in rows for k in r.distances}
        assert scored - accepted, f"height {h}: every scored client was accepted; nothing to keep beyond them"
        for member, whose, digest in named:
            assert _blob_path(out, digest).is_file(), (h, member, whose)  # rejected updates and references too
        rejected_byzantine += len((scored - accepted) & byzantine)
    assert rejected_byzantine >= 1  # the case that matters: a rejected Byzantine client's update is in blobs/
    store, blobs = open_ledger(out / "ledger", readonly=True)
    with store:
        g = store.genesis()
        report = audit_chain(g, store.iter_rows(), blobs=blobs, reexecutor=reexecutor_for(g))
    assert report.ok and report.findings == () and report.chain_valid, report.line()


def _lying_head(results):
    """The head block with one member's row changed to lie about its rejected client's distance (doubled: the
    client stays last, so the committee's decision is unchanged), the row signed again with the member's key,
    the header re-bound to the new payload and the certificate signed again by its signers."""
    _, keys, blocks, _ = results
    block = blocks[ROUNDS]
    atts = list(block.payload.attestations)
    row = parse_score_row(atts[0])
    rejected = set(row.distances) - {u.peer for u in block.payload.updates}
    victim = max(rejected, key=lambda k: (row.distances[k], k))  # the farthest: stays the farthest when doubled
    distances = dict(row.distances, **{victim: row.distances[victim] * 2.0})
    atts[0] = sign_score_row(keys[row.member], block.header.chain_id, block.height, distances=distances,
                             updates=row.updates, reference=row.reference)
    payload = dataclasses.replace(block.payload, attestations=tuple(atts))
    header = dataclasses.replace(block.header, payload_hash=payload.hash())
    sigs = tuple(sign_commit(keys[s.signer], header.chain_id, header.height, header.view, header.hash())
                 for s in block.certificate.signatures)
    cert = dataclasses.replace(block.certificate, block_hash=header.hash(), signatures=sigs)
    return dataclasses.replace(block, payload=payload, header=header, certificate=cert), row.member, victim


def test_a_score_row_signed_again_with_a_lying_distance_fails_at_its_height_naming_the_member(results, tmp_path, capsys):
    lying, member, victim = _lying_head(results)
    folder = _copy(results, tmp_path)
    db = sqlite3.connect(folder / "ledger" / "chain.sqlite")
    with db:
        db.execute("UPDATE blocks SET data = ?, hash = ? WHERE height = ?", (lying.encode(), lying.hash(), ROUNDS))
    db.close()
    code, line = _verify(folder, capsys)
    assert code == 1
    assert line.startswith(f"FAIL at height {ROUNDS}: the score row of {member} lies: 1 of its ")
    assert f"(to {victim}: signed " in line and f"every other check passed through height {ROUNDS}" in line
    # the lie is what fails: the block is signed, linked and its decision re-executes from the rows as signed
    store, blobs = open_ledger(folder / "ledger", readonly=True)
    with store:
        g = store.genesis()
        report = audit_chain(g, store.iter_rows(), blobs=blobs, reexecutor=reexecutor_for(g))
    assert report.chain_valid and not report.ok and report.height == ROUNDS - 1
    assert [(f.height, f.offender) for f in report.findings] == [(ROUNDS, member)]
    code, line = _verify(folder, capsys, "--reexec", "no")  # without re-execution, nothing reads the rows' blobs
    assert code == 0 and line.startswith(f"OK: chain sim-quickstart-0 verified, {ROUNDS} blocks"), line


def _rejected_blob(results, height: int) -> tuple[str, str, bytes]:
    """(member, client, digest) of an update some row scored and the block did not accept."""
    block = results[2][height]
    accepted = {u.digest for u in block.payload.updates}
    return next((m, w, d) for m, w, d in score_row_blobs(block.payload.attestations) if w != m and d not in accepted)


def test_a_missing_reference_fails_naming_the_member_and_the_audit_checks_on(results, tmp_path, capsys):
    block = results[2][2]
    row = parse_score_row(block.payload.attestations[-1])
    folder = _copy(results, tmp_path)
    _blob_path(folder, row.reference).unlink()
    code, line = _verify(folder, capsys)
    assert code == 1 and line.startswith(f"FAIL at height 2: the score row of {row.member} cannot be rechecked: "
                                         f"its reference (the member's own update) {row.reference.hex()[:16]}")
    assert f"every other check passed through height {ROUNDS}) (valid prefix: 1 blocks)" in line


def test_a_missing_or_corrupted_rejected_update_fails_naming_the_rows_that_scored_it(results, tmp_path, capsys):
    member, client, digest = _rejected_blob(results, 1)
    folder = _copy(results, tmp_path)
    path = _blob_path(folder, digest)
    data = bytearray(path.read_bytes())
    path.unlink()
    code, line = _verify(folder, capsys)
    assert code == 1 and line.startswith(
        f"FAIL at height 1: the score row of {member} cannot be rechecked: the update of {client} it scored ")
    assert "signed inputs fail their recheck in all" in line  # every row scored it: each is named
    data[len(data) // 2] ^= 0x10
    path.write_bytes(bytes(data))
    code, line = _verify(folder, capsys)
    assert code == 1 and "content does not match its digest" in line and line.startswith("FAIL at height 1: ")
