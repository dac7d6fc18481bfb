"""Read-only audits: ``ledger verify``, ``show``, ``export`` and ``proof`` on a ledger in a read-only
directory or on a read-only mount, with or without its ``-wal``/``-shm`` files, create nothing beside it;
and a ``chain.sqlite`` copied without its WAL is reported, never a silent "OK ... 0 blocks".

The on-disk states are built the way they arise: a writer that closed cleanly; a writer killed before
any checkpoint (its blocks only in the WAL, with ``-wal`` and ``-shm`` beside the file), then the same
with the ``-shm`` or both files lost; and ``chain.sqlite`` copied alone from a live writer of ours
(which checkpoints every batch).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from concilium.cli import main
from ledger.store import create_ledger, open_ledger
from ledger.testing import LedgerDemo

CHILD = Path(__file__).with_name("_readonly_child.py")
N = 4  # blocks in every ledger here
WARNING = "chain.sqlite is in WAL mode with no chain.sqlite-wal beside it: blocks after the last checkpoint may be missing"


def _blocks():
    demo = LedgerDemo(members=6, committee_size=4, updates_per_block=3, floats_per_update=16, seed=4)
    return demo.genesis, [demo.next_block() for _ in range(N)]


def _rows(blocks):
    return [(b.height, b.hash(), b.header.prev_hash, b.encode()) for b, _ in blocks]


def _build_states(root: Path) -> dict[str, Path]:
    """Every state under ``root``, one ledger directory each; returns ``{state: ledger dir}``."""
    genesis, blocks = _blocks()
    states = {}

    closed = root / "closed"
    store, blobs = create_ledger(closed, genesis)
    for b, bl in blocks:
        blobs.put_many(list(bl.values()))
        store.append(b)
    store.close()
    states["closed"] = closed

    # a writer killed before any checkpoint (as a concilium before this change, or SQLite's own WAL writer,
    # could leave it): blocks 1..N only in the WAL; snapshot the directory while the connection is open
    base = root / "base"
    store, blobs = create_ledger(base, genesis)
    store.close()
    for _, bl in blocks:
        blobs.put_many(list(bl.values()))
    conn = sqlite3.connect(base / "chain.sqlite", isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA wal_autocheckpoint=0")
    conn.execute("BEGIN IMMEDIATE")
    conn.executemany("INSERT INTO blocks(height, hash, prev_hash, data) VALUES (?, ?, ?, ?)", _rows(blocks))
    conn.execute("COMMIT")
    for name, drop in (("wal+shm", ()), ("wal", ("-shm",)), ("no-wal", ("-shm", "-wal"))):
        shutil.copytree(base, root / name)
        for suffix in drop:
            (root / name / f"chain.sqlite{suffix}").unlink()
        states[name] = root / name
    conn.close()
    shutil.rmtree(base)

    # chain.sqlite copied alone while a writer of ours has it open: every batch was checkpointed into it
    live = root / "live-writer"
    store, blobs = create_ledger(root / "writer", genesis)
    for b, bl in blocks:
        blobs.put_many(list(bl.values()))
        store.append(b)
    live.mkdir()
    shutil.copyfile(root / "writer" / "chain.sqlite", live / "chain.sqlite")
    shutil.copytree(root / "writer" / "blobs", live / "blobs")
    store.close()
    shutil.rmtree(root / "writer")
    states["live-writer"] = live
    for name in ("wal+shm", "wal"):  # the files really are what their names say
        assert (states[name] / "chain.sqlite-wal").stat().st_size > 0
    assert (states["wal+shm"] / "chain.sqlite-shm").exists() and not (states["wal"] / "chain.sqlite-shm").exists()
    return states


def _peer(blocks, height):
    return blocks[height - 1][0].payload.updates[0].peer


def _commands(states: dict[str, Path]) -> list[tuple[str, list[str]]]:
    _, blocks = _blocks()
    cmds = []
    for name, d in states.items():
        L = str(d)
        cmds += [
            (name, ["ledger", "verify", L, "--reexec", "no"]),  # (a demo's rounds are synthetic: nothing to re-execute)
            (name, ["ledger", "verify", L, "--expect-height", str(N), "--reexec", "no"]),
            (name, ["ledger", "show", L]),
            (name, ["ledger", "show", L, "2"]),
            (name, ["ledger", "export", L, "--json"]),
            (name, ["ledger", "proof", L, "2", _peer(blocks, 2)]),
        ]
    return cmds


def _check(cmds, runs) -> None:
    """What every state must give, whichever way the ledger was made unwritable."""
    assert len(runs) == len(cmds)
    for (state, argv), r in zip(cmds, runs):
        what = f"{state}: {' '.join(argv[:2])} {' '.join(argv[3:])}"
        lost = state == "no-wal"  # its blocks were only in the WAL that is gone
        warns = state in ("no-wal", "live-writer")
        sub = argv[1]
        if sub == "verify":
            line = r["out"].strip()
            assert r["out"].count("\n") == 1, (what, r)
            if lost and "--expect-height" in argv:
                assert r["code"] == 1 and line.startswith("FAIL at height 1: missing (expected 4 blocks)"), (what, r)
            elif lost:
                assert r["code"] == 0 and line.startswith("OK: chain concilium-demo verified, 0 blocks"), (what, r)
            else:
                assert r["code"] == 0 and line.startswith(f"OK: chain concilium-demo verified, {N} blocks"), (what, r)
            assert line.endswith(f"; WARNING: {WARNING}") == warns, (what, r)
            continue
        if lost and (sub == "proof" or (sub == "show" and len(argv) == 4)):
            assert r["code"] == 2 and r["err"].count("\n") == 1, (what, r)
            assert f"no block at height 2 (height is 0; {WARNING})" in r["err"], (what, r)
            continue
        assert r["code"] == 0, (what, r)
        assert (f"concilium: warning: {WARNING}" in r["err"]) == warns, (what, r)
        if sub == "show" and len(argv) == 3:
            assert f"height {0 if lost else N}" in r["out"].splitlines()[0], (what, r)
        elif sub == "show":
            assert json.loads(r["out"])["height"] == 2, (what, r)
        elif sub == "export":
            doc = json.loads(r["out"])
            assert len(doc["blocks"]) == (0 if lost else N) and ("warning" in doc) == warns, (what, r)
        else:
            assert json.loads(r["out"])["format"] == "concilium-inclusion-proof/1", (what, r)


def _snapshot(root: Path) -> dict[str, bytes | None]:
    """Every path under ``root`` with its bytes; a ``-shm`` by name only: it is SQLite's shared-memory index,
    where every WAL reader, read-only ones included, takes its read marks (in place, when it may write)."""
    return {
        str(p.relative_to(root)): None if p.name.endswith("-shm") or p.is_dir() else p.read_bytes()
        for p in sorted(root.rglob("*"))
    }


def test_audits_in_a_writable_directory_create_nothing(tmp_path, monkeypatch):
    """Where SQLite *could* create ``-wal``/``-shm`` beside the file (a plain ``mode=ro`` open of a WAL file
    does), the audits still create nothing and change no byte, and leave no private copy behind."""
    states = _build_states(tmp_path / "ledgers")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setenv("TMPDIR", str(scratch))
    monkeypatch.setattr("tempfile.tempdir", None)
    before = _snapshot(tmp_path / "ledgers")
    cmds = _commands(states)
    runs = []
    for _, argv in cmds:
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(argv)
        runs.append({"code": code, "out": out.getvalue(), "err": err.getvalue()})
    _check(cmds, runs)
    assert _snapshot(tmp_path / "ledgers") == before
    assert list(scratch.iterdir()) == []


# --- unwritable for real -----------------------------------------------------------------------


def _chmod_tree(root: Path, *, writable: bool) -> None:
    for p in [root, *root.rglob("*")]:
        if p.is_dir():
            p.chmod(0o755 if writable else 0o555)
        else:
            p.chmod(0o644 if writable else 0o444)


def _can_mount_read_only() -> bool:
    if os.geteuid() != 0 or shutil.which("unshare") is None or shutil.which("mount") is None:
        return False
    r = subprocess.run(["unshare", "-m", "--propagation", "private", "true"], capture_output=True)
    return r.returncode == 0


_MOUNT_RO = 'mount --bind "$1" "$1" && mount -o remount,bind,ro "$1" && shift && exec "$@"'


@pytest.mark.parametrize("how", ["directory", "mount"])
def test_audits_of_a_read_only_ledger(tmp_path, how, write_privileges_dropped):
    if how == "mount" and not _can_mount_read_only():
        pytest.skip("a read-only bind mount needs root and mount namespaces (unshare -m)")
    root = tmp_path / "ledgers"
    states = _build_states(root)
    scratch = tmp_path / "scratch"
    scratch.mkdir(mode=0o777)
    scratch.chmod(0o777)  # the private copies go here, whoever the child runs as
    cmds = _commands(states)
    before = _snapshot(root)
    child = [sys.executable, str(CHILD), str(root), json.dumps([argv for _, argv in cmds])]
    env = {**os.environ, "TMPDIR": str(scratch), "PYTHONDONTWRITEBYTECODE": "1"}
    if how == "directory":
        _chmod_tree(root, writable=False)
        try:
            r = subprocess.run(
                child, capture_output=True, text=True, env=env, cwd=tmp_path,
                preexec_fn=write_privileges_dropped, timeout=300,
            )
        finally:
            _chmod_tree(root, writable=True)
    else:
        r = subprocess.run(
            ["unshare", "-m", "--propagation", "private", "sh", "-c", _MOUNT_RO, "sh", str(root), *child],
            capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300,
        )
    assert r.returncode == 0, r.stderr
    result = json.loads(r.stdout)
    expected = "Read-only file system" if how == "mount" else "Permission denied"
    assert result["probe"] == expected, "the ledger was writable for the child: this test would prove nothing"
    _check(cmds, result["runs"])
    assert _snapshot(root) == before
    assert list(scratch.iterdir()) == []


def test_verify_reads_blocks_that_are_only_in_the_wal(tmp_path):
    """The ``wal+shm`` and ``wal`` states hold their blocks only in the WAL: a reader that ignored it (as
    ``immutable=1`` does) would see 0 blocks, so N blocks proves the WAL was read."""
    states = _build_states(tmp_path)
    main_only = sqlite3.connect(f"{(states['no-wal'] / 'chain.sqlite').as_uri()}?mode=ro&immutable=1", uri=True)
    assert main_only.execute("SELECT count(*) FROM blocks").fetchone() == (0,)
    main_only.close()
    for name in ("wal+shm", "wal"):
        store, _ = open_ledger(states[name], readonly=True)
        with store:
            assert store.height() == N and store.warning is None


def test_copy_wal_reads_the_wal_from_a_copy_and_changes_no_byte_beside_the_file(tmp_path):
    """``copy_wal=True`` (a node's start, which may still fail: ``node.runtime.load_chain``) reads a crashed
    writer's blocks from a private copy: the WAL's blocks are there, and no byte beside the file changes, the
    ``-shm`` included (a read-only connection in place may rebuild that WAL index)."""
    from ledger.store import SqliteBlockStore

    states = _build_states(tmp_path)
    for name in ("wal+shm", "wal", "no-wal", "closed"):
        d = states[name]
        before = {p.name: p.read_bytes() for p in d.iterdir() if p.is_file()}
        with SqliteBlockStore.open(d / "chain.sqlite", readonly=True, copy_wal=True) as store:
            assert store.readonly and store.height() == (0 if name == "no-wal" else N), name
        assert {p.name: p.read_bytes() for p in d.iterdir() if p.is_file()} == before, name
    with pytest.raises(ValueError, match="copy_wal"):
        SqliteBlockStore.open(states["closed"] / "chain.sqlite", copy_wal=True)
