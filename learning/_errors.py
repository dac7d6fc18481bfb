"""Errors raised by the learning layer.

Hierarchy::

    LearningError                 base of everything ``learning`` raises on bad input or configuration
    ├── DataError                 a dataset that is missing (names the expected files) or malformed
    ├── ConfigError               an unknown registry name, a bad hyper-parameter, an ``f`` out of bounds
    └── InvalidUpdateError        an update that is not finite, of the wrong shape or dtype (a peer fault)

``ConfigError`` also derives from ``ValueError`` (ByzFL raises ``ValueError`` for a bad ``f``; callers that
catch that keep working). Anything else escaping ``learning`` is a bug in concilium.
"""

from __future__ import annotations

__all__ = ["ConfigError", "DataError", "InvalidUpdateError", "LearningError"]


class LearningError(Exception):
    """Base class of learning-layer errors."""


class DataError(LearningError):
    """A dataset is missing or malformed."""


class ConfigError(LearningError, ValueError):
    """A configuration value is invalid (unknown name, out-of-range parameter, bad ``f``)."""


class InvalidUpdateError(LearningError, ValueError):
    """An update is non-finite or has the wrong shape/dtype."""
