"""A scenario's local training jobs without its protocol: :class:`JobHost`.

A job is a pure function of its :class:`_JobSpec` and the scenario, and what that function reads is small: the
world (``sim._world.World``: data, partition, model, trainer, the strategy's client side) and the adversary's
data attacks (a Byzantine client's poisoned local data, or the backdoor applied to each of its minibatches).
The simulator (``sim._engine.Simulation``) trains through one job host, in-process and in its forked workers;
a Ray trainer (``sim/_ray.py``) builds one from the scenario alone, so it pays for the world and the attacks
and not for the node cores, the network and the bookkeeping of a whole simulation: for ``scale_10k.toml``
(10,000 members) 0.9 s of CPU and 15 MiB instead of 2.4 s and 116 MiB (at 20 members the world is nearly all
of the set-up either way). Both hold the same data, seeded the same way: a job gives the same bits on either.

What a job does *not* need stays with the simulator: which client the adversary controls in which round
(the spec says whether a job is poisoned), the update attacks and the backdoor's boost (applied to a job's
result), the evaluation sets.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from learning import Dataset, parse_data_attack
from sim._scenario import Scenario
from sim._world import World, byzantine_indices

__all__ = ["JobHost", "limit_threads"]


@dataclass(frozen=True, slots=True)
class _JobSpec:
    """Everything one local training job depends on (sent to a training worker as is)."""

    index: int
    fl_round: int
    purpose: str
    model: np.ndarray
    server_state: bytes | None
    client_state: bytes | None
    lr: float
    strategy_side: bool
    poisoned: bool = False


def limit_threads(n: int) -> None:
    """Run PyTorch's kernels and the BLAS libraries' (numpy, through ``threadpoolctl``) on ``n`` threads in this
    process: small kernels are many times slower oversubscribed (the simulator's aggregation on 2 cores), and a
    trainer sharing a machine with others gets one CPU from Ray."""
    torch.set_num_threads(n)
    try:
        from threadpoolctl import threadpool_limits  # noqa: PLC0415 (a core dependency)

        threadpool_limits(n)
    except ImportError:  # pragma: no cover
        pass


class JobHost:
    """Runs a scenario's local training jobs (:meth:`run_job`); built from the scenario alone.

    ``client_data[i]`` is member ``i``'s data as its jobs read it: on the trainer's device, and, for a fixed
    Byzantine client attacked from the first round (``adversary.from_round <= 1``), already poisoned (so that
    the availability model and every job see the poisoned copy, as a Byzantine node's own data would be).
    ``poisoned_data`` holds the poisoned copy of every client a whole-dataset data attack may control (the
    fixed Byzantine set, or every member for a per-round adversary), read by the jobs whose spec says
    ``poisoned``; ``batch_attack`` is a per-batch data attack (``Backdoor``) or None."""

    __slots__ = ("batch_attack", "client_data", "poisoned_data", "world")

    def __init__(self, scenario: Scenario) -> None:
        world = World.build(scenario)
        self.world = world
        self.client_data = world.client_data  # made per member when asked (sim._world.MemberData)
        self.poisoned_data: dict[int, Dataset] = {}
        self.batch_attack: Any = None
        adv = scenario.adversary
        da = parse_data_attack(adv.data_attack) if adv.data_attack else None
        if da is not None and getattr(da, "per_batch", False):
            self.batch_attack = da
        elif da is not None:
            victims = range(scenario.members) if adv.per_round else byzantine_indices(scenario, world.genesis)
            for i in victims:
                self.poisoned_data[i] = world.poisoned_copy(i, da)
            if not adv.per_round and adv.from_round <= 1:  # poisoned for good (else per job, from from_round)
                for i, d in self.poisoned_data.items():
                    self.client_data[i] = d
        if world.trainer.device.type != "cpu":  # data lives where the model trains (minibatch indices stay CPU-seeded)
            self.client_data = self.client_data.to(world.trainer.device)
            self.poisoned_data = {i: d.to(world.trainer.device) for i, d in self.poisoned_data.items()}

    def local_train(self, i: int, fl_round: int, purpose: str, poisoned: bool = False) -> Any:
        """The ``LocalTrain`` of one job: real PyTorch training on member ``i``'s data (its poisoned copy, or
        each minibatch backdoored, when ``poisoned``), seeded per job."""
        data = self.poisoned_data[i] if poisoned and i in self.poisoned_data else self.client_data[i]
        backdoor = self.world.backdoor(self.batch_attack, i, fl_round) if poisoned and self.batch_attack is not None else None
        return self.world.local_train(i, fl_round, purpose, data, backdoor)

    def run_job(self, spec: _JobSpec) -> tuple[np.ndarray, int, bytes | None]:
        """One local job, a pure function of ``spec`` and the scenario: ``(upload, n_samples, client_state)``."""
        return self.world.run_job(
            self.local_train(spec.index, spec.fl_round, spec.purpose, spec.poisoned),
            fl_round=spec.fl_round, strategy_side=spec.strategy_side, model=spec.model,
            server_state=spec.server_state, client_state=spec.client_state, lr=spec.lr,
        )
