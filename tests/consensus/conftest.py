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


def _answer_requests(c: Cluster, r, server, server_id: str, me: str, fx: list, blocks, *,  # noqa: ANN001
                     only_serves: bool = True, rounds: int = 20) -> tuple[list, list]:
    """Answer the requests that replica ``r`` (member ``me``) sends ``server`` as a node does: each ``SendBlocks``
    from ``blocks`` by height (``SendBlocks.heights()``), as decided headers or blocks; ``r`` steps each.
    ``only_serves``: every effect of the server must be a ``SendBlocks`` to ``me``. Returns the (kind, height) of
    each request and every effect of ``r`` from ``fx`` on."""
    from consensus import Send, SendBlocks, decided_header_message, decided_message  # noqa: PLC0415

    by_height = {b.height: b for b in blocks}
    asked: list = []
    out = list(fx)
    for _ in range(rounds):
        sends = [e for e in fx if isinstance(e, Send)]
        if not sends:
            break
        fx = []
        for ask in sends:
            assert ask.to == server_id
            asked.append((ask.message.signed.kind, ask.message.signed.height))
            served = server.step(ask.message, sender=me)
            if only_serves:
                assert all(isinstance(e, SendBlocks) for e in served), served
            for serve in [e for e in served if isinstance(e, SendBlocks)]:
                assert serve.to == me
                for h in serve.heights():
                    b = by_height[h]
                    m = decided_header_message(c.keys[server_id], c.ctx.chain_id, b) if serve.headers else decided_message(b)
                    got = r.step(m, sender=server_id)
                    out += got
                    fx += got
    return asked, out


@pytest.fixture
def answer_requests():  # noqa: ANN201
    """:func:`_answer_requests`: a server answering a lazy replica's requests as its node would."""
    return _answer_requests
