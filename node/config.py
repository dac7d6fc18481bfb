"""Typed configuration from TOML: strict conversion into ledger/consensus/learning records.

:func:`record_from_toml` fills defaults for absent keys, rejects unknown keys and wrong types with the
key's dotted path, decodes ``bytes`` fields from hex, and reports validation errors of the record's
``__post_init__`` with the path of the table. It is the config boundary of STYLE.md: names and
loosely typed TOML become frozen dataclasses here and nowhere else.

Genesis files are TOML (``concilium genesis create`` writes them): :func:`load_genesis`,
:func:`dump_genesis`, :func:`save_genesis`.
"""

from __future__ import annotations

import dataclasses
import datetime
import os
import tomllib
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

import tomli_w

from ledger import Genesis, LedgerError
from node._errors import ConfigFileError

__all__ = ["dump_genesis", "load_genesis", "load_toml", "record_from_toml", "record_to_toml", "save_genesis"]

T = TypeVar("T")

CONFIG_BYTES_MAX = 16 << 20


class _PathError(Exception):
    def __init__(self, path: str, msg: str) -> None:
        super().__init__(f"{path}: {msg}" if path else msg)


def _convert(tp: Any, v: Any, path: str) -> Any:
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if tp is bytes:
        if not isinstance(v, str):
            raise _PathError(path, f"expected a hex string, got {type(v).__name__}")
        try:
            return bytes.fromhex(v)
        except ValueError:
            raise _PathError(path, "not a hex string") from None
    if tp is bool:
        if type(v) is not bool:
            raise _PathError(path, f"expected true/false, got {type(v).__name__}")
        return v
    if tp is int:
        if type(v) is not int:
            raise _PathError(path, f"expected an integer, got {type(v).__name__}")
        return v
    if tp is float:
        if type(v) not in (int, float):
            raise _PathError(path, f"expected a number, got {type(v).__name__}")
        return float(v)
    if tp is str:
        if type(v) is not str:
            raise _PathError(path, f"expected a string, got {type(v).__name__}")
        return v
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        if not isinstance(v, list):
            raise _PathError(path, f"expected an array, got {type(v).__name__}")
        return tuple(_convert(args[0], x, f"{path}[{i}]") for i, x in enumerate(v))
    if origin in (typing.Union, types.UnionType) and type(None) in args:
        if v is None:
            return None
        other = next(a for a in args if a is not type(None))
        return _convert(other, v, path)
    if tp is Any:
        return _plain(v, path)
    if origin is Mapping or tp is Mapping:
        if not isinstance(v, dict):
            raise _PathError(path, f"expected a table, got {type(v).__name__}")
        return _plain(v, path)
    if dataclasses.is_dataclass(tp):
        return _record(tp, v, path)
    raise TypeError(f"unsupported config field type {tp!r}")


def _plain(v: Any, path: str) -> Any:
    """A free-form TOML value as a canonical value (no dates/times: they have no canonical form)."""
    if isinstance(v, (datetime.date, datetime.time)):
        raise _PathError(path, "dates and times are not allowed here")
    if isinstance(v, dict):
        return {k: _plain(x, f"{path}.{k}") for k, x in v.items()}
    if isinstance(v, list):
        return tuple(_plain(x, f"{path}[{i}]") for i, x in enumerate(v))
    return v


def _record(cls: type, v: Any, path: str) -> Any:
    if not isinstance(v, dict):
        raise _PathError(path, f"expected a table, got {type(v).__name__}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(v) - set(fields))
    if unknown:
        where = f"{path}." if path else ""
        raise _PathError("", f"unknown field {where}{unknown[0]}" + (f" (and {len(unknown) - 1} more)" if len(unknown) > 1 else ""))
    kwargs = {}
    for name, f in fields.items():
        sub = f"{path}.{name}" if path else name
        if name in v:
            kwargs[name] = _convert(hints[name], v[name], sub)
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise _PathError("", f"missing field {sub}")
    try:
        return cls(**kwargs)
    except (ValueError, TypeError, LedgerError) as e:
        raise _PathError(path or cls.__name__, str(e)) from None


def record_from_toml(cls: type[T], data: Mapping[str, Any], *, source: str = "") -> T:
    """Build ``cls`` from parsed TOML ``data``; raises :class:`ConfigFileError` naming ``source`` and the key."""
    try:
        return _record(cls, dict(data), "")  # type: ignore[no-any-return]
    except _PathError as e:
        raise ConfigFileError(f"{source}: {e}" if source else str(e)) from None


def _to_toml_value(v: Any) -> Any:
    if isinstance(v, bytes):
        return v.hex()
    if isinstance(v, (tuple, list)):
        return [_to_toml_value(x) for x in v]
    if isinstance(v, Mapping):
        return {k: _to_toml_value(x) for k, x in v.items() if x is not None}
    return v


def record_to_toml(obj: Any) -> dict[str, Any]:
    """A record as a TOML-ready dict (bytes as hex, ``None`` fields omitted)."""
    return _to_toml_value(obj.to_value())  # type: ignore[no-any-return]


def load_toml(path: str | os.PathLike[str], *, what: str = "config") -> dict[str, Any]:
    """Parse a TOML file with bounded size; errors name the file."""
    p = Path(path)
    try:
        if p.is_dir():
            raise ConfigFileError(f"{p}: is a directory, expected a {what} file")
        size = p.stat().st_size
        if size > CONFIG_BYTES_MAX:
            raise ConfigFileError(f"{p}: {size} bytes is too large for a {what} file")
        raw = p.read_bytes()
    except FileNotFoundError:
        raise ConfigFileError(f"{p}: no such {what} file") from None
    except OSError as e:
        raise ConfigFileError(f"{p}: cannot read: {e.strerror}") from None
    try:
        return tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise ConfigFileError(f"{p}: not a TOML {what} file (not UTF-8 text)") from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigFileError(f"{p}: not a valid TOML {what} file: {e}") from None


def load_genesis(path: str | os.PathLike[str]) -> Genesis:
    """Load and validate a genesis TOML file (members may appear in any order; they are sorted)."""
    data = load_toml(path, what="genesis")
    members = data.get("members")
    if isinstance(members, list) and all(isinstance(m, dict) for m in members):
        ids = [m.get("peer_id") for m in members]
        dupes = sorted({i for i in ids if isinstance(i, str) and ids.count(i) > 1})
        if dupes:
            raise ConfigFileError(f"{path}: duplicate member {dupes[0]}")
        if all(isinstance(i, str) for i in ids):
            data["members"] = sorted(members, key=lambda m: m["peer_id"])
    return record_from_toml(Genesis, data, source=str(path))


def dump_genesis(genesis: Genesis) -> str:
    """TOML text of ``genesis`` (round-trips through :func:`load_genesis` to an equal genesis)."""
    header = (
        "# concilium genesis: block 0 of the chain. Every member must hold an identical copy.\n"
        f"# genesis hash: {genesis.hash().hex()}\n\n"
    )
    return header + tomli_w.dumps(record_to_toml(genesis))


def save_genesis(genesis: Genesis, path: str | os.PathLike[str], *, overwrite: bool = False) -> None:
    """Write the genesis TOML atomically."""
    p = Path(path)
    if p.exists() and not overwrite:
        raise ConfigFileError(f"{p}: already exists (refusing to overwrite)")
    text = dump_genesis(genesis)
    tmp = p.with_name(f".{p.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, p)
