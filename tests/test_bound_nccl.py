"""The bound against NCCL's algorithms on H100 hosts (solver/bound/ncclterms.py), derived by hand.

Clusters as ``rankmap cluster --gpus-per-node 8 --gpu h100 [--fabric LEAF.conf]`` builds them
(Slurm ``SwitchName=leaf1 Nodes=node[1-2]``): every GPU on the host's NVSwitch by 18 NVLinks
(450 GB/s; NCCL's 18 x 20.6 = 370.8 GB/s on Hopper) and on its own 400G NIC (50 GB/s; NCCL's
50 x 0.96 = 48 GB/s, one channel per NIC) into the leaf.  Rates from solver/fabric/rates.py,
bus bandwidths and latencies from solver/cost/nccl.py (NCCL ``tuning.cc``).
"""

from __future__ import annotations

import numpy as np
import pytest

from rankmap.solver import cluster_from_graph, layout_cost, parallel_config
from rankmap.solver.bound.analytic import search_lower_bound
from rankmap.solver.formats import build_cluster, load_graph
from rankmap.solver.megatron.orders import candidate_orders
from rankmap.solver.bound.analytic import lower_bound

from cli_helpers import run  # noqa: E402  (tests/ is on sys.path)

S = 4e9  # payload, bytes per rank
NVLINK = 18 * 20.6e9  # one H100's NVLink ports at NCCL's per-link rate: 370.8 GB/s
NIC = 50e9 * 0.96  # a 400G NIC port as NCCL drives it: 48 GB/s


@pytest.fixture(scope="module")
def two_hosts(tmp_path_factory):
    conf = tmp_path_factory.mktemp("leaf") / "leaf.conf"
    conf.write_text("SwitchName=leaf1 Nodes=node[1-2]\n")
    return cluster_from_graph(build_cluster(gpus_per_node=8, gpu="h100", fabric=str(conf)))


def test_the_cli_builds_the_same_two_hosts(capsys, tmp_path, two_hosts):
    """``rankmap cluster --gpus-per-node 8 --gpu h100 --fabric leaf.conf`` is the fixture's cluster."""
    conf = tmp_path / "leaf.conf"
    conf.write_text("SwitchName=leaf1 Nodes=node[1-2]\n")
    out = tmp_path / "h100x2.json"
    code, _, err = run(capsys, "cluster", "--gpus-per-node", "8", "--gpu", "h100", "--fabric", conf, "-o", out)
    assert code == 0, err
    cl = cluster_from_graph(load_graph(out))
    assert cl.devices == two_hosts.devices
    assert cl.nccl_topology.arch == "hopper"
    assert cl.nccl_topology.nvlink_gbps.tolist() == pytest.approx([370.8] * 16)
    assert cl.nccl_topology.nic_gbps.tolist() == pytest.approx([48.0] * 16)
    assert cl.nccl_topology.rail.tolist() == list(range(8)) * 2


def test_tp8_all_reduce_on_one_h100_host_runs_nvls_and_the_bound_meets_it():
    """tp8 all-reduce of S = 4 GB inside one 8xH100 host: NVLS, 8 heads.

    NCCL's NVLS bus bandwidth 2 · 0.85 · 370.8 · (8−1)/(8+1) = 490.28 GB/s; the ring's 370.8 is
    slower.  Time = 2·(7/8)·S / 490.28 GB/s = 14.28 ms plus NVLS latency (Simple: 25 us).  The
    bound's NVLS floor is the bandwidth time, and it adds NCCL's latency (bound/ncclterms): a group
    of 8 fits one node, where the least of latency + floor / efficiency is NVLS's 25 us + 14.28 ms
    (ring, Simple: 8.4 + 14·3.4 = 56 us over a slower floor): the bound meets the cost.
    """
    cl = cluster_from_graph(build_cluster(gpus_per_node=8, gpu="h100"))
    cfg = parallel_config(8, tp=8)
    fb = 2 * 7 / 8 * S
    nvls = 2 * 0.85 * NVLINK * 7 / 9
    cost = layout_cost(cl, cfg, np.arange(8), {"tp": S})
    tp = cost.classes["tp"]
    assert (tp.algorithm, tp.channels) == ("nvls", 8)
    assert tp.seconds == pytest.approx(fb / nvls + 25e-6, rel=1e-9)
    lb = lower_bound(cl, cfg, {"tp": S})
    assert lb == pytest.approx(fb / nvls + 25e-6, rel=1e-9)
    assert lb == pytest.approx(cost.total_seconds, rel=1e-12) and lb <= cost.total_seconds * (1 + 1e-12)
    assert search_lower_bound(cl, candidate_orders(cfg, "all"), {"tp": S}, None, "free") <= cost.total_seconds


def test_dp16_all_gather_over_two_h100_hosts_runs_8_channels(two_hosts):
    """dp16 all-gather of S = 4 GB (the default dp shape) over 2 x 8xH100, launcher order.

    The group's 8 members per host sit on 8 distinct NICs: 8 channels, each carrying fb/8 between the
    rail-matched members of the two hosts, fb = 15/16·S; per channel fb/8 over one 48 GB/s NIC, i.e.
    fb / (8 channels x 48 GB/s) = 9.77 ms; inside a host the ring edges carry fb·7/8 over 370.8 GB/s
    (8.85 ms), less.  NCCL's latency (Simple): 8.4 + 14·3.4 + 1·14 = 70 us.  The bound's channel
    terms give the bandwidth time exactly, and it adds NCCL's latency at the fewest nodes a group of
    16 spans on 8-GPU hosts, ⌈16/8⌉ = 2: the same Simple 70 us (LL: 6.6 + 14·0.6 + 2.7 = 17.7 us but
    floor / 0.5): the bound meets the cost.
    """
    cfg = parallel_config(16)
    fb = 15 / 16 * S
    cost = layout_cost(two_hosts, cfg, np.arange(16), {"dp": S})
    dp = cost.classes["dp"]
    assert (dp.algorithm, dp.channels) == ("ring", 8)
    assert dp.seconds == pytest.approx(fb / (8 * NIC) + 70e-6, rel=1e-9)
    lb = lower_bound(two_hosts, cfg, {"dp": S})
    assert lb == pytest.approx(fb / (8 * NIC) + 70e-6, rel=1e-9)
    assert lb == pytest.approx(cost.total_seconds, rel=1e-12) and lb <= cost.total_seconds * (1 + 1e-12)
    assert search_lower_bound(two_hosts, [cfg], {"dp": S}, None, "launcher") <= cost.total_seconds


def test_all_reduce_of_16_over_two_h100_hosts_runs_nvlstree(two_hosts):
    """tp16 all-reduce of S = 4 GB over 2 x 8xH100: NVLSTree, 8 channels.

    NCCL's NVLSTree bus bandwidth on 2 nodes: 8 channels x min(intra, inter, 57.7) with intra
    2 · 0.85 · 370.8/(8+1) · 7/8 = 61.3 and inter 2 x 48 = 96 GB/s: 8 x 57.7 = 461.6 GB/s, so
    2·(15/16)·S / 461.6 GB/s = 16.25 ms (its network flows, S/8 per NIC: 10.4 ms, less), plus its
    latency (Simple): 25 + 2·log2(2)·20.9 = 66.8 us.  The ring is slower (fb/8 per 48 GB/s NIC:
    19.5 ms), so is tree (2S / (min(0.92·8·48, 8·41.4)·0.85 = 281.5 GB/s) = 28.4 ms); NVLS cannot
    run (16 members, 8 GPUs per node).  The bound's floor is the NVLSTree bandwidth time, and it adds
    NCCL's latency at the fewest nodes a group of 16 spans, 2: NVLSTree's 66.8 us (ring Simple at 2
    nodes: (8.4 + 28·3.4 + 2·14) x 1.4 = 184.24 us; tree Simple: 8.4 + 2·((16/2 − 1)·4.0 + log2(2)·14)
    = 92.4 us; LL and LL128 pay floor / 0.5 and / 0.92): the bound meets the cost.
    """
    cfg = parallel_config(16, tp=16)
    fb = 2 * 15 / 16 * S
    nvlstree = 8 * 57.7e9
    cost = layout_cost(two_hosts, cfg, np.arange(16), {"tp": S})
    tp = cost.classes["tp"]
    assert (tp.algorithm, tp.channels) == ("nvlstree", 8)
    assert tp.seconds == pytest.approx(fb / nvlstree + 66.8e-6, rel=1e-9)
    lb = lower_bound(two_hosts, cfg, {"tp": S})
    assert lb == pytest.approx(fb / nvlstree + 66.8e-6, rel=1e-9)
    assert lb == pytest.approx(cost.total_seconds, rel=1e-12) and lb <= cost.total_seconds * (1 + 1e-12)
    assert search_lower_bound(two_hosts, candidate_orders(cfg, "all"), {"tp": S}, None, "free") <= cost.total_seconds


@pytest.mark.parametrize("seed", range(8))
def test_never_above_the_optimum_with_nccl_algorithms(seed):
    """Hosts naming a GPU generation (NVLS, NVLSTree and tree all-reduce may run; calibrated rates):
    bound <= the exhaustive optimum priced with layout_cost (tests/exact_optimum.py), free mode up to
    6 GPUs, launcher mode on 8."""
    import random

    from rankmap.solver import fat_tree_cluster
    from test_solve import random_sizes  # noqa: E402
    from exact_optimum import optimum  # noqa: E402

    rng = random.Random(seed)
    hosts, per = rng.choice([(1, 4), (2, 2), (2, 3), (3, 2), (1, 6), (2, 4), (4, 2)])
    g = fat_tree_cluster(hosts, per, nic_bandwidth_gbps=rng.choice([25.0, 50.0]))
    g.graph["gpu"] = rng.choice(["h100", "b200", "a100"])
    cl = cluster_from_graph(g)
    cfg = random_sizes(rng, cl.num_devices)
    traffic = {c: rng.choice([0.0, 1e6, 1e8, 1e9, 4e9]) for c in ("tp", "cp", "dp", "pp", "ep", "edp", "etp",
                                                                   "embedding")}
    orders = candidate_orders(cfg, "all")
    mode = "free" if cl.num_devices <= 6 else "launcher"
    lb = search_lower_bound(cl, orders, traffic, None, mode)
    assert lb <= optimum(cl, orders, traffic, None, mode) * (1 + 1e-9) + 1e-15
