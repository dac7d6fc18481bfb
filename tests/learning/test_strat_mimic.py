"""MimiC, uniform FedAvg and SCAFFOLD (mimic spec §2.2-§2.6): the §2.3 invariants and §6.3 A1-A4, A6 on real
gradient steps (quadratic clients f_i = ½ Σ h_i (w − a_i)², and the digits MLP), state codecs, strict params."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence

import numpy as np
import pytest
import torch

from learning.availability import BoundedDropout, TimeVaryingDropout
from learning.data import DigitsSpec
from learning._errors import ConfigError
from learning.models import MLPSpec
from learning.data import KClassesPartition, partition_dataset
from learning.strategies import (
    STRATEGIES,
    AggregateResult,
    ClientJob,
    ClientUpdate,
    FedAvg,
    FedAvgUniform,
    LocalOutcome,
    LocalTrain,
    MimiC,
    RoundInfo,
    Scaffold,
    ScaffoldActiveMean,
    Strategy,
    decode_scaffold_client_state,
    mimic_corrections,
    scaffold_control,
    strategy_from_params,
)
from learning.training import LocalTrainer, LocalTrainingConfig

# --- hosts ---------------------------------------------------------------------------------------------------


def quadratic_train(a: np.ndarray, h: np.ndarray, steps: int) -> LocalTrain:
    """Full-batch gradient descent on ``f_i(w) = ½ Σ_j h_j (w_j − a_j)²`` (real steps, the host's contract)."""

    def train(
        model: np.ndarray,
        *,
        lr: float,
        gradient_correction: np.ndarray | None = None,
        momentum_buffer: np.ndarray | None = None,
        prox_mu: float | None = None,
    ) -> LocalOutcome:
        w0 = model.astype(np.float64)
        w = w0.copy()
        corr = 0.0 if gradient_correction is None else gradient_correction.astype(np.float64)
        for _ in range(steps):
            w = w - lr * (h * (w - a) + corr)
        return LocalOutcome(
            delta=(w - w0).astype(np.float32), n_samples=10, steps=steps, lr=lr, loss=float(0.5 * h @ (w - a) ** 2)
        )

    return train


def members_of(n: int) -> tuple[str, ...]:
    return tuple(f"p{i:02d}" for i in range(n))


Schedule = Callable[[int], Sequence[int]]  # fl_round -> active member indices


def run(
    strategy: Strategy,
    trains: Sequence[LocalTrain],
    w0: np.ndarray,
    rounds: int,
    active: Schedule,
    *,
    on_round: Callable[[int, AggregateResult], None] | None = None,
) -> tuple[np.ndarray, bytes | None, dict[int, bytes | None]]:
    """The host loop: the active clients train from w_t with the previous block's state; the server aggregates."""
    members = members_of(len(trains))
    w, state = w0.astype(np.float32), None
    client_states: dict[int, bytes | None] = {}
    for r in range(1, rounds + 1):
        ups = []
        for i in sorted(active(r)):
            job = ClientJob(fl_round=r, model=w, server_state=state, client_state=client_states.get(i), lr=123.0)
            up = strategy.local_update(job, trains[i])
            client_states[i] = up.client_state
            ups.append(ClientUpdate(members[i], up.vector, up.n_samples))
        info = RoundInfo(fl_round=r, members=members, sampled=members)
        res = strategy.aggregate(info, w, ups, state=state, rng=np.random.default_rng(r))
        if on_round is not None:
            on_round(r, res)
        w, state = res.model, res.state
    return w, state, client_states


def everyone(n: int) -> Schedule:
    return lambda r: range(n)


def periodic(periods: Sequence[int]) -> Schedule:
    """Scheme 1 with fixed periods, through the real availability model (no floor)."""
    model = BoundedDropout(members=len(periods), tau_max=max(periods), periods=tuple(periods), min_active=0)
    n = len(periods)
    return lambda r: [i for i, o in model.outcome(r, range(n), rng=np.random.default_rng(r)).items() if o == 0]


def quad_problem(n: int, d: int, seed: int, hetero: bool) -> tuple[np.ndarray, np.ndarray]:
    g = np.random.default_rng(seed)
    a = g.normal(0.0, 2.0, size=(n, d))
    h = g.uniform(0.2, 2.0, size=(n, d)) if hetero else np.ones((n, d))
    return a, h


PERIODS = (1, 1, 2, 3, 5, 7, 10, 10, 10, 10)  # §6.2 quad.py


def mimic(**kw: object) -> MimiC:
    return MimiC.from_params({"lr": 0.1, "local_steps": 5} | kw)


def fedavg_u(**kw: object) -> FedAvgUniform:
    return FedAvgUniform.from_params({"lr": 0.1, "local_steps": 5} | kw)


# --- §2.3 invariants ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("units", ["gradient", "delta"])
@pytest.mark.parametrize("schedule", ["bounded", "timevar"])
def test_zero_sum_of_corrections_every_round(units: str, schedule: str) -> None:
    """§2.3 invariant 1 / §6.3 A2: ‖Σ_i c^i‖_∞ ≤ 1e-8 (1 + max_i ‖c^i‖_∞) at every round, under dropout."""
    a, h = quad_problem(10, 5, seed=1, hetero=True)
    trains = [quadratic_train(a[i], h[i], 5) for i in range(10)]
    if schedule == "bounded":
        sched = periodic(PERIODS)
    else:
        tv = TimeVaryingDropout(members=10, ratio=0.3)
        sched = lambda r: [i for i, o in tv.outcome(r, range(10), rng=np.random.default_rng(r)).items() if o == 0]  # noqa: E731
    s = mimic(units=units, lr_schedule="exponential", lr_gamma=0.97)
    checked = []

    def check(r: int, res: AggregateResult) -> None:
        assert res.state is not None
        table = mimic_corrections(res.state, 5, units=units)
        assert len(table.vectors) == 10  # round 1 is all-active
        c = np.stack([table.vectors[p] for p in sorted(table.vectors)])
        assert np.abs(c.sum(axis=0)).max() <= 1e-8 * (1.0 + np.abs(c).max())
        assert np.abs(c).max() > 1e-3  # the corrections are not trivially zero
        checked.append(r)

    run(s, trains, np.zeros(5), 40, sched, on_round=check)
    assert checked == list(range(1, 41))


def test_full_participation_mimic_equals_fedavg_on_quadratic() -> None:
    """§2.3 invariant 2 / A1: with everyone active the corrections cancel in the mean."""
    a, h = quad_problem(6, 4, seed=2, hetero=True)
    trains = [quadratic_train(a[i], h[i], 5) for i in range(6)]
    traj: dict[str, list[np.ndarray]] = {"m": [], "f": []}
    for key, s in (
        ("m", mimic(lr_schedule="exponential", lr_gamma=0.9)),
        ("f", fedavg_u(lr_schedule="exponential", lr_gamma=0.9)),
    ):
        run(s, trains, np.full(4, 3.0), 30, everyone(6), on_round=lambda r, res, k=key: traj[k].append(res.model))
    for wm, wf in zip(traj["m"], traj["f"], strict=True):
        np.testing.assert_allclose(wm, wf, rtol=0, atol=2e-6)
    assert np.abs(traj["m"][-1] - traj["m"][0]).max() > 0.1  # it moved


@pytest.fixture(scope="module")
def digits_clients() -> tuple[LocalTrainer, list[object], torch.Tensor]:
    splits = DigitsSpec().load()
    part = partition_dataset(KClassesPartition(num_clients=8, classes_per_client=2), splits.train, seed=0)
    data = [splits.train.subset(idx) for idx in part.clients]
    trainer = LocalTrainer(
        MLPSpec(in_features=64, hidden=(32,), init="he"), LocalTrainingConfig(steps=10, batch_size=16)
    )
    return trainer, data, trainer.initial_parameters(seed=0)


def torch_host(trainer: LocalTrainer, data: object, client: int) -> Callable[[int], LocalTrain]:
    """The digits MLP host: per-(client, round) seeded minibatches, so every strategy sees the same streams."""

    def for_round(r: int) -> LocalTrain:
        def train(model: np.ndarray, *, lr: float, gradient_correction=None, momentum_buffer=None, prox_mu=None):  # noqa: ANN001, ANN202
            gen = torch.Generator().manual_seed(1000 * client + r)
            corr = None if gradient_correction is None else torch.from_numpy(np.array(gradient_correction))
            res = trainer.train(torch.from_numpy(np.array(model)), data, lr=lr, generator=gen, gradient_correction=corr)
            return LocalOutcome(
                delta=res.delta.numpy(), n_samples=res.num_samples, steps=res.steps, lr=res.lr, loss=res.loss_mean
            )

        return train

    return for_round


def test_full_participation_mimic_fedavg_uniform_and_fedavg_agree_on_digits_mlp(digits_clients) -> None:  # noqa: ANN001
    """A1 with real torch training: MimiC (G), MimiC (D), FedAvgUniform and the sample-weighted "fedavg" (equal
    client sizes, constant lr = the host lr) give the same model after every round."""
    trainer, data, theta0 = digits_clients
    assert len({len(x) for x in data}) == 1  # equal sizes: sample weights = uniform weights
    hosts = [torch_host(trainer, data[i], i) for i in range(8)]
    members = members_of(8)
    strategies = {
        "mimic": MimiC.from_params({"lr": 0.05, "local_steps": 10}),
        "mimic_d": MimiC.from_params({"lr": 0.05, "units": "delta"}),
        "fedavg_uniform": FedAvgUniform.from_params({"lr": 0.05, "local_steps": 10}),
        "fedavg": FedAvg(),
    }
    models = {k: theta0.numpy().copy() for k in strategies}
    states: dict[str, bytes | None] = {k: None for k in strategies}
    for r in range(1, 6):
        for k, s in strategies.items():
            ups = []
            for i in range(8):
                job = ClientJob(fl_round=r, model=models[k], server_state=states[k], client_state=None, lr=0.05)
                up = s.local_update(job, hosts[i](r))
                ups.append(ClientUpdate(members[i], up.vector, up.n_samples))
            res = s.aggregate(
                RoundInfo(fl_round=r, members=members, sampled=members),
                models[k],
                ups,
                state=states[k],
                rng=np.random.default_rng(0),
            )
            models[k], states[k] = res.model, res.state
        for k in ("mimic", "mimic_d", "fedavg_uniform"):
            np.testing.assert_allclose(models[k], models["fedavg"], rtol=0, atol=1e-5)
    assert np.abs(models["fedavg"] - theta0.numpy()).max() > 0.01


def test_single_active_client_keeps_its_correction_and_new_clients_add_raw_gradient() -> None:
    """§2.3 invariant 3 / A4: |S_t| = 1 ⇒ v_t = ĝ_i + c^i and c^i unchanged; a never-seen client has c = 0."""
    a, h = quad_problem(4, 3, seed=3, hetero=True)
    trains = [quadratic_train(a[i], h[i], 5) for i in range(4)]
    s = mimic()
    members = members_of(4)
    # rounds 1-2: clients 0-2 active (client 3 never seen), round 3: client 0 alone, round 4: client 3 alone
    sched = {1: [0, 1, 2], 2: [0, 1, 2], 3: [0], 4: [3]}
    w, state = np.zeros(3, dtype=np.float32), None
    for r in (1, 2):
        w, state, _ = _one_round(s, trains, members, r, sched[r], w, state)
    before = mimic_corrections(state, 3)
    g0 = _upload(s, trains[0], w, 3)
    w3, state3, rec = _one_round(s, trains, members, 3, [0], w, state)
    after = mimic_corrections(state3, 3)
    np.testing.assert_allclose(after.vectors["p00"], before.vectors["p00"], rtol=0, atol=1e-12)
    for p in ("p01", "p02"):
        assert np.array_equal(after.vectors[p], before.vectors[p])  # inactive: untouched
    expected = (w.astype(np.float64) - 0.5 * (g0.astype(np.float64) + before.vectors["p00"])).astype(np.float32)
    assert np.array_equal(w3, expected)
    assert rec["staleness"] == [1] and rec["active"] == ["p00"] and rec["weights"] == [1.0]
    # client 3, never active: its raw ĝ moves the model, and its new c is v − ĝ = 0
    g3 = _upload(s, trains[3], w3, 4)
    w4, state4, rec4 = _one_round(s, trains, members, 4, [3], w3, state3)
    assert np.array_equal(w4, (w3.astype(np.float64) - 0.5 * g3.astype(np.float64)).astype(np.float32))
    assert not mimic_corrections(state4, 3).vectors["p03"].any()
    assert rec4["staleness"] == [0]


def _upload(s: Strategy, train: LocalTrain, w: np.ndarray, r: int) -> np.ndarray:
    return s.local_update(ClientJob(fl_round=r, model=w, server_state=None, client_state=None, lr=1.0), train).vector


def _one_round(s, trains, members, r, active, w, state):  # noqa: ANN001, ANN202
    ups = [ClientUpdate(members[i], _upload(s, trains[i], w, r), 10) for i in sorted(active)]
    res = s.aggregate(
        RoundInfo(fl_round=r, members=members, sampled=members), w, ups, state=state, rng=np.random.default_rng(0)
    )
    return res.model, res.state, res.record


def test_quadratic_biased_dropout_mimic_reaches_mean_fedavg_does_not() -> None:
    """§2.3 invariant 4 / A3: f_i = ½‖w − a_i‖², full batch, K = 5, η_L = 0.1, periods [1,1,2,3,5,7,10,10,10,10]."""
    a, h = quad_problem(10, 5, seed=0, hetero=False)
    trains = [quadratic_train(a[i], h[i], 5) for i in range(10)]
    target = a.mean(axis=0)
    w_m, _, _ = run(mimic(), trains, np.zeros(5), 150, periodic(PERIODS))
    w_f, _, _ = run(fedavg_u(), trains, np.zeros(5), 150, periodic(PERIODS))
    assert np.linalg.norm(w_m.astype(np.float64) - target) < 1e-6  # observed 7.7e-8 (the float32 model's floor)
    assert np.linalg.norm(w_f.astype(np.float64) - target) > 0.1  # observed 2.57
    # decaying lr: Convention G (stale corrections re-scaled by the current η_t) still converges; Convention D's
    # stale deltas carry old, larger rates and lag far behind (§2.0, §7 item 4)
    w_g, _, _ = run(mimic(lr_schedule="inverse_sqrt"), trains, np.zeros(5), 400, periodic(PERIODS))
    w_d, _, _ = run(mimic(lr_schedule="inverse_sqrt", units="delta"), trains, np.zeros(5), 400, periodic(PERIODS))
    err_g, err_d = np.linalg.norm(w_g.astype(np.float64) - target), np.linalg.norm(w_d.astype(np.float64) - target)
    assert err_g < 1e-3 and err_d > 10 * err_g  # observed 1.4e-4 and 1.3e-2


def test_heterogeneous_curvature_mimic_reaches_full_fedavg_fixed_point_not_optimum() -> None:
    """§2.3 invariant 5 / A3b: with h_i ~ U[0.2, 2] and K = 5, MimiC under dropout converges to the fixed point of
    full-participation FedAvg, Σ_i ĝ_i(w*) = 0 ⇒ w* = Σ s_i a_i / Σ s_i with s_i = (1 − (1 − η h_i)^K)/(ηK)."""
    a, h = quad_problem(8, 5, seed=4, hetero=True)
    trains = [quadratic_train(a[i], h[i], 5) for i in range(8)]
    s_i = (1 - (1 - 0.1 * h) ** 5) / (0.1 * 5)
    fixed = (s_i * a).sum(axis=0) / s_i.sum(axis=0)
    optimum = (h * a).sum(axis=0) / h.sum(axis=0)
    w_m, _, _ = run(mimic(), trains, np.zeros(5), 150, periodic(PERIODS[:8]))
    assert np.linalg.norm(w_m.astype(np.float64) - fixed) < 1e-6  # observed 9e-8
    assert np.linalg.norm(fixed - optimum) > 0.05  # client drift is not removed (0.14)
    w_f, _, _ = run(fedavg_u(), trains, np.zeros(5), 150, periodic(PERIODS[:8]))
    assert np.linalg.norm(w_f.astype(np.float64) - fixed) > 0.1


# --- units and learning rates ------------------------------------------------------------------------------------


@pytest.mark.parametrize("units", ["gradient", "delta"])
def test_stale_correction_units_exact(units: str) -> None:
    """§2.0: K = 1, η_L(t) = 0.4·0.5^t. Round 1 both clients; round 2 only client 0. In G the stale correction is
    applied at the current η_2 = 0.2; in D it keeps η_1 = 0.4 (a delta made at the old rate)."""
    a = np.array([[1.0], [3.0]])
    h = np.ones((2, 1))
    trains = [quadratic_train(a[i], h[i], 1) for i in range(2)]
    s = MimiC.from_params({"lr": 0.4, "lr_schedule": "exponential", "lr_gamma": 0.5, "local_steps": 1, "units": units})
    members = members_of(2)
    w1, st1, _ = _one_round(s, trains, members, 1, [0, 1], np.zeros(1, np.float32), None)
    # round 1 from w = 0: ĝ_0 = −1, ĝ_1 = −3, v = −2, w1 = 0.8; c_0 = v − ĝ_0 = −1 (gradient units)
    assert w1[0] == np.float32(0.8)
    w2, _, _ = _one_round(s, trains, members, 2, [0], w1, st1)
    g0 = np.float64(np.float32(0.8)) - 1.0  # ĝ_0 at w1 (K = 1: one exact gradient)
    if units == "gradient":
        expected = np.float64(np.float32(0.8)) - 0.2 * (g0 + -1.0)
    else:  # Δ_0 = −0.2 ĝ_0, stored c_0 = v_Δ − Δ_0 with v_Δ = 0.8, Δ_0(round 1) = 0.4
        expected = np.float64(np.float32(0.8)) + (-0.2 * g0 + 0.4)
    assert w2[0] == pytest.approx(expected, abs=1e-6)


def test_gradient_upload_uses_steps_taken_and_strategy_lr() -> None:
    """Eq. (3): ĝ = (w_t − w_K)/(η_L(t) K_i) with K_i = LocalOutcome.steps; ``job.lr`` is ignored."""
    seen: list[float] = []

    def train(model, *, lr, gradient_correction=None, momentum_buffer=None, prox_mu=None):  # noqa: ANN001, ANN202
        seen.append(lr)
        return LocalOutcome(delta=np.array([-0.3, 0.6], np.float32), n_samples=7, steps=3, lr=lr, loss=0.0)

    s = MimiC.from_params({"lr": 0.1, "lr_schedule": "exponential", "lr_gamma": 0.5, "lr_min": 0.02, "local_steps": 9})
    up = s.local_update(
        ClientJob(fl_round=2, model=np.zeros(2, np.float32), server_state=None, client_state=None, lr=9.0), train
    )
    assert seen == [0.05]  # t = fl_round − 1 = 1
    np.testing.assert_allclose(up.vector, [0.3 / 0.15, -0.6 / 0.15], rtol=1e-6)
    assert up.n_samples == 7 and up.client_state is None
    assert s.lr_at(1) == 0.1 and s.lr_at(4) == 0.02  # floor
    assert s.server_step(2) == pytest.approx(-9 * 0.05)
    d = MimiC.from_params({"lr": 0.1, "units": "delta"})
    assert np.array_equal(
        d.local_update(
            ClientJob(fl_round=1, model=np.zeros(2, np.float32), server_state=None, client_state=None, lr=1.0), train
        ).vector,
        np.array([-0.3, 0.6], np.float32),
    )

    def liar(model, *, lr, **kw):  # noqa: ANN001, ANN003, ANN202
        return LocalOutcome(delta=np.zeros(2, np.float32), n_samples=1, steps=1, lr=lr * 2, loss=0.0)

    with pytest.raises(ValueError, match="lr"):
        s.local_update(
            ClientJob(fl_round=1, model=np.zeros(2, np.float32), server_state=None, client_state=None, lr=1.0), liar
        )


# --- SCAFFOLD ------------------------------------------------------------------------------------------------------


def test_scaffold_full_participation_reaches_the_optimum() -> None:
    """§2.6 standard SCAFFOLD (option II), heterogeneous curvature, K = 5: control variates remove client drift, so
    it reaches argmin f = Σ h_i a_i / Σ h_i, which full-participation FedAvg misses."""
    a, h = quad_problem(6, 4, seed=5, hetero=True)
    trains = [quadratic_train(a[i], h[i], 5) for i in range(6)]
    optimum = (h * a).sum(axis=0) / h.sum(axis=0)
    s = Scaffold.from_params({"lr": 0.1})
    w_s, state, cstates = run(s, trains, np.zeros(4), 200, everyone(6))
    assert np.linalg.norm(w_s.astype(np.float64) - optimum) < 1e-6  # observed 7e-8
    w_f, _, _ = run(fedavg_u(), trains, np.zeros(4), 200, everyone(6))
    assert np.linalg.norm(w_f.astype(np.float64) - optimum) > 0.05  # observed 0.196
    # c = (1/N) Σ_i c_i, and c_i → ∇f_i(x*) (option II with exact gradients)
    c = scaffold_control(state, 4)
    ci = np.stack([decode_scaffold_client_state(cstates[i], 4) for i in range(6)])
    np.testing.assert_allclose(c, ci.mean(axis=0), rtol=0, atol=1e-12)
    np.testing.assert_allclose(ci, h * (optimum - a), rtol=0, atol=1e-4)


def test_scaffold_under_dropout_keeps_c_the_mean_of_all_client_variates() -> None:
    """c ← c + (1/N) Σ_{S_t} Δc_i (1/N, not 1/|S_t|; §7 item 10) keeps c = (1/N) Σ_i c_i with stale c_i."""
    a, h = quad_problem(10, 3, seed=6, hetero=True)
    trains = [quadratic_train(a[i], h[i], 5) for i in range(10)]
    records = []
    _, state, cstates = run(
        Scaffold.from_params({"lr": 0.05}),
        trains,
        np.zeros(3),
        25,
        periodic(PERIODS),
        on_round=lambda r, res: records.append(res.record),
    )
    ci = np.stack([decode_scaffold_client_state(cstates[i], 3) for i in range(10)])
    np.testing.assert_allclose(scaffold_control(state, 3), ci.mean(axis=0), rtol=0, atol=1e-12)
    assert [rec["uploads"] for rec in records[:3]] == [
        20,
        4,
        6,
    ]  # 2 per active client (A6): t = 0 all 10, t = 1 periods {1, 1}, t = 2 {1, 1, 2}


def test_scaffold_active_mean_sets_c_to_mean_of_active_variates() -> None:
    a, h = quad_problem(10, 3, seed=7, hetero=True)
    trains = [quadratic_train(a[i], h[i], 5) for i in range(10)]
    s = ScaffoldActiveMean.from_params({"lr": 0.05})
    actives: list[list[str]] = []
    _, state, cstates = run(
        s, trains, np.zeros(3), 7, periodic(PERIODS), on_round=lambda r, res: actives.append(res.record["active"])
    )
    last = [int(p[1:]) for p in actives[-1]]
    ci = np.stack([decode_scaffold_client_state(cstates[i], 3) for i in last])
    np.testing.assert_allclose(scaffold_control(state, 3), ci.mean(axis=0), rtol=0, atol=1e-12)
    with pytest.raises(ValueError, match="active_mean"):
        Scaffold.from_params({"lr": 0.05}).aggregate(
            RoundInfo(fl_round=8, members=members_of(10), sampled=members_of(10)),
            np.zeros(3, np.float32),
            [],
            state=state,
            rng=np.random.default_rng(0),
        )


def test_scaffold_client_passes_c_minus_ci_and_uploads_dy_dc() -> None:
    """Sign convention: train_local adds ``gradient_correction`` to each gradient, so the client passes c − c_i."""
    got: list[np.ndarray] = []
    delta = np.array([-0.2, 0.1], np.float32)

    def train(model, *, lr, gradient_correction=None, momentum_buffer=None, prox_mu=None):  # noqa: ANN001, ANN202
        got.append(gradient_correction)
        return LocalOutcome(delta=delta, n_samples=5, steps=4, lr=lr, loss=0.0)

    s = Scaffold.from_params({"lr": 0.5})
    members = members_of(2)
    # a server state with c = [1, -1]: one round where p00 uploaded Δc = [2, -2] with N = 2
    st = s.aggregate(
        RoundInfo(fl_round=1, members=members, sampled=members),
        np.zeros(2, np.float32),
        [ClientUpdate("p00", np.array([0, 0, 2, -2], np.float32), 1)],
        state=None,
        rng=np.random.default_rng(0),
    ).state
    np.testing.assert_array_equal(scaffold_control(st, 2), [1.0, -1.0])
    ci_bytes = s.local_update(
        ClientJob(fl_round=2, model=np.zeros(2, np.float32), server_state=None, client_state=None, lr=1.0), train
    ).client_state
    ci = decode_scaffold_client_state(ci_bytes, 2)  # c = 0: c_i⁺ = −Δ/(K η) = [0.1, −0.05]
    np.testing.assert_allclose(ci, [0.1, -0.05], rtol=1e-6)
    up = s.local_update(
        ClientJob(fl_round=2, model=np.zeros(2, np.float32), server_state=st, client_state=ci_bytes, lr=1.0), train
    )
    np.testing.assert_allclose(got[-1], [1.0 - 0.1, -1.0 + 0.05], rtol=1e-6)
    assert up.vector.shape == (4,) and s.upload_dim(2) == 4
    np.testing.assert_array_equal(up.vector[:2], delta)
    # Δc = c_i⁺ − c_i = (c_i − c − Δ/(Kη)) − c_i = −c + [0.1, −0.05]
    np.testing.assert_allclose(up.vector[2:], [-1.0 + 0.1, 1.0 - 0.05], rtol=1e-6)


# --- records, states, reproducibility, params ------------------------------------------------------------------


def test_records_and_upload_counts() -> None:
    a, h = quad_problem(4, 2, seed=8, hetero=False)
    trains = [quadratic_train(a[i], h[i], 2) for i in range(4)]
    members = members_of(4)
    for s, per in ((mimic(), 1), (fedavg_u(), 1), (Scaffold.from_params({"lr": 0.1}), 2)):
        assert s.upload_dim(7) == 7 * per
        w, st = np.zeros(2, np.float32), None
        ups = [ClientUpdate(members[i], _upload_state(s, trains[i], w, st), 10) for i in (1, 3)]
        res = s.aggregate(
            RoundInfo(fl_round=1, members=members, sampled=members), w, ups, state=st, rng=np.random.default_rng(0)
        )
        assert res.record["uploads"] == 2 * per
        assert res.record["active"] == ["p01", "p03"] and res.record["weights"] == [0.5, 0.5]
        empty = s.aggregate(
            RoundInfo(fl_round=2, members=members, sampled=members),
            res.model,
            [],
            state=res.state,
            rng=np.random.default_rng(0),
        )
        assert np.array_equal(empty.model, res.model) and empty.state == res.state and empty.record["uploads"] == 0


def _upload_state(s: Strategy, train: LocalTrain, w: np.ndarray, st: bytes | None) -> np.ndarray:
    return s.local_update(ClientJob(fl_round=1, model=w, server_state=st, client_state=None, lr=1.0), train).vector


def test_bit_reproducible_and_order_checked() -> None:
    a, h = quad_problem(10, 6, seed=9, hetero=True)
    trains = [quadratic_train(a[i], h[i], 5) for i in range(10)]
    digests = set()
    for _ in range(2):
        w, st, _ = run(mimic(lr_schedule="exponential", lr_gamma=0.95), trains, np.ones(6), 15, periodic(PERIODS))
        digests.add((hashlib.sha256(w.tobytes()).hexdigest(), st))
    assert len(digests) == 1
    members = members_of(10)
    ups = [ClientUpdate(p, np.ones(6, np.float32), 1) for p in ("p03", "p01")]
    with pytest.raises(ValueError, match="sorted"):
        mimic().aggregate(
            RoundInfo(fl_round=1, members=members, sampled=members),
            np.zeros(6, np.float32),
            ups,
            state=None,
            rng=np.random.default_rng(0),
        )
    with pytest.raises(ValueError, match="not a member"):
        mimic().aggregate(
            RoundInfo(fl_round=1, members=members, sampled=members),
            np.zeros(6, np.float32),
            [ClientUpdate("zz", np.ones(6, np.float32), 1)],
            state=None,
            rng=np.random.default_rng(0),
        )


def test_mimic_state_round_trip_and_strict_decoding() -> None:
    a, h = quad_problem(4, 3, seed=10, hetero=True)
    trains = [quadratic_train(a[i], h[i], 5) for i in range(4)]
    s = mimic()
    _, state, _ = run(s, trains, np.zeros(3), 5, periodic((1, 2, 3, 4)))
    members = members_of(4)
    table = s.decode_state(state, 3, members)
    assert s.encode_state(table, 3) == state
    assert table.last == {"p00": 5, "p01": 5, "p02": 4, "p03": 5}
    from ledger import decode, encode

    v = dict(decode(state))
    bad = {
        "truncated": state[:-1],
        "garbage": b"\x00\x01",
        "wrong dim": encode(v | {"dim": 4}),
        "short vectors": encode(v | {"vectors": v["vectors"][:-8]}),
        "unsorted": encode(v | {"peers": list(reversed(v["peers"]))}),
        "non-member": encode(v | {"peers": ["p00", "p01", "p02", "x"]}),
        "nan": encode(v | {"vectors": np.full(12, np.nan).tobytes()}),
        "extra key": encode(v | {"extra": 1}),
        "units": encode(v | {"units": "delta"}),
        "last": encode(v | {"last": [1, 2]}),
        "format": encode(v | {"format": "mifa/1"}),
    }
    for why, blob in bad.items():
        with pytest.raises(ValueError):
            s.decode_state(blob, 3, members)
        assert why
    with pytest.raises(ValueError):
        scaffold_control(state, 3)  # a MimiC state is not a SCAFFOLD state
    f32 = mimic(state_dtype="float32")
    _, st32, _ = run(f32, trains, np.zeros(3), 3, everyone(4))
    assert len(st32) < len(run(s, trains, np.zeros(3), 3, everyone(4))[1])
    assert f32.encode_state(f32.decode_state(st32, 3, members), 3) == st32


def test_scaffold_states_round_trip_and_strict() -> None:
    a, h = quad_problem(3, 2, seed=11, hetero=True)
    trains = [quadratic_train(a[i], h[i], 3) for i in range(3)]
    _, state, cstates = run(Scaffold.from_params({"lr": 0.1}), trains, np.zeros(2), 3, everyone(3))
    from ledger import decode, encode

    v = dict(decode(state))
    assert encode(v) == state
    with pytest.raises(ValueError):
        scaffold_control(encode(v | {"c": v["c"][:8]}), 2)
    with pytest.raises(ValueError):
        scaffold_control(state, 3)
    with pytest.raises(ValueError):
        decode_scaffold_client_state(state, 2)  # a server state is not a client state
    with pytest.raises(ValueError):
        decode_scaffold_client_state(cstates[0][:-2], 2)


@pytest.mark.parametrize(
    ("name", "params", "match"),
    [
        ("mimic", {"local_steps": 5}, "lr is required"),
        ("mimic", {"lr": 0.1}, "local_steps"),
        ("mimic", {"lr": 0.1, "local_steps": 5, "units": "grad"}, "units"),
        ("mimic", {"lr": 0.1, "local_steps": 0}, "local_steps"),
        ("mimic", {"lr": 0.1, "local_steps": True}, "local_steps must be int"),
        ("mimic", {"lr": "0.1", "local_steps": 5}, "lr must be float"),
        ("mimic", {"lr": -0.1, "local_steps": 5}, "lr must be"),
        ("mimic", {"lr": 0.1, "local_steps": 5, "lr_gamma": 0.9}, "apply only to lr_schedule 'exponential'"),
        ("mimic", {"lr": 0.1, "local_steps": 5, "lr_min": 0.001}, "apply only"),
        (
            "mimic",
            {"lr": 0.1, "local_steps": 5, "lr_schedule": "exponential", "lr_gamma": 0.9, "lr_min": -1.0},
            "floor",
        ),
        ("mimic", {"lr": 0.1, "local_steps": 5, "lr_schedule": "exponential"}, "needs lr_gamma"),
        ("mimic", {"lr": 0.1, "local_steps": 5, "lr_schedule": "exponential", "lr_gamma": 1.5}, "gamma"),
        ("mimic", {"lr": 0.1, "local_steps": 5, "lr_schedule": "cosine"}, "lr_schedule"),
        ("mimic", {"lr": 0.1, "local_steps": 5, "state_dtype": "float16"}, "state_dtype"),
        ("mimic", {"lr": 0.1, "local_steps": 5, "clients": -1}, "clients"),
        ("fedavg_uniform", {"lr": 0.1}, "local_steps"),
        ("scaffold", {}, "lr is required"),
        ("scaffold", {"lr": 0.1, "server_lr": 0.0}, "server_lr"),
        ("scaffold_active_mean", {"lr": 0.1, "server_lr": "1"}, "server_lr must be float"),
    ],
)
def test_strict_params(name: str, params: dict[str, object], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        strategy_from_params(name, params)


def test_registered_and_shared_params_ignored() -> None:
    for name in ("mimic", "fedavg_uniform", "scaffold", "scaffold_active_mean"):
        assert name in STRATEGIES
    s = strategy_from_params("mimic", {"lr": 0.01, "local_steps": 625, "training_size": 12, "units": "delta"})
    assert isinstance(s, MimiC) and s.units == "delta" and s.clients_per_round(30) == 30
    assert strategy_from_params("mimic", {"lr": 0.01, "local_steps": 5, "clients": 4}).clients_per_round(30) == 4
