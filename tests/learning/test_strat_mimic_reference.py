"""MimiC against an independent float64 re-implementation of mimic spec's pseudo-code (§2.1 LocalTrain, §2.3
Algorithm 1, §2.0 Conventions G and D, §2.7 schedule), round by round, through the real strategy object.

The reference below shares no code with :mod:`learning.strategies._mimic`: it keeps its own correction table, its own
``lr_t = max(lr0·γ^t, 1e-5)`` (t from 0) and its own server step. The problem is softmax regression trained by
minibatch SGD (batches drawn with replacement from a per-(round, client) stream, so host and reference see the
same batches), under scheme 3 with 2 of 8 clients per round and round 0 all-active (the S4 regime), with a decaying
learning rate so that the units and the learning rate index of stale corrections matter.

Two comparisons:

* **lockstep** — each round the reference starts from the strategy's float32 ``w_t`` and must reproduce the
  uploads, ``v_t``, ``w_{t+1}`` and every stored ``c^i`` to float32 rounding;
* **free-running** — the reference runs alone in float64 from ``w_0``; the strategy's trajectory must stay within
  float32 drift of it for all rounds, and measurably away from plausible mis-readings of the spec (raw average
  in the correction update, η_{t−1} on the server, corrections refreshed for inactive clients, Convention D).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest

from learning.strategies import ClientJob, ClientUpdate, LocalOutcome, LocalTrain, MimiC, RoundInfo, mimic_corrections

N, F, C, B = 8, 6, 3, 4  # clients, features, classes, batch size
D = F * C + C
LR0, GAMMA, LR_MIN = 0.3, 0.93, 1e-5
ROUNDS = 40


# --- the problem --------------------------------------------------------------------------------------------------


def make_clients(seed: int = 11) -> list[tuple[np.ndarray, np.ndarray]]:
    """Eight clients, each holding mostly two of the three classes (non-IID), 12-20 samples each."""
    g = np.random.default_rng(seed)
    means = g.normal(0.0, 2.0, size=(C, F))
    out = []
    for i in range(N):
        n = int(g.integers(12, 21))
        y = np.where(g.random(n) < 0.85, i % C, (i + 1) % C)
        x = means[y] + g.normal(0.0, 1.0, size=(n, F))
        out.append((x, y))
    return out


def grad(w: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Mean cross-entropy gradient of softmax regression, ``w = [W (F×C) ‖ b (C)]``."""
    W, b = w[: F * C].reshape(F, C), w[F * C :]
    z = x @ W + b
    z = z - z.max(axis=1, keepdims=True)
    p = np.exp(z)
    p /= p.sum(axis=1, keepdims=True)
    p[np.arange(len(y)), y] -= 1.0
    p /= len(y)
    return np.concatenate([(x.T @ p).ravel(), p.sum(axis=0)])


def batches(fl_round: int, client: int, n: int, steps: int) -> np.ndarray:
    """The minibatch indices (with replacement) of one local job: ``steps × B``."""
    return np.random.default_rng([fl_round, client]).integers(n, size=(steps, B))


def steps_of(client: int, unequal: bool) -> int:
    return 3 + client % 3 if unequal else 5


def host(data: tuple[np.ndarray, np.ndarray], client: int, fl_round: int, steps: int) -> LocalTrain:
    """The host's local trainer (the LocalTrain contract): plain SGD in float64 from the float32 model."""
    x, y = data

    def train(model, *, lr, gradient_correction=None, momentum_buffer=None, prox_mu=None):  # noqa: ANN001, ANN202
        assert gradient_correction is None and momentum_buffer is None
        w0 = model.astype(np.float64)
        w = w0.copy()
        for idx in batches(fl_round, client, len(y), steps):
            w = w - lr * grad(w, x[idx], y[idx])
        return LocalOutcome(delta=(w - w0).astype(np.float32), n_samples=len(y), steps=steps, lr=lr, loss=0.0)

    return train


def s4_schedule(seed: int = 5) -> list[list[int]]:
    """Round 0 all-active, then 2 clients without replacement with weights ~ U[1, 10] (scheme 3, P = 0.25)."""
    g = np.random.default_rng(seed)
    out = [list(range(N))]
    for _ in range(1, ROUNDS):
        a = g.uniform(1.0, 10.0, size=N)
        out.append(sorted(int(i) for i in g.choice(N, 2, replace=False, p=a / a.sum())))
    return out


# --- the independent reference (mimic spec §2.1, §2.3, §2.0) -------------------------------------------------------


def ref_lr(t: int) -> float:
    """§2.7: ``lr_t = max(lr0·γ^t, 1e-5)``, t counted from 0."""
    return max(LR0 * GAMMA**t, LR_MIN)


def ref_local_train(w_t: np.ndarray, data: tuple[np.ndarray, np.ndarray], fl_round: int, client: int, lr: float,
                    steps: int, units: str) -> np.ndarray:
    """§2.1 ``LocalTrain``: ĝ_i = (w_t − w_K)/(lr_t K_i) (Convention G) or Δ_i = w_t − w_K (Convention D)."""
    x, y = data
    w = w_t.copy()
    for idx in batches(fl_round, client, len(y), steps):
        w = w - lr * grad(w, x[idx], y[idx])
    return (w_t - w) / (lr * steps) if units == "gradient" else w_t - w


class Reference:
    """Algorithm 1 (server side), float64. ``variant`` selects a deliberate mis-reading for the negative controls."""

    def __init__(self, units: str, k_nominal: int, variant: str = "spec") -> None:
        self.units, self.k, self.variant = units, k_nominal, variant
        self.c = np.zeros((N, D))  # line 1: c^i = 0 for all i

    def step(self, t: int, w_t: np.ndarray, uploads: dict[int, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """One round t (from 0): lines 5-10. Returns ``(v_t, w_{t+1})``."""
        active = sorted(uploads)
        v = sum(uploads[i] + self.c[i] for i in active) / len(active)  # lines 5-8
        if self.units == "gradient":
            lr = ref_lr(t - 1 if self.variant == "server_lr_t_minus_1" and t > 0 else t)
            w_next = w_t - self.k * lr * v  # line 9, η_t = K·lr_t
        else:
            w_next = w_t - v  # Convention D: server step 1 on deltas
        if self.variant == "raw_average":  # §7 item 1's pitfall: the uncorrected mean in (15)
            raw = sum(uploads[i] for i in active) / len(active)
            for i in active:
                self.c[i] = raw - uploads[i]
        else:
            for i in active:  # line 10, after v_t is final; inactive clients keep c^i
                self.c[i] = v - uploads[i]
        if self.variant == "refresh_inactive":  # a mis-reading: inactive clients' c re-based on the new v_t
            for i in range(N):
                if i not in uploads:
                    self.c[i] = self.c[i] + (v - self.c[i]) * 0.5
        return v, w_next


# --- the strategy under test ----------------------------------------------------------------------------------------


MEMBERS = tuple(f"p{i:02d}" for i in range(N))


def strategy(units: str, k_nominal: int) -> MimiC:
    params: dict[str, object] = {"lr": LR0, "lr_schedule": "exponential", "lr_gamma": GAMMA, "units": units}
    if units == "gradient":
        params["local_steps"] = k_nominal
    return MimiC.from_params(params)


def strategy_round(s: MimiC, clients: Sequence[tuple[np.ndarray, np.ndarray]], r: int, active: Sequence[int],
                   w: np.ndarray, state: bytes | None, unequal: bool):  # noqa: ANN201
    """One round through the real object: ``local_update`` of each active client, then ``aggregate``."""
    ups = []
    for i in active:
        job = ClientJob(fl_round=r, model=w, server_state=state, client_state=None, lr=-1.0)
        up = s.local_update(job, host(clients[i], i, r, steps_of(i, unequal)))
        ups.append(ClientUpdate(MEMBERS[i], up.vector, up.n_samples))
    res = s.aggregate(RoundInfo(fl_round=r, members=MEMBERS, sampled=MEMBERS), w, ups, state=state,
                      rng=np.random.default_rng(r))
    return ups, res


def corrections(state: bytes, units: str) -> np.ndarray:
    table = mimic_corrections(state, D, units=units)
    return np.stack([table.get(p, D) for p in MEMBERS])


def initial_model() -> np.ndarray:
    return np.random.default_rng(3).normal(0.0, 0.5, size=D).astype(np.float32)


CASES = [("gradient", False), ("gradient", True), ("delta", False)]


@pytest.mark.parametrize(("units", "unequal"), CASES)
def test_lockstep_every_round_equals_the_spec_pseudo_code(units: str, unequal: bool) -> None:
    """Uploads, w_{t+1} and every c^i equal the reference to float32 rounding, in every round (the reference starts
    each round from the strategy's float32 w_t and uses the strategy's float32 uploads, as a server would)."""
    clients, sched = make_clients(), s4_schedule()
    s = strategy(units, 5)
    ref = Reference(units, 5)
    w, state = initial_model(), None
    for t, active in enumerate(sched):
        r = t + 1  # our rounds count from 1, the spec's t from 0
        ups, res = strategy_round(s, clients, r, active, w, state, unequal)
        w64 = w.astype(np.float64)
        for u, i in zip(ups, active, strict=True):
            mine = ref_local_train(w64, clients[i], r, i, ref_lr(t), steps_of(i, unequal), units)
            # G uploads ĝ itself; in D ours uploads w_K − w_t and steps w + v (the spec: w_t − w_K, w − v)
            got = u.delta.astype(np.float64) * (-1.0 if units == "delta" else 1.0)
            np.testing.assert_allclose(got, mine, rtol=2e-6, atol=2e-6 * np.abs(mine).max())
        uploads = {i: u.delta.astype(np.float64) * (-1.0 if units == "delta" else 1.0) for u, i in zip(ups, active)}
        _, w_ref = ref.step(t, w64, uploads)
        np.testing.assert_allclose(res.model.astype(np.float64), w_ref, rtol=0, atol=4e-7 * (1 + np.abs(w_ref).max()))
        c = corrections(res.state, units) * (-1.0 if units == "delta" else 1.0)
        np.testing.assert_allclose(c, ref.c, rtol=0, atol=1e-12 * (1 + np.abs(ref.c).max()))
        assert np.abs(c.sum(axis=0)).max() <= 1e-8 * (1 + np.abs(c).max())  # A2
        w, state = res.model, res.state
    assert np.abs(ref.c).max() > (0.1 if units == "gradient" else 0.01)  # the corrections are not trivial


def free_run(units: str, unequal: bool, variant: str) -> list[np.ndarray]:
    clients, sched = make_clients(), s4_schedule()
    ref = Reference(units, 5, variant)
    w = initial_model().astype(np.float64)
    out = []
    for t, active in enumerate(sched):
        uploads = {i: ref_local_train(w, clients[i], t + 1, i, ref_lr(t), steps_of(i, unequal), units) for i in active}
        _, w = ref.step(t, w, uploads)
        out.append(w)
    return out


@pytest.mark.parametrize(("units", "unequal"), CASES)
def test_free_running_trajectory_tracks_the_float64_reference(units: str, unequal: bool) -> None:
    """The strategy alone (float32 model and uploads) stays within float32 drift of the pure float64 reference for
    all rounds; the spec's plausible mis-readings end orders of magnitude further away (so the check has teeth)."""
    clients, sched = make_clients(), s4_schedule()
    s = strategy(units, 5)
    w, state = initial_model(), None
    mine = []
    for t, active in enumerate(sched):
        _, res = strategy_round(s, clients, t + 1, active, w, state, unequal)
        w, state = res.model, res.state
        mine.append(w.astype(np.float64))
    ref = free_run(units, unequal, "spec")
    err = max(float(np.abs(a - b).max()) for a, b in zip(mine, ref, strict=True))
    assert err < 5e-6  # observed 2.9e-7 to 3.9e-7 (float32 storage of the model and uploads)
    assert np.abs(ref[-1] - ref[0]).max() > 0.5  # it trained
    variants = ["raw_average", "refresh_inactive"] + (["server_lr_t_minus_1"] if units == "gradient" else [])
    for variant in variants:
        other = free_run(units, unequal, variant)
        # observed 0.049 (η_{t−1}), 0.30-0.44 (raw average), 3.1-9.4 (inactive refreshed)
        assert max(float(np.abs(a - b).max()) for a, b in zip(mine, other, strict=True)) > 100 * max(err, 1e-6)
    if units == "gradient":  # Convention G differs from D once the lr decays (stale corrections, §2.0): 0.30
        d_traj = free_run("delta", unequal, "spec")
        assert max(float(np.abs(a - b).max()) for a, b in zip(mine, d_traj, strict=True)) > 100 * max(err, 1e-6)
