"""The Ray executor (sim/_ray.py): training jobs go to Ray actors, nothing else changes - the same ledger
head as training in-process - and the model crosses to the cluster once per round.

Needs the ``ray`` extra (``pip install -e '.[ray]'``, in the Makefile's install line): without it these
tests fail, they are not skipped. One local Ray instance (``ray.init(num_cpus=2)``) serves the module."""

import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import ray
import tomli_w

from concilium.cli import main
from sim import Simulation, load_scenario
from sim import scenario_toml

SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"


@pytest.fixture(scope="module")
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        yield
    finally:
        ray.shutdown()


def _scenario(rounds=3, members=6):
    # SCAFFOLD: a server state and a private client state per member travel with the jobs; two Byzantine
    # members flip their labels (their poisoned data is rebuilt on the trainers from the scenario)
    sc = load_scenario(SCENARIOS / "coordinator_fedavg.toml", rounds=rounds, members=members)
    proto = dataclasses.replace(sc.protocol, algorithm="scaffold", params={"lr": 0.05})
    adv = dataclasses.replace(sc.adversary, byzantine=2, data_attack="label_flip(num_classes=10)")
    return dataclasses.replace(sc, protocol=proto, adversary=adv)


def test_ray_gives_the_local_ledger_head_with_one_model_transfer_per_round(local_ray, tmp_path, capsys):
    sc = _scenario()
    path = tmp_path / "scenario.toml"
    path.write_text(tomli_w.dumps(scenario_toml(sc)), encoding="utf-8")
    local = Simulation(sc, workers=0).run()  # training in this process
    assert main(["sim", "run", str(path), "--out", str(tmp_path / "r"), "--quiet", "--executor", "ray"]) == 0
    out = capsys.readouterr().out
    head = json.loads((tmp_path / "r" / "summary.json").read_text())["head_hash"]
    assert head == local.head_hash.hex(), out
    assert "ledger: OK" in out, out
    # one trainer per CPU of the cluster; every job of the run went to them; one model sent per round trained
    # (the run ends while the round after the last one may have started training)
    m = re.search(r"^ray: (\d+) trainers, (\d+) jobs, (\d+) models sent for (\d+) rounds trained$", out, re.M)
    assert m is not None, out
    trainers, jobs, models, rounds = map(int, m.groups())
    assert trainers == 2 and jobs >= sc.rounds * sc.members, out
    assert models == rounds and sc.rounds <= rounds <= sc.rounds + 1, out
    assert (tmp_path / "r" / "accuracy.png").stat().st_size > 0 and (tmp_path / "r" / "acceptance.png").stat().st_size > 0
    assert ray.is_initialized(), "a Ray instance the run joined stays up"


def test_ray_trainers_run_in_reproducible_mode(local_ray, tmp_path):
    """``--executor ray --reproducible`` against this module's Ray instance, started by this process outside the mode:
    the command runs again in the mode, and its trainers (worker processes of a raylet that is not in it) start in
    the mode's environment (``runtime_env``; a trainer that was not would refuse to build its world): the head of
    the local executor in reproducible mode, under a forced PyTorch kernel set that changes default-mode heads."""
    sc = _scenario(rounds=2)
    path = tmp_path / "scenario.toml"
    path.write_text(tomli_w.dumps(scenario_toml(sc)), encoding="utf-8")
    heads, outputs = [], []
    address = ray.get_runtime_context().gcs_address
    for name, extra in (("ray", ["--executor", "ray", "--ray-address", address]), ("local", ["--workers", "0"])):
        env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "CONCILIUM_REPRODUCIBLE")}
        env["ATEN_CPU_CAPABILITY"] = "avx2"
        r = subprocess.run([sys.executable, "-m", "concilium", "sim", "run", str(path), "--out", str(tmp_path / name),
                            "--quiet", "--reproducible", *extra], capture_output=True, text=True, env=env, timeout=600)
        assert r.returncode == 0, r.stdout + r.stderr[-3000:]
        summary = json.loads((tmp_path / name / "summary.json").read_text())
        assert summary["reproducible"] and summary["ledger_verified"], summary
        heads.append(summary["head_hash"])
        outputs.append(r.stdout)
    m = re.search(r"^ray: (\d+) trainers, (\d+) jobs", outputs[0], re.M)
    assert m is not None and int(m.group(1)) >= 1 and int(m.group(2)) >= sc.rounds * sc.members, outputs[0]
    assert heads[0] == heads[1], heads


_APP = """\
\"\"\"A user's app: a model the trainers must have to train (registered when the app is imported).\"\"\"
from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import nn

from learning.models import register_model


@register_model("ray_app_mlp")
@dataclass(frozen=True, slots=True, kw_only=True)
class RayAppMLP:
    name: ClassVar[str]

    def build(self) -> nn.Module:
        return nn.Sequential(nn.Flatten(), nn.Linear(64, 16), nn.ReLU(), nn.Linear(16, 10))

    def initialize(self, module: nn.Module, generator: torch.Generator) -> None:
        with torch.no_grad():
            for p in module.parameters():
                p.uniform_(-0.1, 0.1, generator=generator)
"""


def test_ray_trainers_load_the_scenarios_app_from_the_files_sent(local_ray, tmp_path):
    """A scenario whose model comes from its app: the run's process sends the app's files with each trainer's
    creation (``node.apps.AppBundle``), the trainer writes them into its machine's private cache, checks them against
    the digest the genesis pins and imports them, and the ledger is the local executor's. (Before, every trainer
    died building the world: the model was not registered in its process.) Both runs in subprocesses, so that the
    app's registration stays out of this one."""
    from node.apps import app_digest  # noqa: PLC0415

    (tmp_path / "ray_app.py").write_text(_APP)
    sc = load_scenario(SCENARIOS / "coordinator_fedavg.toml", rounds=2, members=4)
    table = scenario_toml(sc)
    table["app"] = "ray_app.py"
    table["model"] = {"name": "ray_app_mlp"}
    (tmp_path / "scenario.toml").write_text(tomli_w.dumps(table), encoding="utf-8")
    digest = app_digest(tmp_path / "ray_app.py")
    cache = Path(tempfile.gettempdir()) / f"concilium-apps-{os.getuid()}" / digest
    shutil.rmtree(cache, ignore_errors=True)  # (only the trainers write it)
    heads = []
    address = ray.get_runtime_context().gcs_address
    for name, extra in (("ray", ["--executor", "ray", "--ray-address", address]), ("local", ["--workers", "0"])):
        env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
        r = subprocess.run([sys.executable, "-m", "concilium", "sim", "run", str(tmp_path / "scenario.toml"),
                            "--out", str(tmp_path / name), "--quiet", *extra], capture_output=True, text=True, env=env,
                           timeout=600)
        assert r.returncode == 0, r.stdout + r.stderr[-3000:]
        summary = json.loads((tmp_path / name / "summary.json").read_text())
        assert summary["ledger_verified"], summary
        heads.append(summary["head_hash"])
    assert heads[0] == heads[1], heads
    assert (cache / "ray_app.py").read_text() == _APP, "the trainers loaded the app from the copy they were sent"


def test_ray_options_are_checked_before_anything_runs(tmp_path, capsys):
    path = SCENARIOS / "coordinator_fedavg.toml"
    for bad in (["--workers", "2", "--executor", "ray"], ["--ray-address", "127.0.0.1:1"], ["--ray-gpu-fraction", "0.5"],
                ["--executor", "ray", "--ray-gpu-fraction", "0"], ["--executor", "ray", "--ray-gpu-fraction", "nan"],
                ["--executor", "ray", "--ray-gpu-fraction", "1.5"], ["--executor", "dask"]):
        assert main(["sim", "run", str(path), "--out", str(tmp_path / "bad"), "--quiet", *bad]) == 2, bad
        assert "concilium: error:" in capsys.readouterr().err, bad
        assert not (tmp_path / "bad").exists(), "nothing is written"


def test_a_local_run_never_imports_ray_nor_plots_in_its_own_process(tmp_path):
    # `import ray` only with --executor ray; matplotlib only in the forked child that draws the plots beside
    # the audit (they are in the folder when the command returns); never the network stack in `sim run`
    out = tmp_path / "r"
    code = (
        "import json, sys\n"
        "from concilium.cli import main\n"
        f"rc = main(['sim', 'run', {str(SCENARIOS / 'coordinator_fedavg.toml')!r}, '--out', {str(out)!r}, '--quiet', '--rounds', '1'])\n"
        "print(json.dumps([rc, sorted(m for m in ('ray', 'matplotlib', 'trio', 'libp2p') if m in sys.modules)]))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    rc, loaded = json.loads(proc.stdout.strip().splitlines()[-1])
    assert rc == 0 and loaded == [], (rc, loaded)
    assert (out / "accuracy.png").stat().st_size > 0 and (out / "acceptance.png").stat().st_size > 0
