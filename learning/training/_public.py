"""The server's public-data evaluator for Sself: mean prediction entropy and mean loss of a model vector.

sself spec eq. (4) and §2.2::

    E_avg(w) = (1/n_pub) Σ_j E_{x_j}(w),   E_x(w) = − Σ_q P^{(q)}_x(w) · ln P^{(q)}_x(w)     (natural log, nats)
    F_pub(w) = (1/n_pub) Σ_j ℓ(w; x_j, y_j)                                                 (cross-entropy)

:class:`PublicScorer` implements the :class:`learning.strategies.PublicEval` protocol (``scorer(model) ->
(E_avg, F_pub)``) on the class-balanced public split the server holds (sself spec §1.3; carve it with
:func:`learning.data.split_public` / :func:`learning.data.with_public`, e.g. ``with_public(splits, seed=s,
fraction=0.02)`` or ``size=50`` for the §6.1 reproduction: that helper already exists and is not duplicated here).

Two entropy implementations (sself spec §7.1, the paper discrepancy):

* ``"exact"`` (default): the logits are taken to float64 and the entropy is computed from the log-softmax,
  ``−Σ_q exp(l_q) · l_q`` with ``0 · log 0 = 0``. A sign-flipped ×10 model is *over-confident* (entropy ≈ 0), so
  the entropy filter keeps it; only its huge public loss (small β) limits its weight.
* ``"naive_float32"`` (paper-compatible): ``p = softmax`` in float32, ``−Σ p · ln p``; a probability that
  underflows to exactly 0 gives ``0 · (−inf) = NaN``. With Sself's "non-finite ⇒ reject" rule this reproduces
  the paper's numbers (any model with a float32 logit gap ≳ 104 on some public sample is rejected).

F_pub is always the stable float64 cross-entropy from the log-softmax (identical in both modes). A non-finite
logit gives a non-finite ``E_avg``/``F_pub``, which every strategy treats as "reject" (fail-closed).

Determinism: CPU forward in fixed batches of the public set in its stored order, float64 post-processing in
numpy (no BLAS), per-sample values summed with :func:`math.fsum` (exactly rounded, order-free). The forward pass
is torch CPU float32 and numpy's ``exp``/``log`` pick SIMD paths per CPU, so both run in reproducible mode
(``learning.reproducible``: portable kernels, one thread): in this process when it was started in the mode, else
in one helper process started in it (``learning.training._portable``). The scores are then the same on every
x86-64 CPU: a Sself ledger written on one machine re-executes on any other. Results are memoised by the SHA-256
of the model's float32 bytes in a small LRU, because every validator re-scores the same uploaded models.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import math
import os
import sys
from collections import OrderedDict
from dataclasses import dataclass
from typing import BinaryIO, Literal

import numpy as np
import torch

from learning import reproducible
from learning._errors import ConfigError
from learning.data import Dataset
from learning.models import FlatParameters, ModelSpec, build_model, model_spec
from learning.training._local import LocalTrainer
from learning.training._portable import EVALUATE, LENGTH, REGISTER, SCORES, portable_evaluator, read_frame, write_frame

__all__ = [
    "ENTROPY_IMPLS",
    "MemoInfo",
    "PublicScorer",
    "check_entropy_impl",
    "log_softmax64",
    "prediction_entropy",
    "public_scores",
]

ENTROPY_IMPLS: tuple[str, ...] = ("exact", "naive_float32")
"""The entropy implementations of sself spec §7.1."""

EntropyImpl = Literal["exact", "naive_float32"]


def check_entropy_impl(value: object, what: str) -> str:
    """``value`` if it names an entropy implementation, else :class:`ConfigError`."""
    if value not in ENTROPY_IMPLS:
        raise ConfigError(f"{what}: entropy_impl must be one of {ENTROPY_IMPLS}, got {value!r}")
    return str(value)


def log_softmax64(logits: np.ndarray) -> np.ndarray:
    """Row-wise ``log softmax`` in float64: ``l = (x − max x) − ln Σ exp(x − max x)`` (stable; NaN in ⇒ NaN out)."""
    x = np.asarray(logits, dtype=np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        s = x - np.max(x, axis=1, keepdims=True)
        return s - np.log(np.sum(np.exp(s), axis=1, keepdims=True))


def prediction_entropy(logits: np.ndarray, *, impl: str = "exact") -> np.ndarray:
    """Per-sample Shannon entropy (nats) of ``softmax(logits)``, sself spec eq. (4); shape ``(n,)`` float64.

    Parameters
    ----------
    logits:
        ``(n, Q)`` model outputs.
    impl:
        ``"exact"``: from :func:`log_softmax64`, ``0 · log 0 = 0``; ``"naive_float32"``: ``p = softmax`` in
        float32 and ``−Σ p ln p`` in float32 (NaN where a probability underflows to 0; sself spec §7.1).

    Examples
    --------
    >>> import numpy as np
    >>> round(float(prediction_entropy(np.zeros((1, 10)))[0]), 12)  # uniform over 10 classes: ln 10
    2.302585092994
    >>> bool(np.isnan(prediction_entropy(np.array([[0.0, 200.0]]), impl="naive_float32")[0]))
    True
    """
    check_entropy_impl(impl, "prediction_entropy")
    if impl == "exact":
        lp = log_softmax64(logits)
        with np.errstate(invalid="ignore", over="ignore", under="ignore"):
            p = np.exp(lp)
            terms = np.where(p == 0.0, 0.0, p * lp)  # 0·log 0 = 0; NaN stays NaN
            return -np.sum(terms, axis=1)
    x = np.asarray(logits, dtype=np.float32)
    with np.errstate(all="ignore"):  # the textbook formula: underflow, 0·(−inf) = NaN are the point
        e = np.exp(x - np.max(x, axis=1, keepdims=True))
        p = e / np.sum(e, axis=1, keepdims=True)
        return (-np.sum(p * np.log(p), axis=1)).astype(np.float64)


def _mean(values: np.ndarray) -> float:
    n = values.shape[0]
    if not np.isfinite(values).all():
        with np.errstate(invalid="ignore", over="ignore"):
            return float(np.sum(values)) / n  # NaN or ±inf: reported as non-finite
    return math.fsum(values.tolist()) / n


def public_scores(logits: np.ndarray, labels: np.ndarray, *, impl: str = "exact") -> tuple[float, float]:
    """``(E_avg, F_pub)`` from the public set's logits ``(n, Q)`` and labels ``(n,)`` (sself spec eq. 4, F_pub).

    ``F_pub`` is the mean cross-entropy from the float64 log-softmax in both modes.
    """
    x = np.asarray(logits)
    y = np.asarray(labels, dtype=np.int64)
    if x.ndim != 2 or y.shape != (x.shape[0],) or x.shape[0] == 0:
        raise ValueError(f"need (n, Q) logits and (n,) labels with n >= 1, got {x.shape} and {y.shape}")
    ent = prediction_entropy(x, impl=impl)
    lp = log_softmax64(x)
    nll = -lp[np.arange(y.shape[0]), y]
    return _mean(ent), _mean(nll)


@dataclass(frozen=True, slots=True)
class MemoInfo:
    """Statistics of a :class:`PublicScorer`'s memo."""

    hits: int
    misses: int
    size: int
    capacity: int


class PublicScorer:
    """Deterministic :class:`~learning.strategies.PublicEval` on a public split (sself spec eq. 4, §1.3, §7.1).

    Parameters
    ----------
    spec:
        The model architecture (the vectors scored are its flat parameters, ``named_parameters()`` order).
    public:
        The server's public dataset (moved to CPU float32).
    entropy_impl:
        ``"exact"`` (default) or ``"naive_float32"`` (sself spec §7.1); Sself records which one was used.
    batch_size:
        Public samples per forward pass (fixed batches in the stored order).
    memo_size:
        Capacity of the LRU memo keyed by the SHA-256 of the model's float32 bytes (0 disables it).
    portable:
        Score in reproducible mode (the default; in a helper process when this one is not in the mode). False:
        this process's own kernels, the same bits only on the same kind of CPU.

    Examples
    --------
    >>> from learning.data import DigitsSpec, split_public
    >>> from learning.models import MLPSpec
    >>> import numpy as np
    >>> public, _ = split_public(DigitsSpec().load().train, 50, rng=np.random.default_rng(0))
    >>> scorer = PublicScorer(MLPSpec(in_features=64, hidden=(64, 32)), public)
    >>> e_avg, f_pub = scorer(np.zeros(scorer.dim, dtype=np.float32))  # all-zero model: uniform predictions
    >>> round(e_avg, 6), round(f_pub, 6)
    (2.302585, 2.302585)
    """

    __slots__ = ("_batch_size", "_entropy_impl", "_flat", "_hits", "_labels", "_memo", "_memo_size", "_misses",
                 "_num_classes", "_registered", "_remote", "_spec", "_x")

    def __init__(
        self,
        spec: ModelSpec,
        public: Dataset,
        *,
        entropy_impl: str = "exact",
        batch_size: int = 1024,
        memo_size: int = 64,
        portable: bool = True,
    ) -> None:
        self._entropy_impl = check_entropy_impl(entropy_impl, "PublicScorer")
        for key, value, low in (("batch_size", batch_size, 1), ("memo_size", memo_size, 0)):
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ConfigError(f"PublicScorer: {key} must be an int >= {low}, got {value!r}")
        if len(public) == 0:
            raise ConfigError("PublicScorer: the public set is empty")
        module = build_model(spec, seed=0, device="cpu", dtype=torch.float32)  # parameters are overwritten
        module.eval()
        self._flat = FlatParameters.bind(module)
        data = public.to("cpu", torch.float32)
        self._x = data.x
        self._labels = data.labels
        self._batch_size = batch_size
        self._memo: OrderedDict[bytes, tuple[float, float]] = OrderedDict()
        self._memo_size = memo_size
        self._hits = 0
        self._misses = 0
        self._spec = spec
        self._num_classes = data.num_classes
        self._remote = portable and bool(reproducible.problems())  # score in the helper, not here
        self._registered: tuple[object, int] | None = None  # (the helper, this scorer's index there) once registered

    @classmethod
    def from_trainer(cls, trainer: LocalTrainer, public: Dataset, **kwargs: object) -> PublicScorer:
        """A scorer for the model of ``trainer`` (its spec; a separate module, so training state is untouched)."""
        return cls(trainer.spec, public, **kwargs)  # type: ignore[arg-type]

    @property
    def entropy_impl(self) -> str:
        return self._entropy_impl

    @property
    def dim(self) -> int:
        """Length ``d`` of the model vectors this scorer accepts."""
        return self._flat.numel

    @property
    def public_size(self) -> int:
        """n_pub."""
        return int(self._labels.shape[0])

    def memo_info(self) -> MemoInfo:
        return MemoInfo(hits=self._hits, misses=self._misses, size=len(self._memo), capacity=self._memo_size)

    def logits(self, model: np.ndarray, /) -> np.ndarray:
        """The public set's logits ``(n_pub, Q)`` (float32) under the flat parameter vector ``model``."""
        vec = self._check(model)
        self._flat.load_(torch.from_numpy(vec if vec.flags.writeable else vec.copy()))
        out = []
        with torch.no_grad():
            for start in range(0, self._x.shape[0], self._batch_size):
                out.append(self._flat.module(self._x[start : start + self._batch_size]).numpy())
        return np.concatenate(out, axis=0)

    def __call__(self, model: np.ndarray, /) -> tuple[float, float]:
        """``(E_avg, F_pub)`` of ``model`` (a float32 vector of length :attr:`dim`); memoised by content."""
        vec = self._check(model)
        key = hashlib.sha256(memoryview(vec).cast("B")).digest()
        hit = self._memo.get(key)
        if hit is not None:
            self._memo.move_to_end(key)
            self._hits += 1
            return hit
        self._misses += 1
        if self._remote:
            result = self._score_remotely(vec)
        else:
            result = public_scores(self.logits(vec), self._labels, impl=self._entropy_impl)
        if self._memo_size:
            self._memo[key] = result
            if len(self._memo) > self._memo_size:
                self._memo.popitem(last=False)
        return result

    def _score_remotely(self, vec: np.ndarray) -> tuple[float, float]:
        helper = portable_evaluator()
        if self._registered is None or self._registered[0] is not helper:  # first use, or a new helper (a fork)
            index = helper.register(self._spec, self._x.numpy(), np.asarray(self._labels), num_classes=self._num_classes,
                                    entropy_impl=self._entropy_impl, batch_size=self._batch_size)
            self._registered = (helper, index)
        return helper.evaluate(self._registered[1], vec)

    def _check(self, model: np.ndarray) -> np.ndarray:
        if not isinstance(model, np.ndarray) or model.dtype != np.float32 or model.shape != (self.dim,):
            shape = getattr(model, "shape", None)
            dtype = getattr(model, "dtype", type(model).__name__)
            raise ValueError(f"PublicScorer: expected a float32 vector of shape ({self.dim},), got {dtype} {shape}")
        return np.ascontiguousarray(model, dtype="<f4")


def serve_portable(src: BinaryIO | None = None, out: BinaryIO | None = None) -> None:
    """The loop of the helper process of ``learning.training._portable`` (on stdin and stdout by default), in a
    process started in reproducible mode: it registers scorers and scores models for its parent."""
    src = sys.stdin.buffer if src is None else src
    if out is None:  # the frames get fd 1 to themselves: anything printed by a library goes to stderr instead
        out = os.fdopen(os.dup(1), "wb")
        os.dup2(2, 1)
        sys.stdout = sys.stderr
    reproducible.configure()  # refuses to serve with other bits than the mode's
    scorers: list[PublicScorer] = []
    while (frame := read_frame(src)) is not None:
        kind, body = frame[:1], frame[1:]
        if kind == REGISTER:
            (n,) = LENGTH.unpack(body[: LENGTH.size])
            head = json.loads(body[LENGTH.size : LENGTH.size + n])
            importlib.import_module(head["module"])  # the spec's registry entry (an app's model, too)
            spec = model_spec(head["model"], head["params"])
            rest = memoryview(body)[LENGTH.size + n :]
            (xs, xt), (ys, yt) = head["x"], head["labels"]
            xn = int(np.prod(xs)) * np.dtype(xt).itemsize
            x = np.frombuffer(rest[:xn], dtype=xt).reshape(xs).copy()
            y = np.frombuffer(rest[xn:], dtype=yt).reshape(ys).copy()
            public = Dataset(torch.from_numpy(x), torch.from_numpy(y), num_classes=head["num_classes"])
            scorers.append(PublicScorer(spec, public, entropy_impl=head["entropy_impl"], batch_size=head["batch_size"],
                                        memo_size=0, portable=False))
            write_frame(out, (len(scorers) - 1).to_bytes(4, "big"))
        elif kind == EVALUATE:
            scorer = scorers[int.from_bytes(body[:4], "big")]
            model = np.frombuffer(body[4:], dtype="<f4").copy()
            write_frame(out, SCORES.pack(*scorer(model)))
        else:
            raise SystemExit(f"learning.training._public.serve_portable: unknown frame {kind!r}")

