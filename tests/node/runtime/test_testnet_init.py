"""``concilium testnet init`` (keys, genesis with addresses, node configs, compose file) and ``node start``'s
input errors: every file it writes is read back by the real loaders and the real CLI parser."""

from __future__ import annotations

import ipaddress
import stat
from pathlib import Path

import yaml

from concilium.cli import build_parser, main
from learning import dir_digest
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
        # node i trains on its own materialized partition (npz), with a validation split and the genesis' θ_0, all
        # inside its own directory: the directory alone starts on a machine (test_sigterm_... below copies it alone)
        node_dir = out / "nodes" / f"node-{i}"
        assert cfg.listen == ("/ip4/0.0.0.0/tcp/4001",) and cfg.data is not None and cfg.data.format == "npz"
        for f in (cfg.data.path, cfg.data.validation, cfg.genesis, cfg.initial_model, cfg.key):
            assert Path(f).is_file() and Path(f).resolve().is_relative_to(node_dir.resolve()), f
        assert dir_digest(cfg.data.path) == dir_digest(out / "data" / f"member-{i}" / "data.npz")
        assert load_genesis(cfg.genesis).hash() == genesis.hash()
    # fresh keys and a chain id of its own: a second network of the same scenario gets other peer ids and another
    # chain id (so neither accepts the other's signatures)
    assert main(["testnet", "init", "--nodes", "4", "--out", str(tmp_path / "net2")]) == 0
    second = load_genesis(tmp_path / "net2" / "genesis.toml")
    assert {m.peer_id for m in second.members}.isdisjoint(m.peer_id for m in genesis.members)
    assert second.chain_id != genesis.chain_id and genesis.chain_id.startswith("testnet-")


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
        i = int(name.removeprefix("node-"))
        # its own node directory only (read-only), its state in a volume of its own, the key via the entrypoint
        assert svc["volumes"] == [f"./nodes/node-{i}:/node:ro", f"node-{i}-data:/data"], svc["volumes"]
        assert svc["environment"] == {"CONCILIUM_KEY": "/node/node.key"} and args.config == "/node/node.toml"
        # the config inside the container is the node directory mounted at /node: every file it names is in there
        cfg = load_node_config(out / "nodes" / f"node-{i}" / Path(args.config).relative_to("/node"))
        for f in (cfg.data.path, cfg.genesis, cfg.initial_model, cfg.key):
            assert Path(f).resolve().is_relative_to((out / "nodes" / f"node-{i}").resolve()), (name, f)
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
        # a scenario that loads but whose first round cannot be planned with 4 nodes: refused before anything is written
        (["testnet", "init", "--scenario", "committee_crash", "--nodes", "4", "--out", str(tmp_path / "t4")],
         "cannot sample 12 training clients"),
        (["testnet", "init", "--nodes", "4", "--host", "10.0.0.1", "--host", "10.0.0.2", "--host", "10.0.0.3",
          "--out", str(tmp_path / "t5")], "--host: 3 given for 4 nodes"),
        (["testnet", "init", "--nodes", "4", "--host", "bad_name!", "--out", str(tmp_path / "t6")], "not a DNS name"),
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
    assert not any((tmp_path / t).exists() for t in ("t1", "t2", "t3", "t4", "t5", "t6"))


def test_node_start_names_a_missing_local_data_file(tmp_path: Path, capsys, one_node: str) -> None:  # noqa: ANN001
    (tmp_path / "one.toml").write_text(one_node)
    assert main(["testnet", "init", "--scenario", str(tmp_path / "one.toml"), "--out", str(tmp_path / "net")]) == 0
    (tmp_path / "no-mnist").mkdir()
    capsys.readouterr()
    code = main(["node", "start", "--config", str(tmp_path / "net" / "nodes" / "node-0" / "node.toml"),
                 "--data-path", str(tmp_path / "no-mnist"), "--data-format", "idx"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "no-mnist" in err and "idx" in err, err


def test_sigterm_stops_a_node_cleanly_and_its_ledger_verifies(tmp_path: Path, one_node: str) -> None:
    import json
    import signal
    import subprocess
    import sys
    import time

    from sim._run import verify_ledger

    (tmp_path / "one.toml").write_text(one_node)
    assert main(["testnet", "init", "--scenario", str(tmp_path / "one.toml"), "--out", str(tmp_path / "net"),
                 "--base-port", "0"]) == 2  # port 0 is not a port a genesis can name
    assert main(["testnet", "init", "--scenario", str(tmp_path / "one.toml"), "--out", str(tmp_path / "net")]) == 0
    import shutil

    node = tmp_path / "elsewhere" / "node-0"  # the node directory alone, copied away from its testnet folder
    shutil.copytree(tmp_path / "net" / "nodes" / "node-0", node)
    shutil.rmtree(tmp_path / "net")
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
    assert status["stored"] >= 3 and status["chain"] == load_genesis(node / "genesis.toml").chain_id
    # its vote log gone while its ledger holds blocks: it refuses to start (it could sign twice), and writes
    # nothing; --reset-votes starts it
    (node / "data" / "votes.bin").unlink()
    before = sorted((p.relative_to(node), p.stat().st_size) for p in (node / "data").rglob("*") if p.is_file())
    again = [sys.executable, "-m", "concilium", "node", "start", "--config", str(node / "node.toml"), "--listen",
             f"/ip4/127.0.0.1/tcp/{port}", "--until-height", "1", "--linger", "0"]
    r = subprocess.run(again, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "votes.bin: missing" in r.stderr, r.stderr
    assert "--reset-votes" in r.stderr
    assert sorted((p.relative_to(node), p.stat().st_size) for p in (node / "data").rglob("*") if p.is_file()) == before
    r = subprocess.run([*again, "--reset-votes"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]


def test_nodes_named_by_dns_dial_each_other(tmp_path: Path, one_node: str) -> None:
    """``--host localhost``: the genesis holds ``/dns4/localhost/tcp/PORT`` addresses, and the transport resolves
    them when it dials (py-libp2p's TCP transport takes IP addresses only): 2 processes commit 2 rounds."""
    import subprocess
    import sys

    from concilium._testnet import free_port_block

    two = one_node.replace("members = 1", "members = 2").replace("committee_size = 1", "committee_size = 2")
    (tmp_path / "two.toml").write_text(two.replace("clients = 1", "clients = 2"))
    base = free_port_block(2)
    net = tmp_path / "net"
    assert main(["testnet", "init", "--scenario", str(tmp_path / "two.toml"), "--host", "localhost", "--base-port",
                 str(base), "--out", str(net)]) == 0
    genesis = load_genesis(net / "genesis.toml")
    assert sorted(a for m in genesis.members for a in m.addrs) == [f"/dns4/localhost/tcp/{base + i}" for i in range(2)]
    procs = [subprocess.Popen([sys.executable, "-m", "concilium", "node", "start", "--config",
                               str(net / "nodes" / f"node-{i}" / "node.toml"), "--until-height", "2", "--linger", "3"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True) for i in range(2)]
    try:
        codes = [p.wait(timeout=120) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    assert codes == [0, 0], [p.stderr.read()[-2000:] for p in procs]
    import json

    for i in range(2):
        status = json.loads((net / "nodes" / f"node-{i}" / "data" / "status.json").read_text())
        assert status["stored"] >= 2 and status["chain"] == genesis.chain_id, status


def test_a_node_refetches_a_deleted_or_corrupted_blob_and_never_exits_0_without_it(
        tmp_path: Path, one_node: str) -> None:
    """At start a node scrubs its archive. Two nodes commit 3 rounds; node 0 stops; one update blob
    of its ledger is deleted and another corrupted. Alone (its peer gone), it logs what it waits for and exits 1
    (its ledger would fail verify); with its peer up, it fetches both again, exits 0, and its ledger verifies."""
    import json
    import subprocess
    import sys

    from concilium._testnet import free_port_block
    from ledger.store import open_ledger
    from sim import verify_ledger

    two = one_node.replace("members = 1", "members = 2").replace("committee_size = 1", "committee_size = 2")
    (tmp_path / "two.toml").write_text(two.replace("clients = 1", "clients = 2"))
    net = tmp_path / "net"
    assert main(["testnet", "init", "--scenario", str(tmp_path / "two.toml"), "--base-port", str(free_port_block(2)),
                 "--out", str(net)]) == 0

    def start(i: int, *extra: str) -> subprocess.Popen[str]:
        return subprocess.Popen([sys.executable, "-m", "concilium", "node", "start", "--config",
                                 str(net / "nodes" / f"node-{i}" / "node.toml"), "--log-format", "json",
                                 "--until-height", "3", *extra], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    peer = start(1, "--linger", "90")
    try:
        first = start(0, "--linger", "1")
        assert first.wait(timeout=120) == 0, first.stderr.read()[-2000:]
        ledger = net / "nodes" / "node-0" / "data" / "ledger"
        store, blobs = open_ledger(ledger, readonly=True)
        with store:
            gone, bad = [u.digest for u in store.get(2).payload.updates][:2]
        path = lambda d: ledger / "blobs" / d.hex()[:2] / d.hex()[2:]  # noqa: E731
        path(gone).unlink()
        path(bad).write_bytes(b"not the blob")
        assert not verify_ledger(ledger)[0]

        peer.terminate()
        peer.wait(timeout=60)
        alone = start(0, "--linger", "0", "--archive-wait", "6")
        out, err = alone.communicate(timeout=120)
        events = [json.loads(x) for x in out.splitlines() if x.startswith("{")]
        scrub = next(e for e in events if e["event"] == "scrub")
        assert scrub["missing"] == 1 and scrub["corrupt"] == 1 and scrub["refetching"] == 2, scrub
        assert any(e["event"] == "waiting" and e["why"] == "no peer connected" for e in events), [e["event"] for e in events]
        done = next(e for e in events if e["event"] == "done")
        assert done["blobs_missing"] == 2 and alone.returncode == 1, (done, alone.returncode)
        assert err.count("\n") == 1 and "2 referenced blobs missing" in err, err

        peer = start(1, "--linger", "90")  # its peer back (it has every blob)
        again = start(0, "--linger", "1")
        out, err = again.communicate(timeout=120)
        assert again.returncode == 0, err[-2000:]
        done = next(json.loads(x) for x in out.splitlines() if x.startswith("{") and '"done"' in x)
        assert done["blobs_missing"] == 0
        ok, verdict = verify_ledger(ledger)
        assert ok and "rounds re-executed" in verdict, verdict
    finally:
        for p in (peer,):
            if p.poll() is None:
                p.terminate()
                p.wait(timeout=60)
