"""The README's Ray cluster recipe with real processes: a head and a worker node started by ``ray start`` (token
authentication, one CPU each), then ``concilium sim run ... --executor ray --ray-address HEAD`` from another
process. Both nodes are on this machine (two raylets; a second machine is not at hand here), which is what a
cluster of machines looks like to the run: it joins by address and gets one trainer per node.

``slow``: starting and stopping two Ray nodes takes about 20 s. ``ray stop --force`` at the end stops every Ray
process of this machine, so run it alone: ``.venv/bin/python -m pytest -m slow tests/sim/test_ray_cluster.py``.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from sim import Simulation, load_scenario

SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"
RAY = str(Path(sys.executable).with_name("ray"))
CONCILIUM = str(Path(sys.executable).with_name("concilium"))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.slow
def test_a_run_joins_a_two_node_cluster_by_address_and_gives_the_local_ledger(tmp_path):
    # Ray's socket paths must stay short: its temp dir is a short one of its own, not pytest's
    ray_tmp = tempfile.mkdtemp(prefix="rt", dir="/tmp")
    env = dict(os.environ, RAY_TMPDIR=ray_tmp, RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=secrets.token_hex(32))
    head = f"127.0.0.1:{_free_port()}"
    try:
        subprocess.run([RAY, "start", "--head", "--port", head.split(":")[1], "--num-cpus", "1",
                        "--include-dashboard", "false", "--disable-usage-stats"],
                       env=env, check=True, capture_output=True, timeout=180)
        subprocess.run([RAY, "start", "--address", head, "--num-cpus", "1", "--disable-usage-stats"],
                       env=env, check=True, capture_output=True, timeout=180)
        out = tmp_path / "r"
        run = subprocess.run([CONCILIUM, "sim", "run", str(SCENARIOS / "coordinator_fedavg.toml"), "--rounds", "4",
                              "--executor", "ray", "--ray-address", head, "--out", str(out), "--quiet"],
                             env=env, capture_output=True, text=True, timeout=300)
        assert run.returncode == 0, run.stdout + run.stderr
        # one trainer per CPU of the cluster: one on each node
        assert "ray: 2 trainers," in run.stdout, run.stdout
        assert "ledger: OK" in run.stdout, run.stdout
        local = Simulation(load_scenario(SCENARIOS / "coordinator_fedavg.toml", rounds=4), workers=0).run()
        assert json.loads((out / "summary.json").read_text())["head_hash"] == local.head_hash.hex()
        # a wrong token is refused before anything runs, with the run's own error
        bad = subprocess.run([CONCILIUM, "sim", "run", str(SCENARIOS / "coordinator_fedavg.toml"), "--rounds", "1",
                              "--executor", "ray", "--ray-address", head, "--out", str(tmp_path / "bad"), "--quiet"],
                             env=dict(env, RAY_AUTH_TOKEN=secrets.token_hex(32)), capture_output=True, text=True,
                             timeout=300)
        assert bad.returncode == 2 and "Traceback" not in bad.stderr, bad.stdout + bad.stderr
        assert f"cannot reach the Ray cluster at {head}" in bad.stderr and "RAY_AUTH_TOKEN" in bad.stderr, bad.stderr
    finally:
        subprocess.run([RAY, "stop", "--force"], env=env, capture_output=True, timeout=120)
        shutil.rmtree(ray_tmp, ignore_errors=True)
