"""Canonical encoding: msgpack with sorted keys, minimal widths, no floats that are not finite.

Every hashed or signed byte string in concilium is ``encode(value)`` for a *canonical value*:

* ``None``, ``bool``, ``int`` in ``[-2**63, 2**64)``, ``str``, ``bytes``, finite ``float`` (always
  float64 on the wire);
* ``tuple``/``list`` of canonical values (encoded as msgpack arrays; decoded as tuples);
* ``dict`` with ``str`` keys (encoded with keys in sorted order; decoded as read-only mappings).

``decode`` is strict: it accepts exactly the bytes that ``encode`` produces for some canonical value
(CometBFT's canonical sign bytes, but enforced on input too): unsorted or duplicate keys, non-minimal
integers, float32, ext types, non-UTF-8 strings, trailing bytes and nesting deeper than
``DEPTH_MAX`` all raise :class:`DecodeError`. Nothing else escapes ``decode``.

Bounded decoding
----------------
msgpack builds about 80 bytes of Python objects per input byte of the worst input (a long array of empty
maps), so ``decode`` of a peer's 16 MiB would cost over a GiB and seconds of CPU before any check could refuse
it. ``decode(data, budget=Budget(...))`` first walks the bytes without building anything (:func:`scan`):
it counts the items (every value, every map key) and estimates the bytes of the objects msgpack would build,
and refuses the input as soon as either passes its budget, so a refused input costs at most
``budget.items`` steps of the walk and no memory. The walk also checks every header against the canonical
form (minimal integer and length widths, float64 only, no ext type, no reserved byte, str map keys, depth),
so a bounded decode does not re-pack the value to compare (which would copy a large blob once more); the
verdicts are the same as the unbounded path's (``tests/ledger/test_bounded_decode.py``).

Typed records
-------------
:func:`record` turns a frozen dataclass into a wire type: ``to_value()`` gives the canonical value
(a dict keyed by field name) and ``cls.from_value(v)`` rebuilds it with an exact field set and exact
types, so a peer can never smuggle extra keys or a ``True`` where an ``int`` is expected. A record class
also derives from :class:`Record`, which declares those methods for type checkers::

    @record
    @dataclass(frozen=True, slots=True, kw_only=True)
    class Vote(Record):
        height: int
"""

from __future__ import annotations

import dataclasses
import functools
import math
import re
import types
import typing
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar, Self, TypeVar

import msgpack

from ledger._errors import DecodeError

__all__ = [
    "DEPTH_MAX",
    "Budget",
    "ENCODED_BYTES_MAX",
    "Record",
    "Value",
    "decode",
    "decode_record",
    "encode",
    "encode_large",
    "encode_record",
    "freeze",
    "record",
    "remembered",
    "scan",
]

DEPTH_MAX = 32
"""Deepest nesting of arrays/maps accepted by :func:`decode`."""

ENCODED_BYTES_MAX = 64 << 20
"""Largest byte string :func:`decode` accepts unless told otherwise (64 MiB)."""

_INT_MIN = -(2**63)
_INT_MAX = 2**64 - 1

Value = Any
"""A canonical value (see module docstring). Kept as ``Any`` for readability of signatures."""


def _canonical(value: Value, depth: int) -> Value:
    """Return ``value`` rebuilt for msgpack with sorted maps; raise TypeError/ValueError if not canonical."""
    # Order of checks: the common leaf types first (this walk is on the hot path of verification).
    t = type(value)
    if t is str or t is bytes or value is None or t is bool:
        return value
    if t is int:
        if not _INT_MIN <= value <= _INT_MAX:
            raise ValueError(f"integer out of the 64-bit range: {value}")
        return value
    if depth >= DEPTH_MAX:
        raise ValueError(f"nesting deeper than {DEPTH_MAX}")
    if t is tuple or t is list:
        return [_canonical(v, depth + 1) for v in value]
    if t is dict or t is types.MappingProxyType:
        out = {}
        for k in sorted(value):
            if type(k) is not str:
                raise TypeError(f"map keys must be str, got {type(k).__name__}")
            out[k] = _canonical(value[k], depth + 1)
        return out
    if t is float:
        if not math.isfinite(value):
            raise ValueError(f"non-finite float: {value!r}")
        return value
    if t is bytearray or t is memoryview:
        return bytes(value)
    raise TypeError(f"not a canonical value: {t.__name__}")


def encode(value: Value) -> bytes:
    """Return the canonical msgpack bytes of ``value``.

    Raises ``TypeError``/``ValueError`` for values that have no canonical form: that is a bug in
    the caller (our own data), not a peer fault, so it is not a ``LedgerError``.
    """
    return msgpack.packb(_canonical(value, 0), use_bin_type=True, use_single_float=False)


LARGE_BYTES = 1 << 20
"""Byte strings from this size on are copied once by :func:`encode_large` (a bin32 field: at least 65,536 bytes)."""


def encode_large(value: Value | Record) -> bytes:
    """:func:`encode` of ``value`` (or ``value.encode()`` of a record): the same bytes, made with each byte string of
    at least :data:`LARGE_BYTES` copied once instead of about three times (msgpack grows its buffer by doubling and
    copies it out). For an envelope carrying a 45 MB update or model, which a node encodes on its event loop: 50 ms
    becomes 23 ms (one 2-core AMD EPYC, the envelope alone).

    How: the value is packed with each large byte string replaced by a 16-byte marker, and the marker's bin8 field
    is then replaced by the string's bin32 field; a marker found other than exactly once (it would have to occur in
    the rest of the value by chance) falls back to packing the whole value."""
    tree = value._to_canonical(0) if isinstance(value, Record) else _canonical(value, 0)
    large: list[bytes] = []

    def swap(v: Value) -> Value:
        t = type(v)
        if t is bytes:
            if len(v) < LARGE_BYTES or len(v) >= 1 << 32:
                return v
            large.append(v)
            return _MARKER + (len(large) - 1).to_bytes(4, "big")
        if t is list or t is tuple:
            return [swap(x) for x in v]
        if t is dict:
            return {k: swap(x) for k, x in v.items()}
        return v

    small = swap(tree)
    if not large:
        return msgpack.packb(tree, use_bin_type=True, use_single_float=False)  # type: ignore[no-any-return]
    out: bytes = msgpack.packb(small, use_bin_type=True, use_single_float=False)
    found = []
    for i, blob in enumerate(large):
        field = b"\xc4\x10" + _MARKER + i.to_bytes(4, "big")
        at = out.find(field)
        if at < 0 or out.find(field, at + 1) >= 0:
            return msgpack.packb(tree, use_bin_type=True, use_single_float=False)  # type: ignore[no-any-return]
        found.append((at, blob, len(field)))
    pieces: list[bytes] = []
    pos = 0
    for at, blob, width in sorted(found, key=lambda f: f[0]):
        pieces += (out[pos:at], b"\xc6", len(blob).to_bytes(4, "big"), blob)
        pos = at + width
    pieces.append(out[pos:])
    return b"".join(pieces)


_MARKER = b"\x00concilium\xff\xfe"  # (12 bytes, and a 4-byte index: 16)


def _check_decoded(value: Value, depth: int) -> None:
    """Raise TypeError/ValueError unless the freshly unpacked ``value`` is canonical in what re-packing it
    cannot show: map keys are str in sorted order, floats are finite, nesting is at most ``DEPTH_MAX``.

    (Integer width, float width, duplicate keys and trailing bytes show as a difference between the input
    and ``packb(value)``; msgpack's integers are all within the canonical range.) The same verdicts as
    comparing with ``encode(value)``, without rebuilding the tree: this is the hot path of every decode."""
    t = type(value)
    if t is tuple:
        items: Any = value
    elif t is dict:
        items = value.values()
        first, prev = True, ""
        for k in value:
            if type(k) is not str:
                raise TypeError(f"map keys must be str, got {type(k).__name__}")
            if not first and k <= prev:
                raise ValueError("map keys are not in sorted order")
            first, prev = False, k
    elif t is float:
        if not math.isfinite(value):
            raise ValueError(f"non-finite float: {value!r}")
        return
    elif t in _LEAVES:
        return
    else:
        raise TypeError(f"not a canonical value: {t.__name__}")
    if depth >= DEPTH_MAX:
        raise ValueError(f"nesting deeper than {DEPTH_MAX}")
    for v in items:  # the leaves here, without a call each
        tv = type(v)
        if tv is tuple or tv is dict:
            _check_decoded(v, depth + 1)
        elif tv is float:
            if not math.isfinite(v):
                raise ValueError(f"non-finite float: {v!r}")
        elif tv not in _LEAVES:
            raise TypeError(f"not a canonical value: {tv.__name__}")


_LEAVES = frozenset({str, bytes, int, bool, type(None)})


def _reject_ext(code: int, data: bytes) -> Any:
    raise ValueError(f"msgpack ext type {code} is not allowed")


_SILENT_ERRORS: tuple[tuple[type[BaseException], str], ...] = (
    (msgpack.exceptions.FormatError, "a reserved type byte (0xc1)"),
    (msgpack.exceptions.StackError, f"nesting deeper than {DEPTH_MAX}"),
    (msgpack.exceptions.OutOfData, "truncated input"),
    (MemoryError, "a length beyond the memory available"),
)
"""Reasons for the errors that msgpack (or the interpreter) raises with an empty message."""


def _reason(e: BaseException) -> str:
    """What ``e`` says went wrong, never empty (a "malformed encoding" message always names a reason)."""
    text = str(e)
    if text:
        return text
    for kind, why in _SILENT_ERRORS:
        if isinstance(e, kind):
            return why
    return type(e).__name__


def freeze(value: Value) -> Value:
    """Make a decoded value immutable: tuples stay, maps become read-only mappings."""
    if type(value) is dict:
        return types.MappingProxyType({k: freeze(v) for k, v in value.items()})
    if type(value) is tuple:
        return tuple(freeze(v) for v in value)
    return value


@dataclasses.dataclass(frozen=True, slots=True)
class Budget:
    """What one bounded :func:`decode` may build: at most ``items`` msgpack items (values and map keys), whose
    Python objects take at most ``cost`` bytes by :func:`scan`'s estimate (an upper bound for CPython 3.11-3.13
    on 64-bit: containers, non-cached ints and floats, strings and byte strings with their headers)."""

    items: int
    cost: int


# The estimate of the Python objects msgpack builds (bytes, 64-bit CPython, the GC header included), kept an
# upper bound (``tests/ledger/test_bounded_decode.py`` checks it against tracemalloc): a tuple of n > 0 items
# (the empty tuple is shared); a dict of n entries (its table grows in steps: at most 38 bytes an entry just past
# one); a str of k > 1 bytes of UTF-8 (shorter ones are shared), ASCII or not (one non-ASCII character can widen
# every other to 4 bytes); bytes of k > 1; an int outside CPython's small-int cache; a float.
_COST_TUPLE, _COST_SLOT = 56, 8
_COST_DICT_EMPTY, _COST_DICT_SMALL, _COST_DICT, _COST_ENTRY = 64, 192, 64, 38
_COST_ASCII, _COST_STR, _COST_STR_PER_BYTE = 56, 80, 4
_COST_BYTES, _COST_INT, _COST_FLOAT = 40, 36, 32
_NON_ASCII = re.compile(rb"[\x80-\xff]")


def scan(data: bytes | bytearray | memoryview, budget: Budget, *, depth_max: int = DEPTH_MAX) -> int:
    """Walk ``data`` as one msgpack value without building it; return the estimated bytes of its objects.

    Raises :class:`DecodeError` unless ``data`` is exactly one value in canonical form as far as its bytes show
    without decoding them (what :func:`encode` writes: minimal widths for integers and lengths, float64 and
    finite, no ext type, str map keys in strictly increasing order), nested at most ``depth_max`` deep, with at
    most ``budget.items`` items whose objects take at most ``budget.cost`` bytes by the estimate. Every
    container's items are counted on its header, so the walk stops before it visits more than ``budget.items``
    items, whatever the input's size. Only the str contents' UTF-8 is left to the decode that follows."""
    if type(data) is memoryview:
        data = data.tobytes()  # (its slices have no isascii)
    n = len(data)
    items_max, cost_max = budget.items, budget.cost
    pos = cost = 0
    items = 1  # the items announced so far: the top-level value, then every container's on its header
    stack: list[tuple[int, bytes | None]] = []  # the enclosing containers: (items left, last key of a map)
    left = 1  # items left in the current container (the top level holds one value); < 0: a map
    last: bytes | None = None  # the current map's last key, as UTF-8 (whose byte order is str order)
    is_key = False
    while True:
        if left == 0:
            if not stack:
                break
            left, last = stack.pop()
            continue
        if pos >= n:
            raise DecodeError("malformed encoding: truncated input")
        b = data[pos]
        if left > 0:
            left -= 1
        else:
            left += 1
            is_key = bool(left & 1)  # an odd count left: this item is a key
            if is_key and not (0xA0 <= b <= 0xBF or 0xD9 <= b <= 0xDB):
                raise DecodeError("malformed encoding: map keys must be str")
        if b <= 0x7F or b >= 0xE0:  # fixint, negative fixint
            pos += 1
            if 0xE0 <= b < 0xFB:  # below -5: not a cached int
                cost += _COST_INT
            continue
        if b <= 0x9F:  # fixmap, fixarray
            k = b & 0x0F
            pos += 1
            is_map = b <= 0x8F
        elif b <= 0xBF or b == 0xC4 or b == 0xD9 or 0xC5 <= b <= 0xC6 or 0xDA <= b <= 0xDB:  # str and bin
            if b <= 0xBF:  # fixstr
                k = b & 0x1F
                pos += 1
            elif b == 0xC4 or b == 0xD9:  # bin8, str8
                if pos + 1 >= n:
                    raise DecodeError("malformed encoding: truncated input")
                k = data[pos + 1]
                if b == 0xD9 and k < 32:
                    raise DecodeError("not in canonical form (a length in a wider header than it needs)")
                pos += 2
            else:  # bin16/32, str16/32
                w = 2 if b == 0xC5 or b == 0xDA else 4
                k = int.from_bytes(data[pos + 1:pos + 1 + w], "big")
                if k < (0x100 if w == 2 else 0x10000):
                    raise DecodeError("not in canonical form (a length in a wider header than it needs)")
                pos += 1 + w
            if b >= 0xC4 and b <= 0xC6:  # bin
                if k > 1:
                    cost += _COST_BYTES + k
            elif is_key or k <= 256:
                text = data[pos:pos + k]
                if is_key:
                    if last is not None and text <= last:
                        raise DecodeError("not in canonical form (map keys unsorted or repeated)")
                    last, is_key = text, False
                if k > 1:
                    cost += _COST_ASCII + k if text.isascii() else _COST_STR + _COST_STR_PER_BYTE * k
            elif _NON_ASCII.search(data, pos, pos + k) is None:  # a long str: no copy to look at it
                cost += _COST_ASCII + k
            else:
                cost += _COST_STR + _COST_STR_PER_BYTE * k
            pos += k
            continue
        elif b == 0xC0 or b == 0xC2 or b == 0xC3:  # nil, false, true
            pos += 1
            continue
        elif b == 0xCB:  # float64
            if pos + 2 < n and data[pos + 1] & 0x7F == 0x7F and data[pos + 2] & 0xF0 == 0xF0:  # exponent all ones
                raise DecodeError("malformed encoding: non-finite float")
            pos += 9
            cost += _COST_FLOAT
            continue
        elif 0xCC <= b <= 0xD3:  # uint8/16/32/64, int8/16/32/64
            w = 1 << ((b - 0xCC) & 3)
            if b < 0xD0:
                v = int.from_bytes(data[pos + 1:pos + 1 + w], "big")
                wide = v < (0x80 if w == 1 else 1 << (4 * w))
            else:
                v = int.from_bytes(data[pos + 1:pos + 1 + w], "big", signed=True)
                wide = v >= (-32 if w == 1 else -(1 << (4 * w - 1)))
            if wide:
                raise DecodeError("not in canonical form (an integer in a wider header than it needs)")
            pos += 1 + w
            cost += _COST_INT
            continue
        elif 0xDC <= b <= 0xDF:  # array16/32, map16/32
            w = 2 if b & 1 == 0 else 4
            k = int.from_bytes(data[pos + 1:pos + 1 + w], "big")
            if k < (0x10 if w == 2 else 0x10000):
                raise DecodeError("not in canonical form (a length in a wider header than it needs)")
            pos += 1 + w
            is_map = b >= 0xDE
        elif b == 0xCA:
            raise DecodeError("not in canonical form (a float32)")
        elif b == 0xC1:
            raise DecodeError("malformed encoding: a reserved type byte (0xc1)")
        else:  # 0xc7-0xc9, 0xd4-0xd8
            raise DecodeError("malformed encoding: msgpack ext types are not allowed")
        # an array or a map of k entries: its items are counted (and paid for) on its header
        if len(stack) >= depth_max:
            raise DecodeError(f"malformed encoding: nesting deeper than {depth_max}")
        if is_map:
            cost += max(_COST_DICT_SMALL, _COST_DICT + _COST_ENTRY * k) if k else _COST_DICT_EMPTY
            k += k
        elif k:
            cost += _COST_TUPLE + _COST_SLOT * k
        items += k
        if k > n - pos:  # every item takes a byte at least
            raise DecodeError("malformed encoding: truncated input")
        if items > items_max or cost > cost_max:
            raise DecodeError(f"over the decode budget ({items_max} items, {cost_max} bytes of objects)")
        if k:
            stack.append((left, last))
            left = -k if is_map else k
            last = None
    if cost > cost_max:
        raise DecodeError(f"over the decode budget ({items_max} items, {cost_max} bytes of objects)")
    if pos != n:
        raise DecodeError("malformed encoding: truncated input" if pos > n else "malformed encoding: trailing bytes")
    return cost


def decode(data: bytes, *, bytes_max: int = ENCODED_BYTES_MAX, budget: Budget | None = None) -> Value:
    """Decode canonical bytes; the inverse of :func:`encode` on canonical values.

    Raises :class:`DecodeError` (only) for anything that is not exactly ``encode(v)`` for some ``v``.
    Maps come back as plain ``dict`` (sorted), arrays as ``tuple``. With a ``budget`` (for bytes from a peer),
    :func:`scan` refuses what would build more than it allows before anything is built (module docstring).
    """
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise DecodeError(f"expected bytes, got {type(data).__name__}")
    if len(data) > bytes_max:
        raise DecodeError(f"encoded value of {len(data)} bytes exceeds the limit of {bytes_max}")
    if len(data) == 0:
        raise DecodeError("empty input")
    limits = {}
    if budget is not None:
        scan(data, budget)
        limits = {"max_array_len": budget.items, "max_map_len": budget.items}  # (the scan's bounds, again)
    try:
        value = msgpack.unpackb(
            data,
            raw=False,
            use_list=False,
            strict_map_key=True,
            ext_hook=_reject_ext,
            timestamp=0,
            **limits,
        )
        if budget is not None:
            return value  # the scan checked what re-packing and _check_decoded would show (module docstring)
        _check_decoded(value, 0)
        again = msgpack.packb(value, use_bin_type=True, use_single_float=False)
    except DecodeError:
        raise
    except (ValueError, TypeError, UnicodeDecodeError, OverflowError, RecursionError, MemoryError) as e:
        # msgpack's ExtraData, FormatError, StackError and OutOfData all derive from ValueError.
        raise DecodeError(f"malformed encoding: {_reason(e)}") from None
    except Exception as e:  # noqa: BLE001 - msgpack raises a few odd types on hostile input
        raise DecodeError(f"malformed encoding: {type(e).__name__}" + (f": {e}" if str(e) else "")) from None
    if again != bytes(data):
        raise DecodeError("not in canonical form (key order, integer width, float width or duplicates)")
    return value


# ---------------------------------------------------------------------------------------------
# Typed records
# ---------------------------------------------------------------------------------------------

T = TypeVar("T")


class Record:
    """Base of every :func:`record` class; it only tells type checkers what the decorator adds.

    ``Vote.decode(data)`` is then a ``Vote`` and ``vote.encode()`` is ``bytes``, and a misspelt method is an
    error. The methods themselves are the decorator's closures, set on each record class (so the base adds no
    step to a call), and ``hasattr(tp, "_record_fields")`` still says whether ``tp`` went through :func:`record`.

    The base's two slots are the record's own memos, unset until first used and never part of its fields (so not
    of its equality, hash, pickle or ``dataclasses.replace``): ``_encoded``, the bytes :meth:`encode` returned
    (one block header, commitment or vote is hashed or signed by many code paths and, in a simulation, by every
    node that shares the decoded object), and ``_remembered``, the results of :func:`remembered` functions of
    the record. A memo kept on the frozen record it describes lives and dies with it: no process-wide table.
    """

    __slots__ = ("_encoded", "_remembered")

    if TYPE_CHECKING:
        _record_fields: ClassVar[tuple[str, ...]]
        """The field names, sorted (the order of the wire map)."""

        def to_value(self) -> dict[str, Value]:
            """The canonical value: a dict keyed by field name (nested records as dicts too)."""
            ...

        def encode(self) -> bytes:
            """``encode(self.to_value())``, canonical bytes (remembered by identity for small records)."""
            ...

        @classmethod
        def from_value(cls, v: Value) -> Self:
            """Rebuild from a canonical value: exact field set, exact types; :class:`DecodeError` otherwise."""
            ...

        @classmethod
        def decode(cls, data: bytes, *, bytes_max: int = ENCODED_BYTES_MAX, budget: Budget | None = None) -> Self:
            """``cls.from_value(decode(data, ...))``: strict, and only :class:`DecodeError` escapes."""
            ...

        def _to_canonical(self, depth: int = 0) -> dict[str, Value]: ...

        @classmethod
        def _from_value(cls, v: Value, path: _Path = "") -> Self: ...


R = TypeVar("R", bound=Record)

_ENCODED_ITEM_MAX = 16384
"""Bigger encodings (update packets with their blobs) are not kept on their record: packing them is a copy, not a
walk."""


def remembered(fn: Callable[[Any], T]) -> Callable[[Any], T]:
    """Remember a pure function of one frozen record on the record (its ``_remembered`` slot, see :class:`Record`),
    for results that walk a big record more than once, e.g. the hash and the first committee of a genesis of
    10,000 members. A record of a class without the slot (one not derived from :class:`Record`) is not
    remembered: ``fn`` runs each time."""

    @functools.wraps(fn)
    def remembering(obj: Any) -> T:
        try:
            memo = obj._remembered
        except AttributeError:
            if not isinstance(getattr(type(obj), "_remembered", None), types.MemberDescriptorType):
                return fn(obj)
            memo = {}
            object.__setattr__(obj, "_remembered", memo)
        try:
            return memo[fn]  # type: ignore[no-any-return]
        except KeyError:
            out = memo[fn] = fn(obj)
            return out

    return remembering


_Path = Any
"""Where a value sits in the record being decoded, for error messages only: a str (the root), or
``(parent, field name)`` / ``(parent, index)``, rendered by :func:`_path` when an error is raised (building
the text for every field of every decoded record cost as much as the checks)."""


_Conv = tuple[Callable[[Any], Value], Callable[[Any, _Path], Any]]  # (to_value, from_value(v, path))


def _path(path: _Path) -> str:
    if type(path) is str:
        return path
    parent, part = path
    return f"{_path(parent)}[{part}]" if type(part) is int else f"{_path(parent)}.{part}"


def _fail(path: _Path, what: str, v: Any) -> typing.NoReturn:
    raise DecodeError(f"{_path(path)}: expected {what}, got {type(v).__name__}")


def _scalar_conv(py: type) -> _Conv:
    name = py.__name__

    def to_v(x: Any) -> Value:
        return x

    def from_v(v: Any, path: _Path) -> Any:
        if type(v) is not py:
            _fail(path, name, v)
        return v

    return to_v, from_v


def _any_conv() -> _Conv:
    def from_v(v: Any, path: _Path) -> Any:
        return freeze(v)

    return _canonical_passthrough, from_v


def _canonical_passthrough(x: Any) -> Value:
    return x


def _tuple_conv(inner: _Conv) -> _Conv:
    ito, ifrom = inner

    def to_v(x: Any) -> Value:
        return [ito(e) for e in x]

    def from_v(v: Any, path: _Path) -> Any:
        if type(v) is not tuple:
            _fail(path, "array", v)
        return tuple(ifrom(e, (path, i)) for i, e in enumerate(v))

    return to_v, from_v


def _optional_conv(inner: _Conv) -> _Conv:
    ito, ifrom = inner

    def to_v(x: Any) -> Value:
        return None if x is None else ito(x)

    def from_v(v: Any, path: _Path) -> Any:
        return None if v is None else ifrom(v, path)

    return to_v, from_v


def _mapping_conv() -> _Conv:
    def to_v(x: Any) -> Value:
        return dict(x)

    def from_v(v: Any, path: _Path) -> Any:
        if type(v) is not dict:
            _fail(path, "map", v)
        return freeze(v)

    return to_v, from_v


def _record_conv(cls: Any) -> _Conv:
    def to_v(x: Any) -> Value:
        return x.to_value()

    def from_v(v: Any, path: _Path) -> Any:
        return cls._from_value(v, path)

    return to_v, from_v


_SCALARS = (int, str, bytes, bool, float)


def _conv_for(tp: Any) -> _Conv:
    if tp in _SCALARS:
        return _scalar_conv(tp)
    if tp is Any:
        return _any_conv()
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        return _tuple_conv(_conv_for(args[0]))
    if origin in (types.UnionType, typing.Union) and len(args) == 2 and type(None) in args:
        other = args[0] if args[1] is type(None) else args[1]
        return _optional_conv(_conv_for(other))
    if origin is Mapping or tp is Mapping:
        return _mapping_conv()
    if isinstance(tp, type) and hasattr(tp, "_record_fields"):
        return _record_conv(tp)
    raise TypeError(f"unsupported field type for a record: {tp!r}")


def _canon_for(tp: Any) -> Callable[[Any, int], Value]:
    """``x -> _canonical(to_v(x), depth)`` for a field of type ``tp``, in one walk: a record's field values
    are converted straight to their canonical form (same result as the two-step path, tested)."""
    if tp is int:
        def c_int(x: Any, depth: int) -> Value:
            if type(x) is int and _INT_MIN <= x <= _INT_MAX:
                return x
            return _canonical(x, depth)

        return c_int
    if tp in (str, bytes, bool):
        def c_leaf(x: Any, depth: int, _t: type = tp) -> Value:
            return x if type(x) is _t else _canonical(x, depth)

        return c_leaf
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        inner = _canon_for(args[0])

        def c_tuple(x: Any, depth: int) -> Value:
            if depth >= DEPTH_MAX:
                raise ValueError(f"nesting deeper than {DEPTH_MAX}")
            return [inner(e, depth + 1) for e in x]

        return c_tuple
    if origin in (types.UnionType, typing.Union) and len(args) == 2 and type(None) in args:
        inner = _canon_for(args[0] if args[1] is type(None) else args[1])

        def c_opt(x: Any, depth: int) -> Value:
            return None if x is None else inner(x, depth)

        return c_opt
    if isinstance(tp, type) and hasattr(tp, "_record_fields"):
        def c_rec(x: Any, depth: int) -> Value:
            return x._to_canonical(depth)

        return c_rec
    to_v = _conv_for(tp)[0]  # float, Any, Mapping: the general walk

    def c_any(x: Any, depth: int) -> Value:
        return _canonical(to_v(x), depth)

    return c_any


def record(cls: type[T]) -> type[T]:
    """Class decorator: make a frozen dataclass a canonical wire record.

    Adds ``to_value()``, ``encode()``, ``from_value(v)`` and ``decode(data)``; derive the class from
    :class:`Record` so that type checkers see them (a class that does not still works). Fields are encoded as a
    map keyed by field name, so field order in the class does not matter for the bytes. Validation of
    field *values* (lengths, ranges) belongs in ``__post_init__`` raising ``ValueError``; that is
    reported as a :class:`DecodeError` when the record comes from bytes.
    """
    if not dataclasses.is_dataclass(cls):
        raise TypeError("@record needs a dataclass")
    hints = typing.get_type_hints(cls)
    fields = [f.name for f in dataclasses.fields(cls)]
    convs: dict[str, _Conv] = {}
    field_set = frozenset(fields)
    order = sorted(fields)
    required = frozenset(
        f.name
        for f in dataclasses.fields(cls)
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    )

    canon: list[tuple[str, Callable[[Any, int], Value]]] = []
    plan: list[tuple[str, type | None, Callable[[Any, _Path], Any]]] = []  # decoding: (field, scalar type, conv)

    def ensure() -> dict[str, _Conv]:
        # Resolved lazily so records may refer to records defined later in the module.
        if not convs:
            for name in order:
                convs[name] = _conv_for(hints[name])
        return convs

    def _to_canonical(self: Any, depth: int = 0) -> dict[str, Value]:
        if not canon:
            canon.extend((name, _canon_for(hints[name])) for name in order)
        if depth >= DEPTH_MAX:
            raise ValueError(f"nesting deeper than {DEPTH_MAX}")
        return {name: c(getattr(self, name), depth + 1) for name, c in canon}

    def to_value(self: Any) -> dict[str, Value]:
        c = ensure()
        return {name: c[name][0](getattr(self, name)) for name in order}

    def _from_value(klass: Any, v: Any, path: _Path = "") -> Any:
        path = path or klass.__name__
        c = ensure()
        if type(v) is not dict:
            _fail(path, "map", v)
        keys = v.keys()
        if keys != field_set:
            extra = sorted(set(keys) - field_set)
            missing = sorted(required - set(keys))
            if extra:
                raise DecodeError(f"{_path(path)}: unknown field(s) {', '.join(extra)}")
            if missing:
                raise DecodeError(f"{_path(path)}: missing field(s) {', '.join(missing)}")
            raise DecodeError(f"{_path(path)}: fields with defaults must still be present on the wire")
        if not plan:
            plan.extend((name, hints[name] if hints[name] in _SCALARS else None, c[name][1]) for name in order)
        kwargs = {}
        for name, scalar, conv in plan:
            x = v[name]
            if scalar is None:
                kwargs[name] = conv(x, (path, name))
            elif type(x) is scalar:  # a scalar field, checked here (one call less per field)
                kwargs[name] = x
            else:
                _fail((path, name), scalar.__name__, x)
        try:
            return klass(**kwargs)
        except (ValueError, TypeError) as e:
            raise DecodeError(f"{_path(path)}: {e}") from None

    def from_value(klass: Any, v: Any) -> Any:
        return klass._from_value(v, klass.__name__)

    def encode_self(self: Any) -> bytes:
        try:
            return self._encoded  # type: ignore[no-any-return]
        except AttributeError:
            pass
        out = msgpack.packb(self._to_canonical(0), use_bin_type=True, use_single_float=False)
        if len(out) <= _ENCODED_ITEM_MAX and keeps_encoding:
            object.__setattr__(self, "_encoded", out)
        return out

    def decode_cls(klass: Any, data: bytes, *, bytes_max: int = ENCODED_BYTES_MAX, budget: Budget | None = None) -> Any:
        return klass._from_value(decode(data, bytes_max=bytes_max, budget=budget), klass.__name__)

    keeps_encoding = isinstance(getattr(cls, "_encoded", None), types.MemberDescriptorType)  # (the Record slot)
    target: Any = cls  # what Record declares, set here (a class not derived from Record gets them too)
    target._record_fields = tuple(order)
    target.to_value = to_value
    target._to_canonical = _to_canonical
    target._from_value = classmethod(_from_value)
    target.from_value = classmethod(from_value)
    target.encode = encode_self
    target.decode = classmethod(decode_cls)
    return cls


def encode_record(obj: Record) -> bytes:
    """``obj.encode()`` for any record (handy as a function)."""
    return obj.encode()


def decode_record(cls: type[R], data: bytes, *, bytes_max: int = ENCODED_BYTES_MAX, budget: Budget | None = None) -> R:
    """``cls.decode(data)`` for any record class (handy as a function)."""
    return cls.decode(data, bytes_max=bytes_max, budget=budget)
