"""Shared ledgers and a real ``concilium ledger serve`` process for the explorer's tests.

``sim_results``: one short simulation of the bundled quickstart scenario (committee mode, CMFL, 20 peers, two
Byzantine clients sending the negated model), built once per test session. ``demo_ledger``: a small signed
demo chain. ``serve``: start ``concilium ledger serve LEDGER --port 0`` and yield its URL.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import queue
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from concilium.cli import main
from ledger import ChainContext, genesis_state
from ledger.store import create_ledger

ROUNDS = 2
XSS_NAME = "<img src=x onerror=alert(1)>"


@dataclasses.dataclass(frozen=True)
class SimResults:
    out: Path  # the results folder (ledger/, metrics.csv, scenario.toml, ...)
    byzantine: tuple[str, ...]  # peer ids of the Byzantine clients

    @property
    def ledger(self) -> Path:
        return self.out / "ledger"


@pytest.fixture(scope="session")
def sim_results(tmp_path_factory: pytest.TempPathFactory) -> SimResults:
    from sim import load_scenario, resolve_scenario, run_scenario
    from sim._world import byzantine_indices

    out = tmp_path_factory.mktemp("explorer") / "quickstart"
    summary = run_scenario(resolve_scenario("quickstart"), out=out, rounds=ROUNDS, progress=False, workers=0)
    assert summary["ledger_verified"]
    scenario = load_scenario(out / "scenario.toml")
    genesis = _genesis_of(out / "ledger")
    by_name = {m.name: m.peer_id for m in genesis.members}
    byz = tuple(by_name[f"node-{i}"] for i in byzantine_indices(scenario, genesis))
    assert len(byz) == 2
    return SimResults(out, byz)


def _genesis_of(ledger: Path):  # noqa: ANN202
    from ledger.store import open_ledger

    store, _ = open_ledger(ledger, readonly=True)
    with store:
        return store.genesis()


def make_demo_ledger(path: Path, *, blocks: int = 3, name: str = "", with_blobs: bool = True, **kw: int) -> list:
    """A signed demo chain in ``path`` whose first member's display name is ``name``; returns the blocks."""
    from ledger.testing import LedgerDemo

    demo = LedgerDemo(**{"members": 6, "committee_size": 4, "updates_per_block": 3, "floats_per_update": 8, "seed": 5, **kw})
    if name:
        first, *rest = demo.genesis.members
        demo.genesis = dataclasses.replace(demo.genesis, members=(dataclasses.replace(first, name=name), *rest))
        demo.ctx = ChainContext(demo.genesis)
        demo.state = genesis_state(demo.ctx)
    store, blobs = create_ledger(path, demo.genesis)
    out = []
    with store:
        for _ in range(blocks):
            block, bl = demo.next_block()
            if with_blobs:
                for data in bl.values():
                    blobs.put(data)
            store.append(block)
            out.append(block)
    return out


@pytest.fixture
def demo_ledger(tmp_path: Path) -> Path:
    make_demo_ledger(tmp_path / "L", name=XSS_NAME)
    return tmp_path / "L"


def cli(*argv: str) -> tuple[int, str]:
    """Run ``concilium ARGV`` in this process; (exit code, stdout)."""
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(io.StringIO()):
        code = main(list(argv))
    return code, buf.getvalue()


def cli_json(*argv: str) -> object:
    code, out = cli(*argv)
    assert code == 0, out
    return json.loads(out)


@contextlib.contextmanager
def serve(ledger: Path, *extra: str, timeout_s: float = 90.0) -> Iterator[str]:
    """A real ``concilium ledger serve`` process on a free port; yields its URL; stopped with SIGTERM (exit 0)."""
    err = tempfile.TemporaryFile("w+")  # a file, not a pipe nobody reads: the server never blocks on it
    proc = subprocess.Popen(
        [sys.executable, "-m", "concilium", "ledger", "serve", str(ledger), "--port", "0", *extra],
        stdout=subprocess.PIPE, stderr=err, text=True,
    )
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [*map(lines.put, proc.stdout), lines.put("")], daemon=True).start()  # type: ignore[arg-type]
    try:
        try:
            first = lines.get(timeout=timeout_s)
        except queue.Empty:
            raise AssertionError(f"ledger serve printed nothing in {timeout_s} s") from None
        assert " at http://127.0.0.1:" in first, first + _read(err)
        yield first.split(" at ", 1)[1].split()[0]
    finally:
        proc.terminate()
        try:
            code = proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise
    assert code == 0, _read(err)


def _read(f) -> str:  # noqa: ANN001
    f.seek(0)
    return f.read()


# the helpers as fixtures (test modules do not import conftest: --import-mode=importlib)


@pytest.fixture(scope="session")
def server():  # noqa: ANN201
    return serve


@pytest.fixture(scope="session")
def run_cli():  # noqa: ANN201
    return cli


@pytest.fixture(scope="session")
def run_cli_json():  # noqa: ANN201
    return cli_json


@pytest.fixture(scope="session")
def demo_factory():  # noqa: ANN201
    return make_demo_ledger
