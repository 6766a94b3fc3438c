"""Building a :class:`~rankmap.solver.fabric.links.Fabric` from a cluster graph (DESIGN §2).

ECMP twins (non-GPU nodes with the same neighbours, e.g. the spines of a two-tier
Clos) merge into one node (k × the narrowest twin link: ECMP splits evenly); the
non-GPU nodes must then form a forest, which is rooted, and each GPU's attachments
and direct GPU-GPU links are collected.  The routing and link-load arithmetic over
the result lives in :mod:`rankmap.solver.fabric.links`.
"""

from __future__ import annotations

from typing import Sequence

import networkx as nx
import numpy as np
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import breadth_first_order, connected_components

from ..errors import InvalidArgumentError
from .links import Fabric

__all__ = ["fabric_from_graph"]


def _merge_twins(nodes: list, adj: dict) -> tuple[list, dict, dict]:
    """Merge non-GPU nodes with identical neighbour sets (ECMP twins) into one.

    The merged link to each neighbour has k × the narrowest twin's capacity
    (even ECMP split over k twins; equal twins simply sum).

    ``adj[x]`` maps neighbour -> (GB/s, latency s).  Returns the new node list,
    adjacency and a map merged representative -> member names.
    """
    groups: dict = {}
    for x in nodes:
        nb = adj[x]
        if len(nb) >= 2:
            groups.setdefault(frozenset(nb), []).append(x)
    members = {x: [x] for x in nodes}
    for _key, xs in groups.items():
        if len(xs) < 2:
            continue
        rep = xs[0]
        k = len(xs)
        # ECMP splits a flow evenly over the k twins, so towards a neighbour z they carry
        # k x (the narrowest twin's link to z): equal twins sum, unequal ones do not
        merged = {}
        for z in adj[rep]:
            caps = [adj[y][z][0] for y in xs]
            merged[z] = (k * min(caps), max(adj[y][z][1] for y in xs))
        for y in xs[1:]:
            for z in adj[y]:
                if z in adj:
                    adj[z].pop(y)
            del adj[y]
            members[rep].extend(members.pop(y))
        for z, val in merged.items():
            adj[rep][z] = val
            if z in adj:
                adj[z][rep] = val
    kept = [x for x in nodes if x in adj]
    return kept, adj, members


def fabric_from_graph(graph: nx.Graph, devices: Sequence, check=None, rate=None, arrays=None) -> Fabric:
    """Build the :class:`Fabric` of a validated cluster graph.

    ``check`` (optional) is called every 65,536 edges: a cancellation check point.

    Parameters
    ----------
    graph : networkx.Graph
        DESIGN §2 schema; ``bandwidth`` GB/s, optional ``latency_us``.  Parallel
        edges of a multigraph are summed (parallel physical links).
    devices : sequence
        GPU node ids in device order (``Cluster.devices``).
    rate : callable (u, v, edge data) -> float, optional
        The rate an edge carries, GB/s (NCCL's calibrated rate, :func:`rankmap.solver.fabric.rates.link_efficiency`);
        default its ``bandwidth``.
    arrays : (nodes, src, dst, gbps, latency_s, gpu_node), optional
        The edges of a simple undirected ``graph`` already read (:func:`~.cluster.cluster_from_graph`):
        ``nodes`` its node list, ``src``/``dst`` node indices of its edges in ``graph.edges`` order,
        their rates (GB/s) and latencies (s), shapes (m,), and ``gpu_node`` the node index of each
        device, shape (n,).  When the switches already form a forest (no ECMP twins to merge) the
        GPU attachments are then built with numpy (a loop per edge and per GPU took about a second at
        131,072 GPUs); the result is the same.

    Raises
    ------
    InvalidArgumentError
        If the non-GPU nodes do not form a forest even after merging twins
        (naming a node on a cycle), or a GPU has no link at all.
    """
    if graph.is_directed():
        graph = nx.MultiGraph(graph) if graph.is_multigraph() else nx.Graph(graph)
        arrays = None
    if arrays is not None and not graph.is_multigraph():
        fast = _fabric_from_arrays(graph, devices, arrays, check)
        if fast is not None:
            return fast
    gpu_set = set(devices)
    dev_index = {d: i for i, d in enumerate(devices)}
    # adjacency among all nodes with summed parallel capacities
    non_gpu: list = []
    adj: dict = {}
    for x, data in graph.nodes(data=True):
        if x not in gpu_set:
            non_gpu.append(x)
            adj[x] = {}
    gpu_links: dict = {d: {} for d in devices}
    direct: dict = {}
    multi = graph.is_multigraph()
    edges = graph.edges(keys=False, data=True) if multi else graph.edges(data=True)
    for e, (u, v, data) in enumerate(edges):
        if check is not None and not e % 65536:
            check()
        if u == v:
            continue
        c = float(rate(u, v, data)) if rate is not None else float(data["bandwidth"])
        lat = float(data.get("latency_us", 0.0) or 0.0) * 1e-6
        ug, vg = u in gpu_set, v in gpu_set
        if ug and vg:
            i, j = dev_index[u], dev_index[v]
            key = (min(i, j), max(i, j))
            c0, l0 = direct.get(key, (0.0, 0.0))
            direct[key] = (c0 + c, max(l0, lat))
        elif ug or vg:
            g, x = (u, v) if ug else (v, u)
            c0, l0 = gpu_links[g].get(x, (0.0, 0.0))
            gpu_links[g][x] = (c0 + c, max(l0, lat))
        else:
            c0, l0 = adj[u].get(v, (0.0, 0.0))
            val = (c0 + c, max(l0, lat))
            adj[u][v] = val
            adj[v][u] = val
    # twins: include GPU neighbours in the neighbourhood key
    full_adj = {x: dict(nb) for x, nb in adj.items()}
    for g, links in gpu_links.items():
        for x, val in links.items():
            full_adj[x][("__gpu__", g)] = val
    members = {x: [x] for x in non_gpu}
    if not _is_forest(non_gpu, adj):
        nodes = list(non_gpu)
        for _ in range(8):
            nodes, full_adj, mem = _merge_twins(nodes, full_adj)
            for rep, ms in mem.items():
                if len(ms) > 1:
                    members[rep] = [m for y in ms for m in members.get(y, [y])]
            sub = {x: {y: v for y, v in full_adj[x].items() if not (isinstance(y, tuple) and y[:1] == ("__gpu__",))}
                   for x in nodes}
            if _is_forest(nodes, sub):
                break
        else:
            sub = None
        if sub is None or not _is_forest(nodes, sub):
            cyc = _cycle_node(nodes, sub if sub is not None else adj)
            raise InvalidArgumentError(
                f"the switches/NICs of the cluster graph form a cycle through {cyc!r} that is not parallel "
                f"spines (ECMP twins); rankmap needs the non-GPU links to be a tree once parallel switches are "
                f"merged (describe an ECMP fabric as a tree with summed uplinks)",
                "cluster.edges",
            )
        non_gpu = nodes
        adj = sub
        gpu_links = {d: {} for d in devices}
        for x in nodes:
            for y, val in full_adj[x].items():
                if isinstance(y, tuple) and y[:1] == ("__gpu__",):
                    gpu_links[y[1]][x] = val
    n = len(devices)
    A = max(1, max((len(v) for v in gpu_links.values()), default=1))
    att_node = np.full((n, A), -1, dtype=np.int64)
    att_gbps = np.zeros((n, A))
    att_lat = np.zeros((n, A))
    idx = {x: i for i, x in enumerate(non_gpu)}
    for g, links in gpu_links.items():
        i = dev_index[g]
        for k, (x, (c, lat)) in enumerate(sorted(links.items(), key=lambda kv: (-kv[1][0], str(kv[0])))):
            att_node[i, k] = idx[x]
            att_gbps[i, k] = c
            att_lat[i, k] = lat
    keys = np.array([i * n + j for (i, j) in direct], dtype=np.int64)
    order = np.argsort(keys)
    dvals = list(direct.values())
    dg = np.array([v[0] for v in dvals], dtype=float)[order] if dvals else np.zeros(0)
    dl = np.array([v[1] for v in dvals], dtype=float)[order] if dvals else np.zeros(0)
    es, ed, ec, el = [], [], [], []
    for x in non_gpu:
        for y, (c, lat) in adj[x].items():
            es.append(idx[x])
            ed.append(idx[y])
            ec.append(c)
            el.append(lat)
    links = (np.asarray(es, dtype=np.int64), np.asarray(ed, dtype=np.int64), np.asarray(ec, dtype=float),
             np.asarray(el, dtype=float))
    return _assemble(graph, devices, non_gpu, links, members, (att_node, att_gbps, att_lat), (keys[order], dg, dl))


def _fabric_from_arrays(graph: nx.Graph, devices: Sequence, arrays, check) -> Fabric | None:
    """:func:`fabric_from_graph` from edge arrays (its ``arrays``); None when the switches are not a forest
    (ECMP twins to merge: the caller takes the general path)."""
    nodes, src, dst, gbps, lat, gpu_node = arrays
    n, V = len(devices), len(nodes)
    dev_of = np.full(V, -1, dtype=np.int64)
    dev_of[np.asarray(gpu_node, dtype=np.int64)] = np.arange(n)
    du, dv = dev_of[src], dev_of[dst]
    loop = src == dst
    gg = ~loop & (du >= 0) & (dv >= 0)
    gx = ~loop & ((du >= 0) != (dv >= 0))
    xx = ~loop & (du < 0) & (dv < 0)
    non_gpu = [x for x, d in zip(nodes, dev_of.tolist()) if d < 0]
    N = len(non_gpu)
    fidx = np.full(V, -1, dtype=np.int64)
    fidx[dev_of < 0] = np.arange(N)
    # switch-to-switch links as arrays (a dict per switch took seconds with a NIC and PCIe tree per host),
    # parallel ones summed (capacity) and maxed (latency), as the general path's adjacency
    a, b = fidx[src[xx]], fidx[dst[xx]]
    lo, hi = np.minimum(a, b), np.maximum(a, b)
    skey, sinv = np.unique(lo * max(1, N) + hi, return_inverse=True)
    scap = np.bincount(sinv, weights=gbps[xx], minlength=skey.size) if skey.size else np.zeros(0)
    slat = np.zeros(skey.size)
    np.maximum.at(slat, sinv, lat[xx])
    su, sv = skey // max(1, N), skey % max(1, N)
    if check is not None:
        check()
    if N:  # a forest: as many links as nodes less components
        ncomp, _ = connected_components(coo_matrix((np.ones(su.size), (su, sv)), shape=(N, N)), directed=False)
        if skey.size != N - ncomp:
            return None
    switch_links = (np.concatenate([su, sv]), np.concatenate([sv, su]), np.concatenate([scap, scap]),
                    np.concatenate([slat, slat]))
    # GPU -> switch/NIC attachments, parallel ones summed (capacity) and maxed (latency)
    g = np.where(du >= 0, du, dv)[gx]
    x = fidx[np.where(du >= 0, dst, src)[gx]]
    first = np.flatnonzero(gx)  # edge order breaks the remaining ties, as a stable sort of the edges would
    key, start, inv = np.unique(g * max(1, len(non_gpu)) + x, return_index=True, return_inverse=True)
    cap = np.bincount(inv, weights=gbps[gx], minlength=key.size)
    late = np.zeros(key.size)
    np.maximum.at(late, inv, lat[gx])
    kg, kx, kfirst = g[start], x[start], first[start]
    _, name_rank = np.unique(np.array([str(y) for y in non_gpu] or [""], dtype=object)[kx] if kx.size else
                             np.zeros(0, dtype=object), return_inverse=True)
    order = np.lexsort((kfirst, name_rank, -cap, kg))  # per GPU: widest first, then by name
    kg, kx, cap, late = kg[order], kx[order], cap[order], late[order]
    counts = np.bincount(kg, minlength=n)
    slot = np.arange(kg.size) - (np.cumsum(counts) - counts)[kg]
    A = max(1, int(counts.max(initial=1)))
    att_node = np.full((n, A), -1, dtype=np.int64)
    att_gbps = np.zeros((n, A))
    att_lat = np.zeros((n, A))
    att_node[kg, slot], att_gbps[kg, slot], att_lat[kg, slot] = kx, cap, late
    # direct GPU-GPU links, keyed i * n + j (i < j), sorted
    i, j = np.minimum(du[gg], dv[gg]), np.maximum(du[gg], dv[gg])
    dkey, dinv = np.unique(i * n + j, return_inverse=True)
    dg = np.bincount(dinv, weights=gbps[gg], minlength=dkey.size) if dkey.size else np.zeros(0)
    dl = np.zeros(dkey.size)
    np.maximum.at(dl, dinv, lat[gg])
    if check is not None:
        check()
    return _assemble(graph, devices, non_gpu, switch_links, {}, (att_node, att_gbps, att_lat),
                     (dkey.astype(np.int64), dg, dl))


def _assemble(graph, devices, non_gpu, links, members, att, direct) -> Fabric:
    """The :class:`Fabric` of a forest of switches ``non_gpu``: its links ``links`` = (source, target, GB/s,
    latency s) as forest index arrays, each link in both directions; merged twins ``members`` (rep ->
    names; a node absent is itself); GPU attachments ``att`` = (node, GB/s, s), each of shape (n, A); and
    direct links ``direct`` = (sorted keys i·n+j, GB/s, s)."""
    att_node, att_gbps, att_lat = att
    dkey, dg, dl = direct
    N = len(non_gpu)
    if members:
        idx = {x: i for i, x in enumerate(non_gpu)}
        node_index = {m: idx[x] for x in non_gpu for m in members.get(x, [x])}
        names = tuple(
            str(x) if len(members.get(x, [x])) == 1 else "|".join(map(str, members[x][:3])) + (
                f"|…({len(members[x])})" if len(members[x]) > 3 else "")
            for x in non_gpu
        )
    else:
        node_index = {x: i for i, x in enumerate(non_gpu)}
        names = tuple(map(str, non_gpu))
    es_a, ed_a, ec, el = links
    parent, depth, up, uplat = _root_forest(N, es_a, ed_a, np.asarray(ec, dtype=float), np.asarray(el, dtype=float))
    anc, pmin, plat = _ancestors(parent, depth, up, uplat)
    attrs = dict(graph.nodes(data=True)) if N else {}
    return Fabric(
        node_names=names, parent=parent, depth=depth, up_gbps=up, up_latency_s=uplat, anc=anc, pmin=pmin,
        plat=plat, att_node=att_node, att_gbps=att_gbps, att_latency_s=att_lat, direct_key=dkey,
        direct_gbps=dg, direct_latency_s=dl, gpu_names=tuple(devices), node_index=node_index,
        no_turn=np.array([str(attrs[x].get("kind", "")).lower() == "nic" for x in non_gpu], dtype=bool),
    )


def _is_forest(nodes: list, adj: dict) -> bool:
    m = sum(len(adj[x]) for x in nodes) // 2
    if not nodes:
        return True
    idx = {x: i for i, x in enumerate(nodes)}
    src = [idx[x] for x in nodes for y in adj[x]]
    dst = [idx[y] for x in nodes for y in adj[x]]
    mat = coo_matrix((np.ones(len(src)), (src, dst)), shape=(len(nodes), len(nodes)))
    ncomp, _ = connected_components(mat, directed=False)
    return m == len(nodes) - ncomp


def _cycle_node(nodes: list, adj: dict):
    g = nx.Graph()
    for x in nodes:
        for y in adj[x]:
            g.add_edge(x, y)
    try:
        cyc = nx.find_cycle(g)
        return cyc[0][0]
    except nx.NetworkXNoCycle:  # pragma: no cover - only called on a cycle
        return nodes[0]


def _root_forest(N, es, ed, ec, el):
    """Parent, depth, up-capacity and up-latency of a forest rooted at each component's widest-degree node."""
    parent = np.full(N, -1, dtype=np.int64)
    depth = np.zeros(N, dtype=np.int64)
    up = np.full(N, np.inf)
    uplat = np.zeros(N)
    if N == 0:
        return parent, depth, up, uplat
    deg = np.bincount(es, minlength=N)
    mat = coo_matrix((np.ones(es.size), (es, ed)), shape=(N, N)).tocsr()
    ncomp, comp = connected_components(mat, directed=False)
    order = np.lexsort((np.arange(N), -deg, comp))
    first = np.ones(N, dtype=bool)
    first[1:] = comp[order][1:] != comp[order][:-1]
    roots = order[first]
    # one BFS from a virtual super-root joined to every component's root
    vs = np.concatenate([es, np.full(roots.size, N), roots])
    vd = np.concatenate([ed, roots, np.full(roots.size, N)])
    vmat = coo_matrix((np.ones(vs.size), (vs, vd)), shape=(N + 1, N + 1)).tocsr()
    _, pred = breadth_first_order(vmat, N, directed=False, return_predecessors=True)
    par = pred[:N].astype(np.int64)
    par = np.where(par == N, -1, par)
    par = np.where(par < 0, -1, par)
    parent[:] = par
    # depth level by level from the roots
    level = roots
    cur_depth = 0
    while level.size:
        depth[level] = cur_depth
        level = np.flatnonzero(np.isin(par, level))
        cur_depth += 1
    # capacities of parent edges
    key_e = es * (N + 1) + ed
    o = np.argsort(key_e)
    key_e = key_e[o]
    nonroot = np.flatnonzero(parent >= 0)
    q = nonroot * (N + 1) + parent[nonroot]
    pos = np.searchsorted(key_e, q)
    up[nonroot] = ec[o][pos]
    uplat[nonroot] = el[o][pos]
    return parent, depth, up, uplat


def _ancestors(parent, depth, up, uplat):
    N = parent.size
    D = int(depth.max()) if N else 0
    anc = np.full((N, D + 1), -1, dtype=np.int64)
    pmin = np.full((N, D + 1), np.inf)
    plat = np.zeros((N, D + 1))
    cur = np.arange(N)
    m = np.full(N, np.inf)
    lat = np.zeros(N)
    for d in range(D, -1, -1):
        move = depth[cur] > d
        mv = np.flatnonzero(move)
        m[mv] = np.minimum(m[mv], up[cur[mv]])
        lat[mv] = lat[mv] + uplat[cur[mv]]
        cur[mv] = parent[cur[mv]]
        has = depth >= d
        anc[:, d] = np.where(has, cur, -1)
        pmin[:, d] = np.where(has, m, np.inf)
        plat[:, d] = np.where(has, lat, 0.0)
    return anc, pmin, plat
