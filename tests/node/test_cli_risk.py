"""The committee-risk check of the real CLI: ``genesis create`` and ``testnet init`` print the risk
and refuse a genesis over the budget (exit 2, one line, nothing written) unless ``--accept-risk`` (or the scenario's
``risk.accept``); ``genesis risk`` reports it; ``sim run`` only prints it."""

from __future__ import annotations

from pathlib import Path

import pytest

from concilium.cli import main
from node.config import load_genesis
from node.keys import generate_key


@pytest.fixture(scope="module")
def peers() -> list[str]:
    return [generate_key().peer_id for _ in range(20)]


def run(capsys, *argv):  # noqa: ANN001, ANN002, ANN201
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def create(peers: list[str], out: Path, *extra: str) -> list[str]:
    return ["genesis", "create", *(x for p in peers for x in ("--member", p)), "--time-ms", "0", "--out", str(out), *extra]


def refused(code: int, out: str, err: str) -> bool:
    return code == 2 and err.startswith("concilium: error: ") and err.count("\n") == 1 and "Traceback" not in out + err


def test_genesis_create_refuses_a_committee_over_the_budget_and_writes_nothing(capsys, tmp_path, peers):
    g = tmp_path / "g.toml"
    # 20 members, the default committee of 4 in committee mode: 4 Byzantine at 20 %, a quorum of 3 seats; the genesis
    # re-draws a committee that cannot reach quorum (redraw_ticks by default), so the Byzantine members that can
    # block one (>= 2 seats, p = 0.162) force re-draws without limit: 0.0134 / (1 - 0.149) over the run
    code, out, err = run(capsys, *create(peers, g))
    assert refused(code, out, err), err
    assert "--committee-size 4 (the default, min(4, members))" in err and "probability 0.0158" in err
    assert "over the budget 1e-06" in err and "the smallest committee within it is 6" in err and "--accept-risk" in err
    assert "assuming 4 of 20 members Byzantine (20 %)" in out and "only the genesis committee is drawn (1 draw)" in out
    assert "each re-drawn without limit when it cannot reach quorum" in out
    assert "a Byzantine quorum (>= 3 seats) per draw 0.0134, over the run 0.0158: OVER the budget 1e-06" in out
    assert "seats to block it (>= 2) per draw 0.162, for good over the run 0" in out and "6 (safety), 1 (liveness)" in out
    assert not g.exists()
    # a chain that never re-draws (plain pBFT: it stalls instead): the figures of the draw alone
    code, out, err = run(capsys, *create(peers, g, "--param", "redraw_ticks=0"))
    assert refused(code, out, err) and "probability 0.0134" in err and "re-drawn" not in out
    assert "a Byzantine quorum (>= 3 seats) per draw 0.0134, over the run 0.0134: OVER the budget 1e-06" in out
    assert "seats to block it (>= 2) per draw 0.162, over the run 0.162" in out and "6 (safety), 13 (liveness)" in out
    assert not g.exists()


def test_genesis_create_writes_with_accept_risk_or_a_committee_within_the_budget(capsys, tmp_path, peers):
    code, out, err = run(capsys, *create(peers, tmp_path / "a.toml", "--accept-risk"))
    assert (code, err) == (0, "") and "OVER the budget" in out and "accepted: the risk is over the budget (--accept-risk)" in out
    assert load_genesis(tmp_path / "a.toml").protocol.committee_size == 4
    code, out, err = run(capsys, *create(peers, tmp_path / "b.toml", "--committee-size", "6"))
    assert (code, err) == (0, "") and "committee of 6: a Byzantine quorum (>= 5 seats) per draw 0, over the run 0: within" in out
    assert out.startswith(f"{tmp_path / 'b.toml'}: chain concilium, 20 members, genesis hash ")
    # an assumed 10 %: 2 Byzantine members never make a quorum of 3
    code, out, err = run(capsys, *create(peers, tmp_path / "c.toml", "--byzantine-fraction", "0.1"))
    assert (code, err) == (0, "") and "assuming 2 of 20 members Byzantine (10 %)" in out and (tmp_path / "c.toml").is_file()
    # a looser budget
    code, out, err = run(capsys, *create(peers, tmp_path / "d.toml", "--risk-budget", "0.05"))
    assert (code, err) == (0, "") and "within the budget 0.05" in out


def test_genesis_create_counts_coordinator_draws_over_the_planned_rounds(capsys, tmp_path, peers):
    argv = create(peers[:10], tmp_path / "g.toml", "--mode", "coordinator", "--algorithm", "fedavg", "--committee-size",
                  "4", "--fl-rounds", "100", "--param", "committee_epoch=10")
    # 10 members at 20 %: 2 Byzantine, never a quorum of 3; 10 draws over the 100 planned rounds
    code, out, err = run(capsys, *argv)
    assert (code, err) == (0, "") and "over 100 rounds (the genesis' fl_rounds)" in out
    assert "a committee drawn every 10 heights (committee_epoch), 10 draws" in out
    code, out, err = run(capsys, *create(peers, tmp_path / "h.toml", "--mode", "coordinator", "--algorithm", "fedavg",
                                         "--byzantine-fraction", "1/4", "--risk-rounds", "1000"))
    assert refused(code, out, err) and "(at 25 % Byzantine of 20 members, 1000 rounds)" in err
    assert "over 1000 rounds (--risk-rounds)" in out and "1000 draws" in out and not (tmp_path / "h.toml").exists()
    # until stopped: the default horizon
    code, out, err = run(capsys, *create(peers, tmp_path / "i.toml", "--accept-risk"))
    assert code == 0 and "over 1000 rounds (fl_rounds = 0 runs until stopped: the default)" in out


@pytest.mark.parametrize("flags, needle", [
    (["--byzantine-fraction", "1.5"], "--byzantine-fraction: must be in [0, 1]"),
    (["--byzantine-fraction", "a fifth"], "--byzantine-fraction: not a number or a ratio"),
    (["--risk-budget", "nan"], "--risk-budget: must be in [0, 1]"),
    (["--risk-rounds", "0"], "--risk-rounds: must be in [1, "),
    (["--redraws", "many"], "--redraws: not an integer or 'unbounded'"),
    (["--mode", "coordinator", "--algorithm", "fedavg", "--param", "committee_epoch=0"], "committee_epoch must be an int"),
])
def test_bad_risk_options_are_one_line_errors(capsys, tmp_path, peers, flags, needle):
    code, out, err = run(capsys, *create(peers[:4], tmp_path / "g.toml", *flags))
    assert refused(code, out, err) and needle in err, err
    assert not (tmp_path / "g.toml").exists()


def test_genesis_risk_reports_a_genesis_or_a_population(capsys, tmp_path, peers):
    assert main(create(peers, tmp_path / "g.toml", "--accept-risk")) == 0
    capsys.readouterr()
    code, out, err = run(capsys, "genesis", "risk", tmp_path / "g.toml")
    assert (code, err) == (1, "") and "OVER the budget" in out and "6 (safety), 1 (liveness)" in out
    code, out, err = run(capsys, "genesis", "risk", tmp_path / "g.toml", "--byzantine-fraction", "0.1")
    assert (code, err) == (0, "") and "within the budget" in out
    # the default figures: 7 of 100 at 20 %, 1,000 rounds
    code, out, err = run(capsys, "genesis", "risk", "--members", "100", "--committee-size", "7", "--risk-rounds", "1000",
                         "--redraws", "0")
    assert (code, err) == (1, "")
    assert "committee of 7: a Byzantine quorum (>= 5 seats) per draw 0.00326, over the run 0.962: OVER the budget 1e-06" in out
    assert "seats to block it (>= 3) per draw 0.141, over the run 1" in out and "23 (safety), 61 (liveness)" in out
    code, out, err = run(capsys, "genesis", "risk", "--members", "10000", "--risk-rounds", "1000", "--redraws", "0")
    assert (code, err) == (0, "") and "33 (safety), 352 (liveness)" in out and "committee of" not in out
    # without --redraws a population is judged as a default genesis: re-drawn without limit
    for extra in ((), ("--redraws", "unbounded")):
        code, out, err = run(capsys, "genesis", "risk", "--members", "100", "--committee-size", "7", "--risk-rounds",
                             "1000", *extra)
        assert code == 1 and "re-drawn without limit" in out and "over the run 0.977" in out
        assert "23 (safety), 1 (liveness)" in out
    for argv, needle in (
        (["genesis", "risk"], "needs a genesis file or --members"),
        (["genesis", "risk", tmp_path / "g.toml", "--members", "5"], "--members: the genesis file fixes it"),
        (["genesis", "risk", "--members", "5", "--committee-size", "6"], "larger than --members 5"),
        (["genesis", "risk", "--members", "5", "--mode", "committee", "--committee-epoch", "2"], "coordinator mode only"),
        (["genesis", "risk", tmp_path / "none.toml"], "no such genesis file"),
    ):
        code, out, err = run(capsys, *argv)
        assert refused(code, out, err) and needle in err, (argv, err)


def test_testnet_init_checks_the_scenario_committee(capsys, tmp_path):
    # the bundled quickstart: 4 of 20 in committee mode
    code, out, err = run(capsys, "testnet", "init", "--scenario", "quickstart", "--out", tmp_path / "q")
    assert refused(code, out, err) and "quickstart.toml: protocol.committee_size 4: a Byzantine quorum" in err
    assert "over 30 rounds (the genesis' fl_rounds)" in out and not (tmp_path / "q").exists()
    # the scenario's [risk] table: accept, or a smaller assumed fraction; flags win over it
    text = (Path(__file__).parents[2] / "scenarios" / "quickstart.toml").read_text()
    (tmp_path / "accept.toml").write_text(text + "\n[risk]\naccept = true\n")
    code, out, err = run(capsys, "testnet", "init", "--scenario", tmp_path / "accept.toml", "--out", tmp_path / "a")
    assert (code, err) == (0, "") and "accepted: the risk is over the budget (risk.accept)" in out
    assert load_genesis(tmp_path / "a" / "genesis.toml").protocol.committee_size == 4
    (tmp_path / "tenth.toml").write_text(text + "\n[risk]\nbyzantine_fraction = 0.1\n")
    code, out, err = run(capsys, "testnet", "init", "--scenario", tmp_path / "tenth.toml", "--out", tmp_path / "t",
                         "--byzantine-fraction", "0.25")
    assert refused(code, out, err) and "at 25 % Byzantine of 20 members" in err and not (tmp_path / "t").exists()
    code, out, err = run(capsys, "testnet", "init", "--scenario", tmp_path / "tenth.toml", "--out", tmp_path / "t")
    assert (code, err) == (0, "") and "assuming 2 of 20 members Byzantine (10 %)" in out and "within the budget" in out
    (tmp_path / "bad.toml").write_text(text + "\n[risk]\nbudget = 2.0\n")
    code, out, err = run(capsys, "testnet", "init", "--scenario", tmp_path / "bad.toml", "--out", tmp_path / "b")
    assert refused(code, out, err) and "budget must be in [0, 1]" in err


def test_testnet_init_of_the_default_scenario_prints_a_zero_risk(capsys, tmp_path):
    code, out, err = run(capsys, "testnet", "init", "--out", tmp_path / "net")
    assert (code, err) == (0, "") and "assuming 0 of 4 members Byzantine (20 %)" in out
    assert "committee of 4: a Byzantine quorum (>= 3 seats) per draw 0, over the run 0: within the budget 1e-06" in out
