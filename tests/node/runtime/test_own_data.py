"""Every node on its own data, with real processes and real files.

``concilium data split`` writes 4 member directories in four formats (npz, csv, image folder, Hugging Face datasets
folder); ``testnet init --data``
wires node ``i`` to ``member-<i>/``; 4 ``node start`` processes each train an app's CNN with the app's own training
loop on their own files; rounds commit, every ledger verifies with re-execution, and each node's status carries its
accuracy on its own validation split. A node pointed at data of another shape, or with more classes than the
genesis fixes, refuses to start with one line.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from concilium._testnet import free_port_block
from concilium.cli import main
from learning import LocalData, dir_digest, load_local
from node.config import load_genesis, load_node_config

ROUNDS = 3

APP = textwrap.dedent('''\
    """A user's app: a CNN for the bundled 8x8 digits and its own local training loop."""
    from dataclasses import dataclass
    from typing import ClassVar

    import torch
    from torch import nn
    from torch.nn import functional as F

    from learning.models import register_model
    from learning.training import register_training_loop


    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = nn.Conv2d(1, 8, 3, padding=1)
            self.fc = nn.Linear(8 * 4 * 4, 10)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.fc(F.max_pool2d(F.relu(self.conv(x)), 2).flatten(1))


    @register_model("app_cnn")
    @dataclass(frozen=True, slots=True, kw_only=True)
    class AppCNN:
        name: ClassVar[str]

        def build(self) -> nn.Module:
            return Net()

        def initialize(self, module: nn.Module, generator: torch.Generator) -> None:
            with torch.no_grad():
                for p in module.parameters():
                    p.uniform_(-0.2, 0.2, generator=generator)


    @register_training_loop("app_sgd")
    def train(model, data, config, rng):
        opt = torch.optim.SGD(model.parameters(), lr=config.lr)
        for _ in range(8):
            idx = torch.randint(len(data), (32,), generator=rng)
            loss = F.cross_entropy(model(data.x[idx]), data.y[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
        return {"loss": float(loss), "steps": 8}
''')

SCENARIO = f'''
name = "own-data"
seed = 0
rounds = {ROUNDS}
members = 4
app = "cnn_app.py"

[protocol]
mode = "coordinator"
algorithm = "fedavg"
committee_size = 4
params = {{ clients = 4 }}
tick_ms = 100
timeout_ticks_train = 100

[data]
dataset = "digits"
partition = "iid"
params = {{ image = true }}

[model]
name = "app_cnn"

[training]
loop = "app_sgd"
lr = 0.2
'''


@pytest.fixture(scope="module")
def split(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("split") / "digits"
    assert main(["data", "split", "digits(image=true)", "--members", "4", "--partition", "dirichlet(alpha=1.0)",
                 "--format", "npz,csv,imagefolder,hf-disk", "--out", str(out)]) == 0
    return out


def test_data_split_writes_a_directory_per_member_and_a_manifest(split: Path) -> None:
    m = json.loads((split / "manifest.json").read_text())
    assert [e["format"] for e in m["members"]] == ["npz", "csv", "imagefolder", "hf-disk"]
    assert m["contract"]["shape"] == [1, 8, 8] and m["contract"]["classes"] == 10
    total = 0
    for i, e in enumerate(m["members"]):
        assert e["path"].startswith(f"member-{i}/") and (split / e["path"]).exists()
        assert sum(e["labels"]) == e["samples"] and bytes.fromhex(e["digest"]) == dir_digest(split / e["path"])
        total += e["samples"] + e["validation"]["samples"]
        # every format reads back into the same contract: what the member's node will see
        from learning import DataContract  # noqa: PLC0415

        contract = DataContract.from_params(m["contract"], "manifest")
        train, _ = load_local(LocalData(path=str(split / e["path"]), format=e["format"]), contract)
        assert len(train) == e["samples"] and train.x.shape[1:] == (1, 8, 8)
        assert np.bincount(train.y.numpy(), minlength=10).tolist() == e["labels"]
        assert 0.0 <= float(train.x.min()) and float(train.x.max()) <= 1.0
    assert total == 1437 and m["test"]["samples"] == 360  # digits: 1,797 samples, 20 % test


def test_four_processes_train_on_their_own_data_with_an_apps_cnn(split: Path, tmp_path: Path) -> None:
    (tmp_path / "cnn_app.py").write_text(APP)
    (tmp_path / "scenario.toml").write_text(SCENARIO)
    net = tmp_path / "net"
    base = free_port_block(4)
    assert main(["testnet", "init", "--scenario", str(tmp_path / "scenario.toml"), "--data", str(split),
                 "--out", str(net), "--base-port", str(base)]) == 0
    genesis = load_genesis(net / "genesis.toml")
    assert genesis.protocol.params["data"]["shape"] == (1, 8, 8)
    assert genesis.protocol.params["training"]["loop"] == "app_sgd"
    manifest = json.loads((split / "manifest.json").read_text())
    procs = []
    for i in range(4):
        cfg = load_node_config(net / "nodes" / f"node-{i}" / "node.toml")  # its own copy of member-<i>'s data
        assert dir_digest(cfg.data.path).hex() == manifest["members"][i]["digest"]
        log = (net / "nodes" / f"node-{i}" / "out.log").open("w")
        procs.append((subprocess.Popen(
            [sys.executable, "-m", "concilium", "node", "start", "--config", str(net / "nodes" / f"node-{i}" / "node.toml"),
             "--log-format", "json", "--until-height", str(ROUNDS), "--linger", "15", "--status-every", "0.5"],
            stdout=log, stderr=subprocess.STDOUT, cwd=tmp_path), log))
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and any(p.poll() is None for p, _ in procs):
            time.sleep(0.5)
    finally:
        for p, log in procs:
            if p.poll() is None:
                p.kill()
            p.wait()
            log.close()
    for i, (p, _) in enumerate(procs):
        text = (net / "nodes" / f"node-{i}" / "out.log").read_text()
        assert p.returncode == 0, text[-3000:]
        events = [json.loads(line) for line in text.splitlines() if line.startswith("{")]
        data = next(e for e in events if e["event"] == "data")
        fmt = manifest["members"][i]
        # its own files, nobody else's: the sample count of its own directory
        assert data["samples"] == fmt["samples"] and data["validation"] == fmt["validation"]["samples"]
        # (its own copy of member-<i>'s files, in its self-contained node directory: digests checked above)
        assert Path(data["from_train"]).resolve().is_relative_to((net / "nodes" / f"node-{i}" / "dataset").resolve())
        assert data["shape"] == [1, 8, 8]
        status = json.loads((net / "nodes" / f"node-{i}" / "data" / "status.json").read_text())
        local = status["local_eval"]
        assert local["height"] == ROUNDS and local["samples"] == fmt["validation"]["samples"]
        assert 0.0 <= local["accuracy"] <= 1.0 and np.isfinite(local["loss"])
        evaluated = [e for e in events if e["event"] == "evaluated"]
        assert [e["height"] for e in evaluated][-1] == ROUNDS
    app = next((net / "app").glob("*.py"))
    heads = set()
    for i in range(4):
        ledger = net / "nodes" / f"node-{i}" / "data" / "ledger"
        r = subprocess.run([sys.executable, "-m", "concilium", "ledger", "verify", str(ledger), "--app", str(app)],
                           capture_output=True, text=True, cwd=tmp_path, timeout=120)
        assert r.returncode == 0 and "rounds re-executed" in r.stdout and f"{ROUNDS} blocks" in r.stdout, r.stdout + r.stderr
        heads.add(r.stdout.split("head ")[1].split(",")[0])
    assert len(heads) == 1


def test_a_node_whose_data_does_not_fit_the_genesis_refuses_with_one_line(split: Path, tmp_path: Path, capsys) -> None:  # noqa: ANN001
    (tmp_path / "cnn_app.py").write_text(APP)
    (tmp_path / "scenario.toml").write_text(SCENARIO)
    net = tmp_path / "net"
    assert main(["testnet", "init", "--scenario", str(tmp_path / "scenario.toml"), "--data", str(split),
                 "--out", str(net)]) == 0
    cfg = str(net / "nodes" / "node-0" / "node.toml")
    rng = np.random.default_rng(0)
    mnist_sized = tmp_path / "mnist-sized.npz"  # 28x28 images where the genesis fixes 1x8x8
    np.savez(mnist_sized, x=rng.random((50, 1, 28, 28)).astype(np.float32), y=np.arange(50) % 10)
    twelve = tmp_path / "twelve.npz"  # the right shape, 12 classes where the genesis fixes 10
    np.savez(twelve, x=rng.random((50, 1, 8, 8)).astype(np.float32), y=np.arange(50) % 12)
    capsys.readouterr()
    for argv, needles in (
        (["--data-path", str(mnist_sized), "--data-format", "npz"], ("mnist-sized.npz", "shape", "28")),
        (["--data-path", str(twelve), "--data-format", "npz"], ("twelve.npz", "label", "[0, 10)", "found 10")),
    ):
        assert main(["node", "start", "--config", cfg, *argv]) == 2, argv
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and all(n in err for n in needles), (argv, err)
    assert not (net / "nodes" / "node-0" / "data").exists()  # refused before anything was written


def test_a_node_process_never_imports_the_simulator(tmp_path: Path, one_node: str) -> None:
    (tmp_path / "one.toml").write_text(one_node)
    net = tmp_path / "net"
    assert main(["testnet", "init", "--scenario", str(tmp_path / "one.toml"), "--out", str(net),
                 "--base-port", str(free_port_block(1))]) == 0
    code = ("import sys\nfrom concilium.cli import main\n"
            f"rc = main(['node', 'start', '--config', {str(net / 'nodes' / 'node-0' / 'node.toml')!r}, "
            "'--until-height', '2', '--linger', '0'])\n"
            "print(rc, sorted(m for m in sys.modules if m == 'sim' or m.startswith('sim.')))\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert r.stdout.strip().splitlines()[-1] == "0 []", r.stdout[-2000:] + r.stderr[-2000:]

