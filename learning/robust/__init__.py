"""Robust aggregation: update validation, aggregators, pre-aggregators and CMFL scoring, on ``(n, d)`` stacks.

* ``_validate``        the checks every untrusted update passes (shape, dtype, finiteness) before any arithmetic;
* ``_aggregators``     mean, coordinate-wise median, trimmed mean, MeaMed, geometric median, centered clipping,
                       Krum, Multi-Krum, MDA: ByzFL-shaped callables ``rule(updates, rng=rng)``;
* ``_preaggregators``  NNM, bucketing, static clipping, ARC, and chains ``"nnm(f=2) > trimmed_mean(f=2)"``
                       (:func:`parse_aggregator` is the config boundary);
* ``_cmfl``            CMFL committee scoring (cmfl spec eq. 7/8 and the median-of-distances variant).

A new aggregator: a frozen dataclass with the :class:`Aggregator` attributes and ``__call__``, decorated with
``@register_aggregator("name")`` (README, "Add your own strategy, aggregator or attack").
"""

from learning.robust._validate import (
    FLOAT64_ABS_MAX, FLOAT_DTYPES, check_rng, kernel_threads, nonfinite_rows, set_kernel_threads, validate_update,
    validate_updates, validate_weights,
)
from learning.robust._aggregators import (
    AGGREGATORS, Aggregator, CenteredClipping, CoordinateWiseMedian, GeometricMedian, Krum, MDA, MeaMed, Mean,
    MultiKrum, TrimmedMean, gram_matrix, pairwise_sq_distances, register_aggregator, row_sq_norms,
)
from learning.robust._preaggregators import (
    ARC, Bucketing, Chain, NNM, PRE_AGGREGATORS, PreAggregator, StaticClipping, format_aggregator, parse_aggregator,
    register_preaggregator,
)
from learning.robust._cmfl import (
    DISTANCE_FLOOR, cmfl_scores, cmfl_scores_centroid, cmfl_scores_median, distance_matrix, distance_row,
    distance_rtol, member_scores,
)

__all__ = [
    "AGGREGATORS", "ARC", "Aggregator", "Bucketing", "CenteredClipping", "Chain", "CoordinateWiseMedian",
    "DISTANCE_FLOOR", "FLOAT64_ABS_MAX", "FLOAT_DTYPES", "GeometricMedian", "Krum", "MDA", "MeaMed", "Mean",
    "MultiKrum", "NNM", "PRE_AGGREGATORS", "PreAggregator", "StaticClipping", "TrimmedMean", "check_rng",
    "cmfl_scores", "cmfl_scores_centroid", "cmfl_scores_median", "distance_matrix", "distance_row",
    "distance_rtol", "format_aggregator", "gram_matrix", "kernel_threads", "member_scores", "nonfinite_rows",
    "pairwise_sq_distances",
    "parse_aggregator", "register_aggregator", "register_preaggregator", "row_sq_norms", "set_kernel_threads",
    "validate_update", "validate_updates", "validate_weights",
]
