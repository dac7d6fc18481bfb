"""An app's files sent to a process that lacks them (``node.apps.AppBundle``, the simulator's Ray trainers): loaded
from a private copy when they are the app pinned, refused before any of their code runs otherwise."""

from __future__ import annotations

import os
import sys
import uuid
from pathlib import Path

import pytest

from node._errors import ConfigFileError
from node.apps import AppBundle, app_digest, bundle_app, load_app


def _package(tmp_path: Path, marker: Path) -> Path:
    """A package app that registers nothing (nothing leaks into this process' registries) and, when imported, writes
    ``marker`` (so a test sees whether its code ran)."""
    name = f"bundle_pkg_{uuid.uuid4().hex[:12]}"
    pkg = tmp_path / "src" / name
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text(f"from pathlib import Path\nfrom .sub import mod\nVALUE = mod.X + 1\n"
                                     f"Path({str(marker)!r}).write_text('ran')\n")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "mod.py").write_text("X = 41\n")
    (pkg / "notes.txt").write_text("a data file of the app\n")
    return pkg


def _bundle_of(pkg: Path) -> AppBundle:
    from node.apps import _files  # noqa: PLC0415 - the files the digest covers

    return AppBundle(name=pkg.name, digest=app_digest(pkg), package=True,
                     files=tuple((rel, p.read_bytes()) for rel, p in _files(pkg)))


def test_a_bundle_installs_into_a_private_cache_and_loads_the_pinned_app(tmp_path):
    pkg = _package(tmp_path, tmp_path / "ran")
    bundle = _bundle_of(pkg)
    cache = tmp_path / "cache"
    app = bundle.install(cache)
    assert (app.name, app.digest) == (pkg.name, app_digest(pkg))
    assert Path(app.source) == cache / app.digest / pkg.name  # the copy, not the source folder
    assert sys.modules[pkg.name].VALUE == 42 and (tmp_path / "ran").read_text() == "ran"
    assert (cache.stat().st_mode & 0o777) == 0o700
    assert (cache / app.digest / pkg.name / "notes.txt").read_text() == "a data file of the app\n"
    # the loaded app bundles back to the same files (what the simulator sends its trainers)
    again = bundle_app(app)
    assert again == bundle
    # a copy altered in the cache is written again from the bundle before it is loaded
    (cache / app.digest / pkg.name / "sub" / "mod.py").write_text("X = 0\n")
    assert bundle.install(cache) == app
    assert (cache / app.digest / pkg.name / "sub" / "mod.py").read_text() == "X = 41\n"


def test_a_bundle_that_is_not_the_pinned_app_is_refused_before_its_code_runs(tmp_path):
    marker = tmp_path / "ran"
    pkg = _package(tmp_path, marker)
    good = _bundle_of(pkg)
    files = tuple((rel, data + b"\nEVIL = 1\n" if rel == "sub/mod.py" else data) for rel, data in good.files)
    with pytest.raises(ConfigFileError, match=f"has digest [0-9a-f]{{64}}, but the run's scenario pins app "
                                              f"'{pkg.name}' with digest {good.digest}"):
        AppBundle(name=good.name, digest=good.digest, package=True, files=files).install(tmp_path / "cache")
    assert not marker.exists() and pkg.name not in sys.modules


@pytest.mark.parametrize("rel", ["../evil.py", "/etc/evil.py", "a/../../evil.py", "./x.py", ""])
def test_a_bundle_path_that_would_leave_its_folder_is_refused(tmp_path, rel):
    name = f"bundle_pkg_{uuid.uuid4().hex[:12]}"
    bundle = AppBundle(name=name, digest="0" * 64, package=True, files=(("__init__.py", b""), (rel, b"x = 1\n")))
    with pytest.raises(ConfigFileError, match="refused file path"):
        bundle.install(tmp_path / "cache")
    assert not (tmp_path / "evil.py").exists() and not list((tmp_path / "cache").glob("*/"))
    one = AppBundle(name=name, digest="0" * 64, package=False, files=(("other.py", b""),))
    with pytest.raises(ConfigFileError, match="refused file path"):
        one.install(tmp_path / "cache")


def test_a_cache_others_can_write_is_refused(tmp_path):
    cache = tmp_path / "cache"
    cache.mkdir()
    os.chmod(cache, 0o777)
    pkg = _package(tmp_path, tmp_path / "ran")
    with pytest.raises(ConfigFileError, match="others cannot write"):
        _bundle_of(pkg).install(cache)
    assert not (tmp_path / "ran").exists()


def test_a_single_file_app_round_trips(tmp_path):
    name = f"bundle_file_{uuid.uuid4().hex[:12]}"
    src = tmp_path / f"{name}.py"
    src.write_text("Y = 7\n")
    app = load_app(src)
    bundle = bundle_app(app)
    assert bundle.package is False and bundle.files == ((f"{name}.py", b"Y = 7\n"),)
    installed = bundle.install(tmp_path / "cache")
    assert installed == app  # (loaded in this process already: the same code, same digest)
    assert (tmp_path / "cache" / app.digest / f"{name}.py").read_text() == "Y = 7\n"
    src.write_text("Y = 8\n")
    with pytest.raises(ConfigFileError, match="changed since it was loaded"):
        bundle_app(app)
