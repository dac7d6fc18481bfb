"""Flat parameter vectors: copies, zero-copy binding, gradients landing in the flat buffer."""

from __future__ import annotations

import pytest
import torch
from torch.nn import functional as F

from learning._errors import ConfigError
from learning.models import (
    FlatParameters,
    build_model,
    flatten_parameters,
    model_spec,
    parameter_count,
    parameter_layout,
    unflatten_parameters,
)


@pytest.fixture
def lenet():
    return build_model(model_spec("lenet5", {"in_channels": 1, "image_size": 16, "num_classes": 3}), seed=0)


def test_flatten_unflatten_roundtrip(lenet) -> None:
    vec = flatten_parameters(lenet)
    assert vec.shape == (parameter_count(lenet),)
    layout = parameter_layout(lenet)
    assert layout.names[0] == "conv1.weight" and layout.offsets[0] == 0
    assert torch.equal(vec[layout.slice_of("fc3.bias")], lenet.fc3.bias.detach())
    new = torch.arange(vec.numel(), dtype=torch.float32)
    unflatten_parameters(lenet, new)
    assert torch.equal(flatten_parameters(lenet), new)
    assert float(lenet.conv1.weight.detach()[0, 0, 0, 1]) == 1.0
    vec.zero_()  # flatten copies: the model is unaffected
    assert torch.equal(flatten_parameters(lenet), new)
    with pytest.raises(ConfigError):
        unflatten_parameters(lenet, new[:-1])
    with pytest.raises(ConfigError):
        layout.slice_of("nope")


def test_bind_is_zero_copy_and_keeps_values(lenet) -> None:
    before = flatten_parameters(lenet)
    params_before = list(lenet.parameters())
    flat = FlatParameters.bind(lenet)
    assert flat.is_bound()
    assert [id(p) for p in lenet.parameters()] == [id(p) for p in params_before]
    assert torch.equal(flat.vector, before)
    flat.vector.mul_(2)  # the model sees changes to the vector ...
    assert torch.equal(flatten_parameters(lenet), 2 * before)
    with torch.no_grad():
        lenet.fc1.weight.fill_(0.5)  # ... and the vector sees changes to the model
    assert torch.all(flat.vector[flat.layout.slice_of("fc1.weight")] == 0.5)
    flat.load_(before)
    assert torch.equal(flatten_parameters(lenet), before)
    with pytest.raises(ConfigError):
        flat.load_(before[:10])


def test_backward_accumulates_into_the_flat_gradient(lenet) -> None:
    reference = build_model(model_spec("lenet5", {"in_channels": 1, "image_size": 16, "num_classes": 3}), seed=0)
    flat = FlatParameters.bind(lenet)
    g = torch.Generator().manual_seed(0)
    x, y = torch.rand(5, 1, 16, 16, generator=g), torch.tensor([0, 1, 2, 0, 1])
    for _ in range(2):  # zero_grad_ keeps the views: the second pass gives the same gradient, not double
        flat.zero_grad_()
        F.cross_entropy(lenet(x), y).backward()
        expected = torch.autograd.grad(F.cross_entropy(reference(x), y), list(reference.parameters()))
        assert torch.allclose(flat.grad, torch.cat([e.reshape(-1) for e in expected]), atol=1e-6)
    assert flat.is_bound()
    lenet.fc1.weight.grad = None
    assert not flat.is_bound()


def test_mixed_dtypes_refused() -> None:
    model = build_model(model_spec("mlp", {"in_features": 3, "hidden": [2]}), seed=0)
    model[1].double()
    with pytest.raises(ConfigError, match="dtype"):
        FlatParameters.bind(model)
