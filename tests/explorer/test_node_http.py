"""``concilium node start --http``: a real node process serves ``/status``, ``/metrics`` and the explorer over its
live ledger (one node of a 4-node testnet, alone: it listens and waits for its peers; that is enough to read)."""

from __future__ import annotations

import json
import queue
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import urllib.request
from pathlib import Path

import pytest

from node.config import load_genesis


@pytest.fixture(scope="module")
def testnet(tmp_path_factory: pytest.TempPathFactory, run_cli) -> Path:  # noqa: ANN001
    out = tmp_path_factory.mktemp("node-http") / "tn"
    code, text = run_cli("testnet", "init", "--out", str(out), "--base-port", "47301")
    assert code == 0, text
    return out


def _get(url: str) -> tuple[int, str, str]:
    with urllib.request.urlopen(url, timeout=30) as r:  # noqa: S310 - a local test server
        return r.status, r.headers["content-type"], r.read().decode()


def test_a_running_node_serves_status_metrics_and_its_ledger(testnet: Path) -> None:
    node = subprocess.Popen(
        [sys.executable, "-m", "concilium", "node", "start", "--config", str(testnet / "nodes" / "node-0" / "node.toml"),
         "--listen", f"/ip4/127.0.0.1/tcp/{_free_port()}", "--http", "127.0.0.1:0", "--log-format", "json"],
        stdout=subprocess.PIPE, stderr=(err := tempfile.TemporaryFile("w+")), text=True,
    )
    lines: queue.Queue[str] = queue.Queue()

    def pump() -> None:
        for x in node.stdout:  # type: ignore[union-attr]
            lines.put(x)
        lines.put("")

    threading.Thread(target=pump, daemon=True).start()
    try:
        url = None
        while url is None:
            try:
                line = lines.get(timeout=120)
            except queue.Empty:
                raise AssertionError("the node did not log its HTTP address in 120 s") from None
            if not line:  # stdout closed: the node stopped
                raise AssertionError(f"the node exited: {node.wait()}: {_read(err)}")
            event = json.loads(line)
            url = event.get("url") if event.get("event") == "http" else None
        assert url.startswith("http://127.0.0.1:")
        status, ctype, body = _get(url + "status")
        st = json.loads(body)
        assert status == 200 and ctype.startswith("application/json")
        for key in ("height", "stored", "view", "role", "peers", "last_block", "dropped", "consensus_dropped", "net"):
            assert key in st, key
        assert st["stored"] == 0 and st["last_block"] == "-" and st["role"] in ("committee", "trainer", "observer")
        status, ctype, text = _get(url + "metrics")
        assert status == 200 and ctype.startswith("text/plain; version=0.0.4")
        samples = {}
        for ln in text.splitlines():
            if not ln.startswith("#"):
                name, value = ln.rsplit(" ", 1)
                samples[name] = float(value)
        assert samples["concilium_height"] == 0 and samples["concilium_view"] == st["view"]
        assert samples["concilium_peers_connected"] == st["peers"]
        assert samples["concilium_rounds_total"] == 0 and samples["concilium_view_changes_total"] == 0
        chain = load_genesis(testnet / "genesis.toml").chain_id  # (testnet init draws a chain id of its own)
        assert chain.startswith("testnet-") and chain != "sim-testnet-0"
        assert samples[f'concilium_node_info{{chain="{chain}",peer="{_peer(testnet)}",role="{st["role"]}"}}'] == 1
        for family in ("concilium_messages_sent_total", "concilium_dropped_inputs_total", "concilium_training_seconds_total"):
            assert f"# TYPE {family} counter" in text
        # the explorer over the node's live ledger (opened read-only beside the node's own writer)
        status, _, html = _get(url)
        assert status == 200 and f'id="chain-id">{chain}<' in html and 'href="/metrics"' in html
        assert json.loads(_get(url + "api/overview")[2])["height"] == 0
    finally:
        node.send_signal(signal.SIGTERM)
        try:
            code = node.wait(timeout=60)
        except subprocess.TimeoutExpired:
            node.kill()
            raise
    assert code == 143, _read(err)


def _read(f) -> str:  # noqa: ANN001
    f.seek(0)
    return f.read()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _peer(testnet: Path) -> str:
    from node.keys import load_key

    return load_key(testnet / "nodes" / "node-0" / "node.key").peer_id


def test_a_bad_http_address_is_refused_before_the_node_starts(testnet: Path, run_cli) -> None:  # noqa: ANN001
    cfg = str(testnet / "nodes" / "node-0" / "node.toml")
    for bad in ("localhost:8080", "127.0.0.1", "127.0.0.1:99999", "192.0.2.1:8080"):
        code, _ = run_cli("node", "start", "--config", cfg, "--http", bad)
        assert code == 2, bad
