"""The explorer marks outliers: score-row distances far above their round's median, and members
rejected in most of the rounds they trained - on a real quickstart run (committee mode, two Byzantine clients
sending the negated model, 5 rounds), checked against what ``concilium ledger show`` prints."""

from __future__ import annotations

import html
import re
import statistics
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from node.explorer import create_app
from node.explorer import MOSTLY_REJECTED_MIN_ROUNDS, OUTLIER_DISTANCE_FACTOR

ROUNDS = 5


@pytest.fixture(scope="module")
def run(tmp_path_factory):  # noqa: ANN201
    from sim import load_scenario, resolve_scenario, run_scenario
    from sim._world import byzantine_indices

    out = tmp_path_factory.mktemp("outliers") / "quickstart"
    summary = run_scenario(resolve_scenario("quickstart"), out=out, rounds=ROUNDS, progress=False, workers=0, plots=False)
    assert summary["ledger_verified"]
    c = TestClient(create_app(out / "ledger"))
    ov = c.get("/api/overview").json()
    by_name = {m["name"]: m["peer_id"] for m in ov["members"]}
    byz = {by_name[f"node-{i}"] for i in byzantine_indices(load_scenario(out / "scenario.toml"), _genesis(out))}
    assert len(byz) == 2
    return out, c, byz


def _genesis(out: Path):  # noqa: ANN202
    from ledger.store import open_ledger

    store, _ = open_ledger(out / "ledger", readonly=True)
    with store:
        return store.genesis()


def test_distances_far_above_the_rounds_median_are_marked(run, run_cli_json):
    out, c, byz = run
    marked_byzantine = 0
    for h in range(1, ROUNDS + 1):
        show = run_cli_json("ledger", "show", str(out / "ledger"), str(h))
        scores = c.get(f"/api/blocks/{h}/page").json()["scores"]
        rows = scores["rows"]
        every = [d for r in rows for d in r["distances"].values()]
        median = statistics.median(every)
        assert scores["median"] == median and scores["outlier_factor"] == OUTLIER_DISTANCE_FACTOR == 10.0
        far = {k for r in rows for k, d in r["distances"].items() if d > 10 * median}
        assert set(scores["outliers"]) <= far
        for r in rows:
            assert scores["outlier_cells"].get(r["member"], []) == sorted(k for k, d in r["distances"].items() if d > 10 * median)
        trained_byz = byz & set(show["record"]["training"]) & {k for r in rows for k in r["distances"]}
        assert set(scores["outliers"]) == trained_byz, h  # the negated models, and no honest client
        marked_byzantine += len(trained_byz)
        page = c.get(f"/blocks/{h}").text
        for k in trained_byz:
            tr = re.search(rf'<tr class="rejected outlier" data-peer="{k}">(.*?)</tr>', page, re.S)
            assert tr is not None and '<span class="outlier-mark">outlier</span>' in tr.group(1)
            assert tr.group(1).count('<td class="num outlier">') == len(rows)
        assert page.count('<td class="num outlier">') == sum(len(v) for v in scores["outlier_cells"].values())
        assert f"more than 10× this round's median distance ({median:.6g})" in html.unescape(page)
    assert marked_byzantine >= 3


def test_members_rejected_in_most_of_their_rounds_are_marked(run, run_cli_json):
    out, c, byz = run
    trained: dict[str, int] = {}
    rejected: dict[str, int] = {}
    for h in range(1, ROUNDS + 1):
        show = run_cli_json("ledger", "show", str(out / "ledger"), str(h))
        accepted = {u["peer"] for u in show["updates"]}
        for p in show["record"]["training"]:
            trained[p] = trained.get(p, 0) + 1
            if p not in accepted and p not in show["record"]["excluded"]:
                rejected[p] = rejected.get(p, 0) + 1
    want = {p for p, t in trained.items() if t >= MOSTLY_REJECTED_MIN_ROUNDS and rejected.get(p, 0) * 2 > t}
    assert MOSTLY_REJECTED_MIN_ROUNDS == 3
    assert all(rejected.get(p) == trained[p] for p in byz if p in trained)  # the negated models: always rejected
    assert {p for p in byz if trained.get(p, 0) >= MOSTLY_REJECTED_MIN_ROUNDS} <= want and byz & want
    assert any(rejected.get(p, 0) and p not in want for p in trained)  # a rejection alone is no mark
    ov = c.get("/api/overview").json()["rejections"]
    assert (ov["from"], ov["to"]) == (1, ROUNDS)
    assert ov["all"] == {"trained": sum(trained.values()), "rejected": sum(rejected.values())}
    assert {p for p, v in ov["members"].items() if v["mostly_rejected"]} == want
    assert {p: (v["trained"], v["rejected"]) for p, v in ov["members"].items()} == {
        p: (t, rejected.get(p, 0)) for p, t in trained.items()}
    text = c.get("/").text
    assert f'<span id="rejected-all">{sum(rejected.values())} of {sum(trained.values())}</span>' in text
    assert text.count('class="mostly-rejected"') == len(want)
    for p in want:
        row = re.search(rf'<tr data-peer="{p}" class="mostly-rejected">(.*?)</tr>', text, re.S)
        assert row is not None and f"{rejected[p]} / {trained[p]} <span" in row.group(1)
    for p in sorted(trained):
        member = c.get(f"/api/members/{p}").json()
        assert member["mostly_rejected"] == (p in want)
        page = c.get(f"/members/{p}").text
        assert ('id="mostly-rejected"' in page) == (p in want)
