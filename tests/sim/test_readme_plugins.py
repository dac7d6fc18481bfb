"""README "Add your own strategy, aggregator or attack": the three files as printed there, run as printed.

The blocks are taken from README.md by their first line (``# my_plugins.py``, ...), written to a folder and run
with ``python run_mine.py`` in a fresh process (the registrations must not leak into this one: the contract
tests run over every registered aggregator and attack). Then the ledger shows that each plug-in did its part.
"""

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from starlette.testclient import TestClient

from learning import blob_to_vector
from ledger.store import open_ledger
from node.explorer import create_app
from sim import ledger_verdict

README = Path(__file__).resolve().parents[2] / "README.md"
FILES = ("my_plugins.py", "my_scenario.toml", "run_mine.py")


def readme_files() -> dict[str, str]:
    section = README.read_text(encoding="utf-8").split("## Add your own strategy, aggregator or attack", 1)[1]
    section = section.split("\n## ", 1)[0]
    blocks = re.findall(r"```(?:python|toml)\n(.*?)```", section, flags=re.S)
    files = {b.split("\n", 1)[0].removeprefix("# "): b for b in blocks}
    assert sorted(files) == sorted(FILES), sorted(files)
    return files


def test_readme_plugin_example_runs_as_printed(tmp_path):
    for name, text in readme_files().items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    r = subprocess.run([sys.executable, "run_mine.py"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.startswith("OK: chain sim-my-plugins-0 verified, 2 blocks"), r.stdout
    assert "(True, 'OK: chain sim-my-plugins-0 verified" in r.stdout, r.stdout

    summary = json.loads((tmp_path / "results" / "mine" / "summary.json").read_text())
    assert summary["algorithm"] == "aggregated_step" and len(summary["byzantine_clients"]) == 1
    store, blobs = open_ledger(tmp_path / "results" / "mine" / "ledger", readonly=True)
    with store:
        names = {m.peer_id: m.name for m in store.genesis().members}
        byzantine = next(p for p, n in names.items() if n == "node-" + summary["byzantine_clients"][0][1:])
        for height in (1, 2):
            payload = store.get(height).payload
            assert payload.record["algorithm"] == "aggregated_step"  # the strategy ran...
            assert payload.record["aggregator"] == "nnm(f=1) > midrange"  # ...with the plug-in aggregator
            norms = {u.peer: float(np.linalg.norm(blob_to_vector(blobs.get(u.digest)))) for u in payload.updates}
            honest = [v for p, v in norms.items() if p != byzantine]
            assert len(honest) == 5 and norms[byzantine] > 2 * max(honest), norms  # flip_scale(factor=4.0) upload


def test_an_auditor_without_the_plug_ins_never_says_ok(tmp_path):
    """Issue 32 item 3: this process and the ``concilium`` command lack the plug-ins, so they cannot re-execute the
    example's rounds. ``ledger verify`` says so, naming the missing strategy, and exits 3; ``--reexec no`` (asked
    for) is an OK; the explorer's audit reports ``not_reexecuted`` (amber), never ``ok``; ``ledger_verdict`` (the
    end-of-run verdict of ``sim run`` and ``testnet local``) the same."""
    for name, text in readme_files().items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    r = subprocess.run([sys.executable, "run_mine.py"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    ledger = tmp_path / "results" / "mine" / "ledger"
    cli = [sys.executable, "-m", "concilium", "ledger", "verify", str(ledger)]
    r = subprocess.run(cli, capture_output=True, text=True, timeout=300)
    assert r.returncode == 3, r.stdout + r.stderr
    line = r.stdout.strip()
    assert line.startswith("NOT RE-EXECUTED: chain sim-my-plugins-0 verified, 2 blocks") and "\n" not in line, line
    assert "its rounds were not re-executed: algorithm 'aggregated_step' cannot be built here: unknown strategy " \
           "'aggregated_step'" in line, line
    r = subprocess.run([*cli, "--reexec", "no"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and r.stdout.startswith("OK: ") and "(rounds not re-executed: --reexec no)" in r.stdout
    status, verdict = ledger_verdict(ledger)
    assert status == "not_reexecuted" and verdict == line
    c = TestClient(create_app(ledger))
    assert c.post("/api/audit", headers={"x-concilium-audit": "1"}).status_code in (200, 202)
    for _ in range(600):
        s = c.get("/api/audit").json()
        if s["state"] == "done":
            break
        time.sleep(0.1)
    assert s["state"] == "done" and s["ok"] is False and s["status"] == "not_reexecuted", s
    assert s["line"].startswith("NOT RE-EXECUTED: ") and "unknown strategy 'aggregated_step'" in s["line"]
