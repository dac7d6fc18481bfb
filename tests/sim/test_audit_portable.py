"""The audit is portable: a ledger re-verifies, with full re-execution, under other BLAS kernels and with numpy's
SIMD paths off (docs/design.md, "Apps": what the audit re-executes is float64 in a fixed order, so any x86-64 machine
re-verifies any ledger).

The ledgers come from bundled scenarios whose rules lean on BLAS and numpy reductions: CMFL's distances
(quickstart, committee mode), FedRo's NNM + trimmed mean (coordinator_corrupt, with its evidence), Krum and the
geometric median behind NNM, Sself's Multi-Krum inside staleness groups and its entropy filter (a PyTorch
forward pass over the public split, scored in reproducible mode), and seed 000's centered clipping. They are written here with this machine's default kernels, then audited in child processes
that force other OpenBLAS core types (each a different set of dot and matrix kernels), other BLAS thread counts,
numpy's baseline instructions only, PyTorch's portable kernels and MKL's SSE2 path; each child must verify every
ledger, every round re-executed (before the Sself scores ran in reproducible mode, its ledger failed at height 1
under MKL's SSE2 path and at height 3 with numpy's SIMD paths off)."""

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import tomli_w

from learning import reproducible
from sim import Simulation, load_scenario, scenario_toml

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = ROOT / "scenarios"


def _with_params(sc, **params):
    return dataclasses.replace(sc, protocol=dataclasses.replace(sc.protocol, params={**sc.protocol.params, **params}))


def _scenarios():
    corrupt = load_scenario(SCENARIOS / "coordinator_corrupt.toml", rounds=3)
    robust = load_scenario(SCENARIOS / "unavailability_robust.toml", rounds=2, members=40)
    yield "quickstart", load_scenario(SCENARIOS / "quickstart.toml", rounds=3)
    yield "fedro-nnm-trimmed", corrupt
    yield "fedro-nnm-krum", _with_params(corrupt, aggregator="nnm(f=2) > krum(f=2)")
    yield "fedro-geometric-median", _with_params(corrupt, aggregator="nnm(f=2) > geometric_median")
    yield "sself-multi-krum", _with_params(load_scenario(SCENARIOS / "sself_sync_poison.toml", rounds=3),
                                           aggregator="multi_krum", filter=False)
    yield "seed000-cclip", _with_params(robust, num_clients=40)
    # the entropy filter and loss weighting: a forward pass over the public split and numpy's exp/log, scored in
    # reproducible mode (learning.training._portable) by the simulation and by every audit
    yield "sself-entropy", load_scenario(SCENARIOS / "sself_sync_poison.toml", rounds=3)


def _core_types() -> list[str]:
    """OpenBLAS core types this CPU can run: the SSE3 and SSE4.2 kernels always, AVX2's and AVX-512's if it has them."""
    flags = set()
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
                break
    kinds = ["Prescott", "Nehalem"]
    if "avx2" in flags:
        kinds.append("Haswell")
    if "avx512f" in flags:
        kinds.append("SkylakeX")
    return kinds


_VERIFY = """
import json, sys
from pathlib import Path
from sim import verify_ledger
print(json.dumps({p: verify_ledger(Path(p)) for p in sys.argv[1:]}))
"""


def _build(tmp_path, scenarios) -> list[str]:
    ledgers = []
    for name, sc in scenarios:
        Simulation(sc, ledger_dir=tmp_path / name / "ledger").run()
        # as a results folder holds it: Sself's audit rebuilds its public split from the scenario beside the ledger
        (tmp_path / name / "scenario.toml").write_text(tomli_w.dumps(scenario_toml(sc)), encoding="utf-8")
        ledgers.append(str(tmp_path / name / "ledger"))
    return ledgers


def _verify_everywhere(ledgers: list[str], environments: list[dict[str, str]]) -> None:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("OPENBLAS_", "NPY_", "ATEN_", "MKL_"))}
    for env in environments:
        r = subprocess.run([sys.executable, "-c", _VERIFY, *ledgers], capture_output=True, text=True,
                           env={**base, **env}, cwd=ROOT, timeout=600)
        assert r.returncode == 0, (env, r.stderr[-3000:])
        verdicts = json.loads(r.stdout.strip().splitlines()[-1])
        for path, (ok, line) in verdicts.items():
            assert ok and "rounds re-executed" in line, (env, Path(path).parent.name, line)


def _numpy_baseline() -> str:
    return reproducible.variables()["NPY_DISABLE_CPU_FEATURES"]


@pytest.mark.skipif(not Path("/proc/cpuinfo").exists(), reason="reads the CPU's flags from /proc/cpuinfo (Linux)")
def test_ledgers_of_blas_heavy_rules_verify_under_other_kernels(tmp_path):
    environments = [{"OPENBLAS_CORETYPE": kind, "OPENBLAS_NUM_THREADS": str(1 + i % 2)} for i, kind in enumerate(_core_types())]
    # numpy's baseline instructions only, the oldest BLAS kernels, PyTorch's portable kernels and MKL's SSE2 path
    environments.append({"NPY_DISABLE_CPU_FEATURES": _numpy_baseline(), "OPENBLAS_CORETYPE": "Prescott",
                         "ATEN_CPU_CAPABILITY": "default", "MKL_CBWR": "COMPATIBLE"})
    _verify_everywhere(_build(tmp_path, _scenarios()), environments)
