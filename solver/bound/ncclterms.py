"""What NCCL's channels and algorithms let a part save, as factors the bound terms must allow (DESIGN §3, §5).

The time model (:mod:`rankmap.solver.cost.nccl`) runs a ring collective that spans NCCL
nodes as ``c`` channels of ``fb/c`` bytes, each a path through a node's k_h members in hops
of ``fb/c`` (every member sends each channel once) and on to the next node, and runs all-reduce as the fastest of ring, tree, NVLS
and NVLSTree, whose inter-node flows carry S (not ``fb = 2(k−1)/k·S``).  A term of the
bound that assumed one ring of ``fb`` per edge stays a lower bound once

* a flow crossing nodes is counted at ``fb / c_max`` (:func:`max_channels`: ``c`` is the
  least of the group's nodes' rails, so at most the second-largest rail count of any
  node, and at most ⌊k/2⌋·m, m the most NICs near one GPU, since some node holds ≤ ⌊k/2⌋
  members);
* bytes crossing a domain boundary finer than an NCCL node are counted at ``fb/2``
  (``fb`` for groups of two): a group on one node crosses with a ring edge of ``fb``; a
  group over several nodes either has a node block of ``k_h ≥ 2`` members cut by the
  domain (each of its ``c`` channel paths visits both sides and leaves the domain once,
  from inside the block or out of the node: ``fb ≥ fb/2``) or the domain holds a whole
  block, whose ``c`` channels of ``fb/c`` all leave it (``fb``); a group of two over two
  nodes has blocks of one member and one channel (``fb``);
* all-reduce's cut and crossing terms use S (every touched domain still sends S out
  under tree and NVLSTree, and fb ≥ S under ring), and its per-flow floor is the least
  of the algorithms' floors (:func:`all_reduce_floor_seconds`).
"""

from __future__ import annotations

import weakref

import numpy as np

from ..cost.nccl import NVLS_EFFICIENCY, NVLS_MAX_HEADS, nvls_bus_gbps, nvlstree_bus_gbps, tree_bus_gbps
from ..fabric.cluster import Cluster

__all__ = ["max_channels", "nics_per_gpu", "node_levels", "all_reduce_floor_seconds", "crossing_bytes", "tree_may_run",
           "latency_extra_seconds"]

_CH: "weakref.WeakKeyDictionary[Cluster, tuple]" = weakref.WeakKeyDictionary()
RING_KINDS = ("all_reduce", "all_gather", "ring_p2p")


def max_channels(cluster: Cluster, k: int | None = None) -> int:
    """The most NCCL channels a group of ``k`` members can run across nodes (≥ 1)."""
    got = _CH.get(cluster)
    if got is None:
        topo = cluster.nccl_topology
        if topo is None:
            got = (1, 1)
        else:
            rails = topo.rails()  # every NIC nearest each device (a GPU may have several)
            node = np.broadcast_to(topo.node_of[:, None], rails.shape)
            ok = rails >= 0
            per = np.zeros(int(topo.node_of.max(initial=0)) + 1, dtype=np.int64)
            if ok.any():
                R = int(rails.max()) + 1
                pairs = np.unique(node[ok] * R + rails[ok])
                np.add.at(per, pairs // R, 1)
            per = np.sort(np.maximum(per, 1))[::-1]
            got = (int(per[1]) if per.size >= 2 else 1, max(1, int(topo.nic_count().max(initial=1))))
        _CH[cluster] = got
    c, m = got
    if k is not None:
        c = min(c, max(1, (k // 2) * m))
    return max(1, c)


def nics_per_gpu(cluster: Cluster) -> int:
    """The most NICs local to one GPU (≥ 1): a member adds at most this many channel slots on its node."""
    max_channels(cluster)
    return int(_CH[cluster][1])


def node_levels(cluster: Cluster, doms: np.ndarray) -> np.ndarray:
    """Per level of ``doms`` (shape (L, n)): True when every domain is a union of whole NCCL nodes."""
    topo = cluster.nccl_topology
    node = topo.node_of if topo is not None else cluster.host_of
    nn = np.unique(node).size
    out = np.zeros(doms.shape[0], dtype=bool)
    for k in range(doms.shape[0]):
        out[k] = np.unique(node * (int(doms[k].max()) + 1) + doms[k]).size == nn
    return out


def tree_may_run(cluster: Cluster) -> bool:
    """Whether the time model may run an all-reduce across nodes as tree or NVLSTree (S per node boundary).

    Only when the cluster names a GPU generation (``topo.arch``) and the NCCL model lets the tuner pick or
    forces one of them; otherwise every all-reduce across nodes is a ring, which sends ``fb ≥ S``.
    """
    topo = cluster.nccl_topology
    model = cluster.nccl
    algo = getattr(model, "algorithm", "auto") if model is not None else "auto"
    return topo is not None and topo.arch is not None and algo in ("auto", "tree", "nvlstree")


def crossing_bytes(kind: str, fb: float, payload_bytes: float, cluster: Cluster, k: int,
                   node_level: bool = True) -> tuple[float, float]:
    """``(per-flow crossing bytes, cut bytes)`` a bound may charge one split group of a part.

    Ring kinds: a crossing flow ``fb / c_max``; cut bytes ``fb`` at node-or-coarser levels,
    finer ``fb/2`` (``fb`` when ``k = 2``: module doc).  All-reduce: S in place of fb where tree or NVLSTree may run
    (:func:`tree_may_run`).  Others: fb.
    """
    if kind not in RING_KINDS:
        return fb, fb
    c = max_channels(cluster, k)
    base = min(fb, float(payload_bytes)) if kind == "all_reduce" and tree_may_run(cluster) else fb
    cut = base if node_level or k <= 2 else base / 2
    return base / c, cut


def all_reduce_floor_seconds(cluster: Cluster, k: int, payload_bytes: float, fb: float,
                             ring_floor_seconds: float) -> float:
    """A lower bound on an all-reduce part's bandwidth time: the least over the algorithms the model may pick.

    ``ring_floor_seconds``: the ring's own floor (computed by the caller).  NVLS: ``fb /
    nvls_bus(min(k, 8))`` at the widest NVLink of the cluster, only when some NCCL node holds
    ``k`` GPUs (NVLS runs a group inside one node); NVLSTree: ``fb`` over the most bus bandwidth
    any head count and node count allows; tree: ``2S`` over its bus cap.
    """
    topo = cluster.nccl_topology
    if topo is None or topo.arch is None:
        return ring_floor_seconds
    best = ring_floor_seconds
    nvl = float(topo.nvlink_gbps.max(initial=0.0))
    nic = float(topo.nic_gbps.max(initial=0.0))
    c = max_channels(cluster, k)
    fits = k <= int(np.bincount(topo.node_of).max(initial=0))  # a group of k inside one NCCL node
    bus = nvls_bus_gbps(min(k, NVLS_MAX_HEADS), nvl, topo.arch) if nvl > 0 and fits else 0.0
    if bus > 0:
        best = min(best, fb / (bus * 1e9))
    bus = max((nvlstree_bus_gbps(h, 2, c, nvl, nic, topo.arch) for h in range(2, NVLS_MAX_HEADS + 1)), default=0.0)
    if bus > 0:
        best = min(best, fb / (bus * 1e9))
    bus = tree_bus_gbps(2, c, nic, topo.arch)
    if bus > 0:
        best = min(best, 2.0 * float(payload_bytes) / (bus * 1e9))
    return best


def latency_extra_seconds(cluster: Cluster, kind: str, k: int, bw_floor_seconds: float,
                          nodes: int | None = None) -> float:
    """Seconds a part of ``k``-member groups takes beyond a floor on its bandwidth time: NCCL's latency.

    The time model takes, per algorithm, the least over protocols of ``latency + bandwidth
    time / efficiency`` (efficiency ≤ 1) with the latency of the part's node count, then the
    fastest algorithm.  Latency grows with the node count for ring, NVLSTree and the
    all-to-all/send step, not for tree (fewer intra-node hops), so the least over every
    node count a group can span (from ⌈k / largest node⌉ to min(k, nodes)) of
    ``latency + floor / efficiency``, less the floor, is what any layout adds (≥ 0).  0 when
    the cluster's NCCL model has latency off.  ``nodes``: the node count when the layouts
    bounded all span exactly that many (a launcher order on equal hosts).
    """
    from ..cost.nccl import ALGO_PROTOCOLS, PROTOCOLS, latency_seconds

    model = cluster.nccl
    if k <= 1 or (model is not None and not model.latency):
        return 0.0
    topo = cluster.nccl_topology
    node = topo.node_of if topo is not None else np.asarray(cluster.host_of)
    sizes = np.bincount(node)
    sizes = sizes[sizes > 0]
    lo = max(1, -(-k // int(sizes.max())))
    hi = max(lo, min(k, sizes.size))
    algos = ["ring"]
    want = model.algorithm if model is not None else "auto"
    if kind == "all_reduce" and topo is not None and topo.arch is not None:
        nvls_ok = topo.arch in NVLS_EFFICIENCY and float(topo.nvlink_gbps.max(initial=0.0)) > 0
        algos += [a for a in ("nvls", "nvlstree", "tree") if want in ("auto", a) and (a == "tree" or nvls_ok)]
    if nodes is not None:
        lo = hi = max(1, int(nodes))
    counts = list(range(lo, min(hi, lo + 64) + 1))
    if hi > counts[-1]:  # tree's latency is least at few or at many nodes: try powers of two and the end too
        counts += sorted({min(hi, 1 << e) for e in range(7, hi.bit_length() + 1)} | {hi})
    best = np.inf
    for algo in algos:
        for nodes in counts:
            if (algo == "nvls" and nodes != 1) or (algo in ("nvlstree", "tree") and nodes < 2):
                continue
            for proto, eff in PROTOCOLS:
                if proto in ALGO_PROTOCOLS[algo]:
                    best = min(best, latency_seconds(algo, proto, kind, k, nodes) + bw_floor_seconds / eff)
    return max(0.0, float(best) - bw_floor_seconds) if np.isfinite(best) else 0.0
