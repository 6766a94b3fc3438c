"""Swap local search that polishes a layout on mid-size clusters.

After the structured search (:mod:`.solve`) picks a layout, this module tries
pairwise swaps that keep the mode's structure and applies the best improving
one until none improves (or the time budget ends):

* ``free``: swap the devices of any two ranks;
* ``launcher``: swap two ranks of the same host (local GPU order), or swap the
  whole rank blocks of two hosts (host order), keeping each block's local order.

The cost is the quadratic-assignment form of DESIGN §4,
``cost(p) = Σ_{i,j} T[i, j] · C[p_i, p_j]`` with ``T`` the bytes rank i sends
rank j per step and ``C = 1/B`` (seconds per byte, the intra-host no-relay rule
included), and the swap gain for all pairs at once is (Burkard et al.,
*Quadratic Assignment Problems*, SIAM 2009, §8.2, symmetric case)::

    Δ(a, b) = 2·(M[a, b] + M[b, a] - M[a, a] - M[b, b] + 2·T[a, b]·C_p[a, b]),
    M = T · C_pᵀ,  C_p[i, j] = C[p_i, p_j]

This needs dense W×W matrices, so it runs only up to ``POLISH_MAX_RANKS`` (512) ranks;
larger clusters never reach it (they rely on the domain decomposition).
"""

from __future__ import annotations

import threading
from typing import Mapping

import numpy as np

from ..megatron.config import ParallelConfig
from ..fabric.cluster import Cluster
from .deadline import Deadline
from ..cost.objective import active_families, ordered_pairs
from ..types import SolveCancelled

__all__ = ["POLISH_MAX_RANKS", "FAQ_MAX_RANKS", "traffic_matrix", "inverse_bandwidth_matrix", "polish", "faq_layout", "launcher_projection",
           "block_traffic_matrix", "host_order_search"]

#: Largest world size the dense swap search runs on (two W×W float64 matrices, O(W³) per move).
POLISH_MAX_RANKS = 512
#: Largest world size scipy's FAQ runs on (O(W³) per iteration).
FAQ_MAX_RANKS = 512
#: Work model of one best-improvement swap step on n items, seconds (an idle core, with margin):
#: the n×n×n product T·C_pᵀ plus sorting n² gains.  Sizes the deterministic move budgets.
#: (Measured on this project's 2-core machine: 40 ms at n = 512, 7 ms at 256; the model: 93 / 15 ms.)
SWAP_FLOPS_PER_SECOND = 2e9
SWAP_SECONDS_PER_GAIN = 1e-7
#: Work model of one candidate exchange of two hosts' rank blocks in the launcher block scan
#: (:func:`_best_block_swap`), seconds: fixed + per element of the two blocks' rows (2·G·W).
#: (Measured: 45 µs per pair at W = 64–288, 91 µs at W = 512 with 8-GPU hosts.)
BLOCK_PAIR_SECONDS_FIXED = 4e-5
BLOCK_PAIR_SECONDS_PER_ELEMENT = 6e-9


def swap_step_seconds(n: int) -> float:
    """Nominal seconds of one swap step on ``n`` items: ``n³ / SWAP_FLOPS_PER_SECOND + n² · SWAP_SECONDS_PER_GAIN``."""
    return n**3 / SWAP_FLOPS_PER_SECOND + n * n * SWAP_SECONDS_PER_GAIN


def block_scan_seconds(world_size: int, gpus_per_host: int) -> float:
    """Nominal seconds of one launcher block scan: ``B(B−1)/2`` exchanges of ``B = W / G`` host blocks."""
    B = world_size // max(gpus_per_host, 1)
    per_pair = BLOCK_PAIR_SECONDS_FIXED + BLOCK_PAIR_SECONDS_PER_ELEMENT * 2 * gpus_per_host * world_size
    return B * (B - 1) / 2 * per_pair


def swap_budget(n: int, seconds: float, cap: int) -> int:
    """Swap steps on ``n`` items that fit ``seconds`` of nominal work (at least 4, at most ``cap``).

    A deterministic count (same input, same budget, whatever the machine's
    load), from the work model :func:`swap_step_seconds`.
    """
    return int(min(cap, max(4, seconds / max(swap_step_seconds(n), 1e-12))))


def faq_layout(
    cluster: Cluster, cfg: ParallelConfig, traffic: Mapping[str, float], seed: int = 0, seconds: float | None = None,
) -> np.ndarray:
    """A free-mode layout from scipy's Fast Approximate QAP (Vogelstein et al., PLoS ONE 2015).

    ``scipy.optimize.quadratic_assignment(T, C, method="faq")`` minimises
    ``Σ T[i, j]·C[p_i, p_j]`` (the pairwise surrogate of the objective) from two starts: the
    barycenter and the identity (rank ``r`` on device ``r``: the launcher's blocks of
    consecutive ranks per host), the better by that sum (deterministic; ``seed`` fixes scipy's
    generator).  FAQ's relaxation from the barycenter alone can split pairs that the identity
    keeps on one host (4 hosts of 2 GPUs, tp2: two tp pairs across hosts).  At most 50
    iterations per start, fewer when ``seconds`` (nominal budget, seconds, for both starts) is
    given: :func:`faq_iterations`.  Returns the device per rank, shape (world_size,).
    """
    from scipy.optimize import quadratic_assignment

    T = traffic_matrix(cfg, traffic)
    C = inverse_bandwidth_matrix(cluster)
    scale = float(C.max()) or 1.0
    W = cfg.world_size
    maxiter = 50 if seconds is None else faq_iterations(W, seconds / 2)
    best, best_val = None, np.inf
    for start in ("barycenter", np.eye(W)):
        res = quadratic_assignment(T, C / scale, method="faq",
                                   options={"rng": np.random.default_rng(int(seed)), "maxiter": maxiter,
                                            "P0": start})
        if float(res.fun) < best_val:
            best, best_val = res, float(res.fun)
    return np.asarray(best.col_ind, dtype=np.int64)


#: Work model of one FAQ iteration on n items, seconds: ~``n³ / FAQ_FLOPS_PER_SECOND`` (an idle
#: core, with margin: a gradient product and a linear assignment).  Measured on this project's
#: 2-core machine (scipy 1.x, issue 15): 11 ms per iteration at n = 128, 87 ms at 256, 230 ms at
#: 512, i.e. n³ at 1.9e8-5.8e8 flop/s; 1e9 made 512-GPU solves overrun their limit.
FAQ_FLOPS_PER_SECOND = 1.5e8


def faq_iteration_seconds(n: int) -> float:
    """Nominal seconds of one FAQ iteration on ``n`` items (``n³ / FAQ_FLOPS_PER_SECOND``)."""
    return max(n, 1) ** 3 / FAQ_FLOPS_PER_SECOND


def faq_iterations(n: int, seconds: float) -> int:
    """FAQ iterations on ``n`` items that fit ``seconds`` of nominal work (2 to 50; deterministic)."""
    return int(min(50, max(2, seconds / faq_iteration_seconds(n))))


def traffic_matrix(cfg: ParallelConfig, traffic: Mapping[str, float], groups=None) -> np.ndarray:
    """Symmetrised flow bytes between global ranks per step, W×W (small worlds only).

    ``T[i, j] = (F[i, j] + F[j, i]) / 2`` with ``F[i, j]`` the bytes of rank i's
    flows to rank j (ring neighbours, all-to-all pairs, pipeline neighbours;
    :func:`~rankmap.solver.cost.objective.ordered_pairs`).  With a symmetric cost
    matrix ``Σ F·C_p = Σ T·C_p``, and the swap-gain formula needs symmetric T.
    """
    W = cfg.world_size
    T = np.zeros((W, W))
    for _c, kind, arr, pb in active_families(cfg, traffic, groups):
        a, b = ordered_pairs(arr, kind)
        np.add.at(T, (a, b), pb)
    return (T + T.T) / 2


def inverse_bandwidth_matrix(cluster: Cluster) -> np.ndarray:
    """``C[d, e] = 1 / B(d, e)`` in seconds per byte (0 on the diagonal); small clusters only."""
    d = np.arange(cluster.num_devices)
    bw = cluster.bandwidth_gbps(d[:, None], d[None, :])
    return np.where(np.isinf(bw), 0.0, 1.0 / (bw * 1e9))


def launcher_projection(cluster: Cluster, dev_of_rank: np.ndarray) -> np.ndarray:
    """The launcher layout closest to a free one: contiguous blocks of G ranks per host.

    Blocks go to hosts by a maximum-overlap assignment (``scipy.optimize.
    linear_sum_assignment`` on the count of each block's ranks already on each
    host); inside a host, ranks keep their device when it is on that host and
    the others take the host's remaining devices in device order.
    """
    from scipy.optimize import linear_sum_assignment

    W = dev_of_rank.size
    G = int(cluster.gpus_per_host[0])
    H = len(cluster.hosts)
    blocks = np.arange(W) // G
    host = cluster.host_of[dev_of_rank]
    cnt = np.zeros((H, H))
    np.add.at(cnt, (blocks, host), 1)
    rows, cols = linear_sum_assignment(-cnt)
    host_of_block = np.empty(H, dtype=np.int64)
    host_of_block[rows] = cols
    out = np.empty(W, dtype=np.int64)
    for b in range(H):
        h = host_of_block[b]
        ranks = np.arange(b * G, (b + 1) * G)
        devs = cluster.host_devices[h]
        keep = cluster.host_of[dev_of_rank[ranks]] == h
        out[ranks[keep]] = dev_of_rank[ranks[keep]]
        free = np.setdiff1d(devs, dev_of_rank[ranks[keep]])
        out[ranks[~keep]] = free[: int((~keep).sum())]
    return out


def polish(
    cluster: Cluster,
    cfg: ParallelConfig,
    traffic: Mapping[str, float],
    dev_of_rank: np.ndarray,
    mode: str,
    time_limit_seconds: float,
    groups=None,
    cancel: threading.Event | None = None,
    check=None,
    deadline: Deadline | None = None,
) -> np.ndarray:
    """Improve ``dev_of_rank`` by best-improvement swaps; returns the new device per rank.

    Parameters
    ----------
    cluster, cfg, traffic : as for :func:`~rankmap.solver.cost.objective.layout_cost`.
    dev_of_rank : numpy.ndarray of int, shape (W,)
    mode : ``"free"`` or ``"launcher"`` (``"fixed"`` returns the input).
    time_limit_seconds : float
        Nominal budget, seconds.  The search is deterministic: best improving
        swap, ties to the lowest index pair, at most 8 rounds of at most 4·W
        swap steps (32·W in all) and, in launcher mode, a block scan after each
        round, as many as fit the budget by the work models
        :func:`swap_step_seconds` and :func:`block_scan_seconds` (none when not
        even one swap step fits: the input is returned).
    check : callable(dev_of_rank) -> bool, optional
        Extra feasibility test (declarative constraints); a swap is applied
        only if the result passes it.
    deadline : Deadline, optional
        The solve's wall-clock stop (safety only; a stop is recorded on it).
        Without one, 3× the budget.

    Raises
    ------
    SolveCancelled
        If ``cancel`` (or ``deadline.cancel``) is set.
    """
    W = cfg.world_size
    p = np.asarray(dev_of_rank, dtype=np.int64).copy()
    if mode == "fixed" or W > POLISH_MAX_RANKS or W < 3:
        return p
    T = traffic_matrix(cfg, traffic, groups)
    if not T.any():
        return p
    C = inverse_bandwidth_matrix(cluster)
    # The move budget is deterministic (swap count); the wall clock is only a safety stop.
    if deadline is None:
        deadline = Deadline(3.0 * max(0.0, time_limit_seconds), cancel)
    step_s = swap_step_seconds(W)
    left = int(min(32 * W, max(0.0, time_limit_seconds) / max(step_s, 1e-12)))  # swap steps
    G = int(cluster.gpus_per_host[0])
    scan_steps = block_scan_seconds(W, G) / max(step_s, 1e-12)  # one block scan, in swap steps
    host_of_rank_block = None
    if mode == "launcher":
        host_of_rank_block = np.arange(W) // G  # rank block = node rank
    for _round in range(8):
        if left < 1:
            break
        before = p
        p, used = _swap_descent(T, C, p, host_of_rank_block, deadline, cancel, check, max_iter=min(4 * W, left))
        left -= used
        if mode != "launcher" or left < scan_steps or deadline.check():
            break
        left -= int(np.ceil(scan_steps))
        q = _best_block_swap(T, C, p, W, G, 1e-12 * (float(np.abs(T * C[p][:, p]).sum()) or 1.0), check,
                             deadline)
        if q is None:
            break
        p = q
        if np.array_equal(p, before):
            break
    return p


def _best_block_swap(T, C, p, W, G, tol, check, deadline=None):
    """Best improving exchange of two hosts' rank blocks (launcher host order), or None.

    Stops scanning (best so far) once ``deadline`` has passed.
    """
    B = W // G
    if B < 2:
        return None
    best, best_q = -tol, None
    for x in range(B):
        if deadline is not None and deadline.check():
            break
        for y in range(x + 1, B):
            q = p.copy()
            q[x * G : (x + 1) * G], q[y * G : (y + 1) * G] = p[y * G : (y + 1) * G], p[x * G : (x + 1) * G]
            rows = np.r_[x * G : (x + 1) * G, y * G : (y + 1) * G]
            # only rows/cols of the two blocks change
            old = 2.0 * (T[rows] * C[p[rows]][:, p]).sum() - (T[np.ix_(rows, rows)] * C[np.ix_(p[rows], p[rows])]).sum()
            new = 2.0 * (T[rows] * C[q[rows]][:, q]).sum() - (T[np.ix_(rows, rows)] * C[np.ix_(q[rows], q[rows])]).sum()
            gain = new - old
            if gain < best and (check is None or check(q)):
                best, best_q = gain, q
    return best_q


def block_traffic_matrix(cfg: ParallelConfig, traffic: Mapping[str, float], G: int, groups=None) -> np.ndarray:
    """``T_B[x, y]``: bytes rank block x (ranks xG .. xG+G-1) sends block y per step, (W/G)×(W/G).

    Built from per-group block counts with sparse products (no rank-pair loop):
    for an all-to-all class, ``T_B += flow_bytes · (NᵀN - diag)`` with N the
    (groups × blocks) count matrix; for rings and chains, their neighbour
    pairs.  Symmetrised like :func:`traffic_matrix`.
    """
    from scipy.sparse import coo_matrix

    W = cfg.world_size
    B = W // G
    TB = np.zeros((B, B))
    for _c, kind, arr, pb in active_families(cfg, traffic, groups):
        g, n = arr.shape
        blk = arr // G
        if kind != "all_to_all":
            a, b = ordered_pairs(blk, kind)
            np.add.at(TB, (a, b), pb / 2)
            np.add.at(TB, (b, a), pb / 2)
        else:
            N = coo_matrix((np.ones(g * n), (np.repeat(np.arange(g), n), blk.ravel())), shape=(g, B)).tocsr()
            NN = (N.T @ N).toarray()
            # pairs inside one block: n_b·(n_b-1), not n_b²
            NN[np.diag_indices(B)] -= np.asarray(N.sum(axis=0)).ravel()
            TB += pb * NN
    np.fill_diagonal(TB, 0.0)  # traffic inside a block does not depend on the host order
    return TB


def host_order_search(
    cluster: Cluster,
    cfg: ParallelConfig,
    traffic: Mapping[str, float],
    start: np.ndarray,
    time_limit_seconds: float,
    seed: int = 0,
    groups=None,
    cancel: threading.Event | None = None,
    deadline: Deadline | None = None,
) -> list[np.ndarray]:
    """Host orders (node rank -> host) from a block-level QAP: FAQ, then best-improvement block swaps.

    The hosts' mutual inverse bandwidths (from one GPU of each) and the blocks'
    mutual bytes form an H×H QAP; scipy's FAQ gives one start, ``start`` (e.g.
    the depth-first order) another, and both are improved by swaps (at most
    8·H each, and :func:`swap_budget` for ``time_limit_seconds`` in all).  Up
    to ``HOST_QAP_MAX_HOSTS`` hosts.  ``deadline`` is the solve's wall-clock
    stop (without one, 3× the budget).  Returns the improved orders.

    Raises
    ------
    SolveCancelled
        If ``cancel`` (or ``deadline.cancel``) is set.
    """
    from scipy.optimize import quadratic_assignment

    H = len(cluster.hosts)
    G = int(cluster.gpus_per_host[0])
    if H < 3 or H > HOST_QAP_MAX_HOSTS:
        return []
    TB = block_traffic_matrix(cfg, traffic, G, groups)
    if not TB.any():
        return []
    first = cluster.first_device
    bw = cluster.bandwidth_gbps(first[:, None], first[None, :])
    CH = np.where(np.isinf(bw), 0.0, 1.0 / (bw * 1e9))
    if deadline is None:
        deadline = Deadline(3.0 * time_limit_seconds, cancel)  # safety net; moves are capped
    out = []
    scale = float(CH.max()) or 1.0
    starts = [np.asarray(start, dtype=np.int64)]
    if H <= FAQ_MAX_RANKS and not deadline.check():
        res = quadratic_assignment(TB, CH / scale, method="faq",
                                   options={"rng": np.random.default_rng(int(seed)),
                                            "maxiter": faq_iterations(H, time_limit_seconds / 2)})
        starts.append(np.asarray(res.col_ind, dtype=np.int64))
    per_start = swap_budget(H, time_limit_seconds / 2 / len(starts), 8 * H)
    for st in starts:
        out.append(_swap_descent(TB, CH, st, None, deadline, cancel, None, max_iter=per_start)[0])
    return out


#: Largest host count of the block-level QAP (H×H matrices, O(H³) per swap round).
HOST_QAP_MAX_HOSTS = 512


def _swap_descent(T, C, p, group_of=None, deadline=None, cancel=None, check=None, max_iter=None):
    """Best-improvement pairwise swaps on ``Σ T[i,j]·C[p_i,p_j]`` (symmetric T, C, zero diagonals).

    ``group_of`` restricts swaps to items of the same group; ``deadline`` (a
    :class:`Deadline`) stops early.  Returns (the new permutation, swap steps used).
    """
    n = p.size
    p = p.copy()
    tabu: set = set()
    used = 0
    for _ in range(20 * n if max_iter is None else max_iter):
        if cancel is not None and cancel.is_set():
            raise SolveCancelled("solve cancelled")
        if deadline is not None and deadline.check():
            break
        used += 1
        Cp = C[p][:, p]
        M = T @ Cp.T
        dM = np.diag(M)
        delta = 2.0 * (M + M.T - dM[:, None] - dM[None, :] + 2.0 * T * Cp)
        if group_of is not None:
            delta = np.where(group_of[:, None] == group_of[None, :], delta, np.inf)
        np.fill_diagonal(delta, np.inf)
        scale = float(np.abs(T * Cp).sum()) or 1.0
        moved = False
        for flat in np.argsort(delta, axis=None, kind="stable")[:64].tolist():
            a, b = divmod(flat, n)
            if not delta[a, b] < -1e-12 * scale:
                break
            if (a, b) in tabu:
                continue
            q = p.copy()
            q[a], q[b] = q[b], q[a]
            if check is None or check(q):
                p = q
                moved = True
                break
            tabu.add((a, b))
        if not moved:
            break
    return p, used
