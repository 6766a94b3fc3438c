"""Candidate layouts from the domain decomposition (DESIGN §5).

Surrogate models that propose layouts; every proposal is then scored with the
real objective (:mod:`rankmap.solver.cost.timemodel`).  They weigh rank pairs by the bytes of
their flows (:func:`~rankmap.solver.cost.objective.active_families`) over the
widest-path ultrametric of :mod:`rankmap.solver.fabric.cluster`, which is linear in CP-SAT
(:mod:`.cpsat`) but blind to link sharing — the local search on the real
objective (:mod:`.localsearch`) handles that.

* host orders: baseline, depth-first order of the inter-host domain tree,
  CP-SAT over blocks → hosts (≤ ``HOST_MODEL_MAX_HOSTS``), CP-SAT over whole
  domains (≤ ``DOMAIN_MODEL_MAX_DOMAINS``);
* local GPU orders: one small CP-SAT model per distinct (host type, block
  pattern), so identical hosts are solved once;
* small clusters: one CP-SAT model over every rank → device Boolean;
* free mode: every digit order laid along the depth-first device order.
"""

from __future__ import annotations

import itertools
import weakref
from typing import Mapping

import numpy as np

from .cpsat import AssignmentProblem, solve_assignment
from ..megatron.config import ParallelConfig
from ..fabric.cluster import Cluster
from .constraints import constraint_pairs as _constraint_pairs
from ..cost.objective import active_families, ordered_pairs
from ..cost.timemodel import class_groups
from ..types import SolveCancelled

__all__ = [
    "EXACT_MAX_DEVICES",
    "HOST_MODEL_MAX_HOSTS",
    "DOMAIN_MODEL_MAX_DOMAINS",
    "VIRTUAL_ORDER_MAX_RANKS",
    "dfs_host_order",
    "surrogate_exact",
    "local_orders",
    "host_model_order",
    "virtual_layouts",
    "domain_level_orders",
]

#: Clusters up to this many GPUs get the exact all-Boolean CP-SAT model.
EXACT_MAX_DEVICES = 16
#: Up to this many hosts, the host order is also searched with CP-SAT.
HOST_MODEL_MAX_HOSTS = 32


def _pair_weights(cfg: ParallelConfig, groups, traffic: Mapping[str, float], item_of_rank: np.ndarray):
    """Traffic between items (ranks or blocks): unordered pairs (m, 2) and bytes (m,), both directions.

    Pairs inside one item are dropped.  Only used on small item counts.
    """
    acc: dict[tuple[int, int], float] = {}
    for _c, kind, arr, pb in active_families(cfg, traffic, groups):
        a, b = ordered_pairs(arr, kind)
        u, v = item_of_rank[a], item_of_rank[b]
        wt = np.full(u.shape, float(pb))
        keep = u != v
        u, v, wt = u[keep], v[keep], wt[keep]
        lo, hi = np.minimum(u, v), np.maximum(u, v)
        key = lo * (int(item_of_rank.max()) + 1) + hi
        uniq, inv = np.unique(key, return_inverse=True)
        sums = np.bincount(inv, weights=wt)
        base = int(item_of_rank.max()) + 1
        for k, sval in zip(uniq.tolist(), sums.tolist()):
            pair = (k // base, k % base)
            acc[pair] = acc.get(pair, 0.0) + sval
    if not acc:
        return np.zeros((0, 2), dtype=np.int64), np.zeros(0)
    keys = sorted(acc)
    return np.array(keys, dtype=np.int64), np.array([acc[k] for k in keys])




def dfs_host_order(cluster: Cluster) -> np.ndarray:
    """Hosts sorted by their domains from the coarsest level to the finest (stable)."""
    H = len(cluster.hosts)
    first_dev = np.zeros(H, dtype=np.int64)
    first_dev[cluster.host_of[::-1]] = np.arange(cluster.num_devices)[::-1]
    keys = [np.arange(H)] + [cluster.domains[k][first_dev] for k in range(cluster.domains.shape[0])]
    return np.lexsort(keys)  # last key (coarsest level) is primary


def _host_devices(cluster: Cluster) -> tuple[np.ndarray, ...]:
    return cluster.host_devices




def _levels_bps(cluster: Cluster) -> np.ndarray:
    return cluster.levels_gbps * 1e9


def _extra_matrix(cluster: Cluster, devs: np.ndarray) -> np.ndarray:
    """Dense ``1/B' - 1/B`` (s/byte) among the given devices (small sets only)."""
    return cluster.extra_inv_bps(devs[:, None], devs[None, :])


def surrogate_exact(cluster, cfg, groups, traffic, options, launcher, constraints, baseline, time_limit, cancel,
                    deadline=None):
    """One CP-SAT model over every rank -> device Boolean (small clusters); an :class:`AssignmentResult`.

    ``time_limit`` is CP-SAT's deterministic time, ``deadline`` the solve's wall-clock stop.
    """
    n = cluster.num_devices
    pairs, weights = _pair_weights(cfg, groups, traffic, np.arange(n))
    together = []
    for c in constraints:
        together.append((_constraint_pairs(cfg, groups, c.traffic_class), cluster.level_labels(c.level)))
    prob = AssignmentProblem(
        domains=cluster.domains,
        levels_bps=_levels_bps(cluster),
        pairs=pairs,
        weights=weights,
        together=together,
        hint=baseline,
        extra=_extra_matrix(cluster, np.arange(n)) if cluster.host_extra else None,
    )
    if launcher:
        G = int(cluster.gpus_per_host[0])
        prob.item_block = np.arange(n) // G
        prob.slot_group = cluster.host_of
    res = solve_assignment(prob, time_limit_seconds=time_limit, seed=options.seed, cancel=cancel, deadline=deadline)
    return res


#: Local orders found per cluster: (host type, block pattern, CP-SAT budget, seed) -> local order.
#: CP-SAT runs with one worker and a deterministic-time budget, so an answer is the same
#: whenever it is asked for again (answers cut short by the wall clock are not kept).
_LOCAL_MEMO: "weakref.WeakKeyDictionary[Cluster, dict]" = weakref.WeakKeyDictionary()


def local_orders(cluster, cfg, groups, traffic, host_order, options, time_limit, cancel, constraints,
                 deadline=None):
    """Best local GPU order for each host given which block it runs; returns dev_of_rank.

    One CP-SAT model (``time_limit`` deterministic seconds) per distinct (host
    type, block pattern).  Once ``deadline`` has passed, the hosts not solved
    yet keep their local index order (the stop is recorded on the deadline).
    """
    H = len(cluster.hosts)
    G = int(cluster.gpus_per_host[0])
    W = cfg.world_size
    hdev = _host_devices(cluster)
    # intra-block traffic pattern of each block, as a key
    fam = class_groups(cfg, groups)
    block_pat = np.zeros((W // G, G, G))
    for _c, kind, arr, pb in active_families(cfg, traffic, groups):
        n = arr.shape[1]
        gid = np.full(W, -1, dtype=np.int64)
        pos = np.full(W, -1, dtype=np.int64)
        gid[arr.ravel()] = np.repeat(np.arange(arr.shape[0]), n)
        pos[arr.ravel()] = np.tile(np.arange(n), arr.shape[0])
        g2 = gid.reshape(-1, G)
        p2 = pos.reshape(-1, G)
        same = (g2[:, :, None] == g2[:, None, :]) & (g2[:, :, None] >= 0)
        gap = np.abs(p2[:, :, None] - p2[:, None, :])
        if kind == "p2p_chain":
            same &= gap == 1
        elif kind != "all_to_all":
            same &= (gap == 1) | (gap == n - 1)  # ring neighbours
        block_pat += same * (2.0 * pb)
    # constraint pattern: pairs that must share a level label, per block
    cons_pat = np.zeros((W // G, G, G), dtype=np.int64)
    for ci, c in enumerate(constraints):
        arr = fam[c.traffic_class] - cfg.rank_offset
        gid = np.full(W, -1, dtype=np.int64)
        gid[arr.ravel()] = np.repeat(np.arange(arr.shape[0]), arr.shape[1])
        g2 = gid.reshape(-1, G)
        cons_pat |= ((g2[:, :, None] == g2[:, None, :]) & (g2[:, :, None] >= 0)).astype(np.int64) << ci
    pat_bytes = np.concatenate([block_pat.reshape(W // G, -1), cons_pat.reshape(W // G, -1)], axis=1)
    pat_id = _unique_rows(pat_bytes)
    # host types: intra-host pair levels and constraint labels (in local order)
    Dh = np.stack(hdev)  # (H, G)
    lv_all = cluster.pair_level(Dh[:, :, None], Dh[:, None, :]).reshape(H, -1)
    host_type = _unique_rows(lv_all)
    host_key = []
    for h in range(H):
        d = hdev[h]
        extra = tuple(tuple(_canon(cluster.level_labels(c.level)[d])) for c in constraints) if constraints else ()
        irregular = cluster.host_extra[h].tobytes() if h in cluster.host_extra else b""
        host_key.append((int(host_type[h]), extra, irregular))
    # one CP-SAT model per (host type, block pattern); the answers are kept with the cluster
    # (:data:`_LOCAL_MEMO`): every host order of a solve, and the anytime phase's seeds, reuse them
    memo = _LOCAL_MEMO.setdefault(cluster, {})
    budget = (float(time_limit), int(options.seed))
    cache: dict = {}
    dev_of_rank = np.empty(W, dtype=np.int64)
    for node_rank, h in enumerate(host_order.tolist()):
        d = hdev[h]
        key = (host_key[h], int(pat_id[node_rank]))
        if key not in cache:
            mkey = (host_key[h], pat_bytes[node_rank].tobytes()) + budget
            if mkey in memo:
                cache[key] = memo[mkey]
            elif cancel is not None and cancel.is_set():
                raise SolveCancelled("solve cancelled")
            elif deadline is not None and deadline.check():
                cache[key] = np.arange(G)
            else:
                pat = block_pat[node_rank]
                iu, ju = np.triu_indices(G, 1)
                wts = pat[iu, ju]
                sel = wts > 0
                doms = cluster.domains[:, d]
                # keep only levels that distinguish devices inside the host
                together = []
                for ci, c in enumerate(constraints):
                    cp = (cons_pat[node_rank] >> ci) & 1
                    ii, jj = np.nonzero(np.triu(cp, 1))
                    if ii.size:
                        together.append((np.stack([ii, jj], axis=1), cluster.level_labels(c.level)[d]))
                prob = AssignmentProblem(
                    domains=doms,
                    levels_bps=_levels_bps(cluster),
                    pairs=np.stack([iu[sel], ju[sel]], axis=1),
                    weights=wts[sel],
                    together=together,
                    hint=np.arange(G),
                    extra=cluster.host_extra.get(h),
                )
                if G <= 1 or (not sel.any() and not together and h not in cluster.host_extra):
                    cache[key] = np.arange(G)
                else:
                    res = solve_assignment(prob, time_limit_seconds=time_limit, seed=options.seed, cancel=cancel,
                                           deadline=deadline)
                    cache[key] = res.slot_of_item if res.slot_of_item is not None else np.arange(G)
                    if deadline is None or not deadline.stopped_by:  # its deterministic budget ran out, not the clock
                        memo[mkey] = cache[key]
        dev_of_rank[node_rank * G : (node_rank + 1) * G] = d[cache[key]]
    return dev_of_rank


def _unique_rows(a: np.ndarray) -> np.ndarray:
    """Inverse index of identical rows (row i -> class id), fast: two 64-bit hashes, verified.

    ``np.unique(axis=0)`` sorts rows as void bytes, which is slow at 16k rows of
    hundreds of columns; hashing then checking every row against its class
    representative gives the same partition (ids in order of first appearance).
    """
    a = np.ascontiguousarray(a)
    if a.shape[0] == 0:
        return np.zeros(0, dtype=np.int64)
    x = a.reshape(a.shape[0], -1)
    if x.dtype.kind == "f":
        x = x.view(np.int64) if x.dtype.itemsize == 8 else x.astype(np.float64).view(np.int64)
    x = x.astype(np.int64, copy=False)
    rng = np.random.default_rng(12345)
    with np.errstate(over="ignore"):
        h1 = (x * rng.integers(1, 2**62, x.shape[1], dtype=np.int64)).sum(axis=1)
        h2 = (x * rng.integers(1, 2**62, x.shape[1], dtype=np.int64)).sum(axis=1)
    keys = np.stack([h1, h2], axis=1).view(np.dtype((np.void, 16))).ravel()
    _, first, inv = np.unique(keys, return_index=True, return_inverse=True)
    inv = inv.reshape(-1)
    if not np.array_equal(x, x[first[inv]]):  # a hash collision: exact (slow) path
        _, inv = np.unique(x, axis=0, return_inverse=True)
        return inv.reshape(-1)
    return inv


def _canon(a: np.ndarray) -> np.ndarray:
    _, first, inv = np.unique(a, return_index=True, return_inverse=True)
    order = np.argsort(first)
    rank = np.empty_like(order)
    rank[order] = np.arange(order.size)
    return rank[inv.reshape(-1)]


def host_model_order(cluster, cfg, groups, traffic, options, time_limit, cancel, deadline=None):
    """CP-SAT over blocks -> hosts with the inter-host ultrametric; None when not applicable.

    ``time_limit``: CP-SAT deterministic seconds; ``deadline``: the solve's wall-clock stop.
    """
    H = len(cluster.hosts)
    G = int(cluster.gpus_per_host[0])
    W = cfg.world_size
    inter = cluster.inter_host_levels()
    if H < 3 or not inter:
        return None
    block_of_rank = np.arange(W) // G
    pairs, weights = _pair_weights(cfg, groups, traffic, block_of_rank)
    if pairs.shape[0] == 0:
        return None
    first = cluster.first_device
    levels = [k for k in range(cluster.domains.shape[0]) if k >= inter[0]]
    doms = cluster.domains[levels][:, first]
    prob = AssignmentProblem(
        domains=doms,
        levels_bps=cluster.levels_gbps[levels] * 1e9,
        pairs=pairs,
        weights=weights,
        hint=dfs_host_order(cluster),  # block b on the b-th host of the depth-first order
    )
    res = solve_assignment(prob, time_limit_seconds=time_limit, seed=options.seed, cancel=cancel, tie_break=False,
                           deadline=deadline)
    if res.slot_of_item is None:
        return None
    return res.slot_of_item  # host of each block = host order


#: Free mode tries every digit order as a layout up to this many ranks.
VIRTUAL_ORDER_MAX_RANKS = 16384


def virtual_layouts(cfg: ParallelConfig, dev_seq: np.ndarray):
    """Free-mode layouts: global ranks numbered by ``cfg.order``, placed along ``dev_seq`` by another order.

    For each permutation V of the dense tokens with size > 1, rank r goes to
    ``dev_seq[r_V]`` where ``r_V`` is r's dense coordinates read as a mixed-radix
    number in order V.  Yields device-per-rank arrays.
    """
    dec = cfg.decoder()
    coords = dec.coordinates(np.arange(cfg.world_size) + cfg.rank_offset)
    tokens = [t for t in dec.tokens if dec.sizes[t] > 1]
    for perm in itertools.permutations(tokens):
        if list(perm) == tokens:
            continue
        idx = np.zeros(cfg.world_size, dtype=np.int64)
        stride = 1
        for t in perm:
            idx += coords[t] * stride
            stride *= dec.sizes[t]
        yield dev_seq[idx]


#: Up to this many domains of one level, their order is searched with CP-SAT.
DOMAIN_MODEL_MAX_DOMAINS = 32


def domain_level_orders(cluster, cfg, groups, traffic, options, time_limit, cancel, start, deadline=None):
    """Host orders from CP-SAT over whole domains, one model per inter-host level.

    At an inter-host level whose domains all hold D hosts, node ranks come in
    segments of D (one domain each under ``start``, the depth-first order).  The
    segments' mutual bytes and the domains' mutual bandwidths (coarser levels)
    form a small assignment problem over the ultrametric (:mod:`.cpsat`); its
    solution moves whole segments between domains, e.g. brings the first and
    last pipeline stages into one pod for the embedding all-reduce.  Returns
    the host orders found (node rank -> host).  ``time_limit``: CP-SAT
    deterministic seconds per model; ``deadline``: the solve's wall-clock stop.
    """
    from .polish import block_traffic_matrix

    H = len(cluster.hosts)
    G = int(cluster.gpus_per_host[0])
    out = []
    inter = cluster.inter_host_levels()
    if H < 3 or not inter:
        return out
    first = cluster.first_device
    for k in inter[:-1] if len(inter) > 1 else []:
        if deadline is not None and deadline.check():
            break
        lab = cluster.domains[k][first]  # domain of each host
        sizes = np.bincount(lab)
        if np.unique(sizes).size != 1:
            continue
        D = int(sizes[0])
        n_dom = sizes.size
        if n_dom < 3 or n_dom > DOMAIN_MODEL_MAX_DOMAINS:
            continue
        if not all(np.unique(lab[start[s * D : (s + 1) * D]]).size == 1 for s in range(n_dom)):
            continue  # the start order does not keep domains contiguous
        # bytes between segments of D hosts (rank blocks of G·D), never an H×H matrix
        TS = block_traffic_matrix(cfg, traffic, G * D, groups)
        iu, ju = np.triu_indices(n_dom, 1)
        w = TS[iu, ju] + TS[ju, iu]
        sel = w > 0
        if not sel.any():
            continue
        dom_of_seg0 = np.array([lab[start[s * D]] for s in range(n_dom)])  # slot index = domain label
        coarse = [kk for kk in range(cluster.domains.shape[0]) if kk > k]
        slot_host = np.array([np.flatnonzero(lab == d)[0] for d in range(n_dom)])
        doms = cluster.domains[coarse][:, first[slot_host]]
        prob = AssignmentProblem(
            domains=doms,
            levels_bps=cluster.levels_gbps[coarse] * 1e9,
            pairs=np.stack([iu[sel], ju[sel]], axis=1),
            weights=w[sel],
            hint=dom_of_seg0,
        )
        res = solve_assignment(prob, time_limit_seconds=time_limit, seed=options.seed, cancel=cancel,
                               tie_break=False, deadline=deadline)
        if res.slot_of_item is None:
            continue
        order = np.empty(H, dtype=np.int64)
        for s_ in range(n_dom):
            hosts_in = start[np.isin(start, np.flatnonzero(lab == res.slot_of_item[s_]))]
            order[s_ * D : (s_ + 1) * D] = hosts_in
        out.append(order)
    return out


