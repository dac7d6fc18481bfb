"""A pytest plugin: run every collected test REPEAT times in a row (default 50), in one session, as distinct items.

    PYTHONPATH=scripts REPEAT=50 .venv/bin/python -m pytest -p pytest_repeat -x tests/...::test_name
"""
import os

import pytest


@pytest.fixture
def _repeat_step(request):
    return request.param


def pytest_generate_tests(metafunc):
    metafunc.fixturenames.append("_repeat_step")
    metafunc.parametrize("_repeat_step", range(int(os.environ.get("REPEAT", "50"))), indirect=True)
