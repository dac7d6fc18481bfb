"""Model registry: parameter counts from the specs, seeded initialisation, config boundary, seeded dropout."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from learning._errors import ConfigError
from learning.models import (
    MODELS,
    MLPSpec,
    SeededDropout,
    build_model,
    model_spec,
    parameter_count,
    register_model,
    set_dropout_generator,
)


@pytest.fixture(autouse=True)
def _one_thread() -> None:
    torch.set_num_threads(1)


# name, params, expected parameter count (spec where the count is printed), input, output shape
CASES = [
    ("femnist_cnn", {}, 2_368_318, torch.zeros(2, 1, 28, 28), (2, 62)),  # fedro spec §5
    ("lenet5", {}, 62_006, torch.zeros(2, 3, 32, 32), (2, 10)),  # unavailability spec §4.3
    ("fmnist_cnn", {}, 44_426, torch.zeros(2, 1, 28, 28), (2, 10)),  # mimic spec §4
    ("small_cnn", {}, 6_090, torch.zeros(2, 1, 8, 8), (2, 10)),  # the bundled 8×8 digits
    ("vgg11", {}, 9_750_922, torch.zeros(2, 3, 32, 32), (2, 10)),  # mimic spec §4
    ("mlp", {"in_features": 64, "hidden": [64], "num_classes": 10}, 4_810, torch.zeros(2, 64), (2, 10)),  # W1
    ("mlp", {"in_features": 64, "hidden": [32], "init": "he"}, 2_410, torch.zeros(2, 64), (2, 10)),  # mimic spec §6.1
    ("mlp", {"in_features": 20, "hidden": [32]}, 1_002, torch.zeros(2, 20), (2, 10)),  # fedro spec §6
    ("logreg", {"in_features": 60, "num_classes": 10}, 610, torch.zeros(2, 60), (2, 10)),  # unavailability spec §4.4
    ("logreg", {"in_features": 20, "num_classes": 10}, 210, torch.zeros(2, 20), (2, 10)),  # cmfl spec §7.3
    ("char_lstm", {}, 133_520, torch.zeros(2, 80, dtype=torch.int64), (2, 80)),  # cmfl spec §4.1
    ("word_lstm", {"vocab_size": 50, "hidden": 16}, None, torch.zeros(2, 25, dtype=torch.int64), (2, 2)),
]


@pytest.mark.parametrize(
    ("name", "params", "count", "x", "shape"), CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)]
)
def test_parameter_count_and_output_shape(name, params, count, x, shape) -> None:
    model = build_model(model_spec(name, params), seed=0)
    if count is not None:
        assert parameter_count(model) == count
    model.eval()
    with torch.no_grad():
        assert tuple(model(x).shape) == shape


def test_femnist_cnn_layer_counts_match_the_spec_breakdown() -> None:
    model = build_model(model_spec("femnist_cnn"), seed=0)
    per_layer = [sum(p.numel() for p in m.parameters()) for m in (model.conv1, model.conv2, model.fc1, model.fc2)]
    assert per_layer == [1_664, 204_928, 2_098_176, 63_550]
    # LEAF stores 784-vectors: the flat and image inputs give the same logits
    x = torch.rand(3, 784, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        assert torch.equal(model(x), model(x.view(3, 1, 28, 28)))


def test_char_lstm_code_variant() -> None:
    # cmfl spec [C]: (seq 80, embedding 80, hidden 256)
    model = build_model(model_spec("char_lstm", {"embed_dim": 80, "hidden": 256}), seed=0)
    lstm = 4 * 256 * (80 + 256) + 8 * 256 + 4 * 256 * (256 + 256) + 8 * 256
    assert parameter_count(model) == 80 * 80 + lstm + 256 * 80 + 80


def test_registry_has_every_model_the_papers_use() -> None:
    assert {"logreg", "mlp", "lenet5", "fmnist_cnn", "femnist_cnn", "vgg11", "char_lstm"} <= set(MODELS)


def _vector(model: nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def _no_grad(model: nn.Module) -> nn.Module:
    return model.requires_grad_(False)


@pytest.mark.parametrize("name", ["mlp", "lenet5", "char_lstm"])
def test_same_seed_same_model_different_seed_different_model(name: str) -> None:
    spec = model_spec(name, {"in_features": 64} if name == "mlp" else {})
    a, b, c = (build_model(spec, seed=s) for s in (7, 7, 8))
    assert torch.equal(_vector(a), _vector(b))
    assert not torch.equal(_vector(a), _vector(c))


def test_generator_and_seed_agree_and_global_rng_is_untouched() -> None:
    spec = model_spec("lenet5")
    state = torch.random.get_rng_state()
    a = build_model(spec, seed=3)
    b = build_model(spec, generator=torch.Generator().manual_seed(3))
    assert torch.equal(torch.random.get_rng_state(), state)
    assert torch.equal(_vector(a), _vector(b))


def test_build_needs_exactly_one_source_of_randomness() -> None:
    spec = model_spec("logreg", {"in_features": 4, "num_classes": 3})
    with pytest.raises(ConfigError):
        build_model(spec)
    with pytest.raises(ConfigError):
        build_model(spec, seed=1, generator=torch.Generator())


def test_logreg_is_zero_initialised() -> None:
    model = build_model(model_spec("logreg", {"in_features": 60, "num_classes": 10}), seed=5)
    assert torch.count_nonzero(_vector(model)) == 0


def test_lenet5_init_follows_unavailability_spec() -> None:
    model = _no_grad(build_model(model_spec("lenet5"), seed=0))
    for fc in (model.fc1, model.fc2, model.fc3):
        assert torch.count_nonzero(fc.bias) == 0
        bound = math.sqrt(6.0 / (fc.in_features + fc.out_features))
        assert float(fc.weight.abs().max()) <= bound
        assert float(fc.weight.abs().max()) > 0.9 * bound  # xavier-uniform, not the (smaller) default
    assert torch.count_nonzero(model.conv1.bias) > 0  # conv layers keep PyTorch's default


def test_vgg11_conv_init_and_default_linear() -> None:
    model = _no_grad(build_model(model_spec("vgg11"), seed=0))
    convs = [m for m in model.modules() if isinstance(m, nn.Conv2d)]
    assert len(convs) == 8
    for conv in convs:
        assert torch.count_nonzero(conv.bias) == 0
    big = convs[-1]  # 512 → 512: 2.36 M weights, std √(2/(9·512))
    assert float(big.weight.std()) == pytest.approx(math.sqrt(2 / (9 * 512)), rel=0.01)
    last = [m for m in model.modules() if isinstance(m, nn.Linear)][-1]
    assert float(last.weight.abs().max()) <= 1 / math.sqrt(512)


def test_mlp_he_init() -> None:
    model = _no_grad(build_model(MLPSpec(in_features=64, hidden=(512,), num_classes=10, init="he"), seed=0))
    first, last = model[1], model[3]
    assert torch.count_nonzero(first.bias) == 0 and torch.count_nonzero(last.bias) == 0
    assert float(first.weight.std()) == pytest.approx(math.sqrt(2 / 64), rel=0.05)
    assert float(last.weight.std()) == pytest.approx(math.sqrt(1 / 512), rel=0.05)


def test_same_parameters_in_float64() -> None:
    spec = model_spec("mlp", {"in_features": 8, "hidden": [4]})
    a = build_model(spec, seed=1)
    b = build_model(spec, seed=1, dtype=torch.float64)
    assert b.state_dict()["1.weight"].dtype == torch.float64
    assert torch.equal(_vector(a).double(), _vector(b))


def test_config_boundary_errors() -> None:
    with pytest.raises(ConfigError, match="unknown model 'resnet'"):
        model_spec("resnet")
    with pytest.raises(ConfigError, match="unknown parameter"):
        model_spec("mlp", {"in_features": 4, "width": 3})
    with pytest.raises(ConfigError, match="missing parameter"):
        model_spec("mlp", {})
    with pytest.raises(ConfigError):
        model_spec("mlp", {"in_features": 0})
    with pytest.raises(ConfigError):
        model_spec("mlp", {"in_features": 4, "hidden": [4, -1]})
    with pytest.raises(ConfigError):
        model_spec("vgg11", {"dropout": 1.0})
    with pytest.raises(ConfigError):
        model_spec("lenet5", {"image_size": 8})
    with pytest.raises(ConfigError, match="registered twice"):
        register_model("mlp")(MLPSpec)
    assert model_spec("mlp", {"in_features": 4, "hidden": [3, 2]}) == MLPSpec(in_features=4, hidden=(3, 2))


def test_seeded_dropout() -> None:
    layer = SeededDropout(0.5)
    x = torch.ones(1000)
    with pytest.raises(ConfigError):
        layer(x)
    layer.generator = torch.Generator().manual_seed(0)
    a = layer(x)
    layer.generator = torch.Generator().manual_seed(0)
    assert torch.equal(a, layer(x))
    assert set(a.unique().tolist()) == {0.0, 2.0}
    assert 400 < int((a == 0).sum()) < 600
    layer.eval()
    assert torch.equal(layer(x), x)
    model = build_model(model_spec("vgg11"), seed=0)
    assert set_dropout_generator(model, torch.Generator()) == 2
