"""Training on a CUDA device (``--device cpu|cuda``). Marked ``gpu``: run with ``-m gpu`` on a
machine with a GPU; the default run (CPU CI) deselects them. Each test fails, not skips, without CUDA."""

import dataclasses
from pathlib import Path

import numpy as np
import pytest
import torch

from learning.data import Dataset
from learning.models import FEMNISTCNNSpec, MLPSpec
from learning.training import LocalTrainer, LocalTrainingConfig
from sim import Simulation, load_scenario, verify_ledger

pytestmark = pytest.mark.gpu
SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"


def _gen(seed):
    return torch.Generator().manual_seed(seed)


def test_cuda_is_there():
    assert torch.cuda.is_available(), "the gpu tests need a CUDA device"


def test_femnist_cnn_trains_on_cuda_like_on_cpu():
    g = torch.Generator().manual_seed(0)
    data = Dataset(x=torch.rand(64, 1, 28, 28, generator=g), y=torch.randint(0, 62, (64,), generator=g), num_classes=62)
    cfg = LocalTrainingConfig(steps=3, batch_size=16)
    cpu = LocalTrainer(FEMNISTCNNSpec(), cfg, device="cpu")
    gpu = LocalTrainer(FEMNISTCNNSpec(), cfg, device="cuda")
    theta = cpu.initial_parameters(seed=1)
    assert theta.numel() == 2_368_318
    a = cpu.train(theta, data, lr=0.05, generator=_gen(2)).delta
    flags = (torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32)
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False  # full float32 on the GPU too
    try:
        b = gpu.train(theta.to("cuda"), data.to("cuda"), lr=0.05, generator=_gen(2))
    finally:
        torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = flags
    assert b.delta.device.type == "cuda" and b.steps == 3
    # same minibatches (the generator lives on the CPU), float32 on both devices: equal up to summation order
    rel = float((a - b.delta.cpu()).norm() / a.norm())
    assert rel < 1e-3, rel
    # with PyTorch's default TF32 convolutions (H100/H200) it still trains, at lower precision
    c = gpu.train(theta.to("cuda"), data.to("cuda"), lr=0.05, generator=_gen(2)).delta
    assert torch.isfinite(c).all() and float((a - c.cpu()).norm() / a.norm()) < 0.2


def test_mlp_training_on_cuda_is_reproducible():
    g = torch.Generator().manual_seed(0)
    data = Dataset(x=torch.rand(200, 64, generator=g), y=torch.randint(0, 10, (200,), generator=g), num_classes=10)
    data = data.to("cuda")
    t = LocalTrainer(MLPSpec(in_features=64, hidden=(64,)), LocalTrainingConfig(steps=20, batch_size=32), device="cuda")
    theta = t.initial_parameters(seed=3)
    a = t.train(theta, data, lr=0.1, generator=_gen(5)).delta
    b = t.train(theta, data, lr=0.1, generator=_gen(5)).delta
    assert torch.equal(a, b)


def test_simulation_trains_on_cuda_and_its_ledger_verifies(tmp_path):
    sc = load_scenario(SCENARIOS / "coordinator_fedavg.toml", rounds=6)
    sc = dataclasses.replace(sc, training=dataclasses.replace(sc.training, device="cuda"))
    sim = Simulation(sc, ledger_dir=tmp_path / "ledger")
    assert sim.client_data[0].x.device.type == "cuda"
    res = sim.run()
    assert [m.fl_round for m in res.rounds] == list(range(1, 7))
    assert np.isfinite([m.loss for m in res.rounds]).all()
    ok, line = verify_ledger(tmp_path / "ledger")
    assert ok, line
    again = Simulation(sc).run()
    assert again.head_hash == res.head_hash  # same seed, same GPU: same chain
    cpu = Simulation(load_scenario(SCENARIOS / "coordinator_fedavg.toml", rounds=6)).run()
    assert abs(res.final_accuracy - cpu.final_accuracy) <= 0.03, (res.final_accuracy, cpu.final_accuracy)


def test_forked_training_workers_fall_back_in_process_after_cuda_autograd():
    # A backward pass on a machine with CUDA devices starts autograd's device threads; PyTorch then refuses
    # autograd in any child forked later. A simulation training on the CPU with workers must notice, re-run
    # the jobs in-process and still produce the very same chain.
    x = torch.ones(3, device="cuda", requires_grad=True)
    (x * x).sum().backward()
    sc = load_scenario(SCENARIOS / "coordinator_fedavg.toml", rounds=3)
    forked = Simulation(sc, workers=1)
    a = forked.run()
    b = Simulation(sc, workers=0).run()
    assert forked._pool.broken, "the workers could not train after the parent's CUDA autograd"
    assert a.head_hash == b.head_hash


def test_a_member_world_from_a_data_split_trains_and_evaluates_on_cuda(tmp_path):
    """A node's own data and device on a GPU: a node's own world (``node.world.MemberWorld``), built from a ``testnet
    init --data`` genesis and its node config on ``device = "cuda"`` (and "auto", which picks CUDA), trains a local
    job and evaluates on its validation split; the update is the CPU world's within float32 kernel differences
    (SGD with momentum and clipping: Adam's first steps are ``±lr`` wherever a gradient is near 0, so CPU and CUDA
    differ there by design)."""
    from concilium.cli import main
    from learning import LocalData
    from node.config import load_genesis, load_node_config
    from node.core import TrainJob
    from node.keys import load_key
    from node.world import MemberTrainer, MemberWorld, resolve_device

    assert main(["data", "split", "digits(image=true)", "--members", "4", "--format", "npz,csv,imagefolder",
                 "--out", str(tmp_path / "split")]) == 0
    (tmp_path / "cnn.toml").write_text(
        'name = "cnn"\nseed = 0\nrounds = 3\nmembers = 4\n[protocol]\nmode = "coordinator"\nalgorithm = "fedavg"\n'
        'committee_size = 4\nparams = { clients = 4 }\n[data]\ndataset = "digits"\npartition = "iid"\n'
        'params = { image = true }\n[model]\nname = "small_cnn"\n[training]\nsteps = 5\nlr = 0.1\nmomentum = 0.9\n'
        'weight_decay = 0.001\ngrad_clip = 1.0\n')
    assert main(["testnet", "init", "--scenario", str(tmp_path / "cnn.toml"), "--data", str(tmp_path / "split"),
                 "--out", str(tmp_path / "net")]) == 0
    assert resolve_device("auto", "test") == "cuda"
    genesis = load_genesis(tmp_path / "net" / "genesis.toml")
    deltas = {}
    for i in range(4):
        cfg = load_node_config(tmp_path / "net" / "nodes" / f"node-{i}" / "node.toml")
        peer = load_key(cfg.key).peer_id
        for dev in ("cpu", "cuda"):
            world = MemberWorld.build(genesis, peer, LocalData.from_params(cfg.data.local_params(), "node"),
                                      device=dev, initial_model_file=cfg.initial_model)
            assert world.data.x.device.type == dev and world.trainer.device.type == dev
            res = MemberTrainer(world)(TrainJob(fl_round=1, model=world.theta0, purpose="update"))
            assert res is not None and np.isfinite(res.delta).all() and res.n_samples == len(world.data)
            ev = world.evaluate(world.theta0 + res.delta)
            assert ev is not None and 0.0 <= ev["accuracy"] <= 1.0 and ev["samples"] == len(world.validation)
            deltas[(i, dev)] = res.delta
        assert np.allclose(deltas[(i, "cpu")], deltas[(i, "cuda")], atol=1e-4), i
