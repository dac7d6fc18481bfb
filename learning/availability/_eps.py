"""The ε-adversarial client unavailability of unavailability spec (Su, Xu, Yang 2023): budgeted omission of sampled clients.

Every round the server samples ``S̃_t`` (``K`` of the ``M`` members); the adversary then silences a subset of the
sampled clients, never more data mass than Assumption 2 allows (unavailability spec §1.3):

.. math::

    \\sum_{i \\in \\tilde S_t \\setminus S_t} n_i \\le \\varepsilon \\, \\frac{K N}{M}, \\qquad N = \\sum_{i=1}^M n_i .

The experiments' adversary (unavailability spec §3.3, paper §6.1) is a greedy heuristic over a static candidate set ``C̃``::

    thr ← ε K N / M
    (i_1, …, i_K) ← S̃_t in uniformly random order
    S′ ← S̃_t
    for k = 1..K:
        if |S′| = 1: break                                   # keep at least one responder
        if i_k ∈ C̃ and Σ_{i ∈ (S̃_t \\ S′) ∪ {i_k}} n_i ≤ thr:
            S′ ← S′ \\ {i_k}

``C̃`` comes from two full-participation *shadow runs* (§3.1–3.2); :func:`candidate_set_from_shadow` is that
selection as a pure function of the recorded norms, and ``candidates="largest:K'"`` / ``"random:K'"`` /
``"all"`` are constructions that need no shadow run.

Numbers: ``ε`` is read as the decimal it prints as (``Fraction(repr(ε))``) and the budget test is exact rational
arithmetic, so ``ε = 0.3`` with ``K = 10`` and balanced data allows exactly 3 drops (the float product
``0.3 · 10`` would make that depend on rounding). ``strict=True`` is the official code's test
``dropped + n_i < int(ε K N / M)`` (unavailability spec §7 item 5: paper-ε 0.8 ≡ code-ε 0.9 on balanced data).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, ClassVar

import numpy as np

from learning._errors import ConfigError
from learning.availability._base import DROPPED, AvailabilityContext, register_availability

__all__ = [
    "EpsAdversarial",
    "candidate_set_from_shadow",
    "cumulative_gradient_norm",
    "dropout_fraction",
    "eps_adversarial_drops",
    "resolve_candidates",
]


def _exact(eps: float) -> Fraction:
    """``ε`` as the decimal it prints as (``0.3`` → ``3/10``)."""
    return Fraction(repr(float(eps)))


def _check_eps(eps: object) -> float:
    if type(eps) is int:
        eps = float(eps)
    if type(eps) is not float or not (math.isfinite(eps) and 0.0 <= eps <= 1.0):
        raise ConfigError(f"eps_adversarial: eps must be a float in [0, 1], got {eps!r}")
    return eps


def _check_sizes(sizes: Sequence[int]) -> tuple[int, ...]:
    out = tuple(sizes)
    if not out or any(type(n) is not int or n < 0 for n in out) or sum(out) <= 0:
        raise ConfigError("eps_adversarial: sizes must be non-negative ints, one per member, with a positive sum")
    return out


def eps_adversarial_drops(
    sampled: Sequence[int],
    *,
    sizes: Sequence[int],
    candidates: Sequence[int],
    eps: float,
    rng: np.random.Generator,
    strict: bool = False,
) -> tuple[int, ...]:
    """The clients the unavailability spec §3.3 adversary silences this round (sorted member indices).

    Parameters
    ----------
    sampled:
        ``S̃_t``: distinct member indices (any order: they are sorted before the random order is drawn, so the
        result depends only on the set and ``rng``).
    sizes:
        ``n_i`` of every member (``N = Σ n_i`` over all members, not the sampled ones; §7 item 2).
    candidates:
        ``C̃``: the only members the adversary may silence.
    eps:
        ``ε`` in ``[0, 1]``; the budget is ``thr = ε K N / M`` with ``K = len(sampled)``.
    rng:
        Draws the uniformly random order (one ``rng.permutation(K)`` per call, whatever the outcome).
    strict:
        The official code's ``dropped + n_i < ⌊thr⌋`` instead of the paper's ``≤ thr``.

    Returns
    -------
    tuple[int, ...]
        ``S̃_t \\ S_t``, sorted. Never all of ``S̃_t`` (at least one client responds when ``K ≥ 1``), never a
        client with ``n_i > thr``, never a non-candidate, total mass within the budget.
    """
    order = sorted(sampled)
    m = len(sizes)
    if len(set(order)) != len(order) or any(not 0 <= i < m for i in order):
        raise ValueError(f"sampled must be distinct member indices in [0, {m}), got {list(sampled)}")
    k = len(order)
    if k == 0:
        return ()
    budget = _exact(eps) * k * sum(sizes) / m
    if strict:
        budget = Fraction(math.floor(budget))
    cand = frozenset(candidates)
    kept = k
    mass = 0
    dropped: list[int] = []
    for pos in rng.permutation(k):
        if kept == 1:  # "until |S′_t| = 1 to avoid the trivial boundary case"
            break
        i = order[int(pos)]
        if i not in cand:
            continue
        new_mass = mass + sizes[i]
        if new_mass < budget if strict else new_mass <= budget:
            dropped.append(i)
            mass = new_mass
            kept -= 1
    return tuple(sorted(dropped))


def dropout_fraction(sizes: Sequence[int], dropped: Sequence[int], *, clients: int) -> float:
    """Realised dropout fraction ``ε_t = Σ_{i∈S̃_t∖S_t} n_i / (K N / M)`` (unavailability spec §1.3 item 7, §7 item 4).

    The denominator is the *expected* sampled mass ``K N / M`` (``K = clients``), not the realised one.
    """
    if clients <= 0:
        raise ValueError(f"clients must be >= 1, got {clients}")
    total = sum(sizes)
    return float(Fraction(sum(sizes[i] for i in dropped) * len(sizes), clients * total))


def resolve_candidates(spec: object, sizes: Sequence[int], *, seed: int = 0) -> tuple[int, ...]:
    """The candidate set ``C̃`` (sorted member indices) from its configuration value.

    ``spec`` is a list/tuple of member indices (e.g. the output of :func:`candidate_set_from_shadow`), or one of
    the constructions that need no shadow run:

    * ``"all"``: every member (the budget alone limits the adversary);
    * ``"largest:K'"``: the ``K'`` members with the most data (ties: lower index first);
    * ``"random:K'"``: ``K'`` members drawn uniformly without replacement by ``np.random.default_rng(seed)``.
    """
    m = len(sizes)
    if isinstance(spec, list | tuple):
        out = tuple(spec)
        if any(type(i) is not int or not 0 <= i < m for i in out) or len(set(out)) != len(out):
            raise ConfigError(f"eps_adversarial: candidates must be distinct member indices in [0, {m}), got {spec!r}")
        return tuple(sorted(out))
    if not isinstance(spec, str):
        raise ConfigError(f"eps_adversarial: candidates must be a list of indices or a string, got {spec!r}")
    if spec == "all":
        return tuple(range(m))
    kind, sep, count = spec.partition(":")
    if sep != ":" or kind not in ("largest", "random") or not count.isdigit() or not 0 <= int(count) <= m:
        raise ConfigError(
            f"eps_adversarial: candidates {spec!r}: expected 'all', 'largest:K' or 'random:K' with 0 <= K <= {m}"
        )
    kk = int(count)
    if kind == "largest":
        return tuple(sorted(sorted(range(m), key=lambda i: (-sizes[i], i))[:kk]))
    return tuple(sorted(int(i) for i in np.random.default_rng(seed).choice(m, size=kk, replace=False)))


@register_availability("eps_adversarial")
@dataclass(frozen=True, slots=True, kw_only=True)
class EpsAdversarial:
    """unavailability spec §3.3: each round, silence sampled candidates greedily within the ε data-mass budget.

    Spec syntax: ``eps_adversarial(eps=0.8, candidates='largest:35', strict=False, seed=0)``; ``candidates`` may
    also be a list of member indices (``candidates=[3, 17, 42]``) — see :func:`resolve_candidates` — and defaults
    to ``'all'`` (every member a candidate: the budget alone limits the adversary; the paper's experiments use a
    35-member ``C̃``, which gives 6.5 responders of 10 on average at ε = 0.8, not ``⌈(1−ε)K⌉ = 2``, §3.4).
    Outcome: ``DROPPED`` for the silenced clients, delay 0 for the others.

    Parameters
    ----------
    eps:
        ``ε ∈ [0, 1]`` (the algorithms never see it).
    candidates:
        ``C̃``, sorted member indices (resolved at the config boundary).
    sizes:
        ``n_i`` of every member (from the :class:`~learning.availability.AvailabilityContext`).
    strict:
        The official code's strict budget test (``<`` against ``⌊ε K N / M⌋``).
    """

    eps: float
    candidates: tuple[int, ...]
    sizes: tuple[int, ...]
    strict: bool = False
    name: ClassVar[str] = "eps_adversarial"

    def __post_init__(self) -> None:
        _check_eps(self.eps)
        object.__setattr__(self, "sizes", _check_sizes(self.sizes))
        object.__setattr__(self, "candidates", resolve_candidates(tuple(self.candidates), self.sizes))
        if type(self.strict) is not bool:
            raise ConfigError(f"eps_adversarial: strict must be a bool, got {self.strict!r}")

    @classmethod
    def from_params(cls, params: Mapping[str, Any], ctx: AvailabilityContext) -> EpsAdversarial:
        unknown = sorted(set(params) - {"eps", "candidates", "strict", "seed"})
        if unknown:
            raise ConfigError(f"eps_adversarial: unknown parameter(s) {unknown}; known: candidates, eps, seed, strict")
        if "eps" not in params:
            raise ConfigError("eps_adversarial: parameter eps is required")
        seed = params.get("seed", 0)
        if type(seed) is not int or seed < 0:
            raise ConfigError(f"eps_adversarial: seed must be an int >= 0, got {seed!r}")
        if len(ctx.sizes) != ctx.members:
            raise ConfigError(f"eps_adversarial: {len(ctx.sizes)} sizes for {ctx.members} members")
        sizes = _check_sizes(ctx.sizes)
        return cls(
            eps=_check_eps(params["eps"]),
            candidates=resolve_candidates(params.get("candidates", "all"), sizes, seed=seed),
            sizes=sizes,
            strict=params.get("strict", False),
        )

    def dropped(self, sampled: Sequence[int], *, rng: np.random.Generator) -> tuple[int, ...]:
        """``S̃_t ∖ S_t`` for this round (see :func:`eps_adversarial_drops`)."""
        return eps_adversarial_drops(
            sampled, sizes=self.sizes, candidates=self.candidates, eps=self.eps, rng=rng, strict=self.strict
        )

    def outcome(self, fl_round: int, sampled: Sequence[int], *, rng: np.random.Generator) -> Mapping[int, int]:
        gone = frozenset(self.dropped(sampled, rng=rng))
        return {i: DROPPED if i in gone else 0 for i in sorted(sampled)}


# ---------------------------------------------------------------------------------------------------------------
# Candidate set from shadow runs (unavailability spec §3.1–3.2)


def cumulative_gradient_norm(delta: np.ndarray, lr: float) -> float:
    """``a_i(T) = ‖Σ_τ ∇ℓ^τ_{i,T}(θ^τ_{i,T})‖ = ‖θ_T − θ_{i,T+1}‖ / η_T`` for plain local SGD (unavailability spec §3.2).

    ``delta`` is the client's upload ``θ_{i,T+1} − θ_T`` in the FedAvg shadow run at round ``T``; the norm is over
    the whole flattened vector (code ``grad_norm``), accumulated in float64.
    """
    if not (math.isfinite(lr) and lr > 0):
        raise ValueError(f"lr must be a positive finite number, got {lr}")
    v = np.asarray(delta, dtype=np.float64).reshape(-1)
    return math.sqrt(float(np.add.reduce(v * v))) / lr


def _top(score: np.ndarray, pool: Sequence[int], k: int) -> list[int]:
    """The ``k`` indices of ``pool`` with the largest scores (ties: lower index first)."""
    return sorted(pool, key=lambda i: (-float(score[i]), i))[:k]


def candidate_set_from_shadow(
    grad_norms_t1: Sequence[float] | np.ndarray,
    grad_norms_t2: Sequence[float] | np.ndarray,
    momentum_norms_t1: Sequence[float] | np.ndarray,
    momentum_norms_t2: Sequence[float] | np.ndarray,
    *,
    k1: int = 25,
    k2: int = 10,
    absolute: bool = False,
) -> tuple[int, ...]:
    """``C̃ = C̃_1 ∪ C̃_2`` from the two shadow runs (unavailability spec §3.2), as sorted member indices.

    * ``C̃_1``: the ``k1`` members with the largest ``a_i(T_2) − a_i(T_1)``, where ``a_i(T)`` is member ``i``'s
      :func:`cumulative_gradient_norm` in the full-participation **FedAvg** shadow run at round ``T``.
    * ``C̃_2``: among the members not in ``C̃_1``, the ``k2`` with the largest ``b_j(T_2) − b_j(T_1)``, where
      ``b_j(T) = ‖m_j^T‖`` is the client momentum norm in the full-participation **cclip** shadow run.

    The paper ranks the signed differences (default); ``absolute=True`` ranks ``|·|`` like the official code
    (§2.9). Ties go to the lower index. Paper values: ``T_1 = 5``, ``T_2 = 150`` (0-based rounds), ``k1 = 25``,
    ``k2 = 10``; the shadow runs use differently seeded data (§3.1).
    """
    raw = (grad_norms_t1, grad_norms_t2, momentum_norms_t1, momentum_norms_t2)
    arrays = [np.asarray(a, dtype=np.float64) for a in raw]
    m = arrays[0].shape[0] if arrays[0].ndim == 1 else -1
    if any(a.ndim != 1 or a.shape[0] != m for a in arrays) or m < 0:
        raise ValueError("the four norm arrays must be 1-D, one entry per member")
    if not all(np.isfinite(a).all() for a in arrays):
        raise ValueError("norms must be finite")
    if type(k1) is not int or type(k2) is not int or k1 < 0 or k2 < 0 or k1 + k2 > m:
        raise ValueError(f"need 0 <= k1, k2 and k1 + k2 <= {m}, got k1={k1}, k2={k2}")
    score1 = arrays[1] - arrays[0]
    score2 = arrays[3] - arrays[2]
    if absolute:
        score1, score2 = np.abs(score1), np.abs(score2)
    first = _top(score1, range(m), k1)
    chosen = set(first)
    second = _top(score2, [j for j in range(m) if j not in chosen], k2)
    return tuple(sorted(chosen | set(second)))
