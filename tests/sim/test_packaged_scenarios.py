"""The scenario files ship inside the package: a wheel built from this checkout carries every one of them
as ``sim/scenarios/...``, and the installed code runs a bundled scenario by name from a directory outside
the checkout. In a checkout (and an editable install) ``sim/scenarios`` is a symlink to ``scenarios/``."""

import json
import os
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

import sim
from concilium.cli import main
from sim.__main__ import main as sim_main

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = ROOT / "scenarios"


def _checkout_scenarios() -> list[str]:
    return sorted(p.relative_to(SCENARIOS).as_posix() for p in SCENARIOS.rglob("*.toml"))


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Build the wheel once from a copy of the sources (the build writes build/ and *.egg-info)."""
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"
    src.mkdir()
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    packages = [p.rstrip("*") for p in pyproject["tool"]["setuptools"]["packages"]["find"]["include"]]
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in [*packages, "scenarios"]:
        shutil.copytree(ROOT / name, src / name, symlinks=True, ignore=ignore)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, src / name)
    env = {**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_NO_INPUT": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
         "-w", str(tmp / "dist"), str(src)],
        capture_output=True, text=True, env=env, timeout=120,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (whl,) = (tmp / "dist").glob("concilium-*.whl")
    return whl


def test_wheel_carries_every_scenario_as_package_data(wheel: Path):
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        bundled = sorted(n.removeprefix("sim/scenarios/") for n in names
                         if n.startswith("sim/scenarios/") and n.endswith(".toml"))
        assert bundled == _checkout_scenarios()
        assert "full/fedro_femnist_fig2.toml" in bundled and "quickstart.toml" in bundled
        assert zf.read("sim/scenarios/quickstart.toml") == (SCENARIOS / "quickstart.toml").read_bytes()
    # data, not a Python package: no top-level scenarios/ and no __init__.py among the scenario files
    assert not any(n.startswith("scenarios/") for n in names)
    assert not any(n.startswith("sim/scenarios/") and n.endswith(".py") for n in names)


def test_installed_wheel_runs_a_bundled_scenario_by_name_outside_the_checkout(wheel: Path, tmp_path: Path):
    site = (tmp_path / "site").resolve()
    with zipfile.ZipFile(wheel) as zf:
        zf.extractall(site)
    work = tmp_path / "work"  # cwd outside the checkout: no scenarios/ folder to fall back on
    work.mkdir()
    env = {**os.environ, "PYTHONPATH": str(site)}
    probe = subprocess.run(
        [sys.executable, "-c",
         "import json, sim, concilium; print(json.dumps([sim.__file__, concilium.__file__, "
         "str(sim.resolve_scenario('coordinator_fedavg')), sim.bundled_scenario_names()]))"],
        cwd=work, env=env, capture_output=True, text=True, timeout=60,
    )
    assert probe.returncode == 0, probe.stderr
    sim_file, cli_file, fedavg, names = json.loads(probe.stdout)
    assert Path(sim_file).is_relative_to(site) and Path(cli_file).is_relative_to(site)  # the wheel, not the checkout
    assert Path(fedavg) == site / "sim" / "scenarios" / "coordinator_fedavg.toml"
    assert sorted(f"{n}.toml" for n in names) == _checkout_scenarios()

    out = tmp_path / "out"
    run = subprocess.run(
        [sys.executable, "-m", "concilium", "sim", "run", "quickstart", "--rounds", "1", "--out", str(out),
         "--quiet", "--workers", "0"],
        cwd=work, env=env, capture_output=True, text=True, timeout=120,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["scenario"] == "quickstart" and summary["rounds"] == 1 and summary["ledger_verified"] is True
    assert list(work.iterdir()) == []  # nothing written to the working directory


def test_checkout_links_the_package_scenarios_to_the_top_level_folder():
    link = ROOT / "sim" / "scenarios"
    assert link.is_symlink() and os.readlink(link) == "../scenarios"
    assert not (SCENARIOS / "__init__.py").exists()  # never a Python package (docs/design.md, "Layout")
    assert sim.default_scenario_path().samefile(SCENARIOS / "quickstart.toml")
    assert sorted(f"{n}.toml" for n in sim.bundled_scenario_names()) == _checkout_scenarios()
    names = sim.bundled_scenario_names()
    assert names[0] == "cmfl" and all("/" not in n for n in names[: names.index("quickstart")])


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        (None, "quickstart.toml"),
        ("quickstart", "quickstart.toml"),
        ("coordinator_fedavg", "coordinator_fedavg.toml"),
        ("coordinator_fedavg.toml", "coordinator_fedavg.toml"),
        ("full/fedro_femnist_fig2", "full/fedro_femnist_fig2.toml"),
        (str(SCENARIOS / "committee_crash.toml"), "committee_crash.toml"),
        # the papers' former names, as names and as paths
        ("seed001_corr", "mimic_corr.toml"),
        ("seed003_cmfl", "cmfl.toml"),
        ("seed004_fedro.toml", "fedro.toml"),
        ("full/seed004_femnist_fig2", "full/fedro_femnist_fig2.toml"),
        (str(SCENARIOS / "seed002_backdoor.toml"), "sself_backdoor.toml"),
        (str(SCENARIOS / "full" / "seed000_cifar10_cclip.toml"), "full/unavailability_cifar10_cclip.toml"),
    ],
)
def test_resolve_scenario_takes_a_name_or_a_path(spec, expected):
    assert sim.resolve_scenario(spec).samefile(SCENARIOS / expected)


def _former_name(name: str) -> str | None:
    """``mimic_corr`` -> ``seed001_corr``, ``full/fedro_femnist_fig2`` -> ``full/seed004_femnist_fig2``, ``cmfl`` ->
    ``seed003_cmfl``; None for a scenario of no paper."""
    head, sep, stem = name.rpartition("/")
    for old, new in sim.PAPER_ALIASES.items():
        if stem == new or stem.startswith(new + "_"):
            return head + sep + old + "_" + (new if stem == new else stem.removeprefix(new + "_"))
    return None


def test_every_former_scenario_name_resolves_and_loads_as_its_renamed_file():
    """Each paper's scenario under its former name: the bundled name, a path to the old file (``resolve_scenario``
    and ``load_scenario`` alike), and the ``name`` key the chain id derives from, which the renaming kept."""
    renamed = {n: _former_name(n) for n in sim.bundled_scenario_names() if _former_name(n) is not None}
    assert len(renamed) == 38 and "cmfl" in renamed and "full/fedro_femnist_fig3" in renamed
    for new, old in renamed.items():
        path = SCENARIOS / f"{new}.toml"
        assert sim.current_scenario_name(old) == new and sim.current_scenario_name(f"{old}.toml") == f"{new}.toml"
        assert sim.resolve_scenario(old).samefile(path), old
        assert sim.resolve_scenario(SCENARIOS / f"{old}.toml").samefile(path), old
        paper = old.rpartition("/")[2][:7]
        assert tomllib.loads(path.read_text())["name"].startswith(paper), (new, "the name key keeps the former id")
    old_path = SCENARIOS / "seed001_bounded.toml"
    assert not old_path.exists()
    assert sim.load_scenario(old_path, rounds=1) == sim.load_scenario(SCENARIOS / "mimic_bounded.toml", rounds=1)


@pytest.mark.parametrize("name", ["seed001", "seed005_x", "seed0010_x", "myseed001_corr", "quickstart", "seed001_"])
def test_other_names_are_not_aliases(name: str):
    assert sim.current_scenario_name(name) == name


def test_an_existing_file_wins_over_a_bundled_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.chdir(tmp_path)
    Path("quickstart").write_text('name = "mine"\n')
    assert sim.resolve_scenario("quickstart") == Path("quickstart")
    Path("coordinator_fedavg.toml").mkdir()  # a directory is not a scenario file: the bundled name wins
    assert sim.resolve_scenario("coordinator_fedavg.toml").samefile(SCENARIOS / "coordinator_fedavg.toml")


def test_unknown_scenario_is_one_line_listing_the_bundled_names(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["sim", "run", "no_such_scenario", "--rounds", "1"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert len(lines) == 1, captured.err
    assert lines[0].startswith("concilium: error: no_such_scenario: no such scenario file or bundled scenario")
    for name in ("quickstart", "coordinator_fedavg", "committee_crash", "full/fedro_femnist_fig2"):
        assert name in lines[0]
    assert list(tmp_path.iterdir()) == []  # no results folder

    with pytest.raises(SystemExit) as exc:
        sim_main(["run", "no_such_scenario"])
    assert exc.value.code == 2
    assert "no such scenario file or bundled scenario" in capsys.readouterr().err


def test_sim_run_help_says_a_bundled_name_works(capsys):
    try:
        code = main(["sim", "run", "--help"])
    except SystemExit as e:  # argparse's own exit, where main does not turn it into a return code
        code = e.code
    assert code == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "bundled scenario name, e.g. quickstart" in text and "coordinator_fedavg" in text
