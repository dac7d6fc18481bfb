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
