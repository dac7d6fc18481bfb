"""Known values of the update-level and data-level attacks (learning/attacks/)."""

from __future__ import annotations

import numpy as np
import pytest

from learning.attacks import (
    ALIE,
    Backdoor,
    Gaussian,
    GradientScaling,
    InnerProductManipulation,
    LabelFlip,
    Mimic,
    ModelScaling,
    SameValue,
    SignFlip,
    craft_byzantine_updates,
    format_attack,
    parse_data_attack,
    parse_update_attack,
)
from learning._errors import ConfigError, InvalidUpdateError


def rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def honest(h: int = 6, d: int = 5, seed: int = 1, dtype: type = np.float64) -> np.ndarray:
    return (np.random.default_rng(seed).standard_normal((h, d)) + 1.0).astype(dtype)


def test_sign_flip_and_ipm() -> None:
    u = honest()
    np.testing.assert_allclose(SignFlip()(u, rng=rng()), -u.mean(0), rtol=1e-14)
    np.testing.assert_allclose(SignFlip(scale=10.0)(u, rng=rng()), -10 * u.mean(0), rtol=1e-14)
    np.testing.assert_allclose(InnerProductManipulation()(u, rng=rng()), -2 * u.mean(0), rtol=1e-14)
    np.testing.assert_allclose(InnerProductManipulation(epsilon=0.1)(u, rng=rng()), -0.1 * u.mean(0), rtol=1e-14)
    # Own-update form (cmfl spec back-gradient): a 1-row stack is the attacker's own update.
    np.testing.assert_array_equal(SignFlip()(u[:1], rng=rng()), -u[0])


def test_same_value() -> None:
    np.testing.assert_array_equal(SameValue()(honest(), rng=rng()), np.zeros(5))
    np.testing.assert_array_equal(SameValue(value=1.0)(honest(), rng=rng()), np.ones(5))


def test_alie_matches_formula() -> None:
    u = honest(7, 9)
    expected = u.mean(0) + 1.5 * u.std(0, ddof=1)
    np.testing.assert_allclose(ALIE()(u, rng=rng()), expected, rtol=1e-13)
    np.testing.assert_allclose(ALIE(z=-1.0)(u, rng=rng()), u.mean(0) - u.std(0, ddof=1), rtol=1e-13)
    # One honest update: sigma is undefined (ddof = 1), the mean is sent.
    np.testing.assert_array_equal(ALIE()(u[:1], rng=rng()), u[0])


def test_alie_z_from_counts_matches_spec() -> None:
    # fedro spec §4: n = 26, f = 11 -> s = 3, z = Phi^-1(23/26) = 1.1984; n = 29, f = 13 -> z = 1.4835.
    assert ALIE.from_counts(26, 11).z == pytest.approx(1.1984, abs=1e-4)
    assert ALIE.from_counts(29, 13).z == pytest.approx(1.4835, abs=1e-4)
    assert ALIE.from_counts(10, 9).z == pytest.approx(1.2816, abs=1e-4)  # s clamped to 1: Phi^-1(0.9)
    for bad in ((1, 0), (10, 10), (10, -1)):
        with pytest.raises(ConfigError):
            ALIE.from_counts(*bad)


def test_mimic_copies_one_honest_update() -> None:
    u = honest()
    np.testing.assert_array_equal(Mimic()(u, rng=rng()), u[0])
    np.testing.assert_array_equal(Mimic(index=4)(u, rng=rng()), u[4])
    with pytest.raises(ConfigError, match="at least 7"):
        Mimic(index=6)(u, rng=rng())


def test_gradient_scaling_factors_lie_in_range() -> None:
    u = np.abs(honest(1, 20_000)) + 0.1
    out = GradientScaling(low=0.5)(u, rng=rng())
    ratio = out / u[0]
    assert ratio.min() >= 0.5 and ratio.max() < 1.0
    assert ratio.std() > 0.1  # drawn per element
    scalar = GradientScaling(low=0.0, per_element=False)(u, rng=rng(3)) / u[0]
    assert np.ptp(scalar) < 1e-12 and 0.0 <= scalar[0] < 1.0


def test_model_scaling_identities() -> None:
    u = honest(1, 6)
    w = np.random.default_rng(9).standard_normal(6)
    # cmfl spec code back-gradient: w_k <- -w_k, i.e. u_bad = -2 w - u.
    np.testing.assert_allclose(ModelScaling(factor=-1)(u, rng=rng(), global_model=w), -2 * w - u[0], rtol=1e-14)
    # sself spec: sent model -10 (w + u), i.e. u_bad = -11 w - 10 u.
    np.testing.assert_allclose(ModelScaling(factor=-10)(u, rng=rng(), global_model=w), -11 * w - 10 * u[0], rtol=1e-14)
    # cmfl spec model-level all-zero: u_bad = -w.
    np.testing.assert_allclose(ModelScaling(factor=0)(u, rng=rng(), global_model=w), -w, rtol=1e-14)
    with pytest.raises(ConfigError, match="needs global_model"):
        ModelScaling()(u, rng=rng())
    with pytest.raises(InvalidUpdateError, match="global_model has length 5"):
        ModelScaling()(u, rng=rng(), global_model=w[:5])


def test_gaussian_statistics() -> None:
    u = honest(3, 200_000)
    pure = Gaussian(mu=2.0, sigma=3.0)(u, rng=rng())
    assert abs(pure.mean() - 2.0) < 0.05 and abs(pure.std() - 3.0) < 0.05
    around = Gaussian(sigma=0.0, around_mean=True)(u, rng=rng())
    np.testing.assert_allclose(around, u.mean(0), rtol=1e-13)


def test_craft_byzantine_updates_stacks_one_vector() -> None:
    u = honest(4, 3, dtype=np.float32)
    out = craft_byzantine_updates(ALIE(), u, 5, rng=rng())
    assert out.shape == (5, 3) and out.dtype == np.float32
    assert (out == out[0]).all()
    assert craft_byzantine_updates(ALIE(), u, 0, rng=rng()).shape == (0, 3)
    with pytest.raises(ConfigError):
        craft_byzantine_updates(ALIE(), u, -1, rng=rng())


def test_attacks_do_not_look_at_the_defence() -> None:
    # The call signature carries only the honest updates, the rng and (for model attacks) the global model.
    import inspect

    from learning.attacks import UPDATE_ATTACKS

    for cls in UPDATE_ATTACKS.values():
        params = set(inspect.signature(cls.__call__).parameters)
        assert params == {"self", "honest", "rng", "global_model"}


@pytest.mark.parametrize(
    "spec",
    ["alie(z=1.5)", "ipm(epsilon=0.5)", "sign_flip(scale=10.0)", "model_scaling(factor=-10.0)", "mimic(index=1)",
     "gaussian(mu=0.0, sigma=200.0, around_mean=False)", "gradient_scaling(low=0.0, per_element=True)",
     "same_value(value=0.0)"],
)
def test_update_attack_spec_roundtrip(spec: str) -> None:
    attack = parse_update_attack(spec)
    assert parse_update_attack(format_attack(attack)) == attack


def test_attack_spec_errors() -> None:
    with pytest.raises(ConfigError, match="unknown update attack"):
        parse_update_attack("krum")
    with pytest.raises(ConfigError, match="single stage"):
        parse_update_attack("alie > ipm")
    with pytest.raises(ConfigError):
        parse_update_attack("gradient_scaling(low=1.0)")
    with pytest.raises(ConfigError):
        parse_data_attack("label_flip")  # num_classes is required


# --- data attacks ---------------------------------------------------------------------------------------------


def test_label_flip_default_and_maps() -> None:
    x = np.zeros((10, 2))
    y = np.arange(10, dtype=np.int64)
    x_out, y_out = LabelFlip(num_classes=10).transform(x, y, rng=rng())
    assert x_out is x
    np.testing.assert_array_equal(y_out, [1, 2, 3, 4, 5, 6, 7, 8, 9, 0])  # 9 -> 0 (wrap-around)
    np.testing.assert_array_equal(LabelFlip.reverse(10).transform(x, y, rng=rng())[1], 9 - y)
    custom = LabelFlip(num_classes=3, mapping=(2, 2, 0))
    np.testing.assert_array_equal(custom.transform(x[:6], np.array([0, 1, 2, 2, 1, 0]), rng=rng())[1], [2, 2, 0, 0, 2, 2])
    assert y_out.dtype == y.dtype
    np.testing.assert_array_equal(y, np.arange(10))  # input untouched


def test_label_flip_validation() -> None:
    with pytest.raises(ConfigError):
        LabelFlip(num_classes=3, mapping=(0, 1))
    with pytest.raises(ConfigError):
        LabelFlip(num_classes=3, mapping=(0, 1, 3))
    with pytest.raises(InvalidUpdateError, match=r"labels must lie in \[0, 3\)"):
        LabelFlip(num_classes=3).transform(np.zeros(2), np.array([0, 3]), rng=rng())
    with pytest.raises(InvalidUpdateError, match="1-D integer"):
        LabelFlip(num_classes=3).transform(np.zeros(2), np.array([0.0, 1.0]), rng=rng())


def test_backdoor_poisons_the_first_k_samples() -> None:
    x = np.random.default_rng(2).random((64, 1, 28, 28)).astype(np.float32)
    y = np.random.default_rng(3).integers(0, 10, 64)
    attack = Backdoor(target=2, poisoned_per_batch=20)
    x_out, y_out = attack.transform(x, y, rng=rng())
    assert x_out.shape == x.shape and x_out.dtype == x.dtype
    assert (y_out[:20] == 2).all()
    np.testing.assert_array_equal(y_out[20:], y[20:])
    assert (x_out[:20, :, 0:3, 0:4] == 1.0).all()  # 12 white pixels, top-left
    np.testing.assert_array_equal(x_out[:20, :, 3:, :], x[:20, :, 3:, :])
    np.testing.assert_array_equal(x_out[20:], x[20:])
    assert not (x[:20, :, 0:3, 0:4] == 1.0).all()  # input untouched
    small_x, small_y = attack.transform(x[:5], y[:5], rng=rng())
    assert (small_y == 2).all()  # min(k, |batch|)


def test_backdoor_flat_inputs_and_trigger_for_asr() -> None:
    x = np.zeros((4, 3 * 8 * 8))
    attack = Backdoor(target=1, poisoned_per_batch=2, value=0.5, image_shape=(8, 8))
    x_out, _ = attack.transform(x, np.zeros(4, dtype=np.int64), rng=rng())
    img = x_out.reshape(4, 3, 8, 8)
    assert (img[:2, :, 0:3, 0:4] == 0.5).all() and img[:2].sum() == 0.5 * 2 * 3 * 12
    assert img[2:].sum() == 0
    triggered = attack.apply_trigger(x)
    assert triggered.reshape(4, 3, 8, 8)[:, :, 0:3, 0:4].min() == 0.5
    with pytest.raises(ConfigError, match="image_shape"):
        Backdoor(target=1).apply_trigger(x)


def test_backdoor_boost_is_model_replacement() -> None:
    u = np.arange(4, dtype=np.float32)
    out = Backdoor(target=0, boost=10.0).boost_update(u)
    np.testing.assert_array_equal(out, 10 * u)
    assert out.dtype == np.float32


def test_data_attacks_accept_torch_tensors() -> None:
    torch = pytest.importorskip("torch")
    x = torch.rand(8, 1, 6, 6)
    y = torch.arange(8) % 3
    x_out, y_out = Backdoor(target=2, poisoned_per_batch=3).transform(x, y, rng=rng())
    assert isinstance(x_out, torch.Tensor) and (y_out[:3] == 2).all() and (x_out[:3, :, 0:3, 0:4] == 1).all()
    assert not torch.equal(x_out, x)
    _, flipped = LabelFlip(num_classes=3).transform(x, y, rng=rng())
    assert isinstance(flipped, torch.Tensor) and flipped.dtype == y.dtype
    assert flipped.tolist() == [(v + 1) % 3 for v in y.tolist()]
