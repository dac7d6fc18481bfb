"""The ledger explorer: a read-only web view of a ledger (``concilium ledger serve``, or ``node start --http``).

Pages (server-rendered HTML): the overview (chain, genesis, height, head, accuracy per round), the blocks
table, one block (committee and signers, update commitments with inclusion proofs, score rows and
selection, model digest, evidence), one member's history, and the audit (``ledger verify``'s checks,
re-execution included, in a background thread with progress). ``/api/...`` serves the same data as JSON, and
a running node adds ``/status`` and ``/metrics`` (Prometheus text).

The data functions (:mod:`node.explorer._data`) are shared with the command line, which prints the same
documents; they need nothing beyond concilium's own dependencies. The web app needs the ``web`` extra
(Starlette, Jinja2, Hypercorn) and is imported only when it is built.
"""

from __future__ import annotations

from typing import Any

from node.explorer._data import (
    MOSTLY_REJECTED_MIN_ROUNDS,
    MOSTLY_REJECTED_SHARE,
    OUTLIER_DISTANCE_FACTOR,
    AuditOutcome,
    CannotReexecute,
    audit_ledger,
    block_page,
    block_rows,
    block_summary,
    export_block,
    export_document,
    genesis_document,
    member_page,
    mostly_rejected,
    overview,
    proof_document,
    read_accuracy,
    rejection_counts,
    results_dir_for,
)
from node.explorer._serve import bind, host_names, parse_listen, serve_asyncio, url_of

__all__ = [
    "MOSTLY_REJECTED_MIN_ROUNDS",
    "MOSTLY_REJECTED_SHARE",
    "OUTLIER_DISTANCE_FACTOR",
    "AuditOutcome",
    "CannotReexecute",
    "audit_ledger",
    "bind",
    "block_page",
    "block_rows",
    "block_summary",
    "create_app",
    "export_block",
    "export_document",
    "genesis_document",
    "host_names",
    "member_page",
    "mostly_rejected",
    "overview",
    "parse_listen",
    "proof_document",
    "read_accuracy",
    "rejection_counts",
    "require_web",
    "results_dir_for",
    "serve_asyncio",
    "url_of",
]

WEB_EXTRA_HINT = "the explorer needs the web extra: pip install 'concilium[web]' (Starlette, Jinja2, Hypercorn)"


def require_web() -> None:
    """Raise ImportError with an install hint unless the web extra is installed."""
    from importlib import import_module  # noqa: PLC0415

    try:
        for name in ("hypercorn", "jinja2", "starlette"):
            import_module(name)
    except ImportError as e:
        raise ImportError(f"{WEB_EXTRA_HINT} ({e})") from None


def create_app(*args: Any, **kwargs: Any) -> Any:
    """:func:`node.explorer._app.create_app` (imports Starlette only when called)."""
    require_web()
    from node.explorer._app import create_app as _create  # noqa: PLC0415

    return _create(*args, **kwargs)
