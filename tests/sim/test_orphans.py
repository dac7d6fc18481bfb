"""No orphaned processes: killing only the main process of a real `concilium sim run` -
SIGKILL as the OOM killer would, or SIGTERM - leaves neither a training worker nor the ledger writer alive,
and the results ledger the writer left verifies (with re-execution, through the CLI)."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from concilium.cli import main as cli_main
from ledger.store import open_ledger

SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"
WORKERS = 2


def _start(out: Path) -> tuple[subprocess.Popen[bytes], Path]:
    err = out.parent / "stderr.txt"
    with open(err, "wb") as f:  # a file, not a pipe: a surviving helper would keep a pipe open and hang the test
        proc = subprocess.Popen(
            [sys.executable, "-m", "concilium", "sim", "run", str(SCENARIOS / "quickstart.toml"), "--rounds", "2000",
             "--workers", str(WORKERS), "--quiet", "--out", str(out)],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=f,
        )
    return proc, err


def _height(ledger: Path) -> int:
    try:
        store, _ = open_ledger(ledger, readonly=True, check_index=False)
        with store:
            return store.height()
    except Exception:  # noqa: BLE001 - not created yet, or caught mid-creation
        return 0


def _wait_for_blocks(proc: subprocess.Popen[bytes], ledger: Path, n: int) -> None:
    deadline = time.monotonic() + 90
    while _height(ledger) < n:
        assert proc.poll() is None, f"the run ended early (exit {proc.returncode})"
        assert time.monotonic() < deadline, f"no {n} blocks after 90 s"
        time.sleep(0.1)


def _stat(pid: int) -> tuple[str, int] | None:
    """(state, start time) of a process, None if it does not exist."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    fields = text.rsplit(")", 1)[1].split()
    return fields[0], int(fields[19])


def _children(pid: int) -> dict[int, int]:
    """The live children of ``pid`` (from every thread's children list), with their start times."""
    kids: dict[int, int] = {}
    for task in os.listdir(f"/proc/{pid}/task"):
        for c in Path(f"/proc/{pid}/task/{task}/children").read_text().split():
            st = _stat(int(c))
            if st is not None:
                kids[int(c)] = st[1]
    return kids


def _alive(kids: dict[int, int]) -> list[int]:
    """Those of ``kids`` still running (a zombie waiting for a reaper that never comes is dead)."""
    out = []
    for pid, started in kids.items():
        st = _stat(pid)
        if st is not None and st[1] == started and st[0] not in ("Z", "X"):
            out.append(pid)
    return out


def _wait_gone(kids: dict[int, int], seconds: float) -> list[int]:
    deadline = time.monotonic() + seconds
    while (alive := _alive(kids)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return alive


def _kill_left(proc: subprocess.Popen[bytes], kids: dict[int, int]) -> None:
    if proc.poll() is None:
        proc.kill()
        proc.wait()
    for pid in _alive(kids):  # a failing test leaves nothing behind either
        os.kill(pid, signal.SIGKILL)


def _verify(ledger: Path, capsys) -> str:
    capsys.readouterr()
    rc = cli_main(["ledger", "verify", str(ledger)])
    out = capsys.readouterr().out
    assert rc == 0, out
    return out


def _leftover_tmp(ledger: Path) -> list[Path]:
    return sorted(p for p in (ledger / "blobs").rglob(".tmp-*"))


def _helpers(proc: subprocess.Popen[bytes]) -> dict[int, int]:
    deadline = time.monotonic() + 10
    while len(kids := _children(proc.pid)) < WORKERS + 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    return kids


def test_sigkill_of_the_main_process_leaves_no_helper_alive_and_a_ledger_that_verifies(tmp_path, capsys):
    out = tmp_path / "run"
    proc, _ = _start(out)
    kids: dict[int, int] = {}
    try:
        _wait_for_blocks(proc, out / "ledger", 2)
        kids = _helpers(proc)
        assert len(kids) == WORKERS + 1, f"expected {WORKERS} training workers and the ledger writer: {kids}"
        proc.send_signal(signal.SIGKILL)
        assert proc.wait(timeout=10) == -signal.SIGKILL
        alive = _wait_gone(kids, 10)
        assert not alive, f"helpers outlived the killed simulation: {alive}"
    finally:
        _kill_left(proc, kids)
    ledger = out / "ledger"
    assert _height(ledger) >= 2
    assert "OK" in _verify(ledger, capsys)
    assert not _leftover_tmp(ledger), "the writer stops after a whole batch, never inside one"


def test_sigterm_of_the_main_process_is_a_clean_stop(tmp_path, capsys):
    # SIGTERM to the main process alone (`kill PID`, a service manager): the same clean stop as Ctrl-C - the
    # helpers stopped, every decided block drained, one line and exit 143 (128 + SIGTERM).
    out = tmp_path / "run"
    proc, err = _start(out)
    kids: dict[int, int] = {}
    try:
        _wait_for_blocks(proc, out / "ledger", 2)
        kids = _helpers(proc)
        assert len(kids) == WORKERS + 1, kids
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 143
        alive = _wait_gone(kids, 10)
        assert not alive, f"helpers outlived the stopped simulation: {alive}"
    finally:
        _kill_left(proc, kids)
    assert err.read_text().splitlines() == ["concilium: terminated"]
    ledger = out / "ledger"
    assert _height(ledger) >= 2
    assert "OK" in _verify(ledger, capsys)
    assert not _leftover_tmp(ledger)
    # the rounds completed are written too, marked partial, beside the ledger
    summary = json.loads((out / "summary.json").read_text())
    with open(out / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    assert summary["partial"] is True and summary["rounds"] == len(rows) >= 2 and summary["ledger_verified"], summary
    assert summary["rounds"] <= _height(ledger) and (out / "accuracy.png").is_file()
