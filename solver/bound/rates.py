"""Rates of single flows over the fabric (DESIGN §4), the lower bounds' building blocks.

``R_j`` is the most a single flow between GPUs first joined at widest level ``j`` gets (ECMP
parts times route bottleneck, :func:`level_rates_gbps`), ``R_{≥j} = max_{i≥j} R_i``
(:func:`suffix_rates`), the inter-host rate, every GPU pair's first hops and each GPU's
outgoing capacity; see :mod:`.analytic` for how the bounds use them.
"""

from __future__ import annotations

import weakref

import numpy as np

from ..fabric.cluster import Cluster

__all__ = ["pair_route_seconds", "ecmp_parts", "level_rates_gbps", "suffix_rates", "inter_host_rate_gbps", "all_pair_first_hops",
           "node_link_gbps", "out_cap_per_gpu", "ECMP_EXACT_MAX_DEVICES"]

#: ECMP parts are counted exactly over every GPU pair up to this many GPUs (routes in bulk).
ECMP_EXACT_MAX_DEVICES = 512

_ECMP: "weakref.WeakKeyDictionary[Cluster, int]" = weakref.WeakKeyDictionary()


def ecmp_parts(cluster: Cluster) -> int:
    """Largest number of equal-width, equal-hop route parts of any GPU pair (``P`` of the module doc).

    Exact (every ordered pair routed in bulk with the fabric's own route
    choice) up to ``ECMP_EXACT_MAX_DEVICES`` GPUs; above, the count of route
    options ``A² + 1`` (A = most attachments of a GPU), or 1 when every GPU
    has one attachment and there is no GPU-GPU link (a single option).
    """
    return _pair_rates(cluster)[0]


def pair_route_seconds(cluster: Cluster) -> float:
    """Nominal seconds of the exact ECMP pass over every ordered GPU pair (:data:`.work.PAIR_ROUTE_SECONDS`
    per pair and route option ``A_slots² + 1``); 0 above ``ECMP_EXACT_MAX_DEVICES`` GPUs (not computed)."""
    from .work import PAIR_ROUTE_SECONDS

    n = cluster.num_devices
    if n <= 1 or n > ECMP_EXACT_MAX_DEVICES:
        return 0.0
    A = int(cluster.fabric.att_node.shape[1])
    return PAIR_ROUTE_SECONDS * n * (n - 1) * (A * A + 1)


def level_rates_gbps(cluster: Cluster) -> np.ndarray:
    """``R[j]``, GB/s, shape (K',): the most a single flow between GPUs first joined at widest level j gets.

    A flow split in ``p`` ECMP parts over routes of bottleneck ``B`` has
    per-flow time ``bytes / (p·B)``, and its parts leaving over one attachment
    of its GPU share that link, so ``R[j]`` is the largest
    :meth:`~rankmap.solver.fabric.links.Fabric.lone_rates_gbps` over such pairs
    (exact up to ``ECMP_EXACT_MAX_DEVICES`` GPUs; above, ``P·b_j``).  A flow
    between GPUs first joined at level ≥ j takes at least
    ``bytes / max_{i≥j} R[i]`` (:func:`suffix_rates`).
    """
    return _pair_rates(cluster)[1]


_INTER: "weakref.WeakKeyDictionary[Cluster, float]" = weakref.WeakKeyDictionary()


def suffix_rates(cluster: Cluster) -> np.ndarray:
    """``max_{i ≥ j} R[i]`` for each widest level j, GB/s."""
    R = level_rates_gbps(cluster)
    return np.maximum.accumulate(R[::-1])[::-1]


def inter_host_rate_gbps(cluster: Cluster) -> float:
    """``R_{≥h}``, GB/s: the most a flow between two hosts can get (h: the widest level where two hosts
    first share a domain); 0 with one host."""
    got = _INTER.get(cluster)
    if got is not None:
        return got
    wl = suffix_rates(cluster)
    wd = cluster.widest_domains
    H = len(cluster.hosts)
    out = 0.0
    for k in range(wd.shape[0]):
        if np.unique(wd[k] * H + cluster.host_of).size > np.unique(wd[k]).size:
            out = float(wl[k])
            break
    _INTER[cluster] = out  # a cluster's levels do not change: computed once (the bound asks per order and part)
    return out


def _pair_rates(cluster: Cluster):
    got = _ECMP.get(cluster)
    if got is not None:
        return got[:2]
    fab = cluster.fabric
    n = cluster.num_devices
    wd = cluster.widest_domains
    b = np.asarray(cluster.widest_levels_gbps, dtype=float)
    A = int((fab.att_node >= 0).sum(axis=1).max()) if fab.att_node.size else 0
    hops = None
    if n <= 1:
        p, R = 1, b.copy()
    elif n <= ECMP_EXACT_MAX_DEVICES:
        p = 1
        R = np.zeros(b.size)
        s_all = np.repeat(np.arange(n), n)
        d_all = np.tile(np.arange(n), n)
        keep = s_all != d_all
        s_all, d_all = s_all[keep], d_all[keep]
        att_used = np.zeros((s_all.size, fab.att_node.shape[1]), dtype=bool)
        direct = np.full(s_all.size, -1, dtype=np.int64)
        step = 1 << 16
        for lo in range(0, s_all.size, step):
            s, d = s_all[lo:lo + step], d_all[lo:lo + step]
            parts, rate, att_used[lo:lo + step], direct[lo:lo + step] = fab.route_summary(s, d)
            p = max(p, int(parts.max()))
            lvl = np.argmax(wd[:, s] == wd[:, d], axis=0)  # first level joining the pair
            np.maximum.at(R, lvl, rate)
        R = np.where(R > 0, R, b)  # a level no pair is first joined at: its widest bandwidth (never used)
        hops = (s_all, d_all, att_used, direct)
    else:
        p = 1 if (A <= 1 and fab.direct_key.size == 0) else A * A + 1
        # merged ECMP twins (node "a|b|…") carry k × the narrowest twin's link: a route's
        # bottleneck is at most k_max × the graph's widest path
        k_max = max((name.count("|") + 1 for name in fab.node_names), default=1)
        R = p * k_max * b
        # a flow between two hosts is no faster than its sender's links that lead out of its host
        # (cross_host_rate_gbps): the levels whose pairs are always on two hosts
        cross = cross_host_rate_gbps(cluster)
        H = int(np.max(cluster.host_of, initial=0)) + 1
        for j in range(1, b.size):
            K = int(wd[j - 1].max(initial=0)) + 1
            if np.unique(np.asarray(cluster.host_of, dtype=np.int64) * K + wd[j - 1]).size == H:
                R[j] = min(R[j], cross)  # every host inside one level-(j−1) domain: a pair first joined at j spans two
    _ECMP[cluster] = (p, R, hops)
    return p, R


def all_pair_first_hops(cluster: Cluster):
    """``(src, dst, att_used, direct)`` of every ordered GPU pair's routes (:meth:`Fabric.route_summary`),
    from the same routing pass as the exact ECMP rates; None above ``ECMP_EXACT_MAX_DEVICES`` GPUs."""
    _pair_rates(cluster)
    return _ECMP[cluster][2]


_NODE_LINK: "weakref.WeakKeyDictionary[Cluster, float]" = weakref.WeakKeyDictionary()


def node_link_gbps(cluster: Cluster) -> float:
    """``P``, GB/s: the most capacity of one GPU's links that its routes to the other GPUs of its NCCL node start
    on (attachments and direct links, each counted once); 0 when no node holds two GPUs or above
    ``ECMP_EXACT_MAX_DEVICES`` GPUs (no pair routed: unknown, callers skip their term).  Used by
    :mod:`.nodering` and :mod:`.nodepaths`."""
    if cluster in _NODE_LINK:
        return _NODE_LINK[cluster]
    P = 0.0
    hops = all_pair_first_hops(cluster)
    topo = cluster.nccl_topology
    if hops is not None and topo is not None:
        s, d, att, direct = hops
        node = np.asarray(topo.node_of, dtype=np.int64)
        fab = cluster.fabric
        n = cluster.num_devices
        sel = node[s] == node[d]
        if sel.any():
            used = np.zeros((n, att.shape[1]), dtype=bool)
            np.logical_or.at(used, s[sel], att[sel])
            cap = np.where(used & (fab.att_node >= 0), fab.att_gbps, 0.0).sum(axis=1)
            dl = direct[sel]
            if (dl >= 0).any():
                ok = dl >= 0
                K = max(int(fab.direct_key.size), 1)
                pairs = np.unique(s[sel][ok] * K + dl[ok])
                src, link = np.divmod(pairs, K)
                cap = cap + np.bincount(src, weights=fab.direct_gbps[link], minlength=n)
            P = float(cap.max())
    _NODE_LINK[cluster] = P
    return P


def cross_host_rate_gbps(cluster: Cluster) -> float:
    """The most a single flow between GPUs of two hosts gets alone, GB/s (an upper bound, no pair routed).

    A route leaves its sender over one of its attachments into the switch forest (or a direct link to
    the receiver) and :meth:`~rankmap.solver.fabric.links.Fabric.lone_rates_gbps` gives a flow of ``p``
    parts, ``c_i`` of them over attachment ``i``, at most ``cap_i · p / c_i``: so the rate is at most
    ``Σ cap_i`` over the attachments its parts use (``rate · c_i / p ≤ cap_i``, summed; a direct part
    adds at most its link).  A route to another host only uses an attachment whose forest tree also
    holds an attachment of some GPU of another host (a host's NVSwitch, on its own tree, does not),
    so the rate is at most the largest such sum over GPUs, plus their direct links to other hosts.
    """
    fab = cluster.fabric
    host = np.asarray(cluster.host_of, dtype=np.int64)
    att = fab.att_node
    if att.size == 0 or fab.parent.size == 0:
        return np.inf
    ok = att >= 0
    root = np.where(ok, fab.anc[np.maximum(att, 0), 0], -1)
    # trees holding attachments of two hosts or more
    r, h = root[ok], np.broadcast_to(host[:, None], att.shape)[ok]
    pairs = np.unique(r * (int(host.max()) + 1) + h)
    multi = np.flatnonzero(np.bincount(pairs // (int(host.max()) + 1)) >= 2)
    leads = ok & np.isin(root, multi)
    out = np.where(leads, fab.att_gbps, 0.0).sum(axis=1)
    if fab.direct_key.size:
        n = att.shape[0]
        lo, hi = np.divmod(fab.direct_key, n)
        x = host[lo] != host[hi]
        out = out + np.bincount(lo[x], weights=fab.direct_gbps[x], minlength=n) + np.bincount(
            hi[x], weights=fab.direct_gbps[x], minlength=n)
    return float(out.max(initial=0.0))


def out_cap_per_gpu(cluster: Cluster) -> np.ndarray:
    fab = cluster.fabric
    out_cap = np.where(fab.att_node >= 0, fab.att_gbps, 0.0).sum(axis=1)
    if fab.direct_key.size:
        nd = fab.att_node.shape[0]
        lo, hi = np.divmod(fab.direct_key, nd)
        out_cap = out_cap + np.bincount(lo, weights=fab.direct_gbps, minlength=nd) + np.bincount(
            hi, weights=fab.direct_gbps, minlength=nd)
    return out_cap
