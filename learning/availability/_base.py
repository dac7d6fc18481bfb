"""Client availability models: who of the sampled clients responds in a round, and how late.

docs/design.md ("Learning", attacks): availability is an attack surface like the updates themselves. The
simulator's adversary module asks an :class:`Availability` once per round, after the round's clients are
sampled, and then suppresses or delays their training results; the algorithms never see the model, only
its effect (fewer or late updates).

An outcome maps each sampled member index to ``DROPPED`` (no result this round) or a delay ``d >= 0`` in
rounds (0 = on time; ``d`` = the result arrives ``d`` rounds late, the straggler model of sself spec §1.2).
Models are seeded only through the ``rng`` the caller passes (derived from the scenario seed and the
round), so a scenario replays exactly.

New models register with :func:`register_availability` and are built by name at the config boundary
(:func:`parse_availability`, spec syntax ``name(key=value, ...)`` like the aggregators').
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol, TypeVar

import numpy as np

from learning._config import parse_stages  # the aggregators' spec grammar
from learning._errors import ConfigError

__all__ = [
    "AVAILABILITY",
    "DROPPED",
    "Availability",
    "AvailabilityContext",
    "AlwaysAvailable",
    "parse_availability",
    "register_availability",
]

DROPPED = -1
"""Outcome value: the client does not respond this round."""


@dataclass(frozen=True, slots=True, kw_only=True)
class AvailabilityContext:
    """What an availability model may know about the federation (fixed for a run)."""

    members: int
    """N: number of members; clients are named by index ``0..N-1``."""
    sizes: tuple[int, ...]
    """Local dataset size ``n_i`` of every member."""
    labels: tuple[tuple[int, ...], ...] = ()
    """Per member, the class labels present in its local data (sorted), if the host knows them."""
    rounds: int = 0
    """Total rounds T of the run (0 = unknown)."""


class Availability(Protocol):
    """An availability model (see the module docstring)."""

    name: ClassVar[str]

    def outcome(self, fl_round: int, sampled: Sequence[int], *, rng: np.random.Generator) -> Mapping[int, int]:
        """``{member index: DROPPED or delay in rounds}`` for each index in ``sampled`` (round counts from 1)."""
        ...


AVAILABILITY: dict[str, Callable[[Mapping[str, Any], AvailabilityContext], Availability]] = {}
"""Registry ``name → factory(params, ctx)``, filled by :func:`register_availability`."""

_A = TypeVar("_A")


def register_availability(name: str) -> Callable[[type[_A]], type[_A]]:
    """Class decorator: register under ``name``; the class provides ``from_params(params, ctx)``."""

    def deco(cls: type[_A]) -> type[_A]:
        if name in AVAILABILITY:
            raise ConfigError(f"availability model {name!r} registered twice")
        AVAILABILITY[name] = cls.from_params  # type: ignore[attr-defined]
        return cls

    return deco


def parse_availability(spec: str, ctx: AvailabilityContext) -> Availability:
    """Build a model from ``"name"`` or ``"name(key=value, ...)"`` (values: int, float, bool, quoted string)."""
    stages = parse_stages(spec)
    if len(stages) != 1:
        raise ConfigError(f"{spec!r}: an availability model is a single stage")
    name, params = stages[0]
    factory = AVAILABILITY.get(name)
    if factory is None:
        raise ConfigError(f"unknown availability model {name!r}; known: {', '.join(sorted(AVAILABILITY))}")
    return factory(params, ctx)


@register_availability("always")
@dataclass(frozen=True, slots=True)
class AlwaysAvailable:
    """Every sampled client responds on time (the default)."""

    name: ClassVar[str] = "always"

    @classmethod
    def from_params(cls, params: Mapping[str, Any], ctx: AvailabilityContext) -> AlwaysAvailable:
        if params:
            raise ConfigError(f"always: takes no parameters, got {', '.join(sorted(params))}")
        return cls()

    def outcome(self, fl_round: int, sampled: Sequence[int], *, rng: np.random.Generator) -> Mapping[int, int]:
        return {i: 0 for i in sampled}
