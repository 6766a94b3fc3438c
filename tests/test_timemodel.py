"""The time model (DESIGN §2-§4) on hand-computed cases."""

from __future__ import annotations

import random

import networkx as nx
import numpy as np
import pytest

from rankmap.solver import InvalidArgumentError, NcclModel, cluster_from_graph, evaluate, parallel_config
from rankmap.solver.bound.analytic import lower_bound
from rankmap.solver.cost.timemodel import bytes_per_rank, flow_bytes, layout_cost

from reference_model import Reference


def rail_two_leaves() -> nx.Graph:
    """Issue 9's fabric: 2 leaves x 4 hosts x 8 H100 (NVSwitch 450 GB/s), one 50 GB/s NIC per GPU, 400 GB/s up (4:1)."""
    g = nx.Graph()
    g.add_node("spine", kind="switch")
    for leaf in range(2):
        g.add_node(f"leaf{leaf}", kind="switch")
        g.add_edge(f"leaf{leaf}", "spine", bandwidth=400.0)
    for h in range(8):
        host = f"node{h}"
        g.add_node(f"{host}/nvswitch", kind="nvswitch")
        for i in range(8):
            gpu = f"{host}/gpu{i}"
            g.add_node(gpu, kind="gpu", host=host, local_index=i)
            g.add_edge(gpu, f"{host}/nvswitch", bandwidth=450.0)
            g.add_node(f"{host}/nic{i}", kind="nic")
            g.add_edge(gpu, f"{host}/nic{i}", bandwidth=50.0)
            g.add_edge(f"{host}/nic{i}", f"leaf{h // 4}", bandwidth=50.0)
    return g


TRAFFIC = {"tp": 40e9, "pp": 2.25e9, "dp": 6e9}
#: Bandwidth terms only: the tests below derive link sharing and routes, not NCCL's latency.
BANDWIDTH_ONLY = NcclModel(latency=False)


def test_issue_two_leaf_rail_case_by_hand():
    g = rail_two_leaves()
    cl = cluster_from_graph(g, nccl=BANDWIDTH_ONLY)  # link sharing by hand: NCCL latency off
    # default order: pipeline stages on different leaves
    base = layout_cost(cl, parallel_config(64, tp=8, pp=2), np.arange(64), TRAFFIC)
    # tp: ring of 8 on the NVSwitch, 2·7/8·40 GB per ring edge over a 450 GB/s GPU port = 155.6 ms
    assert base.by_class["tp"] == pytest.approx(2 * 7 / 8 * 40e9 / 450e9, rel=1e-12)
    # dp: rings of 4 hosts inside a leaf, 3/4·6 GB per edge, one flow per 50 GB/s NIC = 90 ms
    assert base.by_class["dp"] == pytest.approx(0.75 * 6e9 / 50e9, rel=1e-12)
    # pp: 32 flows of 2.25 GB each way through a 400 GB/s leaf uplink = 180 ms
    assert base.by_class["pp"] == pytest.approx(32 * 2.25e9 / 400e9, rel=1e-12)
    assert base.classes["pp"].bottleneck.kind == "link"
    assert base.classes["pp"].bottleneck.flows == 32
    assert base.classes["pp"].bottleneck.utilization == pytest.approx(1.0)
    assert set(base.classes["pp"].bottleneck.link) in ({"leaf0", "spine"}, {"leaf1", "spine"})
    assert base.total_seconds == pytest.approx(0.15556 + 0.09 + 0.18, rel=1e-4)
    # tp-pp-dp: pipeline pairs inside a host pair of one leaf, dp rings cross the spine
    alt = layout_cost(cl, parallel_config(64, tp=8, pp=2).with_order("tp-cp-ep-pp-dp"), np.arange(64), TRAFFIC)
    assert alt.by_class["pp"] == pytest.approx(2.25e9 / 50e9, rel=1e-12)  # 45 ms, one flow per NIC
    assert alt.classes["pp"].bottleneck.kind == "per-flow"
    # each ring 0→2→4→6→0 (hosts) crosses each leaf's uplink once per direction: 16 rings x 4.5 GB / 400 GB/s
    assert alt.by_class["dp"] == pytest.approx(16 * 4.5e9 / 400e9, rel=1e-12)
    assert alt.total_seconds == pytest.approx(0.15556 + 0.045 + 0.18, rel=1e-4)
    # bytes per rank as papers publish them
    assert base.classes["tp"].bytes_per_rank == pytest.approx(2 * 7 / 8 * 40e9)
    assert base.classes["pp"].bytes_per_rank == pytest.approx(2.25e9)


def test_issue_two_leaf_rail_case_solve_picks_pipeline_inside_a_leaf():
    g = rail_two_leaves()
    from rankmap.solver import SolveOptions, solve

    res = solve(g, parallel_config(64, tp=8, pp=2), TRAFFIC, SolveOptions(orders="all", time_limit_seconds=10))
    # the tp-pp-dp layout of the case by hand plus NCCL's latency (Simple, the fastest protocol at these sizes):
    # tp ring of 8 on one host 8.4 + 14·3.4 = 56 us; pp send across hosts 8.4 + 14 = 22.4 us;
    # dp all-gather ring of 4 hosts 8.4 + 3·14 = 50.4 us
    assert res.cost.total_seconds <= 0.15556 + 0.045 + 0.18 + (56 + 22.4 + 50.4) * 1e-6 + 1e-5
    assert res.cost.by_class["pp"] == pytest.approx(0.045 + 22.4e-6, rel=1e-9)
    leaf = {f"node{h}": h // 4 for h in range(8)}
    for grp in res.groups["PIPELINE_MODEL_PARALLEL_GROUP"].tolist():
        assert len({leaf[g.nodes[res.assignment[r]]["host"]] for r in grp}) == 1


def shared_nic_hosts(hosts: int = 2) -> nx.Graph:
    """8 GPUs per host on one PCIe switch (32 GB/s each) behind ONE 50 GB/s NIC."""
    g = nx.Graph()
    g.add_node("leaf", kind="switch")
    for h in range(hosts):
        host = f"h{h}"
        g.add_node(f"{host}/pcie", kind="pcie_switch")
        g.add_node(f"{host}/nic", kind="nic")
        g.add_edge(f"{host}/pcie", f"{host}/nic", bandwidth=50.0)
        g.add_edge(f"{host}/nic", "leaf", bandwidth=50.0)
        for i in range(8):
            gpu = f"{host}/gpu{i}"
            g.add_node(gpu, kind="gpu", host=host, local_index=i)
            g.add_edge(gpu, f"{host}/pcie", bandwidth=32.0)
    return g


def test_one_shared_nic_limits_eight_cross_host_flows():
    cl = cluster_from_graph(shared_nic_hosts(), nccl=BANDWIDTH_ONLY)  # link sharing: NCCL latency off
    # tp 2 with order tp-dp: tp pairs (r, r+8)? use pp=2: pipeline pairs r <-> r+8 across the hosts
    cfg = parallel_config(16, pp=2)
    cost = layout_cost(cl, cfg, np.arange(16), {"pp": 1e9})
    # 8 flows each way share the host's NIC link: 8 GB / 50 GB/s = 160 ms (not 1 GB / 32 GB/s per flow)
    assert cost.by_class["pp"] == pytest.approx(8e9 / 50e9, rel=1e-12)
    b = cost.classes["pp"].bottleneck
    assert b.kind == "link" and b.flows == 8 and b.capacity_gbps == 50.0
    assert {"h0/nic", "h1/nic"} & set(b.link)


def test_cross_host_ring_is_limited_per_flow_not_by_a_per_gpu_share():
    cl = cluster_from_graph(shared_nic_hosts(), nccl=BANDWIDTH_ONLY)  # per-flow rates: NCCL latency off
    # one tp ring of 16 over both hosts, one channel (one NIC per host): NCCL's ring enters h0 at a GPU, runs
    # through the 8 GPUs and leaves from the last one through the NIC, so every GPU port sends fb once;
    # every flow is limited by its 32 GB/s PCIe port, not by a 50/8 GB/s "share" of the NIC
    cost = layout_cost(cl, parallel_config(16, tp=16), np.arange(16), {"tp": 1e9})
    fb = 2 * 15 / 16 * 1e9
    assert cost.by_class["tp"] == pytest.approx(fb / 32e9, rel=1e-12)
    assert cost.classes["tp"].bottleneck.kind == "per-flow"


def test_all_to_all_on_an_nvswitch_is_limited_by_the_gpu_port():
    g = rail_two_leaves()
    cl = cluster_from_graph(g, nccl=BANDWIDTH_ONLY)  # the GPU port's share: NCCL latency off
    cfg = parallel_config(64, ep=8, etp=1, tp=1)
    cost = layout_cost(cl, cfg, np.arange(64), {"ep": 8e9})
    # ep groups are 8 consecutive ranks = one host: 7 flows of 1 GB leave every GPU over its 450 GB/s port
    assert cost.by_class["ep"] == pytest.approx(7e9 / 450e9, rel=1e-12)
    assert flow_bytes("all_to_all", 8e9, 8) == 1e9
    assert bytes_per_rank("all_to_all", 8e9, 8) == 7e9


def test_parallel_spines_are_ecmp():
    """Two spines wired to both leaves: flows split evenly, the leaves' uplinks add up."""
    g = nx.Graph()
    for s in ("spineA", "spineB"):
        g.add_node(s, kind="switch")
    for leaf in range(2):
        g.add_node(f"leaf{leaf}", kind="switch")
        for s in ("spineA", "spineB"):
            g.add_edge(f"leaf{leaf}", s, bandwidth=100.0)
        for i in range(4):
            gpu = f"l{leaf}/gpu{i}"
            g.add_node(gpu, kind="gpu", host=f"l{leaf}/h{i}", local_index=0)
            g.add_edge(gpu, f"leaf{leaf}", bandwidth=100.0)
    cl = cluster_from_graph(g, nccl=BANDWIDTH_ONLY)  # ECMP link sharing: NCCL latency off
    cfg = parallel_config(8, pp=2)  # pipeline pairs (r, r+4): every pair crosses the spines
    cost = layout_cost(cl, cfg, np.arange(8), {"pp": 1e9})
    # 4 flows of 1 GB up each leaf over 2 x 100 GB/s: 20 ms; one flow alone gets 100 GB/s (10 ms)
    assert cost.by_class["pp"] == pytest.approx(4e9 / 200e9, rel=1e-12)
    assert Reference(g, latency=False).cost(cfg, {"pp": 1e9}, [cl.devices[i] for i in range(8)]) == pytest.approx(
        cost.total_seconds, rel=1e-12)
    # with NCCL's latency: a send across hosts, Simple, 8.4 + 14 = 22.4 us
    full = layout_cost(cluster_from_graph(g), cfg, np.arange(8), {"pp": 1e9})
    assert full.by_class["pp"] == pytest.approx(4e9 / 200e9 + 22.4e-6, rel=1e-12)
    assert Reference(g).cost(cfg, {"pp": 1e9}, [cl.devices[i] for i in range(8)]) == pytest.approx(
        full.total_seconds, rel=1e-12)


def test_latency_term_counts_route_hops_times_ring_steps():
    g = nx.Graph()
    g.add_node("nvs", kind="nvswitch")
    for i in range(4):
        g.add_node(f"gpu{i}", kind="gpu", host="h", local_index=i)
        g.add_edge(f"gpu{i}", "nvs", bandwidth=100.0, latency_us=3.0)
    cl = cluster_from_graph(g, nccl=BANDWIDTH_ONLY)  # the graph's per-hop latency alone
    cost = layout_cost(cl, parallel_config(4, tp=4), np.arange(4), {"tp": 1e9})
    # 2·3/4·1 GB / 100 GB/s = 15 ms, + 2 hops x 3 us x 2(n-1) = 6 steps = 36 us
    assert cost.classes["tp"].latency_seconds == pytest.approx(36e-6)
    assert cost.by_class["tp"] == pytest.approx(15e-3 + 36e-6, rel=1e-12)
    # NCCL's latency adds to the graph's: one-host ring all-reduce of 4, Simple, 8.4 + 2·3·3.4 = 28.8 us
    # (LL128 14 + 6·1.9 = 25.4 us but 15 ms / 0.92 of bandwidth time: slower)
    full = layout_cost(cluster_from_graph(g), parallel_config(4, tp=4), np.arange(4), {"tp": 1e9})
    assert full.classes["tp"].latency_seconds == pytest.approx(36e-6 + 28.8e-6)
    assert full.by_class["tp"] == pytest.approx(15e-3 + 36e-6 + 28.8e-6, rel=1e-12)


def test_exposure_weighs_the_total():
    cl = cluster_from_graph(rail_two_leaves())
    cfg = parallel_config(64, tp=8, pp=2)
    cost = layout_cost(cl, cfg, np.arange(64), TRAFFIC, exposure={"dp": 0.5, "tp": 0.0})
    # the case by hand (dp 90 ms, pp 180 ms) plus NCCL's latency, Simple: dp all-gather ring over 4 hosts
    # 8.4 + 3·14 = 50.4 us, pp send across hosts 8.4 + 14 = 22.4 us
    assert cost.total_seconds == pytest.approx(0.5 * (0.09 + 50.4e-6) + 0.18 + 22.4e-6, rel=1e-9)
    assert cost.classes["dp"].exposure == 0.5
    with pytest.raises(InvalidArgumentError, match="exposure"):
        evaluate(rail_two_leaves(), cfg, [f"node{r // 8}/gpu{r % 8}" for r in range(64)], TRAFFIC,
                 exposure={"dp": 1.5})


def test_gpus_joined_only_through_another_gpu_are_an_error():
    g = nx.Graph()
    for i in range(3):
        g.add_node(f"gpu{i}", kind="gpu", host="h", local_index=i)
    g.add_edge("gpu0", "gpu1", bandwidth=50.0)
    g.add_edge("gpu1", "gpu2", bandwidth=50.0)
    cl = cluster_from_graph(g)
    with pytest.raises(InvalidArgumentError, match="only through another GPU"):
        layout_cost(cl, parallel_config(3, tp=3), np.arange(3), {"tp": 1e9})


def test_switch_cycle_that_is_not_parallel_spines_is_an_error():
    g = nx.Graph()
    for s in ("a", "b", "c"):
        g.add_node(s, kind="switch")
    g.add_edge("a", "b", bandwidth=10.0)
    g.add_edge("b", "c", bandwidth=10.0)
    g.add_edge("c", "a", bandwidth=20.0)
    for i, s in enumerate("abc"):
        g.add_node(f"gpu{i}", kind="gpu")
        g.add_edge(f"gpu{i}", s, bandwidth=50.0)
    with pytest.raises(InvalidArgumentError, match="cycle"):
        cluster_from_graph(g)


@pytest.mark.parametrize("seed", range(6))
def test_matches_the_independent_reference_and_bound_holds(seed):
    from test_solve import random_cluster, random_sizes

    rng = random.Random(seed)
    g = random_cluster(rng, max_gpus=8)
    cl = cluster_from_graph(g)
    W = cl.num_devices
    cfg = random_sizes(rng, W)
    traffic = {c: rng.choice([1e8, 1e9, 4e9]) for c in ("tp", "cp", "dp", "pp", "ep", "edp")}
    ref = Reference(g)
    lb = lower_bound(cl, cfg, traffic)
    nrng = np.random.default_rng(seed)
    for _ in range(5):
        dev = nrng.permutation(W)
        got = layout_cost(cl, cfg, dev, traffic).total_seconds
        assert got == pytest.approx(ref.cost(cfg, traffic, [cl.devices[i] for i in dev]), rel=1e-9)
        assert lb <= got * (1 + 1e-12)


def test_a_nic_does_not_forward_between_two_gpus():
    """Two GPUs share a NIC (2 hops through it) and a PCIe switch path via the CPU (4 hops, narrower):
    the route must take the PCIe path, never GPU→NIC→GPU."""
    g = nx.Graph()
    g.add_node("nic", kind="nic")
    g.add_node("leaf", kind="switch")
    g.add_edge("nic", "leaf", bandwidth=50.0)
    for i in range(2):
        g.add_node(f"gpu{i}", kind="gpu", host="h", local_index=i)
        g.add_node(f"pcie{i}", kind="pcie_switch")
        g.add_edge(f"gpu{i}", "nic", bandwidth=25.0)
        g.add_edge(f"gpu{i}", f"pcie{i}", bandwidth=32.0)
    g.add_node("cpu", kind="cpu")
    g.add_edge("pcie0", "cpu", bandwidth=20.0)
    g.add_edge("pcie1", "cpu", bandwidth=20.0)
    cl = cluster_from_graph(g, nccl=BANDWIDTH_ONLY)  # the route alone: NCCL latency off
    cost = layout_cost(cl, parallel_config(2, tp=2), np.arange(2), {"tp": 1e9})
    # ring all-reduce of 2: one flow of 1 GB each way over the 20 GB/s CPU links = 50 ms
    assert cost.by_class["tp"] == pytest.approx(1e9 / 20e9, rel=1e-12)
    assert Reference(g, latency=False).cost(parallel_config(2, tp=2), {"tp": 1e9}, list(cl.devices)) == pytest.approx(
        cost.total_seconds, rel=1e-12)
