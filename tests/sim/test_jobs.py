"""The job host (sim/_jobs.py): built from the scenario alone, as a Ray trainer builds it, it gives every job the
bits the simulation's own ``_run_job`` gives, the adversary's poisoned data and backdoored minibatches included
(a trainer that got them wrong would change the ledger only where an attack runs)."""

import dataclasses
from pathlib import Path

from node.core import PURPOSE_REFERENCE, PURPOSE_UPDATE
from sim import Simulation, load_scenario
from sim._jobs import JobHost, _JobSpec

SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"


def _adversary(sc, **kw):
    return dataclasses.replace(sc, adversary=dataclasses.replace(sc.adversary, **kw))


def _spec(s: Simulation, index: int, fl_round: int, purpose: str = PURPOSE_UPDATE, poisoned: bool = False) -> _JobSpec:
    return _JobSpec(
        index=index, fl_round=fl_round, purpose=purpose, model=s.theta0.copy(), server_state=None, client_state=None,
        lr=float(s.schedule(fl_round - 1)), strategy_side=s.strategy is not None and purpose == PURPOSE_UPDATE,
        poisoned=poisoned,
    )


def _bits(result):
    upload, n, state = result
    return upload.dtype, upload.tobytes(), n, state


def test_a_job_host_built_alone_runs_the_simulations_jobs_bit_for_bit():
    # two Byzantine members flip their labels from round 2 on: their poisoned copy is read only by a job whose
    # spec says so (before from_round the adversary trains honestly on its own data)
    sc = _adversary(load_scenario(SCENARIOS / "coordinator_fedavg.toml", members=6),
                    byzantine=2, data_attack="label_flip(num_classes=10)", from_round=2)
    s, host = Simulation(sc, workers=0), JobHost(sc)
    byz = min(s.index[p] for p in s.byzantine)
    honest = min(set(range(sc.members)) - {s.index[p] for p in s.byzantine})
    assert sorted(host.poisoned_data) == sorted(s.poisoned_data) and byz in host.poisoned_data
    specs = [_spec(s, honest, 1), _spec(s, honest, 2, PURPOSE_REFERENCE), _spec(s, byz, 2), _spec(s, byz, 2, poisoned=True)]
    results = [_bits(host.run_job(spec)) for spec in specs]
    assert results == [_bits(s._run_job(spec)) for spec in specs]
    assert results[2] != results[3], "the poisoned job trains on the flipped labels"


def test_a_job_host_built_alone_backdoors_a_poisoned_jobs_minibatches_as_the_simulation_does():
    bd = load_scenario(SCENARIOS / "sself_backdoor.toml", members=10)
    sc = dataclasses.replace(_adversary(bd, from_round=1), training=dataclasses.replace(bd.training, epochs=1))
    s, host = Simulation(sc, workers=0), JobHost(sc)
    assert host.batch_attack is not None and not host.poisoned_data
    specs = [_spec(s, 3, 1), _spec(s, 3, 1, poisoned=True)]
    results = [_bits(host.run_job(spec)) for spec in specs]
    assert results == [_bits(s._run_job(spec)) for spec in specs]
    assert results[0] != results[1], "the backdoor changes the poisoned job's minibatches"
