"""A node's own config: the ``[data]`` table, the ``[adversary]`` role and the initial model, read from
real files by the real loader; every refusal is one line naming the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from node import ConfigFileError
from node.config import load_node_config

BASE = 'genesis = "g.toml"\nkey = "k.key"\ndata_dir = "state"\n'


def _load(tmp_path: Path, text: str):  # noqa: ANN202
    (tmp_path / "node.toml").write_text(BASE + text)
    return load_node_config(tmp_path / "node.toml")


def test_relative_paths_of_the_data_table_are_the_config_files(tmp_path: Path) -> None:
    cfg = _load(tmp_path, 'initial_model = "m0.bin"\n[data]\npath = "mine/data.csv"\nformat = "csv"\nlabel = "y"\n'
                          'validation = "mine/val.csv"\npublic = "pub/data.npz"\n')
    assert cfg.data.path == str(tmp_path / "mine" / "data.csv") and cfg.data.validation == str(tmp_path / "mine" / "val.csv")
    assert cfg.data.public == str(tmp_path / "pub" / "data.npz") and cfg.initial_model == str(tmp_path / "m0.bin")
    assert cfg.data.local_params() == {"path": cfg.data.path, "format": "csv", "label": "y", "features": "",
                                       "validation": cfg.data.validation, "seed": 0}
    frac = _load(tmp_path, '[data]\npath = "d.npz"\nformat = "npz"\nvalidation = 0.25\n')
    assert frac.data.validation == 0.25 and frac.data.local_params()["validation"] == 0.25


@pytest.mark.parametrize(("text", "needle"), [
    ('[data]\nformat = "npz"\n', "missing field data.path"),
    ('[data]\npath = "d.npz"\nformat = "npz"\nvalidation = 1.5\n', "data.validation"),
    ('[data]\npath = "d.npz"\nformat = "npz"\nvalidation = true\n', "data.validation"),
    ('[data]\npath = "d.npz"\nformat = "npz"\nscenario = "testnet"\n', "unknown field data.scenario"),
    ('[adversary]\nbyzantine = true\n', "needs an attack"),
    ('[[adversary.faults]]\ntarget = "coordinator"\nkind = "melt"\n', "kind must be one of"),
    ('[[adversary.faults]]\ntarget = "member:x"\nkind = "drop"\n', "target must be"),
])
def test_bad_tables_are_refused_with_one_line_naming_the_key(tmp_path: Path, text: str, needle: str) -> None:
    with pytest.raises(ConfigFileError) as e:
        _load(tmp_path, text)
    assert needle in str(e.value) and "\n" not in str(e.value), str(e.value)


def test_an_adversary_role_with_faults_loads(tmp_path: Path) -> None:
    cfg = _load(tmp_path, '[adversary]\nbyzantine = true\nattack = "sign_flip"\nfrom_round = 3\n'
                          '[[adversary.faults]]\ntarget = "coordinator"\nkind = "delay"\ndelay_ms = 500.0\n')
    role = cfg.adversary
    assert role.byzantine and role.attack == "sign_flip" and role.from_round == 3
    assert [(f.target, f.kind, f.delay_ms) for f in role.faults] == [("coordinator", "delay", 500.0)]
