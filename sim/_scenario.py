"""Scenario files: a strict TOML schema for a simulation (unknown keys are rejected with their path).

Example (``scenarios/quickstart.toml``)::

    name = "quickstart"
    seed = 0
    rounds = 20
    members = 20

    [protocol]
    mode = "committee"          # or "coordinator"
    algorithm = "cmfl"          # coordinator mode: a registered strategy ("fedavg", "fedro")
    committee_size = 4
    params = { training_size = 12, aggregation_size = 8, strategy = "I" }

    [data]
    dataset = "digits"
    partition = "iid"

    [model]
    name = "mlp"
    params = { in_features = 64, hidden = [64], num_classes = 10 }

    [training]
    steps = 10
    batch_size = 32
    lr = 0.05

    [network]
    latency_ms = 20

    [compute]
    train_ms = 300

    [adversary]
    byzantine = 2                                   # the first 2 non-genesis-committee members
    attack = "model_scaling(scale=-1.0)"
    from_round = 1                                   # attack from this round on (honest before)
    [[adversary.faults]]
    target = "coordinator"                           # or "member:3"
    kind = "corrupt"                                 # drop | delay | corrupt
    from_round = 2

Everything is validated here, at the config boundary; the engine only sees typed objects.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from ledger._types import MODES, QUORUM_RULES
from node.config import load_toml, record_from_toml

__all__ = [
    "AdversaryConfig",
    "ComputeConfig",
    "DataSection",
    "FaultConfig",
    "LinkConfig",
    "ModelSection",
    "NetworkConfig",
    "PartitionConfig",
    "ProtocolSection",
    "Scenario",
    "TrainingSection",
    "default_scenario_path",
    "load_scenario",
]

FAULT_KINDS = ("drop", "delay", "corrupt", "equivocate")


def _empty() -> Mapping[str, Any]:
    return MappingProxyType({})


def _check(cond: bool, msg: str) -> None:
    if not cond:
        raise ValueError(msg)


@dataclass(frozen=True, slots=True, kw_only=True)
class ProtocolSection:
    mode: str = "committee"
    algorithm: str = "cmfl"
    committee_size: int = 4
    quorum: str = "bft"
    params: Mapping[str, Any] = field(default_factory=_empty)
    tick_ms: int = 100
    timeout_ticks_train: int = 20
    timeout_ticks_propose: int = 10
    timeout_ticks_prepare: int = 10
    timeout_ticks_commit: int = 10
    timeout_ticks_view_change: int = 20

    def __post_init__(self) -> None:
        _check(self.mode in MODES, f"mode must be one of {', '.join(MODES)}")
        _check(self.quorum in QUORUM_RULES, f"quorum must be one of {', '.join(QUORUM_RULES)}")
        _check(self.committee_size >= 1, "committee_size must be >= 1")
        _check(self.mode != "committee" or self.algorithm == "cmfl", "committee mode runs algorithm = \"cmfl\"")
        if "sampling_seed" in self.params:  # the round rules' reserved key: fail when the file loads
            from node._rounds import sampling_seed_of  # noqa: PLC0415

            sampling_seed_of(self.params, mode=self.mode)  # ConfigError is a ValueError


@dataclass(frozen=True, slots=True, kw_only=True)
class DataSection:
    dataset: str = "digits"
    params: Mapping[str, Any] = field(default_factory=_empty)
    partition: str = "iid"
    partition_params: Mapping[str, Any] = field(default_factory=_empty)
    test_fraction: float = 0.2
    public_size: int = 0
    """Class-balanced public samples taken out of the training pool before partitioning (seed_002 §1.3);
    0 = none. Strategies that score models on a public split (Sself) need it."""

    def __post_init__(self) -> None:
        _check(0.0 < self.test_fraction < 1.0, "test_fraction must be in (0, 1)")
        _check(self.public_size >= 0, "public_size must be >= 0")


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelSection:
    name: str = "mlp"
    params: Mapping[str, Any] = field(default_factory=_empty)


@dataclass(frozen=True, slots=True, kw_only=True)
class TrainingSection:
    """Local training of every client. ``epochs`` > 0 trains E passes over the local data instead of
    ``steps`` SGD steps; ``schedule`` names a learning-rate schedule of ``learning`` (``lr`` is its ``lr0``)
    evaluated at ``fl_round − 1``; ``prox_mu`` is the FedProx μ (a strategy may override it)."""

    steps: int = 10
    epochs: int = 0
    batch_size: int = 32
    lr: float = 0.05
    schedule: str = "constant"
    schedule_params: Mapping[str, Any] = field(default_factory=_empty)
    momentum: float = 0.0
    weight_decay: float = 0.0
    prox_mu: float = 0.0
    sampling: str = "with_replacement"
    device: str = "cpu"

    def __post_init__(self) -> None:
        _check(self.steps >= 1, "steps must be >= 1")
        _check(self.epochs >= 0, "epochs must be >= 0")
        _check(self.batch_size >= 1, "batch_size must be >= 1")
        _check(self.lr > 0, "lr must be > 0")
        _check(self.prox_mu >= 0, "prox_mu must be >= 0")


@dataclass(frozen=True, slots=True, kw_only=True)
class LinkConfig:
    """Overrides for the links between members ``a`` and ``b`` (both directions): any of latency, bandwidth,
    drop probability (-1 = keep the network default)."""

    a: int
    b: int
    latency_ms: float = -1.0
    bandwidth_mbps: float = -1.0
    drop: float = -1.0

    def __post_init__(self) -> None:
        _check(self.a >= 0 and self.b >= 0 and self.a != self.b, "a link joins two different members a, b >= 0")
        _check(self.latency_ms == -1.0 or self.latency_ms >= 0, "link latency_ms must be >= 0")
        _check(self.bandwidth_mbps == -1.0 or self.bandwidth_mbps > 0, "link bandwidth_mbps must be > 0")
        _check(self.drop == -1.0 or 0.0 <= self.drop <= 1.0, "link drop must be in [0, 1]")


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionConfig:
    """A network partition from round ``from_round`` until it heals: at round ``heal_round`` or after
    ``duration_ms`` of virtual time, whichever comes first (0 = not that way; both 0 = never). Messages
    between members of different ``groups`` are lost; members in no group form one more group. A partition
    that leaves no side with a quorum stops the chain: heal it by ``duration_ms``."""

    groups: tuple[tuple[int, ...], ...]
    from_round: int = 1
    heal_round: int = 0
    duration_ms: float = 0.0

    def __post_init__(self) -> None:
        _check(len(self.groups) >= 1, "a partition needs at least one group")
        flat = [i for g in self.groups for i in g]
        _check(all(i >= 0 for i in flat) and len(set(flat)) == len(flat), "partition groups are disjoint member indices")
        _check(self.from_round >= 1, "from_round must be >= 1")
        _check(self.heal_round == 0 or self.heal_round > self.from_round, "heal_round must be after from_round")
        _check(self.duration_ms >= 0, "duration_ms must be >= 0")


@dataclass(frozen=True, slots=True, kw_only=True)
class NetworkConfig:
    """Latency (ms) with uniform jitter, bandwidth, and seeded faults on every message, per link.

    Each ordered link's base latency is ``latency_ms × (1 + latency_spread × u)`` and each member's uplink
    bandwidth ``bandwidth_mbps / (1 + bandwidth_spread × u)``, ``u ~ U[0, 1)`` drawn once from the seed;
    ``links`` override single links; ``partitions`` cut the network for a span of rounds.
    """

    latency_ms: float = 20.0
    jitter_ms: float = 5.0
    latency_spread: float = 0.0
    bandwidth_mbps: float = 100.0
    bandwidth_spread: float = 0.0
    drop: float = 0.0
    duplicate: float = 0.0
    reorder: float = 0.0
    """Probability that a message is held back by an extra ``reorder_ms`` (overtaken by later ones)."""
    reorder_ms: float = 50.0
    links: tuple[LinkConfig, ...] = ()
    partitions: tuple[PartitionConfig, ...] = ()

    def __post_init__(self) -> None:
        _check(self.latency_spread >= 0 and self.bandwidth_spread >= 0, "spreads must be >= 0")
        for name in ("drop", "duplicate", "reorder"):
            v = getattr(self, name)
            _check(0.0 <= v < 1.0, f"{name} must be in [0, 1)")
        _check(self.latency_ms >= 0 and self.jitter_ms >= 0 and self.reorder_ms >= 0, "delays must be >= 0")
        _check(self.bandwidth_mbps > 0, "bandwidth_mbps must be > 0")


@dataclass(frozen=True, slots=True, kw_only=True)
class ComputeConfig:
    """Virtual duration of one local training job: ``train_ms × speed``, plus straggler delays.

    ``speed`` per member is drawn once from ``U[1, 1 + speed_spread]``; ``stragglers`` members (the last
    ones by index) add ``straggler_ms`` to every job. An availability model's delay of ``d`` rounds adds
    ``d × round_ms`` (default: the training deadline, ``timeout_ticks_train × tick_ms``).
    """

    train_ms: float = 300.0
    speed_spread: float = 0.5
    stragglers: int = 0
    straggler_ms: float = 0.0
    round_ms: float = 0.0

    def __post_init__(self) -> None:
        _check(self.train_ms >= 0 and self.speed_spread >= 0 and self.straggler_ms >= 0, "durations must be >= 0")
        _check(self.round_ms >= 0, "round_ms must be >= 0")
        _check(self.stragglers >= 0, "stragglers must be >= 0")


@dataclass(frozen=True, slots=True, kw_only=True)
class FaultConfig:
    """A protocol fault: ``target`` = ``"coordinator"`` (the primary of each round from ``from_round``),
    ``"committee"`` (one member of the genesis committee), or ``"member:I"``.

    Kinds: ``drop`` (crash/silence), ``delay`` (``delay_ms`` extra on everything it sends), ``corrupt`` (a
    coordinator proposes a wrong aggregate, a committee member signs false scores, and it votes for
    anything), ``equivocate`` (sends different pBFT votes / score rows / updates to different peers)."""

    target: str
    kind: str
    from_round: int = 1
    delay_ms: float = 0.0

    def __post_init__(self) -> None:
        _check(self.kind in FAULT_KINDS, f"kind must be one of {', '.join(FAULT_KINDS)}")
        ok = self.target in ("coordinator", "committee") or (
            self.target.startswith("member:") and self.target[7:].isdigit()
        )
        _check(ok, "target must be coordinator, committee or member:I")
        _check(self.from_round >= 1, "from_round must be >= 1")
        _check(self.kind != "delay" or self.delay_ms > 0, "a delay fault needs delay_ms > 0")


@dataclass(frozen=True, slots=True, kw_only=True)
class AdversaryConfig:
    byzantine: int = 0
    """Number of Byzantine clients (chosen among members outside the genesis committee)."""
    attack: str = ""
    """Update attack spec (``learning.parse_update_attack``), applied to each Byzantine client's update."""
    data_attack: str = ""
    """Data attack spec (``learning.parse_data_attack``), applied to each Byzantine client's data."""
    faults: tuple[FaultConfig, ...] = ()
    availability: str = ""
    """Availability model spec (``learning.parse_availability``), e.g. ``"eps_adversarial(eps=0.5)"``,
    ``"bounded(tau_max=20)"``, ``"stragglers(max_delay=2)"``; empty = every sampled client responds."""
    per_round: int = 0
    """A mobile adversary instead of a fixed set: in every round exactly this many of the sampled clients
    (a seeded choice) run the attack for that round's job (seed_002 §3.1: "exactly round(rK) adversaries per
    round"); needs ``byzantine = 0``."""
    from_round: int = 1
    """First round (1-based) in which the adversaries attack; before it they train and send honestly (seed_002
    §3.4: the backdoor runs "after the 10-th global round", i.e. ``from_round = 11``). Applies to ``attack`` and
    ``data_attack``; availability and faults have their own schedules."""

    def __post_init__(self) -> None:
        _check(self.byzantine >= 0, "byzantine must be >= 0")
        _check(self.from_round >= 1, "from_round must be >= 1")
        _check(self.per_round >= 0, "per_round must be >= 0")
        _check(self.per_round == 0 or self.byzantine == 0, "give either byzantine (a fixed set) or per_round, not both")
        _check(self.per_round == 0 or bool(self.attack or self.data_attack), "per_round adversaries need an attack")
        _check(self.byzantine == 0 or bool(self.attack or self.data_attack), "byzantine clients need an attack")


@dataclass(frozen=True, slots=True, kw_only=True)
class Scenario:
    name: str
    seed: int = 0
    rounds: int = 20
    members: int = 20
    eval_every: int = 1
    protocol: ProtocolSection = field(default_factory=ProtocolSection)
    data: DataSection = field(default_factory=DataSection)
    model: ModelSection = field(default_factory=ModelSection)
    training: TrainingSection = field(default_factory=TrainingSection)
    network: NetworkConfig = field(default_factory=NetworkConfig)
    compute: ComputeConfig = field(default_factory=ComputeConfig)
    adversary: AdversaryConfig = field(default_factory=AdversaryConfig)

    def __post_init__(self) -> None:
        _check(self.seed >= 0, "seed must be >= 0")
        _check(self.rounds >= 1, "rounds must be >= 1")
        _check(self.members >= 1, "members must be >= 1")
        _check(self.eval_every >= 1, "eval_every must be >= 1")
        _check(self.protocol.committee_size <= self.members, "committee_size exceeds members")
        _check(
            self.adversary.byzantine <= self.members - self.protocol.committee_size,
            "more Byzantine clients than members outside the genesis committee",
        )
        _check_partition(self.data, self.members)


def _check_partition(data: DataSection, members: int) -> None:
    """Resolve ``data.partition`` with its parameters as the simulation does (``num_clients`` / ``max_clients``
    default to ``members``), so an unknown partition or a bad parameter fails when the file loads; an explicit
    ``num_clients`` must equal ``members``. Checks that need the dataset (``pairs``: an even class count, every
    class at least one sample per holder) run when the simulation partitions it."""
    from learning._partition import (  # imports torch: only when validating
        PARTITIONS,
        partition_spec,
    )

    params = dict(data.partition_params)
    fields = getattr(PARTITIONS.get(data.partition), "__dataclass_fields__", {})
    if "num_clients" in fields:
        n = params.setdefault("num_clients", members)
        _check(n == members, f"data.partition_params.num_clients = {n!r} must equal members = {members}")
    elif "max_clients" in fields:
        params.setdefault("max_clients", members)
    try:
        partition_spec(data.partition, params)
    except ValueError as e:  # learning's ConfigError
        raise ValueError(f"data.partition: {e}") from None


def default_scenario_path() -> Path:
    """``scenarios/quickstart.toml`` of this checkout."""
    return Path(__file__).resolve().parents[1] / "scenarios" / "quickstart.toml"


def load_scenario(path: str | os.PathLike[str], **overrides: Any) -> Scenario:
    """Load and validate a scenario file; ``overrides`` replace top-level keys (e.g. ``seed``, ``rounds``)."""
    data = load_toml(path, what="scenario")
    for k, v in overrides.items():
        if v is not None:
            data[k] = v
    return record_from_toml(Scenario, data, source=str(path))
