"""Hypothesis state machine over cluster actions (etcd-style: send/drop/cut/isolate/recover).

Hypothesis picks the cluster (seed, committee size, Byzantine behaviour, rotation) and a sequence of
actions: run ticks, deliver a message out of order, drop or duplicate one, cut links, isolate a
member, crash or recover an honest member (within the ``f`` budget), change the loss rate, heal. The
safety invariants are checked after every event and after every action; at the end the network heals,
crashed members recover, and the next heights must decide within the liveness bound. A failure prints the falsifying example
(its ``start(seed=...)`` replays it) and the ``replay: Cluster(...)`` line.
"""

from __future__ import annotations

import dataclasses

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule, run_state_machine_as_test

from consensus.testing import BEHAVIOURS, Cluster, Faults, SplitMix64

INDEX = st.integers(0, 10**6)


class ClusterMachine(RuleBasedStateMachine):
    explored = None

    @initialize(
        seed=st.integers(0, 2**32 - 1),
        size=st.sampled_from([4, 4, 7]),
        kind=st.sampled_from(("none", *BEHAVIOURS)),
        rotate=st.booleans(),
    )
    def start(self, seed: int, size: int, kind: str, rotate: bool) -> None:
        rng = SplitMix64(seed)
        f = (size - 1) // 3
        members = size + (3 if rotate else 0)
        byz: dict[int, str] = {}
        while kind != "none" and len(byz) < f:
            byz[rng.randrange(members)] = kind
        self.c = Cluster(
            size=size,
            members=members,
            seed=seed,
            byzantine=byz,
            rotate=rotate,
            faults=Faults(drop=0.05, duplicate=0.05, delay_ticks_max=2),
        )
        self.crash_budget = f  # honest crashes at a time; all recover before the liveness check

    def _peer(self, i: int) -> str:
        return self.c.peers[i % len(self.c.peers)]

    @rule(n=st.integers(1, 40))
    def run(self, n: int) -> None:
        self.c.run(n)

    @rule(i=INDEX)
    def deliver_out_of_order(self, i: int) -> None:
        self.c.deliver_in_flight(i)

    @rule(i=INDEX)
    def drop(self, i: int) -> None:
        self.c.drop_in_flight(i)

    @rule(i=INDEX)
    def duplicate(self, i: int) -> None:
        self.c.duplicate_in_flight(i)

    @rule(a=INDEX, b=INDEX)
    def cut(self, a: int, b: int) -> None:
        if self._peer(a) != self._peer(b):
            self.c.cut(self._peer(a), self._peer(b))

    @rule(i=INDEX)
    def isolate(self, i: int) -> None:
        self.c.isolate(self._peer(i))

    @rule(rate=st.sampled_from([0.0, 0.05, 0.3]), commit_rate=st.sampled_from([0.0, 0.0, 0.7]))
    def loss(self, rate: float, commit_rate: float) -> None:
        self.c.faults = dataclasses.replace(self.c.faults, drop=rate, drop_kind=(("commit", commit_rate),))

    @rule()
    def heal(self) -> None:
        self.c.heal()

    @rule(i=INDEX)
    def crash(self, i: int) -> None:
        p = self._peer(i)
        if p in self.c.honest and p not in self.c.crashed and len(self.c.crashed) < self.crash_budget:
            self.c.crash(p)

    @rule()
    def crash_front_runner(self) -> None:
        """Crash the live honest replica that decided most: it may hold the only certificate."""
        live = [p for p in self.c.live_honest()]
        if live and len(self.c.crashed) < self.crash_budget:
            self.c.crash(max(live, key=lambda p: (self.c.height(p), p)))

    @rule(kind=st.sampled_from(["commit", "prepare", "pre_prepare", "view_change", "new_view", "decided"]))
    def lose_all(self, kind: str) -> None:
        """Lose every message of one kind now in flight (a phase's votes, the view changes, ...)."""
        self.c.drop_where(lambda src, dst, m: m.kind == kind)

    @rule(kind=st.sampled_from(["commit", "prepare"]), i=INDEX)
    def lose_all_but_to(self, kind: str, i: int) -> None:
        """Lose every message of one kind in flight except those to one member: it alone may decide."""
        keep = self._peer(i)
        self.c.drop_where(lambda src, dst, m: m.kind == kind and dst != keep)

    @rule(i=INDEX)
    def recover(self, i: int) -> None:
        self.c.recover(self._peer(i))

    @invariant()
    def safe(self) -> None:
        if hasattr(self, "c"):
            self.c.check_invariants()

    def teardown(self) -> None:
        if not hasattr(self, "c"):
            return
        c = self.c
        c.heal()
        for p in sorted(c.crashed):
            c.recover(p)
        target = max(c.height(p) for p in c.honest) + 2
        bound = 2 * c.liveness_bound_ticks()
        assert c.run_until(lambda: c.min_height() >= target, bound), (
            f"{c.replay_line()}\nliveness: height {target} not decided by every live honest replica within {bound} ticks"
        )
        if self.explored is not None:
            self.explored.add(c)


def test_cluster_state_machine(explored):
    ClusterMachine.explored = explored
    try:
        run_state_machine_as_test(
            ClusterMachine,
            settings=settings(
                max_examples=200,
                stateful_step_count=50,
                derandomize=True,
                database=None,
                deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
            ),
        )
    finally:
        ClusterMachine.explored = None
