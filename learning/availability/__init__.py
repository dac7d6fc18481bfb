"""Client availability models: who of a round's sampled clients responds, and how late.

* ``_base``        the :class:`Availability` protocol, its registry and ``always`` (:func:`parse_availability`);
* ``_eps``         unavailability spec: the ε-adversarial, budgeted omission of sampled clients;
* ``_dropout``     mimic spec: bounded, static, static heterogeneous, time-varying and class-correlated dropout;
* ``_stragglers``  sself spec: stragglers late by ``d`` rounds, and the round-sampling rules of that paper.

A new model: a class with ``from_params(params, ctx)`` and ``outcome(fl_round, sampled, rng=...)``, decorated with
``@register_availability("name")``; a scenario names it in ``[adversary] availability``.
"""

from learning.availability._base import (
    AVAILABILITY, AlwaysAvailable, Availability, AvailabilityContext, DROPPED, parse_availability,
    register_availability,
)
from learning.availability._eps import (
    EpsAdversarial, candidate_set_from_shadow, cumulative_gradient_norm, dropout_fraction, eps_adversarial_drops,
    resolve_candidates,
)
from learning.availability._dropout import (
    BoundedDropout, ClassCorrelatedDropout, StaticDropout, StaticHetDropout, TimeVaryingDropout,
    expected_active_fraction, trial_generator,
)
from learning.availability._stragglers import (
    DELAY_MODES, Stragglers, adversaries_per_round, adversary_set, round_time_units, sample_round,
)

__all__ = [
    "AVAILABILITY", "AlwaysAvailable", "Availability", "AvailabilityContext", "BoundedDropout",
    "ClassCorrelatedDropout", "DELAY_MODES", "DROPPED", "EpsAdversarial", "StaticDropout", "StaticHetDropout",
    "Stragglers", "TimeVaryingDropout", "adversaries_per_round", "adversary_set", "candidate_set_from_shadow",
    "cumulative_gradient_norm", "dropout_fraction", "eps_adversarial_drops", "expected_active_fraction",
    "parse_availability", "register_availability", "resolve_candidates", "round_time_units", "sample_round",
    "trial_generator",
]
