"""FedRo (fedro spec): the strategy, its choice of the sample size n̂ and the aggregator tolerance b̂, and robustness
coefficients κ.

=================== ============================================================== =============================
name                server rule                                                    spec
=================== ============================================================== =============================
``fedro``           ``x_{t+1} = x_t + γ_s · A(u_t^(i), i ∈ S_t)``, ``f = b̂``      fedro spec Algorithm 1
``fedro_takeover``  FedRo; ``x_{t+1} = 0`` once ``b_t > f`` sampled are Byzantine  fedro spec §4 (Fig. 2)
=================== ============================================================== =============================

Spec fedro spec §3 ("Tackling Byzantine Clients in Federated Learning"). With ``b`` Byzantine clients among ``n`` and
``n̂`` sampled per round without replacement, the number of sampled Byzantine clients is
``b̂_t ~ HG(n, b, n̂)``; training converges on the event ``E = {∀t < T: b̂_t ≤ b̂}`` (eq. 4), and the aggregator is
called with tolerance ``b̂ < n̂/2``. Bernoulli KL divergence:

.. math:: D(\\alpha, \\beta) = \\alpha \\ln\\frac{\\alpha}{\\beta} + (1-\\alpha)\\ln\\frac{1-\\alpha}{1-\\beta}

* eq. (9), convergence threshold: ``n̂_th = min(n, ⌈ln(4T/(1−p)) / D(1/2, b/n)⌉ + 2)``;
* eq. (10), order-optimal threshold: ``n̂_opt = min(n, ⌈max(1/(1/2 − b/n)², 3n/b) · ln(4T/(1−p))⌉ + 2)``;
* eq. (8), smallest tolerance for a given ``n̂``: ``b̂_* = min{b̂ : b n̂/n < b̂ < n̂/2, D(α, b/n) ≥ ln(T/(1−p))/n̂}``
  with ``α = (b̂+1)/n̂`` in ``mode="paper"`` (the tight form that reproduces the paper's numbers: 11 for
  (n, b, T, p, n̂) = (150, 15, 500, 0.99, 26)), ``α = b̂/n̂`` in ``mode="strict"`` (Lemma 1 as printed: 12), or, in
  ``mode="exact"`` (an extension, not in the paper), the smallest feasible ``b̂`` with
  ``T · P[HG(n, b, n̂) > b̂] ≤ 1 − p`` from exact hypergeometric tails (9).

κ of Definition 2 (Allouah et al. 2023; fedro spec §2.3): ``A`` is ``(n, f, κ)``-robust if for every set ``S`` of
``n − f`` inputs ``‖A(w) − w̄_S‖² ≤ (κ/|S|) Σ_{i∈S} ‖w_i − w̄_S‖²``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import combinations
from typing import Any, ClassVar, Literal

import numpy as np

from learning._config import take_params
from learning._errors import ConfigError
from learning.robust import format_aggregator, parse_aggregator
from learning.strategies._base import AggregateResult, ClientUpdate, RoundInfo, StrategyBase, _stack, register_strategy

__all__ = [
    "FedRo",
    "FedRoTakeover",
    "Recommendation",
    "b_hat_star",
    "exact_b_hat",
    "hypergeom_sf",
    "kappa_geometric_median",
    "kappa_krum",
    "kappa_lower_bound",
    "kappa_median",
    "kappa_nnm",
    "kappa_trimmed_mean",
    "kl_bernoulli",
    "n_hat_opt",
    "n_hat_th",
    "probability_no_takeover",
    "recommend",
    "robustness_ratio",
]

Mode = Literal["paper", "strict", "exact"]
_MODES = ("paper", "strict", "exact")


def _int(name: str, value: object, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < minimum:
        raise ConfigError(f"{name} must be an int >= {minimum}, got {value!r}")
    return int(value)


def _check_population(n: object, b: object) -> tuple[int, int]:
    n_ = _int("n", n, 1)
    b_ = _int("b", b, 0)
    if 2 * b_ >= n_:
        raise ConfigError(f"need b < n/2 (b={b_}, n={n_})")
    return n_, b_


def _check_rounds(T: object, p: object) -> tuple[int, float]:
    T_ = _int("T", T, 1)
    if isinstance(p, bool) or not isinstance(p, int | float) or not 0.0 < float(p) < 1.0:
        raise ConfigError(f"p must be in (0, 1), got {p!r}")
    return T_, float(p)


def kl_bernoulli(alpha: float, beta: float) -> float:
    """``D(α, β)``, the KL divergence between Bernoulli(α) and Bernoulli(β), ``0 < β < 1``, ``0 <= α <= 1``."""
    if not 0.0 < beta < 1.0 or not 0.0 <= alpha <= 1.0:
        raise ConfigError(f"kl_bernoulli needs 0 <= alpha <= 1 and 0 < beta < 1, got ({alpha}, {beta})")
    if alpha == 0.0:
        return math.log(1.0 / (1.0 - beta))
    if alpha == 1.0:
        return math.log(1.0 / beta)
    return alpha * math.log(alpha / beta) + (1.0 - alpha) * math.log((1.0 - alpha) / (1.0 - beta))


def hypergeom_sf(n: int, b: int, n_hat: int, k: int) -> float:
    """Exact ``P[X > k]`` for ``X ~ HG(n, b, n̂)`` (population ``n``, ``b`` marked, ``n̂`` drawn), big-integer sums."""
    n = _int("n", n, 1)
    b = _int("b", b, 0)
    n_hat = _int("n_hat", n_hat, 0)
    if b > n or n_hat > n:
        raise ConfigError(f"need b <= n and n_hat <= n, got (n, b, n_hat) = ({n}, {b}, {n_hat})")
    top = min(b, n_hat)
    if k >= top:
        return 0.0
    num = sum(math.comb(b, j) * math.comb(n - b, n_hat - j) for j in range(max(k + 1, 0), top + 1))
    return num / math.comb(n, n_hat)


def probability_no_takeover(n: int, b: int, n_hat: int, b_hat: int, T: int) -> float:
    """Exact ``P(E) = (1 − P[HG(n, b, n̂) > b̂])^T``: no round samples more than ``b̂`` Byzantine clients."""
    T = _int("T", T, 1)
    return (1.0 - hypergeom_sf(n, b, n_hat, b_hat)) ** T


def n_hat_th(n: int, b: int, T: int, p: float) -> int:
    """Eq. (9) capped at ``n`` (App. C.2): ``min(n, ⌈ln(4T/(1−p)) / D(1/2, b/n)⌉ + 2)``; ``b = 0`` gives 1."""
    n, b = _check_population(n, b)
    T, p = _check_rounds(T, p)
    if b == 0:
        return 1
    return min(n, math.ceil(math.log(4 * T / (1.0 - p)) / kl_bernoulli(0.5, b / n)) + 2)


def n_hat_opt(n: int, b: int, T: int, p: float) -> int:
    """Eq. (10) capped at ``n``: ``min(n, ⌈max(1/(1/2 − β)², 3/β) · ln(4T/(1−p))⌉ + 2)``, ``β = b/n``."""
    n, b = _check_population(n, b)
    T, p = _check_rounds(T, p)
    if b == 0:
        return 1
    beta = b / n
    return min(n, math.ceil(max(1.0 / (0.5 - beta) ** 2, 3.0 / beta) * math.log(4 * T / (1.0 - p))) + 2)


def exact_b_hat(n: int, b: int, n_hat: int, T: int, p: float) -> int:
    """Smallest ``b̂ >= 0`` with ``T · P[HG(n, b, n̂) > b̂] ≤ 1 − p`` (no ``b̂ < n̂/2`` constraint; fedro spec §3.4)."""
    n = _int("n", n, 1)
    b = _int("b", b, 0)
    n_hat = _int("n_hat", n_hat, 1)
    T, p = _check_rounds(T, p)
    for bh in range(0, min(b, n_hat) + 1):
        if T * hypergeom_sf(n, b, n_hat, bh) <= 1.0 - p:
            return bh
    return min(b, n_hat)


def b_hat_star(n: int, b: int, n_hat: int, T: int, p: float, *, mode: Mode = "paper") -> int | None:
    """Eq. (8): the smallest tolerance ``b̂`` for sample size ``n̂``, or ``None`` when none exists.

    Searches ``b̂`` from ``⌊b n̂/n⌋ + 1`` (so ``b̂/n̂ > b/n``) while ``2b̂ < n̂``; see the module docstring for the
    three modes. When the whole population is sampled (``n̂ = n``), ``b̂_t = b`` deterministically: ``b`` in the
    paper and exact modes, ``b + 1`` in strict mode (the literal ``b̂/n̂ > b/n``), ``None`` if that breaks
    ``2b̂ < n̂``.
    """
    n, b = _check_population(n, b)
    n_hat = _int("n_hat", n_hat, 1)
    T, p = _check_rounds(T, p)
    if mode not in _MODES:
        raise ConfigError(f"mode must be one of {_MODES}, got {mode!r}")
    if n_hat > n:
        raise ConfigError(f"n_hat={n_hat} exceeds n={n}")
    if b == 0:
        return 0
    if n_hat == n:
        bh = b if mode in ("paper", "exact") else b + 1
        return bh if 2 * bh < n_hat else None
    beta = b / n
    rhs = math.log(T / (1.0 - p)) / n_hat
    for bh in range((b * n_hat) // n + 1, n_hat):
        if 2 * bh >= n_hat:
            return None
        if mode == "exact":
            if T * hypergeom_sf(n, b, n_hat, bh) <= 1.0 - p:
                return bh
            continue
        alpha = (bh + 1) / n_hat if mode == "paper" else bh / n_hat
        if alpha < 1.0 and kl_bernoulli(alpha, beta) >= rhs:
            return bh
    return None


@dataclass(frozen=True, slots=True, kw_only=True)
class Recommendation:
    """Output of :func:`recommend`.

    Attributes
    ----------
    n_hat:
        Recommended sample size (``n_hat_th`` or ``n_hat_opt`` per ``target``).
    b_hat:
        Tolerance ``b̂_*(n̂)`` for the aggregator, or ``None`` if no ``b̂ < n̂/2`` satisfies condition (5).
    n_hat_th, n_hat_opt:
        Both thresholds (capped at ``n``).
    mode, target:
        The rule used.
    """

    n_hat: int
    b_hat: int | None
    n_hat_th: int
    n_hat_opt: int
    mode: Mode
    target: Literal["th", "opt"]


def recommend(
    n: int, b: int, T: int, p: float = 0.99, *, mode: Mode = "paper", target: Literal["th", "opt"] = "th"
) -> Recommendation:
    """FedRo's ``(n̂, b̂)`` for ``n`` clients of which ``b`` Byzantine, ``T`` rounds, success probability ``p``.

    ``target="th"`` (default) takes the cheapest sample size that converges, ``n̂_th`` (the paper's experiments);
    ``"opt"`` the saturating ``n̂_opt``. ``b = 0`` gives ``n̂ = 1, b̂ = 0``.

    Examples
    --------
    >>> r = recommend(150, 15, 500, 0.99)
    >>> (r.n_hat, r.b_hat, r.n_hat_opt)
    (26, 11, 150)
    >>> recommend(150, 15, 500, 0.99, mode="strict").b_hat
    12
    """
    n, b = _check_population(n, b)
    T, p = _check_rounds(T, p)
    if mode not in _MODES:
        raise ConfigError(f"mode must be one of {_MODES}, got {mode!r}")
    if target not in ("th", "opt"):
        raise ConfigError(f"target must be 'th' or 'opt', got {target!r}")
    if b == 0:
        return Recommendation(n_hat=1, b_hat=0, n_hat_th=1, n_hat_opt=1, mode=mode, target=target)
    nth, nopt = n_hat_th(n, b, T, p), n_hat_opt(n, b, T, p)
    size = nth if target == "th" else nopt
    return Recommendation(
        n_hat=size, b_hat=b_hat_star(n, b, size, T, p, mode=mode), n_hat_th=nth, n_hat_opt=nopt, mode=mode, target=target
    )


# ---------------------------------------------------------------------------------------------------------------
# κ (Definition 2) -- closed forms from Allouah et al. 2023 (fedro spec §2.3)


def _kappa_args(n: int, f: int) -> tuple[int, int]:
    n = _int("n", n, 1)
    f = _int("f", f, 0)
    if 2 * f >= n:
        raise ConfigError(f"κ needs f < n/2 (f={f}, n={n})")
    return n, f


def kappa_trimmed_mean(n: int, f: int) -> float:
    """Coordinate-wise trimmed mean: ``κ = (6f/(n−2f)) · (1 + f/(n−2f))``."""
    n, f = _kappa_args(n, f)
    r = f / (n - 2 * f)
    return 6.0 * r * (1.0 + r)


def kappa_median(n: int, f: int) -> float:
    """Coordinate-wise median: ``κ = 4 (1 + f/(n−2f))²``."""
    n, f = _kappa_args(n, f)
    return 4.0 * (1.0 + f / (n - 2 * f)) ** 2


def kappa_geometric_median(n: int, f: int) -> float:
    """Geometric median (exact minimiser): ``κ = 4 (1 + f/(n−2f))²``."""
    return kappa_median(n, f)


def kappa_krum(n: int, f: int) -> float:
    """Krum: ``κ = 6 (1 + f/(n−2f))``."""
    n, f = _kappa_args(n, f)
    return 6.0 * (1.0 + f / (n - 2 * f))


def kappa_nnm(kappa_base: float, n: int, f: int) -> float:
    """``F ∘ NNM`` for an ``(n, f, κ_F)``-robust ``F``: ``κ = 8f/(n−f) · (κ_F + 1)``."""
    n, f = _kappa_args(n, f)
    return 8.0 * f / (n - f) * (float(kappa_base) + 1.0)


def kappa_lower_bound(n: int, f: int) -> float:
    """No rule can be ``(n, f, κ)``-robust with ``κ < f/(n − 2f)``."""
    n, f = _kappa_args(n, f)
    return f / (n - 2 * f)


def robustness_ratio(output: np.ndarray, inputs: np.ndarray, f: int, *, atol: float = 0.0) -> float:
    """The smallest κ certified by one instance: ``max_S ‖A − w̄_S‖² / ((1/|S|) Σ_{i∈S} ‖w_i − w̄_S‖²)``.

    The maximum runs over every set ``S`` of ``n − f`` inputs (``C(n, f)`` sets: small ``n`` only). A rule is
    ``(n, f, κ)``-robust iff this never exceeds ``κ``. ``atol`` is an absolute slack subtracted from
    ``‖A − w̄_S‖²`` (for iterative approximations such as smoothed Weiszfeld). Returns ``inf`` if some ``S`` has
    zero spread and ``‖A − w̄_S‖² > atol``.
    """
    x = np.asarray(inputs, dtype=np.float64)
    a = np.asarray(output, dtype=np.float64)
    n = x.shape[0]
    worst = 0.0
    for s in combinations(range(n), n - f):
        sub = x[list(s)]
        centre = np.add.reduce(sub, axis=0) / len(s)
        spread = float(np.add.reduce((sub - centre) ** 2, axis=None)) / len(s)
        err = max(float(np.add.reduce((a - centre) ** 2)) - atol, 0.0)
        if spread == 0.0:
            if err > 0.0:
                return math.inf
            continue
        worst = max(worst, err / spread)
    return worst


# ---------------------------------------------------------------------------------------------------------------
# The FedRo strategy (fedro spec Algorithm 1)


@register_strategy("fedro")
@dataclass(frozen=True, slots=True, kw_only=True)
class FedRo(StrategyBase):
    """FedRo (fedro spec Algorithm 1): ``x_{t+1} = x_t + γ_s · A(u_t^{(i)}, i ∈ S_t)``.

    ``A`` is any aggregator chain (default NNM then coordinate-wise trimmed mean, the paper's choice),
    called with tolerance ``f = b̂``; ``clients = n̂``. Use :func:`learning.recommend` to choose n̂ and b̂.
    """

    clients: int
    f: int
    aggregator: str = ""
    server_lr: float = 1.0
    name: ClassVar[str] = "fedro"

    def __post_init__(self) -> None:
        if self.clients < 1:
            raise ConfigError(f"fedro: clients (n̂) must be >= 1, got {self.clients}")
        if not 0 <= 2 * self.f < self.clients:
            raise ConfigError(f"fedro: need 0 <= 2f < n̂ (f={self.f}, n̂={self.clients})")
        spec = self.aggregator or f"nnm(f={self.f}) > trimmed_mean(f={self.f})"
        rule = parse_aggregator(spec)
        if not rule.bit_reproducible:
            raise ConfigError(f"fedro: aggregator {spec!r} is not bit-reproducible; validators could not agree")
        object.__setattr__(self, "aggregator", format_aggregator(rule))
        if not self.server_lr > 0:
            raise ConfigError(f"fedro: server_lr must be > 0, got {self.server_lr}")

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> FedRo:
        kw = take_params(params, {"clients": int, "f": int, "aggregator": str, "server_lr": float}, "fedro")
        for k in ("clients", "f"):
            if k not in kw:
                raise ConfigError(f"fedro: parameter {k} is required")
        return cls(**kw)

    def clients_per_round(self, members: int) -> int:
        return min(self.clients, members)

    def aggregate(
        self,
        info: RoundInfo,
        model: np.ndarray,
        updates: Sequence[ClientUpdate],
        *,
        state: bytes | None,
        rng: np.random.Generator,
    ) -> AggregateResult:
        if not updates:
            return AggregateResult(model=model, record={"aggregator": self.aggregator, "inputs": 0})
        x = _stack(updates, model.shape[0])
        # The rule's tolerance must stay below half of the inputs actually received (late clients drop
        # out); with too few inputs fall back to the coordinate-wise median, which needs no f (never the mean).
        spec = self.aggregator if 2 * self.f < len(updates) else "median"
        agg = parse_aggregator(spec)(x, rng=rng)
        new = (model.astype(np.float64) + self.server_lr * np.asarray(agg, dtype=np.float64)).astype(np.float32)
        return AggregateResult(model=new, record={"aggregator": spec, "inputs": len(updates)})


# ---------------------------------------------------------------------------------------------------------------
# fedro spec Fig. 2: the "takeover" of FedRo (a simulation device)


@register_strategy("fedro_takeover")
@dataclass(frozen=True, slots=True, kw_only=True)
class FedRoTakeover(FedRo):
    """FedRo with the Fig. 2 takeover of fedro spec §4: if more than ``b̂ = f`` of the round's sampled clients are
    Byzantine (``b̂_t > b̂``), they "take control" and set ``x_{t+1} = 0``; otherwise plain FedRo (the Byzantine
    clients then play their update attack, e.g. sign flipping, through the aggregator).

    The paper's takeover is an abstraction of the adversary, not a server rule: here the Byzantine set is a
    *declared* simulation parameter (``takeover_peers``, written in the genesis, so auditors re-execute the same
    decision) and ``b̂_t`` counts ``info.sampled`` (the ``n̂`` sampled clients, fedro spec §8 item 5: "> b̂" fires).

    Parameters
    ----------
    takeover_peers:
        Peer ids of the Byzantine clients (non-empty, distinct).
    clients, f, aggregator, server_lr:
        As :class:`FedRo` (``clients = n̂``, ``f = b̂``).
    """

    takeover_peers: tuple[str, ...] = ()
    name: ClassVar[str] = "fedro_takeover"

    def __post_init__(self) -> None:
        FedRo.__post_init__(self)
        tp = self.takeover_peers
        if not isinstance(tp, tuple) or not tp or any(type(p) is not str for p in tp) or len(set(tp)) != len(tp):
            raise ConfigError(f"fedro_takeover: takeover_peers must be distinct peer ids (non-empty), got {tp!r}")
        object.__setattr__(self, "takeover_peers", tuple(sorted(tp)))

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> FedRoTakeover:
        base = FedRo.from_params(params)
        tp = params.get("takeover_peers")
        if not isinstance(tp, list | tuple):
            raise ConfigError("fedro_takeover: parameter takeover_peers (a list of peer ids) is required")
        return cls(clients=base.clients, f=base.f, aggregator=base.aggregator, server_lr=base.server_lr,
                   takeover_peers=tuple(tp))

    def aggregate(
        self,
        info: RoundInfo,
        model: np.ndarray,
        updates: Sequence[ClientUpdate],
        *,
        state: bytes | None,
        rng: np.random.Generator,
    ) -> AggregateResult:
        byzantine = frozenset(self.takeover_peers)
        b_t = sum(1 for p in info.sampled if p in byzantine)
        if b_t > self.f:
            record = {"aggregator": self.aggregator, "inputs": len(updates), "b_t": b_t, "takeover": True}
            return AggregateResult(model=np.zeros_like(model), record=record, state=state)
        res = FedRo.aggregate(self, info, model, updates, state=state, rng=rng)
        return AggregateResult(model=res.model, record={**res.record, "b_t": b_t, "takeover": False}, state=res.state)
