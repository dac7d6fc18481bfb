"""No module-level mutable state in ``ledger/`` and ``consensus/``: caches are one object a driver injects.

A simulation runs thousands of nodes in one process and an audit re-executes a chain beside them; state kept in a
module would be shared by all of them, outlive them, and make a result depend on what ran before in the process.
So a memo lives on the object whose pure function it remembers (a record's encoding, a genesis' hash) or in the
:class:`ledger.Caches` that the driver creates and passes in (``ChainContext(caches=...)``).

An AST scan of every module of the two packages rejects:

* a module-level assignment (also under a module-level ``if``/``try``, and class attributes) of a mutable value
  other than ``__all__``:
  a list, dict or set display or comprehension, or a call of ``list``, ``dict``, ``set``, ``bytearray``,
  ``OrderedDict``, ``defaultdict``, ``deque`` or ``Counter``. Constants stay: tuples, frozensets, strings,
  ``MappingProxyType(...)`` (a read-only view: build the dict inside the call);
* a ``global`` statement anywhere;
* a ``functools.lru_cache``/``functools.cache`` decorator anywhere (a process-wide memo).

The checker is also run on a deliberately bad tree, to prove it can fail.
"""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("ledger", "consensus")
MUTABLE_CALLS = {"list", "dict", "set", "bytearray", "OrderedDict", "defaultdict", "deque", "Counter"}
MEMO_DECORATORS = {"lru_cache", "cache"}
MUTABLE_DISPLAYS = (ast.List, ast.Dict, ast.Set, ast.ListComp, ast.DictComp, ast.SetComp)


def _name(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def _mutable(value: ast.expr | None) -> bool:
    if isinstance(value, MUTABLE_DISPLAYS):
        return True
    return isinstance(value, ast.Call) and _name(value.func) in MUTABLE_CALLS


def _top_level(body: list[ast.stmt]):
    """The statements run when the module (or a module-level class) is imported, through ``if``/``try``/``with``."""
    for stmt in body:
        yield stmt
        if isinstance(stmt, ast.ClassDef):
            yield from _top_level(stmt.body)
        elif isinstance(stmt, (ast.If, ast.With, ast.For, ast.While)):
            yield from _top_level(stmt.body)
            yield from _top_level(getattr(stmt, "orelse", []))
        elif isinstance(stmt, ast.Try):
            for part in (stmt.body, stmt.orelse, stmt.finalbody, *(h.body for h in stmt.handlers)):
                yield from _top_level(part)


def _dunder(stmt: ast.stmt) -> bool:
    targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]  # type: ignore[attr-defined]
    return all(isinstance(t, ast.Name) and t.id.startswith("__") and t.id.endswith("__") for t in targets)


def mutable_state(root: Path) -> list[str]:
    bad: list[tuple[str, int, str]] = []
    for f in sorted(p for pkg in PACKAGES for p in (root / pkg).rglob("*.py")):
        tree = ast.parse(f.read_text(), filename=str(f))
        where = f.relative_to(root).as_posix()
        for stmt in _top_level(tree.body):
            if isinstance(stmt, (ast.Assign, ast.AnnAssign, ast.AugAssign)) and _mutable(stmt.value) and not _dunder(stmt):
                bad.append((where, stmt.lineno, "module-level mutable value"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Global):
                bad.append((where, node.lineno, f"global {', '.join(node.names)}"))
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for d in node.decorator_list:
                    if _name(d.func if isinstance(d, ast.Call) else d) in MEMO_DECORATORS:
                        bad.append((where, d.lineno, f"process-wide memo on {node.name}"))
    return [f"{where}:{line} {what}" for where, line, what in sorted(bad)]


def test_ledger_and_consensus_keep_no_module_level_mutable_state():
    assert (ROOT / "ledger" / "_encoding.py").is_file() and (ROOT / "consensus" / "_committee.py").is_file()
    assert mutable_state(ROOT) == []


def test_state_checker_catches_a_violation(tmp_path):
    (tmp_path / "ledger").mkdir()
    (tmp_path / "consensus").mkdir()
    (tmp_path / "ledger" / "ok.py").write_text(
        "__all__ = ['f']\nfrom types import MappingProxyType\nA = (1, 2)\nB = frozenset({1})\nC = MappingProxyType({'a': 1})\n"
        "def f():\n    memo = {}\n    return memo\n"
    )
    (tmp_path / "ledger" / "bad.py").write_text(
        "import functools\nMEMO: dict[int, int] = {}\nN = 0\n"
        "def f():\n    global N\n    N += 1\n"
        "@functools.lru_cache(maxsize=8)\ndef g(x):\n    return x\n"
    )
    (tmp_path / "consensus" / "bad.py").write_text(
        "from collections import OrderedDict\nfrom functools import cache\n"
        "if True:\n    SEEN = OrderedDict()\n"
        "class K:\n    shared = []\n"
        "@cache\ndef h():\n    return 1\n"
    )
    assert mutable_state(tmp_path) == [
        "consensus/bad.py:4 module-level mutable value",
        "consensus/bad.py:6 module-level mutable value",
        "consensus/bad.py:7 process-wide memo on h",
        "ledger/bad.py:2 module-level mutable value",
        "ledger/bad.py:5 global N",
        "ledger/bad.py:7 process-wide memo on g",
    ]
