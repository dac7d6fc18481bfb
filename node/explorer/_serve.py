"""Serving the explorer with Hypercorn: on asyncio for ``concilium ledger serve``, on trio inside a node.

Hypercorn runs the same ASGI app on both event loops, so the node's trio runtime serves the explorer in its
own nursery (no second loop, no thread) and ``ledger serve`` needs no trio. The listening socket is bound
here first, so that port 0 works and the address is known before the server starts; Hypercorn takes it
over as ``fd://``.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable
from typing import Any

__all__ = ["bind", "host_names", "parse_listen", "serve_asyncio", "serve_trio"]


def parse_listen(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:PORT`` for IPv6) with a literal IP address; raises ValueError."""
    host, sep, port = text.rpartition(":")
    if not sep or not host:
        raise ValueError(f"{text!r:.60}: expected HOST:PORT, e.g. 127.0.0.1:8080")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    try:
        ipaddress.ip_address(host)
    except ValueError:
        raise ValueError(f"{text!r:.60}: the host must be an IP address, e.g. 127.0.0.1") from None
    if not (port.isascii() and port.isdigit()) or not 0 <= int(port) <= 65535:
        raise ValueError(f"{text!r:.60}: the port must be in [0, 65535]")
    return host, int(port)


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port`` (port 0: any free port)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(128)
    except OSError:
        sock.close()
        raise
    return sock


def url_of(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"http://[{host}]:{port}/" if ":" in host else f"http://{host}:{port}/"


def host_names(host: str) -> list[str] | None:
    """The Host headers a server bound to ``host`` accepts: on a loopback address only the loopback names (a
    web page elsewhere cannot reach it through DNS rebinding); on any other address, any."""
    if ipaddress.ip_address(host).is_loopback:
        return ["127.0.0.1", "localhost", "[::1]", "::1"]
    return None


def _config(sock: socket.socket) -> Any:
    from hypercorn.config import Config  # noqa: PLC0415

    config = Config()
    config.bind = [f"fd://{sock.detach()}"]  # Hypercorn owns the socket from here on
    config.accesslog = None
    config.graceful_timeout = 1.0  # open keep-alive connections do not hold a stop up
    return config


def serve_asyncio(app: Any, sock: socket.socket, *, on_ready: Callable[[str], None] | None = None) -> None:
    """Serve ``app`` on the bound ``sock`` until SIGINT or SIGTERM, then return (a clean stop)."""
    import asyncio  # noqa: PLC0415
    import signal  # noqa: PLC0415

    from hypercorn.asyncio import serve  # noqa: PLC0415

    url = url_of(sock)
    config = _config(sock)

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for s in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(s, stop.set)
        if on_ready is not None:
            on_ready(url)
        await serve(app, config, shutdown_trigger=stop.wait)

    asyncio.run(main())


async def serve_trio(app: Any, sock: socket.socket, *, task_status: Any) -> None:
    """Serve ``app`` on the bound ``sock`` in the caller's trio nursery: ``url = await nursery.start(serve_trio,
    app, sock)`` returns once it accepts connections; the server stops when that nursery is cancelled."""
    from functools import partial  # noqa: PLC0415

    import trio  # noqa: PLC0415
    from hypercorn.trio import serve  # noqa: PLC0415

    url = url_of(sock)
    config = _config(sock)
    async with trio.open_nursery() as nursery:
        await nursery.start(partial(serve, app, config))
        task_status.started(url)
