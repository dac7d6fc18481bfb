"""Reproducible mode: one process environment whose training bits are the same on any x86-64 CPU.

By default PyTorch, MKL, oneDNN, numpy and glibc's libm each pick the fastest code for the CPU they run on
(AVX-512, AVX2 + FMA, SSE2), and the vector width and fused multiply-adds change the order and the rounding of
float sums. Local training is then bit-identical only on one kind of CPU: the same scenario gives one ledger
head on an AMD EPYC with AVX-512 and another on an AVX2-only laptop. Reproducible mode fixes every such choice
to the portable one, for the whole process and for every process it starts:

==================================  =================================================================================
``ATEN_CPU_CAPABILITY=default``     PyTorch's own kernels (elementwise, reductions, softmax, the optimizer's updates)
                                    from the build without AVX/AVX2/AVX-512 paths. Read once, at the first kernel a
                                    process dispatches: so it must be in the environment when the process starts.
``MKL_CBWR=COMPATIBLE``             MKL's conditional bitwise reproducibility (the matrix products of linear and
                                    convolution layers): the SSE2 code path Intel documents as giving the same bits
                                    on every Intel and compatible (AMD) processor.
``*_NUM_THREADS=1``                 one thread in MKL, OpenMP and OpenBLAS (and ``torch.set_num_threads(1)``): a
                                    parallel reduction splits a sum where the thread count says.
``NPY_DISABLE_CPU_FEATURES``        numpy's dispatched SIMD paths off (its exp/log/sin differ by path), the build's
                                    baseline only.
``GLIBC_TUNABLES`` hwcaps           libm's FMA and AVX2 variants of exp, log, pow, sin... (chosen per CPU when the
                                    library loads) off.
==================================  =================================================================================

and, in the process, :func:`configure` turns oneDNN (``torch.backends.mkldnn``) and NNPACK off (convolutions then
run as MKL matrix products) and asks PyTorch for deterministic algorithms.

What it costs: one thread per process and no vector units in PyTorch's own kernels (``benchmarks/README.md``
measures it on W1 and the quickstart). What it gives: the same ledger head on any x86-64 CPU for the same
scenario, concilium, PyTorch, numpy and MKL versions (a different version of any of them may round differently).
On a GPU it cannot give that: see the README ("Reproducible mode").

Everything that decides a block besides training (scoring, selection, aggregation, evaluation on the public
split) is numpy float64 in a fixed order, which the audit re-executes on any machine in either mode.

The environment is set before a process starts (:func:`environment`): ``concilium sim run --reproducible``
re-executes itself in it, :func:`reexec` does the same for a script, the forked training workers inherit it and
the Ray executor starts its trainers in it. :func:`problems` says what is missing in this process;
:func:`configure` applies the in-process switches and raises :class:`ReproducibleModeError` when the process was
not started in the mode (too late to switch: PyTorch chose its kernels at its first operation).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping

from learning._errors import LearningError

__all__ = ["MARKER", "ReproducibleModeError", "configure", "environment", "problems", "reexec", "variables"]

MARKER = "CONCILIUM_REPRODUCIBLE"
"""Set to ``1`` in a reproducible environment (what :func:`variables` sets; it tells child processes too)."""

_FIXED = {
    "ATEN_CPU_CAPABILITY": "default",
    "MKL_CBWR": "COMPATIBLE",
    "MKL_NUM_THREADS": "1",
    "MKL_DYNAMIC": "FALSE",
    "OMP_NUM_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1",
    # a CUDA run: cuBLAS needs a fixed workspace for deterministic results (PyTorch refuses otherwise)
    "CUBLAS_WORKSPACE_CONFIG": ":4096:8",
}
_HWCAPS = "glibc.cpu.hwcaps=-AVX2,-FMA,-FMA4"
"""glibc >= 2.33 spelling; libm's exp/log/pow/sin/cos/tan have FMA, FMA4 and AVX2 variants picked per CPU."""


class ReproducibleModeError(LearningError):
    """Reproducible mode was asked for in a process that was not started in its environment."""


def _numpy_dispatch() -> list[str]:
    """The SIMD targets numpy's build dispatches to at run time (all of them, whether this CPU has them or not:
    naming one the CPU lacks is harmless), so that only the build's baseline runs."""
    try:
        from numpy._core._multiarray_umath import __cpu_dispatch__  # numpy >= 2  # noqa: PLC0415
    except ImportError:  # pragma: no cover - numpy 1.x
        from numpy.core._multiarray_umath import __cpu_dispatch__  # type: ignore[no-redef]  # noqa: PLC0415
    return sorted(__cpu_dispatch__)


def variables() -> dict[str, str]:
    """The environment variables of reproducible mode (to set before a process starts)."""
    return {
        **_FIXED,
        "NPY_DISABLE_CPU_FEATURES": " ".join(_numpy_dispatch()),
        "GLIBC_TUNABLES": _HWCAPS,
        MARKER: "1",
    }


def environment(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """``base`` (default: this process's environment) with reproducible mode's variables. Other glibc tunables
    of ``base`` are kept; its ``glibc.cpu.hwcaps`` is replaced."""
    env = dict(os.environ if base is None else base)
    own = variables()
    tunables = [t for t in env.get("GLIBC_TUNABLES", "").split(":") if t and not t.startswith("glibc.cpu.hwcaps=")]
    own["GLIBC_TUNABLES"] = ":".join([*tunables, own["GLIBC_TUNABLES"]])
    env.update(own)
    return env


def _hwcaps_set(value: str) -> bool:
    return _HWCAPS in value.split(":")


def problems() -> list[str]:
    """What keeps this process from computing in reproducible mode; empty when nothing does."""
    found = []
    want = variables()
    for name, value in want.items():
        got = os.environ.get(name)
        ok = got is not None and _hwcaps_set(got) if name == "GLIBC_TUNABLES" else got == value
        if not ok:
            found.append(f"{name} is {got!r}, not {value!r}")
    if "torch" in sys.modules:
        import torch  # noqa: PLC0415

        # the capability is fixed at the first kernel a process dispatches (asking fixes it too)
        capability = torch.backends.cpu.get_cpu_capability()
        if capability != "DEFAULT":
            found.append(f"PyTorch already runs its {capability} kernels (chosen at its first operation)")
    return found


def configure() -> None:
    """Apply reproducible mode's in-process switches (one PyTorch thread; oneDNN and NNPACK off, matrix products
    and convolutions in MKL; deterministic algorithms), after checking that the process was started in the mode.

    Raises :class:`ReproducibleModeError` naming what is missing: the kernels are chosen when a process starts,
    so it cannot be switched later (start it with :func:`environment`, or call :func:`reexec` first)."""
    found = problems()
    if found:
        raise ReproducibleModeError(
            "reproducible mode: this process was not started in its environment (" + "; ".join(found) + "); run "
            "`concilium sim run --reproducible`, or call learning.reproducible.reexec() before anything else"
        )
    import torch  # noqa: PLC0415

    torch.set_num_threads(1)
    torch.backends.mkldnn.enabled = False
    torch.backends.nnpack.set_flags(False)
    torch.use_deterministic_algorithms(True)
    # on a GPU (the same model, driver and libraries at most: see the README): no autotuned or TF32 kernels
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False


def reexec(argv: list[str] | None = None) -> None:
    """Start this program again in reproducible mode's environment, unless it runs in it already (then return).

    ``argv``: the command line to run (default: this interpreter's own, ``sys.orig_argv``). Call it first thing in
    a script that wants the mode; the process is replaced (``os.execve``), so nothing after the call runs twice."""
    found = problems()
    if not found:
        return
    if os.environ.get(MARKER) == "1":  # started again already and still not in the mode: never loop
        raise ReproducibleModeError("reproducible mode: started in its environment, but " + "; ".join(found))
    args = list(sys.orig_argv if argv is None else argv)
    if not args:  # pragma: no cover - an embedded interpreter
        raise ReproducibleModeError("reproducible mode: no command line to start again")
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, [sys.executable, *args[1:]], environment())
