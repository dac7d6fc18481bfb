"""Shared fixtures: ``fuzz_totals`` adds up what the Byzantine-peer fuzzer did (printed at the end of the run)."""

from __future__ import annotations

from collections import Counter

import pytest

_KEY = pytest.StashKey[Counter]()


def pytest_configure(config: pytest.Config) -> None:
    config.stash[_KEY] = Counter()


@pytest.fixture
def fuzz_totals(request: pytest.FixtureRequest) -> Counter:
    return request.config.stash[_KEY]


def pytest_terminal_summary(terminalreporter, exitstatus, config: pytest.Config) -> None:  # noqa: ANN001
    t = config.stash.get(_KEY, None)
    if t:
        terminalreporter.write_line(
            f"byzantine fuzz: {t['runs']} runs, {t['rounds']} rounds committed, {t['messages']} messages from "
            f"Byzantine peers, {t['tampered']} tampered with, {t['fabricated']} fabricated accusations, "
            f"{t['evidence checked']} evidence items checked, {t['lying rows']} lying score rows named by the audit"
        )
