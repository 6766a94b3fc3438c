"""The search: issue cases and an independent brute force on small clusters."""

from __future__ import annotations

import itertools
from pathlib import Path
import random

import networkx as nx
import numpy as np
import pytest

from rankmap.solver import (
    Constraint,
    InfeasibleError,
    InvalidArgumentError,
    SolveOptions,
    cluster_from_graph,
    evaluate,
    fat_tree_cluster,
    megatron_groups,
    parallel_config,
    solve,
)
from rankmap.solver.megatron.ranks import TOKENS

# ----------------------------------------------------------------- independent reference

from reference_model import Reference, brute_force  # noqa: E402  (tests/ is on sys.path)
from format_helpers import two_leaf_cluster  # noqa: E402


def random_cluster(rng: random.Random, max_gpus: int = 8):
    n_hosts = rng.choice([1, 2, 2, 4, 3])
    per = rng.choice([g for g in (1, 2, 4) if n_hosts * g <= max_gpus])
    levels = sorted({rng.choice([25, 50, 100, 200, 300, 450]) for _ in range(3)}, reverse=True)
    g = two_leaf_cluster(rng, n_hosts, per, levels[1:] or levels, levels)
    g.add_edge("leaf0", "leaf1", bandwidth=float(rng.choice([1, 2, 4])))
    return g


def random_sizes(rng: random.Random, W: int):
    for _ in range(100):
        tp, cp, ep, pp = (rng.choice([d for d in (1, 2, 4) if W % d == 0]) for _ in range(4))
        if ep > 1 and rng.random() < 0.5:
            etp = 1
        else:
            etp = None
        try:
            return parallel_config(W, tp=tp, cp=cp, ep=ep, pp=pp, etp=etp)
        except InvalidArgumentError:
            continue
    return parallel_config(W)


@pytest.mark.parametrize("case", range(12))
@pytest.mark.parametrize("mode", ["launcher", "free", "fixed"])
def test_brute_force_small_clusters(case, mode):
    """On every cluster of <= 8 GPUs the answer is the optimum of an independent §4 implementation."""
    rng = random.Random(1000 * case + len(mode))
    g = random_cluster(rng, max_gpus=8 if mode == "fixed" else 6)
    W = sum(1 for _, d in g.nodes(data=True) if d.get("kind") == "gpu")
    cfg = random_sizes(rng, W)
    traffic = {c: rng.choice([0.0, 1e8, 1e9, 4e9]) for c in ("tp", "cp", "dp", "pp", "ep", "edp")}
    res = solve(g, cfg, traffic, SolveOptions(mode=mode, orders="all", time_limit_seconds=20))
    want = brute_force(g, cfg, traffic, mode)
    assert res.status == "OPTIMAL"
    assert res.cost.total_seconds == pytest.approx(want, rel=1e-6, abs=1e-12)
    assert res.bound_seconds <= res.cost.total_seconds * (1 + 1e-9)
    # the reported cost is the objective of the reported layout
    again = evaluate(g, res.config, res.assignment, traffic)
    assert again.total_seconds == pytest.approx(res.cost.total_seconds, rel=1e-12)
    assert Reference(g).cost(res.config, traffic, res.assignment) == pytest.approx(res.cost.total_seconds, rel=1e-9)
    # the reported groups are rankmap groups for the chosen order
    for name, arr in megatron_groups(res.config).items():
        assert np.array_equal(res.groups[name], arr)


def two_hosts():
    return fat_tree_cluster(2, 8, intra_bandwidth_gbps=450, nic_bandwidth_gbps=50)


def test_dp_heavy_keeps_default_order():
    cfg = parallel_config(16, tp=4, pp=2)
    res = solve(two_hosts(), cfg, {"tp": 4e9, "dp": 8e9, "pp": 1e8}, SolveOptions(orders="megatron-cli"))
    assert res.order == "tp-cp-ep-dp-pp"
    # dp pairs (g, g+4) inside a host on NVSwitch; pp crosses hosts over the rail NICs.  NCCL's rates:
    # NVLink 450 x 0.8 = 360 GB/s, NIC 50 x 0.96 = 48 GB/s; NCCL's latency (Simple) added:
    # tp ring all-reduce of 4 in a host 2·3/4·4e9 / 360e9 = 16.67 ms + (8.4 + 6 x 3.4) us,
    # dp ring all-gather of 2 in a host 1/2·8e9 / 360e9 = 11.11 ms + (8.4 + 3.4) us,
    # pp send across hosts on the same rail 1e8 / 48e9 = 2.08 ms + (8.4 + 14) us
    assert res.cost.by_class["tp"] == pytest.approx(2 * 3 / 4 * 4e9 / 360e9 + 28.8e-6, rel=1e-9)
    assert res.cost.by_class["dp"] == pytest.approx(0.5 * 8e9 / 360e9 + 11.8e-6, rel=1e-9)
    assert res.cost.by_class["pp"] == pytest.approx(1e8 / 48e9 + 22.4e-6, rel=1e-9)
    assert res.bound_seconds <= res.cost.total_seconds
    # DP groups inside hosts
    host = {d: d.split("/")[0] for d in res.assignment}
    for grp in res.groups["DATA_PARALLEL_GROUP"].tolist():
        assert len({host[res.assignment[r]] for r in grp}) == 1
    assert res.assignment == res.baseline.assignment  # nothing beats the baseline: return it


def test_pp_heavy_picks_tp_pp_dp_mapping():
    cfg = parallel_config(16, tp=4, pp=2)
    res = solve(two_hosts(), cfg, {"tp": 4e9, "dp": 1e8, "pp": 8e9}, SolveOptions(orders="megatron-cli"))
    assert res.order == "tp-cp-ep-pp-dp"
    assert res.apply["megatron_args"] == ["--use-tp-pp-dp-mapping"]
    assert res.cost.total_seconds < res.baseline.cost.total_seconds
    host = {d: d.split("/")[0] for d in res.assignment}
    for grp in res.groups["PIPELINE_MODEL_PARALLEL_GROUP"].tolist():
        assert len({host[res.assignment[r]] for r in grp}) == 1


def test_six_gpus_pp_pairs_inside_hosts():
    g = fat_tree_cluster(3, 2, intra_bandwidth_gbps=450, nic_bandwidth_gbps=50)
    cfg = parallel_config(6, pp=2)
    res = solve(g, cfg, {"pp": 8e9, "dp": 1e8}, SolveOptions(orders="all"))
    host = {d: d.split("/")[0] for d in res.assignment}
    for grp in res.groups["PIPELINE_MODEL_PARALLEL_GROUP"].tolist():
        assert len({host[res.assignment[r]] for r in grp}) == 1
    assert res.status == "OPTIMAL"


def interleaved_graph():
    g = nx.Graph()
    hosts = ["h0", "h1", "h0", "h0", "h1", "h1", "h1", "h0"]
    count = {"h0": 0, "h1": 0}
    for i, h in enumerate(hosts):
        g.add_node(f"g{i}", host=h, local_index=count[h])
        count[h] += 1
        g.add_edge(f"g{i}", f"{h}/sw", bandwidth=450.0)
    for h in ("h0", "h1"):
        g.nodes[f"{h}/sw"]["kind"] = "nvswitch"
        g.add_edge(f"{h}/sw", "net", bandwidth=25.0)
    g.nodes["net"]["kind"] = "switch"
    return g


def test_interleaved_graph_launcher_blocks():
    res = solve(interleaved_graph(), parallel_config(8, tp=4), {"tp": 4e9, "dp": 1e9})
    g = interleaved_graph()
    hosts_by_rank = [g.nodes[d]["host"] for d in res.assignment]
    assert hosts_by_rank[:4] == [hosts_by_rank[0]] * 4
    assert hosts_by_rank[4:] == [hosts_by_rank[4]] * 4
    assert hosts_by_rank[0] != hosts_by_rank[4]
    assert [h.cuda_visible_devices for h in res.hosts] == [(0, 1, 2, 3), (0, 1, 2, 3)]
    for grp in res.groups["TENSOR_MODEL_PARALLEL_GROUP"].tolist():
        assert len({hosts_by_rank[r] for r in grp}) == 1


def two_leaf_graph(inter_leaf=5.0):
    g = nx.Graph()
    for h in range(4):
        sw = f"n{h}/sw"
        for i in range(4):
            g.add_node(f"n{h}/gpu{i}", kind="gpu", host=f"n{h}", local_index=i)
            g.add_edge(f"n{h}/gpu{i}", sw, bandwidth=450.0)
        g.nodes[sw]["kind"] = "nvswitch"
        g.add_edge(sw, "leafA" if h % 2 == 0 else "leafB", bandwidth=50.0)
    g.add_edge("leafA", "spine", bandwidth=inter_leaf)
    g.add_edge("leafB", "spine", bandwidth=inter_leaf)
    for n in ("leafA", "leafB", "spine"):
        g.nodes[n]["kind"] = "switch"
    return g


def test_ep_groups_stay_inside_a_leaf():
    g = two_leaf_graph()
    cfg = parallel_config(16, ep=8, etp=1)
    res = solve(g, cfg, {"ep": 8e9, "dp": 1e9}, SolveOptions(orders="megatron-cli"))
    leaf = {f"n{h}": "A" if h % 2 == 0 else "B" for h in range(4)}
    assert [leaf[h.host] for h in res.hosts] == ["A", "A", "B", "B"]
    for grp in res.groups["EXPERT_MODEL_PARALLEL_GROUP"].tolist():
        assert len({leaf[g.nodes[res.assignment[r]]["host"]] for r in grp}) == 1
    assert res.cost.total_seconds < res.baseline.cost.total_seconds


def test_ep_within_leaf_is_a_hard_constraint():
    g = two_leaf_graph(inter_leaf=50.0 - 1e-3)  # nearly free to cross: only the constraint keeps EP in
    cfg = parallel_config(16, ep=8, etp=1)
    opts = SolveOptions(orders="default", constraints=(Constraint("ep", "leaf"),))
    res = solve(g, cfg, {"dp": 8e9, "ep": 1e6}, opts)
    leaf = {f"n{h}": "A" if h % 2 == 0 else "B" for h in range(4)}
    for grp in res.groups["EXPERT_MODEL_PARALLEL_GROUP"].tolist():
        assert len({leaf[g.nodes[res.assignment[r]]["host"]] for r in grp}) == 1


def test_infeasible_constraint_is_a_clear_error():
    g = two_leaf_graph()
    cfg = parallel_config(16, ep=16, etp=1)
    with pytest.raises(InfeasibleError, match="ep group has 16 ranks but the largest leaf domain has 8"):
        solve(g, cfg, {"ep": 1e9}, SolveOptions(constraints=(Constraint("ep", "leaf"),)))


def test_world_size_mismatch_and_bad_traffic():
    # more ranks than GPUs is an error; fewer chooses hosts (tests/test_hostchoice.py)
    with pytest.raises(InvalidArgumentError, match="world_size 32 is more than the 16 usable GPUs"):
        solve(two_hosts(), parallel_config(32), {"dp": 1e9})
    with pytest.raises(InvalidArgumentError, match="unknown traffic class 'xx'"):
        solve(two_hosts(), parallel_config(16), {"xx": 1e9})
    with pytest.raises(InvalidArgumentError, match="traffic dp = -1"):
        solve(two_hosts(), parallel_config(16), {"dp": -1})


def test_exclusions_shrink_the_world():
    g = fat_tree_cluster(3, 2)
    res = solve(g, parallel_config(4, tp=2), {"tp": 1e9}, SolveOptions(exclude_hosts=("node001",)))
    assert {h.host for h in res.hosts} == {"node000", "node002"}
    with pytest.raises(InvalidArgumentError, match="excluded host 'nope'"):
        solve(g, parallel_config(4), {"tp": 1e9}, SolveOptions(exclude_hosts=("nope",)))


def test_same_input_same_output():
    g = two_leaf_graph()
    cfg = parallel_config(16, tp=2, ep=4, etp=1)
    tr = {"tp": 3e9, "ep": 2e9, "dp": 1e9, "edp": 5e8}
    a = solve(g, cfg, tr, SolveOptions(orders="all", seed=3))
    b = solve(g, cfg, tr, SolveOptions(orders="all", seed=3))
    assert a.assignment == b.assignment and a.order == b.order and a.status == b.status


def test_large_cluster_decomposition_beats_or_equals_baseline():
    # 64 hosts x 8 GPUs under 8 leaves: too big for the exact model
    g = fat_tree_cluster(64, 8, tiers=[(8, 4.0)])  # 8 hosts per leaf, 4:1
    cfg = parallel_config(512, tp=8, pp=4)
    tr = {"tp": 4e9, "dp": 2e9, "pp": 6e9}
    res = solve(g, cfg, tr, SolveOptions(orders="megatron-cli", time_limit_seconds=10))
    assert res.cost.total_seconds <= res.baseline.cost.total_seconds
    assert res.bound_seconds <= res.cost.total_seconds
    assert res.status in ("OPTIMAL", "FEASIBLE")
    # TP groups inside hosts
    hosts = cluster_from_graph(g)
    idx = hosts.device_index()
    host_of = hosts.host_of[[idx[d] for d in res.assignment]]
    tp = res.groups["TENSOR_MODEL_PARALLEL_GROUP"]
    assert np.all(host_of[tp] == host_of[tp[:, :1]])


# ----------------------------------------------------------------- real host topologies (issue 5)

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "clusters"


def _load(name):
    from rankmap.solver.formats.graphfile import load_graph

    return load_graph(EXAMPLES / name)


@pytest.mark.parametrize("mode", ["launcher", "free"])
def test_dgx1_hybrid_cube_mesh_tp_pairs_on_direct_nvlink(mode):
    g = _load("dgx1-v100-hybridcube.json")
    cfg = parallel_config(8, tp=2)
    res = solve(g, cfg, {"tp": 4e9, "dp": 1e8}, SolveOptions(mode=mode))
    for a, b in res.groups["TENSOR_MODEL_PARALLEL_GROUP"].tolist():
        u, v = res.assignment[a], res.assignment[b]
        assert g.has_edge(u, v), f"TP pair {u}-{v} has no direct NVLink"
    assert res.status == "OPTIMAL"
    # the cost model sees the missing links: a TP pair without NVLink costs more
    cl = cluster_from_graph(g)
    bw = cl.bandwidth_gbps(np.array([0]), np.array([5]))  # GPU0-GPU5: no NVLink (SYS)
    assert bw[0] < 25


def test_a30_nvlink_bridge_pairs():
    g = _load("a30-pcie-nvlink-pairs.json")
    cfg = parallel_config(4, tp=2)
    res = solve(g, cfg, {"tp": 4e9, "dp": 1e9}, SolveOptions(mode="free"))
    local = {d: g.nodes[d]["local_index"] for d in res.assignment}
    pairs = sorted(sorted((local[res.assignment[a]], local[res.assignment[b]]))
                   for a, b in res.groups["TENSOR_MODEL_PARALLEL_GROUP"].tolist())
    assert pairs == [[0, 1], [2, 3]]


def test_interleaved_leaves_from_slurm_fabric(tmp_path):
    from rankmap.solver.formats.compose import build_cluster

    fabric = tmp_path / "topology.conf"
    fabric.write_text("SwitchName=leafA Nodes=node[1,3]\nSwitchName=leafB Nodes=node[2,4]\n"
                      "SwitchName=spine Switches=leafA,leafB\n")
    topo = Path(__file__).parent / "data" / "real-inputs" / "nvsmi-topo_hgx-a100-80gb-8gpu-8nic-roce_deepep-13.txt"
    # 4:1 leaves: 8 NICs x 25 GB/s x 2 hosts = 400 GB/s down, 100 GB/s up to the spine
    g = build_cluster(host_topology=str(topo), gpu="a100", fabric=str(fabric), nodelist="node[1-4]",
                      oversubscription=4)
    cfg = parallel_config(32, tp=8, ep=2, etp=8)
    res = solve(g, cfg, {"ep": 8e9, "dp": 1e9}, SolveOptions(orders="megatron-cli"))
    leaf = {"node1": "A", "node3": "A", "node2": "B", "node4": "B"}
    for grp in res.groups["EXPERT_MODEL_PARALLEL_GROUP"].tolist():
        assert len({leaf[g.nodes[res.assignment[r]]["host"]] for r in grp}) == 1
    assert res.cost.total_seconds < res.baseline.cost.total_seconds


def test_mid_size_solve_is_deterministic_and_never_worse_than_the_launcher():
    """32 hosts in 2 pods (leaves 4:1, pods 2:1): the reported time is the time model's, never above the baseline."""
    g = fat_tree_cluster(32, 8, tiers=[(4, 4.0), (4, 2.0)])  # leaves 4:1, pods 2:1
    cfg = parallel_config(256, tp=4, cp=2, pp=4)
    tr = {"tp": 1610612736.0, "cp": 805306368.0, "dp": 1892834304.0, "pp": 67108864.0, "embedding": 206045184.0}
    res = solve(g, cfg, tr, SolveOptions(orders="default", time_limit_seconds=10))
    assert res.cost.total_seconds <= res.baseline.cost.total_seconds
    assert evaluate(g, res.config, res.assignment, tr).total_seconds == pytest.approx(res.cost.total_seconds, rel=1e-12)
    # tp (4 ranks on one NVSwitch): 2·3/4·S / (450 x 0.8 = 360 GB/s, NCCL's NVLink rate) per ring edge, no
    # link shared more, plus NCCL's ring latency of 4 ranks in a node, Simple: 8.4 + 6 x 3.4 = 28.8 us
    assert res.cost.by_class["tp"] == pytest.approx(2 * 3 / 4 * tr["tp"] / 360e9 + 28.8e-6, rel=1e-9)
    assert res.bound_seconds <= res.cost.total_seconds
    again = solve(g, cfg, tr, SolveOptions(orders="default", time_limit_seconds=10))
    assert again.assignment == res.assignment  # deterministic


def test_baseline_order_is_the_order_megatron_builds():
    """``SolveOptions.baseline_order``: the baseline runs in the order Megatron-LM would build (here
    ``--use-tp-pp-dp-mapping``'s tp-cp-ep-pp-dp); an order stock Megatron does not build is refused."""
    from rankmap.solver import InvalidArgumentError, SolveOptions, cluster_from_graph, fat_tree_cluster
    from rankmap.solver import parallel_config, solve
    from rankmap.solver.cost.timemodel import layout_cost

    cl = cluster_from_graph(fat_tree_cluster(4, 4, tiers=[(2, 2.0)]))
    cfg = parallel_config(16, tp=2, pp=2)
    traffic = {"tp": 1e9, "dp": 4e8, "pp": 1e8}
    res = solve(cl, cfg, traffic, SolveOptions(baseline_order="tp-cp-ep-pp-dp", time_limit_seconds=5))
    assert res.baseline.order == "tp-cp-ep-pp-dp"
    # GPUs by local index, hosts in launch order: rank r on device r, groups of the mapping order
    expect = layout_cost(cl, cfg.with_order("tp-cp-ep-pp-dp"), np.arange(16), traffic).total_seconds
    assert res.baseline.cost.total_seconds == pytest.approx(expect, rel=1e-12)
    assert res.baseline.cost.total_seconds != pytest.approx(
        layout_cost(cl, cfg, np.arange(16), traffic).total_seconds, rel=1e-6)
    with pytest.raises(InvalidArgumentError, match="baseline_order 'pp-dp-tp'"):
        SolveOptions(baseline_order="pp-dp-tp")
