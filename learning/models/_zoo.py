"""Model registry: the papers' models, built by name from typed, frozen specs with seeded initialisation.

Registered names (spec section that defines each):

============== ========================================================================= ==============
name           architecture                                                              parameters
============== ========================================================================= ==============
``logreg``     ``Linear(in, C)``, zero init (unavailability spec §4.4, cmfl spec §7.3)               (in+1)·C
``mlp``        ``Linear → ReLU → … → Linear`` (W1; mimic spec §6.1; sself spec §6.1)          e.g. 4,810 (W1)
``lenet5``     LeNet-5 on 3×32×32, Xavier-uniform linears, zero biases (unavailability spec §4.3)   62,006
``fmnist_cnn`` LeNet-5 style on 1×28×28, FC 256→120→84→10 (mimic spec §4, SimpleCNNMNIST)  44,426
``small_cnn``  Conv 3×3 (16) → pool → Conv 3×3 (32) → pool → Linear: fits the bundled 8×8 digits  6,090 (8×8)
``femnist_cnn`` fedro spec §5 Table 2: conv 64, conv 128, FC 2048→1024→62                  2,368,318
``vgg11``      VGG-11 config A without BatchNorm (mimic spec §4, sself spec §4)              9,750,922
``char_lstm``  Shakespeare: Embedding(80, 8) → 2×LSTM(100) → Linear(100, 80) (cmfl spec)  133,520
``word_lstm``  Sent140: Embedding(V, E) → 2×LSTM(H) → Linear(H, 30) → ReLU → Linear(30, 2)  depends on V
============== ========================================================================= ==============

Every model returns *logits* (``(N, C)``). fedro spec's ``LogSoftmax`` + NLL is the same loss as cross-entropy on
logits, so the trainer always uses :func:`torch.nn.functional.cross_entropy`.

Initialisation never touches the global torch RNG: a model is built on the ``meta`` device, materialised with
``to_empty`` and every parameter is then drawn from an explicit :class:`torch.Generator` (on CPU, so the same seed
gives the same model on every device), with the distribution each paper uses. "PyTorch default" below means what
``reset_parameters`` would draw: ``U(±1/√fan_in)`` for Linear/Conv weights and biases, ``U(±1/√hidden)`` for LSTMs,
``N(0, 1)`` for embeddings.

Dropout (VGG-11's classifier) draws its masks from a generator too (:class:`SeededDropout`); the trainer hands it
one with :func:`set_dropout_generator`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import ClassVar, Literal, Protocol, TypeVar

import torch
from torch import nn
from torch.nn import functional as F

from learning._config import spec_from_mapping
from learning._errors import ConfigError

__all__ = [
    "MODELS",
    "CharLSTMSpec",
    "FEMNISTCNNSpec",
    "FMNISTCNNSpec",
    "LeNet5Spec",
    "LogisticRegressionSpec",
    "MLPSpec",
    "ModelSpec",
    "SeededDropout",
    "VGG11Spec",
    "WordLSTMSpec",
    "build_model",
    "model_spec",
    "register_model",
    "set_dropout_generator",
]


class ModelSpec(Protocol):
    """A frozen, typed model description; :meth:`build` makes an uninitialised module (init is separate)."""

    name: ClassVar[str]

    def build(self) -> nn.Module: ...

    def initialize(self, module: nn.Module, generator: torch.Generator) -> None: ...


MODELS: dict[str, type[ModelSpec]] = {}
"""Registry ``name → spec class``, filled by :func:`register_model`."""

_S = TypeVar("_S")


def register_model(name: str) -> Callable[[type[_S]], type[_S]]:
    """Class decorator: register a model spec class under ``name`` (sets its ``name`` class attribute)."""

    def decorate(cls: type[_S]) -> type[_S]:
        if name in MODELS:
            raise ConfigError(f"model {name!r} registered twice")
        cls.name = name  # type: ignore[attr-defined]
        MODELS[name] = cls  # type: ignore[assignment]
        return cls

    return decorate


def model_spec(name: str, params: Mapping[str, object] | None = None) -> ModelSpec:
    """Resolve a model name and its parameters (e.g. a TOML table) into a typed spec — the config boundary.

    Lists are turned into tuples; unknown or missing keys and bad values raise :class:`ConfigError`.

    Examples
    --------
    >>> model_spec("mlp", {"in_features": 64, "hidden": [64], "num_classes": 10})
    MLPSpec(in_features=64, hidden=(64,), num_classes=10, init='torch')
    """
    try:
        cls = MODELS[name]
    except KeyError:
        raise ConfigError(f"unknown model {name!r}; known: {', '.join(sorted(MODELS))}") from None
    return spec_from_mapping(cls, params or {}, what=f"model {name!r}")


# ---------------------------------------------------------------------------------------------------------------
# Initialisation helpers (explicit generator, CPU draws, then copied to the parameter's device).


def _set(p: torch.Tensor, value: torch.Tensor) -> None:
    with torch.no_grad():
        p.copy_(value)


def _uniform(p: torch.Tensor, bound: float, g: torch.Generator) -> None:
    t = torch.empty(p.shape, dtype=torch.float32)
    t.uniform_(-bound, bound, generator=g)
    _set(p, t)


def _normal(p: torch.Tensor, std: float, g: torch.Generator) -> None:
    t = torch.empty(p.shape, dtype=torch.float32)
    t.normal_(0.0, std, generator=g)
    _set(p, t)


def _zeros(p: torch.Tensor) -> None:
    with torch.no_grad():
        p.zero_()


def _fan_in(weight: torch.Tensor) -> int:
    return weight.shape[1] * math.prod(weight.shape[2:])


def _torch_default(module: nn.Linear | nn.Conv2d, g: torch.Generator) -> None:
    """PyTorch's ``reset_parameters``: kaiming_uniform(a=√5) ⇒ ``U(±1/√fan_in)``; bias ``U(±1/√fan_in)``."""
    bound = 1.0 / math.sqrt(_fan_in(module.weight))
    _uniform(module.weight, bound, g)
    if module.bias is not None:
        _uniform(module.bias, bound, g)


def _xavier_uniform_zero_bias(module: nn.Linear, g: torch.Generator) -> None:
    fan_out, fan_in = module.weight.shape
    _uniform(module.weight, math.sqrt(6.0 / (fan_in + fan_out)), g)
    if module.bias is not None:
        _zeros(module.bias)


def _he_normal_zero_bias(module: nn.Linear | nn.Conv2d, g: torch.Generator, *, gain2: float = 2.0) -> None:
    _normal(module.weight, math.sqrt(gain2 / _fan_in(module.weight)), g)
    if module.bias is not None:
        _zeros(module.bias)


def _lstm_default(module: nn.LSTM, g: torch.Generator) -> None:
    bound = 1.0 / math.sqrt(module.hidden_size)
    for p in module.parameters():
        _uniform(p, bound, g)


# ---------------------------------------------------------------------------------------------------------------
# Dropout with an explicit generator.


class SeededDropout(nn.Module):
    """Inverted dropout whose masks come from an explicit :class:`torch.Generator` (no global RNG).

    In training mode a generator must have been set (:func:`set_dropout_generator`); in eval mode it is the
    identity. Same maths as :class:`torch.nn.Dropout`: keep with probability ``1 − p``, scale by ``1/(1 − p)``.
    """

    def __init__(self, p: float = 0.5) -> None:
        super().__init__()
        if not 0.0 <= p < 1.0:
            raise ConfigError(f"dropout probability must be in [0, 1), got {p}")
        self.p = p
        self.generator: torch.Generator | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.p == 0.0:
            return x
        if self.generator is None:
            raise ConfigError("SeededDropout in training mode needs a generator (set_dropout_generator)")
        keep = 1.0 - self.p
        mask = torch.empty_like(x).bernoulli_(keep, generator=self.generator)
        return x * mask / keep

    def extra_repr(self) -> str:
        return f"p={self.p}"


def set_dropout_generator(module: nn.Module, generator: torch.Generator | None) -> int:
    """Give every :class:`SeededDropout` inside ``module`` the ``generator``; returns how many there are."""
    count = 0
    for m in module.modules():
        if isinstance(m, SeededDropout):
            m.generator = generator
            count += 1
    return count


# ---------------------------------------------------------------------------------------------------------------
# Building.


def build_model(
    spec: ModelSpec,
    *,
    seed: int | None = None,
    generator: torch.Generator | None = None,
    device: torch.device | str = "cpu",
    dtype: torch.dtype = torch.float32,
) -> nn.Module:
    """Build and initialise the model described by ``spec``.

    Exactly one of ``seed`` / ``generator`` (a CPU generator) must be given. The module is created on the
    ``meta`` device (no memory, no RNG), materialised on CPU, initialised from the generator and then moved to
    ``device``/``dtype``; so a seed gives the same parameters on CPU and CUDA.

    Raises
    ------
    ConfigError
        Neither or both of ``seed``/``generator``, or a generator that is not on CPU.
    """
    if (seed is None) == (generator is None):
        raise ConfigError("build_model needs exactly one of seed= or generator=")
    if generator is None:
        generator = torch.Generator(device="cpu")
        generator.manual_seed(int(seed))  # type: ignore[arg-type]
    elif generator.device.type != "cpu":
        raise ConfigError("build_model initialises on CPU: pass a CPU torch.Generator")
    with torch.device("meta"):
        module = spec.build()
    # = module.to_empty(device="cpu"), whose empty_like on meta tensors imports sympy (torch's symbolic shapes)
    module = module._apply(lambda t: torch.empty(t.shape, dtype=t.dtype, device="cpu"))
    spec.initialize(module, generator)
    return module.to(device=device, dtype=dtype)


def _check_positive(what: str, **values: int) -> None:
    for key, value in values.items():
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            raise ConfigError(f"{what}: {key} must be a positive int, got {value!r}")


# ---------------------------------------------------------------------------------------------------------------
# Logistic regression and MLP.


class _Flatten(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.flatten(1) if x.dim() > 2 else x


@register_model("logreg")
@dataclass(frozen=True, slots=True, kw_only=True)
class LogisticRegressionSpec:
    """Multinomial logistic regression ``Linear(in_features, num_classes)`` on flattened inputs.

    unavailability spec §4.4 (Synthetic(1,1): 60 → 10, zero-initialised weight and bias); cmfl spec §7.3 (20 → 10, zero init).
    ``init="torch"`` uses PyTorch's default instead.
    """

    name: ClassVar[str]
    in_features: int
    num_classes: int
    init: Literal["zeros", "torch"] = "zeros"

    def __post_init__(self) -> None:
        _check_positive("logreg", in_features=self.in_features, num_classes=self.num_classes)
        if self.init not in ("zeros", "torch"):
            raise ConfigError(f"logreg: init must be 'zeros' or 'torch', got {self.init!r}")

    def build(self) -> nn.Module:
        return nn.Sequential(_Flatten(), nn.Linear(self.in_features, self.num_classes))

    def initialize(self, module: nn.Module, generator: torch.Generator) -> None:
        linear = module[1]
        assert isinstance(linear, nn.Linear)
        if self.init == "zeros":
            _zeros(linear.weight)
            _zeros(linear.bias)
        else:
            _torch_default(linear, generator)


@register_model("mlp")
@dataclass(frozen=True, slots=True, kw_only=True)
class MLPSpec:
    """Fully connected ReLU network ``in → hidden[0] → … → num_classes`` on flattened inputs.

    * W1 (``benchmarks/README.md``): ``in_features=64, hidden=(64,), num_classes=10`` ⇒ 4,810 parameters.
    * mimic spec §6.1: 64 → 32 → 10 (2,410 parameters), ``init="he"``: He-normal hidden layers, ``N(0, 1/H)``
      output layer, zero biases. sself spec §6.1: 64-64-32-10, He init. fedro spec §6: 20 → 32 → 10 (1,002).
    * ``init="torch"``: PyTorch's default Linear initialisation.
    """

    name: ClassVar[str]
    in_features: int
    hidden: tuple[int, ...] = (64,)
    num_classes: int = 10
    init: Literal["torch", "he"] = "torch"

    def __post_init__(self) -> None:
        _check_positive("mlp", in_features=self.in_features, num_classes=self.num_classes)
        if not isinstance(self.hidden, tuple):
            raise ConfigError(f"mlp: hidden must be a tuple of ints, got {self.hidden!r}")
        for h in self.hidden:
            _check_positive("mlp", hidden=h)
        if self.init not in ("torch", "he"):
            raise ConfigError(f"mlp: init must be 'torch' or 'he', got {self.init!r}")

    def build(self) -> nn.Module:
        layers: list[nn.Module] = [_Flatten()]
        width = self.in_features
        for h in self.hidden:
            layers += [nn.Linear(width, h), nn.ReLU()]
            width = h
        layers.append(nn.Linear(width, self.num_classes))
        return nn.Sequential(*layers)

    def initialize(self, module: nn.Module, generator: torch.Generator) -> None:
        linears = [m for m in module.modules() if isinstance(m, nn.Linear)]
        for i, linear in enumerate(linears):
            if self.init == "torch":
                _torch_default(linear, generator)
            else:
                _he_normal_zero_bias(linear, generator, gain2=2.0 if i < len(linears) - 1 else 1.0)


# ---------------------------------------------------------------------------------------------------------------
# LeNet-5 family.


class _LeNet(nn.Module):
    """Conv(c→6,5) → ReLU → MaxPool2 → Conv(6→16,5) → ReLU → MaxPool2 → FC → ReLU → FC → ReLU → FC."""

    def __init__(self, in_channels: int, image_size: int, num_classes: int) -> None:
        super().__init__()
        side = ((image_size - 4) // 2 - 4) // 2
        self.conv1 = nn.Conv2d(in_channels, 6, 5)
        self.conv2 = nn.Conv2d(6, 16, 5)
        self.fc1 = nn.Linear(16 * side * side, 120)
        self.fc2 = nn.Linear(120, 84)
        self.fc3 = nn.Linear(84, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = x.flatten(1)
        x = F.relu(self.fc1(x))
        x = F.relu(self.fc2(x))
        return self.fc3(x)


def _check_lenet_input(what: str, in_channels: int, image_size: int, num_classes: int) -> None:
    _check_positive(what, in_channels=in_channels, image_size=image_size, num_classes=num_classes)
    if ((image_size - 4) // 2 - 4) // 2 < 1:
        raise ConfigError(f"{what}: image_size {image_size} is too small for two 5×5 convolutions (need ≥ 16)")


@register_model("lenet5")
@dataclass(frozen=True, slots=True, kw_only=True)
class LeNet5Spec:
    """LeNet-5 of unavailability spec §4.3 (CIFAR-10): 62,006 parameters for 3×32×32 inputs and 10 classes.

    ``Conv2d(3,6,5) → ReLU → MaxPool2d(2) → Conv2d(6,16,5) → ReLU → MaxPool2d(2) → flatten(400) → Linear(400,120)
    → ReLU → Linear(120,84) → ReLU → Linear(84,10)``; Linear weights Xavier-uniform, Linear biases 0, conv layers
    PyTorch default.
    """

    name: ClassVar[str]
    in_channels: int = 3
    image_size: int = 32
    num_classes: int = 10

    def __post_init__(self) -> None:
        _check_lenet_input("lenet5", self.in_channels, self.image_size, self.num_classes)

    def build(self) -> nn.Module:
        return _LeNet(self.in_channels, self.image_size, self.num_classes)

    def initialize(self, module: nn.Module, generator: torch.Generator) -> None:
        assert isinstance(module, _LeNet)
        _torch_default(module.conv1, generator)
        _torch_default(module.conv2, generator)
        for fc in (module.fc1, module.fc2, module.fc3):
            _xavier_uniform_zero_bias(fc, generator)


@register_model("fmnist_cnn")
@dataclass(frozen=True, slots=True, kw_only=True)
class FMNISTCNNSpec:
    """The FMNIST CNN of mimic spec §4 (code ``SimpleCNNMNIST``): 44,426 parameters.

    ``Conv(1→6,5×5) → ReLU → MaxPool2 → Conv(6→16,5×5) → ReLU → MaxPool2 → flatten 256 → FC 256→120 → ReLU →
    FC 120→84 → ReLU → FC 84→10`` (three FC layers although the paper says two); PyTorch default init.
    """

    name: ClassVar[str]
    in_channels: int = 1
    image_size: int = 28
    num_classes: int = 10

    def __post_init__(self) -> None:
        _check_lenet_input("fmnist_cnn", self.in_channels, self.image_size, self.num_classes)

    def build(self) -> nn.Module:
        return _LeNet(self.in_channels, self.image_size, self.num_classes)

    def initialize(self, module: nn.Module, generator: torch.Generator) -> None:
        assert isinstance(module, _LeNet)
        for layer in (module.conv1, module.conv2, module.fc1, module.fc2, module.fc3):
            _torch_default(layer, generator)


# ---------------------------------------------------------------------------------------------------------------
# A small CNN for small images (the bundled 8×8 digits).


class _SmallCNN(nn.Module):
    """Conv(c→16,3,pad 1) → ReLU → MaxPool2 → Conv(16→32,3,pad 1) → ReLU → MaxPool2 → flatten → Linear."""

    def __init__(self, in_channels: int, image_size: int, num_classes: int) -> None:
        super().__init__()
        side = image_size // 4
        self.conv1 = nn.Conv2d(in_channels, 16, 3, padding=1)
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
        self.fc = nn.Linear(32 * side * side, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc(x.flatten(1))


@register_model("small_cnn")
@dataclass(frozen=True, slots=True, kw_only=True)
class SmallCNNSpec:
    """A small CNN that fits the bundled digits (``dataset = "digits"`` with ``params = { image = true }``: 1×8×8)
    where LeNet-5's two 5×5 convolutions need ≥ 16 pixels a side: two 3×3 convolutions with padding (16 and 32
    channels), each followed by ReLU and 2×2 max pooling, then one linear layer; 6,090 parameters on 1×8×8 with 10
    classes. ``image_size`` must be a multiple of 4. PyTorch default initialisation."""

    name: ClassVar[str]
    in_channels: int = 1
    image_size: int = 8
    num_classes: int = 10

    def __post_init__(self) -> None:
        _check_positive("small_cnn", in_channels=self.in_channels, image_size=self.image_size,
                        num_classes=self.num_classes)
        if self.image_size % 4:
            raise ConfigError(f"small_cnn: image_size {self.image_size} must be a multiple of 4 (two 2×2 poolings)")

    def build(self) -> nn.Module:
        return _SmallCNN(self.in_channels, self.image_size, self.num_classes)

    def initialize(self, module: nn.Module, generator: torch.Generator) -> None:
        assert isinstance(module, _SmallCNN)
        for layer in (module.conv1, module.conv2, module.fc):
            _torch_default(layer, generator)


# ---------------------------------------------------------------------------------------------------------------
# FEMNIST CNN (seed 004).


class _FEMNISTCNN(nn.Module):
    def __init__(self, num_classes: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 64, 5)
        self.conv2 = nn.Conv2d(64, 128, 5)
        self.fc1 = nn.Linear(128 * 4 * 4, 1024)
        self.fc2 = nn.Linear(1024, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() == 2:  # LEAF stores 784-vectors
            x = x.view(-1, 1, 28, 28)
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = F.relu(self.fc1(x.flatten(1)))
        return self.fc2(x)


@register_model("femnist_cnn")
@dataclass(frozen=True, slots=True, kw_only=True)
class FEMNISTCNNSpec:
    """The FEMNIST CNN of fedro spec §5 (paper Table 2): exactly 2,368,318 parameters for 62 classes.

    ``Conv(1→64, k=5) → ReLU → MaxPool(2,2) → Conv(64→128, k=5) → ReLU → MaxPool(2,2) → Linear(128·4·4 → 1024) →
    ReLU → Linear(1024 → 62)``; no padding (28 → 24 → 12 → 8 → 4). The paper's final ``LogSoftmax`` is folded into
    the cross-entropy loss. Initialisation is not given by the paper: PyTorch default.
    """

    name: ClassVar[str]
    num_classes: int = 62

    def __post_init__(self) -> None:
        _check_positive("femnist_cnn", num_classes=self.num_classes)

    def build(self) -> nn.Module:
        return _FEMNISTCNN(self.num_classes)

    def initialize(self, module: nn.Module, generator: torch.Generator) -> None:
        assert isinstance(module, _FEMNISTCNN)
        for layer in (module.conv1, module.conv2, module.fc1, module.fc2):
            _torch_default(layer, generator)


# ---------------------------------------------------------------------------------------------------------------
# VGG-11 without BatchNorm.

_VGG11_CONFIG: tuple[int | None, ...] = (64, None, 128, None, 256, 256, None, 512, 512, None, 512, 512, None)


class _VGG11(nn.Module):
    def __init__(self, in_channels: int, num_classes: int, dropout: float) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        width = in_channels
        for out in _VGG11_CONFIG:
            if out is None:
                layers.append(nn.MaxPool2d(2))
            else:
                layers += [nn.Conv2d(width, out, 3, padding=1), nn.ReLU()]
                width = out
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Sequential(
            SeededDropout(dropout),
            nn.Linear(512, 512),
            nn.ReLU(),
            SeededDropout(dropout),
            nn.Linear(512, 512),
            nn.ReLU(),
            nn.Linear(512, num_classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x).flatten(1))


@register_model("vgg11")
@dataclass(frozen=True, slots=True, kw_only=True)
class VGG11Spec:
    """VGG-11 (config A) without BatchNorm for 32×32 inputs (mimic spec §4; sself spec §4): 9,750,922 parameters.

    Convs 3×3, padding 1, ReLU: ``64, M, 128, M, 256, 256, M, 512, 512, M, 512, 512, M``; classifier ``Dropout →
    FC 512→512 → ReLU → Dropout → FC 512→512 → ReLU → FC 512→10``. Conv weights ``N(0, √(2/(k·k·out)))``, conv
    biases 0, Linear layers PyTorch default. Train in ``train()`` mode (dropout on), evaluate in ``eval()``.
    """

    name: ClassVar[str]
    in_channels: int = 3
    num_classes: int = 10
    dropout: float = 0.5

    def __post_init__(self) -> None:
        _check_positive("vgg11", in_channels=self.in_channels, num_classes=self.num_classes)
        if not 0.0 <= self.dropout < 1.0:
            raise ConfigError(f"vgg11: dropout must be in [0, 1), got {self.dropout}")

    def build(self) -> nn.Module:
        return _VGG11(self.in_channels, self.num_classes, self.dropout)

    def initialize(self, module: nn.Module, generator: torch.Generator) -> None:
        for m in module.modules():
            if isinstance(m, nn.Conv2d):
                k = m.kernel_size[0] * m.kernel_size[1]
                _normal(m.weight, math.sqrt(2.0 / (k * m.out_channels)), generator)
                if m.bias is not None:
                    _zeros(m.bias)
            elif isinstance(m, nn.Linear):
                _torch_default(m, generator)


# ---------------------------------------------------------------------------------------------------------------
# LSTMs (seed 003).


class _CharLSTM(nn.Module):
    def __init__(self, vocab_size: int, embed_dim: int, hidden: int, num_layers: int) -> None:
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, embed_dim)
        self.lstm = nn.LSTM(embed_dim, hidden, num_layers=num_layers, batch_first=True)
        self.fc = nn.Linear(hidden, vocab_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, _ = self.lstm(self.embedding(x))
        return self.fc(out[:, -1, :])


@register_model("char_lstm")
@dataclass(frozen=True, slots=True, kw_only=True)
class CharLSTMSpec:
    """Shakespeare next-character LSTM of cmfl spec §4.1: 80-char input, 8-D embedding, 2 LSTM layers of 100 units,
    dense layer to 80 classes, predicting from the last position (133,520 parameters).

    The authors' code uses ``embed_dim=80, hidden=256`` instead; both are reachable by configuration. PyTorch
    default init (embedding ``N(0,1)``, LSTM/Linear uniform).
    """

    name: ClassVar[str]
    vocab_size: int = 80
    embed_dim: int = 8
    hidden: int = 100
    num_layers: int = 2

    def __post_init__(self) -> None:
        _check_positive(
            "char_lstm",
            vocab_size=self.vocab_size,
            embed_dim=self.embed_dim,
            hidden=self.hidden,
            num_layers=self.num_layers,
        )

    def build(self) -> nn.Module:
        return _CharLSTM(self.vocab_size, self.embed_dim, self.hidden, self.num_layers)

    def initialize(self, module: nn.Module, generator: torch.Generator) -> None:
        assert isinstance(module, _CharLSTM)
        _normal(module.embedding.weight, 1.0, generator)
        _lstm_default(module.lstm, generator)
        _torch_default(module.fc, generator)


class _WordLSTM(nn.Module):
    def __init__(self, vocab_size: int, embed_dim: int, hidden: int, num_layers: int, num_classes: int) -> None:
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, embed_dim, padding_idx=0)
        self.lstm = nn.LSTM(embed_dim, hidden, num_layers=num_layers, batch_first=True)
        self.fc1 = nn.Linear(hidden, 30)
        self.fc2 = nn.Linear(30, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, _ = self.lstm(self.embedding(x))
        return self.fc2(F.relu(self.fc1(out[:, -1, :])))


@register_model("word_lstm")
@dataclass(frozen=True, slots=True, kw_only=True)
class WordLSTMSpec:
    """Sent140 binary classifier after cmfl spec §4.1 [C] ``stacked_lstm``: embedding → 2 LSTM layers → dense(30) →
    dense to 2 logits (cross-entropy on 2 classes ≡ the code's sigmoid loss).

    The pretrained, frozen 300-D GloVe embedding cannot be shipped offline, so the embedding here is learned over
    the vocabulary the Sent140 loader builds (index 0 = padding, 1 = unknown word).
    """

    name: ClassVar[str]
    vocab_size: int
    embed_dim: int = 100
    hidden: int = 100
    num_layers: int = 2
    num_classes: int = 2

    def __post_init__(self) -> None:
        _check_positive(
            "word_lstm",
            vocab_size=self.vocab_size,
            embed_dim=self.embed_dim,
            hidden=self.hidden,
            num_layers=self.num_layers,
            num_classes=self.num_classes,
        )

    def build(self) -> nn.Module:
        return _WordLSTM(self.vocab_size, self.embed_dim, self.hidden, self.num_layers, self.num_classes)

    def initialize(self, module: nn.Module, generator: torch.Generator) -> None:
        assert isinstance(module, _WordLSTM)
        _normal(module.embedding.weight, 1.0, generator)
        with torch.no_grad():
            module.embedding.weight[0].zero_()
        _lstm_default(module.lstm, generator)
        _torch_default(module.fc1, generator)
        _torch_default(module.fc2, generator)
