"""Vectorised paths of the always-computed steps at scale (issue 28.1): same answers as the loops they replace.

Hand-derived values: protobuf varints (150 -> 0x96 0x01, the protobuf documentation's
example), the launch-file errors of a host-by-host walk, and a cluster without NICs.
"""

from __future__ import annotations

import numpy as np
import pytest

from rankmap.solver import InvalidArgumentError
from rankmap.solver.launch.files import launch_files, torchrun_launchable
from rankmap.solver.results import HostPlacement
from rankmap.v1 import rankmap_pb2 as pb
from rankmap.wire.costs import _rank_groups_bytes, _varints, groups_to_proto


def test_varints_are_protobufs():
    chunks, keep = _varints(np.array([1, 150, 300, 0, 2 ** 21]))
    got = [bytes(c[k]) for c, k in zip(chunks, keep)]
    assert got == [b"\x01", b"\x96\x01", b"\xac\x02", b"\x00", b"\x80\x80\x80\x01"]
    chunks, keep = _varints(np.array([2 ** 40]))  # 64-bit path: 41 bits -> 6 bytes
    assert bytes(chunks[0][keep[0]]) == b"\x80\x80\x80\x80\x80\x20"


def test_rank_groups_bytes_are_the_message():
    """[[0, 150]]: group field 0x0A, length 5 = tag + length + 3 packed bytes (0x00, 0x96 0x01)."""
    assert _rank_groups_bytes(np.array([[0, 150]])) == b"\x0a\x05\x0a\x03\x00\x96\x01"
    rows = np.array([[3, 1, 2 ** 33], [0, 127, 128]])
    assert list(pb.RankGroups.FromString(_rank_groups_bytes(rows)).groups[1].ranks) == [0, 127, 128]
    assert list(pb.RankGroups.FromString(_rank_groups_bytes(rows)).groups[0].ranks) == [3, 1, 2 ** 33]


@pytest.mark.parametrize("shape", [(4096, 8), (8, 4096), (40000, 1), (1, 40000)])
def test_groups_to_proto_equals_one_message_per_group(shape):
    rows = np.arange(shape[0] * shape[1], dtype=np.int64)[::-1].reshape(shape)
    bulk = pb.GetGroupsResponse()
    groups_to_proto({"G": rows, "H": rows.T.copy()}, bulk.groups)
    loop = pb.GetGroupsResponse()
    for name, arr in (("G", rows), ("H", rows.T)):
        for row in arr.tolist():
            loop.groups[name].groups.add().ranks.extend(row)
    assert bulk == loop
    assert len(bulk.groups["G"].groups) == shape[0] and list(bulk.groups["G"].groups[0].ranks) == rows[0].tolist()


def test_launch_checks_name_the_host_a_walk_stops_at():
    """Three hosts; the first wrong one is named, whichever check it fails."""
    ok = (HostPlacement("a", 0, (0, 1), (0, 1)), HostPlacement("b", 1, (0, 1), (2, 3)),
          HostPlacement("c", 2, (0, 1), (4, 5)))
    f = launch_files(ok, 6)
    assert f["mpirun"]["rankfile"][3] == "rank 3=b slot=1" and f["slurm"]["hostfile"] == list("aabbcc")
    assert torchrun_launchable(ok) == "" and torchrun_launchable(ok, 10) != ""
    # b runs 2,4 and c 3,5: the walk stops at b
    mixed = (ok[0], HostPlacement("b", 1, (0, 1), (2, 4)), HostPlacement("c", 2, (0, 1), (3, 5)))
    assert torchrun_launchable(mixed).startswith("host b runs ranks 2,4,")
    assert launch_files(mixed, 6)["mpirun"]["rankfile"][3] == "rank 3=c slot=0"
    # c repeats b's rank 3 (and b is fine): "on two hosts", naming c
    with pytest.raises(InvalidArgumentError, match="host c: ranks outside 0..5 or on two hosts"):
        launch_files((ok[0], ok[1], HostPlacement("c", 2, (0, 1), (3, 5))), 6)
    # b descends before c is out of range: b's error
    with pytest.raises(InvalidArgumentError, match="host b: global_ranks are not ascending"):
        launch_files((ok[0], HostPlacement("b", 1, (0, 1), (3, 2)), HostPlacement("c", 2, (0, 1), (4, 9))), 6)
    with pytest.raises(InvalidArgumentError, match="host c: ranks outside 0..5"):
        launch_files((ok[0], ok[1], HostPlacement("c", 2, (0, 1), (4, 6))), 6)
    # a rank offset (a job's second stage): ranks 10..15
    shifted = tuple(HostPlacement(h.host, h.node_rank, h.cuda_visible_devices,
                                  tuple(r + 10 for r in h.global_ranks)) for h in ok)
    assert launch_files(shifted, 6, rank_offset=10)["mpirun"]["rankfile"][0] == "rank 0=a slot=0"
    assert torchrun_launchable(shifted, 10) == ""


def test_cluster_without_nics_has_no_rails():
    """Hosts of 2 GPUs on an NVSwitch, no NIC anywhere: no rail, no NIC rate (the per-GPU search is skipped)."""
    import networkx as nx

    from rankmap.solver.fabric.cluster import cluster_from_graph

    g = nx.Graph()
    for h in range(2):
        for i in range(2):
            g.add_node(f"h{h}g{i}", host=f"h{h}", local_index=i)
            g.add_edge(f"h{h}g{i}", f"h{h}sw", bandwidth=450.0)
        g.nodes[f"h{h}sw"]["kind"] = "nvswitch"
        g.add_edge(f"h{h}sw", "leaf", bandwidth=50.0)
    g.nodes["leaf"]["kind"] = "switch"
    t = cluster_from_graph(g).nccl_topology
    assert t.rail.tolist() == [-1, -1, -1, -1] and t.nic_gbps.tolist() == [0, 0, 0, 0]
    assert t.nvlink_gbps.tolist() == [450.0] * 4  # no link kind: the capacity as given


def _fabric_fields(f):
    return {k: (v.tolist() if isinstance(v, np.ndarray) else v) for k, v in vars(f).items()
            if not k.startswith("_")}


@pytest.mark.parametrize("name", ["examples/clusters/a30-pcie-nvlink-pairs.json",
                                  "examples/clusters/dgx1-v100-hybridcube.json", "examples/clusters/gb200-nvl72-2racks.json",
                                  "examples/clusters/hgx-a100-2nodes.json", "examples/clusters/hgx-a100-8gpu.json",
                                  "fat_tree"])
def test_fabric_from_arrays_is_the_general_build(name, monkeypatch):
    """The array path of fabric_from_graph (switch forests) builds the same Fabric as the loop over edges."""
    from pathlib import Path

    from rankmap.solver.fabric import build
    from rankmap.solver.fabric.cluster import cluster_from_graph
    from rankmap.solver.formats.graphfile import load_graph

    path = Path(__file__).resolve().parents[1] / name
    if name == "fat_tree":
        from rankmap.solver import fat_tree_cluster

        g = fat_tree_cluster(16, 8, tiers=[(4, 4.0)])
    else:
        g = load_graph(str(path))
    fast = cluster_from_graph(g).fabric
    monkeypatch.setattr(build, "_fabric_from_arrays", lambda *a, **k: None)
    slow = cluster_from_graph(g).fabric
    assert _fabric_fields(fast) == _fabric_fields(slow)


def test_fabric_from_arrays_on_a_fat_tree_with_latencies_and_direct_links(monkeypatch):
    """Hosts of 4 GPUs (NVLink pairs as direct links, latencies on every link), leaves, ECMP-free spine;
    and two spines with the same neighbours (twins: the general path)."""
    import networkx as nx

    from rankmap.solver.fabric import build
    from rankmap.solver.fabric.cluster import cluster_from_graph

    def make(spines):
        g = nx.Graph()
        for h in range(4):
            for i in range(4):
                g.add_node(f"h{h}g{i}", host=f"h{h}", local_index=3 - i)
                g.add_edge(f"h{h}g{i}", f"h{h}nic{i % 2}", bandwidth=25.0 + i, latency_us=1.5)
            g.add_edge(f"h{h}g0", f"h{h}g1", bandwidth=300.0, latency_us=0.5)
            for k in range(2):
                g.add_node(f"h{h}nic{k}", kind="nic", host=f"h{h}", nic_index=k)
                g.add_edge(f"h{h}nic{k}", f"leaf{h // 2}", bandwidth=50.0, latency_us=2.0)
        for leaf in range(2):
            g.nodes[f"leaf{leaf}"]["kind"] = "switch"
        for s in range(spines):
            g.add_node(f"spine{s}", kind="switch")
            for leaf in range(2):
                g.add_edge(f"leaf{leaf}", f"spine{s}", bandwidth=100.0)
        return g

    for spines in (1, 2):
        g = make(spines)
        fast = cluster_from_graph(g).fabric
        with monkeypatch.context() as m:
            m.setattr(build, "_fabric_from_arrays", lambda *a, **k: None)
            slow = cluster_from_graph(g).fabric
        assert _fabric_fields(fast) == _fabric_fields(slow)
    assert fast.direct_key.size == 4 and fast.direct_latency_s.tolist() == [5e-7] * 4


def test_graph_from_proto_fills_the_graph_in_order():
    """Devices, then nodes, in message order; a parallel link is one edge of the summed capacity (DESIGN §2)."""
    from rankmap.wire.graph import graph_from_proto

    c = pb.Cluster(gpu="h100")
    c.devices.add(id="b", host="h", local_index=1)
    c.devices.add(id="a", host="h", local_index=0)
    c.nodes.add(id="sw", kind="nvswitch")
    c.links.add(source="a", target="sw", bandwidth_gbps=450.0)
    c.links.add(source="sw", target="b", bandwidth_gbps=400.0, latency_us=1.0)
    c.links.add(source="b", target="sw", bandwidth_gbps=50.0, latency_us=3.0)
    g = graph_from_proto(c)
    assert list(g.nodes(data=True)) == [("b", {"kind": "gpu", "host": "h", "local_index": 1}),
                                        ("a", {"kind": "gpu", "host": "h", "local_index": 0}),
                                        ("sw", {"kind": "nvswitch"})]
    assert list(g.edges(data=True)) == [("b", "sw", {"bandwidth": 450.0, "latency_us": 3.0}),
                                        ("a", "sw", {"bandwidth": 450.0})]
    assert g.graph == {"gpu": "h100"} and g.number_of_edges() == 2 and g.degree("sw") == 2
    g.add_edge("a", "b", bandwidth=1.0)  # an ordinary networkx graph
    assert sorted(g["a"]) == ["b", "sw"]


def test_host_template_instantiates_as_networkx_would():
    """A host template written straight into a Graph's dicts gives the graph add_nodes_from/add_edges_from
    give (a Graph subclass takes that path): same nodes, links, attributes and order."""
    import networkx as nx

    from rankmap.solver.formats.hosts import synthetic_host

    class Sub(nx.Graph):
        pass

    t = synthetic_host(8, "h100")
    fast, slow = nx.Graph(), Sub()
    for g in (fast, slow):
        g.add_node("h1/gpu0", kind="gpu", note="before")  # a node already there: updated, as add_nodes_from does
        for h in ("h0", "h1"):
            t.instantiate(g, h)
    assert list(fast.nodes(data=True)) == list(slow.nodes(data=True))
    assert list(fast.edges(data=True)) == list(slow.edges(data=True))
    assert fast.nodes["h1/gpu0"]["note"] == "before" and fast.nodes["h1/gpu0"]["host"] == "h1"
    assert fast.number_of_nodes() == 2 * len(t.nodes) and fast.number_of_edges() == 2 * len(t.edges)
