"""Test-run wide settings.

``make test`` runs the suite on two pytest-xdist workers (``--dist loadgroup``). The tests of a directory whose
session fixture builds something costly (the fast reproductions, the explorer's simulated ledger) share one
worker, so that fixture is built once per run, not once per worker.
"""

from __future__ import annotations

from pathlib import Path

import pytest

_HERE = Path(__file__).resolve().parent
_ONE_WORKER = ("repro", "explorer")  # directories whose session fixtures are costly


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        try:
            part = Path(str(item.path)).resolve().relative_to(_HERE).parts[0]
        except (ValueError, IndexError):
            continue
        if part in _ONE_WORKER:
            item.add_marker(pytest.mark.xdist_group(part))


@pytest.fixture
def in_reproducible_mode():
    """Run Python code in a child process started in reproducible mode (``learning.reproducible``) and return the
    JSON its last line of output prints.

    For a test whose verdict rests on a run's trajectory (which clients and committees the chain sampled, which
    messages the seeded network dropped): those follow the training bits, which differ between CPUs by default, and
    are the same on every x86-64 CPU in reproducible mode, so the verdict is too."""
    import json  # noqa: PLC0415
    import subprocess  # noqa: PLC0415
    import sys  # noqa: PLC0415

    from learning import reproducible  # noqa: PLC0415

    def run(code: str, *, timeout: float = 300) -> object:
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=_HERE.parent,
                           env=reproducible.environment(), timeout=timeout)
        assert r.returncode == 0, r.stderr[-4000:]
        return json.loads(r.stdout.strip().splitlines()[-1])

    return run
