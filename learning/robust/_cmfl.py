"""CMFL committee scoring (Che et al., TPDS 2022; spec cmfl spec §2.2, §2.8.6, §7.8) as pure functions.

Committee member ``c`` holds its own reference update ``r_c`` and scores every training client ``k`` by the squared
distance of eq. (7):

.. math:: d_{ck} = \\|\\Delta_k - r_c\\|_2^2, \\qquad P^c_k = 1 / d_{ck}

and the final score of eq. (8) is the harmonic mean of the members' scores, i.e. the reciprocal of the mean
distance; the hardened variant (cmfl spec §2.8.6) uses the median distance instead:

.. math:: P_k = \\frac{C}{\\sum_{c} d_{ck}} \\quad\\text{(eq. 8)}, \\qquad
          P^{\\mathrm{med}}_k = \\frac{1}{\\mathrm{median}_c \\, d_{ck}}

Higher score = closer to the committee (cmfl spec §8 item 1). Distances, not reciprocals, are what members exchange
(§8 item 5), and every reciprocal is floored: ``P = C / max(Σ_c d, floor)``.

How the layers split the work (docs/design.md, "A round, committee mode"): member ``c`` computes **its own row**
``d_c = (d_{c1}, …, d_{cn})`` with :func:`distance_row` and signs it; the ``consensus`` layer receives the signed rows
as plain numbers, puts the agreed rows in the proposal and combines them itself (eq. 8 or the median, selection,
election) -- ``consensus`` never imports ``learning``. :func:`cmfl_scores` and :func:`cmfl_scores_median` are the
reference implementation of that combination (for the simulator, tests and audits); :func:`distance_matrix` stacks
the rows of a whole committee for simulation, and :func:`cmfl_scores_centroid` is the fast exact identity of §2.2
(not bit-identical to eq. 8; use it for simulation, never for digests).

All arithmetic is float64 in numpy's own loops (fixed order, no BLAS): a distance row is bit-reproducible for the
same stack of updates on the same numpy build and CPU; :func:`distance_rtol` bounds what another order of summation
can change (the audit's recheck of a signed row, ``node.reexec``).
Non-finite updates are rejected with :class:`~learning._errors.InvalidUpdateError` before any distance is computed
(cmfl spec §7.8 item 10).
"""

from __future__ import annotations

import math

import numpy as np

from ledger import CMFL_DISTANCE_FLOOR
from learning._errors import ConfigError, InvalidUpdateError
from learning.robust._validate import validate_update, validate_updates

__all__ = [
    "DISTANCE_FLOOR",
    "cmfl_scores",
    "cmfl_scores_centroid",
    "cmfl_scores_median",
    "distance_matrix",
    "distance_row",
    "distance_rtol",
    "member_scores",
]

DISTANCE_FLOOR = CMFL_DISTANCE_FLOOR
"""Floor on the distance sum (or median) before the reciprocal: ``P_k = C / max(Σ_c d_ck, DISTANCE_FLOOR)``; the one
definition is ``ledger.CMFL_DISTANCE_FLOOR`` (``consensus.DISTANCE_FLOOR`` is the same object; why ``1e-300``: there)."""

_BLOCK = 32768


def distance_row(reference: np.ndarray, updates: np.ndarray, /) -> np.ndarray:
    """Eq. (7) distances of one committee member: ``d_k = ‖Δ_k − r‖²`` for every training client ``k``.

    Computed directly on the differences in float64 (no Gram-matrix cancellation), in column blocks.

    Parameters
    ----------
    reference:
        The member's own update ``r`` (``d,``).
    updates:
        The training clients' updates ``Δ`` (``n, d``), in the agreed client order.

    Returns
    -------
    numpy.ndarray
        ``(n,)`` float64.
    """
    u = validate_updates(updates)
    r = validate_update(reference, dim=u.shape[1], what="reference")
    n, d = u.shape
    out = np.zeros(n, dtype=np.float64)
    for j0 in range(0, d, _BLOCK):
        diff = u[:, j0 : j0 + _BLOCK].astype(np.float64) - r[j0 : j0 + _BLOCK].astype(np.float64)
        out += np.einsum("kj,kj->k", diff, diff)
    return out


def distance_rtol(dim: int, /) -> float:
    """How far apart two honest computations of one eq. (7) distance over ``dim`` coordinates can be, relative to the
    larger: ``(dim + 1) · 2⁻⁵²``.

    Every term ``(Δ_kj − r_j)²`` is computed from float32 inputs in float64 with correctly rounded operations, so it
    has the same bits on every CPU; only the order in which :func:`distance_row` sums the ``dim`` non-negative terms
    may differ between numpy builds and CPUs (their SIMD widths), and, past one column block (32,768 coordinates),
    with the other updates stacked beside it (numpy's einsum buffers the reduction by the stack's shape: the
    measured differences are about 1e-14 relative). Any order's sum is within ``(dim − 1) · 2⁻⁵³`` of
    the exact one, relative, so two orders are within twice that. The audit (``node.reexec``) accepts a signed
    distance within this of its own recomputation: on the CPU that computed it, the bits are equal; a lie smaller
    than this (about 1e-12 relative for 5,000 coordinates) cannot change a ranking except between clients tied to
    that precision.

    Examples
    --------
    >>> distance_rtol(4810) < 1.1e-12
    True
    """
    if dim < 1:
        raise ConfigError(f"dim must be >= 1, got {dim}")
    return (dim + 1) * 2.0**-52


def distance_matrix(references: np.ndarray, updates: np.ndarray, /) -> np.ndarray:
    """Eq. (7) for a whole committee: ``D[c, k] = ‖Δ_k − r_c‖²``, one :func:`distance_row` per member.

    Parameters
    ----------
    references:
        ``(C, d)`` committee references, in the agreed member order.
    updates:
        ``(n, d)`` training-client updates.

    Returns
    -------
    numpy.ndarray
        ``(C, n)`` float64; row ``c`` equals ``distance_row(references[c], updates)`` bit for bit.
    """
    refs = validate_updates(references, what="references")
    u = validate_updates(updates)
    if refs.shape[1] != u.shape[1]:
        raise InvalidUpdateError(f"references have dimension {refs.shape[1]}, updates {u.shape[1]}")
    return np.stack([distance_row(refs[c], u) for c in range(refs.shape[0])])


def _check_distances(distances: np.ndarray) -> np.ndarray:
    dist = np.asarray(distances)
    if dist.ndim != 2 or dist.shape[0] < 1 or dist.shape[1] < 1:
        raise ConfigError(f"distances must be a (C, n) matrix with C, n >= 1, got shape {dist.shape}")
    if dist.dtype.kind != "f":
        raise ConfigError(f"distances must be floats, got {dist.dtype}")
    dist = dist.astype(np.float64, copy=False)
    if not np.isfinite(dist).all() or (dist < 0).any():
        raise InvalidUpdateError("distances must be finite and non-negative")
    return dist


def member_scores(distances: np.ndarray, /, *, floor: float = DISTANCE_FLOOR) -> np.ndarray:
    """Eq. (7) scores ``P^c_k = 1 / max(d_ck, floor)`` (same shape as ``distances``)."""
    dist = _check_distances(np.atleast_2d(distances))
    return (1.0 / np.maximum(dist, floor)).reshape(np.shape(distances))


def cmfl_scores(distances: np.ndarray, /, *, floor: float = DISTANCE_FLOOR) -> np.ndarray:
    """Eq. (8): ``P_k = C / max(Σ_c d_ck, floor)`` -- the reciprocal of the mean squared distance.

    Parameters
    ----------
    distances:
        ``(C, n)`` agreed distance rows, in any member order: each sum is ``math.fsum`` (exactly rounded), the same
        bits as ``consensus.combine_scores(method="mean")``.
    floor:
        Lower bound on ``Σ_c d_ck`` (identical updates give ``Σ = 0``; cmfl spec §8 item 5); see
        :data:`DISTANCE_FLOOR`.

    Returns
    -------
    numpy.ndarray
        ``(n,)`` float64 scores; higher = closer to the committee.
    """
    dist = _check_distances(distances)
    total = np.array([math.fsum(column) for column in dist.T.tolist()], dtype=np.float64)
    return dist.shape[0] / np.maximum(total, floor)


def cmfl_scores_median(distances: np.ndarray, /, *, floor: float = DISTANCE_FLOOR) -> np.ndarray:
    """Median-of-distances hardening (cmfl spec §2.8.6): ``P_k = 1 / max(median_c d_ck, floor)``.

    With an even committee size the median is the mean of the two middle distances, ``a/2 + b/2`` (no overflow;
    the same bits as ``consensus.combine_scores(method="median")``). A minority (< C/2) of members
    reporting arbitrary rows cannot move any score outside the range of the honest members' distances, unlike eq. (8)
    where one crafted reference places the centroid anywhere.
    """
    dist = _check_distances(distances)
    s = np.sort(dist, axis=0)
    c = s.shape[0]
    med = s[c // 2] if c % 2 else s[c // 2 - 1] / 2 + s[c // 2] / 2
    return 1.0 / np.maximum(med, floor)


def cmfl_scores_centroid(references: np.ndarray, updates: np.ndarray, /, *, floor: float = DISTANCE_FLOOR) -> np.ndarray:
    """Eq. (8) through the exact centroid identity of cmfl spec §2.2.

    .. math:: \\frac{1}{C} \\sum_c \\|\\Delta_k - r_c\\|^2 = \\|\\Delta_k - \\bar r\\|^2 + V, \\qquad
              \\bar r = \\frac{1}{C} \\sum_c r_c, \\quad V = \\frac{1}{C} \\sum_c \\|r_c - \\bar r\\|^2

    so ``P_k = 1 / (‖Δ_k − r̄‖² + V)``: ``O((n + C) d)`` instead of ``O(n C d)``, equal to :func:`cmfl_scores` up to
    rounding (use it in simulation, not where digests are compared). Ranking by ``P_k`` is ranking by distance to
    the committee centroid.
    """
    refs = validate_updates(references, what="references")
    u = validate_updates(updates)
    if refs.shape[1] != u.shape[1]:
        raise InvalidUpdateError(f"references have dimension {refs.shape[1]}, updates {u.shape[1]}")
    centroid = np.add.reduce(refs, axis=0, dtype=np.float64) / refs.shape[0]
    spread = float(np.add.reduce(distance_row(centroid, refs))) / refs.shape[0]
    return 1.0 / np.maximum(distance_row(centroid, u) + spread, floor)
