"""The explorer through Starlette's test client: the same data as the command line, escaping, no path
traversal, read-only, live appends, the audit in the background, and bad requests."""

from __future__ import annotations

import hashlib
import html
import json
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from starlette.testclient import TestClient

from ledger import primary
from node.explorer import create_app
from node.explorer._metrics import prometheus_text

XSS_NAME = "<img src=x onerror=alert(1)>"


def _client(ledger: Path, **kw: object) -> TestClient:
    return TestClient(create_app(ledger, **kw))


def test_api_serves_what_the_command_line_prints(sim_results, run_cli, run_cli_json, tmp_path):
    L = str(sim_results.ledger)
    c = _client(sim_results.ledger)
    export = run_cli_json("ledger", "export", L, "--json")
    assert c.get("/api/export").json() == export
    assert c.get("/api/genesis").json() == run_cli_json("ledger", "show", L, "0")
    height = len(export["blocks"])
    assert height == 2
    for h in range(1, height + 1):
        assert c.get(f"/api/blocks/{h}/summary").json() == run_cli_json("ledger", "show", L, str(h))
        assert c.get(f"/api/blocks/{h}").json() == export["blocks"][h - 1]
    page = c.get("/api/blocks", params={"limit": 1, "before": 2}).json()
    assert page["blocks"] == [export["blocks"][0]] and page["older"] is None and page["newer"] == 3
    head = c.get("/api/blocks").json()
    assert head["blocks"] == export["blocks"][::-1] and head["height"] == height
    # an inclusion proof download is the file `ledger proof` writes, and it verifies offline
    peer = export["blocks"][1]["payload"]["updates"][0]["peer"]
    r = c.get(f"/api/proof/2/{peer}")
    assert r.status_code == 200 and "attachment" in r.headers["content-disposition"]
    assert r.json() == run_cli_json("ledger", "proof", L, "2", peer)
    (tmp_path / "p.json").write_bytes(r.content)
    code, out = run_cli("ledger", "verify-proof", str(tmp_path / "p.json"), "--genesis", str(sim_results.out / "genesis.toml"))
    assert code == 0 and out.startswith("OK: update")


def test_block_page_data_selection_and_scores(sim_results, run_cli_json):
    c = _client(sim_results.ledger)
    byz_seen = 0
    seed = bytes.fromhex(run_cli_json("ledger", "show", str(sim_results.ledger), "0")["genesis_hash"])
    for h in (1, 2):
        show = run_cli_json("ledger", "show", str(sim_results.ledger), str(h))
        b = c.get(f"/api/blocks/{h}/page").json()
        accepted = [u["peer"] for u in show["updates"]]
        rejected = [p for p in show["record"]["training"] if p not in accepted and p not in show["record"]["excluded"]]
        assert b["selection"]["accepted"] == accepted and b["selection"]["rejected"] == rejected
        assert b["signers"] == show["certified_by"] and set(b["signers"]) <= set(b["committee"])
        # the committee shown is the one that certified the block: its primary for (height, view) is the proposer
        assert primary(tuple(b["committee"]), seed, h, show["view"]) == show["proposer"]
        assert b["replaced"] == [primary(tuple(b["committee"]), seed, h, v) for v in range(show["view"])]
        assert b["scores"]["errors"] == [] and len(b["scores"]["rows"]) == len(show["record"]["rows"])
        ranked = b["scores"]["ranked"]
        for p in sim_results.byzantine:
            if p in show["record"]["training"]:  # the negated model scores worst and is never selected
                byz_seen += 1
                assert p in rejected and p not in accepted
                assert ranked.index(p) >= len(ranked) - len(sim_results.byzantine)
    assert byz_seen > 0, "no Byzantine client trained in these rounds: the test shows nothing"
    ov = c.get("/api/overview").json()
    assert ov["height"] == 2 and [a["fl_round"] for a in ov["accuracy"]] == [1, 2]
    assert ov["genesis"]["genesis_hash"] == ov["genesis_hash"]


def test_display_names_are_escaped(demo_ledger):
    c = _client(demo_ledger)
    peer = c.get("/api/overview").json()["members"][0]
    assert peer["name"] == XSS_NAME  # the API returns the name as it is (JSON, not HTML)
    escaped = "&lt;img src=x onerror=alert(1)&gt;"
    for url in ("/", f"/members/{peer['peer_id']}", "/blocks/1", "/blocks/2", "/blocks"):
        html = c.get(url).text
        assert "<img" not in html, url
        assert "onerror=alert(1)" not in html.replace(escaped, ""), url
    assert escaped in c.get("/").text and escaped in c.get(f"/members/{peer['peer_id']}").text


def test_no_request_reads_a_file_outside(demo_ledger, tmp_path):
    (tmp_path / "secret.txt").write_text("TOPSECRET")
    c = _client(demo_ledger)
    for path in (
        "/static/../secret.txt", "/static/%2e%2e/%2e%2e/secret.txt", "/static/..%2f..%2fsecret.txt",
        "/static/%2e%2e%2fchain.sqlite", "/static/..%2fL%2fchain.sqlite", "/static/%2fetc%2fpasswd",
        "/static/explorer.js%2f..%2f..%2f_app.py", "/static/..%2f_app.py", "/static/..%2ftemplates%2fbase.html",
        "/blocks/..%2f..%2fsecret.txt", "/members/..%2f..%2fsecret.txt", "/members/%2fetc%2fpasswd",
        "/api/proof/1/..%2f..%2fsecret.txt", "/api/members/..%2fchain.sqlite", "/chain.sqlite", "/blobs",
    ):
        r = c.get(path)
        assert r.status_code in (400, 404), (path, r.status_code)
        for leak in (b"TOPSECRET", b"root:", b"SQLite format", b"import ", b"{% block"):
            assert leak not in r.content, (path, leak)
    assert c.get("/static/uPlot.LICENSE").text.startswith("The MIT License")


def _tree(path: Path) -> dict[str, str]:
    return {str(p.relative_to(path)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(path.rglob("*")) if p.is_file()}


def test_nothing_is_ever_written(sim_results, tmp_path):
    ledger = tmp_path / "copy" / "ledger"
    shutil.copytree(sim_results.ledger, ledger)
    before = _tree(ledger.parent)
    c = _client(ledger)
    peer = c.get("/api/overview").json()["members"][0]["peer_id"]
    for url in ("/", "/blocks", "/blocks/1", f"/members/{peer}", "/audit", "/api/export", "/api/blocks/2/page"):
        assert c.get(url).status_code == 200, url
    assert c.post("/api/audit", headers={"x-concilium-audit": "1"}).status_code == 202
    _wait_audit(c)
    assert _tree(ledger.parent) == before  # no -wal, -shm or journal, no byte changed


def test_blocks_another_process_appends_show_on_reload(tmp_path, demo_factory):
    blocks = demo_factory(tmp_path / "L", blocks=3, with_blobs=False)
    shutil.rmtree(tmp_path / "L")
    demo_factory(tmp_path / "L", blocks=2, with_blobs=False)  # the same chain, one block short
    (tmp_path / "b3").write_bytes(blocks[2].encode())
    c = _client(tmp_path / "L")
    assert c.get("/api/overview").json()["height"] == 2
    assert c.get("/blocks/3").status_code == 404
    writer = subprocess.Popen(  # a second process appends block 3 and keeps the ledger open (WAL mode)
        [sys.executable, "-c", (
            "import sys; from pathlib import Path; from ledger import Block; from ledger.store import open_ledger\n"
            "store, _ = open_ledger(sys.argv[1]); store.append(Block.decode(Path(sys.argv[2]).read_bytes()))\n"
            "print('appended', flush=True); sys.stdin.readline(); store.close()"
        ), str(tmp_path / "L"), str(tmp_path / "b3")],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )
    try:
        assert writer.stdout.readline().strip() == "appended"  # type: ignore[union-attr]
        assert (tmp_path / "L" / "chain.sqlite-wal").exists()  # read while a writer holds it in WAL mode
        assert c.get("/api/overview").json()["height"] == 3
        r = c.get("/blocks/3")
        assert r.status_code == 200 and blocks[2].hash().hex() in r.text
    finally:
        writer.communicate("\n", timeout=30)
    assert writer.returncode == 0


def _wait_audit(c: TestClient, timeout_s: float = 120.0) -> dict:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout_s:
        s = c.get("/api/audit").json()
        if s["state"] == "done":
            return s
        time.sleep(0.1)
    raise AssertionError("the audit did not finish")


def _flip_update_blob(ledger: Path, height: int) -> None:
    con = sqlite3.connect(ledger / "chain.sqlite")
    (data,) = con.execute("SELECT data FROM blocks WHERE height = ?", (height,)).fetchone()
    con.close()
    from ledger import Block

    digest = Block.decode(bytes(data)).payload.updates[0].digest.hex()
    blob = ledger / "blobs" / digest[:2] / digest[2:]
    raw = bytearray(blob.read_bytes())
    raw[len(raw) // 2] ^= 0x10
    blob.write_bytes(bytes(raw))


def test_audit_in_the_background_gives_the_verify_verdict(sim_results, tmp_path, run_cli):
    c = _client(sim_results.ledger)
    assert c.get("/api/audit").json()["state"] == "idle"
    assert c.post("/api/audit").status_code == 403  # no header: not from our page
    assert c.post("/api/audit", headers={"x-concilium-audit": "1"}).status_code == 202
    s = _wait_audit(c)
    code, line = run_cli("ledger", "verify", str(sim_results.ledger))
    assert code == 0 and s["ok"] is True and s["line"] == line.strip() and "rounds re-executed" in s["line"]
    assert s["done"] == s["total"] == 2
    # a tampered copy: one update blob of block 2 flipped
    bad = tmp_path / "bad"
    shutil.copytree(sim_results.out, bad)
    _flip_update_blob(bad / "ledger", 2)
    c = _client(bad / "ledger")
    assert c.get("/blocks/2").status_code == 200  # the views still read; the audit finds it
    c.post("/api/audit", headers={"x-concilium-audit": "1"})
    s = _wait_audit(c)
    code, line = run_cli("ledger", "verify", str(bad / "ledger"))
    assert code == 1 and s["ok"] is False and s["first_bad_height"] == 2 and s["line"] == line.strip()
    assert s["line"].startswith("FAIL at height 2")


def test_a_trusted_genesis_that_differs_fails_at_height_0(demo_ledger, tmp_path, sim_results):
    c = _client(demo_ledger, trusted_genesis=sim_results.out / "genesis.toml")
    c.post("/api/audit", headers={"x-concilium-audit": "1"})
    s = _wait_audit(c)
    assert s["ok"] is False and s["first_bad_height"] == 0 and "genesis differs" in s["line"]


def test_bad_requests_and_an_invalid_ledger(demo_ledger, tmp_path):
    c = _client(demo_ledger)
    peer = c.get("/api/overview").json()["members"][0]["peer_id"]
    for url, status in (
        ("/blocks/0", 404), ("/blocks/4", 404), ("/blocks/-1", 400), ("/blocks/99999999999999999999999", 400),
        ("/blocks/1e3", 400), ("/blocks?limit=0", 400), ("/blocks?limit=501", 400), ("/blocks?before=x", 400),
        ("/api/blocks?limit=abc", 400), ("/members/12D3KooWnobody", 404), ("/api/members/x", 404),
        (f"/api/proof/1/{peer}x", 404), ("/api/proof/9/x", 404), ("/status", 404), ("/metrics", 404),
    ):
        r = c.get(url)
        assert r.status_code == status, (url, r.status_code)
        if url.startswith("/api/"):
            assert "error" in r.json()
    assert c.get("/blocks?before=3&limit=1").status_code == 200
    # no ledger there: one clear page, not a crash
    r = _client(tmp_path / "nothing").get("/")
    assert r.status_code == 503 and "no such ledger" in r.text
    # a block whose stored hash index no longer matches its bytes: its page names the height as ledger show does
    con = sqlite3.connect(demo_ledger / "chain.sqlite")
    con.execute("UPDATE blocks SET hash = ? WHERE height = 2", (bytes(32),))
    con.commit()
    con.close()
    r = c.get("/blocks/2")
    assert r.status_code == 422 and "FAIL at height 2: the store's hash index differs" in html.unescape(r.text)
    assert c.get("/blocks/1").status_code == 200


def test_ledger_serve_refuses_bad_input(tmp_path, run_cli, demo_ledger):
    assert run_cli("ledger", "serve", str(tmp_path / "nope"))[0] == 2
    assert run_cli("ledger", "serve", str(demo_ledger), "--host", "localhost")[0] == 2
    assert run_cli("ledger", "serve", str(demo_ledger), "--results", str(tmp_path / "nope"))[0] == 2
    assert run_cli("ledger", "serve", str(demo_ledger), "--port", "70000")[0] == 2


def test_prometheus_text_format():
    m = {
        "stored": 7, "view": 1, "attempt": 2, "peers": 3, "view_changes": 2, "evidence": 1, "fetched": 4, "role": "committee",
        "chain": 'c"1\\x', "peer": "12D3KooWx", "dropped": {"bad_frame\nx": 2}, "consensus_dropped": {"stale_height": 5},
        "net": {"messages_out": {"pbft": 10, "update": 3}, "bytes_out": {"pbft": 999}, "messages_in": {"msg": 9},
                "bytes_in": {"msg": 800}, "dropped": {"oversize": 1}, "banned": ["p"]},
        "fl_round": 7, "rounds": 7, "trained": 6, "train_failures": 1, "train_seconds": 1.5,
    }
    text = prometheus_text(m)
    lines = text.splitlines()
    assert 'concilium_node_info{chain="c\\"1\\\\x",peer="12D3KooWx",role="committee"} 1' in lines
    assert "concilium_height 7" in lines and "concilium_view 1" in lines and "concilium_view_changes_total 2" in lines
    assert "concilium_committee_attempt 2" in lines
    assert 'concilium_messages_sent_total{kind="pbft"} 10' in lines and 'concilium_bytes_sent_total{kind="pbft"} 999' in lines
    assert 'concilium_dropped_inputs_total{layer="node",reason="bad_frame\\nx"} 2' in lines
    assert 'concilium_dropped_inputs_total{layer="consensus",reason="stale_height"} 5' in lines
    assert 'concilium_dropped_inputs_total{layer="transport",reason="oversize"} 1' in lines
    assert "concilium_training_seconds_total 1.5" in lines and 'concilium_training_jobs_total{result="failed"} 1' in lines
    assert "concilium_peers_banned 1" in lines and text.endswith("\n")
    assert not any(ln.startswith("concilium_local_") for ln in lines)  # no validation split: no local figures
    local = prometheus_text({**m, "local_eval": {"height": 7, "fl_round": 7, "accuracy": 0.75, "loss": 0.5, "samples": 40}})
    local_lines = local.splitlines()
    assert 'concilium_local_accuracy{height="7"} 0.75' in local_lines and 'concilium_local_loss{height="7"} 0.5' in local_lines
    assert "concilium_local_validation_samples 40" in local_lines
    for line in lines:  # every sample line is NAME[{labels}] VALUE
        if not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            float(value)
            assert name.split("{")[0].startswith("concilium_")


def test_json_is_json(sim_results):
    r = _client(sim_results.ledger).get("/api/blocks/1/page")
    assert r.headers["content-type"].startswith("application/json")
    assert json.loads(r.text)["height"] == 1
