"""The combined report of ``benchmarks/reproduce.py all``: one markdown file built from the papers'
:class:`Report` objects, with every paper's claims table, its plots (links into the paper's folder) and a section
"Where the paper does not hold" holding each discrepancy the specs list, measured through our stack. The default
run builds it from the real fast runs of two papers (cmfl, fedro) through the command line's ``all`` path;
the deterministic discrepancy measurements of the others are checked directly; the full ``all`` run is slow."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import reproduce  # noqa: E402
from benchmarks.repro import mimic, fedro  # noqa: E402
from benchmarks.repro._common import PaperResult, Report, write_combined_report, write_report  # noqa: E402


def _sections(text: str) -> list[str]:
    return re.findall(r"^## (.+)$", text, flags=re.M)


def test_all_fast_writes_one_combined_report(fast_all) -> None:  # noqa: ANN001
    """``reproduce.py all --fast`` (here over cmfl and fedro, the two quickest fast subsets; the run is the
    session's ``fast_all``, see conftest.py): one ``REPORT-fast.md`` at the root with both papers' claims and
    plots, and their measured discrepancies."""
    assert fast_all.code == 0
    out = fast_all.out
    path = out / "REPORT-fast.md"
    text = path.read_text()
    assert not (out / "REPORT.md").exists()  # a fast run never overwrites a full combined report
    assert text.startswith("# Paper reproductions (fast subsets)") and "**Verdict: PASS** (2/2 papers pass)" in text
    heads = _sections(text)
    assert heads[0].startswith("cmfl: ") and heads[1].startswith("fedro: ")
    assert heads[-1] == "Where the paper does not hold"
    # per paper: the claims table with the four columns, every claim of the paper's own report, its plots linked
    assert text.count("| claim | threshold (as stated) | measured | result |") == 2
    for sid, claims in (("cmfl", ("S1", "R1-bg10 (fast)")), ("fedro", ("R0.1", "R2.1", "R3.0 (fast)"))):
        own = (out / f"{sid}-fast" / "REPORT.md").read_text()
        assert "## Where the paper does not hold" in own
        for c in claims:
            assert f"| {c} |" in text and f"| {c} |" in own
    links = re.findall(r"\]\(((?:cmfl|fedro)-fast/[^)]+\.png)\)", text)
    assert links and all((out / link).is_file() for link in links)
    assert any(link.startswith("fedro-fast/") for link in links)
    # the discrepancy section: our numbers, not the spec's text
    tail = text.split("## Where the paper does not hold", 1)[1]
    assert "### cmfl" in tail and "### fedro" in tail
    assert "#### steerable mean-distance score (spec §2.8.6) (confirmed: the paper does not hold here)" in tail
    assert "S2 (simulator, lying committee members): not measured in the fast subset" in tail
    assert "#### b̂ off by one (spec §3.2) (confirmed: the paper does not hold here)" in tail
    assert "b̂ literal Lemma 1 (α = b̂/n̂) = 12, '+1' form (α = (b̂+1)/n̂) = 11, exact union bound = 9" in tail
    assert "b̂ literal Lemma 1 (α = b̂/n̂) = 14, '+1' form (α = (b̂+1)/n̂) = 13, exact union bound = 10" in tail
    summary = (out / "report-fast.json").read_text()
    assert '"cmfl"' in summary and '"fedro"' in summary and '"discrepancies"' in summary


def test_a_paper_runs_by_its_former_id_into_the_folder_of_its_name(tmp_path: Path) -> None:
    """``reproduce.py seed003 --fast`` is ``reproduce.py cmfl --fast`` (``sim.PAPER_ALIASES``, the quickest fast
    subset, a real run): its report lands in ``cmfl-fast/``; every former id maps to a paper the script runs, and
    ``--with-r5`` is refused for any paper but fedro under either name."""
    from sim import PAPER_ALIASES

    assert tuple(PAPER_ALIASES.values()) == reproduce.PAPERS
    assert reproduce.main(["seed003", "--fast", "--out", str(tmp_path)]) == 0
    assert (tmp_path / "cmfl-fast" / "REPORT.md").is_file() and not list(tmp_path.glob("seed003*"))
    for argv in (["seed001", "--with-r5"], ["mimic", "--with-r5"]):
        with pytest.raises(SystemExit):
            reproduce.main([*argv, "--out", str(tmp_path)])


def test_combined_report_records_a_failed_runner(tmp_path: Path) -> None:
    """A runner that raised is an error row and "not measured" in the discrepancy section; the verdict fails."""
    r = Report("fedro", "FedRo")
    fedro.discrepancy_b_hat(r)
    ok_part = PaperResult("fedro", tmp_path / "fedro", report=r, wall_s=1.0)
    write_report(ok_part.out, r)
    bad = PaperResult("sself", tmp_path / "sself", error="RuntimeError: boom", wall_s=2.0)
    text = write_combined_report(tmp_path, [bad, ok_part], fast=False).read_text()
    assert text.startswith("# Paper reproductions (full runs)") and "**Verdict: FAIL** (1/2 papers pass)" in text
    assert "| sself | ERROR |" in text and "**The runner failed:** RuntimeError: boom" in text
    assert "not measured: the runner failed (RuntimeError: boom)" in text
    assert "[fedro/REPORT.md](fedro/REPORT.md)" in text


def test_b_hat_discrepancy_numbers() -> None:
    """Spec §3.2 through ``learning``: literal Lemma 1 one above the printed b̂, the '+1' form equal to it."""
    r = Report("fedro", "FedRo")
    got = fedro.discrepancy_b_hat(r)
    assert {k: v["b_hat"] for k, v in got.items()} == {
        (26, 500): {"strict": 12, "paper": 11, "exact": 9}, (29, 1500): {"strict": 14, "paper": 13, "exact": 10}}
    assert all(p >= 0.99 for v in got.values() for p in v["p_e"].values())
    assert r.discrepancies[0].confirmed is True and r.ok  # a finding, not a claim


def test_halfnormal_schedule_discrepancy() -> None:
    """Spec §3 scheme 1: under the released code's half-normal(3) periods τ_max does not change the schedule."""
    sched = mimic.halfnormal_schedules(trials=20)
    for tm in mimic.HALFNORMAL_TAU_MAX:
        assert sched[("halfnormal3", tm)]["same_as_20"] == 20
        assert sched[("halfnormal3", tm)]["max_tau"] < 20
    assert sched[("uniform", 100)]["same_as_20"] < 20
    assert sched[("halfnormal3", 20)]["active"] > 2 * sched[("uniform", 20)]["active"]
    r = Report("mimic", "MimiC")
    mimic.discrepancy_halfnormal(r, {})
    (d,) = r.discrepancies
    assert d.confirmed is True and "not measured in this run" in d.measured


@pytest.mark.slow
def test_all_full(tmp_path: Path) -> None:  # pragma: no cover - about an hour on 2 cores
    assert reproduce.main(["all", "--out", str(tmp_path)]) == 0
    text = (tmp_path / "REPORT.md").read_text()
    tail = text.split("## Where the paper does not hold", 1)[1]
    assert all(f"### {p}" in tail for p in reproduce.PAPERS) and "not measured in this run" not in tail
