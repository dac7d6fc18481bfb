"""The straggler availability model and the round-sampling rules of sself spec (§1.2, §3.1).

* ``stragglers`` (registered in :data:`learning.availability.AVAILABILITY`): every sampled device delivers, late
  by ``d`` rounds with ``d`` uniform on ``{0, …, max_delay}`` (sself spec §1.2: ``{0, 1, 2}`` in the main experiments,
  ``{0, …, 4}`` for the severe stragglers of App. G). No device ever drops (``U_∞ = ∅``). ``delay_mode``:
  ``"per_round"`` ([DEFAULT]) draws a fresh delay every time a device is selected, from the round's ``rng``;
  ``"per_device"`` fixes one delay per device for the whole run, drawn once from ``default_rng(seed)``.
* :func:`sample_round`: the host's choice of S_t: disjoint from the devices still busy with an earlier round
  (§1.2 [DEFAULT]) and, with adversaries, exactly ``round(r·K)`` of them from a fixed set (§3.1 [DEFAULT]).
* :func:`adversary_set`, :func:`adversaries_per_round`: the fixed adversarial set of ``round(r·N)`` devices.
* :func:`round_time_units`: wall-clock of one round (1 unit = T_d; *wait for stragglers*: ``1 + max delay``).

Everything is a pure function of its arguments and the injected ``numpy.random.Generator``.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from learning._errors import ConfigError
from learning.availability._base import AvailabilityContext, register_availability
from learning.robust import check_rng

__all__ = [
    "DELAY_MODES",
    "Stragglers",
    "adversaries_per_round",
    "adversary_set",
    "round_time_units",
    "sample_round",
]

DELAY_MODES: tuple[str, ...] = ("per_round", "per_device")


def _int_param(what: str, key: str, value: object, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(f"{what}: {key} must be an int >= {minimum}, got {value!r}")
    return value


@register_availability("stragglers")
@dataclass(frozen=True, slots=True, kw_only=True)
class Stragglers:
    """Straggler delays, uniform on ``{0, …, max_delay}`` rounds; nobody drops (sself spec §1.2).

    Spec syntax: ``stragglers``, ``stragglers(max_delay=4)``, ``stragglers(delay_mode='per_device', seed=3)``.

    Parameters
    ----------
    max_delay:
        Largest delay in rounds (2; 4 for App. G). Strategies need ``max_staleness >= max_delay``.
    delay_mode:
        ``"per_round"`` (a fresh i.i.d. draw per (device, round), from the round's ``rng``) or ``"per_device"``
        (one delay per device for the run).
    seed:
        Seed of the per-device draw (unused in ``per_round`` mode).
    members:
        N (from the :class:`~learning.availability.AvailabilityContext`).
    """

    max_delay: int = 2
    delay_mode: str = "per_round"
    seed: int = 0
    members: int = 0
    device_delays: tuple[int, ...] = ()
    """``per_device``: the delay of each member index (drawn in ``__post_init__``)."""
    name: ClassVar[str] = "stragglers"

    def __post_init__(self) -> None:
        _int_param("stragglers", "max_delay", self.max_delay, 0)
        _int_param("stragglers", "seed", self.seed, 0)
        _int_param("stragglers", "members", self.members, 0)
        if self.delay_mode not in DELAY_MODES:
            raise ConfigError(f"stragglers: delay_mode must be one of {DELAY_MODES}, got {self.delay_mode!r}")
        if self.delay_mode == "per_device" and not self.device_delays:
            draws = np.random.default_rng(self.seed).integers(0, self.max_delay + 1, size=self.members)
            object.__setattr__(self, "device_delays", tuple(int(d) for d in draws))
        if self.device_delays and len(self.device_delays) != self.members:
            raise ConfigError(f"stragglers: {len(self.device_delays)} device delays for {self.members} members")

    @classmethod
    def from_params(cls, params: Mapping[str, Any], ctx: AvailabilityContext) -> Stragglers:
        unknown = sorted(set(params) - {"max_delay", "delay_mode", "seed"})
        if unknown:
            raise ConfigError(f"stragglers: unknown parameter(s) {', '.join(unknown)}; known: delay_mode, "
                              "max_delay, seed")
        mode = params.get("delay_mode", "per_round")
        if not isinstance(mode, str):
            raise ConfigError(f"stragglers: delay_mode must be a string, got {mode!r}")
        return cls(
            max_delay=params.get("max_delay", 2),
            delay_mode=mode,
            seed=params.get("seed", 0),
            members=ctx.members,
        )

    def outcome(self, fl_round: int, sampled: Sequence[int], *, rng: np.random.Generator) -> Mapping[int, int]:
        """``{index: delay}`` for every sampled index (never ``DROPPED``); draws in increasing index order."""
        check_rng(rng)
        idx = sorted(int(i) for i in sampled)
        if len(set(idx)) != len(idx) or (idx and not 0 <= idx[0] <= idx[-1] < self.members):
            raise ValueError(f"stragglers: sampled indices must be distinct, in [0, {self.members}), got {idx}")
        if self.delay_mode == "per_device":
            return {i: self.device_delays[i] for i in idx}
        draws = rng.integers(0, self.max_delay + 1, size=len(idx))
        return {i: int(d) for i, d in zip(idx, draws)}


def _round_half_up(x: float) -> int:
    return math.floor(x + 0.5)


def adversaries_per_round(fraction: float, clients: int) -> int:
    """``round(r·K)``, halves rounded up (sself spec §3.1: r = 0.2, K = 20 ⇒ 4; r = 0.1, K = 10 ⇒ 1)."""
    if not 0.0 <= fraction <= 1.0:
        raise ConfigError(f"adversary fraction must be in [0, 1], got {fraction}")
    return _round_half_up(fraction * clients)


def adversary_set(members: int, fraction: float, *, rng: np.random.Generator) -> tuple[int, ...]:
    """The fixed adversarial member indices: ``round(r·N)`` drawn without replacement, sorted (§3.1 [DEFAULT])."""
    check_rng(rng)
    count = adversaries_per_round(fraction, members)
    return tuple(sorted(int(i) for i in rng.permutation(members)[:count]))


def sample_round(
    members: int,
    clients: int,
    *,
    rng: np.random.Generator,
    busy: Collection[int] = (),
    adversaries: Collection[int] = (),
    adversaries_per_round: int | None = None,
) -> tuple[int, ...]:
    """S_t: ``clients`` member indices from the idle members, sorted (sself spec §1.2, §3.1).

    Parameters
    ----------
    members:
        N; members are ``0..N-1``.
    clients:
        K.
    busy:
        Devices still computing an earlier round's job: never selected (§1.2 [DEFAULT] "disjoint from active").
    adversaries, adversaries_per_round:
        With ``adversaries_per_round = a`` (§3.1 [DEFAULT]): exactly ``a`` from the idle members of
        ``adversaries`` and ``K − a`` from the idle others, or fewer of either kind if not enough are idle. With
        ``None``: K uniformly from all idle members (the hypergeometric alternative of §3.1).
    """
    check_rng(rng)
    _int_param("sample_round", "members", members, 0)
    _int_param("sample_round", "clients", clients, 0)
    busy_set, adv_set = {int(i) for i in busy}, {int(i) for i in adversaries}
    idle = np.array([i for i in range(members) if i not in busy_set], dtype=np.int64)
    if adversaries_per_round is None:
        chosen = rng.permutation(idle)[: min(clients, idle.size)]
    else:
        _int_param("sample_round", "adversaries_per_round", adversaries_per_round, 0)
        if adversaries_per_round > clients:
            raise ConfigError(f"sample_round: {adversaries_per_round} adversaries per round > K = {clients}")
        is_adv = np.isin(idle, np.array(sorted(adv_set), dtype=np.int64))
        bad = rng.permutation(idle[is_adv])[:adversaries_per_round]
        good = rng.permutation(idle[~is_adv])[: clients - adversaries_per_round]
        chosen = np.concatenate([bad, good])
    return tuple(sorted(int(i) for i in chosen))


def round_time_units(outcome: Mapping[int, int], *, wait: bool) -> int:
    """Duration of a round in units of T_d (sself spec §1.2): 1 for the deadline-based schemes (Sself, ignore,
    FedAsync); ``1 + max_k d_k`` for *wait for stragglers* ([DEFAULT]; 1 if nobody was sampled)."""
    if not wait:
        return 1
    delays = [d for d in outcome.values() if d >= 0]
    return 1 + max(delays, default=0)
