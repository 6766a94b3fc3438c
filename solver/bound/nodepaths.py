"""NCCL's channel paths through one node, enumerated on hosts of uneven links (DESIGN §5; used by :mod:`.nodering`).

A ring group over several NCCL nodes runs ``c`` channels of ``fb/c`` bytes; on a node holding ``κ``
of its members each channel is a path through them whose hops NCCL's search fixes from the members'
order and rails (:func:`~rankmap.solver.cost.ncclflows._node_channels`, the time model's own function).
:mod:`.nodering` bounds those hops by averages (``(κ−1)/κ`` of ``fb`` on some member, over all its
links).  On a host whose GPU pairs differ (NVLink-bridged pairs beside PCIe, a DGX-1 hybrid cube mesh
of single and double NVLinks) the hops land on particular links: with NVLink pairs, a member whose
successor in the node's order is not its pair partner sends most of its channels over PCIe
(``nvpairs-8x8``, dp groups of 8 holding 4 members a host: ``3/4·fb`` on one 32 GB/s PCIe link,
103.6 ms, where the average gave 46 ms).

This module enumerates every way a group can sit on one host: every set of ``κ`` of its GPUs, every
order of them (the members' rank order; rotations give the same cycle, so the first is fixed), and
every channel count ``c`` (the least over the group's nodes of their rails, capped: any value from 1
to this node's own), and runs :func:`~rankmap.solver.cost.ncclflows._node_channels` on a group of two
nodes, this host's GPUs and the same GPUs of a second host of the same kind (only the node's own hops
are read; they depend on its members' order, rails and ``c`` only).  For each case the group takes at
least, per byte of ``fb``:

* ``n_uv / (c · r_uv)`` for every ordered pair of members, ``n_uv`` the channels whose hop goes from
  ``u`` to ``v``: the ``n_uv`` flows of ``fb/c`` take the same routes, so the bottleneck link of the
  pair's ECMP parts carries ``n_uv·fb/(c·p)`` at capacity ``B``, time ``≥ n_uv·fb/(c·p·B) ≥ n_uv·fb /
  (c·r_uv)`` with ``r_uv`` the pair's lone rate (:meth:`~rankmap.solver.fabric.links.Fabric.lone_rates_gbps`);
* ``o_u / (c · P_out)`` for every member ``u``, ``o_u`` its hops to GPUs outside its level-0 domain
  (``widest_domains[0]``): they start on the links its routes to such GPUs of its node take, ``P_out``
  GB/s in all at most (:func:`~.pairsplit.intra_out_gbps`), so one of them carries load/capacity
  ``≥ o_u·fb/(c·P_out)``; likewise all its hops over ``P``, every link its routes to the GPUs of its node
  start on (:func:`~.rates.node_link_gbps`);
* ``1 / (c·R)``: each channel crosses between nodes at most at the inter-host rate ``R``.

The least over the cases with ``κ`` members and ``c ≤ c_hi`` of the larger of those is a floor, per
byte, on every group that holds ``κ`` members on a node of that kind and runs at most ``c_hi``
channels (:func:`split_seconds_per_byte`).  Hosts are grouped by kind (their GPUs' rails, level-0
domains and pair rates, in local order); the floor is the least over kinds.  Applies only to
clusters of equal hosts of at most :data:`PATH_MAX_HOST_GPUS` GPUs whose pair rates differ (on one
switch every hop is alike: :mod:`.nodering`'s average is exact enough), NCCL nodes the hosts, and
only to ``κ`` whose cases number at most :data:`PATH_MAX_CASES`: the channel counts enumerated stop at the
caller's ``c_hi`` (a group whose sparsest node holds few members runs few channels: ``κ = 5`` of a group of 8
on 8-GPU hosts, at most 3 on the other node, 56 subsets x 24 orders x 3 counts).
"""

from __future__ import annotations

import itertools
import math
import weakref

import numpy as np

from ..fabric.cluster import Cluster

__all__ = ["PATH_MAX_HOST_GPUS", "PATH_MAX_CASES", "PATH_KAPPA_SECONDS", "PATH_CASE_SECONDS", "enumerated",
           "split_seconds_per_byte"]

#: Hosts of at most this many GPUs are enumerated.
PATH_MAX_HOST_GPUS = 8
#: A member count ``κ`` is enumerated when its cases (subsets x orders x channel counts up to the caller's
#: ``c_hi``) are at most this many.
PATH_MAX_CASES = 4096
#: Nominal work (:mod:`.work`) of one member count's table: seconds, plus per case enumerated (calibration
#: 2026-12-03, CPU time on the loaded 2-core machine: about 1 ms, then 4-7 µs a case, the ``_node_channels``
#: pass and the per-pair counts; κ = 4 on 8 GPUs, 1,680 cases, 7-10 ms).  Charged every call: the tables are
#: cached per cluster, and a reused cluster must not change the budgets.
PATH_KAPPA_SECONDS, PATH_CASE_SECONDS = 1e-3, 5e-6

_TABLE: "weakref.WeakKeyDictionary[Cluster, dict]" = weakref.WeakKeyDictionary()


def _kinds(cluster: Cluster):
    """Per kind of host: (a host of it, a second host of it or None); None when the module does not apply."""
    c = _TABLE.setdefault(cluster, {})
    if "kinds" in c:
        return c["kinds"]
    out = None
    topo = cluster.nccl_topology
    gph = cluster.gpus_per_host
    if (topo is not None and cluster.equal_hosts and gph.size >= 2 and 2 <= int(gph[0]) <= PATH_MAX_HOST_GPUS
            and np.array_equal(np.asarray(topo.node_of), np.asarray(cluster.host_of))):
        G = int(gph[0])
        rails = np.asarray(topo.rails())
        dom0 = np.asarray(cluster.widest_domains[0], dtype=np.int64)
        fab = cluster.fabric
        ii, jj = np.nonzero(~np.eye(G, dtype=bool))
        sig: dict = {}
        uneven = False
        for h in range(gph.size):
            devs = np.asarray(cluster.host_devices[h], dtype=np.int64)
            rate = np.zeros((G, G))
            rate[ii, jj] = fab.lone_rates_gbps(devs[ii], devs[jj])
            uneven = uneven or float(rate[ii, jj].min()) < float(rate[ii, jj].max())
            _, d0 = np.unique(dom0[devs], return_inverse=True)
            key = (rails[devs].tobytes(), d0.tobytes(), np.round(rate, 9).tobytes())
            sig.setdefault(key, []).append((h, rate))
        if uneven:
            out = [(v[0][0], v[1][0] if len(v) > 1 else None, v[0][1]) for v in sig.values()]
    c["kinds"] = out
    return out


def _caps(cluster: Cluster, kappa: int, c_hi: int) -> int:
    """The channel counts enumerated for ``kappa`` members and at most ``c_hi`` channels: ``1..min(κ·m, c_hi)``."""
    rails = np.asarray(cluster.nccl_topology.rails())
    m = max(1, int((rails >= 0).sum(axis=1).max(initial=1)))
    return max(0, min(kappa * m, int(c_hi)))


def _cases(G: int, kappa: int, caps: int) -> int:
    return math.comb(G, kappa) * math.factorial(kappa - 1) * caps


def _table(cluster: Cluster, kappa: int, cmax: int) -> np.ndarray | None:
    """Per channel count c = 1..cmax (``cmax`` ≤ κ·m): the least over cases of the per-byte floor (seconds per
    byte), inf where no case runs exactly c channels; None when ``κ`` is not enumerated."""
    from ..cost.ncclflows import _node_channels
    from .pairsplit import intra_out_gbps
    from .rates import inter_host_rate_gbps, node_link_gbps

    c = _TABLE.setdefault(cluster, {})
    key = ("k", kappa, cmax)
    if key in c:
        return c[key]
    kinds = _kinds(cluster)
    G = int(cluster.gpus_per_host[0])
    if (not kinds or kappa < 1 or kappa > G or cmax < 1 or _cases(G, kappa, cmax) > PATH_MAX_CASES
            or any(b is None for _a, b, _r in kinds)):
        c[key] = None
        return None
    topo = cluster.nccl_topology
    rails = np.asarray(topo.rails())
    m = max(1, int((rails >= 0).sum(axis=1).max(initial=1)))
    R = inter_host_rate_gbps(cluster) * 1e9
    P_out = intra_out_gbps(cluster)[0] * 1e9
    P_all = node_link_gbps(cluster) * 1e9
    dom0 = np.asarray(cluster.widest_domains[0], dtype=np.int64)
    cmax = min(int(cmax), kappa * m)
    best = np.full(cmax + 1, np.inf)
    rows = np.array([(s[0],) + p for s in itertools.combinations(range(G), kappa)
                     for p in itertools.permutations(s[1:])], dtype=np.int64).reshape(-1, kappa)
    n = rows.shape[0]
    for h, h2, rate in kinds:
        A = np.asarray(cluster.host_devices[h], dtype=np.int64)
        B = np.asarray(cluster.host_devices[h2], dtype=np.int64)
        dev = np.concatenate([A[rows], B[rows]], axis=1)
        block = np.concatenate([np.zeros((n, kappa), np.int64), np.ones((n, kappa), np.int64)], axis=1)
        nodes = np.full(n, 2, dtype=np.int64)
        local = np.full(cluster.num_devices, -1, dtype=np.int64)
        local[A] = np.arange(G)
        rate_bps = rate * 1e9
        _, d0 = np.unique(dom0[A], return_inverse=True)
        for cap in range(1, cmax + 1):
            i_src, i_dst, i_grp, *_rest, ch = _node_channels(dev, block, nodes, rails, cap)
            on_a = local[i_src] >= 0
            ls, ld, g = local[i_src[on_a]], local[i_dst[on_a]], i_grp[on_a]
            val = np.where(R > 0, 1.0 / (ch * R), 0.0) if R > 0 else np.zeros(n)
            if ls.size:
                cnt = np.zeros((n, G * G))
                np.add.at(cnt, (g, ls * G + ld), 1.0)
                r = rate_bps.ravel()
                with np.errstate(divide="ignore", invalid="ignore"):
                    per = np.where(cnt > 0, cnt / np.where(r > 0, r, np.inf)[None, :], 0.0)
                val = np.maximum(val, per.max(axis=1) / ch)
                if P_out > 0:  # a member's hops out of its level-0 domain, over the links they start on
                    out = np.zeros((n, G))
                    np.add.at(out, (g, ls), (d0[ls] != d0[ld]).astype(float))
                    val = np.maximum(val, out.max(axis=1) / (ch * P_out))
                if P_all > 0:  # all its hops, over every link to the GPUs of its node
                    tot = np.zeros((n, G))
                    np.add.at(tot, (g, ls), 1.0)
                    val = np.maximum(val, tot.max(axis=1) / (ch * P_all))
            for cc in np.unique(ch).tolist():
                sel = ch == cc
                best[cc] = min(best[cc], float(val[sel].min()))
    c[key] = best
    return best


def enumerated(cluster: Cluster, kappa: int, c_hi: int) -> bool:
    """Whether :func:`split_seconds_per_byte` may answer for ``kappa`` members and at most ``c_hi`` channels (no
    work charged)."""
    kinds = _kinds(cluster)
    if not kinds or any(b is None for _a, b, _r in kinds):
        return False
    G = int(cluster.gpus_per_host[0])
    caps = _caps(cluster, kappa, c_hi)
    return 1 <= kappa <= G and caps >= 1 and _cases(G, kappa, caps) <= PATH_MAX_CASES


def split_seconds_per_byte(cluster: Cluster, kappa: int, c_hi: int) -> float | None:
    """The least per-byte floor (seconds per byte of ``fb``) of a ring group holding ``kappa`` members on one node
    and running at most ``c_hi`` channels (module doc); None when ``kappa`` is not enumerated (the caller keeps its
    own floor).  Charges :data:`PATH_CASE_SECONDS` per case, every call (the table is cached per cluster)."""
    from .work import charge

    if not enumerated(cluster, kappa, c_hi):
        return None
    kinds = _kinds(cluster)
    G = int(cluster.gpus_per_host[0])
    caps = _caps(cluster, kappa, c_hi)
    charge(len(kinds) * (PATH_KAPPA_SECONDS + PATH_CASE_SECONDS * _cases(G, kappa, caps)))
    t = _table(cluster, kappa, caps)
    if t is None:
        return None
    hi = min(int(c_hi), t.size - 1)
    if hi < 1:
        return None
    v = float(t[1:hi + 1].min())
    return v if np.isfinite(v) else None
