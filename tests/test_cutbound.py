"""The joint domain-cut bound (solver/cutbound.py): valid against exhaustive optima, tight on hand-derived cases."""

from __future__ import annotations

import math
from pathlib import Path

import networkx as nx
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from rankmap.solver import cluster_from_graph, fat_tree_cluster, parallel_config
from rankmap.solver.bound.analytic import _part_sizes, class_lower_bound, search_lower_bound
from rankmap.solver.bound.cutbound import grid_classes, joint_cut_bound
from rankmap.solver.search.exhaustive import enumerate_layouts
from rankmap.solver.megatron.orders import candidate_orders
from rankmap.solver.bound.analytic import lower_bound
from rankmap.solver.cost.timemodel import flow_bytes, layout_cost
from rankmap.solver.traffic import TRAFFIC_CLASSES

from exact_optimum import optimum  # noqa: E402  (tests/ is on sys.path)

CLASSES = ("tp", "cp", "dp", "pp", "ep", "etp", "edp", "embedding")


def rail_hosts(hosts: int, gpus: int | list, nvswitch_gbps: float = 450.0, nic_gbps: float = 50.0) -> nx.Graph:
    """``hosts`` hosts of ``gpus`` GPUs (or ``gpus[h]`` on host h) on an NVSwitch, one NIC per GPU into one leaf."""
    sizes = list(gpus) if isinstance(gpus, (list, tuple)) else [gpus] * hosts
    g = nx.Graph()
    g.add_node("leaf", kind="switch")
    for h, gpus in enumerate(sizes):
        g.add_node(f"h{h}/sw", kind="nvswitch", host=f"h{h}")
        for i in range(gpus):
            d = f"h{h}/gpu{i}"
            g.add_node(d, kind="gpu", host=f"h{h}", local_index=i)
            g.add_edge(d, f"h{h}/sw", bandwidth=nvswitch_gbps)
            g.add_node(f"h{h}/nic{i}", kind="nic", host=f"h{h}")
            g.add_edge(d, f"h{h}/nic{i}", bandwidth=nic_gbps)
            g.add_edge(f"h{h}/nic{i}", "leaf", bandwidth=nic_gbps)
    return g


def test_grids_follow_megatron_rank_generator():
    cfg = parallel_config(64, tp=2, cp=2, pp=2, ep=4, etp=1)
    (dense_axes, dense), (expert_axes, expert) = grid_classes(cfg)
    assert dense_axes == {"tp": 2, "cp": 2, "dp": 8, "pp": 2}
    assert dense["dp"] == {"cp", "dp"} and dense["tp"] == {"tp"} and dense["pp"] == {"pp"}
    assert expert_axes == {"ep": 4, "edp": 8, "pp": 2}  # etp = 1 drops out
    assert set(expert) == {"ep", "edp"}


def test_tp8_dp4_pp4_on_8_gpu_hosts_hand_derived():
    """16 hosts x 8 GPUs, tp 8 · dp 4 · pp 4: a host keeping its tp group whole splits 8 dp and 8 pp groups.

    Shearer (weights ½): p_tp·p_dp·p_pp ≥ 8² = 64 with each p ≤ 8, so p_tp = 1 forces
    p_dp = p_pp = 8, and s ≥ (4·8 − 8)/3 = 8 split groups each.  Splitting tp instead costs at
    least one tp channel across hosts: the cluster names no GPU generation, so NCCL runs the
    all-reduce as a ring of at most 4 channels (4 + 4 members), 2·7/8·S_tp / 4 bytes over a
    50 GB/s NIC = 28 ms against F0_tp = 12.4 ms: far more.  A pipeline chain
    sends both ways on each edge: some host holds at most ē = 2·32 chains / 16 hosts = 4 chain
    ends, so it sends at least 2·8 − 4 = 12 pp flows out.  So the bound is
    F0_tp + 8·fb_dp / 400 GB/s + 12·fb_pp / 400 GB/s, with fb_dp = 3/4·S_dp (dp bytes given
    explicitly move as a ring all-gather, DESIGN §3) and fb_pp = S_pp (p2p chain).
    """
    cluster = cluster_from_graph(rail_hosts(16, 8))
    cfg = parallel_config(128, tp=8, pp=4)
    S_tp, S_dp, S_pp = 3.2e9, 6.4e8, 1.6e8
    traffic = {"tp": S_tp, "dp": S_dp, "pp": S_pp}
    c_host = 8 * 50e9
    f0_tp = class_lower_bound(cluster, "all_reduce", 16, 8, S_tp)
    assert f0_tp == pytest.approx(2 * 7 / 8 * S_tp / 450e9)  # one NVSwitch port per GPU
    expect = f0_tp + 8 * (3 / 4 * S_dp) / c_host + 12 * S_pp / c_host
    # NCCL's latency in the bound (bound/ncclterms.latency_extra_seconds): the joint cut bound charges each part a
    # bandwidth time B >= its own floor F0, and the latency beyond B, min over protocols of lat + B(1/eff - 1), is
    # nondecreasing in B, so each part adds at least its extra at F0 (1 node of 8 GPUs): LL (eff 0.5) would add
    # F0 itself and LL128 (eff 0.92) F0·0.087 (≥ 31 us), so Simple (eff 1): tp ring all-reduce of 8,
    # 8.4 + 14·3.4 = 56 us; dp ring all-gather of 4, 8.4 + 3·3.4 = 18.6 us; pp send inside a node,
    # 8.4 + 3.4 = 11.8 us: 86.4 us in all
    assert lower_bound(cluster, cfg, traffic) == pytest.approx(expect + (56 + 18.6 + 11.8) * 1e-6, rel=1e-6)
    # the classes alone say much less: dp and pp groups could each sit inside one host
    alone = sum(class_lower_bound(cluster, p.kind, g, k, p.payload_bytes)
                for c in TRAFFIC_CLASSES for p, g, k in _part_sizes(cfg, traffic, c))
    assert alone < 0.6 * expect
    # Megatron's default layout (tp inside a host, dp and pp across) meets the tp and dp terms; its inner
    # pipeline stages send both ways (16 flows out of their host), 4 more than the 12 counted.  Plus NCCL's
    # latency (Simple): tp ring all-reduce of 8 on one host 8.4 + 14·3.4 = 56 us, dp ring all-gather of 4
    # over 4 hosts 8.4 + 3·14 = 50.4 us, pp send across hosts 8.4 + 14 = 22.4 us
    megatron = layout_cost(cluster, cfg, np.arange(128), traffic).total_seconds
    assert megatron == pytest.approx(expect + 4 * S_pp / c_host + (56 + 50.4 + 22.4) * 1e-6, rel=1e-6)


def test_joint_bound_without_costed_grid_classes_is_the_parts_own():
    cluster = cluster_from_graph(rail_hosts(2, 4))
    cfg = parallel_config(8, tp=2, pp=2)
    parts = {c: _part_sizes(cfg, {"embedding": 1e9}, c) for c in TRAFFIC_CLASSES}
    assert joint_cut_bound(cluster, cfg, parts, None, lambda c, i: 0.25) == pytest.approx(0.25)
    # a cluster with unused GPUs: only the parts' own bounds (the domain counts assume every GPU runs a rank)
    cfg4 = parallel_config(4, tp=2, pp=2)
    parts = {c: _part_sizes(cfg4, {"tp": 1e9, "pp": 1e9}, c) for c in TRAFFIC_CLASSES}
    assert joint_cut_bound(cluster, cfg4, parts, None, lambda c, i: 0.5) == pytest.approx(1.0)


@pytest.fixture(scope="module")
def eight_gpus():
    cluster = cluster_from_graph(rail_hosts(2, 4))
    return cluster, enumerate_layouts(cluster, "free")


@settings(max_examples=18, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(sizes=st.sampled_from([dict(tp=2, pp=2), dict(tp=2, cp=2), dict(tp=2, ep=2), dict(tp=4),
                              dict(pp=2, ep=4, etp=1), dict(cp=2, pp=2), dict(tp=2, cp=2, pp=2),
                              dict(tp=2, pp=4), dict(cp=2, pp=4), dict(pp=8)]),
       payloads=st.lists(st.sampled_from([0.0, 1e7, 1e8, 1e9, 4e9]), min_size=8, max_size=8),
       exposed=st.lists(st.sampled_from([1.0, 1.0, 0.5]), min_size=8, max_size=8))
def test_never_above_the_exhaustive_free_optimum_on_8_gpus(eight_gpus, sizes, payloads, exposed):
    """All 8! bijections of 2 hosts x 4 GPUs, every order: bound <= optimum (the grids have 2-3 axes here)."""
    cluster, layouts = eight_gpus
    cfg = parallel_config(8, **sizes)
    traffic = dict(zip(CLASSES, payloads))
    exposure = dict(zip(CLASSES, exposed))
    orders = candidate_orders(cfg, "all")
    opt = optimum(cluster, orders, traffic, exposure, "free", layouts)
    lb = search_lower_bound(cluster, orders, traffic, exposure, "free")
    assert lb <= opt * (1 + 1e-9) + 1e-15, (lb, opt)


def test_never_above_sampled_layouts_on_a_two_level_fabric():
    """64 GPUs, 4:1 leaves: the bound stays below every sampled bijection's cost, for every mix."""
    g = rail_hosts(8, 8)
    # split the hosts over two leaves behind a 4:1 spine
    h = nx.Graph()
    for u, v, d in g.edges(data=True):
        if "leaf" in (u, v):
            nic = u if v == "leaf" else v
            leaf = f"leaf{int(nic[1]) // 4}"
            h.add_node(leaf, kind="switch")
            h.add_edge(nic, leaf, **d)
        else:
            h.add_edge(u, v, **d)
    nx.set_node_attributes(h, {n: a for n, a in g.nodes(data=True) if n != "leaf"})
    h.add_node("spine", kind="switch")
    for leaf in ("leaf0", "leaf1"):
        h.add_edge(leaf, "spine", bandwidth=4 * 8 * 50.0 / 4)
    cluster = cluster_from_graph(h)
    rng = np.random.default_rng(7)
    for sizes in (dict(tp=8, pp=4), dict(tp=4, cp=2, pp=2), dict(tp=2, ep=8, etp=1, pp=2)):
        cfg = parallel_config(64, **sizes)
        for _ in range(3):
            traffic = dict(zip(CLASSES, rng.choice([0.0, 1e8, 1e9, 4e9], 8).tolist()))
            lb = lower_bound(cluster, cfg, traffic)
            costs = [layout_cost(cluster, cfg, np.arange(64), traffic).total_seconds]
            costs += [layout_cost(cluster, cfg, rng.permutation(64), traffic).total_seconds for _ in range(4)]
            assert lb <= min(costs) * (1 + 1e-9), (sizes, lb, min(costs))
            assert math.isfinite(lb) and lb > 0


def test_descent_starts_are_distinct_group_structures():
    """refine.top_by_order: orders with the same groups of the classes that move bytes are one start."""
    from rankmap.solver.search.refine import structure_key
    from rankmap.solver.megatron.orders import candidate_orders as orders_of

    cfg = parallel_config(32, tp=4, pp=2, ep=4, etp=1)
    active = frozenset({"tp", "dp", "pp"})
    keys = {o.order: structure_key(o, active) for o in orders_of(cfg, "all")}
    # cp = 1: where its token sits changes nothing; ep only moves expert groups, which carry no bytes here
    assert keys["tp-cp-ep-dp-pp"] == keys["tp-cp-dp-ep-pp"]
    assert keys["cp-pp-tp-ep-dp"] == keys["cp-pp-tp-dp-ep"]
    assert keys["tp-cp-ep-dp-pp"] != keys["tp-cp-ep-pp-dp"]  # dp inside pp, or pp inside dp: other groups
    # the 10 order strings are the 3! arrangements of tp, dp and pp
    assert len(set(keys.values())) == 6 < len(keys) == 10


def test_ring_rate_on_a_dgx1_hybrid_cube_mesh():
    """DGX-1 (examples/clusters): double NVLinks (50 GB/s) form one 8-cycle and no shorter one.

    So a ring of 3-7 GPUs has a 25 GB/s edge, a ring of all 8 can run at 50 (NCCL's ring
    there); at NCCL's calibrated rate (V100: 20 of 25 GB/s per NVLink, x0.8) 20 and 40 GB/s.
    The bound's per-flow term uses it, and stays below the exhaustive optimum over all 8!
    layouts and every order.
    """
    import json

    from rankmap.solver.bound.ringrate import ring_rate_gbps

    path = Path(__file__).resolve().parents[1] / "examples" / "clusters" / "dgx1-v100-hybridcube.json"
    cluster = cluster_from_graph(nx.node_link_graph(json.loads(path.read_text()), edges="edges"))
    assert [ring_rate_gbps(cluster, n) for n in range(3, 9)] == pytest.approx([25.0 * 0.8] * 5 + [50.0 * 0.8])
    layouts = enumerate_layouts(cluster, "free")
    traffic = {"tp": 4e9, "cp": 1e9, "dp": 2e9, "pp": 1e9}
    for sizes in (dict(tp=4), dict(tp=8), dict(tp=2, cp=2, pp=2)):
        cfg = parallel_config(8, **sizes)
        orders = candidate_orders(cfg, "all")
        opt = optimum(cluster, orders, traffic, None, "free", layouts)
        lb = search_lower_bound(cluster, orders, traffic, None, "free")
        assert lb <= opt * (1 + 1e-9), (sizes, lb, opt)
    # tp4 alone: its ring all-reduce (2·3/4·4 GB) over a 20 GB/s edge is the optimum's bandwidth time; the
    # optimum adds NCCL's one-host ring all-reduce latency of 4, Simple 8.4 + 6·3.4 = 28.8 us.  The bound adds
    # the least over protocols of latency + floor / efficiency at 1 node (V100 runs no NVLS; tree needs 2
    # nodes): Simple's 28.8 us (LL128: 14 + 6·1.9 = 25.4 us but + 0.3 s·(1/0.92 − 1) = 26 ms; LL: floor / 0.5),
    # so it meets the optimum
    cfg = parallel_config(8, tp=4)
    orders = candidate_orders(cfg, "all")
    assert search_lower_bound(cluster, orders, {"tp": 4e9}, None, "free") == pytest.approx(
        2 * 3 / 4 * 4e9 / 20e9 + 28.8e-6)
    assert optimum(cluster, orders, {"tp": 4e9}, None, "free", layouts) == pytest.approx(
        2 * 3 / 4 * 4e9 / 20e9 + 28.8e-6)


def test_lone_flow_rate_counts_the_parts_sharing_an_attachment():
    """Two GPUs, each with two 12.5 GB/s NICs into one leaf: 4 equal routes (p·B = 50 GB/s), but the
    two parts leaving over each NIC share it, so one flow alone gets 25 GB/s (the time model agrees)."""
    g = nx.Graph()
    g.add_node("leaf", kind="switch")
    for h in range(2):
        d = f"h{h}/gpu0"
        g.add_node(d, kind="gpu", host=f"h{h}", local_index=0)
        for r in range(2):
            nic = f"h{h}/nic{r}"
            g.add_node(nic, kind="nic", host=f"h{h}")
            g.add_edge(d, nic, bandwidth=12.5)
            g.add_edge(nic, "leaf", bandwidth=12.5)
    cluster = cluster_from_graph(g)
    fab = cluster.fabric
    assert fab.lone_rates_gbps(np.array([0]), np.array([1])).tolist() == [25.0]
    loads = fab.route_loads(np.array([0]), np.array([1]), 1e9)
    cap = fab.capacities_gbps()
    t = max(loads.max_flow_seconds, float(np.max(np.where(np.isfinite(cap), loads.load_bytes / (cap * 1e9), 0))))
    assert t == pytest.approx(1e9 / 25e9)


def test_two_stage_embedding_group_is_the_pipeline_group(eight_gpus):
    """pp = 2: the embedding all-reduce runs on the pipeline pairs, so a host that keeps its tp4 group
    whole splits its 4 embedding pairs: 4 flows of S out over 4 x 50 GB/s (hand-derived; = the optimum's
    bandwidth time, to which NCCL adds, Simple: tp's one-host ring all-reduce of 4, 8.4 + 6·3.4 = 28.8 us,
    and the embedding's ring all-reduce of 2 over 2 hosts, (8.4 + 2·14) x 1.4 = 50.96 us).  The bound is the
    joint cut bound plus each part's NCCL latency beyond its own floor (bound/ncclterms; at these floors
    Simple is the cheapest, LL and LL128 pay floor x 1 and x 0.087 more; 1 node, both groups fit a 4-GPU
    host): tp's ring all-reduce of 4, 8.4 + 6·3.4 = 28.8 us, the embedding's of 2, 8.4 + 2·3.4 =
    15.2 us."""
    cluster, layouts = eight_gpus
    cfg = parallel_config(8, tp=4, pp=2)
    traffic = {"tp": 4e9, "embedding": 1e8}
    orders = candidate_orders(cfg, "all")
    f0_tp = 2 * 3 / 4 * 4e9 / 450e9
    expect = f0_tp + 4 * 1e8 / (4 * 50e9)
    lb = search_lower_bound(cluster, orders, traffic, None, "free")
    assert lb == pytest.approx(expect + (28.8 + 15.2) * 1e-6, rel=1e-9)
    opt = optimum(cluster, orders, traffic, None, "free", layouts)
    assert opt == pytest.approx(expect + (28.8 + 50.96) * 1e-6, rel=1e-9)


def test_pipeline_middle_stages_cross_a_domain_twice():
    """3 hosts x 2 GPUs (450 GB/s switch inside, a 25 GB/s NIC per GPU: 50 GB/s out of a host), tp2 pp3.

    At NCCL's calibrated rates (``fat_tree_cluster`` names no GPU generation): NVLink 450 x 0.8 =
    360 GB/s, a NIC 25 x 0.96 = 24 GB/s, 48 GB/s out of a host.

    Splitting tp over hosts costs fb_tp / 24 GB/s alone, so a host keeps its tp group whole
    and holds one rank of each of the 2 pipeline chains.  A chain sends both ways on every edge:
    a host holding a middle stage sends 2 flows per chain out.  Per host the bound only knows
    ``s = 2`` split chains (``2·fb_pp / 48``); the chain ends are 2 per chain, 4 in all, so some
    host holds at most ē = 4/3 of them and sends at least ``2s − ē = 8/3`` flows: the bound is
    ``fb_tp / 360 + (8/3)·fb_pp / 48`` GB/s (weak: ``+ fb_pp / 24``).  The exhaustive optimum
    (free mode, every order) puts the middle stage on one host: ``fb_tp / 360 + 2·fb_pp / 24``,
    plus NCCL's latency (Simple): tp's one-host ring all-reduce of 2, 8.4 + 2·3.4 = 15.2 us, and
    pp's send across hosts, 8.4 + 14 = 22.4 us.  The bound adds each part's least latency to the joint
    cut bound beyond each part's own floor (bound/ncclterms: Simple at these floors, at the fewest nodes):
    tp's all-reduce of 2 inside a host, 8.4 + 2·3.4 = 15.2 us; a chain of 3 on 2-GPU hosts spans ≥ 2
    nodes: a send across hosts, 8.4 + 14 = 22.4 us.
    """
    cl = cluster_from_graph(fat_tree_cluster(3, 2, nic_bandwidth_gbps=25.0))
    cfg = parallel_config(6, tp=2, pp=3)
    traffic = {"tp": 4e9, "pp": 1e9}
    fbt, fbp = flow_bytes("all_reduce", 4e9, 2), flow_bytes("p2p_chain", 1e9, 3)
    lb = lower_bound(cl, cfg, traffic)
    assert lb == pytest.approx(fbt / 360e9 + 8 / 3 * fbp / 48e9 + (15.2 + 22.4) * 1e-6, rel=1e-9)
    opt = optimum(cl, candidate_orders(cfg, "all"), traffic, None, "free")
    assert opt == pytest.approx(fbt / 360e9 + 2 * fbp / 24e9 + (15.2 + 22.4) * 1e-6, rel=1e-9)


def test_embedding_pairs_tie_the_chain_ends():
    """4 hosts x 2 GPUs (25 GB/s NIC per GPU: 50 GB/s out of a host), tp2 pp4, tied embeddings.

    A host keeps its tp pair whole (splitting it costs ``fb_tp / 25`` GB/s alone) and so holds one rank
    of each of the 2 chains.  A split chain crosses the host's boundary on one edge only when the host
    holds one of its ends, and then the chain's embedding pair (first and last stage) is split too and
    sends ``fb_emb`` out.  Here a split pair costs more (``fb_emb / 50`` per pair) than the pipeline flow
    it saves (``fb_pp / 50``), so every host is charged 2 pipeline flows per chain: ``4·fb_pp / 50``
    (without the pairs: ``2s − ē = 3`` flows).  At NCCL's calibrated rates (NVLink 450 x 0.8 = 360,
    a NIC 25 x 0.96 = 24, 48 GB/s out of a host): bound ``fb_tp/360 + 4·fb_pp/48 + fb_emb/360`` (the
    embedding's own floor: inside one host); the exhaustive optimum also pays the pairs across hosts
    (``fb_emb/24``) and NCCL's latency (Simple): tp's one-host ring all-reduce of 2, 8.4 + 2·3.4 =
    15.2 us, pp's send across hosts 8.4 + 14 = 22.4 us, the embedding's ring all-reduce of 2 over 2
    hosts (8.4 + 2·14) x 1.4 = 50.96 us.  The bound adds each part's least latency to the joint cut bound
    beyond each part's own floor (bound/ncclterms: Simple at these floors, fewest nodes): tp's all-reduce of 2
    in a host 8.4 + 2·3.4 = 15.2 us, a chain of 4 on 2-GPU hosts spans ≥ 2 nodes: a send across hosts
    8.4 + 14 = 22.4 us, the embedding's
    all-reduce of 2 in a host 7.8 us.
    """
    cl = cluster_from_graph(fat_tree_cluster(4, 2, nic_bandwidth_gbps=25.0))
    cfg = parallel_config(8, tp=2, pp=4)
    traffic = {"tp": 4e9, "pp": 1e9, "embedding": 2e9}
    fbt, fbp = flow_bytes("all_reduce", 4e9, 2), flow_bytes("p2p_chain", 1e9, 4)
    fbe = flow_bytes("all_reduce", 2e9, 2)
    lb = lower_bound(cl, cfg, traffic)
    # one host at a time: the value above; over the level the chain ends raise it
    # (tests/test_endpair.py::test_first_and_last_stage_hosts_pay_the_embedding_pairs: 3·fb_pp/48 + fb_emb/48)
    assert lb >= (fbt / 360e9 + 4 * fbp / 48e9 + fbe / 360e9 + (15.2 + 22.4 + 15.2) * 1e-6) * (1 - 1e-9)
    assert lb == pytest.approx(fbt / 360e9 + 3 * fbp / 48e9 + fbe / 48e9 + (15.2 + 22.4 + 15.2) * 1e-6, rel=1e-6)
    opt = optimum(cl, candidate_orders(cfg, "all"), traffic, None, "free")
    assert opt == pytest.approx(fbt / 360e9 + 4 * fbp / 48e9 + fbe / 24e9 + (15.2 + 22.4 + 50.96) * 1e-6,
                                rel=1e-9)
    assert lb <= opt


def test_a_host_inside_its_leaf_pays_each_class_once_at_its_worst():
    """8 hosts x 2 GPUs, leaves of 2 hosts with a 25 GB/s uplink (4:1), tp2 cp2 pp2, pipeline-heavy.

    Per host (50 GB/s out): a pipeline pair split over hosts costs ``fb_pp / 25`` alone, so a host holds
    a whole pair and splits its 2 tp groups (``fb_tp / 25``).  Per leaf (25 GB/s out): holding whole tp
    groups and pairs, it splits its 4 cp rings (``4·fb_cp / 25``).  Either level alone leaves the other
    class at its floor (host: ``fb_pp/450 + fb_tp/25 + fb_cp/25``; leaf: ``fb_pp/450 + fb_tp/450 +
    4·fb_cp/25``); the nested bound charges each class the larger of its two terms:
    ``fb_pp/450 + fb_tp/25 + 4·fb_cp/25``, which the layout pp in a host, tp in a leaf, cp across leaves
    meets.  At NCCL's calibrated rates (NVLink 450 x 0.8 = 360; NIC and uplink 25 x 0.96 = 24):
    ``fb_pp/360 + fb_tp/24 + 4·fb_cp/24``, and the layout adds NCCL's latency (Simple): pp's send inside
    a host 8.4 + 3.4 = 11.8 us, tp's ring all-reduce of 2 over 2 hosts (8.4 + 2·14) x 1.4 = 50.96 us,
    cp's ring send of 2 over 2 hosts 8.4 + 14 = 22.4 us.  The bound adds each part's least latency to the
    nested cut bound beyond each part's own floor (bound/ncclterms: Simple at these floors, every group of 2
    fits a host): tp's all-reduce 8.4 + 2·3.4 = 15.2 us, cp's ring send 8.4 + 3.4 = 11.8 us, pp's send
    8.4 + 3.4 = 11.8 us: 38.8 us.
    """
    cl = cluster_from_graph(fat_tree_cluster(8, 2, nic_bandwidth_gbps=25.0, tiers=[(2, 4.0)]))
    cfg = parallel_config(16, tp=2, cp=2, pp=2)
    traffic = {"tp": 1e9, "cp": 2e8, "pp": 4e9}
    fbt, fbc, fbp = flow_bytes("all_reduce", 1e9, 2), flow_bytes("ring_p2p", 2e8, 2), flow_bytes("p2p_chain", 4e9, 2)
    expect = fbp / 360e9 + fbt / 24e9 + 4 * fbc / 24e9
    assert lower_bound(cl, cfg, traffic) == pytest.approx(expect + (15.2 + 11.8 + 11.8) * 1e-6, rel=1e-9)
    # default order tp-cp-ep-dp-pp: rank = t + 2c + 4d + 8q; host 2(c + 2d) + t (leaf c + 2d), local index q
    index = {d: i for i, d in enumerate(cl.devices)}
    dev = np.array([index[f"node{2 * (r // 2 % 2 + 2 * (r // 4 % 2)) + r % 2:03d}/gpu{r // 8}"] for r in range(16)])
    assert layout_cost(cl, cfg, dev, traffic).total_seconds == pytest.approx(
        expect + (11.8 + 50.96 + 22.4) * 1e-6, rel=1e-9)


@settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(chains=st.lists(st.tuples(st.floats(0, 5), st.floats(0, 5), st.floats(0.01, 3)), min_size=1, max_size=2),
       embs=st.lists(st.tuples(st.floats(0, 5), st.floats(0.01, 3)), max_size=2),
       emax=st.sampled_from([np.inf, 0.5, 1.0, 3.0, 7.5]),
       s_values=st.lists(st.floats(1.0, 40.0), min_size=1, max_size=6))
def test_chain_term_is_below_the_pipeline_and_embedding_minimum(chains, embs, emax, s_values):
    """The chain term's lines never exceed min over e of the pipeline + embedding time (an LP, scipy)."""
    from scipy.optimize import linprog

    from rankmap.solver.bound.gridcut import _chain_term

    chains = [(c0, max(c0, c1), g) for c0, c1, g in chains]
    term = _chain_term(chains, embs, emax)
    for s in s_values:
        # variables: e, u_i (chain parts), v_j (embedding parts); minimise Σu + Σv
        n = 1 + len(chains) + len(embs)
        cost = np.r_[0.0, np.ones(n - 1)]
        a_ub, b_ub = [], []
        for i, (_c0, c, g) in enumerate(chains):
            row = np.zeros(n); row[1 + i] = -1.0
            a_ub.append(row.copy()); b_ub.append(-c)              # u ≥ c'
            row[0] = -g; a_ub.append(row); b_ub.append(-2 * g * s)  # u ≥ g(2s − e)
        for j, (c, g) in enumerate(embs):
            k = 1 + len(chains) + j
            for slope, icpt in ((0.0, c), (max(c, g) - c, c), (g, 0.0)):  # v ≥ icpt + slope·e
                row = np.zeros(n); row[k] = -1.0; row[0] = slope
                a_ub.append(row); b_ub.append(-icpt)
        bounds = [(0.0, min(s, emax))] + [(None, None)] * (n - 1)
        lp = linprog(cost, A_ub=np.array(a_ub), b_ub=np.array(b_ub), bounds=bounds, method="highs")
        assert lp.status == 0
        value = max(g * s + h for g, h in term.lines)
        assert value <= lp.fun * (1 + 1e-9) + 1e-12
        assert value >= lp.fun * (1 - 1e-6) - 1e-9  # and exact: the breakpoints are all there


def test_pipeline_pairs_compete_with_expert_data_parallel_for_a_leaf():
    """4 hosts x 2 GPUs, leaves of 2 hosts behind a 25 GB/s uplink (4:1), ep2 etp1 pp2, expert-heavy.

    A host keeps its ep pair whole (the all-to-all over NICs would cost ``fb_ep / 25`` GB/s), so its
    edp groups (one rank per host) cross hosts: ``fb_edp / 25`` at least.  A leaf (4 ranks, 2 ep
    pairs) holds either both edp members of its ranks, and then splits the 4 pipeline pairs
    (``4·fb_pp / 25``), or whole pipeline pairs and splits its 4 edp groups (``4·fb_edp / 25``, more).
    The pp groups are the same in the dense and the expert rank grid (megatron-core asserts it), so
    the bound weighs pp against ep and edp in the expert grid: ``fb_ep/450 + fb_edp/25 + 4·fb_pp/25``,
    the exhaustive optimum (bounded in separate grids: 29.3 ms of the optimum's 60.9 ms).  At NCCL's
    calibrated rates (NVLink 450 x 0.8 = 360; NIC and uplink 25 x 0.96 = 24): ``fb_ep/360 + fb_edp/24 +
    4·fb_pp/24``, the optimum's bandwidth time; it adds NCCL's latency (Simple): ep's all-to-all inside a
    host 8.4 + 3.4 = 11.8 us, edp's all-gather of 2 over 2 hosts 8.4 + 14 = 22.4 us, pp's send across
    hosts 22.4 us.  The bound adds each part's latency beyond its own floor to the joint cut bound
    (bound/ncclterms: Simple at these floors, every group of 2 fits a host): ep's all-to-all 8.4 + 3.4 =
    11.8 us, edp's all-gather of 2 8.4 + 1·3.4 = 11.8 us, pp's send 11.8 us: 35.4 us.
    """
    cl = cluster_from_graph(fat_tree_cluster(4, 2, nic_bandwidth_gbps=25.0, tiers=[(2, 4.0)]))
    cfg = parallel_config(8, ep=2, etp=1, pp=2)
    traffic = {"ep": 8e9, "edp": 1e9, "pp": 2e8}
    fbe, fbd = flow_bytes("all_to_all", 8e9, 2), flow_bytes("all_gather", 1e9, 2)
    fbp = flow_bytes("p2p_chain", 2e8, 2)
    expect = fbe / 360e9 + fbd / 24e9 + 4 * fbp / 24e9
    assert lower_bound(cl, cfg, traffic) == pytest.approx(expect + 3 * 11.8e-6, rel=1e-9)
    opt = optimum(cl, candidate_orders(cfg, "all"), traffic, None, "free")
    assert opt == pytest.approx(expect + (11.8 + 22.4 + 22.4) * 1e-6, rel=1e-9)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.lists(st.tuples(st.floats(0.0, 50.0), st.floats(0.0, 5.0)), min_size=1, max_size=4),
                min_size=1, max_size=4),
       st.lists(st.tuples(st.floats(-3.0, 3.0), st.floats(0.0, 6.0)), min_size=4, max_size=4),
       st.lists(st.floats(0.0, 20.0), min_size=3, max_size=3))
def test_all_class_inner_minima_equal_the_per_piece_reference(classes, boxes, mus):
    """The dual's batched inner minima (``_InnerMins``) are bit-for-bit :func:`_inner_min` per class."""
    from rankmap.solver.bound.gridcut import _InnerMins, _inner_min

    pieces = []
    for cls in classes:  # pieces (P lo, P hi, α, β) covering [0, ∞) with breakpoints at cumulative widths
        edges = np.concatenate([[0.0], np.cumsum([1.0 + w for w, _b in cls[:-1]]), [np.inf]])
        pieces.append([(float(edges[i]), float(edges[i + 1]), float(1.0 + w), float(b))
                       for i, (w, b) in enumerate(cls)])
    C = len(pieces)
    lo = np.array([min(a, a + d) for a, d in boxes[:C]])
    hi = np.array([a + d for a, d in boxes[:C]])
    mu = np.array([[m * (c + 1) for c in range(C)] for m in mus])
    got = _InnerMins(pieces, lo, hi)(mu)
    for c in range(C):
        want = _inner_min(pieces[c], lo[c], hi[c], mu[:, c])
        assert np.array_equal(got[:, c], want)
