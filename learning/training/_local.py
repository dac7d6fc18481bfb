"""Local training: K local steps (or E epochs) from the global model, returning the update and statistics.

One client update, for every algorithm of the papers (unavailability spec Alg. FedAvg/FedProx, mimic spec eq. (2), sself spec
eq. (8), cmfl spec eq. (4), fedro spec Alg. 1)::

    z ← θ_t;  buf ← m_0 (or 0)
    for each of K minibatches ξ_k (drawn from a seeded torch.Generator):
        d ← ∇ℓ(z; ξ_k) + λ z + μ (z − θ_t) + c          # weight decay λ, FedProx μ, correction c (SCAFFOLD)
        buf ← ρ buf + d                                   # momentum ρ (PyTorch convention, no dampening)
        z ← z − η · (buf  or  d + ρ buf if Nesterov  or  d if ρ = 0)
    return Δ = z − θ_t

The update is a **delta in parameter units** with a plus sign: ``θ_{t+1} = θ_t + Σ_i w_i Δ_i`` is FedAvg
(fedro spec Alg. 1 ``u = x_{t,K} − x_t``; mimic spec's code sends ``w_t − w`` = ``−Δ``; divide by ``−η K`` for
mimic spec's gradient units). The FedProx momentum buffer includes the proximal term, as in unavailability spec §2.2.

The hot path (the simulator runs it for every client of every round) uses a :class:`FlatParameters` binding:
loading the global model is one ``copy_``, a step is one forward/backward plus a few fused vector operations, and
minibatches are ``index_select`` on tensors already in memory (no DataLoader).

Beside that SGD program (the default, whose bits every bundled scenario's ledger head depends on), a config may
ask for Adam or AdamW (``optimizer``), a clip of the loss gradient's norm (``grad_clip``) and label smoothing
(``label_smoothing``), each off by default and each leaving the SGD arithmetic untouched when off. An app may
bring its own loop instead (:func:`register_training_loop`): :class:`LocalTrainer` with ``loop="name"`` loads θ_t
into a model, lets the loop train it and returns ``Δ = trained − θ_t`` as always.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import replace, dataclass
from typing import Literal, Protocol

import torch
from torch import nn
from torch.nn import functional as F

from learning._errors import ConfigError
from learning.data import Dataset
from learning.models import (
    FlatParameters, ModelSpec, SeededDropout, build_model, flatten_parameters, unflatten_parameters,
)

__all__ = [
    "BatchTransform",
    "EvalResult",
    "LocalResult",
    "LocalTrainer",
    "LocalTrainingConfig",
    "LoopConfig",
    "OPTIMIZERS",
    "TRAINING_LOOPS",
    "TrainingLoop",
    "evaluate",
    "register_training_loop",
    "resolve_device",
    "train_local",
]

OPTIMIZERS = ("sgd", "adam", "adamw")
"""The built-in loop's optimizers (``LocalTrainingConfig.optimizer``)."""


def resolve_device(name: str) -> torch.device:
    """``"cpu"``, ``"cuda"`` or ``"cuda:N"`` (the ``--device`` option) as a :class:`torch.device`.

    Raises
    ------
    ConfigError
        Unknown device, or CUDA requested where it is not available.
    """
    try:
        device = torch.device(name)
    except (RuntimeError, TypeError):
        raise ConfigError(f"unknown device {name!r}; use cpu, cuda or cuda:N") from None
    if device.type not in ("cpu", "cuda"):
        raise ConfigError(f"unsupported device {name!r}; use cpu, cuda or cuda:N")
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise ConfigError(f"device {name!r} requested but CUDA is not available")
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise ConfigError(f"device {name!r} requested but only {torch.cuda.device_count()} CUDA device(s) exist")
    return device


BatchTransform = Callable[[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]
"""``(x_batch, y_batch) -> (x', y')``: rewrites each minibatch before its step (a Byzantine client's per-batch data
poisoning, e.g. :class:`learning.attacks.Backdoor` sself spec §3.4: the first 20 of every batch of 64 triggered and
relabelled). Must not modify its inputs (they may be views of the client's dataset)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class LocalTrainingConfig:
    """How a client trains locally. Exactly one of ``steps`` / ``epochs``.

    Attributes
    ----------
    steps:
        K local steps (unavailability spec s; cmfl spec τ; fedro spec K; W1: 10).
    epochs:
        E passes over the local data, ``⌈n/B⌉`` steps each (``⌊n/B⌋`` with ``drop_last``) — mimic spec/sself spec's
        "local epochs".
    batch_size:
        B; ``None`` = full batch (every step on the whole local dataset, no sampling; unavailability spec Synthetic).
    sampling:
        ``"with_replacement"``: every batch is B uniform draws (mimic spec §6.1; W1 "seeded sampling");
        ``"shuffle"``: reshuffled passes without replacement (steps mode: consecutive batches over concatenated
        permutations); ``"sequential"``: fixed order from a cursor that the caller keeps across rounds
        (unavailability spec §4.3's persistent DataLoader iterator; see ``LocalResult.next_cursor``).
    drop_last:
        Epoch mode: drop the last partial batch.
    momentum, nesterov:
        ρ of momentum SGD (unavailability spec Table 1: 0.9 for FedProx and the Byzantine runs); PyTorch convention. SGD
        only (a ConfigError with Adam/AdamW), and so is a ``momentum_buffer`` carried across rounds.
    weight_decay:
        λ. SGD and Adam: ℓ2, added to the gradient (fedro spec App. C: ℓ2 1e-4; cmfl spec §7.3: 1e-3 on all
        parameters here). AdamW: decoupled, ``z ← (1 − η λ) z`` before each step (Loshchilov & Hutter, 2019).
    prox_mu:
        FedProx μ: adds ``μ (z − θ_t)`` (unavailability spec §2.2 μ_0; mimic spec §2.5).
    optimizer:
        ``"sgd"`` (the program of the module docstring), ``"adam"`` or ``"adamw"`` (``torch.optim.Adam`` /
        ``AdamW``'s arithmetic on the flat vector, no AMSGrad). Adam's moments and step count start fresh in
        every local job (common FL practice: no optimizer state travels between rounds or clients).
    betas, eps:
        Adam/AdamW's (β1, β2), each in [0, 1), and ε > 0 (ignored by SGD).
    grad_clip:
        Largest global ℓ2 norm of the loss gradient per step (``torch.nn.utils.clip_grad_norm_`` over all
        parameters: scaled by ``min(1, c / (‖g‖ + 1e-6))``); 0 = off. The loss gradient is clipped *before* the
        weight decay, the FedProx term and the correction are added.
    label_smoothing:
        Cross-entropy's label smoothing ε in [0, 1) (``F.cross_entropy(..., label_smoothing=ε)``); 0 = off. The
        reported losses are then the smoothed ones.
    """

    steps: int | None = None
    epochs: int | None = None
    batch_size: int | None = 32
    sampling: Literal["with_replacement", "shuffle", "sequential"] = "with_replacement"
    drop_last: bool = False
    momentum: float = 0.0
    nesterov: bool = False
    weight_decay: float = 0.0
    prox_mu: float = 0.0
    optimizer: Literal["sgd", "adam", "adamw"] = "sgd"
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8
    grad_clip: float = 0.0
    label_smoothing: float = 0.0

    def __post_init__(self) -> None:
        if (self.steps is None) == (self.epochs is None):
            raise ConfigError("local training needs exactly one of steps= or epochs=")
        for key, value in (("steps", self.steps), ("epochs", self.epochs), ("batch_size", self.batch_size)):
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value <= 0):
                raise ConfigError(f"local training: {key} must be a positive int, got {value!r}")
        if self.sampling not in ("with_replacement", "shuffle", "sequential"):
            raise ConfigError(f"local training: unknown sampling {self.sampling!r}")
        if not 0.0 <= self.momentum < 1.0:
            raise ConfigError(f"local training: momentum must be in [0, 1), got {self.momentum}")
        if self.nesterov and self.momentum == 0.0:
            raise ConfigError("local training: nesterov needs momentum > 0")
        for key, value in (("weight_decay", self.weight_decay), ("prox_mu", self.prox_mu)):
            if not (math.isfinite(value) and value >= 0.0):
                raise ConfigError(f"local training: {key} must be >= 0, got {value}")
        if self.optimizer not in OPTIMIZERS:
            raise ConfigError(f"local training: unknown optimizer {self.optimizer!r}; use {', '.join(OPTIMIZERS)}")
        if self.optimizer != "sgd" and (self.momentum or self.nesterov):
            raise ConfigError(f"local training: momentum and nesterov are SGD's, not {self.optimizer}'s (use betas)")
        betas = self.betas
        if not (isinstance(betas, tuple | list) and len(betas) == 2 and all(_is_number(b) for b in betas)):
            raise ConfigError(f"local training: betas must be two numbers (β1, β2), got {betas!r:.60}")
        if not all(0.0 <= b < 1.0 for b in betas):
            raise ConfigError(f"local training: betas must each be in [0, 1), got {tuple(betas)}")
        object.__setattr__(self, "betas", (float(betas[0]), float(betas[1])))
        if not (_is_number(self.eps) and math.isfinite(self.eps) and self.eps > 0.0):
            raise ConfigError(f"local training: eps must be a positive finite number, got {self.eps!r:.40}")
        if not (_is_number(self.grad_clip) and math.isfinite(self.grad_clip) and self.grad_clip >= 0.0):
            raise ConfigError(f"local training: grad_clip must be >= 0 (0 = off), got {self.grad_clip!r:.40}")
        if not (_is_number(self.label_smoothing) and 0.0 <= self.label_smoothing < 1.0):
            raise ConfigError(f"local training: label_smoothing must be in [0, 1), got {self.label_smoothing!r:.40}")


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class LocalResult:
    """One client's local training outcome.

    Attributes
    ----------
    delta:
        ``Δ = z_K − θ_t``, a new 1-D tensor (dtype/device of the model).
    num_samples:
        Size n_i of the local dataset (the FedAvg weight numerator).
    steps:
        Number of SGD steps taken.
    samples_seen:
        Sum of the batch sizes.
    lr:
        The learning rate used.
    loss_mean, loss_last:
        Mean and last minibatch loss (the data term, before regularisers), at the iterate before each step.
    momentum_buffer:
        Final momentum buffer (None without momentum): pass it back for client momentum that persists across
        rounds (unavailability spec §2.4).
    next_cursor:
        ``"sequential"`` sampling: where the next round continues; otherwise 0.
    """

    delta: torch.Tensor
    num_samples: int
    steps: int
    samples_seen: int
    lr: float
    loss_mean: float
    loss_last: float
    momentum_buffer: torch.Tensor | None
    next_cursor: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class EvalResult:
    """Mean cross-entropy loss and accuracy of a model on a dataset."""

    loss: float
    accuracy: float
    num_samples: int


def minibatch_indices(
    n: int, config: LocalTrainingConfig, generator: torch.Generator, cursor: int
) -> tuple[list[torch.Tensor | None], int]:
    """The minibatch index tensors (CPU int64) of one local run, and the next cursor: the sampler
    :meth:`LocalTrainer.train` draws from ``generator`` (public so that a replay elsewhere can use the very same
    minibatches, see ``benchmarks/frameworks.py``)."""
    batch = config.batch_size
    if batch is None:
        count = config.steps if config.steps is not None else config.epochs
        assert count is not None
        return [None] * count, 0
    if config.steps is not None:
        k = config.steps
        if config.sampling == "with_replacement":
            return list(torch.randint(0, n, (k, batch), generator=generator).unbind(0)), 0
        if config.sampling == "shuffle":
            rounds = -(-k * batch // n)
            order = torch.cat([torch.randperm(n, generator=generator) for _ in range(rounds)])
            return list(order[: k * batch].view(k, batch).unbind(0)), 0
        positions = (torch.arange(k * batch, dtype=torch.int64) + cursor) % n
        return list(positions.view(k, batch).unbind(0)), (cursor + k * batch) % n
    assert config.epochs is not None
    out: list[torch.Tensor | None] = []
    per_epoch = n // batch if config.drop_last else -(-n // batch)
    for _ in range(config.epochs):
        if config.sampling == "with_replacement":
            order = torch.randint(0, n, (n,), generator=generator)
        elif config.sampling == "shuffle":
            order = torch.randperm(n, generator=generator)
        else:
            order = torch.arange(n, dtype=torch.int64)
        out.extend(order[i * batch : (i + 1) * batch] for i in range(per_epoch))
    return out, 0


@dataclass(frozen=True, slots=True, kw_only=True)
class LoopConfig:
    """What a custom training loop is told about its job.

    Attributes
    ----------
    lr:
        η of this round (``schedule(fl_round)``).
    training:
        The agreed :class:`LocalTrainingConfig` (steps or epochs, batch size, optimizer...): the loop may follow
        it or not; nothing checks.
    device:
        Where the model and the data are.
    """

    lr: float
    training: LocalTrainingConfig
    device: torch.device


class TrainingLoop(Protocol):
    """An app's own local training: ``train(model, data, config, rng) -> {"loss": ..., "steps": ...} | None``.

    It trains ``model`` (θ_t already loaded, in train mode, no gradients; on ``config.device``) in place on
    ``data`` (on the same device) and draws every random number from ``rng`` (a seeded CPU
    :class:`torch.Generator`, the job's only randomness). It may return statistics: ``loss`` (the mean loss),
    ``loss_last``, ``steps`` and ``samples_seen`` become the :class:`LocalResult`'s; other keys are ignored."""

    def __call__(
        self, model: nn.Module, data: Dataset, config: LoopConfig, rng: torch.Generator, /
    ) -> Mapping[str, float] | None: ...


TRAINING_LOOPS: dict[str, TrainingLoop] = {}
"""Registry ``name → training loop``, filled by :func:`register_training_loop` (an app's, at import)."""


def register_training_loop(name: str) -> Callable[[TrainingLoop], TrainingLoop]:
    """Function decorator: register a custom local training loop under ``name`` (``LocalTrainer(loop=name)``,
    ``TrainingPlan.loop``, the scenario's ``training.loop``).

    The audit never re-executes local training (it checks digests, scores and aggregates), so a chain trained by
    a custom loop stays as verifiable as one trained by the built-in loop. Strategies that shape the local program
    (FedProx μ > 0, SCAFFOLD's correction, client momentum carried across rounds, per-batch data attacks) need the
    built-in loop: :meth:`LocalTrainer.train` refuses them with a custom one.

    Examples
    --------
    In an app (``node.apps``)::

        @register_training_loop("plain_sgd")
        def plain_sgd(model, data, config, rng):
            opt = torch.optim.SGD(model.parameters(), lr=config.lr)
            steps = config.training.steps or 1
            for _ in range(steps):
                idx = torch.randint(0, len(data), (32,), generator=rng).to(config.device)
                opt.zero_grad()
                loss = F.cross_entropy(model(data.x[idx]), data.y[idx])
                loss.backward()
                opt.step()
            return {"loss": float(loss), "steps": steps}
    """
    if not (isinstance(name, str) and name.isidentifier()):
        raise ConfigError(f"training loop name {name!r:.60} is not an identifier")

    def decorate(fn: TrainingLoop) -> TrainingLoop:
        if name in TRAINING_LOOPS:
            raise ConfigError(f"training loop {name!r} is already registered")
        if not callable(fn):
            raise ConfigError(f"training loop {name!r} is not callable")
        TRAINING_LOOPS[name] = fn
        return fn

    return decorate


def _dropout_generator(module: nn.Module, generator: torch.Generator, device: torch.device) -> None:
    dropouts = [m for m in module.modules() if isinstance(m, SeededDropout)]
    if not dropouts:
        return
    if device.type == "cpu":
        dev_gen = generator
    else:  # derive a device generator from the seeded CPU stream
        dev_gen = torch.Generator(device=device)
        dev_gen.manual_seed(int(torch.randint(0, 2**62, (1,), generator=generator)))
    for m in dropouts:
        m.generator = dev_gen


def _check_job(
    global_params: torch.Tensor, data: Dataset, vec: torch.Tensor, *, lr: float, generator: torch.Generator
) -> torch.Tensor:
    """Refuse a bad job (ConfigError); return θ_t on the model's device and dtype, never aliasing ``vec``."""
    if not (math.isfinite(lr) and lr > 0):
        raise ConfigError(f"learning rate must be a positive finite number, got {lr}")
    if generator.device.type != "cpu":
        raise ConfigError("train_local samples minibatches with a CPU torch.Generator")
    if len(data) == 0:
        raise ConfigError("cannot train on an empty local dataset")
    device = vec.device
    if data.x.device != device:
        raise ConfigError(f"data on {data.x.device} but the model on {device}: use Dataset.to(device)")
    if data.x.is_floating_point() and data.x.dtype != vec.dtype:
        raise ConfigError(f"data are {data.x.dtype} but the model is {vec.dtype}: use Dataset.to(device, dtype)")
    if global_params.dim() != 1 or global_params.numel() != vec.numel():
        raise ConfigError(f"global_params must be 1-D of length {vec.numel()}, got {tuple(global_params.shape)}")
    theta = global_params.to(device=device, dtype=vec.dtype)
    if theta.data_ptr() == vec.data_ptr():
        theta = theta.clone()
    return theta


def _clip_norm_(grad: torch.Tensor, max_norm: float) -> None:
    """``torch.nn.utils.clip_grad_norm_`` on the flat gradient: ``g ← g · min(1, c / (‖g‖₂ + 1e-6))`` (no host
    synchronisation: the factor stays a tensor)."""
    norm = torch.linalg.vector_norm(grad)
    grad.mul_(torch.clamp(max_norm / (norm + 1e-6), max=1.0))


class _Adam:
    """Adam/AdamW on the flat vector, with ``torch.optim.Adam``'s single-tensor arithmetic (Kingma & Ba, 2015;
    AdamW: Loshchilov & Hutter, 2019)::

        t ← t + 1;  z ← (1 − η λ) z  (AdamW)
        m ← β1 m + (1 − β1) d;  v ← β2 v + (1 − β2) d²
        z ← z − η / (1 − β1^t) · m / (√v / √(1 − β2^t) + ε)

    ``d`` is the gradient with the ℓ2 weight decay (Adam), FedProx term and correction added. The state starts
    at zero for every local job."""

    __slots__ = ("beta1", "beta2", "decay", "eps", "exp_avg", "exp_avg_sq", "t")

    def __init__(self, vec: torch.Tensor, config: LocalTrainingConfig) -> None:
        self.beta1, self.beta2 = config.betas
        self.eps = config.eps
        self.decay = config.weight_decay if config.optimizer == "adamw" else 0.0
        self.exp_avg = torch.zeros_like(vec)
        self.exp_avg_sq = torch.zeros_like(vec)
        self.t = 0.0

    def step_(self, vec: torch.Tensor, d: torch.Tensor, lr: float) -> None:
        self.t += 1.0
        if self.decay:
            vec.mul_(1 - lr * self.decay)
        self.exp_avg.lerp_(d, 1 - self.beta1)
        self.exp_avg_sq.mul_(self.beta2).addcmul_(d, d, value=1 - self.beta2)
        bias_correction1 = 1 - self.beta1**self.t
        bias_correction2 = 1 - self.beta2**self.t
        denom = (self.exp_avg_sq.sqrt() / bias_correction2**0.5).add_(self.eps)
        vec.addcdiv_(self.exp_avg, denom, value=-(lr / bias_correction1))


def train_local(
    flat: FlatParameters,
    global_params: torch.Tensor,
    data: Dataset,
    config: LocalTrainingConfig,
    *,
    lr: float,
    generator: torch.Generator,
    momentum_buffer: torch.Tensor | None = None,
    gradient_correction: torch.Tensor | None = None,
    cursor: int = 0,
    batch_transform: BatchTransform | None = None,
) -> LocalResult:
    """Run one client's local training from ``global_params`` and return its update Δ (see the module docstring).

    Parameters
    ----------
    flat:
        The model, bound with :meth:`FlatParameters.bind` (reused across clients: its parameters are
        overwritten by ``global_params`` first).
    global_params:
        θ_t, 1-D of length ``flat.numel`` (converted to the model's dtype/device if needed; never modified).
    data:
        The client's local dataset, on the model's device and (floating features) in its dtype (``Dataset.to``).
    config:
        Steps/epochs, batch size, sampling, optimizer, momentum, weight decay, FedProx μ, gradient clip, label
        smoothing.
    lr:
        η for this round (``schedule(fl_round)``).
    generator:
        Seeded CPU :class:`torch.Generator` for minibatch sampling (and dropout masks); the only randomness.
    momentum_buffer:
        Initial momentum buffer (default zeros); not modified. SGD only (a ConfigError with Adam/AdamW).
    gradient_correction:
        Constant vector c added to every step's gradient (SCAFFOLD ``c − c_i``, mimic spec §2.6).
    cursor:
        Start position for ``sampling="sequential"``.
    batch_transform:
        Applied to every minibatch ``(x_b, y_b)`` before its forward pass (per-batch data poisoning); the
        returned batch is what the step trains on and what ``samples_seen`` counts. ``None``: the batch as drawn.

    Returns
    -------
    LocalResult
    """
    if momentum_buffer is not None and config.optimizer != "sgd":
        raise ConfigError(f"a momentum_buffer carries SGD momentum across rounds; optimizer {config.optimizer!r} has none")
    module, vec, grad = flat.module, flat.vector, flat.grad
    device = vec.device
    theta = _check_job(global_params, data, vec, lr=lr, generator=generator)
    n = len(data)
    vec.copy_(theta)

    batches, next_cursor = minibatch_indices(n, config, generator, cursor)
    if device.type != "cpu":
        batches = [b if b is None else b.to(device, non_blocking=True) for b in batches]
    _dropout_generator(module, generator, device)

    rho, wd, mu = config.momentum, config.weight_decay, config.prox_mu
    clip, smoothing = config.grad_clip, config.label_smoothing
    buf: torch.Tensor | None = None
    if rho > 0.0:  # (SGD only: the config refuses momentum with Adam/AdamW)
        buf = torch.zeros_like(vec) if momentum_buffer is None else momentum_buffer.to(device, vec.dtype).clone()
    adam: _Adam | None = None
    if config.optimizer != "sgd":
        adam = _Adam(vec, config)
        if adam.decay:
            wd = 0.0  # AdamW: decoupled, applied by the step, not added to the gradient
    correction = None if gradient_correction is None else gradient_correction.to(device=device, dtype=vec.dtype)

    x, y = data.x, data.y
    module.train()
    loss_sum = torch.zeros((), dtype=torch.float32, device=device)
    loss = loss_sum
    seen = 0
    for b in batches:
        if b is None:
            xb, yb = x, y
        else:
            xb, yb = x.index_select(0, b), y.index_select(0, b)
        if batch_transform is not None:
            xb, yb = batch_transform(xb, yb)
        grad.zero_()
        if smoothing:
            loss = F.cross_entropy(module(xb), yb, label_smoothing=smoothing)
        else:
            loss = F.cross_entropy(module(xb), yb)
        loss.backward()
        if clip:  # the loss gradient only, before the regularisers
            _clip_norm_(grad, clip)
        if wd:
            grad.add_(vec, alpha=wd)
        if mu:
            grad.add_(vec, alpha=mu).sub_(theta, alpha=mu)
        if correction is not None:
            grad.add_(correction)
        if adam is not None:
            adam.step_(vec, grad, lr)
        else:
            if buf is not None:
                buf.mul_(rho).add_(grad)
                step = grad.add_(buf, alpha=rho) if config.nesterov else buf
            else:
                step = grad
            vec.add_(step, alpha=-lr)
        loss_sum += loss.detach()
        seen += yb.shape[0]
    steps = len(batches)
    return LocalResult(
        delta=vec - theta,
        num_samples=n,
        steps=steps,
        samples_seen=seen,
        lr=float(lr),
        loss_mean=float(loss_sum) / steps if steps else float("nan"),
        loss_last=float(loss.detach()) if steps else float("nan"),
        momentum_buffer=buf,
        next_cursor=next_cursor,
    )


@torch.no_grad()
def evaluate(module: nn.Module, data: Dataset, *, batch_size: int = 4096) -> EvalResult:
    """Mean cross-entropy and accuracy of ``module`` (in eval mode; its previous mode is restored) on ``data``."""
    if len(data) == 0:
        raise ConfigError("cannot evaluate on an empty dataset")
    was_training = module.training
    module.eval()
    try:
        loss = torch.zeros((), dtype=torch.float64, device=data.x.device)
        correct = torch.zeros((), dtype=torch.int64, device=data.x.device)
        for start in range(0, len(data), batch_size):
            xb, yb = data.x[start : start + batch_size], data.y[start : start + batch_size]
            out = module(xb)
            loss += F.cross_entropy(out, yb, reduction="sum").double()
            correct += (out.argmax(dim=1) == yb).sum()
    finally:
        module.train(was_training)
    n = len(data)
    return EvalResult(loss=float(loss) / n, accuracy=int(correct) / n, num_samples=n)


class LocalTrainer:
    """One reusable model object for all clients of a process: build once, then ``train``/``evaluate`` any flat
    parameter vector (the simulator's hot path).

    ``loop`` names a registered custom training loop (:func:`register_training_loop`; ``""``: the built-in
    one, :func:`train_local`): :meth:`train` then loads θ_t into a second model of the same spec, calls the loop and
    returns ``Δ = trained − θ_t`` with ``num_samples = len(data)``. A non-finite Δ is the caller's to refuse, as
    with the built-in loop.

    Examples
    --------
    >>> from learning.models import MLPSpec
    >>> trainer = LocalTrainer(MLPSpec(in_features=64), LocalTrainingConfig(steps=10, batch_size=32))
    >>> theta = trainer.initial_parameters(seed=0)
    >>> theta.shape
    torch.Size([4810])
    """

    __slots__ = ("_loop_fn", "_loop_module", "config", "device", "flat", "loop", "spec")

    def __init__(
        self,
        spec: ModelSpec,
        config: LocalTrainingConfig,
        *,
        device: torch.device | str = "cpu",
        dtype: torch.dtype = torch.float32,
        init_seed: int = 0,
        loop: str = "",
    ) -> None:
        self.spec = spec
        self.config = config
        self.device = torch.device(device)
        module = build_model(spec, seed=init_seed, device=self.device, dtype=dtype)
        self.flat = FlatParameters.bind(module)
        self.loop = loop
        self._loop_fn: TrainingLoop | None = None
        self._loop_module: nn.Module | None = None
        if loop:
            try:
                self._loop_fn = TRAINING_LOOPS[loop]
            except KeyError:
                known = ", ".join(sorted(TRAINING_LOOPS)) or "none"
                raise ConfigError(f"unknown training loop {loop!r:.60}; registered: {known}") from None
            # a model of its own: a loop may detach parameters or gradients from the flat binding (an optimizer's
            # zero_grad(set_to_none=True)), which the built-in loop and evaluate() rely on
            self._loop_module = build_model(spec, seed=init_seed, device=self.device, dtype=dtype)

    @property
    def module(self) -> nn.Module:
        """The shared model object (its parameters are whatever was loaded last)."""
        return self.flat.module

    def initial_parameters(self, *, seed: int) -> torch.Tensor:
        """θ_0: the flat parameters of a freshly initialised model (same seed ⇒ same vector, any device)."""
        module = build_model(self.spec, seed=seed, device=self.device, dtype=self.flat.vector.dtype)
        return torch.cat([p.detach().reshape(-1) for p in module.parameters()])

    def train(
        self,
        global_params: torch.Tensor,
        data: Dataset,
        *,
        lr: float,
        generator: torch.Generator,
        momentum_buffer: torch.Tensor | None = None,
        gradient_correction: torch.Tensor | None = None,
        cursor: int = 0,
        prox_mu: float | None = None,
        batch_transform: BatchTransform | None = None,
    ) -> LocalResult:
        """:func:`train_local` with this trainer's model and config (``prox_mu`` overrides the config's μ), or its
        custom loop (which refuses ``prox_mu`` > 0, a ``gradient_correction``, a ``momentum_buffer`` and a
        ``batch_transform`` with a ConfigError, and ignores ``cursor``)."""
        config = self.config
        if prox_mu is not None and prox_mu != config.prox_mu:
            config = replace(config, prox_mu=float(prox_mu))
        if self._loop_fn is not None:
            refused = [
                what
                for what, given in (
                    (f"FedProx prox_mu={config.prox_mu}", config.prox_mu > 0),
                    ("a gradient_correction (SCAFFOLD)", gradient_correction is not None),
                    ("a momentum_buffer", momentum_buffer is not None),
                    ("a batch_transform (per-batch data attack)", batch_transform is not None),
                )
                if given
            ]
            if refused:
                raise ConfigError(
                    f"custom training loop {self.loop!r} cannot apply {' and '.join(refused)}: "
                    "the strategy or attack needs the built-in loop (training.loop = \"\")"
                )
            return self._train_loop(global_params, data, config, lr=lr, generator=generator)
        return train_local(
            self.flat,
            global_params,
            data,
            config,
            lr=lr,
            generator=generator,
            momentum_buffer=momentum_buffer,
            gradient_correction=gradient_correction,
            cursor=cursor,
            batch_transform=batch_transform,
        )

    def _train_loop(
        self, global_params: torch.Tensor, data: Dataset, config: LocalTrainingConfig, *, lr: float,
        generator: torch.Generator,
    ) -> LocalResult:
        assert self._loop_fn is not None and self._loop_module is not None
        module, vec = self._loop_module, self.flat.vector
        theta = _check_job(global_params, data, vec, lr=lr, generator=generator)
        unflatten_parameters(module, theta)
        for p in module.parameters():
            p.grad = None
        _dropout_generator(module, generator, vec.device)
        module.train()
        stats = self._loop_fn(module, data, LoopConfig(lr=float(lr), training=config, device=vec.device), generator)
        if stats is not None and not isinstance(stats, Mapping):
            raise ConfigError(f"training loop {self.loop!r} returned a {type(stats).__name__}, not a mapping or None")
        stats = {} if stats is None else stats
        trained = flatten_parameters(module)
        if trained.shape != theta.shape or trained.dtype != theta.dtype or trained.device != theta.device:
            raise ConfigError(f"training loop {self.loop!r} changed the model's parameters' shapes, dtype or device")
        loss = float(stats.get("loss", float("nan")))
        return LocalResult(
            delta=trained - theta,
            num_samples=len(data),
            steps=int(stats.get("steps", 0)),
            samples_seen=int(stats.get("samples_seen", 0)),
            lr=float(lr),
            loss_mean=loss,
            loss_last=float(stats.get("loss_last", loss)),
            momentum_buffer=None,
        )

    def evaluate(self, params: torch.Tensor, data: Dataset, *, batch_size: int = 4096) -> EvalResult:
        """Load ``params`` into the shared model and :func:`evaluate` it on ``data``."""
        self.flat.load_(params)
        return evaluate(self.flat.module, data, batch_size=batch_size)
