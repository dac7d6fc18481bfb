"""A failed ``node start`` leaves its data dir as it was.

Real processes (``python -m concilium node start``) on a real SQLite ledger, one per failure cause: before and after,
the data dir holds the same names, sizes, modes and SHA-256s, and the ledger the same journal mode (read through a
read-only connection to a copy); a data dir that did not exist is not created. The causes that fail after the
ledger was read (an address another process took in between: the transport's listener fails; a ledger of another
chain; a corrupt vote log) run against a cleanly stopped ledger, a crashed one (WAL mode, with its ``-wal`` and
``-shm``) and a fresh directory.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import socket
import sqlite3
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from concilium._testnet import free_ports
from concilium.cli import main
from ledger.store import FileBlobStore
from node.config import load_genesis

ROOT = Path(__file__).resolve().parents[3]
NO_EARLY_LISTEN_CHECK = (
    "import sys, node.config as c, node.runtime._node as n; n.check_listen = c.check_listen = lambda addrs: None; "
    "from concilium.cli import main; sys.exit(main(sys.argv[1:]))"
)
"""``node start`` without the bind check before the ledger is opened: as if another process took the port after it
(the race the check leaves); the transport's listener then fails, and the runtime's check after it refuses."""


def snapshot(root: Path) -> dict[str, object] | None:
    """Every path under ``root``: a directory, or (size, mode, SHA-256); for a SQLite file also its journal mode.
    None if ``root`` does not exist."""
    if not root.exists():
        return None
    out: dict[str, object] = {}
    for top, dirs, files in os.walk(root):
        for name in (*dirs, *files):
            p = Path(top, name)
            rel = str(p.relative_to(root))
            if p.is_dir():
                out[rel] = "dir"
                continue
            data = p.read_bytes()
            out[rel] = (len(data), oct(p.stat().st_mode), hashlib.sha256(data).hexdigest())
            if data.startswith(b"SQLite format 3\x00"):
                out[rel + ":journal_mode"] = journal_mode(p)
    return out


def journal_mode(path: Path) -> str:
    """The file's journal mode, through a read-only connection to a copy (with its ``-wal``): the probe itself
    changes nothing beside the ledger."""
    with tempfile.TemporaryDirectory() as tmp:
        for suffix in ("", "-wal"):
            if Path(f"{path}{suffix}").exists():
                shutil.copyfile(f"{path}{suffix}", f"{tmp}/c{suffix}")
        conn = sqlite3.connect(f"file:{tmp}/c?mode=ro", uri=True)
        try:
            return str(conn.execute("PRAGMA journal_mode").fetchone()[0])
        finally:
            conn.close()


@dataclass(frozen=True)
class Net:
    node: Path
    """``nodes/node-0`` of a one-member testnet: its node.toml, genesis, key, data and model."""
    stopped: Path
    """A data dir whose node committed 2 rounds and stopped cleanly (ledger in rollback mode, a vote log)."""
    crashed: Path
    """The same ledger as a writer left it when killed: WAL mode, with ``chain.sqlite-wal`` and ``-shm``."""


@pytest.fixture(scope="module")
def net(tmp_path_factory: pytest.TempPathFactory, one_node: str) -> Net:
    tmp = tmp_path_factory.mktemp("startup")
    (tmp / "one.toml").write_text(one_node)
    assert main(["testnet", "init", "--scenario", str(tmp / "one.toml"), "--out", str(tmp / "net")]) == 0
    node = tmp / "net" / "nodes" / "node-0"
    r = subprocess.run([sys.executable, "-m", "concilium", "node", "start", "--config", str(node / "node.toml"),
                        "--listen", f"/ip4/127.0.0.1/tcp/{free_ports(1)[0]}", "--until-height", "2", "--linger", "0"],
                       capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-2000:]
    stopped = node / "data"
    assert journal_mode(stopped / "ledger" / "chain.sqlite") == "delete" and (stopped / "votes.bin").is_file()
    crashed = tmp / "crashed"
    shutil.copytree(stopped, crashed)
    # a writer killed with its connection open: WAL mode, a -wal (here holding a committed transaction) and a -shm
    kill = ("import os, sqlite3, sys; c = sqlite3.connect(sys.argv[1], isolation_level=None); "
            "c.execute('PRAGMA journal_mode=WAL'); c.execute('PRAGMA wal_autocheckpoint=0'); "
            "c.execute('CREATE TABLE scratch(x)'); os._exit(0)")
    subprocess.run([sys.executable, "-c", kill, str(crashed / "ledger" / "chain.sqlite")], check=True, timeout=30)
    assert {"chain.sqlite-wal", "chain.sqlite-shm"} <= set(os.listdir(crashed / "ledger"))
    return Net(node, stopped, crashed)


@pytest.fixture(scope="module")
def busy_port() -> Iterator[int]:
    """A TCP port another socket listens on (on every interface)."""
    with socket.socket() as s:
        s.bind(("0.0.0.0", 0))
        s.listen()
        yield s.getsockname()[1]


@dataclass(frozen=True)
class Case:
    name: str
    args: tuple[str, ...]
    data: str
    """``stopped``, ``crashed`` (copies of those), ``missing`` (a path under two directories that do not exist) or
    ``empty`` (an empty directory)."""
    error: str
    """In the one line ``node start`` prints."""
    late: bool = False
    """Without the early bind check (:data:`NO_EARLY_LISTEN_CHECK`)."""


def _refuse(net: Net, tmp: Path, case: Case) -> tuple[Case, Path, object, subprocess.CompletedProcess[str]]:
    data = tmp / case.name / "data"
    if case.data in ("stopped", "crashed"):
        shutil.copytree(net.stopped if case.data == "stopped" else net.crashed, data)
    elif case.data == "empty":
        data.mkdir(parents=True)
    else:
        data = tmp / case.name / "a" / "b"
    (tmp / case.name).mkdir(exist_ok=True)
    prepare = {"no-votes": lambda: (data / "votes.bin").unlink(),
               "corrupt-votes": lambda: (data / "votes.bin").write_bytes(b"not a vote log"),
               "no-genesis-blob": lambda: FileBlobStore(data / "ledger" / "blobs").discard(
                   load_genesis(net.node / "genesis.toml").model.digest)}
    for key, fn in prepare.items():
        if case.name.startswith(key):
            fn()
    before = snapshot(data)
    head = [sys.executable, "-c", NO_EARLY_LISTEN_CHECK] if case.late else [sys.executable, "-m", "concilium"]
    listen = () if "--listen" in case.args else ("--listen", f"/ip4/127.0.0.1/tcp/{free_ports(1)[0]}")
    argv = [*head, "node", "start", "--config", str(net.node / "node.toml"), "--data-dir", str(data), *listen,
            "--until-height", "1", "--linger", "0", *case.args]
    r = subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=ROOT)
    return case, data, before, r


def _check(results: list[tuple[Case, Path, object, subprocess.CompletedProcess[str]]]) -> None:
    for case, data, before, r in results:
        assert r.returncode == 2, (case.name, r.stderr[-2000:])
        assert r.stderr.count("\n") == 1 and case.error in r.stderr, (case.name, r.stderr)
        assert snapshot(data) == before, case.name
        if before is None:
            assert not data.parent.exists(), case.name  # nor the parent it would have created


def _run(net: Net, tmp: Path, cases: list[Case]) -> None:
    with ThreadPoolExecutor(2) as pool:  # (the processes, not these threads, do the work)
        _check(list(pool.map(lambda c: _refuse(net, tmp, c), cases)))


def _other_files(net: Net, tmp: Path) -> dict[str, Path]:
    """A genesis of another chain (the same members and model), one whose first round cannot be planned, one that
    is not a genesis, a key of no member, and a node config with an invalid ``[transport]`` table."""
    genesis = (net.node / "genesis.toml").read_text()
    files = {"other-chain": tmp / "other.toml", "no-plan": tmp / "no-plan.toml", "bad-genesis": tmp / "bad.toml",
             "outsider": tmp / "outsider.key", "bad-config": net.node / "bad-config.toml"}
    files["other-chain"].write_text(genesis.replace('chain_id = "', 'chain_id = "other-', 1))
    files["no-plan"].write_text(genesis.replace('mode = "coordinator"', 'mode = "committee"', 1))  # no trainer left
    files["bad-genesis"].write_text(genesis.replace("[model]", "[model", 1))  # not TOML
    assert main(["keygen", "--out", str(files["outsider"])]) == 0
    files["bad-config"].write_text((net.node / "node.toml").read_text() + "\n[transport]\nheader_timeout_s = -1\n")
    return files


def test_a_refused_start_leaves_the_data_dir_as_it_was(net: Net, busy_port: int, tmp_path: Path) -> None:
    """An address taken after the early checks (the start fails once it has replayed its ledger and built its
    transport, and removes what it created), on each kind of data dir, and a refusal that reads a crashed writer's
    ledger (a missing vote log)."""
    f = _other_files(net, tmp_path)
    busy = ("--listen", f"/ip4/0.0.0.0/tcp/{busy_port}")
    late = "cannot listen (address in use or not on this host)"
    _run(net, tmp_path, [
        Case("late-busy-stopped", busy, "stopped", late, late=True),
        Case("late-busy-crashed", busy, "crashed", late, late=True),
        Case("late-busy-missing", busy, "missing", late, late=True),
        Case("no-votes-crashed", (), "crashed", "votes.bin: missing"),
    ])


@pytest.mark.slow
def test_every_refused_start_leaves_the_data_dir_as_it_was(net: Net, busy_port: int, tmp_path: Path) -> None:
    """Every other cause (each refused before the ledger is opened) on a cleanly stopped, a crashed and a fresh data
    dir, and the ones above on the data dirs they did not run on."""
    f = _other_files(net, tmp_path)
    busy = ("--listen", f"/ip4/0.0.0.0/tcp/{busy_port}")
    cases = []
    for data in ("stopped", "crashed", "missing"):
        cases += [
            Case(f"busy-{data}", busy, data, "cannot listen (Address already in use)"),
            Case(f"bad-config-{data}", ("--config", str(f["bad-config"])), data, "header_timeout_s"),
            Case(f"bad-genesis-{data}", ("--genesis", str(f["bad-genesis"])), data, "bad.toml"),
            Case(f"outsider-{data}", ("--key", str(f["outsider"])), data, "is not a member"),
            Case(f"no-data-{data}", ("--data-path", str(tmp_path / "nope.npz")), data, "nope.npz"),
        ]
    cases += [
        Case("other-chain-stopped", ("--genesis", str(f["other-chain"])), "stopped", "ledger of another chain"),
        Case("other-chain-crashed", ("--genesis", str(f["other-chain"])), "crashed", "ledger of another chain"),
        Case("corrupt-votes-stopped", (), "stopped", "not a concilium vote log"),
        Case("late-busy-empty", busy, "empty", "cannot listen (address in use or not on this host)", late=True),
        Case("no-plan-missing", ("--genesis", str(f["no-plan"])), "missing", "first round cannot be planned"),
        Case("no-plan-empty", ("--genesis", str(f["no-plan"])), "empty", "first round cannot be planned"),
        Case("corrupt-votes-crashed", (), "crashed", "not a concilium vote log"),
        Case("no-votes-stopped", (), "stopped", "votes.bin: missing"),
        Case("no-genesis-blob-late-busy", busy, "stopped", "cannot listen (address in use", late=True),
        Case("other-chain-late-busy", ("--genesis", str(f["other-chain"]), *busy), "stopped", "another chain",
             late=True),
    ]
    _run(net, tmp_path, cases)
