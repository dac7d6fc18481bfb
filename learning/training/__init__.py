"""Training: the local trainer, learning-rate schedules, and evaluation of a model vector.

* ``_local``      :class:`LocalTrainer`: K local SGD steps (or E epochs) from a global vector, with weight decay,
                  FedProx μ, momentum and a gradient correction (SCAFFOLD); :func:`evaluate` on a test split;
* ``_schedules``  ``schedule(fl_round) -> lr`` callables by name (:func:`schedule_spec`);
* ``_public``     :class:`PublicScorer`, the server's public-data evaluator of Sself (mean entropy and loss).
"""

from learning.training._local import (
    BatchTransform, EvalResult, LocalResult, LocalTrainer, LocalTrainingConfig, evaluate, minibatch_indices,
    resolve_device, train_local,
)
from learning.training._schedules import (
    ConstantLR, ExponentialLR, FEDRO_FEMNIST, InverseSqrtLR, InverseTimeLR, LRSchedule, PiecewiseLR, SCHEDULES,
    StepLR, register_schedule, schedule_spec,
)
from learning.training._public import (
    ENTROPY_IMPLS, MemoInfo, PublicScorer, check_entropy_impl, log_softmax64, prediction_entropy, public_scores,
)

__all__ = [
    "BatchTransform", "ConstantLR", "ENTROPY_IMPLS", "EvalResult", "ExponentialLR", "FEDRO_FEMNIST",
    "InverseSqrtLR", "InverseTimeLR", "LRSchedule", "LocalResult", "LocalTrainer", "LocalTrainingConfig",
    "MemoInfo", "PiecewiseLR", "PublicScorer", "SCHEDULES", "StepLR", "check_entropy_impl", "evaluate",
    "log_softmax64", "minibatch_indices", "prediction_entropy", "public_scores", "register_schedule",
    "resolve_device", "schedule_spec", "train_local",
]
