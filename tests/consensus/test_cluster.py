"""Seeded cluster sweeps: safety under every fault and Byzantine behaviour, liveness once messages flow.

Every run checks agreement, validity, certificates, contiguous heights and evidence after each event
(``Cluster.check_invariants``); a failure message starts with the ``replay: Cluster(...)`` line.
Liveness (docs/design.md, issue item 5): with at most ``f`` Byzantine or crashed members of ``3f+1`` and
every message delivered after ``heal()``, each of the next heights decides within
``Cluster.liveness_bound_ticks()`` ticks.
"""

from __future__ import annotations

import pytest

from consensus.testing import BEHAVIOURS, Cluster, Faults, InvariantViolation, SplitMix64

FAULTY = (*BEHAVIOURS, "crash", "front_crash")
FAULTS = Faults(drop=0.1, duplicate=0.05, delay_ticks_max=3)
FRONT_FAULTS = Faults(drop=0.05, delay_ticks_max=2, drop_kind=(("commit", 0.7),))


def faulty_members(seed: int, size: int, kind: str) -> tuple[dict[int, str], list[int]]:
    """``f`` members picked by the seed: Byzantine with behaviour ``kind``, or crashed for good
    (``"front_crash"`` picks nobody: it crashes whoever decides first, see :func:`run_front_crash`)."""
    rng = SplitMix64(seed ^ 0xC0FFEE)
    f = (size - 1) // 3
    picked: list[int] = []
    while len(picked) < f:
        i = rng.randrange(size)
        if i not in picked:
            picked.append(i)
    if kind == "front_crash":
        return {}, []
    if kind == "crash":
        return {}, picked
    return {i: kind for i in picked}, []


def run_front_crash(c: Cluster, ticks: int) -> None:
    """Crash the first honest replica to decide a height (it may hold the only certificate: the others
    must carry its block through a view change), recover it later; most COMMITs are lost."""
    f = c.ctx.genesis.protocol.committee_size - c.ctx.quorum(c.ctx.genesis.protocol.committee_size)
    for t in range(ticks):
        c.run(1)
        live = c.live_honest()
        heights = [c.height(p) for p in live]
        if len(c.crashed) < f and max(heights) > min(heights):
            c.crash(max(live, key=lambda p: (c.height(p), p)))
        elif c.crashed and t % 40 == 39:
            c.recover(sorted(c.crashed)[0])
    for p in sorted(c.crashed):
        c.recover(p)


def run_scenario(
    size: int, seed: int, kind: str, *, members: int | None = None, rotate: bool = False
) -> Cluster:
    byzantine, crashed = faulty_members(seed, size, kind)
    faults = FRONT_FAULTS if kind == "front_crash" else FAULTS
    c = Cluster(size=size, members=members, seed=seed, byzantine=byzantine, faults=faults, rotate=rotate)
    for i in crashed:
        c.crash(c.peers[i])
    if kind == "front_crash":
        run_front_crash(c, 240)
    c.run(120)  # lossy, duplicating, reordering network
    half = len(c.peers) // 2
    c.partition(c.peers[:half], c.peers[half:])  # no quorum on either side: safety only
    c.run(60)
    c.heal()
    bound = c.liveness_bound_ticks()
    for _ in range(3):
        target = c.min_height() + 1
        assert c.run_until(lambda: c.min_height() >= target, bound), (
            f"{c.replay_line()}\nliveness: height {target} not decided by every live honest replica within {bound} ticks"
        )
    return c


@pytest.mark.parametrize("kind", FAULTY)
@pytest.mark.parametrize("seed", range(10))
def test_c4(kind, seed, explored):
    explored.add(run_scenario(4, seed, kind))


@pytest.mark.parametrize("kind", FAULTY)
@pytest.mark.parametrize("seed", range(3))
def test_c7(kind, seed, explored):
    explored.add(run_scenario(7, seed, kind))


@pytest.mark.parametrize("seed", range(20))
def test_crash_the_first_to_decide(seed, explored):
    """The adversary that breaks a wrong re-proposal rule (cmfl spec §7.8 item 6's view change)."""
    explored.add(run_scenario(4, 1000 + seed, "front_crash"))


@pytest.mark.parametrize("seed", range(3))
def test_rotating_committees(seed, explored):
    explored.add(run_scenario(4, seed, "equivocate", members=10, rotate=True))


def test_majority_quorum_is_not_byzantine_safe(explored):
    """The paper's ⌊C/2⌋+1 (quorum="majority"): two equivocators out of 7 fork the chain; the harness sees it."""
    c = Cluster(size=7, seed=3, quorum="majority", byzantine={1: "equivocate", 4: "equivocate"}, faults=Faults(delay_ticks_max=2))
    with pytest.raises(InvariantViolation, match="agreement") as e:
        c.run(300)
    assert str(e.value).startswith("replay: Cluster(size=7, members=7, seed=3, quorum='majority'")
    explored.add(c)
    bft = Cluster(size=7, seed=3, byzantine={1: "equivocate", 4: "equivocate"}, faults=Faults(delay_ticks_max=2))
    bft.run(300)  # the same attack against 2f+1: safe
    explored.add(bft)


@pytest.mark.slow
@pytest.mark.parametrize("kind", FAULTY)
@pytest.mark.parametrize("size", [4, 7, 10])
def test_sweep(size, kind, explored):
    for seed in range(100, 120):
        explored.add(run_scenario(size, seed, kind))


@pytest.mark.parametrize("size,seed,kind", [(7, 116, "forge"), (10, 108, "crash")])
def test_members_split_across_two_views_find_each_other(size, seed, kind, explored):
    """Two sweeps that once ended with the live honest members split between views v and v + 1, all in
    VIEW-CHANGE with no timer running: the members at v each lacked one VIEW-CHANGE for v (retransmitted only
    to members whose own was missing) and those at v + 1 dropped theirs as stale. A stuck VIEW-CHANGE now goes
    to every member and a stale one is answered with our own for that view."""
    explored.add(run_scenario(size, seed, kind))
