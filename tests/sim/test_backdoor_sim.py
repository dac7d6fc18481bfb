"""The sself spec §3.4 backdoor through the real simulator: honest until ``adversary.from_round``, per-batch poisoning
and model replacement (boost) from then on, the attack success rate in metrics.csv / summary.json recomputed from
the ledger, and the scenario keys validated."""

from __future__ import annotations

import csv
import json
import tomllib
from pathlib import Path

import numpy as np
import pytest
import tomli_w
import torch

from learning.models import blob_to_vector
from learning.data import Dataset
from ledger.store import open_ledger
from node._errors import ConfigFileError
from sim import Simulation, load_scenario
from sim._run import metric_columns, run_scenario

SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"
BACKDOOR = ("backdoor(target=2, poisoned_per_batch=20, rows=(0, 3), cols=(0, 4), value=1.0, boost={boost}, "
            "image_shape=(8, 8))")


def _write(tmp_path: Path, name: str, *, from_round: int, boost: float = 10.0, **adversary) -> Path:
    with open(SCENARIOS / "sself_backdoor.toml", "rb") as f:
        d = tomllib.load(f)
    d["name"] = "bd-test"  # one name: every variant has the same keys and genesis
    d["rounds"], d["members"] = 4, 10
    d["protocol"]["algorithm"] = "fedavg_stragglers"
    d["protocol"]["params"] = {"clients": 5, "aggregator": "mean"}
    d["data"]["public_size"] = 0
    d["training"]["epochs"] = 2
    d["adversary"] = {"per_round": 1, "data_attack": BACKDOOR.format(boost=boost), "from_round": from_round,
                      **adversary}
    path = tmp_path / f"{name}.toml"
    path.write_text(tomli_w.dumps(d))
    return path


def _blocks(ledger: Path) -> list[tuple[bytes, dict[tuple[str, int], np.ndarray]]]:
    store, blobs = open_ledger(ledger, readonly=True, check_index=False)
    with store:
        out = []
        for h in range(1, store.height() + 1):
            p = store.get(h).payload
            out.append((p.model_digest, {(u.peer, u.fl_round): blob_to_vector(blobs.get(u.digest)) for u in p.updates}))
        return out


def test_backdoor_starts_at_from_round_boosts_and_reports_asr(tmp_path: Path) -> None:
    # A: the scaled backdoor from round 3, through run_scenario (results folder, verified ledger)
    summary = run_scenario(_write(tmp_path, "a", from_round=3), out=tmp_path / "a", progress=False)
    assert summary["ledger_verified"], summary["ledger_verdict"]
    # B: the same adversary, attacking only from round 5 (after the run); C: from round 3, not scaled
    sim_b = Simulation(load_scenario(_write(tmp_path, "b", from_round=5)), ledger_dir=tmp_path / "b-ledger")
    sim_b.run()
    sim_c = Simulation(load_scenario(_write(tmp_path, "c", from_round=3, boost=1.0)), ledger_dir=tmp_path / "c-ledger")
    sim_c.run()
    a, b, c = _blocks(tmp_path / "a" / "ledger"), _blocks(tmp_path / "b-ledger"), _blocks(tmp_path / "c-ledger")
    # before from_round the adversary trains and sends honestly: rounds 1-2 are the same chain in A, B and C
    assert [m for m, _ in a[:2]] == [m for m, _ in b[:2]] == [m for m, _ in c[:2]]
    assert a[2][0] != b[2][0] and a[2][0] != c[2][0]
    # round 3: the adversary's upload is s = 10 times its poisoned update (C sends the unscaled one); it differs
    # from its honest update (B); every other upload of the round is the same in all three runs
    byz = sim_c._byzantine_rounds[3]
    assert len(byz) == 1 and byz == sim_b._byzantine_rounds[3]
    (peer,) = byz
    for key, u in a[2][1].items():
        if key == (peer, 3):
            assert np.array_equal(u, np.float32(10.0) * c[2][1][key])
            assert not np.allclose(c[2][1][key], b[2][1][key])
        elif key in b[2][1]:
            assert np.array_equal(u, b[2][1][key]) and np.array_equal(u, c[2][1][key])
    # metrics.csv: an asr column; the last value is recomputed here from the ledger's final model
    with open(tmp_path / "a" / "metrics.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert "asr" in rows[0] and len(rows) == 4
    store, blobs = open_ledger(tmp_path / "a" / "ledger", readonly=True, check_index=False)
    with store:
        final = np.array(blob_to_vector(blobs.get(a[-1][0])))
    test = sim_c.test
    keep = test.y != 2
    x = test.x[keep].clone()
    x[:, [r * 8 + col for r in range(3) for col in range(4)]] = 1.0  # the trigger, stamped by hand
    asr = sim_c.trainer.evaluate(torch.from_numpy(final), Dataset(x=x, y=torch.full((len(x),), 2), num_classes=10,
                                                                  name="asr")).accuracy
    assert float(rows[-1]["asr"]) == pytest.approx(asr, abs=1e-12)
    assert json.loads((tmp_path / "a" / "summary.json").read_text())["final_asr"] == pytest.approx(asr, abs=1e-12)
    assert [float(r["asr"]) for r in rows[:2]] == [m.asr for m in sim_b.metrics[:2]]  # same models, same ASR
    assert all(0.0 <= float(r["asr"]) <= 1.0 for r in rows)


def test_metrics_have_no_asr_column_without_a_backdoor() -> None:
    assert "asr" not in metric_columns(load_scenario(SCENARIOS / "sself_sync_poison.toml"))
    assert "asr" in metric_columns(load_scenario(SCENARIOS / "sself_backdoor.toml"))


def test_from_round_is_validated_and_unknown_keys_name_their_path(tmp_path: Path) -> None:
    with pytest.raises(ConfigFileError, match="adversary: from_round must be >= 1"):
        load_scenario(_write(tmp_path, "zero", from_round=0))
    with pytest.raises(ConfigFileError, match="adversary.from_rond"):
        load_scenario(_write(tmp_path, "typo", from_round=3, from_rond=3))
    assert load_scenario(SCENARIOS / "sself_backdoor.toml").adversary.from_round == 11
