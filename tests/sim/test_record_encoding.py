"""Records encode in one walk (``_to_canonical``) and memoise small encodings by identity; both must give
exactly the bytes of the general path ``encode(record.to_value())`` for every record a simulation makes."""

import dataclasses
import gc
from pathlib import Path

import pytest

from ledger import _encoding as E
from sim import Simulation, load_scenario

SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"


def test_every_record_of_a_run_encodes_like_the_general_path():
    sc = load_scenario(SCENARIOS / "coordinator_fedavg.toml", rounds=3, members=8)
    sc = dataclasses.replace(sc, protocol=dataclasses.replace(sc.protocol, params={"clients": 0}))
    Simulation(sc, workers=0).run()
    kinds = set()
    n = 0
    for o in gc.get_objects():
        if hasattr(type(o), "_record_fields") and not isinstance(o, type):
            assert o.encode() == E.encode(o.to_value()), type(o).__name__
            assert o.encode() == o.encode()
            kinds.add(type(o).__name__)
            n += 1
    assert n > 100 and {"BlockHeader", "Payload", "UpdateCommitment", "Envelope"} <= kinds, kinds


@E.record
@dataclasses.dataclass(frozen=True, slots=True)
class _Probe:
    a: int
    b: tuple[int, ...] = ()
    c: float = 0.0


def test_one_walk_keeps_the_general_path_checks():
    assert _Probe(a=True).encode() == E.encode({"a": True, "b": [], "c": 0.0})  # a bool stays a bool
    with pytest.raises(ValueError, match="64-bit"):
        _Probe(a=2**64).encode()
    with pytest.raises(ValueError, match="64-bit"):
        _Probe(a=1, b=(1, -(2**63) - 1)).encode()
    with pytest.raises(ValueError, match="non-finite"):
        _Probe(a=1, c=float("nan")).encode()
