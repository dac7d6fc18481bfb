"""Reproducible mode (``learning.reproducible``, ``concilium sim run --reproducible``, ``training.reproducible``):
one ledger head whatever kernels, BLAS core type, SIMD features and thread counts the environment asks for.

One machine cannot be three CPUs, but it can be made to pick what three CPUs would: each run forces another
PyTorch kernel set (``ATEN_CPU_CAPABILITY``: the portable, AVX2 and AVX-512 kernels, which give three different
heads by default), another MKL instruction set and reproducibility setting, another OpenBLAS core type, numpy's
SIMD paths on or off, and other thread counts. Real processes, the real command line."""

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from concilium.cli import main
from learning import reproducible
from learning.reproducible import ReproducibleModeError
from sim import Simulation, load_scenario

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = ROOT / "scenarios"

_CPUS = [  # what three machines' libraries could pick
    {"ATEN_CPU_CAPABILITY": "default", "OMP_NUM_THREADS": "1", "MKL_ENABLE_INSTRUCTIONS": "SSE4_2",
     "OPENBLAS_CORETYPE": "Nehalem", "NPY_DISABLE_CPU_FEATURES": ""},
    {"ATEN_CPU_CAPABILITY": "avx2", "OMP_NUM_THREADS": "2", "MKL_NUM_THREADS": "2", "MKL_ENABLE_INSTRUCTIONS": "AVX2",
     "MKL_CBWR": "AUTO", "OPENBLAS_CORETYPE": "Haswell"},
    {"ATEN_CPU_CAPABILITY": "avx512", "OPENBLAS_NUM_THREADS": "2", "MKL_DYNAMIC": "TRUE"},
]


def _env(over: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("CONCILIUM_REPRODUCIBLE", "GLIBC_TUNABLES")}
    return {**env, **over}


def _sim_run(out: Path, *args: str, env: dict[str, str]) -> dict:
    r = subprocess.run([sys.executable, "-m", "concilium", "sim", "run", *args, "--out", str(out), "--quiet"],
                       capture_output=True, text=True, env=env, cwd=ROOT, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    return json.loads((out / "summary.json").read_text())


def test_one_head_under_three_forced_cpu_capabilities(tmp_path):
    """The same scenario, three environments, three worker settings (in-process, one forked worker, the default):
    one head in reproducible mode; and the flag's run is marked and replays with the flag."""
    heads = set()
    for i, (over, workers) in enumerate(zip(_CPUS, ("0", "1", None), strict=True)):
        extra = ["--workers", workers] if workers is not None else []
        s = _sim_run(tmp_path / f"r{i}", "quickstart", "--rounds", "3", "--reproducible", *extra, env=_env(over))
        assert s["reproducible"] is True and s["ledger_verified"], s
        assert s["reproduce"].endswith("scenario.toml --reproducible"), s["reproduce"]
        assert "reproducible = true" in (tmp_path / f"r{i}" / "scenario.toml").read_text()
        heads.add(s["head_hash"])
    assert len(heads) == 1, heads
    # replaying the results folder's scenario (the key is in it, no flag) gives that head again
    again = _sim_run(tmp_path / "again", str(tmp_path / "r0" / "scenario.toml"), env=_env(_CPUS[1]))
    assert again["head_hash"] in heads and again["reproducible"] is True


def test_the_scenario_key_and_the_cli_called_from_python(tmp_path):
    """``[training] reproducible = true`` without the flag gives the flag's head; ``concilium.cli.main`` called in
    a process that is not in the mode (this one) runs the command in a child started in it."""
    text = (SCENARIOS / "coordinator_fedavg.toml").read_text()
    assert "[training]" in text
    path = tmp_path / "s.toml"
    path.write_text(text.replace("[training]", "[training]\nreproducible = true", 1))
    keyed = _sim_run(tmp_path / "keyed", str(path), "--rounds", "2", env=_env(_CPUS[0]))
    assert reproducible.problems(), "this test process is not in reproducible mode"
    assert main(["sim", "run", str(SCENARIOS / "coordinator_fedavg.toml"), "--rounds", "2", "--reproducible",
                 "--out", str(tmp_path / "flag"), "--quiet"]) == 0
    flagged = json.loads((tmp_path / "flag" / "summary.json").read_text())
    assert keyed["head_hash"] == flagged["head_hash"] and flagged["reproducible"] is True


def test_a_process_not_started_in_the_mode_is_refused_with_the_way_out():
    """PyTorch chose its kernels at this process's first operation: the mode cannot be switched on here, and the
    Python API says so instead of training with other bits."""
    import torch

    torch.ones(2).sum()  # this process has run PyTorch
    found = reproducible.problems()
    assert any(p.startswith("CONCILIUM_REPRODUCIBLE is") for p in found), found  # whatever else the environment set
    sc = load_scenario(SCENARIOS / "quickstart.toml", rounds=1)
    keyed = dataclasses.replace(sc, training=dataclasses.replace(sc.training, reproducible=True))
    with pytest.raises(ReproducibleModeError, match=r"reexec\(\)"):
        Simulation(keyed, workers=0)


def test_reexec_starts_a_script_again_in_the_mode(tmp_path):
    """``learning.reproducible.reexec()`` first thing in a script: the script runs (once) in the mode, whatever the
    environment asked for, and a simulation with the key gives the command line's head."""
    script = tmp_path / "s.py"
    script.write_text(
        "import json, os, sys\n"
        "from learning import reproducible\n"
        "print('start', flush=True)\n"
        "reproducible.reexec()\n"
        "import dataclasses, torch\n"
        "from sim import Simulation, load_scenario\n"
        "sc = load_scenario('scenarios/quickstart.toml', rounds=3)\n"
        "sc = dataclasses.replace(sc, training=dataclasses.replace(sc.training, reproducible=True))\n"
        "res = Simulation(sc, workers=0).run()\n"
        "print(json.dumps([reproducible.problems(), torch.backends.cpu.get_cpu_capability(), torch.get_num_threads(),\n"
        "                  res.head_hash.hex(), sys.argv[1:]]))\n"
    )
    r = subprocess.run([sys.executable, str(script), "an-argument"], capture_output=True, text=True,
                       env=_env(_CPUS[2]), cwd=ROOT, timeout=300)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines.count("start") == 2, "the script ran again from the top, once"
    problems, capability, threads, head, argv = json.loads(lines[-1])
    assert problems == [] and capability == "DEFAULT" and threads == 1 and argv == ["an-argument"]
    cli = _sim_run(tmp_path / "cli", "quickstart", "--rounds", "3", "--reproducible", env=_env(_CPUS[0]))
    assert head == cli["head_hash"]
