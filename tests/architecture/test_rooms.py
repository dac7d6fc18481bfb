"""Test rooms: the tests of a package import no package above it, so they run without what they do not test.

1. ``tests/ledger/*.py`` import neither ``sim`` nor ``node`` nor ``torch``: a ledger test gets its signed demo chains
   from ``ledger.testing``, not from the simulator (whose ``__init__`` loads torch). A test that runs a simulation and
   audits its ledger belongs with the simulator's tests (``tests/sim/test_audit_*.py``).
2. ``ledger/testing.py`` imports ``ledger`` and the standard library only (also an import-linter contract in
   ``pyproject.toml``, which follows indirect imports; this check names the line).
Checked with ``ast`` on the source files (nothing is imported to check them); the checker also runs on a
deliberately bad tree, to prove it can fail.
"""

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LEDGER_TESTS_FORBIDDEN = {"sim", "node", "torch"}


def _imported(f: Path) -> Iterator[tuple[int, str]]:
    """``(line, top-level module)`` of every absolute import in ``f``, at any depth (functions, ``TYPE_CHECKING``)."""
    for node in ast.walk(ast.parse(f.read_text(), filename=str(f))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.lineno, node.module.split(".")[0]


def ledger_test_violations(root: Path) -> list[str]:
    return [
        f"{f.relative_to(root).as_posix()}:{line} imports {mod}"
        for f in sorted((root / "tests" / "ledger").glob("*.py"))
        for line, mod in _imported(f)
        if mod in LEDGER_TESTS_FORBIDDEN
    ]


def ledger_testing_violations(root: Path) -> list[str]:
    f = root / "ledger" / "testing.py"
    allowed = set(sys.stdlib_module_names) | {"ledger", "__future__"}
    return [f"{f.relative_to(root).as_posix()}:{line} imports {mod}" for line, mod in _imported(f) if mod not in allowed]


def test_ledger_tests_import_no_simulator_node_or_torch():
    assert any((ROOT / "tests" / "ledger").glob("test_*.py"))
    assert ledger_test_violations(ROOT) == []


def test_ledger_testing_imports_only_ledger_and_the_standard_library():
    assert (ROOT / "ledger" / "testing.py").is_file()
    assert ledger_testing_violations(ROOT) == []


def test_room_checkers_catch_violations(tmp_path):
    (tmp_path / "tests" / "ledger").mkdir(parents=True)
    (tmp_path / "ledger").mkdir()
    (tmp_path / "tests" / "ledger" / "test_ok.py").write_text("import hashlib\nfrom ledger.testing import LedgerDemo\n")
    (tmp_path / "tests" / "ledger" / "test_bad.py").write_text(
        "import pytest\nfrom sim import LedgerDemo\n\ndef test_x():\n    import torch.nn\n    from node.reexec import r\n"
    )
    (tmp_path / "ledger" / "testing.py").write_text("from __future__ import annotations\nimport struct\nimport numpy\nfrom ledger import Block\n")
    assert ledger_test_violations(tmp_path) == [
        "tests/ledger/test_bad.py:2 imports sim",
        "tests/ledger/test_bad.py:5 imports torch",
        "tests/ledger/test_bad.py:6 imports node",
    ]
    assert ledger_testing_violations(tmp_path) == ["ledger/testing.py:3 imports numpy"]
