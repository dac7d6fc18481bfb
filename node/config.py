"""Typed configuration from TOML: strict conversion into ledger/consensus/learning records.

:func:`record_from_toml` fills defaults for absent keys, rejects unknown keys and wrong types with the
key's dotted path, decodes ``bytes`` fields from hex, and reports validation errors of the record's
``__post_init__`` with the path of the table. It is the config boundary: names and loosely typed
TOML become frozen dataclasses here and nowhere else (docs/design.md, "Learning": registries resolved at the
config boundary).

Genesis files are TOML (``concilium genesis create`` writes them): :func:`load_genesis`,
:func:`dump_genesis`, :func:`save_genesis`.

Everything read here is bounded (file size, nesting depth, 64-bit integers, finite floats), so a hostile file
gets a one-line :class:`ConfigFileError`, never a ``RecursionError`` or an overflow deep inside a consumer.
:func:`write_file_atomic` is the one way the command line writes an output file.
"""

from __future__ import annotations

import dataclasses
import datetime
import ipaddress
import math
import os
import re
import secrets
import socket
import stat
import tomllib
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

import tomli_w

from ledger import Genesis, LedgerError, public_key_from_peer_id
from node._errors import ConfigFileError, NodeError, OutputPathError

__all__ = [
    "FAULT_KINDS",
    "AdversaryRole",
    "FaultConfig",
    "NodeConfig",
    "NodeDataConfig",
    "check_listen",
    "check_multiaddr",
    "dump_genesis",
    "load_genesis",
    "load_node_config",
    "load_toml",
    "record_from_toml",
    "record_to_toml",
    "save_genesis",
    "write_file_atomic",
]

T = TypeVar("T")

STATUS_FILE = "status.json"
"""A running node's last status, in its data dir (``concilium node status``, container health checks)."""
CONFIG_BYTES_MAX = 16 << 20
CONFIG_DEPTH_MAX = 32
"""Nesting of tables and arrays in a config file (the schemas need 4; tomllib recurses per level)."""
INT_MIN, INT_MAX = -(2**63), 2**64 - 1
"""The integers the canonical encoding carries (ledger/_encoding.py): anything wider is refused on load."""


def _check_int(v: int, path: str) -> int:
    if not INT_MIN <= v <= INT_MAX:
        raise _PathError(path, f"an integer of {v.bit_length()} bits is out of the 64-bit range")
    return v


def _check_float(v: float, path: str) -> float:
    if not math.isfinite(v):
        raise _PathError(path, f"must be a finite number, got {v}")
    return v


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
        return _check_int(v, path)
    if tp is float:
        if type(v) not in (int, float):
            raise _PathError(path, f"expected a number, got {type(v).__name__}")
        return _check_float(float(_check_int(v, path) if type(v) is int else v), path)
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
    return v  # integers and floats: the record's canonical encoding bounds them (64-bit, finite)


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
    """Parse a TOML file with bounded size and nesting; errors name the file.

    Only a regular file is read (``/dev/zero`` or a FIFO would never end), at most ``CONFIG_BYTES_MAX``
    bytes; tomllib recurses once per nesting level, so a deeply nested file is refused, not a crash."""
    p = Path(path)
    if not str(path):
        raise ConfigFileError(f"'': no {what} file named (empty path)")
    try:
        st = p.stat()
        if stat.S_ISDIR(st.st_mode):
            raise ConfigFileError(f"{p}: is a directory, expected a {what} file")
        if not stat.S_ISREG(st.st_mode):
            raise ConfigFileError(f"{p}: not a regular file, expected a {what} file")
        if st.st_size > CONFIG_BYTES_MAX:
            raise ConfigFileError(f"{p}: {st.st_size} bytes is too large for a {what} file")
        with open(p, "rb") as f:
            raw = f.read(CONFIG_BYTES_MAX + 1)
    except FileNotFoundError:
        raise ConfigFileError(f"{p}: no such {what} file") from None
    except OSError as e:
        raise ConfigFileError(f"{p}: cannot read: {e.strerror}") from None
    except ValueError:  # a NUL byte in the name
        raise ConfigFileError(f"{str(path)!r}: not a valid file name") from None
    if len(raw) > CONFIG_BYTES_MAX:
        raise ConfigFileError(f"{p}: too large for a {what} file")
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise ConfigFileError(f"{p}: not a TOML {what} file (not UTF-8 text)") from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigFileError(f"{p}: not a valid TOML {what} file: {e}") from None
    except (RecursionError, ValueError):  # ValueError: an integer literal longer than Python converts
        raise ConfigFileError(f"{p}: not a valid TOML {what} file (nested too deeply or a value too long)") from None
    if _depth(data) > CONFIG_DEPTH_MAX:
        raise ConfigFileError(f"{p}: tables and arrays nested more than {CONFIG_DEPTH_MAX} levels deep")
    return data


def _depth(value: Any) -> int:
    """Nesting depth of tables and arrays, without recursion."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        v, d = stack.pop()
        if isinstance(v, dict):
            v = list(v.values())
        if isinstance(v, list):
            deepest = max(deepest, d)
            stack.extend((x, d + 1) for x in v if isinstance(x, (dict, list)))
    return deepest


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
    genesis = record_from_toml(Genesis, data, source=str(path))
    for i, m in enumerate(genesis.members):
        for j, a in enumerate(m.addrs):
            try:
                check_multiaddr(a, peer_id=m.peer_id)
            except ValueError as e:
                raise ConfigFileError(f"{path}: members[{i}].addrs[{j}]: {e}") from None
    return genesis


_HOST_LABEL = re.compile(r"^(?!-)[A-Za-z0-9-]{1,63}(?<!-)$")
_PORT = re.compile(r"^[0-9]{1,5}$")


def check_multiaddr(addr: str, *, peer_id: str | None = None) -> None:
    """Raise ``ValueError`` unless ``addr`` is a dialable peer address:
    ``/ip4|ip6|dns|dns4|dns6/<host>/tcp|udp/<port>`` then optionally ``/quic-v1`` (udp), ``/ws`` or ``/wss``
    (tcp), and ``/p2p/<peer id>``, which must be the member's own ``peer_id`` when given.

    Parsed here (not in ``ledger``, which stores addresses as opaque text); where py-libp2p's ``multiaddr``
    package is installed it must accept the address too, so the runtime can dial what a genesis holds."""
    parts = addr.split("/")
    if len(parts) < 5 or parts[0] != "":
        raise ValueError(f"{addr!r:.80} is not a multiaddr /ip4|ip6|dns|dns4|dns6/HOST/tcp|udp/PORT[/p2p/ID]")
    proto, host, transport, port, *rest = parts[1:]
    if proto == "ip4" or proto == "ip6":
        try:
            (ipaddress.IPv4Address if proto == "ip4" else ipaddress.IPv6Address)(host)
        except ValueError:
            raise ValueError(f"{addr!r:.80}: {host!r:.60} is not an IPv{proto[2]} address") from None
    elif proto in ("dns", "dns4", "dns6"):
        labels = host.rstrip(".").split(".")
        if len(host) > 253 or not all(_HOST_LABEL.match(x) for x in labels):
            raise ValueError(f"{addr!r:.80}: {host!r:.60} is not a DNS name")
    else:
        raise ValueError(f"{addr!r:.80}: starts with /{proto:.20}, expected /ip4, /ip6, /dns, /dns4 or /dns6")
    if transport not in ("tcp", "udp"):
        raise ValueError(f"{addr!r:.80}: /{transport:.20} after the host, expected /tcp or /udp")
    if not _PORT.match(port) or not 1 <= int(port) <= 65535:
        raise ValueError(f"{addr!r:.80}: port {port!r:.20} is not in [1, 65535]")
    if rest[:1] in (["quic-v1"], ["ws"], ["wss"]):
        if (rest[0] == "quic-v1") != (transport == "udp"):
            raise ValueError(f"{addr!r:.80}: /{rest[0]} does not go over /{transport}")
        rest = rest[1:]
    if rest:
        if len(rest) != 2 or rest[0] != "p2p":
            raise ValueError(f"{addr!r:.80}: unexpected /{'/'.join(rest):.40} (only /p2p/<peer id> may follow)")
        try:
            public_key_from_peer_id(rest[1])
        except LedgerError as e:
            raise ValueError(f"{addr!r:.80}: /p2p/{rest[1]:.60}: {e}") from None
        if peer_id is not None and rest[1] != peer_id:
            raise ValueError(f"{addr!r:.80}: /p2p/ names another peer than this member ({peer_id})")
    try:
        from multiaddr import Multiaddr  # noqa: PLC0415 (py-libp2p's; the net extra)
    except ImportError:
        return
    try:
        Multiaddr(addr)
    except Exception as e:  # noqa: BLE001 - the package raises several types, all "not a multiaddr"
        raise ValueError(f"{addr!r:.80}: not a multiaddr ({str(e).splitlines()[0][:100]})") from None


def tcp_endpoint(addr: str) -> tuple[socket.AddressFamily, str, int] | None:
    """``(family, host, port)`` of an ``/ip4|ip6/HOST/tcp/PORT[/...]`` multiaddr (the host normalized), else None."""
    parts = addr.split("/")
    if len(parts) < 5 or parts[0] or parts[1] not in ("ip4", "ip6") or parts[3] != "tcp" or not parts[4].isdigit():
        return None
    try:
        host = str(ipaddress.ip_address(parts[2]))
    except ValueError:
        return None
    return (socket.AF_INET if parts[1] == "ip4" else socket.AF_INET6), host, int(parts[4])


def check_listen(addrs: typing.Iterable[str]) -> None:
    """Raise :class:`ConfigFileError` unless this host can listen on every TCP address of ``addrs`` with a fixed port:
    each is bound (``SO_REUSEADDR``, as trio's listeners) and released at once, so that ``node start`` refuses an
    address in use or not on this host before it creates or opens anything for writing (a failed start leaves the data
    directory as it was). A race with another process remains; the runtime checks again what its transport listens
    on."""
    for addr in addrs:
        ep = tcp_endpoint(addr)
        if ep is None or ep[2] == 0:
            continue
        family, host, port = ep
        with socket.socket(family, socket.SOCK_STREAM) as s:
            if os.name != "nt":
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind((host, port))
            except OSError as e:
                raise ConfigFileError(f"listen {addr}: cannot listen ({e.strerror or e})") from None


def dump_genesis(genesis: Genesis) -> str:
    """TOML text of ``genesis`` (round-trips through :func:`load_genesis` to an equal genesis)."""
    header = (
        "# concilium genesis: block 0 of the chain. Every member must hold an identical copy.\n"
        f"# genesis hash: {genesis.hash().hex()}\n\n"
    )
    return header + tomli_w.dumps(record_to_toml(genesis))


def save_genesis(genesis: Genesis, path: str | os.PathLike[str], *, overwrite: bool = False) -> None:
    """Write the genesis TOML atomically (:func:`write_file_atomic`)."""
    write_file_atomic(path, dump_genesis(genesis).encode(), overwrite=overwrite, error=ConfigFileError)


def write_file_atomic(
    path: str | os.PathLike[str],
    data: bytes,
    *,
    overwrite: bool,
    replace_link: bool | None = None,
    mode: int = 0o644,
    error: type[NodeError] = OutputPathError,
) -> None:
    """Write ``data`` to ``path`` through a temporary file beside it (fsync, rename, directory fsync), so a
    reader sees the old file or the new one, never a part of one.

    Refused with one ``error`` line naming the path, before anything is written: an empty name or one with a
    NUL byte, a directory (also with ``overwrite``), an existing file unless ``overwrite``, an existing
    symbolic link unless ``replace_link`` (default: ``overwrite``; the link itself is then replaced, never
    written through), a parent that is missing or not a directory. A write that fails (unwritable place,
    full disk) raises the same way and leaves no temporary file behind.
    """
    if replace_link is None:
        replace_link = overwrite
    p = output_path(path, "file", error=error)
    try:
        st = os.lstat(p)
    except FileNotFoundError:
        st = None
    except NotADirectoryError:
        raise error(f"{p}: {_non_dir_ancestor(p)} is not a directory") from None
    except OSError as e:
        raise error(f"{p}: cannot write: {e.strerror}") from None
    if st is not None:
        if stat.S_ISDIR(st.st_mode):
            raise error(f"{p}: is a directory")
        if stat.S_ISLNK(st.st_mode) and not replace_link:
            hint = "use --force to replace it" if not overwrite else "not replaced: write to the file itself"
            raise error(f"{p}: already exists (a symbolic link; {hint})")
        if not overwrite:
            raise error(f"{p}: already exists (a file; use --force to replace it)")
        if not (stat.S_ISREG(st.st_mode) or stat.S_ISLNK(st.st_mode)):
            raise error(f"{p}: exists and is not a regular file")
    parent = p.parent
    try:
        if not stat.S_ISDIR(os.stat(parent).st_mode):
            raise error(f"{p}: {parent} is not a directory")
    except FileNotFoundError:
        raise error(f"{p}: directory {parent} does not exist") from None
    except NotADirectoryError:
        raise error(f"{p}: {_non_dir_ancestor(parent)} is not a directory") from None
    except OSError as e:
        raise error(f"{p}: cannot write: {e.strerror}") from None
    tmp = parent / f".{p.name[:200]}.tmp-{secrets.token_hex(4)}"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
    except OSError as e:
        raise error(f"{p}: cannot write: {e.strerror}") from None
    try:
        try:
            if not mode & 0o077:  # a private file (a key): exactly ``mode``, whatever the umask
                os.fchmod(fd, mode)
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, p)
    except OSError as e:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise error(f"{p}: cannot write: {e.strerror}") from None
    _fsync_dir(parent)


def output_path(path: str | os.PathLike[str], what: str, *, error: type[NodeError] = OutputPathError) -> Path:
    """``path`` as a :class:`Path`, refused with one ``error`` line if it is empty or holds a NUL byte (which
    ``Path`` would take and the OS refuse later, after other things were written)."""
    name = os.fspath(path)
    if not name:
        raise error(f"'': empty {what} name")
    if "\0" in name:
        raise error(f"{name!r}: not a valid {what} name (NUL byte)")
    return Path(name)


def _non_dir_ancestor(p: Path) -> Path:
    """The nearest ancestor of ``p`` that exists and is not a directory (for ``ENOTDIR`` messages)."""
    for a in reversed(p.parents):
        try:
            if not stat.S_ISDIR(os.stat(a).st_mode):
                return a
        except OSError:
            break
    return p.parent


def _fsync_dir(d: Path) -> None:
    try:
        fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


# --- node config files (``concilium node start --config``) ---------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class NodeDataConfig:
    """A node's own training data: the ``[data]`` table of ``node.toml`` (``--data-path``, ``--data-format``).

    ``format`` is one of ``learning.LOCAL_FORMATS`` (npz, csv, imagefolder, idx, cifar10, leaf, hf-disk), checked
    when the node starts, with the file against the genesis' data contract (``node.world``). ``label`` and
    ``features`` name the label and feature column or key (defaults per format); ``validation`` is a fraction
    of the file held out (drawn with ``seed``) or a path in the same format; ``public`` the shared public split
    (``public_format``) that a strategy scoring on one (Sself, FedAsync's filter) needs."""

    path: str
    format: str
    label: str = ""
    features: str = ""
    validation: Any = 0.0
    seed: int = 0
    public: str = ""
    public_format: str = "npz"

    def __post_init__(self) -> None:
        if not self.path:
            raise ValueError("data.path is required (this node's own data: a file or a folder)")
        if not self.format:
            raise ValueError("data.format is required (npz, csv, imagefolder, idx, cifar10, leaf or hf-disk)")
        v = self.validation
        if type(v) is str:
            if not v:
                raise ValueError("data.validation: expected a fraction in [0, 1) or a path, found an empty string")
        elif type(v) not in (int, float) or not 0.0 <= float(v) < 1.0:
            raise ValueError(f"data.validation: expected a fraction in [0, 1) or a path, found {v!r:.40}")
        if not 0 <= self.seed < 2**63:
            raise ValueError(f"data.seed must be in [0, 2^63), got {self.seed}")

    def local_params(self) -> dict[str, Any]:
        """The ``learning.LocalData`` fields of this table."""
        return {"path": self.path, "format": self.format, "label": self.label, "features": self.features,
                "validation": self.validation if type(self.validation) is str else float(self.validation),
                "seed": self.seed}


FAULT_KINDS = ("drop", "delay", "corrupt", "equivocate", "clock", "skip_primary", "omit_rows", "grind")
"""The faults of ``node.adversary`` (a scenario's ``[[adversary.faults]]``, a node's ``[[adversary.faults]]``)."""
GRIND_TRIES_MAX = 1_000_000
"""A ``grind`` fault's block times per proposal (each a header hash: about a second of CPU per 100,000)."""
FAULT_DELAY_MS_MAX = 1e9
_MEMBER_TARGET = re.compile(r"^member:(0|[1-9][0-9]{0,5})$")


def _check(cond: bool, msg: str) -> None:
    if not cond:
        raise ValueError(msg)


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class FaultConfig:
    """A protocol fault: ``target`` = ``"coordinator"`` (the view-0 primary of each round from ``from_round`` to
    ``until_round``),
    ``"committee"`` (one member of the genesis committee), or ``"member:I"``.

    Kinds: ``drop`` (crash/silence), ``delay`` (``delay_ms`` extra on everything it sends), ``corrupt`` (a
    coordinator proposes a wrong aggregate, a committee member signs false scores, and it votes for
    anything), ``equivocate`` (sends different pBFT votes / score rows / updates to different peers), ``clock``
    (its clock runs ``skew_ms`` ahead, or behind if negative: it stamps its proposals with that time, which the
    validators refuse beyond their own clock plus the genesis' ``time_drift_ms``, and judges block times by it),
    ``skip_primary`` (its updates and score rows reach every validator but the view-0 primary: selective delivery),
    ``omit_rows`` (as a CMFL primary, it leaves one score row it holds out of its proposal to steer the election),
    ``grind`` (as a primary, it tries up to ``tries`` block times within the validators' drift for one whose hash
    would have made it the next primary under the former rule, which seeded the primary with the previous block's
    hash: ``node.adversary.ground_time``)."""

    target: str
    kind: str
    from_round: int = 1
    until_round: int = 0
    """The last round the fault lasts (0: to the end of the run)."""
    delay_ms: float = 0.0
    skew_ms: int = 0
    """A ``clock`` fault: how far its clock runs ahead (ms; negative: behind), in ``[-(2^63 - 1), 2^63 - 1]``."""
    tries: int = 0
    """A ``grind`` fault: block times it tries per proposal, in ``[1, GRIND_TRIES_MAX]``."""

    def __post_init__(self) -> None:
        from ledger import TIME_MS_MAX  # noqa: PLC0415

        _check(self.kind in FAULT_KINDS, f"kind must be one of {', '.join(FAULT_KINDS)}")
        _check(self.until_round == 0 or self.until_round >= self.from_round, "until_round must be 0 or >= from_round")
        ok = self.target in ("coordinator", "committee") or bool(_MEMBER_TARGET.match(self.target))
        _check(ok, "target must be coordinator, committee or member:I")
        _check(self.from_round >= 1, "from_round must be >= 1")
        _check(self.kind != "delay" or self.delay_ms > 0, "a delay fault needs delay_ms > 0")
        _check(0.0 <= self.delay_ms <= FAULT_DELAY_MS_MAX,
               f"delay_ms must be in [0, {FAULT_DELAY_MS_MAX:.0e}] ms, got {self.delay_ms}")
        _check(abs(self.skew_ms) <= TIME_MS_MAX, "skew_ms must be in [-(2^63 - 1), 2^63 - 1]")
        _check((self.kind == "clock") == (self.skew_ms != 0), "a clock fault needs skew_ms != 0, and only it takes one")
        _check(0 <= self.tries <= GRIND_TRIES_MAX, f"tries must be in [1, {GRIND_TRIES_MAX}]")
        _check((self.kind == "grind") == (self.tries != 0), "a grind fault needs tries >= 1, and only it takes one")


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class AdversaryRole:
    """The Byzantine part this node plays, for studies of attacks on a real network (``node.toml``'s
    ``[adversary]``; ``concilium testnet init|local`` writes it from a scenario's ``[adversary]``): the node's own
    choice, as in any real network. ``byzantine``: it attacks with ``attack`` (an update attack),
    ``data_attack`` and a claimed sample count ``n_samples`` from ``from_round`` on; ``faults``: the scenario's
    protocol faults, each applied where its target is this node (``node.adversary``)."""

    byzantine: bool = False
    attack: str = ""
    data_attack: str = ""
    from_round: int = 1
    n_samples: int = 0
    faults: tuple[FaultConfig, ...] = ()

    def __post_init__(self) -> None:
        _check(self.from_round >= 1, "adversary.from_round must be >= 1")
        _check(0 <= self.n_samples < 2**53, "adversary.n_samples must be in [0, 2^53 - 1] (0: the node's own count)")
        _check(not self.byzantine or bool(self.attack or self.data_attack or self.n_samples),
               "adversary.byzantine needs an attack, a data_attack or n_samples")


DEVICE_PATTERN = re.compile(r"^(auto|cpu|mps|cuda(:[0-9]{1,2})?)$")
"""A training device name: a scenario's ``training.device``, a node config's ``device``, ``--device``."""


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class NodeConfig:
    """A node's config file: relative paths are relative to the file's folder."""

    genesis: str
    key: str
    data_dir: str
    listen: tuple[str, ...] = ("/ip4/0.0.0.0/tcp/4001",)
    peers: tuple[str, ...] = ()
    """``/ip4/HOST/tcp/PORT/p2p/PEERID`` addresses of other members (beside the genesis ``addr=`` entries)."""
    log_format: str = "human"
    status_every_s: float = 5.0
    data: NodeDataConfig | None = None
    transport: Mapping[str, Any] | None = None
    """Overrides of ``node.runtime.TransportLimits`` (frame caps, timeouts, budgets), checked when the node
    starts: e.g. ``[transport] header_timeout_s = 60``."""
    device: str = ""
    """This node's training device: ``auto``, ``cpu``, ``cuda``, ``cuda:N`` or ``mps`` (default ``auto``: CUDA
    where present, else MPS, else the CPU); checked at start."""
    initial_model: str = ""
    """The genesis' initial model as a vector blob (``testnet init`` writes ``model0.bin``); without it the node
    re-derives θ_0 from the genesis' training seed and checks it against the genesis digest."""
    adversary: AdversaryRole | None = None
    reproducible: bool = False
    """Train in reproducible mode (``learning.reproducible``: the same training bits on any x86-64 CPU; the node
    restarts itself in the mode's environment)."""
    app: str = ""
    """The app the genesis pins (``node.apps``: a ``.py`` file or a package directory; default: an installed one
    of the pinned name)."""

    def __post_init__(self) -> None:
        if self.log_format not in ("human", "json"):
            raise ValueError(f"log_format must be 'human' or 'json', got {self.log_format!r:.40}")
        if not 0.1 <= self.status_every_s <= 86400:
            raise ValueError(f"status_every_s must be in [0.1, 86400], got {self.status_every_s}")
        if self.device and not DEVICE_PATTERN.match(self.device):
            raise ValueError(f"device must be auto, cpu, cuda, cuda:N or mps, got {self.device!r:.40}")
        for a in self.listen:
            check_multiaddr(a)
        for a in self.peers:
            check_multiaddr(a)
            if "/p2p/" not in a:
                raise ValueError(f"peer address {a!r:.80} must end in /p2p/<peer id>")


def load_node_config(path: str | os.PathLike[str]) -> NodeConfig:
    """Read a node config file; relative paths in it become relative to its folder."""
    p = Path(path)
    cfg = record_from_toml(NodeConfig, load_toml(p, what="node config"), source=str(p))
    base = p.parent

    def rel(x: str) -> str:
        return x if not x or os.path.isabs(x) else str(base / x)

    data = cfg.data
    if data is not None:
        data = dataclasses.replace(data, path=rel(data.path), public=rel(data.public),
                                   validation=rel(data.validation) if type(data.validation) is str else data.validation)
    return dataclasses.replace(cfg, genesis=rel(cfg.genesis), key=rel(cfg.key), data_dir=rel(cfg.data_dir), data=data,
                               app=rel(cfg.app), initial_model=rel(cfg.initial_model))
