"""The objective: bandwidth-weighted traffic of a layout, and a lower bound (DESIGN §3–§4).

``cost = Σ over ordered rank pairs (i, j) of bytes(i→j) / B(dev(i), dev(j))``
in seconds, B the widest-path bandwidth in bytes/s (GB/s × 1e9).  Per-pair bytes
for a group of n ranks and a payload of S bytes per rank per step:
all_reduce 2S/n, all_gather and all_to_all S/n (every ordered pair), p2p_chain
S between consecutive members, each direction.

Because B is an ultrametric over nested domains (see :mod:`.cluster`), the
cost of a group only needs, per level ``k``, the number ``P_k`` of ordered
member pairs sharing a level-``k`` domain::

    Σ_pairs 1/B = P_0/b_0 + Σ_{k>=1} (P_k - P_{k-1}) / b_k

which is computed for all groups of a family at once with numpy (sorting
labels), never building an n×n matrix.
"""

from __future__ import annotations

from typing import Mapping

import numpy as np

from .catalogue import ParallelConfig, megatron_groups
from .cluster import Cluster
from .traffic import CLASS_GROUP, CLASS_KIND, TRAFFIC_CLASSES, pair_bytes_factor
from .types import CostBreakdown

__all__ = [
    "TRAFFIC_CLASSES",
    "CLASS_GROUP",
    "CLASS_KIND",
    "class_groups",
    "layout_cost",
    "lower_bound",
    "same_domain_pairs",
]



def pair_bytes(kind: str, payload_bytes: float, n: int) -> float:
    """Bytes one member sends another in an n-rank group with payload S (see
    :func:`rankmap.solver.traffic.pair_bytes_factor`); for ``p2p_chain`` between
    consecutive members, each direction."""
    return pair_bytes_factor(kind, n) * float(payload_bytes)


def class_groups(cfg: ParallelConfig, groups: Mapping[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
    """Group arrays (groups, size) of each traffic class for a configuration."""
    groups = megatron_groups(cfg) if groups is None else groups
    return {c: groups[CLASS_GROUP[c]] for c in TRAFFIC_CLASSES}


def active_families(cfg: ParallelConfig, traffic: Mapping[str, float], groups: Mapping[str, np.ndarray] | None = None):
    """The traffic classes that move bytes, with their groups.

    Yields
    ------
    (class, kind, groups, per_pair_bytes)
        ``groups`` has shape (number of groups, n) with n > 1, ranks without
        ``rank_offset``; ``per_pair_bytes`` as :func:`pair_bytes`.  Classes
        with no payload or groups of one rank are skipped.
    """
    fam = class_groups(cfg, groups)
    for c in TRAFFIC_CLASSES:
        s = float(traffic.get(c, 0.0) or 0.0)
        arr = fam[c] - cfg.rank_offset
        n = arr.shape[1]
        if s > 0 and n > 1:
            yield c, CLASS_KIND[c], arr, pair_bytes(CLASS_KIND[c], s, n)


def ordered_pairs(arr: np.ndarray, kind: str) -> tuple[np.ndarray, np.ndarray]:
    """(sender, receiver) rank arrays of every ordered pair that exchanges bytes in these groups.

    All pairs of distinct members for collectives; consecutive members, both
    directions, for ``p2p_chain``.  Size g·n·(n-1) (or 2·g·(n-1)): small groups only.
    """
    if kind == "p2p_chain":
        a, b = arr[:, :-1].ravel(), arr[:, 1:].ravel()
        return np.concatenate([a, b]), np.concatenate([b, a])
    n = arr.shape[1]
    ii, jj = np.nonzero(~np.eye(n, dtype=bool))
    return arr[:, ii].ravel(), arr[:, jj].ravel()


def same_domain_pairs(labels: np.ndarray) -> np.ndarray:
    """Ordered pairs of members sharing a label, per row.

    Parameters
    ----------
    labels : numpy.ndarray of int, shape (groups, n)

    Returns
    -------
    numpy.ndarray of int64, shape (groups,)
        Σ over labels of c·(c-1), c the count of that label in the row.
    """
    g, n = labels.shape
    if n <= 1 or g == 0:
        return np.zeros(g, dtype=np.int64)
    s = np.sort(labels, axis=1)
    # position j in a run of equal values contributes 2*(j - run start)
    new_run = np.ones((g, n), dtype=bool)
    new_run[:, 1:] = s[:, 1:] != s[:, :-1]
    idx = np.broadcast_to(np.arange(n), (g, n))
    start = np.maximum.accumulate(np.where(new_run, idx, 0), axis=1)
    return 2 * (idx - start).sum(axis=1).astype(np.int64)


def _group_cost(cluster: Cluster, dev: np.ndarray, kind: str, s_bytes: float) -> tuple[float, float]:
    """(cost seconds, estimated time seconds) of one family placed at device indices ``dev`` (groups, n)."""
    g, n = dev.shape
    if n <= 1 or s_bytes <= 0 or g == 0:
        return 0.0, 0.0
    b = cluster.levels_gbps * 1e9
    K = b.size
    per_pair = pair_bytes(kind, s_bytes, n)
    if kind == "p2p_chain":
        u, v = dev[:, :-1], dev[:, 1:]
        lvl = cluster.pair_level(u, v)  # (g, n-1), -1 for same device
        inv = np.where(lvl < 0, 0.0, 1.0 / b[np.maximum(lvl, 0)])
        cost = 2.0 * per_pair * float(inv.sum())
        slow = inv.max(axis=1)
        return cost, float(s_bytes * slow.max())
    total_pairs = n * (n - 1)
    same_dev = same_domain_pairs(dev)
    prev = same_dev
    inv_sum = np.zeros(g, dtype=np.float64)
    slowest = np.zeros(g, dtype=np.float64)
    done = np.zeros(g, dtype=bool)
    for k in range(K):
        labels = cluster.domains[k][dev]
        pk = same_domain_pairs(labels) if k < K - 1 else np.full(g, total_pairs, dtype=np.int64)
        inv_sum += (pk - prev) / b[k]
        all_same = pk == total_pairs
        newly = all_same & ~done
        slowest[newly] = 1.0 / b[k]
        done |= all_same
        prev = pk
    # a group entirely on one device has no traffic
    slowest = np.where(same_dev == total_pairs, 0.0, slowest)
    return per_pair * float(inv_sum.sum()), float(s_bytes * slowest.max())


def _host_extra_cost(cluster: Cluster, rank_of_dev: np.ndarray, arr: np.ndarray, kind: str, per_pair: float):
    """Extra cost (seconds) and per-group worst extra 1/B of same-host pairs in irregular hosts.

    See ``Cluster.host_extra``: pairs whose direct (non-relayed) path is slower
    than the ultrametric.  Returns (extra seconds, per-group max of 1/B' (s/byte)
    over such pairs, or None).
    """
    if not cluster.host_extra or per_pair <= 0:
        return 0.0, None
    g, n = arr.shape
    W = rank_of_dev.size
    gid = np.full(W, -1, dtype=np.int64)
    pos = np.full(W, -1, dtype=np.int64)
    valid = (arr >= 0) & (arr < W)
    gid[arr[valid]] = np.broadcast_to(np.arange(g)[:, None], arr.shape)[valid]
    pos[arr[valid]] = np.broadcast_to(np.arange(n)[None, :], arr.shape)[valid]
    by_size: dict[int, list[int]] = {}
    for h, mat in cluster.host_extra.items():
        by_size.setdefault(mat.shape[0], []).append(h)
    total = 0.0
    worst = np.zeros(g)
    for G, hs in by_size.items():
        D = np.stack([cluster.host_devices[h] for h in hs])  # (H, G)
        mats = np.stack([cluster.host_extra[h] for h in hs])  # (H, G, G)
        R = rank_of_dev[D]
        gr = np.where(R >= 0, gid[np.maximum(R, 0)], -1)
        same = (gr[:, :, None] == gr[:, None, :]) & (gr[:, :, None] >= 0)
        if kind == "p2p_chain":
            pr = pos[np.maximum(R, 0)]
            same &= np.abs(pr[:, :, None] - pr[:, None, :]) == 1
        contrib = np.where(same, mats, 0.0)
        total += per_pair * float(contrib.sum())
        if same.any():
            ultra = cluster.bandwidth_gbps(D[:, :, None], D[:, None, :])
            inv_b = np.where(same, 1.0 / (ultra * 1e9), 0.0)
            hh, ss, tt = np.nonzero(same)
            np.maximum.at(worst, gr[hh, ss], inv_b[hh, ss, tt])
    return total, worst


def layout_cost(
    cluster: Cluster,
    cfg: ParallelConfig,
    device_of_rank: np.ndarray,
    traffic: Mapping[str, float],
    groups: Mapping[str, np.ndarray] | None = None,
) -> CostBreakdown:
    """Cost of placing global rank r on device ``device_of_rank[r]``.

    Parameters
    ----------
    cluster : Cluster
    cfg : ParallelConfig
        Sizes and order (the groups follow the order).
    device_of_rank : numpy.ndarray of int, shape (world_size,)
        Index into ``cluster.devices`` per global rank (rank_offset removed).
    traffic : mapping class -> bytes per rank per step
        Missing classes count as 0.
    groups : optional precomputed ``megatron_groups(cfg)``.

    Returns
    -------
    CostBreakdown
        Total and per-class cost in seconds, and per-class estimated times.
    """
    dev_of = np.asarray(device_of_rank, dtype=np.int64)
    fam = class_groups(cfg, groups)
    by_class: dict[str, float] = {}
    times: dict[str, float] = {}
    rank_of_dev = None
    if cluster.host_extra:
        rank_of_dev = np.full(cluster.num_devices, -1, dtype=np.int64)
        rank_of_dev[dev_of] = np.arange(dev_of.size)
    for c in TRAFFIC_CLASSES:
        s = float(traffic.get(c, 0.0) or 0.0)
        arr = fam[c] - cfg.rank_offset
        cost, t = _group_cost(cluster, dev_of[arr], CLASS_KIND[c], s)
        if rank_of_dev is not None and s > 0 and arr.shape[1] > 1:
            extra, worst = _host_extra_cost(cluster, rank_of_dev, arr, CLASS_KIND[c], pair_bytes(CLASS_KIND[c], s, arr.shape[1]))
            cost += extra
            if worst is not None and worst.size:
                t = max(t, float(s * worst.max()))
        by_class[c] = cost
        times[c] = t
    return CostBreakdown(total_seconds=float(sum(by_class.values())), by_class=by_class, time_by_class=times)


def _max_same_pairs_all(caps: np.ndarray, n: int, groups: int) -> int:
    """Upper bound on ordered same-domain pairs of ``groups`` disjoint n-cliques in domains of sizes ``caps``."""
    q, r = np.divmod(caps.astype(np.int64), n)
    best = int((q * n * (n - 1) + r * (r - 1)).sum())
    return min(best, groups * n * (n - 1))


def _max_same_pairs_chain(caps: np.ndarray, n: int, groups: int) -> int:
    """Upper bound on consecutive (unordered) pairs sharing a domain, ``groups`` disjoint n-chains."""
    caps = caps.astype(np.int64)
    best = int((caps - -(-caps // n)).sum())
    return min(best, groups * (n - 1))


#: Above this many ordered rank pairs the neighbourhood bound is skipped (memory/time).
NEIGHBOURHOOD_BOUND_MAX_PAIRS = 4_000_000


def _class_sizes(cfg: ParallelConfig) -> dict[str, int]:
    return {
        "tp": cfg.tp,
        "cp": cfg.cp,
        "dp": cfg.dp * cfg.cp,
        "pp": cfg.pp,
        "ep": cfg.ep,
        "etp": cfg.etp,
        "edp": cfg.edp,
        "embedding": 2 if cfg.pp > 1 else 1,
    }


def _neighbourhood_gain_bounds(cluster: Cluster, cfg: ParallelConfig, traffic: Mapping[str, float]):
    """Upper bounds on Q_k (bytes over ordered same-domain pairs) from each rank's best neighbours.

    For rank r let v_r(s) be the bytes r sends s per step, summed over classes.
    A level-k domain of D devices holds D ranks, and each of them exchanges
    with at most D - 1 others inside it, so
    ``Q_k <= Σ_domains D · max_r (sum of the D-1 largest v_r(s))``.  Unlike the
    per-class bound this sees classes compete for the same slots.  Returns a
    list of K-1 bounds, or None when the pair list would be too large.
    """
    groups = megatron_groups(cfg)
    fam = class_groups(cfg, groups)
    W = cfg.world_size
    total = 0
    for c in TRAFFIC_CLASSES:
        n = fam[c].shape[1]
        if float(traffic.get(c, 0.0) or 0.0) > 0 and n > 1:
            total += fam[c].shape[0] * (2 * (n - 1) if CLASS_KIND[c] == "p2p_chain" else n * (n - 1))
    if total == 0 or total > NEIGHBOURHOOD_BOUND_MAX_PAIRS:
        return None
    src, dst, val = [], [], []
    for _c, kind, arr, pb in active_families(cfg, traffic, groups):
        a, b = ordered_pairs(arr, kind)
        src.append(a)
        dst.append(b)
        val.append(np.full(a.size, pb))
    r = np.concatenate(src)
    t = np.concatenate(dst)
    v = np.concatenate(val)
    key, inv = np.unique(r * W + t, return_inverse=True)
    agg = np.bincount(inv.ravel(), weights=v)
    rk = key // W
    order = np.lexsort((-agg, rk))
    rk, agg = rk[order], agg[order]
    deg = np.bincount(rk, minlength=W)
    start = np.zeros(W + 1, dtype=np.int64)
    start[1:] = np.cumsum(deg)
    csum = np.concatenate([[0.0], np.cumsum(agg)])
    K = cluster.domains.shape[0]
    out = []
    memo: dict[int, float] = {}
    for k in range(K - 1):
        caps = np.bincount(cluster.domains[k])
        bound = 0.0
        for cap, count in zip(*np.unique(caps, return_counts=True)):
            cap = int(cap)
            if cap not in memo:
                j = np.minimum(deg, cap - 1)
                memo[cap] = float((csum[start[:-1] + j] - csum[start[:-1]]).max())
            bound += int(count) * cap * memo[cap]
        out.append(bound)
    return out


def lower_bound(cluster: Cluster, cfg: ParallelConfig, traffic: Mapping[str, float]) -> float:
    """A valid lower bound (seconds) on the cost of any bijective layout of ``cfg``.

    Uses the ultrametric identity ``cost = Σ_c S_c·T_c/b_{K-1} - Σ_k g_k·Q_k``
    (``g_k = 1/b_{k+1} - 1/b_k > 0``, ``Q_k`` the bytes over ordered rank pairs
    sharing a level-``k`` domain) with an upper bound on each ``Q_k``: the
    smaller of

    * per class: groups are disjoint and all of size n, so a level-``k`` domain
      of D devices holds at most ``(D // n)·n·(n-1) + (D % n)·(D % n - 1)``
      ordered same-group pairs (``D - ceil(D/n)`` consecutive pairs of a chain),
      whatever the order;
    * per rank (when the pair list is small enough, see
      :func:`_neighbourhood_gain_bounds`): the D-1 most valuable partners of
      the best-placed rank, which accounts for classes competing for a domain.

    Intra-host relay corrections (``Cluster.host_extra``) only add cost, so the
    bound stays valid with them.
    """
    b = cluster.levels_gbps * 1e9
    K = b.size
    caps_by_level = [np.bincount(cluster.domains[k]) for k in range(K)]
    sizes = _class_sizes(cfg)
    W = cfg.world_size
    const = 0.0
    per_class_gain = np.zeros(max(K - 1, 0))
    for c in TRAFFIC_CLASSES:
        s = float(traffic.get(c, 0.0) or 0.0)
        n = sizes[c]
        if s <= 0 or n <= 1:
            continue
        kind = CLASS_KIND[c]
        groups = W // cfg.pp if c == "embedding" else W // n
        per_pair = pair_bytes(kind, s, n)
        if kind == "p2p_chain":
            const += 2.0 * per_pair * groups * (n - 1) / b[K - 1]
            for k in range(K - 1):
                per_class_gain[k] += 2.0 * per_pair * _max_same_pairs_chain(caps_by_level[k], n, groups)
        else:
            const += per_pair * groups * n * (n - 1) / b[K - 1]
            for k in range(K - 1):
                per_class_gain[k] += per_pair * _max_same_pairs_all(caps_by_level[k], n, groups)
    gain = per_class_gain
    if K > 1:
        nb = _neighbourhood_gain_bounds(cluster, cfg, traffic)
        if nb is not None:
            gain = np.minimum(gain, np.asarray(nb))
    g = np.array([1.0 / b[k + 1] - 1.0 / b[k] for k in range(K - 1)])
    # the all-pairs total bounds every level's gain too
    total_q = const * b[K - 1]
    gain = np.minimum(gain, total_q)
    return max(0.0, const - float((g * gain).sum()))
