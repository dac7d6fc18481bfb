"""Coordinator mode with a corrupt coordinator (slow-marked: a 4-round simulation, about 10 s): the block page
names the replaced coordinators, which are the offenders of the evidence, and a member page counts them."""

from __future__ import annotations

import pytest
from starlette.testclient import TestClient

from node.explorer import create_app


@pytest.mark.slow
def test_replaced_coordinators_and_their_evidence(tmp_path, run_cli_json):
    from sim import resolve_scenario, run_scenario

    out = tmp_path / "cc"
    summary = run_scenario(resolve_scenario("coordinator_corrupt"), out=out, rounds=4, progress=False, workers=0)
    assert summary["ledger_verified"] and summary["view_changes"] > 0
    c = TestClient(create_app(out / "ledger"))
    offenders: dict[str, int] = {}
    for h in range(1, 5):
        b = c.get(f"/api/blocks/{h}/page").json()
        show = run_cli_json("ledger", "show", str(out / "ledger"), str(h))
        assert b["summary"] == show and len(b["replaced"]) == show["view"]
        for e in b["evidence"]:
            assert e["kind"] == "invalid_proposal" and e["offender"] in b["replaced"]
            offenders[e["offender"]] = offenders.get(e["offender"], 0) + 1
        html = c.get(f"/blocks/{h}").text
        assert ("Replaced by view changes" in html) == bool(b["replaced"])
    assert offenders, "the corrupt coordinator left no evidence"
    for peer, n in offenders.items():
        m = c.get(f"/api/members/{peer}").json()
        assert m["counts"]["evidence"] == n and m["counts"]["replaced"] >= n
        assert any(r.startswith("replaced coordinator") for row in m["rows"] for r in row["roles"])
