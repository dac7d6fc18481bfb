"""Free TCP ports on this machine right now, for test and benchmark networks (``testnet local``, the runtime tests,
``benchmarks/startup_bench.py``). A public module of the application shell, so that benchmarks may use it."""

from __future__ import annotations

import os
import socket
import time

__all__ = ["free_port_block", "free_ports"]


def free_ports(n: int, host: str = "127.0.0.1") -> list[int]:
    """``n`` TCP ports free on ``host`` right now (bound to port 0 together, then released)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind((host, 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def free_port_block(n: int, host: str = "127.0.0.1") -> int:
    """A base port with ``base .. base + n - 1`` all free on ``host`` right now (``testnet init --base-port``
    numbers the nodes' ports from it); tried at seeded-random bases in [20000, 60000)."""
    import random  # noqa: PLC0415 (a port choice, not a simulation: any draw will do)

    draw = random.Random(os.getpid() ^ int(time.time() * 1000))
    for _ in range(200):
        base = draw.randrange(20000, 60000 - n)
        socks = []
        try:
            for i in range(n):
                sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                socks.append(sock)
                sock.bind((host, base + i))
            return base
        except OSError:
            continue
        finally:
            for sock in socks:
                sock.close()
    raise OSError(f"no {n} consecutive free ports on {host}")
