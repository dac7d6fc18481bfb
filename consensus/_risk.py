"""Committee risk: how likely a fairly drawn committee is to hold a Byzantine quorum, or enough seats to block one,
over a run, and the smallest committee that keeps that under a budget (docs/design.md: "Committee sizes come from
a risk budget").

The model. ``N`` members of which ``B`` are Byzantine (:func:`byzantine_count`: ``B = ⌊f N⌋`` for an assumed
fraction ``f``); a committee of ``C`` is drawn uniformly without replacement, so its Byzantine seats ``X`` follow the
hypergeometric law ``HG(N, B, C)``: ``P[X = j] = C(B, j) C(N−B, C−j) / C(N, C)``. With the quorum ``q`` of the rule
(``ledger.quorum_size``: ``⌊2C/3⌋+1`` for ``"bft"``, ``⌊C/2⌋+1`` for ``"majority"``):

* **safety** per draw: ``P[X ≥ q]``, the Byzantine seats alone are a quorum and can certify anything;
* **liveness** per draw: ``P[X ≥ C − q + 1]``, the honest seats are fewer than a quorum, so the Byzantine seats can
  block it by abstaining. Under ``"bft"`` it also bounds the risk of a fork: two quorums overlap in
  ``2q − C ≥ C − q + 1`` members, all of whom must sign twice (and the equivocation evidence names them).

Both are exact fractions (big-integer sums, :func:`hypergeometric_tail`). Over ``d`` independent draws a run fails
with ``1 − (1 − p)^d``, computed as ``−expm1(d · log1p(−p))`` (:func:`run_probability`) so that a per-draw ``p`` of
``1e-12`` is not rounded away.

How many draws a run makes (:func:`committee_draws`):

* coordinator mode samples a fresh committee from every member for each epoch of ``committee_epoch`` heights (the
  genesis committee serves the first): ``⌈rounds / epoch⌉`` draws. The samples are uniform and independent as far as
  the hash is a random oracle and no member can grind it (it reads no bytes a member chooses); members excluded from a sample (evidence against them) do not raise ``B/N`` when
  they are Byzantine, but honest members excluded would, which this does not count.
* committee mode (CMFL) draws only the genesis committee; every later one is *elected* from the round's scores,
  which Byzantine members can influence, so no hypergeometric tail bounds it. The figure is then that of the genesis
  committee alone (1 draw): a lower bound on the run's risk, not a bound.

Re-draws. If a chain re-draws the committee of a height that cannot reach quorum (a view-change fallback), the
Byzantine members of a committee that can block the quorum but not form one abstain to get another draw, up to
``redraws`` times per committee (``None``: without limit). With ``r = P[C − q + 1 ≤ X < q]`` (blocking without a
quorum) a committee then yields a Byzantine quorum with ``p_s (1 + r + … + r^redraws)`` (``p_s / (1 − r)`` without
limit). It stalls for good with ``p_l^(redraws+1)``, every draw blocked (0 without limit, unless ``p_l = 1``).
Re-draws caused by honest crashes are draws the adversary gets for free: add their number as ``extra_draws``.

The search (:func:`smallest_committee`) scans ``C = 1, 2, …`` and returns the first size within the budget. The
risk is **not monotone** in ``C`` (``q`` stays at ``2f+1`` from ``C = 3f`` to ``3f+1``, so the larger committee has
one more seat to lose), so a size above the smallest is not safe by that alone: check the size you pick. Sizes far
over the budget are skipped on a float estimate of the largest term of the tail (a lower bound on the risk, with
a margin far above its rounding error); every size the answer depends on is computed exactly.

Example: 7 of 100 members with 20 Byzantine, ``"bft"`` (``q = 5``), 1,000 draws::

    >>> r = committee_risk(100, 20, 7, draws=1000)
    >>> round(float(r.safety_per_draw), 5), round(r.safety, 3), round(float(r.liveness_per_draw), 3)
    (0.00326, 0.962, 0.141)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

from ledger import COMMITTEE_MODE, MODES, QUORUM_RULES, quorum_size

from consensus._errors import CommitteeConfigError

__all__ = [
    "BYZANTINE_FRACTION_DEFAULT",
    "RISK_BUDGET_DEFAULT",
    "CommitteeRecommendation",
    "CommitteeRisk",
    "byzantine_count",
    "committee_draws",
    "committee_risk",
    "hypergeometric_tail",
    "recommend_committee",
    "run_probability",
    "smallest_committee",
]

RISK_BUDGET_DEFAULT = 1e-6
"""The default budget for the safety risk over a run: one run in a million may lose safety."""

BYZANTINE_FRACTION_DEFAULT = 0.2
"""The Byzantine fraction a genesis check assumes unless told otherwise: 20 %. At 1/3, the most a ``bft``
committee of all members tolerates, safety still has small committees (75 of 10,000 members over 1,000 rounds),
but liveness needs almost every member on the committee (``recommend_committee(10000, 3333, 1000)``)."""

_SKIP_MARGIN = 1e-6
"""How far (in natural log) a float estimate of a lower bound must exceed the budget for a size to be skipped
without an exact sum. The estimate's error from ``math.lgamma`` was at most 2.9e-11 against ``math.log(math.comb(n,
k))`` over 3,000 random ``0 <= k <= n <= 10,000`` (tests/consensus/test_risk.py checks 1e-9 on such a sample)."""


def _count(name: str, v: object, least: int = 0) -> int:
    if type(v) is not int or v < least:
        raise CommitteeConfigError(f"{name} must be an int >= {least}, got {v!r:.40}")
    return v


def _rule(rule: object) -> str:
    if rule not in QUORUM_RULES:
        raise CommitteeConfigError(f"quorum rule must be one of {', '.join(QUORUM_RULES)}, got {rule!r:.40}")
    return str(rule)


def _budget(name: str, v: object) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0.0 <= v <= 1.0:  # NaN fails too
        raise CommitteeConfigError(f"{name} must be a number in [0, 1], got {v!r:.40}")
    return float(v)


def _redraws(v: object) -> int | None:
    return None if v is None else _count("redraws", v)


def byzantine_count(members: int, fraction: Fraction | float | str) -> int:
    """``B = ⌊f · N⌋``: how many of ``members`` are Byzantine at the assumed fraction ``f`` in ``[0, 1]``.

    ``f`` is taken at its decimal value (a float by its shortest repr, ``0.29`` as ``29/100``), so that
    ``⌊0.29 · 100⌋`` is 29 and not the 28 that binary floating point gives.

    >>> byzantine_count(100, 0.29), byzantine_count(20, "1/3"), byzantine_count(4, 0.2)
    (29, 6, 0)
    """
    members = _count("members", members, 1)
    try:
        if isinstance(fraction, bool):
            raise TypeError
        f = Fraction(repr(fraction)) if isinstance(fraction, float) else Fraction(fraction)
    except (TypeError, ValueError, ZeroDivisionError):
        raise CommitteeConfigError(f"Byzantine fraction must be a number in [0, 1], got {fraction!r:.40}") from None
    if not 0 <= f <= 1:
        raise CommitteeConfigError(f"Byzantine fraction must be in [0, 1], got {fraction!r:.40}")
    return math.floor(f * members)


def _check_population(members: int, byzantine: int, committee_size: int) -> tuple[int, int, int]:
    members = _count("members", members, 1)
    byzantine = _count("byzantine", byzantine)
    committee_size = _count("committee_size", committee_size, 1)
    if byzantine > members or committee_size > members:
        raise CommitteeConfigError(
            f"need byzantine <= members and committee_size <= members, got (members, byzantine, committee_size) = "
            f"({members}, {byzantine}, {committee_size})"
        )
    return members, byzantine, committee_size


def _tail_range(members: int, byzantine: int, committee_size: int, seats: int) -> tuple[int, int]:
    """The seat counts ``j`` with ``P[X = j] > 0`` and ``j ≥ seats``: ``[lo, hi]`` (empty when ``lo > hi``)."""
    return max(seats, committee_size - (members - byzantine), 0), min(byzantine, committee_size)


def _tail_numerator(members: int, byzantine: int, committee_size: int, lo: int, hi: int) -> int:
    """``Σ_{j=lo..hi} C(B, j) C(N−B, C−j)``, each term from the one before by an exact integer step."""
    n, b, c = members, byzantine, committee_size
    if lo > hi:
        return 0
    term = math.comb(b, lo) * math.comb(n - b, c - lo)
    total = term
    for j in range(lo, hi):
        # C(B, j+1) C(N−B, C−j−1) = C(B, j) C(N−B, C−j) · (B−j)(C−j) / ((j+1)(N−B−C+j+1)): the quotient is exact
        term = term * (b - j) * (c - j) // ((j + 1) * (n - b - c + j + 1))
        total += term
    return total


def hypergeometric_tail(members: int, byzantine: int, committee_size: int, seats: int) -> Fraction:
    """Exact ``P[X ≥ seats]`` for ``X ~ HG(members, byzantine, committee_size)``: the probability that a uniform
    committee of ``committee_size`` holds at least ``seats`` of the ``byzantine`` members.

    >>> hypergeometric_tail(20, 4, 4, 3)
    Fraction(13, 969)
    """
    n, b, c = _check_population(members, byzantine, committee_size)
    seats = _count("seats", seats)
    lo, hi = _tail_range(n, b, c, seats)
    return Fraction(_tail_numerator(n, b, c, lo, hi), math.comb(n, c))


def run_probability(p: Fraction | float, draws: int) -> float:
    """``1 − (1 − p)^draws``: the probability that at least one of ``draws`` independent draws fails, each with
    probability ``p``, as ``−expm1(draws · log1p(−p))`` (no cancellation for a small ``p``).

    >>> run_probability(Fraction(1, 10**12), 1000)  # 1 - (1 - 1e-12)**1000 in floats: 9.999778782798785e-10
    9.999999995005e-10
    """
    draws = _count("draws", draws)
    if not 0 <= p <= 1:
        raise CommitteeConfigError(f"a probability must be in [0, 1], got {p!r:.40}")
    if p == 0 or draws == 0:
        return 0.0
    pf = float(p)
    if pf >= 1.0:
        return 1.0
    return min(1.0, -math.expm1(draws * math.log1p(-pf)))


def committee_draws(rounds: int, *, mode: str, committee_epoch: int = 1, extra_draws: int = 0) -> int:
    """How many committees a run of ``rounds`` heights draws at random: ``⌈rounds / committee_epoch⌉`` in coordinator
    mode, 1 (the genesis committee; the later ones are elected from scores) in committee mode; plus ``extra_draws``
    (re-draws the adversary gets without paying for them, e.g. after honest crashes).

    >>> committee_draws(1000, mode="coordinator"), committee_draws(1000, mode="coordinator", committee_epoch=30)
    (1000, 34)
    >>> committee_draws(1000, mode="committee")
    1
    """
    rounds = _count("rounds", rounds, 1)
    committee_epoch = _count("committee_epoch", committee_epoch, 1)
    extra_draws = _count("extra_draws", extra_draws)
    if mode not in MODES:
        raise CommitteeConfigError(f"mode must be one of {', '.join(MODES)}, got {mode!r:.40}")
    base = 1 if mode == COMMITTEE_MODE else -(-rounds // committee_epoch)
    return base + extra_draws


def _geometric(r: Fraction, redraws: int | None) -> float:
    """``1 + r + … + r^redraws`` (``1 / (1 − r)`` for ``None``), from the exact ``r`` in ``[0, 1]``."""
    if r == 0 or redraws == 0:
        return 1.0
    one_minus = 1 - r
    if one_minus == 0:
        return math.inf if redraws is None else float(redraws + 1)
    if redraws is None:
        return 1.0 / float(one_minus)
    om = float(one_minus)
    log_r = math.log1p(-om) if om < 0.5 else math.log(float(r))  # log r accurate also for r close to 1
    return -math.expm1((redraws + 1) * log_r) / om


@dataclass(frozen=True, slots=True, kw_only=True)
class CommitteeRisk:
    """Output of :func:`committee_risk`. Per draw: exact fractions; per committee (with re-draws) and over the run:
    floats.

    Attributes
    ----------
    members, byzantine, committee_size, quorum_rule:
        The population ``N``, its Byzantine members ``B``, the committee ``C`` and the rule.
    quorum:
        Votes needed, ``q``; ``safety_seats = q`` and ``liveness_seats = C − q + 1``.
    draws, redraws:
        Independent committees over the run, and the re-draws per committee an abstaining minority can force.
    safety_per_draw, liveness_per_draw:
        ``P[X ≥ q]`` and ``P[X ≥ C − q + 1]``, exact.
    safety_per_committee, liveness_per_committee:
        With re-draws (the module docstring); equal to the per-draw values when ``redraws = 0``.
    safety, liveness:
        Over the run: ``1 − (1 − p)^draws`` of the per-committee values.
    """

    members: int
    byzantine: int
    committee_size: int
    quorum_rule: str
    quorum: int
    draws: int
    redraws: int | None
    safety_seats: int
    liveness_seats: int
    safety_per_draw: Fraction
    liveness_per_draw: Fraction
    safety_per_committee: float
    liveness_per_committee: float
    safety: float
    liveness: float


def _per_committee(p_s: Fraction, p_l: Fraction, redraws: int | None) -> tuple[float, float]:
    """Safety and liveness of one committee slot when a blocking minority may force up to ``redraws`` re-draws."""
    if redraws == 0:
        return float(p_s), float(p_l)
    r = p_l - p_s  # blocking without a quorum: the adversary abstains and gets another draw
    safety = min(1.0, float(p_s) * _geometric(r, redraws)) if p_s else 0.0
    # stalled for good: every draw blocking, the adversary abstaining each time (with a quorum too)
    if redraws is None or p_l == 0:
        return safety, 1.0 if p_l == 1 else 0.0
    om = float(1 - p_l)
    log_p = math.log1p(-om) if om < 0.5 else math.log(float(p_l))  # log p_l accurate also for p_l close to 1
    return safety, math.exp((redraws + 1) * log_p)


def committee_risk(
    members: int,
    byzantine: int,
    committee_size: int,
    *,
    draws: int = 1,
    quorum_rule: str = "bft",
    redraws: int | None = 0,
) -> CommitteeRisk:
    """The risk of a committee of ``committee_size`` drawn ``draws`` times from ``members`` with ``byzantine`` of
    them Byzantine (module docstring for the model, :func:`committee_draws` for ``draws``).

    >>> r = committee_risk(20, 4, 4, draws=20)
    >>> r.quorum, r.safety_per_draw, r.liveness_per_draw
    (3, Fraction(13, 969), Fraction(157, 969))
    """
    n, b, c = _check_population(members, byzantine, committee_size)
    draws = _count("draws", draws)
    rule = _rule(quorum_rule)
    redraws = _redraws(redraws)
    q = quorum_size(c, rule)
    p_s = hypergeometric_tail(n, b, c, q)
    p_l = hypergeometric_tail(n, b, c, c - q + 1)
    s_c, l_c = _per_committee(p_s, p_l, redraws)
    return CommitteeRisk(
        members=n, byzantine=b, committee_size=c, quorum_rule=rule, quorum=q, draws=draws, redraws=redraws,
        safety_seats=q, liveness_seats=c - q + 1, safety_per_draw=p_s, liveness_per_draw=p_l,
        safety_per_committee=s_c, liveness_per_committee=l_c,
        safety=run_probability(s_c, draws), liveness=run_probability(l_c, draws),
    )


def _log_comb(n: int, k: int) -> float:
    return math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)


def smallest_committee(
    members: int,
    byzantine: int,
    *,
    draws: int = 1,
    budget: float = RISK_BUDGET_DEFAULT,
    quorum_rule: str = "bft",
    redraws: int | None = 0,
    liveness: bool = False,
) -> int | None:
    """The smallest committee size whose safety risk (``liveness=True``: liveness risk) over ``draws`` committees is
    at most ``budget``, or ``None`` when no size up to ``members`` is. Not monotone (module docstring): check the size
    you use with :func:`committee_risk`.

    >>> smallest_committee(100, 20, draws=1000), smallest_committee(1000, 200, draws=1000)
    (23, 33)
    """
    n = _count("members", members, 1)
    b = _count("byzantine", byzantine)
    if b > n:
        raise CommitteeConfigError(f"byzantine {b} exceeds members {n}")
    draws = _count("draws", draws)
    budget = _budget("budget", budget)
    rule = _rule(quorum_rule)
    redraws = _redraws(redraws)
    # the largest per-committee risk within the budget; a size whose lower bound is clearly above it is skipped
    p_max = 1.0 if budget >= 1.0 else -math.expm1(math.log1p(-budget) / draws) if draws else 1.0
    log_p_max = math.log(p_max) if p_max > 0 else -math.inf
    # a lower bound on the per-committee risk from one term of the per-draw tail: safety ≥ p_s, liveness = p_l^(K+1)
    can_skip = not liveness or redraws is not None
    power = 1 if not liveness else 1 + (redraws or 0)
    for c in range(1, n + 1):
        q = quorum_size(c, rule)
        seats = c - q + 1 if liveness else q
        lo, hi = _tail_range(n, b, c, seats)
        if lo > hi:
            return c  # no draw holds that many Byzantine seats: both risks are 0
        if can_skip:
            j = min(max((c + 1) * (b + 1) // (n + 2), lo), hi)  # the largest term of the tail (the mode, or an end)
            largest = _log_comb(b, j) + _log_comb(n - b, c - j) - _log_comb(n, c)
            if power * (largest - _SKIP_MARGIN) > log_p_max:
                continue
        r = committee_risk(n, b, c, draws=draws, quorum_rule=rule, redraws=redraws)
        if (r.liveness if liveness else r.safety) <= budget:
            return c
    return None


@dataclass(frozen=True, slots=True, kw_only=True)
class CommitteeRecommendation:
    """Output of :func:`recommend_committee`.

    Attributes
    ----------
    members, byzantine, rounds, draws, mode, quorum_rule, redraws:
        The assumptions (``draws`` from :func:`committee_draws`).
    budget, liveness_budget:
        The budgets the sizes keep to.
    safety_size, liveness_size:
        The smallest committee within each budget (:func:`smallest_committee`), ``None`` if no size is.
    """

    members: int
    byzantine: int
    rounds: int
    draws: int
    mode: str
    quorum_rule: str
    redraws: int | None
    budget: float
    liveness_budget: float
    safety_size: int | None
    liveness_size: int | None


def recommend_committee(
    members: int,
    byzantine: int,
    rounds: int,
    *,
    mode: str = "coordinator",
    committee_epoch: int = 1,
    budget: float = RISK_BUDGET_DEFAULT,
    liveness_budget: float | None = None,
    quorum_rule: str = "bft",
    redraws: int | None = 0,
    extra_draws: int = 0,
) -> CommitteeRecommendation:
    """The smallest committees that keep the safety risk over ``rounds`` within ``budget`` and the liveness risk
    within ``liveness_budget`` (default: ``budget``), for ``members`` of which ``byzantine`` Byzantine
    (:func:`byzantine_count` turns a fraction into a count). In committee mode the sizes cover the genesis
    committee only (module docstring). The committee analogue of ``learning.recommend`` (FedRo's ``(n̂, b̂)``).

    >>> rec = recommend_committee(100, 20, 1000)
    >>> rec.draws, rec.safety_size, rec.liveness_size
    (1000, 23, 61)
    """
    draws = committee_draws(rounds, mode=mode, committee_epoch=committee_epoch, extra_draws=extra_draws)
    budget = _budget("budget", budget)
    lb = budget if liveness_budget is None else _budget("liveness_budget", liveness_budget)
    rule, redraws = _rule(quorum_rule), _redraws(redraws)

    def smallest(budget: float, liveness: bool) -> int | None:
        return smallest_committee(members, byzantine, draws=draws, budget=budget, quorum_rule=rule, redraws=redraws,
                                  liveness=liveness)

    return CommitteeRecommendation(
        members=members, byzantine=byzantine, rounds=rounds, draws=draws, mode=mode, quorum_rule=rule,
        redraws=redraws, budget=budget, liveness_budget=lb, safety_size=smallest(budget, False),
        liveness_size=smallest(lb, True),
    )
