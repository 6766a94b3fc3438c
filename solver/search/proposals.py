"""The surrogate models' layouts for one order on larger clusters (DESIGN §5).

Up to ``EXACT_MAX_DEVICES`` GPUs one exact surrogate model (:mod:`.decompose`).  Above, in
launcher mode or on equal hosts: host orders (the launcher's, by index, depth-first, the
CP-SAT host model, per domain level, the swap search of :mod:`.polish`, recursive tree
partitions of :mod:`.partition`, nested grid tilings and whole NVLink domains per stage run of :mod:`.tiling`,
adjacent stages paired on shared NVLink domains of :mod:`.stagepairs`), each laid out with
the local GPU orders of :func:`~.decompose.local_orders`.  Free mode on uneven hosts: tree
partitions of the ranks and the depth-first device order.
"""

from __future__ import annotations

import numpy as np

from ..megatron.config import ParallelConfig
from .decompose import (
    EXACT_MAX_DEVICES,
    HOST_MODEL_MAX_HOSTS,
    dfs_host_order,
    domain_level_orders,
    host_model_order,
    local_orders,
    surrogate_exact,
)
from ..bound.work import charge
from .partition import partition_seconds, tree_partition_host_order, tree_partition_layout
from .polish import host_order_search
from .problem import Problem
from .refine import eval_seconds
from .stagepairs import stage_pair_host_orders
from .tiling import domain_packed_host_orders, ragged_host_levels, tiling_host_orders

__all__ = ["propose"]


def propose(p: Problem, ocfg: ParallelConfig, groups, time_limit: float, surrogate_models: bool = True) -> list:
    """Layouts proposed by the surrogate models for one order (device per rank arrays).

    ``time_limit``: deterministic budget of the order's models, seconds;
    ``p.deadline``: the solve's wall-clock stop (models not started by then are skipped).
    Free mode on uneven hosts adds the recursive tree partition (:mod:`.partition`;
    on equal hosts the orchestrator makes it first); without
    ``surrogate_models`` only the baseline (and that partition) is returned.
    """
    cluster, options, launcher, surrogate, deadline = p.cluster, p.options, p.launcher, p.surrogate, p.deadline
    W = ocfg.world_size
    out = [p.baseline_dev]
    cancel = deadline.cancel
    if not launcher and not cluster.equal_hosts and not deadline.check():  # equal hosts: first
        for bisect in (False, True):
            charge(partition_seconds(W))  # nominal work outside CP-SAT's budget (the search counts it)
            lay = tree_partition_layout(cluster, ocfg, groups, surrogate, options.seed, bisect, deadline)
            if lay is not None:
                out.append(lay)
    if not surrogate_models:
        return out
    if W <= EXACT_MAX_DEVICES:
        res = surrogate_exact(cluster, ocfg, groups, surrogate, options, launcher, p.constraints, p.baseline_dev,
                              time_limit, cancel, deadline)
        if res.slot_of_item is not None:
            out.append(res.slot_of_item)
        return out
    if launcher or cluster.equal_hosts:
        seen = set()
        for ho in _host_orders(p, ocfg, groups, time_limit):
            k = ho.tobytes()
            if k in seen:
                continue
            if seen and deadline.check():
                break  # the baseline host order is always laid out
            seen.add(k)
            out.append(local_orders(cluster, ocfg, groups, surrogate, ho, options, time_limit / 4, cancel,
                                    p.constraints, deadline))
    else:
        keys = [np.arange(W)] + [cluster.domains[k] for k in range(cluster.domains.shape[0])]
        out.append(np.lexsort(keys))  # free mode, uneven hosts: depth-first device order
    return out


def _host_orders(p: Problem, ocfg: ParallelConfig, groups, time_limit: float) -> list:
    """The host orders of the models, in order, repeats included (models not started by the deadline are skipped)."""
    cluster, options, surrogate, deadline = p.cluster, p.options, p.surrogate, p.deadline
    cancel = deadline.cancel
    hob = cluster.host_of[p.baseline_dev]
    launch_hosts = hob[np.sort(np.unique(hob, return_index=True)[1])]  # the launcher's host order
    host_orders = [launch_hosts, np.arange(len(cluster.hosts)), dfs_host_order(cluster)]
    if len(cluster.hosts) <= HOST_MODEL_MAX_HOSTS and not deadline.check():
        ho = host_model_order(cluster, ocfg, groups, surrogate, options, time_limit / 2, cancel, deadline)
        if ho is not None:
            host_orders.append(ho)
    dom_orders = domain_level_orders(cluster, ocfg, groups, surrogate, options, time_limit / 4, cancel,
                                     host_orders[2], deadline)
    host_orders += dom_orders
    if not deadline.check():
        host_orders += host_order_search(cluster, ocfg, surrogate, (dom_orders or host_orders)[-1],
                                         time_limit / 4, options.seed, groups, cancel, deadline)
    for bisect in (False, True):
        charge(partition_seconds(len(cluster.hosts)))  # nominal work outside CP-SAT's budget (the search counts it)
        ho = None if deadline.check() else tree_partition_host_order(cluster, ocfg, groups, surrogate,
                                                                      options.seed, bisect, deadline)
        if ho is not None:
            host_orders.append(ho)
    # nested grid boxes along the fabric tree: as many as half the order's model budget evaluates
    tilings = int(time_limit / 2 / eval_seconds(cluster, ocfg, surrogate))
    if ragged_host_levels(cluster) is not None:
        tilings = max(tilings, 2)  # a ragged tree: one box of each of its two sizes
    if tilings > 0 and not deadline.check():
        host_orders += tiling_host_orders(cluster, ocfg)[:tilings]
    if not deadline.check():  # whole NVLink domains inside each run of the outermost axis (one order)
        host_orders += domain_packed_host_orders(cluster, ocfg)
    if not deadline.check():  # adjacent pipeline stages paired on shared NVLink domains
        embedding = float(p.traffic.get("embedding", 0) or 0) > 0
        host_orders += stage_pair_host_orders(cluster, ocfg, embedding)
    return host_orders
