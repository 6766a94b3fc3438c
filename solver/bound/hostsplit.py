"""Free mode, split on whether the tensor-parallel groups stay inside the level-0 domains (DESIGN §5).

Prototype.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from ..fabric.cluster import Cluster
from ..megatron.config import ParallelConfig

__all__ = ["host_cases", "across_nodes_floor", "CASE_A_CLASSES"]

#: Classes whose groups meet every tp group in one rank at most (:mod:`.pairsplit`).
CASE_A_CLASSES = ("cp", "dp", "embedding")


def across_nodes_floor(cluster: Cluster, part, k: int, c: int) -> float:
    """A floor, seconds, on a ring part one of whose ``k``-member groups spans two NCCL nodes or more on at most
    ``c`` channels: the ring's ``fb/(c·R)``; an all-reduce also the least with tree and NVLSTree at ``c`` channels
    (their bus caps and their chain flows of ``S/c`` across nodes); NVLS runs inside one node only."""
    from ..cost.nccl import NVLS_MAX_HEADS, nvlstree_bus_gbps, tree_bus_gbps
    from ..cost.timemodel import flow_bytes
    from .ncclterms import RING_KINDS
    from .rates import inter_host_rate_gbps

    if part.kind not in RING_KINDS or k < 2 or c < 1:
        return 0.0
    fb = flow_bytes(part.kind, part.payload_bytes, k)
    r = inter_host_rate_gbps(cluster) * 1e9
    if fb <= 0 or r <= 0:
        return 0.0
    best = fb / (c * r)
    topo = cluster.nccl_topology
    if part.kind != "all_reduce" or topo is None or topo.arch is None:
        return best
    S = float(part.payload_bytes)
    chain = S / (c * r)
    nvl = float(topo.nvlink_gbps.max(initial=0.0))
    nic = float(topo.nic_gbps.max(initial=0.0))
    bus = max((nvlstree_bus_gbps(h, 2, c, nvl, nic, topo.arch) for h in range(2, NVLS_MAX_HEADS + 1)), default=0.0)
    if bus > 0:
        best = min(best, max(fb / (bus * 1e9), chain))
    bus = tree_bus_gbps(2, c, nic, topo.arch)
    if bus > 0:
        best = min(best, max(2.0 * S / (bus * 1e9), chain))
    return best


def _levels(cluster: Cluster, t: int):
    """``(q, Q)``: tp groups per level-0 domain, most members of one group of CASE_A_CLASSES a node can hold."""
    dom0 = np.asarray(cluster.widest_domains[0], dtype=np.int64)
    sizes = np.bincount(dom0)
    sizes = sizes[sizes > 0]
    if sizes.size == 0 or np.any(sizes % t) or np.any(sizes != sizes[0]):
        return None
    q = int(sizes[0]) // t
    topo = cluster.nccl_topology
    node = np.asarray(topo.node_of, dtype=np.int64)
    K = int(dom0.max()) + 1
    per_node = np.bincount(np.unique(node * K + dom0) // K)
    return q, q * int(per_node.max(initial=0))


def host_cases(cluster: Cluster, cfg: ParallelConfig, parts: dict) -> tuple[Callable, Callable] | None:
    """Floor raisers (A: every tp group inside one level-0 domain, B: not), or None."""
    from .ncclterms import RING_KINDS, crossing_bytes, max_channels, nics_per_gpu
    from .pairsplit import _node_cuts, case_b_floor
    from ..cost.timemodel import flow_bytes

    W = cfg.world_size
    t = int(cfg.tp)
    topo = cluster.nccl_topology
    if t < 2 or cluster.num_devices != W or cluster.widest_domains.shape[0] < 2 or topo is None \
            or not np.array_equal(topo.node_of, cluster.host_of):
        return None
    tp = parts.get("tp") or []
    if not tp or any(p.kind not in RING_KINDS or k != t for p, _g, k in tp):
        return None
    got = _levels(cluster, t)
    if got is None:
        return None
    q, Q = got
    m = nics_per_gpu(cluster)
    every = {c: bool(plist) and all(g * k >= W for _p, g, k in plist) for c, plist in parts.items()}

    def a(c, part, k, groups=None):
        if c not in CASE_A_CLASSES or part.kind not in RING_KINDS or k <= Q:
            return 0.0
        f = across_nodes_floor(cluster, part, k, min(max_channels(cluster, k), m * Q))
        if every.get(c, False):
            fb = flow_bytes(part.kind, part.payload_bytes, k)
            cut = crossing_bytes(part.kind, fb, part.payload_bytes, cluster, k, True)[1]
            for mm, kap, cap in _node_cuts(cluster):
                sel = (kap * q < k) & (kap > 0)
                if sel.any():
                    f = max(f, float((np.ceil(mm[sel] / (kap[sel] * q)) * cut / (cap[sel] * 1e9)).max()))
        return f

    dom0 = np.asarray(cluster.widest_domains[0], dtype=np.int64)
    nodes_are_dom0 = np.unique(dom0).size == np.unique(topo.node_of).size == np.unique(
        dom0 * (int(topo.node_of.max()) + 1) + topo.node_of).size

    def b(c, part, k, groups=None):
        if c != "tp":
            return 0.0
        if nodes_are_dom0:
            from .casesplit import split_floor_seconds

            return split_floor_seconds(cluster, part, k)
        return case_b_floor(cluster, part, k)

    return a, b
