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
    n_samples = 0                                    # a sample count they sign instead of their own (0: their own)
    [[adversary.faults]]
    target = "coordinator"                           # or "member:3"
    kind = "corrupt"                                 # drop | delay | corrupt | equivocate | clock (skew_ms) |
                                                     # skip_primary | omit_rows | grind (tries)
    from_round = 2

    [risk]                                           # what `testnet init` assumes (RiskSection)
    byzantine_fraction = 0.2
    budget = 1e-6
    accept = false

Everything is validated here, at the config boundary; the engine only sees typed objects.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from consensus import BYZANTINE_FRACTION_DEFAULT, RISK_BUDGET_DEFAULT
from ledger import MEMBERS_MAX, MODES, QUORUM_RULES, Timeouts, time_drift_ms_of
from node import ConfigFileError
from node.config import DEVICE_PATTERN, FaultConfig, load_toml, record_from_toml

__all__ = [
    "AdversaryConfig",
    "ComputeConfig",
    "DataSection",
    "FaultConfig",
    "LinkConfig",
    "ModelSection",
    "PAPER_ALIASES",
    "NetworkConfig",
    "PartitionConfig",
    "ProtocolSection",
    "RiskSection",
    "Scenario",
    "TrainingSection",
    "bundled_scenario_names",
    "current_scenario_name",
    "default_scenario_path",
    "load_scenario",
    "resolve_scenario",
]

MODEL_PUSH = ("all", "participants")
OUTSIDERS = ("blocks", "headers", "lazy")

# Bounds, so that a scenario that loads also runs: a value past them would allocate terabytes, never end, or
# overflow inside the simulator or torch, rather than fail with a clear error. Far above every scenario of
# scenarios/ and the papers.
ROUNDS_MAX = 1_000_000
STEPS_MAX = 100_000
EPOCHS_MAX = 10_000
BATCH_SIZE_MAX = 1 << 20
BATCH_INDICES_MAX = 1 << 27
"""``steps × batch_size``: the minibatch indices a job draws up front (int64: 1 GiB)."""
LR_MAX = 1e6
DURATION_MS_MAX = 1e9
"""Any duration or delay, in ms (11.6 days of virtual time)."""
BANDWIDTH_MBPS_MIN, BANDWIDTH_MBPS_MAX = 1e-3, 1e9
SPREAD_MAX = 1e6
MODEL_PARAMETERS_MAX = 1 << 28
MEMORY_BYTES_MAX = 1 << 35
"""32 GiB: a simulation whose estimate (model copies, activations, minibatch indices) exceeds it is refused."""
MODEL_COPIES_EXTRA = 8
"""The estimate counts one float32 model per member plus this many (global, aggregate, buffers)."""
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


def _empty() -> Mapping[str, Any]:
    return MappingProxyType({})


def _check(cond: bool, msg: str) -> None:
    if not cond:
        raise ValueError(msg)


def _check_ms(name: str, v: float, *, unset: float | None = None) -> None:
    """A duration in ms: finite (the loader refuses inf/nan), in ``[0, DURATION_MS_MAX]`` (or ``unset``)."""
    _check(v == unset or 0.0 <= v <= DURATION_MS_MAX, f"{name} must be in [0, {DURATION_MS_MAX:.0e}] ms, got {v}")


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
        _check(1 <= self.committee_size <= MEMBERS_MAX, f"committee_size must be in [1, {MEMBERS_MAX}]")
        _check(self.mode != "committee" or self.algorithm == "cmfl", "committee mode runs algorithm = \"cmfl\"")
        self.timeouts()  # the genesis checks the same fields: fail when the file loads, not when the run starts
        # the round rules' reserved keys: fail when the file loads (node.core is imported only where one is set)
        time_drift_ms_of(self.params)  # (a chain rule's parameter: the genesis checks it, ledger.ProtocolParams)
        if {"sampling_seed", "sampling_rule", "committee_epoch", "n_samples_cap"} & self.params.keys():
            from node.core import check_host_params  # noqa: PLC0415

            check_host_params(self.params, mode=self.mode)  # ConfigError is a ValueError

    def timeouts(self) -> Timeouts:
        """The genesis ``protocol.timeouts`` of this section (``ledger.Timeouts`` validates them)."""
        return Timeouts(
            tick_ms=self.tick_ms,
            timeout_ticks_train=self.timeout_ticks_train,
            timeout_ticks_propose=self.timeout_ticks_propose,
            timeout_ticks_prepare=self.timeout_ticks_prepare,
            timeout_ticks_commit=self.timeout_ticks_commit,
            timeout_ticks_view_change=self.timeout_ticks_view_change,
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class DataSection:
    dataset: str = "digits"
    params: Mapping[str, Any] = field(default_factory=_empty)
    partition: str = "iid"
    partition_params: Mapping[str, Any] = field(default_factory=_empty)
    test_fraction: float = 0.2
    public_size: int = 0
    """Class-balanced public samples taken out of the training pool before partitioning (sself spec §1.3);
    0 = none. Strategies that score models on a public split (Sself) need it."""
    local_datasets: int = 0
    """How many local datasets the partition makes (0: one per member). With ``K`` of them, member ``i`` holds
    local dataset ``i mod K``, shared with the other members that hold it (one copy in memory): a population of
    many simulated members on a small pool (``scenarios/scale_10k.toml``: 10,000 members on digits)."""

    def __post_init__(self) -> None:
        _check(0.0 < self.test_fraction < 1.0, "test_fraction must be in (0, 1)")
        _check(0 <= self.public_size <= 1 << 31, "public_size must be in [0, 2**31]")
        _check(0 <= self.local_datasets <= MEMBERS_MAX, f"local_datasets must be in [0, {MEMBERS_MAX}]")


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelSection:
    name: str = "mlp"
    params: Mapping[str, Any] = field(default_factory=_empty)


@dataclass(frozen=True, slots=True, kw_only=True)
class TrainingSection:
    """Local training of every client. ``epochs`` > 0 trains E passes over the local data instead of
    ``steps`` SGD steps; ``schedule`` names a learning-rate schedule of ``learning`` (``lr`` is its ``lr0``)
    evaluated at ``fl_round − 1``; ``prox_mu`` is the FedProx μ (a strategy may override it). ``device`` and
    ``reproducible`` are local choices of the machine that runs the scenario, never in the genesis:
    ``reproducible = true`` trains in reproducible mode (``learning.reproducible``: one ledger head on any x86-64
    CPU, one thread per process, portable kernels; the process must start in its environment, which
    ``concilium sim run`` sees to). ``optimizer`` is ``"sgd"`` (with ``momentum``, ``nesterov``), ``"adam"`` or
    ``"adamw"`` (with ``betas``, ``eps``); ``grad_clip`` bounds the loss gradient's norm per step (0 = off);
    ``label_smoothing`` is cross-entropy's; ``loop`` names an app's registered training loop (``""``: the
    built-in one). Everything but ``device`` and ``reproducible`` is the agreed :meth:`plan`."""

    steps: int = 10
    epochs: int = 0
    batch_size: int = 32
    lr: float = 0.05
    schedule: str = "constant"
    schedule_params: Mapping[str, Any] = field(default_factory=_empty)
    momentum: float = 0.0
    nesterov: bool = False
    weight_decay: float = 0.0
    prox_mu: float = 0.0
    sampling: str = "with_replacement"
    optimizer: str = "sgd"
    betas: tuple[float, ...] = (0.9, 0.999)
    eps: float = 1e-8
    grad_clip: float = 0.0
    label_smoothing: float = 0.0
    loop: str = ""
    device: str = "cpu"
    reproducible: bool = False

    def __post_init__(self) -> None:
        _check(1 <= self.steps <= STEPS_MAX, f"steps must be in [1, {STEPS_MAX}]")
        _check(0 <= self.epochs <= EPOCHS_MAX, f"epochs must be in [0, {EPOCHS_MAX}]")
        _check(1 <= self.batch_size <= BATCH_SIZE_MAX, f"batch_size must be in [1, {BATCH_SIZE_MAX}]")
        _check(
            self.epochs > 0 or self.steps * self.batch_size <= BATCH_INDICES_MAX,
            f"steps × batch_size = {self.steps * self.batch_size} exceeds {BATCH_INDICES_MAX} samples per local job",
        )
        # lr is a float32 in torch's SGD: past ~3.4e38 it overflows; far below, training only diverges
        _check(0 < self.lr <= LR_MAX, f"lr must be in (0, {LR_MAX:.0e}], got {self.lr}")
        _check(0 <= self.prox_mu <= LR_MAX, f"prox_mu must be in [0, {LR_MAX:.0e}]")
        _check(0 <= self.weight_decay <= LR_MAX, f"weight_decay must be in [0, {LR_MAX:.0e}]")
        _check(self.optimizer in ("sgd", "adam", "adamw"), f"optimizer must be sgd, adam or adamw, got {self.optimizer!r:.40}")
        _check(not self.nesterov or self.momentum > 0, "nesterov needs momentum > 0")
        _check(self.optimizer == "sgd" or (self.momentum == 0 and not self.nesterov),
               f"momentum and nesterov are SGD's, not {self.optimizer}'s (use betas)")
        _check(len(self.betas) == 2 and all(0 <= b < 1 for b in self.betas), "betas must be two numbers in [0, 1)")
        _check(0 < self.eps <= 1.0, f"eps must be in (0, 1], got {self.eps}")
        _check(0 <= self.grad_clip <= LR_MAX, f"grad_clip must be in [0, {LR_MAX:.0e}] (0 = off)")
        _check(0 <= self.label_smoothing < 1, f"label_smoothing must be in [0, 1), got {self.label_smoothing}")
        _check(self.loop == "" or (self.loop.isascii() and self.loop.isidentifier() and len(self.loop) <= 64),
               f"loop must be a training loop's name (an identifier of at most 64 characters), got {self.loop!r:.40}")
        _check(bool(DEVICE_PATTERN.match(self.device)), f"device must be auto, cpu, cuda, cuda:N or mps, got {self.device!r:.40}")

    def plan(self, seed: int) -> TrainingPlan:  # noqa: F821 (imported below: learning loads at first use)
        """The agreed local training of this section (``learning.TrainingPlan``) with ``seed`` as the root of the
        members' sampling randomness; ``device`` and ``reproducible`` stay local. ``epochs`` > 0 replaces
        ``steps``."""
        from learning import TrainingPlan  # noqa: PLC0415

        return TrainingPlan(
            steps=0 if self.epochs else self.steps,
            epochs=self.epochs,
            batch_size=self.batch_size,
            lr=self.lr,
            schedule_name=self.schedule,
            schedule_params=self.schedule_params,
            momentum=self.momentum,
            nesterov=self.nesterov,
            weight_decay=self.weight_decay,
            prox_mu=self.prox_mu,
            sampling=self.sampling,
            optimizer=self.optimizer,
            betas=(self.betas[0], self.betas[1]),
            eps=self.eps,
            grad_clip=self.grad_clip,
            label_smoothing=self.label_smoothing,
            loop=self.loop,
            seed=seed,
        )


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
        _check_ms("link latency_ms", self.latency_ms, unset=-1.0)
        _check(
            self.bandwidth_mbps == -1.0 or BANDWIDTH_MBPS_MIN <= self.bandwidth_mbps <= BANDWIDTH_MBPS_MAX,
            f"link bandwidth_mbps must be in [{BANDWIDTH_MBPS_MIN}, {BANDWIDTH_MBPS_MAX:.0e}]",
        )
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
        _check_ms("duration_ms", self.duration_ms)


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
    model_push: str = "all"
    """Who the proposer of a block pushes the new model to, besides the block: ``"all"`` (every member outside the
    committee, as a node of the network runtime does) or ``"participants"`` (the next round's trainers and
    validators; the others receive the block alone and fetch no model they do not need: ``scale_10k.toml``).
    The same ledger, as long as no member outside the next round misses a model it would have fetched under
    ``"all"`` (a validator that did not validate the committed proposal, a lost push): that fetch is traffic
    ``"all"`` does not have, and it delays that member. A push left out moves no other message's random draws
    (``Simulation._draws``). The network runtime always pushes to all."""
    outsiders: str = "blocks"
    """What the proposer sends the members outside the next round of each decided block: ``"blocks"`` (the
    whole block) or ``"headers"`` (its header and commit certificate, about 1 kB instead of one entry per
    update; such a member follows the chain by headers and takes the whole block when it has a role:
    ``node.core.OutsiderPolicy(headers_for_outsiders=True)``). ``"headers"`` needs ``model_push = "participants"``
    and the coordinator mode; with a strategy that has a staleness window every member still gets whole blocks (each
    needs the included updates). It does not change the ledger. ``"lazy"``: nothing at all; a member outside
    the round sleeps and follows no block until the block before a round in which it has a role reaches it, then
    catches up by headers from its sender (``node.core.OutsiderPolicy(lazy_outsiders=True)``), with the same
    requirements as ``"headers"``. A member outside the round then costs nothing in it. The catch-up takes a few messages more
    before such a member can train, which can move when it trains (another ledger than ``"headers"`` for the same
    seed: still one every run with that seed gives)."""

    def __post_init__(self) -> None:
        _check(0 <= self.latency_spread <= SPREAD_MAX and 0 <= self.bandwidth_spread <= SPREAD_MAX,
               f"spreads must be in [0, {SPREAD_MAX:.0e}]")
        _check(self.model_push in MODEL_PUSH, f"model_push must be one of {', '.join(MODEL_PUSH)}")
        _check(self.outsiders in OUTSIDERS, f"outsiders must be one of {', '.join(OUTSIDERS)}")
        _check(self.outsiders == "blocks" or self.model_push == "participants",
               f'outsiders = "{self.outsiders}" needs model_push = "participants" (a member that receives every '
               "model needs every block's model digest)")
        for name in ("drop", "duplicate", "reorder"):
            v = getattr(self, name)
            _check(0.0 <= v < 1.0, f"{name} must be in [0, 1)")
        for name in ("latency_ms", "jitter_ms", "reorder_ms"):
            _check_ms(name, getattr(self, name))
        _check(BANDWIDTH_MBPS_MIN <= self.bandwidth_mbps <= BANDWIDTH_MBPS_MAX,
               f"bandwidth_mbps must be in [{BANDWIDTH_MBPS_MIN}, {BANDWIDTH_MBPS_MAX:.0e}]")


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
        for name in ("train_ms", "straggler_ms", "round_ms"):
            _check_ms(name, getattr(self, name))
        _check(0 <= self.speed_spread <= SPREAD_MAX, f"speed_spread must be in [0, {SPREAD_MAX:.0e}]")
        _check(self.stragglers >= 0, "stragglers must be >= 0")


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
    (a seeded choice) run the attack for that round's job (sself spec §3.1: "exactly round(rK) adversaries per
    round"); needs ``byzantine = 0``."""
    from_round: int = 1
    """First round (1-based) in which the adversaries attack; before it they train and send honestly (sself spec
    §3.4: the backdoor runs "after the 10-th global round", i.e. ``from_round = 11``). Applies to ``attack``,
    ``data_attack`` and ``n_samples``; availability and faults have their own schedules."""
    n_samples: int = 0
    """The sample count each Byzantine client signs in its updates instead of its own (e.g.
    ``9007199254740991`` = 2^53 − 1, the largest a commitment takes); 0: its own. The round rules cap what a
    count weighs (``protocol.params.n_samples_cap``)."""

    def __post_init__(self) -> None:
        _check(self.byzantine >= 0, "byzantine must be >= 0")
        _check(self.from_round >= 1, "from_round must be >= 1")
        _check(self.per_round >= 0, "per_round must be >= 0")
        _check(0 <= self.n_samples < 2**53, "n_samples must be in [0, 2^53 - 1] (0: the client's own count)")
        attack = bool(self.attack or self.data_attack or self.n_samples)
        _check(self.per_round == 0 or self.byzantine == 0, "give either byzantine (a fixed set) or per_round, not both")
        _check(self.per_round == 0 or attack, "per_round adversaries need an attack")
        _check(self.byzantine == 0 or attack, "byzantine clients need an attack")


@dataclass(frozen=True, slots=True, kw_only=True)
class RiskSection:
    """What ``concilium testnet init`` assumes when it checks the risk of this scenario's committees before writing a
    genesis for a real network (``consensus.committee_risk``; its flags override these keys). ``sim run`` studies
    attacks on purpose: it only prints the figure."""

    byzantine_fraction: float = BYZANTINE_FRACTION_DEFAULT
    """The share of members assumed Byzantine (``⌊f · members⌋`` of them), in [0, 1]."""
    budget: float = RISK_BUDGET_DEFAULT
    """The highest probability of a Byzantine quorum over the run that ``testnet init`` accepts, in [0, 1]."""
    accept: bool = False
    """Write the testnet even when the risk is over the budget (as ``testnet init --accept-risk``)."""

    def __post_init__(self) -> None:
        f = self.byzantine_fraction
        _check(0.0 <= f <= 1.0, f"byzantine_fraction must be in [0, 1], got {f}")
        _check(0.0 <= self.budget <= 1.0, f"budget must be in [0, 1], got {self.budget}")


@dataclass(frozen=True, slots=True, kw_only=True)
class Scenario:
    name: str
    app: str = ""
    """The app this scenario's plug-ins come from (``node.apps``): a ``.py`` file or a package directory, relative
    to the scenario file in the file, absolute once loaded (:func:`load_scenario` imports it and the genesis pins
    its digest); empty: none."""
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
    risk: RiskSection = field(default_factory=RiskSection)

    def __post_init__(self) -> None:
        for where, table in (
            ("protocol.params", self.protocol.params),
            ("data.params", self.data.params),
            ("data.partition_params", self.data.partition_params),
            ("model.params", self.model.params),
            ("training.schedule_params", self.training.schedule_params),
        ):
            _check_canonical(where, table)
        # the name goes into the chain id (sim-<name>-<seed>) and the node keys
        _check(bool(_NAME.match(self.name)), f"name must be 1-64 characters of [A-Za-z0-9._-] starting alphanumeric, got {self.name!r:.80}")
        _check(self.seed >= 0, "seed must be >= 0")
        _check(1 <= self.rounds <= ROUNDS_MAX, f"rounds must be in [1, {ROUNDS_MAX}]")
        _check(1 <= self.members <= MEMBERS_MAX, f"members must be in [1, {MEMBERS_MAX}]")
        _check(self.eval_every >= 1, "eval_every must be >= 1")
        _check(self.protocol.committee_size <= self.members, "committee_size exceeds members")
        _check(self.data.local_datasets <= self.members, "data.local_datasets exceeds members")
        _check(self.network.outsiders == "blocks" or self.protocol.mode == "coordinator",
               f'network.outsiders = "{self.network.outsiders}" needs protocol.mode = "coordinator" (in committee '
               "mode the next committee follows from the scores in the payload, not from the header)")
        _check(
            self.adversary.byzantine <= self.members - self.protocol.committee_size,
            "more Byzantine clients than members outside the genesis committee",
        )
        n = self.members
        for i, f in enumerate(self.adversary.faults):
            if f.target.startswith("member:"):
                _check(int(f.target[7:]) < n, f"adversary.faults[{i}]: target {f.target} does not exist ({n} members: 0 to {n - 1})")
        for i, link in enumerate(self.network.links):
            _check(max(link.a, link.b) < n, f"network.links[{i}]: member {max(link.a, link.b)} does not exist ({n} members)")
        for i, part in enumerate(self.network.partitions):
            named = max((m for g in part.groups for m in g), default=0)
            _check(named < n, f"network.partitions[{i}]: member {named} does not exist ({n} members)")
        _check_attacks(self.adversary)
        _check_model(self.model, self.members)
        _check_partition(self.data, self.members)


def _check_canonical(where: str, table: Mapping[str, Any]) -> None:
    """A free-form table holds only what a genesis can carry (64-bit integers, finite floats): a wider value
    would overflow in numpy or torch long after the file loaded."""
    from ledger import encode  # noqa: PLC0415

    try:
        encode(dict(table))
    except (ValueError, TypeError) as e:
        raise ValueError(f"{where}: {e}") from None


def _check_attacks(adv: AdversaryConfig) -> None:
    """Resolve the attack specs as the simulation does, so a bad one fails when the file loads."""
    from learning import parse_data_attack, parse_update_attack  # noqa: PLC0415

    try:
        if adv.attack:
            parse_update_attack(adv.attack)
        if adv.data_attack:
            parse_data_attack(adv.data_attack)
    except ValueError as e:  # learning's ConfigError
        raise ValueError(f"adversary: {e}") from None


def model_parameters(model: ModelSection) -> int:
    """Parameter count of the scenario's model, built on torch's ``meta`` device (no memory, no RNG).

    Raises ``ValueError`` for an unknown model, bad parameters, or sizes torch cannot even describe."""
    import torch  # noqa: PLC0415

    from learning import model_spec  # noqa: PLC0415

    try:
        spec = model_spec(model.name, dict(model.params))
        with torch.device("meta"):
            module = spec.build()
        return sum(p.numel() for p in module.parameters())
    except ValueError as e:  # learning's ConfigError
        raise ValueError(f"model: {e}") from None
    except (RuntimeError, OverflowError, TypeError) as e:  # e.g. "Storage size calculation overflowed"
        raise ValueError(f"model: {model.name!r} with these params cannot be built: {str(e).splitlines()[0][:200]}") from None


def _check_model(model: ModelSection, members: int) -> None:
    """Refuse a model that would not fit: past ``MODEL_PARAMETERS_MAX`` parameters, or one float32 copy per
    member (plus a few) past ``MEMORY_BYTES_MAX``."""
    n = model_parameters(model)
    _check(n <= MODEL_PARAMETERS_MAX, f"model: {model.name!r} has {n:,} parameters, more than {MODEL_PARAMETERS_MAX:,}")
    need = 4 * n * (members + MODEL_COPIES_EXTRA)
    _check(
        need <= MEMORY_BYTES_MAX,
        f"model: {n:,} parameters × {members} members need about {need / 2**30:.0f} GiB, more than {MEMORY_BYTES_MAX >> 30} GiB",
    )


def _check_partition(data: DataSection, members: int) -> None:
    """Resolve ``data.partition`` with its parameters as the simulation does (``num_clients`` / ``max_clients``
    default to ``data.local_datasets``, else ``members``), so an unknown partition or a bad parameter fails when
    the file loads; an explicit ``num_clients`` must equal that count. Checks that need the dataset (``pairs``: an
    even class count, every class at least one sample per holder) run when the simulation partitions it."""
    from learning import (  # imports torch: only when validating
        PARTITIONS,
        partition_spec,
    )

    params = dict(data.partition_params)
    fields = getattr(PARTITIONS.get(data.partition), "__dataclass_fields__", {})
    want, what = (data.local_datasets, "data.local_datasets") if data.local_datasets else (members, "members")
    if "num_clients" in fields:
        n = params.setdefault("num_clients", want)
        _check(n == want, f"data.partition_params.num_clients = {n!r} must equal {what} = {want}")
    elif "max_clients" in fields:
        params.setdefault("max_clients", want)
    try:
        partition_spec(data.partition, params)
    except ValueError as e:  # learning's ConfigError
        raise ValueError(f"data.partition: {e}") from None


def _bundled_dir() -> Path:
    # sim/scenarios: a symlink to the top-level scenarios/ in a checkout, package data in a wheel.
    return Path(__file__).resolve().parent / "scenarios"


def default_scenario_path() -> Path:
    """The bundled ``quickstart`` scenario (``scenarios/quickstart.toml``), in a checkout or an installed wheel."""
    return _bundled_dir() / "quickstart.toml"


def bundled_scenario_names() -> list[str]:
    """Names of the scenarios that ship inside the package: top-level ones first, then ``full/...``
    (the full-scale runs, which need local dataset files)."""
    root = _bundled_dir()
    names = [p.relative_to(root).with_suffix("").as_posix() for p in root.rglob("*.toml")]
    return sorted(names, key=lambda n: ("/" in n, n))


PAPER_ALIASES: Mapping[str, str] = MappingProxyType({
    "seed000": "unavailability",  # FedAvg/FedProx/MIFA under adversarial client unavailability (Su, Xu, Yang)
    "seed001": "mimic",  # MimiC: combating client dropouts by mimicking central updates (Sun, Mao, Zhang)
    "seed002": "sself",  # Sself: robust federated learning against stragglers and adversaries
    "seed003": "cmfl",  # CMFL: committee mechanism based federated learning
    "seed004": "fedro",  # FedRo: tackling Byzantine clients in federated learning
})
"""The papers' former ids (``seed000`` … ``seed004``) and the names they go by now. A bundled scenario file of a
paper is ``<name>_<what>.toml`` (``seed001_corr.toml`` is now ``mimic_corr.toml``), or ``<name>.toml`` where
``<what>`` was the name itself (``seed003_cmfl.toml`` is ``cmfl.toml``, ``seed004_fedro.toml`` is ``fedro.toml``).
The files keep their ``name`` keys (``seed001-corr``): the chain id and the member keys derive from it, so a
ledger written under the old file name and one written under the new are the same chain."""


def current_scenario_name(name: str) -> str:
    """The current name of a scenario file (or of a path's last part, with or without ``.toml``) that ``name``
    gives by a paper's former id: ``seed001_corr`` is ``mimic_corr``, ``full/seed004_femnist_fig2.toml`` is
    ``full/fedro_femnist_fig2.toml``, ``seed003_cmfl`` is ``cmfl``. Any other name is returned unchanged."""
    head, sep, last = name.replace(os.sep, "/").rpartition("/")
    old, underscore, what = last.partition("_")
    if old not in PAPER_ALIASES or not underscore or not what:
        return name
    new = PAPER_ALIASES[old]
    stem = what.removesuffix(".toml")
    return head + sep + (new if stem == new else f"{new}_{stem}") + what[len(stem):]


def _renamed_file(path: Path) -> Path | None:
    """``path``'s file under its current name, when ``path`` is missing and names a renamed bundled scenario."""
    new = current_scenario_name(path.name)
    if new == path.name:
        return None
    moved = path.with_name(new)
    try:
        return moved if moved.is_file() else None
    except OSError:  # e.g. a name too long for the file system
        return None


def resolve_scenario(spec: str | os.PathLike[str] | None) -> Path:
    """The scenario file that ``spec`` names: a path to a TOML file, or the name of a bundled scenario
    (``quickstart``, ``coordinator_fedavg.toml``, ``full/fedro_femnist_fig2``); ``None`` is ``quickstart``.

    An existing file wins over a bundled name, so a local file always runs as given. A paper's former scenario
    names still work, as names and as paths (``seed001_corr``, ``scenarios/seed004_fedro.toml``: see
    :data:`PAPER_ALIASES`). A missing one raises :class:`ConfigFileError` with one line listing the bundled names.
    """
    if spec is None:
        return default_scenario_path()
    path = Path(spec)
    try:
        if path.is_file():
            return path
        exists = path.exists()
    except OSError:  # e.g. a name too long for the file system: not a file, maybe a bundled name
        exists = False
    names = bundled_scenario_names()
    name = str(spec).removesuffix(".toml")
    for n in (name, current_scenario_name(name)):
        if n in names:
            return _bundled_dir() / f"{n}.toml"
    if not exists and (moved := _renamed_file(path)) is not None:
        return moved
    if exists:  # a directory or a special file: load_scenario says what is wrong with it
        return path
    raise ConfigFileError(f"{spec}: no such scenario file or bundled scenario (bundled: {', '.join(names)})")


SETS_MAX = 256


def apply_sets(data: dict[str, Any], sets: Sequence[str]) -> None:
    """Apply ``--set KEY=VALUE`` overrides to a scenario table in place: ``KEY`` a dotted path (``training.lr``,
    ``protocol.params.clients``; missing tables are made), ``VALUE`` a TOML value (``0.05``, ``true``, ``[16, 8]``,
    ``"iid"``, ``{ f = 1 }``), or else taken as a string (``data.partition=iid``). The result is validated like the
    file. Raises :class:`ConfigFileError` with one line naming the bad ``--set``."""
    import tomllib  # noqa: PLC0415

    if len(sets) > SETS_MAX:
        raise ConfigFileError(f"--set: at most {SETS_MAX} of them")
    for item in sets:
        key, eq, text = item.partition("=")
        parts = key.strip().split(".")
        if not eq or not all(re.fullmatch(r"[A-Za-z_][A-Za-z0-9_-]{0,63}", p) for p in parts):
            raise ConfigFileError(f"--set {item!r:.80}: expected KEY=VALUE with KEY a dotted scenario key")
        try:
            value = tomllib.loads(f"v = {text}")["v"]
        except tomllib.TOMLDecodeError:
            value = text  # a bare word: a string
        table = data
        for p in parts[:-1]:
            nxt = table.setdefault(p, {})
            if not isinstance(nxt, dict):
                raise ConfigFileError(f"--set {item!r:.80}: {p} is not a table in the scenario")
            table = nxt
        table[parts[-1]] = value


def load_scenario(path: str | os.PathLike[str], *, sets: Sequence[str] = (), **overrides: Any) -> Scenario:
    """Load and validate a scenario file; ``overrides`` replace top-level keys (e.g. ``seed``, ``rounds``), ``sets``
    are ``--set KEY=VALUE`` overrides (:func:`apply_sets`), applied first. Its ``app`` (relative to the file) is
    imported before the rest validates, so that the names it registers do (``node.apps``). A path to a bundled
    scenario by a paper's former name loads the renamed file (:func:`current_scenario_name`)."""
    if not os.path.exists(path) and (moved := _renamed_file(Path(path))) is not None:
        path = moved
    data = load_toml(path, what="scenario")
    apply_sets(data, sets)
    for k, v in overrides.items():
        if v is not None:
            data[k] = v
    app = data.get("app")
    if app is not None and app != "":
        if not isinstance(app, str):
            raise ConfigFileError(f"{path}: app must be the path of a .py file or a package directory, got {app!r:.60}")
        from node.apps import load_app  # noqa: PLC0415

        resolved = (Path(path).parent / app).resolve()
        load_app(resolved)
        data["app"] = str(resolved)
    return record_from_toml(Scenario, data, source=str(path))
