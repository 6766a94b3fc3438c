"""Launcher terms of the lower bound: one order's host blocks (DESIGN §5; used by :mod:`.analytic`).

In launcher mode ranks ``[bG, (b+1)G)`` run on one host, so for a given order it is known
which flows stay inside a host and which cross between hosts, how many members of a group
share a host (NCCL's channels) and whether a ring stays inside one host.  The terms
(inter-host flow, packing, block cut, host egress, the in-host ring) are derived in
:mod:`.analytic`'s module doc; :func:`~.analytic.search_lower_bound` takes the least over the
searched orders of their sums.
"""

from __future__ import annotations

import numpy as np
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components

from ..fabric.cluster import Cluster
from .ncclterms import all_reduce_floor_seconds, max_channels, tree_may_run
from .rates import inter_host_rate_gbps, suffix_rates
from .ringrate import RING_KINDS

__all__ = ["launcher_part_bound", "in_host_ring_floor", "launcher_nodes",
           "EXACT_CUT_MAX_BLOCKS", "EXACT_CUT_MAX_SHAPES", "LAUNCHER_MAX_FLOWS"]

#: Components of the block graph up to this many blocks get their exact minimum cut (2^c subsets).
EXACT_CUT_MAX_BLOCKS = 12
#: At most this many distinct component shapes get the exact cut (the rest: their smallest flow).
EXACT_CUT_MAX_SHAPES = 32
#: Parts with more flows than this skip the launcher terms (all-to-all at scale).
LAUNCHER_MAX_FLOWS = 1 << 22


def _subset_sums(sizes: np.ndarray, limit: int) -> int:
    """Bitset (Python int) of every sum ≤ ``limit`` of a sub-multiset of ``sizes``."""
    vals, counts = np.unique(sizes, return_counts=True)
    bits = 1
    mask = (1 << (limit + 1)) - 1
    for v, c in zip(vals.tolist(), counts.tolist()):
        k = 1
        while c > 0:  # binary splitting of the count
            t = min(k, c)
            bits = (bits | (bits << (v * t))) & mask
            c -= t
            k <<= 1
    return bits


def _min_cut_exact(c: int, i: np.ndarray, j: np.ndarray, w: np.ndarray) -> float:
    """Least bytes from X to the rest over proper non-empty subsets X of ``c`` blocks (edges i -> j of w bytes)."""
    W = np.zeros((c, c))
    np.add.at(W, (i, j), w)
    masks = ((np.arange(1, (1 << c) - 1)[:, None] >> np.arange(c)[None, :]) & 1).astype(bool)
    out = ((masks.astype(float) @ W) * ~masks).sum(axis=1)
    return float(out.min())


def _host_levels(cluster: Cluster, doms: np.ndarray):
    """Levels of ``doms`` made of whole hosts: yields (level, host count per domain (D,), label per host (H,))."""
    first = cluster.first_device
    for k in range(doms.shape[0]):
        lab_h = doms[k][first]
        if np.array_equal(doms[k], lab_h[cluster.host_of]):
            yield k, np.bincount(lab_h), lab_h


def launcher_nodes(cluster: Cluster, part, groups: np.ndarray) -> int | None:
    """NCCL nodes the part's groups span at most, the same in every launcher layout of this order (blocks of
    G ranks are whole hosts, and NCCL's nodes are the hosts); None when that does not hold."""
    from ..traffic import subgroups

    gph = cluster.gpus_per_host
    topo = cluster.nccl_topology
    if gph.size == 0 or np.unique(gph).size != 1 or topo is None or not np.array_equal(topo.node_of, cluster.host_of):
        return None
    sub = np.sort(subgroups(np.sort(np.asarray(groups, dtype=np.int64), axis=1), part) // int(gph[0]), axis=1)
    if sub.ndim != 2 or sub.size == 0:
        return None
    return int((1 + (sub[:, 1:] != sub[:, :-1]).sum(axis=1)).max())


def launcher_part_bound(cluster: Cluster, part, groups: np.ndarray) -> float:
    """Launcher terms (module doc) of one part for one order, seconds.

    Parameters
    ----------
    part : Collective
    groups : numpy.ndarray of int, shape (g, n)
        The class's groups for the order (``rank_offset`` removed).

    Returns
    -------
    float
        ``max(inter-host flow, packing, block cut, host egress)``; 0 when
        the hosts are uneven or the part is too large to analyse.
    """
    from ..cost.timemodel import part_flows

    gph = cluster.gpus_per_host
    if not cluster.equal_hosts:
        return 0.0
    G = int(gph[0])
    H = gph.size
    batches = list(part_flows(part, groups))
    if not batches or sum(f[0].size for f in batches) > LAUNCHER_MAX_FLOWS:
        return 0.0
    src = np.concatenate([f[0] for f in batches]) // G
    dst = np.concatenate([f[1] for f in batches]) // G
    fb = np.concatenate([np.full(f[0].size, float(f[2])) for f in batches])
    inter = src != dst
    if not inter.any():
        return 0.0
    src, dst, fb = src[inter], dst[inter], fb[inter]
    if part.kind == "all_reduce" and tree_may_run(cluster):  # tree / NVLSTree send S across hosts, ring fb ≥ S
        fb = np.minimum(fb, float(part.payload_bytes))
    chans = max_channels(cluster, groups.shape[1]) if part.kind in RING_KINDS else 1
    topo = cluster.nccl_topology
    if chans > 1 and topo is not None and np.array_equal(topo.node_of, cluster.host_of):
        # NCCL nodes are the hosts (blocks of G ranks): a group's channels are at most its fewest
        # members on one of its hosts; the class is as slow as its slowest spanning group
        from ..traffic import subgroups

        sub = subgroups(np.sort(np.asarray(groups, dtype=np.int64), axis=1), part) // G
        brk = np.diff(np.sort(sub, axis=1), axis=1) != 0
        span = brk.any(axis=1)
        if span.any():
            s2 = np.sort(sub[span], axis=1)
            k = s2.shape[1]
            starts = np.concatenate([np.ones((s2.shape[0], 1), dtype=bool), s2[:, 1:] != s2[:, :-1]], axis=1)
            run_id = np.cumsum(starts, axis=1) - 1
            rows = np.repeat(np.arange(s2.shape[0]), k)
            counts = np.zeros((s2.shape[0], k), dtype=np.int64)
            np.add.at(counts, (rows, run_id.ravel()), 1)
            fewest = np.where(counts > 0, counts, k + 1).min(axis=1)
            chans = int(min(chans, int(fewest.min())))
    fb_min = float(fb.min()) / chans
    best = 0.0
    # inter-host flow: at most the rate of the widest level where two hosts first share a domain
    wl = suffix_rates(cluster) * 1e9
    wd = cluster.widest_domains
    from .nodedomain import crossing_ring_seconds

    best = max(best, crossing_ring_seconds(cluster, float(fb.max()), chans))  # channels only across NCCL nodes
    # block graph components
    mat = coo_matrix((np.ones(src.size), (src, dst)), shape=(H, H))
    ncomp, comp = connected_components(mat, directed=False)
    csize = np.bincount(comp, minlength=ncomp)
    # packing at whole-host widest levels
    multi = np.sort(csize[csize >= 2])[::-1]
    if multi.size:
        for k, hosts_per_dom, _lab in _host_levels(cluster, wd):
            if k + 1 >= wl.size:
                break
            for s in np.unique(multi):
                if int((multi >= s).sum()) > int((hosts_per_dom // s).sum()):
                    best = max(best, fb_min / wl[k + 1])
                    break
    # least outward bytes of a split component
    lam = np.inf
    ec = comp[src]
    order = np.argsort(ec, kind="stable")
    starts = np.searchsorted(ec[order], np.arange(ncomp + 1))
    cache: dict = {}
    by_comp = np.argsort(comp, kind="stable")  # hosts of each component, ascending (one sort, not one scan each)
    comp_start = np.searchsorted(comp[by_comp], np.arange(ncomp + 1))
    for q in np.flatnonzero(csize >= 2):
        sel = order[starts[q]:starts[q + 1]]
        c = int(csize[q])
        if c > EXACT_CUT_MAX_BLOCKS or len(cache) >= EXACT_CUT_MAX_SHAPES:
            lam = min(lam, float(fb[sel].min()))
            continue
        members = by_comp[comp_start[q]:comp_start[q + 1]]
        ii = np.searchsorted(members, src[sel])
        jj = np.searchsorted(members, dst[sel])
        key = (c, ii.tobytes(), jj.tobytes(), fb[sel].tobytes())
        if key not in cache:
            cache[key] = _min_cut_exact(c, ii, jj, fb[sel])
        lam = min(lam, cache[key])
    out_b = np.bincount(src, weights=fb, minlength=H)
    for doms, outs in ((cluster.widest_domains, cluster.widest_domain_out_gbps),
                       (cluster.domains, cluster.domain_out_gbps)):
        for k, hosts_per_dom, _lab in _host_levels(cluster, doms):
            if k >= len(outs) or outs[k].size != hosts_per_dom.size:
                continue
            cap = outs[k] * 1e9
            if hosts_per_dom.max() == 1 and cap.max() > 0:
                best = max(best, float(out_b.max()) / float(cap.max()))  # host egress
            if np.isfinite(lam):
                sums = _subset_sums(csize, H)
                vals, inv = np.unique(hosts_per_dom, return_inverse=True)  # few distinct domain sizes
                reach = np.array([(sums >> int(m)) & 1 for m in vals], dtype=bool)[np.asarray(inv).ravel()]
                ok = ~reach & (cap > 0)
                if ok.any():
                    best = max(best, float((lam / cap[ok]).max()))
    return best


def in_host_ring_floor(cluster: Cluster, part, groups: np.ndarray) -> float:
    """A floor, seconds, on a ring part whose groups all lie inside one host in a launcher order, else 0.

    In launcher mode ranks ``[bG, (b+1)G)`` run on one host; when every group of the part holds
    ranks of one block, every layout runs it as a one-node ring of ``k ≥ 3`` GPUs inside a host
    (``fb`` per edge, no channels across hosts), no faster than the best such ring
    (:func:`~.ringrate.host_ring_rate_gbps`): ``fb / ring rate``; an all-reduce the least of that
    and the other algorithms' floors (NVLS inside a node).  0 for groups of two (one pair: the
    widest-pair floor stands), uneven hosts, or groups that span hosts.
    """
    from ..cost.timemodel import flow_bytes
    from ..traffic import subgroups
    from .ringrate import host_ring_rate_gbps

    k = int(part.size or groups.shape[1])
    if part.kind not in RING_KINDS or k < 3 or not cluster.equal_hosts:
        return 0.0
    G = int(cluster.gpus_per_host[0])
    sub = subgroups(np.sort(np.asarray(groups, dtype=np.int64), axis=1), part) // G
    if sub.ndim != 2 or sub.shape[1] != k or np.any(sub != sub[:, :1]):
        return 0.0
    rate = host_ring_rate_gbps(cluster, k)
    if not rate:
        return 0.0
    fb = flow_bytes(part.kind, part.payload_bytes, k)
    t = fb / (float(rate) * 1e9)
    if part.kind == "all_reduce":
        t = all_reduce_floor_seconds(cluster, k, part.payload_bytes, fb, t)
    return t
