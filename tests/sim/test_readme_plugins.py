"""README "Add your own strategy, aggregator or attack": the three files as printed there, run as printed.

The blocks are taken from README.md by their first line (``# my_plugins.py``, ...), written to a folder and run
with ``python run_mine.py`` in a fresh process (the registrations must not leak into this one: the contract
tests run over every registered aggregator and attack). Then the ledger shows that each plug-in did its part.
"""

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np

from learning import blob_to_vector
from ledger.store import open_ledger

README = Path(__file__).resolve().parents[2] / "README.md"
FILES = ("my_plugins.py", "my_scenario.toml", "run_mine.py")


def readme_files() -> dict[str, str]:
    section = README.read_text(encoding="utf-8").split("## Add your own strategy, aggregator or attack", 1)[1]
    section = section.split("\n## ", 1)[0]
    blocks = re.findall(r"```(?:python|toml)\n(.*?)```", section, flags=re.S)
    files = {b.split("\n", 1)[0].removeprefix("# "): b for b in blocks}
    assert sorted(files) == sorted(FILES), sorted(files)
    return files


def test_readme_plugin_example_runs_as_printed(tmp_path):
    for name, text in readme_files().items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    r = subprocess.run([sys.executable, "run_mine.py"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.startswith("OK: chain sim-my-plugins-0 verified, 2 blocks"), r.stdout
    assert "(True, 'OK: chain sim-my-plugins-0 verified" in r.stdout, r.stdout

    summary = json.loads((tmp_path / "results" / "mine" / "summary.json").read_text())
    assert summary["algorithm"] == "aggregated_step" and len(summary["byzantine_clients"]) == 1
    store, blobs = open_ledger(tmp_path / "results" / "mine" / "ledger", readonly=True)
    with store:
        names = {m.peer_id: m.name for m in store.genesis().members}
        byzantine = next(p for p, n in names.items() if n == "node-" + summary["byzantine_clients"][0][1:])
        for height in (1, 2):
            payload = store.get(height).payload
            assert payload.record["algorithm"] == "aggregated_step"  # the strategy ran...
            assert payload.record["aggregator"] == "nnm(f=1) > midrange"  # ...with the plug-in aggregator
            norms = {u.peer: float(np.linalg.norm(blob_to_vector(blobs.get(u.digest)))) for u in payload.updates}
            honest = [v for p, v in norms.items() if p != byzantine]
            assert len(honest) == 5 and norms[byzantine] > 2 * max(honest), norms  # flip_scale(factor=4.0) upload
