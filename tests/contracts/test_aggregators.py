"""Conformance suite run over every registered aggregator and pre-aggregator: permutation invariance (or a
declared exemption), determinism, inputs not mutated, the ``f`` bound.

Every rule in ``AGGREGATORS`` / ``PRE_AGGREGATORS`` must have an example here (the first test fails otherwise),
and then must: return a ``(d,)`` array of the input dtype; give the same bytes for the same input and rng seed
(also for other memory layouts and, where ``bit_reproducible`` is declared, other BLAS thread counts); never
modify its input; be permutation-invariant unless it declares the exemption; enforce ``2f < n`` with
``ConfigError``/``ValueError``; return finite output for any accepted finite input; reject NaN/Inf or
wrongly-shaped updates with ``InvalidUpdateError`` before aggregating; and refuse weights it does not support.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from learning.robust import (
    AGGREGATORS,
    MDA,
    CenteredClipping,
    CoordinateWiseMedian,
    GeometricMedian,
    Krum,
    MeaMed,
    Mean,
    MultiKrum,
    TrimmedMean,
)
from learning._errors import ConfigError, InvalidUpdateError
from learning.robust import (
    ARC,
    FLOAT64_ABS_MAX,
    NNM,
    PRE_AGGREGATORS,
    Bucketing,
    Chain,
    StaticClipping,
    format_aggregator,
)

REPO = Path(__file__).resolve().parents[2]


def _f(n: int) -> int:
    return (n - 1) // 3


#: One example configuration per registered aggregator, as a function of the number of inputs n.
AGGREGATOR_EXAMPLES: dict[str, Callable[[int], object]] = {
    "mean": lambda n: Mean(),
    "median": lambda n: CoordinateWiseMedian(),
    "trimmed_mean": lambda n: TrimmedMean(f=_f(n)),
    "meamed": lambda n: MeaMed(f=_f(n)),
    "geometric_median": lambda n: GeometricMedian(nu=0.1, iterations=5),
    "centered_clipping": lambda n: CenteredClipping(tau=1.0, iterations=3),
    "krum": lambda n: Krum(f=_f(n)),
    "multi_krum": lambda n: MultiKrum(f=_f(n)),
    "mda": lambda n: MDA(f=_f(n)),
}

#: One example configuration per registered pre-aggregator.
PRE_EXAMPLES: dict[str, Callable[[int], object]] = {
    "nnm": lambda n: NNM(f=_f(n)),
    "bucketing": lambda n: Bucketing(bucket_size=2),
    "clipping": lambda n: StaticClipping(c=1.0),
    "arc": lambda n: ARC(f=_f(n)),
}


def make_rules(n: int) -> list[object]:
    """Every registered rule, plus every pre-aggregator chained into the mean and the FedRo chain."""
    rules = [AGGREGATOR_EXAMPLES[name](n) for name in sorted(AGGREGATOR_EXAMPLES)]
    rules += [Chain(pre=(PRE_EXAMPLES[name](n),), final=Mean()) for name in sorted(PRE_EXAMPLES)]  # type: ignore[arg-type]
    rules.append(Chain(pre=(NNM(f=_f(n)),), final=TrimmedMean(f=_f(n))))
    return rules


RULE_IDS = [format_aggregator(r) for r in make_rules(10)]  # type: ignore[arg-type]
RULE_INDEX = list(range(len(RULE_IDS)))


def rule_at(i: int, n: int) -> object:
    return make_rules(n)[i]


def stack(n: int, d: int, seed: int, dtype: type = np.float32, *, outliers: int = 0) -> np.ndarray:
    g = np.random.default_rng(seed)
    x = g.standard_normal((n, d))
    x[:outliers] = x[:outliers] * 30 + 10
    return x.astype(dtype)


def call(rule: object, x: np.ndarray, seed: int = 7, **kw: object) -> np.ndarray:
    return rule(x, rng=np.random.default_rng(seed), **kw)  # type: ignore[operator,no-any-return]


def test_every_registered_rule_has_an_example() -> None:
    assert set(AGGREGATOR_EXAMPLES) == set(AGGREGATORS)
    assert set(PRE_EXAMPLES) == set(PRE_AGGREGATORS)
    for cls in [*AGGREGATORS.values(), *PRE_AGGREGATORS.values()]:
        assert isinstance(cls.bit_reproducible, bool)
        assert isinstance(cls.permutation_invariant, bool)
    for cls in AGGREGATORS.values():
        assert isinstance(cls.supports_weights, bool)


@pytest.mark.parametrize("i", RULE_INDEX, ids=RULE_IDS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_shape_and_dtype(i: int, dtype: type) -> None:
    for n, d in [(1, 1), (2, 3), (7, 5), (16, 33)]:
        out = call(rule_at(i, n), stack(n, d, seed=n, dtype=dtype))
        assert out.shape == (d,) and out.dtype == np.dtype(dtype)


@pytest.mark.parametrize("i", RULE_INDEX, ids=RULE_IDS)
def test_same_input_and_seed_give_the_same_bytes(i: int) -> None:
    rule = rule_at(i, 13)
    x = stack(13, 40, seed=1, outliers=4)
    first = call(rule, x, seed=3)
    assert call(rule, x.copy(), seed=3).tobytes() == first.tobytes()
    # Memory layout does not matter: Fortran order and a strided view give the same bytes.
    assert call(rule, np.asfortranarray(x), seed=3).tobytes() == first.tobytes()
    wide = np.zeros((13, 80), dtype=x.dtype)
    wide[:, ::2] = x
    assert call(rule, wide[:, ::2], seed=3).tobytes() == first.tobytes()


@pytest.mark.parametrize("i", RULE_INDEX, ids=RULE_IDS)
def test_input_is_not_modified(i: int) -> None:
    x = stack(11, 9, seed=2, outliers=3)
    before = x.copy()
    x.setflags(write=False)
    call(rule_at(i, 11), x)
    np.testing.assert_array_equal(x, before)
    w = np.arange(1.0, 12.0)
    w_before = w.copy()
    rule = rule_at(i, 11)
    if rule.supports_weights and getattr(getattr(rule, "final", rule), "supports_weights", True):  # type: ignore[attr-defined]
        call(rule, x, weights=w)
        np.testing.assert_array_equal(w, w_before)


@pytest.mark.parametrize("i", RULE_INDEX, ids=RULE_IDS)
def test_permutation_invariance_or_declared_exemption(i: int) -> None:
    rule = rule_at(i, 12)
    if not rule.permutation_invariant:  # type: ignore[attr-defined]
        assert any(isinstance(s, Bucketing) for s in getattr(rule, "pre", ())), "only bucketing is exempt"
        return
    x = stack(12, 17, seed=4, outliers=3)
    base = call(rule, x)
    g = np.random.default_rng(5)
    for _ in range(5):
        perm = g.permutation(12)
        np.testing.assert_allclose(call(rule, x[perm]), base, rtol=2e-6, atol=2e-6)


@pytest.mark.parametrize("name", sorted(PRE_EXAMPLES))
def test_pre_aggregators_are_equivariant_or_exempt(name: str) -> None:
    pre = PRE_EXAMPLES[name](12)
    x = stack(12, 6, seed=6, outliers=3)
    out = call(pre, x)
    assert out.dtype == x.dtype and out.shape[1] == 6
    if not pre.permutation_invariant:  # type: ignore[attr-defined]
        return
    perm = np.random.default_rng(8).permutation(12)
    np.testing.assert_allclose(call(pre, x[perm]), out[perm], rtol=1e-6, atol=1e-6)


F_RULES: dict[str, Callable[[int], object]] = {
    "trimmed_mean": lambda f: TrimmedMean(f=f),
    "meamed": lambda f: MeaMed(f=f),
    "krum": lambda f: Krum(f=f),
    "multi_krum": lambda f: MultiKrum(f=f),
    "mda": lambda f: MDA(f=f),
    "nnm": lambda f: Chain(pre=(NNM(f=f),), final=Mean()),
    "arc": lambda f: Chain(pre=(ARC(f=f),), final=Mean()),
}


def test_every_rule_with_f_is_in_the_f_bound_table() -> None:
    import dataclasses

    with_f = {
        name
        for name, cls in [*AGGREGATORS.items(), *PRE_AGGREGATORS.items()]
        if any(fld.name == "f" for fld in dataclasses.fields(cls))
    }
    assert with_f == set(F_RULES)


@pytest.mark.parametrize("name", sorted(F_RULES))
@pytest.mark.parametrize("f", [0, 1, 2, 4])
def test_f_bound_is_enforced(name: str, f: int) -> None:
    rule = F_RULES[name](f)
    if f > 0:
        with pytest.raises(ConfigError, match="2f >= n") as info:
            call(rule, stack(2 * f, 3, seed=f))
        assert isinstance(info.value, ValueError)
    call(rule, stack(2 * f + 1, 3, seed=f))
    with pytest.raises(ConfigError):
        F_RULES[name](-1)


finite32 = st.floats(width=32, allow_nan=False, allow_infinity=False)
finite64 = st.floats(min_value=-FLOAT64_ABS_MAX, max_value=FLOAT64_ABS_MAX, allow_nan=False)


@st.composite
def update_stacks(draw: st.DrawFn, dtype: type, elements: st.SearchStrategy[float]) -> np.ndarray:
    n = draw(st.integers(1, 7))
    d = draw(st.integers(1, 5))
    return draw(hnp.arrays(dtype, (n, d), elements=elements))


@pytest.mark.parametrize("i", RULE_INDEX, ids=RULE_IDS)
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(x32=update_stacks(np.float32, finite32), x64=update_stacks(np.float64, finite64))
def test_finite_input_gives_finite_output(i: int, x32: np.ndarray, x64: np.ndarray) -> None:
    for x in (x32, x64):
        out = call(rule_at(i, x.shape[0]), x)
        assert np.isfinite(out).all(), (x, out)


@pytest.mark.parametrize("i", RULE_INDEX, ids=RULE_IDS)
def test_non_finite_and_malformed_updates_are_rejected(i: int) -> None:
    rule = rule_at(i, 6)
    for bad_value in (np.nan, np.inf):
        x = stack(6, 4, seed=9)
        x[2, 1] = bad_value
        with pytest.raises(InvalidUpdateError, match="2 contain NaN or Inf"):
            call(rule, x)
    for bad in (np.zeros((6,), np.float32), np.zeros((6, 4), np.int32), np.zeros((0, 4), np.float32)):
        with pytest.raises(InvalidUpdateError):
            call(rule, bad)


@pytest.mark.parametrize("i", RULE_INDEX, ids=RULE_IDS)
def test_weights_supported_or_refused(i: int) -> None:
    rule = rule_at(i, 10)
    x = stack(10, 5, seed=10, dtype=np.float64)
    final = getattr(rule, "final", rule)
    if not final.supports_weights:  # type: ignore[attr-defined]
        with pytest.raises(ConfigError, match="does not support weights"):
            call(rule, x, weights=np.ones(10))
        return
    # Equal weights are no weights (n = 10: bucketing's buckets are all full, so bucket weights are equal too).
    np.testing.assert_allclose(call(rule, x, weights=np.full(10, 3.0)), call(rule, x), rtol=1e-12, atol=1e-12)


def test_mean_gives_zero_weight_to_zero_weighted_updates() -> None:
    x = stack(5, 3, seed=11, dtype=np.float64)
    x[4] = 1e9
    out = Mean()(x, rng=np.random.default_rng(0), weights=np.array([1, 1, 1, 1, 0]))
    np.testing.assert_allclose(out, x[:4].mean(0), rtol=1e-13)


# --- bit reproducibility across BLAS thread counts ----------------------------------------------------------

_DIGEST_SCRIPT = r"""
import hashlib, json, sys
import numpy as np
from learning.robust._aggregators import gram_matrix
from learning.robust._preaggregators import parse_aggregator
specs = json.loads(sys.argv[1])
x = np.random.default_rng(2024).standard_normal((24, 150_001), dtype=np.float32)
x[:5] = x[:5] * 40 + 3
out = {"gram": hashlib.sha256(gram_matrix(x).tobytes()).hexdigest()}
for spec in specs:
    r = parse_aggregator(spec)(x, rng=np.random.default_rng(5))
    out[spec] = hashlib.sha256(r.tobytes()).hexdigest()
print(json.dumps(out))
"""


def _digests(threads: int, specs: list[str], **env_over: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENBLAS_CORETYPE", "NPY_"))}
    env.update(
        OPENBLAS_NUM_THREADS=str(threads),
        OMP_NUM_THREADS=str(threads),
        PYTHONPATH=str(REPO) + os.pathsep + env.get("PYTHONPATH", ""),
        **env_over,
    )
    proc = subprocess.run(
        [sys.executable, "-c", _DIGEST_SCRIPT, json.dumps(specs)],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    return json.loads(proc.stdout)  # type: ignore[no-any-return]


def test_bit_reproducible_rules_do_not_depend_on_the_blas_thread_count() -> None:
    rules = make_rules(24)
    assert all(isinstance(r.bit_reproducible, bool) for r in rules)  # type: ignore[attr-defined]
    specs = [format_aggregator(r) for r in rules if r.bit_reproducible]  # type: ignore[arg-type,attr-defined]
    one = _digests(1, specs)
    two = _digests(2, specs)
    four = _digests(4, specs)
    assert set(one) == {"gram", *specs}
    assert one == two == four


def _core_types() -> list[str]:
    """OpenBLAS core types this CPU can run (each its own dgemm/dsyrk kernels): SSE3's and SSE4.2's always, AVX2's
    and AVX-512's when the CPU has them."""
    flags: set[str] = set()
    if os.path.exists("/proc/cpuinfo"):
        with open("/proc/cpuinfo") as f:
            flags = next((set(line.split(":", 1)[1].split()) for line in f if line.startswith("flags")), set())
    return ["Prescott", "Nehalem", *(["Haswell"] if "avx2" in flags else []), *(["SkylakeX"] if "avx512f" in flags else [])]


def test_bit_reproducible_rules_give_the_same_bits_on_any_cpu() -> None:
    """What another x86-64 CPU would pick: other OpenBLAS kernels (a plain ``B @ B.T`` Gram gave three digests under
    four core types), numpy's baseline instructions only. A validator or an auditor on any machine re-executes the
    aggregate bit for bit."""
    from learning import reproducible

    specs = [format_aggregator(r) for r in make_rules(24) if r.bit_reproducible]  # type: ignore[arg-type,attr-defined]
    digests = [_digests(1, specs, OPENBLAS_CORETYPE=kind) for kind in _core_types()]
    digests.append(_digests(2, specs, NPY_DISABLE_CPU_FEATURES=reproducible.variables()["NPY_DISABLE_CPU_FEATURES"]))
    assert len(digests) >= 3 and all(d == digests[0] for d in digests), digests


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_kernel_threads_do_not_change_the_bytes(monkeypatch: pytest.MonkeyPatch, dtype: type) -> None:
    import learning.robust._validate as validate_module

    x = stack(20, 70_001, seed=13, dtype=dtype, outliers=4)
    results = {}
    for workers in (1, 2, 3, 4):
        monkeypatch.setattr(validate_module, "WORKERS", workers)
        results[workers] = [call(rule, x, seed=2).tobytes() for rule in make_rules(20)]
    assert results[1] == results[2] == results[3] == results[4]


def test_digest_of_the_same_call_is_stable_in_process() -> None:
    x = stack(20, 5000, seed=12, outliers=4)
    for rule in make_rules(20):
        digests = {hashlib.sha256(call(rule, x, seed=1).tobytes()).hexdigest() for _ in range(3)}
        assert len(digests) == 1


@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")
def test_kernels_work_in_a_forked_child() -> None:
    """A process forked after the kernel thread pool started (multiprocessing 'fork') must not deadlock."""
    import multiprocessing

    x = stack(20, 70_001, seed=14)
    expected = call(Mean(), x).tobytes()  # starts the pool in this process
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(1) as pool:
        got = pool.apply_async(_child_mean, (x,)).get(timeout=120)
    assert got == expected


def _child_mean(x: np.ndarray) -> bytes:
    return call(Mean(), x).tobytes()
