"""A ring part's groups either keep one group inside an NCCL node or split them all (DESIGN §5; used by :mod:`.analytic`).

The per-GPU term of :mod:`.analytic` lets every member of a ring spread its bytes over all its
links at once (on a PCIe host, ``fb / (PCIe + NIC)``), and its channels term lets a group
crossing nodes run ``c_max`` channels without paying for the hops inside each node.  Neither
sees that a ring group must either stay inside one node (all its edges on the node's own
links) or cross nodes (its members' hops inside each node then start on the links to the
other GPUs of their node, and every node it touches sends its bytes out).  For a ring part
(all-reduce, all-gather / reduce-scatter, ring p2p) of groups of ``k`` members, ``fb`` bytes
per ring edge (:func:`~rankmap.solver.cost.timemodel.flow_bytes`), with NCCL nodes the hosts,
every layout (any order, any bijection) is in one of two cases.

* **W: some group lies inside one node.**  NCCL runs it as one ring over its members
  (:func:`~rankmap.solver.cost.ncclflows.ring_flows`), ``fb`` per edge, as fast as its
  slowest edge: no faster than the best ring of ``k`` GPUs inside a host
  (:func:`~.ringrate.host_ring_rate_gbps`, ``k ≥ 3``) or the widest pair (``k = 2``,
  ``R_{≥0}``).  The part takes at least ``T_W = fb / that rate``.
* **S: every group spans two nodes or more.**  (i) Each group takes at least the floor of a
  group over several nodes: with ``κ_max`` / ``κ_min`` members on its fullest / sparsest
  node, NCCL runs ``c ≤ min(c_max(k), m·κ_min)`` channels (one per rail of its members on
  its sparsest node, ``m`` NICs near one GPU, ``src/init.cc:1439-1442``;
  :func:`~.ncclterms.max_channels`) of ``fb/c`` each, each crossing between nodes at most at
  the inter-host rate ``R``, and each a path through the ``κ`` members of each node with at
  least ``κ−1`` hops of ``fb/c`` between members (every member sends each channel once,
  :func:`~rankmap.solver.cost.ncclflows._node_channels`), so on the fullest node the members
  send ``(κ_max−1)·fb`` to other GPUs of their node, some member ``≥ (κ_max−1)·fb/κ_max`` of it,
  starting on the links its routes to those GPUs take (the time model's own routes,
  :func:`~.rates.all_pair_first_hops`), of ``P`` GB/s in all at most: one of those links
  carries load/capacity ``≥ (κ_max−1)·fb/(κ_max·P)``.  The floor
  ``max((κ_max−1)·fb/(κ_max·P), fb/(min(c_max, m·κ_min)·R))`` is nondecreasing in ``κ_max`` and
  nonincreasing in ``κ_min``; the sparsest node is not the fullest, so ``κ_min ≤ min(κ_max, k − κ_max)``,
  and ``T_S1 = min over κ in ⌈k/N⌉..min(k−1, G_max)`` of its value at ``κ_max = κ``, ``κ_min = min(κ,
  k − κ)`` (``N`` nodes: the fullest holds ``≥ ⌈k/N⌉``) bounds every split group (the argument of
  :mod:`.pairsplit`'s case A, there with the hops leaving a level-0 domain; a group of 8 with 5 members
  on one node runs at most 3 channels, one per NIC rail of the 3 on the other).  (ii) When the part's groups hold
  every rank of a cluster whose every GPU is used, node ``h`` holds ``m_h`` ranks, all in
  split groups of at most ``min(k−1, m_h)`` members there, so at least
  ``⌈m_h / min(k−1, m_h)⌉`` groups touch it, and each sends its cut bytes out of it (each
  channel leaves the node once: ``fb`` in all, or ``S`` where tree may run;
  :func:`~.ncclterms.crossing_bytes`) over the links leaving it, ``C_h`` GB/s in all
  (``domain_out_gbps`` of a level whose domains are the nodes): ``T_S2 = max_h ⌈m_h /
  min(k−1, m_h)⌉·cut / C_h``.  The part takes at least ``T_S = max(T_S1, T_S2)``.

So the part takes at least ``min(T_W, T_S)`` (``T_W = ∞`` when no node holds ``k`` GPUs).  An
all-reduce may run another algorithm (tree, NVLS, NVLSTree): ``T_W`` and ``T_S1`` are the
ring's, so each is taken at least as low as those algorithms' floors
(:func:`~.ncclterms.all_reduce_floor_seconds`); ``T_S2`` counts ``S`` where tree may run and
holds for every algorithm (NVLS needs a group inside one node).

Examples (hand-derived in ``tests/test_nodering.py``): ``pcie-8x8`` (8 GPUs a host on 32 GB/s
PCIe links, a 25 GB/s NIC per GPU at 24), tp 8, 8 GB all-reduce (``fb`` = 14 GB): inside a host
``14/32 = 437.5 ms``; split, ``κ = 2`` gives ``max(7/32, 14/48) = 291.7 ms`` (the layouts' own tp
time), where the per-GPU term saw ``14/57 = 245.6 ms``.  ``dgx1-hcm-4x8`` (DGX-1 hybrid cube
mesh, 4 NICs of 12.5 GB/s a host), tp 4, 6.44 GB (``fb`` = 9.66 GB): a ring of 4 inside a host
has an edge of one NVLink (20 GB/s in the model), ``483 ms``; split, every host holds at least
``⌈8/3⌉ = 3`` split groups, ``3·9.66 GB / 50 GB/s = 580 ms``; the channels term saw ``9.66 GB /
(2·12.5) = 386 ms``.

In a launcher order (equal hosts, NCCL nodes the hosts) the members per host of every group are
known (:func:`order_floor`): a group on one host takes ``T_W``, a group over several its own
``κ_max``, ``κ_min`` and node count in the floor of (i).

Only up to :data:`NODE_RING_MAX_DEVICES` GPUs (the routes of every GPU pair).
"""

from __future__ import annotations

import weakref

import numpy as np

from ..fabric.cluster import Cluster
from .rates import node_link_gbps

__all__ = ["NODE_RING_MAX_DEVICES", "node_ring_floor", "order_floor", "ring_case_floors"]

#: The term applies up to this many GPUs (it reads the routes of every GPU pair, :mod:`.rates`).
NODE_RING_MAX_DEVICES = 512
#: Nominal work (:mod:`.work`) of one :func:`node_ring_floor` that applies: seconds, plus per GPU pair (``P``'s
#: pass over the pairs' first hops, computed once per cluster and charged to every call in a share: a reused
#: cluster must not change the budgets).  Calibration (2026-12-03, CPU time on the 2-core machine under
#: load): 0.11-0.18 ms a part, ``P`` 13 ns a pair at 320-512 GPUs, over about 8 parts a bound.
NODE_RING_SECONDS, NODE_RING_PAIR_SECONDS = 2.5e-4, 2e-9
#: Nominal work of one :func:`order_floor` that applies: seconds, plus per rank (0.24 ms at 64-320 ranks,
#: 0.60 ms at 512, same calibration).
ORDER_FLOOR_SECONDS, ORDER_FLOOR_RANK_SECONDS = 2e-4, 8e-7

_CACHE: "weakref.WeakKeyDictionary[Cluster, dict]" = weakref.WeakKeyDictionary()


def _cache(cluster: Cluster) -> dict:
    return _CACHE.setdefault(cluster, {})


def _nodes_are_hosts(cluster: Cluster) -> bool:
    topo = cluster.nccl_topology
    return topo is not None and np.array_equal(np.asarray(topo.node_of), np.asarray(cluster.host_of))


def _node_out(cluster: Cluster) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per level (both hierarchies) whose domains are exactly the NCCL nodes: ``(GPUs m_h, out capacity C_h GB/s)``."""
    c = _cache(cluster)
    if "out" in c:
        return c["out"]
    node = np.asarray(cluster.nccl_topology.node_of, dtype=np.int64)
    nn = int(np.unique(node).size)
    out = []
    for doms, outs in ((cluster.widest_domains, cluster.widest_domain_out_gbps),
                       (cluster.domains, cluster.domain_out_gbps)):
        for lvl in range(min(doms.shape[0], len(outs))):
            lab = np.asarray(doms[lvl], dtype=np.int64)
            if np.unique(lab).size != nn or np.unique(node * (int(lab.max()) + 1) + lab).size != nn:
                continue
            m = np.bincount(lab)
            cap = np.asarray(outs[lvl], dtype=float)
            if cap.size == m.size:
                out.append((m, cap))
    c["out"] = out
    return out


def _whole_seconds(cluster: Cluster, k: int, fb: float) -> float:
    """``T_W`` (module doc), seconds, of a ring's ring floor; inf when no host holds ``k`` GPUs."""
    from .rates import suffix_rates
    from .ringrate import host_ring_rate_gbps

    if k > int(cluster.gpus_per_host.max(initial=0)):
        return np.inf
    r0 = float(suffix_rates(cluster)[0]) if suffix_rates(cluster).size else 0.0
    rate = host_ring_rate_gbps(cluster, k) if k >= 3 else r0
    if rate is None:  # a host too large to search: every edge is at most the widest pair's
        rate = r0
    if not rate or rate <= 0:
        return np.inf
    return fb / (float(rate) * 1e9)


def _split_group_seconds(fb: float, P: float, R: float, c_cap: int, m: int, kmax: int, kmin: int) -> float:
    """Floor (i) of case S (module doc), seconds, of one group over several nodes; P, R in bytes/s."""
    a = (kmax - 1) * fb / (kmax * P) if kmax >= 2 and P > 0 else 0.0
    b = fb / (min(c_cap, m * kmin) * R) if R > 0 else 0.0
    return max(a, b)


def _split_kappa(cluster: Cluster, fb: float, P: float, R: float, c_cap: int, m: int, kmax: int, kmin: int) -> float:
    """Floor (i) of case S, raised to the enumerated channel paths of :mod:`.nodepaths` where they apply (a node
    of ``kmax`` members, at most ``min(c_cap, m·kmin)`` channels), seconds."""
    from .nodepaths import split_seconds_per_byte

    v = _split_group_seconds(fb, P, R, c_cap, m, kmax, kmin)
    per = split_seconds_per_byte(cluster, kmax, min(c_cap, m * kmin))
    return max(v, fb * per) if per is not None else v


def _applies(cluster: Cluster, kind: str, k: int) -> bool:
    from .ringrate import RING_KINDS

    return (kind in RING_KINDS and k >= 2 and cluster.num_devices <= NODE_RING_MAX_DEVICES
            and _nodes_are_hosts(cluster) and node_link_gbps(cluster) > 0)


def node_ring_floor(cluster: Cluster, kind: str, num_groups: int, k: int, payload_bytes: float) -> float:
    """``min(T_W, T_S)`` (module doc), seconds, on one ring part over every layout; 0 when it does not apply.

    Parameters
    ----------
    cluster : Cluster
    kind : str
        Collective kind (only the ring kinds of :data:`~.ringrate.RING_KINDS` get a floor).
    num_groups, k : int
        Groups of the part and their size (ranks).
    payload_bytes : float
        ``S``, bytes per rank per step.

    Returns
    -------
    float
        Seconds, ≥ 0.  0 above :data:`NODE_RING_MAX_DEVICES` GPUs, when the NCCL nodes are not the hosts,
        or when no node holds two GPUs.
    """
    from .work import meter_memo

    memo = meter_memo()  # the same part again inside one bound: its first answer, no work
    key = ("node_ring_floor", cluster, kind, int(num_groups), int(k), float(payload_bytes))
    if memo is not None and key in memo:
        return memo[key]
    out = _node_ring_floor(cluster, kind, num_groups, k, payload_bytes)
    if memo is not None:
        memo[key] = out
    return out


def _node_ring_floor(cluster: Cluster, kind: str, num_groups: int, k: int, payload_bytes: float) -> float:
    """:func:`node_ring_floor`, computed (and charged)."""
    from ..cost.timemodel import flow_bytes
    from .ncclterms import all_reduce_floor_seconds, crossing_bytes, max_channels, nics_per_gpu
    from .rates import inter_host_rate_gbps

    from .work import charge

    if num_groups <= 0 or not _applies(cluster, kind, k):
        return 0.0
    charge(NODE_RING_SECONDS + NODE_RING_PAIR_SECONDS * cluster.num_devices ** 2)
    fb = flow_bytes(kind, payload_bytes, k)
    if fb <= 0:
        return 0.0

    def alg(t: float) -> float:  # the other all-reduce algorithms' floors, where they may run
        if kind == "all_reduce" and np.isfinite(t):
            return all_reduce_floor_seconds(cluster, k, payload_bytes, fb, t)
        return t

    P = node_link_gbps(cluster) * 1e9
    R = inter_host_rate_gbps(cluster) * 1e9
    c_cap = max_channels(cluster, k)
    m = nics_per_gpu(cluster)
    gmax = int(cluster.gpus_per_host.max(initial=0))
    lo = max(1, -(-k // int(cluster.gpus_per_host.size)))  # k members on at most every node: one holds ⌈k/N⌉
    kaps = range(lo, min(k - 1, gmax) + 1)
    # the fullest node holds κ, so the sparsest (another node) at most min(κ, k − κ)
    avg = {kap: _split_group_seconds(fb, P, R, c_cap, m, kap, min(kap, k - kap)) for kap in kaps}
    s1 = min(avg.values(), default=np.inf)
    s2 = 0.0
    if num_groups * k >= cluster.num_devices:  # every GPU runs a rank of the part's groups
        cut = crossing_bytes(kind, fb, payload_bytes, cluster, k, True)[1]
        for mh, cap in _node_out(cluster):
            ok = (mh > 0) & (cap > 0)
            if ok.any():
                split = np.ceil(mh[ok] / np.minimum(k - 1, mh[ok]))
                s2 = max(s2, float((split * cut / (cap[ok] * 1e9)).max()))
    whole = alg(_whole_seconds(cluster, k, fb))
    # the enumerated paths (module nodepaths) raise single κ's terms: only worth their work when some such term
    # is below every other κ's (else the least stays) and the split case is below the whole one (else T_W stands)
    from .nodepaths import enumerated

    enum = [kap for kap in kaps if enumerated(cluster, kap, min(c_cap, m * min(kap, k - kap)))]
    rest = min((v for kap, v in avg.items() if kap not in enum), default=np.inf)
    if any(avg[kap] < rest for kap in enum) and whole > max(alg(s1), s2):
        # in rising order of their averages (an enumerated term is at least its average): stop at the first
        # average not below the least so far
        s1 = rest
        for kap in sorted(enum, key=lambda q: (avg[q], q)):
            if avg[kap] >= s1:
                break
            s1 = min(s1, _split_kappa(cluster, fb, P, R, c_cap, m, kap, min(kap, k - kap)))
    t = min(whole, max(alg(s1), s2))
    return float(t) if np.isfinite(t) else 0.0


def ring_case_floors(cluster: Cluster, kind: str, k: int, payload_bytes: float) -> tuple[float, float]:
    """``(T_W, T_S1)`` of the module doc, seconds, for one ring group of ``k`` members: inside one node, and
    over several (its averaged form, least over the fullest node's ``κ``); each as low as the other
    all-reduce algorithms' floors allow; 0 where it does not apply (no node of ``k`` GPUs, the term off).
    Used by :mod:`.hostlines`; charges nothing (the caller counts its work)."""
    from ..cost.timemodel import flow_bytes
    from .ncclterms import all_reduce_floor_seconds, max_channels, nics_per_gpu
    from .rates import inter_host_rate_gbps

    if not _applies(cluster, kind, k):
        return 0.0, 0.0
    fb = flow_bytes(kind, payload_bytes, k)
    if fb <= 0:
        return 0.0, 0.0
    P = node_link_gbps(cluster) * 1e9
    R = inter_host_rate_gbps(cluster) * 1e9
    c_cap = max_channels(cluster, k)
    m = nics_per_gpu(cluster)
    gmax = int(cluster.gpus_per_host.max(initial=0))
    lo = max(1, -(-k // int(cluster.gpus_per_host.size)))
    s1 = min((_split_group_seconds(fb, P, R, c_cap, m, kap, min(kap, k - kap))
              for kap in range(lo, min(k - 1, gmax) + 1)), default=np.inf)
    whole = _whole_seconds(cluster, k, fb)
    out = []
    for v in (whole, s1):
        if kind == "all_reduce" and np.isfinite(v):
            v = all_reduce_floor_seconds(cluster, k, payload_bytes, fb, v)
        out.append(float(v) if np.isfinite(v) else 0.0)
    return out[0], out[1]


def order_floor(cluster: Cluster, part, groups: np.ndarray) -> float:
    """The floor of a ring part in one launcher order (module doc), seconds; 0 when it does not apply.

    Parameters
    ----------
    cluster : Cluster
        Equal hosts, NCCL nodes the hosts (else 0).
    part : Collective
        The part (kind, payload, subgroup size).
    groups : numpy.ndarray of int, shape (g, n)
        The class's groups in the order (``rank_offset`` removed): rank ``r`` runs on host ``r // G``.

    Returns
    -------
    float
        The most over the part's groups of their floor (one host: ``T_W``; several: floor (i) with their
        own member counts), as low as the other all-reduce algorithms' floors allow.
    """
    from ..cost.timemodel import flow_bytes
    from ..traffic import subgroups
    from .ncclterms import all_reduce_floor_seconds, max_channels, nics_per_gpu
    from .rates import inter_host_rate_gbps

    arr = np.asarray(groups, dtype=np.int64)
    k = int(part.size or (arr.shape[1] if arr.ndim == 2 else 0))
    from .work import charge

    if arr.ndim != 2 or arr.size == 0 or not cluster.equal_hosts or not _applies(cluster, part.kind, k):
        return 0.0
    charge(ORDER_FLOOR_SECONDS + ORDER_FLOOR_RANK_SECONDS * arr.size)
    fb = flow_bytes(part.kind, part.payload_bytes, k)
    if fb <= 0:
        return 0.0
    G = int(cluster.gpus_per_host[0])
    sub = np.sort(subgroups(np.sort(arr, axis=1), part) // G, axis=1)
    if sub.ndim != 2 or sub.shape[1] != k:
        return 0.0
    start = np.ones(sub.shape, dtype=bool)
    start[:, 1:] = sub[:, 1:] != sub[:, :-1]
    run = np.cumsum(start, axis=1) - 1
    counts = np.zeros(sub.shape, dtype=np.int64)
    np.add.at(counts, (np.repeat(np.arange(sub.shape[0]), k), run.ravel()), 1)
    nodes = start.sum(axis=1)
    kmax = counts.max(axis=1)
    kmin = np.where(counts > 0, counts, k + 1).min(axis=1)
    P = node_link_gbps(cluster) * 1e9
    R = inter_host_rate_gbps(cluster) * 1e9
    c_cap = max_channels(cluster, k)
    m = nics_per_gpu(cluster)
    t = 0.0
    for nn, kx, kn in np.unique(np.stack([nodes, kmax, kmin], axis=1), axis=0).tolist():
        if nn <= 1:
            v = _whole_seconds(cluster, k, fb)
        else:
            v = _split_kappa(cluster, fb, P, R, c_cap, m, int(kx), int(kn))
        t = max(t, v if np.isfinite(v) else 0.0)
    if part.kind == "all_reduce":
        t = all_reduce_floor_seconds(cluster, k, part.payload_bytes, fb, t)
    return float(t)
