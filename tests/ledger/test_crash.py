"""Crash consistency: a child appending blocks is SIGKILLed at random instants, again and again.

Every reopen must yield a valid prefix (full audit with blobs passes), the height never goes
backwards, and the store accepts further appends from where it stopped.
"""

import random
import signal
import subprocess
import sys
import time
from pathlib import Path

from ledger import audit_chain
from ledger.store import open_ledger
from ledger.testing import LedgerDemo

CHILD = Path(__file__).with_name("_crash_child.py")
KILLS = 24


def _run_until_killed(path: Path, delay: float) -> int:
    proc = subprocess.Popen(
        [sys.executable, str(CHILD), str(path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        line = proc.stdout.readline()  # type: ignore[union-attr]
        assert line.startswith("ready "), f"child failed to start: {line!r} {proc.stderr.read()!r}"  # type: ignore[union-attr]
        time.sleep(delay)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.stdout.close()  # type: ignore[union-attr]
        proc.stderr.close()  # type: ignore[union-attr]
    assert proc.returncode == -signal.SIGKILL, f"child exited by itself with {proc.returncode}"
    return int(line.split()[1])


def test_kill_minus_nine_leaves_a_valid_prefix(tmp_path: Path) -> None:
    rng = random.Random(20261125)
    path = tmp_path / "ledger"
    heights = []
    for i in range(KILLS):
        start_height = _run_until_killed(path, rng.uniform(0.0, 0.15))
        store, blobs = open_ledger(path)  # read-write open: runs WAL recovery and the invariant checks
        with store:
            report = audit_chain(store.genesis(), store.iter_rows(), blobs=blobs)
            assert report.ok, f"kill {i}: {report.line()}"
            assert report.height == store.height() >= start_height, f"kill {i}: height went backwards"
        heights.append(report.height)
    assert heights == sorted(heights)
    assert heights[-1] > heights[0], f"the child never appended anything: {heights}"
    # The store accepts further appends after the last crash.
    demo = LedgerDemo(members=7, committee_size=4, updates_per_block=5, floats_per_update=512, seed=3)
    store, blobs = open_ledger(path)
    with store:
        for _ in range(store.height()):
            demo.next_block()
        for _ in range(3):
            block, bl = demo.next_block()
            for data in bl.values():
                blobs.put(data)
            store.append(block)
        report = audit_chain(store.genesis(), store.iter_rows(), blobs=blobs)
    assert report.ok and report.height == heights[-1] + 3, report.line()
