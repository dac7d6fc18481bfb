"""Separate network stacks on one machine: N Linux network namespaces joined by a bridge, each link shaped with ``tc``.

The way separate machines would run nodes (``tests/node/runtime/test_netns.py``, ``test_links.py``, ``benchmarks/link_bench.py``). A public module of the
application shell, so that benchmarks may use it.
Each node namespace has one interface, ``eth0``, with its own address on a private /24, and ``lo``; the N links
meet on a bridge inside a further "switch" namespace, so nothing is created in or routed through the host's own
namespace, and no namespace has a route anywhere else.

Shaping, per link, in both directions (each namespace's ``eth0`` egress is the node's uplink, the switch side's
egress its downlink): a :class:`Shape` is either ``netem`` arguments (delay, loss, rate: needs ``sch_netem``) or a
``tbf`` rate limit (present in every kernel we met). :meth:`Sandbox.up` says which one it applied.

Needs root and iproute2; :meth:`Sandbox.up` raises :class:`NetnsError` with the command's own message otherwise.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["NetnsError", "NetnsRun", "Sandbox", "Shape", "SlowDown", "clean_stale", "established", "events_of", "reshape", "run_testnet", "tbf_args"]


class NetnsError(RuntimeError):
    """A namespace, link or qdisc could not be made (not root, no iproute2, a kernel without the qdisc)."""


def _run(*args: str, timeout: float = 20.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(args), capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)


def tbf_args(rate_mbit: float, *, latency_ms: float = 50.0) -> tuple[str, ...]:
    """``tc ... tbf`` arguments for a link of ``rate_mbit``: a burst of at least 10 ms of the rate (a timer tick
    at HZ=100; smaller bursts cap the rate below what was asked at 1 Gbit) and at least one 64 KiB TSO segment, and
    a queue of ``latency_ms`` of the rate."""
    rate_bytes = rate_mbit * 1e6 / 8
    burst = max(64 << 10, int(rate_bytes / 100))
    return ("rate", f"{rate_mbit:g}mbit", "burst", str(burst), "latency", f"{latency_ms:g}ms")


@dataclass(frozen=True, slots=True)
class Shape:
    """How every link is shaped: ``netem`` arguments tried first (``None``: skip), then ``tbf`` (``None``: none)."""

    netem: tuple[str, ...] | None = None
    tbf: tuple[str, ...] | None = None
    both_ways: bool = False
    """Shape the switch side too (the node's downlink), not only the node's uplink."""


class Sandbox:
    """A switch namespace with a bridge, and ``n`` node namespaces each linked to it by a veth pair."""

    def __init__(self, n: int, *, shape: Shape = Shape()) -> None:
        tag = f"cb{os.getpid()}"
        self.switch = f"{tag}sw"
        self.nodes = [f"{tag}n{i}" for i in range(n)]
        self.subnet = f"10.231.{20 + os.getpid() % 200}"  # namespaces do not share routes; this only reads well
        self.addrs = [f"{self.subnet}.{10 + i}" for i in range(n)]
        self.shape = shape
        self.created: list[str] = []
        self.shaping = "none"

    def _ok(self, *args: str) -> None:
        r = _run(*args)
        if r.returncode:
            raise NetnsError(f"{' '.join(args)}: {r.stderr.strip() or r.stdout.strip()}")

    def add_namespace(self, name: str) -> None:
        try:
            self._ok("ip", "netns", "add", name)
        except OSError as e:  # no `ip` at all
            raise NetnsError(f"ip netns add {name}: {e}") from e
        self.created.append(name)

    def up(self) -> None:
        for ns in (self.switch, *self.nodes):
            if ns not in self.created:
                self.add_namespace(ns)
        sw = self.switch
        self._ok("ip", "-n", sw, "link", "add", "br0", "type", "bridge")
        self._ok("ip", "-n", sw, "link", "set", "br0", "up")
        self._ok("ip", "-n", sw, "link", "set", "lo", "up")
        for i, (ns, addr) in enumerate(zip(self.nodes, self.addrs, strict=True)):
            # created inside the switch namespace, its peer end inside the node's: the host's never sees them
            self._ok("ip", "-n", sw, "link", "add", f"p{i}", "type", "veth", "peer", "name", "eth0", "netns", ns)
            self._ok("ip", "-n", sw, "link", "set", f"p{i}", "master", "br0")
            self._ok("ip", "-n", sw, "link", "set", f"p{i}", "up")
            self._ok("ip", "-n", ns, "addr", "add", f"{addr}/24", "dev", "eth0")
            self._ok("ip", "-n", ns, "link", "set", "eth0", "up")
            self._ok("ip", "-n", ns, "link", "set", "lo", "up")
        for i, ns in enumerate(self.nodes):
            self.shaping = self._shape(ns, "eth0")
            if self.shape.both_ways:
                self._shape(sw, f"p{i}")

    def _shape(self, ns: str, dev: str) -> str:
        netem_error = "not asked for"
        if self.shape.netem is not None:
            r = _run("ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", dev, "root", "netem", *self.shape.netem)
            if r.returncode == 0:
                return "netem " + " ".join(self.shape.netem)
            netem_error = r.stderr.strip()
        if self.shape.tbf is None:
            return f"none (netem: {netem_error})"
        self._ok("ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", dev, "root", "tbf", *self.shape.tbf)
        return f"tbf {' '.join(self.shape.tbf)} (netem: {netem_error})"

    def exec_prefix(self, i: int) -> list[str]:
        """The command prefix that runs a program inside node ``i``'s namespace."""
        return ["ip", "netns", "exec", self.nodes[i]]

    def down(self) -> list[str]:
        """Delete every namespace this sandbox made (their links and the bridge go with them); the failures."""
        errors = []
        for ns in reversed(self.created):
            r = _run("ip", "netns", "del", ns)
            if r.returncode:
                errors.append(f"{ns}: {r.stderr.strip()}")
        self.created.clear()
        return errors


def established(ns: str) -> list[tuple[str, str]]:
    """(local, peer) ``ip:port`` of the established TCP connections in namespace ``ns``."""
    r = _run("ip", "netns", "exec", ns, "ss", "-Htn", "state", "established")
    if r.returncode:
        raise NetnsError(r.stderr.strip())
    pairs = []
    for line in r.stdout.splitlines():
        cols = line.split()
        if len(cols) >= 4:
            pairs.append((cols[-2], cols[-1]))
    return pairs


def clean_stale(prefixes: Sequence[str] = ("cb",)) -> list[str]:
    """Delete namespaces named ``cb<pid>...`` whose process is gone (a run that was killed); the names deleted."""
    r = _run("ip", "netns", "list")
    gone = []
    for line in r.stdout.splitlines():
        name = line.split()[0] if line.split() else ""
        for p in prefixes:
            digits = name[len(p):].split("sw")[0].split("n")[0]
            if name.startswith(p) and digits.isdigit() and not os.path.exists(f"/proc/{digits}"):
                if _run("ip", "netns", "del", name).returncode == 0:
                    gone.append(name)
    return gone


def reshape(ns: str, dev: str, tbf: Sequence[str]) -> None:
    """Change the ``tbf`` of ``dev`` in namespace ``ns`` (e.g. to slow one member's link for a while)."""
    r = _run("ip", "netns", "exec", ns, "tc", "qdisc", "change", "dev", dev, "root", "tbf", *tbf)
    if r.returncode:
        raise NetnsError(r.stderr.strip())


@dataclass
class NetnsRun:
    """What :func:`run_testnet` leaves: each node's files, exit code, JSON events and stderr."""

    files: list[Any]
    exit_codes: list[int | None]
    events: list[list[dict[str, Any]]]
    stderr: list[str]
    shaping: str
    wall_s: float

    def decided(self, i: int) -> dict[int, dict[str, Any]]:
        """Node ``i``'s ``decided`` events by height."""
        return {int(e["height"]): e for e in self.events[i] if e.get("event") == "decided"}

    def stored(self) -> list[int]:
        return [max(self.decided(i), default=0) for i in range(len(self.files))]


class SlowDown:
    """A ``during`` hook of :func:`run_testnet`: once node ``node`` stored ``after_height``, its link (both ways) drops
    to ``rate_mbit`` for ``seconds``, then goes back to ``back_mbit``. ``slowed_at`` and ``restored_at`` are the wall
    times (``time.time()``, as the nodes' log lines' ``ts``) it did so, or None."""

    def __init__(self, node: int, *, after_height: int, seconds: float, rate_mbit: float, back_mbit: float) -> None:
        self.node, self.after_height, self.seconds = node, after_height, seconds
        self.rate_mbit, self.back_mbit = rate_mbit, back_mbit
        self.slowed_at: float | None = None
        self.restored_at: float | None = None

    def _set(self, box: Sandbox, rate_mbit: float) -> None:
        reshape(box.nodes[self.node], "eth0", tbf_args(rate_mbit))
        reshape(box.switch, f"p{self.node}", tbf_args(rate_mbit))

    def __call__(self, box: Sandbox, files: list[Any]) -> None:
        if self.restored_at is not None:
            return
        if self.slowed_at is not None:
            if time.time() >= self.slowed_at + self.seconds:
                self._set(box, self.back_mbit)
                self.restored_at = time.time()
            return
        ev = events_of(files[self.node].dir / "node.log")
        if any(e.get("event") == "decided" and int(e["height"]) >= self.after_height for e in ev):
            self._set(box, self.rate_mbit)
            self.slowed_at = time.time()


def events_of(log: Path) -> list[dict[str, Any]]:
    """The JSON event lines a node wrote to ``log`` so far (``concilium._testnet.read_events``)."""
    from concilium._testnet import read_events

    return read_events(log)[0]


def run_testnet(world: Any, out: Path, *, shape: Shape, until_height: int, timeout_s: float, port: int = 4001,
                during: Callable[[Sandbox, list[Any]], None] | None = None, linger_s: float = 5.0) -> NetnsRun:
    """The world's members as ``concilium node start`` processes, one per namespace of a :class:`Sandbox` shaped by
    ``shape``, each dialling the others at their namespace addresses (in the genesis); until every process exits
    (each stops at ``until_height``) or ``timeout_s``. ``during(box, files)`` is called every 0.2 s meanwhile."""
    from concilium._testnet import read_events, stop_processes, write_testnet

    n = len(world.keys)
    box = Sandbox(n, shape=shape)
    procs: list[subprocess.Popen[bytes]] = []
    files: list[Any] = []
    t0 = time.monotonic()
    try:
        box.up()
        files = write_testnet(out, world, keys=world.keys, hosts=box.addrs, ports=[port] * n, listen_host="0.0.0.0",
                              addrs_in_genesis=True)
        env = dict(os.environ, PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
        for i, (f, addr) in enumerate(zip(files, box.addrs, strict=True)):
            cmd = [*box.exec_prefix(i), sys.executable, "-m", "concilium", "node", "start", "--config", str(f.config),
                   "--listen", f"/ip4/{addr}/tcp/{port}", "--log-format", "json", "--until-height", str(until_height),
                   "--linger", str(linger_s), "--status-every", "2"]
            with open(f.dir / "node.log", "wb") as so, open(f.dir / "stderr.log", "wb") as se:
                procs.append(subprocess.Popen(cmd, stdout=so, stderr=se, stdin=subprocess.DEVNULL, env=env))
        deadline = time.monotonic() + timeout_s
        while any(p.poll() is None for p in procs) and time.monotonic() < deadline:
            if during is not None:
                during(box, files)
            time.sleep(0.2)
    finally:
        stop_processes(procs, grace_s=30)
        box.down()
    return NetnsRun(
        files=files,
        exit_codes=[p.returncode for p in procs],
        events=[read_events(f.dir / "node.log")[0] for f in files],
        stderr=[(f.dir / "stderr.log").read_text(errors="replace")[-2000:] for f in files],
        shaping=box.shaping,
        wall_s=time.monotonic() - t0,
    )
