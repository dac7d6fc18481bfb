"""The public-data evaluator of Sself (sself spec eq. 4, §1.3, §7.1): entropy implementations, F_pub, determinism,
memo, and the sign-flipped-model pitfall on a real trained MLP."""

from __future__ import annotations

import math
from dataclasses import replace
from types import MappingProxyType

import numpy as np
import pytest
import torch
from torch.nn import functional as F

from learning.attacks import ModelScaling
from learning.data import Dataset, DigitsSpec, split_public
from learning._errors import ConfigError
from learning.models import LogisticRegressionSpec, MLPSpec
from learning.training import PublicScorer, log_softmax64, prediction_entropy, public_scores
from learning.strategies import ClientUpdate, RoundInfo, Sself
from learning.training import LocalTrainer, LocalTrainingConfig

SPEC = MLPSpec(in_features=64, hidden=(64, 32), num_classes=10, init="he")  # sself spec §6.1: 64-64-32-10, He


pytestmark = pytest.mark.usefixtures("deterministic_torch")  # (tests/learning/conftest.py)


@pytest.fixture(scope="module")
def digits():
    splits = DigitsSpec(test_fraction=0.2, seed=0).load()
    public, pool = split_public(splits.train, 50, rng=np.random.default_rng(0))  # §6.1: 5 per class
    return public, pool, splits.test


@pytest.fixture(scope="module")
def trained(digits):
    """A global model trained for 2 epochs on the pool (§6.1 MLP, lr 0.05, B = 10), as a float32 vector."""
    _, pool, _ = digits
    trainer = LocalTrainer(SPEC, LocalTrainingConfig(epochs=2, batch_size=10, sampling="shuffle"))
    theta0 = trainer.initial_parameters(seed=0)
    res = trainer.train(theta0, pool, lr=0.05, generator=torch.Generator().manual_seed(0))
    return trainer, (theta0 + res.delta).numpy()


# --- entropy and loss from logits ---------------------------------------------------------------------------


def test_exact_entropy_matches_the_definition() -> None:
    rng = np.random.default_rng(0)
    logits = rng.normal(0.0, 3.0, (40, 10))
    p = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    reference = -(p * np.log(p)).sum(axis=1)
    assert np.allclose(prediction_entropy(logits), reference, rtol=0, atol=1e-12)
    assert prediction_entropy(np.zeros((3, 10))) == pytest.approx([math.log(10)] * 3, abs=1e-15)  # nats, max ln Q
    confident = np.array([[0.0, 1e4, -1e4]])  # p underflows to 0: 0·log 0 = 0, finite
    assert prediction_entropy(confident)[0] == 0.0


def test_naive_float32_entropy_is_nan_once_a_probability_underflows() -> None:
    """sself spec §7.1: the textbook float32 −Σ p ln p gives NaN from a logit gap of ≈ 104 (87 with FTZ)."""
    mild = np.array([[0.0, 80.0] + [0.0] * 8], dtype=np.float32)
    steep = np.array([[0.0, 120.0] + [0.0] * 8], dtype=np.float32)
    assert np.isfinite(prediction_entropy(mild, impl="naive_float32")).all()
    assert np.isnan(prediction_entropy(steep, impl="naive_float32")).all()
    assert np.isfinite(prediction_entropy(steep, impl="exact")).all()  # exact: ≈ 0, finite
    rng = np.random.default_rng(1)
    moderate = rng.normal(0.0, 2.0, (20, 10)).astype(np.float32)
    assert np.allclose(prediction_entropy(moderate, impl="naive_float32"), prediction_entropy(moderate), atol=1e-5)
    with pytest.raises(ConfigError, match="entropy_impl"):
        prediction_entropy(moderate, impl="log2")


def test_public_loss_is_the_cross_entropy_and_nonfinite_propagates() -> None:
    rng = np.random.default_rng(2)
    logits = rng.normal(0.0, 5.0, (30, 10))
    labels = rng.integers(0, 10, 30)
    e_avg, f_pub = public_scores(logits, labels)
    expected = F.cross_entropy(torch.from_numpy(logits), torch.from_numpy(labels)).item()
    assert f_pub == pytest.approx(expected, rel=1e-12)
    assert e_avg == pytest.approx(float(prediction_entropy(logits).mean()), rel=1e-12)
    bad = logits.copy()
    bad[3, 2] = np.inf
    e_bad, f_bad = public_scores(bad, labels)
    assert not math.isfinite(e_bad) and not math.isfinite(f_bad)  # non-finite ⇒ reported non-finite (§7.1)
    assert np.allclose(log_softmax64(logits), torch.log_softmax(torch.from_numpy(logits), 1).numpy(), atol=1e-12)


# --- PublicScorer -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("portable", [False, True])
def test_scorer_matches_the_trainer_and_the_formula(digits, trained, portable) -> None:
    """``portable=False`` scores with this process's kernels: the formula on its own logits, to the last bits.
    The portable scorer (the default) scores in reproducible mode, in a helper process here: the same values to
    about float32's precision of the logits."""
    public, _, _ = digits
    trainer, w = trained
    scorer = PublicScorer.from_trainer(trainer, public, portable=portable)
    assert scorer.dim == w.shape[0] and scorer.public_size == 50 and scorer.entropy_impl == "exact"
    e_avg, f_pub = scorer(w)
    assert f_pub == pytest.approx(trainer.evaluate(torch.from_numpy(w), public).loss, rel=1e-5)
    assert e_avg == pytest.approx(float(prediction_entropy(scorer.logits(w)).mean()), rel=1e-12 if not portable else 1e-5)
    zero = scorer(np.zeros(scorer.dim, dtype=np.float32))  # uniform predictions: E = F = ln 10
    assert zero == pytest.approx((math.log(10), math.log(10)), abs=1e-12)


_SCORE_HERE = """
import json, sys
import numpy as np
from learning import reproducible
from learning.data import DigitsSpec, split_public
from learning.models import MLPSpec
from learning.training import PublicScorer
reproducible.configure()
public, _ = split_public(DigitsSpec().load().train, 50, rng=np.random.default_rng(0))
scorer = PublicScorer(MLPSpec(in_features=64, hidden=(64, 32)), public)
w = np.random.default_rng(1).normal(0, 0.3, scorer.dim).astype(np.float32)
print(json.dumps([scorer(w), scorer._remote]))
"""


def test_the_portable_scorer_gives_the_bits_of_a_reproducible_process(in_reproducible_mode) -> None:
    """The helper's scores are bit for bit those a process started in reproducible mode computes itself (which
    scores in-process, no helper), whatever this process's own kernels."""
    from learning.data import DigitsSpec, split_public
    from learning.models import MLPSpec

    (there, remote) = in_reproducible_mode(_SCORE_HERE)
    assert remote is False, "a process in the mode scores in-process"
    public, _ = split_public(DigitsSpec().load().train, 50, rng=np.random.default_rng(0))
    scorer = PublicScorer(MLPSpec(in_features=64, hidden=(64, 32)), public)
    w = np.random.default_rng(1).normal(0, 0.3, scorer.dim).astype(np.float32)
    assert list(scorer(w)) == there  # exact: floats through JSON round-trip exactly


def test_scorer_is_deterministic_and_memoised_by_content(digits, trained) -> None:
    public, _, _ = digits
    _, w = trained
    a = PublicScorer(SPEC, public, memo_size=2)
    b = PublicScorer(SPEC, public, batch_size=7)  # another instance, other batching
    first = a(w)
    assert a(w.copy()) == first  # same bytes, another array: a memo hit
    assert a.memo_info().hits == 1 and a.memo_info().misses == 1
    assert b(w) == pytest.approx(first, rel=1e-6)
    assert PublicScorer(SPEC, public)(w) == first  # a fresh scorer gives the same floats, bit for bit
    read_only = np.frombuffer(w.tobytes(), dtype=np.float32)  # as decoded from a blob
    assert a(read_only) == first
    w2, w3 = (w * 0.5).astype(np.float32), (w * 0.25).astype(np.float32)
    a(w2)
    a(w3)  # capacity 2: w is evicted (least recently used)
    misses = a.memo_info().misses
    assert a(w) == first and a.memo_info().misses == misses + 1
    assert a.memo_info().size == 2 and a.memo_info().capacity == 2
    off = PublicScorer(SPEC, public, memo_size=0)
    off(w)
    off(w)
    assert off.memo_info().misses == 2 and off.memo_info().size == 0


def test_scorer_is_strict(digits) -> None:
    public, _, _ = digits
    scorer = PublicScorer(SPEC, public)
    with pytest.raises(ValueError, match="float32"):
        scorer(np.zeros(scorer.dim, dtype=np.float64))
    with pytest.raises(ValueError, match="shape"):
        scorer(np.zeros(scorer.dim + 1, dtype=np.float32))
    with pytest.raises(ConfigError, match="entropy_impl"):
        PublicScorer(SPEC, public, entropy_impl="log2")
    with pytest.raises(ConfigError, match="batch_size"):
        PublicScorer(SPEC, public, batch_size=0)
    with pytest.raises(ConfigError, match="memo_size"):
        PublicScorer(SPEC, public, memo_size=True)
    with pytest.raises(ConfigError, match="empty"):
        PublicScorer(SPEC, public.subset(np.arange(0)))


# --- sself spec §7.1: the sign-flipped ×10 model ------------------------------------------------------------------


def _clients(pool: Dataset, w: np.ndarray, trainer: LocalTrainer, n: int) -> list[np.ndarray]:
    """n benign local updates from w, each one epoch on 60 pool samples of a label-sorted slice (non-IID)."""
    order = np.argsort(pool.labels, kind="stable")
    out = []
    for k in range(n):
        shard = pool.subset(order[k * 300 : k * 300 + 60])
        res = trainer.train(torch.from_numpy(w), shard, lr=0.05, generator=torch.Generator().manual_seed(10 + k))
        out.append(res.delta.numpy().copy())
    return out


def test_sign_flipped_model_entropy_pitfall(digits, trained) -> None:
    """D1/D2 of sself spec §6.3 and the filter's behaviour in both entropy modes (§7.1).

    exact: the −10·w model is over-confident (entropy ≈ 0 ≤ benign), so the entropy rule keeps it; only its huge
    public loss gives it a tiny β. naive_float32: its entropy is NaN and the non-finite rule rejects it.
    """
    public, pool, _ = digits
    trainer, w = trained
    benign = _clients(pool, w, trainer, 4)
    byz = ModelScaling(factor=-10.0)(benign[0][None, :], rng=np.random.default_rng(0), global_model=w)
    flipped = (-10.0 * (w.astype(np.float64) + benign[0])).astype(np.float32)
    assert np.allclose(w + byz, flipped, atol=1e-3)  # the existing attack sends −10·w_t(k) (§3.3)

    exact = PublicScorer(SPEC, public, entropy_impl="exact")
    naive = PublicScorer(SPEC, public, entropy_impl="naive_float32")
    e_w, f_w = exact(w)
    e_flip, f_flip = exact((-10.0 * w).astype(np.float32))
    assert math.isfinite(e_flip) and e_flip <= e_w and e_flip < 1.0  # D1: lower entropy, below E_th = 1
    assert f_flip >= 20.0 * f_w  # D2
    assert math.isnan(naive((-10.0 * w).astype(np.float32))[0])
    assert naive(w)[0] == pytest.approx(e_w, abs=1e-5)  # benign: both modes agree

    t = 3
    updates = [ClientUpdate(f"b{k}", d, 60, t) for k, d in enumerate(benign)] + [ClientUpdate("z", byz, 60, t)]
    info = RoundInfo(fl_round=t, members=("b0", "b1", "b2", "b3", "z"), sampled=("b0", "b1", "b2", "b3", "z"),
                     base_models=MappingProxyType({}))
    strat = {impl: Sself(gamma=1.0, delta=1.0, e_th=1.0, max_staleness=0, entropy_impl=impl)
             for impl in ("exact", "naive_float32")}
    rng = np.random.default_rng(0)
    kept = strat["exact"].aggregate(replace(info, public=exact), w, updates, state=None, rng=rng)
    assert kept.record["filtered"] == []  # exact: the poisoned model passes the entropy rule ...
    beta = {p: b for p, _, b in kept.record["beta"]}
    assert beta["z"] < 1e-3 < min(beta[f"b{k}"] for k in range(4))  # ... and only its loss weight is small

    dropped = strat["naive_float32"].aggregate(
        replace(info, public=naive), w, updates, state=None, rng=rng
    )
    assert [row[:3] for row in dropped.record["filtered"]] == [["z", t, "nan"]]
    benign_only = strat["naive_float32"].aggregate(
        replace(info, public=naive), w, updates[:4], state=None, rng=rng
    )
    assert dropped.model.tobytes() == benign_only.model.tobytes()
    with pytest.raises(ValueError, match="entropy_impl"):  # the host's scorer must match the strategy's mode
        strat["exact"].aggregate(replace(info, public=naive), w, updates, state=None, rng=rng)


def test_logistic_regression_scorer_small_model() -> None:
    """A second architecture: the flat layout is the model's (weight then bias)."""
    x = torch.eye(3, dtype=torch.float32)
    public = Dataset(x=x, y=torch.tensor([0, 1, 2]), num_classes=3)
    scorer = PublicScorer(LogisticRegressionSpec(in_features=3, num_classes=3), public)
    weight = 5.0 * np.eye(3, dtype=np.float32)
    model = np.concatenate([weight.ravel(), np.zeros(3, dtype=np.float32)])
    e_avg, f_pub = scorer(model)
    p_true = math.exp(5.0) / (math.exp(5.0) + 2.0)
    assert f_pub == pytest.approx(-math.log(p_true), rel=1e-6)
    p_other = 1.0 / (math.exp(5.0) + 2.0)
    assert e_avg == pytest.approx(-(p_true * math.log(p_true) + 2 * p_other * math.log(p_other)), rel=1e-6)
