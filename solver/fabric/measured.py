"""Measured rates applied to the cluster graph, once, before the cluster model is built (issue 27).

:func:`apply_measured` routes every measurement (:class:`~rankmap.solver.formats.measured.Measurement`)
as the time model routes flows (DESIGN §2: the widest path whose interior is no GPU, fewest hops,
ECMP) on the cluster's links at the rates NCCL reaches (:mod:`.rates`), and caps the *bottleneck*
links of its route: a flow measured at m GB/s whose route the model gives r GB/s scales each
link at the route's bottleneck (within 1e-9) by m / r, when m < r (a measurement derates, never
raises).  A flow below 0.9 of its model rate spares the links another measurement shows healthy
(at 0.9 of the model's rate or more): a slow pair node1-node3 beside a full-rate node1-node2
blames node3's side; when every bottleneck link is healthy, all are capped, with a warning.  The
caps are written on the graph's edges as ``measured_gbps`` (and ``measured_source``), which
:func:`~rankmap.solver.fabric.cluster.cluster_from_graph` takes as ``min(NCCL's rate,
measured_gbps)``: the time model, the lower bound and the search then all see the same derated
links.  Several measurements on one link: the lowest cap.  Cost: one cluster model more than a
solve without measurements (the routes are those of the nominal model).

Flows of one measurement:

* two GPUs (node ids or ``HOST:N``): the one flow between them;
* two hosts: one flow per rail, GPU i of one host to GPU i of the other (NCCL keeps its rings
  rail-aligned, DESIGN §3), i over the smaller host's GPUs (an nccl-tests run: over the GPUs it
  used), each at the measured per-flow rate.  An nccl-tests busbw with k GPUs per host is spread
  over c channels, c = the NIC rails those GPUs use (the fewer of the two hosts), so one flow's
  rate is busbw / c (DESIGN §3: c channels, one per NIC);
* a GPU and a host: the GPU to the host's GPU with the same local position.

``exclude_slow`` F drops the hosts measured below F × the model's rate for the same flows (the
rate before any measurement, NCCL's rates of DESIGN §4): a host is dropped when more than half
of the measurements naming it are slow (a pair measured once drops both hosts; a host measured
against several good ones stays when only one pair is slow).

A measurement naming an unknown host or GPU is a warning, not an error; so is one between a
host and itself.  Never n×n: the flows are routed in one vectorised batch (O(flows · A² · depth)).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import networkx as nx
import numpy as np

from ..errors import InvalidArgumentError
from .graph import edge_bandwidth, simple_graph
from .links import _choose
from .rates import DEFAULT_NCCL, NcclModel, gpu_arch, link_efficiency

__all__ = ["MeasuredGraph", "apply_measured", "measured_links_used", "check_exclude_slow"]

_REL = 1e-9


@dataclass
class MeasuredGraph:
    """What :func:`apply_measured` gives.

    Attributes
    ----------
    graph : networkx.Graph
        A copy of the cluster graph with ``measured_gbps`` / ``measured_source`` on the capped edges
        (the input graph itself when there was nothing to apply).
    pairs : list of dict
        Per measurement applied: ``a``, ``b``, ``gbps`` (per flow), ``model_gbps`` (the model's
        rate of the same flow before measurements), ``ratio`` (gbps / model_gbps), ``source``.
    warnings : list of str
        Measurements ignored (unknown endpoint, a host with itself).
    slow_hosts : tuple of str
        Hosts ``exclude_slow`` drops (sorted).
    capped : int
        Graph edges capped.
    """

    graph: nx.Graph
    pairs: list = field(default_factory=list)
    warnings: list = field(default_factory=list)
    slow_hosts: tuple = ()
    capped: int = 0


def check_exclude_slow(value) -> float | None:
    """``--exclude-slow F`` / job key ``exclude_slow`` checked: None or a number in (0, 1].

    Raises
    ------
    InvalidArgumentError
        Not a number in (0, 1] (field ``exclude_slow``).
    """
    if value is None:
        return None
    try:
        if isinstance(value, bool):
            raise TypeError
        f = float(value)
    except (TypeError, ValueError):
        raise InvalidArgumentError(f"exclude_slow {value!r} is not a number in (0, 1]", "exclude_slow") from None
    if not 0 < f <= 1:
        raise InvalidArgumentError(
            f"exclude_slow {value!r} must be in (0, 1]: hosts measured below that share of the model's rate are "
            "dropped", "exclude_slow")
    return f


def _edge_rate(u, v, data, arch, nccl: NcclModel) -> float:
    """NCCL's rate on an edge, GB/s, as the cluster model computes it (:func:`.rates.link_efficiency`)."""
    b = edge_bandwidth(u, v, data)
    if data.get("link") is None:
        r = b
    else:
        fac, absolute = link_efficiency(data, arch, nccl)
        r = absolute if absolute is not None else b * fac
    return min(r, float(data["measured_gbps"])) if "measured_gbps" in data else r


def _endpoints(cl, m, names) -> tuple | None:
    """``(devices of a, devices of b)`` (aligned arrays) of a measurement, or None with a warning."""
    hosts, dev_of, host_local = names

    def resolve(x):
        if x in hosts:
            return ("host", hosts[x])
        if x in dev_of:
            return ("gpu", dev_of[x])
        h, sep, idx = x.rpartition(":")
        if sep and idx.isdigit() and h in hosts and (hosts[h], int(idx)) in host_local:
            return ("gpu", host_local[(hosts[h], int(idx))])
        return None

    ra, rb = resolve(m.a), resolve(m.b)
    if ra is None or rb is None:
        return None
    hd = cl.host_devices
    if ra[0] == "gpu" and rb[0] == "gpu":
        return np.array([ra[1]]), np.array([rb[1]])
    pos = cl.local_position()
    if ra[0] == "gpu" or rb[0] == "gpu":
        (_, d), (_, h) = (ra, rb) if ra[0] == "gpu" else (rb, ra)
        other = hd[h][min(int(pos[d]), hd[h].size - 1)]
        return (np.array([d]), np.array([other])) if ra[0] == "gpu" else (np.array([other]), np.array([d]))
    da, db = hd[ra[1]], hd[rb[1]]
    if m.devices_a and m.devices_b:
        la = {int(cl.local_index[d]): d for d in da}
        lb = {int(cl.local_index[d]): d for d in db}
        pa = [la[i] for i in m.devices_a if i in la]
        pb = [lb[i] for i in m.devices_b if i in lb]
        k = min(len(pa), len(pb))
        if k:
            return np.array(pa[:k]), np.array(pb[:k])
    k = min(da.size, db.size, m.gpus_per_host or da.size)
    return da[:k], db[:k]


def apply_measured(graph: nx.Graph, measurements, nccl: NcclModel | None = None, exclude_slow: float | None = None,
                   check=None) -> MeasuredGraph:
    """Cap the bottleneck links of each measurement's route (module doc).

    Parameters
    ----------
    graph : networkx.Graph
        The cluster graph (DESIGN §2).
    measurements : sequence of Measurement
    nccl : NcclModel, optional
        The job's NCCL model (its rate overrides decide the model's rates a measurement is compared with).
    exclude_slow : float, optional
        F in (0, 1]: hosts measured below F × the model's rate go to ``slow_hosts``.
    check : callable, optional
        Cancellation check point (the cluster model's).

    Returns
    -------
    MeasuredGraph

    Raises
    ------
    InvalidArgumentError
        A bad graph (as :func:`~rankmap.solver.fabric.cluster.cluster_from_graph`) or ``exclude_slow``.
    """
    from .cluster import cluster_from_graph

    exclude_slow = check_exclude_slow(exclude_slow)
    measurements = list(measurements or ())
    if not measurements:
        return MeasuredGraph(graph)
    nccl = DEFAULT_NCCL if nccl is None else nccl
    simple = simple_graph(graph)
    graph = simple.copy() if simple is graph else simple  # the caller's graph is left as it was
    cl = cluster_from_graph(graph, check=check, nccl=nccl)
    fab = cl.fabric
    hosts = {h: i for i, h in enumerate(cl.hosts)}
    dev_of = {str(d): i for i, d in enumerate(cl.devices)}
    host_local = {(int(h), int(li)): i for i, (h, li) in enumerate(zip(cl.host_of, cl.local_index))}
    out = MeasuredGraph(graph)
    src, dst, per_flow, owner = [], [], [], []
    kept = []
    rail = cl.nccl_topology.rail if cl.nccl_topology is not None else np.full(cl.num_devices, -1)
    for m in measurements:
        ends = _endpoints(cl, m, (hosts, dev_of, host_local))
        if ends is None:
            unknown = next(x for x in (m.a, m.b) if x not in hosts and x not in dev_of
                           and not _is_host_gpu(x, hosts, host_local))
            out.warnings.append(f"measurement {m.a}-{m.b} ({m.source}) names {unknown!r}, which is not a host or GPU "
                                "of the cluster; ignored")
            continue
        a, b = ends
        keep = a != b
        if cl.host_of[a[0]] == cl.host_of[b[0]] and m.a in hosts and m.b in hosts:
            keep[:] = False
        if not keep.any():
            out.warnings.append(f"measurement {m.a}-{m.b} ({m.source}) joins a host or GPU with itself; ignored")
            continue
        a, b = a[keep], b[keep]
        rate = m.gbps
        if m.gpus_per_host:
            ra = np.unique(rail[a][rail[a] >= 0]).size
            rb = np.unique(rail[b][rail[b] >= 0]).size
            rate = m.gbps / max(1, min(ra, rb) if ra and rb else 1)
        idx = len(kept)
        kept.append((m, rate))
        src.append(a)
        dst.append(b)
        per_flow.append(np.full(a.size, rate))
        owner.append(np.full(a.size, idx))
    if not kept:
        return out
    s, t = np.concatenate(src), np.concatenate(dst)
    mval, own = np.concatenate(per_flow), np.concatenate(owner)
    _parts, model = fab.route_summary(s, t)[:2]
    factor = np.where(model > 0, mval / np.where(model > 0, model, 1.0), 1.0)
    caps = _bottleneck_caps(fab, s, t, np.where(factor < 1 - _REL, factor, np.nan), own, kept, out.warnings, check)
    # per measurement: the model's rate (its slowest flow) and the ratio
    # flows are grouped by measurement (own ascending): one reduction, not a scan per measurement
    starts = np.searchsorted(own, np.arange(len(kept)))
    slowest = np.minimum.reduceat(model, starts)
    for i, (m, rate) in enumerate(kept):
        mod = float(slowest[i])
        out.pairs.append({"a": m.a, "b": m.b, "gbps": rate, "model_gbps": mod,
                          "ratio": rate / mod if mod > 0 else 1.0, "source": m.source})
    out.capped = _write_caps(graph, fab, caps, kept, gpu_arch(graph.graph.get("gpu")), nccl)
    if exclude_slow is not None:
        out.slow_hosts = _slow_hosts(cl, starts, s, t, out.pairs, exclude_slow)
    out.warnings = _summarised(out.warnings)
    return out


#: Warnings of one kind shown in full; the rest are counted in one line.
WARNINGS_SHOWN = 5


def _summarised(warnings: list) -> list:
    """At most :data:`WARNINGS_SHOWN` warnings of each kind (unknown endpoint, disagreeing
    measurements, a host with itself), then one line counting the others."""
    out, seen = [], {}
    for w in warnings:
        kind = "unknown" if "not a host or GPU" in w else "healthy" if "healthy" in w else "other"
        seen[kind] = seen.get(kind, 0) + 1
        if seen[kind] <= WARNINGS_SHOWN:
            out.append(w)
    for kind, n in seen.items():
        if n > WARNINGS_SHOWN:
            out.append(f"... and {n - WARNINGS_SHOWN} more measurement(s) like the above")
    return out


def _is_host_gpu(x, hosts, host_local) -> bool:
    h, sep, idx = x.rpartition(":")
    return bool(sep and idx.isdigit() and h in hosts and (hosts[h], int(idx)) in host_local)


def _route_links(fab, s, t, check=None) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The links of every flow's chosen routes, vectorised: ``(flow, link code, GB/s)`` arrays (one row
    per link of a chosen route) and each flow's route width (GB/s, one ECMP part).

    Link codes: forest node x's link to its parent is ``x``; GPU g's attachment i is
    ``N + g·A + i``; direct GPU link e is ``N + n·A + e`` (N forest nodes, n GPUs, A attachments).
    """
    N = fab.parent.size
    n, A = fab.att_node.shape
    rows_f, rows_c, rows_b = [], [], []
    top_all = np.zeros(s.size)
    for lo in range(0, s.size, 1 << 16):
        if check is not None:
            check()  # a gRPC deadline stops a long list of measurements
        ss, tt = s[lo:lo + (1 << 16)], t[lo:lo + (1 << 16)]
        bw, hops, _lat, a_opt, b_opt, l_opt = fab._options(ss, tt)
        top, chosen = _choose(bw, hops)
        top_all[lo:lo + ss.size] = top
        for o in range(chosen.shape[1]):
            f = np.flatnonzero(chosen[:, o])
            if not f.size:
                continue
            if o == A * A:
                e = l_opt[f, o]
                rows_f.append(f + lo), rows_c.append(N + n * A + e), rows_b.append(fab.direct_gbps[e])
                continue
            i, j = divmod(o, A)
            for g, k in ((ss[f], i), (tt[f], j)):
                rows_f.append(f + lo), rows_c.append(N + g * A + k), rows_b.append(fab.att_gbps[g, k])
            lca = l_opt[f, o]
            for x in (a_opt[f, o], b_opt[f, o]):
                x, ff, stop = x.copy(), f, lca
                live = (x != stop) & (x >= 0)
                while live.any():
                    x, ff, stop = x[live], ff[live], stop[live]
                    rows_f.append(ff + lo), rows_c.append(x), rows_b.append(fab.up_gbps[x])
                    x = fab.parent[x]
                    live = (x != stop) & (x >= 0)
    if not rows_f:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0), top_all
    return (np.concatenate(rows_f).astype(np.int64), np.concatenate(rows_c).astype(np.int64),
            np.concatenate(rows_b).astype(np.float64), top_all)


#: A flow measured at this share of the model's rate or more shows every link of its route healthy.
HEALTHY_RATIO = 0.9


def _bottleneck_caps(fab, s, t, factor, own, kept, warnings, check=None) -> dict:
    """``{link code: (factor, measurement index)}`` (codes of :func:`_route_links`): the links each
    derated flow blames.

    A derated flow (``factor`` = measured / model rate < 1) caps the links at its route's
    bottleneck (within 1e-9); one below :data:`HEALTHY_RATIO` blames only those of them that no
    other measurement shows healthy: a link crossed by another
    measurement's flow at :data:`HEALTHY_RATIO` of its model rate or more is exonerated
    (node1-node3 slow while node1-node2 is at full rate blames node3's NIC, not node1's).  When
    every bottleneck link is healthy, all of them are capped (the pair's own measurement stands)
    and a warning says the measurements disagree.  The lowest factor wins per link.  Vectorised:
    O(route links · log) over all flows at once.
    """
    flow, code, cap, top = _route_links(fab, s, t, check)
    ratio = np.where(np.isfinite(factor), factor, 1.0)
    # healthy links: per code, how many distinct measurements show it healthy and one of them
    ok = ratio[flow] >= HEALTHY_RATIO
    pairs = np.unique(np.stack([code[ok], own[flow[ok]]], axis=1), axis=0) if ok.any() else np.zeros((0, 2), np.int64)
    hc, first, count = np.unique(pairs[:, 0], return_index=True, return_counts=True)
    rep = pairs[first, 1]
    # the derated flows' bottleneck links
    derated = np.isfinite(factor)[flow] & (cap <= top[flow] * (1 + _REL))
    bf, bc = flow[derated], code[derated]
    if hc.size:
        posc = np.minimum(np.searchsorted(hc, bc), hc.size - 1)
        exonerated = (hc[posc] == bc) & ((count[posc] >= 2) | (rep[posc] != own[bf]))
    else:
        exonerated = np.zeros(bc.size, dtype=bool)
    exonerated &= ratio[bf] < HEALTHY_RATIO  # a healthy flow (a little under the model) caps its whole bottleneck
    # flows with every bottleneck link exonerated blame them all (and say so)
    blamed_any = np.zeros(s.size, dtype=bool)
    np.logical_or.at(blamed_any, bf, ~exonerated)
    keep = ~exonerated | ~blamed_any[bf]
    for w in sorted({int(x) for x in own[np.unique(bf[~blamed_any[bf]])]}):
        m = kept[w][0]
        warnings.append(f"measurement {m.a}-{m.b} ({m.source}) is slow although other measurements show every "
                        "link at its route's bottleneck healthy; those links are capped")
    bf, bc = bf[keep], bc[keep]
    if not bf.size:
        return {}
    order = np.lexsort((factor[bf], bc))  # per code, the lowest factor first
    bc, bf = bc[order], bf[order]
    firsts = np.flatnonzero(np.r_[True, bc[1:] != bc[:-1]])
    return {int(bc[k]): (float(factor[bf[k]]), int(own[bf[k]])) for k in firsts}


def _write_caps(graph: nx.Graph, fab, caps: dict, kept, arch, nccl) -> int:
    """Write ``measured_gbps`` (edge rate × factor) on the graph edges behind each capped fabric link."""
    members: dict = {}
    for name, x in (fab.node_index or {}).items():
        members.setdefault(x, []).append(name)
    count = 0
    N = fab.parent.size
    n, A = fab.att_node.shape
    for code, (f, who) in caps.items():
        if code < N:  # forest node x's link to its parent
            x = code
            edges = [(u, v) for u in members.get(x, ()) for v in members.get(int(fab.parent[x]), ())
                     if graph.has_edge(u, v)]
        elif code < N + n * A:  # GPU g's attachment i
            g, i = divmod(code - N, A)
            gpu = fab.gpu_names[g]
            edges = [(gpu, v) for v in members.get(int(fab.att_node[g, i]), ()) if graph.has_edge(gpu, v)]
        else:  # direct GPU link
            lo, hi = divmod(int(fab.direct_key[code - N - n * A]), n)
            edges = [(fab.gpu_names[lo], fab.gpu_names[hi])]
        m = kept[who][0]
        for u, v in edges:
            data = graph[u][v]
            cap = _edge_rate(u, v, data, arch, nccl) * f
            old = data.get("measured_gbps")
            if old is None or cap < float(old):
                data["measured_gbps"] = max(cap, 1e-6)
                data["measured_source"] = f"{m.source}: {m.a}-{m.b} {m.gbps:g} GB/s"[:512]
                count += 1
    return count


def _slow_hosts(cl, starts, s, t, pairs, F) -> tuple:
    """Hosts with more than half of their measurements below F × the model's rate (a measurement's
    hosts: those of its first flow's ends; all its flows join the same two hosts)."""
    total: dict = {}
    slow: dict = {}
    for i, k in enumerate(starts.tolist()):
        hs = {int(cl.host_of[s[k]]), int(cl.host_of[t[k]])}
        bad = pairs[i]["ratio"] < F
        for h in hs:
            total[h] = total.get(h, 0) + 1
            slow[h] = slow.get(h, 0) + int(bad)
    return tuple(sorted(cl.hosts[h] for h in total if 2 * slow[h] > total[h]))


def measured_links_used(cluster, cfg, dev_of_rank, traffic, groups=None) -> list[dict]:
    """The measured links (:attr:`~.cluster.Cluster.measured_links`) a layout's flows cross, with the classes.

    Each class's collectives are routed as the time model routes them (NCCL's rings, channels
    and PXN, :func:`~rankmap.solver.cost.collective.part_times`); a measured link counts when
    some class puts bytes on it.  Returns dicts ``link``, ``measured_gbps``, ``line_gbps``,
    ``source``, ``classes`` (the classes using it, Megatron's names); [] without measured links.
    """
    if not cluster.measured_links:
        return []
    from ..cost.collective import part_times
    from ..cost.timemodel import class_groups
    from ..traffic import TRAFFIC_CLASSES, class_collectives

    fab = cluster.fabric
    dev = np.asarray(dev_of_rank, dtype=np.int64)
    fam = class_groups(cfg, groups)
    want = {i for ml in cluster.measured_links for i in ml.link_ids}
    used: dict = {}
    for c in TRAFFIC_CLASSES:
        if not float(traffic.get(c, 0.0) or 0.0) > 0:
            continue
        arr = fam[c] - cfg.rank_offset
        if arr.ndim != 2 or arr.shape[1] <= 1:
            continue
        load = np.zeros(fab.num_links)

        def timer(batches, _record, load=load):
            for bs, bd, b, _seg in batches:
                load += fab.route_loads(bs, bd, b).load_bytes
            return np.zeros(1), np.zeros(1), [None]

        for part in class_collectives(traffic, c):
            part_times(cluster, part, arr, dev[None, :], timer, record=True)
        for i in want:
            if load[i] > 0:
                used.setdefault(i, []).append(c)
    out = []
    for ml in cluster.measured_links:
        classes = sorted({c for i in ml.link_ids for c in used.get(i, ())},
                         key=lambda c: TRAFFIC_CLASSES.index(c))
        if classes:
            out.append({**ml.to_dict(), "classes": classes})
    return out
