"""Architecture rules of docs/design.md, enforced.

1. An AST walk: ``ledger/`` (outside ``ledger/store``), ``consensus/`` and ``node/core*`` never import
   clocks, randomness, sockets, threads, event loops, the network stack or tensor libraries.
2. import-linter: the layering ``concilium > sim > node > consensus | learning > ledger`` and the
   forbidden-import contracts in ``pyproject.toml``, including indirect imports.
Each checker is also run on a deliberately bad tree, to prove it can fail.
"""

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BANNED = {"trio", "libp2p", "torch", "numpy", "time", "random", "socket", "threading", "asyncio", "multiprocessing"}
# node/core composes learning, so tensors are allowed there; clocks, randomness and I/O are not (a sans-I/O core)
BANNED_NODE_CORE = BANNED - {"torch", "numpy"}


def banned_imports(files) -> list[str]:
    bad = []
    for f in files:
        banned = BANNED_NODE_CORE if f.parent.name == "node" or "core" in f.parent.parts else BANNED
        tree = ast.parse(f.read_text(), filename=str(f))
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            for n in names:
                if n.split(".")[0] in banned:
                    bad.append(f"{f.relative_to(f.parents[1])}:{node.lineno} imports {n}")
    return bad


def pure_files(root: Path) -> list[Path]:
    files = [p for p in (root / "ledger").rglob("*.py") if "store" not in p.relative_to(root / "ledger").parts]
    files += list((root / "consensus").rglob("*.py"))
    files += list((root / "node").glob("core*.py")) + list((root / "node").glob("core/**/*.py"))
    return files


def test_pure_packages_import_nothing_banned():
    files = pure_files(ROOT)
    assert any(f.name == "_chain.py" for f in files) and any(f.parent.name == "consensus" for f in files)
    assert banned_imports(files) == []


def test_purity_checker_catches_a_violation(tmp_path):
    (tmp_path / "ledger").mkdir()
    (tmp_path / "consensus").mkdir()
    (tmp_path / "node").mkdir()
    (tmp_path / "ledger" / "ok.py").write_text("import hashlib\n")
    (tmp_path / "ledger" / "store").mkdir()
    (tmp_path / "ledger" / "store" / "io.py").write_text("import os, time\n")  # allowed: the store
    (tmp_path / "consensus" / "bad.py").write_text("def f():\n    import random.shuffle\n    from time import monotonic\n")
    (tmp_path / "node" / "core.py").write_text("import numpy\nimport trio\n")
    found = banned_imports(pure_files(tmp_path))
    assert sorted(found) == ["consensus/bad.py:2 imports random.shuffle", "consensus/bad.py:3 imports time", "node/core.py:2 imports trio"]


def test_import_linter_contracts_hold():
    exe = Path(sys.executable).with_name("lint-imports")
    r = subprocess.run([str(exe), "--no-cache"], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Contracts: 4 kept, 0 broken" in r.stdout, r.stdout


def test_import_linter_catches_a_layer_violation(tmp_path):
    # A throw-away copy of the contracts over two tiny packages where the lower imports the upper.
    (tmp_path / "upper").mkdir()
    (tmp_path / "lower").mkdir()
    (tmp_path / "upper" / "__init__.py").write_text("")
    (tmp_path / "lower" / "__init__.py").write_text("import upper\n")
    (tmp_path / ".importlinter").write_text(
        "[importlinter]\nroot_packages =\n    upper\n    lower\n\n"
        "[importlinter:contract:1]\nname = layers\ntype = layers\nlayers =\n    upper\n    lower\n"
    )
    exe = Path(sys.executable).with_name("lint-imports")
    r = subprocess.run([str(exe), "--no-cache"], cwd=tmp_path, capture_output=True, text=True, env={"PYTHONPATH": str(tmp_path)})
    assert r.returncode != 0 and "BROKEN" in r.stdout.upper(), r.stdout + r.stderr
