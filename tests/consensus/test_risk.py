"""Committee risk: the hypergeometric tails against exact Fractions and against counting every
committee, the run probability against exact powers, the figures the committee-risk report quotes, monotonicity, re-draws, and the smallest
committee against an exact scan of every size."""

import doctest
import itertools
import math
from fractions import Fraction
from pathlib import Path

import pytest

import consensus
from consensus import (
    CommitteeConfigError,
    byzantine_count,
    committee_draws,
    committee_risk,
    hypergeometric_tail,
    recommend_committee,
    run_probability,
    smallest_committee,
)
from ledger import quorum_size


def counted_tail(n: int, b: int, c: int, seats: int) -> Fraction:
    """P[X >= seats] by listing every committee of c among n members, members 0..b-1 Byzantine."""
    hits = total = 0
    for committee in itertools.combinations(range(n), c):
        total += 1
        hits += sum(1 for m in committee if m < b) >= seats
    return Fraction(hits, total)


def summed_tail(n: int, b: int, c: int, seats: int) -> Fraction:
    """The textbook sum, one math.comb per factor."""
    num = sum(math.comb(b, j) * math.comb(n - b, c - j) for j in range(seats, c + 1))
    return Fraction(num, math.comb(n, c))


def test_the_tail_is_exactly_the_share_of_committees_counted_one_by_one():
    for n in range(1, 10):
        for b in range(n + 1):
            for c in range(1, n + 1):
                for seats in range(c + 2):
                    got = hypergeometric_tail(n, b, c, seats)
                    assert got == counted_tail(n, b, c, seats), (n, b, c, seats)


def test_the_tail_is_exactly_the_textbook_sum_for_large_populations():
    for n, b, c in ((100, 20, 7), (1000, 200, 40), (10_000, 2000, 33), (10_000, 3333, 500), (2000, 1999, 2000)):
        for seats in sorted({0, 1, quorum_size(c), c - quorum_size(c) + 1, c // 2, c}):
            assert hypergeometric_tail(n, b, c, seats) == summed_tail(n, b, c, seats), (n, b, c, seats)


def test_the_quoted_committee_figures():
    # "A fair draw of 7 from 20 % Byzantine members holds a Byzantine quorum with p ≈ 0.0032 per round: 96 % over
    # 1,000 rounds"; ">= 3 seats (enough to block quorum) with probability 0.14": at 100 members
    r = committee_risk(100, 20, 7, draws=1000)
    assert (r.quorum, r.safety_seats, r.liveness_seats) == (5, 5, 3)
    assert round(float(r.safety_per_draw), 4) == 0.0033 and round(r.safety, 2) == 0.96
    assert round(float(r.liveness_per_draw), 2) == 0.14 and r.liveness == 1.0  # 1 - 0.86^1000 rounds to 1
    # the infinite population (a binomial with p = 0.2) is the limit: 0.00467
    assert math.isclose(float(committee_risk(10**4, 2000, 7).safety_per_draw), 0.004657, rel_tol=1e-3)
    binomial = sum(math.comb(7, j) * Fraction(1, 5) ** j * Fraction(4, 5) ** (7 - j) for j in range(5, 8))
    assert float(committee_risk(10**4, 2000, 7).safety_per_draw) < float(binomial) < 0.0047


@pytest.mark.parametrize("p", [Fraction(1, 10**15), Fraction(13, 969), Fraction(1, 3), Fraction(999_999, 10**6),
                               Fraction(1, 7**40), Fraction(0), Fraction(1)])
@pytest.mark.parametrize("draws", [0, 1, 2, 37, 1000])
def test_the_run_probability_matches_the_exact_power(p, draws):
    exact = 1 - (1 - p) ** draws
    got = run_probability(p, draws)
    assert got == float(exact) or math.isclose(got, float(exact), rel_tol=1e-12), (p, draws, got, float(exact))


def test_the_run_probability_keeps_a_tiny_per_draw_risk():
    p = Fraction(1, 10**17)
    assert 1 - (1 - float(p)) ** 1000 == 0.0  # the float power loses it: 1 - 1e-17 is 1.0
    assert math.isclose(run_probability(p, 1000), float(1 - (1 - p) ** 1000), rel_tol=1e-14)
    assert math.isclose(run_probability(p, 1000), 1e-14, rel_tol=1e-12)


def test_the_risk_record_is_its_per_draw_figures_over_the_draws():
    for rule in ("bft", "majority"):
        r = committee_risk(300, 60, 12, draws=250, quorum_rule=rule)
        q = quorum_size(12, rule)
        assert r.quorum == q and r.safety_per_draw == summed_tail(300, 60, 12, q)
        assert r.liveness_per_draw == summed_tail(300, 60, 12, 12 - q + 1)
        assert r.safety == run_probability(r.safety_per_draw, 250)
        assert r.liveness == run_probability(r.liveness_per_draw, 250)
    assert committee_risk(300, 60, 12, quorum_rule="majority").safety > committee_risk(300, 60, 12).safety


def test_more_byzantine_members_more_draws_or_more_redraws_never_lower_the_risk():
    last = None
    for b in range(0, 101, 5):
        r = committee_risk(100, b, 10, draws=50)
        if last is not None:
            assert r.safety >= last.safety and r.liveness >= last.liveness
        last = r
    risks = [committee_risk(100, 20, 10, draws=d).safety for d in (1, 2, 10, 100, 10**6)]
    assert risks == sorted(risks) and risks[0] < risks[-1]
    by_redraws = [committee_risk(100, 20, 10, draws=10, redraws=k).safety for k in (0, 1, 5, 50, None)]
    assert by_redraws == sorted(by_redraws) and by_redraws[0] < by_redraws[-1]


def test_the_risk_falls_along_sizes_of_one_residue_but_not_from_one_size_to_the_next():
    for n, b in ((50, 10), (100, 20), (100, 30), (300, 75)):
        for c in range(1, n - 3):
            assert committee_risk(n, b, c + 3).safety_per_draw <= committee_risk(n, b, c).safety_per_draw, (n, b, c)
    # the quorum of 7 is that of 6 (5 votes): the larger committee has a seat more to lose
    assert committee_risk(100, 20, 7).safety_per_draw > 3 * committee_risk(100, 20, 6).safety_per_draw


def exact_redraw_figures(p_s: Fraction, p_l: Fraction, k: int) -> tuple[Fraction, Fraction]:
    """One committee slot with up to k re-draws, step by step: a quorum ends it (safety lost), a blocking minority
    abstains and re-draws while it may, and stalls on the last draw; (P[safety lost], P[stalled for good]) when the
    adversary plays for each."""
    safety, stall = p_s, p_l
    for _ in range(k):
        safety = p_s + (p_l - p_s) * safety
        stall = p_l * stall
    return safety, stall


def test_redraws_match_the_step_by_step_game():
    for n, b, c in ((20, 4, 4), (100, 20, 7), (100, 33, 10), (12, 8, 4)):
        base = committee_risk(n, b, c)
        for k in (1, 2, 7, 60):
            r = committee_risk(n, b, c, draws=3, redraws=k)
            safety, stall = exact_redraw_figures(base.safety_per_draw, base.liveness_per_draw, k)
            assert math.isclose(r.safety_per_committee, float(safety), rel_tol=1e-12), (n, b, c, k)
            assert math.isclose(r.liveness_per_committee, float(stall), rel_tol=1e-12, abs_tol=1e-300), (n, b, c, k)
            assert math.isclose(r.safety, float(1 - (1 - safety) ** 3), rel_tol=1e-12)
        unbounded = committee_risk(n, b, c, redraws=None)
        limit = base.safety_per_draw / (1 - (base.liveness_per_draw - base.safety_per_draw))
        assert math.isclose(unbounded.safety_per_committee, float(limit), rel_tol=1e-12)
        assert unbounded.liveness_per_committee == (1.0 if base.liveness_per_draw == 1 else 0.0)


def test_the_float_estimate_that_skips_sizes_is_far_closer_than_its_margin():
    import random

    from consensus._risk import _SKIP_MARGIN, _log_comb

    rng = random.Random(31)
    for _ in range(2000):
        n = rng.randint(1, 10_000)
        k = rng.randint(0, n)
        assert abs(_log_comb(n, k) - math.log(math.comb(n, k))) < 1e-9 < _SKIP_MARGIN / 100, (n, k)


def brute_smallest(n, b, *, draws, budget, rule="bft", redraws=0, liveness=False):
    for c in range(1, n + 1):
        r = committee_risk(n, b, c, draws=draws, quorum_rule=rule, redraws=redraws)
        if (r.liveness if liveness else r.safety) <= budget:
            return c
    return None


def test_the_smallest_committee_is_the_first_size_within_the_budget_of_an_exact_scan():
    cases = 0
    for n in (1, 7, 20, 45):
        for frac in ("0", "0.1", "0.2", "1/3", "0.5", "0.7", "1"):
            b = byzantine_count(n, frac)
            for draws in (1, 30, 10**4):
                for budget in (0.0, 1e-6, 0.01, 1.0):
                    for rule in ("bft", "majority"):
                        for redraws in (0, 3, None):
                            for liveness in (False, True):
                                kw = dict(draws=draws, budget=budget, quorum_rule=rule, redraws=redraws, liveness=liveness)
                                want = brute_smallest(n, b, draws=draws, budget=budget, rule=rule, redraws=redraws,
                                                      liveness=liveness)
                                assert smallest_committee(n, b, **kw) == want, (n, b, kw)
                                cases += 1
    assert cases == 4 * 7 * 3 * 4 * 2 * 3 * 2


def test_the_smallest_committee_of_large_populations_skips_only_sizes_over_the_budget():
    # sizes near the whole membership, where the skip on a float estimate matters most
    for n, frac, draws in ((300, "0.6", 1000), (300, "0.5", 100), (400, "1/3", 1000)):
        b = byzantine_count(n, frac)
        for liveness in (False, True):
            want = brute_smallest(n, b, draws=draws, budget=1e-6, liveness=liveness)
            assert smallest_committee(n, b, draws=draws, liveness=liveness) == want, (n, frac, liveness)


def test_recommend_committee_for_a_few_populations():
    # the README's table (concilium genesis risk --members N --byzantine-fraction F --risk-rounds R)
    sizes = {(n, f): (recommend_committee(n, byzantine_count(n, f), 1000).safety_size,
                      recommend_committee(n, byzantine_count(n, f), 1000).liveness_size)
             for n in (20, 100, 1000, 10_000) for f in ("0.1", "0.2")}
    assert sizes[(100, "0.2")] == (23, 61) and sizes[(1000, "0.2")] == (33, 259) and sizes[(10_000, "0.2")] == (33, 352)
    rec = recommend_committee(100, 20, 1000, mode="committee")
    assert rec.draws == 1 and rec.safety_size == smallest_committee(100, 20, draws=1)
    rec = recommend_committee(100, 20, 1000, committee_epoch=10, extra_draws=5)
    assert rec.draws == 105 and rec.safety_size == smallest_committee(100, 20, draws=105)
    assert recommend_committee(100, 20, 1000, liveness_budget=0.5).liveness_size == smallest_committee(
        100, 20, draws=1000, budget=0.5, liveness=True)
    assert recommend_committee(10_000, 7000, 1000).safety_size is None  # 70 %: no committee holds


def test_the_readme_table_is_what_recommend_committee_gives():
    readme = (Path(__file__).parents[2] / "README.md").read_text()
    head = next(line for line in readme.splitlines() if line.startswith("| members | 10 %, 1 round"))
    table = readme[readme.index(head):].split("\n\n")[0].splitlines()
    columns = [(c.split(",")[0].strip(), c.split(",")[1].strip()) for c in head.strip("|").split("|")[1:]]
    fractions = {"10 %": "0.1", "20 %": "0.2", "1/3": "1/3"}
    rounds = {"1 round": 1, "10³": 1000, "10⁶": 10**6}
    cells = 0
    for row in table[2:]:
        n_text, *sizes = (c.strip() for c in row.strip("|").split("|"))
        n = int(n_text.replace(",", ""))
        for (f, r), cell in zip(columns, sizes, strict=True):
            b = byzantine_count(n, fractions[f])
            redrawn = recommend_committee(n, b, rounds[r], redraws=None)  # a default genesis: re-drawn when blocked
            rec = recommend_committee(n, b, rounds[r])  # redraw_ticks = 0
            assert cell == f"{redrawn.safety_size} / {rec.safety_size} / {rec.liveness_size}", (n, f, r, cell)
            cells += 1
    assert cells == 36


def test_draws_and_byzantine_counts():
    assert committee_draws(1000, mode="coordinator") == 1000
    assert committee_draws(1000, mode="coordinator", committee_epoch=30) == 34
    assert committee_draws(1000, mode="committee", committee_epoch=1) == 1
    assert committee_draws(10, mode="coordinator", extra_draws=4) == 14
    # the decimal value, not the binary one: 0.29 * 100 is 28.999999999999996 in floats
    assert (byzantine_count(100, 0.29), byzantine_count(100, "0.29"), byzantine_count(100, Fraction(29, 100))) == (29, 29, 29)
    assert (byzantine_count(20, "1/3"), byzantine_count(4, 0.2), byzantine_count(5, 1), byzantine_count(5, 0)) == (6, 0, 5, 0)


@pytest.mark.parametrize("call", [
    lambda: hypergeometric_tail(10, 11, 3, 1),
    lambda: hypergeometric_tail(10, 2, 11, 1),
    lambda: hypergeometric_tail(0, 0, 1, 1),
    lambda: hypergeometric_tail(10, 2, 0, 1),
    lambda: hypergeometric_tail(10, 2, 3, -1),
    lambda: hypergeometric_tail(10.0, 2, 3, 1),
    lambda: committee_risk(10, 2, 3, quorum_rule="two_thirds"),
    lambda: committee_risk(10, 2, 3, redraws=-1),
    lambda: committee_risk(10, 2, 3, draws=True),
    lambda: smallest_committee(10, 2, budget=1.5),
    lambda: smallest_committee(10, 2, budget=float("nan")),
    lambda: smallest_committee(10, 11),
    lambda: run_probability(Fraction(3, 2), 1),
    lambda: committee_draws(0, mode="coordinator"),
    lambda: committee_draws(10, mode="coordinator", committee_epoch=0),
    lambda: committee_draws(10, mode="gossip"),
    lambda: byzantine_count(10, 1.5),
    lambda: byzantine_count(10, "a third"),
    lambda: byzantine_count(10, True),
    lambda: byzantine_count(0, 0.2),
])
def test_bad_arguments_are_committee_config_errors(call):
    with pytest.raises(CommitteeConfigError):
        call()
    assert issubclass(CommitteeConfigError, ValueError)


def test_the_module_examples_hold():
    import consensus._risk as risk

    failed, tried = doctest.testmod(risk, raise_on_error=False, verbose=False)
    assert (failed, tried >= 8) == (0, True)
    assert consensus.RISK_BUDGET_DEFAULT == 1e-6 and consensus.BYZANTINE_FRACTION_DEFAULT == 0.2
