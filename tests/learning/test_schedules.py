"""Learning-rate schedules of the papers: known values at known rounds."""

from __future__ import annotations

import math

import pytest

from learning._errors import ConfigError
from learning.training import (
    FEDRO_FEMNIST,
    SCHEDULES,
    ConstantLR,
    ExponentialLR,
    InverseSqrtLR,
    InverseTimeLR,
    PiecewiseLR,
    StepLR,
    schedule_spec,
)


def test_constant() -> None:
    s = ConstantLR(lr=0.05)
    assert [s(t) for t in (0, 1, 1000)] == [0.05, 0.05, 0.05]


def test_inverse_sqrt_unavailability_spec() -> None:
    s = InverseSqrtLR(lr0=0.3)
    assert s(0) == 0.3
    assert s(3) == pytest.approx(0.15)
    assert s(99) == pytest.approx(0.03)


def test_exponential_seed_001_with_floor() -> None:
    s = ExponentialLR(lr0=0.01, gamma=0.95)
    assert s(0) == 0.01
    assert s(1) == pytest.approx(0.0095)
    assert s(90) == pytest.approx(0.01 * 0.95**90)
    assert s(1000) == 1e-5  # floor
    assert ExponentialLR(lr0=0.05, gamma=0.97)(10) == pytest.approx(0.05 * 0.97**10)


def test_step_decay() -> None:
    s = StepLR(lr0=0.01, every=15)
    assert [s(t) for t in (0, 14, 15, 29, 30)] == pytest.approx([0.01, 0.01, 0.005, 0.005, 0.0025])


def test_fedro_table_fedro_spec() -> None:
    expected = {0: 0.1, 299: 0.1, 300: 0.02, 399: 0.02, 400: 0.004, 459: 0.004, 460: 0.0008, 499: 0.0008}
    expected[10_000] = 0.0008
    for t, lr in expected.items():
        assert FEDRO_FEMNIST(t) == lr, t


def test_inverse_time() -> None:
    s = InverseTimeLR(theta=2.0, gamma=4.0)
    assert s(0) == 0.5
    assert s(4) == 0.25


def test_config_boundary() -> None:
    assert set(SCHEDULES) == {"constant", "inverse_sqrt", "exponential", "step", "piecewise", "inverse_time"}
    s = schedule_spec("piecewise", {"boundaries": [300, 400, 460], "values": [0.1, 0.02, 0.004, 0.0008]})
    assert s == FEDRO_FEMNIST
    assert schedule_spec("inverse_sqrt", {"lr0": 0.1})(3) == pytest.approx(0.05)
    with pytest.raises(ConfigError, match="unknown schedule"):
        schedule_spec("cosine", {})
    with pytest.raises(ConfigError, match="unknown parameter"):
        schedule_spec("constant", {"lr": 0.1, "decay": 0.5})


@pytest.mark.parametrize(
    "make",
    [
        lambda: ConstantLR(lr=0.0),
        lambda: ConstantLR(lr=math.inf),
        lambda: InverseSqrtLR(lr0=-1.0),
        lambda: ExponentialLR(lr0=0.1, gamma=1.5),
        lambda: StepLR(lr0=0.1, every=0),
        lambda: PiecewiseLR(boundaries=(10, 5), values=(0.1, 0.2, 0.3)),
        lambda: PiecewiseLR(boundaries=(10,), values=(0.1,)),
        lambda: InverseTimeLR(theta=1.0, gamma=0.0),
    ],
)
def test_bad_parameters_raise(make) -> None:
    with pytest.raises(ConfigError):
        make()


def test_negative_round_raises() -> None:
    with pytest.raises(ConfigError):
        ConstantLR(lr=0.1)(-1)
