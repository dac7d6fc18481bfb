"""A slow link and a model of 2 MB: four node processes in four network namespaces, every link
shaped to 10 Mbit/s both ways with ``tbf``, the genesis planning for it (``protocol.params.link_mbit = 10``).

Once node 3 stored height 2, its link drops to 0.5 Mbit/s for 15 s (less than one update's worth), then comes back.
Checked: every node stores every height and exits 0; every honest update is in every block before the slow-down
(no member locked out by deadlines too short for the link); node 3's update is in every block of a round that
began after its link came back (node 0 decided the block before it later: a member that misses rounds while its
link is slow rejoins the next one); the ledgers verify.

Slow (about 2 minutes); skipped, with the reason, where namespaces cannot be made.
"""

from __future__ import annotations

import os
import shutil
import tomllib
from pathlib import Path

import pytest
import tomli_w

from concilium.netns import NetnsError, Sandbox, Shape, SlowDown, run_testnet, tbf_args
from sim import load_scenario, resolve_scenario
from sim._run import verify_ledger
from sim._world import World

pytestmark = pytest.mark.slow

N = 4
ROUNDS = 7
RATE = 10
SLOW = 0.5
SLOW_S = 15.0


def test_every_update_is_accepted_at_10mbit_and_a_member_slowed_for_a_while_rejoins(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("network namespaces need root (euid is %d)" % os.geteuid())
    if shutil.which("ip") is None or shutil.which("tc") is None:
        pytest.skip("no `ip`/`tc` (iproute2) on PATH")
    probe = Sandbox(1)
    try:
        probe.add_namespace(probe.switch)
    except NetnsError as e:
        pytest.skip(f"cannot create a network namespace: {e}")
    finally:
        probe.down()
    data = tomllib.loads(resolve_scenario("testnet").read_text())
    data["rounds"] = ROUNDS
    data["model"]["params"]["hidden"] = [700, 640]  # 500,550 float32 params: 2.0 MB
    data["protocol"]["params"]["link_mbit"] = RATE
    (tmp_path / "scenario.toml").write_text(tomli_w.dumps(data))
    world = World.build(load_scenario(tmp_path / "scenario.toml"))
    slow = SlowDown(3, after_height=2, seconds=SLOW_S, rate_mbit=SLOW, back_mbit=RATE)
    try:
        run = run_testnet(world, tmp_path, shape=Shape(tbf=tbf_args(RATE), both_ways=True), until_height=ROUNDS,
                          timeout_s=420, during=slow, linger_s=10)
    except NetnsError as e:
        pytest.skip(f"cannot shape links here: {e}")
    assert run.exit_codes == [0] * N, run.stderr
    assert run.stored() == [ROUNDS] * N
    assert slow.restored_at is not None, "the link never came back"
    blocks = run.decided(0)
    slow_peer = run.files[3].peer_id
    for h in (1, 2):
        assert len(blocks[h]["accepted"]) == N, (h, blocks[h])
    # the rounds that began after node 3's link came back (node 0 decided the block before them later) all count
    # its update: a member that missed rounds while its link was slow is in the next one
    after = [r for r in range(2, ROUNDS + 1) if float(blocks[r - 1]["ts"]) >= slow.restored_at]
    assert after, f"no round began after node 3's link came back ({slow.slowed_at}, {slow.restored_at})"
    for r in after:
        assert f"{slow_peer}:{r}" in blocks[r]["accepted"], (r, blocks[r]["accepted"])
    for f in run.files:
        ok, verdict = verify_ledger(f.dir / "data" / "ledger")
        assert ok, verdict
