"""Free mode, split on whether the tensor-parallel groups fill their hosts (DESIGN §5; used by :mod:`.analytic`).

When every host has ``G`` GPUs, the NCCL nodes are the hosts and the tp groups have ``G``
members, every free layout (any order, any bijection) is in one of two cases:

* **A: every tp group lies inside one host.**  Then each host holds exactly one tp group, and
  the layout is a launcher layout of any order whose tp groups are the blocks of ``G``
  consecutive ranks (``tp`` innermost): a launcher layout of such an order puts block ``b`` on
  some host with some local order, and as blocks are exactly the tp groups every assignment of
  tp groups to hosts is one.  The launcher bound of those orders
  (:func:`~rankmap.solver.bound.analytic.search_lower_bound`, mode ``launcher``: per order the
  block graph's cuts, inter-host flows and packings) bounds case A.
* **B: some tp group spans two hosts or more.**  Some host holds at most ``G/2`` of its members,
  so the group runs at most ``c = max_channels(k)`` NCCL channels (one per rail of its members
  there, ``⌊k/2⌋`` times the NICs near one GPU; :func:`~rankmap.solver.bound.ncclterms.max_channels`),
  each crossing between nodes with ``fb/c`` bytes at most at the inter-host rate ``R``: the ring
  takes ``≥ fb/(c·R)``; NVLS needs every group on one node (the part's algorithm is one for all its
  groups), tree and NVLSTree are no faster than their bus caps at ``c`` channels and their chain
  flows of ``S/c`` (:func:`split_floor_seconds`).  The tp parts' own floors raised to that, the
  rest of the bound (classes apart, then jointly: :func:`~rankmap.solver.bound.cutbound.joint_cut_bound`,
  NCCL's latency beyond each floor) bounds case B.

The free bound is then at least ``min(A, B)``; ``B`` is at least the joint bound without the split
(the same with some floors raised), so when ``B ≤ A`` that one is not needed.  Which of them are
computed is a matter of work (:data:`JOINT_FIRST_RANKS`): up to 512 ranks the joint bound first, A
next, B only when A is 0.5% to 25% above it; e.g. ``ft-uniform-16x8`` tp8 pp4: joint 40.76 ms,
A 43.37 ms (the launcher optimum), B 44.60 ms, so 43.37 ms, +96 ms of counted work.
Example (``frag-2lvl-1024x8``, tp8 pp8, 8-GPU
hosts, 50 GB/s NICs): keeping tp inside hosts leaves each data-parallel group one member per host,
one channel (the launcher bound, 28.5 ms); splitting a tp group costs ``2·7/8·1.61 GB /
(4 · 50 GB/s) = 14.1 ms`` for tp alone (B: 26.2 ms); the one-host-at-a-time joint bound saw 24.8 ms.
"""

from __future__ import annotations

from typing import Callable, Mapping

import numpy as np

from ..fabric.cluster import Cluster
from ..megatron.catalogue import megatron_groups
from ..megatron.config import ParallelConfig

__all__ = ["split_floor_seconds", "tp_case_bound", "CASE_SPLIT_RANKS", "CASE_SPLIT_RATIO", "CASE_SPLIT_MIN_GAIN",
           "JOINT_FIRST_RANKS"]

#: World sizes (exclusive, inclusive) where free mode's bound takes the case split: up to 16,384 (the
#: launcher bound it adds grows with W).
CASE_SPLIT_RANKS = (0, 16384)
#: Up to this many ranks the joint bound without the split is computed first (a joint cut there takes tens
#: to hundreds of ms of counted work) and case B only when ``(1 + CASE_SPLIT_MIN_GAIN)·joint < A ≤
#: CASE_SPLIT_RATIO·joint``: below, min(A, B) ≤ A adds (next to) nothing; above, the best layouts split tp
#: and B sits on the joint bound (frag-*, pcie-8x8, dgx1-hcm-4x8 tp8 on the quality set).  A heuristic on
#: which work is done, not on validity.  Above it, B first (it is at least that joint bound).
JOINT_FIRST_RANKS = 512
CASE_SPLIT_RATIO = 1.25
CASE_SPLIT_MIN_GAIN = 0.005


def split_floor_seconds(cluster: Cluster, part, k: int, channels: int | None = None) -> float:
    """A floor, seconds, on a ring part some of whose ``k``-member groups spans two NCCL nodes (module doc, B).

    ``channels``: the most channels that group can run when known to be fewer (default ``max_channels(k)``).
    """
    from ..cost.nccl import NVLS_MAX_HEADS, nvlstree_bus_gbps, tree_bus_gbps
    from ..cost.timemodel import flow_bytes
    from .ncclterms import max_channels
    from .rates import inter_host_rate_gbps

    fb = flow_bytes(part.kind, part.payload_bytes, k)
    r = inter_host_rate_gbps(cluster) * 1e9
    if fb <= 0 or r <= 0:
        return 0.0
    c = max_channels(cluster, k) if channels is None else max(1, int(channels))
    best = fb / (c * r)
    topo = cluster.nccl_topology
    if part.kind != "all_reduce" or topo is None or topo.arch is None:
        return best
    S = float(part.payload_bytes)
    chain = S / (c * r)  # tree / NVLSTree: S per node boundary over c rail-aligned channels
    nvl = float(topo.nvlink_gbps.max(initial=0.0))
    nic = float(topo.nic_gbps.max(initial=0.0))
    bus = max((nvlstree_bus_gbps(h, 2, c, nvl, nic, topo.arch) for h in range(2, NVLS_MAX_HEADS + 1)), default=0.0)
    if bus > 0:
        best = min(best, max(fb / (bus * 1e9), chain))
    bus = tree_bus_gbps(2, c, nic, topo.arch)
    if bus > 0:
        best = min(best, max(2.0 * S / (bus * 1e9), chain))
    return best


def _tp_first_orders(cfg0: ParallelConfig, G: int) -> list[ParallelConfig]:
    """The orders whose tp groups are the blocks of ``G`` consecutive ranks."""
    from ..traffic import CLASS_GROUP
    from .. megatron.orders import candidate_orders

    blocks = np.arange(cfg0.world_size, dtype=np.int64).reshape(-1, G)
    out = []
    for ocfg in candidate_orders(cfg0, "all"):
        arr = np.sort(np.asarray(megatron_groups(ocfg)[CLASS_GROUP["tp"]]) - ocfg.rank_offset, axis=1)
        if arr.shape == blocks.shape and np.array_equal(arr[np.argsort(arr[:, 0])], blocks):
            out.append(ocfg)
    return out


def tp_case_bound(cluster: Cluster, cfg0: ParallelConfig, traffic: Mapping[str, float],
                  exposure: Mapping[str, float], parts: dict, own: dict, plain: float,
                  plain_joint: Callable[[], float],
                  launcher_bound: Callable[[list[ParallelConfig]], float]) -> float | None:
    """``max(plain, plain joint bound, min(A, B))`` (module doc), seconds; None when the split does not apply.

    ``parts``: per class its parts ``(Collective, groups, size)``; ``own``: per class the parts'
    own floors (the size terms); ``plain``: the classes apart (their floors and latency);
    ``plain_joint()``: the joint bound over the size terms, computed first up to
    :data:`JOINT_FIRST_RANKS` ranks, above only when ``A < B`` (``B`` is at least it: the same joint
    bound with some floors raised, and latency nondecreasing in them); ``launcher_bound(orders,
    joint=True)``: the launcher-mode bound over ``orders`` with these size terms
    (:func:`~rankmap.solver.bound.analytic.search_lower_bound` with ``plain``; ``joint=False``: without
    each order's own joint cut, at most the bound with it; passed in, so this module does not import
    the one that calls it).
    """
    from ..traffic import class_group_size
    from .cutbound import joint_cut_bound
    from .ncclterms import RING_KINDS, latency_extra_seconds
    from .work import BOUND_PART_SECONDS, charge

    W = cfg0.world_size
    topo = cluster.nccl_topology
    if not (CASE_SPLIT_RANKS[0] < W <= CASE_SPLIT_RANKS[1]) or not cluster.equal_hosts or topo is None \
            or not np.array_equal(topo.node_of, cluster.host_of) or cluster.num_devices != W:
        return None
    G = int(cluster.gpus_per_host[0])
    tp = parts.get("tp") or []
    x_tp = float(exposure.get("tp", 1.0))
    if G < 2 or class_group_size("tp", cfg0) != G or x_tp <= 0 or not tp \
            or any(p.kind not in RING_KINDS or k != G for p, _g, k in tp):
        return None
    orders = _tp_first_orders(cfg0, G)
    if not orders:
        return None
    charge(BOUND_PART_SECONDS * len(tp))
    raised = [max(f, split_floor_seconds(cluster, p, k)) for f, (p, _g, k) in zip(own["tp"], tp)]
    rise = x_tp * sum(r - f + latency_extra_seconds(cluster, p.kind, k, r)
                      - latency_extra_seconds(cluster, p.kind, k, f)
                      for r, f, (p, _g, k) in zip(raised, own["tp"], tp))  # B's classes apart less ``plain``
    pj = None
    if W <= JOINT_FIRST_RANKS:
        # min(A, B) <= A: no gain unless A is above the joint bound the caller takes anyway; and B is worth
        # its joint cut only when A is near that bound (else the best layouts split tp and B sits on it).
        # A without the launcher orders' own joint cuts first (it is at most A): often already far above.
        # And raising the tp floors moves the joint bound by about what it adds to the classes apart
        # (``plain``; each domain pattern's sum by at most the floors' rise): B next to it gains nothing.
        pj = plain_joint()
        if rise <= pj * CASE_SPLIT_MIN_GAIN or launcher_bound(orders, False) > CASE_SPLIT_RATIO * pj:
            return max(plain, pj)
        a = launcher_bound(orders)
        if a <= pj * (1.0 + CASE_SPLIT_MIN_GAIN) or a > CASE_SPLIT_RATIO * pj:
            return max(plain, pj)
    else:
        a = launcher_bound(orders)
        if a <= plain:
            return None
    charge(BOUND_PART_SECONDS * sum(len(v) for v in parts.values()))
    floors = {c: list(v) for c, v in own.items()}
    floors["tp"] = raised
    extra = {c: [latency_extra_seconds(cluster, p.kind, k, f) for (p, _g, k), f in zip(parts[c], floors[c])]
             for c in parts}
    x = {c: float(exposure.get(c, 1.0)) for c in parts}
    total = sum(x[c] * (sum(floors[c]) + sum(extra[c])) for c in parts)
    lat = sum(x[c] * sum(extra[c]) for c in parts)
    joint = joint_cut_bound(cluster, cfg0, parts, exposure, lambda c, i: floors[c][i])
    b = max(total, joint + lat)
    if b < a:
        b = max(b, _latency_chord(cluster, cfg0, parts, exposure, floors, extra, joint, lat))
    if b <= a:
        return max(plain, b)  # (B is at least the joint bound without the split)
    return max(plain, a, plain_joint() if pj is None else pj)


def _latency_chord(cluster, cfg0, parts, exposure, floors, extra, joint: float, lat: float) -> float:
    """The joint bound with NCCL's latency beyond one class's joint share, not its floor's, seconds (0: none).

    A part's latency beyond a bandwidth time ``t`` (:func:`~rankmap.solver.bound.ncclterms.latency_extra_seconds`)
    is ``e(t) = min over algorithms, node counts and protocols of (latency + t/eff) − t``: a minimum of
    lines of slopes ``1/eff − 1 ≥ 0``, so concave and nondecreasing.  With ``f`` the part's floor and
    ``τ > f``, the chord ``σ = (e(τ) − e(f))/(τ − f)`` lies below ``e`` on ``[f, τ]`` and ``e ≥ e(τ)``
    beyond, so ``t + e(t) ≥ min((1+σ)·t + e(f) − σ·f, t + e(τ))``.  The joint bound is a least over
    the domains' patterns of ``Σ_c x_c·t_c``, so a least of two such sums is the least of two joint
    bounds: one with the class weighted ``(1+σ)·x_c``, one plain plus ``x_c·(e(τ) − e(f))``.  One
    class is taken: the one-part class whose ``e`` rises most; ``τ`` where ``e`` stops rising (the
    least ``t`` where it reaches its value at ``f·1.25^24``, by bisection: then the chord is ``e`` itself
    when ``e`` has one kink on ``[f, τ]``).
    """
    from .cutbound import joint_cut_bound
    from .ncclterms import latency_extra_seconds

    best = None
    for c, plist in parts.items():
        x = float(exposure.get(c, 1.0))
        if len(plist) != 1 or x <= 0 or floors[c][0] <= 0:
            continue
        (p, _g, k), f = plist[0], floors[c][0]
        top = latency_extra_seconds(cluster, p.kind, k, f * 1.25 ** 24)
        lo, hi = f, f * 1.25 ** 24  # the least t where e reaches its value at hi, by bisection
        for _ in range(40):
            mid = 0.5 * (lo + hi)
            if latency_extra_seconds(cluster, p.kind, k, mid) >= top - 1e-15:
                hi = mid
            else:
                lo = mid
        tau = hi
        e_tau = latency_extra_seconds(cluster, p.kind, k, tau)
        gain = x * (e_tau - extra[c][0])
        if gain > 0 and (best is None or gain > best[0]):
            best = (gain, c, x, f, (e_tau - extra[c][0]) / (tau - f))
    if best is None:
        return 0.0
    gain, c, x, f, sigma = best
    scaled = joint_cut_bound(cluster, cfg0, parts, {**exposure, c: x * (1.0 + sigma)}, lambda d, i: floors[d][i])
    return min(scaled + lat - x * sigma * f, joint + lat + gain)
