"""``concilium testnet init`` (keys, genesis with addresses, node configs, compose file) and ``node start``'s
input errors: every file it writes is read back by the real loaders and the real CLI parser."""

from __future__ import annotations

import ipaddress
import stat
from pathlib import Path

import yaml

from concilium.cli import build_parser, main
from node.config import load_genesis, load_node_config
from node.keys import load_key


def test_init_writes_a_network_for_separate_machines(tmp_path: Path) -> None:
    out = tmp_path / "net"
    hosts = ["10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4"]
    argv = ["testnet", "init", "--nodes", "4", "--out", str(out)] + [x for h in hosts for x in ("--host", h)]
    assert main(argv) == 0
    genesis = load_genesis(out / "genesis.toml")
    assert len(genesis.members) == 4
    for i, h in enumerate(hosts):
        cfg = load_node_config(out / "nodes" / f"node-{i}" / "node.toml")
        key = load_key(cfg.key)
        assert stat.S_IMODE(Path(cfg.key).stat().st_mode) == 0o600
        member = next(m for m in genesis.members if m.peer_id == key.peer_id)
        assert member.addrs == (f"/ip4/{h}/tcp/4001",)  # separate hosts: the same port on each
        # node i trains on its own materialized partition (npz), with a validation split and the genesis' θ_0
        assert cfg.listen == ("/ip4/0.0.0.0/tcp/4001",) and cfg.data is not None and cfg.data.format == "npz"
        assert Path(cfg.data.path).is_file() and Path(cfg.data.path).parent.name == f"member-{i}"
        assert Path(cfg.data.validation).is_file() and Path(cfg.genesis).is_file() and Path(cfg.initial_model).is_file()
    # fresh keys: a second network gets other peer ids
    assert main(["testnet", "init", "--nodes", "4", "--out", str(tmp_path / "net2")]) == 0
    assert {m.peer_id for m in load_genesis(tmp_path / "net2" / "genesis.toml").members}.isdisjoint(
        m.peer_id for m in genesis.members
    )


def test_compose_file_runs_valid_node_commands_at_the_genesis_addresses(tmp_path: Path) -> None:
    out = tmp_path / "net"
    assert main(["testnet", "init", "--nodes", "5", "--out", str(out), "--compose"]) == 0
    compose = yaml.safe_load((out / "compose.yaml").read_text())
    genesis = load_genesis(out / "genesis.toml")
    subnet = ipaddress.ip_network(compose["networks"]["testnet"]["ipam"]["config"][0]["subnet"])
    parser = build_parser()
    addrs = {a for m in genesis.members for a in m.addrs}
    assert len(compose["services"]) == 5
    for name, svc in compose["services"].items():
        args = parser.parse_args(svc["command"])  # exits (SystemExit) on an invalid command line
        assert (args.command, args.sub) == ("node", "start") and args.data_dir == "/data"
        health = svc["healthcheck"]["test"]
        assert health[:2] == ["CMD", "concilium"]
        hargs = parser.parse_args(health[2:])
        assert (hargs.command, hargs.sub, hargs.data_dir) == ("node", "status", "/data")
        ip = svc["networks"]["testnet"]["ipv4_address"]
        assert ipaddress.ip_address(ip) in subnet and f"/ip4/{ip}/tcp/4001" in addrs
        for vol in svc["volumes"]:
            src = vol.split(":")[0]
            assert src == "." or src in compose["volumes"], vol
        # the config path inside the container is the testnet folder mounted at /testnet
        cfg = out / Path(args.config).relative_to("/testnet")
        assert load_node_config(cfg).data is not None, name
    assert len({s["networks"]["testnet"]["ipv4_address"] for s in compose["services"].values()}) == 5


def test_node_start_input_errors_are_one_line(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    out = tmp_path / "net"
    assert main(["testnet", "init", "--nodes", "4", "--out", str(out)]) == 0
    capsys.readouterr()
    cfg = out / "nodes" / "node-0" / "node.toml"
    cases = [
        (["node", "start", "--config", str(tmp_path / "missing.toml")], "no such node config file"),
        (["node", "start", "--genesis", str(out / "genesis.toml")], "--key: required"),
        (["node", "start", "--config", str(cfg), "--data-path", str(tmp_path / "nope.npz")], "nope.npz"),
        (["node", "start", "--config", str(cfg), "--data-format", "parquet"], "parquet"),
        (["node", "start", "--config", str(cfg), "--key", str(out / "nodes" / "node-1" / "missing.key")], "no such key file"),
        (["node", "start", "--config", str(cfg), "--peer", "/ip4/127.0.0.1/tcp/1"], "must end in /p2p/"),
        (["node", "status", "--data-dir", str(tmp_path)], "no status file"),
        (["testnet", "local", "--scenario", "seed001_bounded", "--out", str(tmp_path / "t1")], "simulator-only"),
        (["testnet", "init", "--scenario", "coordinator_corrupt", "--out", str(tmp_path / "t2")], "simulator-only"),
        (["testnet", "local", "-n", "3", "--out", str(tmp_path / "t3")], "committee_size exceeds members"),
    ]
    bad_limits = out / "nodes" / "node-0" / "bad-limits.toml"
    bad_limits.write_text(cfg.read_text() + "\n[transport]\nheader_timeout_s = -1\n")
    unknown_limit = out / "nodes" / "node-0" / "unknown-limit.toml"
    unknown_limit.write_text(cfg.read_text() + "\n[transport]\nheader_timeout = 5\n")
    cases += [
        (["node", "start", "--config", str(bad_limits)], "header_timeout_s"),
        (["node", "start", "--config", str(unknown_limit)], "unknown field header_timeout"),
    ]
    for argv, needle in cases:
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith("concilium: error: ") and needle in err, (argv, err)
    assert not (out / "nodes" / "node-0" / "data").exists()  # nothing written by a refused start
    assert not any((tmp_path / t).exists() for t in ("t1", "t2", "t3"))


ONE_NODE = """
name = "one"
seed = 0
rounds = 100000
members = 1
[protocol]
mode = "coordinator"
algorithm = "fedavg"
committee_size = 1
params = { clients = 1 }
tick_ms = 20
[data]
dataset = "digits"
partition = "iid"
[model]
name = "mlp"
params = { in_features = 64, hidden = [8], num_classes = 10 }
[training]
steps = 2
"""


def test_node_start_names_a_missing_local_data_file(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    (tmp_path / "one.toml").write_text(ONE_NODE)
    assert main(["testnet", "init", "--scenario", str(tmp_path / "one.toml"), "--out", str(tmp_path / "net")]) == 0
    (tmp_path / "no-mnist").mkdir()
    capsys.readouterr()
    code = main(["node", "start", "--config", str(tmp_path / "net" / "nodes" / "node-0" / "node.toml"),
                 "--data-path", str(tmp_path / "no-mnist"), "--data-format", "idx"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "no-mnist" in err and "idx" in err, err


def test_sigterm_stops_a_node_cleanly_and_its_ledger_verifies(tmp_path: Path) -> None:
    import json
    import signal
    import subprocess
    import sys
    import time

    from sim._run import verify_ledger

    (tmp_path / "one.toml").write_text(ONE_NODE)
    assert main(["testnet", "init", "--scenario", str(tmp_path / "one.toml"), "--out", str(tmp_path / "net"),
                 "--base-port", "0"]) == 2  # port 0 is not a port a genesis can name
    assert main(["testnet", "init", "--scenario", str(tmp_path / "one.toml"), "--out", str(tmp_path / "net")]) == 0
    node = tmp_path / "net" / "nodes" / "node-0"
    with (node / "node.toml").open("a") as f:  # the node config's [transport] table reaches the transport
        f.write("\n[transport]\nheader_timeout_s = 45.0\nban_s = 7\n")
    from concilium._testnet import free_ports

    port = free_ports(1)[0]
    proc = subprocess.Popen(
        [sys.executable, "-m", "concilium", "node", "start", "--config", str(node / "node.toml"), "--listen",
         f"/ip4/127.0.0.1/tcp/{port}", "--log-format", "json", "--status-every", "0.5"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            st = node / "data" / "status.json"
            if st.exists() and json.loads(st.read_text()).get("stored", 0) >= 3:
                break
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.1)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 143, err[-2000:]
    lines = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    started = next(e for e in lines if e["event"] == "started")
    assert started["limits"] == {"header_timeout_s": 45.0, "ban_s": 7}, started
    events = [e["event"] for e in lines]
    assert events[-1] == "stopped" and "signal" in events[-4:], events[-5:]  # the block in flight may still commit
    ok, verdict = verify_ledger(node / "data" / "ledger")
    assert ok and "rounds re-executed" in verdict, verdict
    status = json.loads((node / "data" / "status.json").read_text())
    assert status["stored"] >= 3 and status["chain"] == "sim-one-0"
