"""The training plan: the local training a network agreed on, as a genesis pins it (``protocol.params["training"]``).

A :class:`TrainingPlan` is every choice that decides what a member's local job computes (steps or epochs, batch
size, learning rate and its schedule, optimizer, regularisers, sampling, the app's loop, the root seed of the
members' sampling randomness) and none that only decides where or how fast (the device, reproducible mode: a
machine's own choices). It travels as a canonical plain dict (:meth:`TrainingPlan.to_params`, every field, floats
as floats, tuples as lists) and is read back strictly (:meth:`TrainingPlan.from_params`: an unknown, missing or
mistyped key is one line naming the source and the key).

Example::

    plan = TrainingPlan(steps=10, batch_size=32, lr=0.05, optimizer="adamw", weight_decay=1e-2, seed=7)
    params["training"] = plan.to_params()                        # what the genesis hashes
    same = TrainingPlan.from_params(params["training"], source="genesis protocol.params.training")
    trainer, schedule = same.trainer(model_spec, device), same.schedule()

The wire key ``schedule`` (the schedule's name) is the attribute :attr:`TrainingPlan.schedule_name`: the
attribute ``schedule`` is the method that builds the schedule callable.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from types import MappingProxyType
from typing import Any, ClassVar

import torch

from learning._errors import ConfigError
from learning.models import ModelSpec
from learning.training._local import OPTIMIZERS, LocalTrainer, LocalTrainingConfig
from learning.training._schedules import SCHEDULES, schedule_spec

__all__ = ["TrainingPlan"]

SAMPLINGS = ("with_replacement", "shuffle", "sequential")
SEED_MAX = 2**64 - 1
"""The widest integer the canonical encoding carries (``ledger/_encoding.py``)."""
_LOOP_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
_FLOATS = ("lr", "momentum", "weight_decay", "prox_mu", "eps", "grad_clip", "label_smoothing")
_INTS = ("steps", "epochs", "batch_size", "seed")
_STRS = ("schedule_name", "sampling", "optimizer", "loop")
_WIRE = {"schedule_name": "schedule"}
"""Attribute → ``to_params`` key where they differ (``schedule`` is the method)."""


def _freeze(value: Any) -> Any:
    """A schedule parameter as an immutable value: lists become tuples, tables read-only mappings."""
    if isinstance(value, Mapping):
        return MappingProxyType({str(k): _freeze(v) for k, v in value.items()})
    if isinstance(value, list | tuple):
        return tuple(_freeze(v) for v in value)
    return value


def _thaw(value: Any) -> Any:
    """The plain form of a frozen value: dicts and lists."""
    if isinstance(value, Mapping):
        return {k: _thaw(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return [_thaw(v) for v in value]
    return value


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


@dataclass(frozen=True, slots=True, kw_only=True)
class TrainingPlan:
    """The agreed local training of every member (a genesis's ``protocol.params["training"]``).

    Attributes
    ----------
    steps, epochs:
        Exactly one is positive, the other 0: K local steps, or E passes over the local data.
    batch_size:
        B; 0 = full batch (every step on the whole local dataset).
    lr, schedule_name, schedule_params:
        The learning-rate schedule by name (``learning.training.SCHEDULES``; the key ``schedule`` of
        :meth:`to_params`) with its parameters; its base rate (a field ``lr`` or ``lr0``) is ``lr`` unless
        ``schedule_params`` give it (:meth:`schedule`).
    momentum, nesterov, weight_decay, prox_mu, sampling, optimizer, betas, eps, grad_clip, label_smoothing:
        As in :class:`LocalTrainingConfig` (SGD momentum, ℓ2 or decoupled weight decay, FedProx μ, minibatch
        sampling, ``"sgd" | "adam" | "adamw"``, Adam's (β1, β2) and ε, the loss gradient's norm bound, cross-entropy
        label smoothing).
    loop:
        A registered custom training loop (``learning.training.register_training_loop``, typically an app's);
        ``""``: the built-in one. Resolved by :meth:`trainer` (where training runs), not here: an auditor reads
        the plan without running a loop.
    seed:
        The root seed of the members' local sampling randomness (minibatches, dropout masks), a 64-bit unsigned
        integer.
    """

    PARAM_KEY: ClassVar[str] = "training"
    """The ``protocol.params`` key a genesis pins the plan under."""

    steps: int = 10
    epochs: int = 0
    batch_size: int = 32
    lr: float = 0.05
    schedule_name: str = "constant"
    schedule_params: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    momentum: float = 0.0
    nesterov: bool = False
    weight_decay: float = 0.0
    prox_mu: float = 0.0
    sampling: str = "with_replacement"
    optimizer: str = "sgd"
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8
    grad_clip: float = 0.0
    label_smoothing: float = 0.0
    loop: str = ""
    seed: int = 0

    def __post_init__(self) -> None:
        for key in _INTS:
            value = getattr(self, key)
            if not isinstance(value, int) or isinstance(value, bool):
                raise ConfigError(f"training plan: {key} must be an integer, got {type(value).__name__}")
        for key in _FLOATS:
            value = getattr(self, key)
            if not _is_number(value):
                raise ConfigError(f"training plan: {key} must be a number, got {type(value).__name__}")
            if not math.isfinite(value):
                raise ConfigError(f"training plan: {key} must be finite, got {value}")
            object.__setattr__(self, key, float(value))
        for key in _STRS:
            if not isinstance(getattr(self, key), str):
                raise ConfigError(f"training plan: {key} must be a string, got {type(getattr(self, key)).__name__}")
        if not isinstance(self.nesterov, bool):
            raise ConfigError(f"training plan: nesterov must be true or false, got {type(self.nesterov).__name__}")
        betas = self.betas
        if not (isinstance(betas, list | tuple) and len(betas) == 2 and all(_is_number(b) for b in betas)):
            raise ConfigError(f"training plan: betas must be two numbers [β1, β2], got {betas!r:.60}")
        object.__setattr__(self, "betas", (float(betas[0]), float(betas[1])))
        if not isinstance(self.schedule_params, Mapping):
            raise ConfigError(f"training plan: schedule_params must be a table, got {type(self.schedule_params).__name__}")
        object.__setattr__(self, "schedule_params", _freeze(self.schedule_params))
        # plan-level rules; the rest is LocalTrainingConfig's and the schedule's (each message names the key)
        if self.steps < 0 or self.epochs < 0 or (self.steps > 0) == (self.epochs > 0):
            raise ConfigError(
                f"training plan: exactly one of steps and epochs must be positive (got steps={self.steps}, "
                f"epochs={self.epochs})"
            )
        if self.batch_size < 0:
            raise ConfigError(f"training plan: batch_size must be >= 0 (0 = full batch), got {self.batch_size}")
        if not self.lr > 0:
            raise ConfigError(f"training plan: lr must be positive, got {self.lr}")
        if self.sampling not in SAMPLINGS:
            raise ConfigError(f"training plan: unknown sampling {self.sampling!r:.40}; use {', '.join(SAMPLINGS)}")
        if self.optimizer not in OPTIMIZERS:
            raise ConfigError(f"training plan: unknown optimizer {self.optimizer!r:.40}; use {', '.join(OPTIMIZERS)}")
        if self.loop and not _LOOP_NAME.match(self.loop):
            raise ConfigError(f"training plan: loop must be an identifier of at most 64 characters, got {self.loop!r:.70}")
        if not 0 <= self.seed <= SEED_MAX:
            raise ConfigError(f"training plan: seed must be in [0, 2**64), got {self.seed}")
        self.config()
        self.schedule()

    # -- the wire form ------------------------------------------------------------------------------------------

    def to_params(self) -> dict[str, Any]:
        """Every field as a canonical plain value (``ledger.encode`` accepts it): ints, floats as floats, strings,
        a bool, ``betas`` and arrays as lists, ``schedule_params`` as a dict; ``schedule_name`` as ``schedule``."""
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            out[_WIRE.get(f.name, f.name)] = _thaw(value) if f.name in ("betas", "schedule_params") else value
        return out

    @classmethod
    def from_params(cls, d: Mapping[str, Any], source: str) -> TrainingPlan:
        """The plan of a ``to_params`` dict (or its decoded form: tuples, read-only mappings), strictly: an unknown
        key, a missing key or a value of the wrong type is a ConfigError of one line naming ``source`` and the key.

        Raises
        ------
        ConfigError
        """
        if not isinstance(d, Mapping):
            raise ConfigError(f"{source}: the training plan must be a table, got {type(d).__name__}")
        wire = {_WIRE.get(f.name, f.name): f.name for f in fields(cls)}  # key → attribute
        unknown = sorted(str(k) for k in d if k not in wire)
        if unknown:
            raise ConfigError(f"{source}: unknown training plan key {unknown[0]!r:.70}")
        missing = [k for k in wire if k not in d]
        if missing:
            raise ConfigError(f"{source}: missing training plan key {missing[0]!r}")
        for key, attr in wire.items():
            value = d[key]
            if attr in _INTS:
                ok = isinstance(value, int) and not isinstance(value, bool)
                want = "an integer"
            elif attr in _FLOATS:
                ok = _is_number(value)
                want = "a number"
            elif attr in _STRS:
                ok = isinstance(value, str)
                want = "a string"
            elif attr == "nesterov":
                ok = isinstance(value, bool)
                want = "true or false"
            elif attr == "betas":
                ok = isinstance(value, list | tuple) and len(value) == 2 and all(_is_number(b) for b in value)
                want = "two numbers [β1, β2]"
            else:  # schedule_params
                ok = isinstance(value, Mapping)
                want = "a table"
            if not ok:
                raise ConfigError(f"{source}: training plan key {key!r} must be {want}, got {value!r:.60}")
        try:
            return cls(**{attr: d[key] for key, attr in wire.items()})
        except ConfigError as e:
            raise ConfigError(f"{source}: {e}") from None

    # -- what a member builds from it ---------------------------------------------------------------------------

    def config(self) -> LocalTrainingConfig:
        """The :class:`LocalTrainingConfig` of the plan (``drop_last`` is never set)."""
        return LocalTrainingConfig(
            steps=self.steps or None,
            epochs=self.epochs or None,
            batch_size=self.batch_size or None,
            momentum=self.momentum,
            nesterov=self.nesterov,
            weight_decay=self.weight_decay,
            prox_mu=self.prox_mu,
            sampling=self.sampling,  # type: ignore[arg-type]
            optimizer=self.optimizer,  # type: ignore[arg-type]
            betas=self.betas,
            eps=self.eps,
            grad_clip=self.grad_clip,
            label_smoothing=self.label_smoothing,
        )

    def trainer(self, model_spec: ModelSpec, device: torch.device | str = "cpu") -> LocalTrainer:
        """A :class:`LocalTrainer` that trains as the plan says, on ``device`` (a machine's own choice); a custom
        ``loop`` must be registered by now (ConfigError otherwise)."""
        return LocalTrainer(model_spec, self.config(), device=device, loop=self.loop)

    def schedule(self) -> Callable[[int], float]:
        """``schedule(fl_round) -> lr``: the named schedule with ``schedule_params``, its base rate (a field ``lr``
        or ``lr0`` of the schedule class) set to :attr:`lr` unless the parameters give it."""
        params = dict(self.schedule_params)
        fields_ = getattr(SCHEDULES.get(self.schedule_name), "__dataclass_fields__", {})
        for lr_key in ("lr", "lr0"):  # the schedule's base rate is the plan's lr unless given
            if lr_key in fields_:
                params.setdefault(lr_key, self.lr)
        return schedule_spec(self.schedule_name, params)
