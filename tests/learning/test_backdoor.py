"""sself spec §3.4 backdoor: trigger stamping on flat 8×8 digits, per-batch poisoning inside local training, model
replacement scaling, and the attack-success-rate set (real digits data, the real trainer)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from learning.attacks import Backdoor, parse_data_attack
from learning.data import dataset_spec
from learning._errors import ConfigError
from learning.models import MLPSpec
from learning.training import LocalTrainer, LocalTrainingConfig

SPEC = "backdoor(target=2, poisoned_per_batch=20, rows=(0, 3), cols=(0, 4), value=1.0, boost=10.0, image_shape=(8, 8))"
TRIGGER = [r * 8 + c for r in range(3) for c in range(4)]


@pytest.fixture(scope="module")
def digits():
    return dataset_spec("digits", {"test_fraction": 0.2, "seed": 0}).load()


def test_trigger_is_the_12_top_left_pixels_at_the_maximum_value(digits) -> None:
    bd = parse_data_attack(SPEC)
    assert isinstance(bd, Backdoor) and bd.per_batch and bd.boost == 10.0
    x = digits.train.x[:50]
    before = x.clone()
    out = bd.apply_trigger(x)
    assert torch.equal(x, before), "the input is never modified"
    changed = (out != x).any(dim=0).nonzero().flatten().tolist()
    assert set(changed) <= set(TRIGGER) and len(TRIGGER) == 12
    assert torch.all(out[:, TRIGGER] == 1.0)  # X/16: 1.0 is the maximum pixel value
    others = [j for j in range(64) if j not in TRIGGER]
    assert torch.equal(out[:, others], x[:, others])


def test_per_batch_poisoning_replaces_the_first_20_of_each_batch(digits) -> None:
    bd = parse_data_attack(SPEC)
    x, y = digits.train.x[:64], digits.train.y[:64]
    xo, yo = bd.transform(x, y, rng=np.random.default_rng(0))
    assert torch.all(yo[:20] == 2) and torch.equal(yo[20:], y[20:])
    assert torch.all(xo[:20, TRIGGER] == 1.0) and torch.equal(xo[20:], x[20:])
    assert torch.equal(xo[:20][:, [j for j in range(64) if j not in TRIGGER]],
                       x[:20][:, [j for j in range(64) if j not in TRIGGER]])
    xs, ys = bd.transform(x[:5], y[:5], rng=np.random.default_rng(0))  # a short last batch: all of it
    assert torch.all(ys == 2) and torch.all(xs[:, TRIGGER] == 1.0)


def test_asr_set_is_every_non_target_test_sample_triggered_and_labelled_target(digits) -> None:
    bd = parse_data_attack(SPEC)
    xt, yt = digits.test.x, digits.test.y
    xa, ya = bd.trigger_test_set(xt, yt)
    keep = yt != 2
    assert len(xa) == int(keep.sum()) < len(xt) and torch.all(ya == 2) and ya.dtype == yt.dtype
    assert torch.all(xa[:, TRIGGER] == 1.0)
    others = [j for j in range(64) if j not in TRIGGER]
    assert torch.equal(xa[:, others], xt[keep][:, others])
    xn, yn = bd.trigger_test_set(xt.numpy(), yt.numpy())
    assert np.array_equal(xn, xa.numpy()) and np.array_equal(yn, ya.numpy())


def test_boost_update_scales_the_update() -> None:
    u = np.array([0.5, -1.0, 2.0], dtype=np.float32)
    assert np.array_equal(parse_data_attack(SPEC).boost_update(u), np.float32(10.0) * u)
    noscale = parse_data_attack(SPEC.replace("boost=10.0", "boost=1.0"))
    assert np.array_equal(noscale.boost_update(u), u)


def test_bad_backdoor_parameters_are_config_errors() -> None:
    with pytest.raises(ConfigError):
        parse_data_attack(SPEC.replace("target=2", "target=-1"))
    with pytest.raises(ConfigError):
        parse_data_attack(SPEC.replace("rows=(0, 3)", "rows=(3, 3)"))
    with pytest.raises(ConfigError):
        parse_data_attack(SPEC.replace("poisoned_per_batch=20", "poisoned_per_batch=-2"))


def test_training_with_the_batch_transform_poisons_every_batch_and_plants_the_backdoor(digits) -> None:
    """The trainer applies the transform to every minibatch (E epochs × ⌈n/B⌉ batches); a model trained that way
    on real digits answers 2 on triggered images, the same training without it does not."""
    bd = parse_data_attack(SPEC)
    data = digits.train
    trainer = LocalTrainer(MLPSpec(in_features=64, hidden=(64, 32), num_classes=10),
                           LocalTrainingConfig(epochs=3, batch_size=64, sampling="shuffle"))
    theta = trainer.initial_parameters(seed=0)
    seen: list[int] = []

    def transform(xb: torch.Tensor, yb: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        seen.append(len(yb))
        return bd.transform(xb, yb, rng=np.random.default_rng(0))

    def run(tf):
        return trainer.train(theta, data, lr=0.1, generator=torch.Generator().manual_seed(1), batch_transform=tf)

    poisoned, clean = run(transform), run(None)
    per_epoch = -(-len(data) // 64)
    assert poisoned.steps == clean.steps == 3 * per_epoch == len(seen) and sum(seen) == 3 * len(data)
    xa, ya = bd.trigger_test_set(digits.test.x, digits.test.y)
    from learning.data import Dataset

    asr_set = Dataset(x=xa, y=ya, num_classes=10, name="asr")
    asr_poisoned = trainer.evaluate(theta + poisoned.delta, asr_set).accuracy
    asr_clean = trainer.evaluate(theta + clean.delta, asr_set).accuracy
    assert asr_poisoned >= 0.8 and asr_clean <= 0.3, (asr_poisoned, asr_clean)
