"""Format readers, part 2: Slurm fabrics, composed clusters, builders, graph files and the CLI, hostlists."""

from __future__ import annotations

import json
import re
from pathlib import Path

import networkx as nx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rankmap.solver.errors import InvalidArgumentError
from rankmap.solver.formats import (
    bandwidth_levels,
    build_cluster,
    compress,
    dump_graph,
    expand,
    load_graph,
    read_fabric,
    summarize,
)
from rankmap.solver.formats.nvsmi import CLASS_LEVELS

from format_helpers import (  # noqa: E402
    A100, A30, BLOCK, DGX1, EXAMPLES, HOPPER, IBM_XML, P4D_XML, ROOT, RTX, TREE, YAML,
    assert_read_fails, forest_after_twins, gpus, kinds, route_bw, widest,
)


# ---------------------------------------------------------------- Slurm


def test_slurm_tree_three_levels():
    fab = read_fabric(TREE)
    assert fab.kind == "tree" and len(fab.switches) == 19 and len(fab.hosts) == 96
    leaves = [s for s in fab.switches.values() if s.nodes]
    assert len(leaves) == 12 and all(len(s.nodes) == 8 for s in leaves)
    assert fab.switches["switch.3.1"].switches == [f"switch.2.{i}" for i in range(1, 7)]
    assert fab.switches["switch.2.6"].switches == ["switch.1.11", "switch.1.12"]
    assert fab.leaves_of()["srv6208"] == ["switch.1.12"]


def test_slurm_block_sizes():
    fab = read_fabric(BLOCK)
    assert fab.kind == "block" and len(fab.switches) == 12 and len(fab.hosts) == 96
    assert fab.block_sizes == [8, 16, 32]
    G = build_cluster(gpus_per_node=4, gpu="h100", fabric=BLOCK)
    assert len(gpus(G)) == 96 * 4
    groups16 = [n for n, d in G.nodes(data=True) if d.get("block_size") == 16]
    groups32 = [n for n, d in G.nodes(data=True) if d.get("block_size") == 32]
    assert len(groups16) == 6 and len(groups32) == 3
    assert "switch:root" in G  # 3 groups of 32 have no common block
    # a block's hosts link every NIC at its port: H100 ConnectX-7 400 Gb/s = 50 GB/s
    assert {d["bandwidth"] for u, v, d in G.edges("switch:rack11", data=True) if "nic" in u + v} == {50.0}
    assert len([1 for u, v in G.edges("switch:rack11") if "nic" in u + v]) == 8 * 4
    # non-blocking by default: a block has 8 hosts x 4 NICs x 50 = 1600 GB/s of downlinks, so a
    # 1600 GB/s uplink to its 16-group; a 16-group 2 x 1600 = 3200 down and up; a 32-group
    # 2 x 3200 = 6400, linked to the synthetic root at 6400
    assert G["switch:rack11"]["switch:block16:0"]["bandwidth"] == 1600.0
    assert G["switch:block16:0"]["switch:block32:0"]["bandwidth"] == 3200.0
    assert G["switch:block32:0"]["switch:root"]["bandwidth"] == 6400.0
    # 2:1 at every level: 800, (2 x 800) / 2 = 800, (2 x 800) / 2 = 800
    G2 = build_cluster(gpus_per_node=4, gpu="h100", fabric=BLOCK, oversubscription=2)
    assert G2["switch:rack11"]["switch:block16:0"]["bandwidth"] == 800.0
    assert G2["switch:block16:0"]["switch:block32:0"]["bandwidth"] == 800.0
    assert G2["switch:block32:0"]["switch:root"]["bandwidth"] == 800.0
    assert G2.graph["fabric"]["oversubscription"] == 2.0
    # one flow alone gets the narrowest link of its route: NVSwitch 18 x 25 = 450 inside a host,
    # the 50 GB/s NIC port everywhere else (uplinks are far wider)
    assert sorted({w for w, _, _ in bandwidth_levels(G2)}, reverse=True) == [450.0, 50.0]
    assert route_bw(G2, "srv1101/gpu0", "srv3101/gpu0") == 50.0
    assert forest_after_twins(G2)


def test_slurm_yaml_topologies():
    fab = read_fabric(YAML)  # cluster_default: True -> topo1
    assert fab.name == "topo1" and fab.kind == "tree" and fab.hosts == ["node01", "node02", "node03", "node04"]
    fab2 = read_fabric(YAML, topology_name="topo2")
    assert fab2.kind == "block" and fab2.block_sizes == [4, 16] and len(fab2.hosts) == 16
    assert read_fabric(YAML, topology_name="topo3").kind == "flat"
    with pytest.raises(InvalidArgumentError, match=r"no topology named 'topo9' \(has: topo1, topo2, topo3\)"):
        read_fabric(YAML, topology_name="topo9")
    with pytest.raises(InvalidArgumentError, match="flat and lists no nodes; give --nodelist HOSTLIST"):
        build_cluster(A100, fabric=YAML, topology_name="topo3")
    G = build_cluster(A100, fabric=YAML, topology_name="topo3", nodelist="n[1-3]")
    assert len(gpus(G)) == 24 and G.graph["fabric"]["kind"] == "flat"


def test_slurm_conf_oddities_and_errors(tmp_path):
    f = tmp_path / "topology.conf"
    # multiple parents, LinkSpeed, continuation line, case-insensitive keys, no common root
    f.write_text("switchname=l1 nodes=n[1-2] LinkSpeed=100\n"
                 "SwitchName=l2 Nodes=n[3-4]\n"
                 "SwitchName=s1 Switches=l[1-2] \\\n   LinkSpeed=200\n"
                 "SwitchName=s2 Switches=l[1-2]\n")
    fab = read_fabric(f)
    assert fab.parents()["l1"] == ["s1", "s2"] and fab.switches["s1"].link_speed == 200.0
    G = build_cluster(A100, gpu="a100", fabric=f)
    assert "switch:root" not in G  # s1 and s2 are joined through the leaves
    # LinkSpeed=100 (Gb/s) caps each NIC port under l1: min(HDR 25, 12.5) = 12.5
    assert G["n1/nic:mlx5_0"]["switch:l1"]["bandwidth"] == 12.5
    assert G["n3/nic:mlx5_0"]["switch:l2"]["bandwidth"] == 25.0
    # s1's LinkSpeed=200 Gb/s is the whole trunk from each leaf: 25 GB/s
    assert G["switch:l1"]["switch:s1"]["bandwidth"] == G["switch:l2"]["switch:s1"]["bandwidth"] == 25.0
    # s2 has no LinkSpeed: the leaf's downlinks / 1 (non-blocking), split over its 2 parents:
    # l1: 2 hosts x 8 NICs x 12.5 = 200 -> 100; l2: 2 x 8 x 25 = 400 -> 200
    assert G["switch:l1"]["switch:s2"]["bandwidth"] == 100.0
    assert G["switch:l2"]["switch:s2"]["bandwidth"] == 200.0
    # s1 and s2 are wired to the same leaves: twins, merged by the fabric model (ECMP)
    assert forest_after_twins(G)
    # missing root: two leaves, no spine; each joins the synthetic root by its downlinks / r
    f.write_text("SwitchName=l1 Nodes=n[1-2]\nSwitchName=l2 Nodes=n[3-4]\n")
    G = build_cluster(A100, gpu="a100", fabric=f, oversubscription="4:1")
    assert "switch:root" in G and any("no common root" in w for w in G.graph["warnings"])
    assert G["switch:l1"]["switch:root"]["bandwidth"] == 100.0  # 2 x 8 x 25 / 4
    assert route_bw(G, "n1/gpu0", "n2/gpu0") == route_bw(G, "n1/gpu0", "n3/gpu0") == 25.0
    # a host under two switches spreads its NICs over them (NIC i -> i-th switch)
    f.write_text("SwitchName=l1 Nodes=n[1-2]\nSwitchName=l2 Nodes=n[2-3]\nSwitchName=s Switches=l[1-2]\n")
    G = build_cluster(A100, gpu="a100", fabric=f)
    assert set(G["n2/nic:mlx5_0"]) >= {"switch:l1"} and set(G["n2/nic:mlx5_1"]) >= {"switch:l2"}
    assert G["switch:l1"]["switch:s"]["bandwidth"] == 8 * 25 + 4 * 25  # n1's 8 NICs + half of n2's
    assert any("several switches" in w for w in G.graph["warnings"]) and forest_after_twins(G)
    cases = [
        ("SwitchName=a Nodes=n1 Foo=3\n", r"topology.conf line 1: unknown key 'foo'"),
        ("SwitchName=a Nodes=n1\n# c\nSwitchName=b Switches=c\n", r"line 3: switch 'c' listed in Switches= of 'b'"),
        ("SwitchName=a Nodes=n[1-\n", r"hostlist 'n\[1-': '\[' is never closed"),
        ("SwitchName=a Nodes=n1\nSwitchName=a Nodes=n2\n", r"line 2: switch 'a' already defined on line 1"),
        ("SwitchName=a Nodes=n1\nBlockName=b Nodes=n2\n", r"mixes block and tree"),
        ("BlockName=b Nodes=n[1-4]\nBlockSizes=4,12\n", r"line 2: BlockSizes 4,12: 12 is not 4 times a power of two"),
        ("SwitchName=a Nodes=n1 LinkSpeed=fast\n", r"line 1: LinkSpeed='fast'"),
        ("SwitchName=a Switches=b\nSwitchName=b Switches=a Nodes=n1\n", r"switch cycle"),
        ("Nodes=n1\n", r"line 1: expected SwitchName=, BlockName=, RingName= or BlockSizes="),
    ]
    for text, pattern in cases:
        f.write_text(text)
        with pytest.raises(InvalidArgumentError, match=pattern):
            read_fabric(f)
    y = tmp_path / "topology.yaml"
    y.write_text("- topology: t\n  tree:\n    switches:\n    - switch: s\n      nodes: [n1\n")
    with pytest.raises(InvalidArgumentError, match=r"topology.yaml line \d+: malformed YAML"):
        read_fabric(y)
    for bad in ("0", "-1", "x", "2:0", [1, "nan"]):
        with pytest.raises(InvalidArgumentError, match="oversubscription"):
            build_cluster(A100, nodelist="a,b", oversubscription=bad)


# ---------------------------------------------------------------- composed clusters


@pytest.fixture()
def two_leaf_fabric(tmp_path):
    f = tmp_path / "topology.conf"
    f.write_text("# node1 and node3 under leaf A, node2 and node4 under leaf B\n"
                 "SwitchName=leafA Nodes=node[1,3]\n"
                 "SwitchName=leafB Nodes=node[2,4]\n"
                 "SwitchName=spine Switches=leafA,leafB\n")
    return f


def test_composed_cluster_two_leaves(two_leaf_fabric):
    G = build_cluster(host_topology=A100, gpu="a100", fabric=two_leaf_fabric)
    hosts = list(dict.fromkeys(G.nodes[n]["host"] for n in gpus(G)))
    assert hosts == ["node1", "node3", "node2", "node4"]  # fabric order = baseline order
    assert all(len(gpus(G, h)) == 8 for h in hosts) and len(gpus(G)) == 32
    assert set(kinds(G, "switch")) == {"switch:leafA", "switch:leafB", "switch:spine"}
    assert all(G.nodes[n]["host"] in hosts for n in kinds(G, "nic"))
    # physical capacities: NIC ports HDR 200 Gb/s = 25 GB/s; a leaf has 2 hosts x 8 NICs x 25 =
    # 400 GB/s of downlinks and, non-blocking by default, a 400 GB/s uplink
    assert {G[n]["switch:leafA"]["bandwidth"] for n in G["switch:leafA"] if G.nodes[n]["kind"] == "nic"} == {25.0}
    assert G["switch:leafA"]["switch:spine"]["bandwidth"] == 400.0
    assert G.nodes["switch:leafA"]["downlink_gbps"] == 400.0
    # B: NVSwitch 12 x 25 = 300 inside a host, the 25 GB/s NIC path between hosts (one flow)
    assert route_bw(G, "node1/gpu0", "node1/gpu5") == 300.0
    assert route_bw(G, "node1/gpu0", "node3/gpu5") == route_bw(G, "node1/gpu0", "node2/gpu5") == 25.0
    assert [(w, c) for w, c, _ in bandwidth_levels(G)] == [(300.0, 4 * 28), (25.0, 6 * 64)]
    assert forest_after_twins(G)
    # 2:1 leaves: 400 / 2 = 200 GB/s up (8 GPUs' worth of NIC ports for 16 GPUs)
    G2 = build_cluster(A100, gpu="a100", fabric=two_leaf_fabric, oversubscription=2)
    assert G2["switch:leafB"]["switch:spine"]["bandwidth"] == 200.0
    # nodelist picks (and orders) a subset; the leaves keep the capacity of all their hosts
    G2 = build_cluster(A100, gpu="a100", fabric=two_leaf_fabric, nodelist="node[2,1]")
    assert list(dict.fromkeys(G2.nodes[n]["host"] for n in gpus(G2))) == ["node2", "node1"]
    assert G2["switch:leafA"]["switch:spine"]["bandwidth"] == 400.0
    with pytest.raises(InvalidArgumentError, match=r"nodelist hosts node\[5,7\] are not in the fabric"):
        build_cluster(A100, fabric=two_leaf_fabric, nodelist="node[1,5,7]")
    with pytest.raises(InvalidArgumentError, match=r"lists node1 more than once"):
        build_cluster(A100, fabric=two_leaf_fabric, nodelist="node[1,1]")
    # rate overrides: 400 Gb/s NICs make the GPU's PCIe path (PXB, Gen4 x16 31.5) the narrower
    G3 = build_cluster(A100, gpu="a100", fabric=two_leaf_fabric, nic=50)
    assert G3["node1/gpu0"]["node1/nic:mlx5_0"]["bandwidth"] == 31.5
    assert G3["switch:leafA"]["switch:spine"]["bandwidth"] == 2 * 8 * 50
    assert route_bw(G3, "node1/gpu0", "node3/gpu0") == route_bw(G3, "node1/gpu0", "node2/gpu0") == 31.5
    with pytest.raises(InvalidArgumentError, match="unknown rate 'nics'"):
        build_cluster(A100, fabric=two_leaf_fabric, nics=5)
    with pytest.raises(InvalidArgumentError, match="rate 'taper' was removed"):
        build_cluster(A100, fabric=two_leaf_fabric, taper=1)


def test_composed_real_tree_and_nodelist_only():
    G = build_cluster(A100, gpu="a100", fabric=TREE, nodelist="srv[1101-1102,1201,2101]", oversubscription=[2, 1])
    assert {"switch:switch.1.1", "switch:switch.2.1", "switch:switch.3.1"} <= set(kinds(G, "switch"))
    assert "switch:switch.1.5" not in G  # pruned: none of its hosts is in the nodelist
    # capacities come from the whole file: a leaf has 8 hosts x 8 NICs x 25 = 1600 GB/s of
    # downlinks, 2:1 -> 800 up; a spine 2 leaves x 800 = 1600, 1:1 -> 1600 up to the core
    assert G["switch:switch.1.1"]["switch:switch.2.1"]["bandwidth"] == 800.0
    assert G["switch:switch.2.1"]["switch:switch.3.1"]["bandwidth"] == 1600.0
    assert G["switch:switch.1.3"]["switch:switch.2.2"]["bandwidth"] == 800.0
    assert G.nodes["switch:switch.3.1"]["downlink_gbps"] == 6 * 1600.0
    assert [w for w, _, _ in bandwidth_levels(G)] == [300.0, 25.0]  # NVSwitch; one NIC port
    assert forest_after_twins(G)
    F = build_cluster(RTX, nodelist="gpu[01-03]")
    assert len(gpus(F)) == 24 and "switch:fabric" in F
    one = build_cluster(A30, nodelist="box7")
    assert set(nx.get_node_attributes(one, "host").values()) == {"box7"} and not kinds(one, "switch")


def test_synthetic_hosts_and_missing_nic():
    G = build_cluster(gpus_per_node=8, gpu="b200", nodelist="n[1-2]")
    assert len(gpus(G)) == 16 and len(kinds(G, "nic")) == 16
    assert widest(G, "n1/gpu0", "n1/gpu7") == 900.0  # 18 x 50 (NVLink 5)
    with pytest.raises(InvalidArgumentError, match="needs a GPU generation"):
        build_cluster(gpus_per_node=8, nodelist="n[1-2]")
    with pytest.raises(InvalidArgumentError, match="needs the hosts' topology"):
        build_cluster(fabric=TREE)
    with pytest.raises(InvalidArgumentError, match="nothing to build"):
        build_cluster()


def test_summary_table():
    G = build_cluster(A100, gpu="a100", nodelist="a,b")
    text = summarize(G)
    assert "hosts 2  GPUs 16  NICs 16" in text
    assert re.search(r"^\s+300\s+56\s", text, re.M) and re.search(r"^\s+25\s+64\s", text, re.M)
    # link table: 16 GPU ports into the two NVSwitches, 16 NIC ports into the flat switch,
    # each GPU linked to the 2 NICs of its pair (32 GPU-NIC links) at min(PXB 31.5, HDR 25)
    assert re.search(r"^\s+gpu-nvswitch\s+300\s+16$", text, re.M)
    assert re.search(r"^\s+nic-switch\s+25\s+16$", text, re.M) and re.search(r"^\s+gpu-nic\s+25\s+32$", text, re.M)


@pytest.mark.parametrize("host", [DGX1, A100, A30, HOPPER, RTX, IBM_XML, P4D_XML], ids=lambda p: p.name[:24])
@pytest.mark.parametrize("fabric", [None, TREE, BLOCK, YAML], ids=["flat", "tree", "block", "yaml"])
def test_every_import_is_a_tree_of_switches(host, fabric):
    """Importers emit non-GPU nodes that form a forest once twins are merged (the fabric model's
    input), and every edge a finite positive capacity."""
    nodelist = "n[1-3]" if fabric is None else ("srv[1101-1102,1201,2101,3101]" if fabric in (TREE, BLOCK) else None)
    G = build_cluster(host, fabric=fabric, nodelist=nodelist)
    assert forest_after_twins(G)
    assert all(d["bandwidth"] > 0 and d["bandwidth"] < float("inf") for _, _, d in G.edges(data=True))
    # every GPU reaches every other without relaying through a GPU
    a, b = gpus(G)[0], gpus(G)[-1]
    assert route_bw(G, a, b) > 0


# ---------------------------------------------------------------- builders


def test_fat_tree_cluster_physical_uplinks():
    from rankmap.solver import fat_tree_cluster
    from rankmap.solver.fabric.builders import FatTreeTier

    # 8 hosts x 8 GPUs, one 50 GB/s rail NIC per GPU; 4 hosts per leaf at 2:1, 2 leaves per pod 1:1
    g = fat_tree_cluster(8, 8, tiers=[(4, 2.0), (2, 1.0)])
    # a leaf: 4 hosts x 8 NICs x 50 = 1600 GB/s of downlinks, 2:1 -> one 800 GB/s uplink edge
    assert g["switch:t0.0"]["switch:t1.0"]["bandwidth"] == 800.0
    assert g.nodes["switch:t0.0"]["downlink_gbps"] == 1600.0 and g.nodes["switch:t0.0"]["oversubscription"] == 2.0
    # a pod: 2 leaves x 800 = 1600 down, 1:1 -> 1600 up to the root (the spine layer)
    assert g["switch:t1.0"]["switch:root"]["bandwidth"] == 1600.0
    # the NIC and NVSwitch links: 50 GB/s ports; 18 NVLink 4 links x 25 = 450 per GPU
    assert g["node000/gpu3"]["node000/nic3"]["bandwidth"] == g["node000/nic3"]["switch:t0.0"]["bandwidth"] == 50.0
    assert g["node000/gpu3"]["node000/nvswitch"]["bandwidth"] == 450.0
    assert forest_after_twins(g)
    # explicit uplink capacity, and nominal fan-in: the half-full last leaf keeps its 4-host uplink
    g = fat_tree_cluster(6, 8, tiers=[FatTreeTier(4, uplink_gbps=400.0)])
    assert g["switch:t0.1"]["switch:root"]["bandwidth"] == 400.0
    assert g.nodes["switch:t0.1"]["oversubscription"] == 4.0  # 1600 / 400
    g = fat_tree_cluster(6, 8, tiers=[(4, 4.0)])
    assert g["switch:t0.1"]["switch:root"]["bandwidth"] == 400.0  # 4 x 8 x 50 / 4, 2 hosts attached
    # one shared NIC per host: GPUs on a PCIe switch (32 GB/s links) with the NIC
    g = fat_tree_cluster(4, 8, nics_per_host=1, tiers=[(4, 2.0)])
    assert [n for n in g if n.startswith("node000/nic")] == ["node000/nic0"]
    assert {g[f"node000/gpu{i}"]["node000/pcie0"]["bandwidth"] for i in range(8)} == {32.0}
    assert g["node000/pcie0"]["node000/nic0"]["bandwidth"] == 32.0
    assert g["switch:t0.0"]["switch:root"]["bandwidth"] == 4 * 1 * 50 / 2  # 100
    # 2 NICs per host: GPUs 0-3 on NIC 0, 4-7 on NIC 1
    g = fat_tree_cluster(2, 8, nics_per_host=2)
    assert set(g["node000/pcie1"]) == {f"node000/gpu{i}" for i in range(4, 8)} | {"node000/nic1"}
    assert forest_after_twins(g)
    # NVSwitch ports per GPU: A100 12 x 25 = 300, B200 18 x 50 = 900
    g = fat_tree_cluster(1, 8, nvlink_ports=12)
    assert g["node000/gpu0"]["node000/nvswitch"]["bandwidth"] == 300.0
    assert g["node000/gpu0"]["node000/nvswitch"]["nvlinks"] == 12
    g = fat_tree_cluster(1, 8, nvlink_ports=18, nvlink_port_gbps=50.0)
    assert g["node000/gpu0"]["node000/nvswitch"]["bandwidth"] == 900.0
    # NVLink-bridge pairs and PCIe boxes with a shared NIC on the host's PCIe switch
    g = fat_tree_cluster(2, 4, intra="nvlink-pairs", nvlink_ports=4, nics_per_host=1)
    assert g["node000/gpu0"]["node000/gpu1"]["bandwidth"] == 100.0 and g["node000/pcie"]["node000/nic0"]
    assert forest_after_twins(g)
    for kw, msg in [(dict(tiers=[(0, 2.0)]), "fan_in"), (dict(tiers=[(4, 0)]), "oversubscription"),
                    (dict(tiers=[(4, 2.0, -1)]), "uplink_gbps"), (dict(tiers=[4]), "tiers"),
                    (dict(nics_per_host=9), "nics_per_host"), (dict(nvlink_ports=18, intra_bandwidth_gbps=450), "not both"),
                    (dict(intra="pcie", nvlink_ports=2), "no NVLink"), (dict(intra="x"), "intra")]:
        with pytest.raises(InvalidArgumentError, match=msg):
            fat_tree_cluster(2, 8, **kw)


# ---------------------------------------------------------------- graph files and CLI


def test_multigraph_parallel_links_are_summed(tmp_path):
    M = nx.MultiGraph()
    M.add_node("g0", kind="gpu", host="h", local_index=0)
    M.add_node("sw", kind="nvswitch", host="h")
    for _ in range(18):  # 18 NVLink 4 links, 25 GB/s each, listed one by one
        M.add_edge("g0", "sw", bandwidth=25.0)
    f = tmp_path / "m.json"
    f.write_text(json.dumps(nx.node_link_data(M, edges="edges")))
    assert load_graph(f)["g0"]["sw"]["bandwidth"] == 450.0
    D = nx.DiGraph()
    D.add_edge("a", "b", bandwidth=50.0)
    D.add_edge("b", "a", bandwidth=50.0)  # the other direction of the same link
    f.write_text(json.dumps(nx.node_link_data(D, edges="edges")))
    assert load_graph(f)["a"]["b"]["bandwidth"] == 50.0




def test_graph_file_round_trip(tmp_path):
    G = build_cluster(DGX1, gpu="v100")
    j = tmp_path / "g.json"
    dump_graph(G, j)
    data = json.loads(j.read_text())
    assert "edges" in data and "links" not in data
    H = load_graph(j)
    assert nx.utils.graphs_equal(G, H)
    data["links"] = data.pop("edges")
    j.write_text(json.dumps(data))
    assert nx.utils.graphs_equal(G, load_graph(j))
    gm = tmp_path / "g.graphml"
    dump_graph(G, gm)
    K = load_graph(gm)
    assert set(K.nodes) == set(G.nodes) and K.graph["rates"] == G.graph["rates"]
    assert {n: d["local_index"] for n, d in K.nodes(data=True) if d["kind"] == "gpu"} == \
        {n: d["local_index"] for n, d in G.nodes(data=True) if d["kind"] == "gpu"}
    assert all(K[u][v]["bandwidth"] == d["bandwidth"] for u, v, d in G.edges(data=True))


@pytest.mark.parametrize("name, text, match", [
    ("nope.json", None, "does not exist"),
    ("bad.json", '{"nodes": [\n {"id": "a"},\n {"id": "b",}\n], "edges": []}',
     r"bad.json line 3 column 13: malformed JSON"),
    ("bad.json", '{"nodes": [{"id": "a"}, {"id": "b"}], "edges": [{"source": "a", "target": "b"}]}',
     r"edge \('a', 'b'\) has no 'bandwidth'"),
    ("bad.json", '{"nodes": [{"id": "a"}, {"id": "b"}], "edges": [{"source": "a", "target": "b", "bandwidth": -1}]}',
     "bandwidth -1"),
    ("bad.json", '{"nodes": [{"id": "a"}], "edges": [{"source": "a", "target": "z", "bandwidth": 1}]}',
     "target 'z' is not a node id"),
    ("bad.graphml", "<graphml><graph><node id='a'/></grph></graphml>", r"bad.graphml line 1: malformed GraphML"),
])
def test_graph_file_errors(tmp_path, name, text, match):
    assert_read_fails(load_graph, tmp_path / name, text, match)


def test_cli_cluster(tmp_path, capsys, two_leaf_fabric):
    from rankmap.cli import main

    assert main(["cluster", "--host-topology", str(A30), "--gpu", "a30"]) == 0
    out = capsys.readouterr().out
    data = json.loads(out)
    G = nx.node_link_graph(data, edges="edges")
    assert len(gpus(G)) == 4
    out_file = tmp_path / "c.json"
    assert main(["cluster", "--host-topology", str(A100), "--fabric", str(two_leaf_fabric),
                 "--rate", "nic=50", "--oversubscription", "4", "-o", str(out_file)]) == 0
    H = load_graph(out_file)
    # a leaf: 2 hosts x 8 NICs x 50 GB/s = 800 GB/s down, 4:1 -> 200 GB/s up
    assert len(gpus(H)) == 32 and H["switch:leafA"]["switch:spine"]["bandwidth"] == 200.0
    assert H.graph["fabric"]["oversubscription"] == 4.0
    assert main(["cluster", "--host-topology", str(A100), "--fabric", str(two_leaf_fabric),
                 "--oversubscription", "2,1", "-o", str(out_file)]) == 0
    assert load_graph(out_file)["switch:leafB"]["switch:spine"]["bandwidth"] == 200.0  # 2 x 8 x 25 / 2
    capsys.readouterr()  # the successful runs above may warn (assumed GPU generation)
    assert main(["cluster", "--host-topology", str(A100), "--nodelist", "a,b", "--rate", "taper=2"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "was removed" in err and "--oversubscription" in err
    assert main(["cluster", "--host-topology", str(A100), "--nodelist", "a,b", "--oversubscription", "fast"]) == 2
    assert "oversubscription" in capsys.readouterr().err
    assert main(["cluster", "--host-topology", str(A100), "--format", "table"]) == 0
    out = capsys.readouterr().out
    assert "GPU-GPU route bandwidths" in out and re.search(r"^\s+gpu-nvswitch\s+300\s+8$", out, re.M)
    assert main(["cluster", "--host-topology", str(A100), "--fabric", str(two_leaf_fabric),
                 "--nodelist", "node[1,9]"]) == 2
    io = capsys.readouterr()
    assert io.out == "" and io.err.count("\n") == 1 and "node9" in io.err
    assert main(["cluster", "--host-topology", str(A100), "--rate", "nic"]) == 2
    assert "is not KEY=GBPS" in capsys.readouterr().err


def test_examples_are_current():
    """examples/clusters/*.json load and match a fresh build (see their README)."""
    import os

    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        rel = Path("tests/data/real-inputs")
        builds = {
            "dgx1-v100-hybridcube.json": dict(host_topology=rel / DGX1.name, gpu="v100", nodelist="dgx1"),
            "hgx-a100-8gpu.json": dict(host_topology=rel / A100.name, gpu="a100", nic=12.5, nodelist="hgx-a100"),
            "a30-pcie-nvlink-pairs.json": dict(host_topology=rel / A30.name, gpu="a30", nodelist="a30"),
            "hgx-a100-2nodes.json": dict(host_topology=rel / A100.name, gpu="a100", nic=12.5,
                                         fabric=Path("examples/clusters/hgx-a100-2nodes.topology.conf")),
        }
        for name, kw in builds.items():
            kw = {k: (str(v) if isinstance(v, Path) else v) for k, v in kw.items()}
            on_disk = load_graph(EXAMPLES / name)
            fresh = build_cluster(**kw)
            assert nx.utils.graphs_equal(on_disk, fresh), name
    finally:
        os.chdir(cwd)
    G = load_graph(EXAMPLES / "hgx-a100-2nodes.json")
    assert len(gpus(G)) == 16 and widest(G, "node1/gpu0", "node2/gpu3") == 12.5


# ---------------------------------------------------------------- hostlists


def test_hostlist_examples():
    assert expand("node[001-003,040]") == ["node001", "node002", "node003", "node040"]
    assert expand("rack[1-2]-n[08-09]") == ["rack1-n08", "rack1-n09", "rack2-n08", "rack2-n09"]
    assert expand("a1,b[2-3] c") == ["a1", "b2", "b3", "c"]
    assert expand("n[8-10]") == ["n8", "n9", "n10"] and expand("n[08-10]") == ["n08", "n09", "n10"]
    assert compress(["node001", "node002", "node003", "node040"]) == "node[001-003,040]"
    assert compress(["n1", "n2", "n10", "n01"]) == "n[1-2,10],n01"
    assert compress(["b2", "a1", "b1", "a2", "a1"], sort=True) == "a[1-2],b[1-2]"
    assert compress(["x-ib", "n3-ib", "n4-ib"]) == "x-ib,n[3-4]-ib"


@st.composite
def hostnames(draw):
    prefix = draw(st.sampled_from(["n", "node", "gpu-", "r1n", "dgx"]))
    width = draw(st.integers(1, 4))
    num = draw(st.integers(0, 10 ** width - 1))
    suffix = draw(st.sampled_from(["", "", "-ib", "a"]))
    return f"{prefix}{str(num).zfill(width)}{suffix}"


@settings(max_examples=300, deadline=None)
@given(st.lists(hostnames(), max_size=40))
def test_hostlist_expand_compress_roundtrip(hosts):
    assert expand(compress(hosts)) == hosts
    s = compress(hosts, sort=True)
    assert sorted(expand(s)) == sorted(set(hosts))


@st.composite
def canonical_hostlists(draw):
    """Canonical single-prefix expressions: sorted, maximal, non-adjacent ranges."""
    prefix = draw(st.sampled_from(["n", "node", "gpu"]))
    width = draw(st.integers(1, 3))
    nums = sorted(draw(st.sets(st.integers(0, 10 ** width - 1), min_size=1, max_size=30)))
    hosts = [f"{prefix}{str(n).zfill(width)}" for n in nums]
    return hosts


@settings(max_examples=300, deadline=None)
@given(canonical_hostlists())
def test_hostlist_compress_expand_compress(hosts):
    x = compress(hosts)
    assert expand(x) == hosts
    assert compress(expand(x)) == x  # a canonical expression is a fixed point
    if len(hosts) > 1:
        assert x.count("[") == 1


@settings(max_examples=100, deadline=None)
@given(st.text(alphabet="n[]-,0123 ", max_size=12))
def test_hostlist_garbage_never_tracebacks(text):
    try:
        expand(text)
    except InvalidArgumentError as exc:
        assert "\n" not in str(exc)


def test_class_levels_cover_legends():
    assert set(CLASS_LEVELS) >= {"PIX", "PXB", "PHB", "NODE", "SYS"}


def test_slurm_deep_switch_chain_is_refused_not_a_recursion_error():
    # a hostile topology.conf chaining 3,000 switches: one line, no RecursionError
    from rankmap.solver.formats.slurm import parse_topology_conf

    text = "".join(f"SwitchName=s{i} Switches=s{i + 1}\n" for i in range(3000)) + "SwitchName=s3000 Nodes=a\n"
    with pytest.raises(InvalidArgumentError, match=r"t.conf line \d+: the switch tree below 's\d+' is more than 64"):
        parse_topology_conf(text, "t.conf")



def test_an_nvlink_rate_with_a_negative_exponent_keeps_its_sign():
    """--gpu 1e-4 is 0.0001 GB/s per link (the dash stripping for model names read it as 1e4)."""
    from rankmap.solver.formats.generations import resolve_generation

    assert resolve_generation("1e-4").nvlink == pytest.approx(1e-4)
    assert resolve_generation("2.5e-1").name == "nvlink0.25"
    assert resolve_generation("a100-sxm4").name == "a100"
