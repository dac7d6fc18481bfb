"""Training: the local trainer, learning-rate schedules, and evaluation of a model vector.

* ``_local``      :class:`LocalTrainer`: K local steps (or E epochs) from a global vector, SGD (momentum) or
                  Adam/AdamW, with weight decay, FedProx μ, a gradient correction (SCAFFOLD), gradient clipping and
                  label smoothing, or an app's own loop (:func:`register_training_loop`); :func:`evaluate`;
* ``_plan``       :class:`TrainingPlan`: the local training a genesis pins (``protocol.params["training"]``);
* ``_schedules``  ``schedule(fl_round) -> lr`` callables by name (:func:`schedule_spec`);
* ``_public``     :class:`PublicScorer`, the server's public-data evaluator of Sself (mean entropy and loss).
"""

from learning.training._local import (
    OPTIMIZERS, TRAINING_LOOPS, BatchTransform, EvalResult, LocalResult, LocalTrainer, LocalTrainingConfig, LoopConfig,
    TrainingLoop, evaluate, minibatch_indices, register_training_loop, resolve_device, train_local,
)
from learning.training._plan import TrainingPlan
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
    "LoopConfig", "MemoInfo", "OPTIMIZERS", "PiecewiseLR", "PublicScorer", "SCHEDULES", "StepLR", "TRAINING_LOOPS",
    "TrainingLoop", "TrainingPlan", "check_entropy_impl", "evaluate", "log_softmax64", "minibatch_indices",
    "prediction_entropy", "public_scores", "register_schedule", "register_training_loop", "resolve_device",
    "schedule_spec", "train_local",
]
