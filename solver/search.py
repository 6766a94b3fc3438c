"""The search over orders and rank-to-device assignments (DESIGN §5).

:func:`solve` is the entry point.  Strategy:

* **Orders.**  ``default``, ``megatron-cli``, ``all`` or a list; orders that give
  identical groups (they differ only where size-1 dimensions sit) are searched
  once, and an order Megatron would reject is skipped (or, when the user named
  it, an error).
* **fixed** mode: every order on the baseline device order; exact.
* **Small clusters** (at most ``EXACT_MAX_DEVICES`` GPUs): one CP-SAT model per
  order over all rank-to-device Booleans (:mod:`.assign`), with the launcher
  block structure as constraints in ``launcher`` mode.  Exact: status OPTIMAL
  when every order is proved.
* **Large clusters**: decomposition along the bandwidth domains.  Ranks come in
  blocks of G (one per host).  (1) Host order: the baseline, the depth-first
  order of the inter-host domain tree, and — when there are at most
  ``HOST_MODEL_MAX_HOSTS`` hosts — a CP-SAT model that assigns blocks to hosts
  over the inter-host ultrametric.  (2) Local GPU order: one small CP-SAT model
  per distinct (host type, intra-block traffic pattern) pair, so identical hosts
  are solved once.  Every candidate is scored with the exact objective
  (:mod:`.objective`) and the best kept; the bound is the analytic
  :func:`~rankmap.solver.objective.lower_bound` (status OPTIMAL only when the
  cost meets it).
* **Tie-breaking**: the baseline (default order, baseline devices) unless
  something is strictly cheaper; then the default order, the other
  megatron-cli order, then fewest ranks moved from the baseline.
"""

from __future__ import annotations

import itertools
import threading
import time
from dataclasses import dataclass
from typing import Mapping, Sequence

import networkx as nx
import numpy as np

from .assign import AssignmentProblem, solve_assignment
from .catalogue import ParallelConfig, megatron_groups
from .cluster import Cluster, cluster_from_graph
from .errors import InfeasibleError, InvalidArgumentError
from .polish import FAQ_MAX_RANKS, POLISH_MAX_RANKS, faq_layout, host_order_search, launcher_projection, polish
from .objective import TRAFFIC_CLASSES, active_families, class_groups, layout_cost, lower_bound
from .ranks import DEFAULT_ORDER, TOKENS
from .types import CostBreakdown, HostPlacement, Layout, SolveCancelled, SolveOptions, SolveResult

__all__ = ["solve", "evaluate", "candidate_orders", "EXACT_MAX_DEVICES", "MEGATRON_CLI_ORDERS"]

#: Clusters up to this many GPUs get the exact all-Boolean CP-SAT model.
EXACT_MAX_DEVICES = 16
#: Up to this many hosts, the host order is also searched with CP-SAT.
HOST_MODEL_MAX_HOSTS = 32
#: The two orders stock Megatron-LM reaches (``--use-tp-pp-dp-mapping`` selects the second).
MEGATRON_CLI_ORDERS = (DEFAULT_ORDER, "tp-cp-ep-pp-dp")
_REL_TOL = 1e-9


def _equivalence_key(cfg: ParallelConfig) -> tuple:
    dec, exp = cfg.decoder(), cfg.expert()
    return (
        tuple(t for t in dec.tokens if dec.sizes[t] > 1),
        tuple(t for t in exp.tokens if exp.sizes[t] > 1),
    )


def candidate_orders(cfg: ParallelConfig, policy: str | Sequence[str]) -> list[ParallelConfig]:
    """The distinct configurations to search for an order policy.

    Parameters
    ----------
    cfg : ParallelConfig
        Sizes (its own order is ignored).
    policy : str or sequence of str
        ``"default"``, ``"megatron-cli"``, ``"all"``, a comma-separated list or a
        sequence of orders.

    Returns
    -------
    list of ParallelConfig
        In priority order (default first, then ``tp-cp-ep-pp-dp``, then the
        rest); orders giving identical groups appear once.

    Raises
    ------
    InvalidArgumentError
        If an explicitly listed order is malformed or rejected for these sizes.
    """
    explicit = False
    if isinstance(policy, str):
        p = policy.strip().lower()
        if p == "default":
            names = [DEFAULT_ORDER]
        elif p == "megatron-cli":
            names = list(MEGATRON_CLI_ORDERS)
        elif p == "all":
            names = list(MEGATRON_CLI_ORDERS) + ["-".join(t) for t in itertools.permutations(TOKENS)]
        else:
            names = [o.strip() for o in policy.split(",")]
            explicit = True
    else:
        names = list(policy)
        explicit = True
    if not names or any(not n for n in names):
        raise InvalidArgumentError(f"orders {policy!r} lists an empty order", "orders")
    out: list[ParallelConfig] = []
    seen = set()
    for name in names:
        try:
            c = cfg.with_order(name)
        except InvalidArgumentError as exc:
            if explicit:
                raise InvalidArgumentError(f"order {name!r} in orders: {exc.message}", "orders") from None
            continue
        key = _equivalence_key(c)
        if key in seen:
            continue
        seen.add(key)
        out.append(c)
    return out


def _priority(order: str) -> int:
    return MEGATRON_CLI_ORDERS.index(order) if order in MEGATRON_CLI_ORDERS else 2


@dataclass
class _Candidate:
    cfg: ParallelConfig
    dev_of_rank: np.ndarray
    cost: CostBreakdown
    rank: int  # position of the order in the candidate list

    def key(self, baseline: np.ndarray):
        changes = int(np.count_nonzero(self.dev_of_rank != baseline))
        return (_priority(self.cfg.order), changes, self.rank)


# ------------------------------------------------------------------ constraints


def _constraint_pairs(cfg: ParallelConfig, groups, traffic_class: str) -> np.ndarray:
    """Consecutive member pairs (p, 2) of every group of a class (rank_offset removed)."""
    arr = class_groups(cfg, groups)[traffic_class] - cfg.rank_offset
    if arr.shape[1] < 2:
        return np.zeros((0, 2), dtype=np.int64)
    return np.stack([arr[:, :-1].ravel(), arr[:, 1:].ravel()], axis=1)


def _satisfies(cluster: Cluster, cfg, groups, dev_of_rank, constraints) -> bool:
    for c in constraints:
        lab = cluster.level_labels(c.level)
        arr = class_groups(cfg, groups)[c.traffic_class] - cfg.rank_offset
        d = lab[dev_of_rank[arr]]
        if np.any(d != d[:, :1]):
            return False
    return True


def _check_capacity(cluster: Cluster, cfg: ParallelConfig, constraints) -> None:
    """Raise InfeasibleError when a constrained group cannot fit any domain of its level."""
    from .objective import CLASS_GROUP

    for c in constraints:
        lab = cluster.level_labels(c.level)
        largest = int(np.bincount(lab).max())
        size = megatron_groups(cfg)[CLASS_GROUP[c.traffic_class]].shape[1]
        if size > largest:
            raise InfeasibleError(
                f"constraint '{c}' cannot hold: a {c.traffic_class} group has {size} ranks but the largest "
                f"{c.level} domain has {largest} GPUs",
                "constraints",
            )


# ------------------------------------------------------------------ traffic between items


def _pair_weights(cfg: ParallelConfig, groups, traffic: Mapping[str, float], item_of_rank: np.ndarray):
    """Traffic between items (ranks or blocks): unordered pairs (m, 2) and bytes (m,), both directions.

    Pairs inside one item are dropped.  Only used on small item counts.
    """
    acc: dict[tuple[int, int], float] = {}
    for _c, kind, arr, pb in active_families(cfg, traffic, groups):
        n = arr.shape[1]
        items = item_of_rank[arr]
        if kind == "p2p_chain":
            u, v = items[:, :-1].ravel(), items[:, 1:].ravel()
            wt = np.full(u.shape, 2.0 * pb)
        else:
            iu, ju = np.triu_indices(n, 1)
            u, v = items[:, iu].ravel(), items[:, ju].ravel()
            wt = np.full(u.shape, 2.0 * pb)
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


# ------------------------------------------------------------------ orders of hosts / devices


def _dfs_host_order(cluster: Cluster) -> np.ndarray:
    """Hosts sorted by their domains from the coarsest level to the finest (stable)."""
    H = len(cluster.hosts)
    first_dev = np.zeros(H, dtype=np.int64)
    first_dev[cluster.host_of[::-1]] = np.arange(cluster.num_devices)[::-1]
    keys = [np.arange(H)] + [cluster.domains[k][first_dev] for k in range(cluster.domains.shape[0])]
    return np.lexsort(keys)  # last key (coarsest level) is primary


def _host_devices(cluster: Cluster) -> tuple[np.ndarray, ...]:
    return cluster.host_devices


# ------------------------------------------------------------------ solve


def _levels_bps(cluster: Cluster) -> np.ndarray:
    return cluster.levels_gbps * 1e9


def _extra_matrix(cluster: Cluster, devs: np.ndarray) -> np.ndarray:
    """Dense ``1/B' - 1/B`` (s/byte) among the given devices (small sets only)."""
    return cluster.extra_inv_bps(devs[:, None], devs[None, :])


def _exact(cluster, cfg, groups, traffic, options, launcher, constraints, baseline, time_limit, cancel):
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
    res = solve_assignment(prob, time_limit_seconds=time_limit, seed=options.seed, cancel=cancel)
    return res


def _local_orders(cluster, cfg, groups, traffic, host_order, options, time_limit, cancel, constraints):
    """Best local GPU order for each host given which block it runs; returns dev_of_rank."""
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
        if kind == "p2p_chain":
            same &= np.abs(p2[:, :, None] - p2[:, None, :]) == 1
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
    cache: dict = {}
    dev_of_rank = np.empty(W, dtype=np.int64)
    for node_rank, h in enumerate(host_order.tolist()):
        d = hdev[h]
        key = (host_key[h], int(pat_id[node_rank]))
        if key not in cache:
            if cancel is not None and cancel.is_set():
                raise SolveCancelled("solve cancelled")
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
                res = solve_assignment(prob, time_limit_seconds=time_limit, seed=options.seed, cancel=cancel)
                cache[key] = res.slot_of_item if res.slot_of_item is not None else np.arange(G)
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


def _host_model_order(cluster, cfg, groups, traffic, options, time_limit, cancel):
    """CP-SAT over blocks -> hosts with the inter-host ultrametric; None when not applicable."""
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
        hint=_dfs_host_order(cluster),  # block b on the b-th host of the depth-first order
    )
    res = solve_assignment(prob, time_limit_seconds=time_limit, seed=options.seed, cancel=cancel, tie_break=False)
    if res.slot_of_item is None:
        return None
    return res.slot_of_item  # host of each block = host order


#: Free mode tries every digit order as a layout up to this many ranks.
VIRTUAL_ORDER_MAX_RANKS = 16384


def _virtual_layouts(cfg: ParallelConfig, dev_seq: np.ndarray):
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


def _domain_level_orders(cluster, cfg, groups, traffic, options, time_limit, cancel, start):
    """Host orders from CP-SAT over whole domains, one model per inter-host level.

    At an inter-host level whose domains all hold D hosts, node ranks come in
    segments of D (one domain each under ``start``, the depth-first order).  The
    segments' mutual bytes and the domains' mutual bandwidths (coarser levels)
    form a small assignment problem over the ultrametric (:mod:`.assign`); its
    solution moves whole segments between domains, e.g. brings the first and
    last pipeline stages into one pod for the embedding all-reduce.  Returns
    the host orders found (node rank -> host).
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
                               tie_break=False)
        if res.slot_of_item is None:
            continue
        order = np.empty(H, dtype=np.int64)
        for s_ in range(n_dom):
            hosts_in = start[np.isin(start, np.flatnonzero(lab == res.slot_of_item[s_]))]
            order[s_ * D : (s_ + 1) * D] = hosts_in
        out.append(order)
    return out


def solve(
    graph: nx.Graph | Cluster,
    cfg: ParallelConfig,
    traffic: Mapping[str, float],
    options: SolveOptions | None = None,
    cancel: threading.Event | None = None,
    _graph_for_subset: nx.Graph | None = None,
) -> SolveResult:
    """Find the order and rank-to-GPU assignment minimising the objective.

    Parameters
    ----------
    graph : networkx.Graph
        The cluster (DESIGN §2).
    cfg : ParallelConfig
        Parallel sizes; ``cfg.world_size`` must equal the number of usable GPUs.
    traffic : mapping class -> bytes per rank per step
    options : SolveOptions
    cancel : threading.Event, optional
        Set it to stop the search (gRPC deadline or cancellation).

    Returns
    -------
    SolveResult

    Raises
    ------
    InvalidArgumentError
        Bad graph, sizes, orders, traffic or options.
    InfeasibleError
        Constraints that no layout satisfies.
    SolveCancelled
        ``cancel`` was set.
    """
    t0 = time.perf_counter()
    options = options or SolveOptions()
    traffic = _check_traffic(traffic)
    if isinstance(graph, Cluster):
        cluster = graph
    else:
        g = graph
        if options.exclude_devices or options.exclude_hosts:
            g = _exclude(graph, options)
        cluster = cluster_from_graph(g)
    if cfg.world_size != cluster.num_devices:
        raise InvalidArgumentError(
            f"world_size {cfg.world_size} does not match the {cluster.num_devices} usable GPUs of the cluster",
            "world_size",
        )
    W = cfg.world_size
    launcher = options.mode == "launcher"
    if launcher:
        gph = cluster.gpus_per_host
        if np.unique(gph).size != 1:
            detail = ", ".join(f"{h}={c}" for h, c in list(zip(cluster.hosts, gph.tolist()))[:6])
            raise InvalidArgumentError(
                f"launcher mode needs the same GPU count on every host (torchrun --nproc-per-node), got {detail}; "
                f"use mode free",
                "mode",
            )
    orders = candidate_orders(cfg, options.orders)
    if not orders:
        raise InvalidArgumentError(f"no order in {options.orders!r} is valid for these sizes", "orders")
    constraints = tuple(options.constraints)
    base_cfg = cfg.with_order(DEFAULT_ORDER)
    baseline_dev = np.arange(W, dtype=np.int64)
    base_groups = megatron_groups(base_cfg)
    baseline_cost = layout_cost(cluster, base_cfg, baseline_dev, traffic, base_groups)
    for c in constraints:
        cluster.level_labels(c.level)  # validates the level name
    _check_capacity(cluster, base_cfg, constraints)

    candidates: list[_Candidate] = []
    if _satisfies(cluster, base_cfg, base_groups, baseline_dev, constraints):
        candidates.append(_Candidate(base_cfg, baseline_dev, baseline_cost, -1))
    order_bounds: list[float] = []
    per_order_limit = max(0.05, options.time_limit_seconds / max(1, len(orders)))
    analytic = min(lower_bound(cluster, o, traffic) for o in orders)

    for idx, ocfg in enumerate(orders):
        if cancel is not None and cancel.is_set():
            raise SolveCancelled("solve cancelled")
        groups = megatron_groups(ocfg)
        if options.mode == "fixed":
            dev = baseline_dev
            cost = layout_cost(cluster, ocfg, dev, traffic, groups)
            if _satisfies(cluster, ocfg, groups, dev, constraints):
                candidates.append(_Candidate(ocfg, dev, cost, idx))
                order_bounds.append(cost.total_seconds)
            continue
        if W <= EXACT_MAX_DEVICES:
            res = _exact(cluster, ocfg, groups, traffic, options, launcher, constraints, baseline_dev,
                         per_order_limit, cancel)
            if res.infeasible:
                continue
            if res.slot_of_item is None:
                order_bounds.append(max(analytic, res.bound_seconds))
                continue
            dev = res.slot_of_item
            cost = layout_cost(cluster, ocfg, dev, traffic, groups)
            candidates.append(_Candidate(ocfg, dev, cost, idx))
            order_bounds.append(cost.total_seconds if res.optimal else max(analytic, res.bound_seconds))
            continue
        # decomposition for large clusters
        order_bounds.append(analytic)
        host_orders = [np.arange(len(cluster.hosts)), _dfs_host_order(cluster)]
        if launcher or np.unique(cluster.gpus_per_host).size == 1:
            if len(cluster.hosts) <= HOST_MODEL_MAX_HOSTS:
                ho = _host_model_order(cluster, ocfg, groups, traffic, options, per_order_limit / 2, cancel)
                if ho is not None:
                    host_orders.append(ho)
            dom_orders = _domain_level_orders(cluster, ocfg, groups, traffic, options, per_order_limit / 4,
                                              cancel, host_orders[1])
            host_orders += dom_orders
            host_orders += host_order_search(cluster, ocfg, traffic, (dom_orders or host_orders)[-1],
                                             per_order_limit / 4, options.seed, groups, cancel)
            seen = set()
            for ho in host_orders:
                k = ho.tobytes()
                if k in seen:
                    continue
                seen.add(k)
                dev = _local_orders(cluster, ocfg, groups, traffic, ho, options, per_order_limit / 4, cancel,
                                    constraints)
                if not _satisfies(cluster, ocfg, groups, dev, constraints):
                    continue
                cost = layout_cost(cluster, ocfg, dev, traffic, groups)
                candidates.append(_Candidate(ocfg, dev, cost, idx))
        else:
            # free mode, uneven hosts: devices in depth-first domain order
            keys = [np.arange(W)] + [cluster.domains[k] for k in range(cluster.domains.shape[0])]
            dev = np.lexsort(keys)
            if _satisfies(cluster, ocfg, groups, dev, constraints):
                candidates.append(_Candidate(ocfg, dev, layout_cost(cluster, ocfg, dev, traffic, groups), idx))

    if candidates and options.mode == "free" and EXACT_MAX_DEVICES < W <= VIRTUAL_ORDER_MAX_RANKS:
        # Free mode may lay ranks out in any digit order, even one Megatron rejects for these sizes
        # (e.g. pp innermost when edp != dp forces pp last): number ranks by the chosen order, place
        # them by another.
        best_now = min(candidates, key=lambda c: c.cost.total_seconds)
        keys = [np.arange(W)] + [cluster.domains[k] for k in range(cluster.domains.shape[0])]
        dev_seq = np.lexsort(keys)  # depth-first device order
        for vdev in _virtual_layouts(best_now.cfg, dev_seq):
            if constraints and not _satisfies(cluster, best_now.cfg, megatron_groups(best_now.cfg), vdev,
                                              constraints):
                continue
            candidates.append(_Candidate(best_now.cfg, vdev, layout_cost(cluster, best_now.cfg, vdev, traffic),
                                         best_now.rank))

    if candidates and options.mode != "fixed" and EXACT_MAX_DEVICES < W <= POLISH_MAX_RANKS:
        # swap local search from the best few layouts (distinct orders), mid-size clusters only
        seen_orders: set = set()
        top = []
        for cand in sorted(candidates, key=lambda c: (c.cost.total_seconds, c.key(baseline_dev))):
            if cand.cfg.order not in seen_orders:
                seen_orders.add(cand.cfg.order)
                top.append(cand)
            if len(top) == 3:
                break
        starts = [(cand, cand.dev_of_rank) for cand in top]
        if W <= FAQ_MAX_RANKS:
            # scipy's Fast Approximate QAP (Vogelstein et al. 2015) as another starting point, for the
            # best orders so far and the two stock Megatron-LM orders; in launcher mode projected onto
            # contiguous blocks per host
            faq_for = list(top)
            for cand in sorted(candidates, key=lambda c: (_priority(c.cfg.order), c.cost.total_seconds)):
                if cand.cfg.order in MEGATRON_CLI_ORDERS and all(cand.cfg.order != t.cfg.order for t in faq_for):
                    faq_for.append(cand)
            for cand in faq_for:
                start = faq_layout(cluster, cand.cfg, traffic, options.seed)
                if launcher:
                    start = launcher_projection(cluster, start)
                starts.append((cand, start))
        budget = max(0.5, options.time_limit_seconds / 3) / max(1, len(starts))
        for cand, start in starts:
            grp = megatron_groups(cand.cfg)
            check = None
            if constraints:
                check = (lambda q, _c=cand.cfg, _g=grp: _satisfies(cluster, _c, _g, q, constraints))
                if not check(start):
                    continue
            dev = polish(cluster, cand.cfg, traffic, start, options.mode, budget, grp, cancel, check)
            if not np.array_equal(dev, cand.dev_of_rank):
                candidates.append(_Candidate(cand.cfg, dev, layout_cost(cluster, cand.cfg, dev, traffic, grp),
                                             cand.rank))

    if not candidates:
        raise InfeasibleError(
            "no layout satisfies the constraints " + "; ".join(str(c) for c in constraints), "constraints"
        )
    best_cost = min(c.cost.total_seconds for c in candidates)
    tol = _REL_TOL * max(best_cost, 1e-30)
    tied = [c for c in candidates if c.cost.total_seconds <= best_cost + tol]
    best = min(tied, key=lambda c: c.key(baseline_dev))
    bound = min(min(order_bounds, default=best_cost), best_cost)
    status = "OPTIMAL" if best_cost <= bound * (1 + 1e-9) + 1e-30 else "FEASIBLE"
    return _result(cluster, best, base_cfg, baseline_dev, baseline_cost, status, bound, t0, traffic, options, orders,
                   launcher)


def _check_traffic(traffic: Mapping[str, float]) -> dict[str, float]:
    out = {}
    for k, v in dict(traffic or {}).items():
        if k not in TRAFFIC_CLASSES:
            raise InvalidArgumentError(
                f"unknown traffic class {k!r}; known: {', '.join(TRAFFIC_CLASSES)}", f"traffic.{k}"
            )
        try:
            fv = float(v)
        except (TypeError, ValueError):
            raise InvalidArgumentError(f"traffic {k} = {v!r} is not a number of bytes", f"traffic.{k}") from None
        if not np.isfinite(fv) or fv < 0:
            raise InvalidArgumentError(f"traffic {k} = {v!r} must be finite and >= 0 bytes", f"traffic.{k}")
        out[k] = fv
    return out


def _exclude(graph: nx.Graph, options: SolveOptions) -> nx.Graph:
    drop = []
    hosts = set(options.exclude_hosts)
    devs = set(options.exclude_devices)
    seen_hosts = set()
    for n, d in graph.nodes(data=True):
        if d.get("kind", "gpu") != "gpu":
            continue
        h = str(d.get("host", n))
        seen_hosts.add(h)
        if n in devs or str(n) in devs or h in hosts:
            drop.append(n)
    gpu_ids = {str(n) for n, d in graph.nodes(data=True) if d.get("kind", "gpu") == "gpu"}
    not_gpu = {str(x) for x in devs} - gpu_ids
    if not_gpu:
        name = sorted(not_gpu)[0]
        what = "is not a node of the cluster" if name not in {str(n) for n in graph.nodes} else "is not a GPU"
        raise InvalidArgumentError(f"excluded device {name!r} {what}", "exclude_devices")
    missing_devs = devs - {str(n) for n in graph.nodes} - set(graph.nodes)
    if missing_devs:
        raise InvalidArgumentError(
            f"excluded device {sorted(map(str, missing_devs))[0]!r} is not a node of the cluster", "exclude_devices"
        )
    missing_hosts = hosts - seen_hosts
    if missing_hosts:
        raise InvalidArgumentError(
            f"excluded host {sorted(missing_hosts)[0]!r} is not a host of the cluster", "exclude_hosts"
        )
    g = graph.copy()
    g.remove_nodes_from(drop)
    return g


def _same_groups_as(cfg: ParallelConfig, order: str) -> bool:
    """Whether ``cfg`` builds the same groups as ``order`` (False if ``order`` is invalid for its sizes)."""
    try:
        return _equivalence_key(cfg) == _equivalence_key(cfg.with_order(order))
    except InvalidArgumentError:
        return False


def _apply(cfg: ParallelConfig, hosts: Sequence[HostPlacement], launcher: bool) -> dict:
    if cfg.order == DEFAULT_ORDER or _same_groups_as(cfg, DEFAULT_ORDER):
        megatron_args: list[str] = []
        note = "default order: no Megatron flag needed"
    elif _same_groups_as(cfg, "tp-cp-ep-pp-dp"):
        megatron_args = ["--use-tp-pp-dp-mapping"]
        note = "Megatron-LM: --use-tp-pp-dp-mapping (order tp-cp-ep-pp-dp)"
    else:
        megatron_args = []
        note = f"megatron-core: initialize_model_parallel(..., order={cfg.order!r})"
    out = {
        "order": cfg.order,
        "megatron_args": megatron_args,
        "note": note,
        "hostfile": [h.host for h in hosts],
    }
    if launcher:
        out["torchrun"] = [
            f"CUDA_VISIBLE_DEVICES={','.join(map(str, h.cuda_visible_devices))} torchrun --nnodes {len(hosts)} "
            f"--node-rank {h.node_rank} --nproc-per-node {len(h.cuda_visible_devices)}"
            for h in hosts
        ]
    return out


def host_placements(cluster: Cluster, dev_of_rank: np.ndarray) -> tuple[HostPlacement, ...]:
    """Per host: node rank, CUDA_VISIBLE_DEVICES by local rank, global ranks (hosts by lowest rank)."""
    host = cluster.host_of[dev_of_rank]
    hosts_used, first_rank = np.unique(host, return_index=True)
    by_host = np.argsort(host, kind="stable")
    counts = np.bincount(host, minlength=len(cluster.hosts))
    starts = np.concatenate([[0], np.cumsum(counts)])
    out = []
    for node_rank, h in enumerate(hosts_used[np.argsort(first_rank)].tolist()):
        ranks = by_host[starts[h] : starts[h + 1]]
        out.append(
            HostPlacement(
                host=cluster.hosts[h],
                node_rank=node_rank,
                cuda_visible_devices=tuple(int(x) for x in cluster.local_index[dev_of_rank[ranks]]),
                global_ranks=tuple(int(r) + 0 for r in ranks),
            )
        )
    return tuple(out)


def _result(cluster, best, base_cfg, baseline_dev, baseline_cost, status, bound, t0, traffic, options, orders,
            launcher) -> SolveResult:
    devices = cluster.devices
    hosts = host_placements(cluster, best.dev_of_rank)
    if best.cfg.rank_offset:
        hosts = tuple(
            HostPlacement(h.host, h.node_rank, h.cuda_visible_devices,
                          tuple(r + best.cfg.rank_offset for r in h.global_ranks))
            for h in hosts
        )
    return SolveResult(
        config=best.cfg,
        layout=Layout(best.cfg.order, tuple(str(devices[i]) for i in best.dev_of_rank), best.cost),
        baseline=Layout(base_cfg.order, tuple(str(devices[i]) for i in baseline_dev), baseline_cost),
        hosts=hosts,
        status=status,
        bound_seconds=float(bound),
        solve_seconds=time.perf_counter() - t0,
        groups=megatron_groups(best.cfg),
        traffic=dict(traffic),
        apply=_apply(best.cfg, hosts, launcher),
        mode=options.mode,
        orders_searched=tuple(c.order for c in orders),
    )


def evaluate(
    graph: nx.Graph | Cluster,
    cfg: ParallelConfig,
    assignment: Sequence[str],
    traffic: Mapping[str, float],
) -> CostBreakdown:
    """Cost of a given layout: ``assignment[r]`` is the GPU node id running global rank r.

    Raises
    ------
    InvalidArgumentError
        If the assignment's length differs from the world size, names an
        unknown or non-GPU node, or uses a GPU twice.
    """
    cluster = graph if isinstance(graph, Cluster) else cluster_from_graph(graph)
    traffic = _check_traffic(traffic)
    assignment = list(assignment)
    if len(assignment) != cfg.world_size:
        raise InvalidArgumentError(
            f"assignment has {len(assignment)} entries but world_size is {cfg.world_size}", "assignment"
        )
    index = {str(d): i for i, d in enumerate(cluster.devices)}
    dev = np.empty(len(assignment), dtype=np.int64)
    used: dict[int, int] = {}
    for r, a in enumerate(assignment):
        i = index.get(str(a))
        if i is None:
            raise InvalidArgumentError(f"assignment[{r}] = {a!r} is not a GPU of the cluster", f"assignment[{r}]")
        if i in used:
            raise InvalidArgumentError(
                f"assignment[{r}] = {a!r} is already used by rank {used[i]}", f"assignment[{r}]"
            )
        used[i] = r
        dev[r] = i
    if len(dev) != cluster.num_devices:
        pass  # a job may use a subset of the cluster's GPUs
    return layout_cost(cluster, cfg, dev, traffic)
