"""The tree partition's size repair without an items x parts matrix (issue 28.2).

``_repair`` used to build ``A @ onehot(parts)`` densely: 16,384 hosts cut into 16,384 slots at
131,072 GPUs made it a 2 GiB matrix (the 4.5 GiB end-of-search spike).  It now sums each move's
gains over the giving parts' rows; the moves must be the same, bit for bit, as the dense rule's:
each over-full part gives its ``need`` items with the best gain (bytes to the receiving part minus
bytes to its own part, counted against the parts at the start of the round), ties to the lowest
index, to the first part still under its size.
"""

from __future__ import annotations

import numpy as np
from scipy.sparse import csr_matrix
from scipy.sparse import random as sparse_random

from rankmap.solver.search.partition import _repair


def dense_repair(A: csr_matrix, part: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """The former rule, with the dense items x parts byte matrix (small inputs only)."""
    k = sizes.size
    part = part.copy()
    for _ in range(4 * k + 4):
        count = np.bincount(part, minlength=k)
        over, under = np.flatnonzero(count > sizes), np.flatnonzero(count < sizes)
        if over.size == 0:
            break
        conn = np.asarray((A @ csr_matrix((np.ones(part.size), (np.arange(part.size), part)),
                                          shape=(part.size, k))).todense())
        for p in over.tolist():
            if not under.size:
                break
            q = int(under[0])
            need = min(int(count[p] - sizes[p]), int(sizes[q] - count[q]))
            items = np.flatnonzero(part == p)
            gain = conn[items, q] - conn[items, p]
            pick = items[np.lexsort((items, -gain))[:need]]
            part[pick] = q
            count[p] -= need
            count[q] += need
            under = np.flatnonzero(count < sizes)
    return part


def test_hand_case():
    # 4 items, 2 parts of 2; METIS put items 0, 1, 2 in part 0.  Bytes: 2-3 = 5, 0-1 = 4, 1-2 = 1.
    # Gain of moving to part 1 (item 3) = bytes to item 3 - bytes to the rest of part 0:
    # item 0: 0 - 4 = -4, item 1: 0 - (4 + 1) = -5, item 2: 5 - 1 = +4: item 2 moves.
    A = csr_matrix(np.array([[0, 4, 0, 0], [4, 0, 1, 0], [0, 1, 0, 5], [0, 0, 5, 0]], dtype=float))
    assert _repair(A, np.array([0, 0, 0, 1]), np.array([2, 2])).tolist() == [0, 0, 1, 1]


def test_same_moves_as_the_dense_rule():
    rng = np.random.default_rng(7)
    for t in range(200):
        n = int(rng.integers(2, 50))
        k = int(rng.integers(1, min(n, 9) + 1))
        M = sparse_random(n, n, density=float(rng.uniform(0.05, 0.6)), random_state=t, format="csr")
        M = (M + M.T).tocsr()
        if t % 3 == 0:
            M.data = np.rint(M.data * 3)  # integer bytes: many ties
        sizes = np.bincount(rng.integers(0, k, n), minlength=k)
        part = rng.integers(0, k, n)
        assert np.array_equal(_repair(M, part, sizes), dense_repair(M, part, sizes)), t
