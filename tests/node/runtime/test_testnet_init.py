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
        assert cfg.listen == ("/ip4/0.0.0.0/tcp/4001",) and cfg.data is not None and cfg.data.member == i
        assert Path(cfg.data.scenario).is_file() and Path(cfg.genesis).is_file()
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
        (["node", "start", "--config", str(cfg), "--data", str(tmp_path / "nope.toml")], "nope.toml"),
        (["node", "start", "--config", str(cfg), "--key", str(out / "nodes" / "node-1" / "missing.key")], "no such key file"),
        (["node", "start", "--config", str(cfg), "--peer", "/ip4/127.0.0.1/tcp/1"], "must end in /p2p/"),
        (["node", "status", "--data-dir", str(tmp_path)], "no status file"),
        (["testnet", "local", "--scenario", "seed001_bounded", "--out", str(tmp_path / "t1")], "simulator-only"),
        (["testnet", "init", "--scenario", "coordinator_corrupt", "--out", str(tmp_path / "t2")], "simulator-only"),
        (["testnet", "local", "-n", "3", "--out", str(tmp_path / "t3")], "committee_size exceeds members"),
    ]
    for argv, needle in cases:
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith("concilium: error: ") and needle in err, (argv, err)
    assert not (out / "nodes" / "node-0" / "data").exists()  # nothing written by a refused start
    assert not any((tmp_path / t).exists() for t in ("t1", "t2", "t3"))
