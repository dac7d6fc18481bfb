"""No function longer than :data:`LINES_MAX` lines in the checked files: a longer one is split by concern, into
pieces that can each be read on one screen.

A function's length counts from its ``def`` line to the end of its body, docstring included (decorators not). Checked
with ``ast`` on the source (nothing is imported); :data:`CHECKED` lists the files and folders the rule holds in so far,
and a file or folder joins it once it obeys. The checker also runs on a deliberately bad tree, to prove it can fail.
"""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LINES_MAX = 80
CHECKED = [
    "consensus",
    "node/core.py",
    "node/_rounds.py",
    "node/explorer/_app.py",
    "sim/_engine.py",
]
"""Paths relative to the repository root: a file, or a folder (every ``*.py`` under it)."""


def long_functions(root: Path, paths: list[str], lines_max: int = LINES_MAX) -> list[str]:
    """``path:line name (n lines)`` of every function or method in ``paths`` longer than ``lines_max`` lines."""
    files: list[Path] = []
    for p in paths:
        target = root / p
        assert target.exists(), f"{p} does not exist"
        files += sorted(target.rglob("*.py")) if target.is_dir() else [target]
    too_long = []
    for f in files:
        for node in ast.walk(ast.parse(f.read_text(), filename=str(f))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1  # type: ignore[operator]
                if n > lines_max:
                    too_long.append(f"{f.relative_to(root).as_posix()}:{node.lineno} {node.name} ({n} lines)")
    return too_long


def test_no_function_is_longer_than_the_bound():
    assert long_functions(ROOT, CHECKED) == []


def _statements(n: int, indent: str) -> str:
    return "".join(f"{indent}x{i} = {i}\n" for i in range(n))


def test_the_checker_finds_a_long_function_and_method(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "ok.py").write_text("def fits():\n" + _statements(79, "    "))  # 80 lines: the bound
    (tmp_path / "pkg" / "bad.py").write_text(
        "class C:\n    @property\n    def long(self):\n        \"\"\"Its docstring counts.\"\"\"\n"
        + _statements(79, "        ")
        + "\n\nasync def longer():\n" + _statements(81, "    ")
    )
    (tmp_path / "one.py").write_text("def f():\n" + _statements(80, "    "))
    found = sorted(long_functions(tmp_path, ["pkg", "one.py"]))
    assert found == ["one.py:1 f (81 lines)", "pkg/bad.py:3 long (81 lines)", "pkg/bad.py:86 longer (82 lines)"]
