"""Import rules of docs/design.md, enforced on the source files with ``ast`` (no package is imported to check them).

1. **Public APIs between packages.** A file of one top-level package (``concilium``, ``sim``, ``node``,
   ``consensus``, ``learning``, ``ledger``) or of ``benchmarks/`` / ``scripts/`` imports another package only
   through its public names: no module path with a ``_private`` part (``learning._x``, ``learning.robust._x``,
   ``node.runtime._x``), no ``_private`` name, no ``pkg._x`` attribute. Tests may. Inside ``learning`` the same
   holds between its subpackages: ``learning/robust/`` may use ``learning.models`` (its ``__init__``) and the
   shared ``learning._errors`` / ``learning._config``, never ``learning.models._zoo``.
2. **No import cycles between files.** The graph has one node per file and an edge for every import statement
   anywhere in it (module level, inside functions, under ``TYPE_CHECKING``): a cycle fails, whatever makes it
   harmless at run time today.
3. **Registries fill on ``import learning``.** Every ``@register_*("name")`` in ``learning/`` is in its registry
   once a fresh interpreter has run ``import learning`` and nothing else.
Each checker also runs on a deliberately bad tree, to prove it can fail.
"""

import ast
import functools
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("concilium", "sim", "node", "consensus", "learning", "ledger")
SCRIPT_DIRS = ("benchmarks", "scripts")
LEARNING_SHARED = {"learning._errors", "learning._config"}


def _files(root: Path, dirs: tuple[str, ...]) -> Iterator[Path]:
    for d in dirs:
        if (root / d).is_dir():  # not in hidden folders (a benchmark's own virtual environment)
            yield from sorted(p for p in (root / d).rglob("*.py") if not any(s.startswith(".") for s in p.parts))


@functools.cache
def _parse(f: Path) -> ast.Module:
    return ast.parse(f.read_text(), filename=str(f))


def _module_name(root: Path, f: Path) -> str:
    parts = list(f.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(tree: ast.Module, package: str) -> Iterator[tuple[int, str, list[str]]]:
    """``(line, module, names)`` of every import statement in the tree; relative imports resolved."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name, []
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join([*base, module] if module else base)
            yield node.lineno, module, [a.name for a in node.names]


def _private(parts: list[str]) -> bool:
    return any(p.startswith("_") and not p.startswith("__") for p in parts)


def public_api_violations(root: Path) -> list[str]:
    bad = []
    for f in _files(root, PACKAGES + SCRIPT_DIRS):
        rel = f.relative_to(root)
        own = rel.parts[0]
        me = _module_name(root, f)
        package = me if f.name == "__init__.py" else me.rpartition(".")[0]
        sub = rel.parts[1] if own == "learning" and len(rel.parts) > 2 else None  # learning/<sub>/...
        tree = _parse(f)
        for line, module, names in _imports(tree, package):
            parts = module.split(".")
            if parts[0] not in PACKAGES:
                continue
            if parts[0] != own:
                if _private(parts[1:]) or any(n.startswith("_") and n != "*" for n in names):
                    bad.append(f"{rel}:{line} imports {module} {', '.join(names)}".rstrip())
            elif own == "learning" and len(parts) > 2 and parts[1] != sub and _private(parts[2:]):
                bad.append(f"{rel}:{line} reaches into {module} (use learning.{parts[1]})")
            elif own == "learning" and sub and len(parts) == 2 and _private(parts[1:]):
                if module not in LEARNING_SHARED:
                    bad.append(f"{rel}:{line} imports {module}")
        aliases = [a for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
        imported = {a.asname or a.name.split(".")[0] for a in aliases}  # the names `import` binds
        for node in ast.walk(tree):  # import learning; learning._x.y
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id in imported & set(PACKAGES) - {own}
                and node.attr.startswith("_")
            ):
                bad.append(f"{rel}:{node.lineno} uses {node.value.id}.{node.attr}")
    return bad


def import_graph(root: Path) -> dict[str, set[str]]:
    """File-level graph: module → the modules (files) its import statements name."""
    files = {_module_name(root, f): f for f in _files(root, PACKAGES)}

    def resolve(name: str) -> str | None:
        while name and name not in files:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for me, f in files.items():
        package = me if f.name == "__init__.py" else me.rpartition(".")[0]
        edges = set()
        for _, module, names in _imports(_parse(f), package):
            submodules = [f"{module}.{n}" for n in names if f"{module}.{n}" in files]
            targets = submodules + ([module] if len(submodules) < len(names) or not names else [])
            edges.update(t for t in map(resolve, targets) if t)
        edges.discard(me)
        graph[me] = edges
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one file (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            v, children = work[-1]
            w = next(children, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                component = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    component.append(w)
                    if w == v:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_packages_import_each_other_through_public_names_only():
    files = list(_files(ROOT, PACKAGES + SCRIPT_DIRS))
    assert any(f.parts[-2:] == ("sim", "_engine.py") for f in files)
    assert public_api_violations(ROOT) == []


def test_public_api_checker_catches_reach_ins(tmp_path):
    for d in ("sim", "learning/robust", "learning/models", "benchmarks"):
        (tmp_path / d).mkdir(parents=True)
    (tmp_path / "sim" / "_engine.py").write_text(
        "from learning._blobs import vector_to_blob\nfrom learning import models\n"
        "def f():\n    from node import _errors\n    import learning\n    return learning._validate.WORKERS\n"
    )
    (tmp_path / "learning" / "robust" / "_a.py").write_text(
        "from learning._config import check_int\nfrom learning.robust._b import x\nfrom learning.models import y\n"
        "from learning.models._zoo import z\nfrom learning._other import w\n"
    )
    (tmp_path / "benchmarks" / "b.py").write_text("from sim._run import run_scenario\nfrom sim import run_scenario\n")
    assert sorted(public_api_violations(tmp_path)) == [
        "benchmarks/b.py:1 imports sim._run run_scenario",
        "learning/robust/_a.py:4 reaches into learning.models._zoo (use learning.models)",
        "learning/robust/_a.py:5 imports learning._other",
        "sim/_engine.py:1 imports learning._blobs vector_to_blob",
        "sim/_engine.py:4 imports node _errors",
        "sim/_engine.py:6 uses learning._validate",
    ]


def test_no_import_cycles_between_files():
    graph = import_graph(ROOT)
    assert {"learning.data._datasets", "sim._engine", "sim._workers"} <= set(graph)
    assert "sim._workers" in graph["sim._engine"]
    assert cycles(graph) == []


def test_cycle_checker_counts_lazy_and_type_checking_imports(tmp_path):
    (tmp_path / "sim").mkdir()
    (tmp_path / "sim" / "__init__.py").write_text("from sim._a import A\n")
    (tmp_path / "sim" / "_a.py").write_text("from sim import _b\nA = 1\n")
    (tmp_path / "sim" / "_b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from sim._a import A\n"
    )
    (tmp_path / "sim" / "_c.py").write_text("def f():\n    from . import _d\n")
    (tmp_path / "sim" / "_d.py").write_text("import sim._c\n")
    (tmp_path / "sim" / "_e.py").write_text("import sim\n")  # an edge into a cycle-free package file
    assert cycles(import_graph(tmp_path)) == [["sim._a", "sim._b"], ["sim._c", "sim._d"]]


def _registered_names(root: Path) -> dict[str, set[str]]:
    """``{decorator: names}`` of every ``@register_<kind>("name")`` in ``learning/``."""
    out: dict[str, set[str]] = {}
    for f in _files(root, ("learning",)):
        for node in ast.walk(_parse(f)):
            if isinstance(node, ast.ClassDef):
                for deco in node.decorator_list:
                    if (
                        isinstance(deco, ast.Call)
                        and isinstance(deco.func, ast.Name)
                        and deco.func.id.startswith("register_")
                        and deco.args
                        and isinstance(deco.args[0], ast.Constant)
                    ):
                        out.setdefault(deco.func.id, set()).add(deco.args[0].value)
    return out


def test_importing_learning_fills_every_registry():
    declared = _registered_names(ROOT)
    registries = {
        "register_model": "models.MODELS", "register_dataset": "data.DATASETS", "register_partition": "data.PARTITIONS",
        "register_schedule": "training.SCHEDULES", "register_aggregator": "robust.AGGREGATORS",
        "register_preaggregator": "robust.PRE_AGGREGATORS", "register_update_attack": "attacks.UPDATE_ATTACKS",
        "register_data_attack": "attacks.DATA_ATTACKS", "register_availability": "availability.AVAILABILITY",
        "register_strategy": "strategies.STRATEGIES",
    }
    assert set(declared) == set(registries), sorted(declared)
    code = "import json, learning\nprint(json.dumps({%s}))" % ", ".join(
        f"{k!r}: sorted(learning.{v})" for k, v in registries.items()
    )
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    filled = {k: set(v) for k, v in json.loads(r.stdout).items()}
    assert filled == declared
    assert "mnist" in filled["register_dataset"] and "fedro_takeover" in filled["register_strategy"]
