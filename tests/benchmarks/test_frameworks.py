"""benchmarks/frameworks.py: the exported workload replayed by the plain PyTorch loop reproduces
concilium's simulation bit for bit, the export refuses what a replay cannot reproduce, and a measured process's
CPU time includes descendants that outlive it."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.frameworks import PEER_DIR, export_workload, ledger_models  # noqa: E402
from sim import Simulation, load_scenario  # noqa: E402

TINY = """\
name = "frameworks-tiny"
seed = 3
rounds = 2
members = 2

[protocol]
mode = "coordinator"
algorithm = "fedavg"
committee_size = 2
params = { clients = 2 }

[data]
dataset = "digits"
partition = "iid"

[model]
name = "mlp"
params = { in_features = 64, hidden = [16], num_classes = 10 }

[training]
steps = 3
batch_size = 8
lr = 0.1
"""


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[float], np.ndarray]:
    """The tiny scenario's exported workload, and the simulator's per-round accuracies and ledger models."""
    d = tmp_path_factory.mktemp("tiny")
    (d / "scenario.toml").write_text(TINY, encoding="utf-8")
    meta = export_workload(d / "scenario.toml", d / "workload.npz")
    assert (meta["clients"], meta["rounds"], meta["steps"], meta["batch"]) == (2, 2, 3, 8)
    res = Simulation(load_scenario(d / "scenario.toml"), ledger_dir=d / "ledger", workers=0).run()
    return d, [m.accuracy for m in res.rounds], ledger_models(d / "ledger")


def _plain() -> Any:
    """``benchmarks/_frameworks/plain.py`` as a module (run in this process: a second torch import costs seconds;
    ``benchmarks/frameworks.py`` runs it as a whole process)."""
    spec = importlib.util.spec_from_file_location("frameworks_plain", PEER_DIR / "plain.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_plain_replay_reproduces_concilium_bit_for_bit(tiny: tuple[Path, list[float], np.ndarray]) -> None:
    d, sim_acc, sim_models = tiny
    assert sim_models.shape == (2, 64 * 16 + 16 + 16 * 10 + 10)
    _plain().main(str(d / "workload.npz"), str(d / "plain"))
    body = json.loads((d / "plain" / "result.json").read_text(encoding="utf-8"))
    plain_models = np.load(d / "plain" / "models.npy", allow_pickle=False)
    assert body["accuracies"] == sim_acc
    assert plain_models.dtype == np.float32 and np.array_equal(plain_models, sim_models)
    assert not np.array_equal(sim_models[0], sim_models[1])  # training moved the model: the check has teeth


def test_replay_with_other_minibatches_differs(tiny: tuple[Path, list[float], np.ndarray]) -> None:
    """The exported minibatch indices matter: replaying the rounds' batches swapped gives other models."""
    d, _, sim_models = tiny
    with np.load(d / "workload.npz", allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files}
    arrays["batches"] = arrays["batches"][::-1].copy()
    np.savez(d / "swapped.npz", **arrays)
    _plain().main(str(d / "swapped.npz"), str(d / "swapped"))
    assert not np.array_equal(np.load(d / "swapped" / "models.npy"), sim_models)


@pytest.mark.parametrize("old, new, needs", [
    ("lr = 0.1", "lr = 0.1\nmomentum = 0.9", "plain SGD"),
    ('partition = "iid"', 'partition = "dirichlet"\npartition_params = { alpha = 0.5 }', "an iid partition"),
    ("params = { clients = 2 }", "params = { clients = 1 }", "every member a client"),
])
def test_export_refuses_what_a_replay_cannot_reproduce(tmp_path: Path, old: str, new: str, needs: str) -> None:
    assert old in TINY
    (tmp_path / "s.toml").write_text(TINY.replace(old, new), encoding="utf-8")
    with pytest.raises(SystemExit, match=f"the replay needs.*{needs}"):
        export_workload(tmp_path / "s.toml", tmp_path / "w.npz")
    assert not (tmp_path / "w.npz").exists()


def test_measure_counts_descendants_that_outlive_the_child(tmp_path: Path) -> None:
    """A child that exits at once, leaving a grandchild that burns ~0.4 s of CPU: the measured CPU includes it."""
    grandchild = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.4: pass\n"
    child = f"import subprocess, sys\nsubprocess.Popen([sys.executable, '-c', {grandchild!r}])\n"
    driver = textwrap.dedent(f"""
        import json, os, sys
        sys.path.insert(0, {str(ROOT)!r})
        from pathlib import Path
        from benchmarks.frameworks import become_subreaper, measure
        assert become_subreaper()
        m = measure([sys.executable, "-c", {child!r}], cpus=os.sched_getaffinity(0), env=dict(os.environ),
                    log=Path({str(tmp_path / "log")!r}))
        print(json.dumps({{"rc": m.rc, "wall": m.wall_s, "cpu": m.cpu_s, "reaped": m.orphans_reaped}}))
    """)
    out = subprocess.run([sys.executable, "-c", driver], check=True, capture_output=True, text=True, timeout=60)
    m = json.loads(out.stdout)
    assert m["rc"] == 0 and m["reaped"] == 1
    assert m["cpu"] >= 0.4  # the grandchild's 0.4 s, counted although its parent never waited for it
