"""Free-mode layouts that fill the hosts along another axis order (solver/search/gridperm.py)."""

from __future__ import annotations

import networkx as nx
import numpy as np
import pytest

from rankmap.solver import SolveOptions, parallel_config, solve
from rankmap.solver.fabric.rates import NcclModel
from rankmap.solver.megatron.catalogue import megatron_groups
from rankmap.solver.search.deadline import Deadline
from rankmap.solver.search.gridperm import grid_permutation_layouts


def test_each_permutation_fills_the_hosts_along_its_axes():
    """tp2 dp2 pp2 on 8 ranks, order tp-cp-ep-dp-pp: rank r has tp = r % 2, dp = (r // 2) % 2,
    pp = r // 4.  The permutation tp-pp-dp puts rank r on position tp + 2·pp + 4·dp of the device
    order: ranks 0..7 -> positions 0, 1, 4, 5, 2, 3, 6, 7.  Five layouts (3! less the order's own)."""
    cfg = parallel_config(8, tp=2, pp=2)
    devices = np.array([70, 71, 72, 73, 74, 75, 76, 77])
    got = dict(grid_permutation_layouts(cfg, devices))
    assert set(got) == {"dense:tp-pp-dp", "dense:dp-tp-pp", "dense:dp-pp-tp", "dense:pp-tp-dp", "dense:pp-dp-tp"}
    assert got["dense:tp-pp-dp"].tolist() == [70, 71, 74, 75, 72, 73, 76, 77]
    # pp fastest, then dp, then tp: position pp + 2·dp + 4·tp
    assert got["dense:pp-dp-tp"].tolist() == [70, 74, 72, 76, 71, 75, 73, 77]
    for dev in got.values():
        assert sorted(dev.tolist()) == devices.tolist()  # a bijection onto the devices


def test_the_expert_grid_is_permuted_when_there_are_experts():
    """tp2 ep2 etp1 on 8 ranks: the expert grid (etp1 ep2 edp2 pp2) has axes ep, dp(edp), pp:
    3! − 1 = 5 more layouts."""
    cfg = parallel_config(8, tp=2, ep=2, etp=1, pp=2)
    names = [n for n, _d in grid_permutation_layouts(cfg, np.arange(8))]
    assert sum(n.startswith("dense:") for n in names) == 5
    assert sum(n.startswith("expert:") for n in names) == 5
    with pytest.raises(ValueError, match="shape"):
        list(grid_permutation_layouts(cfg, np.arange(7)))


def _nvlink_pair_hosts() -> nx.Graph:
    """2 hosts x 8 GPUs: NVLink pairs (0,1) (2,3) … at 100 GB/s, every GPU on one PCIe switch at
    32 GB/s, and its own 25 GB/s NIC (direct PCIe link) to one leaf switch: 8 rails per host."""
    g = nx.Graph()
    g.add_node("switch:leaf", kind="switch")
    for h in range(2):
        sw = f"node{h}/pcie"
        g.add_node(sw, kind="switch")
        for i in range(8):
            gpu, nic = f"node{h}/gpu{i}", f"node{h}/nic{i}"
            g.add_node(gpu, kind="gpu", host=f"node{h}")
            g.add_node(nic, kind="nic")
            g.add_edge(gpu, sw, bandwidth=32.0, link="pcie")
            g.add_edge(gpu, nic, bandwidth=25.0, link="pcie")
            g.add_edge(nic, "switch:leaf", bandwidth=25.0, link="net")
        for i in range(0, 8, 2):
            g.add_edge(f"node{h}/gpu{i}", f"node{h}/gpu{i + 1}", bandwidth=100.0, link="nvlink")
    return g


def test_free_mode_spreads_a_data_parallel_group_over_two_hosts_for_two_channels():
    """tp2 cp2 pp2 (dp2) on 16 GPUs, latency off.  The data-parallel class is an all-gather-shaped
    ring over each dp-cp group of 4 (dp2 x cp2): fb = (k−1)/k·S = 3/4 · 5e9 = 3.75e9 bytes per edge.
    The legal orders put each dp-cp group inside one host (a pipeline stage per host), its ring over
    the PCIe switch: 3.75e9 / 32 GB/s = 117.19 ms.  Filling the hosts along tp-cp-pp-dp puts 2
    members of each group on each host, on distinct rails: 2 channels of fb/2 = 1.875e9 over 24 GB/s
    NICs (25 x 0.96) = 78.125 ms (the intra-host edge, fb/2 over PCIe, 58.6 ms).  tp on its NVLink
    pair: S_tp = 3.2e9 at 100 x 0.8 = 80 GB/s = 40 ms; cp pairs over PCIe: 2.4e9 / 32 GB/s = 75 ms.
    Total 193.125 ms; the launcher's baseline 40 + 75 + 117.19 = 232.19 ms."""
    g = _nvlink_pair_hosts()
    cfg = parallel_config(16, tp=2, cp=2, pp=2)
    traffic = {"tp": 3.2e9, "cp": 2.4e9, "dp": 5.0e9}
    nccl = NcclModel(latency=False)
    res = solve(g, cfg, traffic, SolveOptions(mode="free", orders="all", time_limit_seconds=2.0, nccl=nccl),
                deadline=Deadline(1e6))
    assert res.baseline.cost.total_seconds == pytest.approx(0.040 + 0.075 + 3.75e9 / 32e9, rel=1e-9)
    assert res.cost.total_seconds <= (0.040 + 0.075 + 1.875e9 / 24e9) * (1 + 1e-9)
    # the answer's dp-cp groups: 2 members on each of 2 hosts, 2 channels
    dp = res.cost.classes["dp"]
    assert dp.channels == 2 and dp.seconds == pytest.approx(1.875e9 / 24e9, rel=1e-9)
    groups = megatron_groups(cfg.with_order(res.order))["DATA_PARALLEL_GROUP_WITH_CP"]
    hosts = np.array([a.split("/")[0] for a in res.assignment])[groups]
    for row in hosts:
        _names, counts = np.unique(row, return_counts=True)
        assert counts.tolist() == [2, 2]


def test_a_grid_permutation_is_the_two_channel_layout():
    """The same instance: among the permutations of the default order's grid, tp-cp-pp-dp on the launcher's
    device order costs exactly 193.125 ms (previous test's derivation), the best of them."""
    from rankmap.solver import cluster_from_graph, layout_cost
    from rankmap.solver.launch.placement import launcher_device_order

    nccl = NcclModel(latency=False)
    cl = cluster_from_graph(_nvlink_pair_hosts(), nccl=nccl)
    cfg = parallel_config(16, tp=2, cp=2, pp=2)
    traffic = {"tp": 3.2e9, "cp": 2.4e9, "dp": 5.0e9}
    costs = {name: layout_cost(cl, cfg, dev, traffic).total_seconds
             for name, dev in grid_permutation_layouts(cfg, launcher_device_order(cl))}
    best = min(costs, key=costs.get)
    assert best == "dense:tp-cp-pp-dp"
    assert costs[best] == pytest.approx(0.040 + 0.075 + 1.875e9 / 24e9, rel=1e-12)


def test_the_launcher_bound_knows_the_orders_keep_the_data_parallel_ring_inside_a_host():
    """The same instance in launcher mode: every legal order ends with pp (edp = 4 ≠ dp = 2), so a host runs
    one stage's tp x cp x dp block and each dp-cp group of 4 is a ring inside one host, over the PCIe
    switch (the best ring of 4 GPUs there: 32 GB/s, NVLink pairs joined through PCIe): 3.75e9 / 32 GB/s =
    117.19 ms.  tp and cp compete for the NVLink pairs: 40 + 75 ms (tp on the pairs) or 100 + 30 ms.  The
    launcher bound (bound/analytic.in_host_ring_floor, the joint cut over the order's own floors) is the
    launcher optimum, 232.19 ms, the baseline: OPTIMAL."""
    from rankmap.solver.bound.analytic import search_lower_bound
    from rankmap.solver.megatron.orders import candidate_orders
    from rankmap.solver import cluster_from_graph

    nccl = NcclModel(latency=False)
    cl = cluster_from_graph(_nvlink_pair_hosts(), nccl=nccl)
    cfg = parallel_config(16, tp=2, cp=2, pp=2)
    traffic = {"tp": 3.2e9, "cp": 2.4e9, "dp": 5.0e9}
    want = 0.040 + 0.075 + 3.75e9 / 32e9
    assert search_lower_bound(cl, candidate_orders(cfg, "all"), traffic, None, "launcher") == pytest.approx(
        want, rel=1e-12)
    res = solve(_nvlink_pair_hosts(), cfg, traffic, SolveOptions(mode="launcher", orders="all",
                                                                 time_limit_seconds=2.0, nccl=nccl))
    assert res.status == "OPTIMAL" and res.cost.total_seconds == pytest.approx(want, rel=1e-12)
