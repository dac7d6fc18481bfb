"""Shared fixtures: ``explored`` totals what the cluster tests explore (clusters = seeds, events = steps)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from consensus.testing import Cluster


@dataclass
class Exploration:
    clusters: int = 0
    events: int = 0
    ticks: int = 0
    heights: int = 0
    messages: int = 0

    def add(self, c: Cluster) -> None:
        self.clusters += 1
        self.events += c.events
        self.ticks += c.now
        self.heights += max((c.height(p) for p in c.honest), default=0)
        self.messages += sum(c.sent.values())


_KEY = pytest.StashKey[Exploration]()


def pytest_configure(config: pytest.Config) -> None:
    config.stash[_KEY] = Exploration()


@pytest.fixture
def explored(request: pytest.FixtureRequest) -> Exploration:
    return request.config.stash[_KEY]


def pytest_terminal_summary(terminalreporter, exitstatus, config: pytest.Config) -> None:  # noqa: ANN001
    e = config.stash.get(_KEY, None)
    if e is not None and e.clusters:
        terminalreporter.write_line(
            f"consensus clusters explored: {e.clusters} seeded runs, {e.events} events (steps), "
            f"{e.ticks} ticks, {e.heights} heights decided, {e.messages} messages"
        )
