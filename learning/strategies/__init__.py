"""Server-side strategies of coordinator mode: one typed plug-in interface, one module per paper.

* ``_base``            the :class:`Strategy` interface (Flower's split: client ``local_update``, server
                       ``aggregate``), its registry and :func:`strategy_from_params`, and FedAvg;
* ``_unavailability``  unavailability spec: FedAvg/FedProx variants, MIFA, (bucketing) centered clipping and GM with memory;
* ``_mimic``           mimic spec: MimiC, SCAFFOLD, uniform FedAvg with a strategy-owned schedule;
* ``_stragglers``      sself spec: Sself, FedAsync, FedAvg with stragglers, norm thresholding;
* ``_fedro``           fedro spec: FedRo and its takeover, the choice of n̂ and b̂, robustness coefficients κ.

A new strategy: a frozen dataclass subclassing :class:`StrategyBase` with ``from_params`` and ``aggregate``,
decorated with ``@register_strategy("name")``; a scenario names it in ``[protocol] algorithm``.
"""

from learning.strategies._base import (
    AggregateResult, ClientJob, ClientUpdate, ClientUpload, FedAvg, HOST_PARAM_KEYS, LocalOutcome, LocalTrain,
    N_SAMPLES_CAP_DEFAULT, PublicEval, RoundInfo, STRATEGIES, STRATEGY_LR_KEYS, STRATEGY_LR_SCHEDULES, Strategy,
    StrategyBase, cap_sample_counts, check_order, register_strategy, strategy_from_params, strategy_lr_schedule,
)
from learning.strategies._unavailability import (
    BucketingCClip, BucketingGM, CClip, FedAvgV, FedProx, FedProxV, GM, MIFA, MemberTable, population_weights,
)
from learning.strategies._mimic import (
    FedAvgUniform, LR_SCHEDULES, MimiC, PeerTable, Scaffold, ScaffoldActiveMean, UNITS,
    decode_scaffold_client_state, mimic_corrections, scaffold_control,
)
from learning.strategies._stragglers import (
    FedAsync, FedAvgStragglers, GROUP_AGGREGATORS, NormThreshold, RFA, Sself, loss_weights, multi_krum_f,
    staleness_weights,
)
from learning.strategies._fedro import (
    FedRo, FedRoTakeover, Recommendation, b_hat_star, exact_b_hat, hypergeom_sf, kappa_geometric_median, kappa_krum,
    kappa_lower_bound, kappa_median, kappa_nnm, kappa_trimmed_mean, kl_bernoulli, n_hat_opt, n_hat_th,
    probability_no_takeover, recommend, robustness_ratio,
)

__all__ = [
    "AggregateResult", "BucketingCClip", "BucketingGM", "CClip", "ClientJob", "ClientUpdate", "ClientUpload",
    "FedAsync", "FedAvg", "FedAvgStragglers", "FedAvgUniform", "FedAvgV", "FedProx", "FedProxV", "FedRo",
    "FedRoTakeover", "GM", "GROUP_AGGREGATORS", "HOST_PARAM_KEYS", "LR_SCHEDULES", "LocalOutcome", "LocalTrain",
    "MIFA", "MemberTable", "MimiC", "N_SAMPLES_CAP_DEFAULT", "NormThreshold", "PeerTable", "PublicEval", "RFA", "Recommendation",
    "RoundInfo", "STRATEGIES", "STRATEGY_LR_KEYS", "STRATEGY_LR_SCHEDULES", "Scaffold", "ScaffoldActiveMean",
    "Sself", "Strategy", "StrategyBase", "UNITS", "b_hat_star", "cap_sample_counts", "check_order", "decode_scaffold_client_state",
    "exact_b_hat", "hypergeom_sf", "kappa_geometric_median", "kappa_krum", "kappa_lower_bound", "kappa_median",
    "kappa_nnm", "kappa_trimmed_mean", "kl_bernoulli", "loss_weights", "mimic_corrections", "multi_krum_f",
    "n_hat_opt", "n_hat_th", "population_weights", "probability_no_takeover", "recommend", "register_strategy",
    "robustness_ratio", "scaffold_control", "staleness_weights", "strategy_from_params", "strategy_lr_schedule",
]
