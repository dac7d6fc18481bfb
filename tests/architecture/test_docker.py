"""What can be checked of docker/ without a Docker engine: the compose file's structure, that every
service command is a valid `concilium` command line (the entrypoint the tests exercise), and that the
image copies every package the distribution ships."""

import re
import tomllib
from pathlib import Path

import yaml

from concilium.cli import build_parser

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
    assert 'ENTRYPOINT ["concilium"]' in text
    assert pyproject["project"]["scripts"]["concilium"] == "concilium.cli:main"
    assert "libgmp-dev" in text and "TORCH_SPEC=torch==2.13.0" in text
