"""``concilium node start`` and ``concilium testnet init|local``: the command-line side of the network runtime.

Argument parsing and error mapping follow ``concilium.cli`` (exit 2 and one line for bad input). The heavy
imports (torch, py-libp2p, trio) happen only once a command runs.
"""

from __future__ import annotations

import argparse
import dataclasses
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from concilium._repro import rerun_reproducible
from concilium._risk import add_risk_arguments, check_risk

__all__ = ["add_parsers"]

EXIT_OK, EXIT_INVALID, EXIT_USAGE, EXIT_INTERRUPTED, EXIT_TERMINATED = 0, 1, 2, 130, 143
EXIT_NOT_REEXECUTED = 3  # (concilium.cli's: valid chains, rounds not re-executed here)
NODES_MAX = 64
"""``testnet local`` runs every node on this machine."""


def _node_inputs(args: argparse.Namespace) -> Any:
    """The node config from ``--config`` and/or flags (flags win)."""
    from node.config import NodeConfig, NodeDataConfig, load_node_config  # noqa: PLC0415
    from node import ConfigFileError  # noqa: PLC0415

    if args.config:
        cfg = load_node_config(args.config)
    else:
        missing = [f for f, v in (("--genesis", args.genesis), ("--key", args.key), ("--data-dir", args.data_dir)) if not v]
        if missing:
            raise ConfigFileError(f"{missing[0]}: required (or give --config FILE)")
        cfg = NodeConfig(genesis=args.genesis, key=args.key, data_dir=args.data_dir)
    over: dict[str, Any] = {}
    for name in ("genesis", "key", "data_dir", "log_format", "initial_model"):
        v = getattr(args, name)
        if v:
            over[name] = v
    if args.listen:
        over["listen"] = tuple(args.listen)
    if args.peer:
        over["peers"] = tuple(cfg.peers) + tuple(args.peer)
    if args.status_every is not None:
        over["status_every_s"] = args.status_every
    flags = {"path": args.data_path, "format": args.data_format, "label": args.data_label,
             "validation": args.data_validation}
    if any(v is not None for v in flags.values()):
        d = cfg.data
        base = dataclasses.asdict(d) if d is not None else {"path": "", "format": ""}
        if flags["validation"] is not None:
            try:
                flags["validation"] = float(flags["validation"])
            except ValueError:
                pass  # a path
        try:
            over["data"] = NodeDataConfig(**{**base, **{k: v for k, v in flags.items() if v is not None}})
        except ValueError as e:
            raise ConfigFileError(f"--data-path/--data-format: {e}") from None
    try:
        cfg = dataclasses.replace(cfg, **over)
    except ValueError as e:
        raise ConfigFileError(f"{args.config or 'node options'}: {e}") from None
    if cfg.data is None:
        raise ConfigFileError(f"{args.config or '--data-path'}: no training data: give --data-path PATH --data-format "
                              "FORMAT (or a [data] table with path and format in the node config)")
    return cfg


def cmd_node_start(args: argparse.Namespace) -> int:
    from node import ConfigFileError  # noqa: PLC0415
    from node.config import check_listen, load_genesis  # noqa: PLC0415
    from node.keys import load_key  # noqa: PLC0415

    cfg = _node_inputs(args)
    check_listen(cfg.listen)  # (again in the runtime, before it creates anything: here it fails before the imports)
    if args.http is not None:  # checked before anything heavy starts: the extra is there, the address can listen
        from node.explorer import bind, parse_listen, require_web  # noqa: PLC0415

        try:
            require_web()
            bind(*parse_listen(args.http)).close()
        except (ImportError, ValueError) as e:
            raise ConfigFileError(f"--http {args.http}: {e}") from None
        except OSError as e:
            raise ConfigFileError(f"--http {args.http}: cannot listen ({e.strerror})") from None
    genesis = load_genesis(cfg.genesis)
    key = load_key(cfg.key)
    if key.peer_id not in genesis.member_ids:
        raise ConfigFileError(f"{cfg.key}: peer {key.peer_id} is not a member of chain {genesis.chain_id} ({cfg.genesis})")
    peers: dict[str, list[str]] = {}
    for m in genesis.members:
        for a in m.addrs:
            peers.setdefault(m.peer_id, []).append(a if "/p2p/" in a else f"{a}/p2p/{m.peer_id}")
    for a in cfg.peers:
        pid = a.rsplit("/p2p/", 1)[1]
        if pid not in genesis.member_ids:
            raise ConfigFileError(f"--peer {a}: {pid} is not a member of chain {genesis.chain_id}")
        peers.setdefault(pid, []).append(a)
    peers.pop(key.peer_id, None)
    from consensus import DurableStateError  # noqa: PLC0415
    from node.config import record_from_toml  # noqa: PLC0415
    from node.runtime import TransportLimits, check_data_dir  # noqa: PLC0415

    limits = record_from_toml(TransportLimits, dict(cfg.transport or {}), source=f"{args.config or 'node config'}: transport")
    try:  # (again in the runtime, before it creates anything: here it fails before the imports)
        check_data_dir(Path(cfg.data_dir), genesis, key.peer_id, reset_votes=args.reset_votes)
    except DurableStateError as e:
        raise ConfigFileError(f"{cfg.data_dir}: {e}") from None
    rerun = rerun_reproducible(args, cfg.reproducible)
    if rerun is not None:
        return rerun
    if cfg.reproducible:
        from learning import reproducible  # noqa: PLC0415

        reproducible.configure()  # before the first tensor

    import torch  # noqa: PLC0415

    torch.set_num_threads(max(1, args.threads))
    from learning import LearningError, LocalData  # noqa: PLC0415
    from node.apps import load_pinned_app  # noqa: PLC0415
    from node.world import MemberTrainer, MemberWorld, check_rounds_plan, network_adversary, resolve_device  # noqa: PLC0415

    # the app the genesis pins: --app, or the node config's, or an installed one of that name; another is refused
    # here, at start, with both digests, before it is imported (a validator with other code could never agree)
    load_pinned_app(genesis.protocol.params, args.app or cfg.app or None, what=str(cfg.genesis))
    # the node's own device, checked here at start
    dev = resolve_device(args.device or cfg.device or "auto", "--device" if args.device else (args.config or "--device"))
    data = cfg.data
    try:
        local = LocalData.from_params(data.local_params(), f"{args.config or 'node options'}: data")
        public = LocalData.from_params({"path": data.public, "format": data.public_format},
                                       f"{args.config or 'node options'}: data.public") if data.public else None
    except LearningError as e:
        raise ConfigFileError(str(e)) from None
    # this member's world, from the genesis and its own config only: its data, its model, its trainer (no simulator)
    world = MemberWorld.build(genesis, key.peer_id, local, device=dev, initial_model_file=cfg.initial_model or None,
                              public=public, what=str(cfg.genesis))
    role = cfg.adversary
    trainer = MemberTrainer(world, role)
    adversary = network_adversary(genesis, key, role.faults if role is not None else (), world.rng)
    public_eval = world.public_eval()
    # (after the app, whose strategies the genesis may name, and with the public split a strategy may score on)
    check_rounds_plan(genesis, what=str(cfg.genesis), public=public_eval)

    import trio  # noqa: PLC0415

    from node.runtime import EventLog, NodeOptions, NodeRuntime, run_node  # noqa: PLC0415

    log = EventLog(sys.stdout, fmt=cfg.log_format, name=f"n{world.index}")
    log("data", samples=len(world.data), validation=len(world.validation) if world.validation is not None else 0,
        public=len(world.public_data) if world.public_data is not None else 0, device=dev,
        shape=list(world.contract.shape), classes=world.contract.classes, **{f"from_{k}": v for k, v in world.sources.items()})
    options = NodeOptions(
        listen=cfg.listen,
        peers={p: tuple(a) for p, a in peers.items()},
        status_every_s=cfg.status_every_s,
        log_format=cfg.log_format,
        stop_at_height=args.until_height,
        linger_s=max(0.0, min(args.linger, 3600.0)),
        limits=limits,
        http=args.http,
        reset_votes=args.reset_votes,
        archive_wait_s=max(0.0, min(args.archive_wait, 86400.0)),
    )
    try:
        runtime = NodeRuntime(genesis=genesis, key=key, data_dir=cfg.data_dir, initial_model=world.theta0,
                              trainer=trainer, options=options, log=log, adversary=adversary, public=public_eval)
    except DurableStateError as e:
        raise ConfigFileError(f"{cfg.data_dir}: {e}") from None
    signum = trio.run(run_node, runtime)
    if signum:
        return EXIT_TERMINATED if signum == signal.SIGTERM else EXIT_INTERRUPTED
    if runtime.blobs_missing:  # its ledger would fail `ledger verify`: never a success
        print(f"concilium: error: {cfg.data_dir}: stopped at height {runtime.stored_height} with "
              f"{runtime.blobs_missing} referenced blobs missing (no peer served them): the ledger does not verify "
              "until they are fetched; start the node again with its peers up", file=sys.stderr)
        return EXIT_INVALID
    return EXIT_OK


def cmd_node_status(args: argparse.Namespace) -> int:
    """Print a node's ``status.json``; exit 1 if it is older than ``--max-age`` seconds (a health check)."""
    import json  # noqa: PLC0415

    from node import ConfigFileError  # noqa: PLC0415
    from node.config import STATUS_FILE  # noqa: PLC0415

    path = Path(args.data_dir) / STATUS_FILE
    try:
        raw = path.read_bytes()[: 1 << 20]
        st = json.loads(raw)
        ts = float(st["ts"])
    except FileNotFoundError:
        raise ConfigFileError(f"{path}: no status file (is a node running with --data-dir {args.data_dir}?)") from None
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ConfigFileError(f"{path}: not a node status file ({type(e).__name__})") from None
    age = time.time() - ts
    print(json.dumps({**st, "age_s": round(age, 3)}))
    return EXIT_OK if args.max_age is None or age <= args.max_age else EXIT_INVALID


def _load_scenario_for(args: argparse.Namespace) -> tuple[Any, Path]:
    from node import ConfigFileError  # noqa: PLC0415
    from sim import check_network_adversary, load_scenario, resolve_scenario  # noqa: PLC0415

    path = resolve_scenario(args.scenario or "testnet")
    over: dict[str, Any] = {}
    if getattr(args, "rounds", None):
        over["rounds"] = args.rounds
    if getattr(args, "nodes", None):
        over["members"] = args.nodes
    scenario = load_scenario(path, sets=getattr(args, "set", None) or (), **over)
    try:
        check_network_adversary(scenario)
    except ValueError as e:
        raise ConfigFileError(f"{path}: {e}") from None
    return scenario, path


def _split_folder(args: argparse.Namespace) -> Path | None:
    """``--data DIR``: a ``concilium data split`` folder (its manifest is checked when the nodes are wired)."""
    if not getattr(args, "data", None):
        return None
    from concilium._data import read_manifest  # noqa: PLC0415

    read_manifest(args.data)
    return Path(args.data).resolve()


def cmd_testnet_init(args: argparse.Namespace) -> int:
    from learning import LearningError  # noqa: PLC0415
    from node import ConfigFileError  # noqa: PLC0415
    from concilium._testnet import init_testnet  # noqa: PLC0415
    from node.apps import app_of_scenario  # noqa: PLC0415
    from sim import results_folder, write_scenario  # noqa: PLC0415

    scenario, path = _load_scenario_for(args)
    rerun = rerun_reproducible(args, scenario.training.reproducible)  # the genesis' initial model is trained bits
    if rerun is not None:
        return rerun
    p = scenario.protocol  # the genesis' members, committee, quorum, mode and fl_rounds (= scenario.rounds)
    risk = check_risk(args, members=scenario.members, committee_size=p.committee_size, quorum=p.quorum, mode=p.mode,
                      params=p.params, planned_rounds=scenario.rounds, scenario_risk=scenario.risk,
                      what=f"{path}: protocol.committee_size {p.committee_size}",
                      redraw=p.params.get("redraw_ticks") != 0)  # (absent: the genesis default re-draws)
    with results_folder(args.out, force=args.force) as out:
        if getattr(args, "nodes", None) or getattr(args, "set", None) or scenario.app:  # the effective scenario
            # (an app is copied beside it, and named relative to it)
            write_scenario(scenario, out)
        else:
            (out / "scenario.toml").write_bytes(path.read_bytes())
        try:
            files = init_testnet(scenario, out, hosts=args.host or ["127.0.0.1"], base_port=args.base_port,
                                 derived_keys=False, compose=args.compose, data=_split_folder(args),
                                 app=app_of_scenario(out / "scenario.toml"))
        except (LearningError, ValueError) as e:
            raise ConfigFileError(f"{path}: {e}") from None
    print(f"testnet {scenario.name}: {len(files)} nodes in {args.out}/ (genesis.toml, nodes/node-<i>/node.toml and node.key)")
    for f in files:
        print(f"  node-{f.index}: {f.peer_id}  {f.address}")
    print(f"start each node with: concilium node start --config {args.out}/nodes/node-<i>/node.toml")
    print("\n".join(risk))
    return EXIT_OK


def cmd_testnet_local(args: argparse.Namespace) -> int:
    from learning import LearningError  # noqa: PLC0415
    from node import ConfigFileError  # noqa: PLC0415
    from concilium._testnet import LocalTestnet  # noqa: PLC0415
    from node.apps import app_of_scenario  # noqa: PLC0415
    from sim import results_folder, write_scenario  # noqa: PLC0415

    scenario, path = _load_scenario_for(args)
    rerun = rerun_reproducible(args, scenario.training.reproducible)  # the node processes inherit the mode
    if rerun is not None:
        return rerun
    name = scenario.name
    out_arg = args.out if args.out is not None else Path("results") / f"testnet-{name}-{time.strftime('%Y%m%d-%H%M%S')}"
    with results_folder(out_arg, force=args.force) as out:
        write_scenario(scenario, out)  # (its app, if any, copied beside it: the nodes load that copy)
        try:
            net = LocalTestnet(scenario, out, progress=not args.quiet, timeout_s=args.timeout,
                               data=_split_folder(args), app=app_of_scenario(out / "scenario.toml"))
        except (LearningError, ValueError) as e:  # the scenario's data/model cannot be built (a missing file...)
            raise ConfigFileError(f"{path}: {e}") from None
        summary = net.run()
        if summary["interrupted"]:
            raise KeyboardInterrupt
    print(f"testnet {summary['scenario']}: {summary['nodes']} node processes, {summary['rounds']}/{summary['rounds_wanted']} "
          f"rounds, final accuracy {summary['final_accuracy']:.4f}, view changes {summary['view_changes']}, "
          f"{summary['wall_seconds']:.1f} s")
    for led in summary["ledgers"]:
        print(f"  node-{led['node']}: {led['verdict']}")
    print(f"results in {out_arg}/ (metrics.csv, summary.json, accuracy.png, nodes/node-<i>/data/ledger, node.log)")
    ok = summary["all_verified"] and summary["same_head"] and summary["rounds"] == summary["rounds_wanted"]
    if not ok and summary["rounds"] == summary["rounds_wanted"] and summary["ledgers"] and all(
            led.get("status") == "not_reexecuted" for led in summary["ledgers"]):
        return EXIT_NOT_REEXECUTED  # valid chains whose rounds could not be re-executed here (never an OK)
    return EXIT_OK if ok else EXIT_INVALID


def add_parsers(sub: Any, int_in: Callable[[int, int], Callable[[str], int]], rounds_max: int) -> None:
    n = sub.add_parser("node", help="run a peer node on the network").add_subparsers(dest="sub", required=True)
    ns = n.add_parser("start", help="start a node (trio + py-libp2p, Noise, Yamux); Ctrl-C stops it cleanly",
                      description="Start a peer node: the same node core the simulator runs, on real sockets.")
    ns.add_argument("--config", help="node config TOML (genesis, key, data_dir, listen, peers, [data]); flags override it")
    ns.add_argument("--genesis", help="genesis TOML file")
    ns.add_argument("--key", help="this node's key file (concilium keygen)")
    ns.add_argument("--data-dir", dest="data_dir", help="durable state: the ledger and the vote log")
    ns.add_argument("--listen", action="append", metavar="MULTIADDR", help="e.g. /ip4/0.0.0.0/tcp/4001 (repeatable)")
    ns.add_argument("--peer", action="append", metavar="MULTIADDR", help="/ip4/HOST/tcp/PORT/p2p/PEERID of another member")
    ns.add_argument("--data-path", dest="data_path", metavar="PATH",
                    help="this node's own training data: a file or folder (default: the node config's [data] path)")
    ns.add_argument("--data-format", dest="data_format", metavar="FORMAT",
                    help="npz, csv, imagefolder, idx, cifar10, leaf or hf-disk (default: the node config's)")
    ns.add_argument("--data-label", dest="data_label", metavar="NAME",
                    help="the label column or key (default per format: y, label, the folder names)")
    ns.add_argument("--data-validation", dest="data_validation", metavar="FRACTION|PATH",
                    help="the local validation split: a fraction of the data held out, or a path in the same format")
    ns.add_argument("--initial-model", dest="initial_model", metavar="FILE",
                    help="the genesis' initial model (testnet init writes model0.bin; default: re-derived and checked)")
    ns.add_argument("--device", metavar="auto|cpu|cuda|cuda:N|mps",
                    help="this node's training device (default: the node config's device, else auto: CUDA where "
                         "present, else MPS, else the CPU)")
    ns.add_argument("--app", metavar="PATH", help="the app the genesis pins (a .py file or a package directory; "
                                                  "default: the node config's app, else an installed one of that name)")
    ns.add_argument("--log-format", dest="log_format", choices=("human", "json"), help="log lines (default human)")
    ns.add_argument("--status-every", dest="status_every", type=float, help="seconds between status lines (default 5)")
    ns.add_argument("--until-height", dest="until_height", type=int_in(1, rounds_max),
                    help="stop once this height is stored (default: run until Ctrl-C or SIGTERM)")
    ns.add_argument("--linger", type=float, default=3.0,
                    help="with --until-height: seconds to keep serving peers after it (default 3)")
    ns.add_argument("--threads", type=int_in(1, 256), default=1, help="torch threads for local training (default 1)")
    ns.add_argument("--archive-wait", dest="archive_wait", type=float, default=60.0,
                    help="with --until-height: seconds to wait for referenced blobs still missing (default 60); a node "
                         "that stops without them exits 1 (its ledger would not verify)")
    ns.add_argument("--reset-votes", dest="reset_votes", action="store_true",
                    help="start although the vote log (votes.bin) is missing and the ledger holds blocks: only if no "
                         "other process runs this key")
    ns.add_argument("--http", metavar="HOST:PORT",
                    help="serve the ledger explorer, /status (JSON) and /metrics (Prometheus) on this address, "
                         "e.g. 127.0.0.1:8080 (needs pip install 'concilium[web]'; keep it on 127.0.0.1 or a "
                         "private interface)")
    ns.set_defaults(func=cmd_node_start)

    nst = n.add_parser("status", help="print a node's last status (exit 1 if older than --max-age seconds)")
    nst.add_argument("--data-dir", dest="data_dir", required=True, help="the node's data dir")
    nst.add_argument("--max-age", dest="max_age", type=float, help="fail when the status is older than this")
    nst.set_defaults(func=cmd_node_status)

    t = sub.add_parser("testnet", help="networks of node processes").add_subparsers(dest="sub", required=True)
    ti = t.add_parser("init", help="write keys, a genesis with addresses and a config per node, for N machines")
    ti.add_argument("--nodes", type=int_in(1, 1 << 16), help="number of nodes (default: the scenario's members)")
    ti.add_argument("--out", required=True, help="folder to write (new or empty)")
    ti.add_argument("--scenario", help="scenario file or bundled name (default: testnet)")
    ti.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="override a scenario key, dotted (as sim run --set); repeatable")
    ti.add_argument("--host", action="append", metavar="IP",
                    help="each node's IPv4 address in order (repeat per node), or one for all (default 127.0.0.1)")
    ti.add_argument("--base-port", dest="base_port", type=int_in(1, 65535 - 1024), default=4001,
                    help="TCP port of node 0 (node i uses base + i when they share a host; default 4001)")
    ti.add_argument("--compose", action="store_true",
                    help="also write compose.yaml: one container per node at a static address (172.28.0.10+i)")
    ti.add_argument("--data", metavar="DIR",
                    help="a concilium data split folder: node i trains on DIR/member-<i>/ (default: the scenario's "
                         "partition, materialized per node under OUT/data/)")
    ti.add_argument("--force", action="store_true", help="replace an earlier folder at --out")
    add_risk_arguments(ti, rounds_type=int_in(1, 2**63 - 1), refuses=True, scenario=True)
    ti.set_defaults(func=cmd_testnet_init)

    tl = t.add_parser("local", help="run N node processes on 127.0.0.1 with a progress bar and a results folder")
    tl.add_argument("-n", "--nodes", type=int_in(1, NODES_MAX), help="number of node processes (default: the scenario's members)")
    tl.add_argument("--scenario", help="scenario file or bundled name (default: testnet)")
    tl.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="override a scenario key, dotted (as sim run --set); repeatable")
    tl.add_argument("--rounds", type=int_in(1, rounds_max), help="override the scenario's number of rounds")
    tl.add_argument("--out", help="results folder, new or empty (default: results/testnet-<scenario>-<timestamp>)")
    tl.add_argument("--data", metavar="DIR",
                    help="a concilium data split folder: node i trains on DIR/member-<i>/ (default: the scenario's "
                         "partition, materialized per node under OUT/data/)")
    tl.add_argument("--force", action="store_true", help="replace an earlier results folder at --out")
    tl.add_argument("--quiet", action="store_true", help="no progress bar")
    tl.add_argument("--timeout", type=float, default=600.0, help="give up after this many seconds (default 600)")
    tl.set_defaults(func=cmd_testnet_local)

