"""No traceback for any user input.

A corpus of hostile inputs lives in ``tests/node/hostile/``: command lines (``argv.txt``), scenario files,
genesis files and proofs. Every one must make ``concilium`` exit 2 with exactly one stderr line
``concilium: error: <file or option>: <problem>`` and leave the workspace exactly as it was: no results folder
holding only a ledger, no ``.tmp`` file, no orphan key. The rest covers what a corpus line cannot: an
unwritable place (a real unprivileged process), symbolic links, ``--force`` replacing a results folder, and
output piped into ``head``.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from concilium import cli
from concilium.cli import main

CORPUS = Path(__file__).resolve().parent / "hostile"
CONCILIUM = Path(sys.executable).with_name("concilium")


def _expect(path: Path) -> str:
    first = path.read_bytes().split(b"\n", 1)[0].decode()
    assert first.startswith("# expect: "), f"{path.name}: first line must be '# expect: <part of the error>'"
    return first.removeprefix("# expect: ")


def _argv_lines() -> list[tuple[str, str]]:
    out = []
    for line in (CORPUS / "argv.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            expected, sep, argv = line.partition(" :: ")
            assert sep, line
            out.append((expected, argv))
    return out


def snapshot(root: Path) -> dict[str, tuple[str, bytes]]:
    """Every entry under ``root`` (hidden ones too), symbolic links as their target, files with their bytes."""
    out: dict[str, tuple[str, bytes]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            rel = str(p.relative_to(root))
            if p.is_symlink():
                out[rel] = ("link", os.readlink(p).encode())
            elif p.is_dir():
                out[rel] = ("dir", b"")
            else:
                out[rel] = ("file", p.read_bytes())
    return out


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    ws = tmp_path_factory.mktemp("hostile")
    assert main(["ledger", "demo", "--out", str(ws / "demo"), "--blocks", "2", "--members", "5", "--updates", "2"]) == 0
    assert main(["keygen", "--out", str(ws / "a.key")]) == 0
    (ws / "afile").write_text("not a folder\n")
    (ws / "emptydir").mkdir()
    (ws / "loop").symlink_to("loop")
    (ws / "dangling").symlink_to("nowhere")
    (ws / "link.key").symlink_to("a.key")
    from ledger.store import open_ledger

    store, _ = open_ledger(ws / "demo" / "ledger", readonly=True)
    with store:
        peer = store.get(1).payload.updates[0].peer
    return {
        "ws": str(ws),
        "ledger": str(ws / "demo" / "ledger"),
        "genesis": str(ws / "demo" / "genesis.toml"),
        "key": str(ws / "a.key"),
        "peer": peer,
        "scenario": str(CORPUS / "scenarios" / "_template.toml"),
    }


def _one_error_line(capsys: pytest.CaptureFixture[str], argv: list[str], expected: str, ws: Path) -> None:
    capsys.readouterr()
    before = snapshot(ws)
    code = main(argv)
    out, err = capsys.readouterr()
    assert code == 2, (argv, out, err)
    assert err.startswith("concilium: error: ") and err.count("\n") == 1 and err.endswith("\n"), (argv, err)
    assert "Traceback" not in err + out
    assert expected in err, (argv, expected, err)
    assert snapshot(ws) == before, f"{argv}: a failing command wrote, changed or left files"


@pytest.mark.parametrize("expected, line", _argv_lines(), ids=[a for _, a in _argv_lines()])
def test_hostile_command_line(capsys, monkeypatch, workspace, expected, line):
    ws = Path(workspace["ws"])
    monkeypatch.chdir(ws)  # a command that writes to the current directory is caught by the snapshot too
    argv = [a.replace("{nul}", "\0") for a in shlex.split(line.format(nul="{nul}", **workspace))]
    _one_error_line(capsys, argv, expected, ws)


def _files(kind: str, suffix: str) -> list[Path]:
    return sorted(p for p in (CORPUS / kind).glob(f"*{suffix}") if not p.name.startswith("_"))


@pytest.mark.parametrize("path", _files("scenarios", ".toml"), ids=lambda p: p.name)
def test_hostile_scenario_file(capsys, monkeypatch, workspace, path):
    ws = Path(workspace["ws"])
    monkeypatch.chdir(ws)
    argv = ["sim", "run", str(path), "--out", str(ws / "run"), "--quiet", "--workers", "0"]
    _one_error_line(capsys, argv, _expect(path), ws)


@pytest.mark.parametrize("path", _files("genesis", ".toml"), ids=lambda p: p.name)
def test_hostile_genesis_file(capsys, monkeypatch, workspace, path):
    ws = Path(workspace["ws"])
    monkeypatch.chdir(ws)
    expected = _expect(path)
    _one_error_line(capsys, ["genesis", "show", str(path)], expected, ws)
    # the same file as a trusted genesis: verify and verify-proof refuse it the same way
    _one_error_line(capsys, ["ledger", "verify", workspace["ledger"], "--genesis", str(path)], expected, ws)


@pytest.mark.parametrize("name, expected", [
    tuple(line.split(": ", 1)) for line in (CORPUS / "proofs" / "expect.txt").read_text().splitlines()
    if line and not line.startswith("#")
])
def test_hostile_proof_file(capsys, monkeypatch, workspace, name, expected):
    ws = Path(workspace["ws"])
    monkeypatch.chdir(ws)
    _one_error_line(capsys, ["ledger", "verify-proof", str(CORPUS / "proofs" / name), "--genesis", workspace["genesis"]], expected, ws)


def test_corpus_bases_are_valid_and_every_file_is_walked():
    """Each bad scenario and genesis is its valid base with one thing changed: the bases must load, and no
    corpus file may be silently skipped."""
    from node.config import load_genesis
    from sim import load_scenario

    sc = load_scenario(CORPUS / "scenarios" / "_template.toml")
    assert sc.members == 6 and sc.rounds == 1
    assert load_genesis(CORPUS / "genesis" / "_valid.toml").chain_id == "hostile"
    proofs = {line.split(": ", 1)[0] for line in (CORPUS / "proofs" / "expect.txt").read_text().splitlines() if line and not line.startswith("#")}
    assert proofs == {p.name for p in (CORPUS / "proofs").glob("*.json")}
    assert len(_files("scenarios", ".toml")) >= 40 and len(_argv_lines()) >= 80


def test_flag_bounds_match_the_scenario_bounds():
    from sim import _scenario

    assert cli.ROUNDS_MAX == _scenario.ROUNDS_MAX


# --- what a corpus line cannot express ------------------------------------------------------------


_CHILD = """
import contextlib, io, json, sys
import concilium.cli
results = []
for argv in json.loads(sys.argv[1]):
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = concilium.cli.main(argv)
    results.append([code, err.getvalue()])
print(json.dumps(results))
"""


def test_unwritable_output_places_are_one_line_errors_and_write_nothing(workspace, write_privileges_dropped):
    """Tests run as root here, where permission bits stop nothing: the commands run in a process started without
    the capabilities that override them (``write_privileges_dropped``), against a world-readable workspace with a
    read-only folder.

    The child used to become uid 65534 after importing what the commands import lazily: a clone under a private
    home (a parent folder at 0700) was then out of its reach, and the one lazy import the list missed
    (``torch.utils._device``, which ``with torch.device("meta")`` imports when a scenario loads) failed with
    ModuleNotFoundError. A child that stays uid 0 reads the checkout wherever it is and imports when it likes."""
    base = Path(tempfile.mkdtemp(prefix="concilium-ro-"))
    try:
        shutil.copytree(Path(workspace["ledger"]).parent, base / "demo")
        ro = base / "ro"
        (ro / "empty").mkdir(parents=True)
        scenario = base / "s.toml"
        shutil.copy(CORPUS / "scenarios" / "_template.toml", scenario)
        for p in (base, *base.rglob("*")):
            os.chmod(p, 0o755 if p.is_dir() else 0o644)
        for p in (ro / "empty", ro):
            os.chmod(p, 0o555)  # nobody may write here, the owner neither
        peer, ledger = workspace["peer"], str(base / "demo" / "ledger")
        denied, no_folder = "cannot write: Permission denied", "cannot create the results folder: Permission denied"
        cases = [
            (["keygen", "--out", f"{ro}/k.key"], denied),
            (["genesis", "create", "--member", peer, "--out", f"{ro}/g.toml"], denied),
            (["ledger", "export", ledger, "--json", "--out", f"{ro}/x.json"], denied),
            (["ledger", "proof", ledger, "1", peer, "--out", f"{ro}/p.json"], denied),
            (["ledger", "demo", "--out", f"{ro}/demo", "--blocks", "1"], no_folder),
            (["ledger", "demo", "--out", f"{ro}/empty", "--blocks", "1"], no_folder),
            (["sim", "run", str(scenario), "--out", f"{ro}/run", "--quiet"], no_folder),
            (["sim", "run", str(scenario), "--out", f"{ro}/empty", "--quiet"], no_folder),
        ]
        r = subprocess.run([sys.executable, "-c", _CHILD, json.dumps([a for a, _ in cases])], capture_output=True,
                           text=True, cwd=base, timeout=300, preexec_fn=write_privileges_dropped)
        assert r.returncode == 0 and r.stderr == "", r.stderr
        for (argv, expected), (code, err) in zip(cases, json.loads(r.stdout), strict=True):
            assert code == 2, (argv, err)
            assert err.startswith("concilium: error: ") and err.count("\n") == 1 and expected in err, (argv, err)
        assert sorted(p.name for p in ro.rglob("*")) == ["empty"], list(ro.rglob("*"))
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_keygen_replaces_a_symlink_only_with_force_and_never_writes_through_it(capsys, tmp_path):
    assert main(["keygen", "--out", str(tmp_path / "target.key")]) == 0
    target = (tmp_path / "target.key").read_bytes()
    for name, dest in (("link.key", "target.key"), ("dangling.key", "nowhere.key"), ("loop.key", "loop.key")):
        link = tmp_path / name
        link.symlink_to(dest)
        capsys.readouterr()
        assert main(["keygen", "--out", str(link)]) == 2
        assert "a symbolic link; use --force" in capsys.readouterr().err
        assert link.is_symlink() and os.readlink(link) == dest
        assert main(["keygen", "--out", str(link), "--force"]) == 0
        peer = capsys.readouterr().out.strip()
        assert not link.is_symlink() and stat.S_IMODE(link.stat().st_mode) == 0o600
        from node.keys import load_key

        assert load_key(link).peer_id == peer
    assert (tmp_path / "target.key").read_bytes() == target, "the link's target was written through"
    assert not (tmp_path / "nowhere.key").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dangling.key", "link.key", "loop.key", "target.key"]


def test_ledger_demo_force_replaces_a_results_folder_whole(capsys, tmp_path):
    out = tmp_path / "demo"
    assert main(["ledger", "demo", "--out", str(out), "--blocks", "2", "--members", "5", "--updates", "2"]) == 0
    first = json.loads((out / "summary.json").read_text())
    (out / "note.txt").write_text("from the first run\n")
    out.chmod(0o750)
    capsys.readouterr()
    assert main(["ledger", "demo", "--out", str(out), "--blocks", "3", "--members", "5", "--updates", "2", "--seed", "1"]) == 2
    assert "already exists" in capsys.readouterr().err
    assert main(["ledger", "demo", "--out", str(out), "--blocks", "3", "--members", "5", "--updates", "2", "--seed", "1", "--force"]) == 0
    second = json.loads((out / "summary.json").read_text())
    assert second["blocks"] == 3 and second["head_hash"] != first["head_hash"] and second["verified"]
    assert sorted(p.name for p in out.iterdir()) == ["genesis.toml", "ledger", "summary.json"]  # nothing of the old one
    assert stat.S_IMODE(out.stat().st_mode) == 0o750, "the replaced folder keeps its mode"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["demo"], "no temporary or old folder beside it"
    assert main(["ledger", "verify", str(out / "ledger"), "--genesis", str(out / "genesis.toml"), "--reexec", "no"]) == 0
    # --force never replaces what is not a results folder
    other = tmp_path / "other"
    other.mkdir()
    (other / "keep.txt").write_text("mine\n")
    capsys.readouterr()
    assert main(["ledger", "demo", "--out", str(other), "--blocks", "1", "--force"]) == 2
    assert "not a results folder" in capsys.readouterr().err and (other / "keep.txt").read_text() == "mine\n"


def test_sim_run_force_replaces_and_a_failed_force_leaves_the_old_results(capsys, tmp_path):
    scenario = CORPUS / "scenarios" / "_template.toml"
    out = tmp_path / "run"
    args = ["sim", "run", str(scenario), "--out", str(out), "--quiet", "--workers", "0"]
    assert main(args) == 0
    first = json.loads((out / "summary.json").read_text())
    assert first["verify"] == f"concilium ledger verify {out / 'ledger'}"
    before = snapshot(tmp_path)
    bad = tmp_path.parent / f"{tmp_path.name}-bad.toml"
    bad.write_text(scenario.read_text().replace("in_features = 64", "in_features = 65"))  # fails after the data load
    try:
        capsys.readouterr()
        assert main(["sim", "run", str(bad), "--out", str(out), "--quiet", "--workers", "0", "--force"]) == 2
        assert "does not take inputs of shape (64,)" in capsys.readouterr().err
        assert snapshot(tmp_path) == before, "a failed --force run changed the old results or left a folder beside them"
    finally:
        bad.unlink()
    assert main([*args, "--seed", "1", "--force"]) == 0
    second = json.loads((out / "summary.json").read_text())
    assert second["seed"] == 1 and second["head_hash"] != first["head_hash"] and second["ledger_verified"]
    assert second["verify"] == first["verify"], "the summary names the published folder, not the one it was built in"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]


def _pipe_into_head(workspace: dict[str, str], command: str, head: str) -> tuple[str, str]:
    """Run ``concilium COMMAND | HEAD`` in bash; return (concilium's exit status, its stderr)."""
    argv = shlex.join([str(CONCILIUM), *shlex.split(command.format(**workspace))])
    err = Path(workspace["ws"]) / "pipe-stderr.txt"
    script = f"set -o pipefail; {argv} 2>{shlex.quote(str(err))} | {head} >/dev/null; echo $?"
    r = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=120)
    text = err.read_text()
    err.unlink()
    return r.stdout.strip(), text


@pytest.mark.parametrize("command", [
    "ledger show {ledger}",
    "ledger show {ledger} 1",
    "ledger export {ledger} --json",
    "genesis show {genesis}",
])
def test_output_piped_into_head_exits_141_silently(workspace, command):
    """A real pipe whose reader is gone before the first write (``head -c 0`` reads nothing and exits): no
    BrokenPipeError, nothing on stderr, and the status of a Unix filter killed by SIGPIPE (128 + 13), as the
    README says."""
    status, err = _pipe_into_head(workspace, command, "head -c 0")
    assert err == "" and status == "141", (status, err)


def test_output_piped_into_head_n1_is_silent(workspace):
    """``| head -n 1``: whether the reader leaves before the last write is a race (exit 141 or 0); either
    way nothing reaches stderr."""
    status, err = _pipe_into_head(workspace, "ledger export {ledger} --json", "head -n 1")
    assert err == "" and status in ("0", "141"), (status, err)
