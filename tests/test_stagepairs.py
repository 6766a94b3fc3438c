"""Launcher host orders pairing adjacent pipeline stages on shared NVLink domains (solver/search/stagepairs.py).

Hand-derived orders on NVL72-style racks of 4 trays (16 hosts, tp4 pp4: 4 hosts per stage), the
pieces' sizes on a fragmented allocation, where the proposals do not apply, and a launcher solve that
is no worse than the best proposal.
"""

import numpy as np
import pytest

from rankmap.solver import cluster_from_graph, layout_cost, parallel_config, solve, SolveOptions
from rankmap.solver.fabric.builders import fat_tree_cluster, nvl72_cluster
from rankmap.solver.search.stagepairs import STAGE_PAIR_MIN_PIECES, stage_pair_host_orders


def _fragment(trays):
    """NVL72-style racks keeping the first ``trays[r]`` trays of rack r (4 GPUs each)."""
    g = nvl72_cluster(len(trays), hosts_per_rack=max(trays), hosts_per_leaf=max(trays))
    drop = [n for n, d in g.nodes(data=True) if d.get("host") and int(d["host"].split("t")[1]) >= trays[
        int(d["host"][1:].split("t")[0])]]
    g.remove_nodes_from(drop)
    g.remove_nodes_from([n for n in list(g.nodes) if g.degree(n) == 0])
    return g


def _names(cluster, order):
    return [cluster.hosts[h] for h in order]


def test_hand_derived_orders_on_four_racks_of_four():
    """Racks r0..r3 of 4 trays, pp4: the cycle pairs (3, 0) and (1, 2) take two racks each (subset sum 8);
    each rack is shared, the first two trays to the pair's first stage, the last two to the second, at the
    same positions.  With m = 2 and m = 3 / 4 (a rack of 4 < 2m goes whole to one stage) the orders differ."""
    cl = cluster_from_graph(_fragment([4, 4, 4, 4]))
    cfg = parallel_config(64, tp=4, pp=4)
    orders = stage_pair_host_orders(cl, cfg)
    assert 2 <= len(orders) <= len(STAGE_PAIR_MIN_PIECES)
    first = _names(cl, orders[0])  # cycle pairs, m = 2
    # stage s holds positions [4s, 4s + 4)
    assert first[12:16] == ["r0t00", "r0t01", "r1t00", "r1t01"]  # stage 3
    assert first[0:4] == ["r0t02", "r0t03", "r1t02", "r1t03"]  # stage 0: embedding partners on the same rack
    assert first[4:8] == ["r2t00", "r2t01", "r3t00", "r3t01"]  # stage 1
    assert first[8:12] == ["r2t02", "r2t03", "r3t02", "r3t03"]  # stage 2: pipeline partners of stage 1
    second = _names(cl, orders[1])  # cycle pairs, m = 3: each rack of 4 whole to one stage
    assert second[12:16] == ["r0t00", "r0t01", "r0t02", "r0t03"]
    assert second[0:4] == ["r1t00", "r1t01", "r1t02", "r1t03"]
    for o in orders:
        assert sorted(o.tolist()) == list(range(16))


def test_chain_pairs_without_embedding_bytes():
    """Without embedding traffic the pairs are the chain's (0, 1) and (2, 3): stage 0 and stage 1 share r0 and r1."""
    cl = cluster_from_graph(_fragment([4, 4, 4, 4]))
    cfg = parallel_config(64, tp=4, pp=4)
    first = _names(cl, stage_pair_host_orders(cl, cfg, embedding=False)[0])
    assert first[0:4] == ["r0t00", "r0t01", "r1t00", "r1t01"]  # stage 0
    assert first[4:8] == ["r0t02", "r0t03", "r1t02", "r1t03"]  # stage 1: pipeline partners of stage 0
    assert first[8:12] == ["r2t00", "r2t01", "r3t00", "r3t01"]  # stage 2
    assert first[12:16] == ["r2t02", "r2t03", "r3t02", "r3t03"]  # stage 3


def test_pieces_keep_m_hosts_on_a_fragment():
    """Racks of 7, 5, 6 and 6 trays (24 hosts, pp4, 6 per stage): in every proposal each stage is 6 hosts,
    and a stage split over racks keeps at least 2 hosts on each (the least m)."""
    cl = cluster_from_graph(_fragment([7, 5, 6, 6]))
    cfg = parallel_config(96, tp=4, pp=4)
    orders = stage_pair_host_orders(cl, cfg)
    assert orders
    rack = np.array([int(h[1:].split("t")[0]) for h in cl.hosts])
    for o in orders:
        assert sorted(o.tolist()) == list(range(24))
        for s in range(4):
            counts = np.bincount(rack[o[6 * s:6 * s + 6]], minlength=4)
            assert counts.sum() == 6
            if (counts > 0).sum() > 1:
                assert counts[counts > 0].min() >= 2


@pytest.mark.parametrize("sizes, graph", [
    (dict(tp=4, pp=3), lambda: _fragment([4, 4, 4])),  # pp odd
    (dict(tp=4, pp=4), lambda: fat_tree_cluster(16, 4)),  # every NCCL node one host
])
def test_no_proposal_where_it_does_not_apply(sizes, graph):
    g = graph()
    cl = cluster_from_graph(g)
    cfg = parallel_config(cl.num_devices, **sizes)
    assert stage_pair_host_orders(cl, cfg) == []


def test_no_proposal_when_pp_is_not_outermost():
    cl = cluster_from_graph(_fragment([4, 4, 4, 4]))
    cfg = parallel_config(64, tp=4, pp=4).with_order("tp-cp-ep-pp-dp")
    assert stage_pair_host_orders(cl, cfg) == []


def test_launcher_solve_no_worse_than_the_best_proposal():
    g = _fragment([7, 5, 6, 6])
    cl = cluster_from_graph(g)
    cfg = parallel_config(96, tp=4, pp=4)
    traffic = dict(tp=1.6e9, dp=6.3e8, pp=1.3e8, embedding=2.1e8)
    best = min(layout_cost(cl, cfg, np.concatenate([cl.host_devices[h] for h in o]), traffic).total_seconds
               for o in stage_pair_host_orders(cl, cfg))
    r = solve(cl, cfg, traffic, SolveOptions(mode="launcher", orders="all", time_limit_seconds=6))
    assert r.cost.total_seconds <= best * (1 + 1e-9)
