"""The committee-risk check of ``concilium genesis create`` and ``concilium testnet init``, and ``concilium genesis
risk``: the probability that a fairly drawn committee holds a Byzantine quorum over the run
(``consensus.committee_risk``), printed, and a genesis over the budget refused unless ``--accept-risk``.

The assumptions come from flags, else (``testnet init``) the scenario's ``[risk]`` table, else the defaults: a
Byzantine fraction of ``consensus.BYZANTINE_FRACTION_DEFAULT`` (20 %), the rounds the genesis plans
(``fl_rounds``; :data:`RISK_ROUNDS_DEFAULT` when it runs until stopped), a budget of
``consensus.RISK_BUDGET_DEFAULT`` (1e-6) for safety. Liveness (enough seats to block a quorum) is printed, not
enforced: a blocked committee stalls a height, it does not certify anything.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from consensus import (
    BYZANTINE_FRACTION_DEFAULT,
    RISK_BUDGET_DEFAULT,
    CommitteeRecommendation,
    CommitteeRisk,
    byzantine_count,
    committee_draws,
    committee_risk,
    recommend_committee,
)
from ledger import COMMITTEE_MODE

__all__ = [
    "RISK_ROUNDS_DEFAULT",
    "RiskAssumptions",
    "RiskOverBudget",
    "add_risk_arguments",
    "assess",
    "assumptions_from",
    "check_risk",
    "epoch_of",
    "risk_lines",
    "simulation_line",
    "unit_interval",
]

RISK_ROUNDS_DEFAULT = 1000
"""The rounds a genesis that runs until stopped (``fl_rounds = 0``) is checked over (1,000 rounds)."""
REDRAWS_MAX = 1_000_000


class RiskOverBudget(Exception):
    """A genesis whose committees risk a Byzantine quorum over the run beyond the budget (exit 2, nothing written)."""


def fraction_arg(text: str) -> Fraction:
    """An argparse type: a Byzantine fraction in [0, 1], a decimal (``0.2``) or a ratio (``1/3``), kept exact."""
    try:
        v = Fraction(text)
    except (ValueError, ZeroDivisionError):
        raise argparse.ArgumentTypeError(f"not a number or a ratio: {text!r:.40}") from None
    if not 0 <= v <= 1:
        raise argparse.ArgumentTypeError(f"must be in [0, 1], got {text:.40}")
    return v


def unit_interval(*, open_low: bool = False) -> Callable[[str], float]:
    """An argparse type: a number in [0, 1], or in (0, 1] with ``open_low``."""

    def parse(text: str) -> float:
        try:
            v = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text!r:.40}") from None
        if not (0.0 < v <= 1.0 if open_low else 0.0 <= v <= 1.0):  # (NaN fails too)
            raise argparse.ArgumentTypeError(f"must be in {'(' if open_low else '['}0, 1], got {text:.40}")
        return v

    parse.__name__ = "number"
    return parse


REDRAWS_FROM_GENESIS = -1
"""``--redraws`` not given: unbounded where the genesis re-draws (its ``redraw_ticks`` > 0, the default), else 0."""


def redraws_arg(text: str) -> int | None:
    """An argparse type: re-draws per committee, an int in [0, REDRAWS_MAX] or ``unbounded``."""
    if text == "unbounded":
        return None
    try:
        v = int(text, 10)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer or 'unbounded': {text!r:.40}") from None
    if not 0 <= v <= REDRAWS_MAX:
        raise argparse.ArgumentTypeError(f"must be in [0, {REDRAWS_MAX}] or 'unbounded', got {text:.40}")
    return v


def add_risk_arguments(
    p: argparse.ArgumentParser, *, rounds_type: Callable[[str], int], refuses: bool, scenario: bool = False
) -> None:
    """The committee-risk options of a command (``refuses``: it writes a genesis, so ``--accept-risk`` too);
    ``rounds_type`` parses ``--risk-rounds`` (the CLI's bounded integer type)."""
    from_where = " (default: the scenario's [risk] table, else {})" if scenario else " (default {})"
    g = p.add_argument_group("committee risk", "the probability that a randomly drawn committee holds a Byzantine "
                                                "quorum over the run (consensus.committee_risk)")
    g.add_argument("--byzantine-fraction", type=fraction_arg, default=None, metavar="F",
                   help="share of members assumed Byzantine, e.g. 0.2 or 1/3"
                        + from_where.format(BYZANTINE_FRACTION_DEFAULT))
    g.add_argument("--risk-rounds", type=rounds_type, default=None, metavar="R",
                   help="rounds the risk is taken over (default: the rounds the genesis plans, fl_rounds; "
                        f"{RISK_ROUNDS_DEFAULT} when it runs until stopped)")
    g.add_argument("--risk-budget", type=unit_interval(), default=None, metavar="P",
                   help="highest accepted probability of a Byzantine quorum over the run"
                        + from_where.format(RISK_BUDGET_DEFAULT))
    g.add_argument("--redraws", type=redraws_arg, default=REDRAWS_FROM_GENESIS, metavar="K|unbounded",
                   help="re-draws per committee that Byzantine members can force by abstaining (a chain re-draws a "
                        "height's committee after protocol.params.redraw_ticks without a decision; default: "
                        "unbounded, or 0 where the genesis sets redraw_ticks = 0)")
    if refuses:
        g.add_argument("--accept-risk", action="store_true",
                       help="write the genesis even when the risk is over the budget"
                            + (" (also the scenario key risk.accept)" if scenario else ""))


@dataclass(frozen=True, slots=True, kw_only=True)
class RiskAssumptions:
    """What a check assumes: the Byzantine fraction (exact), the rounds and where they came from, the budget, the
    re-draws per committee, and whether a risk over the budget is accepted."""

    fraction: Fraction
    rounds: int
    rounds_from: str
    budget: float
    redraws: int | None
    accept: bool


def assumptions_from(
    args: argparse.Namespace, *, planned_rounds: int, scenario_risk: Any = None, redraw: bool = True
) -> RiskAssumptions:
    """The assumptions of ``args`` (flags of :func:`add_risk_arguments`), else the scenario's ``[risk]`` table, else
    the defaults; ``planned_rounds`` is the genesis' ``fl_rounds`` (0: until stopped); ``redraw``: whether the
    genesis re-draws a committee that cannot reach quorum (``ledger.ProtocolParams.redraw_ticks`` > 0), which makes
    the default ``--redraws`` unbounded."""
    fraction = args.byzantine_fraction
    if fraction is None:
        fraction = Fraction(repr(scenario_risk.byzantine_fraction if scenario_risk else BYZANTINE_FRACTION_DEFAULT))
    budget = args.risk_budget
    if budget is None:
        budget = scenario_risk.budget if scenario_risk else RISK_BUDGET_DEFAULT
    if args.risk_rounds is not None:
        rounds, rounds_from = args.risk_rounds, "--risk-rounds"
    elif planned_rounds > 0:
        rounds, rounds_from = planned_rounds, "the genesis' fl_rounds"
    else:
        rounds, rounds_from = RISK_ROUNDS_DEFAULT, "fl_rounds = 0 runs until stopped: the default"
    accept = bool(getattr(args, "accept_risk", False) or (scenario_risk is not None and scenario_risk.accept))
    redraws = args.redraws
    if redraws == REDRAWS_FROM_GENESIS:
        redraws = None if redraw else 0
    return RiskAssumptions(fraction=fraction, rounds=rounds, rounds_from=rounds_from, budget=budget,
                           redraws=redraws, accept=accept)


def assess(
    *, members: int, committee_size: int | None, quorum: str, mode: str, committee_epoch: int, a: RiskAssumptions
) -> tuple[CommitteeRisk | None, CommitteeRecommendation]:
    """The risk of ``committee_size`` (None: no committee to judge) and the smallest sizes within the budget."""
    b = byzantine_count(members, a.fraction)
    rec = recommend_committee(members, b, a.rounds, mode=mode, committee_epoch=committee_epoch, budget=a.budget,
                              quorum_rule=quorum, redraws=a.redraws)
    risk = None
    if committee_size is not None:
        risk = committee_risk(members, b, committee_size, draws=rec.draws, quorum_rule=quorum, redraws=a.redraws)
    return risk, rec


def _pct(f: Fraction) -> str:
    return f"{float(f * 100):.4g} %"


def _p(x: float | Fraction) -> str:
    """A probability in 3 significant digits; exactly 0 as 0, one below the float range as such."""
    if x == 0:
        return "0"
    v = float(x)
    return f"{v:.3g}" if v > 0 else "< 1e-300"


def _size(n: int | None, members: int) -> str:
    return str(n) if n is not None else f"none up to {members}"


def risk_lines(
    risk: CommitteeRisk | None, rec: CommitteeRecommendation, a: RiskAssumptions, *, committee_epoch: int
) -> list[str]:
    """The report: assumptions, the committee's risks per draw and over the run, the smallest sizes."""
    if rec.mode == COMMITTEE_MODE:
        draws = ("committee mode: only the genesis committee is drawn (1 draw); the later ones are elected from "
                 "scores, which no draw bounds, so the figures are a lower bound")
    else:
        per = "every height" if committee_epoch == 1 else f"every {committee_epoch} heights (committee_epoch)"
        draws = f"coordinator mode: a committee drawn {per}, {rec.draws} draws"
    if a.redraws != 0:
        times = "without limit" if a.redraws is None else f"up to {a.redraws} times"
        draws += f", each re-drawn {times} when it cannot reach quorum"
    lines = [
        f"committee risk, assuming {rec.byzantine} of {rec.members} members Byzantine ({_pct(a.fraction)}), quorum "
        f"rule {rec.quorum_rule}, over {a.rounds} rounds ({a.rounds_from}):",
        f"  {draws}",
    ]
    if risk is not None:
        verdict = "OVER the budget" if risk.safety > a.budget else "within the budget"
        lines += [
            f"  committee of {risk.committee_size}: a Byzantine quorum (>= {risk.safety_seats} seats) per draw "
            f"{_p(risk.safety_per_draw)}, over the run {_p(risk.safety)}: {verdict} {a.budget:g}",
            f"  committee of {risk.committee_size}: seats to block it (>= {risk.liveness_seats}) per draw "
            f"{_p(risk.liveness_per_draw)}, " + ("over the run" if a.redraws == 0 else "for good over the run")
            + f" {_p(risk.liveness)}" + ("" if a.redraws == 0 else " (a blocked draw stalls its height redraw_ticks)"),
        ]
    lines.append(f"  smallest committee within {a.budget:g} over the run: {_size(rec.safety_size, rec.members)} "
                 f"(safety), {_size(rec.liveness_size, rec.members)} (liveness); the risk is not monotone in the size")
    return lines


def check_risk(
    args: argparse.Namespace,
    *,
    members: int,
    committee_size: int,
    quorum: str,
    mode: str,
    params: Mapping[str, Any],
    planned_rounds: int,
    what: str,
    scenario_risk: Any = None,
    redraw: bool = True,
) -> list[str]:
    """The check before a genesis is written: the report's lines, or :class:`RiskOverBudget` (after printing them)
    when the safety risk over the run exceeds the budget and it is not accepted. ``what`` names the committee size
    in the error (``--committee-size 4``); ``redraw``: the genesis re-draws a committee short of quorum
    (:func:`assumptions_from`)."""
    epoch = epoch_of(params, mode)
    a = assumptions_from(args, planned_rounds=planned_rounds, scenario_risk=scenario_risk, redraw=redraw)
    risk, rec = assess(members=members, committee_size=committee_size, quorum=quorum, mode=mode,
                       committee_epoch=epoch, a=a)
    assert risk is not None
    lines = risk_lines(risk, rec, a, committee_epoch=epoch)
    if risk.safety > a.budget:
        if a.accept:
            by = "--accept-risk" if getattr(args, "accept_risk", False) else "risk.accept"
            lines.append(f"  accepted: the risk is over the budget ({by})")
        else:
            print("\n".join(lines), flush=True)
            smallest = (f"the smallest committee within it is {rec.safety_size}" if rec.safety_size is not None
                        else f"no committee of up to {members} members is within it")
            raise RiskOverBudget(
                f"{what}: a Byzantine quorum over the run with probability {_p(risk.safety)}, over the budget "
                f"{a.budget:g} (at {_pct(a.fraction)} Byzantine of {members} members, {a.rounds} rounds); {smallest}; "
                "--accept-risk writes it anyway"
            )
    return lines


def epoch_of(params: Mapping[str, Any], mode: str) -> int:
    """The genesis' ``committee_epoch`` (coordinator mode; committee mode draws once and takes no epoch)."""
    if mode == COMMITTEE_MODE or "committee_epoch" not in params:
        return 1
    from node.core import committee_epoch_of  # noqa: PLC0415 (imports torch through learning)

    return committee_epoch_of(params, mode=mode)


def simulation_line(scenario: Any, rounds: int) -> str:
    """One line for ``sim run``'s summary: the risk the scenario's committees would carry on a real network under its
    ``[risk]`` assumptions (printed only: a simulation studies attacks on purpose)."""
    p = scenario.protocol
    fraction = Fraction(repr(scenario.risk.byzantine_fraction))
    draws = committee_draws(rounds, mode=p.mode, committee_epoch=epoch_of(p.params, p.mode))
    redraw = p.params.get("redraw_ticks") != 0  # (absent: the genesis default re-draws a committee short of quorum)
    r = committee_risk(scenario.members, byzantine_count(scenario.members, fraction), p.committee_size, draws=draws,
                       quorum_rule=p.quorum, redraws=None if redraw else 0)
    where = "the genesis committee only" if p.mode == COMMITTEE_MODE else f"{draws} draws"
    if redraw:
        where += ", each re-drawn without limit when it cannot reach quorum"
    return (f"committee risk on a real network at {_pct(fraction)} Byzantine: a Byzantine quorum with probability "
            f"{_p(r.safety)} over {rounds} rounds ({where}; budget {scenario.risk.budget:g}; a simulation is not "
            "refused)")
