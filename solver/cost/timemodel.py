"""Predicted communication time of a layout (DESIGN §3–§4); its lower bound is in :mod:`rankmap.solver.bound`.

Bytes by collective shape (DESIGN §3), for a payload of S bytes per rank per step
(:func:`~rankmap.solver.cost.collective.flow_bytes`): ring all-reduce 2(n−1)/n·S per ring
edge (reduce-scatter + all-gather; Patarasuk & Yuan, JPDC 2009), all-gather /
reduce-scatter (n−1)/n·S, all-to-all S/n per ordered pair, ring send/recv S to the
successor (TransformerEngine ``AttnFuncWithCPAndKVP2P``), pipeline S between consecutive
members each way (plus ``wrap``·S last ↔ first when interleaved).  Which flows carry them
is NCCL's doing (:mod:`.nccl`, :mod:`.collective`): nodes in order of first appearance, a
ring per node, one rail-aligned channel per usable NIC between nodes, PXN relays for
all-to-all and send/recv, and for all-reduce the fastest of ring, tree, NVLS and NVLSTree.
:func:`part_flows` / :func:`class_flows` keep the single ring in rank order, which the
search's surrogate models and the launcher bound's block graph use.

A class made of several parts (:class:`~rankmap.solver.traffic.Collective`:
hierarchical context parallelism, distributed-optimizer instances,
node-limited MoE dispatch) runs them one after the other on their subgroups:
its time is the sum of the parts' times.

Time of one class, all its groups at once (DESIGN §4)::

    T = max( max over flows bytes / rate(route), max over directed links load / rate )
        + NCCL's latency (best protocol) + per-hop latency_us along the route × the collective's steps

with the rates NCCL reaches (:mod:`rankmap.solver.fabric.rates`).

This is the phase time under max-min fair sharing when the most loaded link
(or the slowest flow alone) is the bottleneck — SimGrid's flow-level model.
Predicted communication time per step = Σ_c x_c · T_c.
"""

from __future__ import annotations

from typing import Mapping

import numpy as np

from ..megatron.config import ParallelConfig

from ..megatron.catalogue import megatron_groups
from ..fabric.cluster import Cluster
from ..fabric.links import LinkLoads
from .collective import A2A_BATCH as _A2A_BATCH, collective_steps, flow_bytes, part_times
from ..traffic import (CLASS_GROUP, TRAFFIC_CLASSES, Collective, class_collectives, class_group_size,
                      collective_bytes_per_rank, subgroups)
from ..results import Bottleneck, ClassCost, CostBreakdown

__all__ = [
    "flow_bytes",
    "bytes_per_rank",
    "collective_steps",
    "class_flows",
    "class_time",
    "parts_time",
    "part_flows",
    "layout_cost",
]



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


def _fabric_timer(cluster: Cluster, exposure: float, stats: dict | None):
    """The time model's timer (:data:`~rankmap.solver.cost.collective.Timer`) for one layout: flows routed
    on the fabric, ``max(link load / rate, slowest flow)`` and the busiest link as the bottleneck."""
    fab = cluster.fabric

    def timer(batches, record):
        loads = None
        for src, dst, b, _seg in batches:
            loads = _merge(loads, fab.route_loads(src, dst, b))
        if loads is None or (loads.max_flow_seconds <= 0 and not loads.load_bytes.any()):
            return np.zeros(1), np.zeros(1), [None]
        cap = fab.capacities_gbps()
        ratio = np.where(np.isfinite(cap), loads.load_bytes / (cap * 1e9), 0.0)
        if stats is not None and record:
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
        return np.array([t]), np.array([loads.max_latency_seconds]), [bott]

    return timer


def _part_time(cluster: Cluster, part: Collective, groups: np.ndarray, dev_of_rank: np.ndarray, exposure: float,
               stats: dict | None):
    """(seconds, latency seconds, Bottleneck or None, algorithm, channels) of one part (:mod:`.collective`)."""
    pt = part_times(cluster, part, groups, np.asarray(dev_of_rank)[None, :], _fabric_timer(cluster, exposure, stats),
                    record=True)
    if pt is None or pt.bottleneck is None or pt.bottleneck[0] is None:
        return 0.0, 0.0, None, "", 0
    return (float(pt.seconds[0]), float(pt.latency_seconds[0]), pt.bottleneck[0], pt.algorithm[0],
            int(pt.channels[0]))


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
