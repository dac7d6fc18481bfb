"""pfl-research's simulator (``pfl``, one process) on the workload of ``benchmarks/frameworks.py``.

    python benchmarks/_frameworks/pfl_run.py WORKLOAD.npz OUT_DIR

Run with the pfl environment that ``frameworks.py`` builds (pfl 0.6.0, torch 2.13.0). pfl's own
``FederatedAveraging`` with a ``SimulatedBackend`` (its ``SumAggregator``) and ``WeightByDatapoints``: each user's
model difference is weighted by its local dataset size, summed and averaged in float32, and applied by the central
optimizer (``torch.optim.SGD``, lr 1.0), pfl's FedAvg recipe. Local training is pfl's
(``PyTorchModel.do_multiple_epochs_of`` with ``torch.optim.SGD``). Users: id ``(t − 1)·M + i`` is client ``i``
in round ``t``, drawn in order by pfl's ``MinimizeReuseUserSampler``, a cohort of M per round; its dataset is the
client's data whose ``iter(batch_size)`` yields the replayed minibatches of that round (its length, hence its
weight, is the client's dataset size). A callback measures the test accuracy after every central iteration.

Left as pfl does it: in central iteration 0 (``iteration % evaluation_frequency == 0``) pfl also evaluates every
user's model on its local data before and after local training (2·M small evaluations, round 1 only).
"""

from __future__ import annotations

import time

STARTED = time.perf_counter()

import sys  # noqa: E402
from pathlib import Path  # noqa: E402

import torch  # noqa: E402
from torch.nn import functional as F  # noqa: E402

from pfl.aggregate.simulate import SimulatedBackend  # noqa: E402
from pfl.aggregate.weighting import WeightByDatapoints  # noqa: E402
from pfl.algorithm import FederatedAveraging, NNAlgorithmParams  # noqa: E402
from pfl.callback.base import TrainingProcessCallback  # noqa: E402
from pfl.data.dataset import Dataset  # noqa: E402
from pfl.data.federated_dataset import FederatedDataset  # noqa: E402
from pfl.data.sampling import MinimizeReuseUserSampler  # noqa: E402
from pfl.hyperparam import NNEvalHyperParams, NNTrainHyperParams  # noqa: E402
from pfl.metrics import Metrics, Weighted  # noqa: E402
from pfl.model.pytorch import PyTorchModel  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from replay import DigitsMLP, Recorder, Workload, accuracy, set_flat  # noqa: E402

REC = Recorder(STARTED)


class PflDigitsMLP(DigitsMLP):
    """The shared model class plus the ``loss`` and ``metrics`` methods pfl's PyTorchModel requires."""

    def loss(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(self(x), y)

    @torch.no_grad()
    def metrics(self, x: torch.Tensor, y: torch.Tensor) -> dict[str, Weighted]:
        out = self(x)
        return {"loss": Weighted(float(F.cross_entropy(out, y, reduction="sum")), len(y)),
                "accuracy": Weighted(float((out.argmax(1) == y).sum()), len(y))}


class ReplayDataset(Dataset):
    """A client's data; iterating it in batches of the training batch size yields that round's replayed
    minibatches (any other batch size: pfl's own slicing, used by its evaluation)."""

    def __init__(self, x: torch.Tensor, y: torch.Tensor, batches: torch.Tensor, user_id: int) -> None:
        super().__init__(raw_data=(x, y), user_id=str(user_id))
        self._replay = batches

    def iter(self, batch_size: int | None):  # noqa: A003, ANN201 - pfl's signature
        if batch_size != self._replay.shape[1]:
            yield from super().iter(batch_size)
            return
        x, y = self.raw_data
        for idx in self._replay:
            yield x[idx], y[idx]


class Accuracy(TrainingProcessCallback):
    def __init__(self, w: Workload) -> None:
        self.w = w

    def after_central_iteration(self, aggregate_metrics: Metrics, model: PyTorchModel, *,
                                central_iteration: int) -> tuple[bool, Metrics]:
        m = model.pytorch_model
        REC.record(m, accuracy(m, self.w.test_x, self.w.test_y))
        return False, Metrics()


def run(workload: str, out: str) -> None:
    REC.mark("imported")
    torch.set_num_threads(1)
    w = Workload(workload)
    m = w.clients

    def make_user(user_id: int) -> ReplayDataset:
        fl_round, i = divmod(int(user_id), m)
        x, y = w.client(i)
        return ReplayDataset(x, y, w.round_batches(fl_round + 1, i), user_id)

    users = list(range(w.rounds * m))
    train_data = FederatedDataset(make_user, MinimizeReuseUserSampler(users))
    module = PflDigitsMLP(w.train_x.shape[1], w.hidden, w.num_classes)
    set_flat(module, w.theta0)
    model = PyTorchModel(model=module, local_optimizer_create=torch.optim.SGD,
                         central_optimizer=torch.optim.SGD(module.parameters(), lr=1.0))
    backend = SimulatedBackend(training_data=train_data, val_data=None, postprocessors=[WeightByDatapoints()])
    REC.mark("setup")
    FederatedAveraging().run(
        algorithm_params=NNAlgorithmParams(central_num_iterations=w.rounds, evaluation_frequency=w.rounds + 1,
                                           train_cohort_size=m, val_cohort_size=0),
        backend=backend, model=model,
        model_train_params=NNTrainHyperParams(local_learning_rate=w.lr, local_num_epochs=1,
                                              local_batch_size=w.batch_size),
        model_eval_params=NNEvalHyperParams(local_batch_size=None),
        callbacks=[Accuracy(w)],
    )
    REC.mark("rounds")
    if len(REC.accuracies) != w.rounds:
        raise SystemExit(f"pfl: {len(REC.accuracies)} evaluated rounds of {w.rounds}")
    REC.write(out, implementation="pfl")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    run(sys.argv[1], sys.argv[2])
