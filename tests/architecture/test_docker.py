"""What can be checked of docker/ without a Docker engine: the compose file's structure, that every
service command is a valid `concilium` command line (the entrypoint the tests exercise), that the
image copies every package the distribution ships, what .dockerignore keeps out of the build context,
and that the compose demo comes up twice on the same volume."""

import os
import posixpath
import re
import tomllib
from pathlib import Path

import pytest
import yaml

from concilium.cli import build_parser, main

ROOT = Path(__file__).resolve().parents[2]


def test_compose_services_run_valid_concilium_commands():
    compose = yaml.safe_load((ROOT / "docker" / "compose.yaml").read_text())
    services = compose["services"]
    assert services, "compose file defines no service"
    parser = build_parser()
    for name, svc in services.items():
        assert svc.get("image") or svc.get("build"), name
        args = parser.parse_args(svc["command"])  # raises SystemExit on an invalid command line
        assert callable(args.func), name
    build = next(s["build"] for s in services.values() if "build" in s)
    assert (ROOT / "docker" / build["context"] / build["dockerfile"]).resolve() == (ROOT / "docker" / "Dockerfile")
    for svc in services.values():
        for vol in svc.get("volumes", []):
            assert vol.split(":")[0] in compose["volumes"], vol


def test_dockerfile_copies_every_package_and_uses_the_cli_entrypoint():
    text = (ROOT / "docker" / "Dockerfile").read_text()
    copied = set(re.findall(r"^COPY (\w+) \./\1$", text, flags=re.M))
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    packages = {p.rstrip("*") for p in pyproject["tool"]["setuptools"]["packages"]["find"]["include"]}
    assert packages <= copied, f"Dockerfile does not copy {sorted(packages - copied)}"
    # the wheel carries the scenarios through the sim/scenarios symlink: its target must be in the image too
    link = ROOT / "sim" / "scenarios"
    assert link.is_symlink() and Path(os.readlink(link)).name in copied
    assert 'ENTRYPOINT ["concilium-entrypoint"]' in text and "COPY docker/entrypoint.sh /usr/local/bin/concilium-entrypoint" in text
    assert pyproject["project"]["scripts"]["concilium"] == "concilium.cli:main"
    assert "libgmp-dev" in text and "TORCH_SPEC=torch==2.13.0" in text
    # the CPU build of torch from an explicit CPU index (a bare torch==2.13.0 resolves to the CUDA wheel); a build
    # argument names another index
    assert "ARG TORCH_INDEX=https://download.pytorch.org/whl/cpu" in text and '--index-url "${TORCH_INDEX}"' in text


def test_the_entrypoint_runs_concilium_as_its_user_and_hands_it_the_key(tmp_path: Path):
    """docker/entrypoint.sh as an unprivileged user (in a user namespace here, where ``id -u`` is 65534): ``concilium``
    with the arguments, and ``--key $CONCILIUM_KEY`` appended when set. (As root it copies the key for uid 10001,
    which exists in the image only: the same script, its other branch; ``sh -n`` checks the whole script.)"""
    import shutil
    import subprocess
    import sys

    script = ROOT / "docker" / "entrypoint.sh"
    assert subprocess.run(["sh", "-n", str(script)]).returncode == 0
    run = ["unshare", "--user", "sh", str(script)] if os.getuid() == 0 else ["sh", str(script)]
    assert shutil.which(run[0]), run[0]
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}", HOME=str(tmp_path))
    r = subprocess.run([*run, "node", "status", "--data-dir", str(tmp_path)], capture_output=True, text=True,
                       env=env, cwd=tmp_path, timeout=60)
    assert r.returncode == 2 and "no status file" in r.stderr, r.stderr  # concilium ran, with the arguments
    env["CONCILIUM_KEY"] = str(tmp_path / "node.key")
    r = subprocess.run([*run, "node", "status", "--data-dir", str(tmp_path)], capture_output=True, text=True,
                       env=env, cwd=tmp_path, timeout=60)
    assert r.returncode == 2 and "unrecognized arguments: --key" in r.stderr, r.stderr  # (node status takes no key)


def _compose_binary() -> list[str]:
    """``docker-compose`` or ``docker compose`` (make test's set-up installs Debian's docker-compose)."""
    import shutil
    import subprocess

    if shutil.which("docker-compose"):
        return ["docker-compose"]
    if shutil.which("docker") and subprocess.run(["docker", "compose", "version"], capture_output=True).returncode == 0:
        return ["docker", "compose"]
    raise AssertionError("no docker-compose: run make test's set-up (scripts/ensure-system-deps.sh) or install it")


def test_compose_config_accepts_the_demo_and_a_testnet_and_refuses_a_broken_file(tmp_path: Path):
    """``docker compose config`` (no engine needed) on docker/compose.yaml and on what ``testnet init --compose``
    writes; the same check refuses a broken file, so it checks something."""
    import subprocess

    compose = _compose_binary()
    assert main(["testnet", "init", "--nodes", "4", "--compose", "--out", str(tmp_path / "net")]) == 0
    for folder, name in ((ROOT / "docker", "compose.yaml"), (tmp_path / "net", "compose.yaml")):
        r = subprocess.run([*compose, "-f", name, "config", "-q"], cwd=folder, capture_output=True, text=True,
                           timeout=120)
        assert r.returncode == 0, (folder, r.stderr)
    broken = (tmp_path / "net" / "compose.yaml").read_text().replace("    image: concilium:dev", "    imagee: concilium:dev", 1)
    (tmp_path / "net" / "broken.yaml").write_text(broken)
    r = subprocess.run([*compose, "-f", "broken.yaml", "config", "-q"], cwd=tmp_path / "net", capture_output=True,
                       text=True, timeout=120)
    assert r.returncode != 0 and "imagee" in r.stderr, r.stderr


# --- .dockerignore -------------------------------------------------------------------------------


def _dockerignore_rules() -> list[tuple[bool, re.Pattern[str]]]:
    """The rules of .dockerignore as Docker reads them (moby/patternmatcher): one pattern a line, `#`
    comments, a leading `!` re-includes, `**` spans directories, `*` and `?` stay within one path element,
    the last matching rule wins, and a rule that matches a directory matches everything under it."""
    rules = []
    for line in (ROOT / ".dockerignore").read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        negate = line.startswith("!")
        pattern = posixpath.normpath(line.removeprefix("!")).lstrip("/")
        rx, i = "", 0
        while i < len(pattern):
            if pattern.startswith("**/", i):
                rx, i = rx + "(?:.*/)?", i + 3
            elif pattern.startswith("**", i):
                rx, i = rx + ".*", i + 2
            elif pattern[i] == "*":
                rx, i = rx + "[^/]*", i + 1
            elif pattern[i] == "?":
                rx, i = rx + "[^/]", i + 1
            elif pattern[i] == "[":
                end = pattern.index("]", i)
                rx, i = rx + pattern[i : end + 1], end + 1
            else:
                rx, i = rx + re.escape(pattern[i]), i + 1
        rules.append((negate, re.compile(rx + r"\Z")))
    return rules


def _ignored(path: str, rules: list[tuple[bool, re.Pattern[str]]]) -> bool:
    parts = path.split("/")
    prefixes = ["/".join(parts[: k + 1]) for k in range(len(parts))]
    ignored = False
    for negate, rx in rules:
        if any(rx.match(p) for p in prefixes):
            ignored = not negate
    return ignored


def test_dockerignore_keeps_environments_results_and_caches_out_of_the_build_context():
    rules = _dockerignore_rules()
    for path in [
        ".venv/bin/python", ".venv/lib/python3.11/site-packages/torch/__init__.py", ".git/HEAD", ".git",
        "results/quickstart-20250101-000000/ledger/chain.sqlite", "results", "sim/__pycache__/_run.cpython-311.pyc",
        "__pycache__/x.pyc", "tests/sim/__pycache__/t.pyc", ".pytest_cache/v/cache/nodeids", ".hypothesis/examples/x",
        "build/lib/sim/_run.py", "dist/concilium-0.1.0-py3-none-any.whl", "concilium.egg-info/PKG-INFO",
        "benchmarks/.venv-byzfl/bin/python", "ledger/_audit.pyc", ".import_linter_cache/x",
    ]:
        assert _ignored(path, rules), f".dockerignore lets {path} into the build context"
    # what the image needs stays in (the Dockerfile's COPY sources; sim/scenarios links into scenarios/)
    text = (ROOT / "docker" / "Dockerfile").read_text()
    needed = [src for line in re.findall(r"^COPY (.+) \S+$", text, flags=re.M) for src in line.split()]
    assert {"pyproject.toml", "README.md", "scenarios", "sim"} <= set(needed)
    for path in [*needed, "sim/scenarios", "scenarios/quickstart.toml", "scenarios/full/fedro_femnist_fig2.toml",
                 "sim/_run.py", "concilium/cli.py", "ledger/store/_sqlite.py", "docker/Dockerfile"]:
        assert not _ignored(path, rules), f".dockerignore drops {path}, which the image needs"
    # the real context of this checkout: every package source is in it, no environment or cache is
    context = []
    for top, dirs, files in os.walk(ROOT):
        rel = Path(top).relative_to(ROOT).as_posix().removeprefix(".")
        rel = rel.removeprefix("/")
        dirs[:] = [d for d in dirs if not _ignored(f"{rel}/{d}".lstrip("/"), rules)]
        context += [f"{rel}/{f}".lstrip("/") for f in files if not _ignored(f"{rel}/{f}".lstrip("/"), rules)]
    assert "sim/_run.py" in context and "scenarios/quickstart.toml" in context
    banned = {".venv", ".git", "results", "__pycache__", ".pytest_cache", ".hypothesis", "build", "dist"}
    for path in context:
        parts = path.split("/")
        assert not banned & set(parts) and not any(p.endswith(".egg-info") for p in parts), path
        assert not parts[0].startswith(".venv") and not (parts[0] == "benchmarks" and parts[1].startswith(".venv"))


# --- compose: up after up ------------------------------------------------------------------------


def _dependency_order(services: dict) -> list[str]:
    order: list[str] = []

    def visit(name: str, seen: tuple[str, ...] = ()) -> None:
        assert name not in seen, f"dependency cycle through {name}"
        if name not in order:
            for dep in sorted(services[name].get("depends_on", {})):
                visit(dep, (*seen, name))
            order.append(name)

    for name in sorted(services):
        visit(name)
    return order


def test_compose_demo_comes_up_twice(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    """`docker compose up` twice on one volume: every service command, in dependency order, through the CLI
    entrypoint (`concilium.cli:main`), with each named volume a host directory; the second `up` finds the
    previous demo in the volume and must still succeed."""
    compose = yaml.safe_load((ROOT / "docker" / "compose.yaml").read_text())
    services = compose["services"]
    order = _dependency_order(services)
    assert order.index("demo") < order.index("auditor")

    def on_host(arg: str, mounts: dict[str, Path]) -> str:
        for target, host in mounts.items():
            if arg == target or arg.startswith(target + "/"):
                return str(host) + arg[len(target):]
        return arg

    for up in (1, 2):
        for name in order:
            mounts = {}
            for vol in services[name].get("volumes", []):
                volume, target = vol.split(":")[:2]
                mounts[target] = tmp_path / volume
                mounts[target].mkdir(exist_ok=True)
            argv = [on_host(str(a), mounts) for a in services[name]["command"]]
            assert argv != services[name]["command"], f"{name} does not use its volume"
            code = main(argv)
            out, err = capsys.readouterr()
            assert code == 0, f"up #{up}, service {name}: exit {code}\n{out}\n{err}"
            if name == "auditor":
                assert out.startswith("OK: chain concilium-demo verified, 100 blocks"), out
