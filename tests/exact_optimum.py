"""The optimum of the real objective on tiny instances, as the oracle of the bound tests.

Every layout of the mode (free: all bijections, launcher: host order x local orders) and every
order is priced with :func:`rankmap.solver.cost.timemodel.layout_cost`, the time model as NCCL
runs collectives (channels, PXN, all-reduce algorithms, latency).  Layouts whose groups are the
same device tuples up to what the model cannot see (the order of a class's groups, a 2-member
group's direction, a pipeline chain read backwards) cost the same and are priced once.

Above ``LAYOUT_COST_MAX`` distinct layouts (8-GPU instances: up to 40,320 per order) the
exhaustive search's :func:`~rankmap.solver.search.exhaustive.bulk_cost` scores them instead, and
``layout_cost`` re-prices its best layout of every order and a sample of others: equal, or the
oracle fails.
"""

from __future__ import annotations

import numpy as np
import pytest

from rankmap.solver.cost.timemodel import class_groups, layout_cost
from rankmap.solver.megatron.catalogue import megatron_groups
from rankmap.solver.search.exhaustive import PairRoutes, bulk_cost, enumerate_layouts
from rankmap.solver.traffic import TRAFFIC_CLASSES, class_collectives

#: Most distinct layouts priced one by one with layout_cost (~5-15 ms each).
LAYOUT_COST_MAX = 2500
#: Layouts per order re-priced with layout_cost when bulk_cost scores the enumeration.
CROSS_CHECKS = 12


def _signature(cfg, fam, traffic, dev: np.ndarray) -> tuple:
    """What the time model sees of a layout: per class with bytes, its groups' device tuples, canonical."""
    sig = []
    for c in TRAFFIC_CLASSES:
        if not traffic.get(c):
            continue
        arr = fam[c] - cfg.rank_offset
        if arr.ndim != 2 or arr.shape[1] <= 1:
            continue
        d = dev[np.sort(arr, axis=1)]
        kinds = {p.kind for p in class_collectives(traffic, c)}
        if d.shape[1] == 2:
            d = np.sort(d, axis=1)  # a ring, chain or all-to-all of two runs the same both ways
        elif kinds == {"p2p_chain"}:
            rev = d[:, ::-1]
            first = np.argmax(d != rev, axis=1)
            flip = rev[np.arange(d.shape[0]), first] < d[np.arange(d.shape[0]), first]
            d = np.where(flip[:, None], rev, d)  # sends both ways: a chain read backwards is the same
        sig.append((c, tuple(sorted(map(tuple, d.tolist())))))
    return tuple(sig)


def optimum(cluster, orders, traffic, exposure=None, mode="free", layouts=None) -> float:
    """Least ``layout_cost(...).total_seconds`` over every layout of ``mode`` and every order of ``orders``."""
    layouts = enumerate_layouts(cluster, mode) if layouts is None else layouts
    exposure = dict(exposure or {})
    if layouts.shape[0] * len(orders) <= LAYOUT_COST_MAX:
        seen: dict = {}
        for ocfg in orders:
            groups = megatron_groups(ocfg)
            fam = class_groups(ocfg, groups)
            for dev in layouts:
                key = _signature(ocfg, fam, traffic, dev)
                if key not in seen:
                    seen[key] = layout_cost(cluster, ocfg, dev, traffic, groups, exposure).total_seconds
        return min(seen.values(), default=0.0)
    routes = PairRoutes(cluster)
    rng = np.random.default_rng(0)
    best = np.inf
    for ocfg in orders:
        groups = megatron_groups(ocfg)
        cost = bulk_cost(routes, ocfg, groups, traffic, layouts, exposure)
        picks = [int(np.argmin(cost))] + rng.integers(0, layouts.shape[0], CROSS_CHECKS).tolist()
        for i in picks:
            real = layout_cost(cluster, ocfg, layouts[i], traffic, groups, exposure).total_seconds
            assert cost[i] == pytest.approx(real, rel=1e-9, abs=1e-15), (ocfg.order, layouts[i].tolist())
        best = min(best, float(cost.min()))
    return best


#: The traffic classes in the order the bound tests' 8-payload lists give them.
PAYLOAD_CLASSES = ("tp", "cp", "dp", "pp", "ep", "etp", "edp", "embedding")


def eight_gpu_free_case(case, payloads, oversub, need=("tp",), **cluster_kw):
    """An 8-GPU instance of the bound tests and its exhaustive free optimum (all 8! bijections, every order).

    ``case``: ``(hosts, gpus per host, sizes)``; ``payloads``: 8 bytes per rank in :data:`PAYLOAD_CLASSES`
    order, the classes in ``need`` raised to 1e9 when 0; ``oversub``: leaves of two hosts with that
    uplink oversubscription (4 hosts or more), or None; ``cluster_kw``: more :func:`fat_tree_cluster`
    arguments (25 GB/s NICs unless given).  Returns ``(cluster, cfg, traffic, orders, optimum seconds)``.
    """
    from rankmap.solver import cluster_from_graph, fat_tree_cluster, parallel_config
    from rankmap.solver.megatron.orders import candidate_orders

    hosts, gpus, sizes = case
    tiers = [(2, oversub)] if oversub and hosts >= 4 else []
    kw = {"nic_bandwidth_gbps": 25.0, **cluster_kw}
    cl = cluster_from_graph(fat_tree_cluster(hosts, gpus, tiers=tiers, **kw))
    cfg = parallel_config(8, **sizes)
    traffic = dict(zip(PAYLOAD_CLASSES, payloads))
    for c in need:
        traffic[c] = traffic[c] or 1e9
    orders = candidate_orders(cfg, "all")
    return cl, cfg, traffic, orders, optimum(cl, orders, traffic, None, "free", enumerate_layouts(cl, "free"))


def small_oversubscribed_trees() -> dict:
    """Tiny oversubscribed trees and every free layout of each (8! or 6! bijections): name -> (cluster, layouts)."""
    from rankmap.solver import cluster_from_graph, fat_tree_cluster

    out = {}
    for name, g in (("2 leaves of 2x2", fat_tree_cluster(4, 2, nic_bandwidth_gbps=25.0, tiers=[(2, 4.0)])),
                    ("4 leaves of 2x1", fat_tree_cluster(8, 1, nic_bandwidth_gbps=25.0, tiers=[(2, 4.0)])),
                    ("pods of leaves", fat_tree_cluster(8, 1, nic_bandwidth_gbps=25.0, tiers=[(2, 2.0), (2, 2.0)])),
                    ("3 leaves of 2x1", fat_tree_cluster(6, 1, nic_bandwidth_gbps=25.0, tiers=[(2, 4.0)]))):
        cl = cluster_from_graph(g)
        out[name] = (cl, enumerate_layouts(cl, "free"))
    return out
