"""Launcher proposals from the first order's rank-level tree partitions (solver/search/proposals.py).

On NVL72-style racks left partly used (64 GPUs: racks of 5, 3, 4 and 4 trays of 4 GPUs, tp4 pp4)
the two rank partitions (bisection, one k-way cut, ring pairs) are laid out as host orders: each is
a permutation of the hosts, equals the host order of the partition's launcher projection, and is
proposed for the first order only and only when the partitions fit their share of the limit.
"""

import numpy as np
import pytest

pytest.importorskip("pymetis")


def _problem(time_limit=6.0):
    from rankmap.solver import SolveOptions, cluster_from_graph, parallel_config
    from rankmap.solver.fabric.builders import nvl72_cluster
    from rankmap.solver.search.problem import Problem, solve_deadline

    g = nvl72_cluster(4, hosts_per_rack=5)
    drop = [n for n, d in g.nodes(data=True)
            if d.get("host") and int(d["host"][3:]) >= (5, 3, 4, 4)[int(d["host"][1])]]
    g.remove_nodes_from(drop)
    g.remove_nodes_from([n for n in list(g.nodes) if g.degree(n) == 0])
    cluster = cluster_from_graph(g)
    assert cluster.num_devices == 64
    cfg = parallel_config(64, tp=4, pp=4)
    traffic = dict(tp=1e9, dp=6e8, pp=1.3e8, embedding=2e8)
    opts = SolveOptions(mode="launcher", orders="all", time_limit_seconds=time_limit)
    return Problem.prepare(cluster, cfg, traffic, opts, solve_deadline(None, opts, 64, None), lambda *a, **k: None)


def test_rank_partitions_become_host_orders():
    from rankmap.solver.search.partition import tree_partition_layout
    from rankmap.solver.search.polish import launcher_projection
    from rankmap.solver.search.proposals import _rank_partition_host_orders

    p = _problem()
    cl = p.cluster
    orders = _rank_partition_host_orders(p, p.orders[0], p.groups(0))
    assert len(orders) == 2
    for bisect, ho in zip((True, False), orders):
        assert sorted(ho.tolist()) == list(range(16))  # every host once
        lay = tree_partition_layout(cl, p.orders[0], p.groups(0), p.surrogate, 0, bisect, None, "ring")
        proj = launcher_projection(cl, lay)
        # blocks of 4 consecutive ranks on one host, in the proposed host order
        assert (cl.host_of[proj].reshape(16, 4) == ho[:, None]).all()
    # the other orders get none (their partitions only renumber the first order's)
    assert _rank_partition_host_orders(p, p.orders[1], p.groups(1)) == []


def test_rank_partitions_skipped_when_over_their_share():
    from rankmap.solver.search.partition import partition_seconds
    from rankmap.solver.search.proposals import RANK_PARTITION_SHARE, _rank_partition_host_orders

    limit = 2 * partition_seconds(64) / RANK_PARTITION_SHARE  # the limit whose share the two just fill
    p = _problem(limit * 1.01)
    assert len(_rank_partition_host_orders(p, p.orders[0], p.groups(0))) == 2
    p = _problem(limit * 0.99)
    assert _rank_partition_host_orders(p, p.orders[0], p.groups(0)) == []


def test_launcher_solve_no_worse_than_the_rank_partition():
    """The launcher answer is at most the cost of the rank partition's projected layout."""
    from rankmap.solver import layout_cost, solve
    from rankmap.solver.search.partition import tree_partition_layout
    from rankmap.solver.search.polish import launcher_projection

    p = _problem()
    cl = p.cluster
    lay = tree_partition_layout(cl, p.orders[0], p.groups(0), p.surrogate, 0, True, None, "ring")
    proj_cost = layout_cost(cl, p.orders[0], launcher_projection(cl, lay), p.traffic).total_seconds
    r = solve(cl, p.orders[0].with_order(p.orders[0].order), p.traffic, p.options)
    assert r.cost.total_seconds <= proj_cost * (1 + 1e-9)
    assert np.isfinite(r.bound_seconds) and r.bound_seconds <= r.cost.total_seconds * (1 + 1e-9)
