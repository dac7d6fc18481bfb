"""unavailability spec strategies (FedAvg_v, FedProx_v, FedProx, MIFA, cclip, GM, bucketing) against spec §6.1 R0 and §6.3.

The client side runs on a real host trainer for quadratic clients ``f_i(w) = ½‖w − a_i‖²`` (gradient ``w − a_i``):
``s`` local (momentum) gradient steps with an optional proximal term, exactly what ``learning.training._local`` does
for a neural network, in closed form.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np
import pytest

from learning._errors import ConfigError
from learning.strategies import (
    GM,
    MIFA,
    AggregateResult,
    BucketingCClip,
    BucketingGM,
    CClip,
    ClientJob,
    ClientUpdate,
    FedAvg,
    FedAvgV,
    FedProx,
    FedProxV,
    FedRo,
    FedRoTakeover,
    LocalOutcome,
    MemberTable,
    RoundInfo,
    Strategy,
    strategy_from_params,
)
from ledger import encode

# --- a real host trainer for quadratic clients ------------------------------------------------------------------


def quadratic_train(
    a: np.ndarray, *, steps: int = 1, momentum: float = 0.0, n_samples: int = 10
) -> Callable[..., LocalOutcome]:
    """The host's ``train`` for ``f(w) = ½‖w − a‖²``: ``steps`` steps of (momentum, proximal) gradient descent."""

    def train(
        model: np.ndarray,
        *,
        lr: float,
        gradient_correction: np.ndarray | None = None,
        momentum_buffer: np.ndarray | None = None,
        prox_mu: float | None = None,
    ) -> LocalOutcome:
        theta = model.astype(np.float64)
        w = theta.copy()
        mu = prox_mu or 0.0
        buf = None
        if momentum > 0:
            buf = np.zeros_like(w) if momentum_buffer is None else momentum_buffer.astype(np.float64)
        for _ in range(steps):
            g = (w - a) + mu * (w - theta)
            if buf is not None:
                buf = momentum * buf + g
                g = buf
            w = w - lr * g
        return LocalOutcome(
            delta=(w - theta).astype(np.float32),
            n_samples=n_samples,
            steps=steps,
            lr=lr,
            loss=float(0.5 * np.sum((w - a) ** 2)),
            momentum_buffer=None if buf is None else buf.astype(np.float32),
        )

    return train


def peers(m: int) -> tuple[str, ...]:
    return tuple(f"p{i:03d}" for i in range(m))


class Federation:
    """Runs rounds of a strategy with quadratic clients: client side, uploads, aggregation, state, client state."""

    def __init__(self, strategy: Strategy, targets: np.ndarray, *, steps: int = 1, momentum: float = 0.0,
                 n_samples: Sequence[int] | None = None) -> None:
        self.strategy = strategy
        self.members = peers(targets.shape[0])
        self.trainers = [
            quadratic_train(targets[i], steps=steps, momentum=momentum,
                            n_samples=10 if n_samples is None else n_samples[i])
            for i in range(targets.shape[0])
        ]
        self.state: bytes | None = None
        self.client_state: dict[str, bytes | None] = {}
        self.fl_round = 0

    def round(self, model: np.ndarray, active: Sequence[int], lr: float, *, seed: int = 0) -> AggregateResult:
        self.fl_round += 1
        ups = []
        for i in sorted(active):
            p = self.members[i]
            job = ClientJob(fl_round=self.fl_round, model=model, server_state=self.state,
                            client_state=self.client_state.get(p), lr=lr)
            up = self.strategy.local_update(job, self.trainers[i])
            self.client_state[p] = up.client_state
            ups.append(ClientUpdate(peer=p, delta=up.vector, n_samples=up.n_samples, base_round=self.fl_round))
        info = RoundInfo(fl_round=self.fl_round, members=self.members,
                         sampled=tuple(self.members[i] for i in sorted(active)))
        res = self.strategy.aggregate(info, model, ups, state=self.state, rng=np.random.default_rng(seed))
        self.state = res.state
        return res


def _info(m: int, sampled: Sequence[int] = ()) -> RoundInfo:
    ps = peers(m)
    return RoundInfo(fl_round=1, members=ps, sampled=tuple(ps[i] for i in sampled))


def _updates(m: int, idx: Sequence[int], deltas: np.ndarray, n: Sequence[int]) -> list[ClientUpdate]:
    ps = peers(m)
    return [ClientUpdate(peer=ps[i], delta=deltas[r], n_samples=int(n[r])) for r, i in enumerate(idx)]


RNG = np.random.default_rng(0)


# --- FedAvg_v / FedProx_v: eq. (2) ----------------------------------------------------------------------------------


def test_variant_identity_with_naive_fedavg() -> None:
    """R0 item 1: θ^var − θ_t = (β n_{S_t}/N)(θ^naive − θ_t) for random θ, updates, n_i and S_t."""
    gen = np.random.default_rng(1)
    for _ in range(20):
        m, d = int(gen.integers(3, 30)), int(gen.integers(1, 50))
        sizes = [int(v) for v in gen.integers(1, 500, size=m)]
        s = sorted(int(i) for i in gen.choice(m, size=int(gen.integers(1, m + 1)), replace=False))
        theta = gen.normal(size=d).astype(np.float32)
        deltas = gen.normal(size=(len(s), d)).astype(np.float32)
        beta = float(gen.choice([1.0, 2.5, m / 3]))
        ups = _updates(m, s, deltas, [sizes[i] for i in s])
        var = FedAvgV(beta=beta, sizes=tuple(sizes)).aggregate(_info(m, s), theta, ups, state=None, rng=RNG)
        naive = FedAvg().aggregate(_info(m, s), theta, ups, state=None, rng=RNG)
        factor = beta * sum(sizes[i] for i in s) / sum(sizes)
        lhs = var.model.astype(np.float64) - theta
        rhs = factor * (naive.model.astype(np.float64) - theta)
        np.testing.assert_allclose(lhs, rhs, rtol=1e-5, atol=2e-6 * max(1.0, factor))
        assert var.record["step"] == pytest.approx(factor, rel=1e-12)
        assert var.record["weights"] == pytest.approx([sizes[i] / sum(sizes) for i in s], rel=1e-12)


def test_variant_equals_naive_without_dropout_balanced() -> None:
    """R0 item 1: no dropout, balanced n_i, β = M/K ⇒ variant == naive FedAvg; β defaults to M/K."""
    m, k, d = 20, 5, 7
    theta = RNG.normal(size=d).astype(np.float32)
    deltas = RNG.normal(size=(k, d)).astype(np.float32)
    s = [2, 3, 11, 12, 19]
    ups = _updates(m, s, deltas, [45] * k)
    strat = strategy_from_params("fedavg_v", {"clients": k})
    var = strat.aggregate(_info(m, s), theta, ups, state=None, rng=RNG)
    naive = FedAvg().aggregate(_info(m, s), theta, ups, state=None, rng=RNG)
    assert var.record["beta"] == 4.0 and var.record["step"] == pytest.approx(1.0)
    np.testing.assert_allclose(var.model, naive.model, rtol=0, atol=1e-6)
    assert strat.clients_per_round(m) == k


def test_variant_is_simultaneous_and_legacy_is_sequential() -> None:
    """R0 item 2 and §7 item 1: eq. (2) does not depend on which peer sent which update; the official code's
    in-place loop leaves weight (1 − βw)^K = 0.9^10 ≈ 0.35 on θ_t (balanced, K = 10, full participation)."""
    m, k, d = 100, 10, 5
    theta = RNG.normal(size=d).astype(np.float32)
    deltas = RNG.normal(size=(k, d)).astype(np.float32)
    s = list(range(0, 100, 10))
    strat = FedAvgV(clients=k)
    base = strat.aggregate(_info(m, s), theta, _updates(m, s, deltas, [1] * k), state=None, rng=RNG)
    shuffled = strat.aggregate(_info(m, s), theta, _updates(m, s, deltas[::-1].copy(), [1] * k), state=None, rng=RNG)
    np.testing.assert_allclose(base.model, shuffled.model, rtol=0, atol=1e-6)
    np.testing.assert_allclose(base.model, theta + deltas.astype(np.float64).mean(axis=0), atol=1e-6)

    same = np.tile(deltas[:1], (k, 1))
    legacy = FedAvgV(clients=k, sequential_legacy=True)
    res = legacy.aggregate(_info(m, s), theta, _updates(m, s, same, [1] * k), state=None, rng=RNG)
    np.testing.assert_allclose(res.model, theta + (1 - 0.9**10) * same[0].astype(np.float64), atol=1e-6)
    jac = strat.aggregate(_info(m, s), theta, _updates(m, s, same, [1] * k), state=None, rng=RNG)
    np.testing.assert_allclose(jac.model, theta + same[0], atol=1e-6)


def test_prox_clients_solve_the_proximal_problem() -> None:
    """§2.2: the FedProx clients minimise ℓ(z) + (μ/2)‖z − θ_t‖²; for ℓ = ½‖z − a‖² that is (a + μθ)/(1 + μ)."""
    a = np.array([3.0, -1.0, 0.5])
    theta = np.array([0.0, 2.0, 1.0], dtype=np.float32)
    train = quadratic_train(a, steps=300)
    job = ClientJob(fl_round=1, model=theta, server_state=None, client_state=None, lr=0.1)
    want = (a + 0.5 * theta) / 1.5 - theta
    for strat in (FedProxV(mu=0.5), FedProx(mu=0.5)):
        up = strat.local_update(job, train)
        np.testing.assert_allclose(up.vector, want, atol=1e-5)
    plain = FedAvgV().local_update(job, train).vector  # no prox term: converges to a
    np.testing.assert_allclose(plain, a - theta, atol=1e-5)


def test_naive_fedprox_renormalises_over_responders() -> None:
    """§2.4: naive FedProx aggregates like naive FedAvg (weights n_i / Σ_{S_t} n_j), unlike FedProx_v."""
    m, d = 6, 4
    theta = RNG.normal(size=d).astype(np.float32)
    deltas = RNG.normal(size=(2, d)).astype(np.float32)
    ups = _updates(m, [1, 4], deltas, [10, 30])
    prox = FedProx(mu=0.1).aggregate(_info(m, [1, 4]), theta, ups, state=None, rng=RNG)
    np.testing.assert_allclose(prox.model, theta + 0.25 * deltas[0] + 0.75 * deltas[1], atol=1e-6)
    v = FedProxV(mu=0.1, beta=1.0).aggregate(_info(m, [1, 4]), theta, ups, state=None, rng=RNG)
    np.testing.assert_allclose(v.model, theta + (deltas[0] + deltas[1]) / 6, atol=1e-6)


def test_lower_bound_1_companion() -> None:
    """§6.3 deterministic companion (Lower bound 1, static S): K = M = 100, β = 1, 20 clients hold
    g(θ) = ½‖θ + u‖² and are always dropped (ε = 0.2), ‖u‖² = G²/(ε(1−ε)), G = 1. Assumption 1 holds with B = 1
    as an equality; the variant converges to θ = 0 and ‖∇F(θ_T)‖² = ε²‖u‖² = εG²/(1−ε) = 0.25."""
    m, eps, d = 100, 0.2, 2
    u = np.array([1.5, 2.0])  # ‖u‖² = 6.25 = 1/(0.2·0.8)
    targets = np.zeros((m, d))
    targets[:20] = -u  # g-clients: ½‖θ − (−u)‖²
    for theta in (np.array([0.3, -2.0]), np.array([5.0, 1.0])):
        grads = theta - targets
        lhs = np.mean(np.sum(grads**2, axis=1))
        full = np.sum(np.mean(grads, axis=0) ** 2)
        assert lhs == pytest.approx(full + 1.0, rel=1e-12)  # B = 1, G² = ε(1−ε)‖u‖² = 1
    fed = Federation(FedAvgV(beta=1.0), targets, steps=2)
    model = np.array([4.0, -3.0], dtype=np.float32)
    for _ in range(60):
        model = fed.round(model, range(20, 100), lr=0.5).model
    assert np.abs(model).max() < 1e-6
    grad_f = np.mean(model.astype(np.float64) - targets, axis=0)
    assert float(np.sum(grad_f**2)) == pytest.approx(eps / (1 - eps), rel=1e-3)


# --- MIFA ----------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("variant", ["unavailability", "mimic", "seed000", "seed001"])
def test_mifa_equals_fedavg_under_full_participation(variant: str) -> None:
    """mimic spec §2.3 item 2 / unavailability spec §2.5: with every member active MIFA is FedAvg (decaying η_t, s = 3)."""
    m, d = 8, 5
    targets = RNG.normal(size=(m, d))
    mifa, avg = Federation(MIFA(variant=variant), targets, steps=3), Federation(FedAvg(), targets, steps=3)
    x = y = np.zeros(d, dtype=np.float32)
    for t in range(12):
        lr = 0.3 / math.sqrt(t + 1)
        x, y = mifa.round(x, range(m), lr).model, avg.round(y, range(m), lr).model
    np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-6)
    assert np.abs(x).max() > 0.1


@pytest.mark.parametrize(("name", "former"), [("unavailability", "seed000"), ("mimic", "seed001")])
def test_mifa_variant_by_paper_name_is_its_former_id(name: str, former: str) -> None:
    """``variant`` names the paper whose weights MIFA uses, or gives its former id: the same models, and the
    record keeps the value as written (a chain written with the former id re-executes as it was)."""
    m, d = 6, 4
    sizes = (3, 1, 7, 2, 11, 5) if name == "unavailability" else ()
    targets = RNG.normal(size=(m, d))
    a = Federation(MIFA(variant=name, sizes=sizes), targets, steps=2, n_samples=list(sizes) or None)
    b = Federation(MIFA(variant=former, sizes=sizes), targets, steps=2, n_samples=list(sizes) or None)
    x = y = np.ones(d, dtype=np.float32)
    for t, active in enumerate(([0, 1, 2, 3, 4, 5], [0, 2], [1, 3, 5], [4])):
        ra, rb = a.round(x, active, 0.1 / (t + 1)), b.round(y, active, 0.1 / (t + 1))
        x, y = ra.model, rb.model
        assert (ra.record["variant"], rb.record["variant"]) == (name, former)
    np.testing.assert_array_equal(x, y)


def test_mifa_population_weights_equal_fedavg_sample_weights() -> None:
    """Eq. (44) with w_i = n_i/N and full participation = FedAvg with n_i-weights."""
    m, d = 5, 3
    sizes = [3, 1, 7, 2, 11]
    targets = RNG.normal(size=(m, d))
    mifa = Federation(MIFA(sizes=tuple(sizes)), targets, steps=2, n_samples=sizes)
    avg = Federation(FedAvg(), targets, steps=2, n_samples=sizes)
    x = y = np.ones(d, dtype=np.float32)
    for _ in range(5):
        x, y = mifa.round(x, range(m), 0.2).model, avg.round(y, range(m), 0.2).model
    np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-6)


def test_mifa_with_one_step_is_gradient_descent() -> None:
    """R0 item 8: full participation, s = 1 ⇒ θ_{t+1} = θ_t − η_t ∇F(θ_t)."""
    m, d = 6, 4
    targets = RNG.normal(size=(m, d))
    fed = Federation(MIFA(), targets)
    theta = np.zeros(d, dtype=np.float32)
    for t in range(6):
        lr = 0.5 / (t + 1)
        want = theta.astype(np.float64) - lr * np.mean(theta.astype(np.float64) - targets, axis=0)
        theta = fed.round(theta, range(m), lr).model
        np.testing.assert_allclose(theta, want, atol=1e-6)


def test_mifa_stale_memories_rescaled_by_current_lr() -> None:
    """§2.5: silent members' G^i stay in the table (gradient units) and are multiplied by the current η_t;
    never-heard members count as zero with weight 1/M; units="delta" keeps raw stale deltas."""
    m, d = 4, 3
    targets = RNG.normal(size=(m, d))
    theta0 = RNG.normal(size=d).astype(np.float32)
    t64 = theta0.astype(np.float64)

    fed = Federation(MIFA(), targets, steps=2)
    r1 = fed.round(theta0, [0, 2], lr=0.4)  # members 1 and 3 never heard: zeros
    g1 = {i: -fed_delta(targets[i], t64, 0.4, 2) / np.float32(0.4) for i in (0, 2)}
    want1 = t64 - 0.4 * (g1[0] + g1[2]) / 4
    np.testing.assert_allclose(r1.model, want1, atol=1e-6)
    assert r1.record["fresh"] == ["p000", "p002"] and r1.record["stored"] == 2 and r1.record["lr"] == pytest.approx(0.4)

    th1 = r1.model.astype(np.float64)
    r2 = fed.round(r1.model, [1, 2], lr=0.1)
    g2 = {i: -fed_delta(targets[i], th1, 0.1, 2) / np.float32(0.1) for i in (1, 2)}
    want2 = th1 - 0.1 * (g1[0] + g2[1] + g2[2]) / 4  # member 0 stale, rescaled by η_2 = 0.1
    np.testing.assert_allclose(r2.model, want2, atol=1e-6)

    fedd = Federation(MIFA(units="delta", variant="seed001"), targets, steps=2)
    q1 = fedd.round(theta0, [0, 2], lr=0.4)
    d1 = {i: fed_delta(targets[i], t64, 0.4, 2) for i in (0, 2)}
    np.testing.assert_allclose(q1.model, t64 + (d1[0] + d1[2]) / 4, atol=1e-6)
    q1m = q1.model.astype(np.float64)
    q2 = fedd.round(q1.model, [1, 2], lr=0.1)
    d2 = {i: fed_delta(targets[i], q1m, 0.1, 2) for i in (1, 2)}
    np.testing.assert_allclose(q2.model, q1m + (d1[0] + d2[1] + d2[2]) / 4, atol=1e-6)  # stale Δ not rescaled
    assert MIFA(units="delta").upload_dim(7) == 7 and MIFA().upload_dim(7) == 8


def fed_delta(a: np.ndarray, theta: np.ndarray, lr: float, steps: int) -> np.ndarray:
    """Closed form of ``steps`` GD steps on ½‖w − a‖² from θ: Δ = (1 − (1 − η)^s)(a − θ)."""
    return (1 - (1 - lr) ** steps) * (a - theta)


def test_mifa_state_round_trip_and_strict_decoding() -> None:
    m, d = 5, 3
    targets = RNG.normal(size=(m, d))
    fed = Federation(MIFA(), targets)
    model = fed.round(np.zeros(d, dtype=np.float32), [0, 3, 4], 0.2).model
    state = fed.state
    assert state is not None
    table = MemberTable.decode(state, members=peers(m), dim=d)
    assert table.peers == ("p000", "p003", "p004") and table.encode() == state
    # the same state bytes give the same next round (a new coordinator after a view change)
    again = Federation(MIFA(), targets)
    again.state, again.fl_round = state, 1
    a = fed.round(model, [1, 3], 0.1)
    b = again.round(model, [1, 3], 0.1)
    assert a.model.tobytes() == b.model.tobytes() and a.state == b.state and a.record == b.record

    rows = table.rows.astype("<f4").tobytes()
    bad = {
        "garbage": b"\x01\x02",
        "dim": encode({"dim": d + 1, "peers": list(table.peers), "rows": rows}),
        "not a member": encode({"dim": d, "peers": ["p000", "p003", "zz"], "rows": rows}),
        "unsorted": encode({"dim": d, "peers": ["p003", "p000", "p004"], "rows": rows}),
        "short rows": encode({"dim": d, "peers": list(table.peers), "rows": rows[:-4]}),
        "extra key": encode({"dim": d, "peers": list(table.peers), "rows": rows, "x": 1}),
        "nan": encode({"dim": d, "peers": list(table.peers),
                       "rows": np.full((3, d), np.nan, dtype="<f4").tobytes()}),
        "rows type": encode({"dim": d, "peers": list(table.peers), "rows": [1.0]}),
    }
    for what, blob in bad.items():
        with pytest.raises(ValueError, match="strategy state"):
            MIFA().aggregate(_info(m, [0]), model, _updates(m, [0], np.zeros((1, d + 1), np.float32) + 0.1, [1]),
                             state=blob, rng=RNG)
        assert what


# --- momentum baselines (cclip, GM, bucketing) -------------------------------------------------------------------


def test_client_momentum_persists_across_jobs() -> None:
    """§2.6: m_i ← β_0 m_i + g_i with the buffer kept in client_state; the upload is [m_i ‖ η]."""
    a = np.array([1.0, -2.0])
    fed = Federation(CClip(), a[None, :], momentum=0.9)
    th0 = np.array([0.0, 0.0], dtype=np.float32)
    r1 = fed.round(th0, [0], lr=0.1)
    m1 = th0 - a
    th1 = r1.model.astype(np.float64)
    np.testing.assert_allclose(th1, th0 - 0.1 * m1, atol=1e-6)  # one member: cclip of one vector within τ
    fed.round(r1.model, [0], lr=0.1)
    m2 = 0.9 * m1 + (th1 - a)
    from learning.models import blob_to_vector

    np.testing.assert_allclose(blob_to_vector(fed.client_state["p000"], dim=2), m2, atol=1e-6)


def test_cclip_reuses_stale_momenta_of_all_members() -> None:
    """§2.6: with every ‖m_i − v‖ ≤ τ, centered clipping is Σ_i w_i m_i over **all** members (stale momenta of
    silent members, zeros for never-active ones), then θ − η v."""
    m, d = 4, 3
    sizes = (1, 2, 3, 4)
    targets = RNG.normal(size=(m, d))
    fed = Federation(CClip(sizes=sizes, tau=1e6), targets, momentum=0.9)
    th0 = np.zeros(d, dtype=np.float32)
    r1 = fed.round(th0, [0, 1], lr=0.05)
    mom = {0: -targets[0], 1: -targets[1]}
    np.testing.assert_allclose(r1.model, -0.05 * (0.1 * mom[0] + 0.2 * mom[1]), atol=1e-6)
    th1 = r1.model.astype(np.float64)
    r2 = fed.round(r1.model, [2], lr=0.05)
    mom[2] = th1 - targets[2]
    want = th1 - 0.05 * (0.1 * mom[0] + 0.2 * mom[1] + 0.3 * mom[2])
    np.testing.assert_allclose(r2.model, want, atol=1e-6)
    assert r2.record["fresh"] == ["p002"] and r2.record["stored"] == 3
    assert r2.record["aggregator"] == "centered_clipping(tau=1000000.0, iterations=3)"


def test_cclip_small_radius_bounds_the_step() -> None:
    m, d = 5, 4
    targets = 100 * RNG.normal(size=(m, d))
    res = Federation(CClip(tau=0.5, iterations=1), targets, momentum=0.9).round(np.zeros(d, np.float32), range(m), 1.0)
    assert np.linalg.norm(res.model.astype(np.float64)) <= 0.5 + 1e-6


def test_gm_is_the_median_in_one_dimension() -> None:
    """GM over {0 (never active), 1, 10} with tiny ν and many iterations is the median 1: θ − η·1."""
    targets = np.array([[0.0], [-1.0], [-10.0]])
    strat = GM(nu=1e-9, iterations=400)
    res = Federation(strat, targets, momentum=0.9).round(np.zeros(1, np.float32), [1, 2], lr=0.5)
    assert res.model[0] == pytest.approx(-0.5, abs=1e-5)
    assert res.record["aggregator"] == "geometric_median(nu=1e-09, iterations=400, init='zero', ftol=0.0)"


def test_bucketing_of_size_one_is_no_bucketing() -> None:
    m, d = 7, 5
    targets = 20 * RNG.normal(size=(m, d))
    sizes = (5, 1, 4, 2, 8, 3, 6)
    for plain, bucketed in ((CClip(sizes=sizes, tau=3.0), CClip(sizes=sizes, tau=3.0, bucket_size=1)),
                            (GM(sizes=sizes), GM(sizes=sizes, bucket_size=1))):
        x = Federation(plain, targets, momentum=0.9).round(np.ones(d, np.float32), [0, 2, 3, 6], 0.1, seed=4)
        y = Federation(bucketed, targets, momentum=0.9).round(np.ones(d, np.float32), [0, 2, 3, 6], 0.1, seed=4)
        np.testing.assert_allclose(x.model, y.model, rtol=1e-6, atol=1e-6)
    assert BucketingCClip().bucket_size == 2 and BucketingGM().bucket_size == 2
    assert BucketingCClip().rule() is not None
    assert "bucketing(bucket_size=2) > " in strategy_from_params("bucketing_gm", {}).aggregate(
        _info(3, [0]), np.zeros(2, np.float32), _updates(3, [0], np.array([[1, 1, 0.1]], np.float32), [1]),
        state=None, rng=RNG).record["aggregator"]


def test_bad_learning_rate_in_upload_is_rejected_not_fatal() -> None:
    m, d = 3, 2
    model = np.zeros(d, np.float32)
    ups = _updates(m, [0, 1], np.array([[1, 1, 0.1], [5, 5, -1.0]], np.float32), [1, 1])
    for strat in (MIFA(), CClip()):
        res = strat.aggregate(_info(m, [0, 1]), model, ups, state=None, rng=RNG)
        assert res.record["rejected"] == ["p001"] and res.record["fresh"] == ["p000"]
        table = MemberTable.decode(res.state, members=peers(m), dim=d)
        assert table.peers == ("p000",)
        only_bad = strat.aggregate(_info(m, [1]), model, ups[1:], state=res.state, rng=RNG)
        assert only_bad.record["skipped"] and only_bad.state == res.state and only_bad.model is model
    # the round's η_t is the lower median of the fresh uploads' rates (robust to a minority of odd values)
    ups = _updates(m, [0, 1, 2], np.array([[1, 1, 0.4], [1, 1, 0.1], [1, 1, 0.2]], np.float32), [1, 1, 1])
    for strat in (MIFA(), GM()):
        assert strat.aggregate(_info(m, [0, 1, 2]), model, ups, state=None, rng=RNG).record["lr"] == pytest.approx(0.2)
        two = strat.aggregate(_info(m, [0, 1]), model, ups[:2], state=None, rng=RNG)
        assert two.record["lr"] == pytest.approx(0.1)


def test_strategy_owned_schedule_matches_the_host_schedule() -> None:
    """With ``lr`` set (mimic spec-style, same keys as MimiC) the strategy's schedule drives both sides: the
    client ignores ``job.lr``, uploads the bare vector, and the run equals the host-rate run with that schedule."""
    m, d = 6, 4
    targets = RNG.normal(size=(m, d))
    sched = {"lr": 0.3, "lr_schedule": "inverse_sqrt"}
    for name, extra, momentum in (("mifa", {}, 0.0), ("mifa", {"variant": "seed001"}, 0.0), ("cclip", {}, 0.9)):
        own = strategy_from_params(name, {**sched, **extra})
        host = strategy_from_params(name, extra)
        assert own.upload_dim(d) == d and host.upload_dim(d) == d + 1
        a, b = Federation(own, targets, momentum=momentum), Federation(host, targets, momentum=momentum)
        x = y = np.zeros(d, dtype=np.float32)
        for t, active in enumerate(([0, 1, 2, 3, 4, 5], [1, 4], [0, 2, 5])):
            rx = a.round(x, active, lr=99.0)  # the host's rate is ignored
            ry = b.round(y, active, lr=0.3 / math.sqrt(t + 1))
            x, y = rx.model, ry.model
            assert rx.record["lr"] == pytest.approx(0.3 / math.sqrt(t + 1), rel=1e-6)
        np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-6)
    exp = strategy_from_params("mifa", {"lr": 0.05, "lr_schedule": "exponential", "lr_gamma": 0.5, "lr_min": 0.01})
    job = ClientJob(fl_round=4, model=np.zeros(2, np.float32), server_state=None, client_state=None, lr=1.0)
    assert exp.client_lr(job) == 0.01 and exp.client_lr(ClientJob(
        fl_round=2, model=np.zeros(2, np.float32), server_state=None, client_state=None, lr=1.0)) == 0.025


# --- common contract: empty rounds, non-members, bit-reproducibility, strict config --------------------------------

ALL = [
    FedAvgV(clients=3), FedProxV(clients=3, mu=0.2), FedProx(clients=3), MIFA(clients=3),
    MIFA(clients=3, variant="seed001", units="delta"), CClip(clients=3), GM(clients=3), BucketingCClip(clients=3),
    BucketingGM(clients=3),
]


@pytest.mark.parametrize("strat", ALL, ids=lambda s: f"{s.name}")
def test_bit_reproducible_and_empty_round(strat: Strategy) -> None:
    m, d = 6, 9
    targets = RNG.normal(size=(m, d))

    def run() -> tuple[bytes, bytes | None, object]:
        fed = Federation(strat, targets, steps=2, momentum=0.9 if isinstance(strat, CClip | GM) else 0.0)
        x = np.full(d, 0.5, np.float32)
        for t, active in enumerate(([0, 1, 2], [3, 4], [1, 5, 2])):
            res = fed.round(x, active, 0.1 / (t + 1), seed=t)
            x = res.model
        return x.tobytes(), fed.state, res.record

    first, second = run(), run()
    assert first == second
    empty = strat.aggregate(_info(m), np.ones(d, np.float32), [], state=first[1], rng=RNG)
    assert empty.model.tobytes() == np.ones(d, np.float32).tobytes() and empty.state == first[1]
    if isinstance(strat, FedProx):
        return  # naive FedProx aggregates exactly like FedAvg, which weighs by n_samples and names no member
    stranger = ClientUpdate(peer="zz", delta=np.ones(strat.upload_dim(d), np.float32), n_samples=1)
    with pytest.raises(ValueError, match="not a member"):
        strat.aggregate(_info(m), np.ones(d, np.float32), [stranger], state=None, rng=RNG)


@pytest.mark.parametrize(
    ("name", "params", "match"),
    [
        ("fedavg_v", {"clients": "10"}, "clients must be int"),
        ("fedavg_v", {"clients": True}, "clients must be int"),
        ("fedavg_v", {"beta": -1.0}, "beta"),
        ("fedavg_v", {"beta": math.inf}, "beta"),
        ("fedavg_v", {"sizes": "1,2"}, "sizes must be a list"),
        ("fedavg_v", {"sizes": [1, -2]}, "sizes"),
        ("fedavg_v", {"sizes": [0, 0]}, "positive sum"),
        ("fedavg_v", {"sizes": [1.5, 2]}, "sizes"),
        ("fedavg_v", {"sequential_legacy": 1}, "sequential_legacy must be bool"),
        ("fedprox_v", {"mu": 0.0}, "mu"),
        ("fedprox", {"mu": -0.1}, "mu"),
        ("fedprox", {"mu": "x"}, "mu must be float"),
        ("mifa", {"variant": "seed002"}, "variant"),
        ("mifa", {"units": "raw"}, "units"),
        ("mifa", {"variant": "seed001", "sizes": [1, 2]}, "sizes apply"),
        ("mifa", {"variant": "mimic", "sizes": [1, 2]}, "sizes apply"),
        ("cclip", {"tau": 0.0}, "tau"),
        ("cclip", {"iterations": 0}, "iterations"),
        ("cclip", {"bucket_size": -1}, "bucket_size"),
        ("gm", {"nu": -0.1}, "nu"),
        ("bucketing_gm", {"iterations": 2.0}, "iterations must be int"),
        ("mifa", {"lr_schedule": "inverse_sqrt"}, "need lr"),
        ("cclip", {"lr_gamma": 0.9}, "need lr"),
        ("mifa", {"lr": 0.0}, "lr must be"),
        ("gm", {"lr": 0.1, "lr_schedule": "cosine"}, "lr_schedule must be"),
        ("mifa", {"lr": 0.1, "lr_schedule": "exponential"}, "needs lr_gamma"),
        ("mifa", {"lr": 0.1, "lr_gamma": 0.9}, "only to lr_schedule 'exponential'"),
        ("mifa", {"lr": 0.1, "lr_schedule": "exponential", "lr_gamma": 1.5}, "gamma"),
    ],
)
def test_strict_config_errors(name: str, params: dict[str, object], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        strategy_from_params(name, params)


def test_sizes_must_match_the_federation() -> None:
    ups = _updates(3, [0], np.ones((1, 2), np.float32), [1])
    with pytest.raises(ConfigError, match="2 entries for 3 members"):
        FedAvgV(sizes=(1, 2)).aggregate(_info(3, [0]), np.zeros(2, np.float32), ups, state=None, rng=RNG)
    assert strategy_from_params("gm", {"sizes": [1, 2, 3], "clients": 2, "committee_size": 4}).sizes == (1, 2, 3)


# --- fedro spec Fig. 2 takeover ----------------------------------------------------------------------------------


def test_fedro_takeover_fires_only_above_f() -> None:
    """fedro spec §4/§8 item 5: b̂_t = #Byzantine among the n̂ sampled; b̂_t > b̂ ⇒ x_{t+1} = 0, else plain FedRo."""
    m, d = 10, 6
    byz = ["p007", "p008", "p009"]
    strat = strategy_from_params("fedro_takeover", {"clients": 7, "f": 2, "takeover_peers": byz})
    assert isinstance(strat, FedRoTakeover) and strat.clients_per_round(m) == 7
    theta = np.full(d, 3.0, np.float32)
    deltas = RNG.normal(size=(7, d)).astype(np.float32)
    two = [0, 1, 2, 3, 4, 7, 8]  # b̂_t = 2 = f: FedRo as usual
    res = strat.aggregate(_info(m, two), theta, _updates(m, two, deltas, [1] * 7), state=None, rng=RNG)
    plain = FedRo(clients=7, f=2).aggregate(_info(m, two), theta, _updates(m, two, deltas, [1] * 7),
                                              state=None, rng=RNG)
    assert res.model.tobytes() == plain.model.tobytes()
    assert res.record["b_t"] == 2 and res.record["takeover"] is False
    three = [0, 1, 2, 3, 7, 8, 9]  # b̂_t = 3 > f: the Byzantine clients take control
    res = strat.aggregate(_info(m, three), theta, _updates(m, three, deltas, [1] * 7), state=None, rng=RNG)
    assert not res.model.any() and res.model.dtype == np.float32
    assert res.record["b_t"] == 3 and res.record["takeover"] is True
    for bad in ({"clients": 7, "f": 2}, {"clients": 7, "f": 2, "takeover_peers": []},
                {"clients": 7, "f": 2, "takeover_peers": ["a", "a"]}, {"clients": 7, "f": 4, "takeover_peers": ["a"]}):
        with pytest.raises(ConfigError):
            strategy_from_params("fedro_takeover", bad)


# --- §6.3 R2: the error floor scales like ε·σ² and comes from adaptive selection (slow) ----------------------------


def _r2_errors(eps: float, *, adversary: str, naive: bool, seeds: int = 32, rounds: int = 2000) -> float:
    """Lower bound 2 made stochastic (spec §6.3): d = 1, f = ½θ², g = ½(θ + 1)², each sampled client holds g
    with probability ε; M = 100, K = 10, β = 10, w_i = 1/M, s = 5 exact GD steps, η_t = min(0.5, 5/(t + 10)),
    θ_0 = 5; error = mean of (θ_t − θ*)² over the last 10 % of rounds, θ* = −ε, averaged over seeds."""
    m, k, beta, s, u = 100, 10, 10.0, 5, 1.0
    gen = np.random.default_rng(12345)
    theta = np.full(seeds, 5.0)
    budget = math.floor(eps * k + 1e-9)
    tail = []
    for t in range(rounds):
        lr = min(0.5, 5.0 / (t + 10))
        holds_g = gen.random((seeds, k)) < eps
        if adversary == "adaptive":  # drop g-holders (the adversary sees the data), at most ⌊εK⌋, keep ≥ 1
            n_g_all = holds_g.sum(axis=1)
            drop = np.minimum(np.minimum(n_g_all, budget), k - 1)
            n_g = n_g_all - drop
            n_f = k - n_g_all
        else:  # oblivious control: drop ⌊εK⌋ uniformly random sampled clients
            order = np.argsort(gen.random((seeds, k)), axis=1)
            keep = np.zeros((seeds, k), dtype=bool)
            np.put_along_axis(keep, order[:, : k - min(budget, k - 1)], True, axis=1)
            n_g = (holds_g & keep).sum(axis=1)
            n_f = (~holds_g & keep).sum(axis=1)
        c = 1.0 - (1.0 - lr) ** s  # exact s-step GD on a unit-curvature quadratic
        total = -c * (n_f * theta + n_g * (theta + u))  # Σ_{S_t} Δ_i
        theta = theta + (total / (n_f + n_g) if naive else beta * total / m)
        if t >= rounds - rounds // 10:
            tail.append((theta + eps * u) ** 2)
    return float(np.mean(tail))


@pytest.mark.slow
def test_r2_error_floor_scales_with_eps_sigma2() -> None:
    """§6.3 R2 (Theorems 3/4): (a) the floor increases with ε; (b) it is Θ(εσ²): 0.25 ≤ err/(εσ²/(1−ε)) ≤ 1
    (calibrated 0.39–0.62); (c) it comes from selection: a random adversary's error ≤ 5 % of it; (d) variant and
    naive FedAvg reach the same biased point (±15 %)."""
    eps_grid = [0.1, 0.2, 0.3, 0.5]
    adaptive = [_r2_errors(e, adversary="adaptive", naive=False) for e in eps_grid]
    assert all(x < y for x, y in zip(adaptive, adaptive[1:], strict=False))
    for e, err in zip(eps_grid, adaptive, strict=True):
        sigma2 = e * (1 - e)
        ratio = err / (e * sigma2 / (1 - e))
        assert 0.25 <= ratio <= 1.0, (e, ratio)
        assert err >= e * sigma2 / (4 * (1 - e))  # above the Lower-bound-2 value
        assert _r2_errors(e, adversary="random", naive=False) <= 0.05 * err
        assert abs(err / _r2_errors(e, adversary="adaptive", naive=True) - 1) <= 0.15
    assert _r2_errors(0.0, adversary="adaptive", naive=False) < 1e-12
    # the numpy round above is FedAvg_v's eq. (2): one round through the strategy gives the same step
    m, theta0, lr = 100, np.array([0.7], np.float32), 0.3
    c = 1 - (1 - lr) ** 5
    deltas = np.array([[-c * 0.7]] * 6 + [[-c * 1.7]] * 2, np.float32)
    res = FedAvgV(clients=10).aggregate(_info(m, range(8)), theta0, _updates(m, range(8), deltas, [1] * 8),
                                        state=None, rng=RNG)
    assert res.model[0] == pytest.approx(0.7 + 10 * float(deltas.astype(np.float64).sum()) / m, abs=1e-6)
