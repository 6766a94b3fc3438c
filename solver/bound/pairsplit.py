"""Split on whether the tensor-parallel groups are the cluster's tightest domains (DESIGN §5; used by :mod:`.analytic`).

Let the level-0 widest domains (``cluster.widest_domains[0]``: the GPUs joined by the widest
links, e.g. the NVLink-bridged pairs of a PCIe host, or an NVSwitch host) all hold exactly
``t`` GPUs, ``t`` the tensor-parallel size, with every GPU used.  Every layout of the searched
space (launcher or free) is in one of two cases.

* **B: some tp group is not inside one level-0 domain.**  On one NCCL node its ring has an edge
  between two members of different level-0 domains, which are first joined at widest level
  ``≥ 1``: that flow of ``fb`` bytes takes ``≥ fb / R_{≥1}``
  (:func:`~rankmap.solver.bound.rates.suffix_rates`).  Over several nodes each of its ``c ≤
  c_max(t)`` channels crosses between nodes with ``fb/c`` bytes at most at the inter-host rate
  ``R``: ``≥ fb / (c_max·R)``.  The tp parts' floors are raised to the least of the two (an
  all-reduce: also the least with the other algorithms' floors,
  :func:`~rankmap.solver.bound.ncclterms.all_reduce_floor_seconds`).
* **A: every tp group is inside one level-0 domain.**  A domain holds ``t`` GPUs, so each is
  exactly one tp group.  A group of the cp, dp (``DATA_PARALLEL_GROUP_WITH_CP``) or embedding
  class meets every tp group in one rank at most (Megatron's groups are the lines of the rank
  grid ``tp × cp × dp × pp``: a tp group fixes cp, dp and pp, a cp group tp, dp and pp, a dp group
  tp and pp, an embedding group (the first and last stage of a pipeline group) tp, cp and dp), so
  its members lie in distinct level-0 domains.  A ring part of such a class (NCCL's flows,
  :func:`~rankmap.solver.cost.ncclflows.ring_flows`): on a node holding ``κ ≥ 2`` members of a
  group spanning several nodes, each of its ``c`` channels is a path through the ``κ`` members,
  ``κ−1`` hops of ``fb/c`` between members, so ``(κ−1)·fb`` leave those members towards other
  GPUs of the node outside their level-0 domain, and some member sends ``≥ (κ−1)·fb/κ`` of
  them.  Those bytes start on the links its routes to such GPUs take (the time model's own
  routes, :func:`~rankmap.solver.bound.rates.all_pair_first_hops`), of capacity ``P(a)`` in all,
  so one of those links carries load/capacity ``≥ (κ−1)·fb / (κ·P)`` with ``P = max_a P(a)``;
  and the group runs ``c ≤ min(c_max(k), m·κ_min)`` channels (one per rail of its members on
  its sparsest node, ``m`` NICs near one GPU; ``src/init.cc:1439-1442``), each crossing nodes
  with ``fb/c`` at most at ``R``.  A ring on one node sends ``fb`` from every member to another
  member (``≥ fb/P``).  So a group takes at least ``fb/P`` on one node, else
  ``max((κ_max−1)·fb/(κ_max·P), fb/(min(c_max, m·κ_min)·R))``; that is nondecreasing in
  ``κ_max`` and nonincreasing in ``κ_min ≤ κ_max``, so over every layout the least over ``κ`` of
  ``max((κ−1)·fb/(κ·P), fb/(min(c_max, m·κ)·R))`` (``κ`` up to the most level-0 domains one
  node meets, and below ``k``) bounds it.  In a launcher order (NCCL nodes are the hosts,
  blocks of ``G`` ranks) the members per host of every group are known: the largest over
  groups of their own value bounds the part.  And a domain ``D`` made of whole NCCL nodes
  (a level of ``cluster.domains`` or ``cluster.widest_domains``) holds ``m`` ranks and meets
  ``κ_D`` level-0 domains, so a group has at most ``κ_D`` members in it: when ``k > κ_D`` every
  group it touches, at least ``⌈m/κ_D⌉`` of them, is split by ``D`` and sends its cut bytes out
  of it (each channel leaves the union of nodes once: ``fb``, or ``S`` where tree may run,
  :func:`~rankmap.solver.bound.ncclterms.crossing_bytes`), over links of ``C_D`` in all
  (``domain_out_gbps``): ``≥ ⌈m/κ_D⌉·cut / C_D`` — when the part's groups hold every rank (not the
  embedding groups of ``pp ≥ 3``, which hold the first and last stages only: a domain may hold none of
  their members).  (``a30-pairs-16x4``, one 12.5 GB/s NIC a
  host of two pairs, dp groups of 8: two dp groups leave each host, ``2 · 4.42 GB / 12.5 GB/s
  = 707 ms``, the layout's own dp time; the plain per-domain cut sees one.)

The bound is then at least ``min(A, B)``, each computed by
:func:`~rankmap.solver.bound.analytic.search_lower_bound` with these floors (classes apart,
launcher terms per order; not the joint cut, to keep the work small).  Example
(``nvpairs-8x8``, tp2 pp4, GPU pairs on 80 GB/s NVLink, 32 GB/s PCIe links, 25 GB/s NICs
at 24): A puts every dp member's in-host ring hops on its PCIe link; in launcher order
``tp-cp-ep-dp-pp`` a host holds 4 members of each dp group, ``3/4 · 4.42 GB / 32 GB/s =
103.5 ms`` (the layout's own dp time); B sends one tp pair's 3.22 GB over PCIe: 100.7 ms.
Only up to ``PAIR_SPLIT_MAX_DEVICES`` GPUs (the exact routes of every GPU pair).
"""

from __future__ import annotations

import weakref
from typing import Callable

import numpy as np

from ..fabric.cluster import Cluster
from ..megatron.config import ParallelConfig

__all__ = ["PAIR_SPLIT_MAX_DEVICES", "CASE_A_CLASSES", "pair_cases", "case_a_floor", "case_b_floor",
           "intra_out_gbps"]

#: The split applies up to this many GPUs (it reads the routes of every GPU pair, :mod:`.rates`).
PAIR_SPLIT_MAX_DEVICES = 512
#: Classes whose groups meet every tp group in one rank at most (module doc).
CASE_A_CLASSES = ("cp", "dp", "embedding")

_INTRA: "weakref.WeakKeyDictionary[Cluster, tuple]" = weakref.WeakKeyDictionary()
_CUTS: "weakref.WeakKeyDictionary[Cluster, dict]" = weakref.WeakKeyDictionary()


def _node_of(cluster: Cluster) -> np.ndarray:
    topo = cluster.nccl_topology
    return np.asarray(topo.node_of if topo is not None else cluster.host_of, dtype=np.int64)


def intra_out_gbps(cluster: Cluster) -> tuple[float, int]:
    """``(P, κ_max)``: the most capacity, GB/s, of one GPU's links that its routes to GPUs of its NCCL node
    outside its level-0 domain start on (attachments and direct links, each counted once), and the most
    level-0 domains one node meets; ``(0, 0)`` above ``PAIR_SPLIT_MAX_DEVICES`` GPUs."""
    got = _INTRA.get(cluster)
    if got is not None:
        return got
    from .rates import all_pair_first_hops

    hops = all_pair_first_hops(cluster)
    if hops is None:
        return 0.0, 0
    s, d, att, direct = hops
    node = _node_of(cluster)
    dom0 = np.asarray(cluster.widest_domains[0], dtype=np.int64)
    fab = cluster.fabric
    n = cluster.num_devices
    sel = (node[s] == node[d]) & (dom0[s] != dom0[d])
    P = 0.0
    if sel.any():
        A = att.shape[1]
        used = np.zeros((n, A), dtype=bool)
        np.logical_or.at(used, s[sel], att[sel])
        cap = np.where(used & (fab.att_node >= 0), fab.att_gbps, 0.0).sum(axis=1)
        dl = direct[sel]
        if (dl >= 0).any():
            ok = dl >= 0
            pairs = np.unique(s[sel][ok] * max(int(fab.direct_key.size), 1) + dl[ok])
            src, link = np.divmod(pairs, max(int(fab.direct_key.size), 1))
            cap = cap + np.bincount(src, weights=fab.direct_gbps[link], minlength=n)
        P = float(cap.max())
    K = int(dom0.max()) + 1
    per_node = np.bincount(np.unique(node * K + dom0) // K)
    out = (P, int(per_node.max(initial=0)))
    _INTRA[cluster] = out
    return out


def _node_cuts(cluster: Cluster) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Per level of whole NCCL nodes (both hierarchies): ``(ranks m, level-0 domains met κ_D, out capacity GB/s)``
    per domain (module doc, case A's cut)."""
    key = ("cuts",)
    cache = _CUTS.setdefault(cluster, {})
    if key in cache:
        return cache[key]
    from .ncclterms import node_levels

    dom0 = np.asarray(cluster.widest_domains[0], dtype=np.int64)
    K0 = int(dom0.max()) + 1
    out = []
    for doms, outs in ((cluster.widest_domains, cluster.widest_domain_out_gbps),
                       (cluster.domains, cluster.domain_out_gbps)):
        whole = node_levels(cluster, doms)
        for lvl in range(min(doms.shape[0], len(outs))):
            lab = np.asarray(doms[lvl], dtype=np.int64)
            m = np.bincount(lab)
            cap = np.asarray(outs[lvl], dtype=float)
            if not whole[lvl] or cap.size != m.size:
                continue
            kap = np.bincount(np.unique(lab * K0 + dom0) // K0, minlength=m.size)
            ok = (m > 0) & (cap > 0) & (m < cluster.num_devices)
            if ok.any():
                out.append((m[ok], kap[ok], cap[ok]))
    cache[key] = out
    return out


def _cut_a(cluster: Cluster, part, k: int, fb: float) -> float:
    """Case A's domain cut (module doc), seconds: the most over whole-node domains meeting fewer than ``k``
    level-0 domains of ``⌈m/κ_D⌉`` split groups' cut bytes over ``C_D``."""
    from .ncclterms import crossing_bytes

    cut = crossing_bytes(part.kind, fb, part.payload_bytes, cluster, k, True)[1]
    best = 0.0
    for m, kap, cap in _node_cuts(cluster):
        sel = (kap < k) & (kap > 0)
        if sel.any():
            best = max(best, float((np.ceil(m[sel] / kap[sel]) * cut / (cap[sel] * 1e9)).max()))
    return best


def _ring_a(fb: float, P: float, R: float, c_cap: int, m: int, kmax: int, kmin: int, nodes: int) -> float:
    """Case A's floor, seconds, of one group (module doc): ``nodes`` NCCL nodes, ``kmax``/``kmin`` members on
    its fullest / sparsest one; P, R in bytes/s."""
    if nodes <= 1:
        return fb / P if P > 0 else 0.0
    a = (kmax - 1) * fb / (kmax * P) if kmax >= 2 and P > 0 else 0.0
    b = fb / (min(c_cap, m * kmin) * R) if R > 0 else 0.0
    return max(a, b)


def case_a_floor(cluster: Cluster, part, k: int, groups: np.ndarray | None = None, every_rank: bool = False) -> float:
    """Case A's floor (module doc), seconds, on a ring part of a class of :data:`CASE_A_CLASSES`.

    ``groups``: the class's groups in a launcher order (``rank_offset`` removed), whose members per host are
    then known; None: the least over every member count (any layout).  ``every_rank``: the part's groups hold
    every rank (then also the domain cut).  0 for other kinds.
    """
    from ..cost.timemodel import flow_bytes
    from .ncclterms import RING_KINDS, all_reduce_floor_seconds, max_channels, nics_per_gpu
    from .rates import inter_host_rate_gbps

    if part.kind not in RING_KINDS or k < 2:
        return 0.0
    fb = flow_bytes(part.kind, part.payload_bytes, k)
    if fb <= 0:
        return 0.0
    P, kap = intra_out_gbps(cluster)
    P *= 1e9
    R = inter_host_rate_gbps(cluster) * 1e9
    c_cap = max_channels(cluster, k)
    m = nics_per_gpu(cluster)
    topo = cluster.nccl_topology
    per_order = (groups is not None and cluster.equal_hosts and topo is not None
                 and np.array_equal(topo.node_of, cluster.host_of))
    if per_order:
        from ..traffic import subgroups

        G = int(cluster.gpus_per_host[0])
        sub = np.sort(subgroups(np.sort(np.asarray(groups, dtype=np.int64), axis=1), part) // G, axis=1)
        if sub.ndim != 2 or sub.shape[1] != k or sub.size == 0:
            per_order = False
    if per_order:
        start = np.ones(sub.shape, dtype=bool)
        start[:, 1:] = sub[:, 1:] != sub[:, :-1]
        run = np.cumsum(start, axis=1) - 1
        counts = np.zeros(sub.shape, dtype=np.int64)
        np.add.at(counts, (np.repeat(np.arange(sub.shape[0]), k), run.ravel()), 1)
        nodes = start.sum(axis=1)
        kmax = counts.max(axis=1)
        kmin = np.where(counts > 0, counts, k + 1).min(axis=1)
        shapes = np.unique(np.stack([nodes, kmax, kmin], axis=1), axis=0)
        t = max(_ring_a(fb, P, R, c_cap, m, int(kx), int(kn), int(nn)) for nn, kx, kn in shapes.tolist())
    else:
        cands = []
        if k <= kap:
            cands.append(_ring_a(fb, P, R, c_cap, m, k, k, 1))
        for kappa in range(1, min(k - 1, kap) + 1):
            if R > 0:
                cands.append(_ring_a(fb, P, R, c_cap, m, kappa, kappa, 2))
        t = min(cands) if cands else 0.0
    if part.kind == "all_reduce":
        t = all_reduce_floor_seconds(cluster, k, part.payload_bytes, fb, t)
    # the cut bytes hold for every algorithm (S where tree may run; NVLS needs one node, and k > κ_D)
    return float(max(t, _cut_a(cluster, part, k, fb))) if every_rank else float(t)


def case_b_floor(cluster: Cluster, part, k: int) -> float:
    """Case B's floor (module doc), seconds, on a ring part of the tp class: the group not inside a level-0
    domain either has a ring edge first joined at level ``≥ 1`` or crosses nodes on ``≤ c_max`` channels."""
    from ..cost.timemodel import flow_bytes
    from .ncclterms import RING_KINDS, all_reduce_floor_seconds, max_channels
    from .rates import inter_host_rate_gbps, suffix_rates

    if part.kind not in RING_KINDS or k < 2:
        return 0.0
    fb = flow_bytes(part.kind, part.payload_bytes, k)
    rates = suffix_rates(cluster) * 1e9
    if fb <= 0 or rates.size < 2 or rates[1] <= 0:
        return 0.0
    t = fb / float(rates[1])
    R = inter_host_rate_gbps(cluster) * 1e9
    if R > 0:
        t = min(t, fb / (max_channels(cluster, k) * R))
    if part.kind == "all_reduce":
        t = all_reduce_floor_seconds(cluster, k, part.payload_bytes, fb, t)
    return float(t)


def pair_cases(cluster: Cluster, cfg: ParallelConfig, parts: dict) -> tuple[Callable, Callable] | None:
    """The two cases' floor raisers ``f(class, part, size, groups or None) -> seconds`` (A, B), or None when the
    split does not apply: more than ``PAIR_SPLIT_MAX_DEVICES`` GPUs, GPUs unused, level-0 domains not all of
    ``tp`` GPUs, or a tp part that is not a ring over whole tp groups."""
    from .ncclterms import RING_KINDS

    W = cfg.world_size
    t = int(cfg.tp)
    if t < 2 or W > PAIR_SPLIT_MAX_DEVICES or cluster.num_devices != W or cluster.widest_domains.shape[0] < 2:
        return None
    sizes = np.bincount(np.asarray(cluster.widest_domains[0], dtype=np.int64))
    sizes = sizes[sizes > 0]
    tp = parts.get("tp") or []
    if not tp or np.any(sizes != t) or any(p.kind not in RING_KINDS or k != t for p, _g, k in tp):
        return None
    if intra_out_gbps(cluster)[1] == 0:
        return None

    every = {c: bool(plist) and all(g * k >= W for _p, g, k in plist) for c, plist in parts.items()}

    def a(c, part, k, groups=None):
        return case_a_floor(cluster, part, k, groups, every.get(c, False)) if c in CASE_A_CLASSES else 0.0

    def b(c, part, k, groups=None):
        return case_b_floor(cluster, part, k) if c == "tp" else 0.0

    return a, b
