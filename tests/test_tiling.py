"""Host orders tiling Megatron's rank grid along the fabric tree (solver/tiling.py).

Hand-derived case: 64 hosts x 8 GPUs (450 GB/s NVSwitch, a 50 GB/s NIC per GPU), leaves of
4 hosts with 400 GB/s uplinks (4:1), pods of 4 leaves with 800 GB/s uplinks (2:1), tp8 pp4
(dp16) in order tp-cp-ep-dp-pp: a host block is one (dp, stage) cell of a dp16 x pp4 grid.
The tiling whose leaves hold 4 dp neighbours of one stage and whose pods hold 8 dp neighbours
x 2 stages sends, out of the busiest leaf: 8 dp flows (one per ring of the 8 local GPUs), 64
pp flows (a middle stage's 32 GPUs, both ways) and 32 embedding flows (a first stage's GPUs
to the last stage); out of a pod half as many per byte of uplink.  At NCCL's calibrated rates
(``fat_tree_cluster`` names no GPU generation: NVLink x0.8, 450 -> 360 GB/s; switch uplinks x0.96,
400 -> 384) its time is ``fb_tp/360 + (8·fb_dp + 64·fb_pp + 32·fb_emb)/384`` GB/s plus NCCL's
latency: 27% below Megatron's default layout (a pod per stage: 256 pp flows out of a middle pod's
800 GB/s).
"""

from __future__ import annotations

import numpy as np
import pytest

from rankmap.solver import cluster_from_graph, fat_tree_cluster, layout_cost, parallel_config
from rankmap.solver.search.tiling import block_grid, fabric_host_levels, tiling_host_orders
from rankmap.solver.cost.timemodel import flow_bytes


@pytest.fixture(scope="module")
def oversub():
    return cluster_from_graph(fat_tree_cluster(64, 8, tiers=[(4, 4.0), (4, 2.0)]))


def test_fabric_levels_are_leaves_then_pods(oversub):
    levels = fabric_host_levels(oversub)
    assert [int(lab.max()) + 1 for lab in levels] == [16, 4]
    leaf, pod = levels
    assert np.all(np.bincount(leaf) == 4) and np.all(np.bincount(pod) == 16)
    assert all(np.unique(pod[leaf == x]).size == 1 for x in range(16))  # leaves nest in pods


def test_block_grid_drops_the_host_ranks():
    cfg = parallel_config(512, tp=8, pp=4)
    assert block_grid(cfg, 8) == [("dp", 16), ("pp", 4)]
    assert block_grid(cfg.with_order("tp-cp-ep-pp-dp"), 8) == [("pp", 4), ("dp", 16)]
    assert block_grid(parallel_config(512, tp=4, cp=2, pp=8), 8) == [("dp", 8), ("pp", 8)]
    assert block_grid(parallel_config(48, tp=2, pp=3), 16) == [("pp", 3)]  # a host: tp2 x dp8
    assert block_grid(parallel_config(48, tp=2, pp=3), 12) is None  # 12 GPUs: tp2 x 6 of dp8


def test_a_tiling_beats_the_default_as_derived(oversub):
    cfg = parallel_config(512, tp=8, pp=4)
    traffic = {"tp": 4e9, "dp": 2e9, "pp": 1e8, "embedding": 1e8}
    fb = {"tp": flow_bytes("all_reduce", 4e9, 8), "dp": flow_bytes("all_gather", 2e9, 16),
          "pp": flow_bytes("p2p_chain", 1e8, 4), "embedding": flow_bytes("all_reduce", 1e8, 2)}
    # NCCL latency, Simple (the fastest protocol at these sizes): tp ring all-reduce of 8 on one host
    # 8.4 + 14·3.4 = 56 us; dp ring all-gather of 16 over 16 hosts 8.4 + 15·14 = 218.4 us; pp send across
    # hosts 8.4 + 14 = 22.4 us; embedding ring all-reduce of 2 over 2 hosts (8.4 + 2·14) x 1.4 = 50.96 us
    latency = (56 + 218.4 + 22.4 + 50.96) * 1e-6
    expect = fb["tp"] / 360e9 + (8 * fb["dp"] + 64 * fb["pp"] + 32 * fb["embedding"]) / 384e9 + latency
    orders = tiling_host_orders(oversub, cfg)
    assert 1 < len(orders) <= 24
    hd = oversub.host_devices
    costs = []
    for ho in orders:
        assert sorted(ho.tolist()) == list(range(64))
        dev = np.concatenate([hd[h] for h in ho])
        costs.append(layout_cost(oversub, cfg, dev, traffic).total_seconds)
    assert min(costs) == pytest.approx(expect, rel=1e-9)
    default = layout_cost(oversub, cfg, np.arange(512), traffic).total_seconds
    assert min(costs) < 0.8 * default


def test_ragged_trees_get_boxes_of_the_median_and_lower_quartile_leaf():
    """Leaves of 4 and 2 hosts (6 hosts), tp8 pp2 (dp3): the block grid is dp3 x pp2 (node rank d + 3s).
    Median leaf 3 hosts: a box of dp3 x pp1 (one stage's replicas), then the rest, pp2: block (d, s) at
    tree position d + 3s, the identity.  Lower quartile int(2.5) = 2: a box of pp2 (both stages of one
    replica, the only factoring of 2 in the room (3, 2)), then dp3: position s + 2d, so node ranks
    0..5 -> hosts 0, 2, 4, 1, 3, 5 (each replica's stages side by side, the first two under leaf 0).
    The two sizes alternate, the lower quartile's first."""
    g = fat_tree_cluster(6, 8, tiers=[(4, 2.0)])  # leaves of 4 and 2 hosts
    cl = cluster_from_graph(g)
    assert fabric_host_levels(cl) is None
    got = [ho.tolist() for ho in tiling_host_orders(cl, parallel_config(48, tp=8, pp=2))]
    assert got == [[0, 2, 4, 1, 3, 5], [0, 1, 2, 3, 4, 5]]  # the lower quartile's first


def test_domain_packing_keeps_whole_nvlink_racks_inside_each_pipeline_run():
    """NVL72-style racks keeping 4, 2, 2 and 2 trays (4 GPUs each; every rack one NVLink domain, one NCCL
    node), tp4 pp2 (dp5): the block grid is dp5 x pp2, so a launcher order runs stage 0 on its first 5 hosts
    and stage 1 on the next 5.  Stage 0's subset sum over the racks' sizes (4, 2, 2, 2) cannot make 5; the
    most below is 4 (rack 0 whole), and the largest remaining rack (rack 1) splits 1 + 1 over the boundary;
    stage 1 gets rack 1's other tray and racks 2 and 3 (1 + 2 + 2 = 5).  Hosts that are their own NCCL
    node (a fat tree) get no order."""
    from rankmap.solver.fabric.builders import nvl72_cluster
    from rankmap.solver.search.tiling import domain_packed_host_orders

    g = nvl72_cluster(4, hosts_per_rack=4, gpus_per_host=4, hosts_per_leaf=4)
    keep = {0: 4, 1: 2, 2: 2, 3: 2}
    drop = [n for n, d in g.nodes(data=True) if d.get("host") and int(d["host"][3:]) >= keep[int(d["host"][1])]]
    g.remove_nodes_from(drop)
    g.remove_nodes_from([n for n in list(g.nodes) if g.degree(n) == 0])
    cl = cluster_from_graph(g)
    hosts = list(cl.hosts)
    cfg = parallel_config(40, tp=4, pp=2)
    (order,) = domain_packed_host_orders(cl, cfg)
    names = [hosts[h] for h in order]
    assert names[:4] == ["r0t00", "r0t01", "r0t02", "r0t03"]  # rack 0 whole in stage 0
    assert names[4][:2] == "r1" and names[5][:2] == "r1"  # rack 1 split 1 + 1 over the boundary
    assert sorted(n[:2] for n in names[6:]) == ["r2", "r2", "r3", "r3"]
    assert domain_packed_host_orders(cluster_from_graph(fat_tree_cluster(4, 8)), parallel_config(32, tp=8, pp=2)) == []
