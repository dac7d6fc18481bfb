"""Training jobs on a Ray cluster: ``concilium sim run SCENARIO --executor ray [--ray-address ADDR]``.

A local training job is a pure function of its ``_JobSpec`` and the scenario (``sim._jobs.JobHost.run_job``,
see ``sim/_workers.py``), so it may run anywhere that can rebuild the scenario: this module hands the jobs
the simulator asks for to *trainers*, Ray actors spread over a cluster, and the ledger is the one the local
executor writes, bit for bit (same seeds, same single-threaded CPU kernels, same inputs). Only the
protocol - every node core, the network, the ledger writer - stays in this process.

What crosses the cluster, and how often:

* **The scenario** (a few kB), once per trainer, with its creation: the trainer builds the scenario's job
  host from it once, when it starts (``sim._jobs.JobHost(scenario)``: the very object the simulation trains
  with in-process; the world - data generated or shipped with a dependency, partition, model, strategy - and
  the data attacks, a pure function of the scenario) and keeps it for every job; no member's data is ever
  shipped. No node core, network or ledger state is built: a trainer's set-up is the world's (the members'
  keys and the genesis, which the world derives, included), a fraction of the ``sim run`` process's at scale
  (``sim/_jobs.py``).
* **The model**, once per round: a round's jobs start from the same global model, which goes into Ray's
  object store once (``ray.put``; one copy per machine, read in place by the trainers there); the jobs carry
  its reference. :attr:`RayPool.model_puts` counts the transfers.
* **A job**: its spec without the model (seeds, round, learning rate, the strategy's server and client
  states); **a result**: the upload, the sample count and the client's new state.

Each trainer asks Ray for one CPU (and, for a scenario that trains on CUDA, ``gpu_fraction`` of a GPU,
so that several trainers share a device) and sets PyTorch's thread counts inside each job. A job goes to
the trainer with the fewest unfinished jobs; a trainer lost with its machine is restarted by Ray and its
jobs are retried (they are pure). There is no speculation and no stealing (``sim/_workers.py``): the
simulator asks for a round's jobs at once, and they run on the cluster side by side.

``import ray`` happens only here, and only when the Ray executor is chosen.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import re
import signal
import threading
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from node.apps import AppBundle
    from sim._engine import Simulation
    from sim._jobs import _JobSpec
    from sim._scenario import Scenario

__all__ = ["GPU_FRACTION_DEFAULT", "RayClusterError", "RayExecutor", "RayPool"]

GPU_FRACTION_DEFAULT = 0.25
"""The share of a GPU each trainer asks for when the scenario trains on CUDA (four trainers per device)."""


class RayClusterError(RuntimeError):
    """Ray is not installed, or the cluster cannot be reached; nothing was trained."""


def _cause(e: BaseException) -> str:
    """One line for a lost trainer: the error its creation or its process died of (the last ``Name: message`` line
    of the traceback Ray reports), else Ray's first line."""
    text = str(e)
    found = [m.group(1) for m in re.finditer(r"^\s*((?:[A-Za-z_][\w.]*)?(?:Error|Exception|Exit)\b: .+)$", text, re.M)]
    line = found[-1] if found else (text.splitlines() or [type(e).__name__])[0]
    return re.sub(r"\x1b\[[0-9;]*m", "", line).strip()[:300]


class _Trainer:
    """A Ray actor's state: the scenario's job host, built once from the scenario (its data, trainer, strategy
    and data attacks; nothing of it is sent), running the jobs it is given on ``threads`` threads. ``app``: the
    scenario's app, its files sent along (``node.apps.AppBundle``): the trainer loads it (its models, datasets,
    training loops) from a copy on its own machine, checked against the digest the genesis pins, before it
    builds the world."""

    def __init__(self, scenario: Scenario, threads: int, app: AppBundle | None = None) -> None:
        from sim._jobs import JobHost, limit_threads  # noqa: PLC0415 - in the actor's process

        limit_threads(threads)
        if app is not None:
            scenario = dataclasses.replace(scenario, app=app.install().source)
        if scenario.training.device != "cpu":
            # Ray shows an actor the GPU(s) it was given as device 0 (CUDA_VISIBLE_DEVICES): cuda:N is a
            # local choice of the machine that runs `sim run` (never in the genesis), so it means cuda here
            scenario = dataclasses.replace(scenario, training=dataclasses.replace(scenario.training, device="cuda"))
        self.threads = threads
        self.host = JobHost(scenario)

    def run(self, spec: _JobSpec, model: np.ndarray) -> tuple[np.ndarray, int, bytes | None]:
        import torch  # noqa: PLC0415

        # inside each task: a job never oversubscribes its CPU share (BLAS was limited at the trainer's start)
        torch.set_num_threads(self.threads)
        # the model is read in place from the object store (read-only): the job gets its own writable copy,
        # as a forked worker gets it from its pipe
        return self.host.run_job(dataclasses.replace(spec, model=np.array(model)))


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class RayExecutor:
    """The Ray executor's settings; ``Simulation(..., executor=RayExecutor(...))`` calls it at ``run()``.

    ``address``: the cluster to join (``HEAD:6379``; None: the ``RAY_ADDRESS`` environment variable, else a
    Ray instance started here, or the one this process already started with ``ray.init``).
    ``gpu_fraction``: the share of a GPU each trainer asks for when the scenario trains on CUDA.
    ``trainers``: actors to start (None: one per CPU of the cluster, or per GPU share for CUDA, at most one
    per member)."""

    address: str | None = None
    gpu_fraction: float = GPU_FRACTION_DEFAULT
    trainers: int | None = None
    stats: dict[str, int] = dataclasses.field(default_factory=dict, compare=False)
    """Filled when a run's pool closes: ``trainers``, ``jobs`` (handed out), ``rounds`` (whose jobs were handed
    out), ``models`` (put into the object store: one per such round)."""

    def __post_init__(self) -> None:
        if not 0.0 < self.gpu_fraction <= 1.0:
            raise ValueError(f"the GPU fraction per trainer must be in (0, 1], got {self.gpu_fraction}")
        if self.trainers is not None and self.trainers < 1:
            raise ValueError(f"trainers must be at least 1, got {self.trainers}")
        import importlib.util  # noqa: PLC0415

        if importlib.util.find_spec("ray") is None:  # said before anything runs (ray itself is imported at run())
            raise RayClusterError("Ray is not installed (pip install 'concilium[ray]')")

    def __call__(self, host: Simulation) -> RayPool:
        return RayPool(host, self)


class _RayJob:
    """A submitted job; ``get()`` returns ``(upload, n_samples, client_state)`` once its trainer is done."""

    __slots__ = ("_pool", "_ref", "_trainer", "_value", "spec", "speculative")

    def __init__(self, pool: RayPool, spec: _JobSpec, ref: Any, trainer: int) -> None:
        self._pool = pool
        self._ref = ref
        self._trainer = trainer
        self._value: Any = None
        self.spec = spec
        self.speculative = False

    @property
    def done(self) -> bool:
        return self._ref is None

    def get(self) -> Any:
        if self._ref is not None:
            self._value = self._pool._fetch(self)
        return self._value


class RayPool:
    """The training pool of a simulation whose jobs run on Ray (the interface of ``sim._workers.TrainingPool``
    the simulator uses: ``submit``, ``speculate``, ``discard``, ``close``, ``active``, ``completed``)."""

    active = False
    """Not a local worker pool: the simulator neither speculates nor previews models for it."""

    def __init__(self, host: Simulation, config: RayExecutor) -> None:
        try:
            import ray  # noqa: PLC0415 - only when the Ray executor is chosen
        except ImportError:
            raise RayClusterError("Ray is not installed (pip install 'concilium[ray]')") from None
        self._ray = ray
        self.host = host
        self.hits = self.misses = self.stolen = 0
        self.completed = 0
        """Jobs whose result was fetched."""
        self.model_puts = 0
        """Models put into the object store (one per round: a round's jobs share their model)."""
        self.submitted = 0
        """Jobs handed to the trainers."""
        self.rounds: set[int] = set()
        """The rounds whose jobs were handed out."""
        self._last_model: tuple[np.ndarray, Any] | None = None
        self._pending: list[list[Any]] = []  # per trainer: refs of its jobs not known to be finished
        self._trainers: list[Any] = []
        self.trainers = 0
        """Ray actors started for the run."""
        self._config = config
        self._owns_ray = False

    def _start(self) -> None:
        """Join (or start) Ray and start the trainers: at the first job, so that the simulator's helpers (the
        ledger writer) are forked before Ray's threads exist."""
        ray, config = self._ray, self._config
        if not ray.is_initialized():
            # ray.init installs a SIGTERM handler that exits at once: the simulator's own handlers (a clean stop
            # between two events, every decided block written) are put back
            saved = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)} \
                if threading.current_thread() is threading.main_thread() else {}
            try:
                ray.init(address=config.address, include_dashboard=False, log_to_driver=False,
                         logging_level=logging.ERROR)
            except (ConnectionError, RuntimeError, ValueError) as e:
                where = config.address or "a new local Ray instance"
                hint = ""
                if config.address:  # Ray logs a refused token and then says only that it could not connect
                    hint = (" (is the head up at that address, and is this machine's token, RAY_AUTH_TOKEN or"
                            " ~/.ray/auth_token, the head's?)")
                raise RayClusterError(
                    f"cannot reach the Ray cluster at {where}: {str(e).splitlines()[0][:200]}{hint}") from None
            finally:
                for s, h in saved.items():
                    if h is not None:
                        signal.signal(s, h)
            self._owns_ray = True
        try:
            self._start_trainers(config)
        except BaseException:
            self.close()
            raise

    def _start_trainers(self, config: RayExecutor) -> None:
        ray = self._ray
        sc = self.host.sc
        cuda = sc.training.device != "cpu"
        res = ray.cluster_resources()
        cpus = max(1, int(res.get("CPU", 1)))
        if config.trainers is not None:
            n = config.trainers
        elif cuda:
            n = max(1, min(cpus, int(res.get("GPU", 0) / config.gpu_fraction)))
        else:
            n = cpus
        n = max(1, min(n, sc.members))
        options: dict[str, Any] = {"num_cpus": 1, "max_restarts": 3, "max_task_retries": 3}
        if cuda:
            options["num_gpus"] = config.gpu_fraction
        if sc.training.reproducible:  # each trainer's process starts in the mode (its kernels are chosen then)
            from learning import reproducible  # noqa: PLC0415

            options["runtime_env"] = {"env_vars": reproducible.variables()}
        actor = ray.remote(**options)(_Trainer)
        app = None
        if sc.app:  # its files go along (the cluster's machines need not hold them), checked there against the pin
            from node.apps import bundle_app, load_app  # noqa: PLC0415

            app = bundle_app(load_app(sc.app))
        # every trainer rebuilds the world from the scenario (a few kB, and the app's files: inlined in its
        # creation, so that a restarted trainer finds them there)
        self._trainers = [actor.remote(sc, 1, app) for _ in range(n)]
        self.trainers = n
        self._pending = [[] for _ in range(n)]

    # --- handing out -------------------------------------------------------------------------------

    def _model_ref(self, model: np.ndarray) -> Any:
        last = self._last_model
        if last is not None and (model is last[0] or (model.shape == last[0].shape and model.dtype == last[0].dtype
                                                      and np.array_equal(model, last[0]))):
            return last[1]
        ref = self._ray.put(model)
        self.model_puts += 1
        self._last_model = (model, ref)
        return ref

    def _least_busy(self) -> int:
        pending = [ref for refs in self._pending for ref in refs]
        if pending:
            ready, _ = self._ray.wait(pending, num_returns=len(pending), timeout=0, fetch_local=False)
            if ready:
                done = set(ready)
                self._pending = [[r for r in refs if r not in done] for refs in self._pending]
        return min(range(len(self._pending)), key=lambda i: len(self._pending[i]))

    def submit(self, spec: _JobSpec) -> _RayJob:
        """Start a job on the least busy trainer (its model from the object store)."""
        if not self._trainers:
            self._start()
        model_ref = self._model_ref(spec.model)
        t = self._least_busy()
        ref = self._trainers[t].run.remote(dataclasses.replace(spec, model=np.empty(0, dtype=spec.model.dtype)), model_ref)
        self._pending[t].append(ref)
        self.submitted += 1
        self.rounds.add(spec.fl_round)
        return _RayJob(self, spec, ref, t)

    def speculate(self, specs: list[_JobSpec]) -> None:
        """No speculation on Ray (the simulator does not ask: ``active`` is False)."""

    def discard(self, keep: Any) -> None:
        """Nothing speculated, nothing to discard."""

    # --- results -----------------------------------------------------------------------------------

    def _fetch(self, job: _RayJob) -> Any:
        ray = self._ray
        try:
            delta, n, state = ray.get(job._ref)
        except ray.exceptions.RayTaskError as e:
            cause = getattr(e, "cause", None)
            if isinstance(cause, BaseException):
                raise cause from None  # the job's own error, as training in-process would have raised it
            raise
        except ray.exceptions.RayActorError as e:
            raise RayClusterError(f"Ray trainer {job._trainer} was lost: {_cause(e)}") from None
        refs = self._pending[job._trainer]
        if job._ref in refs:
            refs.remove(job._ref)
        job._ref = None
        self.completed += 1
        # a writable copy of our own: the object store's buffer is read-only and is released with the ref
        return np.array(delta), int(n), state

    def close(self) -> None:
        """Stop the trainers; shut Ray down if this pool started it (a cluster joined stays up)."""
        ray = self._ray
        for ref in (r for refs in self._pending for r in refs):  # jobs the run never needed
            with contextlib.suppress(Exception):
                ray.cancel(ref)
        for actor in self._trainers:
            with contextlib.suppress(Exception):  # already gone with its machine: nothing to stop
                ray.kill(actor)
        self._config.stats.update(trainers=self.trainers, jobs=self.submitted, rounds=len(self.rounds), models=self.model_puts)
        self._trainers = []
        self._pending = []
        self._last_model = None
        if self._owns_ray:
            self._owns_ray = False
            ray.shutdown()
