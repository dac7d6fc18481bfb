"""Shared runs: ``fast_all`` is ``benchmarks/reproduce.py all --fast`` over cmfl and fedro, run once per session.

test_combined.py checks the combined report it writes; test_cmfl.py and test_fedro.py check the two papers'
own :class:`Report` objects from the same run. Each one is what ``<paper>.reproduce(out, fast=True, workers=2)``
returned (``reproduce.run_paper`` makes exactly that call), so the fast subsets of these two papers are simulated
once instead of twice (once through ``all``, once per paper).
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAPERS = ("cmfl", "fedro")  # the two quickest fast subsets


@dataclasses.dataclass(frozen=True)
class FastAll:
    out: Path  # the --out folder: REPORT-fast.md, report-fast.json, cmfl-fast/, fedro-fast/
    code: int  # reproduce.main's exit status
    papers: dict[str, Any]  # paper id -> its PaperResult, or the exception its runner raised

    def report(self, sid: str) -> Any:
        """The paper's Report; re-raises the exception its runner raised, as a direct call would have."""
        got = self.papers.get(sid)
        if isinstance(got, BaseException):
            raise got
        assert got is not None, f"reproduce.py all never ran {sid}"
        return got.report


@pytest.fixture(scope="session")
def fast_all(tmp_path_factory: pytest.TempPathFactory) -> FastAll:
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from benchmarks import reproduce

    out = tmp_path_factory.mktemp("reproduce-all")
    papers: dict[str, Any] = {}
    run_paper = reproduce.run_paper

    def recorded(sid: str, root: Path, **kw: Any) -> Any:  # the real runner; keeps what it returned or raised
        try:
            papers[sid] = run_paper(sid, root, **kw)
        except Exception as e:
            papers[sid] = e
            raise
        return papers[sid]

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(reproduce, "PAPERS", PAPERS)
        mp.setattr(reproduce, "run_paper", recorded)
        code = reproduce.main(["all", "--fast", "--out", str(out), "--workers", "2"])
    return FastAll(out, code, papers)
