"""Pre-aggregation rules (NNM, bucketing, static clipping, ARC) and chains of rules.

A pre-aggregator maps an ``(n, d)`` stack to an ``(n', d)`` stack (ByzFL's ``byzfl.aggregators.preaggregators``);
a :class:`Chain` runs pre-aggregators in order and then an aggregation rule::

    rule = parse_aggregator("nnm(f=2) > trimmed_mean(f=2)")     # the configuration boundary
    aggregate = rule(updates, rng=rng)

Each stage validates its own parameters (``f`` against the number of rows it receives, which bucketing changes).
Pre-aggregators follow the conventions of :mod:`learning.robust._aggregators`: validated input, never modified; output
in the input dtype, computed in float64; a keyword-only ``rng``. Weights (``apply(..., weights=w)``) travel
through a chain: clipping, ARC and NNM keep row ``i``'s weight on output row ``i``; bucketing returns the
weighted bucket means with the bucket totals as weights (unavailability spec §2.6).

Note: write chains as strings or ``Chain(pre=(...), final=...)``. Python's ``a > b > c`` is a *chained comparison*
(``a > b and b > c``), so the ``>`` syntax exists only inside spec strings.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar, Protocol, TypeVar, runtime_checkable

import numpy as np

from learning._config import check_float, check_int, construct, format_stage, parse_stages, register
from learning._errors import ConfigError
from learning.robust._aggregators import (
    AGGREGATORS,
    Aggregator,
    Mean,
    _Rule,
    _check_f_bound,
    _combine,
    _distances_from_gram,
    gram_matrix,
    row_sq_norms,
)
from learning.robust._validate import check_rng, parallel_ranges, validate_updates, validate_weights

__all__ = [
    "ARC",
    "NNM",
    "PRE_AGGREGATORS",
    "Bucketing",
    "Chain",
    "PreAggregator",
    "StaticClipping",
    "format_aggregator",
    "parse_aggregator",
    "register_preaggregator",
]


_NNM_BLOCK = 4096  # columns per float64 block of the NNM sums (block and accumulators stay in cache)


@runtime_checkable
class PreAggregator(Protocol):
    """A pre-aggregation rule: ``(n, d)`` stack -> ``(n', d)`` stack.

    ``__call__`` is ByzFL-shaped (stack in, stack out); ``apply`` also carries per-row weights.
    """

    name: ClassVar[str]
    bit_reproducible: ClassVar[bool]
    permutation_invariant: ClassVar[bool]

    def __call__(self, updates: np.ndarray, /, *, rng: np.random.Generator) -> np.ndarray: ...

    def apply(
        self, updates: np.ndarray, /, *, rng: np.random.Generator, weights: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray | None]: ...


#: Registered pre-aggregation rules by name (filled by :func:`register_preaggregator`).
PRE_AGGREGATORS: dict[str, type] = {}

_T = TypeVar("_T")


def register_preaggregator(name: str) -> Callable[[type[_T]], type[_T]]:
    """Class decorator: register a pre-aggregation rule under ``name`` (sets ``cls.name``)."""
    if name in AGGREGATORS:
        raise ConfigError(f"{name!r} is already an aggregator name")
    return register(PRE_AGGREGATORS, "pre-aggregator", name)


class _PreRule:
    __slots__ = ()

    def __call__(self, updates: np.ndarray, /, *, rng: np.random.Generator) -> np.ndarray:
        return self.apply(updates, rng=rng)[0]

    def apply(
        self, updates: np.ndarray, /, *, rng: np.random.Generator, weights: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray | None]:
        """Pre-aggregate ``updates`` and carry ``weights`` (normalised) along; see the module docstring."""
        check_rng(rng)
        x = validate_updates(updates)
        w = None if weights is None else validate_weights(weights, x.shape[0])
        return self._apply(x, w, rng)  # type: ignore[attr-defined]


class _RowScaling(_PreRule):
    """A pre-aggregator that only rescales rows, ``y_i = s_i x_i`` with ``s_i`` a function of the row norms.

    Chains apply such stages lazily: consecutive scalings multiply their factors (norms of scaled rows are
    ``s_i ‖x_i‖``), and a following :class:`~learning.robust.Mean` folds the factors into its weights, so
    the scaled stack is never materialised.
    """

    __slots__ = ()

    def _apply(
        self, x: np.ndarray, w: np.ndarray | None, rng: np.random.Generator
    ) -> tuple[np.ndarray, np.ndarray | None]:
        return _scale_rows(x, self._row_scale(row_sq_norms(x))), w

    def _row_scale(self, sq_norms: np.ndarray) -> np.ndarray:
        raise NotImplementedError


def _scale_rows(x: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """Rows ``i`` multiplied by ``scale[i]`` (float64 arithmetic, one rounding); rows with scale 1 copied exactly."""
    out = np.empty_like(x)
    for i in range(x.shape[0]):
        if scale[i] == 1.0:
            out[i] = x[i]
        else:
            np.multiply(x[i], np.float64(scale[i]), out=out[i], dtype=np.float64, casting="same_kind")
    return out


@register_preaggregator("nnm")
@dataclass(frozen=True, slots=True, kw_only=True)
class NNM(_PreRule):
    """Nearest-neighbour mixing (Allouah et al. 2023, "Fixing by Mixing").

    .. math::

        \\mathrm{NNM}_f(x_1, \\dots, x_n) = (y_1, \\dots, y_n), \\quad
        y_i = \\frac{1}{n - f} \\sum_{j \\in N_i} x_j

    where ``N_i`` holds the ``n − f`` inputs nearest to ``x_i`` in ℓ2, **including** ``x_i`` itself (fedro spec
    §2.3; ties by lowest index). Used with the same ``f`` as the rule that follows: if ``F`` is
    ``(n, f, κ)``-robust, ``F ∘ NNM`` is ``(n, f, 8f/(n−f)·(κ+1))``-robust. Distances come from one float64 Gram
    matrix; each ``y_i`` is summed in float64 in a value-determined order (members ordered by their total
    distance to all inputs), and identical neighbourhoods are summed once. Memory: one output stack plus
    ``O(n · 32768)`` floats (ByzFL's NNM → TrMean peaks at 8.6 GB on n = 50, d = 10⁶: workload A1 of
    ``benchmarks/README.md``).

    Parameters
    ----------
    f:
        ``2f < n`` at call time (ByzFL allows ``f < n``; the κ guarantee needs ``f < n/2``).
    """

    f: int
    name: ClassVar[str]
    bit_reproducible: ClassVar[bool] = True
    permutation_invariant: ClassVar[bool] = True

    def __post_init__(self) -> None:
        check_int(self, "f")

    def _apply(
        self, x: np.ndarray, w: np.ndarray | None, rng: np.random.Generator
    ) -> tuple[np.ndarray, np.ndarray | None]:
        n, d = x.shape
        _check_f_bound(self, self.f, n)
        k = n - self.f
        dist = _distances_from_gram(gram_matrix(x))
        index = np.arange(n)
        centrality = np.add.reduce(dist, axis=1)
        groups: dict[tuple[int, ...], list[int]] = {}
        for i in range(n):
            key = dist[i].copy()
            key[i] = -1.0  # x_i is always its own neighbour
            members = np.lexsort((index, key))[:k]
            canonical = members[np.lexsort((members, centrality[members]))]
            groups.setdefault(tuple(int(j) for j in canonical), []).append(i)
        out = np.empty_like(x)
        sets = list(groups.items())

        def work(c0: int, c1: int) -> None:
            acc_buf = np.empty((len(sets), min(c1 - c0, _NNM_BLOCK)), dtype=np.float64)
            for j0 in range(c0, c1, _NNM_BLOCK):
                j1 = min(c1, j0 + _NNM_BLOCK)
                block = x[:, j0:j1].astype(np.float64)
                for g, (members_, rows) in enumerate(sets):
                    acc = acc_buf[g, : j1 - j0]
                    np.copyto(acc, block[members_[0]])
                    for j in members_[1:]:
                        np.add(acc, block[j], out=acc)
                    np.divide(acc, k, out=acc)
                    for i in rows:
                        out[i, j0:j1] = acc

        parallel_ranges(work, d, align=_NNM_BLOCK, cost=k * len(sets) * d)
        return out, w


@register_preaggregator("bucketing")
@dataclass(frozen=True, slots=True, kw_only=True)
class Bucketing(_PreRule):
    """Bucketing (Karimireddy, He and Jaggi 2022, Algorithm 1).

    .. math::

        \\pi \\sim \\mathrm{Unif}(S_n), \\qquad
        y_b = \\frac{1}{|B_b|} \\sum_{i \\in B_b} x_{\\pi(i)}, \\quad
        B_b = \\{(b-1)s + 1, \\dots, \\min(bs, n)\\}, \\; b = 1, \\dots, \\lceil n/s \\rceil

    A random permutation (from ``rng``), consecutive buckets of size ``s`` (the last one may be smaller, as in
    ByzFL), and the bucket means. With weights (unavailability spec §2.6): ``y_b = Σ_{i∈b} w_i x_i / Σ_{i∈b} w_i`` and
    bucket weight ``W_b = Σ_{i∈b} w_i`` (a zero-weight bucket keeps the plain mean and weight 0). unavailability spec and
    [KHJ22] use bucket size ``s = 2``; ``s = 1`` only permutes. Bit-reproducible for a given ``rng`` state,
    but the output depends on the input order given that state, so it is permutation-invariant only in
    distribution (declared exemption).

    Parameters
    ----------
    bucket_size:
        ``s >= 1``.
    """

    bucket_size: int = 2
    name: ClassVar[str]
    bit_reproducible: ClassVar[bool] = True
    permutation_invariant: ClassVar[bool] = False

    def __post_init__(self) -> None:
        check_int(self, "bucket_size", minimum=1)

    def _apply(
        self, x: np.ndarray, w: np.ndarray | None, rng: np.random.Generator
    ) -> tuple[np.ndarray, np.ndarray | None]:
        n = x.shape[0]
        s = self.bucket_size
        perm = rng.permutation(n)
        buckets = [perm[b : b + s] for b in range(0, n, s)]
        out = np.empty((len(buckets), x.shape[1]), dtype=x.dtype)
        out_w = None if w is None else np.empty(len(buckets))
        for b, rows in enumerate(buckets):
            if w is None:
                out[b] = _combine(x, rows, None, float(rows.size))
                continue
            total = float(np.add.reduce(w[rows]))
            assert out_w is not None
            out_w[b] = total
            if total > 0.0:
                out[b] = _combine(x, rows, w[rows] / total)
            else:
                out[b] = _combine(x, rows, None, float(rows.size))
        return out, out_w


@register_preaggregator("clipping")
@dataclass(frozen=True, slots=True, kw_only=True)
class StaticClipping(_RowScaling):
    """Static clipping of every input to a fixed norm.

    .. math:: \\mathrm{Clip}_c(x_1, \\dots, x_n) = \\left(\\min\\left(1, \\frac{c}{\\|x_i\\|_2}\\right) x_i\\right)_{i=1}^n

    (ByzFL ``Clipping``, default ``c = 2``; ByzFL clips its input *in place*, this returns a new stack).

    Parameters
    ----------
    c:
        Norm bound ``c > 0``.
    """

    c: float = 2.0
    name: ClassVar[str]
    bit_reproducible: ClassVar[bool] = True
    permutation_invariant: ClassVar[bool] = True

    def __post_init__(self) -> None:
        check_float(self, "c", exclusive_minimum=0.0)

    def _row_scale(self, sq_norms: np.ndarray) -> np.ndarray:
        norms = np.sqrt(sq_norms)
        with np.errstate(divide="ignore"):
            return np.where(norms > self.c, self.c / norms, 1.0)


@register_preaggregator("arc")
@dataclass(frozen=True, slots=True, kw_only=True)
class ARC(_RowScaling):
    """Adaptive robust clipping (Allouah et al. 2024).

    .. math::

        \\mathrm{ARC}_f(x_1, \\dots, x_n) = \\left(\\min\\left(1, \\frac{\\|x_{\\pi(k+1)}\\|_2}{\\|x_i\\|_2}\\right)
        x_i\\right)_{i=1}^n, \\qquad k = \\left\\lfloor \\frac{2 f (n - f)}{n} \\right\\rfloor

    where ``π`` orders the inputs by non-increasing norm: the ``k`` largest-norm inputs are clipped to the
    norm of the largest unclipped one. ``k`` is computed in integer arithmetic (ByzFL's float formula can be
    one off at exact multiples). Ties in norm do not matter (a tied input is clipped to its own norm).

    Parameters
    ----------
    f:
        ``2f < n`` at call time.
    """

    f: int
    name: ClassVar[str]
    bit_reproducible: ClassVar[bool] = True
    permutation_invariant: ClassVar[bool] = True

    def __post_init__(self) -> None:
        check_int(self, "f")

    def _row_scale(self, sq_norms: np.ndarray) -> np.ndarray:
        n = sq_norms.shape[0]
        _check_f_bound(self, self.f, n)
        k = (2 * self.f * (n - self.f)) // n
        scale = np.ones(n)
        if k == 0:
            return scale
        norms = np.sqrt(sq_norms)
        order = np.lexsort((np.arange(n), -norms))
        threshold = norms[order[k]]
        clipped = order[:k]
        with np.errstate(divide="ignore", invalid="ignore"):
            scale[clipped] = np.where(norms[clipped] > threshold, threshold / norms[clipped], 1.0)
        return scale


# ---------------------------------------------------------------------------------------------------------------
# Chains and the configuration boundary


@dataclass(frozen=True, slots=True, kw_only=True)
class Chain:
    """Pre-aggregators applied in order, then an aggregation rule: ``final(pre_k(…pre_1(x)))``.

    Validates the input once; each stage checks its own ``f`` against the rows it receives. Weights flow
    through (see the module docstring) and must be supported by ``final`` when given. Row-scaling stages
    (clipping, ARC) are applied lazily: their factors multiply, and a final ``mean`` absorbs them into its
    coefficients without materialising the clipped stack (one rounding instead of two, so the result can differ
    in the last bits from aggregating the output of ``clipping(...)`` by hand; it is still bit-reproducible).

    Parameters
    ----------
    pre:
        Pre-aggregation stages, applied first to last (may be empty).
    final:
        The aggregation rule.
    """

    pre: tuple[PreAggregator, ...]
    final: Aggregator
    name: ClassVar[str] = "chain"
    supports_weights: ClassVar[bool] = True

    def __post_init__(self) -> None:
        pre = tuple(self.pre)
        for stage in pre:
            if type(stage).__dict__.get("name") is None or type(stage).name not in PRE_AGGREGATORS:  # type: ignore[attr-defined]
                raise ConfigError(f"Chain.pre: {stage!r} is not a registered pre-aggregator")
        if type(self.final).__dict__.get("name") is None or type(self.final).name not in AGGREGATORS:
            raise ConfigError(f"Chain.final: {self.final!r} is not a registered aggregator")
        object.__setattr__(self, "pre", pre)

    @property
    def bit_reproducible(self) -> bool:
        """All stages are bit-reproducible."""
        return all(s.bit_reproducible for s in self.pre) and self.final.bit_reproducible

    @property
    def permutation_invariant(self) -> bool:
        """All stages are permutation-invariant."""
        return all(s.permutation_invariant for s in self.pre) and self.final.permutation_invariant

    def __call__(
        self, updates: np.ndarray, /, *, rng: np.random.Generator, weights: np.ndarray | None = None
    ) -> np.ndarray:
        check_rng(rng)
        fused = (
            bool(self.pre)
            and isinstance(self.pre[0], _RowScaling)
            and isinstance(updates, np.ndarray)
            and updates.dtype == np.float32
        )
        x = validate_updates(updates, check_finite=not fused)
        w = None if weights is None else validate_weights(weights, x.shape[0])
        if w is not None and not self.final.supports_weights:
            raise ConfigError(f"{type(self.final).__name__} does not support weights")
        scale: np.ndarray | None = None  # pending row scaling (see _RowScaling)
        sq_norms: np.ndarray | None = None
        if fused:
            # float32 input, first stage a row scaling: its row norms double as the finiteness check (a NaN/Inf
            # makes a norm non-finite; row_sq_norms redoes overflowing float32 rows in float64, which cannot overflow).
            sq_norms = row_sq_norms(x)
            if not np.isfinite(sq_norms).all():
                validate_updates(x)
        for stage in self.pre:
            if isinstance(stage, _RowScaling):
                if sq_norms is None:
                    sq_norms = row_sq_norms(x)
                factors = stage._row_scale(sq_norms if scale is None else sq_norms * scale**2)
                scale = factors if scale is None else scale * factors
                continue
            if scale is not None:
                x, scale, sq_norms = _scale_rows(x, scale), None, None
            if isinstance(stage, _PreRule):
                x, w = stage._apply(x, w, rng)  # type: ignore[attr-defined]
            else:  # a plug-in that implements the PreAggregator protocol only
                x, w = stage.apply(x, rng=rng, weights=w)
        if scale is not None:
            if isinstance(self.final, Mean):
                # Unweighted: (Σ_i s_i x_i) / n; unclipped rows (s_i = 1) are added without a multiplication.
                if w is None:
                    return _combine(x, np.arange(x.shape[0]), scale, float(x.shape[0]))
                return _combine(x, np.arange(x.shape[0]), scale * w)
            x = _scale_rows(x, scale)
        if isinstance(self.final, _Rule):
            return self.final._aggregate(x, w, rng)  # type: ignore[attr-defined]
        # a plug-in that implements the Aggregator protocol only
        return self.final(x, rng=rng) if w is None else self.final(x, rng=rng, weights=w)


def parse_aggregator(spec: str, /) -> Aggregator | Chain:
    """Build an aggregation rule from its spec string (the configuration boundary).

    Grammar: ``stage ( ">" stage )*`` where ``stage`` is ``name`` or ``name(key=literal, ...)``; every stage but
    the last must be a registered pre-aggregator, the last a registered aggregator. Values are Python literals
    (parsed with :func:`ast.literal_eval`, never evaluated as code).

    Examples
    --------
    >>> parse_aggregator("nnm(f=2) > trimmed_mean(f=2)")
    Chain(pre=(NNM(f=2),), final=TrimmedMean(f=2))
    >>> parse_aggregator("geometric_median(nu=1e-5, iterations=10, init='mean', ftol=1e-6)")
    GeometricMedian(nu=1e-05, iterations=10, init='mean', ftol=1e-06)

    Raises
    ------
    ConfigError
        Unknown name, unknown or missing parameter, bad value, or a misplaced stage.
    """
    stages = parse_stages(spec)
    *pre_specs, (final_name, final_kwargs) = stages
    pre = []
    for name, kwargs in pre_specs:
        if name in AGGREGATORS:
            raise ConfigError(f"{spec!r}: {name!r} is an aggregator; only the last stage may be one")
        pre.append(construct(PRE_AGGREGATORS, "pre-aggregator", name, kwargs))
    if final_name in PRE_AGGREGATORS:
        raise ConfigError(f"{spec!r}: the last stage must be an aggregator, {final_name!r} is a pre-aggregator")
    final = construct(AGGREGATORS, "aggregator", final_name, final_kwargs)
    if not pre:
        return final  # type: ignore[no-any-return]
    return Chain(pre=tuple(pre), final=final)


def format_aggregator(rule: Aggregator | Chain, /) -> str:
    """Canonical spec string of a rule or chain (every parameter spelled out); inverse of :func:`parse_aggregator`.

    Suitable for genesis files and ledger records: ``parse_aggregator(format_aggregator(r)) == r``.
    """
    if isinstance(rule, Chain):
        return " > ".join(format_stage(s) for s in (*rule.pre, rule.final))
    return format_stage(rule)
