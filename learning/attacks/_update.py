"""Update-level Byzantine attacks: crafted update vectors (data-level attacks are in :mod:`learning.attacks._data`).

An :class:`UpdateAttack` is called as ``attack(honest, rng=rng)`` on the ``(h, d)`` stack of honest updates it
may see and returns **one** Byzantine update of shape ``(d,)`` with the honest updates' dtype (computed in
float64, rounded once). Conventions:

* *Omniscient* attacks (ALIE, IPM/FOE, mimic, sign flipping of the mean) use the current round's honest updates;
  every Byzantine client sends the same vector (fedro spec §8 item 7). :func:`craft_byzantine_updates` stacks it
  ``b`` times.
* *Own-update* attacks (gradient scaling, back-gradient, model negation, ``−10 w`` model poisoning; sself spec §3,
  cmfl spec §3.2) transform the attacker's own honestly trained update: pass that single update as a 1-row stack
  (and an independent ``rng`` stream per attacker). With more rows they act on the honest mean ``ū``.
* Model-space attacks (:class:`ModelScaling`) act on the sent *model* ``w = w̄ + u`` and need the current global
  model: ``attack(honest, rng=rng, global_model=w̄)``.
* An attack never inspects which defence runs (an attack coupled to a defence tests the coupling, not the
  defence); line-search ("optimal") variants that
  optimise against a given aggregator are deliberately not provided.

"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar, Protocol, TypeVar, runtime_checkable

import numpy as np

from learning._config import check_bool, check_float, check_int, construct, format_stage, parse_stages, register
from learning._errors import ConfigError
from learning.attacks._data import DataAttack
from learning.robust import check_rng, validate_update, validate_updates

__all__ = [
    "ALIE",
    "UPDATE_ATTACKS",
    "Gaussian",
    "GradientScaling",
    "InnerProductManipulation",
    "Mimic",
    "ModelScaling",
    "SameValue",
    "SignFlip",
    "UpdateAttack",
    "craft_byzantine_updates",
    "format_attack",
    "parse_update_attack",
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


#: Registered update-level attacks by name.
UPDATE_ATTACKS: dict[str, type] = {}


def register_update_attack(name: str) -> Callable[[type[_T]], type[_T]]:
    """Class decorator: register an update-level attack under ``name``."""
    return register(UPDATE_ATTACKS, "update attack", name)


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
    """Gradient scaling attack (CMFL, cmfl spec §3.2).

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
        check_float(self, "low", minimum=0.0, exclusive_maximum=1.0)
        check_bool(self, "per_element")

    def _craft(self, x: np.ndarray, model: np.ndarray | None, rng: np.random.Generator) -> np.ndarray:
        mean = _honest_mean(x)
        size = mean.shape[0] if self.per_element else 1
        return mean * rng.uniform(self.low, 1.0, size=size)


@register_update_attack("same_value")
@dataclass(frozen=True, slots=True, kw_only=True)
class SameValue(_UpdateRule):
    """Same-value attack (Li et al. 2019; CMFL cmfl spec §3.2): every coordinate set to one value.

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
        check_float(self, "value")

    def _craft(self, x: np.ndarray, model: np.ndarray | None, rng: np.random.Generator) -> np.ndarray:
        return np.full(x.shape[1], self.value)


@register_update_attack("sign_flip")
@dataclass(frozen=True, slots=True, kw_only=True)
class SignFlip(_UpdateRule):
    """Sign flipping / back-gradient attack (Allen-Zhu et al. 2020; CMFL "back-gradient", cmfl spec §3.2).

    .. math:: u_{\\mathrm{byz}} = -s \\, \\bar u

    ``s = 1``: ByzFL's ``SignFlipping`` on the honest mean, or the paper's back-gradient on the attacker's own
    update (1-row stack). ``s = 10`` is cmfl spec's scaled back-gradient "bg10" and the update-space reading of
    sself spec's model poisoning (§3.3, alternative off by default).

    Parameters
    ----------
    scale:
        ``s > 0``.
    """

    scale: float = 1.0
    name: ClassVar[str]

    def __post_init__(self) -> None:
        check_float(self, "scale", exclusive_minimum=0.0)

    def _craft(self, x: np.ndarray, model: np.ndarray | None, rng: np.random.Generator) -> np.ndarray:
        return -self.scale * _honest_mean(x)


@register_update_attack("model_scaling")
@dataclass(frozen=True, slots=True, kw_only=True)
class ModelScaling(_UpdateRule):
    """Model-space poisoning: send a scaled copy of the locally trained *model*.

    .. math:: w_{\\mathrm{sent}} = \\gamma \\, (\\bar w + \\bar u), \\qquad
              u_{\\mathrm{byz}} = w_{\\mathrm{sent}} - \\bar w = (\\gamma - 1)\\, \\bar w + \\gamma \\, \\bar u

    with ``w̄`` the current global model. ``γ = −1`` is CMFL's code-level back-gradient / model negation
    (``w_k ← −w_k``, i.e. ``u = −2w̄ − u``; cmfl spec §3.2 "mneg"); ``γ = −10`` is sself spec's model-update poisoning
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
        check_float(self, "factor")

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

    (the second form is CMFL's unused code variant ``param += N(0, σ)``, cmfl spec §3.2).

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
        check_float(self, "mu")
        check_float(self, "sigma", minimum=0.0)
        check_bool(self, "around_mean")

    def _craft(self, x: np.ndarray, model: np.ndarray | None, rng: np.random.Generator) -> np.ndarray:
        noise = rng.standard_normal(x.shape[1]) * self.sigma + self.mu
        return _honest_mean(x) + noise if self.around_mean else noise


@register_update_attack("alie")
@dataclass(frozen=True, slots=True, kw_only=True)
class ALIE(_UpdateRule):
    """A little is enough (Baruch et al. 2019).

    .. math:: u_{\\mathrm{byz}} = \\bar u + z \\, \\sigma_H

    with ``σ_H`` the coordinate-wise standard deviation of the honest updates (``ddof = 1``, as ByzFL; with a
    single honest update σ is undefined and ``ū`` is sent, fedro spec §4). ByzFL's default ``z = 1.5``; Baruch's
    ``z_max`` from the counts is :meth:`from_counts`.

    Parameters
    ----------
    z:
        The factor ``z`` (any sign).
    """

    z: float = 1.5
    name: ClassVar[str]

    def __post_init__(self) -> None:
        check_float(self, "z")

    @classmethod
    def from_counts(cls, n: int, n_byzantine: int) -> ALIE:
        """Baruch et al.'s ``z_max = Φ⁻¹((n − s)/n)`` with ``s = ⌊n/2 + 1⌋ − f`` (clamped to ``s >= 1``).

        ``n`` is the number of inputs to the aggregator and ``f = n_byzantine`` (fedro spec §4: n = 26, f = 11 gives
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
    ``(1 − τ)ū``; fedro spec §4). The original paper uses ε ∈ {0.1, 0.5, 1, 10, 100}.

    Parameters
    ----------
    epsilon:
        ``ε > 0``.
    """

    epsilon: float = 2.0
    name: ClassVar[str]

    def __post_init__(self) -> None:
        check_float(self, "epsilon", exclusive_minimum=0.0)

    def _craft(self, x: np.ndarray, model: np.ndarray | None, rng: np.random.Generator) -> np.ndarray:
        return -self.epsilon * _honest_mean(x)


@register_update_attack("mimic")
@dataclass(frozen=True, slots=True, kw_only=True)
class Mimic(_UpdateRule):
    """Mimic attack (Karimireddy et al. 2022), EPFL "naive" form: copy one honest update.

    .. math:: u_{\\mathrm{byz}} = u_{i_0}

    ``i_0 = index`` into the honest stack (the first honest client of the round by default; fedro spec §4). The
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
        check_int(self, "index")

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

    ``b = 0`` gives an empty ``(0, d)`` stack (fedro spec §4 edge case).
    """
    if isinstance(n_byzantine, bool) or not isinstance(n_byzantine, int) or n_byzantine < 0:
        raise ConfigError(f"n_byzantine must be an int >= 0, got {n_byzantine!r}")
    vector = attack(honest, rng=rng, global_model=global_model)
    return np.repeat(vector[None, :], n_byzantine, axis=0)


# ---------------------------------------------------------------------------------------------------------------
# Configuration boundary


def parse_update_attack(spec: str, /) -> UpdateAttack:
    """Build an update attack from ``"name"`` or ``"name(key=literal, ...)"`` (e.g. ``"alie(z=1.5)"``)."""
    stages = parse_stages(spec)
    if len(stages) != 1:
        raise ConfigError(f"{spec!r}: an attack is a single stage")
    name, kwargs = stages[0]
    return construct(UPDATE_ATTACKS, "update attack", name, kwargs)  # type: ignore[no-any-return]


def format_attack(attack: UpdateAttack | DataAttack, /) -> str:
    """Canonical spec string of an attack; inverse of the parse functions."""
    return format_stage(attack)
