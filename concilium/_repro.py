"""Reproducible mode for the commands: run the command again in the mode's environment when it asks for it.

PyTorch, MKL, numpy and libm choose their kernels when a process starts (``learning.reproducible``), so a command
that asks for the mode (``sim run --reproducible``, or a scenario with ``training.reproducible = true``) in a
process that was not started in it runs once more in that environment: the console script replaces itself
(``os.execve``: the same process id, signals and exit code as before), and ``concilium.cli.main(argv)`` called
from Python runs it as a child process and returns its exit code (its output goes to this process's stdout and
stderr file descriptors).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

__all__ = ["rerun_reproducible"]


def rerun_reproducible(args: argparse.Namespace, wanted: bool) -> int | None:
    """If ``wanted`` and this process is not in reproducible mode: the command's exit code once it ran in the mode
    (or never, for the console script, which is replaced). None: go on here (not wanted, or in the mode already,
    or started in it and still not in it: then ``learning.reproducible.configure`` says why when the world is
    built)."""
    from learning import reproducible  # noqa: PLC0415

    if not wanted or os.environ.get(reproducible.MARKER) == "1" or not reproducible.problems():
        return None
    argv = [sys.executable, "-m", "concilium", *args.argv_]
    if args.console_:
        reproducible.reexec(argv)  # replaces this process
    sys.stdout.flush()
    sys.stderr.flush()
    return subprocess.run(argv, env=reproducible.environment(), check=False).returncode  # noqa: S603 - our interpreter
