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


def _two_socket_pairs():
    """One host, two sockets joined by a 16 GB/s link; GPUs 0,1 under socket 0 and 2,3 under socket 1
    (PCIe 32 GB/s), each socket's pair on a 100 GB/s NVLink (x 0.8 = 80 GB/s: no GPU generation named)."""
    import networkx as nx

    g = nx.Graph()
    for c in ("cpu0", "cpu1"):
        g.add_node(f"h/{c}", kind="switch")
    g.add_edge("h/cpu0", "h/cpu1", bandwidth=16.0, link="sys")
    for i in range(4):
        g.add_node(f"h/gpu{i}", kind="gpu", host="h")
        g.add_edge(f"h/gpu{i}", f"h/cpu{i // 2}", bandwidth=32.0, link="pcie")
    g.add_edge("h/gpu0", "h/gpu1", bandwidth=100.0, link="nvlink")
    g.add_edge("h/gpu2", "h/gpu3", bandwidth=100.0, link="nvlink")
    return g


def test_a_pair_split_inside_a_node_sends_its_whole_flow():
    """tp2 pp2 on the two-socket host, tp 1e9 and pp 4e9 bytes, latency off.  An NVLink pair holds either
    a tp group or a pp group; the other class's two groups cross the 16 GB/s socket link.  A group of two
    on one node is a ring of two: each edge carries fb (tp: 2·1/2·S = 1e9), not fb/2 (that is a node
    block of two in a group over several nodes).  pp on the pairs: 4e9 / 80 GB/s = 50 ms, tp's two flows
    on the socket link 2e9 / 16 GB/s = 125 ms: 175 ms.  tp on the pairs: 12.5 ms + pp 8e9 / 16 = 500 ms.
    The bound meets the optimum, 175 ms (it was 112.5 ms with fb/2 for the split tp groups)."""
    from rankmap.solver import SolveOptions, solve
    from rankmap.solver.fabric.rates import NcclModel

    nccl = NcclModel(latency=False)
    cl = cluster_from_graph(_two_socket_pairs(), nccl=nccl)
    cfg = parallel_config(4, tp=2, pp=2)
    traffic = {"tp": 1e9, "pp": 4e9}
    assert lower_bound(cl, cfg, traffic) == pytest.approx(0.175, rel=1e-12)
    res = solve(_two_socket_pairs(), cfg, traffic, SolveOptions(mode="free", orders="all", nccl=nccl))
    assert res.status == "OPTIMAL" and res.cost.total_seconds == pytest.approx(0.175, rel=1e-12)
    assert res.cost.classes["tp"].seconds == pytest.approx(2e9 / 16e9, rel=1e-12)


def test_channels_through_a_slow_intra_host_pcie_switch():
    """dp8 on 2 hosts x 4 GPUs, each GPU on its own 25 GB/s NIC (x 0.96 = 24 GB/s) and on one PCIe switch
    at 32 GB/s, no NVLink; all-gather S = 4e9, fb = 7/8·S = 3.5e9, latency off.  4 members per host on 4
    rails: 4 channels of fb/4 = 0.875e9 / 24 GB/s = 36.5 ms; each channel is a path through the host's 4
    GPUs (NCCL's NET n -> GPU a -> .. -> GPU x -> NET m), so each GPU sends 3 of the 4 channels over its
    PCIe port: 3/4·fb = 2.625e9 / 32 GB/s = 82.0 ms.  The per-GPU term alone is each GPU's fb over all its
    links (32 + 25 GB/s): 61.4 ms; a group over both hosts holds 4 members on one of them, whose hops
    inside the host start on the PCIe ports (solver/bound/nodering.py): 3/4·fb / 32 GB/s = 82.0 ms, the
    layouts' own time.  (It was 72.9 ms, fb·(c−1)/c on one intra-host ring edge, when the model
    closed a ring inside each host; a path's hops carry fb/c each and may take different links.)"""
    import networkx as nx

    from rankmap.solver.fabric.rates import NcclModel

    g = nx.Graph()
    g.add_node("switch:leaf", kind="switch")
    for h in range(2):
        g.add_node(f"n{h}/pcie", kind="switch")
        for i in range(4):
            gpu, nic = f"n{h}/gpu{i}", f"n{h}/nic{i}"
            g.add_node(gpu, kind="gpu", host=f"n{h}")
            g.add_node(nic, kind="nic")
            g.add_edge(gpu, f"n{h}/pcie", bandwidth=32.0, link="pcie")
            g.add_edge(gpu, nic, bandwidth=25.0, link="pcie")
            g.add_edge(nic, "switch:leaf", bandwidth=25.0, link="net")
    nccl = NcclModel(latency=False)
    cl = cluster_from_graph(g, nccl=nccl)
    cfg = parallel_config(8)
    fb = 7 / 8 * 4e9
    lb = lower_bound(cl, cfg, {"dp": 4e9})
    assert lb == pytest.approx(fb * 3 / 4 / 32e9, rel=1e-12)
    # every layout here is 4 + 4 over the two hosts (4 channels): 82.0 ms, above the bound
    four = layout_cost(cl, cfg, np.arange(8), {"dp": 4e9})
    assert four.classes["dp"].channels == 4
    assert four.total_seconds == pytest.approx(fb * 3 / 4 / 32e9, rel=1e-12)
    assert lb <= four.total_seconds


def test_builders_name_the_gpu_generation():
    """fat_tree_cluster(gpu="h100") is the CLI's ``--gpu h100`` host: NCCL's Hopper NVLink rate (18 x 20.6 =
    370.8 GB/s) and NVLS: tp8 all-reduce on one host at NVLS's bus rate, as
    test_tp8_all_reduce_on_one_h100_host_runs_nvls_and_the_bound_meets_it; without it, 450 x 0.8 = 360 GB/s
    and ring only.  nvl72_cluster(gpu="gb200") names Blackwell.  An unknown model is refused by name."""
    from rankmap.solver import fat_tree_cluster
    from rankmap.solver.fabric.builders import nvl72_cluster
    from rankmap.solver.errors import InvalidArgumentError

    named = cluster_from_graph(fat_tree_cluster(1, 8, gpu="h100"))
    plain = cluster_from_graph(fat_tree_cluster(1, 8))
    cfg = parallel_config(8, tp=8)
    assert named.nccl_topology.arch == "hopper" and plain.nccl_topology.arch is None
    assert named.nccl_topology.nvlink_gbps.max() * 1e9 == pytest.approx(NVLINK, rel=1e-12)
    assert layout_cost(named, cfg, np.arange(8), {"tp": S}).classes["tp"].algorithm == "nvls"
    assert layout_cost(plain, cfg, np.arange(8), {"tp": S}).classes["tp"].algorithm == "ring"
    assert cluster_from_graph(nvl72_cluster(1, 2, gpu="gb200")).nccl_topology.arch == "blackwell"
    with pytest.raises(InvalidArgumentError, match="'h1000'"):
        fat_tree_cluster(1, 8, gpu="h1000")


def test_channel_paths_over_direct_gpu_links_keep_the_bound_below_the_model():
    """2 hosts x 4 GPUs joined pairwise by direct 50 GB/s links, each GPU its own 25 GB/s NIC; dp8 all-gather,
    S = 1 GB, fb = 7/8 GB, latency off.  4 channels of fb/4; each channel's path through a host takes 3 of the
    direct links with fb/4, and no GPU pair carries more than 2 channels (fb/2 / 50 GB/s): the time is a NIC
    flow's fb/4 / 25 GB/s = fb / 100 GB/s.  The closed-ring floor fb·(c−1)/c on one intra-host edge at the
    best ring's 50 GB/s (min over c of max(fb/(25c), fb(c−1)/(50c)) = fb / 75 GB/s) would exceed it; the bound
    is the crossing flow's fb/(4 · 25 GB/s), met exactly."""
    import networkx as nx

    from rankmap.solver.fabric.rates import NcclModel

    g = nx.Graph()
    g.add_node("leaf", kind="switch")
    for h in range(2):
        gpus = [f"h{h}/gpu{i}" for i in range(4)]
        for i, x in enumerate(gpus):
            g.add_node(x, kind="gpu", host=f"h{h}", local_index=i)
            g.add_node(f"h{h}/nic{i}", kind="nic", host=f"h{h}", nic_index=i)
            g.add_edge(x, f"h{h}/nic{i}", bandwidth=25.0)
            g.add_edge(f"h{h}/nic{i}", "leaf", bandwidth=25.0)
        for a in range(4):
            for b in range(a + 1, 4):
                g.add_edge(gpus[a], gpus[b], bandwidth=50.0)
    cl = cluster_from_graph(g, nccl=NcclModel(latency=False))
    cfg = parallel_config(8)
    fb = 7 / 8 * 1e9
    cost = layout_cost(cl, cfg, np.arange(8), {"dp": 1e9})
    assert cost.classes["dp"].channels == 4
    assert cost.total_seconds == pytest.approx(fb / 100e9, rel=1e-12)
    assert lower_bound(cl, cfg, {"dp": 1e9}) == pytest.approx(fb / 100e9, rel=1e-12)
