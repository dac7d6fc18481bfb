"""A running node that can no longer write its data dir stops with one line, whichever task met the failed write: no
traceback, no exception group, and no vote beyond what its disk holds (``node.PersistError``)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from concilium._testnet import free_ports
from concilium.cli import main

ROOT = Path(__file__).resolve().parents[3]


def _stored_height(log: Path) -> int:
    heights = [json.loads(line).get("height", 0) for line in log.read_text().splitlines()
               if line.startswith("{") and '"event": "decided"' in line] if log.exists() else []
    return max(heights, default=0)


def test_a_node_whose_blob_directory_is_gone_stops_with_one_line(tmp_path: Path, one_node: str) -> None:
    (tmp_path / "one.toml").write_text(one_node)
    assert main(["testnet", "init", "--scenario", str(tmp_path / "one.toml"), "--out", str(tmp_path / "net")]) == 0
    node = tmp_path / "net" / "nodes" / "node-0"
    log = tmp_path / "node.log"
    with log.open("w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "concilium", "node", "start", "--config", str(node / "node.toml"), "--log-format",
             "json", "--listen", f"/ip4/127.0.0.1/tcp/{free_ports(1)[0]}", "--until-height", "100000"],
            stdout=out, stderr=subprocess.PIPE, text=True, cwd=ROOT)
        try:
            deadline = time.monotonic() + 90
            while _stored_height(log) < 2 and proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.1)
            assert _stored_height(log) >= 2, log.read_text()[-2000:]
            # the blob files' directory disappears under the running node (a disk unmounted, a careless clean-up):
            # the next blob it writes (an update it trained, a decided model) fails with an OSError
            (node / "data" / "ledger" / "blobs").rename(tmp_path / "blobs-gone")  # (atomic: the node writes on)
            _, err = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert proc.returncode == 2, err  # (an error, as every one-line error of the CLI)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("concilium: error: ") and "cannot write" in lines[0], err
    assert "Traceback" not in err and "ExceptionGroup" not in err
    events = [json.loads(line) for line in log.read_text().splitlines() if line.startswith("{")]
    fatal = [e for e in events if e.get("event") == "fatal"]
    assert len(fatal) == 1 and "cannot write" in fatal[0]["error"], fatal
    assert events[-1]["event"] == "stopped"  # the store closed cleanly after it
