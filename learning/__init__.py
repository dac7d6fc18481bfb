"""concilium's learning layer: everything about models and updates, nothing about the network.

One subpackage per concept, each with its public API in its ``__init__.py``:

==================== =====================================================================================
``models``           the papers' architectures by name; a model as one flat vector and as a ledger blob
``data``             datasets (generated, bundled, local files), public/validation splits, partitions
``training``         the local trainer, learning-rate schedules, the public-data evaluator (Sself)
``robust``           update validation, aggregators, pre-aggregators and chains, CMFL scoring
``attacks``          update-level and data-level Byzantine attacks
``availability``     client availability models (seeds 000, 001, 002)
``strategies``       coordinator-mode strategies, one module per paper (seeds 000, 001, 002, 004)
``reproducible``     reproducible mode: the process environment whose training bits are the same on any x86-64 CPU
==================== =====================================================================================

``_errors`` holds the exception tree, ``_rng`` the seeded generator tree (:class:`RngTree`) that the simulator and
a member's world derive every seed from, ``_config`` the configuration boundary's helpers (registries, spec strings,
field checks) that every subpackage shares. Everything takes explicit seeds or generators (no global RNG), and
names are resolved through explicit registries at the config boundary. Importing ``learning`` imports every
subpackage, so every registry is full. This module re-exports the names the other packages of concilium use.
"""

from learning import attacks, availability, data, models, reproducible, robust, strategies, training
from learning._errors import ConfigError, DataError, InvalidUpdateError, LearningError
from learning._config import parse_spec
from learning._rng import RngTree
from learning.attacks import parse_data_attack, parse_update_attack
from learning.availability import (
    DROPPED, AvailabilityContext, BoundedDropout, dropout_fraction, expected_active_fraction, parse_availability,
    resolve_candidates,
)
from learning.data import DATASETS, PARTITIONS, Dataset, DigitsSpec, IIDPartition, dataset_spec, partition_dataset
from learning.data import partition_spec, with_public
from learning.data import (
    LOCAL_FORMATS, DataContract, LocalData, LocalDataError, Preprocessing, dir_digest, load_local, write_local,
)
from learning.models import MLPSpec, blob_to_vector, model_spec, vector_to_blob
from learning.robust import distance_row, distance_rtol, kernel_threads, parse_aggregator, set_kernel_threads
from learning.strategies import (
    HOST_PARAM_KEYS, N_SAMPLES_CAP_DEFAULT, STRATEGIES, AggregateResult, ClientJob, ClientUpdate, FedAvg, LocalOutcome,
    PublicEval, RoundInfo, Strategy, b_hat_star, cap_sample_counts, hypergeom_sf, n_hat_th, probability_no_takeover,
    recommend, strategy_from_params,
)
from learning.training import (
    SCHEDULES, TRAINING_LOOPS, LocalTrainer, LocalTrainingConfig, LoopConfig, PublicScorer, TrainingPlan,
    register_training_loop, schedule_spec,
)

__all__ = [
    "attacks", "availability", "data", "models", "reproducible", "robust", "strategies", "training",
    "ConfigError", "DataError", "InvalidUpdateError", "LearningError", "RngTree", "parse_spec",
    "parse_data_attack", "parse_update_attack",
    "DROPPED", "AvailabilityContext", "BoundedDropout", "dropout_fraction", "expected_active_fraction",
    "parse_availability", "resolve_candidates",
    "DATASETS", "PARTITIONS", "Dataset", "DigitsSpec", "IIDPartition", "dataset_spec", "partition_dataset",
    "partition_spec", "with_public",
    "LOCAL_FORMATS", "DataContract", "LocalData", "LocalDataError", "Preprocessing", "dir_digest", "load_local",
    "write_local",
    "MLPSpec", "blob_to_vector", "model_spec", "vector_to_blob",
    "distance_row", "distance_rtol", "kernel_threads", "parse_aggregator", "set_kernel_threads",
    "HOST_PARAM_KEYS", "N_SAMPLES_CAP_DEFAULT", "STRATEGIES", "AggregateResult", "ClientJob", "ClientUpdate", "FedAvg",
    "LocalOutcome", "PublicEval", "RoundInfo", "Strategy", "b_hat_star", "cap_sample_counts", "hypergeom_sf",
    "n_hat_th", "probability_no_takeover", "recommend", "strategy_from_params",
    "SCHEDULES", "LocalTrainer", "LocalTrainingConfig", "PublicScorer", "schedule_spec",
    "TRAINING_LOOPS", "LoopConfig", "TrainingPlan", "register_training_loop",
]
