"""A member's world (docs/design.md, "A member's world"): its own dataset from local files, its model, its trainer, its
device, the strategy's client side and its seeds, built from the genesis plus the member's own config.

The genesis fixes what every member must agree on, under two reserved ``protocol.params`` keys (both among
``learning``'s ``HOST_PARAM_KEYS``, so no strategy sees them):

* ``training`` (:data:`TRAINING_KEY`): the :class:`learning.TrainingPlan`: optimizer, loss, schedule, steps or
  epochs, batch size, clipping, an app's training loop, and ``seed``, the root of the members' local randomness;
* ``data`` (:data:`DATA_KEY`): the :class:`learning.DataContract`: one sample's input shape, the number of
  classes, the dtype and the preprocessing every member applies to its raw files.

A member's own config (``node.toml``'s ``[data]``) names its files (:class:`learning.LocalData`); they are read
here, preprocessed as the contract says and checked against it, and a file that does not fit refuses the start
with one line naming the file, the field, what was expected and what was found. No member ever builds, reads or
receives another member's data, and nothing here imports the simulator: ``sim.World`` composes many members from
the same pieces (:func:`job_train`, :func:`run_job`, :func:`initial_model`).

The randomness of member ``i`` (member ``i`` is named ``node-i`` in a scenario's genesis) comes from
``RngTree(plan.seed)``, with the simulator's labels (``("train", i, round, purpose)``, ``("data-attack", i)``, ...),
so a testnet of a scenario trains exactly as ``sim run`` does when each node holds that scenario's partition.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ledger import Genesis, sha256
from learning import (
    ClientJob,
    DataContract,
    Dataset,
    LearningError,
    LocalData,
    LocalOutcome,
    LocalTrainer,
    PublicEval,
    RngTree,
    Strategy,
    TrainingPlan,
    blob_to_vector,
    load_local,
    model_spec,
    strategy_from_params,
    vector_to_blob,
)
from node._errors import ConfigFileError
from node.config import DEVICE_PATTERN

__all__ = [
    "DATA_KEY",
    "OMNISCIENT_ATTACKS",
    "TRAINING_KEY",
    "MemberTrainer",
    "MemberWorld",
    "attack_update",
    "backdoor",
    "check_role",
    "check_rounds_plan",
    "network_adversary",
    "poisoned_copy",
    "public_evaluator",
    "data_contract_of",
    "initial_model",
    "job_train",
    "member_index_of",
    "read_initial_model",
    "resolve_device",
    "run_job",
    "training_plan_of",
    "write_initial_model",
]

TRAINING_KEY = "training"
"""The reserved ``protocol.params`` key of the agreed :class:`learning.TrainingPlan`."""
DATA_KEY = "data"
"""The reserved ``protocol.params`` key of the :class:`learning.DataContract` every member's data must fit."""

INITIAL_MODEL_BYTES_MAX = 1 << 34
"""The largest initial-model file a node reads (16 GiB: far above any model of the zoo)."""


def _pinned(genesis: Genesis, key: str, kind: Any, what: str, name: str) -> Any:
    raw = genesis.protocol.params.get(key)
    if raw is None:
        raise ConfigFileError(f"{what}: protocol.params.{key}: expected {name}, found none (a genesis written before "
                              "concilium 0.1 pinned the training: write it again with this version)")
    try:
        return kind.from_params(raw, f"{what}: protocol.params.{key}")
    except LearningError as e:
        raise ConfigFileError(str(e)) from None


def training_plan_of(genesis: Genesis, *, what: str = "genesis") -> TrainingPlan:
    """The training every member of ``genesis`` runs; a genesis without one (written before the genesis pinned it) is
    refused."""
    return _pinned(genesis, TRAINING_KEY, TrainingPlan, what, "the agreed training plan")  # type: ignore[no-any-return]


def data_contract_of(genesis: Genesis, *, what: str = "genesis") -> DataContract:
    """What every member's data must be (shape, classes, dtype, preprocessing) on ``genesis``."""
    return _pinned(genesis, DATA_KEY, DataContract, what, "the data contract")  # type: ignore[no-any-return]


def public_evaluator(strategy: Strategy | None, trainer: LocalTrainer, public_data: Dataset | None, *,
                     missing: str) -> PublicEval | None:
    """The public-split evaluator ``strategy`` scores models with (Sself, FedAsync's entropy filter), or None when
    it needs none; without a public split, ``ValueError(missing)``. The simulator's world and a member's build
    the same one from the same split."""
    if strategy is None or not strategy.needs_public:
        return None
    if public_data is None:
        raise ValueError(missing)
    from learning import PublicScorer  # noqa: PLC0415 (only Sself-like runs need it)

    return PublicScorer.from_trainer(trainer, public_data, entropy_impl=getattr(strategy, "entropy_impl", "exact"))


def check_rounds_plan(genesis: Genesis, *, what: str = "genesis", public: PublicEval | None = None) -> None:
    """Refuse, with one line, a genesis whose first round cannot be planned (a committee-mode genesis asking for
    more training clients than its non-committee members, say): what every node would otherwise find only once
    started, each with a traceback. ``testnet init|local`` run it before writing anything, ``node start`` before it
    joins. ``public``: the public-split evaluator of a strategy that scores on one (Sself)."""
    from consensus import CommitteeConfigError  # noqa: PLC0415
    from ledger import ChainContext, genesis_state  # noqa: PLC0415
    from node._rounds import RoundRules  # noqa: PLC0415

    try:
        ctx = ChainContext(genesis)
        RoundRules(genesis, ctx=ctx, public=public).plan(genesis_state(ctx))
    except (CommitteeConfigError, LearningError, ValueError) as e:
        raise ConfigFileError(f"{what}: its first round cannot be planned: {e}") from None


def member_index_of(genesis: Genesis, peer: str) -> int:
    """Member ``peer``'s index: ``i`` for a member named ``node-i`` (a scenario's genesis, a testnet's), else its
    position among the members sorted by peer id."""
    for pos, m in enumerate(genesis.members):
        if m.peer_id == peer:
            name = m.name.removeprefix("node-")
            return int(name) if m.name.startswith("node-") and name.isdigit() else pos
    raise ConfigFileError(f"peer {peer} is not a member of chain {genesis.chain_id}")


def initial_model(trainer: LocalTrainer, rng: RngTree) -> np.ndarray:
    """θ_0 as float32 numpy: the trainer's model initialised from ``rng.child("model-init")`` (the simulator's
    derivation, so a scenario's genesis digest is re-derived by each of its members)."""
    theta = trainer.initial_parameters(seed=rng.child("model-init").seed64() % 2**31)
    return theta.detach().cpu().numpy().astype(np.float32)


def write_initial_model(path: str | os.PathLike[str], theta0: np.ndarray) -> None:
    """θ_0 as a canonical vector blob (``learning.vector_to_blob``: its SHA-256 is the genesis' model digest)."""
    Path(path).write_bytes(vector_to_blob(theta0))


def read_initial_model(path: str | os.PathLike[str], genesis: Genesis, *, dim: int) -> np.ndarray:
    """The genesis' initial model from a blob file, checked: ``dim`` finite float32 values whose blob hashes to
    the genesis' model digest."""
    p = Path(path)
    try:
        size = p.stat().st_size
        if size > INITIAL_MODEL_BYTES_MAX:
            raise ConfigFileError(f"{p}: {size} bytes: expected an initial model of {dim} float32 values")
        blob = p.read_bytes()
    except OSError as e:
        raise ConfigFileError(f"{p}: cannot read the initial model ({e.strerror or e})") from None
    if sha256(blob) != genesis.model.digest:
        raise ConfigFileError(f"{p}: digest: expected the genesis model {genesis.model.digest.hex()[:16]}, "
                              f"found {sha256(blob).hex()[:16]}")
    try:
        return np.array(blob_to_vector(blob, dim=dim, what=str(p)), dtype=np.float32)
    except LearningError as e:
        raise ConfigFileError(f"{p}: {e}") from None


def job_train(
    trainer: LocalTrainer,
    data: Dataset,
    generator: Callable[[], torch.Generator],
    batch_transform: Callable[[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]] | None = None,
) -> Callable[..., LocalOutcome]:
    """The strategies' ``LocalTrain`` for one job: real PyTorch training of ``trainer``'s model on ``data``, with a
    fresh ``generator()`` per call (the job's seeded stream)."""

    def train(
        model: np.ndarray,
        *,
        lr: float,
        gradient_correction: np.ndarray | None = None,
        momentum_buffer: np.ndarray | None = None,
        prox_mu: float | None = None,
    ) -> LocalOutcome:
        dev = trainer.device
        res = trainer.train(
            torch.from_numpy(np.array(model, dtype=np.float32)).to(dev),
            data,
            lr=lr,
            generator=generator(),
            momentum_buffer=None if momentum_buffer is None else torch.from_numpy(np.array(momentum_buffer)).to(dev),
            gradient_correction=None if gradient_correction is None else torch.from_numpy(
                np.array(gradient_correction, dtype=np.float32)).to(dev),
            prox_mu=prox_mu,
            batch_transform=batch_transform,
        )
        mb = res.momentum_buffer
        return LocalOutcome(
            delta=res.delta.detach().cpu().numpy().astype(np.float32),
            n_samples=int(res.num_samples),
            steps=int(res.steps),
            lr=float(res.lr),
            loss=float(res.loss_mean),
            momentum_buffer=None if mb is None else mb.detach().cpu().numpy().astype(np.float32),
        )

    return train


def run_job(
    strategy: Strategy | None,
    schedule: Callable[[int], float],
    train: Callable[..., LocalOutcome],
    *,
    fl_round: int,
    strategy_side: bool,
    model: np.ndarray,
    server_state: bytes | None,
    client_state: bytes | None,
    lr: float | None = None,
) -> tuple[np.ndarray, int, bytes | None]:
    """One local job: ``(upload, n_samples, client_state)``: the strategy's client side (an update in coordinator
    mode) or plain local training, at ``lr`` (default: the schedule's rate for ``fl_round``)."""
    lr = float(schedule(fl_round - 1)) if lr is None else lr
    if strategy_side:
        assert strategy is not None
        up = strategy.local_update(
            ClientJob(fl_round=fl_round, model=model, server_state=server_state, client_state=client_state, lr=lr),
            train,
        )
        return np.ascontiguousarray(up.vector, dtype=np.float32), int(up.n_samples), up.client_state
    out = train(model, lr=lr)
    return out.delta, out.n_samples, None


@dataclass(slots=True)
class MemberWorld:
    """One member's world (see the module docstring). Build it with :meth:`build`."""

    genesis: Genesis
    peer: str
    index: int
    data: Dataset
    validation: Dataset | None
    public_data: Dataset | None
    contract: DataContract
    plan: TrainingPlan
    trainer: LocalTrainer
    schedule: Callable[[int], float]
    strategy: Strategy | None
    theta0: np.ndarray
    rng: RngTree
    sources: Mapping[str, str] = field(default_factory=dict)
    """What each split was read from (``train``, ``validation``, ``public``), for logs and errors."""

    @classmethod
    def build(
        cls,
        genesis: Genesis,
        peer: str,
        local: LocalData,
        *,
        device: str = "cpu",
        initial_model_file: str | os.PathLike[str] | None = None,
        public: LocalData | None = None,
        what: str = "genesis",
    ) -> MemberWorld:
        """Read this member's data and build its trainer from ``genesis``: refused (:class:`ConfigFileError`, one
        line) when the data does not fit the genesis' contract, the plan or the model cannot be built, or the
        initial model is not the genesis'. ``initial_model_file``: the genesis' θ_0 as a blob file; without one it
        is re-derived from the plan's seed (the scenario's derivation) and checked against the genesis digest."""
        plan = training_plan_of(genesis, what=what)
        contract = data_contract_of(genesis, what=what)
        index = member_index_of(genesis, peer)
        try:
            data, validation = load_local(local, contract, name=f"node-{index}")
        except LearningError as e:
            raise ConfigFileError(str(e)) from None
        if len(data) == 0:
            raise ConfigFileError(f"{local.path}: samples: expected at least 1 training sample, found 0")
        public_data = None
        if public is not None:
            try:
                public_data, _ = load_local(public, contract, name="public")
            except LearningError as e:
                raise ConfigFileError(str(e)) from None
        try:
            spec = model_spec(genesis.model.name, dict(genesis.model.params))
            trainer = plan.trainer(spec, device)
            schedule = plan.schedule()
        except (LearningError, ValueError) as e:
            raise ConfigFileError(f"{what}: {e}") from None
        rng = RngTree(plan.seed)
        dim = int(trainer.flat.vector.numel())
        if initial_model_file:
            theta0 = read_initial_model(initial_model_file, genesis, dim=dim)
        else:
            theta0 = initial_model(trainer, rng)
            if sha256(vector_to_blob(theta0)) != genesis.model.digest:
                raise ConfigFileError(
                    f"{what}: model.digest: expected {genesis.model.digest.hex()[:16]}, found "
                    f"{sha256(vector_to_blob(theta0)).hex()[:16]} when derived on this machine (give the genesis' "
                    "initial model file: initial_model = PATH in the node config)")
        p = genesis.protocol
        try:
            strategy = strategy_from_params(p.algorithm, dict(p.params)) if p.mode != "committee" else None
        except (LearningError, ValueError) as e:
            raise ConfigFileError(f"{what}: protocol.algorithm {p.algorithm!r}: {e}") from None
        if device != "cpu":
            data = data.to(device)
            validation = validation.to(device) if validation is not None else None
        sources = {"train": local.path}
        if isinstance(local.validation, str) and local.validation:
            sources["validation"] = local.validation
        if public is not None:
            sources["public"] = public.path
        return cls(genesis=genesis, peer=peer, index=index, data=data, validation=validation, public_data=public_data,
                   contract=contract, plan=plan, trainer=trainer, schedule=schedule, strategy=strategy, theta0=theta0,
                   rng=rng, sources=sources)

    def local_train(
        self,
        fl_round: int,
        purpose: str,
        data: Dataset | None = None,
        batch_transform: Callable[[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]] | None = None,
    ) -> Callable[..., LocalOutcome]:
        """The ``LocalTrain`` of this member's job of ``fl_round`` on its data (or ``data``), seeded by
        ``("train", index, fl_round, purpose)``."""
        rng = self.rng.child("train", self.index, fl_round, purpose)
        return job_train(self.trainer, self.data if data is None else data, rng.torch, batch_transform)

    def run_job(self, train: Callable[..., LocalOutcome], **kwargs: Any) -> tuple[np.ndarray, int, bytes | None]:
        return run_job(self.strategy, self.schedule, train, **kwargs)

    def evaluate(self, model: np.ndarray) -> dict[str, float] | None:
        """Accuracy and loss of ``model`` on this member's validation split (None without one)."""
        if self.validation is None or len(self.validation) == 0:
            return None
        res = self.trainer.evaluate(torch.from_numpy(np.array(model, dtype=np.float32)).to(self.trainer.device),
                                    self.validation)
        return {"accuracy": float(res.accuracy), "loss": float(res.loss), "samples": int(res.num_samples)}

    def public_eval(self) -> PublicEval | None:
        """The public-split evaluator the strategy scores models with, or None (:func:`public_evaluator`); a
        strategy that needs one refuses a member without a public split."""
        try:
            return public_evaluator(self.strategy, self.trainer, self.public_data, missing=(
                f"protocol.algorithm {self.genesis.protocol.algorithm!r} scores models on a public split: give it "
                "with [data] public = PATH in the node config"))
        except ValueError as e:
            raise ConfigFileError(str(e)) from None


OMNISCIENT_ATTACKS = ("alie", "ipm", "mimic")
"""Update attacks that see the round's honest updates (the others transform the attacker's own update)."""


def attack_update(attack: Any, honest: np.ndarray, *, rng: np.random.Generator, global_model: np.ndarray) -> np.ndarray:
    """A Byzantine client's upload: ``attack`` applied to the honest updates it sees (its own, or the round's
    for an omniscient attack), float32; the caller drops a non-finite result (nothing is sent)."""
    if getattr(attack, "needs_global_model", False):
        return np.asarray(attack(honest, rng=rng, global_model=global_model), dtype=np.float32)
    return np.asarray(attack(honest, rng=rng), dtype=np.float32)


def poisoned_copy(data: Dataset, attack: Any, rng: RngTree, index: int) -> Dataset:
    """Member ``index``'s data with a whole-dataset data attack applied, seeded by ``("data-attack", index)``: the
    same copy in the simulator and in a node."""
    x, y = attack.transform(data.x, data.y, rng=rng.child("data-attack", index).numpy())
    return Dataset(x=torch.as_tensor(x), y=torch.as_tensor(y), num_classes=data.num_classes, name=data.name)


def backdoor(attack: Any, rng: RngTree, index: int, fl_round: int) -> Callable[[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]:
    """The per-batch data attack of member ``index``'s job of ``fl_round`` (a ``batch_transform``), seeded by
    ``("data-attack", index, fl_round)``: the same in both drivers."""
    arng = rng.child("data-attack", index, fl_round).numpy()

    def transform(xb: torch.Tensor, yb: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return attack.transform(xb, yb, rng=arng)  # type: ignore[no-any-return]

    return transform


def check_role(role: Any) -> None:
    """Refuse what a real Byzantine process cannot do: an omniscient update attack reads the other clients'
    honest updates, which it never sees (simulator-only)."""
    if role is not None and role.attack and role.attack.split("(")[0].strip() in OMNISCIENT_ATTACKS:
        raise ConfigFileError(f"adversary.attack {role.attack!r} reads the honest clients' updates: simulator-only")


def network_adversary(genesis: Genesis, key: Any, faults: Sequence[Any], rng: RngTree) -> Any:
    """The faults (``node.config.FaultConfig``) as they apply to the node with ``key`` on ``genesis`` (a
    :class:`node.adversary.NodeAdversary`), or None without faults. Targets resolve as in the simulator:
    ``coordinator`` = the view-0 primary of each height, ``committee`` = the first member of the genesis
    committee, ``member:I`` = member ``I``; a corrupt proposal draws from ``rng.child("corrupt", peer, height)``
    (the simulator's generator)."""
    from ledger import genesis_committee  # noqa: PLC0415
    from node.adversary import Fault, FaultPlan, NodeAdversary  # noqa: PLC0415

    if not faults:
        return None
    index = {m.peer_id: member_index_of(genesis, m.peer_id) for m in genesis.members}
    by_index = {i: p for p, i in index.items()}
    committee = sorted(genesis_committee(genesis))
    plan = []
    for f in faults:
        if f.target == "coordinator":
            peer = None
        elif f.target == "committee":
            peer = committee[0]
        else:
            i = int(f.target[7:])
            if i not in by_index:
                raise ConfigFileError(f"adversary.faults: target member:{i}: expected one of the {len(by_index)} "
                                      f"members, found none")
            peer = by_index[i]
        plan.append(Fault(f.kind, peer, f.from_round, f.delay_ms, f.until_round, f.skew_ms, f.tries))
    return NodeAdversary(
        key=key, chain_id=genesis.chain_id, plan=FaultPlan(plan),
        rng_for=lambda peer, h: rng.child("corrupt", peer, h).numpy(),
        index_of=lambda peer: index.get(peer, 0),
    )


class MemberTrainer:
    """A node's local training (called from the runtime's training thread, one job at a time) on its own world.

    ``role`` (``node.config.AdversaryRole``, optional): this member plays a Byzantine client: from
    ``role.from_round`` on its updates carry the data attack (poisoned local data, or a backdoor in every minibatch
    and a boosted update), the update attack and the claimed sample count, seeded as the simulator seeds them.

    A strategy's client state (SCAFFOLD's control variate, ...) becomes the member's state once a block
    includes the upload that produced it (:meth:`on_decided`), as in the simulator. :meth:`evaluate` scores a
    committed model on the member's validation split (the runtime logs it and shows it in its status)."""

    def __init__(self, world: MemberWorld, role: Any = None) -> None:
        from learning import parse_data_attack, parse_update_attack  # noqa: PLC0415

        check_role(role)
        self.world = world
        self.index = world.index
        self.peer = world.peer
        self._client_state: bytes | None = None
        self._pending: dict[int, bytes | None] = {}
        self.byzantine = bool(role is not None and role.byzantine)
        self.from_round = role.from_round if role is not None else 1
        self.claimed_samples = role.n_samples if self.byzantine else 0
        try:
            self.update_attack = parse_update_attack(role.attack) if self.byzantine and role.attack else None
            da = parse_data_attack(role.data_attack) if self.byzantine and role.data_attack else None
        except (LearningError, ValueError) as e:
            raise ConfigFileError(f"adversary: {e}") from None
        self.batch_attack: Any = None
        self.poisoned: Dataset | None = None
        self.poisoned_always = False
        if da is not None and getattr(da, "per_batch", False):
            self.batch_attack = da
        elif da is not None:
            self.poisoned = poisoned_copy(world.data, da, world.rng, world.index)
            self.poisoned_always = self.from_round <= 1  # as the simulator: the member's data, for every job

    def __call__(self, job: Any) -> Any:
        from node.core import PURPOSE_UPDATE, TrainResult  # noqa: PLC0415

        w, i, r = self.world, self.index, job.fl_round
        attacking = self.byzantine and job.purpose == PURPOSE_UPDATE and r >= self.from_round
        data = self.poisoned if self.poisoned is not None and (self.poisoned_always or attacking) else None
        batch_transform = backdoor(self.batch_attack, w.rng, i, r) if attacking and self.batch_attack is not None else None
        strategy_side = w.strategy is not None and job.purpose == PURPOSE_UPDATE
        delta, n, client_state = w.run_job(
            w.local_train(r, job.purpose, data, batch_transform),
            fl_round=r, strategy_side=strategy_side, model=np.asarray(job.model),
            server_state=job.server_state, client_state=self._client_state,
        )
        if not np.isfinite(delta).all():
            return None
        if strategy_side:
            self._pending[r] = client_state
            for old in [k for k in self._pending if k < r - 8]:
                del self._pending[old]
        if attacking and self.batch_attack is not None:
            delta = self.batch_attack.boost_update(delta)  # model replacement: s · Δ
        if attacking and self.update_attack is not None:
            delta = attack_update(self.update_attack, delta[None, :], rng=w.rng.child("attack", i, r).numpy(),
                                  global_model=job.model)
        if not np.isfinite(delta).all():
            return None  # the attack overflowed: this Byzantine client sends nothing
        if attacking and self.claimed_samples:
            n = self.claimed_samples  # it signs a count of its choice (the round rules cap what it weighs)
        return TrainResult(np.ascontiguousarray(delta, dtype=np.float32), n)

    def on_decided(self, block: Any) -> None:
        for u in block.payload.updates:
            if u.peer == self.peer and u.fl_round in self._pending:
                self._client_state = self._pending.pop(u.fl_round)

    def evaluate(self, model: np.ndarray) -> dict[str, float] | None:
        """This member's validation accuracy and loss for a committed ``model`` (None without a validation split)."""
        return self.world.evaluate(model)


def resolve_device(device: str, source: str | os.PathLike[str]) -> str:
    """The training device to use on this machine for ``device`` (a scenario's ``training.device``, or a node's or a
    run's own ``--device``): ``"auto"`` is ``"cuda"`` where CUDA is present, else ``"mps"`` where Apple's Metal is,
    else ``"cpu"``; any other value must exist here (:func:`_check_device`: one line naming what is missing). A local
    matter, checked when a run or a node starts, not when a scenario loads, so a GPU run's results folder still
    audits on a CPU-only machine; the device is no part of the genesis (the initial model is the same on any)."""
    if not DEVICE_PATTERN.match(device):
        raise ConfigFileError(f"{source}: device {device!r:.40}: expected auto, cpu, cuda, cuda:N or mps")
    if device == "auto":
        import torch  # noqa: PLC0415

        if torch.cuda.is_available():
            return "cuda"
        mps = getattr(torch.backends, "mps", None)
        return "mps" if mps is not None and mps.is_available() else "cpu"
    _check_device(device, source)
    return device


def _check_device(device: str, source: str | os.PathLike[str]) -> None:
    """The training device exists on this machine (:func:`resolve_device`)."""
    if device == "cpu":
        return
    import torch  # noqa: PLC0415

    if device == "mps":
        mps = getattr(torch.backends, "mps", None)
        if mps is None or not mps.is_available():
            raise ConfigFileError(f"{source}: training.device = 'mps' but Apple's MPS is not available here (use \"cpu\" "
                                  "or \"auto\")")
        return
    index = int(device.partition(":")[2] or 0)
    if not torch.cuda.is_available():
        raise ConfigFileError(f"{source}: training.device = {device!r} but CUDA is not available here (use \"cpu\" or "
                              "\"auto\")")
    if index >= torch.cuda.device_count():
        raise ConfigFileError(f"{source}: training.device = {device!r} but this machine has {torch.cuda.device_count()} CUDA device(s)")
