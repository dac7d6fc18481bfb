"""The plain PyTorch FedAvg loop of ``benchmarks/frameworks.py`` (the baseline): one model object, SGD, no framework.

    python benchmarks/_frameworks/plain.py WORKLOAD.npz OUT_DIR

Every round, each client loads the global model, takes its replayed minibatches with ``torch.optim.SGD``, and its
delta ``θ_i − θ`` is added to the global model with weight ``n_i / Σ n``. The sum runs in float64 over the
clients in concilium's aggregation order (peer id) and is rounded to float32 once, as concilium's FedAvg does,
so this loop reproduces concilium's global model bit for bit (``frameworks.py`` checks it round by round).
"""

from __future__ import annotations

import time

STARTED = time.perf_counter()

import sys  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from replay import Recorder, Workload, accuracy, get_flat, local_train, set_flat  # noqa: E402


def main(workload: str, out: str) -> None:
    rec = Recorder(STARTED)
    rec.mark("imported")
    torch.set_num_threads(1)
    w = Workload(workload)
    model = w.model()
    optimizer = torch.optim.SGD(model.parameters(), lr=w.lr)
    theta = w.theta0.copy()
    total = sum(w.n_samples)
    weights = [n / total for n in w.n_samples]
    rec.mark("setup")
    for t in range(1, w.rounds + 1):
        deltas: dict[int, np.ndarray] = {}
        for i in range(w.clients):
            set_flat(model, theta)
            x, y = w.client(i)
            local_train(model, optimizer, x, y, w.round_batches(t, i))
            deltas[i] = get_flat(model) - theta
        acc = np.zeros(theta.shape[0], dtype=np.float64)
        for i in w.agg_order:
            acc += weights[i] * deltas[i].astype(np.float64)
        theta = (theta.astype(np.float64) + acc).astype(np.float32)
        set_flat(model, theta)
        rec.record(model, accuracy(model, w.test_x, w.test_y))
    rec.mark("rounds")
    rec.write(out, implementation="plain", threads=torch.get_num_threads())


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    main(sys.argv[1], sys.argv[2])
