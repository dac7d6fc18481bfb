"""The blocks table on a 10,000-block ledger: the first page reads its 50 rows, not the chain (slow-marked:
building the chain takes about 10 s)."""

from __future__ import annotations

import time

import pytest
from starlette.testclient import TestClient

from ledger.store import create_ledger
from node.explorer import create_app

BLOCKS = 10_000


@pytest.mark.slow
def test_first_page_of_10000_blocks_is_fast(tmp_path):
    from ledger.testing import LedgerDemo

    demo = LedgerDemo(members=4, committee_size=1, updates_per_block=1, floats_per_update=4, seed=3)
    store, _ = create_ledger(tmp_path / "L", demo.genesis)
    with store:
        store.append_many([demo.next_block()[0] for _ in range(BLOCKS)])
    c = TestClient(create_app(tmp_path / "L"))
    c.get("/static/explorer.css")  # the app and the templates warm
    times = {}
    for url in ("/blocks", "/api/blocks", "/", f"/blocks/{BLOCKS}", "/blocks?before=5000"):
        t0 = time.perf_counter()
        r = c.get(url)
        times[url] = time.perf_counter() - t0
        assert r.status_code == 200, url
    print({k: round(v, 4) for k, v in times.items()})
    assert times["/blocks"] < 0.5 and times["/api/blocks"] < 0.5 and times["/"] < 0.5, times
    assert f'href="/blocks/{BLOCKS}"' in c.get("/blocks").text and 'href="/blocks/9951"' in c.get("/blocks").text
    assert 'href="/blocks/9950"' not in c.get("/blocks").text  # 50 rows a page
