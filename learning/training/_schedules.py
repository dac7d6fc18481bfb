"""Learning-rate schedules used by the papers, as frozen callables ``schedule(fl_round) -> lr``.

``fl_round`` counts from 0 (the first round). Every schedule is a pure function of the round index, so every peer
and every auditor derives the same rate from the ledger height.

================ ===================================================== =============================================
name             formula                                               source
================ ===================================================== =============================================
``constant``     ``η_t = η_0``                                         unavailability spec Table 1 (FedProx, GM, cclip, Synthetic)
``inverse_sqrt`` ``η_t = η_0 / √(t + 1)``                              unavailability spec Cor. 1 option 2, Table 1 (CIFAR)
``exponential``  ``η_t = max(η_0 · γ^t, floor)``                       mimic spec §2.7 (γ = 0.95 FMNIST, 0.99 CIFAR)
``step``         ``η_t = η_0 · factor^⌊t / every⌋``                    sself spec §7 item 9 (×0.5 every P rounds)
``piecewise``    ``η_t = values[i]`` for ``boundaries[i-1] ≤ t < boundaries[i]`` fedro spec §5 (FedRo table)
``inverse_time`` ``η_t = θ / (t + γ)``                                 unavailability spec Thm 3; cmfl spec Thm 1 (μ = 1/θ)
================ ===================================================== =============================================

:data:`FEDRO_FEMNIST` is the FedRo client table: 0.1 for t < 300, 0.02 for t < 400, 0.004 for t < 460, 0.0008
after (the paper's last interval "400 ≤ T < 500" is a typo for 460 ≤ t < 500, fedro spec §7 item 12).
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import ClassVar, Protocol, TypeVar

from learning._config import spec_from_mapping
from learning._errors import ConfigError

__all__ = [
    "FEDRO_FEMNIST",
    "SCHEDULES",
    "ConstantLR",
    "ExponentialLR",
    "InverseSqrtLR",
    "InverseTimeLR",
    "LRSchedule",
    "PiecewiseLR",
    "StepLR",
    "register_schedule",
    "schedule_spec",
]


class LRSchedule(Protocol):
    """A learning-rate schedule: ``schedule(fl_round)`` is the local learning rate of that round."""

    name: ClassVar[str]

    def __call__(self, fl_round: int, /) -> float: ...


SCHEDULES: dict[str, type[LRSchedule]] = {}
"""Registry ``name → schedule class``, filled by :func:`register_schedule`."""

_S = TypeVar("_S")


def register_schedule(name: str) -> Callable[[type[_S]], type[_S]]:
    """Class decorator: register a schedule class under ``name``."""

    def decorate(cls: type[_S]) -> type[_S]:
        if name in SCHEDULES:
            raise ConfigError(f"schedule {name!r} registered twice")
        cls.name = name  # type: ignore[attr-defined]
        SCHEDULES[name] = cls  # type: ignore[assignment]
        return cls

    return decorate


def schedule_spec(name: str, params: Mapping[str, object] | None = None) -> LRSchedule:
    """Resolve a schedule name and its parameters into a typed schedule — the config boundary.

    Examples
    --------
    >>> schedule_spec("inverse_sqrt", {"lr0": 0.1})(3)
    0.05
    """
    try:
        cls = SCHEDULES[name]
    except KeyError:
        raise ConfigError(f"unknown schedule {name!r}; known: {', '.join(sorted(SCHEDULES))}") from None
    return spec_from_mapping(cls, params or {}, what=f"schedule {name!r}")


def _check_round(fl_round: int) -> None:
    if fl_round < 0:
        raise ConfigError(f"fl_round must be >= 0, got {fl_round}")


def _check_lr(what: str, value: float) -> None:
    if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
        raise ConfigError(f"{what} must be a positive finite number, got {value!r}")


@register_schedule("constant")
@dataclass(frozen=True, slots=True, kw_only=True)
class ConstantLR:
    """``η_t = η_0`` (unavailability spec Table 1: FedProx local program, GM/cclip, Synthetic(1,1); W1: 0.05)."""

    name: ClassVar[str]
    lr: float

    def __post_init__(self) -> None:
        _check_lr("constant: lr", self.lr)

    def __call__(self, fl_round: int, /) -> float:
        _check_round(fl_round)
        return float(self.lr)


@register_schedule("inverse_sqrt")
@dataclass(frozen=True, slots=True, kw_only=True)
class InverseSqrtLR:
    """``η_t = η_0 / √(t + 1)`` — unavailability spec Corollary 1 option 2 ("anytime"), used for FedAvg-type on CIFAR-10."""

    name: ClassVar[str]
    lr0: float

    def __post_init__(self) -> None:
        _check_lr("inverse_sqrt: lr0", self.lr0)

    def __call__(self, fl_round: int, /) -> float:
        _check_round(fl_round)
        return self.lr0 / math.sqrt(fl_round + 1)


@register_schedule("exponential")
@dataclass(frozen=True, slots=True, kw_only=True)
class ExponentialLR:
    """``η_t = max(η_0 · γ^t, floor)`` with t from 0 — mimic spec §2.7 (code: ``max(lr·decay^t, 1e-5)``).

    The paper's ``0.01 × γ^{t−1}`` counts t from 1; both give η_0 in the first round.
    """

    name: ClassVar[str]
    lr0: float
    gamma: float
    floor: float = 1e-5

    def __post_init__(self) -> None:
        _check_lr("exponential: lr0", self.lr0)
        if not 0.0 < self.gamma <= 1.0:
            raise ConfigError(f"exponential: gamma must be in (0, 1], got {self.gamma}")
        if not (math.isfinite(self.floor) and self.floor >= 0.0):
            raise ConfigError(f"exponential: floor must be >= 0, got {self.floor}")

    def __call__(self, fl_round: int, /) -> float:
        _check_round(fl_round)
        return max(self.lr0 * self.gamma**fl_round, self.floor)


@register_schedule("step")
@dataclass(frozen=True, slots=True, kw_only=True)
class StepLR:
    """``η_t = η_0 · factor^⌊t / every⌋`` — step decay (sself spec §2.4/§7 item 9: [DEFAULT] ×0.5 every P rounds)."""

    name: ClassVar[str]
    lr0: float
    every: int
    factor: float = 0.5

    def __post_init__(self) -> None:
        _check_lr("step: lr0", self.lr0)
        if not isinstance(self.every, int) or self.every <= 0:
            raise ConfigError(f"step: every must be a positive int, got {self.every!r}")
        if not 0.0 < self.factor <= 1.0:
            raise ConfigError(f"step: factor must be in (0, 1], got {self.factor}")

    def __call__(self, fl_round: int, /) -> float:
        _check_round(fl_round)
        return self.lr0 * self.factor ** (fl_round // self.every)


@register_schedule("piecewise")
@dataclass(frozen=True, slots=True, kw_only=True)
class PiecewiseLR:
    """Piecewise-constant: ``values[0]`` for ``t < boundaries[0]``, ``values[i]`` for
    ``boundaries[i-1] ≤ t < boundaries[i]``, ``values[-1]`` after the last boundary (fedro spec §5, FedRo table).
    """

    name: ClassVar[str]
    boundaries: tuple[int, ...]
    values: tuple[float, ...]

    def __post_init__(self) -> None:
        if not isinstance(self.boundaries, tuple) or not isinstance(self.values, tuple):
            raise ConfigError("piecewise: boundaries and values must be tuples")
        if len(self.values) != len(self.boundaries) + 1:
            raise ConfigError(
                f"piecewise: need len(values) == len(boundaries) + 1, got {len(self.values)} and {len(self.boundaries)}"
            )
        if any(not isinstance(b, int) or b <= 0 for b in self.boundaries) or list(self.boundaries) != sorted(
            set(self.boundaries)
        ):
            raise ConfigError(f"piecewise: boundaries must be strictly increasing positive ints, got {self.boundaries}")
        for v in self.values:
            _check_lr("piecewise: value", v)

    def __call__(self, fl_round: int, /) -> float:
        _check_round(fl_round)
        return float(self.values[bisect.bisect_right(self.boundaries, fl_round)])


@register_schedule("inverse_time")
@dataclass(frozen=True, slots=True, kw_only=True)
class InverseTimeLR:
    """``η_t = θ / (t + γ)`` — unavailability spec Theorem 3 (strongly convex; θ̄ there), cmfl spec Theorem 1 (θ = 1/μ,
    γ = 4L/μ)."""

    name: ClassVar[str]
    theta: float
    gamma: float

    def __post_init__(self) -> None:
        _check_lr("inverse_time: theta", self.theta)
        _check_lr("inverse_time: gamma", self.gamma)

    def __call__(self, fl_round: int, /) -> float:
        _check_round(fl_round)
        return self.theta / (fl_round + self.gamma)


FEDRO_FEMNIST = PiecewiseLR(boundaries=(300, 400, 460), values=(0.1, 0.02, 0.004, 0.0008))
"""fedro spec §5: the FedRo client learning-rate table (Tables 1, 3, 4), each step ×0.2."""
