"""Robust aggregation rules over a stack of update vectors (ByzFL-shaped callables).

Every rule is a frozen, keyword-only dataclass registered by name in :data:`AGGREGATORS`, and is called as
``rule(updates, rng=rng)`` on an ``(n, d)`` stack of updates (rows = clients). Names are resolved only at the
configuration boundary, by :func:`learning.robust.parse_aggregator` (``"nnm(f=2) > trimmed_mean(f=2)"``).

Conventions shared by every rule
--------------------------------
* **Input.** Validated by :func:`learning.robust.validate_updates`: a C-contiguous ``(n, d)`` ``float32`` or
  ``float64`` array, every entry finite; anything else raises :class:`~learning._errors.InvalidUpdateError`
  *before* any arithmetic. Inputs are never modified.
* **Output.** A new 1-D array of length ``d`` with the **input's dtype** (``float32`` in, ``float32`` out).
  Internally sums, Gram matrices and distances are accumulated in ``float64`` (row norms: 2048-column blocks in
  the input precision, summed in float64) and the result is rounded to the input dtype once, at the end.
* **f.** Rules that need the number ``f`` of tolerated Byzantine inputs validate ``f >= 0`` at construction and
  ``2f < n`` (ByzFL B1) at call time, raising :class:`~learning._errors.ConfigError` (a ``ValueError``).
* **rng.** Every rule takes a keyword-only ``rng: numpy.random.Generator`` (only randomized rules use it);
  there is no global RNG anywhere.
* **weights.** Rules with ``supports_weights = True`` accept ``weights=`` (e.g. sample counts ``n_k``; normalised
  to sum to one). The others raise ``ConfigError`` when given weights rather than silently ignoring them.
* **Determinism.** ``bit_reproducible = True`` means: the same input bytes (same row order) give the same output
  bytes on any x86-64 CPU (for one numpy build), whatever the caller's memory layout, the BLAS kernel OpenBLAS
  picks for the CPU and the BLAS thread count. Every reduction runs in a fixed order in numpy's own loops; the one
  use of BLAS is the ``float64`` Gram matrix ``X Xᵀ``, whose blocks are split into integer limbs so that every
  product and partial sum is exact (:func:`_exact_block_gram`): any kernel and any order give the same bits (a
  plain ``B @ B.T`` gave three digests under four OpenBLAS core types). ``tests/contracts/test_aggregators.py``
  checks every rule with 1, 2 and 4 threads and under OpenBLAS core types Prescott, Nehalem, Haswell and SkylakeX
  (as the CPU allows) and numpy's baseline instructions. Small ``n x n`` products are done with elementwise numpy,
  never with BLAS. The memory-bound passes (sums, sorts, norms) are split over
  up to ``learning.robust._validate.WORKERS`` threads by *disjoint column ranges*, each output element computed by the
  same operations whatever the split, so the bytes do not depend on that number either (also tested).
* **Permutation invariance.** ``permutation_invariant = True`` means the rule is a symmetric function of its
  inputs. Rules that sum in input order (mean, geometric median, centered clipping) may differ in the last bits
  under a permutation; feed updates in a canonical order (sorted client ids) when digests are compared.
  Selection-based rules sum in a value-determined order and are bit-exact under permutations except on exact ties.

Pairwise distances come from one Gram matrix, ``‖x_i − x_j‖² = ‖x_i‖² + ‖x_j‖² − 2⟨x_i, x_j⟩``
(``benchmarks/README.md``, workload A1), so Krum, Multi-Krum, MDA, NNM, the geometric median and centered clipping cost
one matrix product plus ``O(n²)`` (or ``O(n²)`` per iteration) work, and a single final pass over the data.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import ClassVar, Literal, Protocol, TypeVar, runtime_checkable

import numpy as np

from learning._config import check_choice, check_float, check_int, register
from learning._errors import ConfigError
from learning.robust._validate import check_rng, kernel_threads, parallel_ranges, validate_updates, validate_weights

__all__ = [
    "AGGREGATORS",
    "Aggregator",
    "CenteredClipping",
    "CoordinateWiseMedian",
    "GeometricMedian",
    "Krum",
    "MDA",
    "MeaMed",
    "Mean",
    "MultiKrum",
    "TrimmedMean",
    "gram_matrix",
    "pairwise_sq_distances",
    "register_aggregator",
    "row_sq_norms",
]

_GRAM_BLOCK = 16384  # columns per float64 block of the Gram matrix (n x 16384 x 8 bytes)
_SUM_BLOCK = 65536  # columns per float64 accumulator block of linear combinations (512 KiB, in L2)
_SORT_BLOCK = 4096  # columns per transposed block of the coordinate-wise (sorting) rules
_NORM_BLOCK = 2048  # columns per block of the row norms (reduced in the input precision, then summed in float64)


# ---------------------------------------------------------------------------------------------------------------
# Protocol and registry


@runtime_checkable
class Aggregator(Protocol):
    """A robust aggregation rule: ``(n, d)`` stack of updates -> one ``(d,)`` update.

    Attributes
    ----------
    name:
        Registry name (``"trimmed_mean"``).
    bit_reproducible:
        Same input bytes => same output bytes on any x86-64 CPU and thread count (see the module docstring).
    permutation_invariant:
        The rule is a symmetric function of its inputs (up to floating-point rounding of input-order sums).
    supports_weights:
        ``__call__`` accepts ``weights=``.
    """

    name: ClassVar[str]
    bit_reproducible: ClassVar[bool]
    permutation_invariant: ClassVar[bool]
    supports_weights: ClassVar[bool]

    def __call__(
        self, updates: np.ndarray, /, *, rng: np.random.Generator, weights: np.ndarray | None = None
    ) -> np.ndarray: ...


#: Registered aggregation rules by name (filled by :func:`register_aggregator`).
AGGREGATORS: dict[str, type] = {}

_T = TypeVar("_T")


def register_aggregator(name: str) -> Callable[[type[_T]], type[_T]]:
    """Class decorator: register an aggregation rule under ``name`` (sets ``cls.name``)."""
    return register(AGGREGATORS, "aggregator", name)


# ---------------------------------------------------------------------------------------------------------------
# Call-time checks (field checks are in learning._config)


def _check_f_bound(rule: object, f: int, n: int) -> None:
    """ByzFL B1: a rule tolerating ``f`` Byzantine inputs needs ``2f < n``."""
    if 2 * f >= n:
        raise ConfigError(f"{type(rule).__name__}: cannot tolerate 2f >= n (f={f}, n={n})")


def _no_weights(rule: object, weights: object) -> None:
    if weights is not None:
        raise ConfigError(f"{type(rule).__name__} does not support weights")


# ---------------------------------------------------------------------------------------------------------------
# Numerical kernels (float64, fixed reduction orders)


_LIMB_BITS = 21
"""Bits of each of the two integer limbs a Gram block is split into (:func:`_exact_block_gram`)."""
_LIMB = float(1 << _LIMB_BITS)
_EXACT_WIDTH = 2048
"""Columns per exact product: 2 limbs of 21 bits give products below 2**42, and 2,048 of them sum below 2**53, so every
partial sum a BLAS kernel can form, in whatever order, is an integer float64 holds exactly."""


def _exact_block_gram(b: np.ndarray, buffers: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None) -> np.ndarray:
    """``B Bᵀ`` (float64) of a float32 or float64 block of at most :data:`_EXACT_WIDTH` columns, **the same bits on
    any CPU**.

    BLAS kernels (OpenBLAS picks one per CPU: Prescott, Nehalem, Haswell, SkylakeX, ...) sum the products in
    different orders, so a plain ``B @ B.T`` rounds differently from CPU to CPU and a validator or an auditor on
    another machine would not re-execute the aggregate bit for bit (measured: four core types, three Gram
    digests). Here each row is scaled by a power of two (exact) so that its largest magnitude is below ``2²¹``, and
    each scaled entry ``y`` is split into integer limbs ``y ≈ h + l·2⁻²¹`` with ``|h|, |l| < 2²¹`` (truncations:
    exact operations). Every product of limbs is an integer below ``2⁴²``, every sum of at most 2,048 of them an
    integer below ``2⁵³``: exactly representable, so ``H Hᵀ``, ``H Lᵀ`` and ``L Lᵀ`` are exact whatever order or fused
    multiply-add a BLAS kernel uses. They are combined in one fixed order of numpy operations and scaled back
    (powers of two). The only approximation is the truncation below ``2⁻⁴²`` of the row's largest magnitude in the
    block (a float32 entry within ``2⁻¹⁸`` of it is represented exactly): an outlier row costs the others nothing.
    ``buffers``: three float64 arrays of at least ``b``'s shape to work in (a caller's loop reuses them).
    """
    n, w = b.shape
    top = np.maximum(b.max(axis=1), -b.min(axis=1)).astype(np.float64) if b.size else np.zeros(n)
    if not np.isfinite(top).all():
        return b.astype(np.float64) @ b.astype(np.float64).T  # non-finite in, non-finite out (the callers report it)
    exponent = np.frexp(top)[1]  # per row, 2**exponent is above every |entry| of the row (exponent 0 for zeros)
    y, hi, lo = (np.empty((n, w)) for _ in range(3)) if buffers is None else (a[:n, :w] for a in buffers)
    shift = _LIMB_BITS - exponent
    if np.abs(shift).max(initial=0) < 1000:  # the factor is a normal float64: one exact multiplication
        np.multiply(b, np.ldexp(1.0, shift)[:, None], out=y)
    else:  # subnormal or huge entries
        np.ldexp(b, shift[:, None], out=y)
    np.trunc(y, out=hi)
    np.subtract(y, hi, out=y)  # exact: the fraction
    y *= _LIMB  # exact
    np.trunc(y, out=lo)
    g = hi @ hi.T
    g *= _LIMB
    hl = hi @ lo.T
    g += hl  # from here on float64 rounding, in this fixed order of elementwise operations
    g += hl.T
    g += (lo @ lo.T) / _LIMB
    return np.ldexp(g, np.add.outer(exponent, exponent) - 3 * _LIMB_BITS)


def _exact_gram(b: np.ndarray) -> np.ndarray:
    """``B Bᵀ`` (float64) of a block of any width: :func:`_exact_block_gram` per :data:`_EXACT_WIDTH` columns, summed in
    column order."""
    n, d = b.shape
    width = min(d, _EXACT_WIDTH)
    buffers = (np.empty((n, width)), np.empty((n, width)), np.empty((n, width)))
    g = _exact_block_gram(b[:, :_EXACT_WIDTH], buffers)
    for j0 in range(_EXACT_WIDTH, d, _EXACT_WIDTH):
        g += _exact_block_gram(b[:, j0 : j0 + _EXACT_WIDTH], buffers)
    return g


def gram_matrix(x: np.ndarray, *, start: int = 0, partial: np.ndarray | None = None) -> np.ndarray:
    """``G = X Xᵀ`` in float64, the same bits on any x86-64 CPU, for any BLAS and kernel thread count.

    Each :data:`_GRAM_BLOCK` columns give one block product (:func:`_exact_gram`: exact integer limb products); the
    blocks are computed on the kernel threads (``parallel_ranges``, a wave of blocks at a time) and added in column
    order, so the arithmetic is the same whatever the thread count. ``start`` (a multiple of the block width) and
    ``partial`` (the Gram matrix of the columns before ``start``, not modified) resume the same accumulation: the
    result has the bytes of ``gram_matrix(x)``.
    """
    n, d = x.shape
    g = np.zeros((n, n), dtype=np.float64) if partial is None else partial.copy()
    blocks = range(start, d, _GRAM_BLOCK)
    wave = max(1, 2 * kernel_threads())
    # the kernel threads take the blocks, one BLAS thread each (BLAS's own threads on top of them: 2.5x slower on
    # two cores); the bytes do not depend on either count
    with _one_blas_thread(kernel_threads() > 1 and len(blocks) > 1):
        for w0 in range(0, len(blocks), wave):
            firsts = blocks[w0 : w0 + wave]
            parts: list[np.ndarray | None] = [None] * len(firsts)

            def work(k0: int, k1: int) -> None:
                for k in range(k0, k1):
                    parts[k] = _exact_gram(x[:, firsts[k] : firsts[k] + _GRAM_BLOCK])

            parallel_ranges(work, len(firsts), cost=n * _GRAM_BLOCK * len(firsts))
            for p in parts:
                g += p
    return g


def _one_blas_thread(on: bool) -> contextlib.AbstractContextManager[object]:
    """BLAS limited to one thread for the block (``threadpoolctl``, a core dependency), when ``on``."""
    if not on:
        return contextlib.nullcontext()
    try:
        from threadpoolctl import threadpool_limits  # noqa: PLC0415
    except ImportError:  # pragma: no cover - a speed matter only
        return contextlib.nullcontext()
    return threadpool_limits(limits=1, user_api="blas")


def _gram_about(x: np.ndarray, m: int) -> np.ndarray:
    """Gram matrix of the inputs relative to input ``m``, with ``x_m`` itself as a last row.

    Returns the ``(n + 1, n + 1)`` float64 matrix ``G̃ = Ỹ Ỹᵀ`` of ``Ỹ = [x_1 − x_m; …; x_n − x_m; x_m]``. A point
    ``z = Σ_j c_j x_j`` is ``Σ_j c_j (x_j − x_m) + (Σ_j c_j) x_m``, so with ``c̃ = (c, Σ_j c_j − 1)``,
    ``x_i − z = ỹ_i − Σ_j c̃_j ỹ_j`` and :func:`_distances_to_combination` applies to ``G̃`` unchanged; ``c̃ = (0, …,
    0, −1)`` gives ``‖x_i‖`` (``z = 0``). Relative to a central input the Gram identity keeps its precision when the
    inputs share a large offset ``o``: from ``X Xᵀ``, ``‖x_i − z‖² = G_ii − 2(Gc)_i + cᵀGc`` carries an error of
    about ``ε‖o‖²`` (inputs ``1e3 + 1e-2·N(0, 1)``: ~1e-6 of each squared distance), here of about ``ε‖x_i − x_m‖²``.

    One pass over the data, as :func:`gram_matrix`: per column block the rows are converted to float64 into one reused
    C-contiguous buffer, ``x_m`` is subtracted in place (float64: exact for float32 inputs of similar magnitude) and
    the block's product is :func:`_exact_gram`'s (the same bits on any CPU; its rows are scaled one by one, so the
    last row ``x_m``, far larger than the differences, costs them no precision).
    """
    n, d = x.shape
    g = np.zeros((n + 1, n + 1), dtype=np.float64)
    width = min(d, _GRAM_BLOCK)
    buf = np.empty((n + 1, width), dtype=np.float64)
    for j0 in range(0, d, _GRAM_BLOCK):
        block = x[:, j0 : j0 + _GRAM_BLOCK]
        b = buf if block.shape[1] == width else np.empty((n + 1, block.shape[1]), dtype=np.float64)
        y = b[:n]
        np.copyto(y, block)
        b[n] = y[m]
        np.subtract(y, b[n], out=y)
        g += _exact_gram(b)
    return g


#: Recompute the geometric median's Gram matrix relative to a central input when the inputs' median squared norm
#: exceeds this multiple of their median pairwise squared distance (a shared offset; see :func:`_gram_about`).
#: Below it the Gram identity's relative error stays under ~``2ε · 1e6 ≈ 2e-10``.
_RECENTRE_RATIO = 1e6


def _central_input(g: np.ndarray, a: np.ndarray) -> int | None:
    """Index of the input to centre the Gram matrix on, or ``None`` when ``X Xᵀ`` is accurate enough.

    The inputs need recentring when ``median_i ‖x_i‖² > _RECENTRE_RATIO · median_{i≠j} ‖x_i − x_j‖²`` (medians:
    a minority of far outliers neither triggers nor hides it). The centre is the weighted medoid
    ``argmin_j Σ_k a_k ‖x_j − x_k‖`` (the discrete geometric median, ties to the lowest index): a central input,
    so a far Byzantine input cannot become the reference (centring on the mean would move it by ``f/n`` of that
    input's distance and bring the cancellation back).
    """
    n = g.shape[0]
    if n < 2:
        return None
    dist = _distances_from_gram(g)
    if not np.median(np.diagonal(g)) > _RECENTRE_RATIO * np.median(dist[~np.eye(n, dtype=bool)]):
        return None
    return int(np.argmin(np.add.reduce(np.sqrt(dist) * a[None, :], axis=1)))


def row_sq_norms(x: np.ndarray) -> np.ndarray:
    """Row squared norms ``‖x_i‖²`` (numpy's einsum loop, no BLAS), as float64.

    Each block of ``_NORM_BLOCK`` columns is reduced in the input precision (einsum's SIMD accumulators) and the
    block sums are accumulated in float64, in block order: relative error ~1e-8 for float32 input, at half the
    cost of converting the stack to float64 first. A thread's whole range of blocks is one einsum call over an
    ``(n, blocks, _NORM_BLOCK)`` view (the same inner loop per block, without a Python-level call per block).
    """
    n, d = x.shape
    blocks = -(-d // _NORM_BLOCK)
    parts = np.empty((blocks, n), dtype=np.float64)

    def work(j0: int, j1: int) -> None:
        full = (j1 - j0) // _NORM_BLOCK
        b0 = j0 // _NORM_BLOCK
        if full:
            view = x[:, j0 : j0 + full * _NORM_BLOCK].reshape(n, full, _NORM_BLOCK)  # splits an axis: a view
            parts[b0 : b0 + full] = np.einsum("ijk,ijk->ji", view, view)
        if j0 + full * _NORM_BLOCK < j1:  # the last, partial block of the matrix
            tail = x[:, j0 + full * _NORM_BLOCK : j1]
            parts[b0 + full] = np.einsum("ij,ij->i", tail, tail)

    parallel_ranges(work, d, align=_NORM_BLOCK, cost=x.size)
    out = np.empty(n, dtype=np.float64)
    _column_sums(parts, out)  # block partial sums added in block order
    for i in np.flatnonzero(~np.isfinite(out)):
        # float32 squares overflow above ~1.8e19 (or the row holds a NaN/Inf): redo the row in float64.
        row = x[i].astype(np.float64)
        out[i] = np.einsum("i,i->", row, row)
    return out


def _distances_from_gram(g: np.ndarray) -> np.ndarray:
    diag = np.diagonal(g)
    dist = diag[:, None] + diag[None, :] - 2.0 * g
    np.maximum(dist, 0.0, out=dist)
    np.fill_diagonal(dist, 0.0)
    return dist


def pairwise_sq_distances(updates: np.ndarray, /) -> np.ndarray:
    """Squared Euclidean distances ``‖x_i − x_j‖²`` from one Gram matrix.

    .. math:: D_{ij} = \\|x_i\\|^2 + \\|x_j\\|^2 - 2 \\langle x_i, x_j \\rangle

    computed in float64 (``benchmarks/README.md``, workload A1), clamped at 0, with an exact zero diagonal.

    Parameters
    ----------
    updates:
        ``(n, d)`` stack (validated).

    Returns
    -------
    numpy.ndarray
        ``(n, n)`` float64, symmetric.
    """
    return _distances_from_gram(gram_matrix(validate_updates(updates)))


def _matvec(m: np.ndarray, c: np.ndarray) -> np.ndarray:
    """``m @ c`` for a small square matrix, in numpy's own loops (no BLAS threads)."""
    return np.add.reduce(m * c[None, :], axis=1)


def _dot(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.add.reduce(a * b))


def _distances_to_combination(g: np.ndarray, c: np.ndarray) -> np.ndarray:
    """``‖x_i − Σ_j c_j x_j‖`` for every ``i``, from the Gram matrix (clamped at 0)."""
    gc = _matvec(g, c)
    sq = np.diagonal(g) - 2.0 * gc + _dot(c, gc)
    np.maximum(sq, 0.0, out=sq)
    return np.sqrt(sq)


def _column_sums(src: np.ndarray, out: np.ndarray) -> None:
    """``out[j] = Σ_i src[i, j]`` in float64, each column summed row by row (``src`` is an ``(m, w)`` view).

    One ``np.add.reduce`` over axis 0: numpy adds whole rows into the accumulator, converting each float32 row
    to float64 in its buffer, so every column is summed in row order -- except for a single column (``w = 1``),
    which numpy would sum pairwise; that column is summed with ``np.add.accumulate`` (sequential by definition)
    so the order never depends on where a block ends.
    """
    if src.shape[1] == 1:
        out[0] = np.add.accumulate(src[:, 0], dtype=np.float64)[-1]
    else:
        np.add.reduce(src, axis=0, dtype=np.float64, out=out)


def _combine(x: np.ndarray, rows: np.ndarray, coef: np.ndarray | None, divisor: float = 1.0) -> np.ndarray:
    """``(Σ_k coef[k] · x[rows[k]]) / divisor`` accumulated in float64 in the order of ``rows``; ``x``'s dtype out.

    ``coef=None`` means all coefficients are 1 (a plain sum). Every coordinate is summed sequentially,
    ``((t_0 + t_1) + t_2) + …`` with ``t_k = coef[k] · x[rows[k]]`` computed in float64 (one rounding; exact when
    ``coef[k] = 1``, which skips the multiplication), then divided by ``divisor`` and rounded once to ``x``'s dtype.
    The leading run of consecutive rows with unit coefficients (all rows, for the plain mean) is summed by one
    :func:`_column_sums` call, which converts and adds in a single numpy loop -- the same order, so the plain mean
    gives the bytes of ``np.mean(x.astype(np.float64), axis=0).astype(x.dtype)`` (``d > 1``) without the float64
    copy; the other rows are added one by one. Every column goes through the same operations wherever its block
    starts or ends, so the columns are split evenly over the kernel threads and processed in blocks of
    :data:`_SUM_BLOCK` (a float64 accumulator that stays in a core's L2 cache): the bytes depend on neither the
    thread count nor the block size.
    """
    d = x.shape[1]
    out = np.empty(d, dtype=x.dtype)
    rows = np.asarray(rows, dtype=np.intp)
    if rows.size == 0:
        out[:] = 0.0
        return out
    terms = [(int(r), None if coef is None or coef[k] == 1.0 else np.float64(coef[k])) for k, r in enumerate(rows)]
    lead = 1  # rows[:lead] = rows[0], rows[0] + 1, ... with unit coefficients: one reduction
    while lead < len(terms) and terms[lead] == (terms[0][0] + lead, None) and terms[0][1] is None:
        lead += 1
    first = terms[0][0]

    def work(c0: int, c1: int) -> None:
        acc_buf = np.empty(min(c1 - c0, _SUM_BLOCK), dtype=np.float64)
        tmp_buf = np.empty_like(acc_buf)
        for j0 in range(c0, c1, _SUM_BLOCK):
            j1 = min(c1, j0 + _SUM_BLOCK)
            acc = acc_buf[: j1 - j0]
            if terms[0][1] is not None:
                np.multiply(x[first, j0:j1], terms[0][1], out=acc)
            elif lead == 1:
                np.copyto(acc, x[first, j0:j1])
            else:
                _column_sums(x[first : first + lead, j0:j1], acc)
            for r, c in terms[lead:]:
                if c is None:
                    np.add(acc, x[r, j0:j1], out=acc)  # the float32 row is converted in numpy's buffer
                else:
                    tmp = tmp_buf[: j1 - j0]
                    np.multiply(x[r, j0:j1], c, out=tmp)
                    np.add(acc, tmp, out=acc)
            if divisor != 1.0:  # divide and round to x's dtype in one pass
                np.divide(acc, divisor, out=out[j0:j1], casting="same_kind")
            else:
                out[j0:j1] = acc

    parallel_ranges(work, d, align=1024, cost=rows.size * d)  # balanced pieces; blocks restart in each piece
    return out


def _coordinatewise(x: np.ndarray, reduce_sorted: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
    """Apply ``reduce_sorted`` to every coordinate's sorted column of values.

    The stack is processed in blocks of columns: each block is transposed into a C-contiguous ``(b, n)`` array
    and sorted along its rows, so ``reduce_sorted`` receives a ``(b, n)`` array whose rows are the sorted values
    of ``b`` coordinates and returns ``(b,)`` float64 results. Sorting makes the result independent of the
    input order (bit-exact under permutations, except for the sign of zeros).
    """
    n, d = x.shape
    out = np.empty(d, dtype=x.dtype)

    def work(c0: int, c1: int) -> None:
        for j0 in range(c0, c1, _SORT_BLOCK):
            block = np.ascontiguousarray(x[:, j0 : min(c1, j0 + _SORT_BLOCK)].T)
            block.sort(axis=1)
            out[j0 : j0 + block.shape[0]] = reduce_sorted(block)

    parallel_ranges(work, d, align=_SORT_BLOCK, cost=x.size)
    return out


def _sorted_median(s: np.ndarray) -> np.ndarray:
    n = s.shape[1]
    if n % 2:
        return s[:, n // 2].astype(np.float64)
    return (s[:, n // 2 - 1].astype(np.float64) + s[:, n // 2]) * 0.5


# ---------------------------------------------------------------------------------------------------------------
# Rules


class _Rule:
    """Shared ``__call__``: validate, then ``_aggregate`` (also used by chains on already-validated stacks)."""

    __slots__ = ()

    def __call__(
        self, updates: np.ndarray, /, *, rng: np.random.Generator, weights: np.ndarray | None = None
    ) -> np.ndarray:
        check_rng(rng)
        x = validate_updates(updates)
        w = None if weights is None else validate_weights(weights, x.shape[0])
        return self._aggregate(x, w, rng)  # type: ignore[attr-defined]


@register_aggregator("mean")
@dataclass(frozen=True, slots=True, kw_only=True)
class Mean(_Rule):
    """Average, or weighted average, of the inputs (FedAvg).

    .. math::

        \\mathrm{Mean}(x_1, \\dots, x_n) = \\frac{1}{n} \\sum_{i=1}^n x_i, \\qquad
        \\mathrm{Mean}_w(x_1, \\dots, x_n) = \\sum_{i=1}^n \\frac{w_i}{\\sum_j w_j} x_i

    The weighted form is FedAvg's ``p_k = n_k / Σ_j n_j`` (McMahan et al. 2017; cmfl spec eq. 5). Not robust:
    one input moves the output arbitrarily (κ = ∞, fedro spec §2.3). Accumulated in float64 in input order.

    Examples
    --------
    >>> import numpy as np
    >>> Mean()(np.array([[1.0, 2.0], [3.0, 4.0]]), rng=np.random.default_rng(0))
    array([2., 3.])
    """

    name: ClassVar[str]
    bit_reproducible: ClassVar[bool] = True
    permutation_invariant: ClassVar[bool] = True
    supports_weights: ClassVar[bool] = True

    def __call__(
        self, updates: np.ndarray, /, *, rng: np.random.Generator, weights: np.ndarray | None = None
    ) -> np.ndarray:
        check_rng(rng)
        if not (isinstance(updates, np.ndarray) and updates.dtype == np.float32 and updates.ndim == 2):
            return _Rule.__call__(self, updates, rng=rng, weights=weights)
        # float32 fast path: the finiteness check is fused into the single pass over the data. A float64 sum of
        # float32 values cannot overflow, so the (convex) result is finite iff every input entry is.
        x = validate_updates(updates, check_finite=False)
        w = None if weights is None else validate_weights(weights, x.shape[0])
        out = self._aggregate(x, w, rng)
        if not np.isfinite(out).all():
            validate_updates(x)  # raises InvalidUpdateError naming the rows
            raise AssertionError("non-finite mean of finite float32 updates")  # pragma: no cover
        return out

    def _aggregate(self, x: np.ndarray, w: np.ndarray | None, rng: np.random.Generator) -> np.ndarray:
        n = x.shape[0]
        rows = np.arange(n)
        if w is None:
            return _combine(x, rows, None, float(n))
        return _combine(x, rows, w)


@register_aggregator("median")
@dataclass(frozen=True, slots=True, kw_only=True)
class CoordinateWiseMedian(_Rule):
    """Coordinate-wise median (Yin et al. 2018).

    .. math:: [\\mathrm{CWMed}(x_1, \\dots, x_n)]_k = \\mathrm{median}([x_1]_k, \\dots, [x_n]_k)

    With an even ``n`` the median is the mean of the two middle values (computed in float64, so it never
    overflows). κ = 4(1 + f/(n−2f))² for any f < n/2 (Allouah et al. 2023; fedro spec §2.3). Unweighted
    (cmfl spec §3.3). Implemented by sorting blocks of coordinates, hence bit-exact under permutations.

    Examples
    --------
    >>> import numpy as np
    >>> CoordinateWiseMedian()(np.array([[1.0, 5.0], [2.0, 0.0], [9.0, 1.0]]), rng=np.random.default_rng(0))
    array([2., 1.])
    """

    name: ClassVar[str]
    bit_reproducible: ClassVar[bool] = True
    permutation_invariant: ClassVar[bool] = True
    supports_weights: ClassVar[bool] = False

    def _aggregate(self, x: np.ndarray, w: np.ndarray | None, rng: np.random.Generator) -> np.ndarray:
        _no_weights(self, w)
        return _coordinatewise(x, _sorted_median)


@register_aggregator("trimmed_mean")
@dataclass(frozen=True, slots=True, kw_only=True)
class TrimmedMean(_Rule):
    """Coordinate-wise trimmed mean (Yin et al. 2018).

    .. math::

        [\\mathrm{TrMean}_f(x_1, \\dots, x_n)]_k = \\frac{1}{n - 2f} \\sum_{j=f+1}^{n-f} [x_{\\pi_k(j)}]_k

    where ``π_k`` sorts the k-th coordinates in non-decreasing order: drop the ``f`` smallest and ``f`` largest
    values of every coordinate and average the ``n − 2f`` others. ``f = 0`` is the mean. κ = (6f/(n−2f))·(1 +
    f/(n−2f)) (fedro spec §2.3). The paper's "β %" (cmfl spec §3.3) is ``f = ⌊β·n⌋``.

    Parameters
    ----------
    f:
        Number of values trimmed from each side; ``2f < n`` at call time.

    Examples
    --------
    >>> import numpy as np
    >>> TrimmedMean(f=1)(np.array([[1.0], [2.0], [3.0], [100.0]]), rng=np.random.default_rng(0))
    array([2.5])
    """

    f: int
    name: ClassVar[str]
    bit_reproducible: ClassVar[bool] = True
    permutation_invariant: ClassVar[bool] = True
    supports_weights: ClassVar[bool] = False

    def __post_init__(self) -> None:
        check_int(self, "f")

    def _aggregate(self, x: np.ndarray, w: np.ndarray | None, rng: np.random.Generator) -> np.ndarray:
        _no_weights(self, w)
        n = x.shape[0]
        f = self.f
        _check_f_bound(self, f, n)
        keep = n - 2 * f

        def trimmed(s: np.ndarray) -> np.ndarray:
            total = np.add.reduce(s[:, f : n - f], axis=1, dtype=np.float64)
            return total / keep

        return _coordinatewise(x, trimmed)


@register_aggregator("meamed")
@dataclass(frozen=True, slots=True, kw_only=True)
class MeaMed(_Rule):
    """Mean around the median (Xie et al. 2018).

    .. math::

        [\\mathrm{MeaMed}_f(x_1, \\dots, x_n)]_k = \\frac{1}{n - f} \\sum_{j \\in M_k} [x_j]_k

    where ``M_k`` holds the ``n − f`` inputs whose k-th coordinate is closest to the coordinate's median ``m``
    (fedro spec §3 table, Xie et al. 2018; ByzFL ``Meamed``). In sorted order ``v_0 ≤ … ≤ v_{n−1}`` those values
    form a window ``[s, s + n − f)`` with ``0 ≤ s ≤ f``: starting from ``s = 0`` the window slides right while the
    value it would take in is *strictly* closer to the median than the one it would drop, ``v_{s+n−f} − m <
    m − v_s`` (in float64: the median and the distances of float32 inputs are not rounded to float32, unlike
    ByzFL's). Sliding stops at the first ``s`` where that fails, so ``M_k`` holds exactly the ``n − f`` smallest
    distances ``|v − m|``; of two *different* values at the same distance on either side of the window the lower
    one is kept (ByzFL's ``argpartition`` leaves that choice unspecified). Equal values are interchangeable, so
    repeated values never change the result. (A window chosen by its largest distance, ``argmin_s max(m − v_s,
    v_{s+n−f−1} − m)``, is not the same rule: when the lower end repeats a value, two windows share the largest
    distance and the leftmost one may drop a strictly closer upper value -- workload A1, coordinate 725,866,
    differed from ByzFL by 7.4e-2 that way.)

    Parameters
    ----------
    f:
        ``2f < n`` at call time.
    """

    f: int
    name: ClassVar[str]
    bit_reproducible: ClassVar[bool] = True
    permutation_invariant: ClassVar[bool] = True
    supports_weights: ClassVar[bool] = False

    def __post_init__(self) -> None:
        check_int(self, "f")

    def _aggregate(self, x: np.ndarray, w: np.ndarray | None, rng: np.random.Generator) -> np.ndarray:
        _no_weights(self, w)
        n = x.shape[0]
        f = self.f
        _check_f_bound(self, f, n)
        k = n - f
        offsets = np.arange(k)

        def window_mean(s: np.ndarray) -> np.ndarray:
            med = _sorted_median(s)[:, None]
            # s < f: v_s <= m <= v_{s+k} (s < n/2 <= s + k), so "take v_{s+k}, drop v_s" holds on a prefix of s.
            drop = med - s[:, :f].astype(np.float64)
            take = s[:, k:n].astype(np.float64) - med
            start = np.count_nonzero(take < drop, axis=1)
            window = np.take_along_axis(s, start[:, None] + offsets[None, :], axis=1)
            return np.add.reduce(window, axis=1, dtype=np.float64) / k

        return _coordinatewise(x, window_mean)


def _weiszfeld_gram(x: np.ndarray, a: np.ndarray) -> np.ndarray:
    """The geometric median's Gram matrix: ``X Xᵀ``, or :func:`_gram_about` a central input for shared offsets.

    Decided on the first column block (:func:`_central_input`), so inputs with an offset cost one pass, as
    ``X Xᵀ`` does; if the whole ``X Xᵀ`` shows an offset that the first block did not, it is recomputed about the
    medoid (a second pass, only then). Without an offset the result is ``gram_matrix(x)``, byte for byte.
    """
    first = gram_matrix(x[:, :_GRAM_BLOCK])
    centre = _central_input(first, a)
    if centre is None:
        if x.shape[1] <= _GRAM_BLOCK:
            return first
        g = gram_matrix(x, start=_GRAM_BLOCK, partial=first)
        centre = _central_input(g, a)
        if centre is None:
            return g
    return _gram_about(x, centre)


@register_aggregator("geometric_median")
@dataclass(frozen=True, slots=True, kw_only=True)
class GeometricMedian(_Rule):
    """Geometric median by the smoothed Weiszfeld algorithm (Pillutla et al. 2022, RFA).

    .. math::

        \\mathrm{GM}(x_1, \\dots, x_n) \\in \\arg\\min_{y} \\sum_{i=1}^n a_i \\|y - x_i\\|_2, \\qquad
        z_{t+1} = \\frac{\\sum_i \\beta_i x_i}{\\sum_i \\beta_i}, \\quad
        \\beta_i = \\frac{a_i}{\\max(\\nu, \\|z_t - x_i\\|_2)}

    with ``a_i = 1/n`` or the normalised weights. ``init="zero"`` starts from ``z_0 = 0`` (ByzFL, unavailability spec §2.6);
    ``init="mean"`` from the (weighted) mean (RFA's official code, sself spec §2.3). With ``ftol > 0`` the loop stops
    early once ``|obj_t − obj_{t+1}| < ftol · obj_{t+1}``, ``obj = Σ a_i ‖z − x_i‖`` (RFA, ftol = 1e-6).
    Defaults are ByzFL's (ν = 0.1, 3 iterations); unavailability spec uses ν = 0.1, 8 iterations; RFA (sself spec) ν = 1e-5,
    10 iterations, ``init="mean"``, ``ftol=1e-6``. κ = 4(1 + f/(n−2f))² for the exact geometric median.

    Every iterate is a combination ``z = Σ_j c_j x_j``, so the iteration runs on the coefficients ``c`` with
    distances from one Gram matrix; the data are read twice (Gram, final combination) whatever the number of
    iterations. When the inputs share an offset much larger than their spread (models rather than updates,
    ``1e3 + 1e-2·N(0, 1)``) the Gram matrix is taken relative to the medoid input instead (:func:`_weiszfeld_gram`;
    distances do not change under a translation), so the distances, the weights ``β_i`` and the ``ftol`` test keep
    float64 precision instead of losing ``‖offset‖²/spread²`` of it. The final combination uses the inputs as given.

    Parameters
    ----------
    nu:
        Smoothing ``ν > 0``.
    iterations:
        Maximum number of Weiszfeld steps, ``>= 1``.
    init:
        ``"zero"`` or ``"mean"``.
    ftol:
        Relative objective tolerance for early stopping; 0 runs every iteration.
    """

    nu: float = 0.1
    iterations: int = 3
    init: Literal["zero", "mean"] = "zero"
    ftol: float = 0.0
    name: ClassVar[str]
    bit_reproducible: ClassVar[bool] = True
    permutation_invariant: ClassVar[bool] = True
    supports_weights: ClassVar[bool] = True

    def __post_init__(self) -> None:
        check_float(self, "nu", exclusive_minimum=0.0)
        check_int(self, "iterations", minimum=1)
        check_choice(self, "init", ("zero", "mean"))
        check_float(self, "ftol", minimum=0.0)

    def _aggregate(self, x: np.ndarray, w: np.ndarray | None, rng: np.random.Generator) -> np.ndarray:
        n = x.shape[0]
        a = np.full(n, 1.0 / n) if w is None else w
        g = _weiszfeld_gram(x, a)
        coef = np.zeros(g.shape[0])  # coefficients of z over g's rows: c, then Σc − 1 for _gram_about's last row
        if self.init == "zero":
            coef[n:] = -1.0  # z_0 = 0; from X Xᵀ, coef = 0 gives ‖x_i‖ directly
        else:
            coef[:n] = a
        dist = _distances_to_combination(g, coef)[:n]
        obj = _dot(a, dist)
        c = a
        coef[n:] = 0.0
        for _ in range(self.iterations):
            beta = a / np.maximum(self.nu, dist)
            c = beta / np.add.reduce(beta)
            coef[:n] = c
            dist = _distances_to_combination(g, coef)[:n]
            obj_new = _dot(a, dist)
            if self.ftol > 0.0 and abs(obj - obj_new) < self.ftol * obj_new:
                break
            obj = obj_new
        return _combine(x, np.arange(n), c)


@register_aggregator("centered_clipping")
@dataclass(frozen=True, slots=True, kw_only=True)
class CenteredClipping(_Rule):
    """Centered clipping (Karimireddy et al. 2021), iterative, with the weights of unavailability spec eq. (43).

    .. math::

        v_{l+1} = v_l + \\sum_{i=1}^n a_i \\, (x_i - v_l) \\min\\left(1, \\frac{\\tau}{\\|x_i - v_l\\|_2}\\right),
        \\qquad v_0 = 0, \\; l = 0, \\dots, L-1

    with ``a_i = 1/n`` (ByzFL) or the normalised weights (unavailability spec eq. 43). Jacobi iteration (every client uses
    ``v_l``), whole-vector norms. Defaults are ByzFL's (τ = 100, L = 1); unavailability spec uses τ = 10/(1−β₀) = 100, L = 3.

    To start from a previous aggregate ``m`` (Karimireddy's momentum centre) aggregate the shifted updates:
    ``CC(x − m) + m`` equals the iteration started at ``v_0 = m``.

    Parameters
    ----------
    tau:
        Clipping radius ``τ > 0``.
    iterations:
        ``L >= 1``.
    """

    tau: float = 100.0
    iterations: int = 1
    name: ClassVar[str]
    bit_reproducible: ClassVar[bool] = True
    permutation_invariant: ClassVar[bool] = True
    supports_weights: ClassVar[bool] = True

    def __post_init__(self) -> None:
        check_float(self, "tau", exclusive_minimum=0.0)
        check_int(self, "iterations", minimum=1)

    def _aggregate(self, x: np.ndarray, w: np.ndarray | None, rng: np.random.Generator) -> np.ndarray:
        n = x.shape[0]
        a = np.full(n, 1.0 / n) if w is None else w
        c = np.zeros(n)
        if self.iterations == 1:
            g = None
            dist = np.sqrt(row_sq_norms(x))
        else:
            g = gram_matrix(x)
            dist = np.sqrt(np.diagonal(g))
        for it in range(self.iterations):
            if it > 0:
                assert g is not None
                dist = _distances_to_combination(g, c)
            with np.errstate(divide="ignore"):
                scale = np.where(dist > self.tau, self.tau / dist, 1.0)
            step = a * scale
            c = c * (1.0 - np.add.reduce(step)) + step
        return _combine(x, np.arange(n), c)


def _krum_scores(dist: np.ndarray, neighbours: int) -> np.ndarray:
    """Krum scores ``Σ_{j ∈ N_i} D_ij`` over the ``neighbours`` nearest *other* inputs (sorted, then summed)."""
    n = dist.shape[0]
    if neighbours <= 0:
        return np.zeros(n)
    masked = dist.copy()
    np.fill_diagonal(masked, np.inf)
    nearest = np.sort(masked, axis=1)[:, :neighbours]
    return np.add.reduce(nearest, axis=1)


def _krum_neighbours(rule: Krum | MultiKrum, n: int) -> int:
    f = rule.f
    _check_f_bound(rule, f, n)
    if rule.variant == "blanchard":
        if n <= 2 * f + 2:
            raise ConfigError(f"{type(rule).__name__}(variant='blanchard') needs n > 2f + 2 (f={f}, n={n})")
        return n - f - 2
    return n - f - 1


@register_aggregator("krum")
@dataclass(frozen=True, slots=True, kw_only=True)
class Krum(_Rule):
    """Krum (Blanchard et al. 2017).

    .. math::

        \\mathrm{Krum}_f(x_1, \\dots, x_n) = x_{i^*}, \\quad
        i^* = \\arg\\min_i \\sum_{j \\in N_i} \\|x_i - x_j\\|_2^2

    where ``N_i`` holds the nearest *other* inputs: ``n − f − 1`` of them for ``variant="byzfl"`` (ByzFL, Allouah
    et al. 2023; needs ``2f < n``) or ``n − f − 2`` for ``variant="blanchard"`` (the original paper, sself spec
    §2.3, cmfl spec §3.3; needs ``n > 2f + 2``). κ = 6(1 + f/(n−2f)) (fedro spec). Returns a copy of the chosen input.

    Ties: ``i*`` is the **lowest index** among the inputs with the smallest score (``np.argmin``). Exact ties are
    therefore resolved by input order -- feed the updates in a canonical order (sorted client ids) where replicas
    must agree; a permutation of tied inputs changes the choice (e.g. the four vertices of a square all score the
    same and input 0 is returned). Duplicated rows: the Gram matrix gives the copies the same distances to every
    other row, bit for bit, on any CPU (its limb products are exact; a plain ``dsyrk`` did not under OpenBLAS's
    Nehalem kernels; checked by ``tests/learning/test_aggregators.py``), so they tie exactly and the first copy is
    chosen; Krum's output is the same vector whichever copy it is.

    Parameters
    ----------
    f:
        Number of tolerated Byzantine inputs.
    variant:
        ``"byzfl"`` or ``"blanchard"`` neighbourhood size.
    """

    f: int
    variant: Literal["byzfl", "blanchard"] = "byzfl"
    name: ClassVar[str]
    bit_reproducible: ClassVar[bool] = True
    permutation_invariant: ClassVar[bool] = True
    supports_weights: ClassVar[bool] = False

    def __post_init__(self) -> None:
        check_int(self, "f")
        check_choice(self, "variant", ("byzfl", "blanchard"))

    def _aggregate(self, x: np.ndarray, w: np.ndarray | None, rng: np.random.Generator) -> np.ndarray:
        _no_weights(self, w)
        neighbours = _krum_neighbours(self, x.shape[0])
        scores = _krum_scores(_distances_from_gram(gram_matrix(x)), neighbours)
        return x[int(np.argmin(scores))].copy()


@register_aggregator("multi_krum")
@dataclass(frozen=True, slots=True, kw_only=True)
class MultiKrum(_Rule):
    """Multi-Krum (Blanchard et al. 2017): average of the ``q`` inputs with the lowest Krum scores.

    .. math::

        \\mathrm{MultiKrum}_{f,q}(x_1, \\dots, x_n) = \\frac{1}{q} \\sum_{i \\in Q} x_i, \\quad
        Q = \\text{the } q \\text{ indices with the smallest Krum scores}

    ``q = n − f`` by default (ByzFL; sself spec §2.3 "M = n − f"); cmfl spec uses ``q = m`` (the top α %). With
    weights the average is weighted over ``Q`` (cmfl spec [C] n_k-weighted; an all-zero weight on ``Q`` falls
    back to the plain mean). Scores and neighbourhoods as in :class:`Krum`. ``Q`` is the first ``q`` indices of the
    order by ``(score, index)`` (``np.lexsort``): on exact ties, including duplicated rows, the **lowest indices**
    are taken, which is visible with weights (duplicates with different weights) or when ``q`` cuts through a
    group of tied distinct inputs. The sum runs in that order, so the result is bit-exact under permutations
    barring ties.

    Parameters
    ----------
    f:
        Number of tolerated Byzantine inputs.
    q:
        Number of averaged inputs, ``1 <= q <= n``; ``None`` means ``n − f``.
    variant:
        ``"byzfl"`` or ``"blanchard"`` neighbourhood size.
    """

    f: int
    q: int | None = None
    variant: Literal["byzfl", "blanchard"] = "byzfl"
    name: ClassVar[str]
    bit_reproducible: ClassVar[bool] = True
    permutation_invariant: ClassVar[bool] = True
    supports_weights: ClassVar[bool] = True

    def __post_init__(self) -> None:
        check_int(self, "f")
        check_int(self, "q", minimum=1, optional=True)
        check_choice(self, "variant", ("byzfl", "blanchard"))

    def _aggregate(self, x: np.ndarray, w: np.ndarray | None, rng: np.random.Generator) -> np.ndarray:
        n = x.shape[0]
        neighbours = _krum_neighbours(self, n)
        q = n - self.f if self.q is None else self.q
        if q > n:
            raise ConfigError(f"MultiKrum: q={q} exceeds the number of inputs n={n}")
        scores = _krum_scores(_distances_from_gram(gram_matrix(x)), neighbours)
        chosen = np.lexsort((np.arange(n), scores))[:q]
        if w is not None:
            wq = w[chosen]
            total = float(np.add.reduce(wq))
            if total > 0.0:
                return _combine(x, chosen, wq / total)
        return _combine(x, chosen, None, float(q))


# --- MDA -------------------------------------------------------------------------------------------------------


def _popcount(mask: int) -> int:
    return mask.bit_count()


def _vertex_covers(adj: list[int], alive: int, budget: int) -> Iterator[int]:
    """Yield vertex covers (bitmasks) of size ``<= budget`` of the graph ``adj`` restricted to ``alive``.

    Every minimal cover of size ``<= budget`` is yielded (branching on a maximum-degree vertex ``v``: a cover
    holds ``v`` or all of ``N(v)``; a vertex of degree ``> budget`` is forced). Parameterised complexity
    ``O(2^budget · n²)``.
    """
    best_v, best_deg, edges2 = -1, 0, 0
    m = alive
    while m:
        low = m & -m
        v = low.bit_length() - 1
        m ^= low
        deg = _popcount(adj[v] & alive)
        edges2 += deg
        if deg > best_deg:
            best_v, best_deg = v, deg
    if best_deg == 0:
        yield 0
        return
    if budget == 0 or edges2 // 2 > budget * best_deg:
        return
    bit = 1 << best_v
    if best_deg > budget:
        for cover in _vertex_covers(adj, alive & ~bit, budget - 1):
            yield cover | bit
        return
    for cover in _vertex_covers(adj, alive & ~bit, budget - 1):
        yield cover | bit
    nbrs = adj[best_v] & alive
    for cover in _vertex_covers(adj, alive & ~nbrs & ~bit, budget - best_deg):
        yield cover | nbrs


def _far_graph(dist: np.ndarray, threshold: float) -> list[int]:
    n = dist.shape[0]
    far = dist > threshold
    weights = 1 << np.arange(n, dtype=object)
    return [int(np.sum(weights[far[i]])) if far[i].any() else 0 for i in range(n)]


def _mda_subset(dist: np.ndarray, f: int) -> np.ndarray:
    """Indices (canonical order) of the size-``n − f`` subset of minimum diameter, ties by Σ pairwise D."""
    n = dist.shape[0]
    everyone = (1 << n) - 1
    if f == 0:
        return np.arange(n)
    upper = np.unique(dist[np.triu_indices(n, 1)])
    # Smallest threshold t such that dropping <= f vertices removes every pair farther than t.
    lo, hi = 0, upper.size - 1
    while lo < hi:
        mid = (lo + hi) // 2
        adj = _far_graph(dist, float(upper[mid]))
        if next(_vertex_covers(adj, everyone, f), None) is not None:
            hi = mid
        else:
            lo = mid + 1
    adj = _far_graph(dist, float(upper[lo]))
    best_key: tuple[float, tuple[int, ...]] | None = None
    best: list[int] = []
    seen: set[int] = set()
    for cover in _vertex_covers(adj, everyone, f):
        if cover in seen:
            continue
        seen.add(cover)
        keep = [i for i in range(n) if not (cover >> i) & 1]
        # A cover smaller than f (only with tied distances): drop the most spread-out remaining vertices.
        while len(keep) > n - f:
            sub = dist[np.ix_(keep, keep)]
            spread = np.add.reduce(sub, axis=1)
            keep.pop(int(np.argmax(spread)))
        sub = dist[np.ix_(keep, keep)]
        key = (float(np.add.reduce(np.add.reduce(sub, axis=1))), tuple(keep))
        if best_key is None or key < best_key:
            best_key, best = key, keep
    sub = dist[np.ix_(best, best)]
    spread = np.add.reduce(sub, axis=1)
    order = np.lexsort((np.asarray(best), spread))
    return np.asarray(best, dtype=np.intp)[order]


@register_aggregator("mda")
@dataclass(frozen=True, slots=True, kw_only=True)
class MDA(_Rule):
    """Minimum-diameter averaging (El-Mhamdi et al. 2021).

    .. math::

        \\mathrm{MDA}_f(x_1, \\dots, x_n) = \\frac{1}{n - f} \\sum_{i \\in S^*} x_i, \\quad
        S^* \\in \\arg\\min_{|S| = n - f} \\max_{i, j \\in S} \\|x_i - x_j\\|_2

    Exact, without enumerating the ``C(n, f)`` subsets (ByzFL does, which is infeasible at n = 50, f = 10):
    a subset of diameter ``≤ t`` exists iff the graph of pairs farther than ``t`` has a vertex cover of size
    ``≤ f``; the smallest such ``t`` is found by bisection over the pairwise distances, each test being a
    fixed-parameter vertex-cover search in ``O(2^f n²)`` (fast in practice: far-away inputs are forced into the
    cover). Several subsets can share the minimum diameter even for continuous inputs; the one with the smallest
    sum of pairwise squared distances is taken (ties by lowest indices), which keeps the rule a function of
    the input *set*.

    Parameters
    ----------
    f:
        ``2f < n`` at call time.
    """

    f: int
    name: ClassVar[str]
    bit_reproducible: ClassVar[bool] = True
    permutation_invariant: ClassVar[bool] = True
    supports_weights: ClassVar[bool] = False

    def __post_init__(self) -> None:
        check_int(self, "f")

    def _aggregate(self, x: np.ndarray, w: np.ndarray | None, rng: np.random.Generator) -> np.ndarray:
        _no_weights(self, w)
        n = x.shape[0]
        _check_f_bound(self, self.f, n)
        chosen = _mda_subset(_distances_from_gram(gram_matrix(x)), self.f)
        return _combine(x, chosen, None, float(chosen.size))
