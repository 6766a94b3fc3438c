"""Tests of solver/bound/nodedomain.py, embpair.py and orderjoint.py (issue 25: NVL72 racks, launcher gaps).

Expected values are derived by hand in each docstring from the cluster's level rates; no solver output is
hard-coded.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from rankmap.solver import cluster_from_graph, fat_tree_cluster, parallel_config
from rankmap.solver.bound.analytic import class_lower_bound, search_lower_bound
from rankmap.solver.bound.embpair import emb_lines, emb_slope
from rankmap.solver.bound.nodedomain import crossing_ring_seconds, inter_node_rate_gbps
from rankmap.solver.bound.orderjoint import refine_least_orders
from rankmap.solver.bound.rates import inter_host_rate_gbps, suffix_rates
from rankmap.solver.fabric.builders import nvl72_cluster
from rankmap.solver.megatron.orders import candidate_orders

from exact_optimum import optimum  # noqa: E402  (tests/ is on sys.path)


@pytest.fixture(scope="module")
def racks2():
    return cluster_from_graph(nvl72_cluster(2))


def test_inter_node_rate_is_the_rate_between_racks(racks2):
    """Trays of one rack share the NVLink level (level 0); two racks first share the NIC fabric (level 1).
    NCCL's nodes are the racks, so the inter-node rate is level 1's and the inter-host rate level 0's."""
    r = suffix_rates(racks2)
    assert r.size == 2 and r[0] > r[1] > 0
    assert inter_host_rate_gbps(racks2) == pytest.approx(r[0])
    assert inter_node_rate_gbps(racks2) == pytest.approx(r[1])


def test_tp4_inside_a_rack_is_one_ring_of_fb_edges(racks2):
    """tp4 all-reduce of S on 2 racks of 72 GPUs: 36 groups, all fit inside racks (18 each).

    A group inside a rack (one NCCL node) is one closed ring, every edge ``fb = 2·3/4·S = 1.5·S`` at most
    the NVLink rate R0; a group over two racks sends ``fb/c`` (c <= 2 channels for 4 members, one NIC
    each) at most the NIC rate R1, far slower.  Per GPU: 1.5·S over its NVLink + NIC (larger than R0),
    and no rack has to split a group: the floor is ``1.5·S/R0`` (it was ``1.5·S/(2·R0)`` when the channel
    term used the inter-host rate)."""
    S = 3.2e9
    r = suffix_rates(racks2) * 1e9
    assert 1.5 * S / (2 * r[1]) > 1.5 * S / r[0]  # the two-rack case is slower
    got = class_lower_bound(racks2, "all_reduce", 36, 4, S)
    assert got == pytest.approx(1.5 * S / r[0], rel=1e-12)


def test_crossing_ring_seconds(racks2):
    """Rack clusters: ``min(fb/R_h, fb/(c·R_n))``; fat trees (nodes are hosts): ``fb/(c·R_h)``."""
    fb = 1e9
    rh, rn = inter_host_rate_gbps(racks2) * 1e9, inter_node_rate_gbps(racks2) * 1e9
    assert crossing_ring_seconds(racks2, fb, 2) == pytest.approx(min(fb / rh, fb / (2 * rn)))
    assert crossing_ring_seconds(racks2, fb, 100) == pytest.approx(fb / (100 * rn))
    ft = cluster_from_graph(fat_tree_cluster(4, 8))
    rh = inter_host_rate_gbps(ft) * 1e9
    assert inter_node_rate_gbps(ft) == pytest.approx(rh / 1e9)
    assert crossing_ring_seconds(ft, fb, 4) == pytest.approx(fb / (4 * rh))
    assert crossing_ring_seconds(ft, 0.0, 4) == 0.0


def test_emb_slope_hand_values():
    """c = 1, c1 = 10, g = 2: slopes to (1, 10) 9, to (5, 10) 9/5, to (6, 12) 11/6: least 1.8.
    c1 = c = 1, g = 3: to (1, 3) 2 = g − c (the former interpolation).  g = 0: 0."""
    assert emb_slope(1.0, 10.0, 2.0) == pytest.approx(1.8)
    assert emb_slope(1.0, 1.0, 3.0) == pytest.approx(2.0)
    assert emb_slope(1.0, 5.0, 0.0) == 0.0
    assert emb_slope(2.0, 1.0, 1.0) == pytest.approx(0.0)  # c1 < c is raised to c: to (2, 2) slope 0


@pytest.mark.parametrize("c,c1,g", [(1.0, 10.0, 2.0), (0.3, 4.3, 0.12), (1.0, 1.0, 3.0), (2.0, 2.5, 0.7),
                                    (0.0, 1.0, 1.0), (5.0, 5.0, 0.1)])
def test_emb_lines_below_the_true_value_at_whole_e(c, c1, g):
    """``max(c, c + σe, ge)`` is ``c`` at 0 and at most ``max(c1, g·e)`` at every whole ``e ≥ 1``."""
    (cc, sg, gg), = emb_lines([(c, g)], [c1])
    E = lambda e: max(cc, cc + sg * e, gg * e)  # noqa: E731
    assert E(0) == pytest.approx(c)
    for e in range(1, 200):
        assert E(e) <= max(c1, g * e) * (1 + 1e-12) + 1e-15
    # and it touches the true value somewhere when c1 > c (the slope is the least, not smaller)
    if c1 > c and g > 0:
        assert any(math.isclose(E(e), max(c1, g * e), rel_tol=1e-9) for e in range(1, 200))


def test_refine_least_orders_hand():
    """values [5, 7, 9]; order 0's joint cut 8 (+0.1 latency) lifts it to 8.1, order 1's (6.5) leaves it at 7:
    the least is 7.  Below 6 only order 0 is refined (then the least, 7, is above 6): 7 too; with limit 0: 5."""
    calls = []

    def joint(key):
        calls.append(key)
        return {"a": 8.0, "b": 6.5}[key]

    vals = [5.0, 7.0, 9.0]
    assert refine_least_orders(vals, {0: ("a", 0.1), 1: ("b", 0.0)}, {}, joint) == pytest.approx(7.0)
    assert calls == ["a", "b"] and vals[0] == pytest.approx(8.1)
    calls.clear()
    assert refine_least_orders([5.0, 7.0, 9.0], {0: ("a", 0.1), 1: ("b", 0.0)}, {}, joint, below=6.0) == 7.0
    assert calls == ["a"]
    assert refine_least_orders([5.0, 7.0, 9.0], {0: ("a", 0.1)}, {}, joint, limit=0) == 5.0
    # a cached key costs no new joint cut
    assert refine_least_orders([5.0, 7.0], {0: ("a", 0.0)}, {"a": 8.0}, joint, limit=0) == 7.0


def test_launcher_bound_with_an_unexposed_class_regression():
    """Regression (random pass, seed 331): launcher mode, tp2 cp4 ep4 etp2 on 2 racks of one 4-GPU tray,
    etp not exposed: the per-order joint cut asked the floors of etp, which the order loop skips (KeyError).
    The bound is at most the exhaustive optimum."""
    g = nvl72_cluster(2, hosts_per_rack=1, gpus_per_host=4, nvlink_gbps=100.0, nic_gbps=50.0, hosts_per_leaf=2,
                      leaf_oversubscription=2.0, gpu="gb200")
    cl = cluster_from_graph(g)
    cfg = parallel_config(8, tp=2, cp=4, ep=4, etp=2, pp=1)
    traffic = {"tp": 1e8, "cp": 4e9, "dp": 4e9, "pp": 1e7, "ep": 0.0, "etp": 4e9, "edp": 1e8, "embedding": 1e8}
    exposure = {"tp": 1.0, "cp": 1.0, "dp": 0.0, "pp": 1.0, "ep": 1.0, "etp": 0.0, "edp": 1.0, "embedding": 1.0}
    orders = candidate_orders(cfg, "all")
    lb = search_lower_bound(cl, orders, traffic, exposure, "launcher")
    assert 0 < lb <= optimum(cl, orders, traffic, exposure, "launcher") * (1 + 1e-9)


@pytest.mark.parametrize("racks,hpr,gph,pp", [(2, 2, 1, 4), (2, 1, 2, 4), (2, 2, 2, 4)])
def test_rack_pipeline_with_embedding_below_the_optimum(racks, hpr, gph, pp):
    """Pipeline chains with embedding pairs over racks (the embedding per-flow floor of embpair.py): the bound
    of both modes at most the exhaustive optimum, and at least one pipeline flow over the NICs (some chain
    crosses the racks: ``S_pp / R1``)."""
    cl = cluster_from_graph(nvl72_cluster(racks, hosts_per_rack=hpr, gpus_per_host=gph, hosts_per_leaf=1))
    W = cl.num_devices
    cfg = parallel_config(W, pp=pp)
    traffic = {"pp": 1e8, "embedding": 2e8, "dp": 1e8}
    orders = candidate_orders(cfg, "all")
    r1 = suffix_rates(cl)[1] * 1e9
    for mode in (["launcher", "free"] if W <= 6 else ["launcher"]):
        lb = search_lower_bound(cl, orders, traffic, None, mode)
        opt = optimum(cl, orders, traffic, None, mode)
        assert 1e8 / r1 <= lb <= opt * (1 + 1e-9)
