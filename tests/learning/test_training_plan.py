"""Training as the network agreed it: Adam/AdamW, gradient clipping, label smoothing, custom
loops, the :class:`learning.TrainingPlan` a genesis pins, and the scenario's ``[training]`` plan; the SGD default
computes the very bits it computed before these existed."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.nn import functional as F

import ledger
from learning import TRAINING_LOOPS, LoopConfig, TrainingPlan, register_training_loop
from learning._errors import ConfigError
from learning.data import Dataset, DigitsSpec
from learning.models import FlatParameters, MLPSpec, build_model, unflatten_parameters
from learning.training import (
    SCHEDULES, LocalTrainer, LocalTrainingConfig, minibatch_indices, schedule_spec, train_local,
)

ROOT = Path(__file__).resolve().parents[2]
SPEC = MLPSpec(in_features=64, hidden=(32,), num_classes=10)
LOOP = "test_plan_torch_sgd"


pytestmark = pytest.mark.usefixtures("deterministic_torch")  # (tests/learning/conftest.py)


@pytest.fixture(scope="module")
def digits():
    return DigitsSpec(test_fraction=0.2, seed=0).load()


@pytest.fixture(scope="module")
def client(digits) -> Dataset:
    return digits.train.subset(np.arange(160))


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def loss_at(theta: torch.Tensor, data: Dataset, *, label_smoothing: float = 0.0) -> float:
    model = build_model(SPEC, seed=0, dtype=theta.dtype)
    unflatten_parameters(model, theta)
    with torch.no_grad():
        return float(F.cross_entropy(model(data.x.to(theta.dtype)), data.y, label_smoothing=label_smoothing))


def one_line(excinfo: pytest.ExceptionInfo[BaseException]) -> str:
    msg = str(excinfo.value)
    assert msg and "\n" not in msg, msg
    return msg


# ---------------------------------------------------------------------------------------------------------------
# The SGD default: the same bits as before


def train_before(flat, global_params, data, config, *, lr, generator, momentum_buffer=None, gradient_correction=None,
                 cursor=0, batch_transform=None):
    """The local SGD loop as it was before optimizers, clipping and smoothing existed (a frozen transcription of
    ``train_local`` at commit 10055e0): the default path must compute exactly this."""
    n = len(data)
    module, vec, grad = flat.module, flat.vector, flat.grad
    device = vec.device
    theta = global_params.to(device=device, dtype=vec.dtype)
    if theta.data_ptr() == vec.data_ptr():
        theta = theta.clone()
    vec.copy_(theta)
    batches, next_cursor = minibatch_indices(n, config, generator, cursor)
    rho, wd, mu = config.momentum, config.weight_decay, config.prox_mu
    buf = None
    if rho > 0.0:
        buf = torch.zeros_like(vec) if momentum_buffer is None else momentum_buffer.to(device, vec.dtype).clone()
    correction = None if gradient_correction is None else gradient_correction.to(device=device, dtype=vec.dtype)
    x, y = data.x, data.y
    module.train()
    loss_sum = torch.zeros((), dtype=torch.float32, device=device)
    loss = loss_sum
    for b in batches:
        if b is None:
            xb, yb = x, y
        else:
            xb, yb = x.index_select(0, b), y.index_select(0, b)
        if batch_transform is not None:
            xb, yb = batch_transform(xb, yb)
        grad.zero_()
        loss = F.cross_entropy(module(xb), yb)
        loss.backward()
        if wd:
            grad.add_(vec, alpha=wd)
        if mu:
            grad.add_(vec, alpha=mu).sub_(theta, alpha=mu)
        if correction is not None:
            grad.add_(correction)
        if buf is not None:
            buf.mul_(rho).add_(grad)
            step = grad.add_(buf, alpha=rho) if config.nesterov else buf
        else:
            step = grad
        vec.add_(step, alpha=-lr)
        loss_sum += loss.detach()
    steps = len(batches)
    return vec - theta, buf, float(loss_sum) / steps, float(loss.detach()), next_cursor


SGD_CONFIGS = [
    dict(steps=10, batch_size=32),
    dict(steps=7, batch_size=16, momentum=0.9),
    dict(steps=7, batch_size=16, momentum=0.9, nesterov=True, weight_decay=1e-3),
    dict(steps=7, batch_size=16, prox_mu=0.5, momentum=0.9),
    dict(steps=3, batch_size=None),
    dict(epochs=2, batch_size=24, sampling="shuffle"),
    dict(steps=5, batch_size=10, sampling="sequential"),
]


@pytest.mark.parametrize("kwargs", SGD_CONFIGS, ids=lambda k: ",".join(f"{a}={b}" for a, b in k.items()))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_sgd_default_is_bit_identical_to_before(client, kwargs, dtype) -> None:
    config = LocalTrainingConfig(**kwargs)
    assert config == LocalTrainingConfig(**kwargs, optimizer="sgd", grad_clip=0.0, label_smoothing=0.0)
    data = client.to("cpu", dtype)
    flat = FlatParameters.bind(build_model(SPEC, seed=0, dtype=dtype))
    theta = LocalTrainer(SPEC, config, dtype=dtype).initial_parameters(seed=3)
    g = gen(11)
    extras = [
        {},
        {"gradient_correction": torch.randn(theta.numel(), generator=g, dtype=dtype) * 1e-3},
        {"momentum_buffer": torch.randn(theta.numel(), generator=g, dtype=dtype) * 1e-2},
        {"batch_transform": lambda x, y: (x * 0.5, (y + 1) % 10), "cursor": 7},
    ]
    for extra in extras:
        new = train_local(flat, theta, data, config, lr=0.05, generator=gen(5), **extra)
        delta, buf, loss_mean, loss_last, cursor = train_before(flat, theta, data, config, lr=0.05, generator=gen(5),
                                                               **extra)
        assert torch.equal(new.delta, delta)
        assert (new.momentum_buffer is None) == (buf is None)
        assert buf is None or torch.equal(new.momentum_buffer, buf)
        assert (new.loss_mean, new.loss_last, new.next_cursor) == (loss_mean, loss_last, cursor)


# ---------------------------------------------------------------------------------------------------------------
# Adam and AdamW


def reference_adam(theta, data, config, lr, seed, *, decoupled):
    """The same job with torch.optim.Adam/AdamW on a plain model and the same minibatches."""
    model = build_model(SPEC, seed=0)
    unflatten_parameters(model, theta)
    cls = torch.optim.AdamW if decoupled else torch.optim.Adam
    opt = cls(model.parameters(), lr=lr, betas=config.betas, eps=config.eps, weight_decay=config.weight_decay,
              foreach=False)
    batches, _ = minibatch_indices(len(data), config, gen(seed), 0)
    for b in batches:
        opt.zero_grad()
        F.cross_entropy(model(data.x[b]), data.y[b]).backward()
        opt.step()
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()]) - theta


@pytest.mark.parametrize("optimizer", ["adam", "adamw"])
def test_adam_and_adamw_reduce_the_loss_as_torch_does(client, optimizer) -> None:
    config = LocalTrainingConfig(steps=30, batch_size=32, optimizer=optimizer, weight_decay=1e-2, betas=(0.8, 0.99))
    trainer = LocalTrainer(SPEC, config)
    theta = trainer.initial_parameters(seed=0)
    res = trainer.train(theta, client, lr=0.01, generator=gen(1))
    assert res.momentum_buffer is None and res.steps == 30
    assert loss_at(theta + res.delta, client) < 0.5 * loss_at(theta, client)
    ref = reference_adam(theta, client, config, 0.01, 1, decoupled=optimizer == "adamw")
    torch.testing.assert_close(res.delta, ref, rtol=1e-5, atol=1e-6)
    # fresh state every job: the same job twice gives the same bits
    assert torch.equal(trainer.train(theta, client, lr=0.01, generator=gen(1)).delta, res.delta)


def test_adam_and_adamw_differ_with_weight_decay_only(client) -> None:
    def delta(optimizer, wd):
        trainer = LocalTrainer(SPEC, LocalTrainingConfig(steps=10, batch_size=32, optimizer=optimizer, weight_decay=wd))
        theta = trainer.initial_parameters(seed=0)
        return trainer.train(theta, client, lr=0.01, generator=gen(2)).delta

    assert torch.equal(delta("adam", 0.0), delta("adamw", 0.0))
    adam, adamw = delta("adam", 0.1), delta("adamw", 0.1)
    assert not torch.allclose(adam, adamw, atol=1e-6)
    assert not torch.equal(delta("sgd", 0.0), delta("adam", 0.0))


# ---------------------------------------------------------------------------------------------------------------
# Gradient clipping and label smoothing


def test_grad_clip_bounds_every_step(client) -> None:
    lr, clip = 1000.0, 0.05
    one = LocalTrainer(SPEC, LocalTrainingConfig(steps=1, batch_size=None, grad_clip=clip))
    theta = one.initial_parameters(seed=0)
    step = one.train(theta, client, lr=lr, generator=gen(0)).delta
    assert float(step.norm()) <= lr * clip * (1 + 1e-5)
    unclipped = LocalTrainer(SPEC, LocalTrainingConfig(steps=1, batch_size=None))
    assert float(unclipped.train(theta, client, lr=lr, generator=gen(0)).delta.norm()) > lr * clip  # clip was active
    many = LocalTrainer(SPEC, LocalTrainingConfig(steps=20, batch_size=16, grad_clip=clip))
    res = many.train(theta, client, lr=lr, generator=gen(1))
    assert bool(torch.isfinite(res.delta).all()) and float(res.delta.norm()) <= 20 * lr * clip * (1 + 1e-5)


def test_grad_clip_applies_to_the_loss_gradient_before_weight_decay(client) -> None:
    clip, wd, lr = 1e-3, 0.1, 0.5
    trainer = LocalTrainer(SPEC, LocalTrainingConfig(steps=1, batch_size=None, grad_clip=clip, weight_decay=wd))
    theta = trainer.initial_parameters(seed=0)
    delta = trainer.train(theta, client, lr=lr, generator=gen(0)).delta
    model = build_model(SPEC, seed=0)
    unflatten_parameters(model, theta)
    F.cross_entropy(model(client.x), client.y).backward()
    g = torch.cat([p.grad.reshape(-1) for p in model.parameters()])
    expected = -lr * (g * min(1.0, clip / (float(g.norm()) + 1e-6)) + wd * theta)
    torch.testing.assert_close(delta, expected, rtol=1e-4, atol=1e-7)


def test_label_smoothing_is_torch_cross_entropys(client) -> None:
    smooth = LocalTrainer(SPEC, LocalTrainingConfig(steps=1, batch_size=None, label_smoothing=0.1))
    plain = LocalTrainer(SPEC, LocalTrainingConfig(steps=1, batch_size=None))
    theta = smooth.initial_parameters(seed=0)
    a = smooth.train(theta, client, lr=0.1, generator=gen(0))
    b = plain.train(theta, client, lr=0.1, generator=gen(0))
    assert a.loss_mean == pytest.approx(loss_at(theta, client, label_smoothing=0.1), rel=1e-6)
    assert b.loss_mean == pytest.approx(loss_at(theta, client), rel=1e-6)
    assert a.loss_mean != b.loss_mean and not torch.equal(a.delta, b.delta)


# ---------------------------------------------------------------------------------------------------------------
# Custom loops


def _register_loop() -> None:
    if LOOP in TRAINING_LOOPS:
        return

    @register_training_loop(LOOP)
    def torch_sgd(model, data, config, rng):
        assert isinstance(config, LoopConfig) and config.device == torch.device("cpu")
        opt = torch.optim.SGD(model.parameters(), lr=config.lr)
        batches, _ = minibatch_indices(len(data), config.training, rng, 0)
        total = 0.0
        for b in batches:
            opt.zero_grad()  # set_to_none: the trainer's own model must not care
            loss = F.cross_entropy(model(data.x[b]), data.y[b])
            loss.backward()
            opt.step()
            total += float(loss.detach())
        return {"loss": total / len(batches), "steps": len(batches), "accuracy": 0.5}


def test_a_registered_loop_trains_and_its_delta_is_applied(client) -> None:
    _register_loop()
    config = LocalTrainingConfig(steps=15, batch_size=32)
    custom = TrainingPlan(steps=15, lr=0.1, loop=LOOP).trainer(SPEC)
    builtin = LocalTrainer(SPEC, config)
    theta = builtin.initial_parameters(seed=0)
    res = custom.train(theta, client, lr=0.1, generator=gen(3))
    ref = builtin.train(theta, client, lr=0.1, generator=gen(3))
    assert res.num_samples == len(client) and res.steps == 15 and res.momentum_buffer is None
    assert math.isfinite(res.loss_mean) and res.lr == 0.1
    torch.testing.assert_close(res.delta, ref.delta, rtol=1e-4, atol=1e-6)  # torch's SGD on the same minibatches
    assert loss_at(theta + res.delta, client) < loss_at(theta, client)
    # the trainer's own model is untouched by the loop: still bound, still evaluates θ
    assert custom.flat.is_bound()
    assert custom.evaluate(theta, client).loss == pytest.approx(loss_at(theta, client), rel=1e-5)
    assert torch.equal(custom.train(theta, client, lr=0.1, generator=gen(3)).delta, res.delta)


def test_a_custom_loop_refuses_what_only_the_builtin_loop_does(client) -> None:
    _register_loop()
    trainer = LocalTrainer(SPEC, LocalTrainingConfig(steps=2, batch_size=8), loop=LOOP)
    theta = trainer.initial_parameters(seed=0)
    zeros = torch.zeros_like(theta)
    for extra, word in (
        ({"prox_mu": 0.1}, "prox_mu"),
        ({"gradient_correction": zeros}, "gradient_correction"),
        ({"momentum_buffer": zeros}, "momentum_buffer"),
        ({"batch_transform": lambda x, y: (x, y)}, "batch_transform"),
    ):
        with pytest.raises(ConfigError) as e:
            trainer.train(theta, client, lr=0.1, generator=gen(0), **extra)
        assert word in one_line(e) and LOOP in str(e.value)
    prox = LocalTrainer(SPEC, LocalTrainingConfig(steps=2, batch_size=8, prox_mu=0.5), loop=LOOP)
    with pytest.raises(ConfigError) as e:
        prox.train(theta, client, lr=0.1, generator=gen(0))
    assert "prox_mu" in one_line(e)
    trainer.train(theta, client, lr=0.1, generator=gen(0), prox_mu=0.0)  # μ = 0 is no FedProx
    with pytest.raises(ConfigError) as e:
        TrainingPlan(loop="no_such_loop").trainer(SPEC)
    assert "no_such_loop" in one_line(e)
    with pytest.raises(ConfigError):
        register_training_loop(LOOP)(lambda *a: None)  # registered twice


# ---------------------------------------------------------------------------------------------------------------
# Refusals


@pytest.mark.parametrize(
    "bad, word",
    [
        ({"optimizer": "adam", "momentum": 0.9, "nesterov": True}, "nesterov"),
        ({"optimizer": "adamw", "momentum": 0.9}, "momentum"),
        ({"optimizer": "rmsprop"}, "optimizer"),
        ({"betas": (0.9,)}, "betas"),
        ({"betas": (0.9, 1.0)}, "betas"),
        ({"eps": 0.0}, "eps"),
        ({"grad_clip": -1.0}, "grad_clip"),
        ({"grad_clip": float("inf")}, "grad_clip"),
        ({"label_smoothing": 1.0}, "label_smoothing"),
        ({"label_smoothing": "0.1"}, "label_smoothing"),
    ],
)
def test_config_refusals_are_one_line(bad, word) -> None:
    with pytest.raises(ConfigError) as e:
        LocalTrainingConfig(steps=1, **bad)
    assert word in one_line(e)


def test_adam_refuses_a_momentum_buffer(client) -> None:
    trainer = LocalTrainer(SPEC, LocalTrainingConfig(steps=1, batch_size=8, optimizer="adam"))
    theta = trainer.initial_parameters(seed=0)
    with pytest.raises(ConfigError) as e:
        trainer.train(theta, client, lr=0.1, generator=gen(0), momentum_buffer=torch.zeros_like(theta))
    assert "momentum_buffer" in one_line(e)


# ---------------------------------------------------------------------------------------------------------------
# TrainingPlan


def test_plan_round_trips_through_params_and_the_canonical_encoding() -> None:
    plan = TrainingPlan(
        epochs=3, steps=0, batch_size=0, lr=1, schedule_name="piecewise",
        schedule_params={"boundaries": [2, 5], "values": [0.1, 0.05, 0.01]}, weight_decay=1e-2, prox_mu=0,
        sampling="shuffle", optimizer="adamw", betas=[0.8, 0.95], eps=1e-6, grad_clip=2, label_smoothing=0.05,
        loop="some_app_loop", seed=2**64 - 1,
    )
    params = plan.to_params()
    assert list(params) == [
        "steps", "epochs", "batch_size", "lr", "schedule", "schedule_params", "momentum", "nesterov", "weight_decay",
        "prox_mu", "sampling", "optimizer", "betas", "eps", "grad_clip", "label_smoothing", "loop", "seed",
    ]
    assert type(params["lr"]) is float and type(params["prox_mu"]) is float and type(params["grad_clip"]) is float
    assert params["betas"] == [0.8, 0.95] and params["schedule_params"] == {"boundaries": [2, 5], "values": [0.1, 0.05, 0.01]}
    assert type(params["schedule_params"]) is dict and type(params["schedule_params"]["values"]) is list
    assert TrainingPlan.from_params(params, "test") == plan
    wire = ledger.encode(params)
    decoded = ledger.decode(wire)
    again = TrainingPlan.from_params(decoded, "genesis")
    assert again == plan and ledger.encode(again.to_params()) == wire
    assert [again.schedule()(t) for t in (0, 2, 5)] == [0.1, 0.05, 0.01]
    assert again.config().batch_size is None and again.config().epochs == 3 and again.config().steps is None
    assert ledger.encode(TrainingPlan().to_params()) == ledger.encode(TrainingPlan.from_params(
        ledger.decode(ledger.encode(TrainingPlan().to_params())), "x").to_params())


def test_plan_from_params_is_strict() -> None:
    good = TrainingPlan().to_params()
    cases = [
        ({**good, "optimiser": "adam"}, "optimiser"),
        ({k: v for k, v in good.items() if k != "seed"}, "seed"),
        ({**good, "steps": 10.0}, "steps"),
        ({**good, "steps": True}, "steps"),
        ({**good, "lr": "0.1"}, "lr"),
        ({**good, "nesterov": 1}, "nesterov"),
        ({**good, "betas": [0.9]}, "betas"),
        ({**good, "schedule": 3}, "schedule"),
        ({**good, "schedule_params": [1]}, "schedule_params"),
        ({**good, "optimizer": "lion"}, "optimizer"),
        ({**good, "momentum": 0.9, "optimizer": "adam"}, "momentum"),
        ({**good, "epochs": 2}, "epochs"),
        ({**good, "seed": -1}, "seed"),
        ({**good, "schedule": "no_such_schedule"}, "no_such_schedule"),
    ]
    for d, word in cases:
        with pytest.raises(ConfigError) as e:
            TrainingPlan.from_params(d, "genesis.toml: protocol.params.training")
        msg = one_line(e)
        assert msg.startswith("genesis.toml: protocol.params.training: ") and word in msg, msg
    with pytest.raises(ConfigError):
        TrainingPlan.from_params(["steps"], "src")  # type: ignore[arg-type]


def test_plan_builds_the_trainer_it_describes(client) -> None:
    plan = TrainingPlan(steps=4, batch_size=16, lr=0.2, momentum=0.9, nesterov=True, schedule_name="inverse_sqrt")
    trainer = plan.trainer(SPEC, "cpu")
    assert trainer.config == LocalTrainingConfig(steps=4, batch_size=16, momentum=0.9, nesterov=True)
    assert trainer.loop == "" and trainer.device == torch.device("cpu")
    assert plan.schedule() == schedule_spec("inverse_sqrt", {"lr0": 0.2})
    given = TrainingPlan(lr=0.2, schedule_name="inverse_sqrt", schedule_params={"lr0": 0.7})
    assert given.schedule()(0) == 0.7  # the schedule's own base rate wins


# ---------------------------------------------------------------------------------------------------------------
# The scenario's plan


def legacy_world_training(tr):
    """What ``sim.World.build`` built from a ``[training]`` section before the plan existed (commit 10055e0)."""
    config = LocalTrainingConfig(
        steps=None if tr.epochs else tr.steps,
        epochs=tr.epochs or None,
        batch_size=tr.batch_size,
        momentum=tr.momentum,
        weight_decay=tr.weight_decay,
        prox_mu=tr.prox_mu,
        sampling=tr.sampling,
    )
    sched_params = dict(tr.schedule_params)
    fields_ = getattr(SCHEDULES.get(tr.schedule), "__dataclass_fields__", {})
    for lr_key in ("lr", "lr0"):
        if lr_key in fields_:
            sched_params.setdefault(lr_key, tr.lr)
    return config, schedule_spec(tr.schedule, sched_params)


def test_scenario_plan_without_new_keys_is_what_world_build_built() -> None:
    from sim._scenario import load_scenario  # noqa: PLC0415

    checked = 0
    for path in sorted((ROOT / "scenarios").glob("*.toml")):
        sc = load_scenario(path)
        tr = sc.training
        assert (tr.optimizer, tr.nesterov, tr.betas, tr.eps, tr.grad_clip, tr.label_smoothing, tr.loop) == (
            "sgd", False, (0.9, 0.999), 1e-8, 0.0, 0.0, "")
        plan = tr.plan(sc.seed)
        config, schedule = legacy_world_training(tr)
        assert plan.config() == config, path.name
        assert plan.schedule() == schedule and [plan.schedule()(t) for t in range(50)] == [schedule(t) for t in range(50)]
        assert plan.seed == sc.seed and ledger.encode(plan.to_params())
        checked += 1
    assert checked >= 20


def test_scenario_new_keys_reach_the_plan_and_bad_ones_are_refused(tmp_path) -> None:
    from node import ConfigFileError  # noqa: PLC0415
    from sim._scenario import load_scenario  # noqa: PLC0415

    base = (ROOT / "scenarios" / "quickstart.toml").read_text()
    path = tmp_path / "adamw.toml"
    path.write_text(base.replace("[training]", "[training]\noptimizer = \"adamw\"\nbetas = [0.8, 0.99]\neps = 1e-6\n"
                                 "grad_clip = 5\nlabel_smoothing = 0.1\nloop = \"my_loop\"", 1))
    plan = load_scenario(path).training.plan(7)
    assert (plan.optimizer, plan.betas, plan.eps, plan.grad_clip, plan.label_smoothing, plan.loop, plan.seed) == (
        "adamw", (0.8, 0.99), 1e-6, 5.0, 0.1, "my_loop", 7)
    for extra, word in (
        ('optimizer = "adam"\nmomentum = 0.9', "momentum"),
        ("nesterov = true", "nesterov"),
        ('optimizer = "sgdw"', "optimizer"),
        ("betas = [0.9]", "betas"),
        ("betas = [0.9, 1.5]", "betas"),
        ("eps = 0", "eps"),
        ("grad_clip = -1", "grad_clip"),
        ("label_smoothing = 1", "label_smoothing"),
        ('loop = "not a name"', "loop"),
    ):
        path.write_text(base.replace("[training]", f"[training]\n{extra}", 1))
        with pytest.raises(ConfigFileError) as e:
            load_scenario(path)
        assert word in one_line(e), extra
