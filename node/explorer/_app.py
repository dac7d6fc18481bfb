"""The explorer's ASGI application (Starlette): server-rendered pages, a JSON API and a running node's endpoints.

Read-only by construction: every request opens the ledger with ``open_ledger(readonly=True)`` (SQLite
``mode=ro``, nothing created beside it) and closes it before answering, so blocks that another process
appends show on the next request. No request names a file: the static assets are a fixed table loaded at
start, the results folder is read for ``metrics.csv`` only, and members and heights are looked up in the
ledger. Templates are Jinja2 with autoescaping on, and every page is sent with a Content-Security-Policy that
allows only this server's own script and styles.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable, Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Protocol

import jinja2
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route
from starlette.templating import Jinja2Templates

from ledger import LedgerError, make_proof, verify_proof
from ledger.store import CorruptStoreError, SqliteBlockStore, StoreError, open_ledger
from node.explorer._data import (
    MOSTLY_REJECTED_MIN_ROUNDS,
    MOSTLY_REJECTED_SHARE,
    AuditOutcome,
    audit_ledger,
    block_page,
    block_rows,
    block_summary,
    export_block,
    export_document,
    genesis_document,
    member_page,
    overview,
    proof_document,
    results_dir_for,
)
from node.explorer._metrics import CONTENT_TYPE, prometheus_text

__all__ = ["NodeProbe", "create_app"]

HERE = Path(__file__).parent
STATIC = {
    "uPlot.iife.min.js": "text/javascript; charset=utf-8",
    "uPlot.min.css": "text/css; charset=utf-8",
    "uPlot.LICENSE": "text/plain; charset=utf-8",
    "explorer.js": "text/javascript; charset=utf-8",
    "explorer.css": "text/css; charset=utf-8",
}
"""The only files the server hands out (loaded once at start; a request never names a path on disk)."""
PAGE_DEFAULT, PAGE_MAX = 50, 500
SECURITY_HEADERS = [
    (b"content-security-policy",
     b"default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
     b"base-uri 'none'; form-action 'self'; frame-ancestors 'none'"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"DENY"),
]
AUDIT_HEADER = "x-concilium-audit"
"""POST /api/audit needs this header: a page on another site cannot send it (no CORS here), so it cannot
make the explorer burn CPU on audits."""


class NodeProbe(Protocol):
    """What a running node shows at ``/status`` and ``/metrics`` (called on the node's event loop)."""

    def status(self) -> dict[str, Any]: ...

    def metrics(self) -> dict[str, Any]: ...


class _SecurityHeaders:
    """Pure ASGI middleware: the same security headers on every HTTP response."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Any) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), *SECURITY_HEADERS]}
            await send(message)

        await self.app(scope, receive, send_with_headers)


class AuditJob:
    """One audit at a time, in a background thread, with progress (``snapshot``) for the page to poll."""

    def __init__(self, run: Callable[..., AuditOutcome]) -> None:
        self._run_audit = run
        self._lock = threading.Lock()
        self._state = "idle"
        self._done = 0
        self._total = 0
        self._outcome: AuditOutcome | None = None
        self._error: str | None = None
        self._seconds = 0.0

    def start(self) -> bool:
        """Start an audit; False if one is running."""
        with self._lock:
            if self._state == "running":
                return False
            self._state, self._done, self._total, self._outcome, self._error = "running", 0, 0, None, None
        threading.Thread(target=self._work, name="concilium-audit", daemon=True).start()
        return True

    def _work(self) -> None:
        t0 = time.perf_counter()

        def started(total: int) -> None:
            self._total = total

        def advanced(h: int) -> None:
            self._done = h

        try:
            outcome = self._run_audit(on_start=started, on_block=advanced)
            error = None
        except (LedgerError, ValueError, OSError) as e:  # not a ledger that can be read, a bad genesis file...
            outcome, error = None, str(e)
        except Exception as e:  # noqa: BLE001 - a failed audit reports why; the server goes on
            outcome, error = None, f"{type(e).__name__}: {e}"
        with self._lock:
            self._outcome, self._error = outcome, error
            self._seconds = time.perf_counter() - t0
            self._state = "done"

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            o = self._outcome
            return {
                "state": self._state,
                "done": self._done,
                "total": self._total,
                "ok": None if o is None else o.ok,
                "status": None if o is None else o.status,
                "line": None if o is None else o.line,
                "first_bad_height": None if o is None else o.first_bad_height,
                "reason": None if o is None else o.reason,
                "error": self._error,
                "seconds": round(self._seconds, 3) if self._state == "done" else None,
            }


def _utc(ms: int) -> str:
    """A block's ``time_ms`` as a UTC date; any stored integer renders (a proposer may have written one past the
    calendar's range: then the number itself, in milliseconds)."""
    try:
        return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + " UTC"
    except (OverflowError, ValueError, OSError):
        return f"{ms} ms since 1970 (outside the calendar)"


def _templates() -> Jinja2Templates:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(HERE / "templates"),
        autoescape=True,  # every template, whatever its name
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["utc"] = _utc
    env.filters["short"] = lambda h, n=16: h[:n] if isinstance(h, str) else h
    env.filters["num"] = lambda x: f"{x:.6g}" if isinstance(x, float) else x
    return Jinja2Templates(env=env)


def create_app(
    ledger: str | os.PathLike[str],
    *,
    results: str | os.PathLike[str] | None = None,
    trusted_genesis: str | os.PathLike[str] | None = None,
    public_for: Callable[[Path], Any] | None = None,
    node: NodeProbe | None = None,
    allowed_hosts: list[str] | None = None,
    app: str | os.PathLike[str] | None = None,
) -> Starlette:
    """The explorer over the ledger at ``ledger`` (a directory or its ``chain.sqlite``; it may not exist yet
    when a node is about to create it).

    ``results``: a results folder with ``metrics.csv`` (default: the folder the ledger is in, if it has one).
    ``trusted_genesis``: a genesis file the audit compares the ledger's genesis with (``verify --genesis``).
    ``public_for``: what the audit uses to rebuild a public split (``audit_ledger``); ``app``: the app the genesis
    pins (``audit_ledger``). ``node``: a running node
    whose ``/status`` and ``/metrics`` to serve. ``allowed_hosts``: the Host headers accepted (DNS rebinding);
    None accepts any.
    """
    site = _Explorer(Path(ledger), results=results, trusted_genesis=trusted_genesis, public_for=public_for, node=node,
                     app=app)
    middleware = [Middleware(_SecurityHeaders)]
    if allowed_hosts is not None:
        middleware.append(Middleware(TrustedHostMiddleware, allowed_hosts=allowed_hosts))
    return Starlette(routes=site.routes(), middleware=middleware)


class _Explorer:
    """The endpoints of :func:`create_app` over one ledger: pages, the JSON API, the audit and a running node's."""

    def __init__(
        self,
        ledger_path: Path,
        *,
        results: str | os.PathLike[str] | None,
        trusted_genesis: str | os.PathLike[str] | None,
        public_for: Callable[[Path], Any] | None,
        node: NodeProbe | None,
        app: str | os.PathLike[str] | None,
    ) -> None:
        self.ledger_path = ledger_path
        self.results = results
        self.trusted_genesis = trusted_genesis
        self.node = node
        self.templates = _templates()
        self.static = {name: ((HERE / "static" / name).read_bytes(), mt) for name, mt in STATIC.items()}
        self.job = AuditJob(
            lambda **kw: audit_ledger(ledger_path, trusted_genesis=trusted_genesis, public_for=public_for, app=app, **kw)
        )
        self.nav = {"node": node is not None}

    def routes(self) -> list[Route]:
        view = self.view
        routes = [
            Route("/", view(self.overview_page)),
            Route("/blocks", view(self.blocks_page)),
            Route("/blocks/{height}", view(self.one_block)),
            Route("/members/{peer}", view(self.one_member)),
            Route("/audit", self.audit_page),
            Route("/static/{name}", self.static_file),
            Route("/favicon.ico", lambda request: Response(status_code=204)),
            Route("/api/overview", view(self.api_overview, api=True)),
            Route("/api/genesis", view(self.api_genesis, api=True)),
            Route("/api/blocks", view(self.api_blocks, api=True)),
            Route("/api/blocks/{height}", view(self.api_block, api=True)),
            Route("/api/blocks/{height}/summary", view(self.api_block_summary, api=True)),
            Route("/api/blocks/{height}/page", view(self.api_block_page, api=True)),
            Route("/api/export", view(self.api_export, api=True)),
            Route("/api/members/{peer}", view(self.api_member, api=True)),
            Route("/api/proof/{height}/{peer}", view(self.api_proof, api=True)),
            Route("/api/audit", self.api_audit, methods=["GET"]),
            Route("/api/audit", self.api_audit_start, methods=["POST"]),
        ]
        if self.node is not None:
            routes += [Route("/status", self.node_status), Route("/metrics", self.node_metrics)]
        return routes

    # --- plumbing -------------------------------------------------------------------------------

    def results_dir(self) -> Path | None:
        try:
            return results_dir_for(self.ledger_path, self.results)
        except StoreError:
            return None

    def open_store(self) -> SqliteBlockStore:
        store, _ = open_ledger(self.ledger_path, readonly=True, check_index=False)
        return store

    def page(self, request: Request, name: str, status: int = 200, **context: Any) -> Response:
        return self.templates.TemplateResponse(request, name, {"nav": self.nav, **context}, status_code=status)

    def failure(self, request: Request, e: Exception, *, api: bool) -> Response:
        if isinstance(e, CorruptStoreError):
            status, title, text = 422, "This ledger is invalid", e.verdict()
        elif isinstance(e, StoreError):
            status, title, text = 503, "No ledger to show", str(e)
        elif isinstance(e, _NotFound):
            status, title, text = 404, "Not found", str(e)
        else:
            status, title, text = 400, "Bad request", str(e)
        if api:
            return JSONResponse({"error": text}, status_code=status)
        return self.page(request, "error.html", status, title=title, text=text)

    def view(self, render: Callable[[Request, SqliteBlockStore], Response], *, api: bool = False) -> Callable[[Request], Response]:
        """A sync endpoint (Starlette runs it in a worker thread): open the ledger, render, close it."""

        def endpoint(request: Request) -> Response:
            try:
                store = self.open_store()
            except StoreError as e:
                return self.failure(request, e, api=api)
            try:
                with store:
                    return render(request, store)
            except (StoreError, _NotFound, _BadRequest) as e:
                return self.failure(request, e, api=api)

        return endpoint

    # --- pages ----------------------------------------------------------------------------------

    def overview_page(self, request: Request, store: SqliteBlockStore) -> Response:
        ov = overview(store, self.results_dir())
        recent = block_rows(store, before=None, limit=10)
        return self.page(request, "overview.html", ov=ov, recent=recent, names=_names(ov),
                         trusted=self.trusted_genesis is not None, rejected_share=MOSTLY_REJECTED_SHARE,
                         rejected_min=MOSTLY_REJECTED_MIN_ROUNDS)

    def blocks_page(self, request: Request, store: SqliteBlockStore) -> Response:
        before, limit = _page_args(request)
        rows = block_rows(store, before=before, limit=limit)
        return self.page(request, "blocks.html", page=rows, limit=limit, names=_member_names(store),
                         chain_id=store.genesis().chain_id)

    def one_block(self, request: Request, store: SqliteBlockStore) -> Response:
        b = block_page(store, _height(request, store))
        return self.page(request, "block.html", b=b, names=_member_names(store), chain_id=store.genesis().chain_id)

    def one_member(self, request: Request, store: SqliteBlockStore) -> Response:
        m = _member(request, store)
        return self.page(request, "member.html", m=m, names=_member_names(store), chain_id=store.genesis().chain_id)

    def audit_page(self, request: Request) -> Response:
        return self.page(request, "audit.html", ledger=str(self.ledger_path), trusted=self.trusted_genesis is not None)

    def static_file(self, request: Request) -> Response:
        entry = self.static.get(request.path_params["name"])
        if entry is None:
            return PlainTextResponse("not found", status_code=404)
        data, media_type = entry
        return Response(data, media_type=media_type, headers={"cache-control": "max-age=3600"})

    # --- API ------------------------------------------------------------------------------------

    def api_overview(self, request: Request, store: SqliteBlockStore) -> Response:
        ov = overview(store, self.results_dir())
        ov["genesis"] = genesis_document(store.genesis())
        return JSONResponse(ov)

    def api_genesis(self, request: Request, store: SqliteBlockStore) -> Response:
        return JSONResponse(genesis_document(store.genesis()))

    def api_blocks(self, request: Request, store: SqliteBlockStore) -> Response:
        before, limit = _page_args(request)
        rows = block_rows(store, before=before, limit=limit)
        blocks = []
        for r in rows["rows"]:
            h = r["height"]
            blocks.append(export_block(store.get_raw(h), store.get_checked(h)))
        return JSONResponse({"height": rows["height"], "blocks": blocks, "older": rows["older"], "newer": rows["newer"]})

    def api_block(self, request: Request, store: SqliteBlockStore) -> Response:
        h = _height(request, store)
        return JSONResponse(export_block(store.get_raw(h), store.get_checked(h)))

    def api_block_summary(self, request: Request, store: SqliteBlockStore) -> Response:
        return JSONResponse(block_summary(store.get_checked(_height(request, store))))

    def api_block_page(self, request: Request, store: SqliteBlockStore) -> Response:
        return JSONResponse(block_page(store, _height(request, store)))

    def api_export(self, request: Request, store: SqliteBlockStore) -> Response:
        doc = export_document(store)
        if store.warning:
            doc["warning"] = store.warning
        return JSONResponse(doc)

    def api_member(self, request: Request, store: SqliteBlockStore) -> Response:
        return JSONResponse(_member(request, store))

    def api_proof(self, request: Request, store: SqliteBlockStore) -> Response:
        h = _height(request, store)
        peer = request.path_params["peer"]
        g = store.genesis()
        block = store.get_checked(h)
        if not any(u.peer == peer for u in block.payload.updates):
            raise _NotFound(f"no update of {peer} in block {h}")
        prev = store.get_checked(h - 1) if h > 1 else None
        proof = make_proof(g, block, prev, peer)
        try:
            verify_proof(g, proof)  # never hand out a proof that does not verify
        except LedgerError as e:
            return JSONResponse({"error": f"FAIL at height {h}: {e} (no proof made)"}, status_code=422)
        doc = proof_document(proof)
        return Response(
            json.dumps(doc, indent=1) + "\n",
            media_type="application/json",
            headers={"content-disposition": f'attachment; filename="proof-{h}-{peer[-8:]}.json"'},
        )

    def api_audit(self, request: Request) -> Response:
        return JSONResponse(self.job.snapshot())

    async def api_audit_start(self, request: Request) -> Response:
        if request.headers.get(AUDIT_HEADER) != "1":
            return JSONResponse({"error": f"POST /api/audit needs the header {AUDIT_HEADER}: 1"}, status_code=403)
        started = self.job.start()
        return JSONResponse({"started": started, **self.job.snapshot()}, status_code=202 if started else 409)

    # --- a running node -------------------------------------------------------------------------

    async def node_status(self, request: Request) -> Response:
        assert self.node is not None
        return JSONResponse(self.node.status())

    async def node_metrics(self, request: Request) -> Response:
        assert self.node is not None
        return PlainTextResponse(prometheus_text(self.node.metrics()), media_type=CONTENT_TYPE)


class _NotFound(Exception):
    pass


class _BadRequest(Exception):
    pass


def _int_arg(text: str, what: str) -> int:
    if not (text.isascii() and text.isdigit()) or len(text) > 19:
        raise _BadRequest(f"{what} must be a non-negative integer, got {text[:40]!r}")
    return int(text)


def _height(request: Request, store: SqliteBlockStore) -> int:
    h = _int_arg(request.path_params["height"], "height")
    if not 1 <= h <= store.height():
        raise _NotFound(f"no block at height {h} (height is {store.height()})")
    return h


def _page_args(request: Request) -> tuple[int | None, int]:
    q = request.query_params
    before = _int_arg(q["before"], "before") if q.get("before") else None
    limit = _int_arg(q["limit"], "limit") if q.get("limit") else PAGE_DEFAULT
    if not 1 <= limit <= PAGE_MAX:
        raise _BadRequest(f"limit must be in [1, {PAGE_MAX}]")
    return before, limit


def _member(request: Request, store: SqliteBlockStore) -> dict[str, Any]:
    peer = request.path_params["peer"]
    to = request.query_params.get("to")
    try:
        return member_page(store, peer, to=_int_arg(to, "to") if to else None)
    except KeyError:
        raise _NotFound(f"{peer[:80]} is not a member of chain {store.genesis().chain_id}") from None


def _names(ov: Mapping[str, Any]) -> dict[str, str]:
    return {m["peer_id"]: m["name"] for m in ov["members"]}


def _member_names(store: SqliteBlockStore) -> dict[str, str]:
    return {m.peer_id: m.name for m in store.genesis().members}
