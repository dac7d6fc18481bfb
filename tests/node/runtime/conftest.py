"""Fixtures shared by the network runtime's tests."""

from __future__ import annotations

import pytest

ONE_NODE = """
name = "one"
seed = 0
rounds = 100000
members = 1
[protocol]
mode = "coordinator"
algorithm = "fedavg"
committee_size = 1
params = { clients = 1 }
tick_ms = 20
[data]
dataset = "digits"
partition = "iid"
[model]
name = "mlp"
params = { in_features = 64, hidden = [8], num_classes = 10 }
[training]
steps = 2
"""


@pytest.fixture(scope="session")
def one_node() -> str:
    """A one-member coordinator scenario (FedAvg, an 8-unit MLP on digits, 20 ms ticks): a node of it alone commits
    a round in a few milliseconds. Two members: replace ``members = 1``, ``committee_size = 1`` and ``clients = 1``."""
    return ONE_NODE
