"""The public-split evaluation of a process that is not in reproducible mode, in one that is.

Sself's entropy filter and loss weighting (sself spec eq. 4) score every update by a forward pass over the public
split and numpy's ``exp``/``log``. Validators and the auditor re-execute those scores and compare the aggregate bit
for bit, so they must be the same on every x86-64 CPU; by default they are not (PyTorch, MKL and numpy pick their
kernels per CPU, ``learning.reproducible``). So a :class:`~learning.training.PublicScorer` in a process that is not
in reproducible mode sends each model to one helper process started in that mode (:class:`PortableEvaluator`,
one per process, shared by its scorers) and takes back ``(E_avg, F_pub)``; in a reproducible process it computes
them itself: the same bits either way.

The helper runs ``learning.training._public.serve_portable`` (the scorer's own module: this one imports no scorer). It talks over its stdin/stdout in
frames (a 4-byte big-endian length, then the bytes): a registration (a JSON header: the model spec's module, name
and parameters, the entropy implementation, the batch size, the public inputs' and labels' shapes and dtypes;
then the two arrays' raw bytes) answered with the scorer's index, and evaluations (the index, then the model's
float32 bytes) answered with two little-endian float64. Only this process's own data crosses (never a peer's
bytes unchecked: a model is a float32 vector of the scorer's length, checked on both sides); nothing is pickled.
It exits at end of input: when its parent closes the pipe or dies.
"""

from __future__ import annotations

import dataclasses
import json
import os
import struct
import subprocess
import sys
import threading
from typing import Any, BinaryIO

import numpy as np

from learning._errors import LearningError

__all__ = [
    "EVALUATE", "LENGTH", "REGISTER", "SCORES", "PortableEvaluator", "portable_evaluator", "read_frame", "write_frame",
]

LENGTH = struct.Struct(">I")
"""A frame's length prefix, and a registration header's."""
SCORES = struct.Struct("<dd")
REGISTER, EVALUATE = b"R", b"E"


def write_frame(out: BinaryIO, *parts: bytes) -> None:
    body = b"".join(parts)
    out.write(LENGTH.pack(len(body)) + body)
    out.flush()


def read_frame(src: BinaryIO) -> bytes | None:
    head = src.read(LENGTH.size)
    if len(head) < LENGTH.size:
        return None
    (n,) = LENGTH.unpack(head)
    body = src.read(n)
    if len(body) != n:
        return None
    return body


class PortableEvaluator:
    """A helper process in reproducible mode that evaluates public splits for this process (see the module)."""

    def __init__(self) -> None:
        from learning import reproducible  # noqa: PLC0415

        self._proc = subprocess.Popen(  # noqa: S603 - this interpreter, our own module
            [sys.executable, "-c", "from learning.training._public import serve_portable; serve_portable()"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=reproducible.environment(), close_fds=True,
        )
        self._lock = threading.Lock()
        self.pid = os.getpid()

    def _ask(self, *parts: bytes) -> bytes:
        with self._lock:
            assert self._proc.stdin is not None and self._proc.stdout is not None
            try:
                write_frame(self._proc.stdin, *parts)  # type: ignore[arg-type]
                reply = read_frame(self._proc.stdout)  # type: ignore[arg-type]
            except (BrokenPipeError, OSError):
                reply = None
            if reply is None:
                raise LearningError(
                    f"the portable public-split evaluator (pid {self._proc.pid}) stopped (exit {self._proc.poll()})"
                )
            return reply

    def register(self, spec: Any, x: np.ndarray, labels: np.ndarray, *, num_classes: int, entropy_impl: str,
                 batch_size: int) -> int:
        """Send a scorer's model architecture and public split once; its index for :meth:`evaluate`."""
        x, labels = np.ascontiguousarray(x), np.ascontiguousarray(labels)
        header = json.dumps({
            "module": type(spec).__module__, "model": spec.name, "params": dataclasses.asdict(spec),
            "entropy_impl": entropy_impl, "batch_size": batch_size, "num_classes": num_classes,
            "x": [list(x.shape), x.dtype.str], "labels": [list(labels.shape), labels.dtype.str],
        }).encode()
        reply = self._ask(REGISTER, LENGTH.pack(len(header)), header, x.tobytes(), labels.tobytes())
        return int.from_bytes(reply, "big")

    def evaluate(self, index: int, model: np.ndarray) -> tuple[float, float]:
        """``(E_avg, F_pub)`` of the float32 vector ``model`` for scorer ``index``."""
        reply = self._ask(EVALUATE, index.to_bytes(4, "big"), np.ascontiguousarray(model, dtype="<f4").tobytes())
        if len(reply) != SCORES.size:
            raise LearningError(f"the portable public-split evaluator answered {reply[:80]!r}")
        e_avg, f_pub = SCORES.unpack(reply)
        return e_avg, f_pub


_EVALUATOR: PortableEvaluator | None = None
_EVALUATOR_LOCK = threading.Lock()


def portable_evaluator() -> PortableEvaluator:
    """This process's helper, started on first use (a forked child starts its own: the pipes are its parent's)."""
    global _EVALUATOR
    with _EVALUATOR_LOCK:
        if _EVALUATOR is None or _EVALUATOR.pid != os.getpid() or _EVALUATOR._proc.poll() is not None:
            _EVALUATOR = PortableEvaluator()
        return _EVALUATOR
