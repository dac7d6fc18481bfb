"""Strategies for stragglers and adversaries (sself spec): Sself and its baselines, on one model-space interface.

Registered strategies (all model-space, m_k-weighted, sself spec §2.3 "All baselines aggregate parameters"):

* ``sself`` (``max_staleness`` 2 by default): Algorithm 1 / §2.2, entropy filter, loss-weighted average per
  staleness group, α_t(i) ∝ Σm_k/(t−i+1)^c, ``w ← (1−γ)w + γz``. ``aggregator="rfa"`` or ``"multi_krum"`` with
  ``filter=false`` are the "semi-synchronous + RFA / Multi-Krum" combinations of §2.3 item 7.
* ``fedavg_stragglers`` (synchronous): FedAvg / RFA / Multi-Krum over the round's fresh models, i.e. *wait for
  stragglers* and *ignore stragglers* (§2.3 items 1, 2, 7), which differ only in the host's round length;
  ``aggregator="mean"`` is exactly the ``fedavg`` strategy (delegated to it).
* ``fedasync`` (``max_staleness`` 2 by default): FedAsync, polynomial staleness ``α·(t−i+1)^(−a)``, one model at a
  time in an ``rng``-drawn order, optional ELF entropy filter (§2.3 items 3, 7).
* ``norm_threshold`` (synchronous): drop updates with ``‖Δ‖₂ > threshold``, FedAvg the rest (§2.3 item 6).

Conventions
-----------
* **Models from updates.** A :class:`~learning.strategies.ClientUpdate` carries ``Δ_k = w_i(k) − w_i``, the
  device's model minus the global model ``w_i`` it started from (``base_round = i``). ``w_i`` is ``model`` for a
  fresh update (``base_round == info.fl_round``, or ``-1``) and ``info.base_models[i]`` for a stale one; so
  ``w_i(k) = w_i + Δ_k`` (sself spec §7.2 item 6: the group's base is ``w_i``, not ``w_t``). A group aggregate is
  computed as ``v_i = w_i + A(Δ_k : k ∈ U_t^{(i)})``, which for the weighted means and the (translation-equivariant)
  geometric median and Multi-Krum is the same as aggregating the models (§2.3 item 4).
* **Staleness.** ``fl_round − base_round + 1`` (sself spec §7.2 item 1): 1 for a fresh update. Updates with
  ``fl_round − base_round > max_staleness`` or ``base_round > fl_round`` are a host bug (ValueError): the host
  must drop them before aggregation.
* **Scores.** Strategies that need public scores call ``info.public(w_i(k))`` on the float32 model
  ``float32(w_i + Δ_k)``; a non-finite ``E_avg`` or ``F_pub`` always rejects the model (sself spec §7.1,
  fail-closed), the entropy rule rejects iff ``E_avg > E_th`` (Algorithm 1 line 6).
* **Determinism.** Updates in the node's canonical ``(peer, base_round)`` order, groups by increasing base round,
  float64 accumulation in that order, scalar weights with :mod:`math` in Python floats, one cast to float32 at the
  end; the only randomness (FedAsync's processing order) comes from ``rng``. Every strategy here is stateless
  (``state`` must be None); γ/α decay is a function of ``fl_round``.
* **Empty.** No update, or nothing survives the filters: the model is returned unchanged (§7.2 item 4).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from learning._config import check_bool, check_choice, check_float, check_int, take_params
from learning._errors import ConfigError
from learning.robust import GeometricMedian, MultiKrum, check_rng, row_sq_norms
from learning.strategies._base import (
    AggregateResult,
    ClientUpdate,
    FedAvg,
    PublicEval,
    RoundInfo,
    StrategyBase,
    check_order,
    register_strategy,
)
from learning.training import PublicScorer, check_entropy_impl

__all__ = [
    "GROUP_AGGREGATORS",
    "RFA",
    "FedAsync",
    "FedAvgStragglers",
    "NormThreshold",
    "Sself",
    "loss_weights",
    "multi_krum_f",
    "staleness_weights",
]

GROUP_AGGREGATORS: tuple[str, ...] = ("loss_weighted", "rfa", "multi_krum")
"""Sself's rule inside a staleness group (Algorithm 1 line 10, or its §2.3 item 7 replacements)."""

RFA = GeometricMedian(nu=1e-5, iterations=10, init="mean", ftol=1e-6)
"""RFA's smoothed Weiszfeld as sself spec §2.3 item 4 fixes it (official code: ν = 1e-5, ≤ 10 iterations, ftol 1e-6,
start at the m_k-weighted mean), called with weights ``m_k``."""

LOSS_FLOOR = 1e-12
"""F_pub is clamped to this before ``log`` (sself spec §7.2 item 3)."""


# ---------------------------------------------------------------------------------------------------------------
# Pure weight functions (sself spec eqs. 9, 10)


def loss_weights(sizes: Sequence[int], losses: Sequence[float] | None, delta: float) -> list[float]:
    """β_i(k) ∝ m_k / F_pub(w_i(k))^δ, normalised inside one staleness group (sself spec eq. 9, §7.2 item 3).

    Computed in log space, ``log β = log m_k − δ · log max(F, 1e-12)``, normalised with log-sum-exp, so δ = 5 and
    F = 900 do not overflow. ``δ = 0`` (or ``losses=None``) returns FedAvg's ``m_k / Σ m`` exactly (``1/n`` if
    ``Σ m = 0``, as :class:`~learning.strategies.FedAvg`). Losses must be finite (rejected models never get here).

    Examples
    --------
    >>> loss_weights([10, 10], [1.0, 4.0], 1.0)
    [0.8, 0.2]
    >>> loss_weights([1, 3], [7.0, 9.0], 0.0)
    [0.25, 0.75]
    """
    n = len(sizes)
    total = sum(sizes)
    if losses is None or delta == 0.0:
        return [m / total if total else 1.0 / n for m in sizes]
    if len(losses) != n:
        raise ValueError(f"loss_weights: {n} sizes but {len(losses)} losses")
    sizes_eff = sizes if total else [1] * n  # a group of empty devices: equal weights
    logb = [
        (math.log(m) if m > 0 else -math.inf) - delta * math.log(max(float(f), LOSS_FLOOR))
        for m, f in zip(sizes_eff, losses, strict=True)
    ]
    top = max(logb)
    e = [math.exp(lb - top) for lb in logb]
    s = sum(e)
    return [x / s for x in e]


def staleness_weights(group_sizes: Sequence[int], staleness: Sequence[int], c: float) -> list[float]:
    """α_t(i) ∝ (Σ_{k ∈ U_t^{(i)}} m_k) / (t − i + 1)^c over the filtered groups, summing to 1 (sself spec eq. 10).

    ``staleness`` holds ``t − i + 1`` (1 = fresh). If every group has ``Σ m = 0`` the group *counts* are not known
    here, so each group then weighs ``1 / s^c``.

    Examples
    --------
    >>> staleness_weights([30, 30], [1, 4], 0.5)  # fresh vs. started 3 rounds ago: 1 : 1/2
    [0.6666666666666666, 0.3333333333333333]
    """
    sizes = group_sizes if sum(group_sizes) > 0 else [1] * len(group_sizes)
    a = [m / s**c for m, s in zip(sizes, staleness, strict=True)]
    total = sum(a)
    return [x / total for x in a]


def multi_krum_f(n: int) -> int:
    """Multi-Krum's tolerance for ``n`` received results: the largest ``f`` with ``2f + 2 < n``, ⌊(n−3)/2⌋
    (sself spec §2.3 item 5); below 1 the strategies fall back to FedAvg."""
    return (n - 3) // 2


# ---------------------------------------------------------------------------------------------------------------
# Shared plumbing


@dataclass(frozen=True, slots=True)
class _Arrival:
    """One update resolved against the model it was trained from."""

    peer: str
    base_round: int
    staleness: int
    """``fl_round − base_round + 1`` (1 = fresh)."""
    n_samples: int
    delta: np.ndarray
    base: np.ndarray

    def model64(self) -> np.ndarray:
        return self.base.astype(np.float64) + self.delta.astype(np.float64)

    def model32(self) -> np.ndarray:
        """``w_i(k)`` as the float32 vector that is scored on the public set."""
        return self.model64().astype(np.float32)


def _no_state(state: bytes | None, what: str) -> None:
    if state is not None:
        raise ValueError(f"{what} keeps no state across rounds, got {len(state)} bytes")


def _resolve(
    info: RoundInfo, model: np.ndarray, updates: Sequence[ClientUpdate], max_staleness: int, what: str
) -> list[_Arrival]:
    """Check the node's contract and attach each update's base model (see the module docstring)."""
    if not isinstance(model, np.ndarray) or model.ndim != 1 or model.dtype != np.float32:
        raise ValueError(f"{what}: the model must be a 1-D float32 vector")
    check_order(updates)
    d, t = model.shape[0], info.fl_round
    out: list[_Arrival] = []
    seen: set[tuple[str, int]] = set()
    for u in updates:
        i = t if u.base_round == -1 else u.base_round
        if (u.peer, i) in seen:
            raise ValueError(f"{what}: two fresh updates of {u.peer} (base_round -1 and {t})")
        seen.add((u.peer, i))
        if i > t or i < 0:
            raise ValueError(f"{what}: update of {u.peer} has base_round {u.base_round} at fl_round {t}")
        if t - i > max_staleness:
            raise ValueError(
                f"{what}: update of {u.peer} is {t - i} rounds stale, more than max_staleness={max_staleness} "
                "(the host must drop it)"
            )
        if i == t:
            base = model
        else:
            found = info.base_models.get(i)
            if found is None:
                raise ValueError(f"{what}: no base model for round {i} (update of {u.peer}); the host must keep "
                                 f"the last max_staleness={max_staleness} global models")
            base = found
            if base.shape != (d,):
                raise ValueError(f"{what}: base model of round {i} has shape {base.shape}, model has ({d},)")
        if not isinstance(u.delta, np.ndarray) or u.delta.shape != (d,) or u.delta.dtype != np.float32:
            raise ValueError(f"{what}: update of {u.peer} must be a float32 vector of shape ({d},)")
        if isinstance(u.n_samples, bool) or not isinstance(u.n_samples, int) or u.n_samples < 0:
            raise ValueError(f"{what}: update of {u.peer} has n_samples {u.n_samples!r}")
        out.append(_Arrival(u.peer, i, t - i + 1, u.n_samples, u.delta, base))
    return out


def _public_of(info: RoundInfo, entropy_impl: str, what: str) -> PublicEval:
    public = info.public
    if public is None:
        raise ValueError(f"{what}: needs info.public, the host's public-split evaluator (sself spec §1.3)")
    if isinstance(public, PublicScorer) and public.entropy_impl != entropy_impl:
        raise ValueError(f"{what}: configured entropy_impl={entropy_impl!r} but the host's scorer uses "
                         f"{public.entropy_impl!r}")
    return public


def _score(public: PublicEval, arrival: _Arrival, what: str) -> tuple[float, float]:
    out = public(arrival.model32())
    if not (isinstance(out, tuple) and len(out) == 2
            and all(isinstance(v, float | int | np.floating) and not isinstance(v, bool) for v in out)):
        raise ValueError(f"{what}: the public evaluator must return (E_avg, F_pub) floats, got {out!r}")
    return float(out[0]), float(out[1])


def _finite(scores: tuple[float, float]) -> bool:
    return math.isfinite(scores[0]) and math.isfinite(scores[1])


def _entropy_keeps(scores: tuple[float, float], e_th: float) -> bool:
    """ELF filter (Algorithm 1 line 6): drop iff ``E_avg > E_th``; non-finite scores always drop (§7.1)."""
    return _finite(scores) and not scores[0] > e_th


def _rf(x: float) -> float | str:
    """A float for the block record (canonical encoding takes finite floats only)."""
    return float(x) if math.isfinite(x) else repr(float(x))


def _weighted_delta(deltas: Sequence[np.ndarray], weights: Sequence[float]) -> np.ndarray:
    """``Σ_k w_k Δ_k`` in float64, in input order (the accumulation of :class:`~learning.strategies.FedAvg`)."""
    acc = np.zeros(deltas[0].shape[0], dtype=np.float64)
    for w, delta in zip(weights, deltas, strict=True):
        acc += w * delta.astype(np.float64)
    return acc


def _robust_delta(
    rule: str, deltas: Sequence[np.ndarray], sizes: Sequence[int], rng: np.random.Generator
) -> tuple[np.ndarray, str, list[float] | None]:
    """RFA or Multi-Krum of one group's updates: ``(aggregate, rule actually used, FedAvg weights if used)``."""
    n = len(deltas)
    if rule == "rfa":
        w = np.asarray(sizes if sum(sizes) > 0 else [1] * n, dtype=np.float64)
        return RFA(np.stack(deltas), rng=rng, weights=w).astype(np.float64), "rfa", None
    assert rule == "multi_krum"
    f = multi_krum_f(n)
    if f < 1:  # §2.3 item 5 [DEFAULT]: no valid f ⇒ FedAvg
        weights = loss_weights(sizes, None, 0.0)
        return _weighted_delta(deltas, weights), "mean", weights
    agg = MultiKrum(f=f, variant="blanchard")(np.stack(deltas), rng=rng)  # plain mean of the n − f best
    return agg.astype(np.float64), f"multi_krum(f={f})", None


def _decayed(value: float, factor: float, every: int, fl_round: int) -> float:
    """``value · factor^⌊(fl_round − 1)/every⌋`` (sself spec §7.2 item 9 [DEFAULT]: ×0.5 per period; 0 = none)."""
    if every == 0 or factor == 1.0:
        return value
    return value * factor ** ((fl_round - 1) // every)


def _parse_e_th(value: object, what: str) -> float:
    """E_th from a number or the string ``"inf"`` (TOML's ``inf`` float is accepted too)."""
    if isinstance(value, str):
        if value.strip().lower() not in ("inf", "+inf", "infinity"):
            raise ConfigError(f"{what}: e_th must be a number >= 0 or \"inf\", got {value!r}")
        return math.inf
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(f"{what}: e_th must be a number >= 0 or \"inf\", got {type(value).__name__}")
    e_th = float(value)
    if math.isnan(e_th) or e_th < 0:
        raise ConfigError(f"{what}: e_th must be >= 0, got {e_th}")
    return e_th


def _take_with_e_th(params: Mapping[str, Any], allowed: dict[str, type], what: str) -> dict[str, Any]:
    kw = take_params(params, allowed, what)
    if "e_th" in params:
        kw["e_th"] = _parse_e_th(params["e_th"], what)
    return kw


# ---------------------------------------------------------------------------------------------------------------
# Sself


@register_strategy("sself")
@dataclass(frozen=True, slots=True, kw_only=True)
class Sself(StrategyBase):
    """Sself, sself spec Algorithm 1 in the implementation-grade form of §2.2.

    .. math::

        U_t^{(i)} &\\leftarrow \\{k \\in U_t^{(i)} : E_{avg}(k) \\le E_{th}\\}                       \\quad (4)\\\\
        v_{t+1}^{(i)} &= \\sum_{k \\in U_t^{(i)}} \\beta_i(k)\\, w_i(k), \\quad
            \\beta_i(k) \\propto m_k / F_{pub}(w_i(k))^{\\delta}                                    \\quad (9)\\\\
        z_{t+1} &= \\sum_i \\alpha_t(i)\\, v_{t+1}^{(i)}, \\quad
            \\alpha_t(i) \\propto \\frac{\\sum_{k \\in U_t^{(i)}} m_k}{(t - i + 1)^c}                 \\quad (10)\\\\
        w_{t+1} &= (1 - \\gamma)\\, w_t + \\gamma\\, z_{t+1}                                          \\quad (11)

    with ``i`` the round a result started from. Reductions (tested): δ = 0 and E_th = ∞ give semi-synchronous
    FedAvg (eqs. 2–3); no stragglers and γ = 1 give synchronous ELF (eq. 5 plus the filter); both give exactly
    :class:`~learning.strategies.FedAvg` (bit for bit).

    Parameters
    ----------
    clients:
        K, devices sampled per round (0 = every member).
    gamma:
        γ ∈ (0, 1] (Table 1: 0.5 with stragglers only; Tables 2–3: 1).
    c:
        Staleness exponent ``c >= 0`` (0.5; 1.5 for CIFAR).
    delta:
        Loss exponent ``δ >= 0`` (1; 5 for the backdoor tables).
    e_th:
        Entropy threshold in nats (1; 2 on Dirichlet splits, §7.2 item 5); ``"inf"`` disables the rule (non-finite
        scores are still rejected).
    entropy_impl:
        ``"exact"`` or ``"naive_float32"`` (§7.1): the host must build its :class:`~learning.training.PublicScorer`
        with the same value (checked when ``info.public`` is one); recorded in every block.
    max_staleness:
        Oldest accepted ``fl_round − base_round`` (the straggler model's maximum delay: 2, or 4 for App. G).
    aggregator:
        Rule inside a staleness group: ``"loss_weighted"`` (Algorithm 1), ``"rfa"`` (geometric median, weights
        m_k) or ``"multi_krum"`` (f = ⌊(n−3)/2⌋, FedAvg when f < 1), per §2.3 item 7.
    filter:
        Apply the entropy rule. ``filter=false, aggregator="rfa"`` is "semi-synchronous + RFA".
    gamma_decay, gamma_decay_every:
        γ_t = γ · gamma_decay^⌊(t−1)/every⌋ (§7.2 item 9, [DEFAULT] factor 0.5; every = 0: no decay).

    The block record holds ``groups`` ``[[base_round, [peers kept]], ...]``, ``alpha`` ``[[base_round, α]]``,
    ``beta`` ``[[peer, base_round, β]]`` (loss-weighted groups), ``rules`` ``[[base_round, rule]]`` (robust
    groups), ``filtered`` ``[[peer, base_round, E_avg]]``, ``scores`` ``[[peer, base_round, E_avg, F_pub]]``, and
    ``gamma``, ``entropy_impl``, ``aggregator``.
    """

    clients: int = 0
    gamma: float = 0.5
    c: float = 0.5
    delta: float = 1.0
    e_th: float = 1.0
    entropy_impl: str = "exact"
    max_staleness: int = 2
    aggregator: str = "loss_weighted"
    filter: bool = True
    gamma_decay: float = 1.0
    gamma_decay_every: int = 0
    name: ClassVar[str] = "sself"

    def __post_init__(self) -> None:
        check_int(self, "clients")
        check_float(self, "gamma", exclusive_minimum=0.0, maximum=1.0)
        check_float(self, "c", minimum=0.0)
        check_float(self, "delta", minimum=0.0)
        object.__setattr__(self, "e_th", _parse_e_th(self.e_th, "sself"))
        check_entropy_impl(self.entropy_impl, "sself")
        check_int(self, "max_staleness")
        check_choice(self, "aggregator", GROUP_AGGREGATORS)
        check_bool(self, "filter")
        check_float(self, "gamma_decay", exclusive_minimum=0.0, maximum=1.0)
        check_int(self, "gamma_decay_every")

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> Sself:
        allowed = {"clients": int, "gamma": float, "c": float, "delta": float, "entropy_impl": str,
                   "max_staleness": int, "aggregator": str, "filter": bool, "gamma_decay": float,
                   "gamma_decay_every": int}
        return cls(**_take_with_e_th(params, allowed, "sself"))

    @property
    def needs_public(self) -> bool:  # type: ignore[override]
        """The entropy rule or a loss weighting with δ > 0 needs the host's public evaluator."""
        return self.filter or (self.aggregator == "loss_weighted" and self.delta > 0.0)

    def gamma_at(self, fl_round: int) -> float:
        """γ_t after the configured decay."""
        return _decayed(self.gamma, self.gamma_decay, self.gamma_decay_every, fl_round)

    def aggregate(
        self,
        info: RoundInfo,
        model: np.ndarray,
        updates: Sequence[ClientUpdate],
        *,
        state: bytes | None,
        rng: np.random.Generator,
    ) -> AggregateResult:
        _no_state(state, "sself")
        check_rng(rng)
        arrivals = _resolve(info, model, updates, self.max_staleness, "sself")
        t = info.fl_round
        gamma = self.gamma_at(t)
        record: dict[str, Any] = {"entropy_impl": self.entropy_impl, "aggregator": self.aggregator, "gamma": gamma}

        # Algorithm 1 lines 4-8: score every arrival, drop non-finite (always) and E_avg > E_th (if filtering).
        scores: list[tuple[float, float]] | None = None
        if self.needs_public and arrivals:
            public = _public_of(info, self.entropy_impl, "sself")
            scores = [_score(public, a, "sself") for a in arrivals]
        groups: dict[int, list[int]] = {}
        filtered: list[list[Any]] = []
        for j, a in enumerate(arrivals):
            if scores is not None:
                ok = _entropy_keeps(scores[j], self.e_th) if self.filter else _finite(scores[j])
                if not ok:
                    filtered.append([a.peer, a.base_round, _rf(scores[j][0])])
                    continue
            groups.setdefault(a.base_round, []).append(j)
        record["filtered"] = filtered
        if scores is not None:
            record["scores"] = [[a.peer, a.base_round, _rf(e), _rf(f)] for a, (e, f) in zip(arrivals, scores)]
        record["groups"] = [[i, [arrivals[j].peer for j in groups[i]]] for i in sorted(groups)]
        if not groups:  # nothing arrived or nothing survived: keep w_t (§7.2 item 4)
            record.update(alpha=[], beta=[], rules=[])
            return AggregateResult(model=model, record=record)

        # Lines 9-11: one aggregate per staleness group, v_i = w_i + A(Δ_k), in increasing base round.
        betas: list[list[Any]] = []
        rules: list[list[Any]] = []
        vs: list[np.ndarray] = []
        sizes: list[int] = []
        stale: list[int] = []
        for i in sorted(groups):
            members = [arrivals[j] for j in groups[i]]
            deltas = [a.delta for a in members]
            m = [a.n_samples for a in members]
            if self.aggregator == "loss_weighted":
                losses = None if scores is None else [scores[j][1] for j in groups[i]]
                beta = loss_weights(m, losses, self.delta)
                acc = _weighted_delta(deltas, beta)
                betas.extend([a.peer, i, b] for a, b in zip(members, beta))
            else:
                acc, rule, weights = _robust_delta(self.aggregator, deltas, m, rng)
                rules.append([i, rule])
                if weights is not None:
                    betas.extend([a.peer, i, b] for a, b in zip(members, weights))
            vs.append(members[0].base.astype(np.float64) + acc)
            sizes.append(sum(m))
            stale.append(t - i + 1)
        alpha = staleness_weights(sizes, stale, self.c)
        record.update(alpha=[[i, a] for i, a in zip(sorted(groups), alpha)], beta=betas, rules=rules)

        # Line 12: w_{t+1} = (1 − γ) w_t + γ Σ_i α_t(i) v_i.
        z = np.zeros(model.shape[0], dtype=np.float64)
        for a_i, v in zip(alpha, vs):
            z += a_i * v
        new = ((1.0 - gamma) * model.astype(np.float64) + gamma * z).astype(np.float32)
        return AggregateResult(model=new, record=record)


# ---------------------------------------------------------------------------------------------------------------
# Wait / ignore stragglers


@register_strategy("fedavg_stragglers")
@dataclass(frozen=True, slots=True, kw_only=True)
class FedAvgStragglers(StrategyBase):
    """FedAvg, RFA or Multi-Krum over the round's fresh models (sself spec §2.3 items 1, 2, 4, 5, 7).

    *Wait for stragglers* (the host ends a round when all of S_t have delivered: 1 + max delay time units) and
    *ignore stragglers* (the host ends it at T_d and drops late results) aggregate identically; both are
    synchronous (``max_staleness = 0``). ``aggregator``:

    * ``"mean"``: ``w_t + Σ_k (m_k/Σm) Δ_k`` — exactly the registered ``fedavg`` strategy (delegated to it);
    * ``"rfa"``: ``w_t + GM(Δ; weights m_k)`` with :data:`RFA` (translation equivariance: = GM of the models);
    * ``"multi_krum"``: f = ⌊(n−3)/2⌋, the plain mean of the n − f best-scored (Blanchard neighbourhoods n − f − 2);
      FedAvg when f < 1.

    No arrival (ignore-stragglers with nothing on time): the model is kept.
    """

    clients: int = 0
    aggregator: str = "mean"
    name: ClassVar[str] = "fedavg_stragglers"

    def __post_init__(self) -> None:
        check_int(self, "clients")
        check_choice(self, "aggregator", ("mean", "rfa", "multi_krum"))

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> FedAvgStragglers:
        return cls(**take_params(params, {"clients": int, "aggregator": str}, "fedavg_stragglers"))

    def aggregate(
        self,
        info: RoundInfo,
        model: np.ndarray,
        updates: Sequence[ClientUpdate],
        *,
        state: bytes | None,
        rng: np.random.Generator,
    ) -> AggregateResult:
        _no_state(state, "fedavg_stragglers")
        check_rng(rng)
        arrivals = _resolve(info, model, updates, 0, "fedavg_stragglers")
        if self.aggregator == "mean" or not arrivals:
            res = FedAvg(clients=self.clients).aggregate(info, model, updates, state=None, rng=rng)
            return AggregateResult(model=res.model, record={"aggregator": "mean", "inputs": len(arrivals),
                                                            **res.record})
        acc, rule, weights = _robust_delta(
            self.aggregator, [a.delta for a in arrivals], [a.n_samples for a in arrivals], rng
        )
        new = (model.astype(np.float64) + acc).astype(np.float32)
        record: dict[str, Any] = {"aggregator": rule, "inputs": len(arrivals)}
        if weights is not None:
            record["weights"] = weights
        return AggregateResult(model=new, record=record)


# ---------------------------------------------------------------------------------------------------------------
# FedAsync


@register_strategy("fedasync")
@dataclass(frozen=True, slots=True, kw_only=True)
class FedAsync(StrategyBase):
    """FedAsync (Xie et al. 2019) with polynomial staleness, as sself spec §2.3 item 3 runs it per time slot.

    .. math::

        s = (t - i + 1)^{-a}, \\qquad \\alpha_t = \\alpha \\cdot s, \\qquad
        w \\leftarrow (1 - \\alpha_t)\\, w + \\alpha_t\\, w_i(k)

    applied once per arriving model, starting from ``w = w_t``, in a random order drawn from ``rng`` (§7.2 item 16);
    the next round starts from the final ``w``. With ``filter`` each arriving model first passes ELF's entropy rule
    ("FedAsync + ELF", §2.3 item 7; β of a single model is 1, so no loss weighting). The paper decays α, not the
    learning rate (``alpha_decay``/``alpha_decay_every``; default none).

    Parameters
    ----------
    clients:
        K per round (0 = every member).
    alpha:
        α ∈ (0, 1] (0.8).
    a:
        Staleness exponent ``a >= 0`` (0.5).
    max_staleness:
        Oldest accepted ``fl_round − base_round`` (2).
    filter, e_th, entropy_impl:
        The ELF entropy rule (off by default); non-finite scores are rejected.

    Record: ``order`` ``[[peer, base_round], ...]`` (processing order), ``mix`` ``[[peer, base_round, α_t]]`` for the
    applied models, ``filtered`` ``[[peer, base_round, E_avg]]``, ``alpha`` (after decay).
    """

    clients: int = 0
    alpha: float = 0.8
    a: float = 0.5
    max_staleness: int = 2
    filter: bool = False
    e_th: float = 1.0
    entropy_impl: str = "exact"
    alpha_decay: float = 1.0
    alpha_decay_every: int = 0
    name: ClassVar[str] = "fedasync"

    def __post_init__(self) -> None:
        check_int(self, "clients")
        check_float(self, "alpha", exclusive_minimum=0.0, maximum=1.0)
        check_float(self, "a", minimum=0.0)
        check_int(self, "max_staleness")
        check_bool(self, "filter")
        object.__setattr__(self, "e_th", _parse_e_th(self.e_th, "fedasync"))
        check_entropy_impl(self.entropy_impl, "fedasync")
        check_float(self, "alpha_decay", exclusive_minimum=0.0, maximum=1.0)
        check_int(self, "alpha_decay_every")

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> FedAsync:
        allowed = {"clients": int, "alpha": float, "a": float, "max_staleness": int, "filter": bool,
                   "entropy_impl": str, "alpha_decay": float, "alpha_decay_every": int}
        return cls(**_take_with_e_th(params, allowed, "fedasync"))

    @property
    def needs_public(self) -> bool:  # type: ignore[override]
        return self.filter

    def alpha_at(self, fl_round: int) -> float:
        """α after the configured decay."""
        return _decayed(self.alpha, self.alpha_decay, self.alpha_decay_every, fl_round)

    def aggregate(
        self,
        info: RoundInfo,
        model: np.ndarray,
        updates: Sequence[ClientUpdate],
        *,
        state: bytes | None,
        rng: np.random.Generator,
    ) -> AggregateResult:
        _no_state(state, "fedasync")
        check_rng(rng)
        arrivals = _resolve(info, model, updates, self.max_staleness, "fedasync")
        alpha = self.alpha_at(info.fl_round)
        record: dict[str, Any] = {"alpha": alpha, "entropy_impl": self.entropy_impl if self.filter else ""}
        scores = None
        if self.filter and arrivals:
            public = _public_of(info, self.entropy_impl, "fedasync")
            scores = [_score(public, x, "fedasync") for x in arrivals]
        order = [int(j) for j in rng.permutation(len(arrivals))]
        w = model.astype(np.float64)
        mixes: list[list[Any]] = []
        filtered: list[list[Any]] = []
        for j in order:
            x = arrivals[j]
            if scores is not None and not _entropy_keeps(scores[j], self.e_th):
                filtered.append([x.peer, x.base_round, _rf(scores[j][0])])
                continue
            mix = alpha * x.staleness ** (-self.a)
            w = (1.0 - mix) * w + mix * x.model64()
            mixes.append([x.peer, x.base_round, mix])
        record.update(
            order=[[arrivals[j].peer, arrivals[j].base_round] for j in order], mix=mixes, filtered=filtered
        )
        if not mixes:
            return AggregateResult(model=model, record=record)
        return AggregateResult(model=w.astype(np.float32), record=record)


# ---------------------------------------------------------------------------------------------------------------
# Norm thresholding


@register_strategy("norm_threshold")
@dataclass(frozen=True, slots=True, kw_only=True)
class NormThreshold(StrategyBase):
    """Norm thresholding (Sun et al. 2019) as sself spec §2.3 item 6 reads it: *drop* every update with
    ``‖w_k − w_t‖₂ = ‖Δ_k‖₂ > threshold`` (kept iff ≤), then FedAvg the rest (delegated to ``fedavg``); if nothing
    survives the model is kept. Synchronous (the paper's backdoor runs).

    Parameters
    ----------
    clients:
        K per round (0 = every member).
    threshold:
        Update-norm bound (2.0, the paper's; benign digits-MLP updates have norm ≤ 0.82, §6.1).

    Record: ``norms`` ``[[peer, ‖Δ‖]]``, ``dropped`` ``[peer, ...]``, FedAvg's ``weights`` over the kept ones.
    """

    clients: int = 0
    threshold: float = 2.0
    name: ClassVar[str] = "norm_threshold"

    def __post_init__(self) -> None:
        check_int(self, "clients")
        check_float(self, "threshold", exclusive_minimum=0.0)

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> NormThreshold:
        return cls(**take_params(params, {"clients": int, "threshold": float}, "norm_threshold"))

    def aggregate(
        self,
        info: RoundInfo,
        model: np.ndarray,
        updates: Sequence[ClientUpdate],
        *,
        state: bytes | None,
        rng: np.random.Generator,
    ) -> AggregateResult:
        _no_state(state, "norm_threshold")
        check_rng(rng)
        arrivals = _resolve(info, model, updates, 0, "norm_threshold")
        norms = np.sqrt(row_sq_norms(np.stack([a.delta for a in arrivals]))).tolist() if arrivals else []
        kept = [u for u, nrm in zip(updates, norms) if not nrm > self.threshold]
        res = FedAvg(clients=self.clients).aggregate(info, model, kept, state=None, rng=rng)
        record = {
            "threshold": self.threshold,
            "norms": [[a.peer, nrm] for a, nrm in zip(arrivals, norms)],
            "dropped": [a.peer for a, nrm in zip(arrivals, norms) if nrm > self.threshold],
            **res.record,
        }
        return AggregateResult(model=res.model, record=record)
