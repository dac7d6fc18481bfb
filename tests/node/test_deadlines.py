"""Round deadlines follow the model size and the genesis' link rate (``node._deadlines``)."""

from __future__ import annotations

import tomllib
from pathlib import Path

import numpy as np
import pytest
import tomli_w

from ledger import Timeouts
from learning import ConfigError
from node.core import NodeCore
from node._deadlines import LINK_MBIT_DEFAULT, WIRE_MARGIN, RoundDeadlines, link_mbit_of
from node._rounds import check_host_params
from sim import load_scenario, resolve_scenario
from sim._world import World


def _world(tmp_path: Path, *, hidden: list[int], link_mbit: int | None) -> World:
    data = tomllib.loads(resolve_scenario("testnet").read_text())
    data["rounds"] = 2
    data["model"]["params"]["hidden"] = hidden
    if link_mbit is not None:
        data["protocol"]["params"]["link_mbit"] = link_mbit
    path = tmp_path / f"s-{hidden}-{link_mbit}.toml"
    path.write_text(tomli_w.dumps(data))
    return World.build(load_scenario(path))


def _core(world: World) -> NodeCore:
    return NodeCore(genesis=world.genesis, key=world.keys[0], initial_model=world.theta0)


def test_a_small_model_on_the_default_link_keeps_the_genesis_timeouts_exactly(tmp_path: Path) -> None:
    world = _world(tmp_path, hidden=[32], link_mbit=None)  # 2,410 params: 9.6 kB against 1.25 MB a tick
    t = world.genesis.protocol.timeouts
    core = _core(world)
    assert core._collect == t.timeout_ticks_train
    cfg = core.replica._cfg
    assert (cfg.timeout_ticks_start, cfg.timeout_ticks_propose, cfg.timeout_ticks_prepare, cfg.timeout_ticks_commit) == (
        t.timeout_ticks_train, t.timeout_ticks_propose, t.timeout_ticks_prepare, t.timeout_ticks_commit)


def test_a_2mb_model_on_a_10mbit_link_waits_the_wire_time_of_the_round(tmp_path: Path) -> None:
    world = _world(tmp_path, hidden=[700, 640], link_mbit=10)
    blob = 4 * world.theta0.shape[0] + 0  # float32 vector; the blob header is a few bytes more
    assert 2.0e6 < blob < 2.01e6
    t = world.genesis.protocol.timeouts  # tick 100 ms: 125,000 bytes a tick at 10 Mbit/s
    core = _core(world)
    # the testnet: 4 members, all 4 train and validate, no trainer outside the committee: 4 updates and the model
    # (fetched by a validator that decided by the certificate) in the collect window, 4 (the updates a validator
    # may have to fetch) in each phase
    wire = int(WIRE_MARGIN * 5 * blob / 125_000)
    phase = int(WIRE_MARGIN * 4 * blob / 125_000)
    assert (wire, phase) == (160, 128)
    assert core._collect == t.timeout_ticks_train + wire
    cfg = core.replica._cfg
    assert cfg.timeout_ticks_start == core._collect
    assert cfg.timeout_ticks_propose == t.timeout_ticks_propose + phase
    assert cfg.timeout_ticks_commit == t.timeout_ticks_commit + phase
    # the same model at 1 Gbit/s: 100x less wire time
    fast = _core(_world(tmp_path, hidden=[700, 640], link_mbit=1000))
    assert fast._collect == t.timeout_ticks_train + wire // 100


def test_trainers_outside_the_committee_wait_for_the_model_first() -> None:
    t = Timeouts(tick_ms=100, timeout_ticks_train=100)
    params = {"link_mbit": 8}  # 100,000 bytes a tick
    inside = RoundDeadlines.of(t, params, blob_bytes=100_000, trainers=4, committee=4, trainers_outside=0)
    outside = RoundDeadlines.of(t, params, blob_bytes=100_000, trainers=10, committee=4, trainers_outside=6)
    assert inside.collect_wire_ticks == int(WIRE_MARGIN * (4 + 1))
    assert outside.collect_wire_ticks == int(WIRE_MARGIN * (6 + 10 + 1))
    assert outside.phase_wire_ticks == int(WIRE_MARGIN * 10)


@pytest.mark.parametrize("bad", [0, -5, 10**6 + 1, 10.5, "100", True, None])
def test_a_bad_link_rate_is_refused_with_its_name(bad: object) -> None:
    with pytest.raises(ConfigError, match="link_mbit"):
        link_mbit_of({"link_mbit": bad})
    with pytest.raises(ConfigError, match="link_mbit"):
        check_host_params({"link_mbit": bad}, mode="coordinator")


def test_the_link_rate_defaults_and_never_reaches_a_strategy() -> None:
    assert link_mbit_of({}) == LINK_MBIT_DEFAULT == 100
    from learning import strategy_from_params

    strategy_from_params("fedavg", {"link_mbit": 10})  # a reserved host key: stripped before the strategy
    assert np.isfinite(link_mbit_of({"link_mbit": 1}))


def test_the_read_pace_follows_the_planned_link_shared_by_every_stream() -> None:
    from node._deadlines import READ_RATE_MIN, read_rate_floor

    # 10 Mbit/s = 1.25 MB/s, 4 members: 3 others, each way = 6 streams
    assert read_rate_floor({"link_mbit": 10}, 4) == 1_250_000 // 6
    assert read_rate_floor({"link_mbit": 1}, 100) == READ_RATE_MIN
    assert read_rate_floor({}, 4) == 12_500_000 // 6  # the default link: faster than the transport's own default


def test_a_late_update_of_a_decided_round_serves_a_wanted_blob_instead_of_a_fetch(tmp_path: Path) -> None:
    """A validator that decided a block by its certificate still wants that round's update blobs (its archive, the
    model); the trainer's own push of one, arriving after the block, is kept, not dropped as late (on a
    100 Mbit/s link it had fetched 45 MB that had just arrived)."""
    from ledger import sha256, sign_update
    from learning import vector_to_blob
    from node._wire import Envelope, UpdatePacket

    world = _world(tmp_path, hidden=[32], link_mbit=None)
    me, trainer = world.keys[0], world.keys[1]

    def late_update(core: NodeCore, seed: int) -> bytes:
        blob = vector_to_blob(np.random.default_rng(seed).standard_normal(world.theta0.shape[0]).astype(np.float32))
        c = sign_update(trainer, world.genesis.chain_id, 0, sha256(blob), 10)  # a round before the current one (1)
        core.on_message(trainer.peer_id, Envelope(update=UpdatePacket(commitment=c, blob=blob)).encode())
        return blob

    wanting = _core(world)
    wanted_blob = vector_to_blob(np.random.default_rng(7).standard_normal(world.theta0.shape[0]).astype(np.float32))
    wanting.want_blobs([sha256(wanted_blob)])
    assert wanting.wanted() == 1
    got = late_update(wanting, 7)
    assert got == wanted_blob and wanting.wanted() == 0 and wanting.servable(sha256(got)) == got
    assert "update for another round" not in wanting.status().dropped

    other = _core(world)  # wants nothing: the same kind of update is late, dropped, not stored
    got = late_update(other, 8)
    assert other.status().dropped["update for another round"] == 1
    assert other.servable(sha256(got)) is None
    assert me.peer_id == wanting.peer_id


def test_the_default_redraw_delay_grows_by_ten_wire_times_and_an_explicit_one_is_kept() -> None:
    t = Timeouts(tick_ms=100, timeout_ticks_train=100)
    d = RoundDeadlines.of(t, {"link_mbit": 8}, blob_bytes=100_000, trainers=4, committee=4, trainers_outside=0)
    assert d.redraw_wire_ticks == 10 * (d.collect_wire_ticks + d.phase_wire_ticks) > 0
    assert d.replica_config().redraw_extra_ticks == d.redraw_wire_ticks
    explicit = RoundDeadlines.of(t, {"link_mbit": 8, "redraw_ticks": 5000}, blob_bytes=100_000, trainers=4,
                                 committee=4, trainers_outside=0)
    assert explicit.redraw_wire_ticks == 0
