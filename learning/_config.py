"""The configuration boundary's toolkit, shared by every subpackage of ``learning``.

Names (models, datasets, partitions, schedules, aggregators, attacks, availability models, strategies) are
resolved only here, at the boundary, into frozen typed config dataclasses (registries are explicit dicts filled by
decorators; no lookup by attribute name):

* :func:`register` fills a registry dict from a class decorator (``register_aggregator`` and friends wrap it);
* :func:`spec_from_mapping` builds a spec dataclass from a TOML table, strictly; :func:`take_params` picks a
  strategy's or an availability model's typed keys out of ``protocol.params``;
* :func:`parse_stages` / :func:`construct` / :func:`format_stage` read and write the ``"name(key=value) > ..."``
  spec strings of aggregator chains, attacks and availability models (``ast``, never ``eval``);
* ``check_*`` validate a frozen dataclass's field in ``__post_init__`` (raising :class:`ConfigError`) and store
  the normalised value.

Private to ``learning`` (other packages use the subpackages' ``*_spec`` / ``parse_*`` resolvers).
"""

from __future__ import annotations

import ast
import dataclasses
import math
from collections.abc import Callable, Mapping
from dataclasses import MISSING, fields
from typing import Any, TypeVar

import numpy as np

from learning._errors import ConfigError

__all__ = [
    "check_bool",
    "check_choice",
    "check_float",
    "check_int",
    "construct",
    "format_stage",
    "parse_stages",
    "register",
    "set_field",
    "spec_from_mapping",
    "take_params",
]

_T = TypeVar("_T")
_S = TypeVar("_S")


# ---------------------------------------------------------------------------------------------------------------
# Registries


def register(registry: dict[str, type], kind: str, name: str) -> Callable[[type[_T]], type[_T]]:
    """Class decorator filling ``registry[name]`` (sets ``cls.name``); ``name`` must be a new identifier."""
    if not name.isidentifier():
        raise ConfigError(f"{kind} name {name!r} is not an identifier")

    def decorate(cls: type[_T]) -> type[_T]:
        if name in registry:
            raise ConfigError(f"{kind} {name!r} is already registered (by {registry[name].__qualname__})")
        cls.name = name  # type: ignore[attr-defined]
        registry[name] = cls
        return cls

    return decorate


# ---------------------------------------------------------------------------------------------------------------
# Field validation (used in __post_init__ of every frozen config dataclass)


def set_field(obj: object, field: str, value: object) -> None:
    object.__setattr__(obj, field, value)


def check_int(obj: object, field: str, *, minimum: int = 0, optional: bool = False) -> None:
    value = getattr(obj, field)
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise ConfigError(f"{type(obj).__name__}.{field} must be an int, got {value!r}")
    if value < minimum:
        raise ConfigError(f"{type(obj).__name__}.{field} must be >= {minimum}, got {value}")
    set_field(obj, field, int(value))


def check_float(
    obj: object,
    field: str,
    *,
    minimum: float | None = None,
    exclusive_minimum: float | None = None,
    maximum: float | None = None,
    exclusive_maximum: float | None = None,
) -> None:
    value = getattr(obj, field)
    if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
        raise ConfigError(f"{type(obj).__name__}.{field} must be a number, got {value!r}")
    value = float(value)
    if not math.isfinite(value):
        raise ConfigError(f"{type(obj).__name__}.{field} must be finite, got {value}")
    bad = (
        (minimum is not None and value < minimum)
        or (exclusive_minimum is not None and value <= exclusive_minimum)
        or (maximum is not None and value > maximum)
        or (exclusive_maximum is not None and value >= exclusive_maximum)
    )
    if bad:
        bounds = []
        if minimum is not None:
            bounds.append(f">= {minimum}")
        if exclusive_minimum is not None:
            bounds.append(f"> {exclusive_minimum}")
        if maximum is not None:
            bounds.append(f"<= {maximum}")
        if exclusive_maximum is not None:
            bounds.append(f"< {exclusive_maximum}")
        raise ConfigError(f"{type(obj).__name__}.{field} must be {' and '.join(bounds)}, got {value}")
    set_field(obj, field, value)


def check_bool(obj: object, field: str) -> None:
    value = getattr(obj, field)
    if not isinstance(value, bool | np.bool_):
        raise ConfigError(f"{type(obj).__name__}.{field} must be a bool, got {value!r}")
    set_field(obj, field, bool(value))


def check_choice(obj: object, field: str, choices: tuple[str, ...]) -> None:
    value = getattr(obj, field)
    if value not in choices:
        raise ConfigError(f"{type(obj).__name__}.{field} must be one of {choices}, got {value!r}")


# ---------------------------------------------------------------------------------------------------------------
# Parameter tables


def spec_from_mapping(cls: type[_S], params: Mapping[str, object], *, what: str) -> _S:
    """Build the frozen spec dataclass ``cls`` from a mapping (a parsed TOML table), strictly.

    Unknown keys, missing required keys and constructor errors become :class:`ConfigError` naming ``what``;
    lists become tuples (TOML has no tuples). Used by every ``*_spec(name, params)`` resolver of ``learning``.
    """
    known = {f.name: f for f in fields(cls)}  # type: ignore[arg-type]
    unknown = sorted(set(params) - set(known))
    if unknown:
        raise ConfigError(f"{what}: unknown parameter(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
    missing = sorted(
        n for n, f in known.items() if n not in params and f.default is MISSING and f.default_factory is MISSING
    )
    if missing:
        raise ConfigError(f"{what}: missing parameter(s) {', '.join(missing)}")
    values = {k: tuple(v) if isinstance(v, list) else v for k, v in params.items()}
    try:
        return cls(**values)
    except TypeError as exc:  # e.g. a positional-only mismatch; keep it a config error
        raise ConfigError(f"{what}: {exc}") from None


def take_params(params: Mapping[str, Any], allowed: dict[str, type], what: str) -> dict[str, Any]:
    """The keys of ``params`` named in ``allowed``, each checked against its type (an int is accepted for a
    float); other keys belong to other layers and are left out."""
    out: dict[str, Any] = {}
    for k, v in params.items():
        if k not in allowed:
            continue  # other keys belong to other layers (committee sizes, local training, ...)
        t = allowed[k]
        if t is float and type(v) is int:
            v = float(v)
        if type(v) is not t:
            raise ConfigError(f"{what}: parameter {k} must be {t.__name__}, got {type(v).__name__}")
        out[k] = v
    return out


# ---------------------------------------------------------------------------------------------------------------
# Spec strings: "name(key=value, ...)" stages, parsed with ast (no eval), shared by aggregators and attacks.


def _parse_stage(node: ast.expr, spec: str) -> tuple[str, dict[str, Any]]:
    if isinstance(node, ast.Name):
        return node.id, {}
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
        if node.args:
            raise ConfigError(f"{spec!r}: {node.func.id}(...) takes keyword arguments only (e.g. f=2)")
        kwargs: dict[str, Any] = {}
        for kw in node.keywords:
            if kw.arg is None:
                raise ConfigError(f"{spec!r}: ** is not allowed")
            if isinstance(kw.value, ast.Name) and kw.value.id in ("true", "false"):  # TOML's spelling, as scenarios use
                kwargs[kw.arg] = kw.value.id == "true"
                continue
            try:
                kwargs[kw.arg] = ast.literal_eval(kw.value)
            except ValueError:
                raise ConfigError(
                    f"{spec!r}: the value of {kw.arg} must be a literal (number, string, bool, None, tuple)"
                ) from None
        return node.func.id, kwargs
    raise ConfigError(f"{spec!r}: expected name or name(key=value, ...), got {ast.unparse(node)!r}")


def parse_stages(spec: str) -> list[tuple[str, dict[str, Any]]]:
    """Split ``"a(x=1) > b > c(y=2)"`` into ``[("a", {"x": 1}), ("b", {}), ("c", {"y": 2})]``."""
    if not isinstance(spec, str) or not spec.strip():
        raise ConfigError(f"expected a non-empty spec string, got {spec!r}")
    try:
        tree = ast.parse(spec.strip(), mode="eval").body
    except SyntaxError as exc:
        raise ConfigError(f"cannot parse {spec!r}: {exc.msg}") from None
    if isinstance(tree, ast.Compare):
        if not all(isinstance(op, ast.Gt) for op in tree.ops):
            raise ConfigError(f"{spec!r}: stages are chained with '>' only")
        nodes = [tree.left, *tree.comparators]
    else:
        nodes = [tree]
    return [_parse_stage(node, spec) for node in nodes]


def parse_spec(spec: str) -> tuple[str, dict[str, Any]]:
    """One ``"name(key=value, ...)"`` spec (a dataset, a partition, an attack) as ``(name, params)``."""
    stages = parse_stages(spec)
    if len(stages) != 1:
        raise ConfigError(f"{spec!r}: expected one name(key=value, ...), found {len(stages)} stages")
    return stages[0]


def construct(registry: dict[str, type], kind: str, name: str, kwargs: dict[str, Any]) -> Any:
    """Build a registered config dataclass from parsed keyword arguments (names checked against its fields)."""
    cls = registry.get(name)
    if cls is None:
        raise ConfigError(f"unknown {kind} {name!r}; known: {', '.join(sorted(registry))}")
    fields = {fld.name for fld in dataclasses.fields(cls) if fld.init}
    unknown = sorted(set(kwargs) - fields)
    if unknown:
        raise ConfigError(f"{kind} {name!r} has no parameter(s) {unknown}; parameters: {sorted(fields)}")
    try:
        return cls(**kwargs)
    except TypeError as exc:  # a missing required field
        raise ConfigError(f"{kind} {name!r}: {exc}") from None


def format_stage(obj: object) -> str:
    """Canonical ``name(field=value, ...)`` of a registered config dataclass (all init fields, in order)."""
    parts = [f"{fld.name}={getattr(obj, fld.name)!r}" for fld in dataclasses.fields(obj) if fld.init]  # type: ignore[arg-type]
    name = type(obj).name  # type: ignore[attr-defined]
    return f"{name}({', '.join(parts)})" if parts else name
