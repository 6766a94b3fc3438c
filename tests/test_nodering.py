"""A ring part inside one node or split over nodes (solver/bound/nodering.py): hand-derived floors, validity.

Latency is off (``NcclModel(latency=False)``) where a floor is compared with a layout's time, so both are
bandwidth times.  PCIe hosts: every GPU on one PCIe switch at 32 GB/s and on its own 25 GB/s NIC (NCCL's
24 GB/s per channel); DGX-1 (hybrid cube mesh: each GPU on two single and two double NVLinks, 20 GB/s
each in the model, and one 12.5 GB/s NIC per two GPUs).
"""

from __future__ import annotations

import random
import sys
from pathlib import Path

import numpy as np
import pytest

from rankmap.solver import cluster_from_graph, fat_tree_cluster, parallel_config
from rankmap.solver.bound.analytic import lower_bound, search_lower_bound
from rankmap.solver.bound.nodering import node_ring_floor, order_floor
from rankmap.solver.cost.timemodel import layout_cost
from rankmap.solver.fabric.rates import NcclModel
from rankmap.solver.megatron.catalogue import megatron_groups
from rankmap.solver.megatron.orders import candidate_orders
from rankmap.solver.traffic import CLASS_GROUP, class_collectives

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from exact_optimum import optimum  # noqa: E402  (tests/ is on sys.path)

NOLAT = NcclModel(latency=False)


def pcie(hosts: int, gpus: int = 8, **kw):
    return cluster_from_graph(fat_tree_cluster(hosts, gpus, intra="pcie", intra_bandwidth_gbps=32.0,
                                               nic_bandwidth_gbps=25.0, **kw), nccl=NOLAT)


def dgx1(hosts: int):
    from quality_instances import load_example_host, replicate_host

    return cluster_from_graph(replicate_host(load_example_host("dgx1-v100-hybridcube"), hosts, 2), nccl=NOLAT)


def _class_time(cl, cfg, dev, traffic, c):
    return layout_cost(cl, cfg, dev, traffic).by_class[c]


def test_tp8_on_two_pcie_hosts():
    """tp 8 all-reduce, S = 8 GB, fb = 2·7/8·S = 14 GB, 2 hosts of 8.  Inside a host: a ring over the PCIe
    switch, 14/32 = 437.5 ms.  Split: some host holds ≥ 4 members (8 over 2 hosts), whose 3 hops of each
    channel start on their PCIe ports: 3/4·14/32 = 328.1 ms; 4 channels cross at 14/(4·24) = 145.8 ms.
    Every group split: each host holds ⌈8/7⌉ = 2 split groups, 2·14 GB out over 8 x 25 GB/s: 140 ms.
    So min(437.5, max(328.1, 140)) = 328.1 ms; the per-GPU term alone said 14/(32+25) = 245.6 ms."""
    cl = pcie(2)
    fb = 14e9
    got = node_ring_floor(cl, "all_reduce", 2, 8, 8e9)
    assert got == pytest.approx(3 / 4 * fb / 32e9, rel=1e-12)
    cfg = parallel_config(16, tp=8)
    assert lower_bound(cl, cfg, {"tp": 8e9}) >= got * (1 - 1e-12)
    # the layouts: tp inside hosts (rank order) and tp 4 + 4 over the hosts
    inside = _class_time(cl, cfg, np.arange(16), {"tp": 8e9}, "tp")
    assert inside == pytest.approx(fb / 32e9, rel=1e-9)
    split = np.array([0, 1, 2, 3, 8, 9, 10, 11, 4, 5, 6, 7, 12, 13, 14, 15])
    assert _class_time(cl, cfg, split, {"tp": 8e9}, "tp") >= got * (1 - 1e-12)


def test_tp8_on_eight_pcie_hosts_meets_the_layout():
    """As above on 8 hosts (pcie-8x8): a group over 4 hosts with 2 members each runs 2 channels of 7 GB,
    14/48 = 291.7 ms (its hops: 7/32 = 218.8 ms); 3 members a host do no better (2/3·14/32 = 291.7).
    A launcher order that spreads every tp group 2 + 2 + 2 + 2 is priced at exactly that."""
    cl = pcie(8)
    fb = 14e9
    got = node_ring_floor(cl, "all_reduce", 8, 8, 8e9)
    assert got == pytest.approx(fb / 48e9, rel=1e-12)
    cfg = parallel_config(64, tp=8, pp=2)
    best = np.inf
    for ocfg in candidate_orders(cfg, "all"):
        t = _class_time(cl, ocfg, np.arange(64), {"tp": 8e9}, "tp")
        assert t >= got * (1 - 1e-12)
        best = min(best, t)
    assert best == pytest.approx(got, rel=1e-9)


def test_tp4_on_dgx1_every_split_group_leaves_its_host():
    """tp 4, S = 4 GB, fb = 6 GB, 4 DGX-1 hosts.  Inside a host every 4-cycle has a single NVLink:
    6/20 = 300 ms.  Split: 2 channels at most (2 members a host), 6/(2·12.5) = 240 ms; but with every
    group split each host holds ⌈8/3⌉ = 3 of them, 3·6 GB out over 4 x 12.5 GB/s: 360 ms.  So 300 ms
    (the channels term alone said 240)."""
    cl = dgx1(4)
    got = node_ring_floor(cl, "all_reduce", 8, 4, 4e9)
    assert got == pytest.approx(6e9 / 20e9, rel=1e-12)
    cfg = parallel_config(32, tp=4, pp=2)
    for ocfg in candidate_orders(cfg, "all"):
        assert _class_time(cl, ocfg, np.arange(32), {"tp": 4e9}, "tp") >= got * (1 - 1e-12)


def test_launcher_order_with_four_dp_members_a_host():
    """tp 2, dp 8 on 2 PCIe hosts of 8 (order tp-dp): each dp group holds 4 ranks on each host, 4 channels;
    a member sends 3 of its 4 channel hops over its PCIe port: 3/4·fb/32 with fb = 7/8·S (the distributed
    optimizer's all-gather and reduce-scatter: ring all-gathers of S)."""
    cl = pcie(2)
    cfg = parallel_config(16, tp=2)
    S = 2e9
    fb = 7 / 8 * S
    groups = megatron_groups(cfg)
    arr = groups[CLASS_GROUP["dp"]] - cfg.rank_offset
    (part,) = class_collectives({"dp": S}, "dp")
    assert part.kind == "all_gather"
    got = order_floor(cl, part, arr)
    assert got == pytest.approx(3 / 4 * fb / 32e9, rel=1e-12)
    t = _class_time(cl, cfg, np.arange(16), {"dp": S}, "dp")
    assert t == pytest.approx(got, rel=1e-9)


def test_no_floor_for_other_kinds_or_above_the_limit():
    cl = pcie(2)
    assert node_ring_floor(cl, "all_to_all", 2, 8, 8e9) == 0.0
    assert node_ring_floor(cl, "p2p_chain", 2, 8, 8e9) == 0.0
    assert node_ring_floor(cl, "all_reduce", 2, 8, 0.0) == 0.0


def _small_cluster(rng: random.Random):
    hosts, gpus = rng.choice([(2, 4), (4, 2), (2, 2), (3, 2)])
    intra = rng.choice(["pcie", "nvlink-pairs"])
    kw = dict(intra=intra, intra_bandwidth_gbps=rng.choice([16.0, 32.0, 100.0]),
              nic_bandwidth_gbps=rng.choice([12.5, 25.0, 50.0]), nics_per_host=rng.choice([1, gpus]))
    if rng.random() < 0.4:
        kw["tiers"] = [(2, rng.choice([1.0, 2.0]))]
    return cluster_from_graph(fat_tree_cluster(hosts, gpus, **kw))


@pytest.mark.parametrize("seed", range(8))
def test_never_above_the_exhaustive_optimum(seed):
    """PCIe and NVLink-pair hosts of up to 8 GPUs: the bound (with this term) <= the exhaustive optimum,
    launcher mode up to 8 GPUs, free mode up to 6."""
    rng = random.Random(seed)
    cl = _small_cluster(rng)
    W = cl.num_devices
    mode = "launcher" if W > 6 or rng.random() < 0.5 else "free"
    tp = rng.choice([t for t in (2, 4, 8) if W % t == 0 and t <= W])
    pp = rng.choice([p for p in (1, 2) if W % (tp * p) == 0])
    cfg = parallel_config(W, tp=tp, pp=pp)
    traffic = {"tp": rng.choice([1e9, 4e9]), "dp": rng.choice([0.0, 1e9, 4e9]), "pp": rng.choice([0.0, 1e8, 1e9])}
    orders = candidate_orders(cfg, "all")
    lb = search_lower_bound(cl, orders, traffic, None, mode)
    opt = optimum(cl, orders, traffic, None, mode)
    assert lb <= opt * (1 + 1e-9) + 1e-15, (lb, opt)


def nvpairs(hosts: int):
    return cluster_from_graph(fat_tree_cluster(hosts, 8, intra="nvlink-pairs", intra_bandwidth_gbps=100.0,
                                               nic_bandwidth_gbps=25.0), nccl=NOLAT)


def test_enumerated_paths_on_nvlink_pairs():
    """tp 2, dp 8 on 2 hosts of four NVLink-bridged pairs (PCIe 32 GB/s, a 25 GB/s NIC per GPU), order tp-dp:
    a dp group holds 4 members a host, 4 channels of fb/4.  The average of module nodering gives
    max(3/4·fb / (80 + 32), fb / (4·24)) = fb / 96 GB/s; NCCL's paths (module nodepaths) leave some member
    at least 2 of its 4 hops to GPUs outside its pair, on its 32 GB/s PCIe link: 2/4·fb/32 = fb / 64 GB/s.
    Two pairs in the order a, b, a*, b* meet it: each member sends 2 channels over PCIe."""
    from rankmap.solver.bound import nodepaths

    cl = nvpairs(2)
    cfg = parallel_config(16, tp=2)
    S = 2e9
    (part,) = class_collectives({"dp": S}, "dp")
    fb = 7 / 8 * S
    assert nodepaths.split_seconds_per_byte(cl, 4, 4) == pytest.approx(1 / 64e9, rel=1e-12)
    arr = megatron_groups(cfg)[CLASS_GROUP["dp"]] - cfg.rank_offset
    got = order_floor(cl, part, arr)
    assert got == pytest.approx(fb / 64e9, rel=1e-12)
    # dp ranks 0, 2, 4, 6 on GPUs 0, 2, 1, 3 (pairs 0-1, 2-3 interleaved), ranks 1, 3, 5, 7 on 4, 6, 5, 7
    loc = np.array([0, 4, 2, 6, 1, 5, 3, 7])
    dev = np.concatenate([loc, loc + 8])
    assert _class_time(cl, cfg, dev, {"dp": S}, "dp") == pytest.approx(got, rel=1e-9)
    # the members in pair order (a, a*, b, b*): one member sends 3 of 4 over PCIe
    assert _class_time(cl, cfg, np.arange(16), {"dp": S}, "dp") == pytest.approx(3 / 4 * fb / 32e9, rel=1e-9)


def test_enumerated_paths_are_counted_and_deterministic():
    from rankmap.solver.bound.work import bound_work_meter

    cl = nvpairs(2)
    cfg = parallel_config(16, tp=2)
    orders = candidate_orders(cfg, "all")
    got = []
    for _ in range(2):
        with bound_work_meter() as w:
            b = search_lower_bound(cl, orders, {"tp": 1e9, "dp": 2e9}, None, "launcher")
        got.append((b, w()))
    assert got[0] == got[1] and got[0][1] > 0


def test_sparsest_node_caps_the_channels_of_a_lopsided_group():
    """dp 8 (an all-gather: the plain traffic mapping's shape), S = 2 GB, fb = 7/8·S = 1.75 GB, 8 hosts of four
    NVLink pairs (PCIe 32 GB/s, a 25 GB/s NIC per GPU at 24 GB/s).  A group over several hosts with κ on its
    fullest holds at most 8 − κ on its sparsest, so runs at most ``min(4, 8 − κ)`` channels: κ = 5, 6, 7 cross
    at fb/(3·24), fb/(2·24), fb/24 (NCCL's paths, module nodepaths, raise κ = 5 to fb/48); κ = 4 on 4
    channels, NCCL's paths: fb/64 (test above); κ ≤ 3: the group spans 3 hosts or more, ≤ 3 channels,
    fb/72, raised by the paths to fb/48; inside a host: fb/32.  So fb/64 GB/s = 27.3 ms, where κ_min = κ
    let κ = 5..7 run 4 channels: fb/96."""
    from rankmap.solver.bound import nodepaths

    cl = nvpairs(8)
    S = 2e9
    (part,) = class_collectives({"dp": S}, "dp")
    assert part.kind == "all_gather"
    fb = 7 / 8 * S
    assert nodepaths.split_seconds_per_byte(cl, 5, 3) == pytest.approx(1 / 48e9, rel=1e-12)
    floor = node_ring_floor(cl, part.kind, 8, 8, S)
    assert floor == pytest.approx(fb / 64e9, rel=1e-12)
    # groups of 8 − s + s members over two hosts (tp 8 without traffic): never below the floor
    cfg = parallel_config(64, tp=8)
    grp = (megatron_groups(cfg)[CLASS_GROUP["dp"]] - cfg.rank_offset).ravel()
    rng = np.random.default_rng(5)
    least = np.inf
    for _ in range(24):
        slots = np.concatenate([rng.permutation(8) + 8 * h for h in range(8)])
        dev = np.empty(64, dtype=np.int64)
        dev[grp] = np.roll(slots, int(rng.integers(1, 8)))
        least = min(least, _class_time(cl, cfg, dev, {"dp": S}, "dp"))
    assert least >= floor * (1 - 1e-9)


@pytest.mark.parametrize("seed", range(6))
def test_lopsided_groups_never_above_the_exhaustive_optimum(seed):
    """Free mode, 3 hosts of 2 GPUs, tp 2, dp 3: a dp group holds 2 members on one host and 1 on another
    (or 1 on each), so 1 channel a NIC on its sparsest node; the bound <= the exhaustive optimum."""
    rng = random.Random(100 + seed)
    kw = dict(intra=rng.choice(["pcie", "nvlink-pairs"]), intra_bandwidth_gbps=rng.choice([16.0, 32.0, 100.0]),
              nic_bandwidth_gbps=rng.choice([12.5, 25.0, 50.0]), nics_per_host=rng.choice([1, 2]))
    cl = cluster_from_graph(fat_tree_cluster(3, 2, **kw))
    cfg = parallel_config(6, tp=2)
    traffic = {"tp": rng.choice([1e8, 1e9]), "dp": rng.choice([1e9, 4e9])}
    orders = candidate_orders(cfg, "all")
    lb = search_lower_bound(cl, orders, traffic, None, "free")
    opt = optimum(cl, orders, traffic, None, "free")
    assert lb <= opt * (1 + 1e-9) + 1e-15, (lb, opt)


def test_nvpairs_free_layout_below_the_search():
    """nvpairs-8x8 tp4 cp2 pp2 (GPT mix), order tp-ep-dp-cp-pp: every host one pipeline stage, two tp and two
    dp coordinates and both cp ones, each cp pair on an NVLink pair.  tp over two hosts (2 channels, 100.73 ms),
    cp on NVLink (15.11), dp 4 + 4 with its members interleaved over the pairs (69.12, the enumerated floor):
    207.80 ms, below the free search's 216.59 ms and above the free bound (196.28 ms)."""
    from quality_instances import instances, traffic_for

    inst = next(i for i in instances(False) if i.name == "nvpairs-8x8|tp4 cp2 pp2|gpt-24l-4096")
    cl = cluster_from_graph(inst.spec.build())
    cfg = parallel_config(cl.num_devices, **inst.sizes)
    traffic = traffic_for(inst.mix, cfg)
    orders = candidate_orders(cfg, "all")
    (ocfg,) = [o for o in orders if o.order == "tp-ep-dp-cp-pp"]
    dev = np.full(64, -1)
    h = 0
    for s in range(2):
        for ip in ((0, 1), (2, 3)):
            for jp in ((0, 1), (2, 3)):
                slot = 0
                for i in ip:
                    for j in jp:
                        for c in (0, 1):
                            dev[i + 4 * j + 16 * c + 32 * s] = 8 * h + slot  # rank of (tp i, dp j, cp c, pp s)
                            slot += 1
                h += 1
    assert sorted(dev.tolist()) == list(range(64))
    cost = layout_cost(cl, ocfg, dev, traffic).total_seconds
    assert cost == pytest.approx(0.2078, abs=1e-4)
    assert cost >= search_lower_bound(cl, orders, traffic, None, "free")
