"""One CMFL score definition in both layers: ``learning``'s reference combination and ``consensus``'s.

``learning`` computes the eq. (7) distance rows and has a reference combination (simulator, audits); ``consensus``
combines the agreed rows into the scores that rank, select and elect the clients written into blocks (cmfl spec §2.2,
eq. 8; §2.8.6 median). The layers may not import each other: both take the floor from its one definition,
``ledger.CMFL_DISTANCE_FLOOR``, and this suite pins that they give the same scores and the same ranking, bit for bit,
including distances far below any "small" floor.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import consensus
import learning
import ledger
from consensus import ScoreRow, combine_scores, rank_clients
from learning.robust import cmfl_scores, cmfl_scores_median, distance_matrix


def _consensus_scores(dist: np.ndarray, clients: list[str], method: str) -> dict[str, float]:
    rows = [
        ScoreRow(f"m{c:02d}", 1, {k: float(dist[c, j]) for j, k in enumerate(clients)}, {}, b"\0" * 32)
        for c in range(dist.shape[0])
    ]
    return combine_scores(rows, clients, method=method)


def _learning_scores(dist: np.ndarray, clients: list[str], method: str) -> dict[str, float]:
    p = cmfl_scores(dist) if method == "mean" else cmfl_scores_median(dist)
    return {k: float(p[j]) for j, k in enumerate(clients)}


def test_one_floor() -> None:
    assert learning.robust.DISTANCE_FLOOR is consensus.DISTANCE_FLOOR is ledger.CMFL_DISTANCE_FLOOR == 1e-300


@pytest.mark.parametrize("method", ["mean", "median"])
def test_sub_1e12_distances_rank_the_same_in_both_layers(method: str) -> None:
    """Reference [0.0]; "0001" sent [1e-7] (d = 1e-14), "0002" sent [0.0] (d = 0, floored).

    With a 1e-12 floor in one layer both clients scored 1e12 there and the id tie-break ranked "0001" first, while
    the other layer ranked "0002" (identical to the committee) first. Eq. 8: "0002" is closer, so it ranks first.
    """
    clients = ["0001", "0002"]
    dist = distance_matrix(np.array([[0.0]]), np.array([[1e-7], [0.0]]))
    assert dist.tolist() == [[1e-7 * 1e-7, 0.0]]
    ours = _learning_scores(dist, clients, method)
    theirs = _consensus_scores(dist, clients, method)
    assert ours == theirs == {"0001": 1.0 / (1e-7 * 1e-7), "0002": 1.0 / 1e-300}
    assert rank_clients(ours) == rank_clients(theirs) == ("0002", "0001")
    ranked = [clients[j] for j in np.lexsort((np.arange(2), -np.array(list(ours.values()))))]
    assert tuple(ranked) == ("0002", "0001")


@settings(max_examples=60, deadline=None)
@given(
    c=st.integers(1, 7),
    n=st.integers(1, 9),
    seed=st.integers(0, 2**32 - 1),
)
def test_both_layers_give_the_same_scores_bit_for_bit(c: int, n: int, seed: int) -> None:
    """Random rows mixing zeros, subnormal-range and ordinary distances: equal scores (fsum, a/2 + b/2, one floor)."""
    g = np.random.default_rng(seed)
    scale = 10.0 ** g.integers(-320, 3, size=(c, n)).astype(np.float64)
    dist = g.random((c, n)) * scale
    dist[g.random((c, n)) < 0.2] = 0.0
    clients = [f"{j:04d}" for j in range(n)]
    for method in ("mean", "median"):
        ours = _learning_scores(dist, clients, method)
        theirs = _consensus_scores(dist, clients, method)
        assert ours == theirs
        assert rank_clients(ours) == rank_clients(theirs)
