"""Apps: a user's plug-ins, pinned in the genesis and loaded by every process (docs/design.md, "Apps").

An **app** is a Python file (``my_app.py``) or a package directory (``my_app/`` with an ``__init__.py``) that
registers plug-ins when it is imported, with the decorators that exist (``register_strategy``,
``register_aggregator``, ``register_update_attack``, models, datasets, partitions, schedules, availability models),
or an installed distribution's entry point in the group :data:`ENTRY_POINT_GROUP` (``pip install some-app`` is
then enough: ``[project.entry-points."concilium.apps"] my_app = "my_app"``).

Its **digest** is ``SHA-256("concilium-app/v1" ‖ canonical [[relative path, bytes], …])`` over every file of the
app, sorted by relative POSIX path (one file: its own name; a package: every file below it), leaving out
``__pycache__`` folders, ``*.pyc`` files and names starting with a dot. A genesis pins it as
``protocol.params.app = {name, digest}`` (:func:`app_pin`); a process that loads an app checks the digest against
the pin and refuses a mismatch with one line naming both (:func:`check_app`). Loading imports the app once per
process (its registrations are process-wide); a training worker forked afterwards inherits them.

What the audit re-executes (scoring, selection, aggregation) must be deterministic float64 in a fixed order, as
for the built-in plug-ins: the app is code every validator and auditor runs.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import os
import re
import shutil
import stat
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ledger import encode, hash_tagged

from node._errors import ConfigFileError

__all__ = [
    "APP_KEY",
    "ENTRY_POINT_GROUP",
    "App",
    "AppBundle",
    "app_digest",
    "app_pin",
    "bundle_app",
    "check_app",
    "app_beside",
    "app_of_scenario",
    "copy_app",
    "load_app",
    "load_pinned_app",
    "pin_of",
]

APP_KEY = "app"
"""The reserved ``protocol.params`` key of the pin (one of ``learning``'s ``HOST_PARAM_KEYS``)."""
ENTRY_POINT_GROUP = "concilium.apps"
APP_FILES_MAX = 10_000
APP_BYTES_MAX = 256 << 20
"""Bounds on what an app may hold (files, bytes in all): a digest of a whole home folder is a mistake."""
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
_DIGEST = re.compile(r"^[0-9a-f]{64}$")


@dataclass(frozen=True, slots=True)
class App:
    """A loaded app: its ``name`` (the module name), ``digest`` (hex) and where it came from (``source``: a path,
    or ``entry point NAME (DISTRIBUTION)``)."""

    name: str
    digest: str
    source: str

    def pin(self) -> dict[str, str]:
        """What a genesis records: ``{"name": …, "digest": …}``."""
        return {"name": self.name, "digest": self.digest}


_LOADED: dict[str, App] = {}
"""Apps this process imported, by module name."""


def _files(root: Path) -> list[tuple[str, Path]]:
    if root.is_file():
        return [(root.name, root)]
    out: list[tuple[str, Path]] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__" and not d.startswith("."))
        for f in filenames:
            if f.startswith(".") or f.endswith(".pyc"):
                continue
            p = Path(dirpath) / f
            out.append((p.relative_to(root).as_posix(), p))
            if len(out) > APP_FILES_MAX:
                raise ConfigFileError(f"{root}: an app holds at most {APP_FILES_MAX} files")
    return sorted(out)


def app_digest(path: str | os.PathLike[str]) -> str:
    """The digest of the app at ``path`` (a file or a package directory), hex (the module docstring)."""
    root = Path(path)
    entries: list[tuple[str, bytes]] = []
    total = 0
    for rel, p in _files(root):
        data = p.read_bytes()
        total += len(data)
        if total > APP_BYTES_MAX:
            raise ConfigFileError(f"{root}: an app holds at most {APP_BYTES_MAX} bytes")
        entries.append((rel, data))
    return _digest(entries)


def _digest(files: Sequence[tuple[str, bytes]]) -> str:
    """The app digest of ``(relative path, bytes)`` pairs in path order (the module docstring)."""
    return hash_tagged(b"concilium-app/v1", encode([[rel, data] for rel, data in files])).hex()


def _name_of(path: Path) -> str:
    name = path.stem if path.is_file() else path.name
    if not _NAME.match(name):
        raise ConfigFileError(f"{path}: an app's name (its file or folder name, {name!r:.60}) must be a Python identifier")
    return name


def load_app(path: str | os.PathLike[str], *, expect: tuple[str, str] | None = None, what: str = "the genesis") -> App:
    """Import the app at ``path`` (a ``.py`` file or a package directory) once in this process and return it.
    ``expect``: the ``(name, digest)`` a genesis pins; an app that is not that one is refused *before* it is
    imported, so that no code but the pinned one runs (a results folder's ``scenario.toml`` may name any file).
    Raises :class:`ConfigFileError` (one line) when it is missing, not an app, not the expected one (both digests),
    clashes with another module of its name, or fails to import (the exception it raised, named)."""
    p = Path(path).resolve()
    if not p.exists():
        raise ConfigFileError(f"{path}: no such app (a .py file or a package directory)")
    if p.is_dir() and not (p / "__init__.py").is_file():
        raise ConfigFileError(f"{path}: a package directory needs an __init__.py to be an app")
    if p.is_file() and p.suffix != ".py":
        raise ConfigFileError(f"{path}: an app is a .py file or a package directory")
    name = _name_of(p)
    digest = app_digest(p)
    if expect is not None and (name, digest) != expect:
        raise ConfigFileError(f"app {name!r} ({p}) has digest {digest}, but {what} pins app {expect[0]!r} with digest "
                              f"{expect[1]}")
    got = _LOADED.get(name)
    if got is not None:  # (a copy of it, e.g. a results folder's, is the same code: same digest)
        if got.digest != digest:
            raise ConfigFileError(f"{path}: another app named {name!r} is loaded in this process ({got.source}, "
                                  f"digest {got.digest}); this one has digest {digest}")
        return got
    here = sys.modules.get(name)
    if here is not None:
        origin = getattr(here, "__file__", None)
        mine = str(p / "__init__.py") if p.is_dir() else str(p)
        if origin is None or Path(origin).resolve() != Path(mine):
            raise ConfigFileError(f"{path}: its module name {name!r} is taken by {origin or 'a built-in module'}")
    else:
        init = p / "__init__.py" if p.is_dir() else p
        spec = importlib.util.spec_from_file_location(
            name, init, submodule_search_locations=[str(p)] if p.is_dir() else None
        )
        if spec is None or spec.loader is None:
            raise ConfigFileError(f"{path}: cannot be imported")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        try:
            spec.loader.exec_module(module)
        except Exception as e:  # noqa: BLE001 - the user's code: whatever it raises is one line
            del sys.modules[name]
            raise ConfigFileError(f"{path}: the app failed to import: {type(e).__name__}: {e}") from None
    app = _LOADED[name] = App(name=name, digest=digest, source=str(p))
    return app


def _entry_point(name: str) -> importlib.metadata.EntryPoint | None:
    for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        if ep.name == name:
            return ep
    return None


def _load_entry_point(name: str, digest_expected: str, what: str) -> App | None:
    """The installed app ``name`` (entry point group :data:`ENTRY_POINT_GROUP`), imported if its digest is the
    expected one (checked before the import), or None if none is installed."""
    ep = _entry_point(name)
    if ep is None:
        return None
    module_name = ep.value.split(":")[0].strip()
    spec = importlib.util.find_spec(module_name)
    if spec is None or spec.origin is None:
        raise ConfigFileError(f"installed app {name!r} ({ep.value}): its module cannot be found")
    origin = Path(spec.origin)
    root = origin.parent if origin.name == "__init__.py" else origin
    digest = app_digest(root)
    if digest != digest_expected:
        raise ConfigFileError(f"installed app {name!r} ({root}) has digest {digest}, but {what} pins it with digest "
                              f"{digest_expected}")
    try:
        importlib.import_module(module_name)
    except Exception as e:  # noqa: BLE001
        raise ConfigFileError(f"installed app {name!r}: failed to import: {type(e).__name__}: {e}") from None
    app = App(name=name, digest=digest, source=f"entry point {name} ({root})")
    _LOADED.setdefault(name, app)
    return app


@dataclass(frozen=True, slots=True)
class AppBundle:
    """An app's files in memory (:func:`bundle_app`), to load it in a process on another machine that lacks them
    (the simulator's Ray trainers): :meth:`install` writes them into a private cache and loads them, refusing
    anything but the app of ``name`` and ``digest``, before any of its code runs."""

    name: str
    digest: str
    package: bool
    files: tuple[tuple[str, bytes], ...]
    """``(relative POSIX path, bytes)``: for a package, below its folder; for a file, its own name."""

    def install(self, cache: str | os.PathLike[str] | None = None, *, what: str = "the run's scenario") -> App:
        """Write the files under ``cache/<digest>/`` (default: ``concilium-apps-<uid>`` in the temporary folder,
        private to this user; kept, so that the trainers of a machine share one copy per app version) unless they
        are there, and :func:`load_app` them with ``(name, digest)`` expected. Raises :class:`ConfigFileError`
        (one line) for a path that would leave the folder, a cache folder another user could write, or files
        that are not the app pinned (a tampered bundle or cache)."""
        if not _NAME.match(self.name) or not _DIGEST.match(self.digest):
            raise ConfigFileError(f"app bundle: a name and a 64-hex digest are needed, got {self.name!r:.60}, "
                                  f"{self.digest!r:.80}")
        root = Path(cache) if cache is not None else Path(tempfile.gettempdir()) / f"concilium-apps-{os.getuid()}"
        _private_dir(root)
        home = root / self.digest
        target = home / self.name if self.package else home / f"{self.name}.py"
        if home.is_dir() and not _holds(target, self.digest):  # (a copy cut short or altered: written again)
            shutil.rmtree(home, ignore_errors=True)
        if not home.is_dir():
            tmp = Path(tempfile.mkdtemp(dir=root, prefix=f".{self.digest[:16]}-"))
            try:
                base = tmp / self.name if self.package else tmp
                for rel, data in self.files:
                    parts = rel.split("/")  # (as _files writes them: no empty, "." or ".." part, not absolute)
                    if any(x in ("", ".", "..") or "\\" in x or "\0" in x for x in parts) \
                            or (not self.package and rel != f"{self.name}.py"):
                        raise ConfigFileError(f"app bundle {self.name!r}: refused file path {rel!r:.120}")
                    dest = base.joinpath(*parts)
                    dest.parent.mkdir(parents=True, exist_ok=True)
                    dest.write_bytes(data)
                try:
                    os.rename(tmp, home)  # (atomic: another trainer of this machine may have won the race)
                except OSError:
                    if not home.is_dir():
                        raise
            finally:
                if tmp.exists():
                    shutil.rmtree(tmp, ignore_errors=True)
        return load_app(target, expect=(self.name, self.digest), what=what)


def _holds(target: Path, digest: str) -> bool:
    try:
        return target.exists() and app_digest(target) == digest
    except (OSError, ConfigFileError):
        return False


def _private_dir(root: Path) -> None:
    """Make ``root`` (mode 0700) or check that it is a directory of this user that nobody else can write."""
    try:
        root.mkdir(mode=0o700, exist_ok=True)
        st = os.lstat(root)
    except OSError as e:
        raise ConfigFileError(f"{root}: cannot make the app cache: {e.strerror or e}") from None
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o022:
        raise ConfigFileError(f"{root}: the app cache must be a directory of this user that others cannot write")


def bundle_app(app: App) -> AppBundle:
    """The files of ``app`` (loaded from a path) as an :class:`AppBundle`; refused (one line) for an installed
    entry point (install it on every machine instead) or files changed since it was loaded."""
    src = Path(app.source)
    if not src.exists():
        raise ConfigFileError(f"app {app.name!r} ({app.source}): not a path whose files can be sent; install it on "
                              f"every machine")
    files = tuple((rel, p.read_bytes()) for rel, p in _files(src))
    if _digest(files) != app.digest:
        raise ConfigFileError(f"app {app.name!r} ({app.source}) changed since it was loaded (its digest differs)")
    return AppBundle(name=app.name, digest=app.digest, package=src.is_dir(), files=files)


def pin_of(params: Mapping[str, Any]) -> tuple[str, str] | None:
    """The app a genesis' ``protocol.params`` pins, ``(name, digest)``, or None; raises ``ValueError`` for a
    malformed pin."""
    pin = params.get(APP_KEY)
    if pin is None:
        return None
    if not isinstance(pin, Mapping) or set(pin) != {"name", "digest"}:
        raise ValueError(f"protocol.params.{APP_KEY} must be a table with name and digest, got {pin!r:.80}")
    name, digest = pin["name"], pin["digest"]
    if not isinstance(name, str) or not _NAME.match(name) or not isinstance(digest, str) or not _DIGEST.match(digest):
        raise ValueError(f"protocol.params.{APP_KEY}: name must be a Python identifier and digest 64 hex digits, "
                         f"got {pin!r:.120}")
    return name, digest


def app_pin(app: App) -> dict[str, Any]:
    """``{"app": {name, digest}}``: what :func:`pin_of` reads back, for a genesis' ``protocol.params``."""
    return {APP_KEY: app.pin()}


def check_app(params: Mapping[str, Any], app: App | None, *, what: str = "the genesis") -> None:
    """Refuse, with one line naming both digests, an app that is not the one ``params`` pins; also a pinned app
    not given, and an app given where none is pinned."""
    pin = pin_of(params)
    if pin is None:
        if app is not None:
            raise ConfigFileError(f"app {app.name!r} ({app.source}): {what} pins no app")
        return
    name, digest = pin
    if app is None:
        raise ConfigFileError(f"{what} pins app {name!r} (digest {digest}): give it with --app PATH (or install it)")
    if (app.name, app.digest) != (name, digest):
        raise ConfigFileError(f"app {app.name!r} ({app.source}) has digest {app.digest}, but {what} pins app {name!r} "
                              f"with digest {digest}")


def load_pinned_app(params: Mapping[str, Any], path: str | os.PathLike[str] | None, *, what: str = "the genesis") -> App | None:
    """The app ``params`` pins, loaded from ``path`` if given, else the one of that name this process loaded, else
    from an installed distribution of that name, and checked (:func:`check_app`); None when nothing is pinned (and ``path`` is None). Raises
    :class:`ConfigFileError` with one line otherwise."""
    pin = pin_of(params)
    app = load_app(path, expect=pin, what=what) if path is not None else None
    if app is None and pin is not None:
        # (this process loaded it already: a run's own audit)
        app = _LOADED.get(pin[0]) or _load_entry_point(pin[0], pin[1], what)
    check_app(params, app, what=what)
    return app


def app_beside(ledger: str | os.PathLike[str]) -> Path | None:
    """The app a results folder's ``scenario.toml`` names (``sim run`` and ``testnet`` copy the app beside it), for
    the ledger in that folder; None if there is none."""
    p = Path(ledger)
    return app_of_scenario((p.parent if p.is_file() else p).parent / "scenario.toml")


def app_of_scenario(scenario: str | os.PathLike[str]) -> Path | None:
    """The app a scenario file names (its ``app`` key, resolved against the file's folder), read without loading
    the scenario (which would import it); None if it names none or cannot be read."""
    import tomllib  # noqa: PLC0415

    f = Path(scenario)
    try:
        app = tomllib.loads(f.read_text(encoding="utf-8")).get(APP_KEY) if f.is_file() else None
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return None
    return (f.parent / app).resolve() if isinstance(app, str) and app else None


def copy_app(app: App, dest: Path) -> str:
    """Copy ``app`` (loaded from a path) into the folder ``dest`` (``dest/<file>`` or ``dest/<package>/``, the
    files its digest covers); return its path relative to ``dest``'s parent, for a ``scenario.toml`` there."""
    import shutil  # noqa: PLC0415

    src = Path(app.source)
    if not src.exists():
        raise ConfigFileError(f"app {app.name!r}: {app.source} is not a path that can be copied")
    dest.mkdir(parents=True, exist_ok=True)
    target = dest / src.name
    if src.is_file():
        shutil.copyfile(src, target)
    else:
        for rel, f in _files(src):
            (target / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(f, target / rel)
    if app_digest(target) != app.digest:
        raise ConfigFileError(f"app {app.name!r}: its copy in {dest} has another digest (did it change meanwhile?)")
    return f"{dest.name}/{src.name}"
