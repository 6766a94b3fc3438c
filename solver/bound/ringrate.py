"""The best ring inside a host: the slowest edge no ring of n GPUs can avoid (lower bound, DESIGN §5).

A ring collective (NCCL ring all-reduce / all-gather / reduce-scatter, ring
attention's send to the successor) is as fast as its slowest edge.  Inside a
host the fastest possible ring of ``n`` GPUs is the bottleneck ``n``-cycle of
the host's pair rates; through several hosts a ring has an inter-host edge.
:func:`ring_rate_gbps` gives the larger of the two over all hosts, used by
:func:`rankmap.solver.bound.analytic.class_lower_bound` as a per-flow floor.
"""

from __future__ import annotations

import weakref

import numpy as np

from ..fabric.cluster import Cluster
from .rates import inter_host_rate_gbps

__all__ = ["RING_KINDS", "RING_MAX_PAIRS", "RING_MAX_HOST_GPUS", "ring_rate_gbps", "host_ring_rate_gbps"]

#: Hosts' internal pair rates are read up to this many GPU pairs in all (Σ over hosts of G(G−1)).
RING_MAX_PAIRS = 1 << 17
#: The best ring inside a host is searched exactly (subset DP) on hosts of at most this many GPUs.
RING_MAX_HOST_GPUS = 8
#: Collective kinds that move bytes around a ring (NCCL ring algorithms, ring attention).
RING_KINDS = ("all_reduce", "all_gather", "ring_p2p")
_RINGS: "weakref.WeakKeyDictionary[Cluster, dict]" = weakref.WeakKeyDictionary()


def _has_cycle(adj: list[int], n: int) -> bool:
    """Whether the graph (bitset adjacency over G ≤ RING_MAX_HOST_GPUS vertices) has a simple n-cycle."""
    G = len(adj)
    for s in range(G):
        reach = {1 << s: 1 << s}  # visited set -> end vertices of paths from s through exactly that set
        for _step in range(n - 1):
            nxt: dict = {}
            for mask, ends in reach.items():
                e = ends
                while e:
                    v = (e & -e).bit_length() - 1
                    e &= e - 1
                    cand = adj[v] & ~mask & ~((1 << (s + 1)) - 1)  # unvisited, above s (s is the cycle's least)
                    while cand:
                        u = (cand & -cand).bit_length() - 1
                        cand &= cand - 1
                        m2 = mask | (1 << u)
                        nxt[m2] = nxt.get(m2, 0) | (1 << u)
            reach = nxt
        if any(ends & adj[s] for ends in reach.values()):
            return True
    return False


def ring_rate_gbps(cluster: Cluster, n: int) -> float | None:
    """The most the slowest flow of any ring of ``n ≥ 3`` GPUs can get, GB/s (``p·B``, as the time model); or None.

    A ring inside one host is as fast as its slowest edge: the best is the
    bottleneck ``n``-cycle of the host's pair rates (each pair routed as the
    time model routes it, ECMP parts counted), found by threshold search with
    an exact cycle test (hosts of at most ``RING_MAX_HOST_GPUS`` GPUs).  A ring
    through several hosts has an edge between two hosts: at most the
    inter-host rate ``R_{≥h}``.  The answer is the larger of the two, over all
    hosts (None when some host is too large or there are more than
    ``RING_MAX_PAIRS`` pairs to read): e.g. 25 GB/s for a ring of 4 on a
    DGX-1 (hybrid cube mesh: no 4-cycle of double NVLinks), where the widest
    pair has 50.
    """
    cache = _RINGS.setdefault(cluster, {})
    if n in cache:
        return cache[n]
    out = _ring_rate(cluster, n)
    cache[n] = out
    return out


def host_ring_rate_gbps(cluster: Cluster, n: int) -> float | None:
    """The most the slowest flow of a ring of ``n ≥ 3`` GPUs *inside one host* can get, GB/s; or None.

    As :func:`ring_rate_gbps` without the inter-host alternative: 0 when no host holds
    ``n`` GPUs; None when some host is too large to search or there are too many pairs.
    """
    cache = _RINGS.setdefault(cluster, {})
    key = ("host", n)
    if key not in cache:
        cache[key] = _ring_rate(cluster, n, inter=False)
    return cache[key]


def _ring_rate(cluster: Cluster, n: int, inter: bool = True) -> float | None:
    gph = cluster.gpus_per_host
    if n < 3 or gph.size == 0:
        return None
    big = gph >= n
    if np.any(gph[big] > RING_MAX_HOST_GPUS) or int((gph * (gph - 1)).sum()) > RING_MAX_PAIRS:
        return None

    best = inter_host_rate_gbps(cluster) if inter else 0.0
    fab = cluster.fabric
    for G in np.unique(gph[big]).tolist():
        hosts = np.flatnonzero(gph == G)
        devs = np.stack([cluster.host_devices[h] for h in hosts])  # (H_G, G)
        ii, jj = np.nonzero(~np.eye(G, dtype=bool))
        s_all, d_all = devs[:, ii].ravel(), devs[:, jj].ravel()
        rate_all = np.empty(s_all.size)
        for lo in range(0, s_all.size, 1 << 16):
            sl = slice(lo, lo + (1 << 16))
            rate_all[sl] = fab.lone_rates_gbps(s_all[sl], d_all[sl])
        mats = np.zeros((hosts.size, G, G))
        mats[:, ii, jj] = rate_all.reshape(hosts.size, -1)
        mats = np.maximum(mats, mats.transpose(0, 2, 1))  # either direction may be the ring's (valid: larger)
        for rate in np.unique(mats.reshape(hosts.size, -1), axis=0).reshape(-1, G, G):
            best = max(best, _best_ring(rate, n))
    return best


def _best_ring(rate: np.ndarray, n: int) -> float:
    """The largest t such that the pairs of rate >= t hold an n-cycle (0 if none), by bisection on t."""
    G = rate.shape[0]
    vals = np.unique(rate[rate > 0])[::-1]
    got = 0.0
    lo, hi = 0, vals.size - 1
    while lo <= hi:
        mid = (lo + hi) // 2
        adj = [int(sum(1 << int(j) for j in np.flatnonzero(rate[i] >= vals[mid]))) for i in range(G)]
        if _has_cycle(adj, n):
            got = float(vals[mid])
            hi = mid - 1
        else:
            lo = mid + 1
    return got
