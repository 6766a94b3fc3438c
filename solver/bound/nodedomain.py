"""Ring floors where an NCCL node holds several hosts (multi-node NVLink domains: GB200 NVL72 racks).

NCCL treats a multi-node NVLink domain (``nvlink_domain``, an NVL72 rack) as one node
(:func:`~rankmap.solver.fabric.rails.nccl_topology` ``node_of``): a ring group inside one rack
runs as *one* closed ring over NVLink (every ring edge carries ``fb``), even when its members sit
on several hosts (trays); only a group spanning two NCCL nodes runs ``c`` channels of ``fb/c``
between them (:mod:`rankmap.solver.cost.nccl`).  The channel terms of :mod:`.analytic` and
:mod:`.launcher` let a ring edge between two *hosts* carry ``fb/c_max`` at the inter-host rate;
with racks as nodes that lets a 4-member tp group inside a rack look twice as fast as it can be.

Valid floors on a ring flow of ``fb`` bytes between GPUs of different hosts, in any layout:

* both GPUs on one NCCL node: a ring edge of ``fb`` between two hosts of the node, at most the
  inter-host rate ``R_h`` (:func:`~.rates.inter_host_rate_gbps`): ``fb / R_h``;
* on two NCCL nodes: a channel crossing of ``fb/c`` (``c ≤ c_max``,
  :func:`~.ncclterms.max_channels`) between GPUs on different nodes, at most the *inter-node*
  rate ``R_n`` (:func:`inter_node_rate_gbps`: the widest level where two NCCL nodes first share a
  domain, as ``R_h`` for hosts): ``fb / (c_max · R_n)``.

So such a flow takes at least ``min(fb / R_h, fb / (c_max · R_n))`` (:func:`crossing_ring_seconds`).
When every NCCL node is one host, ``R_n = R_h`` and this is ``fb / (c_max · R_h)``, the floor
used before; nothing changes there.  Example (``nvl72_cluster(2)``: 720 GB/s NVLink ring rate,
48 GB/s NIC rate, ``c_max = 2`` for groups of 4): a tp4 all-reduce of 3.22 GB (``fb`` 4.83 GB)
took ``fb / (2 · 720)`` = 3.4 ms against the rack's own edge floor ``fb / 720`` = 6.7 ms; now
``min(6.7, fb / (2 · 48) = 50.3)`` = 6.7 ms.
"""

from __future__ import annotations

import weakref

import numpy as np

from ..fabric.cluster import Cluster

__all__ = ["inter_node_rate_gbps", "crossing_ring_seconds"]

_NODE: "weakref.WeakKeyDictionary[Cluster, float]" = weakref.WeakKeyDictionary()


def inter_node_rate_gbps(cluster: Cluster) -> float:
    """``R_n``, GB/s: the most a flow between GPUs on two different NCCL nodes can get (0 with one node).

    The widest level ``k`` where some domain first holds GPUs of two NCCL nodes; every pair of GPUs on
    different nodes is first joined at level ``≥ k``, so its flow gets at most ``R_{≥k}``
    (:func:`~.rates.suffix_rates`).  Without an NCCL topology the nodes are the hosts
    (:func:`~.rates.inter_host_rate_gbps`).
    """
    got = _NODE.get(cluster)
    if got is not None:
        return got
    from .rates import inter_host_rate_gbps, suffix_rates

    topo = cluster.nccl_topology
    if topo is None:
        out = inter_host_rate_gbps(cluster)
    else:
        node = np.asarray(topo.node_of, dtype=np.int64)
        wl = suffix_rates(cluster)
        wd = cluster.widest_domains
        N = int(node.max(initial=0)) + 1
        out = 0.0
        for k in range(min(wd.shape[0], wl.size)):
            if np.unique(wd[k].astype(np.int64) * N + node).size > np.unique(wd[k]).size:
                out = float(wl[k])
                break
    _NODE[cluster] = out
    return out


def crossing_ring_seconds(cluster: Cluster, fb: float, channels: int) -> float:
    """Floor, seconds, on a ring flow of ``fb`` bytes between GPUs of two different hosts (module doc).

    Parameters
    ----------
    cluster : Cluster
    fb : float
        Bytes of one ring edge of the part (all channels together), ``≥ 0``.
    channels : int
        Most channels the group may run across NCCL nodes (``≥ 1``).

    Returns
    -------
    float
        ``min(fb / R_h, fb / (channels · R_n))`` where an NCCL node holds two hosts, else
        ``fb / (channels · R_h)``; 0 when no two hosts exist (``R_h = 0``).
    """
    from .rates import inter_host_rate_gbps

    rh = inter_host_rate_gbps(cluster) * 1e9
    if rh <= 0 or fb <= 0:
        return 0.0
    c = max(1, int(channels))
    rn = inter_node_rate_gbps(cluster) * 1e9
    if rn >= rh:  # nodes are hosts (or no slower between them)
        return fb / (c * rh)
    t = fb / rh  # inside one node: a ring edge between two of its hosts
    if rn > 0:
        t = min(t, fb / (c * rn))
    return float(t)
