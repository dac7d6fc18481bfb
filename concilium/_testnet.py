"""Real networks of node processes: ``concilium testnet init`` (files for N nodes, on one machine or many) and
``concilium testnet local`` (N processes on 127.0.0.1, watched, verified, with a results folder).

Testnet orchestration lives here, in the application shell, not in ``sim/`` (whose rule is "no wall clock"): it
starts real processes and watches them in real time. Each node gets its own data through the same local-data
interface any operator uses (``node.toml``'s ``[data]``): either a folder of ``concilium data split``
(``--data DIR``: node ``i`` trains on ``DIR/member-<i>/``), or the scenario's own partition, materialized per
member under ``data/member-<i>/`` (npz, the very float32 values the simulator trains on, and a local validation
split cut from the scenario's test split). A node process builds only its own world (``node.world``).

``testnet local`` uses the scenario's own (derived) keys and a genesis without addresses, i.e. the very genesis
``sim run`` uses, so the two give the same accepted sets and model digests when nothing times out (block times,
hence block hashes, are wall-clock times on a testnet). ``testnet init`` draws fresh keys from the OS and writes
each node's address into the genesis, for networks that outlive a test.

The node processes are ``python -m concilium node start --config nodes/node-i/node.toml --log-format json``;
their JSON event lines (``nodes/node-i/node.log``) are all the supervisor reads. It never talks to them.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import math
import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import tomli_w

from concilium._data import read_manifest, split_to_dir
from concilium.ports import free_port_block, free_ports
from ledger import KeyPair, LedgerError
from ledger.store import FileBlobStore
from node import ConfigFileError
from node.config import dump_genesis, write_file_atomic
from node.keys import generate_key, save_key
from node.world import check_rounds_plan, write_initial_model
from sim import Scenario, World, byzantine_indices, check_network_adversary

__all__ = ["LocalTestnet", "NodeFiles", "free_port_block", "free_ports", "read_events", "stop_processes", "write_testnet"]

NODES_DIR = "nodes"
DATA_DIR = "data"
"""The members' materialized data of a testnet folder (without ``--data``)."""
INITIAL_MODEL = "model0.bin"
"""The genesis' initial model beside ``genesis.toml`` (each node reads and checks it)."""
LINGER_S = 900.0
EVAL_GRACE_S = 10.0
"""How long ``testnet local`` waits, once every node stored the last round, for their local evaluations of it."""


@dataclass(frozen=True, slots=True)
class NodeFiles:
    index: int
    dir: Path
    config: Path
    peer_id: str
    address: str
    """The address other nodes dial: ``/ip4/HOST/tcp/PORT/p2p/PEERID``."""


def read_events(log: Path, offset: int = 0) -> tuple[list[dict[str, Any]], int]:
    """The JSON event lines (``--log-format json``) a node wrote to ``log`` from byte ``offset`` on, complete
    lines only (a line being written is read next time), and the offset after them. Other lines are skipped."""
    try:
        with open(log, "rb") as fh:
            fh.seek(offset)
            chunk = fh.read()
    except OSError:
        return [], offset
    end = chunk.rfind(b"\n") + 1
    events = []
    for line in chunk[:end].splitlines():
        try:
            ev = json.loads(line)
        except ValueError:
            continue
        if isinstance(ev, dict):
            events.append(ev)
    return events, offset + end


def stop_processes(procs: Sequence[subprocess.Popen[Any]], *, grace_s: float = 15.0, sig: int = signal.SIGINT) -> None:
    """Stop node processes cleanly: ``sig`` (Ctrl-C's by default) to those still running, then wait up to
    ``grace_s`` in all, then kill what is left."""
    for p in procs:
        if p.poll() is None:
            p.send_signal(sig)
    deadline = time.monotonic() + grace_s
    for p in procs:
        try:
            p.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def materialize_world(out: Path, world: World) -> dict[str, Any]:
    """The scenario's partition as a split folder (``concilium._data.split_to_dir``): member ``i``'s training data
    (npz: the simulator's float32 values, bit for bit), a local validation split per member (the scenario's test
    split dealt out in equal seeded slices, so training data stays the simulator's), the test split and the public
    split where the scenario has one."""
    n = len(world.client_data)
    perm = world.rng.child("local-validation").numpy().permutation(len(world.test))
    slices = np.array_split(perm, n)
    members = [(world.client_data[i], world.test.subset(np.sort(slices[i])) if len(slices[i]) else None)
               for i in range(n)]
    return split_to_dir(out, members, ["npz"], test=world.test, public=world.public_data,
                        source=world.scenario.data.dataset, partition=world.scenario.data.partition,
                        seed=world.scenario.seed, contract=world.contract)


def host_address(host: str, port: int) -> str:
    """The multiaddr other members dial for ``host``: ``/ip4`` or ``/ip6`` for an address, ``/dns4`` for a DNS name
    (the transport resolves it when it dials); refused with one line when it is neither."""
    import ipaddress  # noqa: PLC0415

    from node.config import check_multiaddr  # noqa: PLC0415

    try:
        ip = ipaddress.ip_address(host)
        addr = f"/ip{ip.version}/{ip.compressed}/tcp/{port}"
    except ValueError:
        addr = f"/dns4/{host}/tcp/{port}"
    check_multiaddr(addr)
    return addr


NODE_DATA = "dataset"
"""A node directory's own copy of its data (``[data]``), beside its state dir ``data``: the directory is
self-contained."""


def _node_dir_files(d: Path, out: Path, data: Path, entry: dict[str, Any], manifest: dict[str, Any],
                    app: Path | None) -> dict[str, Any]:
    """Copy into node directory ``d`` what its node needs (the genesis, θ_0, its own data, the public split, the
    app), so that ``d`` alone starts on any machine; return its config's file entries, relative to ``d``."""
    import shutil  # noqa: PLC0415

    shutil.copyfile(out / "genesis.toml", d / "genesis.toml")
    shutil.copyfile(out / INITIAL_MODEL, d / INITIAL_MODEL)
    mine = d / NODE_DATA
    if mine.exists():
        shutil.rmtree(mine)
    src = data / entry["path"]
    mine.mkdir()
    files: dict[str, Any] = {"genesis": "genesis.toml", "initial_model": INITIAL_MODEL}
    table: dict[str, Any] = {"format": entry["format"]}
    copy = shutil.copytree if src.is_dir() else shutil.copyfile
    copy(src, mine / src.name)
    table["path"] = f"{NODE_DATA}/{src.name}"
    if isinstance(entry.get("validation"), dict):
        v = data / entry["validation"]["path"]
        (shutil.copytree if v.is_dir() else shutil.copyfile)(v, mine / v.name)
        table["validation"] = f"{NODE_DATA}/{v.name}"
    if isinstance(manifest.get("public"), dict):
        pub = data / manifest["public"]["path"]
        (mine / "public").mkdir()
        shutil.copyfile(pub, mine / "public" / pub.name)
        table["public"] = f"{NODE_DATA}/public/{pub.name}"
    if app is not None:
        from node.apps import copy_app, load_app  # noqa: PLC0415

        files["app"] = copy_app(load_app(app), d / "app")
    files["data"] = table
    return files


def write_testnet(
    out: Path,
    world: World,
    *,
    keys: Sequence[KeyPair],
    hosts: Sequence[str],
    ports: Sequence[int],
    listen_host: str,
    addrs_in_genesis: bool,
    data: Path | None = None,
    app: Path | None = None,
    chain_id: str | None = None,
) -> list[NodeFiles]:
    """Write ``genesis.toml``, ``model0.bin`` and, per node, a self-contained ``nodes/node-i/`` under ``out``:
    ``node.key``, ``node.toml``, copies of the genesis and θ_0, its own data under ``dataset/`` (member ``i`` of the
    split folder ``data``; default: the scenario's partition, materialized under ``out/data``) and the app. Copy a
    node directory alone to a machine and it starts there. ``chain_id``: another chain id than the scenario's."""
    n = len(keys)
    addrs = [host_address(hosts[i], ports[i]) for i in range(n)]
    if data is None:
        data = out / DATA_DIR
        manifest = materialize_world(data, world)
        contract = None
    else:
        manifest = read_manifest(data)
        if len(manifest["members"]) != n:
            raise ValueError(f"{data}: {len(manifest['members'])} member directories for {n} nodes")
        from learning import DataContract  # noqa: PLC0415

        contract = DataContract.from_params(manifest["contract"], f"{data}/manifest.json: contract")
    sizes = [int(m["samples"]) for m in manifest["members"]]
    genesis = world.genesis_for([k.public_key for k in keys], [(a,) for a in addrs] if addrs_in_genesis else (),
                                contract=contract, sizes=sizes, chain_id=chain_id)
    check_rounds_plan(genesis, what=f"scenario {world.scenario.name!r} with {n} nodes", public=world.public_eval())
    write_file_atomic(out / "genesis.toml", dump_genesis(genesis).encode(), overwrite=True)
    write_initial_model(out / INITIAL_MODEL, world.theta0)
    byzantine = set(byzantine_indices(world.scenario, genesis))
    adv = world.scenario.adversary
    faults = [{k: v for k, v in dataclasses.asdict(f).items()} for f in adv.faults]
    files = []
    for i, k in enumerate(keys):
        d = out / NODES_DIR / f"node-{i}"
        d.mkdir(parents=True, exist_ok=True)
        save_key(k, d / "node.key", overwrite=True)
        files.append(NodeFiles(i, d, d / "node.toml", k.peer_id, f"{addrs[i]}/p2p/{k.peer_id}"))
    for f in files:
        own = _node_dir_files(f.dir, out, data, manifest["members"][f.index], manifest, app)
        cfg: dict[str, Any] = {
            "genesis": own.pop("genesis"),
            "key": "node.key",
            "data_dir": "data",
            "initial_model": own.pop("initial_model"),
            "listen": [f"/ip4/{listen_host}/tcp/{ports[f.index]}"],
            "peers": [] if addrs_in_genesis else [g.address for g in files if g.index != f.index],
        }
        if world.scenario.training.reproducible:
            cfg["reproducible"] = True
        if "app" in own:
            cfg["app"] = own.pop("app")
        cfg["data"] = own.pop("data")
        role: dict[str, Any] = {}
        if f.index in byzantine:
            role = {"byzantine": True, "attack": adv.attack, "data_attack": adv.data_attack,
                    "from_round": adv.from_round, "n_samples": adv.n_samples}
        if faults:
            role["faults"] = faults
        if role:
            cfg["adversary"] = role
        write_file_atomic(f.config, tomli_w.dumps(cfg).encode(), overwrite=True)
    return files


COMPOSE_SUBNET = "172.28.0.0/24"
COMPOSE_PORT = 4001


def compose_host(i: int) -> str:
    """The static address of node ``i`` on the compose network (``COMPOSE_SUBNET``)."""
    return f"172.28.0.{10 + i}"


def init_testnet(
    scenario: Scenario, out: Path, *, hosts: Sequence[str], base_port: int, derived_keys: bool,
    compose: bool = False, data: Path | None = None, app: Path | None = None,
) -> list[NodeFiles]:
    """``concilium testnet init``: fresh keys (or the scenario's derived ones), addresses in the genesis, and with
    ``compose`` a ``compose.yaml`` running every node in its own container at a static address (each sees its own
    self-contained node directory only)."""
    check_network_adversary(scenario)
    n = scenario.members
    if len(hosts) not in (1, n):
        raise ConfigFileError(f"--host: {len(hosts)} given for {n} nodes: give one (every node on it) or one per node")
    world = World.build(scenario)
    keys = list(world.keys) if derived_keys else [generate_key() for _ in range(n)]
    if compose:
        hosts, ports = [compose_host(i) for i in range(n)], [COMPOSE_PORT] * n
    else:
        hosts = list(hosts) if len(hosts) == n else [hosts[0]] * n
        ports = [base_port + (i if len(set(hosts)) == 1 else 0) for i in range(n)]
    # a chain of its own: every init draws a new chain id (and fresh keys), so two networks written from one
    # scenario never accept each other's signatures or blocks
    chain_id = f"{scenario.name[:54]}-{secrets.token_hex(4)}" if not derived_keys else None
    files = write_testnet(out, world, keys=keys, hosts=hosts, ports=ports, listen_host="0.0.0.0",
                          addrs_in_genesis=True, data=data, app=app, chain_id=chain_id)
    if compose:
        write_file_atomic(out / "compose.yaml", compose_file(files).encode(), overwrite=True)
    return files


def compose_file(files: Sequence[NodeFiles]) -> str:
    """A docker compose file for the nodes of ``files`` (written beside ``genesis.toml``): the image's entrypoint,
    each container mounting only its own (self-contained) node directory read-only at ``/node``, its key handed to
    the image's user by the entrypoint (``CONCILIUM_KEY``), a volume per node for its state, static addresses, and
    a healthcheck on the node's status file (``concilium node status``)."""
    lines = [
        "# Written by `concilium testnet init --compose`: one container per node, static addresses on a private",
        "# network. Build the image once from the concilium checkout (docker build -f docker/Dockerfile -t",
        "# concilium:dev .), then from this folder: docker compose up",
        "# Each container sees only its own node directory (its key, config, genesis and data), read-only; the",
        "# image's entrypoint copies the key for its user (uid 10001), so no chown is needed.",
        "services:",
    ]
    for f in files:
        i = f.index
        lines += [
            f"  node-{i}:",
            "    image: concilium:dev",
            '    command: ["node", "start", "--config", "/node/node.toml", "--data-dir", "/data", "--log-format", "json"]',
            "    environment:",
            "      CONCILIUM_KEY: /node/node.key",
            "    volumes:",
            f"      - ./{NODES_DIR}/node-{i}:/node:ro",
            f"      - node-{i}-data:/data",
            "    networks:",
            "      testnet:",
            f"        ipv4_address: {compose_host(i)}",
            "    healthcheck:",
            '      test: ["CMD", "concilium", "node", "status", "--data-dir", "/data", "--max-age", "30"]',
            "      interval: 10s",
            "      timeout: 5s",
            "      retries: 3",
            "    restart: unless-stopped",
        ]
    lines += ["networks:", "  testnet:", "    ipam:", "      config:", f"        - subnet: {COMPOSE_SUBNET}", "volumes:"]
    lines += [f"  node-{f.index}-data:" for f in files]
    return "\n".join(lines) + "\n"


@dataclass(slots=True)
class _NodeWatch:
    files: NodeFiles
    proc: subprocess.Popen[bytes]
    log: Path
    offset: int = 0
    height: int = 0
    decided: dict[int, dict[str, Any]] = field(default_factory=dict)
    local: dict[int, float] = field(default_factory=dict)
    """Height → this node's accuracy of that height's model on its own validation split (its ``evaluated`` events)."""
    finished: bool = False
    """It logged ``done``: the last round stored, its archive complete (or given up on)."""
    done: bool = False
    errors: list[str] = field(default_factory=list)


def _child_setup() -> None:  # pragma: no cover - runs in the child between fork and exec
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    try:
        import ctypes  # noqa: PLC0415

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG: die with us
    except (OSError, AttributeError):
        pass


class LocalTestnet:
    """``concilium testnet local``: run ``scenario`` as N node processes on 127.0.0.1 (see the module)."""

    def __init__(self, scenario: Scenario, out: Path, *, progress: bool = True, timeout_s: float = 600.0,
                 data: Path | None = None, app: Path | None = None) -> None:
        check_network_adversary(scenario)
        self.sc = scenario
        self.out = out
        self.data = data
        self.app = app
        self.progress = progress
        self.timeout_s = timeout_s
        self.world = World.build(scenario)
        self.test = self.world.test
        """The split the supervisor evaluates the committed models on: the scenario's test split, or the split
        folder's ``test/`` with ``--data``."""
        if data is not None:
            m = read_manifest(data)
            if isinstance(m.get("test"), dict):
                from learning import DataContract, LocalData, load_local  # noqa: PLC0415

                contract = DataContract.from_params(m["contract"], f"{data}/manifest.json: contract")
                self.test, _ = load_local(LocalData(path=str(Path(data) / m["test"]["path"]), format="npz"), contract)
        self.nodes: list[_NodeWatch] = []
        self.metrics: list[dict[str, Any]] = []

    def start(self) -> None:
        n = self.sc.members
        ports = free_ports(n)
        files = write_testnet(self.out, self.world, keys=self.world.keys, hosts=["127.0.0.1"] * n, ports=ports,
                              listen_host="127.0.0.1", addrs_in_genesis=False, data=self.data, app=self.app)
        env = dict(os.environ, PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
        for f in files:
            log = f.dir / "node.log"
            # every node stays up (serving blocks and blobs) until the supervisor stops them all, once each has
            # stored the last round with every blob its ledger references (a node that left early could hold
            # the only copies of a round's updates that another node's archive still lacks)
            cmd = [sys.executable, "-m", "concilium", "node", "start", "--config", str(f.config), "--log-format", "json",
                   "--until-height", str(self.sc.rounds), "--linger", str(LINGER_S), "--status-every", "2"]
            with open(log, "wb") as stdout, open(f.dir / "stderr.log", "wb") as stderr:
                proc = subprocess.Popen(cmd, stdout=stdout, stderr=stderr, stdin=subprocess.DEVNULL,
                                        env=env, preexec_fn=_child_setup)  # noqa: PLW1509 - only signal/prctl calls
            self.nodes.append(_NodeWatch(f, proc, log))

    def _poll(self) -> None:
        for w in self.nodes:
            events, w.offset = read_events(w.log, w.offset)
            for ev in events:
                if ev.get("event") == "decided" and isinstance(ev.get("height"), int):
                    w.decided[ev["height"]] = ev
                    w.height = max(w.height, ev["height"])
                elif ev.get("event") == "evaluated" and isinstance(ev.get("height"), int) and isinstance(
                        ev.get("accuracy"), (int, float)):
                    w.local[ev["height"]] = float(ev["accuracy"])
                elif ev.get("event") == "done":
                    w.finished = True
                elif ev.get("level") == "error":
                    w.errors.append(str(ev)[:300])
            if w.proc.poll() is not None:
                w.done = True

    def _evaluate(self, height: int) -> tuple[float, float]:
        """Test accuracy and loss of the model block ``height`` committed (read from a node's blob store)."""
        import torch  # noqa: PLC0415

        for w in self.nodes:
            ev = w.decided.get(height)
            if ev is None:
                continue
            try:
                digest = bytes.fromhex(str(ev.get("model", "")))
                store = FileBlobStore(w.files.dir / "data" / "ledger" / "blobs", readonly=True)
                blob = store.get(digest) if store.has(digest) else None
            except (ValueError, OSError, LedgerError):
                blob = None
            if blob is None:
                continue
            from learning import blob_to_vector  # noqa: PLC0415

            vec = np.array(blob_to_vector(blob), dtype=np.float32)
            res = self.world.trainer.evaluate(torch.from_numpy(vec), self.test)
            return float(res.accuracy), float(res.loss)
        return math.nan, math.nan

    def run(self) -> dict[str, Any]:
        """Start the nodes, show progress until every node stored the last round, verify every node's ledger."""
        from tqdm import tqdm  # noqa: PLC0415

        t0 = time.monotonic()
        self.start()
        bar = tqdm(total=self.sc.rounds, desc=f"testnet {self.sc.name} ({self.sc.members} nodes)", unit="round",
                   disable=not self.progress, dynamic_ncols=True)
        shown = 0
        interrupted = 0
        finished_at = 0.0
        try:
            while True:
                self._poll()
                top = min((w.height for w in self.nodes), default=0)
                while shown < top:
                    shown += 1
                    m = self._round_metrics(shown, t0)
                    self.metrics.append(m)
                    bar.update(1)
                    bar.set_postfix_str(f"acc {m['accuracy']:.3f} view {m['view']} committee {m['committee']}")
                if all(w.done or w.finished for w in self.nodes):
                    # each node evaluates the last model on its own validation split right after storing it, in its
                    # training thread: give that line a few seconds to arrive (a node without a split never logs one)
                    settled = all(w.done or not w.local or max(w.local) >= w.height for w in self.nodes)
                    finished_at = finished_at or time.monotonic()
                    if settled or time.monotonic() - finished_at > EVAL_GRACE_S:
                        break
                if any(w.done and w.proc.returncode not in (0, None) for w in self.nodes):
                    break
                if time.monotonic() - t0 > self.timeout_s:
                    break
                time.sleep(0.2)
        except KeyboardInterrupt:
            interrupted = signal.SIGINT
        finally:
            bar.close()
            self.stop()
        self._poll()
        return self._summary(time.monotonic() - t0, interrupted)

    def stop(self, grace_s: float = 15.0) -> None:
        stop_processes([w.proc for w in self.nodes], grace_s=grace_s)

    def _round_metrics(self, h: int, t0: float) -> dict[str, Any]:
        ev = next((w.decided[h] for w in self.nodes if h in w.decided), {})
        acc, loss = self._evaluate(h)
        return {
            "fl_round": h,
            "view": int(ev.get("view", 0)),
            "accuracy": acc,
            "loss": loss,
            "accepted": len(ev.get("accepted", [])),
            "committee": " ".join(f"n{self.world.index_of(p)}" for p in ev.get("committee", []) if _is_member(self.world, p)),
            "proposer": f"n{self.world.index_of(ev['proposer'])}" if _is_member(self.world, ev.get("proposer")) else "",
            "evidence": int(ev.get("evidence", 0)),
            "block_hash": ev.get("hash", ""),
            "model_digest": ev.get("model", ""),
            "wall_time_s": round(time.monotonic() - t0, 3),
        }

    def _summary(self, wall: float, interrupted: int) -> dict[str, Any]:
        from sim import ledger_verdict  # noqa: PLC0415

        out = self.out
        for m in self.metrics:  # the members' own validation accuracies beside the public one
            local = {f"local_accuracy_n{w.files.index}": w.local.get(m["fl_round"], math.nan) for w in self.nodes}
            seen = [v for v in local.values() if not math.isnan(v)]
            m["local_accuracy_mean"] = sum(seen) / len(seen) if seen else math.nan
            m["local_accuracy_min"] = min(seen) if seen else math.nan
            m["local_accuracy_max"] = max(seen) if seen else math.nan
            m.update(local)
        if self.metrics:
            with open(out / "metrics.csv", "w", newline="") as f:
                w = csv.writer(f)
                w.writerow(list(self.metrics[0]))
                for m in self.metrics:
                    w.writerow(list(m.values()))
            from sim import accuracy_plot  # noqa: PLC0415

            accuracy_plot(out / "accuracy.png", [(m["fl_round"], m["accuracy"]) for m in self.metrics],
                          f"testnet {self.sc.name} ({self.sc.members} node processes, {self.sc.protocol.mode} mode)")
        ledgers = []
        public = self.world.public_eval()  # the evaluator re-execution needs for a strategy that scores on a public split
        for w in self.nodes:
            path = w.files.dir / "data" / "ledger"
            status, verdict = ledger_verdict(path, public=public) if (path / "chain.sqlite").exists() else (
                "fail", "no ledger")
            ledgers.append({"node": w.files.index, "peer": w.files.peer_id, "ledger": str(path),
                            "verified": status == "ok", "status": status, "verdict": verdict, "height": w.height, "exit_code": w.proc.returncode,
                            "errors": w.errors[:5]})
        heads = {m.get("verdict", "").split("head ")[-1].split(",")[0] for m in ledgers if m["verified"]}
        final = next((m["accuracy"] for m in reversed(self.metrics) if not math.isnan(m["accuracy"])), math.nan)
        summary = {
            "scenario": self.sc.name,
            "seed": self.sc.seed,
            "mode": self.sc.protocol.mode,
            "algorithm": self.sc.protocol.algorithm,
            "nodes": self.sc.members,
            "rounds": len(self.metrics),
            "rounds_wanted": self.sc.rounds,
            "final_accuracy": final,
            "view_changes": sum(m["view"] for m in self.metrics),
            "all_verified": all(m["verified"] for m in ledgers),
            "same_head": len(heads) == 1 and all(m["verified"] for m in ledgers),
            "ledgers": ledgers,
            "wall_seconds": round(wall, 3),
            "interrupted": bool(interrupted),
        }
        (out / "summary.json").write_text(json.dumps(summary, indent=2, default=str) + "\n", encoding="utf-8")
        return summary


def _is_member(world: World, p: Any) -> bool:
    return isinstance(p, str) and any(k.peer_id == p for k in world.keys)
