"""Fixtures shared by the learning tests."""

import pytest
import torch


@pytest.fixture
def deterministic_torch():
    """One torch thread and deterministic algorithms for the test, restored after it (bit-level comparisons)."""
    torch.set_num_threads(1)
    before = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    yield
    torch.use_deterministic_algorithms(before)
