"""One part's time as NCCL runs it, for one layout or a batch of layouts (DESIGN §3–§4).

:func:`part_times` turns the members of a part's groups (devices, for ``L`` layouts at
once) into NCCL's flows (:mod:`.nccl`: channels, node order, PXN), has a *timer* turn
flows into bandwidth time per layout (``max(link load / rate, slowest flow)``), adds
NCCL's latency with the best protocol and takes the fastest all-reduce algorithm.
Two timers share this logic: the fabric's (:meth:`Fabric.route_loads`, any size, one
layout: :func:`rankmap.solver.cost.timemodel.layout_cost`) and a per-device-pair table
(small clusters, thousands of layouts: :mod:`rankmap.solver.search.exhaustive`), so the
exhaustive search scores exactly what the time model predicts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable, Iterator

import numpy as np

from ..fabric.cluster import Cluster
from ..fabric.rates import DEFAULT_NCCL
from ..traffic import Collective, subgroups
from ..results import Bottleneck
from .nccl import ALGO_PROTOCOLS, NVLS_MAX_HEADS, PROTOCOLS, latency_seconds, nvls_bus_gbps, nvlstree_bus_gbps, \
    p2p_channels_per_peer, ring_protocol_caps, tree_bus_gbps
from .ncclflows import _blocks, chain_flows, nccl_member_order, pxn_relay, ring_flows

__all__ = ["PartTimes", "part_times", "flow_bytes", "collective_steps", "A2A_BATCH"]

#: Above this many flows an all-to-all part is routed one ring offset at a time.
A2A_BATCH = 4_000_000

#: A timer: (iterable of flow batches (src, dst, bytes, layout of each flow), record stats) ->
#: (bandwidth seconds (L,), largest route latency in seconds (L,), Bottleneck per layout or None).
Timer = Callable[[Iterable[tuple], bool], tuple[np.ndarray, np.ndarray, "list | None"]]


def flow_bytes(kind: str, payload_bytes: float, n: int) -> float:
    """Bytes of one flow of a single ring (or pair) of a collective over ``n`` ranks with payload S.

    Ring all-reduce 2(n−1)/n·S per ring edge (reduce-scatter + all-gather, n−1 steps of S/n
    each; Patarasuk & Yuan, JPDC 2009), all-gather / reduce-scatter (n−1)/n·S, all-to-all
    S/n per ordered pair, ring send/recv and pipeline S.  NCCL splits a ring's bytes over its
    channels (:func:`rankmap.solver.cost.nccl.ring_flows`).
    """
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


def collective_steps(kind: str, n: int) -> int:
    """Sequential steps of a collective, each paying the graph's route latency once.

    Ring all-reduce 2(n−1), ring all-gather / ring send/recv n−1, all-to-all and pipeline 1.
    """
    if n <= 1:
        return 0
    return {"all_reduce": 2 * (n - 1), "all_gather": n - 1, "ring_p2p": n - 1}.get(kind, 1)


@dataclass
class PartTimes:
    """Times of one part for L layouts.

    Attributes
    ----------
    seconds, latency_seconds : numpy.ndarray of float, shape (L,)
        Time (bandwidth + latency) and its latency part, seconds.
    algorithm : list of str, length L
        ``ring``, ``tree``, ``nvls``, ``nvlstree`` or ``p2p``.
    channels : numpy.ndarray of int, shape (L,)
        NCCL channels across nodes (1 inside a node; NVLS: its heads; all-to-all and send/recv:
        NCCL's p2p channels per peer, :func:`~rankmap.solver.cost.nccl.p2p_channels_per_peer`).
    bottleneck : list of Bottleneck or None
        Per layout, when the timer reports them (the fabric's timer does).
    """

    seconds: np.ndarray
    latency_seconds: np.ndarray
    algorithm: list
    channels: np.ndarray
    bottleneck: list | None


def _p2p_batches(kind: str, dev: np.ndarray, fb: float, wrap_bytes: float) -> Iterator[tuple]:
    """Flows of all-to-all / pipeline parts with the row (group) of each: ``(src, dst, bytes, row)``."""
    g, n = dev.shape
    rows = np.arange(g)
    if kind == "p2p_chain":
        a, b = dev[:, :-1].ravel(), dev[:, 1:].ravel()
        r = np.repeat(rows, n - 1)
        yield np.concatenate([a, b]), np.concatenate([b, a]), fb, np.concatenate([r, r])
        if wrap_bytes > 0 and n > 1:
            a, b = dev[:, -1], dev[:, 0]
            yield np.concatenate([a, b]), np.concatenate([b, a]), wrap_bytes, np.concatenate([rows, rows])
    elif g * n * (n - 1) <= A2A_BATCH:
        ii, jj = np.nonzero(~np.eye(n, dtype=bool))
        yield dev[:, ii].ravel(), dev[:, jj].ravel(), fb, np.repeat(rows, ii.size)
    else:
        for k in range(1, n):
            yield dev.ravel(), np.roll(dev, -k, axis=1).ravel(), fb, np.repeat(rows, n)


def _best_protocol(algo: str, kind: str, t_bw: np.ndarray, k: int, nodes: np.ndarray, latency: bool,
                   bus_bytes: float = 0.0, caps: dict | None = None):
    """(seconds, latency seconds) per layout: least over the algorithm's protocols of latency + time / efficiency,
    the protocol's time no less than ``bus_bytes`` at its bus-bandwidth cap (``caps``: protocol -> GB/s (L,),
    :func:`~rankmap.solver.cost.nccl.ring_protocol_caps`)."""
    if not latency:
        return t_bw, np.zeros_like(t_bw)
    best_t = np.full(t_bw.shape, np.inf)
    best_l = np.zeros(t_bw.shape)
    uniq, inv = np.unique(nodes, return_inverse=True)
    for proto, eff in PROTOCOLS:
        if proto not in ALGO_PROTOCOLS[algo]:
            continue
        lat = np.array([latency_seconds(algo, proto, kind, k, int(u)) for u in uniq])[inv]
        bw_t = t_bw / eff
        if caps is not None and proto in caps:
            bw_t = np.maximum(bw_t, bus_bytes / (caps[proto] * 1e9))
        t = lat + bw_t
        better = t < best_t
        best_t = np.where(better, t, best_t)
        best_l = np.where(better, lat, best_l)
    none = ~(t_bw > 0)
    return np.where(none, t_bw, best_t), np.where(none, 0.0, best_l)


def _vec(fn, *cols) -> np.ndarray:
    """``fn`` over the distinct rows of equal-length columns (few distinct values), back per row."""
    stack = np.stack([np.asarray(c, dtype=float) for c in cols], axis=1)
    uniq, inv = np.unique(stack, axis=0, return_inverse=True)
    vals = np.array([fn(*row) for row in uniq])
    return vals[np.asarray(inv).ravel()]


def _cap_bottleneck(ref: Bottleneck | None, fb: float, bus_gbps: float, seconds: float) -> Bottleneck:
    """The bottleneck of an algorithm limited by NCCL's bus-bandwidth cap (NVLS, NVLSTree, tree): ``per-flow``,
    ``fb`` bytes at the algorithm's bus bandwidth, naming the busiest link of ``ref`` (the ring's flows) with no load."""
    link = ref.link if ref is not None else None
    cap = ref.capacity_gbps if ref is not None else 0.0
    # no link load: the algorithm's bytes on the link are not the ring's (describe() says so)
    return Bottleneck(kind="per-flow", link=link, capacity_gbps=cap, flow_bytes=fb, flow_gbps=bus_gbps)


def part_times(cluster: Cluster, part: Collective, groups: np.ndarray, layouts: np.ndarray, timer: Timer,
               record: bool = False) -> PartTimes:
    """Times of one part over ``L`` layouts (module doc).

    Parameters
    ----------
    cluster : Cluster
    part : Collective
    groups : numpy.ndarray of int, shape (g, n)
        The class's groups (ranks, ``rank_offset`` removed); the part runs on its subgroups.
    layouts : numpy.ndarray of int, shape (L, world_size)
        Device of each rank, per layout.
    timer : callable
        See :data:`Timer`.
    record : bool
        Passed to the timer for the ring flows (the search's link-pressure statistic).

    Returns
    -------
    PartTimes, or None when the part moves no bytes.
    """
    model = cluster.nccl or DEFAULT_NCCL
    topo = cluster.nccl_topology
    arr = subgroups(np.sort(np.asarray(groups, dtype=np.int64), axis=1), part)
    if arr.ndim != 2 or arr.size == 0 or arr.shape[1] <= 1:
        return None
    g, k = arr.shape
    kind, S = part.kind, float(part.payload_bytes)
    fb = flow_bytes(kind, S, k)
    if fb <= 0:
        return None
    layouts = np.asarray(layouts, dtype=np.int64)
    L = layouts.shape[0]
    dev = layouts[:, arr].reshape(L * g, k)
    if topo is None:  # a Cluster built by hand, not by cluster_from_graph: hosts as nodes, no rails
        node_of = np.asarray(cluster.host_of)
        rail = np.full(node_of.size, -1, dtype=np.int64)
        rails = rail
        nic = nvl = np.zeros(node_of.size)
        arch = None
    else:
        node_of, rail, nic, nvl, arch = topo.node_of, topo.rail, topo.nic_gbps, topo.nvlink_gbps, topo.arch
        rails, nics = topo.rails(), topo.nic_count()  # every NIC nearest each GPU
    ordered = nccl_member_order(dev, node_of)
    nodes_row = 1 + (node_of[ordered][:, 1:] != node_of[ordered][:, :-1]).sum(axis=1)
    nodes = nodes_row.reshape(L, g).max(axis=1)
    steps = collective_steps(kind, k)

    def seg(rows):
        return np.asarray(rows) // g

    if kind in ("all_to_all", "p2p_chain"):
        wrap = part.wrap * S if kind == "p2p_chain" else 0.0

        nvlinked = None
        if model.pxn and topo is not None:  # who may proxy for whom: NVLink-connected GPUs only
            fab = getattr(cluster, "fabric", None)
            nvlinked = (nvl > 0, fab.direct_key if fab is not None else np.zeros(0, dtype=np.int64))

        def batches():
            for src, dst, b, row in _p2p_batches(kind, dev, fb, wrap):
                if model.pxn and topo is not None:
                    relay = pxn_relay(src, dst, row, dev, node_of, rail, cluster.local_index, cluster.host_of,
                                      topo.p2p_rails(), nvlinked)
                    hop = relay != src
                    if hop.any():
                        b = np.broadcast_to(np.asarray(b, dtype=float), src.shape)
                        src, dst, b, row = (np.concatenate([src, relay[hop]]),
                                            np.concatenate([np.where(hop, relay, dst), dst[hop]]),
                                            np.concatenate([b, b[hop]]), np.concatenate([row, row[hop]]))
                yield src, dst, b, seg(row)

        t_bw, glat, bott = timer(batches(), record)
        t, lat = _best_protocol("ring", kind, t_bw, k, nodes, model.latency)
        if topo is None:
            chans = np.ones(L, dtype=np.int64)
        else:  # NCCL's p2p channels per peer (reported; the rates are the routes')
            nic_min = nic[dev].reshape(L, g * k).min(axis=1)
            nvl_min = nvl[dev].reshape(L, g * k).min(axis=1)
            nics_min = nics[dev].reshape(L, g * k).min(axis=1)
            chans = _vec(lambda nn, ni, nc, nv: p2p_channels_per_peer(int(nn), k, ni, int(nc), nv, arch),
                         nodes, nic_min, nics_min, nvl_min).astype(np.int64)
        return PartTimes(t + glat * steps, lat + glat * steps, ["p2p"] * L, chans, bott)
    want = model.algorithm
    src, dst, nb, ch, rows = ring_flows(dev, node_of, rails, fb, return_rows=True)
    t_bw, glat, bott = timer([(src, dst, nb, seg(rows))], record and want in ("auto", "ring"))
    chans = ch.reshape(L, g).max(axis=1)
    caps = ring_protocol_caps(arch, nodes, ch.reshape(L, g).min(axis=1)) if kind != "ring_p2p" else None
    t, lat = _best_protocol("ring", kind, t_bw, k, nodes, model.latency, fb, caps)
    ring = PartTimes(t + glat * steps, lat + glat * steps, ["ring"] * L, chans, bott)
    if kind != "all_reduce" or topo is None or arch is None:
        return ring
    # the other all-reduce algorithms: (seconds, latency, name, channels, bottleneck per layout or None)
    cands = []
    single = nodes == 1
    nvl_min = nvl[dev].reshape(L, g * k).min(axis=1)
    if want in ("auto", "nvls") and single.any():
        bus = _vec(lambda b: nvls_bus_gbps(k, b, arch), nvl_min)
        ok = single & (bus > 0)
        t_bw = np.where(ok, fb / (np.maximum(bus, 1e-30) * 1e9), np.inf)
        t, lat = _best_protocol("nvls", kind, t_bw, k, nodes, model.latency)
        bb = [_cap_bottleneck(bott[i], fb, float(bus[i]), t_bw[i]) for i in range(L)] if bott is not None else None
        cands.append((t, lat, "nvls", np.full(L, min(k, NVLS_MAX_HEADS)), bb))
    multi = nodes_row.reshape(L, g).min(axis=1) > 1
    if want in ("auto", "nvlstree", "tree") and multi.any():
        s2, d2, b2, ch2, rows2 = chain_flows(dev, node_of, rails, S, return_rows=True)
        t_net, _glat2, bott2 = timer([(s2, d2, b2, seg(rows2))], False)
        c_min = ch2.reshape(L, g).min(axis=1)
        nic_min = nic[dev].reshape(L, g * k).min(axis=1)
        k_node = _blocks(ordered, node_of)[3].reshape(L, g * k).min(axis=1)
        for algo in ("nvlstree", "tree"):
            if want not in ("auto", algo):
                continue
            if algo == "nvlstree":
                bus = _vec(lambda kn, nn, c, b, ni: nvlstree_bus_gbps(int(kn), int(nn), int(c), b, ni, arch) if b > 0
                           else 0.0, k_node, nodes, c_min, nvl_min, nic_min)
                t_cap = fb / (np.maximum(bus, 1e-30) * 1e9)
            else:
                bus = _vec(lambda nn, c, ni: tree_bus_gbps(int(nn), int(c), ni, arch), nodes, c_min, nic_min)
                t_cap = 2.0 * S / (np.maximum(bus, 1e-30) * 1e9)
            ok = multi & (bus > 0)
            t_bw = np.where(ok, np.maximum(t_net, t_cap), np.inf)
            t, lat = _best_protocol(algo, kind, t_bw, k, nodes, model.latency)
            bb = None
            if bott is not None:
                bb = [bott2[i] if t_net[i] >= t_cap[i] and bott2 is not None else
                      _cap_bottleneck(bott2[i] if bott2 is not None else bott[i], fb, float(bus[i]), t_bw[i])
                      for i in range(L)]
            cands.append((t, lat, algo, c_min, bb))
    if not cands:
        return ring
    out_t, out_l = ring.seconds.copy(), ring.latency_seconds.copy()
    out_a, out_c = list(ring.algorithm), ring.channels.copy()
    out_b = list(bott) if bott is not None else None
    for t, lat, name, c, bb in cands:
        # NCCL_ALGO: that algorithm where the layout can run it, else ring; auto: the fastest
        take = np.isfinite(t) if want == name else (t < out_t)
        for i in np.flatnonzero(take):
            out_t[i], out_l[i], out_a[i], out_c[i] = t[i], lat[i], name, c[i]
            if out_b is not None and bb is not None:
                out_b[i] = bb[i]
    return PartTimes(out_t, out_l, out_a, out_c, out_b)
