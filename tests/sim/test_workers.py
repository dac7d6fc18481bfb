"""Forked training workers (sim/_workers.py): training moves to other processes, nothing else changes - the
same ledger head, the same metrics, the same client states - and the workers are gone when the run ends."""

import dataclasses
import multiprocessing
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pytest

from sim import Simulation, load_scenario, verify_ledger
from sim._scenario import FaultConfig
from sim._workers import default_workers

SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"


def _scenario(algorithm, params, *, rounds=5, members=12, attack="", availability=""):
    sc = load_scenario(SCENARIOS / "coordinator_fedavg.toml", rounds=rounds, members=members)
    proto = dataclasses.replace(sc.protocol, algorithm=algorithm, params=params)
    adv = dataclasses.replace(sc.adversary, availability=availability)
    if attack:
        adv = dataclasses.replace(adv, byzantine=2, attack=attack)
    return dataclasses.replace(sc, protocol=proto, adversary=adv)


def _run(sc, workers, ledger=None):
    s = Simulation(sc, workers=workers, ledger_dir=ledger)
    res = s.run()
    trace = [
        (m.fl_round, m.accuracy, m.loss, m.accepted, m.rejected, m.byzantine_accepted, m.stale_accepted, m.unavailable)
        for m in res.rounds
    ]
    return s, res, trace


@pytest.mark.parametrize(
    ("algorithm", "params", "attack", "availability"),
    [
        ("scaffold", {"lr": 0.05}, "", ""),  # private client state (c_i) travels through the workers
        ("fedavg", {"clients": 0}, "alie", ""),  # an omniscient attack reads the honest jobs' results
        ("mimic", {"lr": 0.05, "local_steps": 10}, "", "bounded(tau_max=3, seed=1)"),  # dropped jobs
    ],
)
def test_workers_change_nothing_but_where_training_runs(algorithm, params, attack, availability, tmp_path):
    sc = _scenario(algorithm, params, attack=attack, availability=availability)
    s0, r0, t0 = _run(sc, 0)
    s2, r2, t2 = _run(sc, 2, ledger=tmp_path / "ledger")
    assert s0.workers == 0 and s2.workers == 2
    assert not s2._pool.active, "the pool is closed after the run"
    assert r2.head_hash == r0.head_hash
    assert t2 == t0
    assert s2._client_state == s0._client_state
    assert multiprocessing.active_children() == [], "no worker outlives its run"
    ok, line = verify_ledger(tmp_path / "ledger")
    assert ok, line


def test_speculated_jobs_are_used_only_when_identical():
    # Full participation: the next round's jobs are speculated (from the previewed aggregate) and every
    # one is claimed; the run is bit-identical to training in-process.
    sc = _scenario("fedavg", {"clients": 0}, rounds=6)
    s0, r0, t0 = _run(sc, 0)
    s1, r1, t1 = _run(sc, 1)
    # every job of rounds 2..6 was speculated and claimed (round 7's, asked for as the run ends, may be too)
    assert s1._pool.hits >= 5 * 12 and s1._pool.misses == 0, (s1._pool.hits, s1._pool.misses)
    assert r1.head_hash == r0.head_hash and t1 == t0
    # Sampling 5 of 12 per round: most speculations name the wrong clients and are discarded (never used);
    # the head is still the in-process one.
    sc = _scenario("fedavg", {"clients": 5}, rounds=6)
    s0, r0, t0 = _run(sc, 0)
    s1, r1, t1 = _run(sc, 1)
    assert s1._pool.misses > 0
    assert r1.head_hash == r0.head_hash and t1 == t0


def test_results_bigger_than_the_socket_buffer_flow_without_a_sender_thread():
    # ~600k parameters: each result (2.4 MB) is larger than a default socket buffer, and the speculated
    # results of a round (12 of them) larger than the widened one. A worker blocked on a send must only
    # wait for this process to read, never deadlock against it; every speculation is still claimed.
    sc = _scenario("fedavg", {"clients": 0}, rounds=3)
    sc = dataclasses.replace(sc, model=dataclasses.replace(sc.model, params={"in_features": 64, "hidden": [1024, 512], "num_classes": 10}))
    s0, r0, t0 = _run(sc, 0)
    s1, r1, t1 = _run(sc, 1)
    assert r1.head_hash == r0.head_hash and t1 == t0
    assert s1._pool.hits >= 2 * 12 and s1._pool.misses == 0, (s1._pool.hits, s1._pool.misses)


def test_committee_mode_with_workers_replays_the_same_head():
    sc = load_scenario(SCENARIOS / "quickstart.toml", rounds=4)
    s0, r0, t0 = _run(sc, 0)
    s2, r2, t2 = _run(sc, 2)
    assert r2.head_hash == r0.head_hash and t2 == t0
    assert s2._pool.hits > 0, "committee mode speculates at the proposal"


def test_a_blob_under_the_wrong_digest_stops_the_writer(tmp_path):
    from sim._writer import LedgerWriter

    got = {}

    class Capture:  # stands in for the writer of a 1-round run, to get a real block and its blobs
        def __init__(self, *a):
            pass

        def start(self):
            pass

        def submit(self, block, blobs, digests):
            got.update(block=block, blobs=blobs, digests=digests)

        def close(self):
            pass

    s = Simulation(_scenario("fedavg", {"clients": 0}, rounds=1), workers=0)
    s._writer = Capture()
    s.run()
    w = LedgerWriter(tmp_path / "ledger", s.genesis, [])
    w.start()
    w.submit(got["block"], got["blobs"], list(reversed(got["digests"])))  # the digests in the wrong order
    with pytest.raises(RuntimeError, match="height 1 was reported under the wrong digest"):
        w.close()


def test_workers_survive_a_corrupt_coordinator_and_replay_the_same_head():
    sc = _scenario("fedavg", {"clients": 0}, rounds=4)
    sc = dataclasses.replace(
        sc, adversary=dataclasses.replace(sc.adversary, faults=(FaultConfig(target="coordinator", kind="corrupt", from_round=2),))
    )
    _, a, _ = _run(sc, 1)
    _, b, _ = _run(sc, 0)
    assert a.head_hash == b.head_hash and a.view_changes == b.view_changes >= 1


def _default_in_child():
    return default_workers("cpu")


def test_default_workers():
    assert default_workers("cuda") == 0, "GPU training stays in the process that owns the device"
    assert default_workers("cpu") >= 0
    # a simulation inside a worker pool (a reproduction sweep) trains in-process: the sweep already uses the cores
    with ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("fork")) as ex:
        assert ex.submit(_default_in_child).result() == 0


def test_a_job_that_fails_in_a_worker_raises_its_own_error():
    # a client whose labels the 10-output model cannot have: cross-entropy refuses them, here or in a worker
    from learning.data import Dataset

    errors = []
    for workers in (0, 1):
        s = Simulation(_scenario("fedavg", {"clients": 0}, rounds=2), workers=workers)
        d = s.client_data[5]
        s.client_data[5] = Dataset(x=d.x, y=d.y + 100, num_classes=200, name=d.name)  # the model has 10 outputs
        with pytest.raises(Exception) as info:
            s.run()
        errors.append((type(info.value), str(info.value)))
        assert multiprocessing.active_children() == []
    assert errors[0] == errors[1]


def test_ctrl_c_keeps_every_decided_block_and_leaves_no_process(tmp_path):
    # A real `concilium sim run` (training workers, ledger writer process) interrupted by Ctrl-C, which the
    # terminal sends to the whole process group: the CLI says so in one line, the forked helpers neither
    # die mid-write nor print tracebacks, and the partial results ledger verifies with re-execution.
    import os
    import signal
    import subprocess
    import sys
    import time

    from ledger.store import open_ledger

    out = tmp_path / "run"
    proc = subprocess.Popen(
        [sys.executable, "-m", "concilium", "sim", "run", str(SCENARIOS / "coordinator_fedavg.toml"),
         "--rounds", "2000", "--workers", "1", "--quiet", "--out", str(out)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
        # a shell without job control starts background jobs with SIGINT ignored (POSIX) and children inherit
        # that: give the run a terminal's Ctrl-C whatever started the tests
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        deadline = time.monotonic() + 120
        height = 0
        while height < 3:
            assert proc.poll() is None and time.monotonic() < deadline, "the run ended or stalled before 3 blocks"
            time.sleep(0.2)
            try:
                store, _ = open_ledger(out / "ledger", readonly=True, check_index=False)
                with store:
                    height = store.height()
            except Exception:  # noqa: BLE001 - not created yet
                height = 0
        os.killpg(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130, err
    assert "concilium: interrupted" in err and "Traceback" not in err, err
    store, _ = open_ledger(out / "ledger", readonly=True, check_index=False)
    with store:
        assert store.height() >= 3
    ok, line = verify_ledger(out / "ledger")
    assert ok, line


def test_a_killed_ledger_writer_stops_the_run_with_a_clear_error(tmp_path):
    import os
    import signal

    s = Simulation(_scenario("fedavg", {"clients": 0}, rounds=8), workers=0, ledger_dir=tmp_path / "ledger")

    def kill_writer(m):
        if m.fl_round == 2:
            os.kill(s._writer._proc.pid, signal.SIGKILL)

    s._on_round = kill_writer
    with pytest.raises(RuntimeError, match="writing the results ledger .* failed: the writer process died"):
        s.run()
    assert multiprocessing.active_children() == []


def test_only_the_simulation_holds_the_parent_ends_of_its_helpers_pipes(tmp_path):
    # The watchdog that works without prctl: a helper sees EOF when the parent dies only if no other process
    # (itself, or a helper forked later) kept a copy of the parent's end of its pipe.
    import os

    s = Simulation(_scenario("fedavg", {"clients": 0}, rounds=2), workers=2, ledger_dir=tmp_path / "ledger")
    held: dict[int, set[str]] = {}

    def look(m):
        if m.fl_round != 1:
            return
        conns = [*s._pool._conns, s._writer._conn]
        ends = {f"socket:[{os.fstat(c.fileno()).st_ino}]" for c in conns}
        assert len(ends) == 3
        for pid in [p.pid for p in s._pool._procs] + [s._writer._proc.pid]:
            fds = set()
            for fd in os.listdir(f"/proc/{pid}/fd"):
                try:
                    fds.add(os.readlink(f"/proc/{pid}/fd/{fd}"))
                except FileNotFoundError:  # closed meanwhile
                    pass
            assert any(f.startswith("socket:[") for f in fds), "each helper holds its own end"
            held[pid] = ends & fds

    s._on_round = look
    s.run()
    assert len(held) == 3 and all(not ends for ends in held.values()), held
