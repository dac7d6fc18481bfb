"""What every implementation of ``benchmarks/frameworks.py`` shares: the exported workload, the model class, one
client's local training, the accuracy and the result files.

It needs numpy and torch only, because it runs inside each peer's own environment (Flower's, pfl's) as well as the
project's; it imports nothing of concilium. The workload file (``workload.npz``, written by
``benchmarks/frameworks.py``) holds what concilium's simulator uses for the same scenario: the train/test split,
the client partition (index arrays into the train split), the initial weights θ₀ (concilium's flat parameter order)
and, for every (round, client, local step), the minibatch indices (into the client's own data) that concilium's
seeded sampler draws. Every implementation replays exactly these, so they all do the same training.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

FORMAT = 1
"""Version of the ``workload.npz`` layout (a key of the file)."""


class DigitsMLP(nn.Module):
    """The digits MLP of W1: ``Linear(64, 64) → ReLU → Linear(64, 10)``. Its parameters, in ``parameters()``
    order (``fc1.weight``, ``fc1.bias``, ``fc2.weight``, ``fc2.bias``), have the layout of concilium's flat vector
    for ``mlp`` with ``hidden = [64]``."""

    def __init__(self, in_features: int = 64, hidden: int = 64, num_classes: int = 10) -> None:
        super().__init__()
        self.fc1 = nn.Linear(in_features, hidden)
        self.fc2 = nn.Linear(hidden, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.relu(self.fc1(x)))


class Workload:
    """A loaded ``workload.npz`` (read with ``allow_pickle=False``)."""

    def __init__(self, path: str | Path) -> None:
        with np.load(path, allow_pickle=False) as z:
            if int(z["format"]) != FORMAT:
                raise ValueError(f"{path}: workload format {int(z['format'])}, expected {FORMAT}")
            self.train_x = torch.from_numpy(np.ascontiguousarray(z["train_x"], dtype=np.float32))
            self.train_y = torch.from_numpy(np.ascontiguousarray(z["train_y"], dtype=np.int64))
            self.test_x = torch.from_numpy(np.ascontiguousarray(z["test_x"], dtype=np.float32))
            self.test_y = torch.from_numpy(np.ascontiguousarray(z["test_y"], dtype=np.int64))
            offsets = z["client_offsets"].astype(np.int64)
            index = z["client_index"].astype(np.int64)
            self.client_index = [index[offsets[i] : offsets[i + 1]] for i in range(len(offsets) - 1)]
            self.theta0 = np.ascontiguousarray(z["theta0"], dtype=np.float32)
            self.batches = np.ascontiguousarray(z["batches"], dtype=np.int64)  # (rounds, clients, steps, batch)
            self.agg_order = [int(i) for i in z["agg_order"]]
            self.lr = float(z["lr"])
            self.hidden = int(z["hidden"])
            self.num_classes = int(z["num_classes"])
        self.rounds, self.clients, self.steps, self.batch_size = self.batches.shape
        self.n_samples = [len(ix) for ix in self.client_index]
        self._client_cache: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        if sorted(self.agg_order) != list(range(self.clients)) or len(self.client_index) != self.clients:
            raise ValueError(f"{path}: inconsistent clients")

    def client(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Client ``i``'s local data ``(x, y)`` (rows of the train split, in partition order)."""
        got = self._client_cache.get(i)
        if got is None:
            ix = torch.from_numpy(self.client_index[i])
            got = self._client_cache[i] = (self.train_x[ix], self.train_y[ix])
        return got

    def round_batches(self, fl_round: int, i: int) -> torch.Tensor:
        """The ``(steps, batch)`` minibatch indices into client ``i``'s data in round ``fl_round`` (from 1)."""
        return torch.from_numpy(self.batches[fl_round - 1, i])

    def model(self) -> DigitsMLP:
        """A fresh :class:`DigitsMLP` holding θ₀."""
        m = DigitsMLP(self.train_x.shape[1], self.hidden, self.num_classes)
        set_flat(m, self.theta0)
        return m


def set_flat(model: nn.Module, vector: np.ndarray | torch.Tensor) -> None:
    """Copy a flat float32 vector (concilium's layout) into ``model``'s parameters."""
    v = torch.as_tensor(vector, dtype=torch.float32)
    offset = 0
    with torch.no_grad():
        for p in model.parameters():
            n = p.numel()
            p.copy_(v[offset : offset + n].view_as(p))
            offset += n
    if offset != v.numel():
        raise ValueError(f"vector of {v.numel()} values for a model of {offset}")


def get_flat(model: nn.Module) -> np.ndarray:
    """The model's parameters as one flat float32 vector (a copy)."""
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()]).numpy().copy()


def local_train(model: nn.Module, optimizer: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor,
                batches: torch.Tensor) -> None:
    """SGD on the given minibatches: for each row of indices, cross-entropy, backward, ``optimizer.step()``."""
    model.train()
    for idx in batches:
        optimizer.zero_grad()
        F.cross_entropy(model(x[idx]), y[idx]).backward()
        optimizer.step()


@torch.no_grad()
def accuracy(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    """Top-1 accuracy on ``(x, y)``, as concilium's evaluation computes it (correct / n)."""
    model.eval()
    correct = int((model(x).argmax(dim=1) == y).sum())
    model.train()
    return correct / len(y)


class Recorder:
    """Per-round accuracy and global model of one run, plus a few in-process time stamps; written as
    ``result.json`` and ``models.npy`` in the output folder."""

    def __init__(self, started: float) -> None:
        self.marks: dict[str, float] = {"start": started}
        self.accuracies: list[float] = []
        self.models: list[np.ndarray] = []

    def mark(self, name: str) -> None:
        self.marks[name] = time.perf_counter()

    def record(self, model: nn.Module, acc: float) -> None:
        self.accuracies.append(acc)
        self.models.append(get_flat(model))

    def write(self, out: str | Path, **extra: Any) -> None:
        out = Path(out)
        out.mkdir(parents=True, exist_ok=True)
        np.save(out / "models.npy", np.stack(self.models).astype(np.float32), allow_pickle=False)
        t = self.marks
        body = {
            "accuracies": self.accuracies,
            "seconds": {k: round(v - t["start"], 6) for k, v in t.items() if k != "start"},
            "torch": torch.__version__,
            "numpy": np.__version__,
            **extra,
        }
        (out / "result.json").write_text(json.dumps(body, indent=1) + "\n", encoding="utf-8")
