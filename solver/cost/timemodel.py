"""Predicted communication time of a layout, and a lower bound on it (DESIGN §3–§4).

Flows by collective shape (DESIGN §3).  A group's members are its ranks in
ascending global rank, the order NCCL builds its ring in; for a payload of S
bytes per rank per step:

``all_reduce``   ring: a flow m_i → m_(i+1 mod n) of 2(n−1)/n·S per ring edge
                 (NCCL's ring all-reduce is a reduce-scatter plus an all-gather,
                 n−1 steps each moving S/n per edge; Patarasuk & Yuan, JPDC
                 2009; NCCL ``ncclAllReduce`` ring algorithm).
``all_gather``   ring: (n−1)/n·S per ring edge (also reduce-scatter).
``all_to_all``   S/n for every ordered pair (NCCL's all-to-all is n−1 point-
                 to-point sends of S/n per rank).
``ring_p2p``     S from each member to its ring successor (ring attention's
                 KV exchange, TransformerEngine ``AttnFuncWithCPAndKVP2P``).
``p2p_chain``    S between consecutive members, each direction (Megatron's
                 ``send_forward``/``send_backward`` between pipeline stages);
                 with interleaving a share ``wrap`` of S also between the last
                 and the first member.

A class made of several parts (:class:`~rankmap.solver.traffic.Collective`:
hierarchical context parallelism, distributed-optimizer instances,
node-limited MoE dispatch) runs them one after the other on their subgroups:
its time is the sum of the parts' times.

Time of one class, all its groups at once (DESIGN §4)::

    T = max( max over flows bytes / B(route), max over directed links load / capacity )
        + latency (per-hop latency_us summed along the route × the collective's steps)

This is the phase time under max-min fair sharing when the most loaded link
(or the slowest flow alone) is the bottleneck — SimGrid's flow-level model.
Predicted communication time per step = Σ_c x_c · T_c.
"""

from __future__ import annotations

from typing import Mapping

import numpy as np

from ..megatron.catalogue import ParallelConfig, megatron_groups
from ..fabric.cluster import Cluster
from ..fabric.links import LinkLoads
from .nccl import (ALGO_PROTOCOLS, NVLS_MAX_HEADS, PROTOCOLS, _blocks, chain_flows, latency_seconds, nccl_member_order,
                   nvls_bus_gbps, nvlstree_bus_gbps, pxn_relay, ring_flows, tree_bus_gbps)
from ..fabric.rates import DEFAULT_NCCL, NcclModel
from ..traffic import (CLASS_GROUP, TRAFFIC_CLASSES, Collective, class_collectives, class_group_size,
                      collective_bytes_per_rank, subgroups)
from ..types import Bottleneck, ClassCost, CostBreakdown

__all__ = [
    "flow_bytes",
    "bytes_per_rank",
    "collective_steps",
    "class_flows",
    "class_time",
    "parts_time",
    "part_flows",
    "layout_cost",
    "lower_bound",
]

#: Above this many flows an all-to-all class is routed one ring offset at a time.
_A2A_BATCH = 4_000_000


def flow_bytes(kind: str, payload_bytes: float, n: int) -> float:
    """Bytes of one flow of a collective over ``n`` ranks with payload S (see module doc)."""
    s = float(payload_bytes)
    if n <= 1:
        return 0.0
    if kind == "all_reduce":
        return 2.0 * (n - 1) / n * s
    if kind == "all_gather":
        return (n - 1) / n * s
    if kind == "all_to_all":
        return s / n
    if kind in ("p2p_chain", "ring_p2p"):
        return s
    raise ValueError(f"unknown collective kind {kind!r}")


def bytes_per_rank(kind: str, payload_bytes: float, n: int) -> float:
    """Bytes the busiest rank puts on the wire per step (what papers publish).

    Ring all-reduce 2(n−1)/n·S, all-gather/reduce-scatter and all-to-all
    (n−1)/n·S, pipeline S to each neighbouring stage (2S for an inner stage).
    """
    if n <= 1:
        return 0.0
    if kind == "all_to_all":
        return (n - 1) / n * float(payload_bytes)
    if kind == "p2p_chain":
        return (2.0 if n > 2 else 1.0) * float(payload_bytes)
    if kind == "ring_p2p":
        return float(payload_bytes)
    return flow_bytes(kind, payload_bytes, n)


def collective_steps(kind: str, n: int) -> int:
    """Sequential communication steps (each pays the route latency once).

    Ring all-reduce 2(n−1), ring all-gather n−1, all-to-all 1 (all sends at
    once), pipeline send 1.
    """
    if n <= 1:
        return 0
    return {"all_reduce": 2 * (n - 1), "all_gather": n - 1, "ring_p2p": n - 1}.get(kind, 1)


def class_flows(kind: str, groups: np.ndarray):
    """Sender and receiver ranks of every flow of a class, as offset batches.

    Parameters
    ----------
    kind : str
        Collective kind (``traffic.CLASS_KIND``).
    groups : numpy.ndarray of int, shape (g, n)
        The class's groups (any member order; sorted here).

    Yields
    ------
    (src, dst) : numpy.ndarray of int64, each shape (f,)
        Ring kinds: one batch (n flows per group); all-to-all: one batch per
        ring offset 1..n−1 (or one batch when small); pipeline: one batch of
        both directions.
    """
    arr = np.sort(np.asarray(groups, dtype=np.int64), axis=1)
    g, n = arr.shape
    if n <= 1 or g == 0:
        return
    if kind == "p2p_chain":
        a, b = arr[:, :-1].ravel(), arr[:, 1:].ravel()
        yield np.concatenate([a, b]), np.concatenate([b, a])
    elif kind == "all_to_all":
        if g * n * (n - 1) <= _A2A_BATCH:
            ii, jj = np.nonzero(~np.eye(n, dtype=bool))
            yield arr[:, ii].ravel(), arr[:, jj].ravel()
        else:
            for k in range(1, n):
                yield arr.ravel(), np.roll(arr, -k, axis=1).ravel()
    else:
        yield arr.ravel(), np.roll(arr, -1, axis=1).ravel()


def _merge(a: LinkLoads | None, b: LinkLoads) -> LinkLoads:
    if a is None:
        return b
    better = b.max_flow_seconds > a.max_flow_seconds
    return LinkLoads(
        a.load_bytes + b.load_bytes,
        a.flows + b.flows,
        b.max_flow_seconds if better else a.max_flow_seconds,
        b.max_flow_bytes if better else a.max_flow_bytes,
        b.max_flow_gbps if better else a.max_flow_gbps,
        max(a.max_latency_seconds, b.max_latency_seconds),
    )


def part_flows(part: Collective, groups: np.ndarray):
    """Flows of one part over a class's groups: ``(src, dst, bytes)`` batches.

    ``groups`` has shape (g, n); the part runs on :func:`~rankmap.solver.traffic.subgroups`
    of it.  Bytes per flow follow :func:`flow_bytes`; an interleaved pipeline's
    wrap-around adds last → first and first → last flows of ``wrap·S``.
    """
    arr = subgroups(np.sort(np.asarray(groups, dtype=np.int64), axis=1), part)
    if arr.ndim != 2 or arr.size == 0:
        return
    k = arr.shape[1]
    fb = flow_bytes(part.kind, part.payload_bytes, k)
    if fb <= 0:
        return
    for src, dst in class_flows(part.kind, arr):
        yield src, dst, fb
    if part.kind == "p2p_chain" and part.wrap > 0 and k > 1:
        a, b = arr[:, -1], arr[:, 0]
        yield np.concatenate([a, b]), np.concatenate([b, a]), part.wrap * float(part.payload_bytes)


def _loads(fab, src, dst, nb) -> LinkLoads | None:
    if src.size == 0:
        return None
    return fab.route_loads(src, dst, nb)


def _link_time(fab, loads: LinkLoads | None, exposure: float, stats: dict | None):
    """(bandwidth seconds, Bottleneck or None) of routed flows: max(link load / rate, slowest flow)."""
    if loads is None or (loads.max_flow_seconds <= 0 and not loads.load_bytes.any()):
        return 0.0, None
    cap = fab.capacities_gbps()
    ratio = np.where(np.isfinite(cap), loads.load_bytes / (cap * 1e9), 0.0)
    if stats is not None:
        stats["pressure"] = stats.get("pressure", 0.0) + exposure * float(np.dot(ratio, ratio))
    link = int(np.argmax(ratio))
    link_t = float(ratio[link])
    t = max(link_t, loads.max_flow_seconds)
    is_link = link_t > loads.max_flow_seconds * (1 + 1e-9)
    bott = Bottleneck(
        kind="link" if is_link else "per-flow",
        link=tuple(str(x) for x in fab.link_name(link)),
        load_bytes=float(loads.load_bytes[link]),
        capacity_gbps=float(cap[link]),
        utilization=float(link_t / t) if t > 0 else 0.0,
        flows=int(loads.flows[link]),
        flow_bytes=loads.max_flow_bytes,
        flow_gbps=loads.max_flow_gbps,
    )
    return t, bott


def _p2p_flows(kind: str, dev: np.ndarray, fb: float, wrap_bytes: float):
    """Device flows of all-to-all / pipeline parts with the group row of each: ``(src, dst, bytes, row)`` batches."""
    g, n = dev.shape
    rows = np.arange(g)
    if kind == "p2p_chain":
        a, b = dev[:, :-1].ravel(), dev[:, 1:].ravel()
        r = np.repeat(rows, n - 1)
        yield np.concatenate([a, b]), np.concatenate([b, a]), fb, np.concatenate([r, r])
        if wrap_bytes > 0 and n > 1:
            a, b = dev[:, -1], dev[:, 0]
            yield np.concatenate([a, b]), np.concatenate([b, a]), wrap_bytes, np.concatenate([rows, rows])
    elif g * n * (n - 1) <= _A2A_BATCH:
        ii, jj = np.nonzero(~np.eye(n, dtype=bool))
        yield dev[:, ii].ravel(), dev[:, jj].ravel(), fb, np.repeat(rows, ii.size)
    else:
        for k in range(1, n):
            yield dev.ravel(), np.roll(dev, -k, axis=1).ravel(), fb, np.repeat(rows, n)


def _best_protocol(algo: str, kind: str, t_bw: float, k: int, nodes: int, model: NcclModel) -> tuple[float, float]:
    """(seconds, latency seconds): the least over the algorithm's protocols of latency + bandwidth time / efficiency."""
    if not model.latency or t_bw <= 0:
        return t_bw, 0.0
    best = None
    for proto, eff in PROTOCOLS:
        if proto not in ALGO_PROTOCOLS[algo]:
            continue
        lat = latency_seconds(algo, proto, kind, k, nodes)
        t = lat + t_bw / eff
        if best is None or t < best[0]:
            best = (t, lat)
    return best


def _part_time(cluster: Cluster, part: Collective, groups: np.ndarray, dev_of_rank: np.ndarray, exposure: float,
               stats: dict | None):
    """(seconds, latency seconds, Bottleneck or None, algorithm, channels) of one part (module doc, :mod:`.nccl`)."""
    fab = cluster.fabric
    model = cluster.nccl or DEFAULT_NCCL
    topo = cluster.nccl_topology
    arr = subgroups(np.sort(np.asarray(groups, dtype=np.int64), axis=1), part)
    if arr.ndim != 2 or arr.size == 0 or arr.shape[1] <= 1:
        return 0.0, 0.0, None, "", 0
    k = arr.shape[1]
    kind = part.kind
    S = float(part.payload_bytes)
    fb = flow_bytes(kind, S, k)
    if fb <= 0:
        return 0.0, 0.0, None, "", 0
    dev = dev_of_rank[arr]
    if topo is None:  # a Cluster built by hand without cluster_from_graph: one ring in rank order, direct routes
        node_of = np.asarray(cluster.host_of)
        rail = np.full(node_of.size, -1, dtype=np.int64)
        nic = nvl = np.zeros(node_of.size)
        arch = None
    else:
        node_of, rail, nic, nvl, arch = topo.node_of, topo.rail, topo.nic_gbps, topo.nvlink_gbps, topo.arch
    ordered = nccl_member_order(dev, node_of)
    nodes_per = 1 + (node_of[ordered][:, 1:] != node_of[ordered][:, :-1]).sum(axis=1)
    nodes = int(nodes_per.max())
    graph_lat_steps = collective_steps(kind, k)
    cands = []  # (seconds, latency, bottleneck, algorithm, channels)
    if kind in ("all_to_all", "p2p_chain"):
        loads = None
        wrap = part.wrap * S if kind == "p2p_chain" else 0.0
        for src, dst, b, row in _p2p_flows(kind, dev, fb, wrap):
            if model.pxn and topo is not None:
                relay = pxn_relay(src, dst, row, dev, node_of, rail)
                hop = relay != src
                if hop.any():
                    src = np.concatenate([src, relay[hop]])
                    dst = np.concatenate([np.where(hop, relay, dst), dst[hop]])
            loads = _merge(loads, fab.route_loads(src, dst, b))
        t_bw, bott = _link_time(fab, loads, exposure, stats)
        t, lat = _best_protocol("ring", kind, t_bw, k, nodes, model)
        glat = loads.max_latency_seconds * graph_lat_steps if loads is not None else 0.0
        return t + glat, lat + glat, bott, "p2p", 1
    algo_wanted = model.algorithm
    src, dst, nb, ch = ring_flows(dev, node_of, rail, fb)
    loads = _loads(fab, src, dst, nb)
    t_bw, bott = _link_time(fab, loads, exposure, stats if algo_wanted in ("auto", "ring") else None)
    glat = loads.max_latency_seconds * graph_lat_steps if loads is not None else 0.0
    t, lat = _best_protocol("ring", kind, t_bw, k, nodes, model)
    channels = int(ch.max(initial=1))
    ring = (t + glat, lat + glat, bott, "ring", channels)
    if kind != "all_reduce" or topo is None or arch is None:
        return ring
    cands.append(ring)
    single = nodes_per.max() == 1
    nvl_min = float(nvl[dev].min())
    if single and algo_wanted in ("auto", "nvls"):
        bus = nvls_bus_gbps(k, nvl_min, arch)
        if bus > 0:
            t_bw = fb / (bus * 1e9)
            t, lat = _best_protocol("nvls", kind, t_bw, k, 1, model)
            cands.append((t, lat, Bottleneck(kind="per-flow", flow_bytes=fb, flow_gbps=bus), "nvls",
                          min(k, NVLS_MAX_HEADS)))
    if nodes_per.min() > 1 and algo_wanted in ("auto", "nvlstree", "tree"):
        s2, d2, b2, ch2 = chain_flows(dev, node_of, rail, S)
        loads2 = _loads(fab, s2, d2, b2)
        t_net, bott2 = _link_time(fab, loads2, exposure, None)
        c_min = int(ch2.min())
        nic_min = float(nic[dev].min())
        k_node = int(_blocks(ordered, node_of)[3].min())  # fewest members of a group on one node
        for algo in ("nvlstree", "tree"):
            if algo_wanted not in ("auto", algo):
                continue
            if algo == "nvlstree":
                bus = nvlstree_bus_gbps(k_node, nodes, c_min, nvl_min, nic_min, arch) if nvl_min > 0 else 0.0
                t_cap = fb / (bus * 1e9) if bus > 0 else 0.0
            else:
                bus = tree_bus_gbps(nodes, c_min, nic_min, arch)
                t_cap = 2.0 * S / (bus * 1e9) if bus > 0 else 0.0
            if bus <= 0:
                continue
            b_use = bott2 if t_net >= t_cap else Bottleneck(kind="per-flow", flow_bytes=fb, flow_gbps=bus)
            t, lat = _best_protocol(algo, kind, max(t_net, t_cap), k, nodes, model)
            cands.append((t, lat, b_use, algo, c_min))
    if algo_wanted != "auto":  # NCCL_ALGO: that algorithm where the group can run it, else ring
        return next((c for c in cands if c[3] == algo_wanted), ring)
    return min(cands, key=lambda c: c[0])


def parts_time(
    cluster: Cluster, parts, groups: np.ndarray, dev_of_rank: np.ndarray, payload_bytes: float,
    exposure: float = 1.0, stats: dict | None = None,
) -> ClassCost:
    """Predicted time of one class made of ``parts`` (run one after the other), all groups at once.

    Parameters
    ----------
    cluster : Cluster
    parts : sequence of Collective
        The class's parts (:func:`~rankmap.solver.traffic.class_collectives`).
    groups : numpy.ndarray of int, shape (g, n)
        Ranks (``rank_offset`` removed) of every group of the class.
    dev_of_rank : numpy.ndarray of int, shape (world_size,)
    payload_bytes : float
        The class's payload, recorded in the result.
    exposure : float
        x_c, recorded in the result (the caller weighs the total).

    Returns
    -------
    ClassCost
        ``seconds`` = Σ over parts of max(link load / capacity, slowest flow) +
        latency; the bottleneck of the slowest part.
    """
    groups = np.asarray(groups)
    n = groups.shape[1] if groups.ndim == 2 else 1
    bpr = float(sum(collective_bytes_per_rank(p, n) for p in parts))
    total = lat = 0.0
    worst, bott, algorithm, channels = -1.0, None, "", 0
    if groups.size and n > 1:
        for p in parts:
            t, l_s, b, algo, ch = _part_time(cluster, p, groups, dev_of_rank, exposure, stats)
            total += t
            lat += l_s
            if b is not None and t > worst:
                worst, bott, algorithm, channels = t, b, algo, ch
    if bott is None:
        return ClassCost(0.0, exposure, bpr, float(payload_bytes))
    return ClassCost(total, exposure, bpr, float(payload_bytes), lat, bott, algorithm, channels)


def class_time(
    cluster: Cluster, kind: str, groups: np.ndarray, dev_of_rank: np.ndarray, payload_bytes: float,
    exposure: float = 1.0,
    stats: dict | None = None,
) -> ClassCost:
    """Predicted time of one class of one collective ``kind`` with all its groups running at once (DESIGN §4).

    Parameters
    ----------
    cluster : Cluster
    kind : str
        Collective kind.
    groups : numpy.ndarray of int, shape (g, n)
        Ranks (``rank_offset`` removed) of every group of the class.
    dev_of_rank : numpy.ndarray of int, shape (world_size,)
        Device index of each rank.
    payload_bytes : float
        S, bytes per rank per step.
    exposure : float
        x_c, recorded in the result (the caller weighs the total).

    Returns
    -------
    ClassCost
    """
    parts = (Collective(kind, float(payload_bytes)),) if payload_bytes > 0 else ()
    return parts_time(cluster, parts, groups, dev_of_rank, payload_bytes, exposure, stats)


def class_groups(cfg: ParallelConfig, groups: Mapping[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
    """Group arrays (groups, size) of each traffic class for a configuration."""
    groups = megatron_groups(cfg) if groups is None else groups
    return {c: groups[CLASS_GROUP[c]] for c in TRAFFIC_CLASSES}


def layout_cost(
    cluster: Cluster,
    cfg: ParallelConfig,
    device_of_rank: np.ndarray,
    traffic: Mapping[str, float],
    groups: Mapping[str, np.ndarray] | None = None,
    exposure: Mapping[str, float] | None = None,
    stats: dict | None = None,
) -> CostBreakdown:
    """Predicted communication time of placing global rank r on device ``device_of_rank[r]``.

    Parameters
    ----------
    cluster : Cluster
    cfg : ParallelConfig
        Sizes and order (the groups follow the order).
    device_of_rank : numpy.ndarray of int, shape (world_size,)
        Index into ``cluster.devices`` per global rank (rank_offset removed).
    traffic : mapping class -> bytes per rank per step
        Missing classes count as 0.  A :class:`~rankmap.solver.traffic.Traffic`
        carries each class's parts (shapes); a plain mapping uses the default shapes.
    groups : optional precomputed ``megatron_groups(cfg)``.
    exposure : mapping class -> x_c in [0, 1], optional
        Missing classes are fully exposed (1).
    stats : dict, optional
        Filled with ``pressure`` (see :func:`class_time`).

    Returns
    -------
    CostBreakdown
        ``total_seconds = Σ_c x_c·T_c``; ``by_class`` = T_c (seconds);
        ``classes`` with bytes per rank and bottleneck.
    """
    dev_of = np.asarray(device_of_rank, dtype=np.int64)
    fam = class_groups(cfg, groups)
    exposure = dict(exposure or {})
    classes: dict[str, ClassCost] = {}
    for c in TRAFFIC_CLASSES:
        s = float(traffic.get(c, 0.0) or 0.0)
        arr = fam[c] - cfg.rank_offset
        classes[c] = parts_time(cluster, class_collectives(traffic, c), arr, dev_of, s, float(exposure.get(c, 1.0)),
                                stats)
    total = float(sum(v.exposure * v.seconds for v in classes.values()))
    return CostBreakdown(total_seconds=total, by_class={c: v.seconds for c, v in classes.items()}, classes=classes)


def class_lower_bound(cluster: Cluster, kind: str, num_groups: int, n: int, payload_bytes: float) -> float:
    """A lower bound (seconds) on one part's ``T_class`` over every layout: :func:`rankmap.solver.bound.analytic.class_lower_bound`."""
    from ..bound.analytic import class_lower_bound as _lb

    return _lb(cluster, kind, num_groups, n, payload_bytes)


def lower_bound(
    cluster: Cluster, cfg: ParallelConfig, traffic: Mapping[str, float], exposure: Mapping[str, float] | None = None,
) -> float:
    """A valid lower bound (seconds) on ``Σ_c x_c·T_c`` for any layout and order of ``cfg``'s sizes.

    The terms and their derivations are in :mod:`rankmap.solver.bound.analytic`
    (:func:`~rankmap.solver.bound.analytic.lower_bound`); kept importable here.
    """
    from ..bound.analytic import lower_bound as _lb

    return _lb(cluster, cfg, traffic, exposure)
