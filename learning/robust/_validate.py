"""Checks on update vectors before they reach an aggregator, an attack or the CMFL scorer.

Every update a peer sends is untrusted (docs/design.md, "Performance, reliability, security"): it is checked for its
type, shape, dtype and finiteness at the edge, and a bad one raises :class:`~learning._errors.InvalidUpdateError`
(a peer fault: the node excludes the update and, where attributable, records evidence). Aggregators run the same
checks on the whole ``(n, d)`` stack before they aggregate, so a NaN can never reach a sort or a digest.

The accepted layout is the one every aggregator works on:

* a 2-D ``numpy.ndarray`` of shape ``(n, d)``, ``n >= 1``, ``d >= 1`` (or a non-empty sequence of 1-D arrays of
  equal length and dtype, which is stacked);
* dtype ``float32`` (what models produce) or ``float64``, native byte order; anything else (ints, ``float16``,
  complex, object, big-endian) is rejected rather than silently converted;
* every entry finite, and ``float64`` entries bounded by :data:`FLOAT64_ABS_MAX` (so float64 norms never overflow);
* returned C-contiguous (a copy is made only when the input is not), so that every reduction runs in the same
  fixed order whatever the caller's memory layout was -- a precondition for bit-reproducible aggregation.

The finiteness test reads the stack once: a row whose sum (in its own precision, numpy's pairwise summation) is
finite contains no NaN and no infinity (``inf + finite = inf``, ``inf - inf = nan``, ``nan`` propagates). Only rows
whose sum is not finite -- a NaN/Inf, or a float overflow of huge but finite entries -- are inspected element by
element, so the common case costs one pass and no temporary of size ``n*d``.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from learning._errors import ConfigError, InvalidUpdateError

__all__ = [  # WORKERS and parallel_ranges are internal to learning/robust (read and set WORKERS through the functions)
    "FLOAT64_ABS_MAX",
    "FLOAT_DTYPES",
    "check_rng",
    "kernel_threads",
    "nonfinite_rows",
    "set_kernel_threads",
    "validate_update",
    "validate_updates",
    "validate_weights",
]

#: The accepted update dtypes (native byte order).
FLOAT_DTYPES: tuple[np.dtype, ...] = (np.dtype(np.float32), np.dtype(np.float64))

#: Largest accepted magnitude of a float64 entry (≈ 2.6e120): squared norms and Gram entries of any realistic size
#: then cannot overflow float64, so every rule returns a finite result for accepted input. float32 inputs need no
#: bound (their squares are < 1.2e77).
FLOAT64_ABS_MAX = 2.0**400


def _check_dtype(dtype: np.dtype, what: str) -> None:
    if dtype not in FLOAT_DTYPES:
        raise InvalidUpdateError(
            f"{what} has dtype {dtype.str!r} ({dtype}); expected native float32 or float64"
        )


def _as_array(updates: object, what: str) -> np.ndarray:
    if isinstance(updates, np.ndarray):
        return updates
    if isinstance(updates, Sequence) and not isinstance(updates, str | bytes):
        if len(updates) == 0:
            raise InvalidUpdateError(f"{what}: got an empty sequence; expected at least one update")
        rows = list(updates)
        first = rows[0]
        for i, row in enumerate(rows):
            if not isinstance(row, np.ndarray):
                raise InvalidUpdateError(f"{what}: update {i} is a {type(row).__name__}, not a numpy.ndarray")
            if row.ndim != 1:
                raise InvalidUpdateError(f"{what}: update {i} has shape {row.shape}; expected a 1-D vector")
            if row.dtype != first.dtype:
                raise InvalidUpdateError(
                    f"{what}: update {i} has dtype {row.dtype} but update 0 has {first.dtype}"
                )
            if row.shape != first.shape:
                raise InvalidUpdateError(
                    f"{what}: update {i} has length {row.shape[0]} but update 0 has length {first.shape[0]}"
                )
        _check_dtype(first.dtype, what)
        return np.stack(rows)
    raise InvalidUpdateError(
        f"{what}: expected a 2-D numpy.ndarray (n, d) or a sequence of 1-D arrays, got {type(updates).__name__}"
    )


# ---------------------------------------------------------------------------------------------------------------
# Deterministic data parallelism for the numeric kernels of learning/.
#
# A kernel is split into contiguous, *disjoint* index ranges (columns of the update stack, or rows) whose results
# land in disjoint parts of the output, and every output element is computed by exactly the same sequence of
# floating-point operations whatever the split: the bytes do not depend on the number of threads (the conformance
# tests compare 1 and several workers). numpy releases the GIL inside its loops, so on the 2-core target this
# roughly halves memory-bound passes. Reductions *across* a split dimension are never split.


def _available_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - non-Linux
        return os.cpu_count() or 1


#: Worker threads used by the column-parallel kernels (at most 4; 1 disables threading).
WORKERS = max(1, min(4, _available_cpus()))
_MIN_PARALLEL = 1 << 17  # elements below which a kernel runs in the calling thread
_PIECES_PER_WORKER = 4  # pieces of a parallel kernel per thread (dynamic balancing, see parallel_ranges)
_pool: ThreadPoolExecutor | None = None
_pool_pid = 0
_pool_lock = threading.Lock()


def kernel_threads() -> int:
    """Threads the column-parallel kernels use (:data:`WORKERS`)."""
    return WORKERS


def set_kernel_threads(threads: int) -> None:
    """Set the column-parallel kernels' thread count (1 = no threading). A speed knob only: the kernels split work
    on fixed block boundaries, so results do not depend on it."""
    global WORKERS
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise ConfigError(f"kernel threads must be an int >= 1, got {threads!r}")
    WORKERS = threads


def _executor() -> ThreadPoolExecutor:
    """The shared worker pool, created on first use and re-created in a forked child (whose threads are gone)."""
    global _pool, _pool_pid
    with _pool_lock:
        if _pool is None or _pool_pid != os.getpid():
            _pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="learning-kernel")
            _pool_pid = os.getpid()
        return _pool


def _after_fork_in_child() -> None:
    global _pool, _pool_lock
    _pool, _pool_lock = None, threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def parallel_ranges(work: Callable[[int, int], None], total: int, /, *, align: int = 1, cost: int = 0) -> None:
    """Run ``work(start, stop)`` over a partition of ``range(total)``, on up to :data:`WORKERS` threads.

    The range is cut into about ``_PIECES_PER_WORKER`` pieces per thread, with boundaries at multiples of
    ``align`` (so blocked kernels keep their block boundaries); the calling thread and the pool threads take
    pieces from a shared queue until none is left. A core that another process keeps busy therefore delays a
    kernel by about one piece rather than by half of the work (a static split waits for its slowest half).
    ``cost`` is the number of elements touched; small jobs run inline. ``work`` must write disjoint outputs and
    compute each output element independently of the partition (then neither the thread count nor which thread
    ran which piece changes the bytes). Exceptions propagate (the first one; the other threads stop taking pieces).
    """
    workers = WORKERS if max(cost, total) >= _MIN_PARALLEL else 1
    if workers <= 1:
        work(0, total)
        return
    step = -(-total // (workers * _PIECES_PER_WORKER))
    step = -(-step // align) * align
    pieces = [(j, min(total, j + step)) for j in range(0, total, max(step, 1))]
    if len(pieces) <= 1:
        work(0, total)
        return
    queue = iter(pieces)
    lock = threading.Lock()
    failed = False

    def run() -> None:
        nonlocal failed
        while True:
            with lock:
                piece = None if failed else next(queue, None)
            if piece is None:
                return
            try:
                work(*piece)
            except BaseException:
                failed = True
                raise

    futures = [_executor().submit(run) for _ in range(min(workers, len(pieces)) - 1)]
    try:
        run()
    finally:
        for fut in futures:
            fut.result()


def nonfinite_rows(updates: np.ndarray) -> np.ndarray:
    """Indices of the rows of a 2-D float array that contain a NaN or an infinity.

    Parameters
    ----------
    updates:
        ``(n, d)`` float array.

    Returns
    -------
    numpy.ndarray
        Sorted ``int64`` row indices, empty when every entry is finite.
    """
    n = updates.shape[0]
    sums = np.empty(n, dtype=updates.dtype)

    def row_sums(i0: int, i1: int) -> None:
        with np.errstate(over="ignore", invalid="ignore"):  # an overflowing sum only marks a row as a suspect
            np.add.reduce(updates[i0:i1], axis=1, out=sums[i0:i1])

    parallel_ranges(row_sums, n, cost=updates.size)
    suspects = np.flatnonzero(~np.isfinite(sums))
    if suspects.size == 0:
        return suspects.astype(np.int64)
    bad = [int(i) for i in suspects if not np.isfinite(updates[i]).all()]
    return np.asarray(bad, dtype=np.int64)


def validate_updates(
    updates: object, /, *, dim: int | None = None, what: str = "updates", check_finite: bool = True
) -> np.ndarray:
    """Validate a stack of updates and return it as a C-contiguous ``(n, d)`` float array.

    Parameters
    ----------
    updates:
        ``(n, d)`` ``numpy.ndarray`` or a non-empty sequence of 1-D arrays (stacked, which copies).
    dim:
        Expected ``d``; ``None`` accepts any ``d >= 1``.
    what:
        Name used in error messages.
    check_finite:
        ``False`` skips the NaN/Inf and magnitude checks; only for callers that fuse an equivalent check into
        their own pass over the data (the float32 mean) and call again with ``True`` to report a failure.

    Returns
    -------
    numpy.ndarray
        The input itself when it is already C-contiguous (never modified), otherwise a C-contiguous copy.

    Raises
    ------
    InvalidUpdateError
        Wrong type, shape, ``d`` or dtype, or a NaN/Inf (the message names the first bad row).
    """
    x = _as_array(updates, what)
    if x.ndim != 2:
        raise InvalidUpdateError(f"{what} has shape {x.shape}; expected a 2-D stack (n, d)")
    n, d = x.shape
    if n < 1 or d < 1:
        raise InvalidUpdateError(f"{what} has shape {x.shape}; expected n >= 1 updates of dimension d >= 1")
    if dim is not None and d != dim:
        raise InvalidUpdateError(f"{what} have dimension {d}; expected {dim}")
    _check_dtype(x.dtype, what)
    if not x.flags.c_contiguous:
        x = np.ascontiguousarray(x)
    if not check_finite:
        return x
    bad = nonfinite_rows(x)
    if bad.size:
        rows = ", ".join(str(int(i)) for i in bad[:10])
        more = f" (and {bad.size - 10} more)" if bad.size > 10 else ""
        raise InvalidUpdateError(f"{what}: update(s) {rows}{more} contain NaN or Inf")
    if x.dtype == np.float64 and max(float(x.max()), -float(x.min())) > FLOAT64_ABS_MAX:
        rows_big = np.flatnonzero(np.abs(x).max(axis=1) > FLOAT64_ABS_MAX)
        raise InvalidUpdateError(
            f"{what}: update(s) {', '.join(str(int(i)) for i in rows_big[:10])} have float64 entries beyond "
            f"±2^400 (FLOAT64_ABS_MAX)"
        )
    return x


def validate_update(
    update: object, /, *, dim: int | None = None, dtype: np.dtype | type | None = None, what: str = "update"
) -> np.ndarray:
    """Validate one update vector (the per-peer check at the edge).

    Parameters
    ----------
    update:
        1-D float array.
    dim:
        Expected length; ``None`` accepts any length ``>= 1``.
    dtype:
        Required dtype (``float32`` or ``float64``); ``None`` accepts either.
    what:
        Name used in error messages (e.g. the peer id).

    Returns
    -------
    numpy.ndarray
        The input (C-contiguous; a copy only if it was not).

    Raises
    ------
    InvalidUpdateError
        Not a 1-D array, wrong length or dtype, or not finite.
    """
    if not isinstance(update, np.ndarray):
        raise InvalidUpdateError(f"{what}: expected a numpy.ndarray, got {type(update).__name__}")
    if update.ndim != 1 or update.shape[0] < 1:
        raise InvalidUpdateError(f"{what} has shape {update.shape}; expected a non-empty 1-D vector")
    if dim is not None and update.shape[0] != dim:
        raise InvalidUpdateError(f"{what} has length {update.shape[0]}; expected {dim}")
    _check_dtype(update.dtype, what)
    if dtype is not None and update.dtype != np.dtype(dtype):
        raise InvalidUpdateError(f"{what} has dtype {update.dtype}; expected {np.dtype(dtype)}")
    if not update.flags.c_contiguous:
        update = np.ascontiguousarray(update)
    with np.errstate(over="ignore", invalid="ignore"):
        total = np.add.reduce(update)
    if not np.isfinite(total) and not np.isfinite(update).all():
        raise InvalidUpdateError(f"{what} contains NaN or Inf")
    if update.dtype == np.float64 and max(float(update.max()), -float(update.min())) > FLOAT64_ABS_MAX:
        raise InvalidUpdateError(f"{what} has float64 entries beyond ±2^400 (FLOAT64_ABS_MAX)")
    return update


def validate_weights(weights: object, n: int, /) -> np.ndarray:
    """Validate per-update weights (e.g. sample counts ``n_k``) and normalise them to sum to one.

    Parameters
    ----------
    weights:
        1-D array-like of length ``n``: finite, non-negative, with a positive sum.
    n:
        Number of updates.

    Returns
    -------
    numpy.ndarray
        ``float64`` weights ``w / sum(w)`` (a new array).

    Raises
    ------
    InvalidUpdateError
        Wrong length, negative, non-finite, or all zero.
    """
    w = np.asarray(weights)
    if w.ndim != 1 or w.shape[0] != n:
        raise InvalidUpdateError(f"weights have shape {w.shape}; expected ({n},)")
    if w.dtype.kind not in "iuf" or w.dtype == np.bool_:
        raise InvalidUpdateError(f"weights have dtype {w.dtype}; expected integers or floats")
    w = w.astype(np.float64)
    if not np.isfinite(w).all():
        raise InvalidUpdateError("weights contain NaN or Inf")
    if (w < 0).any():
        raise InvalidUpdateError("weights must be non-negative")
    total = float(np.add.reduce(w))
    if not total > 0.0:
        raise InvalidUpdateError("weights sum to zero")
    return w / total


def check_rng(rng: object) -> np.random.Generator:
    """Require an injected ``numpy.random.Generator`` (never the global numpy RNG)."""
    if not isinstance(rng, np.random.Generator):
        raise ConfigError(f"rng must be a numpy.random.Generator, got {type(rng).__name__}")
    return rng
