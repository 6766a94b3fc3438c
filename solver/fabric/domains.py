"""Bandwidth domains of a cluster graph (DESIGN §2): the nested levels of GPUs that reach each
other at a given widest-path bandwidth, found with scipy's connected components per level (no
n×n structure), and the extra cost of intra-host pairs whose widest path would relay through a
third GPU.  Used by the cluster model (``cluster``).
"""

from __future__ import annotations

import numpy as np
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components

__all__ = ["bandwidth_levels", "non_relay_extra"]


def _canonical_labels(labels: np.ndarray) -> np.ndarray:
    """Relabel so that labels are 0, 1, 2, ... in order of first appearance."""
    _, first, inverse = np.unique(labels, return_index=True, return_inverse=True)
    rank = np.empty(first.size, dtype=np.int64)
    rank[np.argsort(first, kind="stable")] = np.arange(first.size)
    return rank[inverse.reshape(-1)].astype(np.int64)


def bandwidth_levels(src, dst, bw, gpu_idx, n_nodes, boundary=None, capacity=None, per_domain=None):
    """Nested GPU partitions by descending edge bandwidth (widest-path ultrametric levels).

    With a list ``boundary``, appends per level the total capacity (GB/s, both
    directions) of the edges leaving the level's components (all nodes), by
    ``capacity`` (default ``bw``).  With a list ``per_domain``, appends per
    level an array, shape (domains,), of the capacity (GB/s, one direction:
    outward) of the edges leaving each GPU domain's component.
    """
    capacity = bw if capacity is None else capacity
    values = np.unique(bw)[::-1]  # descending
    n_dev = gpu_idx.size
    levels: list[float] = []
    doms: list[np.ndarray] = []
    prev = None
    for b in values:
        sel = bw >= b
        mat = coo_matrix((np.ones(int(sel.sum())), (src[sel], dst[sel])), shape=(n_nodes, n_nodes))
        _, comp = connected_components(mat, directed=False)
        lab = _canonical_labels(comp[gpu_idx])
        if prev is not None and np.unique(lab).size == np.unique(prev).size:
            continue  # this bandwidth joins no further GPUs
        if prev is None and np.unique(lab).size == n_dev and n_dev > 1:
            continue  # no two GPUs joined at this bandwidth yet: not a level
        levels.append(float(b))
        doms.append(lab)
        if boundary is not None:
            boundary.append(2.0 * float(capacity[comp[src] != comp[dst]].sum()))
        if per_domain is not None:
            per_domain.append(_domain_out_capacity(comp, lab, gpu_idx, src, dst, capacity))
        prev = lab
    return levels, doms


#: Passes of :func:`_domain_out_capacity` (NIC, then PCIe switch, then CPU: three suffice for a host).
ABSORB_PASSES = 6


def _domain_out_capacity(comp, lab, gpu_idx, src, dst, capacity) -> np.ndarray:
    """Outward capacity, GB/s, shape (domains,): the links leaving a node set around each GPU domain.

    Any node set ``X`` holding a domain's GPUs and no other GPU is a valid cut
    for the lower bound (every flow from the domain to a GPU outside crosses
    a link leaving ``X`` outward).  ``X`` starts as the domain's component at
    the level's bandwidth; a component without GPUs (a NIC, a PCIe switch, a
    CPU, a switch) next to exactly one domain joins it when that removes more
    capacity from the cut than it adds (a host's NICs: their GPU links leave,
    their uplinks enter), repeated ``ABSORB_PASSES`` times.  The result is never
    above the component's own cut.
    """
    owner = np.full(int(comp.max()) + 1, -1, dtype=np.int64)
    owner[comp[gpu_idx]] = lab
    cs, cd = comp[src], comp[dst]
    inter = cs != cd
    cs, cd, cap = cs[inter], cd[inter], capacity[inter]
    ends = np.concatenate([cs, cd])  # each edge from both sides: (component, neighbour component, capacity)
    nbrs = np.concatenate([cd, cs])
    caps = np.concatenate([cap, cap])
    for _ in range(ABSORB_PASSES):
        free = owner[ends] < 0
        y, ob, c = ends[free], owner[nbrs[free]], caps[free]
        if y.size == 0:
            break
        big = np.iinfo(np.int64).max
        lo = np.full(owner.size, big, dtype=np.int64)
        hi = np.full(owner.size, -1, dtype=np.int64)
        np.minimum.at(lo, y[ob >= 0], ob[ob >= 0])
        np.maximum.at(hi, y[ob >= 0], ob[ob >= 0])
        to_dom = np.bincount(y[ob >= 0], weights=c[ob >= 0], minlength=owner.size)
        to_rest = np.bincount(y[ob < 0], weights=c[ob < 0], minlength=owner.size)
        take = (owner < 0) & (lo == hi) & (to_dom >= to_rest) & (to_dom > 0)
        if not take.any():
            break
        owner[take] = lo[take]
    oa, ob = owner[cs], owner[cd]
    cut = oa != ob
    out = np.zeros(int(lab.max()) + 1)
    for d in (oa[cut], ob[cut]):
        out += np.bincount(d[d >= 0], weights=cap[cut][d >= 0], minlength=out.size)
    return out


def non_relay_extra(cl, gpu_idx, src, dst, bw, n_nodes) -> dict:
    """Per irregular host, ``1/B' - 1/B`` for its GPU pairs (see ``Cluster.host_extra``).

    ``B'(u, v)`` is the widest path between two GPUs of one host whose interior
    nodes are not GPUs: the better of a direct GPU-GPU edge and
    ``max over non-GPU neighbours x of u, y of v of min(bw(u,x), bw(v,y), U(x,y))``,
    where ``U`` is the widest-path ultrametric of the graph without its GPUs.
    Vectorised over all same-host pairs; no n×n structure.
    """
    is_gpu = np.zeros(n_nodes, dtype=bool)
    is_gpu[gpu_idx] = True
    gpu_pos = np.full(n_nodes, -1, dtype=np.int64)
    gpu_pos[gpu_idx] = np.arange(gpu_idx.size)
    gs, gd = is_gpu[src], is_gpu[dst]
    # direct GPU-GPU edges (keep the widest per pair)
    both = gs & gd
    direct = {}
    for a, b2, w in zip(gpu_pos[src[both]].tolist(), gpu_pos[dst[both]].tolist(), bw[both].tolist()):
        key = (min(a, b2), max(a, b2))
        direct[key] = max(direct.get(key, 0.0), w)
    # GPU -> non-GPU neighbour lists, padded
    one = gs ^ gd
    g_end = np.where(gs[one], src[one], dst[one])
    x_end = np.where(gs[one], dst[one], src[one])
    w_end = bw[one]
    g_of = gpu_pos[g_end]
    n = gpu_idx.size
    deg = np.bincount(g_of, minlength=n)
    if deg.size == 0 or deg.max() == 0:
        dmax = 0
    else:
        dmax = int(deg.max())
    if dmax == 0 and not direct:
        return {}
    order = np.argsort(g_of, kind="stable")
    starts = np.zeros(n, dtype=np.int64)
    starts[1:] = np.cumsum(deg)[:-1]
    slot = np.arange(order.size) - np.repeat(starts, deg)
    nb = np.full((n, max(dmax, 1)), -1, dtype=np.int64)
    nbw = np.zeros((n, max(dmax, 1)))
    nb[g_of[order], slot] = x_end[order]
    nbw[g_of[order], slot] = w_end[order]
    # ultrametric of the non-GPU subgraph, as labels per level
    keep = ~gs & ~gd
    ng_levels = np.unique(bw[keep])[::-1] if keep.any() else np.zeros(0)
    ng_labels = []
    for b in ng_levels:
        sel = keep & (bw >= b)
        mat = coo_matrix((np.ones(int(sel.sum())), (src[sel], dst[sel])), shape=(n_nodes, n_nodes))
        ng_labels.append(connected_components(mat, directed=False)[1])
    # all same-host device pairs
    extra = {}
    for G, hs, D in cl.hosts_by_size():  # D: (H, G) device indices (device order)
        iu, ju = np.triu_indices(G, 1)
        U_, V_ = D[:, iu], D[:, ju]  # (H, P)
        # node-level: devices -> graph nodes
        best = np.zeros(U_.shape)
        for a in range(nb.shape[1]):
            xa, wa = nb[U_, a], nbw[U_, a]
            for b in range(nb.shape[1]):
                yb, wb = nb[V_, b], nbw[V_, b]
                valid = (xa >= 0) & (yb >= 0)
                if not valid.any():
                    continue
                u_bw = np.where(xa == yb, np.inf, 0.0)
                for lvl, lab in zip(ng_levels, ng_labels):
                    same = (lab[np.maximum(xa, 0)] == lab[np.maximum(yb, 0)]) & (u_bw == 0)
                    u_bw = np.where(same, lvl, u_bw)
                path = np.minimum(np.minimum(wa, wb), u_bw)
                best = np.maximum(best, np.where(valid, path, 0.0))
        if direct:
            # direct GPU-GPU edges; ``direct`` is keyed by device index (gpu_idx is in device order)
            dvals = np.array(
                [direct.get((min(p, q), max(p, q)), 0.0) for p, q in zip(U_.ravel().tolist(), V_.ravel().tolist())]
            )
            best = np.maximum(best, dvals.reshape(best.shape))
        ultra = cl.bandwidth_gbps(U_, V_)
        # no path avoiding other GPUs at all (GPUs chained only through GPUs): keep the relayed path
        inv_best = np.where(best > 0, 1.0 / np.where(best > 0, best, 1.0) / 1e9, 0.0)
        inv_ultra = 1.0 / (ultra * 1e9)
        diff = np.where(best > 0, inv_best - inv_ultra, 0.0)
        diff = np.where(diff > inv_ultra * 1e-9, diff, 0.0)
        irregular = np.flatnonzero(diff.max(axis=1) > 0)
        for row in irregular.tolist():
            mat = np.zeros((G, G))
            mat[iu, ju] = diff[row]
            mat[ju, iu] = diff[row]
            extra[int(hs[row])] = mat
    return extra
