"""The simulator's world: every member's data (one partition of a scenario's dataset), the model, the trainer,
schedule, initial weights, identities, genesis and the strategy's client side.

:class:`World` is built from a :class:`sim._scenario.Scenario` by a pure function of the scenario (every
random choice comes from the scenario seed's :class:`learning.RngTree`). It composes many members from the pieces
of a member's own world (``node.world``: :func:`node.world.job_train`, :func:`node.world.run_job`, the initial
model, the data attacks' seeds), so a node process of ``concilium testnet local``, which builds only its own
``node.world.MemberWorld`` from the genesis and its materialized partition, runs the very same local jobs: the
testnet's accepted sets and model digests can be compared with ``sim run``'s.

The genesis pins the scenario's training plan and its data contract (``node.world.TRAINING_KEY``, ``DATA_KEY``).
"""
from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ledger import Genesis, KeyPair, Member, ModelSpec, ProtocolParams, genesis_committee, peer_id_from_public_key, sha256
from learning import (
    PARTITIONS,
    DataContract,
    Dataset,
    LocalOutcome,
    LocalTrainer,
    PublicEval,
    RngTree,
    Strategy,
    TrainingPlan,
    dataset_spec,
    model_spec,
    partition_dataset,
    reproducible,
    partition_spec,
    strategy_from_params,
    vector_to_blob,
    with_public,
)
from node.world import (
    DATA_KEY, OMNISCIENT_ATTACKS, TRAINING_KEY, backdoor, initial_model, job_train, poisoned_copy, public_evaluator,
    resolve_device, run_job,
)
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
    scenario: Scenario, public_keys: list[bytes], sizes: list[int], theta0: np.ndarray, plan: TrainingPlan,
    contract: DataContract, addrs: Sequence[Sequence[str]] = (), chain_id: str | None = None,
) -> Genesis:
    p = scenario.protocol
    params = dict(p.params)
    for key in (TRAINING_KEY, DATA_KEY):
        if key in params:
            raise ValueError(f"protocol.params.{key} is reserved: the genesis' {key} comes from the scenario's "
                             f"[{key}] section")
    # what every member must agree on: the training they run and what their data must be (node.world)
    params[TRAINING_KEY] = plan.to_params()
    params[DATA_KEY] = contract.to_params()
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
        chain_id=chain_id or f"sim-{scenario.name}-{scenario.seed}"[:64],
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
    plan: TrainingPlan
    contract: DataContract

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
        plan = scenario.training.plan(scenario.seed)
        tr = scenario.training
        # ("auto": this machine's; an explicit device is checked where a run or a node starts, not here, so that
        # a GPU run's world still builds where its ledger is audited)
        trainer = plan.trainer(spec, resolve_device(tr.device, "training.device") if tr.device == "auto" else tr.device)
        schedule = plan.schedule()
        theta0 = initial_model(trainer, rng)
        contract = DataContract.of(splits.train)
        keys = scenario_keys(scenario)
        sizes = [client_data.size(i) for i in range(scenario.members)]
        genesis = _genesis(scenario, [k.public_key for k in keys], sizes, theta0, plan, contract)
        p = scenario.protocol
        strategy = strategy_from_params(p.algorithm, dict(genesis.protocol.params)) if p.mode != "committee" else None
        return cls(
            scenario=scenario, rng=rng, train=splits.train, test=splits.test, public_data=splits.public,
            client_data=client_data, trainer=trainer, schedule=schedule, theta0=theta0, keys=keys, genesis=genesis,
            strategy=strategy, plan=plan, contract=contract,
        )

    def genesis_for(
        self, public_keys: Sequence[bytes], addrs: Sequence[Sequence[str]] = (), *, contract: DataContract | None = None,
        sizes: Sequence[int] | None = None, chain_id: str | None = None,
    ) -> Genesis:
        """This scenario's genesis with other members: member ``i`` (key ``public_keys[i]``, addresses
        ``addrs[i]``) trains on partition ``i``, or, with ``contract`` and ``sizes``, on its own data of that
        contract and size (a ``concilium data split`` folder). ``concilium testnet init`` uses it with fresh keys."""
        if len(public_keys) != len(self.client_data):
            raise ValueError(f"{len(public_keys)} keys for {len(self.client_data)} members")
        if sizes is None:
            sizes = [self.client_data.size(i) for i in range(len(self.client_data))]
        return _genesis(self.scenario, list(public_keys), list(sizes), self.theta0, self.plan,
                        self.contract if contract is None else contract, addrs, chain_id)

    def public_eval(self) -> PublicEval | None:
        """The public-split evaluator the strategy scores models with (Sself, FedAsync's entropy filter), or None
        when it needs none (``node.world.public_evaluator``: a testnet's node processes build the same one from
        the materialized public split)."""
        return public_evaluator(self.strategy, self.trainer, self.public_data, missing=(
            f"strategy {self.scenario.protocol.algorithm!r} scores models on a public split: set data.public_size > 0"))

    def index_of(self, peer: str) -> int:
        for i, k in enumerate(self.keys):
            if k.peer_id == peer:
                return i
        raise KeyError(peer)

    def poisoned_copy(self, i: int, attack: Any) -> Dataset:
        """Member ``i``'s data with a whole-dataset data attack applied (``node.world.poisoned_copy``: the same
        copy in the simulator, ``sim._jobs.JobHost``, and in a node)."""
        return poisoned_copy(self.client_data[i], attack, self.rng, i)

    def backdoor(self, attack: Any, i: int, fl_round: int) -> Callable[[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]:
        """The per-batch data attack of member ``i``'s job of ``fl_round`` (``node.world.backdoor``)."""
        return backdoor(attack, self.rng, i, fl_round)

    def local_train(
        self,
        i: int,
        fl_round: int,
        purpose: str,
        data: Dataset | None = None,
        batch_transform: Callable[[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]] | None = None,
    ) -> Callable[..., LocalOutcome]:
        """The host's ``LocalTrain`` for one job: real PyTorch training on member ``i``'s data (or ``data``),
        seeded per job by ``("train", i, fl_round, purpose)`` (``node.world.job_train``, as a node trains)."""
        data = self.client_data[i] if data is None else data
        return job_train(self.trainer, data, self.rng.child("train", i, fl_round, purpose).torch, batch_transform)

    def run_job(self, train: Callable[..., LocalOutcome], **kwargs: Any) -> tuple[np.ndarray, int, bytes | None]:
        """One local job (``node.world.run_job``): ``(upload, n_samples, client_state)``."""
        return run_job(self.strategy, self.schedule, train, **kwargs)


def byzantine_indices(scenario: Scenario, genesis: Genesis) -> list[int]:
    """The fixed Byzantine clients of ``scenario`` on ``genesis``: the first ``adversary.byzantine`` members by
    index (member ``i`` is named ``node-i``) outside the genesis committee."""
    committee = set(genesis_committee(genesis))
    by_index = sorted(
        (int(m.name.removeprefix("node-")), m.peer_id) for m in genesis.members if m.name.removeprefix("node-").isdigit()
    )
    outside = [i for i, pid in by_index if pid not in committee]
    return outside[: scenario.adversary.byzantine]


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
