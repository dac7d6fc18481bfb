"""Every third-party package the code imports is declared in pyproject.toml, and the main job needs only the core.

1. **Declared imports.** Every ``import`` and ``from ... import`` in a ``.py`` file of ``concilium``, ``ledger``,
   ``consensus``, ``learning``, ``node`` and ``sim`` (module level, inside functions, under ``TYPE_CHECKING``, in
   ``try``/``except ImportError``), and every ``importlib.import_module`` / ``importlib.util.find_spec`` /
   ``__import__`` of a literal name, whose top-level module is neither the standard library nor one of those
   packages, maps to a distribution (``importlib.metadata.packages_distributions()``; a module installed nowhere
   is taken to be its own distribution name) that ``[project] dependencies`` or an extra of
   ``[project.optional-dependencies]`` names. Allowed undeclared: ``torch`` only, which the Makefile installs
   (pinned CPU build, ``TORCH_SPEC``; see the comment above ``dependencies``). A package that only comes with
   another (``multiaddr`` with py-libp2p, ``threadpoolctl`` with scikit-learn) does not count: it is declared too.
2. **The main job runs on the core.** ``concilium sim run quickstart`` runs in a child interpreter that refuses to
   import any module outside the standard library, concilium's packages and the distributions the core
   dependencies and torch require (transitively): what ``make run`` installs.
The checker of 1 also runs on synthetic sources, to prove it fails on an undeclared import.
"""

from __future__ import annotations

import ast
import importlib.metadata
import json
import re
import subprocess
import sys
import tomllib
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path


ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("concilium", "ledger", "consensus", "learning", "node", "sim")
# Installed by the Makefile, not by pip's resolver (an unpinned torch is a multi-GB CUDA build): see pyproject.toml.
ALLOWED_UNDECLARED = frozenset({"torch"})
_DYNAMIC = frozenset({"import_module", "find_spec", "__import__"})


def _normalize(name: str) -> str:
    """A distribution name as PEP 503 compares them (``PyNaCl`` = ``pynacl``, ``tomli_w`` = ``tomli-w``)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def _requirement_name(requirement: str) -> str:
    match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement)
    assert match, f"not a requirement: {requirement!r}"
    return _normalize(match.group(1))


def declared(pyproject: Mapping[str, object]) -> dict[str, str]:
    """Normalized distribution name → where pyproject declares it (``core`` or ``extra <name>``)."""
    project = pyproject["project"]
    out = {_requirement_name(r): "core" for r in project.get("dependencies", [])}
    for extra, requirements in project.get("optional-dependencies", {}).items():
        for r in requirements:
            out.setdefault(_requirement_name(r), f"extra {extra}")
    return out


def imported_modules(source: str, filename: str = "<source>") -> Iterator[tuple[int, str]]:
    """``(line, top-level module)`` of every absolute import in ``source``, wherever it is (functions included),
    and of every ``import_module`` / ``find_spec`` / ``__import__`` call on a literal name."""
    for node in ast.walk(ast.parse(source, filename=filename)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name.partition(".")[0]
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0 and node.module:
                yield node.lineno, node.module.partition(".")[0]
        elif isinstance(node, ast.Call) and node.args:
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
            first = node.args[0]
            if name in _DYNAMIC and isinstance(first, ast.Constant) and isinstance(first.value, str):
                if not first.value.startswith("."):
                    yield node.lineno, first.value.partition(".")[0]


def undeclared_imports(
    sources: Iterable[tuple[str, str]],
    declared_dists: Mapping[str, str],
    module_dists: Mapping[str, list[str]],
    *,
    first_party: Iterable[str] = PACKAGES,
    allowed: Iterable[str] = ALLOWED_UNDECLARED,
) -> list[str]:
    """``"file:line imports M (distribution D), declared nowhere in pyproject.toml"`` for each import of a
    third-party module whose distribution is not declared. ``sources``: ``(filename, text)`` pairs;
    ``module_dists``: top-level module → distributions (``packages_distributions()``)."""
    skip = set(sys.stdlib_module_names) | set(first_party) | set(allowed)
    bad = []
    for filename, text in sources:
        for line, module in imported_modules(text, filename):
            if module in skip:
                continue
            dists = [_normalize(d) for d in module_dists.get(module, [module])]
            if not any(d in declared_dists for d in dists):
                bad.append(f"{filename}:{line} imports {module} (distribution {', '.join(dists)}), declared nowhere "
                           "in pyproject.toml (add it to dependencies or an extra)")
    return bad


def _sources() -> Iterator[tuple[str, str]]:
    for package in PACKAGES:
        for f in sorted((ROOT / package).rglob("*.py")):
            if not any(part.startswith(".") for part in f.relative_to(ROOT).parts):
                yield str(f.relative_to(ROOT)), f.read_text()


def _pyproject() -> dict[str, object]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_every_imported_package_is_declared() -> None:
    sources = list(_sources())
    assert len(sources) > 50 and any(name == "sim/_jobs.py" for name, _ in sources)
    bad = undeclared_imports(sources, declared(_pyproject()), importlib.metadata.packages_distributions())
    assert not bad, "\n".join(bad)


def test_the_checker_fails_on_an_undeclared_import() -> None:
    """Synthetic files: undeclared packages, at module level, lazily, behind a literal ``import_module`` and one
    installed nowhere, are each named; stdlib, first-party, declared (core or an extra, installed or not) and
    torch are not."""
    declared_dists = declared({"project": {
        "dependencies": ["numpy>=1.26", "PyNaCl>=1.5", "tomli-w>=1.0"],
        "optional-dependencies": {"hf": ["datasets>=2.19"], "dev": ["pyyaml>=6"]},
    }})
    assert declared_dists == {"numpy": "core", "pynacl": "core", "tomli-w": "core", "datasets": "extra hf",
                              "pyyaml": "extra dev"}
    module_dists = {"numpy": ["numpy"], "nacl": ["PyNaCl"], "tomli_w": ["tomli_w"], "yaml": ["PyYAML"],
                    "sklearn": ["scikit-learn"], "threadpoolctl": ["threadpoolctl"]}
    good = (
        "from __future__ import annotations\nimport os, json\nimport numpy as np\nfrom nacl.signing import SigningKey\n"
        "import tomli_w\nimport torch.nn\nfrom ledger import Block\nimport learning.data\n"
        "def f():\n    import yaml\n    import datasets\n    return importlib.util.find_spec('json')\n"
    )
    assert undeclared_imports([("good.py", good)], declared_dists, module_dists) == []
    bad = (
        "import numpy\nimport sklearn.datasets\n"
        "def f():\n    try:\n        from threadpoolctl import threadpool_limits\n    except ImportError:\n        pass\n"
        "def g():\n    return importlib.import_module('not_installed_anywhere_pkg.sub')\n"
    )
    found = undeclared_imports([("bad.py", bad)], declared_dists, module_dists)
    assert [s.split(" (")[0] for s in found] == [
        "bad.py:2 imports sklearn",
        "bad.py:5 imports threadpoolctl",
        "bad.py:9 imports not_installed_anywhere_pkg",
    ]
    assert "distribution scikit-learn" in found[0]
    # torch is allowed only because it is on the allow-list
    assert undeclared_imports([("t.py", "import torch\n")], declared_dists, module_dists, allowed=()) != []


def test_torch_is_installed_by_the_makefile_not_declared() -> None:
    """The one allowed undeclared import is the one the Makefile installs (pinned CPU build) for both set-ups."""
    assert "torch" not in declared(_pyproject())
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^TORCH_SPEC \?= torch==\S+$", makefile, re.MULTILINE)
    assert '"$(TORCH_SPEC)"' in makefile


# -- the main job on the core alone ------------------------------------------------------------------------------


def _requires_closure(roots: Iterable[str]) -> set[str]:
    """Normalized names of the installed distributions ``roots`` need, transitively (no extras; markers of this
    interpreter), ``roots`` included."""
    from packaging.requirements import Requirement  # noqa: PLC0415 (matplotlib's dependency)

    seen: set[str] = set()
    todo = [_normalize(r) for r in roots]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        try:
            requires = importlib.metadata.distribution(name).requires or []
        except importlib.metadata.PackageNotFoundError:
            continue
        for text in requires:
            r = Requirement(text)
            if r.marker is None or r.marker.evaluate({"extra": ""}):
                todo.append(_normalize(r.name))
    return seen


_BLOCKING_RUN = r"""
import importlib.abc, json, sys
refuse = set(json.loads(sys.argv[1]))
refused = []
class Refuse(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in refuse:
            refused.append(name)
            raise ModuleNotFoundError(f"not in the core: {name}", name=name)
        return None
sys.meta_path.insert(0, Refuse())
from concilium.cli import main
code = main(sys.argv[2:])
print(json.dumps({"code": code, "refused": sorted(set(refused))}))
"""


def test_the_main_job_runs_on_the_core_dependencies_alone(tmp_path: Path) -> None:
    """What ``make run`` installs (the core dependencies and torch, with what they require) is all the quickstart
    imports: a child interpreter that refuses every module of every other installed distribution (the extras,
    what they pull in, anything else in this environment) runs it (two rounds) to a verified ledger."""
    core = [_requirement_name(r) for r in _pyproject()["project"]["dependencies"]]
    dists = _requires_closure([*core, *ALLOWED_UNDECLARED])
    assert {"numpy", "torch", "matplotlib", "threadpoolctl"} <= dists
    assert not {"scikit-learn", "scipy", "libp2p", "trio", "ray", "starlette", "datasets"} & dists
    refuse = sorted(
        m for m, owners in importlib.metadata.packages_distributions().items()
        if m not in PACKAGES and not any(_normalize(d) in dists for d in owners)
    )
    assert "pytest" in refuse and "numpy" not in refuse and "torch" not in refuse
    out = tmp_path / "quickstart"
    r = subprocess.run(
        [sys.executable, "-c", _BLOCKING_RUN, json.dumps(refuse), "sim", "run", "quickstart", "--rounds", "2",
         "--out", str(out), "--quiet"],
        capture_output=True, text=True, cwd=ROOT, timeout=300,
    )
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-4000:]
    result = json.loads(r.stdout.strip().splitlines()[-1])
    assert result["code"] == 0, r.stdout[-2000:] + r.stderr[-4000:]
    # Refused imports the run survived are optional probes behind `except ImportError`: third-party ones are
    # fine (torch probes for dill), but none of concilium's own imports (node.config's multiaddr, the extras) may
    # be tried on the main job's path, where it would quietly lose a feature in a `make run` environment.
    ours = {m for name, text in _sources() for _, m in imported_modules(text, name)}
    assert not {r.partition(".")[0] for r in result["refused"]} & ours, result["refused"]
    assert json.loads((out / "summary.json").read_text())["ledger_status"] == "ok"


def test_make_run_installs_the_core_and_make_test_every_extra() -> None:
    """``make run``'s set-up is ``pip install -e .`` (no extra, no system package); ``make test``'s installs every
    extra of pyproject.toml into the same environment, after the system packages."""
    makefile = (ROOT / "Makefile").read_text()
    core_recipe = makefile.split("\n$(CORE_STAMP): ", 1)[1].split("\n\n", 1)[0]
    full_recipe = makefile.split("\n$(FULL_STAMP): ", 1)[1].split("\n\n", 1)[0]
    assert re.search(r"pip install -q -e \.$", core_recipe, re.MULTILINE)
    assert "ensure-system-deps" not in core_recipe and "[" not in core_recipe
    assert full_recipe.startswith("$(CORE_STAMP)\n") and "ensure-system-deps" in full_recipe
    assert 'pip install -q -e ".[$(FULL_EXTRAS)]"' in full_recipe
    full = re.search(r"^FULL_EXTRAS := (\S+)$", makefile, re.MULTILINE)
    assert full and sorted(full.group(1).split(",")) == sorted(_pyproject()["project"]["optional-dependencies"])
    assert re.search(r"^run: \$\(CORE_STAMP\)$", makefile, re.MULTILINE)
    assert re.search(r"^test: \$\(FULL_STAMP\)$", makefile, re.MULTILINE)
