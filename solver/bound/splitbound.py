"""First-hop bound for split all-to-all groups (DESIGN §4–§5; used by :mod:`.analytic`).

In an all-to-all of ``n`` members every member sends one flow of ``fb`` bytes
to each of the other ``n − 1``.  Take any partition of the GPUs into parts
(hosts, NVLink racks, leaves: the levels of the cluster's domains).  A member
whose group has ``s`` members in its own part sends ``s − 1`` flows to GPUs of
its part and ``n − s`` to GPUs outside.  Every byte of a flow crosses one of
the sender's own links first (an attachment or a direct edge), namely one that
a chosen route of the flow starts on (:meth:`~rankmap.solver.fabric.links.Fabric.route_summary`).
Let ``C_in(g)`` be the capacity of ``g``'s links that start some route to a GPU
of its part and ``C_out(g)`` that of the links starting some route out of it
(the two sets may overlap, or hold every link).  The busiest of those links
carries at least the mean, so the member's class time is at least::

    h(s) = max( (s − 1)·fb / C_in,  (n − s)·fb / C_out ),

with ``C_in``, ``C_out`` the largest over GPUs.  A group split into parts of
``s_1 + s_2 + … = n`` members (each at most the largest part's GPU count) takes
at least ``max_i h(s_i)``, so the class takes at least the least of that over
the splits a layout can have; when the parts cannot hold every group whole
(``Σ_D ⌊|D|/n⌋ < groups``) some group is split into two parts or more, and the
least is over those splits only.  On a PCIe host whose GPUs reach each other
at 32 GB/s and the fabric at 25 GB/s, an ep4 group split 2 + 2 over two hosts
sends two of three flows over the NIC: ``h(2) = 2·fb/25``, 1.5× the per-GPU
term ``3·fb/57``; on NVLink racks (900 GB/s inside, 50 GB/s out) that must
split an ep8 group, the smaller half sends at least four flows out.

The capacities come from the routes of every GPU pair, so the term is computed
up to ``SPLIT_EXACT_MAX_DEVICES`` GPUs (beyond: 0, the other terms stand).
"""

from __future__ import annotations

import weakref

import numpy as np

from ..fabric.cluster import Cluster
from .rates import all_pair_first_hops

__all__ = ["SPLIT_EXACT_MAX_DEVICES", "first_hop_capacities", "all_to_all_split_bound", "node_out_gbps",
           "node_split_bound"]

#: The first-hop capacities are computed from all GPU pairs' routes up to this many GPUs (the
#: exact ECMP pass of :mod:`.analytic`, ``ECMP_EXACT_MAX_DEVICES``, routes them once for both).
SPLIT_EXACT_MAX_DEVICES = 512
#: Groups above this many members skip the term (the split search is O(n · part size)).
SPLIT_MAX_GROUP = 1024

_CACHE: "weakref.WeakKeyDictionary[Cluster, list]" = weakref.WeakKeyDictionary()
_NODE_OUT: "weakref.WeakKeyDictionary[Cluster, tuple]" = weakref.WeakKeyDictionary()


def _partitions(cluster: Cluster) -> list[np.ndarray]:
    """Labels of the partitions used: hosts, then every level of ``domains`` and ``widest_domains``."""
    out = [np.asarray(cluster.host_of, dtype=np.int64)]
    for doms in (cluster.domains, cluster.widest_domains):
        if doms is not None:
            out += [np.asarray(doms[k], dtype=np.int64) for k in range(doms.shape[0])]
    seen, uniq = set(), []
    for lab in out:
        key = lab.tobytes()
        if key not in seen:
            seen.add(key)
            uniq.append(lab)
    return uniq


def first_hop_capacities(cluster: Cluster) -> list[tuple[np.ndarray, float, float]]:
    """Per partition: ``(labels (n,), C_in GB/s, C_out GB/s)``, the largest over GPUs (module doc).

    Empty above ``SPLIT_EXACT_MAX_DEVICES`` GPUs.  ``C_in`` is 0 for a partition
    whose parts are single GPUs; ``C_out`` is 0 for the whole cluster.
    """
    got = _CACHE.get(cluster)
    if got is not None:
        return got

    n = cluster.num_devices
    out: list[tuple[np.ndarray, float, float]] = []
    routes = all_pair_first_hops(cluster) if 1 < n <= SPLIT_EXACT_MAX_DEVICES else None
    if routes is not None:
        fab = cluster.fabric
        A = fab.att_node.shape[1]
        att_cap = np.where(fab.att_node >= 0, fab.att_gbps, 0.0)  # (n, A)
        s_all, d_all, att_used, direct = routes
        for lab in _partitions(cluster):
            same = lab[s_all] == lab[d_all]
            caps = []
            for sel in (same, ~same):
                if not sel.any():
                    caps.append(0.0)
                    continue
                used = np.zeros((n, A), dtype=bool)
                np.logical_or.at(used, s_all[sel], att_used[sel])
                cap = (used * att_cap).sum(axis=1)
                d = direct[sel]
                hit = d >= 0
                if hit.any():
                    pairs = np.unique(np.stack([s_all[sel][hit], d[hit]], axis=1), axis=0)
                    cap = cap + np.bincount(pairs[:, 0], weights=fab.direct_gbps[pairs[:, 1]], minlength=n)
                caps.append(float(cap.max()))
            out.append((lab, caps[0], caps[1]))
    _CACHE[cluster] = out
    return out


def _least_split(h: np.ndarray, n: int, largest_part: int, forced: bool) -> float:
    """``min over splits of n into parts of at most largest_part (two or more when forced) of max h(part)``."""
    P = min(largest_part, n - 1 if forced else n)
    if P < 1:
        return 0.0
    best = np.full(n + 1, np.inf)
    best[0] = -np.inf
    for m in range(1, n + 1):
        s = np.arange(1, min(P, m) + 1)
        best[m] = float(np.min(np.maximum(h[s], best[m - s])))
    return max(0.0, float(best[n]))


def all_to_all_split_bound(cluster: Cluster, num_groups: int, n: int, fb: float) -> float:
    """The first-hop bound (module doc), seconds, on an all-to-all part of ``num_groups`` groups of ``n``.

    Parameters
    ----------
    cluster : Cluster
    num_groups, n : int
        Groups of the part and their size (ranks).
    fb : float
        Bytes of one flow (:func:`~rankmap.solver.cost.timemodel.flow_bytes`).

    Returns
    -------
    float
        Seconds; 0 when the term does not apply (``n < 2``, too many GPUs or members).
    """
    if n < 2 or fb <= 0 or num_groups <= 0 or n > SPLIT_MAX_GROUP:
        return 0.0
    best = 0.0
    s = np.arange(n + 1, dtype=float)
    for lab, c_in, c_out in first_hop_capacities(cluster):
        sizes = np.bincount(lab)
        with np.errstate(divide="ignore", invalid="ignore"):
            t_in = np.where(s > 1, (s - 1) * fb / (c_in * 1e9), 0.0)
            t_out = np.where(s < n, (n - s) * fb / (c_out * 1e9), 0.0)
        h = np.maximum(t_in, t_out)
        h[0] = np.inf  # (a part holds at least one member)
        forced = int((sizes // n).sum()) < num_groups
        best = max(best, _least_split(h, n, int(sizes.max()), forced))
    return best


def node_out_gbps(cluster: Cluster) -> tuple[np.ndarray, np.ndarray]:
    """``(NCCL node of each GPU (n,), capacity GB/s of each GPU's links that can start a route out of its
    node (n,))``: its attachments into a tree of the switch forest holding GPUs of several nodes (a
    rack's NVLink switches, a host's own NVSwitch or PCIe tree without NICs hold one node's GPUs and
    are left out), and its direct GPU links to other nodes.  O(n · attachments), any cluster size."""
    got = _NODE_OUT.get(cluster)
    if got is not None:
        return got
    topo = cluster.nccl_topology
    node = np.asarray(topo.node_of if topo is not None else cluster.host_of, dtype=np.int64)
    fab = cluster.fabric
    n = node.size
    cap = np.zeros(n)
    att = fab.att_node
    if att.size and fab.parent.size:
        ok = att >= 0
        root = np.where(ok, fab.anc[np.maximum(att, 0), 0], -1)
        g_idx = np.broadcast_to(np.arange(n)[:, None], att.shape)
        pairs = np.unique(np.stack([root[ok], node[g_idx[ok]]], axis=1), axis=0)
        roots, per = np.unique(pairs[:, 0], return_counts=True)
        multi = np.zeros(int(fab.parent.size), dtype=bool)
        multi[roots[per > 1]] = True
        out = ok & multi[np.maximum(root, 0)]
        cap += np.where(out, fab.att_gbps, 0.0).sum(axis=1)
    if fab.direct_key.size:
        lo, hi = fab.direct_key // n, fab.direct_key % n
        other = node[lo] != node[hi]
        np.add.at(cap, lo[other], fab.direct_gbps[other])
        np.add.at(cap, hi[other], fab.direct_gbps[other])
    _NODE_OUT[cluster] = (node, cap)
    return node, cap


def node_split_bound(cluster: Cluster, num_groups: int, n: int, fb: float) -> float:
    """A bound, seconds, on an all-to-all part whose groups cannot all fit inside NCCL nodes, any cluster size.

    When ``Σ_node ⌊m/n⌋ < groups`` some group has members on several nodes; a node holding ``s < n``
    of them exchanges ``s·(n − s)`` flows of ``fb`` each way with the others.  NCCL's PXN relays a
    flow through a member of the group on the sender's node (:func:`rankmap.solver.cost.nccl.pxn_relay`),
    so they all leave through links of those ``s`` members that lead out of the node
    (:func:`node_out_gbps`, at most ``C`` GB/s each): the busiest carries ``≥ (n − s)·fb / C``.  The
    least over splits into two or more parts of that per part's maximum (``⌈n/2⌉·fb / C`` when the
    nodes are large): GB200 NVL72 racks that must split an ep8 group send ≥ 4 flows per NIC.
    0 when the groups fit (or ``n < 2``).
    """
    if n < 2 or fb <= 0 or num_groups <= 0 or n > SPLIT_MAX_GROUP:
        return 0.0
    node, cap = node_out_gbps(cluster)
    sizes = np.bincount(node)
    sizes = sizes[sizes > 0]
    c_out = float(cap.max(initial=0.0))
    if int((sizes // n).sum()) >= num_groups or c_out <= 0:
        return 0.0
    s = np.arange(n + 1, dtype=float)
    h = np.where(s < n, (n - s) * fb / (c_out * 1e9), 0.0)
    h[0] = np.inf
    return _least_split(h, n, int(sizes.max()), True)
