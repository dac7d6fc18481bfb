"""Byzantine attacks: update-level (crafted update vectors) and data-level (poisoned local data).

Update-level attacks
--------------------
An :class:`UpdateAttack` is called as ``attack(honest, rng=rng)`` on the ``(h, d)`` stack of honest updates it
may see and returns **one** Byzantine update of shape ``(d,)`` with the honest updates' dtype (computed in
float64, rounded once). Conventions:

* *Omniscient* attacks (ALIE, IPM/FOE, mimic, sign flipping of the mean) use the current round's honest updates;
  every Byzantine client sends the same vector (seed_004 §8 item 7). :func:`craft_byzantine_updates` stacks it
  ``b`` times.
* *Own-update* attacks (gradient scaling, back-gradient, model negation, ``−10 w`` model poisoning; seed_002 §3,
  seed_003 §3.2) transform the attacker's own honestly trained update: pass that single update as a 1-row stack
  (and an independent ``rng`` stream per attacker). With more rows they act on the honest mean ``ū``.
* Model-space attacks (:class:`ModelScaling`) act on the sent *model* ``w = w̄ + u`` and need the current global
  model: ``attack(honest, rng=rng, global_model=w̄)``.
* An attack never inspects which defence runs (STYLE: Blades BL2); line-search ("optimal") variants that
  optimise against a given aggregator are deliberately not provided.

Data-level attacks
------------------
A :class:`DataAttack` has ``transform(x, y, *, rng) -> (x', y')`` applied to a client's local batch (or whole
dataset) before training. Inputs are never modified; numpy arrays and torch tensors are both accepted. An attack
with ``per_batch = True`` (:class:`Backdoor`) is meant for every minibatch of local training (the simulator passes
it to the trainer as a batch transform); the others are applied once to the whole local dataset.

Names are resolved at the configuration boundary by :func:`parse_update_attack` / :func:`parse_data_attack`.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol, TypeVar, runtime_checkable

import numpy as np

from learning._aggregators import (
    _check_bool,
    _check_float,
    _check_int,
    _construct,
    _format_stage,
    _parse_stages,
    _register,
)
from learning._errors import ConfigError, InvalidUpdateError
from learning._validate import check_rng, validate_update, validate_updates

__all__ = [
    "ALIE",
    "DATA_ATTACKS",
    "UPDATE_ATTACKS",
    "Backdoor",
    "DataAttack",
    "Gaussian",
    "GradientScaling",
    "InnerProductManipulation",
    "LabelFlip",
    "Mimic",
    "ModelScaling",
    "SameValue",
    "SignFlip",
    "UpdateAttack",
    "craft_byzantine_updates",
    "format_attack",
    "parse_data_attack",
    "parse_update_attack",
    "register_data_attack",
    "register_update_attack",
]

_BLOCK = 65536

_T = TypeVar("_T")


@runtime_checkable
class UpdateAttack(Protocol):
    """Crafts one Byzantine update ``(d,)`` from the ``(h, d)`` honest updates it may see."""

    name: ClassVar[str]
    needs_global_model: ClassVar[bool]

    def __call__(
        self, honest: np.ndarray, /, *, rng: np.random.Generator, global_model: np.ndarray | None = None
    ) -> np.ndarray: ...


@runtime_checkable
class DataAttack(Protocol):
    """Poisons a client's local data ``(x, y)`` before training."""

    name: ClassVar[str]

    def transform(self, x: Any, y: Any, /, *, rng: np.random.Generator) -> tuple[Any, Any]: ...


#: Registered update-level attacks by name.
UPDATE_ATTACKS: dict[str, type] = {}
#: Registered data-level attacks by name.
DATA_ATTACKS: dict[str, type] = {}


def register_update_attack(name: str) -> Callable[[type[_T]], type[_T]]:
    """Class decorator: register an update-level attack under ``name``."""
    return _register(UPDATE_ATTACKS, "update attack", name)


def register_data_attack(name: str) -> Callable[[type[_T]], type[_T]]:
    """Class decorator: register a data-level attack under ``name``."""
    return _register(DATA_ATTACKS, "data attack", name)


# ---------------------------------------------------------------------------------------------------------------
# float64 statistics of the honest stack (blocked: no (h, d) float64 temporary)


def _honest_mean(x: np.ndarray) -> np.ndarray:
    return np.add.reduce(x, axis=0, dtype=np.float64) / x.shape[0]


def _honest_std(x: np.ndarray, mean: np.ndarray) -> np.ndarray:
    """Coordinate-wise sample standard deviation (``ddof = 1``, as ByzFL)."""
    h, d = x.shape
    var = np.empty(d, dtype=np.float64)
    for j0 in range(0, d, _BLOCK):
        dev = x[:, j0 : j0 + _BLOCK].astype(np.float64) - mean[j0 : j0 + _BLOCK]
        var[j0 : j0 + _BLOCK] = np.einsum("ij,ij->j", dev, dev) / (h - 1)
    return np.sqrt(var)


class _UpdateRule:
    __slots__ = ()
    needs_global_model: ClassVar[bool] = False

    def __call__(
        self, honest: np.ndarray, /, *, rng: np.random.Generator, global_model: np.ndarray | None = None
    ) -> np.ndarray:
        check_rng(rng)
        x = validate_updates(honest, what="honest updates")
        model = None
        if self.needs_global_model:
            if global_model is None:
                raise ConfigError(f"{type(self).__name__} needs global_model= (the current global parameters)")
            model = validate_update(global_model, dim=x.shape[1], what="global_model")
        out = self._craft(x, model, rng)  # type: ignore[attr-defined]
        with np.errstate(over="ignore"):  # a crafted vector may exceed the dtype's range: it is sent as inf
            return np.asarray(out, dtype=np.float64).astype(x.dtype)


@register_update_attack("gradient_scaling")
@dataclass(frozen=True, slots=True, kw_only=True)
class GradientScaling(_UpdateRule):
    """Gradient scaling attack (CMFL, seed_003 §3.2).

    .. math:: u_{\\mathrm{byz}} = \\lambda \\odot \\bar u, \\qquad \\lambda_j \\sim \\mathcal U[a, 1)

    "multiply each element in the local gradient by a random value λ ∈ [a, 1)"; the authors' code draws λ per
    element (``per_element=True``, default), ``per_element=False`` draws one λ for the whole vector. The paper
    uses ``a = 0.5``, the authors' scripts ``a = 0``.

    Parameters
    ----------
    low:
        ``a`` with ``0 <= a < 1``.
    per_element:
        One λ per coordinate (code) or per vector.
    """

    low: float = 0.5
    per_element: bool = True
    name: ClassVar[str]

    def __post_init__(self) -> None:
        _check_float(self, "low", minimum=0.0, exclusive_maximum=1.0)
        _check_bool(self, "per_element")

    def _craft(self, x: np.ndarray, model: np.ndarray | None, rng: np.random.Generator) -> np.ndarray:
        mean = _honest_mean(x)
        size = mean.shape[0] if self.per_element else 1
        return mean * rng.uniform(self.low, 1.0, size=size)


@register_update_attack("same_value")
@dataclass(frozen=True, slots=True, kw_only=True)
class SameValue(_UpdateRule):
    """Same-value attack (Li et al. 2019; CMFL seed_003 §3.2): every coordinate set to one value.

    .. math:: u_{\\mathrm{byz}} = c \\cdot \\mathbf 1_d

    "replace the local gradient with a vector of the same size whose elements are all 0" (``c = 0``, default).

    Parameters
    ----------
    value:
        The constant ``c``.
    """

    value: float = 0.0
    name: ClassVar[str]

    def __post_init__(self) -> None:
        _check_float(self, "value")

    def _craft(self, x: np.ndarray, model: np.ndarray | None, rng: np.random.Generator) -> np.ndarray:
        return np.full(x.shape[1], self.value)


@register_update_attack("sign_flip")
@dataclass(frozen=True, slots=True, kw_only=True)
class SignFlip(_UpdateRule):
    """Sign flipping / back-gradient attack (Allen-Zhu et al. 2020; CMFL "back-gradient", seed_003 §3.2).

    .. math:: u_{\\mathrm{byz}} = -s \\, \\bar u

    ``s = 1``: ByzFL's ``SignFlipping`` on the honest mean, or the paper's back-gradient on the attacker's own
    update (1-row stack). ``s = 10`` is seed_003's scaled back-gradient "bg10" and the update-space reading of
    seed_002's model poisoning (§3.3, alternative off by default).

    Parameters
    ----------
    scale:
        ``s > 0``.
    """

    scale: float = 1.0
    name: ClassVar[str]

    def __post_init__(self) -> None:
        _check_float(self, "scale", exclusive_minimum=0.0)

    def _craft(self, x: np.ndarray, model: np.ndarray | None, rng: np.random.Generator) -> np.ndarray:
        return -self.scale * _honest_mean(x)


@register_update_attack("model_scaling")
@dataclass(frozen=True, slots=True, kw_only=True)
class ModelScaling(_UpdateRule):
    """Model-space poisoning: send a scaled copy of the locally trained *model*.

    .. math:: w_{\\mathrm{sent}} = \\gamma \\, (\\bar w + \\bar u), \\qquad
              u_{\\mathrm{byz}} = w_{\\mathrm{sent}} - \\bar w = (\\gamma - 1)\\, \\bar w + \\gamma \\, \\bar u

    with ``w̄`` the current global model. ``γ = −1`` is CMFL's code-level back-gradient / model negation
    (``w_k ← −w_k``, i.e. ``u = −2w̄ − u``; seed_003 §3.2 "mneg"); ``γ = −10`` is seed_002's model-update poisoning
    ("opposite sign of all weights and scales up 10 times", §3.3); ``γ = 0`` is CMFL's model-level all-zero
    attack (``u = −w̄``).

    Parameters
    ----------
    factor:
        ``γ``.
    """

    factor: float = -1.0
    name: ClassVar[str]
    needs_global_model: ClassVar[bool] = True

    def __post_init__(self) -> None:
        _check_float(self, "factor")

    def _craft(self, x: np.ndarray, model: np.ndarray | None, rng: np.random.Generator) -> np.ndarray:
        assert model is not None
        w = model.astype(np.float64)
        return (self.factor - 1.0) * w + self.factor * _honest_mean(x)


@register_update_attack("gaussian")
@dataclass(frozen=True, slots=True, kw_only=True)
class Gaussian(_UpdateRule):
    """Gaussian attack: a random vector (ByzFL ``Gaussian``), optionally centred on the honest mean.

    .. math:: u_{\\mathrm{byz}} \\sim \\mathcal N(\\mu \\mathbf 1_d, \\sigma^2 I_d)
              \\quad\\text{or, with } \\texttt{around\\_mean}, \\quad \\bar u + \\mathcal N(\\mu \\mathbf 1_d, \\sigma^2 I_d)

    (the second form is CMFL's unused code variant ``param += N(0, σ)``, seed_003 §3.2).

    Parameters
    ----------
    mu, sigma:
        Mean and standard deviation (``σ >= 0``).
    around_mean:
        Add the noise to ``ū`` instead of sending pure noise.
    """

    mu: float = 0.0
    sigma: float = 1.0
    around_mean: bool = False
    name: ClassVar[str]

    def __post_init__(self) -> None:
        _check_float(self, "mu")
        _check_float(self, "sigma", minimum=0.0)
        _check_bool(self, "around_mean")

    def _craft(self, x: np.ndarray, model: np.ndarray | None, rng: np.random.Generator) -> np.ndarray:
        noise = rng.standard_normal(x.shape[1]) * self.sigma + self.mu
        return _honest_mean(x) + noise if self.around_mean else noise


@register_update_attack("alie")
@dataclass(frozen=True, slots=True, kw_only=True)
class ALIE(_UpdateRule):
    """A little is enough (Baruch et al. 2019).

    .. math:: u_{\\mathrm{byz}} = \\bar u + z \\, \\sigma_H

    with ``σ_H`` the coordinate-wise standard deviation of the honest updates (``ddof = 1``, as ByzFL; with a
    single honest update σ is undefined and ``ū`` is sent, seed_004 §4). ByzFL's default ``z = 1.5``; Baruch's
    ``z_max`` from the counts is :meth:`from_counts`.

    Parameters
    ----------
    z:
        The factor ``z`` (any sign).
    """

    z: float = 1.5
    name: ClassVar[str]

    def __post_init__(self) -> None:
        _check_float(self, "z")

    @classmethod
    def from_counts(cls, n: int, n_byzantine: int) -> ALIE:
        """Baruch et al.'s ``z_max = Φ⁻¹((n − s)/n)`` with ``s = ⌊n/2 + 1⌋ − f`` (clamped to ``s >= 1``).

        ``n`` is the number of inputs to the aggregator and ``f = n_byzantine`` (seed_004 §4: n = 26, f = 11 gives
        z = 1.1984). Uses only the counts, not the defence.
        """
        if isinstance(n, bool) or not isinstance(n, int) or n < 2:
            raise ConfigError(f"ALIE.from_counts: n must be an int >= 2, got {n!r}")
        if isinstance(n_byzantine, bool) or not isinstance(n_byzantine, int) or not 0 <= n_byzantine < n:
            raise ConfigError(f"ALIE.from_counts: need 0 <= n_byzantine < n, got {n_byzantine!r}")
        s = max(1, (n // 2 + 1) - n_byzantine)
        return cls(z=statistics.NormalDist().inv_cdf((n - s) / n))

    def _craft(self, x: np.ndarray, model: np.ndarray | None, rng: np.random.Generator) -> np.ndarray:
        mean = _honest_mean(x)
        if x.shape[0] < 2:
            return mean
        return mean + self.z * _honest_std(x, mean)


@register_update_attack("ipm")
@dataclass(frozen=True, slots=True, kw_only=True)
class InnerProductManipulation(_UpdateRule):
    """Inner-product manipulation / "fall of empires" (Xie et al. 2019).

    .. math:: u_{\\mathrm{byz}} = -\\varepsilon \\, \\bar u

    ByzFL's IPM ``τ`` is ``ε`` (default 2, sending ``−2ū``, which is also FOE with ByzFL's ``τ = 3``:
    ``(1 − τ)ū``; seed_004 §4). The original paper uses ε ∈ {0.1, 0.5, 1, 10, 100}.

    Parameters
    ----------
    epsilon:
        ``ε > 0``.
    """

    epsilon: float = 2.0
    name: ClassVar[str]

    def __post_init__(self) -> None:
        _check_float(self, "epsilon", exclusive_minimum=0.0)

    def _craft(self, x: np.ndarray, model: np.ndarray | None, rng: np.random.Generator) -> np.ndarray:
        return -self.epsilon * _honest_mean(x)


@register_update_attack("mimic")
@dataclass(frozen=True, slots=True, kw_only=True)
class Mimic(_UpdateRule):
    """Mimic attack (Karimireddy et al. 2022), EPFL "naive" form: copy one honest update.

    .. math:: u_{\\mathrm{byz}} = u_{i_0}

    ``i_0 = index`` into the honest stack (the first honest client of the round by default; seed_004 §4). The
    original chooses the honest client along the top principal direction learned in warm-up rounds; that needs
    state across rounds and is not provided.

    Parameters
    ----------
    index:
        Row of the honest stack to copy, ``< h``.
    """

    index: int = 0
    name: ClassVar[str]

    def __post_init__(self) -> None:
        _check_int(self, "index")

    def _craft(self, x: np.ndarray, model: np.ndarray | None, rng: np.random.Generator) -> np.ndarray:
        if self.index >= x.shape[0]:
            raise ConfigError(f"Mimic(index={self.index}) needs at least {self.index + 1} honest updates")
        return x[self.index]


def craft_byzantine_updates(
    attack: UpdateAttack,
    honest: np.ndarray,
    n_byzantine: int,
    /,
    *,
    rng: np.random.Generator,
    global_model: np.ndarray | None = None,
) -> np.ndarray:
    """The ``(b, d)`` stack sent by ``b = n_byzantine`` colluding clients (all send the same crafted vector).

    ``b = 0`` gives an empty ``(0, d)`` stack (seed_004 §4 edge case).
    """
    if isinstance(n_byzantine, bool) or not isinstance(n_byzantine, int) or n_byzantine < 0:
        raise ConfigError(f"n_byzantine must be an int >= 0, got {n_byzantine!r}")
    vector = attack(honest, rng=rng, global_model=global_model)
    return np.repeat(vector[None, :], n_byzantine, axis=0)


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

    .. math:: \\pi(i) = (i + 1) \\bmod C \\quad\\text{(default; seed_002 §3.2)}, \\qquad
              \\text{or any map } \\pi : \\{0..C-1\\} \\to \\{0..C-1\\}

    :meth:`reverse` gives ByzFL / EPFL's ``π(i) = C − 1 − i`` (seed_004 §4). Features are returned unchanged
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
        _check_int(self, "num_classes", minimum=2)
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
    """Pixel-pattern backdoor with optional model replacement (Bagdasaryan et al. 2020; seed_002 §3.4).

    .. math::

        (x_i, y_i) \\leftarrow (T(x_i), y^*) \\text{ for the first } \\min(k, |B|) \\text{ samples of a batch } B,
        \\qquad u_{\\mathrm{sent}} = s \\, u

    ``T`` sets the rectangle ``rows × cols`` of the last two (spatial) axes to ``value`` in every channel
    (seed_002 default: 12 white pixels, rows 0–2, columns 0–3, before normalisation); flat feature vectors need
    ``image_shape=(H, W)`` (``d = H·W`` or ``C·H·W``, channel-first). ``k = poisoned_per_batch`` (20 of 64 in
    seed_002). Model replacement scales the update by ``s = boost`` (seed_002 default ``s = n/η = K``;
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
        _check_int(self, "target", minimum=0)
        _check_int(self, "poisoned_per_batch", minimum=0)
        _check_float(self, "value")
        _check_float(self, "boost")
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
        """The attack-success-rate set (seed_002 §3.4, §7.2 item 11): every sample whose label is not ``target``,
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


def parse_update_attack(spec: str, /) -> UpdateAttack:
    """Build an update attack from ``"name"`` or ``"name(key=literal, ...)"`` (e.g. ``"alie(z=1.5)"``)."""
    stages = _parse_stages(spec)
    if len(stages) != 1:
        raise ConfigError(f"{spec!r}: an attack is a single stage")
    name, kwargs = stages[0]
    return _construct(UPDATE_ATTACKS, "update attack", name, kwargs)  # type: ignore[no-any-return]


def parse_data_attack(spec: str, /) -> DataAttack:
    """Build a data attack from ``"name(key=literal, ...)"`` (e.g. ``"label_flip(num_classes=10)"``)."""
    stages = _parse_stages(spec)
    if len(stages) != 1:
        raise ConfigError(f"{spec!r}: an attack is a single stage")
    name, kwargs = stages[0]
    return _construct(DATA_ATTACKS, "data attack", name, kwargs)  # type: ignore[no-any-return]


def format_attack(attack: UpdateAttack | DataAttack, /) -> str:
    """Canonical spec string of an attack; inverse of the parse functions."""
    return _format_stage(attack)
