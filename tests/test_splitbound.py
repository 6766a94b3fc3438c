"""The first-hop bound of split all-to-all groups (solver/splitbound.py), hand-derived and exhaustive.

Cluster of the hand-derived cases: 2 hosts x 3 GPUs, every GPU on its host's
PCIe switch by 32 GB/s and on its own NIC by 25 GB/s (fat_tree_cluster, intra
"pcie").  A GPU reaches a GPU of its host over PCIe only and the other host
over its NIC only, so C_in = 32 GB/s and C_out = 25 GB/s per GPU; the per-GPU
term divides by both together (57 GB/s).  The NIC's port into the leaf (``link: net``)
runs at NCCL's 25 x 0.96 = 24 GB/s; the PCIe links keep their rate.  The exhaustive
optimum (tests/exact_optimum.py) adds NCCL's latency of an all-to-all: 8.4 + 3.4 = 11.8 us
inside one host, 8.4 + 14 = 22.4 us across hosts (Simple); the bound leaves it out.
"""

from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from rankmap.solver import cluster_from_graph, fat_tree_cluster, parallel_config
from rankmap.solver.bound.analytic import search_lower_bound
from rankmap.solver.megatron.orders import candidate_orders
from rankmap.solver.bound.splitbound import all_to_all_split_bound, first_hop_capacities
from rankmap.solver.bound.analytic import lower_bound
from rankmap.solver.cost.timemodel import flow_bytes

from exact_optimum import optimum  # noqa: E402  (tests/ is on sys.path)
from test_bound import tree_cluster  # noqa: E402
from test_solve import random_cluster  # noqa: E402

S = 3e9  # bytes per rank of the ep class


def pcie_pair():
    return cluster_from_graph(fat_tree_cluster(2, 3, intra="pcie", intra_bandwidth_gbps=32.0,
                                               nic_bandwidth_gbps=25.0))


def test_first_hop_capacities_of_pcie_hosts():
    cl = pcie_pair()
    caps = {tuple(lab.tolist()): (ci, co) for lab, ci, co in first_hop_capacities(cl)}
    assert caps[(0, 0, 0, 1, 1, 1)] == (32.0, 25.0)  # hosts: PCIe inside, the NIC out
    assert caps[(0, 0, 0, 0, 0, 0)] == (57.0, 0.0)  # the whole cluster: every link, nothing out


def test_whole_groups_fit_the_hosts():
    """ep3, 2 groups: each group whole in a host sends 2 flows over PCIe, 2·fb/32; split 2+1, the lone
    member sends 2 flows over its NIC, 2·fb/25.  Bound 2·fb/32 (the per-GPU term: 2·fb/57), and it is
    the exhaustive optimum's bandwidth time (plus 11.8 us of latency: both groups inside hosts).
    The bound adds NCCL's latency (bound/ncclterms.latency_extra_seconds): an ep group of 3 fits a
    3-GPU host (1 node), so the least over protocols of latency + floor / efficiency is Simple's
    all-to-all inside a node, 8.4 + 3.4 = 11.8 us (LL: 6.6 + 0.6 = 7.2 us but floor / 0.5): the bound
    meets the exhaustive optimum."""
    cl = pcie_pair()
    cfg = parallel_config(6, ep=3)
    fb = flow_bytes("all_to_all", S, 3)
    assert all_to_all_split_bound(cl, 2, 3, fb) == pytest.approx(2 * fb / 32e9, rel=1e-12)
    lb = lower_bound(cl, cfg, {"ep": S})
    assert lb == pytest.approx(2 * fb / 32e9 + 11.8e-6, rel=1e-12)
    opt = optimum(cl, candidate_orders(cfg, "all"), {"ep": S}, {}, "free")
    assert opt == pytest.approx(lb, rel=1e-9)


def test_a_forced_split_sends_over_the_nic():
    """ep2, 3 groups on hosts of 3 GPUs: a host holds one whole group, so one group is split 1+1 and its
    flow crosses the 25 GB/s GPU-NIC link (the first-hop term: fb/25; the per-GPU term: fb/57) and the
    NIC's port at 24 GB/s (the bound's per-domain cut: fb/24), the exhaustive optimum's bandwidth time
    (plus 22.4 us of latency: an all-to-all across hosts).  The bound adds NCCL's latency at the
    fewest nodes a group of 2 can span, 1 (bound/ncclterms.latency_extra_seconds: free mode does not
    know which group is forced to split): Simple's all-to-all inside a node, 8.4 + 3.4 = 11.8 us, so
    it stays 22.4 - 11.8 = 10.6 us below the optimum."""
    cl = pcie_pair()
    cfg = parallel_config(6, ep=2)
    fb = flow_bytes("all_to_all", S, 2)
    assert all_to_all_split_bound(cl, 3, 2, fb) == pytest.approx(fb / 25e9, rel=1e-12)
    lb = search_lower_bound(cl, candidate_orders(cfg, "all"), {"ep": S}, {}, "free")
    assert lb == pytest.approx(fb / 24e9 + 11.8e-6, rel=1e-12)
    assert optimum(cl, candidate_orders(cfg, "all"), {"ep": S}, {}, "free") == pytest.approx(
        fb / 24e9 + 22.4e-6, rel=1e-9)


def test_large_clusters_skip_the_term():
    cl = cluster_from_graph(fat_tree_cluster(65, 8, intra="pcie", intra_bandwidth_gbps=32.0))
    assert first_hop_capacities(cl) == []
    assert all_to_all_split_bound(cl, 65, 8, 1e9) == 0.0


@settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(seed=st.integers(0, 10**6), kind=st.sampled_from(["random", "tree"]),
       payload=st.sampled_from([1e7, 1e9, 4e9]), tp_payload=st.sampled_from([0.0, 1e9]))
def test_never_above_the_optimum(seed, kind, payload, tp_payload):
    """ep (and tp) traffic on small random clusters: the bound with this term <= the exhaustive free optimum."""
    rng = random.Random(seed)
    g = random_cluster(rng, max_gpus=6) if kind == "random" else tree_cluster(rng)
    cl = cluster_from_graph(g)
    W = cl.num_devices
    if W > 6 or W < 2:
        return
    eps = [e for e in range(2, W + 1) if W % e == 0]
    ep = rng.choice(eps)
    cfg = parallel_config(W, ep=ep)
    traffic = {"ep": payload, "tp": tp_payload}
    orders = candidate_orders(cfg, "all")
    lb = search_lower_bound(cl, orders, traffic, {}, "free")
    assert lb <= optimum(cl, orders, traffic, {}, "free") * (1 + 1e-9) + 1e-15


def test_an_all_to_all_that_must_span_nvlink_racks_sends_half_its_flows_per_nic():
    """Two NVL72-style racks of one 4-GPU tray each (every rack one NVLink domain, so one NCCL node), both
    trays under one leaf; ep8 (etp1) over the 8 GPUs, S = 4e9 bytes, fb = S/8 = 5e8, latency off.  Every
    layout splits the group 4 + 4 over the racks: a rack's 4 members exchange 4·4 flows with the other
    rack, relayed by PXN through the member on the receiver's rail, so all leave through the 4 members'
    NIC links (50 GB/s physical, node_out_gbps: the rack's NVLink switch holds one node's GPUs and does
    not count): some carries >= 4·fb / 50 GB/s = 40 ms, for any cluster size (no all-pair routes).  The
    time model: each NIC port (50 x 0.96 = 48 GB/s) carries 4 flows, 2e9 / 48e9 = 41.67 ms."""
    from rankmap.solver import layout_cost, lower_bound
    from rankmap.solver.bound.splitbound import node_out_gbps, node_split_bound
    from rankmap.solver.fabric.builders import nvl72_cluster
    from rankmap.solver.fabric.rates import NcclModel

    cl = cluster_from_graph(nvl72_cluster(2, 1, 4, hosts_per_leaf=2), nccl=NcclModel(latency=False))
    node, cap = node_out_gbps(cl)
    assert np.unique(node).size == 2 and cap.tolist() == [50.0] * 8
    assert node_split_bound(cl, 1, 8, 5e8) == pytest.approx(4 * 5e8 / 50e9, rel=1e-12)
    assert node_split_bound(cl, 2, 4, 5e8) == 0.0  # two groups of 4 fit the racks
    cfg = parallel_config(8, ep=8, etp=1)
    assert lower_bound(cl, cfg, {"ep": 4e9}) == pytest.approx(0.040, rel=1e-12)
    assert layout_cost(cl, cfg, np.arange(8), {"ep": 4e9}).total_seconds == pytest.approx(2e9 / 48e9, rel=1e-12)
