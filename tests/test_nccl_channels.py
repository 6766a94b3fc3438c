"""NCCL's channels across hosts as paths through each host (issue 25 item 1), on hand-derived cases.

NCCL's inter-node ring for channel c is ``NET n -> GPU a -> .. -> GPU x -> NET m`` on every
node (``src/graph/search.cc``, ``ncclTopoSearchRecGpu`` with ``backToNet = ngpus-1``;
``connect.cc``: ``ringRecv = intra[0]``, ``ringSend = intra[localRanks-1]``): a path, not a
closed ring, so every member sends each channel's bytes once.
"""

from __future__ import annotations

from collections import Counter

import networkx as nx
import numpy as np
import pytest

from rankmap.solver import NcclModel, cluster_from_graph, parallel_config
from rankmap.solver.cost.ncclflows import ring_flows
from rankmap.solver.cost.timemodel import layout_cost

from reference_model import Reference

BANDWIDTH_ONLY = NcclModel(latency=False)


def _flows(node_of, rail, members, fb):
    src, dst, nb, ch = ring_flows(np.asarray([members]), np.asarray(node_of), np.asarray(rail), fb)
    return Counter(zip(src.tolist(), dst.tolist(), nb.tolist())), int(ch[0])


def test_two_gpus_on_two_nics_alternate_their_nics_as_in_nccl_1189():
    # 2 nodes x 2 GPUs, each GPU its own NIC: nccl#1189 logs "NET/3 GPU/0 GPU/1 NET/2" and
    # "NET/2 GPU/1 GPU/0 NET/3": channel 0 enters at GPU 0 and leaves from GPU 1, channel 1 the reverse
    flows, c = _flows([0, 0, 1, 1], [0, 1, 0, 1], [0, 1, 2, 3], 8.0)
    assert c == 2
    assert flows == Counter({(0, 1, 4.0): 1, (1, 0, 4.0): 1, (2, 3, 4.0): 1, (3, 2, 4.0): 1,  # inside the nodes
                             (0, 2, 4.0): 1, (1, 3, 4.0): 1, (2, 0, 4.0): 1, (3, 1, 4.0): 1})  # rail 0, rail 1


def test_one_nic_shared_by_a_host_is_entered_and_left_by_different_gpus():
    # 2 nodes x 4 GPUs behind one NIC each: one channel NIC -> 0 -> 1 -> 2 -> 3 -> NIC (PIX in and out), fb per hop
    flows, c = _flows([0] * 4 + [1] * 4, [0] * 8, list(range(8)), 6.0)
    assert c == 1
    assert flows == Counter({(i, i + 1, 6.0): 1 for i in range(7)} | {(7, 0, 6.0): 1})


def test_two_nics_each_shared_by_two_gpus():
    # rails 0, 0, 1, 1 per node: channel 0 enters at GPU 0 and leaves from the last GPU of rail 1 (3),
    # channel 1 enters at GPU 2 and leaves from the last GPU of rail 0 (1); rail r's last GPU sends on rail r
    flows, c = _flows([0] * 4 + [1] * 4, [0, 0, 1, 1] * 2, list(range(8)), 8.0)
    assert c == 2
    host0 = [(0, 1), (1, 2), (2, 3), (2, 3), (3, 0), (0, 1)]  # 0-1-2-3 and 2-3-0-1
    host1 = [(a + 4, b + 4) for a, b in host0]
    assert flows == Counter([(a, b, 4.0) for a, b in host0 + host1 + [(1, 4), (3, 6), (5, 0), (7, 2)]])


def test_odd_channel_count_keeps_its_nic_through_a_pxn_return():
    # 3 GPUs on 3 NICs per node: channels 0 and 1 pair their NICs; channel 2 keeps NIC 2: its path
    # 2 -> 0 -> 1 ends before the entry, and GPU 1 hands the bytes back to GPU 2 (PXN to NIC 2)
    flows, c = _flows([0, 0, 0, 1, 1, 1], [0, 1, 2, 0, 1, 2], list(range(6)), 6.0)
    assert c == 3
    host0 = [(0, 2), (2, 1), (1, 2), (2, 0), (2, 0), (0, 1), (1, 2)]
    host1 = [(a + 3, b + 3) for a, b in host0]
    assert flows == Counter([(a, b, 2.0) for a, b in host0 + host1 + [(0, 3), (1, 4), (2, 5), (3, 0), (4, 1), (5, 2)]])
    # every GPU sends and receives each channel once over NVLink-or-NIC: 3 x 2 = 6, plus the return hop on GPU 1/2
    tx = Counter()
    for (a, _b, nb), m in flows.items():
        tx[a] += nb * m
    assert [tx[i] for i in range(3)] == [6.0, 6.0, 8.0]


def shared_nic_pairs() -> nx.Graph:
    """2 hosts of 4 GPUs on a 40 GB/s NVSwitch port each; two PCIe switches per host, each with 2 GPUs
    (32 GB/s) and one 50 GB/s NIC to the leaf: every NIC is shared by two GPUs."""
    g = nx.Graph()
    g.add_node("leaf", kind="switch")
    for h in range(2):
        nvs = f"h{h}/nvswitch"
        g.add_node(nvs, kind="nvswitch")
        for s in range(2):
            sw, nic = f"h{h}/sw{s}", f"h{h}/nic{s}"
            g.add_node(sw, kind="pcie_switch", host=f"h{h}")
            g.add_node(nic, kind="nic", host=f"h{h}", nic_index=s)
            g.add_edge(sw, nic, bandwidth=50.0)
            g.add_edge(nic, "leaf", bandwidth=50.0)
            for i in range(2):
                gpu = f"h{h}/gpu{2 * s + i}"
                g.add_node(gpu, kind="gpu", host=f"h{h}", local_index=2 * s + i)
                g.add_edge(gpu, sw, bandwidth=32.0)
                g.add_edge(gpu, nvs, bandwidth=40.0)
    return g


def test_shared_nics_path_loads_the_gpus_that_never_exit():
    g = shared_nic_pairs()
    cl = cluster_from_graph(g, nccl=BANDWIDTH_ONLY)
    cfg = parallel_config(8, tp=8)
    cost = layout_cost(cl, cfg, np.arange(8), {"tp": 1e9})
    # fb = 2·7/8 GB over 2 channels (2 NICs per host) of fb/2: channel 0 runs 0-1-2-3 and leaves from GPU 3
    # (NIC 1), channel 1 runs 2-3-0-1 and leaves from GPU 1 (NIC 0).  GPUs 0 and 2 send both channels over
    # NVLink: fb on a 40 GB/s port = 43.75 ms (the closed ring spread 3/4 fb on every port: 32.8 ms);
    # GPUs 1 and 3 send fb/2 over NVLink and fb/2 over PCIe (27.3 ms), each NIC fb/2 (17.5 ms)
    fb = 2 * 7 / 8 * 1e9
    assert cost.by_class["tp"] == pytest.approx(fb / 40e9, rel=1e-12)
    assert cost.classes["tp"].channels == 2
    b = cost.classes["tp"].bottleneck
    assert b.kind == "link" and b.capacity_gbps == 40.0 and b.load_bytes == pytest.approx(fb) and b.flows == 2
    ref = Reference(g, latency=False).cost(cfg, {"tp": 1e9}, [cl.devices[i] for i in range(8)])
    assert ref == pytest.approx(cost.total_seconds, rel=1e-12)


def test_p2p_channels_per_peer_follow_ncclTopoGetNchannels():
    from rankmap.solver.cost.nccl import p2p_channels_per_peer

    # across nodes: max(local NICs, ceil(NIC GB/s / 14)) -> 400G (48 GB/s) 4, 200G (24) 2, 100G (12) 1
    assert p2p_channels_per_peer(2, 16, 48.0, 1, 370.8, "hopper") == 4
    assert p2p_channels_per_peer(2, 16, 24.0, 1, 240.0, "ampere") == 2
    assert p2p_channels_per_peer(2, 16, 12.0, 1, 0.0, None) == 1
    assert p2p_channels_per_peer(2, 16, 12.0, 2, 0.0, None) == 2  # two NICs on the GPU: one channel each
    # every peer in one round of 32 channels: 128 ranks need ceil(128/8) = 16 batches -> 4 halved to 2
    assert p2p_channels_per_peer(16, 128, 48.0, 1, 370.8, "hopper") == 2
    # inside an 8xH100 node: 2 x 18 NVLinks = 36 -> pow2 64, capped at the 32 p2p channels; PCIe only: 2
    assert p2p_channels_per_peer(1, 8, 48.0, 1, 18 * 20.6, "hopper") == 32
    assert p2p_channels_per_peer(1, 4, 48.0, 1, 0.0, "hopper") == 2
    assert p2p_channels_per_peer(1, 1, 48.0, 1, 0.0, "hopper") == 0


def test_all_to_all_reports_nccl_p2p_channels():
    from rankmap.solver import fat_tree_cluster

    g = fat_tree_cluster(2, 8, nic_bandwidth_gbps=50.0)
    g.graph["gpu"] = "h100"
    cl = cluster_from_graph(g)
    cost = layout_cost(cl, parallel_config(16, ep=16, etp=1, tp=1), np.arange(16), {"ep": 1e9})
    assert cost.classes["ep"].algorithm == "p2p" and cost.classes["ep"].channels == 4


def two_nic_gpu_and_pair() -> nx.Graph:
    """h0: one GPU with two 50 GB/s NICs of its own (both PIX); h1: two GPUs on a 100 GB/s NVSwitch, one NIC each."""
    g = nx.Graph()
    g.add_node("leaf", kind="switch")
    g.add_node("h0/gpu0", kind="gpu", host="h0", local_index=0)
    for j in range(2):
        g.add_node(f"h0/nic{j}", kind="nic", host="h0", nic_index=j)
        g.add_edge("h0/gpu0", f"h0/nic{j}", bandwidth=50.0)
        g.add_edge(f"h0/nic{j}", "leaf", bandwidth=50.0)
    g.add_node("h1/nvs", kind="nvswitch")
    for i in range(2):
        gpu = f"h1/gpu{i}"
        g.add_node(gpu, kind="gpu", host="h1", local_index=i)
        g.add_edge(gpu, "h1/nvs", bandwidth=100.0)
        g.add_node(f"h1/nic{i}", kind="nic", host="h1", nic_index=i)
        g.add_edge(gpu, f"h1/nic{i}", bandwidth=50.0)
        g.add_edge(f"h1/nic{i}", "leaf", bandwidth=50.0)
    return g


def _dp3_ring(g: nx.Graph, rails: list, channels: int, seconds: float):
    """The 3-GPU dp all-gather of 3 GB on ``g`` (rank r on device r): its rails, channel count and time as
    given, and SimGrid's reference flows (tests/reference_model.py) at the same time.  Returns the cluster."""
    cl = cluster_from_graph(g, nccl=BANDWIDTH_ONLY)
    assert cl.nccl_topology.rails().tolist() == rails
    cfg = parallel_config(3)
    cost = layout_cost(cl, cfg, np.arange(3), {"dp": 3e9})
    assert cost.classes["dp"].channels == channels
    assert cost.by_class["dp"] == pytest.approx(seconds, rel=1e-12)
    ref = Reference(g, latency=False).cost(cfg, {"dp": 3e9}, [cl.devices[i] for i in range(3)])
    assert ref == pytest.approx(cost.total_seconds, rel=1e-12)
    return cl


def test_a_gpu_with_two_nics_runs_a_channel_on_each():
    # NCCL lists every NIC local to the GPU (ncclTopoSelectNets) and starts a ring channel at each whose bandwidth
    # remains (ncclTopoSearchRecNet): h0's one GPU gives 2 channels, so h1 uses both its NICs.  dp3 all-gather of
    # S = 3 GB: fb = 2/3·S = 2 GB, 2 channels of 1 GB: each NIC sends and receives 1 GB: 1 GB / 50 GB/s = 20 ms
    # (one rail per GPU gave 1 channel: h1's first NIC carried fb both ways, 40 ms)
    g = two_nic_gpu_and_pair()
    cl = _dp3_ring(g, [[0, 1], [0, -1], [1, -1]], channels=2, seconds=1e9 / 50e9)
    # pipeline sends across the hosts: p2p channels per peer max(2 NICs... least over members: 1 NIC, ceil(50/14) = 4)
    pp = layout_cost(cl, parallel_config(3, pp=3), np.arange(3), {"pp": 1e9})
    assert pp.classes["pp"].channels == 4


def test_the_hopper_12_nic_host_runs_one_channel_per_gpu(capsys, tmp_path):
    # nvidia-smi topo -m of an 8-GPU Hopper host with 12 NICs (real-inputs, mooncake#2039): GPU0 and GPU4 each have
    # 3 PIX NICs on their PCIe switch, the others one.  NCCL's ring search takes 48 GB/s per channel on the GPU's
    # PCIe link (Gen5 x16: 32 GT/s -> 240 x 16 / 80 = 48 GB/s to NCCL, topo.cc:545-557,657; followPath subtracts
    # the channel's bw from every link of the GPU-NIC path, search.cc:81-166): one channel in and one out per GPU,
    # whatever the NICs behind its switch.  So a full-host ring runs 8 channels (also NCCL's NVLink ceiling:
    # 9 x 48 x 7/8 > 370.8 per GPU), not 12; dp2 of GPU0 over two hosts one channel at 48 GB/s (NCCL: 1 x 48,
    # duplicated into 2 x 24 on the same NIC), not three 50 GB/s NIC edges' worth (144); the reader
    # links GPU0 to NIC0 only (NCCL's channel-0 NIC of GPU0: ncclTopoGetLocalNet; formats/common.py)
    import json

    from cli_helpers import run
    from format_helpers import HOPPER
    from rankmap.solver.formats import load_graph

    out = tmp_path / "c.json"
    code, _o, err = run(capsys, "cluster", "--host-topology", str(HOPPER), "--gpu", "h100", "--nodelist", "n[1-2]",
                        "-o", str(out))
    assert code == 0, err
    g = load_graph(str(out))
    assert sorted(g["n1/gpu0"]) == ["n1/nic:mlx5_0", "n1/nvswitch", "n1/pcie0"]  # the reader keeps NCCL's NIC
    cl = cluster_from_graph(g, nccl=BANDWIDTH_ONLY)
    rails = cl.nccl_topology.rails()
    assert rails.tolist() == [[r] for r in range(8)] * 2  # one NIC per GPU: 8 rails (mlx5_1, 2, 7, 8 off the fabric)
    dev = np.array([cl.devices.index(f"n{h}/gpu{i}") for h in (1, 2) for i in range(8)])
    one = layout_cost(cl, parallel_config(2), dev[[0, 8]], {"dp": 2e9})
    assert one.classes["dp"].channels == 1
    assert one.by_class["dp"] == pytest.approx(1e9 / 48e9, rel=1e-12)  # fb = S/2 through one 48 GB/s NIC port
    full = layout_cost(cl, parallel_config(16), dev, {"dp": 16e9})
    assert full.classes["dp"].channels == 8
    assert full.by_class["dp"] == pytest.approx(15e9 / 8 / 48e9, rel=1e-12)  # fb = 15/16 S over 8 NICs of 48
    # pipeline peers: max(1 NIC, ceil(48/14) = 4) = 4
    pp = layout_cost(cl, parallel_config(16, pp=2), dev, {"pp": 1e9})
    assert pp.classes["pp"].channels == 4
    json.loads(out.read_text())


def test_a_gpu_pcie_link_caps_its_ring_channels():
    from rankmap.solver.fabric.rails import nccl_local_nets

    # a GPU with three NICs of its own: one channel when its PCIe link fits one at the NIC's speed (Gen5 x16 and
    # 400G), two with 200G NICs (2 x 24 <= 48); the GPUs sharing one NIC keep it
    node = np.zeros(2, dtype=np.int64)
    R = np.array([[0, 1, 2], [3, -1, -1]])
    assert nccl_local_nets(node, R, np.arange(2), np.array([1, 1]))[0].tolist() == [[0, -1, -1], [3, -1, -1]]
    assert nccl_local_nets(node, R, np.arange(2), np.array([2, 2]))[0].tolist() == [[0, 1, -1], [3, -1, -1]]
    assert nccl_local_nets(node, R, np.arange(2))[0].tolist() == [[0, 1, 2], [3, -1, -1]]


def test_hosts_without_nics_run_one_channel_through_every_member():
    # GPUs wired straight to the network (no NIC nodes: no rails) form one slot per host: one channel entering at
    # the first member and leaving from the last, the host's members in between (fb per hop)
    flows, c = _flows([0] * 3 + [1] * 3, [-1] * 6, list(range(6)), 3.0)
    assert c == 1
    assert flows == Counter({(0, 1, 3.0): 1, (1, 2, 3.0): 1, (2, 3, 3.0): 1, (3, 4, 3.0): 1, (4, 5, 3.0): 1,
                             (5, 0, 3.0): 1})
    # one host with NICs, one without: the host without rails caps the channels at 1
    flows, c = _flows([0, 0, 1, 1], [0, 1, -1, -1], [0, 1, 2, 3], 4.0)
    assert c == 1
    # host 0's own search pairs its 2 NICs (NET0 -> GPU 0 -> GPU 1 -> NET1) before the comm keeps 1 channel
    # (init.cc takes the least): the channel leaves host 0 from GPU 1 on NIC 1 and crosses to host 1's entry
    assert flows == Counter({(0, 1, 4.0): 1, (1, 2, 4.0): 1, (2, 3, 4.0): 1, (3, 0, 4.0): 1})


def test_odd_host_count_wrap_crosses_rails():
    # 3 nodes x 2 GPUs, each GPU its own NIC (rails 0, 1): NCCL's crossNic=2 pairs channel 0 (NET/a GPU0 GPU1
    # NET/b) with channel 1 (NET/b GPU1 GPU0 NET/a) and swaps them on node 1 (connect.cc:401-411), so hops 0->1
    # and 1->2 stay on their rail; node 2 (index 2, even, unswapped) leaves channel 0 on NIC b (GPU 5) and node 0
    # takes it in on NIC a (GPU 0): the wrap crosses rails, 5 -> 0 and 4 -> 1 (rail-aligned would be 5 -> 1, 4 -> 0)
    flows, c = _flows([0, 0, 1, 1, 2, 2], [0, 1] * 3, list(range(6)), 8.0)
    assert c == 2
    inside = [(0, 1), (1, 0), (2, 3), (3, 2), (4, 5), (5, 4)]
    across = [(1, 3), (0, 2), (3, 5), (2, 4), (5, 0), (4, 1)]
    assert flows == Counter([(a, b, 4.0) for a, b in inside + across])
    # 4 nodes: node 3 is swapped too, the wrap meets node 0 on the same rail (7 -> 1, 6 -> 0)
    flows4, _ = _flows([0, 0, 1, 1, 2, 2, 3, 3], [0, 1] * 4, list(range(8)), 8.0)
    assert (7, 1, 4.0) in flows4 and (6, 0, 4.0) in flows4 and (7, 0, 4.0) not in flows4
    # an odd channel count is not swapped by NCCL (nor modelled as crossing): 3 nodes of 3 GPUs on 3 NICs keep
    # every hop on its rail, the wrap too (GPU 3j+r sends on rail r to GPU r)
    flows3, c3 = _flows([0] * 3 + [1] * 3 + [2] * 3, [0, 1, 2] * 3, list(range(9)), 6.0)
    assert c3 == 3
    assert {(a, b) for (a, b, _nb) in flows3 if a // 3 == 2 and b // 3 == 0} == {(6, 0), (7, 1), (8, 2)}


def rail_hosts(hosts: int, uplink: float) -> nx.Graph:
    """``hosts`` hosts of 2 GPUs on a 100 GB/s NVSwitch, GPU i on its own 50 GB/s NIC i; rail-optimised: NIC i of
    every host on leaf i, both leaves on one spine through ``uplink`` GB/s."""
    g = nx.Graph()
    g.add_node("spine", kind="switch")
    for r in range(2):
        g.add_node(f"leaf{r}", kind="switch")
        g.add_edge(f"leaf{r}", "spine", bandwidth=uplink)
    for h in range(hosts):
        nvs = f"h{h}/nvs"
        g.add_node(nvs, kind="nvswitch")
        for i in range(2):
            gpu, nic = f"h{h}/gpu{i}", f"h{h}/nic{i}"
            g.add_node(gpu, kind="gpu", host=f"h{h}", local_index=i)
            g.add_node(nic, kind="nic", host=f"h{h}", nic_index=i)
            g.add_edge(gpu, nvs, bandwidth=100.0)
            g.add_edge(gpu, nic, bandwidth=50.0)
            g.add_edge(nic, f"leaf{i}", bandwidth=50.0)
    return g


@pytest.mark.parametrize("hosts", [2, 3, 4, 5])
def test_odd_host_count_wrap_loads_the_spine(hosts):
    # dp all-gather over every GPU of the rail-optimised fabric, S = 2·hosts GB: fb = (n-1)/n·S, 2 channels of fb/2.
    # Even host counts: every hop rail-aligned, leaf to leaf on its rail; the NICs bound: fb/2 / 50 GB/s.
    # Odd host counts: the wrap of each channel crosses rails (leaf -> spine -> leaf), fb/2 on each 10 GB/s
    # uplink each way: fb/2 / 10 GB/s (5x the NIC time)
    g = rail_hosts(hosts, 10.0)
    cl = cluster_from_graph(g, nccl=BANDWIDTH_ONLY)
    n = 2 * hosts
    S = 2.0 * hosts * 1e9
    fb = (n - 1) / n * S
    cfg = parallel_config(n)
    cost = layout_cost(cl, cfg, np.arange(n), {"dp": S})
    assert cost.classes["dp"].channels == 2
    want = fb / 2 / (10e9 if hosts % 2 else 50e9)
    assert cost.by_class["dp"] == pytest.approx(want, rel=1e-12)
    if hosts % 2:
        b = cost.classes["dp"].bottleneck
        assert b.capacity_gbps == 10.0  # a leaf uplink (the wrap flow alone at its route's rate: per-flow)
    ref = Reference(g, latency=False).cost(cfg, {"dp": S}, [cl.devices[i] for i in range(n)])
    assert ref == pytest.approx(cost.total_seconds, rel=1e-12)


def hgx_a100_like(pcie: float) -> nx.Graph:
    """2 hosts of 4 GPUs on a 100 GB/s NVSwitch; GPUs 2j and 2j+1 share NICs 2j and 2j+1 (a PCIe switch with two
    GPUs and two NICs, as on HGX A100: every GPU PXB-near both, ``pcie`` GB/s to each); NICs 100 GB/s to one leaf."""
    g = nx.Graph()
    g.add_node("leaf", kind="switch")
    for h in range(2):
        g.add_node(f"h{h}/nvs", kind="nvswitch")
        for i in range(4):
            gpu, nic = f"h{h}/gpu{i}", f"h{h}/nic{i}"
            g.add_node(gpu, kind="gpu", host=f"h{h}", local_index=i)
            g.add_node(nic, kind="nic", host=f"h{h}", nic_index=i)
            g.add_edge(gpu, f"h{h}/nvs", bandwidth=100.0)
            g.add_edge(nic, "leaf", bandwidth=100.0)
        for i in range(4):
            for j in (i & ~1, i | 1):
                g.add_edge(f"h{h}/gpu{i}", f"h{h}/nic{j}", bandwidth=pcie)
    return g


def test_p2p_rails_follow_ncclTopoGetLocalNet():
    from rankmap.solver.fabric.rails import p2p_rails

    # two GPUs sharing two NICs use one each (dev % 2, mirrored); four GPUs sharing one NIC all use it; a GPU with
    # three NICs of its own (12-NIC Hopper host, GPU0) the first
    node = np.zeros(4, dtype=np.int64)
    assert p2p_rails(node, np.array([[0, 1], [0, 1], [2, 3], [2, 3]]), np.arange(4)).tolist() == [0, 1, 2, 3]
    assert p2p_rails(node, np.array([[0], [0], [0], [0]]), np.arange(4)).tolist() == [0, 0, 0, 0]
    assert p2p_rails(node[:2], np.array([[0, 1, 2], [3, -1, -1]]), np.arange(2)).tolist() == [0, 3]
    # four GPUs on four shared NICs: net = dev % 4 mirrored on 2 bits: 0, 2, 1, 3 (topo.cc:2069-2072)
    assert p2p_rails(node, np.tile(np.arange(4), (4, 1)), np.arange(4)).tolist() == [0, 2, 1, 3]
    # so on the HGX-A100-like host each GPU runs its ring channels and its sends on its own NIC of the pair
    g = hgx_a100_like(10.0)
    cl = cluster_from_graph(g, nccl=BANDWIDTH_ONLY)
    assert cl.nccl_topology.rails().tolist() == [[0], [1], [2], [3]] * 2
    assert cl.nccl_topology.p2p_rails().tolist() == [0, 1, 2, 3] * 2
    # the real HGX A100 dump (real-inputs, DeepEP#13): 2 GPUs + 2 NICs per PCIe switch, every GPU PXB-near both
    from format_helpers import A100
    from rankmap.solver.formats.nvsmi import read_nvsmi

    topo = cluster_from_graph(read_nvsmi(A100, gpu="a100")).nccl_topology
    assert topo.rails().tolist() == [[r] for r in range(8)] and topo.p2p_rails().tolist() == list(range(8))


def test_pxn_relays_through_the_receivers_device_index_not_the_first_rail():
    # NCCL (search.cc:1430-1466): a send to h1/gpu1 is proxied by the sender host's gpu1 (same device index) out of
    # gpu1's NIC (NIC 1, ncclTopoGetLocalNet), not by gpu0, the first GPU near rail 0.  ep=8 all-to-all of S = 8 GB:
    # 1 GB per ordered pair.  h0's gpu0 now sends out its own flow to h1/gpu0 and the relays of gpu1-3 to it
    # (4 GB over its two 10 GB/s PCIe edges, ECMP: 2 GB each, 0.2 s), as gpu1 for h1/gpu1; each h1 GPU takes in
    # 4 GB over its two edges (0.2 s).  The first-rail relay put h1/gpu0's and h1/gpu1's relays on gpu0: 6 GB (0.3 s)
    from rankmap.solver.cost.ncclflows import pxn_relay

    g = hgx_a100_like(10.0)
    cl = cluster_from_graph(g, nccl=BANDWIDTH_ONLY)
    topo = cl.nccl_topology
    dev = np.arange(8)[None, :]
    src, dst = np.array([2, 3, 2, 1, 0, 1]), np.array([5, 5, 4, 4, 5, 5])
    relay = pxn_relay(src, dst, np.zeros(6, dtype=np.int64), dev, topo.node_of, topo.rail, cl.local_index,
                      cl.host_of, topo.p2p_rails())
    assert relay.tolist() == [1, 1, 0, 0, 1, 1]  # the 1 -> 5 send goes out directly (gpu1 is its own proxy)
    # the first-rail rule on the nearest NICs' first rails (0, 0, 2, 2): gpu0 relays for both, gpu1's sends direct
    old = pxn_relay(src, dst, np.zeros(6, dtype=np.int64), dev, topo.node_of, np.array([0, 0, 2, 2] * 2))
    assert old.tolist() == [0, 0, 0, 1, 0, 1]
    cfg = parallel_config(8, ep=8, etp=1)
    cost = layout_cost(cl, cfg, np.arange(8), {"ep": 8e9})
    assert cost.by_class["ep"] == pytest.approx(2e9 / 10e9, rel=1e-12)
    ref = Reference(g, latency=False).cost(cfg, {"ep": 8e9}, [cl.devices[i] for i in range(8)])
    assert ref == pytest.approx(cost.total_seconds, rel=1e-12)


def test_a_gpu_with_two_nics_behind_one_pcie_link_runs_one_channel():
    # the two-NIC GPU of two_nic_gpu_and_pair, now with its PCIe link to a switch: 63 GB/s (Gen5 x16) is 48 to NCCL
    # (topo.cc:545-557,657), under two channels at the NICs' 50: one channel (search.cc ncclTopoFollowPath), so h1
    # runs one too: dp3 all-gather of S = 3 GB: fb = 2 GB on one channel: h1's entry NIC takes 2 GB in (40 ms)
    g = two_nic_gpu_and_pair()
    g.add_node("h0/pcie", kind="pcie_switch", host="h0")
    g.add_edge("h0/gpu0", "h0/pcie", bandwidth=63.0)
    cl = _dp3_ring(g, [[0], [0], [1]], channels=1, seconds=2e9 / 50e9)


def pcie_hosts() -> nx.Graph:
    """2 hosts of 2 GPUs on a PCIe switch (32 GB/s each), no NVLink; GPU i on its own 50 GB/s NIC i, NICs on a leaf."""
    g = nx.Graph()
    g.add_node("leaf", kind="switch")
    for h in range(2):
        sw = f"h{h}/pcie"
        g.add_node(sw, kind="pcie_switch", host=f"h{h}")
        for i in range(2):
            gpu, nic = f"h{h}/gpu{i}", f"h{h}/nic{i}"
            g.add_node(gpu, kind="gpu", host=f"h{h}", local_index=i)
            g.add_node(nic, kind="nic", host=f"h{h}", nic_index=i)
            g.add_edge(gpu, sw, bandwidth=32.0)
            g.add_edge(gpu, nic, bandwidth=50.0)
            g.add_edge(nic, "leaf", bandwidth=50.0)
    return g


def test_pxn_needs_nvlink_between_the_sender_and_its_proxy():
    # NCCL proxies a send only through a GPU NVLink-connected to the sender (peerGpu->paths[GPU][g1].type <=
    # PATH_NVL, search.cc:1465); on a PCIe-only host every GPU sends through its own NIC.  ep=4 all-to-all of
    # S = 4 GB, 1 GB per ordered pair; routes are the widest (GPU -> NIC -> leaf -> NIC -> GPU, 50 GB/s, even
    # inside a host).  Each GPU's NIC edge carries out its two remote flows and its host-local one: 3 GB (60 ms).
    # Relayed over PCIe (no NVLink check) h0/gpu0's edge also carried its relay leg to gpu1 and gpu1's relayed
    # flow to h1/gpu0: 4 GB (80 ms)
    from rankmap.solver.cost.ncclflows import pxn_relay

    g = pcie_hosts()
    cl = cluster_from_graph(g, nccl=BANDWIDTH_ONLY)
    topo = cl.nccl_topology
    src, dst = np.array([0, 1]), np.array([3, 2])
    args = (src, dst, np.zeros(2, dtype=np.int64), np.arange(4)[None, :], topo.node_of, topo.rail, cl.local_index,
            cl.host_of, topo.p2p_rails())
    assert pxn_relay(*args).tolist() == [1, 0]  # same device index as the receiver
    assert pxn_relay(*args, (topo.nvlink_gbps > 0, cl.fabric.direct_key)).tolist() == [0, 1]  # no NVLink: direct
    cfg = parallel_config(4, ep=4, etp=1)
    cost = layout_cost(cl, cfg, np.arange(4), {"ep": 4e9})
    assert cost.by_class["ep"] == pytest.approx(3e9 / 50e9, rel=1e-12)
    ref = Reference(g, latency=False).cost(cfg, {"ep": 4e9}, [cl.devices[i] for i in range(4)])
    assert ref == pytest.approx(cost.total_seconds, rel=1e-12)
    # with an NVLink bridge between the two GPUs of each host, the relay runs over it (bridge 100 GB/s)
    for h in range(2):
        g.add_edge(f"h{h}/gpu0", f"h{h}/gpu1", bandwidth=100.0)
    cl2 = cluster_from_graph(g, nccl=BANDWIDTH_ONLY)
    t2 = cl2.nccl_topology
    assert pxn_relay(src, dst, np.zeros(2, dtype=np.int64), np.arange(4)[None, :], t2.node_of, t2.rail,
                     cl2.local_index, cl2.host_of, t2.p2p_rails(),
                     (t2.nvlink_gbps > 0, cl2.fabric.direct_key)).tolist() == [1, 0]
    cost2 = layout_cost(cl2, cfg, np.arange(4), {"ep": 4e9})
    ref2 = Reference(g, latency=False).cost(cfg, {"ep": 4e9}, [cl2.devices[i] for i in range(4)])
    assert ref2 == pytest.approx(cost2.total_seconds, rel=1e-12)
