"""The robust rules' Gram matrix ``X Xᵀ`` on workload A1's shape (n = 50, d = 10⁶ float32): the plain BLAS product
(``B @ B.T`` per 16,384 columns, what the rules used before reproducible mode) against ``learning.robust.gram_matrix``
(exact integer limbs: the same bits on any CPU) on two and on one kernel thread. Median (min-max) of ``--repeat``.

    .venv/bin/python benchmarks/gram_bench.py [--repeat 5] [--n 50] [--d 1000000]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from learning.robust import gram_matrix, set_kernel_threads


def _plain(x: np.ndarray) -> np.ndarray:
    g = np.zeros((x.shape[0], x.shape[0]))
    for j in range(0, x.shape[1], 16384):
        b = x[:, j : j + 16384].astype(np.float64)
        g += b @ b.T
    return g


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--n", type=int, default=50)
    ap.add_argument("--d", type=int, default=1_000_000)
    a = ap.parse_args()
    x = np.random.default_rng(3).standard_normal((a.n, a.d)).astype(np.float32)
    for label, threads, fn in (("plain B @ B.T", None, _plain), ("exact, 2 kernel threads", 2, gram_matrix),
                               ("exact, 1 kernel thread", 1, gram_matrix)):
        if threads is not None:
            set_kernel_threads(threads)
        times = []
        for _ in range(a.repeat):
            start = time.perf_counter()
            fn(x)
            times.append(time.perf_counter() - start)
        print(f"{label}: median {statistics.median(times):.3f} s ({min(times):.3f}-{max(times):.3f})", flush=True)


if __name__ == "__main__":
    main()
