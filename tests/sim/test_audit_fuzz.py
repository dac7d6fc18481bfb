"""No stored input makes the audit raise: a fuzzer of stored blocks through ``concilium ledger verify``.

A real results ledger (the quickstart, 3 rounds, committee mode, re-executable), whose members' keys the test holds
(the scenario derives them): every header field of a stored block is changed, the commit certificate signed again by
the block's own signers (a Byzantine quorum could do that much) or left as it was, and the block put back into a copy
of the SQLite store; then byte flips across whole blocks and blobs. Each copy is verified with re-execution and
without (``--reexec no``). Every verdict is exit 0 with an ``OK`` line or exit 1 with ``FAIL at height H: reason``:
never a traceback (a header naming another height used to raise ``ValueError`` out of the re-executing audit).
A block that was not signed again fails at its own height; one signed again passes only at the head (the next
block's hash link breaks otherwise)."""

import dataclasses
import re
import shutil
import sqlite3
from pathlib import Path

import pytest

from concilium.cli import main
from ledger import Certificate, decode_block, sign_commit
from sim import load_scenario, run_scenario
from sim._world import scenario_keys

ROOT = Path(__file__).resolve().parents[2]
ROUNDS = 3
_VERDICT = re.compile(r"^(OK: chain |FAIL at height (\d+): .+)")


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    out = tmp_path_factory.mktemp("fuzz") / "run"
    scenario = load_scenario(ROOT / "scenarios" / "quickstart.toml", rounds=ROUNDS)
    run_scenario(ROOT / "scenarios" / "quickstart.toml", out=out, rounds=ROUNDS, progress=False, plots=False)
    keys = {k.peer_id: k for k in scenario_keys(scenario)}
    db = sqlite3.connect(out / "ledger" / "chain.sqlite")
    raws = dict(db.execute("SELECT height, data FROM blocks"))
    db.close()
    return out, keys, raws


def _verify(folder: Path, capsys, *extra: str) -> tuple[int, int | None]:
    """Exit code and FAIL height of ``concilium ledger verify`` on ``folder``'s ledger (asserting the one-line form)."""
    capsys.readouterr()
    code = main(["ledger", "verify", str(folder / "ledger"), *extra])
    out = capsys.readouterr().out.strip().splitlines()
    assert code in (0, 1), (code, out)
    m = _VERDICT.match(out[-1]) if out else None
    assert m is not None, out
    assert (code == 0) == out[-1].startswith("OK"), (code, out[-1])
    return code, int(m.group(2)) if m.group(2) else None


def _copy_with(results, tmp_path: Path, height: int, data: bytes) -> Path:
    out, _, _ = results
    folder = tmp_path / "copy"
    if folder.exists():
        shutil.rmtree(folder)
    shutil.copytree(out, folder)
    db = sqlite3.connect(folder / "ledger" / "chain.sqlite")
    try:  # the store's hash index made to agree with the block (as a writer that forged it would), when it decodes
        block, _ = decode_block(data)
        index = (block.hash(), block.header.prev_hash)
    except Exception:  # noqa: BLE001 - a flipped byte: the index stays, the block's own checks must catch it
        index = None
    with db:
        db.execute("UPDATE blocks SET data = ? WHERE height = ?", (data, height))
        if index is not None:
            db.execute("UPDATE blocks SET hash = ?, prev_hash = ? WHERE height = ?", (*index, height))
    db.close()
    return folder


def _mutations(header, members: list[str]):
    big = 2**62
    other = next(p for p in members if p != header.proposer)
    yield "chain_id", [header.chain_id + "x", "other-chain"]
    yield "height", [header.height + 1, big] + ([header.height - 1] if header.height > 1 else [])
    yield "prev_hash", [bytes(32), bytes([header.prev_hash[0] ^ 1]) + header.prev_hash[1:]]
    yield "fl_round", [header.fl_round + 1, 0, big]
    yield "view", [header.view + 1, big]
    yield "proposer", [other]
    yield "time_ms", [0, header.time_ms + 1, 2**63 - 1]
    yield "payload_hash", [bytes(32)]
    yield "updates_root", [bytes(32)]


@pytest.mark.parametrize("resigned", [False, True], ids=["as-signed", "signed-again"])
@pytest.mark.parametrize("height", [2, ROUNDS])
def test_every_header_field_changed_gives_a_verdict_line(results, tmp_path, capsys, height, resigned):
    _, keys, raws = results
    block, _ = decode_block(raws[height])
    tried = 0
    for field, values in _mutations(block.header, sorted(keys)):
        for value in values:
            header = dataclasses.replace(block.header, **{field: value})
            cert = block.certificate
            if resigned:
                sigs = tuple(sign_commit(keys[s.signer], header.chain_id, header.height, header.view, header.hash())
                             for s in cert.signatures)
                cert = Certificate(height=header.height, view=header.view, block_hash=header.hash(), signatures=sigs)
            folder = _copy_with(results, tmp_path, height, dataclasses.replace(block, header=header, certificate=cert).encode())
            for mode in ((), ("--reexec", "no")):
                code, bad = _verify(folder, capsys, *mode)
                tried += 1
                if not resigned:
                    assert (code, bad) == (1, height), (field, value, mode, bad)
                elif code == 0:
                    assert height == ROUNDS, (field, value, mode)  # only the head can be decided otherwise
                else:
                    assert height <= bad <= ROUNDS, (field, value, mode, bad)
    assert tried >= 2 * 17  # every field, two to three values each, both modes


def test_byte_flips_of_blocks_and_blobs_under_reexecution_give_a_fail_line(results, tmp_path, capsys):
    out, _, raws = results
    for height in (1, ROUNDS):
        raw = raws[height]
        for i in range(0, len(raw), max(1, len(raw) // 40)):
            bad = bytearray(raw)
            bad[i] ^= 0x04
            folder = _copy_with(results, tmp_path, height, bytes(bad))
            assert _verify(folder, capsys) == (1, height), i
    blobs = sorted((out / "ledger" / "blobs").rglob("*"))
    blobs = [b for b in blobs if b.is_file()]
    assert len(blobs) > 10
    for blob in blobs[:: max(1, len(blobs) // 8)]:
        folder = _copy_with(results, tmp_path, 1, raws[1])
        target = folder / blob.relative_to(out)
        data = bytearray(target.read_bytes())
        data[len(data) // 2] ^= 0x10
        target.write_bytes(bytes(data))
        code, bad = _verify(folder, capsys)
        assert code == 1 and bad is not None, blob.name


def test_the_explorer_renders_any_stored_block_time(results, tmp_path):
    """A head block whose time a quorum signed at ``2**63 - 1`` (the latest a header takes; ``ledger verify`` fails
    it, see below): the explorer shows it, instead of answering 500 (``year 584556019 is out of range``)."""
    from starlette.testclient import TestClient

    from node.explorer import create_app

    _, keys, raws = results
    block, _ = decode_block(raws[ROUNDS])
    header = dataclasses.replace(block.header, time_ms=2**63 - 1)
    sigs = tuple(sign_commit(keys[s.signer], header.chain_id, header.height, header.view, header.hash())
                 for s in block.certificate.signatures)
    cert = dataclasses.replace(block.certificate, block_hash=header.hash(), signatures=sigs)
    folder = _copy_with(results, tmp_path, ROUNDS, dataclasses.replace(block, header=header, certificate=cert).encode())
    client = TestClient(create_app(folder / "ledger"))
    for url in ("/", "/blocks", f"/blocks/{ROUNDS}", f"/api/blocks/{ROUNDS}", "/api/blocks", f"/api/blocks/{ROUNDS}/page"):
        r = client.get(url)
        assert r.status_code == 200, (url, r.status_code, r.text[-300:])
    assert "9223372036854775807 ms since 1970" in client.get(f"/blocks/{ROUNDS}").text


def test_a_head_a_quorum_signed_with_a_time_beyond_the_auditors_clock_fails_verify(results, tmp_path, capsys):
    """Bounded block time: a head block signed again by its quorum with a time a day ahead of the wall clock, or at
    ``2**63 - 1``, fails ``ledger verify`` at its height (the audit bounds block times by its own clock plus the
    genesis' drift); the same block at the time it had verifies."""
    import time

    _, keys, raws = results
    block, _ = decode_block(raws[ROUNDS])
    day_ahead = time.time_ns() // 1_000_000 + 86_400_000
    for t, expect in ((block.header.time_ms, (0, None)), (day_ahead, (1, ROUNDS)), (2**63 - 1, (1, ROUNDS))):
        header = dataclasses.replace(block.header, time_ms=t)
        sigs = tuple(sign_commit(keys[s.signer], header.chain_id, header.height, header.view, header.hash())
                     for s in block.certificate.signatures)
        cert = dataclasses.replace(block.certificate, block_hash=header.hash(), signatures=sigs)
        folder = _copy_with(results, tmp_path, ROUNDS, dataclasses.replace(block, header=header, certificate=cert).encode())
        assert _verify(folder, capsys, "--reexec", "no") == expect, t
