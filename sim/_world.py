"""What every driver of a scenario shares: data, partition, model, trainer, schedule, initial weights,
identities, genesis and the strategy's client side.

:class:`World` is built from a :class:`sim._scenario.Scenario` by a pure function of the scenario (every
random choice comes from the scenario seed's :class:`sim._rng.RngTree`), so the simulator
(``sim._engine.Simulation``) and a real node process of ``concilium testnet local`` (which loads the same
scenario and trains as member ``i``) build the very same genesis and run the very same local jobs: the
testnet's accepted sets and model digests can be compared with ``sim run``'s.

The adversary's data attacks and the network stay with the simulator; a job here is an honest member's.
"""

from __future__ import annotations

from collections import OrderedDict
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ledger import Genesis, KeyPair, Member, ModelSpec, ProtocolParams, genesis_committee, peer_id_from_public_key, sha256
from learning import (
    PARTITIONS,
    SCHEDULES,
    ClientJob,
    Dataset,
    LocalOutcome,
    LocalTrainer,
    LocalTrainingConfig,
    PublicEval,
    Strategy,
    dataset_spec,
    model_spec,
    partition_dataset,
    reproducible,
    partition_spec,
    schedule_spec,
    strategy_from_params,
    vector_to_blob,
    with_public,
)
from node import ConfigFileError
from sim._rng import RngTree
from sim._scenario import DataSection, Scenario

__all__ = ["MemberData", "World", "scenario_keys"]

_MADE_KEPT = 256
"""Local datasets :class:`MemberData` keeps made (least recently used dropped): every one of a small scenario, a
round's worth of trainers of a large one."""


class MemberData(Sequence[Dataset]):
    """Every member's local dataset, made when asked for: member ``i`` holds ``pool.subset(indices[i mod K])``
    (``K = len(indices)`` local datasets: one per member, or fewer shared ones, ``data.local_datasets``).

    Only the index arrays are kept per local dataset; a made subset is kept while it is among the
    ``_MADE_KEPT`` last used, so the memory a run needs grows with the members that train, not with the
    members. ``d[i] = dataset`` replaces member ``i``'s data (a data attack's poisoned copy); ``size`` and
    ``labels`` read the index arrays without making anything. The values are those of
    ``Partition.client_datasets``, bit for bit."""

    __slots__ = ("_indices", "_made", "_members", "_replaced", "pool")

    def __init__(self, pool: Dataset, indices: Sequence[np.ndarray], members: int) -> None:
        if not indices or members < len(indices):
            raise ValueError(f"{len(indices)} local datasets for {members} members")
        self.pool = pool
        self._indices = tuple(indices)
        self._members = members
        self._made: OrderedDict[int, Dataset] = OrderedDict()
        self._replaced: dict[int, Dataset] = {}

    def __len__(self) -> int:
        return self._members

    def __getitem__(self, i: int) -> Dataset:  # type: ignore[override]
        if not -self._members <= i < self._members:
            raise IndexError(f"member {i} of {self._members}")
        i %= self._members
        got = self._replaced.get(i)
        if got is not None:
            return got
        k = i % len(self._indices)
        d = self._made.get(k)
        if d is None:
            d = self._made[k] = self.pool.subset(self._indices[k])
            while len(self._made) > _MADE_KEPT:
                self._made.popitem(last=False)
        else:
            self._made.move_to_end(k)
        return d

    def __setitem__(self, i: int, data: Dataset) -> None:
        if not 0 <= i < self._members:
            raise IndexError(f"member {i} of {self._members}")
        self._replaced[i] = data

    def size(self, i: int) -> int:
        """Samples of member ``i`` (nothing made)."""
        got = self._replaced.get(i)
        return len(got) if got is not None else len(self._indices[i % len(self._indices)])

    def labels(self, i: int) -> np.ndarray:
        """Labels of member ``i`` (int64 numpy; nothing made)."""
        got = self._replaced.get(i)
        return got.labels if got is not None else self.pool.labels[self._indices[i % len(self._indices)]]

    def to(self, device: torch.device | str) -> MemberData:
        """The same data with the pool (and every replaced dataset) on ``device``."""
        out = MemberData(self.pool.to(device), self._indices, self._members)
        out._replaced = {i: d.to(device) for i, d in self._replaced.items()}
        return out


def scenario_keys(scenario: Scenario) -> list[KeyPair]:
    """The members' keys of a scenario, by member index (derived: simulations and local testnets only)."""
    return [KeyPair.derive(f"sim-{scenario.name}-{scenario.seed}-{i}") for i in range(scenario.members)]


def _dataset_params(scenario: Scenario) -> dict[str, Any]:
    """``data.params`` with ``data.test_fraction`` applied where the dataset has a held-out split to size."""
    from learning import DATASETS  # noqa: PLC0415

    params = dict(scenario.data.params)
    fields_ = getattr(DATASETS.get(scenario.data.dataset), "__dataclass_fields__", {})
    frac = scenario.data.test_fraction
    if "test_fraction" in fields_:
        if params.setdefault("test_fraction", frac) != frac:
            raise ValueError(f"data.test_fraction = {frac} but data.params.test_fraction = {params['test_fraction']}")
    elif frac != DataSection().test_fraction:
        raise ValueError(f"dataset {scenario.data.dataset!r} has its own test split: data.test_fraction does not apply")
    return params


def _genesis(
    scenario: Scenario, public_keys: list[bytes], sizes: list[int], theta0: np.ndarray, addrs: Sequence[Sequence[str]] = ()
) -> Genesis:
    p = scenario.protocol
    params = dict(p.params)
    if scenario.app:  # the genesis pins the app: its name and digest (node.apps)
        from node.apps import app_pin, load_app  # noqa: PLC0415

        params.update(app_pin(load_app(scenario.app)))
    peers = [peer_id_from_public_key(pk) for pk in public_keys]
    if params.get("sizes") == "auto":
        # every member's local dataset size, in the members' canonical (sorted peer id) order, so strategies
        # weighting by n_i / N can be audited
        by_peer = dict(zip(peers, sizes))
        params["sizes"] = [by_peer[q] for q in sorted(by_peer)]
    members = [
        Member(peer_id=pid, public_key=pk, name=f"node-{i}", addrs=tuple(addrs[i]) if addrs else ())
        for i, (pid, pk) in enumerate(zip(peers, public_keys))
    ]
    return Genesis(
        chain_id=f"sim-{scenario.name}-{scenario.seed}"[:64],
        genesis_time_ms=0,
        members=tuple(sorted(members, key=lambda m: m.peer_id)),
        protocol=ProtocolParams(
            mode=p.mode,
            algorithm=p.algorithm,
            committee_size=p.committee_size,
            quorum=p.quorum,
            fl_rounds=scenario.rounds,
            timeouts=p.timeouts(),
            params=params,
        ),
        model=ModelSpec(name=scenario.model.name, digest=sha256(vector_to_blob(theta0)), params=dict(scenario.model.params)),
    )


@dataclass(slots=True)
class World:
    """A scenario's shared pieces (see the module docstring). Build it with :meth:`build`."""

    scenario: Scenario
    rng: RngTree
    train: Dataset
    test: Dataset
    public_data: Dataset | None
    client_data: MemberData
    trainer: LocalTrainer
    schedule: Callable[[int], float]
    theta0: np.ndarray
    keys: list[KeyPair]
    genesis: Genesis
    strategy: Strategy | None

    @classmethod
    def build(cls, scenario: Scenario) -> World:
        if scenario.training.reproducible:  # before the first tensor: the simulator, a node, a Ray trainer
            reproducible.configure()
        rng = RngTree(scenario.seed)
        splits = dataset_spec(scenario.data.dataset, _dataset_params(scenario)).load()
        if scenario.data.public_size:
            splits = with_public(splits, seed=rng.child("public").seed64() % 2**32, size=scenario.data.public_size)
        pparams = dict(scenario.data.partition_params)
        pcls = PARTITIONS.get(scenario.data.partition)
        local = scenario.data.local_datasets or scenario.members
        if pcls is not None and "num_clients" in getattr(pcls, "__dataclass_fields__", {}):
            pparams.setdefault("num_clients", local)
        elif pcls is not None and "max_clients" in getattr(pcls, "__dataclass_fields__", {}):
            pparams.setdefault("max_clients", local)  # natural (per-writer) data: the first N writers
        part = partition_dataset(
            partition_spec(scenario.data.partition, pparams), splits.train, seed=rng.child("partition").seed64() % 2**32
        )
        if len(part) != local:
            raise ValueError(
                f"the {scenario.data.partition!r} partition made {len(part)} clients for {local} "
                f"{'local datasets' if scenario.data.local_datasets else 'members'}; make them equal"
            )
        if part.num_samples != len(splits.train):
            raise ValueError(f"the partition is of {part.num_samples} samples, the pool has {len(splits.train)}")
        client_data = MemberData(splits.train, part.clients, scenario.members)
        spec = model_spec(scenario.model.name, dict(scenario.model.params))
        tr = scenario.training
        trainer = LocalTrainer(
            spec,
            LocalTrainingConfig(
                steps=None if tr.epochs else tr.steps,
                epochs=tr.epochs or None,
                batch_size=tr.batch_size,
                momentum=tr.momentum,
                weight_decay=tr.weight_decay,
                prox_mu=tr.prox_mu,
                sampling=tr.sampling,  # type: ignore[arg-type]
            ),
            # ("auto": this machine's; an explicit device is checked where a run or a node starts, not here, so that
            # a GPU run's world still builds where its ledger is audited)
            device=resolve_device(tr.device, "training.device") if tr.device == "auto" else tr.device,
        )
        sched_params = dict(tr.schedule_params)
        fields_ = getattr(SCHEDULES.get(tr.schedule), "__dataclass_fields__", {})
        for lr_key in ("lr", "lr0"):  # the schedule's base rate is training.lr unless given
            if lr_key in fields_:
                sched_params.setdefault(lr_key, tr.lr)
        schedule = schedule_spec(tr.schedule, sched_params)
        theta = trainer.initial_parameters(seed=rng.child("model-init").seed64() % 2**31)
        theta0 = theta.detach().cpu().numpy().astype(np.float32)
        keys = scenario_keys(scenario)
        sizes = [client_data.size(i) for i in range(scenario.members)]
        genesis = _genesis(scenario, [k.public_key for k in keys], sizes, theta0)
        p = scenario.protocol
        strategy = strategy_from_params(p.algorithm, dict(genesis.protocol.params)) if p.mode != "committee" else None
        return cls(
            scenario=scenario, rng=rng, train=splits.train, test=splits.test, public_data=splits.public,
            client_data=client_data, trainer=trainer, schedule=schedule, theta0=theta0, keys=keys, genesis=genesis,
            strategy=strategy,
        )

    def genesis_for(self, public_keys: Sequence[bytes], addrs: Sequence[Sequence[str]] = ()) -> Genesis:
        """This scenario's genesis with other members: member ``i`` (key ``public_keys[i]``, addresses
        ``addrs[i]``) trains on partition ``i``. ``concilium testnet init`` uses it with fresh keys."""
        if len(public_keys) != len(self.client_data):
            raise ValueError(f"{len(public_keys)} keys for {len(self.client_data)} members")
        sizes = [self.client_data.size(i) for i in range(len(self.client_data))]
        return _genesis(self.scenario, list(public_keys), sizes, self.theta0, addrs)

    def public_eval(self) -> PublicEval | None:
        """The public-split evaluator the strategy scores models with (Sself, FedAsync's entropy filter), or None
        when it needs none. Every node of a chain builds the same one from the scenario: the split and the
        trainer are part of the world (the simulator's nodes share one; a testnet's processes build it each)."""
        if self.strategy is None or not self.strategy.needs_public:
            return None
        if self.public_data is None:
            raise ValueError(f"strategy {self.scenario.protocol.algorithm!r} scores models on a public split: "
                             "set data.public_size > 0")
        from learning import PublicScorer  # noqa: PLC0415 (only Sself-like runs need it)

        impl = getattr(self.strategy, "entropy_impl", "exact")
        return PublicScorer.from_trainer(self.trainer, self.public_data, entropy_impl=impl)

    def index_of(self, peer: str) -> int:
        for i, k in enumerate(self.keys):
            if k.peer_id == peer:
                return i
        raise KeyError(peer)

    def poisoned_copy(self, i: int, attack: Any) -> Dataset:
        """Member ``i``'s data with a whole-dataset data attack applied, seeded by ``("data-attack", i)``: the same
        copy in the simulator (``sim._jobs.JobHost``) and in a testnet node (:class:`MemberTrainer`)."""
        d = self.client_data[i]
        x, y = attack.transform(d.x, d.y, rng=self.rng.child("data-attack", i).numpy())
        return Dataset(x=torch.as_tensor(x), y=torch.as_tensor(y), num_classes=d.num_classes, name=d.name)

    def backdoor(self, attack: Any, i: int, fl_round: int) -> Callable[[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]:
        """The per-batch data attack of member ``i``'s job of ``fl_round`` (a ``batch_transform`` for
        :meth:`local_train`), seeded by ``("data-attack", i, fl_round)``: the same in both drivers."""
        arng = self.rng.child("data-attack", i, fl_round).numpy()

        def transform(xb: torch.Tensor, yb: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            return attack.transform(xb, yb, rng=arng)  # type: ignore[no-any-return]

        return transform

    def local_train(
        self,
        i: int,
        fl_round: int,
        purpose: str,
        data: Dataset | None = None,
        batch_transform: Callable[[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]] | None = None,
    ) -> Callable[..., LocalOutcome]:
        """The host's ``LocalTrain`` for one job: real PyTorch training on member ``i``'s data (or ``data``),
        seeded per job by ``("train", i, fl_round, purpose)``."""
        data = self.client_data[i] if data is None else data

        def train(
            model: np.ndarray,
            *,
            lr: float,
            gradient_correction: np.ndarray | None = None,
            momentum_buffer: np.ndarray | None = None,
            prox_mu: float | None = None,
        ) -> LocalOutcome:
            gen = self.rng.child("train", i, fl_round, purpose).torch()
            dev = self.trainer.device
            res = self.trainer.train(
                torch.from_numpy(np.array(model, dtype=np.float32)).to(dev),
                data,
                lr=lr,
                generator=gen,
                momentum_buffer=None if momentum_buffer is None else torch.from_numpy(np.array(momentum_buffer)).to(dev),
                gradient_correction=None if gradient_correction is None else torch.from_numpy(np.array(gradient_correction, dtype=np.float32)).to(dev),
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
        self,
        train: Callable[..., LocalOutcome],
        *,
        fl_round: int,
        strategy_side: bool,
        model: np.ndarray,
        server_state: bytes | None,
        client_state: bytes | None,
        lr: float | None = None,
    ) -> tuple[np.ndarray, int, bytes | None]:
        """One local job: ``(upload, n_samples, client_state)``: the strategy's client side (an update in
        coordinator mode) or plain local training, at ``lr`` (default: the schedule's rate for ``fl_round``)."""
        lr = float(self.schedule(fl_round - 1)) if lr is None else lr
        if strategy_side:
            assert self.strategy is not None
            up = self.strategy.local_update(
                ClientJob(fl_round=fl_round, model=model, server_state=server_state, client_state=client_state, lr=lr),
                train,
            )
            return np.ascontiguousarray(up.vector, dtype=np.float32), int(up.n_samples), up.client_state
        out = train(model, lr=lr)
        return out.delta, out.n_samples, None


OMNISCIENT_ATTACKS = ("alie", "ipm", "mimic")
"""Update attacks that see the round's honest updates (the others transform the attacker's own update)."""


def byzantine_indices(scenario: Scenario, genesis: Genesis) -> list[int]:
    """The fixed Byzantine clients of ``scenario`` on ``genesis``: the first ``adversary.byzantine`` members by
    index (member ``i`` is named ``node-i``) outside the genesis committee."""
    committee = set(genesis_committee(genesis))
    by_index = sorted(
        (int(m.name.removeprefix("node-")), m.peer_id) for m in genesis.members if m.name.removeprefix("node-").isdigit()
    )
    outside = [i for i, pid in by_index if pid not in committee]
    return outside[: scenario.adversary.byzantine]


def attack_update(attack: Any, honest: np.ndarray, *, rng: np.random.Generator, global_model: np.ndarray) -> np.ndarray:
    """A Byzantine client's upload: ``attack`` applied to the honest updates it sees (its own, or the round's
    for an omniscient attack), float32; the caller drops a non-finite result (nothing is sent)."""
    if getattr(attack, "needs_global_model", False):
        return np.asarray(attack(honest, rng=rng, global_model=global_model), dtype=np.float32)
    return np.asarray(attack(honest, rng=rng), dtype=np.float32)


def check_network_adversary(scenario: Scenario) -> None:
    """Refuse what the adversary module cannot yet do over a real network: a per-round adversary and client
    availability models (the simulator samples them centrally) and omniscient update attacks (they read the
    other clients' honest updates, which a real Byzantine process does not see)."""
    adv = scenario.adversary
    if adv.per_round:
        raise ValueError("adversary.per_round is simulator-only (a per-round adversary is sampled centrally)")
    if adv.availability:
        raise ValueError("adversary.availability is simulator-only (client availability is sampled centrally)")
    if adv.attack and adv.attack.split("(")[0].strip() in OMNISCIENT_ATTACKS:
        raise ValueError(f"attack {adv.attack!r} reads the honest clients' updates: simulator-only")


def member_index(genesis: Genesis) -> dict[str, int]:
    """Peer id → member index (member ``i`` is named ``node-i`` in a scenario's genesis)."""
    return {m.peer_id: int(m.name[5:]) for m in genesis.members if m.name.startswith("node-") and m.name[5:].isdigit()}


def network_adversary(world: World, genesis: Genesis, key: KeyPair) -> Any:
    """The scenario's faults as they apply to the node with ``key`` on ``genesis`` (a
    :class:`node.adversary.NodeAdversary`), or None without faults. Targets resolve as in the simulator:
    ``coordinator`` = the view-0 primary of each height, ``committee`` = the first member of the genesis
    committee, ``member:I`` = member ``I``; a corrupt proposal draws from the simulator's generator."""
    from node.adversary import Fault, FaultPlan, NodeAdversary  # noqa: PLC0415

    faults = world.scenario.adversary.faults
    if not faults:
        return None
    index = member_index(genesis)
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
                raise ValueError(f"fault target member:{i} does not exist ({len(by_index)} members)")
            peer = by_index[i]
        plan.append(Fault(f.kind, peer, f.from_round, f.delay_ms, f.until_round, f.skew_ms, f.tries))
    return NodeAdversary(
        key=key, chain_id=genesis.chain_id, plan=FaultPlan(plan),
        rng_for=lambda peer, h: world.rng.child("corrupt", peer, h).numpy(),
        index_of=lambda peer: index.get(peer, 0),
    )


class MemberTrainer:
    """A node's local training for member ``index`` of a scenario (``concilium node start`` with a scenario's
    embedded data; ``concilium testnet local``): the jobs the simulator would run for that member, so a
    testnet reproduces ``sim run``. Called from the runtime's training thread, one job at a time.

    ``byzantine``: this member is one of the scenario's Byzantine clients: from ``adversary.from_round`` on its
    updates carry the scenario's data attack (poisoned local data, or a backdoor in every minibatch and a boosted
    update), update attack and claimed sample count (``adversary.n_samples``), seeded as the simulator seeds them.

    A strategy's client state (SCAFFOLD's control variate, ...) becomes the member's state once a block
    includes the upload that produced it (:meth:`on_decided`), as in the simulator."""

    def __init__(self, world: World, index: int, *, byzantine: bool = False) -> None:
        if not 0 <= index < len(world.client_data):
            raise ValueError(f"member index {index} is out of range (the scenario has {len(world.client_data)} members)")
        from learning import parse_data_attack, parse_update_attack  # noqa: PLC0415

        self.world = world
        self.index = index
        self.peer = world.keys[index].peer_id
        self._client_state: bytes | None = None
        self._pending: dict[int, bytes | None] = {}
        adv = world.scenario.adversary
        self.byzantine = byzantine
        self.from_round = adv.from_round
        self.claimed_samples = adv.n_samples if byzantine else 0
        self.update_attack = parse_update_attack(adv.attack) if byzantine and adv.attack else None
        self.batch_attack: Any = None
        self.poisoned: Dataset | None = None
        self.poisoned_always = False
        da = parse_data_attack(adv.data_attack) if byzantine and adv.data_attack else None
        if da is not None and getattr(da, "per_batch", False):
            self.batch_attack = da
        elif da is not None:
            self.poisoned = world.poisoned_copy(index, da)
            self.poisoned_always = adv.from_round <= 1  # as the simulator: the member's data, for every job

    def __call__(self, job: Any) -> Any:
        from node.core import PURPOSE_UPDATE, TrainResult  # noqa: PLC0415

        w, i, r = self.world, self.index, job.fl_round
        attacking = self.byzantine and job.purpose == PURPOSE_UPDATE and r >= self.from_round
        data = self.poisoned if self.poisoned is not None and (self.poisoned_always or attacking) else None
        batch_transform = w.backdoor(self.batch_attack, i, r) if attacking and self.batch_attack is not None else None
        strategy_side = w.strategy is not None and job.purpose == PURPOSE_UPDATE
        delta, n, client_state = w.run_job(
            w.local_train(i, r, job.purpose, data, batch_transform),
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


def resolve_device(device: str, source: str | os.PathLike[str]) -> str:
    """The training device to use on this machine for ``device`` (a scenario's ``training.device``, or a node's or a
    run's own ``--device``): ``"auto"`` is ``"cuda"`` where CUDA is present, else ``"mps"`` where Apple's Metal is,
    else ``"cpu"``; any other value must exist here (:func:`_check_device`: one line naming what is missing). A local
    matter, checked when a run or a node starts, not when a scenario loads, so a GPU run's results folder still
    audits on a CPU-only machine; the device is no part of the genesis (the initial model is the same on any)."""
    from node.config import DEVICE_PATTERN  # noqa: PLC0415

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
