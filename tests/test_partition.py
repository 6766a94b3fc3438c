"""Recursive tree-partition starts (solver/partition.py, pymetis)."""

from __future__ import annotations

import networkx as nx
import numpy as np
import pytest

from rankmap.solver import SolveOptions, cluster_from_graph, layout_cost, parallel_config, solve
from rankmap.solver.megatron.catalogue import megatron_groups
from rankmap.solver.search.partition import _repair, tree_partition_host_order, tree_partition_layout

pytest.importorskip("pymetis")


def two_leaves(leaf_of_host=(0, 0, 1, 1), gpus=8, nic=50.0, oversub=4.0) -> nx.Graph:
    """Hosts of 8 GPUs (NVSwitch 450), one 50 GB/s NIC per GPU into its leaf, leaf uplinks at 4:1."""
    g = nx.Graph()
    for h, leaf in enumerate(leaf_of_host):
        g.add_node(f"h{h}/nvs", kind="nvswitch", host=f"h{h}")
        for i in range(gpus):
            d = f"h{h}/gpu{i}"
            g.add_node(d, kind="gpu", host=f"h{h}", local_index=i)
            g.add_edge(d, f"h{h}/nvs", bandwidth=450.0)
            g.add_node(f"h{h}/nic{i}", kind="nic", host=f"h{h}")
            g.add_edge(d, f"h{h}/nic{i}", bandwidth=nic)
            g.add_node(f"leaf{leaf}", kind="switch")
            g.add_edge(f"h{h}/nic{i}", f"leaf{leaf}", bandwidth=nic)
    g.add_node("spine", kind="switch")
    for leaf in sorted(set(leaf_of_host)):
        down = sum(d["bandwidth"] for _, d in g[f"leaf{leaf}"].items())
        g.add_edge(f"leaf{leaf}", "spine", bandwidth=down / oversub)
    return g


def test_tree_partition_keeps_pipeline_pairs_under_one_leaf():
    """tp 8, pp 2, dp 2 on 4 hosts, two per leaf, pp-heavy: blocks 0 and 2 (one pp pair) share a leaf.

    Derivation.  Default order: block b = ranks 8b..8b+7; pp pairs blocks
    (0, 2) and (1, 3), dp pairs (0, 1) and (2, 3).  The baseline puts blocks
    0, 1 under leaf0, so all 16 pp flows of 4e9 bytes leave leaf0 over its
    200 GB/s uplink (2 hosts x 8 x 50 / 4): 64e9 / 200e9 = 320 ms, plus dp
    (default shape all-gather over 2 ranks: one flow of (1/2)·1e8 = 5e7 bytes
    per rank, leaf-local on a 50 GB/s NIC: 1 ms): 321 ms.  The tree partition
    cuts the dp edges instead: pp runs leaf-local, each flow alone on its
    50 GB/s NIC, 4e9 / 50e9 = 80 ms; 16 dp flows of 5e7 leave each leaf:
    8e8 / 200e9 = 4 ms.  Total 84 ms.  Each class adds NCCL's latency (Simple, the fastest
    protocol at these sizes): a pp send across hosts 8.4 + 14 = 22.4 us, a dp all-gather of
    2 ranks on 2 hosts 8.4 + 1·14 = 22.4 us; inside one host a send is 8.4 + 3.4 = 11.8 us.
    """
    cl = cluster_from_graph(two_leaves())
    cfg = parallel_config(32, tp=8, pp=2)
    traffic = {"pp": 4e9, "dp": 1e8}
    groups = megatron_groups(cfg)
    lat = 22.4e-6  # NCCL latency of a pp send, and of a dp all-gather of 2, across hosts
    assert layout_cost(cl, cfg, np.arange(32), traffic).total_seconds == pytest.approx(0.321 + 2 * lat, rel=1e-9)
    ho = tree_partition_host_order(cl, cfg, groups, traffic)
    leaf = np.array([0, 0, 1, 1])
    assert sorted(ho.tolist()) == [0, 1, 2, 3]
    assert leaf[ho[0]] == leaf[ho[2]] and leaf[ho[1]] == leaf[ho[3]]
    dev = np.concatenate([cl.host_devices[h] for h in ho])
    cost = layout_cost(cl, cfg, dev, traffic)
    assert cost.by_class["pp"] == pytest.approx(0.08 + lat, rel=1e-9)
    assert cost.by_class["dp"] == pytest.approx(0.004 + lat, rel=1e-9)
    # free mode: every rank placed once; the rank graph is cut below the hosts too, so each pp pair
    # shares a host (tp carries no bytes here): 4e9 over each GPU's 450 GB/s NVSwitch link
    lay = tree_partition_layout(cl, cfg, groups, traffic)
    assert sorted(lay.tolist()) == list(range(32))
    # (a send inside one host: NCCL latency 8.4 + 3.4 = 11.8 us)
    assert layout_cost(cl, cfg, lay, traffic).by_class["pp"] == pytest.approx(4e9 / 450e9 + 11.8e-6, rel=1e-9)
    # the solve finds it (or better) in both modes
    for mode in ("launcher", "free"):
        res = solve(cl, cfg, traffic, SolveOptions(mode=mode, time_limit_seconds=2.0))
        assert res.cost.total_seconds <= (0.084 + 2 * lat) * (1 + 1e-9)


def test_repair_gives_exact_sizes():
    """A 6-item path 0-1-2-3-4-5 (unit weights) split 5 / 1 by METIS must end as 4 / 2.

    The repair moves from the over-full part the item with the best gain
    (bytes to the target part minus bytes to its own part): item 4 has 1 to
    part 1 (item 5) and 1 to part 0 (item 3), gain 0; items 1-3 have gain -2
    and item 0 gain -1, so item 4 moves.
    """
    from scipy.sparse import coo_matrix

    i = np.arange(5)
    A = coo_matrix((np.ones(10), (np.r_[i, i + 1], np.r_[i + 1, i])), shape=(6, 6)).tocsr()
    part = _repair(A, np.array([0, 0, 0, 0, 0, 1]), np.array([4, 2]))
    assert part.tolist() == [0, 0, 0, 0, 1, 1]


def test_bisection_variant_is_a_valid_layout_with_the_same_leaf_local_pipeline():
    """``bisect=True`` on the same case: a permutation, pp pairs leaf-local (host order) or in one host (free).

    With two leaves the tree's top node has two children, so bisection and the
    k-way cut make the same first split: pp 80 ms in launcher mode (see above),
    4e9 / 450e9 in free mode; plus NCCL's latency of a send across hosts (22.4 us) or inside one (11.8 us).
    """
    cl = cluster_from_graph(two_leaves())
    cfg = parallel_config(32, tp=8, pp=2)
    traffic = {"pp": 4e9, "dp": 1e8}
    groups = megatron_groups(cfg)
    ho = tree_partition_host_order(cl, cfg, groups, traffic, bisect=True)
    assert sorted(ho.tolist()) == [0, 1, 2, 3]
    dev = np.concatenate([cl.host_devices[h] for h in ho])
    assert layout_cost(cl, cfg, dev, traffic).by_class["pp"] == pytest.approx(0.08 + 22.4e-6, rel=1e-9)
    lay = tree_partition_layout(cl, cfg, groups, traffic, bisect=True)
    assert sorted(lay.tolist()) == list(range(32))
    assert layout_cost(cl, cfg, lay, traffic).by_class["pp"] == pytest.approx(4e9 / 450e9 + 11.8e-6, rel=1e-9)


def test_clique_rank_graph_spreads_ring_bytes_over_every_peer():
    """pairs="clique": a ring all-reduce's flow bytes (2(n−1)/n·S) spread over the n−1 peers of each rank."""
    from rankmap.solver.search.partition import _rank_graph

    cfg = parallel_config(8, tp=4, pp=2)  # tp groups {0..3}, {4..7}; pp pairs (0,4), (1,5), ...
    S_tp, S_pp = 4e9, 1e9
    groups = megatron_groups(cfg)
    ring = _rank_graph(cfg, {"tp": S_tp, "pp": S_pp}, groups, 1, "ring").toarray()
    clique = _rank_graph(cfg, {"tp": S_tp, "pp": S_pp}, groups, 1, "clique").toarray()
    fb = 2 * 3 / 4 * S_tp
    # ring: neighbours 0 -> 1 carry one flow (fb), 0-2 none
    assert ring[0, 1] == pytest.approx(fb) and ring[0, 2] == 0
    # clique: every pair of a tp group, fb/3 each way
    assert clique[0, 1] == pytest.approx(2 * fb / 3) and clique[0, 2] == pytest.approx(2 * fb / 3)
    assert clique[0, 5] == 0  # no class joins them
    # pipeline neighbours are a chain in both models: S each way
    assert ring[0, 4] == pytest.approx(2 * S_pp) and clique[0, 4] == pytest.approx(2 * S_pp)
    # the same total bytes
    assert clique.sum() == pytest.approx(ring.sum())
