"""The tp-pair case split of the bound (solver/bound/pairsplit.py): hand-derived floors, never above exhaustive optima."""

from __future__ import annotations

import random

import networkx as nx
import numpy as np
import pytest

from rankmap.solver import NcclModel, cluster_from_graph, fat_tree_cluster, parallel_config
from rankmap.solver.bound.analytic import _part_sizes, _search_bound, search_lower_bound
from rankmap.solver.bound.ncclterms import max_channels, nics_per_gpu
from rankmap.solver.bound.pairsplit import case_a_floor, case_b_floor, intra_out_gbps, pair_cases
from rankmap.solver.bound.rates import inter_host_rate_gbps, suffix_rates
from rankmap.solver.bound.work import bound_work_meter
from rankmap.solver.megatron.catalogue import megatron_groups
from rankmap.solver.megatron.orders import candidate_orders
from rankmap.solver.traffic import CLASS_GROUP, TRAFFIC_CLASSES

from exact_optimum import optimum  # noqa: E402  (tests/ is on sys.path)


def _nvpairs(hosts: int, gpus: int = 8):
    """``hosts`` hosts of ``gpus`` GPUs: pairs (2i, 2i+1) on a 100 GB/s NVLink bridge (80 as NCCL runs it),
    every GPU on a 32 GB/s PCIe link to the host's switch and on its own 25 GB/s NIC (24 per flow)."""
    return cluster_from_graph(fat_tree_cluster(hosts, gpus, intra="nvlink-pairs", intra_bandwidth_gbps=100.0,
                                               nic_bandwidth_gbps=25.0))


def _parts(cfg, traffic):
    return {c: _part_sizes(cfg, traffic, c) for c in TRAFFIC_CLASSES}


def test_rates_of_the_pair_hosts():
    """The quantities the floors use, read off the fabric: P = the PCIe link, R = one NIC, κ ≤ 4 pairs a host."""
    cl = _nvpairs(2)
    assert intra_out_gbps(cl) == (32.0, 4)
    assert inter_host_rate_gbps(cl) == pytest.approx(24.0)
    assert suffix_rates(cl)[1] == pytest.approx(32.0)
    assert max_channels(cl, 4) == 2 and nics_per_gpu(cl) == 1


def test_case_a_floor_hand_derived():
    """dp groups of 4 (all-gather, fb = 3/4 · 1.6 GB = 1.2 GB), every tp pair on its NVLink bridge.

    Any layout: one host: every member sends fb over its PCIe link, 1.2/32 = 37.5 ms; κ members a host over
    several: max((κ−1)/κ · fb/32, fb/(min(2, κ)·24)): κ=1 50 ms, κ=2 max(18.75, 25) = 25 ms, κ=3
    max(25, 25) = 25 ms: the least is 25 ms.  Launcher order tp-cp-ep-dp-pp (a dp group in one host):
    37.5 ms; tp-cp-ep-pp-dp (two members a host): 25 ms.
    """
    cl = _nvpairs(2)
    cfg = parallel_config(16, tp=2, pp=2)
    traffic = {"tp": 3.2e9, "dp": 1.6e9}
    (p, _g, k), = _parts(cfg, traffic)["dp"]
    assert p.kind == "all_gather" and k == 4
    assert case_a_floor(cl, p, k) == pytest.approx(0.025)
    for order, want in (("tp-cp-ep-dp-pp", 0.0375), ("tp-cp-ep-pp-dp", 0.025)):
        ocfg = cfg.with_order(order)
        arr = megatron_groups(ocfg)[CLASS_GROUP["dp"]] - ocfg.rank_offset
        assert case_a_floor(cl, p, k, arr) == pytest.approx(want), order


def test_case_b_floor_hand_derived():
    """A tp pair (all-reduce of 3.2 GB: fb = 3.2 GB) off its bridge: over PCIe 3.2/32 = 100 ms, or over two
    hosts on one channel 3.2/24 = 133 ms: 100 ms."""
    cl = _nvpairs(2)
    cfg = parallel_config(16, tp=2, pp=2)
    (p, _g, k), = _parts(cfg, {"tp": 3.2e9, "dp": 1.6e9})["tp"]
    assert case_b_floor(cl, p, k) == pytest.approx(0.1)


def test_split_raises_the_nvpairs_bound_hand_derived():
    """tp2 pp4 (dp 2) on 2 pair hosts; tp 3.2 GB, dp 4.8 GB (all-gather, fb = 2.4 GB), embedding 0.4 GB
    (all-reduce of 2: fb = 0.4 GB).  Case A: tp on its bridges 3.2/80 = 40 ms; a dp pair on one host
    2.4/32 = 75 ms (on two, one channel: 2.4/24 = 100 ms); an embedding pair on one host 0.4/32 = 12.5 ms
    (two: 16.7 ms): 127.5 ms.  Case B: a tp pair over PCIe alone 100 ms, with dp's own floor more.  The
    bound without the split: 120.04 ms (the embedding pair at NVLink speed, 5 ms)."""
    cl = _nvpairs(2)
    cfg = parallel_config(16, tp=2, pp=4)
    traffic = {"tp": 3.2e9, "dp": 4.8e9, "embedding": 4e8}
    orders = candidate_orders(cfg, "all")
    assert pair_cases(cl, cfg, _parts(cfg, traffic)) is not None
    old = _search_bound(cl, orders, traffic, None, "free", None)
    new = search_lower_bound(cl, orders, traffic, None, "free")
    assert old < 0.1275 - 1e-3
    assert 0.1275 - 1e-9 <= new <= 0.1275 + 1e-4  # + NCCL's latency (tens of microseconds)
    assert search_lower_bound(cl, orders, traffic, None, "launcher") >= new - 1e-12


def test_not_applied_where_domains_are_not_tp_groups():
    """NVSwitch hosts of 8 with tp 2: level-0 domains are hosts, not pairs: no split (the bound unchanged)."""
    cl = cluster_from_graph(fat_tree_cluster(2, 8))
    cfg = parallel_config(16, tp=2, pp=2)
    assert pair_cases(cl, cfg, _parts(cfg, {"tp": 1e9, "dp": 1e9})) is None


def test_work_is_counted_and_deterministic():
    cl = _nvpairs(2)
    cfg = parallel_config(16, tp=2, pp=2)
    traffic = {"tp": 3.2e9, "dp": 1.6e9, "pp": 1e8}
    orders = candidate_orders(cfg, "all")
    got = []
    for _ in range(2):
        with bound_work_meter() as w:
            b = search_lower_bound(cl, orders, traffic, None, "launcher")
        got.append((b, w()))
    assert got[0] == got[1] and got[0][1] > 0


def pair_cluster(rng: random.Random, hosts: int, per: int) -> nx.Graph:
    """Random hosts of NVLink-bridged GPU pairs on a PCIe switch, a NIC per GPU (rail leaves or one) or one per host."""
    g = nx.Graph()
    g.add_node("spine", kind="switch")
    rails = rng.random() < 0.5
    leaves = [f"leaf{r}" for r in range(per)] if rails else ["leaf0"]
    for leaf in leaves:
        g.add_node(leaf, kind="switch")
        g.add_edge(leaf, "spine", bandwidth=float(rng.choice([12.5, 25, 50, 400])))
    nv = float(rng.choice([100, 300]))  # wider than PCIe: the pairs are the level-0 domains
    pcie = float(rng.choice([8, 16, 32, 64]))
    nic_bw = float(rng.choice([12.5, 25, 50]))
    for h in range(hosts):
        host = f"h{h}"
        hub = f"{host}/pcie"
        g.add_node(hub, kind="pcie_switch", host=host)
        for i in range(per):
            gpu = f"{host}/gpu{i}"
            g.add_node(gpu, kind="gpu", host=host, local_index=i)
            g.add_edge(gpu, hub, bandwidth=pcie)
            if i % 2 == 1:
                g.add_edge(f"{host}/gpu{i - 1}", gpu, bandwidth=nv)
        if rng.random() < 0.5:
            for i in range(per):
                nic = f"{host}/nic{i}"
                g.add_node(nic, kind="nic", host=host)
                g.add_edge(f"{host}/gpu{i}", nic, bandwidth=float(rng.choice([nic_bw, pcie])))
                g.add_edge(nic, leaves[i % len(leaves)], bandwidth=nic_bw)
        else:
            nic = f"{host}/nic0"
            g.add_node(nic, kind="nic", host=host)
            g.add_edge(hub, nic, bandwidth=pcie)
            g.add_edge(nic, leaves[0], bandwidth=nic_bw)
    if rng.random() < 0.3:
        g.graph["gpu"] = rng.choice(["a100", "h100"])
    return g


#: (seed, hosts, GPUs per host, pp, cp): 8-GPU pair clusters, free mode over all 8! bijections and launcher mode.
EXHAUSTIVE = [(1, 2, 4, 4, 1), (4, 4, 2, 2, 1), (5, 2, 4, 1, 2), (6, 4, 2, 1, 2),
              (7, 2, 4, 2, 2), (8, 4, 2, 4, 1)]


@pytest.mark.parametrize("seed,hosts,per,pp,cp", EXHAUSTIVE)
def test_never_above_the_exhaustive_optimum_on_pair_clusters(seed, hosts, per, pp, cp):
    rng = random.Random(seed)
    cl = cluster_from_graph(pair_cluster(rng, hosts, per), nccl=NcclModel(latency=rng.random() < 0.5))
    cfg = parallel_config(8, tp=2, pp=pp, cp=cp)
    traffic = {c: rng.choice([0.0, 1e8, 1e9, 4e9]) for c in ("cp", "pp", "embedding")}
    traffic["tp"] = rng.choice([1e8, 1e9, 4e9])
    traffic["dp"] = rng.choice([1e8, 1e9, 4e9])
    orders = candidate_orders(cfg, "all")
    assert pair_cases(cl, cfg, _parts(cfg, traffic)) is not None
    for mode in ("launcher", "free"):
        best = optimum(cl, orders, traffic, None, mode)
        assert search_lower_bound(cl, orders, traffic, None, mode) <= best * (1 + 1e-9) + 1e-15, (mode, traffic)


def test_exhaustive_case_where_the_split_raises_the_bound():
    """2 pair hosts of 4, tp2 pp4 (free), tp and embedding 1 GB each (fb = 1 GB), pp 0.1 GB.  Case A: tp on
    its bridges 1/80 = 12.5 ms, an embedding pair (first and last stage: two tp groups, two bridges) on one
    host 1/32 = 31.25 ms (two hosts: 1/24); case B: a tp pair off its bridge 31.25 ms, the embedding pair
    on a bridge 12.5 ms.  Both ≥ 43.75 ms plus pp; the bound without the split: 29.2 ms.  No layout of
    the 8! beats it."""
    cl = _nvpairs(2, 4)
    cfg = parallel_config(8, tp=2, pp=4)
    traffic = {"tp": 1e9, "embedding": 1e9, "pp": 1e8}
    orders = candidate_orders(cfg, "all")
    old = _search_bound(cl, orders, traffic, None, "free", None)
    new = search_lower_bound(cl, orders, traffic, None, "free")
    best = optimum(cl, orders, traffic, None, "free")
    assert old < 0.04375 - 1e-3
    assert 0.04375 <= new <= best * (1 + 1e-9)


def test_case_a_domain_cut_hand_derived():
    """2 hosts of two NVLink pairs, one 12.5 GB/s NIC a host (12 as NCCL runs it), tp2 dp4: with every tp pair
    on its bridge a dp group has at most 2 members in a host (one a pair), so each host is touched by 2 dp
    groups, both split, each sending its 0.75 GB (all-gather of 1 GB over 4) out: 2 · 0.75 / 12 = 125 ms
    (the channels alone: 0.75/12 = 62.5 ms).  No layout beats the bound."""
    cl = cluster_from_graph(fat_tree_cluster(2, 4, intra="nvlink-pairs", intra_bandwidth_gbps=100.0,
                                             nic_bandwidth_gbps=12.5, nics_per_host=1))
    cfg = parallel_config(8, tp=2)
    traffic = {"tp": 1e9, "dp": 1e9}
    (p, _g, k), = _parts(cfg, traffic)["dp"]
    assert case_a_floor(cl, p, k, every_rank=True) == pytest.approx(0.125)
    orders = candidate_orders(cfg, "all")
    for mode in ("launcher", "free"):
        assert search_lower_bound(cl, orders, traffic, None, mode) <= optimum(cl, orders, traffic, None, mode) * (
            1 + 1e-9)


@pytest.mark.parametrize("mode", ["launcher", "free"])
def test_embedding_groups_of_deep_pipelines_hold_few_ranks(mode):
    """4 hosts of one NVLink pair, tp2 pp4: the embedding groups hold the first and last stages only, so a host
    whose tp pair is a middle stage holds no embedding rank: no domain cut for them.  Host 0, the narrowest,
    holds a middle stage in the optimum (the embedding pairs leave hosts of 25 GB/s); the cut said 2 embedding
    groups · 1 GB over host 0's 13 GB/s, above the optimum, before it was kept to parts whose groups hold
    every rank."""
    g = fat_tree_cluster(4, 2, intra="nvlink-pairs", intra_bandwidth_gbps=100.0, nic_bandwidth_gbps=12.5,
                         gpu="h100")
    g["node000/nic1"]["switch:t0.0"]["bandwidth"] = 0.5  # host 0 leaves over 13 GB/s, the others over 25
    cl = cluster_from_graph(g)
    cfg = parallel_config(8, tp=2, pp=4)
    traffic = {"tp": 1e9, "pp": 1e6, "embedding": 1e9}
    orders = candidate_orders(cfg, "all")
    assert pair_cases(cl, cfg, _parts(cfg, traffic)) is not None
    assert search_lower_bound(cl, orders, traffic, None, mode) <= optimum(cl, orders, traffic, None, mode) * (
        1 + 1e-9)
