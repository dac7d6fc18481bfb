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


def _drop_write_privileges() -> None:  # pragma: no cover - runs in the child before exec
    """As root, chmod alone does not stop writes: give up the capabilities that bypass file permissions
    (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH, CAP_FOWNER) for this process and what it executes, staying uid 0, so
    that the interpreter and everything it imports later stay readable wherever the checkout is (a clone under a
    private home, /root at 0700, is out of reach of any other user); where that is refused, become nobody."""
    import ctypes  # noqa: PLC0415
    import os  # noqa: PLC0415

    libc = ctypes.CDLL(None, use_errno=True)
    pr_capbset_drop = 24
    if all(libc.prctl(pr_capbset_drop, cap, 0, 0, 0) == 0 for cap in (1, 2, 3)):
        return
    os.setgroups([])
    os.setgid(65534)
    os.setuid(65534)


@pytest.fixture
def write_privileges_dropped():
    """A ``preexec_fn`` for ``subprocess``: the child runs without the privileges that let root write where the
    permission bits say no (None when the tests do not run as root: the bits already apply)."""
    import os  # noqa: PLC0415

    return _drop_write_privileges if os.geteuid() == 0 else None


README_PLUGIN_FILES = ("my_plugins.py", "my_scenario.toml", "run_mine.py")


@pytest.fixture
def readme_plugins():
    """A function writing the README's "Add your own strategy, aggregator or attack" files (taken from README.md by
    their first line: ``# my_plugins.py``, ...) into a folder, as printed there; returns their names and texts."""
    import re  # noqa: PLC0415

    def write(folder: Path) -> dict[str, str]:
        readme = (_HERE.parent / "README.md").read_text(encoding="utf-8")
        section = readme.split("## Add your own strategy, aggregator or attack", 1)[1].split("\n## ", 1)[0]
        blocks = re.findall(r"```(?:python|toml)\n(.*?)```", section, flags=re.S)
        files = {b.split("\n", 1)[0].removeprefix("# "): b for b in blocks}
        assert sorted(files) == sorted(README_PLUGIN_FILES), sorted(files)
        folder.mkdir(parents=True, exist_ok=True)
        for name, text in files.items():
            (folder / name).write_text(text, encoding="utf-8")
        return files

    return write
