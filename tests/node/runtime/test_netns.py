"""Four node processes on four separate network stacks, the way separate machines would run them.

Each node runs in its own network namespace (``ip netns``) with one interface, its own address on a private
/24 and ``lo``; the four links meet on a bridge inside a fifth, "switch" namespace, so nothing is created in or
routed through the host's own namespace, and no namespace has a route anywhere else. Each link is shaped with
``tc``: ``netem`` delay and loss where the kernel has it, otherwise a ``tbf`` rate limit (the kind of link is
printed). The genesis carries every member's address (``/ip4/10.231.X.1i/tcp/4001``, the same port on every
"machine"), each node listens on its own address only, and they find each other through the genesis.

Checked: all four commit every round and exit 0, end on the same head, every ledger verifies with
re-execution; each node announces its namespace address; each one's established TCP connections (``ss`` in its
namespace) go to the other three namespace addresses and nowhere else; and from one namespace, 127.0.0.1:4001
reaches nothing, while another node's namespace address does.

Skipped, with the reason, only where namespaces cannot be made (not root, no ``ip``, ``ip netns add`` fails).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import tomllib
from pathlib import Path
from typing import Any

import pytest
import tomli_w

from ledger.store import open_ledger
from sim import load_scenario, resolve_scenario
from sim._run import verify_ledger
from concilium.netns import NetnsError, Sandbox, Shape, established
from concilium._testnet import read_events, stop_processes, write_testnet
from sim._world import World

N = 4
ROUNDS = 4
PORT = 4001
NETEM = ("delay", "10ms", "2ms", "loss", "0.5%")
TBF = ("rate", "20mbit", "burst", "32kbit", "latency", "50ms")  # the fallback where sch_netem is missing


def _run(*args: str, timeout: float = 20.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(args), capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)


def _events(node_dir: Path) -> list[dict[str, Any]]:
    return read_events(node_dir / "node.log")[0]


def _stored(events: list[dict[str, Any]]) -> int:
    return max((int(e["height"]) for e in events if e.get("event") == "decided"), default=0)


PROBE = """
import json, socket, sys
out = {}
for host in sys.argv[1:]:
    s = socket.socket()
    s.settimeout(3)
    try:
        s.connect((host, %d))
        out[host] = "connected"
    except OSError as e:
        out[host] = type(e).__name__
    finally:
        s.close()
print(json.dumps(out))
""" % PORT


def _probe(ns: str, *hosts: str) -> dict[str, str]:
    """TCP connects to ``host:PORT`` from inside namespace ``ns``: "connected" or the error's name."""
    r = _run("ip", "netns", "exec", ns, sys.executable, "-c", PROBE, *hosts)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_nodes_in_separate_network_namespaces_commit_over_their_own_addresses(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("network namespaces need root (euid is %d)" % os.geteuid())
    if shutil.which("ip") is None:
        pytest.skip("no `ip` command (iproute2) on PATH")
    box = Sandbox(N, shape=Shape(netem=NETEM, tbf=TBF))
    try:
        box.add_namespace(box.switch)
    except (NetnsError, subprocess.SubprocessError) as e:
        pytest.skip(f"cannot create a network namespace: {e}")
    procs: list[subprocess.Popen[bytes]] = []
    report: dict[str, Any] = {}
    t0 = time.monotonic()
    try:
        box.up()
        report["shaping"] = box.shaping
        data = tomllib.loads(resolve_scenario("testnet").read_text())
        data["rounds"] = ROUNDS
        (tmp_path / "scenario.toml").write_text(tomli_w.dumps(data))
        world = World.build(load_scenario(tmp_path / "scenario.toml"))
        files = write_testnet(tmp_path, world, keys=world.keys, hosts=box.addrs, ports=[PORT] * N,
                              listen_host="0.0.0.0", addrs_in_genesis=True)
        env = dict(os.environ, PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
        for f, ns, addr in zip(files, box.nodes, box.addrs, strict=True):
            cmd = ["ip", "netns", "exec", ns, sys.executable, "-m", "concilium", "node", "start",
                   "--config", str(f.config), "--listen", f"/ip4/{addr}/tcp/{PORT}",  # its own address only
                   "--log-format", "json", "--until-height", str(ROUNDS), "--linger", "3", "--status-every", "1"]
            with open(f.dir / "node.log", "wb") as out, open(f.dir / "stderr.log", "wb") as err:
                procs.append(subprocess.Popen(cmd, stdout=out, stderr=err, stdin=subprocess.DEVNULL, env=env))

        def stderr(i: int) -> str:
            return (files[i].dir / "stderr.log").read_text(errors="replace")[-3000:]

        # once every node has all three peers, and while they are still running: who is connected to whom
        deadline = time.monotonic() + 120
        while True:
            evs = [_events(f.dir) for f in files]
            if all(any(e.get("event") == "peers" for e in ev) for ev in evs):
                break
            for i, p in enumerate(procs):
                assert p.poll() is None, f"node {i} exited early:\n{stderr(i)}"
            assert time.monotonic() < deadline, "the nodes did not start"
            time.sleep(0.1)
        report["peers_s"] = round(time.monotonic() - t0, 1)
        connections = [established(ns) for ns in box.nodes]
        loopback_probe = _probe(box.nodes[1], "127.0.0.1", box.addrs[0])

        deadline = time.monotonic() + 120
        while any(p.poll() is None for p in procs):
            assert time.monotonic() < deadline, f"stuck: stored {[_stored(_events(f.dir)) for f in files]}"
            time.sleep(0.2)
    finally:
        stop_processes(procs, grace_s=20)
        leftovers = box.down()
    report["wall_s"] = round(time.monotonic() - t0, 1)
    report["exit_codes"] = [p.returncode for p in procs]
    print("\nnetns:", json.dumps(report))
    assert not leftovers, leftovers

    assert report["exit_codes"] == [0] * N, [stderr(i) for i in range(N)]
    evs = [_events(f.dir) for f in files]
    assert [_stored(ev) for ev in evs] == [ROUNDS] * N
    heads = set()
    for f in files:
        ledger = f.dir / "data" / "ledger"
        ok, verdict = verify_ledger(ledger)
        assert ok and "rounds re-executed" in verdict, verdict
        store, _ = open_ledger(ledger, readonly=True)
        with store:
            heads.add((store.height(), store.head_hash()))
    assert len(heads) == 1, heads

    # each node listened on its namespace address, and reached its peers over those addresses only
    for i, (f, ev) in enumerate(zip(files, evs, strict=True)):
        started = next(e for e in ev if e.get("event") == "started")
        assert started["addrs"] == [f"/ip4/{box.addrs[i]}/tcp/{PORT}/p2p/{f.peer_id}"], started
        peers = next(e for e in ev if e.get("event") == "peers")
        assert peers["connected"] == N - 1, peers
        conns = connections[i]
        assert conns, f"node {i}: no established connections"
        for local, remote in conns:
            assert local.rsplit(":", 1)[0] == box.addrs[i], (i, local, remote)
            assert remote.rsplit(":", 1)[0] in box.addrs, (i, local, remote)
        others = {a for j, a in enumerate(box.addrs) if j != i}
        assert {remote.rsplit(":", 1)[0] for _, remote in conns} == others, (i, conns)
    # from node 1's namespace: loopback has nothing on the port, node 0's namespace address has it
    assert loopback_probe == {"127.0.0.1": "ConnectionRefusedError", box.addrs[0]: "connected"}, loopback_probe
