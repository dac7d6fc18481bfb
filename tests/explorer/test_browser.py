"""The explorer's pages in a real headless Chromium (Playwright driving Debian's ``chromium``), served by real
``concilium ledger serve`` processes: a short simulation with two Byzantine clients, a tampered copy of it, and a
demo chain with a hostile display name.

``UPDATE_SCREENSHOTS=1`` also writes docs/explorer-overview.png and docs/explorer-block.png.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import socket
import sqlite3
from pathlib import Path

import pytest
from playwright import sync_api

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
if CHROMIUM is None:  # scripts/ensure-system-deps.sh installs it
    raise RuntimeError("no chromium on PATH: run ./scripts/ensure-system-deps.sh (apt-get install chromium)")
expect = sync_api.expect

XSS_NAME = "<img src=x onerror=alert(1)>"
DOCS = Path(__file__).resolve().parents[2] / "docs"
TIMEOUT_MS = 90_000


@pytest.fixture(scope="module")
def browser():  # noqa: ANN201
    with sync_api.sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, headless=True)
        yield b
        b.close()


@pytest.fixture(scope="module")
def urls(sim_results, server, demo_factory, tmp_path_factory):  # noqa: ANN201
    """Three servers at once (they start in parallel): the run, a tampered copy, a hostile name."""
    base = tmp_path_factory.mktemp("browser")
    bad = base / "bad"
    shutil.copytree(sim_results.out, bad)
    con = sqlite3.connect(bad / "ledger" / "chain.sqlite")
    (data,) = con.execute("SELECT data FROM blocks WHERE height = 2").fetchone()
    con.close()
    from ledger import Block

    digest = Block.decode(bytes(data)).payload.updates[0].digest.hex()  # flip one byte of an update blob of block 2
    blob = bad / "ledger" / "blobs" / digest[:2] / digest[2:]
    raw = bytearray(blob.read_bytes())
    raw[len(raw) // 2] ^= 0x10
    blob.write_bytes(bytes(raw))
    demo_factory(base / "xss", blocks=2, name=XSS_NAME)
    (base / "secret.txt").write_text("TOPSECRET")
    with contextlib.ExitStack() as stack:
        yield {
            "run": stack.enter_context(server(sim_results.ledger)),
            "bad": stack.enter_context(server(bad / "ledger")),
            "xss": stack.enter_context(server(base / "xss")),
        }


def _page(browser, dialogs: list[str]):  # noqa: ANN001, ANN202
    page = browser.new_page(viewport={"width": 1280, "height": 860})
    page.set_default_timeout(TIMEOUT_MS)
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    return page, errors


def test_overview_block_member_and_audit(urls, browser, sim_results, run_cli_json):
    dialogs: list[str] = []
    page, errors = _page(browser, dialogs)
    page.goto(urls["run"])
    expect(page.locator("#chain-id")).to_have_text("sim-quickstart-0")
    expect(page.locator("#height")).to_have_text("2")
    expect(page.locator("#accuracy-chart canvas")).to_have_count(1)  # uPlot drew the metrics.csv accuracies
    if os.environ.get("UPDATE_SCREENSHOTS"):
        page.screenshot(path=str(DOCS / "explorer-overview.png"))
    # follow a link to the first block in which a Byzantine client trained
    shows = {h: run_cli_json("ledger", "show", str(sim_results.ledger), str(h)) for h in (1, 2)}
    h, byz = next((h, p) for h, s in shows.items() for p in sim_results.byzantine if p in s["record"]["training"])
    show = shows[h]
    page.locator("a.block-link", has_text=re.compile(f"^{h}$")).click()
    expect(page).to_have_url(re.compile(f"/blocks/{h}$"))
    expect(page.locator("#block-height")).to_have_text(str(h))
    expect(page.locator("#block-hash")).to_have_text(show["hash"])
    expect(page.locator("#model-digest")).to_have_text(show["model_digest"])
    expect(page.locator("#accepted-count")).to_have_text(str(len(show["updates"])))
    accepted = {u["peer"] for u in show["updates"]}
    rejected = [p for p in show["record"]["training"] if p not in accepted and p not in show["record"]["excluded"]]
    expect(page.locator("#rejected-count")).to_have_text(str(len(rejected)))
    assert byz in rejected
    expect(page.locator(f'#rejected a[title="{byz}"]')).to_have_count(1)
    expect(page.locator(f'#scores tr[data-peer="{byz}"] td').last).to_have_text("rejected")
    # the negated model is far from every member's reference: its distances are marked, and it is
    expect(page.locator(f'#scores tr.outlier[data-peer="{byz}"] .outlier-mark')).to_have_text("outlier")
    expect(page.locator(f'#scores tr[data-peer="{byz}"] td.outlier')).to_have_count(len(show["record"]["rows"]))
    expect(page.locator(f'#outliers a[title="{byz}"]')).to_have_count(1)
    expect(page.locator("#outlier-rule")).to_contain_text("more than 10× this round's median distance")
    for p in rejected:
        if p not in sim_results.byzantine:  # an honest rejected client is not an outlier
            expect(page.locator(f'#scores tr[data-peer="{p}"] td.outlier')).to_have_count(0)
    expect(page.locator("#signers-count")).to_have_text(str(len(show["certified_by"])))
    expect(page.locator("#updates a.proof")).to_have_count(len(show["updates"]))
    if os.environ.get("UPDATE_SCREENSHOTS"):
        page.screenshot(path=str(DOCS / "explorer-block.png"), full_page=True)
    # the rejected client's own page
    page.locator(f'#rejected a[title="{byz}"]').click()
    expect(page.locator("#member-peer")).to_have_text(byz)
    expect(page.locator('[data-count="rejected"]')).not_to_have_text("0")
    expect(page.locator('[data-count="accepted"]')).to_have_text("0")
    # the audit, as ledger verify runs it, with re-execution
    page.goto(urls["run"] + "audit")
    page.locator("#audit-start").click()
    expect(page.locator("#audit-verdict")).to_have_text(re.compile(r"^(OK|FAIL|ERROR)"), timeout=TIMEOUT_MS)
    expect(page.locator("#audit-verdict")).to_have_text(re.compile(r"^OK: chain sim-quickstart-0 verified, 2 blocks.*rounds re-executed"))
    expect(page.locator("#audit-verdict")).to_have_class(re.compile(r"\bok\b"))
    expect(page.locator("#audit-count")).to_contain_text("2 / 2 blocks")
    assert dialogs == [] and errors == [], (dialogs, errors)


def test_audit_of_a_tampered_copy_names_the_height(urls, browser):
    page, errors = _page(browser, [])
    page.goto(urls["bad"] + "audit")
    page.locator("#audit-start").click()
    expect(page.locator("#audit-verdict")).to_have_text(re.compile(r"^(OK|FAIL|ERROR)"), timeout=TIMEOUT_MS)
    expect(page.locator("#audit-verdict")).to_have_text(re.compile(r"^FAIL at height 2: "))
    expect(page.locator("#audit-verdict")).to_have_class(re.compile(r"\bfail\b"))
    assert errors == []


def test_a_hostile_display_name_is_text(urls, browser):
    dialogs: list[str] = []
    page, errors = _page(browser, dialogs)
    page.goto(urls["xss"])
    cell = page.locator("#members td.member-name", has_text="onerror")
    expect(cell).to_have_text(XSS_NAME)  # shown as the characters it is
    expect(page.locator("main img")).to_have_count(0)  # and no element was made of it
    cell.locator("xpath=..").locator("a").click()
    expect(page.locator("#member-name")).to_have_text(XSS_NAME)
    page.goto(urls["xss"] + "blocks/1")
    expect(page.locator("main img")).to_have_count(0)
    assert dialogs == [] and errors == [], (dialogs, errors)


def _raw_get(url: str, target: str) -> bytes:
    host, port = url.removeprefix("http://").rstrip("/").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as s:
        s.sendall(f"GET {target} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n".encode())
        chunks = []
        while data := s.recv(65536):
            chunks.append(data)
    return b"".join(chunks)


def test_the_server_serves_no_file_by_path(urls):
    """Raw requests (no client normalises the dot segments) to the real server."""
    for target in ("/static/../../secret.txt", "/static/../chain.sqlite", "/static/%2e%2e/%2e%2e/secret.txt",
                   "/../../../../etc/passwd", "/static/..%2f..%2fsecret.txt", "/static//etc/passwd"):
        reply = _raw_get(urls["xss"], target)
        status = reply.split(b" ", 2)[1]
        assert status in (b"400", b"404"), (target, reply[:200])
        assert b"TOPSECRET" not in reply and b"root:" not in reply and b"SQLite format" not in reply
    reply = _raw_get(urls["xss"], "/")
    assert reply.startswith(b"HTTP/1.1 200") and b"content-security-policy: default-src 'none'" in reply.lower()
    # a Host other than the loopback names is refused (DNS rebinding)
    host, port = urls["xss"].removeprefix("http://").rstrip("/").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as s:
        s.sendall(b"GET / HTTP/1.1\r\nHost: attacker.example\r\nConnection: close\r\n\r\n")
        assert s.recv(100).split(b" ", 2)[1] == b"400"


def test_the_audit_of_a_run_with_an_app_in_chromium(browser, server, readme_plugins, tmp_path):
    """The README's plug-ins as an app (``app = "my_plugins.py"``), run by ``concilium sim run`` (another
    process: the plug-ins never load in this one). ``ledger serve`` of its results folder audits with the app copied
    there: OK, green, every round re-executed. The same ledger alone, with no app beside it: ``NOT RE-EXECUTED``,
    naming the pinned app, in amber (``warn``), never green."""
    import subprocess  # noqa: PLC0415
    import sys  # noqa: PLC0415

    readme_plugins(tmp_path)
    r = subprocess.run([sys.executable, "-m", "concilium", "sim", "run", "my_scenario.toml", "--out", "results/cli",
                        "--quiet"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    alone = tmp_path / "alone"
    shutil.copytree(tmp_path / "results" / "cli" / "ledger", alone / "ledger")
    verdict_re = re.compile(r"^(OK|FAIL|ERROR|NOT RE-EXECUTED)")
    with server(tmp_path / "results" / "cli" / "ledger") as url, server(alone / "ledger") as bare:
        page, errors = _page(browser, [])
        page.goto(url + "audit")
        page.locator("#audit-start").click()
        expect(page.locator("#audit-verdict")).to_have_text(verdict_re, timeout=TIMEOUT_MS)
        expect(page.locator("#audit-verdict")).to_have_text(
            re.compile(r"^OK: chain sim-my-plugins-0 verified, 2 blocks.*rounds re-executed"))
        expect(page.locator("#audit-verdict")).to_have_class(re.compile(r"\bok\b"))
        page.goto(bare + "audit")
        page.locator("#audit-start").click()
        expect(page.locator("#audit-verdict")).to_have_text(verdict_re, timeout=TIMEOUT_MS)
        expect(page.locator("#audit-verdict")).to_have_text(re.compile(r"^NOT RE-EXECUTED: .*pins app 'my_plugins'"))
        expect(page.locator("#audit-verdict")).to_have_class(re.compile(r"\bwarn\b"))
        expect(page.locator("#audit-verdict")).not_to_have_class(re.compile(r"\bok\b"))
        assert errors == [], errors
