"""Free mode: tp groups inside hosts, and whether each host holds one pipeline stage (DESIGN §5).

Used by :mod:`.analytic` (free mode, next to the joint cut and :mod:`.casesplit`).

Setting: every GPU used, hosts of ``G`` GPUs each (the NCCL nodes), ``tp`` dividing ``G``
(``q = G/tp`` tp groups fit in a host), the tp class's parts rings over whole tp groups.  Megatron's
groups are the lines of the rank grid (:mod:`.cutbound`): a tp group fixes the cp, dp and pp
coordinates, a dp group (``DATA_PARALLEL_GROUP_WITH_CP``) the tp and pp ones, so it meets a tp
group of its own pipeline stage in exactly one rank and the others in none; an embedding group
holds the first and the last stage of one pipeline (same tp, cp and dp).  Every free layout (any
order, any bijection) is in one of three cases:

* **B: some tp group spans two hosts or more.**  Its tp floor is
  :func:`~rankmap.solver.bound.casesplit.split_floor_seconds` (some host holds ``≤ tp/2`` of its
  members, so ``≤ max_channels(tp)`` channels of ``fb/c`` between nodes).
* **M: every tp group inside one host, some host holding tp groups of two stages or more.**  Of the
  stages on that host, one has at most ``⌊q/2⌋`` of its tp groups there, so a dp group of that stage
  has between 1 and ``⌊q/2⌋`` members on the host: when dp groups have more than ``⌊q/2⌋`` members it
  spans nodes and runs ``c ≤ m·⌊q/2⌋`` channels (``m`` NICs near one GPU, NCCL: one channel per rail
  of its members on its sparsest node), each crossing nodes with ``fb/c``
  (:func:`~rankmap.solver.bound.casesplit.split_floor_seconds` at ``c``; an all-reduce also the
  least with tree and NVLSTree at ``c`` channels).  Impossible when ``q = 1`` or ``pp = 1``.
* **U: every tp group inside one host, every host holding one stage.**  A dp group has ``≤ q``
  members a host (when it has more: ``c ≤ m·q`` channels, as above).  With ``pp ≥ 2`` every pipeline
  edge joins two hosts: a host of a middle stage (one exists when ``pp ≥ 3``) sends ``2·G`` flows of
  ``fb`` out over its links (``G`` with ``pp = 2``, a host of the first stage), so the busiest takes
  ``≥ 2·G·fb / C_host`` (``C_host``: the most outward capacity of a host, ``domain_out_gbps``);
  every such flow joins two hosts (``≥ fb / R_inter``).  An embedding group's two members sit on two
  hosts, one each: ``c ≤ m`` channels.

Each case: the classes apart with their raised floors and NCCL's latency beyond them; the bound is
``min(B, M, U)``, no joint cut (its work is a few floors, counted as one pass over the parts).
Example (``ft-uniform-64x8`` tp4 ep8 pp4 etp1, GPT 24L/4096; 400G NICs at 48 GB/s, hosts out
384 GB/s): U has dp 32 over ≤ 2 channels, ``2·31/32·1.26 GB / 96 GB/s = 25.5 ms``, pp ``2·8·134 MB /
384 GB/s = 5.6 ms``, embedding ``206 MB / 48 GB/s = 4.3 ms``, tp 13.4 ms: 49.2 ms with NCCL's latency
(the launcher optimum: 49.63 ms); M has dp on 1 channel (50.9 ms), B tp on 2 (50.3 ms): the joint cut
saw 45.1 ms.
"""

from __future__ import annotations

from typing import Mapping

import numpy as np

from ..fabric.cluster import Cluster
from ..megatron.config import ParallelConfig

__all__ = ["channel_floor_seconds", "host_out_gbps", "node_host_gpus", "stage_case_bound"]


def channel_floor_seconds(cluster: Cluster, part, k: int, c: int) -> float:
    """A floor, seconds, on a ring part one of whose ``k``-member groups spans NCCL nodes on ``≤ c`` channels.

    :func:`~rankmap.solver.bound.casesplit.split_floor_seconds` with ``c`` in place of ``max_channels(k)``
    (the ring's ``fb/(c·R)``; an all-reduce: the least with tree and NVLSTree at ``c`` channels).
    """
    from .casesplit import split_floor_seconds

    return split_floor_seconds(cluster, part, k, channels=c)


def node_host_gpus(cluster: Cluster, world_size: int) -> int | None:
    """GPUs per host when the job fills the cluster, every host has as many GPUs and each host is one NCCL
    node (the setting of the host-level cases here and in :mod:`.hostlines`); None otherwise."""
    topo = cluster.nccl_topology
    if topo is None or cluster.num_devices != world_size or not cluster.equal_hosts \
            or not np.array_equal(topo.node_of, cluster.host_of):
        return None
    return int(cluster.gpus_per_host[0])


def host_out_gbps(cluster: Cluster) -> float:
    """The most outward capacity, GB/s, of one host's component (a level of ``cluster.domains`` or
    ``widest_domains`` whose domains are the hosts); 0 when no level is."""
    host = np.asarray(cluster.host_of, dtype=np.int64)
    H = int(host.max()) + 1
    for doms, outs in ((cluster.domains, cluster.domain_out_gbps),
                       (cluster.widest_domains, cluster.widest_domain_out_gbps)):
        for lvl in range(min(doms.shape[0], len(outs))):
            lab = np.asarray(doms[lvl], dtype=np.int64)
            if np.unique(lab).size == H and np.unique(lab * H + host).size == H and outs[lvl].size:
                return float(np.asarray(outs[lvl], dtype=float).max())
    return 0.0


def stage_case_bound(cluster: Cluster, cfg: ParallelConfig, parts: dict, own: dict,
                     exposure: Mapping[str, float] | None = None) -> float:
    """``min(B, M, U)`` of the module doc, seconds, over every free layout of ``cfg``'s sizes; 0 when the
    setting does not hold (then nothing is claimed).

    ``parts``: per class its parts ``(Collective, groups, size)``; ``own``: per class the parts' own
    floors (size terms, valid for every layout), which each case raises.
    """
    from ..traffic import class_group_size
    from .casesplit import split_floor_seconds
    from .ncclterms import RING_KINDS, latency_extra_seconds, max_channels, nics_per_gpu
    from .rates import inter_host_rate_gbps
    from .work import BOUND_PART_SECONDS, charge

    W = cfg.world_size
    G = node_host_gpus(cluster, W)
    if G is None:
        return 0.0
    t = int(cfg.tp)
    tp = parts.get("tp") or []
    if t < 2 or G % t or not tp or any(p.kind not in RING_KINDS or k != t for p, _g, k in tp):
        return 0.0
    q = G // t
    charge(BOUND_PART_SECONDS * sum(len(v) for v in parts.values()))  # three passes over the parts' floors
    m = nics_per_gpu(cluster)
    R = inter_host_rate_gbps(cluster) * 1e9
    pp = int(cfg.pp)
    n_dp = class_group_size("dp", cfg)
    exposure = dict(exposure or {})

    def total(raise_) -> float:
        out = 0.0
        for c, plist in parts.items():
            x = float(exposure.get(c, 1.0))
            if x == 0:
                continue
            for i, (p, _g, k) in enumerate(plist):
                f = max(float(own[c][i]), raise_(c, p, k))
                out += x * (f + latency_extra_seconds(cluster, p.kind, k, f))
        return out

    def dp_floor(p, k, members: int) -> float:  # a dp group (whole) with 1..members on some host
        if members < 1 or k != n_dp or k <= members or p.kind not in RING_KINDS:
            return 0.0
        return channel_floor_seconds(cluster, p, k, min(max_channels(cluster, k), m * members))

    def case_b(c, p, k):
        return split_floor_seconds(cluster, p, k) if c == "tp" else 0.0

    def case_m(c, p, k):
        return dp_floor(p, k, q // 2) if c == "dp" else 0.0

    C = host_out_gbps(cluster) * 1e9

    def case_u(c, p, k):
        from ..cost.timemodel import flow_bytes

        if c == "dp":
            return dp_floor(p, k, q)
        if c == "pp" and pp >= 2 and k == pp and p.kind == "p2p_chain":
            fb = flow_bytes(p.kind, p.payload_bytes, k)
            f = fb / R if R > 0 else 0.0
            if C > 0:
                f = max(f, (2 if pp >= 3 else 1) * G * fb / C)
            return f
        if c == "embedding" and pp >= 2 and k == 2 and p.kind in RING_KINDS:
            return channel_floor_seconds(cluster, p, k, min(max_channels(cluster, k), m))
        return 0.0

    cases = [total(case_b), total(case_u)]
    if q >= 2 and pp >= 2:
        cases.append(total(case_m))
    return float(min(cases))
