"""README "Add your own strategy, aggregator or attack": the three files as printed there, run as printed.

The blocks are taken from README.md by their first line (``# my_plugins.py``, ...), written to a folder and run
with ``python run_mine.py`` in a fresh process (the registrations must not leak into this one: the contract
tests run over every registered aggregator and attack). Then the ledger shows that each plug-in did its part.
"""

import json
import os
import re
import shutil
import subprocess
import sys
import time
import tomllib
import urllib.request
from pathlib import Path

import numpy as np
import pytest
from starlette.testclient import TestClient

from learning import blob_to_vector
from ledger.store import open_ledger
from node.explorer import create_app
from sim import ledger_verdict

def test_readme_plugin_example_runs_as_printed(tmp_path, readme_plugins):
    readme_plugins(tmp_path)
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


def _audit_over_http(url: str) -> dict:
    req = urllib.request.Request(url + "/api/audit", method="POST", headers={"x-concilium-audit": "1"})
    urllib.request.urlopen(req, timeout=30).read()
    for _ in range(1200):
        s = json.loads(urllib.request.urlopen(url + "/api/audit", timeout=30).read())
        if s["state"] == "done":
            return s
        time.sleep(0.1)
    raise AssertionError("the audit did not finish")


def test_the_app_through_the_command_line(tmp_path, readme_plugins):
    """The same files as an app through the command line (``app = "my_plugins.py"``). ``sim run`` loads
    it, the genesis pins it, the results folder keeps a copy, and ``ledger verify`` and ``ledger serve``'s audit
    re-execute every round with it. Without it, an auditor never says OK (exit 3, naming the pinned app and the
    missing strategy); ``--app`` supplies it; a changed app is refused with both digests (exit 2). The checks in
    this process run on a copy of the ledger with no app beside it, so the plug-ins never load here."""
    readme_plugins(tmp_path)
    cli = [sys.executable, "-m", "concilium"]

    def run(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*cli, *argv], cwd=tmp_path, capture_output=True, text=True, timeout=300)

    r = run("sim", "run", "my_scenario.toml", "--out", "results/cli", "--quiet")
    assert r.returncode == 0 and "rounds re-executed" in r.stdout, r.stdout + r.stderr
    out = tmp_path / "results" / "cli"
    assert (out / "app" / "my_plugins.py").read_bytes() == (tmp_path / "my_plugins.py").read_bytes()
    store, _ = open_ledger(out / "ledger", readonly=True)
    with store:
        pin = dict(store.genesis().protocol.params["app"])
    assert pin["name"] == "my_plugins" and len(pin["digest"]) == 64
    r = run("ledger", "verify", "results/cli/ledger")
    assert r.returncode == 0 and r.stdout.startswith("OK: chain sim-my-plugins-0 verified, 2 blocks") and \
        "rounds re-executed" in r.stdout, r.stdout + r.stderr
    summary = json.loads((out / "summary.json").read_text())
    r = subprocess.run(summary["reproduce"].replace("concilium", " ".join(cli), 1).split() + ["--out", "results/again",
                       "--quiet"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and summary["head_hash"][:16] in r.stdout, r.stdout + r.stderr  # reproduced, app included

    moved = tmp_path / "moved"
    shutil.copytree(out / "ledger", moved / "ledger")
    r = run("ledger", "verify", str(moved / "ledger"))
    assert r.returncode == 3 and r.stdout.startswith("NOT RE-EXECUTED: chain sim-my-plugins-0 verified"), r.stdout
    assert f"the ledger's genesis pins app 'my_plugins' (digest {pin['digest']})" in r.stdout, r.stdout
    assert "unknown strategy 'aggregated_step'" in r.stdout and r.stdout.count("\n") == 1, r.stdout
    r = run("ledger", "verify", str(moved / "ledger"), "--app", "my_plugins.py")
    assert r.returncode == 0 and "rounds re-executed" in r.stdout, r.stdout + r.stderr
    (tmp_path / "changed").mkdir()
    (tmp_path / "changed" / "my_plugins.py").write_text((tmp_path / "my_plugins.py").read_text() + "# changed\n")
    r = run("ledger", "verify", str(moved / "ledger"), "--app", "changed/my_plugins.py")
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and pin["digest"] in r.stderr and "has digest" in r.stderr, r.stderr
    r = run("ledger", "verify", str(moved / "ledger"), "--reexec", "no")
    assert r.returncode == 0 and "(rounds not re-executed: --reexec no)" in r.stdout
    # a results folder whose scenario.toml names other code: refused by its digest before it is imported (only the
    # pinned code ever runs in an auditor)
    forged = tmp_path / "forged"
    shutil.copytree(out / "ledger", forged / "ledger")
    (forged / "app").mkdir()
    (forged / "app" / "my_plugins.py").write_text(f"open({str(tmp_path / 'ran')!r}, 'w').close()\n")
    (forged / "scenario.toml").write_text('app = "app/my_plugins.py"\n')
    r = run("ledger", "verify", str(forged / "ledger"))
    assert r.returncode == 3 and "has digest" in r.stdout and pin["digest"] in r.stdout, r.stdout + r.stderr
    assert not (tmp_path / "ran").exists(), "the unpinned app was imported"
    # installed: a distribution whose entry point (group concilium.apps) is the pinned name
    site = tmp_path / "site"
    (site / "my_plugins-0.1.dist-info").mkdir(parents=True)
    shutil.copyfile(tmp_path / "my_plugins.py", site / "my_plugins.py")
    (site / "my_plugins-0.1.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: my-plugins\nVersion: 0.1\n")
    (site / "my_plugins-0.1.dist-info" / "entry_points.txt").write_text("[concilium.apps]\nmy_plugins = my_plugins\n")
    r = subprocess.run([*cli, "ledger", "verify", str(moved / "ledger")], cwd=site, capture_output=True,
                       text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(site)})
    assert r.returncode == 0 and "rounds re-executed" in r.stdout, r.stdout + r.stderr

    # this process lacks the plug-ins: the end-of-run verdict function and the explorer's audit say so
    status, verdict = ledger_verdict(moved / "ledger")
    assert status == "not_reexecuted" and verdict.startswith("NOT RE-EXECUTED: ") and "pins app 'my_plugins'" in verdict
    c = TestClient(create_app(moved / "ledger"))
    assert c.post("/api/audit", headers={"x-concilium-audit": "1"}).status_code in (200, 202)
    for _ in range(600):
        s = c.get("/api/audit").json()
        if s["state"] == "done":
            break
        time.sleep(0.1)
    assert s["state"] == "done" and s["ok"] is False and s["status"] == "not_reexecuted", s

    # ledger serve of the results folder: its audit re-executes with the app copied there
    serve = subprocess.Popen([*cli, "ledger", "serve", "results/cli/ledger", "--port", "0"], cwd=tmp_path,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = serve.stdout.readline()
        url = re.search(r"(http://\S+)", line).group(1).rstrip("/")
        s = _audit_over_http(url)
        assert s["ok"] is True and s["status"] == "ok" and "rounds re-executed" in s["line"], s
    finally:
        serve.terminate()
        serve.wait(timeout=30)


def test_nodes_load_the_pinned_app_and_refuse_another(tmp_path, readme_plugins):
    """Apps for nodes: ``testnet init`` of the README scenario copies the app beside its scenario.toml and
    pins it in the genesis; ``node start`` with a changed app is refused before it joins, with one line naming both
    digests (exit 2), and so is one whose node config lacks the app (naming the pinned app)."""
    readme_plugins(tmp_path)
    cli = [sys.executable, "-m", "concilium"]
    r = subprocess.run([*cli, "testnet", "init", "--scenario", "my_scenario.toml", "--out", "net"], cwd=tmp_path,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    net = tmp_path / "net"
    assert (net / "app" / "my_plugins.py").read_bytes() == (tmp_path / "my_plugins.py").read_bytes()
    assert 'app = "app/my_plugins.py"' in (net / "scenario.toml").read_text()
    pin = tomllib.loads((net / "genesis.toml").read_text())["protocol"]["params"]["app"]
    assert pin["name"] == "my_plugins" and len(pin["digest"]) == 64
    (tmp_path / "changed").mkdir()
    (tmp_path / "changed" / "my_plugins.py").write_text((tmp_path / "my_plugins.py").read_text() + "# changed\n")
    start = [*cli, "node", "start", "--config", str(net / "nodes" / "node-0" / "node.toml")]
    r = subprocess.run([*start, "--app", str(tmp_path / "changed" / "my_plugins.py")], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and pin["digest"] in r.stderr and "has digest" in r.stderr, r.stderr
    node_toml = net / "nodes" / "node-0" / "node.toml"
    assert tomllib.loads(node_toml.read_text())["app"] == "app/my_plugins.py"  # the node directory carries a copy
    bare = net / "nodes" / "node-0" / "bare.toml"  # a node config without the app
    bare.write_text("\n".join(x for x in node_toml.read_text().splitlines() if not x.startswith("app =")))
    r = subprocess.run([*cli, "node", "start", "--config", str(bare)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert "my_plugins" in r.stderr and "--app" in r.stderr, r.stderr


@pytest.mark.slow  # about 10 s on 2 cores
def test_a_testnet_runs_the_app(tmp_path, readme_plugins):
    """The README scenario, app included, over real node processes (``testnet local``: 6, its members):
    every node loads the app from the testnet folder, and every ledger verifies with re-execution and agrees."""
    readme_plugins(tmp_path)
    r = subprocess.run([sys.executable, "-m", "concilium", "testnet", "local", "--scenario", "my_scenario.toml",
                        "--out", "net", "--quiet", "--timeout", "240"], cwd=tmp_path, capture_output=True, text=True,
                       timeout=400)
    assert r.returncode == 0, r.stdout + r.stderr
    summary = json.loads((tmp_path / "net" / "summary.json").read_text())
    assert summary["all_verified"] and summary["same_head"] and summary["rounds"] == 2, summary["ledgers"]
    assert all("rounds re-executed" in led["verdict"] for led in summary["ledgers"])
