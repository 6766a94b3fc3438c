"""NCCL's per-protocol bus-bandwidth caps of ring collectives (``src/graph/tuning.cc:327-329``), hand-derived."""

from __future__ import annotations

import numpy as np
import pytest

from rankmap.solver import NcclModel, cluster_from_graph, fat_tree_cluster, parallel_config
from rankmap.solver.cost.nccl import ring_protocol_caps
from rankmap.solver.cost.timemodel import layout_cost


def test_caps_by_generation_and_nodes():
    caps = ring_protocol_caps("hopper", np.array([1, 2, 4]), np.array([1, 8, 8]))
    assert caps["ll"].tolist() == [141.0, 39.0, 20.4]  # llMaxBws: Hopper one node; Intel CPUs 2 / >2 nodes
    assert caps["ll128"].tolist() == [np.inf, 8 * 36.7, 8 * 36.7]  # perChMaxRingLL128Bw x channels across nodes
    assert ring_protocol_caps(None, np.array([2]), np.array([1])) is None  # no generation named: no caps


def test_ll128_across_nodes_is_capped_per_channel():
    # 2 hosts x 1 H100, one 400G NIC each (48 GB/s): dp2 all-gather of S = 2 MB, fb = S/2 = 1 MB, 1 channel.
    #   Simple: 8.4 + 14 = 22.4 us + 1 MB / 48 GB/s (20.83 us) = 43.23 us
    #   LL128:  14 + 4 = 18 us + 1 MB / min(0.92·48, 1 x 36.7) GB/s (27.25 us) = 45.25 us (uncapped 40.64 us won)
    #   LL:     6.6 + 2.7 = 9.3 us + 1 MB / min(0.5·48, 39) GB/s (41.67 us) = 50.97 us
    g = fat_tree_cluster(2, 1, nic_bandwidth_gbps=50.0)
    g.graph["gpu"] = "h100"
    cfg = parallel_config(2)
    bw = layout_cost(cluster_from_graph(g, nccl=NcclModel(latency=False)), cfg, np.arange(2), {"dp": 2e6})
    assert bw.by_class["dp"] == pytest.approx(1e6 / 48e9, rel=1e-12)
    cost = layout_cost(cluster_from_graph(g), cfg, np.arange(2), {"dp": 2e6})
    assert cost.classes["dp"].latency_seconds == pytest.approx(22.4e-6, rel=1e-12)  # Simple wins
    assert cost.by_class["dp"] == pytest.approx(22.4e-6 + 1e6 / 48e9, rel=1e-12)
