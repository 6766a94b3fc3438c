"""Lower bounds on the predicted communication time (DESIGN §4–§5).

The objective of a layout is ``Σ_c x_c·T_c`` with, for one part of a class
(parts run one after the other, :mod:`rankmap.solver.cost.timemodel`)::

    T = max( max over flow parts f of bytes_f / (parts_f · B(route_f)),
             max over directed links ℓ of load(ℓ) / cap(ℓ) )  (+ latency ≥ 0)

Every term below is a number that *no layout of the searched space* can beat,
so ``Σ_c x_c · Σ_parts max(terms)`` is a valid bound (each part's time is at
least each of its terms; the latency term only adds).  Notation: ``fb`` the
bytes of one flow of the part (:func:`~rankmap.solver.cost.timemodel.flow_bytes`),
``k`` the part's group size, ``b_0 > b_1 > …`` the widest-path levels over
physical capacities (``cluster.widest_levels_gbps``; two GPUs first in one
level-``j`` domain have ``B ≤ b_j``).  A flow split by ECMP into ``p`` parts
of ``bytes/p`` each over routes of bottleneck ``B`` has per-flow time
``bytes/(p·B)``; ``R_j`` is the largest ``p·B`` over GPU pairs first joined at
level ``j`` (:func:`.rates.level_rates_gbps`: exact from the fabric's own routes up
to 512 GPUs, else ``(A²+1)·b_j`` with A attachments per GPU, the number of
route options), and ``R_{≥j} = max_{i≥j} R_i``: a flow between GPUs first
joined at level ``j`` or above takes at least ``bytes / R_{≥j}``.

Size terms (any order, any mode; :func:`class_lower_bound`):

* **per flow**: at the first level ``j*`` whose domains hold all groups whole
  (Σ_D ⌊|D|/k⌋ ≥ groups), some group is split over level-``(j*−1)`` domains;
  its flows connect all its members, so one of its flows joins GPUs first
  joined at level ≥ ``j*``: ``T ≥ fb / R_{≥j*}``.
* **channels**: a ring group spanning NCCL nodes with ``c`` channels sends ``fb/c`` per
  channel between nodes (``≥ fb/(c·R_inter)``) and holds ``≥ c`` members on each node, joined
  by an intra-node ring edge of ``fb·(c−1)/c`` at most the rate of the best ring of ``≥ c``
  GPUs inside a host: the per-flow floor is the least over ``c`` of the larger of the two,
  when that is below the one-ring floors.
* **per ring edge**: a ring collective of ``n ≥ 3`` members is as fast as its
  slowest edge, and no ring of ``n`` GPUs has a slowest edge faster than
  :func:`~rankmap.solver.bound.ringrate.ring_rate_gbps` (the best bottleneck ``n``-cycle inside a host, or an
  inter-host edge): ``T ≥ fb / ring_rate``.
* **per GPU**: a rank's bytes per rank leave its GPU over that GPU's links:
  ``T ≥ bytes_per_rank / max_GPU(total outgoing capacity)``; for an all-to-all,
  the first-hop split term of :mod:`.splitbound` (the flows a member sends inside
  its host, rack or leaf and those it sends out start on different links).
* **inside a node or split** (:mod:`.nodering`, up to 512 GPUs, NCCL nodes the hosts): a ring part
  takes at least the least of its one-node ring (best in-host ring) and the split case (a group over
  several nodes: its hops inside its fullest node on the links to that node's GPUs, NCCL's paths
  enumerated on hosts of uneven links by :mod:`.nodepaths`, and its channels across; every group
  split: each node's split groups' cut bytes over its out-links); a launcher order's groups with their
  own member counts per host (:func:`.nodering.order_floor`).
* **aggregate cut** (unchanged from before): at a level, at least
  ``groups − Σ⌊|D|/k⌋`` groups are split; each sends a flow out of every
  domain it touches; the links leaving the level's domains carry those bytes,
  and the most loaded one carries at least their total over their total
  capacity.
* **per-domain cut**: a domain ``D`` of ``m`` GPUs runs ``m`` ranks; at most
  ``⌊m/k⌋`` groups lie wholly inside, the other ``r = m mod k`` ranks (all
  ``m`` if ``k > m``) belong to split groups holding ≤ ``k−1`` of them each,
  so at least ``s = ⌈r/(k−1)⌉`` groups are split by ``D``.  A split ring or
  chain sends at least one flow out of ``D`` (its members inside and outside
  are joined by ring/chain edges), an all-to-all with ``a`` members inside
  ``a(k−a) ≥ k−1`` flows.  All of it crosses the links leaving ``D``'s
  component outward (capacity ``C_D``, ``cluster.domain_out_gbps``), so the
  busiest of them: ``T ≥ s·w·fb / C_D`` (``w`` = 1 or ``k−1``).

Launcher terms (one order; :func:`launcher_part_bound`, in :mod:`.launcher`): in launcher mode
ranks ``[bG, (b+1)G)`` form block ``b`` and every block runs on one whole host,
so for a given order it is known which flows stay inside a host and which
cross between hosts; only the host of each block (and local GPU orders) is
searched.  Let the *block graph* of a part join two blocks by the bytes of its
flows between them; its connected components have sizes ``c_1, c_2, …``.

* **inter-host flow**: a flow between two blocks runs between two hosts,
  first joined at level ≥ ``h`` (the first level where two hosts share a
  domain): ``T ≥ fb / R_{≥h}``.
* **packing**: at a level made of whole hosts (``h_D`` hosts per domain), if
  for some size ``s`` more components of size ≥ ``s`` exist than
  ``Σ_D ⌊h_D/s⌋``, some component spans two level domains, so one of its
  inter-block flows (connected component) joins GPUs first joined above the
  level: ``T ≥ fb_min / R_{≥level+1}``.
* **block cut**: a domain ``D`` of ``m`` whole hosts holds ``m`` blocks.  If
  ``m`` is not a sum of component sizes, some component is split by ``D``; a
  split component sends at least ``λ`` bytes out of ``D``, where ``λ`` is the
  least outward bytes over proper subsets of one component (exact by
  enumeration up to ``EXACT_CUT_MAX_BLOCKS`` blocks, else its smallest
  inter-block flow: a connected component always has one crossing flow):
  ``T ≥ λ_min / C_D``.  The flows of every collective are balanced (each
  member sends what it receives), so bytes out of a set equal bytes into it.
* **host egress**: each block is on some host, so ``T ≥ max_b out(b) /
  max_host C_host`` when hosts are a level.

The bound of a solve is the minimum over the searched orders (launcher mode)
of the sum over classes (:func:`search_lower_bound`); free and fixed modes use
the size terms (order-independent), free mode up to 16,384 ranks also the least of two
cases: tp groups inside hosts or not (:mod:`.casesplit`), and the least of three: tp groups over hosts,
or inside with hosts of one pipeline stage each or not (:mod:`.hostsplit`), and the least over what split
tp and dp groups one host or leaf can touch on the rank grid (:mod:`.hostlines`, launcher mode too).  Every mode up to 512 GPUs whose
level-0 widest domains hold ``tp`` GPUs each (NVLink-bridged pairs and tp 2, NVSwitch hosts and tp
= G) also takes the least of two cases: tp groups on those domains or not (:mod:`.pairsplit`).  Both take the larger of that and the joint
domain-cut bound of :mod:`.cutbound` (classes compete for the same domains:
a host that keeps its tp groups whole must split its dp and pp groups), whose
per-part floors are these terms, and of the stage-split cuts of :mod:`.stagecut` (a domain's ranks
in several pipeline stages add their cuts; the domains of most and fewest end-stage ranks pay the
embedding and the pipeline flows; pods too large to enumerate by the knapsack points of :mod:`.stagepack`;
launcher mode with each part's least launcher floor over the orders).  Nothing here is n×n: group arrays, block
graphs of at most W/G blocks, per-domain vectors.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from ..megatron.config import ParallelConfig

from ..megatron.catalogue import megatron_groups
from ..fabric.cluster import Cluster
from .rates import out_cap_per_gpu, inter_host_rate_gbps, pair_route_seconds, suffix_rates
from .ncclterms import all_reduce_floor_seconds, crossing_bytes, latency_extra_seconds, max_channels, node_levels
from .ringrate import RING_KINDS, ring_rate_gbps
from .work import BOUND_PART_SECONDS, charge
from .launcher import (EXACT_CUT_MAX_BLOCKS, in_host_ring_floor,  # noqa: F401 (re-exported)
                       launcher_nodes, launcher_part_bound)
from .nodering import order_floor

__all__ = ["class_lower_bound", "lower_bound", "search_lower_bound", "launcher_part_bound", "in_host_ring_floor",
           "EXACT_CUT_MAX_BLOCKS"]

#: Launcher terms are computed while orders x world size stays below this (else the size terms alone).
LAUNCHER_WORK_MAX = 1 << 23
#: The joint cut bound is recomputed with a launcher order's own floors up to this many ranks.
JOINT_PER_ORDER_MAX_RANKS = 512


def class_lower_bound(cluster: Cluster, kind: str, num_groups: int, n: int, payload_bytes: float) -> float:
    """Size terms (module doc): a bound, seconds, on one part's time over every layout and order.

    Parameters
    ----------
    kind : str
        Collective kind.
    num_groups, n : int
        Number of groups of the part and their size (ranks).
    payload_bytes : float
        S, bytes per rank per step.

    Returns
    -------
    float
        ``max(per flow, per GPU, aggregate cut, per-domain cut)``, seconds (0 for an empty part).
    """
    from ..cost.timemodel import bytes_per_rank, flow_bytes

    fb = flow_bytes(kind, payload_bytes, n)
    if fb <= 0 or num_groups <= 0:
        return 0.0
    b = suffix_rates(cluster) * 1e9
    K = b.size
    kstar = K - 1
    for k in range(K):
        caps = np.bincount(cluster.widest_domains[k])
        if int((caps // n).sum()) >= num_groups:
            kstar = k
            break
    per_flow = fb / b[kstar]
    if kind in RING_KINDS and n >= 3:
        rr = ring_rate_gbps(cluster, n)
        if rr:
            per_flow = max(per_flow, fb / (rr * 1e9))
    if kind in RING_KINDS:
        # a group spanning NCCL nodes runs c channels of fb/c between them, each a path through a
        # node's members in hops of fb/c (solver/cost/nccl.py _node_channels): no hop or crossing
        # flow carries more than fb/c, and the hops of different channels may take different links
        # (a host of direct GPU links), so the floor is the crossing flow's: fb/(c_max · inter rate).
        # (A closed ring inside the node put fb·(c−1)/c on one edge; a path does not.)
        from .nodedomain import inter_node_rate_gbps

        r_inter = inter_node_rate_gbps(cluster) * 1e9  # between NCCL nodes (NVL72: racks, not trays)
        if r_inter > 0:
            per_flow = min(per_flow, fb / (max_channels(cluster, n) * r_inter))
    cut = 0.0
    w = (n - 1) if kind == "all_to_all" else 1
    for doms, boundary, outs in ((cluster.widest_domains, cluster.widest_boundary_gbps,
                                  cluster.widest_domain_out_gbps),
                                 (cluster.domains, cluster.boundary_gbps, cluster.domain_out_gbps)):
        whole_nodes = node_levels(cluster, doms)
        for k in range(min(doms.shape[0], boundary.size)):
            sizes = np.bincount(doms[k])
            whole = int((sizes // n).sum())
            split = max(0, num_groups - whole)
            fbc = crossing_bytes(kind, fb, payload_bytes, cluster, n, bool(whole_nodes[k]))[1]
            if split and boundary[k] > 0:
                # a split group touches at least max(2, ceil(n / largest domain)) domains, each with an out-flow
                touched = max(2, -(-n // int(sizes.max())))
                out_flows = split * (2 * (n - 1) if kind == "all_to_all" else touched)
                cut = max(cut, fbc * out_flows / (boundary[k] * 1e9))
            # (only when the part's groups hold every rank: the embedding groups of pp >= 3 hold 2/pp
            # of them, and a domain may then hold none of their members)
            if k < len(outs) and outs[k].size == sizes.size and num_groups * n >= cluster.num_devices:
                r = np.where(n > sizes, sizes, sizes % n)
                s = -(-r // max(n - 1, 1))
                cap = outs[k] * 1e9
                ok = (s > 0) & (cap > 0)
                if ok.any():
                    cut = max(cut, float((s[ok] * w * fbc / cap[ok]).max()))
    out_cap = out_cap_per_gpu(cluster)
    port = bytes_per_rank(kind, payload_bytes, n) / (float(out_cap.max()) * 1e9) if out_cap.max() > 0 else 0.0
    if kind == "all_to_all":
        from .splitbound import all_to_all_split_bound, node_split_bound

        port = max(port, all_to_all_split_bound(cluster, num_groups, n, fb), node_split_bound(cluster, num_groups, n, fb))
    from .nodering import node_ring_floor  # a ring inside one node or every group split (module nodering)

    own = node_ring_floor(cluster, kind, num_groups, n, payload_bytes)
    if kind == "all_reduce":
        # NVLS, NVLSTree and tree move fewer bytes than the ring: the least of their floors
        return max(min(max(per_flow, port, cut), all_reduce_floor_seconds(cluster, n, payload_bytes, fb, np.inf)), own)
    return max(per_flow, port, cut, own)


def _part_sizes(cfg: ParallelConfig, traffic, c: str):
    """(groups, size) of each part of class ``c``: list of (Collective, groups k, size k)."""
    from ..traffic import class_collectives, class_group_size

    n = class_group_size(c, cfg)
    g = cfg.world_size // cfg.pp if c == "embedding" else cfg.world_size // n
    if n <= 1:
        return []
    out = []
    for p in class_collectives(traffic, c):
        k = p.size or n
        out.append((p, g * (n // k), k))
    return out


def lower_bound(
    cluster: Cluster, cfg: ParallelConfig, traffic: Mapping[str, float], exposure: Mapping[str, float] | None = None,
) -> float:
    """A valid lower bound (seconds) on ``Σ_c x_c·T_c`` for any layout of ``cfg`` (any order with these sizes).

    Classes are separate phases, so the bound is ``Σ_c x_c·LB_c`` with
    :func:`class_lower_bound` summed over each class's parts (run one after
    the other on their subgroups); it depends on the sizes, not the order.
    """
    from ..traffic import TRAFFIC_CLASSES

    from .cutbound import joint_cut_bound

    exposure = dict(exposure or {})
    parts = {c: _part_sizes(cfg, traffic, c) for c in TRAFFIC_CLASSES}
    own = {c: [class_lower_bound(cluster, p.kind, g, k, p.payload_bytes) for p, g, k in v] for c, v in parts.items()}
    # NCCL's latency on top of each part's bandwidth floor (solver/bound/ncclterms.py)
    extra = {c: [latency_extra_seconds(cluster, p.kind, k, f) for (p, _g, k), f in zip(v, own[c])]
             for c, v in parts.items()}
    total = sum(float(exposure.get(c, 1.0)) * (sum(v) + sum(extra[c])) for c, v in own.items())
    # the joint bound charges each part a bandwidth time B >= its own floor; NCCL's latency adds at
    # least extra(B) >= extra(own floor) (extra is nondecreasing: min over protocols of lat + B(1/eff - 1))
    lat_min = sum(float(exposure.get(c, 1.0)) * sum(v) for c, v in extra.items())
    return max(total, joint_cut_bound(cluster, cfg, parts, exposure, lambda c, i: own[c][i]) + lat_min)


def search_lower_bound(
    cluster: Cluster, orders: Sequence[ParallelConfig], traffic: Mapping[str, float],
    exposure: Mapping[str, float] | None = None, mode: str = "launcher", plain: float | None = None,
) -> float:
    """The bound of a solve over its searched space (seconds): every order of ``orders``, layouts of ``mode``.

    Launcher mode: ``min over orders of Σ_c x_c Σ_parts max(size terms, launcher terms of the order)``;
    other modes (or too much work: ``LAUNCHER_WORK_MAX``): :func:`lower_bound` (size terms).
    ``plain``: that size-term bound when already computed (same cluster, sizes, traffic and exposure:
    a free solve's own bound), not recomputed.  Without ``plain``, also at least the least of the two
    cases of :mod:`.pairsplit` (tp groups on the level-0 domains or not), where it applies.

    Raises
    ------
    ValueError
        If ``orders`` is empty.
    """
    from ..traffic import TRAFFIC_CLASSES

    out = _search_bound(cluster, orders, traffic, exposure, mode, plain)
    if plain is not None or not orders:
        return out
    from .pairsplit import pair_cases

    parts = {c: _part_sizes(orders[0], traffic, c) for c in TRAFFIC_CLASSES}
    cases = pair_cases(cluster, orders[0], parts)
    if cases is None:
        return out
    # each case: the classes apart with its floors, and the launcher terms per order (no joint cut: small work)
    a = _search_bound(cluster, orders, traffic, exposure, mode, None, raise_floor=cases[0], joint=False)
    if a <= out:
        return out
    b = _search_bound(cluster, orders, traffic, exposure, mode, None, raise_floor=cases[1], joint=False)
    return float(max(out, min(a, b)))


def _search_bound(
    cluster: Cluster, orders: Sequence[ParallelConfig], traffic: Mapping[str, float],
    exposure: Mapping[str, float] | None, mode: str, plain: float | None,
    raise_floor=None, joint: bool = True,
) -> float:
    """:func:`search_lower_bound` without the pair split.  ``raise_floor(class, part, size, groups or None)``:
    seconds each part's floor is raised to (a case of :mod:`.pairsplit`: valid for the layouts of that case
    only; ``groups``: the class's groups in a launcher order, None for the order-free floor); ``joint``:
    False leaves out the joint cut bound and free mode's tp case split (and does not count the exact pass
    over GPU pairs again)."""
    from ..traffic import CLASS_GROUP, TRAFFIC_CLASSES

    if not orders:
        raise ValueError("no orders")
    exposure = dict(exposure or {})
    cfg0 = orders[0]
    size_terms = {}
    for c in TRAFFIC_CLASSES:
        size_terms[c] = []
        for p, g, k in _part_sizes(cfg0, traffic, c):
            v = class_lower_bound(cluster, p.kind, g, k, p.payload_bytes)
            if raise_floor is not None:
                v = max(v, raise_floor(c, p, k, None))
            size_terms[c].append((p, v))
    known = plain
    lines = 0.0  # module hostlines (launcher mode: taken after the orders)
    parts = {c: _part_sizes(cfg0, traffic, c) for c in TRAFFIC_CLASSES}
    n_parts = sum(len(v) for v in size_terms.values())
    charge(BOUND_PART_SECONDS * n_parts * (1 if known is None else 0))
    if known is None and joint:  # the rates' exact pass over every GPU pair (cached per cluster, counted every time)
        charge(pair_route_seconds(cluster))
    ksize = {c: [k for _p, _g, k in v] for c, v in parts.items()}

    def with_latency(c, i, floor):  # NCCL's latency beyond a part's bandwidth floor (ncclterms.py)
        return floor + latency_extra_seconds(cluster, size_terms[c][i][0].kind, ksize[c][i], floor)

    plain = sum(float(exposure.get(c, 1.0)) * sum(with_latency(c, i, v) for i, (_p, v) in enumerate(size_terms[c]))
                for c in TRAFFIC_CLASSES)
    if known is not None:
        plain = max(plain, float(known))
    elif plain > 0 and joint:
        from .cutbound import joint_cut_bound

        # latency beyond each part's own floor (lower_bound: extra is nondecreasing in the bandwidth time)
        lat_min = sum(float(exposure.get(c, 1.0)) * sum(with_latency(c, i, v) - v
                                                         for i, (_p, v) in enumerate(size_terms[c]))
                      for c in TRAFFIC_CLASSES)
        from .stagecut import stage_cut_applies, stage_cut_bound

        # the stage-split cuts of every level's domains of most and fewest end-stage ranks (module stagecut);
        # launcher mode: with the least over the orders of each part's launcher floor (module stagepack)
        own = {c: [v for _p, v in size_terms[c]] for c in TRAFFIC_CLASSES}  # each part's order-free floor
        base = own
        if mode == "launcher" and len(orders) * cfg0.world_size <= LAUNCHER_WORK_MAX and stage_cut_applies(
                cluster, cfg0):
            from .stagepack import least_order_floors

            base = least_order_floors(cluster, orders, size_terms)
        plain = max(plain, stage_cut_bound(cluster, cfg0, parts, exposure, lambda c, i: base[c][i]) + lat_min)

        def plain_joint() -> float:
            return joint_cut_bound(cluster, cfg0, parts, exposure, lambda c, i: size_terms[c][i][1]) + lat_min

        split = None
        if mode == "free":
            from .casesplit import tp_case_bound

            # tp groups inside hosts (launcher layouts of tp-first orders) or some split (module casesplit)
            split = tp_case_bound(cluster, cfg0, traffic, exposure, parts,
                                  own, plain, plain_joint,
                                  lambda tp_first, joint=True: _search_bound(cluster, tp_first, traffic, exposure,
                                                                             "launcher", plain, joint=joint))
        plain = max(plain, plain_joint()) if split is None else max(plain, split)
        if mode == "free":
            from .hostsplit import stage_case_bound

            # tp groups over hosts, or inside with hosts of one pipeline stage or several (module hostsplit)
            plain = max(plain, stage_case_bound(cluster, cfg0, parts, own, exposure))
        if mode in ("free", "launcher"):
            from .hostlines import host_lines_bound

            # the split tp and dp groups each host and leaf touch, on the rank grid (module hostlines; every
            # launcher layout is a free layout: there taken after the orders, whose refinement stays as it was)
            lines = host_lines_bound(cluster, cfg0, parts, own, exposure)
            if mode == "free":
                plain = max(plain, lines)
    if mode != "launcher" or len(orders) * cfg0.world_size > LAUNCHER_WORK_MAX or plain <= 0:
        return max(plain, lines)
    best = np.inf
    charge(BOUND_PART_SECONDS * n_parts * len(orders))
    joint_of: dict = {}  # the orders' floors -> the joint cut bound over them
    values: list[float] = []
    pending: dict = {}  # orders at their plain sum with raised floors (orderjoint.py)
    floors_of: dict = {}
    for ocfg in orders:
        groups = megatron_groups(ocfg)
        total = 0.0
        floors: dict[str, list[float]] = {}
        lat = 0.0
        inside = False  # some part kept inside hosts by the order is slower than its order-free floor
        for c in TRAFFIC_CLASSES:
            x = float(exposure.get(c, 1.0))
            if not size_terms[c] or x == 0:
                continue
            arr = groups[CLASS_GROUP[c]] - ocfg.rank_offset
            for i, (p, v) in enumerate(size_terms[c]):
                ring = in_host_ring_floor(cluster, p, arr)
                inside = inside or ring > v
                floor = max(v, launcher_part_bound(cluster, p, arr), ring, order_floor(cluster, p, arr))
                if raise_floor is not None:
                    floor = max(floor, raise_floor(c, p, ksize[c][i], arr))
                floors.setdefault(c, []).append(floor)
                nodes = launcher_nodes(cluster, p, arr)
                extra = latency_extra_seconds(cluster, p.kind, ksize[c][i], floor, nodes)
                lat += x * extra
                total += x * (floor + extra)
        key = tuple((c, tuple(v)) for c, v in sorted(floors.items()))
        if inside and joint and cfg0.world_size <= JOINT_PER_ORDER_MAX_RANKS:
            # the classes compete for the domains with this order's floors (a ring kept inside a host)
            if key not in joint_of:
                from .cutbound import joint_cut_bound

                # (a class not exposed has no floors here: it counts 0 in the joint cut)
                joint_of[key] = joint_cut_bound(cluster, cfg0, parts, exposure,
                                                lambda c, i: floors[c][i] if c in floors else 0.0)
            total = max(total, joint_of[key] + lat)
        elif joint and cfg0.world_size <= JOINT_PER_ORDER_MAX_RANKS and any(
                f > v for c, fl in floors.items() for f, (_p, v) in zip(fl, size_terms[c])):
            pending[len(values)] = (key, lat)
            floors_of[key] = floors
        values.append(total)
        best = min(best, total)
    if pending and best < np.inf:
        from .cutbound import joint_cut_bound
        from .orderjoint import refine_least_orders

        best = refine_least_orders(values, pending, joint_of, lambda key: joint_cut_bound(
            cluster, cfg0, parts, exposure, lambda c, i: floors_of[key][c][i] if c in floors_of[key] else 0.0),
            below=plain)
    return float(max(best, plain, lines))
