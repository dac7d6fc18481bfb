"""Data-level Byzantine attacks: poisoned local data (update-level attacks are in :mod:`learning.attacks._update`).

A :class:`DataAttack` has ``transform(x, y, *, rng) -> (x', y')`` applied to a client's local batch (or whole
dataset) before training. Inputs are never modified; numpy arrays and torch tensors are both accepted. An attack
with ``per_batch = True`` (:class:`Backdoor`) is meant for every minibatch of local training (the simulator passes
it to the trainer as a batch transform); the others are applied once to the whole local dataset.

Names are resolved at the configuration boundary by :func:`parse_update_attack` / :func:`parse_data_attack`.

Names are resolved at the configuration boundary by :func:`parse_data_attack`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol, TypeVar, runtime_checkable

import numpy as np

from learning._config import check_float, check_int, construct, parse_stages, register
from learning._errors import ConfigError, InvalidUpdateError
from learning.robust import check_rng, validate_update

__all__ = [
    "DATA_ATTACKS",
    "Backdoor",
    "DataAttack",
    "LabelFlip",
    "parse_data_attack",
    "register_data_attack",
]

_T = TypeVar("_T")


@runtime_checkable
class DataAttack(Protocol):
    """Poisons a client's local data ``(x, y)`` before training."""

    name: ClassVar[str]

    def transform(self, x: Any, y: Any, /, *, rng: np.random.Generator) -> tuple[Any, Any]: ...


#: Registered data-level attacks by name.
DATA_ATTACKS: dict[str, type] = {}


def register_data_attack(name: str) -> Callable[[type[_T]], type[_T]]:
    """Class decorator: register a data-level attack under ``name``."""
    return register(DATA_ATTACKS, "data attack", name)


# ---------------------------------------------------------------------------------------------------------------
# Data-level attacks


def _copy(a: Any) -> Any:
    """A copy of a numpy array or torch tensor (duck-typed, so torch is not imported here)."""
    if isinstance(a, np.ndarray):
        return a.copy()
    clone = getattr(a, "clone", None)
    if callable(clone):
        return clone()
    raise ConfigError(f"expected a numpy.ndarray or torch.Tensor, got {type(a).__name__}")


def _labels(y: Any, num_classes: int | None) -> np.ndarray:
    arr = np.asarray(y.detach().cpu().numpy() if hasattr(y, "detach") else y)
    if arr.ndim != 1 or arr.dtype.kind not in "iu":
        raise InvalidUpdateError(f"labels must be a 1-D integer array, got shape {arr.shape} dtype {arr.dtype}")
    if num_classes is not None and arr.size and (arr.min() < 0 or arr.max() >= num_classes):
        raise InvalidUpdateError(f"labels must lie in [0, {num_classes}), got [{arr.min()}, {arr.max()}]")
    return arr


@register_data_attack("label_flip")
@dataclass(frozen=True, slots=True, kw_only=True)
class LabelFlip:
    """Label flipping: every label ``i`` becomes ``π(i)``.

    .. math:: \\pi(i) = (i + 1) \\bmod C \\quad\\text{(default; sself spec §3.2)}, \\qquad
              \\text{or any map } \\pi : \\{0..C-1\\} \\to \\{0..C-1\\}

    :meth:`reverse` gives ByzFL / EPFL's ``π(i) = C − 1 − i`` (fedro spec §4). Features are returned unchanged
    (the same object).

    Parameters
    ----------
    num_classes:
        ``C >= 2``.
    mapping:
        ``None`` for ``(i + 1) mod C``, else a length-``C`` tuple with ``mapping[i] = π(i)``.
    """

    num_classes: int
    mapping: tuple[int, ...] | None = None
    name: ClassVar[str]

    def __post_init__(self) -> None:
        check_int(self, "num_classes", minimum=2)
        if self.mapping is not None:
            mapping = tuple(self.mapping)
            if len(mapping) != self.num_classes or any(
                isinstance(m, bool) or not isinstance(m, int) or not 0 <= m < self.num_classes for m in mapping
            ):
                raise ConfigError(f"LabelFlip.mapping must be {self.num_classes} ints in [0, {self.num_classes})")
            object.__setattr__(self, "mapping", mapping)

    @classmethod
    def reverse(cls, num_classes: int) -> LabelFlip:
        """``π(i) = C − 1 − i``."""
        return cls(num_classes=num_classes, mapping=tuple(range(num_classes - 1, -1, -1)))

    def table(self) -> np.ndarray:
        """The map as an ``int64`` lookup table ``π[i]``."""
        if self.mapping is None:
            return (np.arange(self.num_classes, dtype=np.int64) + 1) % self.num_classes
        return np.asarray(self.mapping, dtype=np.int64)

    def transform(self, x: Any, y: Any, /, *, rng: np.random.Generator) -> tuple[Any, Any]:
        """Return ``(x, π(y))``; ``y`` keeps its type (numpy or torch) and dtype."""
        check_rng(rng)
        labels = _labels(y, self.num_classes)
        flipped = self.table()[labels].astype(labels.dtype)
        if isinstance(y, np.ndarray):
            return x, flipped
        return x, y.new_tensor(flipped)  # torch: same dtype and device


@register_data_attack("backdoor")
@dataclass(frozen=True, slots=True, kw_only=True)
class Backdoor:
    """Pixel-pattern backdoor with optional model replacement (Bagdasaryan et al. 2020; sself spec §3.4).

    .. math::

        (x_i, y_i) \\leftarrow (T(x_i), y^*) \\text{ for the first } \\min(k, |B|) \\text{ samples of a batch } B,
        \\qquad u_{\\mathrm{sent}} = s \\, u

    ``T`` sets the rectangle ``rows × cols`` of the last two (spatial) axes to ``value`` in every channel
    (sself spec default: 12 white pixels, rows 0–2, columns 0–3, before normalisation); flat feature vectors need
    ``image_shape=(H, W)`` (``d = H·W`` or ``C·H·W``, channel-first). ``k = poisoned_per_batch`` (20 of 64 in
    sself spec). Model replacement scales the update by ``s = boost`` (sself spec default ``s = n/η = K``;
    ``s = 1`` is the no-scale variant) -- apply it with :meth:`boost_update` after local training. Attack success
    rate: :meth:`apply_trigger` on the test samples whose label is not ``target``.

    Parameters
    ----------
    target:
        Backdoor label ``y*``.
    poisoned_per_batch:
        ``k >= 0`` samples replaced per batch.
    rows, cols:
        Half-open pixel ranges ``(start, stop)`` of the trigger.
    value:
        Trigger pixel value.
    boost:
        Update scale ``s``.
    image_shape:
        ``(H, W)`` for flat inputs; ``None`` for inputs with spatial axes.
    """

    target: int
    poisoned_per_batch: int = 20
    rows: tuple[int, int] = (0, 3)
    cols: tuple[int, int] = (0, 4)
    value: float = 1.0
    boost: float = 1.0
    image_shape: tuple[int, int] | None = None
    name: ClassVar[str]
    per_batch: ClassVar[bool] = True
    """Poison every minibatch of local training (not the local dataset once)."""

    def __post_init__(self) -> None:
        check_int(self, "target", minimum=0)
        check_int(self, "poisoned_per_batch", minimum=0)
        check_float(self, "value")
        check_float(self, "boost")
        for field in ("rows", "cols"):
            rng_ = tuple(getattr(self, field))
            if len(rng_) != 2 or any(isinstance(v, bool) or not isinstance(v, int) for v in rng_) or not (
                0 <= rng_[0] < rng_[1]
            ):
                raise ConfigError(f"Backdoor.{field} must be (start, stop) with 0 <= start < stop")
            object.__setattr__(self, field, rng_)
        if self.image_shape is not None:
            shape = tuple(self.image_shape)
            if len(shape) != 2 or any(isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in shape):
                raise ConfigError("Backdoor.image_shape must be (H, W) with positive ints")
            object.__setattr__(self, "image_shape", shape)

    def _stamp(self, x: Any) -> None:
        r0, r1 = self.rows
        c0, c1 = self.cols
        if self.image_shape is None:
            if x.ndim < 3:
                raise ConfigError("Backdoor: flat inputs need image_shape=(H, W)")
            if r1 > x.shape[-2] or c1 > x.shape[-1]:
                raise ConfigError(f"Backdoor: trigger {self.rows}x{self.cols} exceeds the image {tuple(x.shape[-2:])}")
            x[..., r0:r1, c0:c1] = self.value
            return
        h, w = self.image_shape
        if x.ndim != 2 or x.shape[1] % (h * w):
            raise ConfigError(f"Backdoor: flat inputs must be (N, C·{h}·{w}), got {tuple(x.shape)}")
        if r1 > h or c1 > w:
            raise ConfigError(f"Backdoor: trigger {self.rows}x{self.cols} exceeds the image {(h, w)}")
        channels = x.shape[1] // (h * w)
        pix = np.array([r * w + c for r in range(r0, r1) for c in range(c0, c1)])
        cols = np.concatenate([ch * h * w + pix for ch in range(channels)])
        x[:, cols] = self.value

    def apply_trigger(self, x: Any, /) -> Any:
        """A copy of ``x`` (a batch, first axis = samples) with the trigger stamped on every sample."""
        out = _copy(x)
        self._stamp(out)
        return out

    def transform(self, x: Any, y: Any, /, *, rng: np.random.Generator) -> tuple[Any, Any]:
        """Replace the first ``min(k, len(batch))`` samples by triggered copies labelled ``target``."""
        check_rng(rng)
        _labels(y, None)
        if len(x) != len(y):
            raise InvalidUpdateError(f"x has {len(x)} samples but y has {len(y)}")
        k = min(self.poisoned_per_batch, len(x))
        x_out, y_out = _copy(x), _copy(y)
        if k:
            self._stamp(x_out[:k])
            y_out[:k] = self.target
        return x_out, y_out

    def trigger_test_set(self, x: Any, y: Any, /) -> tuple[Any, Any]:
        """The attack-success-rate set (sself spec §3.4, §7.2 item 11): every sample whose label is not ``target``,
        trigger stamped, labelled ``target``; a model's accuracy on it is the ASR. Same types as the inputs."""
        labels = _labels(y, None)
        if len(x) != len(labels):
            raise InvalidUpdateError(f"x has {len(x)} samples but y has {len(labels)}")
        keep = np.flatnonzero(labels != self.target)
        xs = x[keep]  # a numpy index array selects rows of a torch tensor too (a copy either way)
        ys = np.full(keep.size, self.target, dtype=labels.dtype) if isinstance(y, np.ndarray) else y.new_full(
            (keep.size,), self.target)
        self._stamp(xs)
        return xs, ys

    def boost_update(self, update: np.ndarray, /) -> np.ndarray:
        """Model replacement: ``s · u`` (same dtype)."""
        u = validate_update(update)
        return (u.astype(np.float64) * self.boost).astype(u.dtype)


# ---------------------------------------------------------------------------------------------------------------
# Configuration boundary


def parse_data_attack(spec: str, /) -> DataAttack:
    """Build a data attack from ``"name(key=literal, ...)"`` (e.g. ``"label_flip(num_classes=10)"``)."""
    stages = parse_stages(spec)
    if len(stages) != 1:
        raise ConfigError(f"{spec!r}: an attack is a single stage")
    name, kwargs = stages[0]
    return construct(DATA_ATTACKS, "data attack", name, kwargs)  # type: ignore[no-any-return]
