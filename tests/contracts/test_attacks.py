"""Conformance suite over every registered update-level and data-level attack.

Update attacks: one ``(d,)`` vector of the honest updates' dtype; same rng seed => same bytes (and a different
seed changes the output of randomized attacks only); honest updates and the global model are never modified;
finite output for finite, moderate input; NaN/Inf honest updates are rejected; model-space attacks demand the
global model. Data attacks: shapes and dtypes preserved, seeded determinism, inputs untouched.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from learning.attacks import (
    ALIE,
    DATA_ATTACKS,
    UPDATE_ATTACKS,
    Backdoor,
    Gaussian,
    GradientScaling,
    InnerProductManipulation,
    LabelFlip,
    Mimic,
    ModelScaling,
    SameValue,
    SignFlip,
)
from learning._errors import ConfigError, InvalidUpdateError

UPDATE_EXAMPLES: dict[str, Callable[[], object]] = {
    "gradient_scaling": lambda: GradientScaling(low=0.5),
    "same_value": lambda: SameValue(),
    "sign_flip": lambda: SignFlip(scale=10.0),
    "model_scaling": lambda: ModelScaling(factor=-10.0),
    "gaussian": lambda: Gaussian(sigma=200.0),
    "alie": lambda: ALIE(z=1.5),
    "ipm": lambda: InnerProductManipulation(epsilon=2.0),
    "mimic": lambda: Mimic(index=0),
}
RANDOMIZED = {"gradient_scaling", "gaussian"}

DATA_EXAMPLES: dict[str, Callable[[], object]] = {
    "label_flip": lambda: LabelFlip(num_classes=10),
    "backdoor": lambda: Backdoor(target=2, poisoned_per_batch=3),
}

NAMES = sorted(UPDATE_EXAMPLES)


def honest(h: int, d: int, dtype: type, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((h, d)).astype(dtype)


def run(name: str, x: np.ndarray, seed: int = 1, model: np.ndarray | None = None) -> np.ndarray:
    attack = UPDATE_EXAMPLES[name]()
    if model is None and attack.needs_global_model:  # type: ignore[attr-defined]
        model = np.linspace(-1, 1, x.shape[-1]).astype(x.dtype)
    return attack(x, rng=np.random.default_rng(seed), global_model=model)  # type: ignore[operator,no-any-return]


def test_every_registered_attack_has_an_example() -> None:
    assert set(UPDATE_EXAMPLES) == set(UPDATE_ATTACKS)
    assert set(DATA_EXAMPLES) == set(DATA_ATTACKS)
    for cls in UPDATE_ATTACKS.values():
        assert isinstance(cls.needs_global_model, bool)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_shape_and_dtype_preserved(name: str, dtype: type) -> None:
    for h, d in [(1, 1), (3, 7), (10, 33)]:
        out = run(name, honest(h, d, dtype))
        assert out.shape == (d,) and out.dtype == np.dtype(dtype)


@pytest.mark.parametrize("name", NAMES)
def test_seeded_determinism(name: str) -> None:
    x = honest(8, 50, np.float32)
    a, b = run(name, x, seed=3), run(name, x.copy(), seed=3)
    assert a.tobytes() == b.tobytes()
    c = run(name, x, seed=4)
    assert (a.tobytes() != c.tobytes()) == (name in RANDOMIZED)


@pytest.mark.parametrize("name", NAMES)
def test_inputs_not_modified(name: str) -> None:
    x = honest(5, 9, np.float32)
    model = np.linspace(0, 1, 9).astype(np.float32)
    x0, m0 = x.copy(), model.copy()
    x.setflags(write=False)
    model.setflags(write=False)
    out = run(name, x, model=model)
    np.testing.assert_array_equal(x, x0)
    np.testing.assert_array_equal(model, m0)
    assert not np.shares_memory(out, x)


moderate = st.floats(min_value=-1e6, max_value=1e6, allow_nan=False, width=32)


@pytest.mark.parametrize("name", NAMES)
@settings(max_examples=25, deadline=None)
@given(x=hnp.arrays(np.float32, st.tuples(st.integers(1, 6), st.integers(1, 6)), elements=moderate))
def test_finite_output_for_finite_input(name: str, x: np.ndarray) -> None:
    assert np.isfinite(run(name, x)).all()


@pytest.mark.parametrize("name", NAMES)
def test_non_finite_honest_updates_are_rejected(name: str) -> None:
    x = honest(4, 5, np.float32)
    x[1, 2] = np.nan
    with pytest.raises(InvalidUpdateError, match="1 contain NaN"):
        run(name, x)
    with pytest.raises(InvalidUpdateError):
        run(name, np.zeros(5, np.float32))
    with pytest.raises(ConfigError):
        UPDATE_EXAMPLES[name]()(honest(4, 5, np.float32), rng=None)  # type: ignore[operator]


@pytest.mark.parametrize("name", NAMES)
def test_global_model_requirement(name: str) -> None:
    attack = UPDATE_EXAMPLES[name]()
    x = honest(3, 4, np.float32)
    if attack.needs_global_model:  # type: ignore[attr-defined]
        with pytest.raises(ConfigError, match="global_model"):
            attack(x, rng=np.random.default_rng(0))  # type: ignore[operator]
        bad = np.zeros(4, np.float32)
        bad[0] = np.inf
        with pytest.raises(InvalidUpdateError):
            attack(x, rng=np.random.default_rng(0), global_model=bad)  # type: ignore[operator]
    else:
        attack(x, rng=np.random.default_rng(0))  # type: ignore[operator]


def batch(dtype: type = np.float32) -> tuple[np.ndarray, np.ndarray]:
    g = np.random.default_rng(5)
    return g.random((6, 1, 5, 5)).astype(dtype), g.integers(0, 10, 6).astype(np.int64)


@pytest.mark.parametrize("name", sorted(DATA_EXAMPLES))
def test_data_attack_shapes_determinism_and_no_mutation(name: str) -> None:
    x, y = batch()
    x0, y0 = x.copy(), y.copy()
    x.setflags(write=False)
    y.setflags(write=False)
    attack = DATA_EXAMPLES[name]()
    x1, y1 = attack.transform(x, y, rng=np.random.default_rng(1))  # type: ignore[attr-defined]
    x2, y2 = attack.transform(x, y, rng=np.random.default_rng(1))  # type: ignore[attr-defined]
    assert x1.shape == x.shape and x1.dtype == x.dtype and y1.shape == y.shape and y1.dtype == y.dtype
    assert x1.tobytes() == x2.tobytes() and y1.tobytes() == y2.tobytes()
    np.testing.assert_array_equal(x, x0)
    np.testing.assert_array_equal(y, y0)
    assert ((y1 >= 0) & (y1 < 10)).all()
    with pytest.raises(ConfigError):
        attack.transform(x, y, rng=None)  # type: ignore[attr-defined]
