"""Real-world topology formats -> cluster graph (rankmap.solver.formats, ``rankmap cluster``).

The inputs under ``tests/data/real-inputs`` are public dumps (see their README); the
expected counts and NVLink pairs below were read off those files by hand.  Every edge is a
physical link whose ``bandwidth`` is its capacity in GB/s per direction (DESIGN §2); the
expected capacities are derived by hand in the comments (rates: bandwidths.md).
"""

from __future__ import annotations

import itertools
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
    read_nccl_xml,
    read_nvsmi,
    summarize,
)
from rankmap.solver.formats.common import default_rates, pcie_rate, resolve_generation
from rankmap.solver.formats.nvsmi import CLASS_LEVELS

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(__file__).resolve().parent / "data" / "real-inputs"
EXAMPLES = ROOT / "examples" / "clusters"

DGX1 = DATA / "nvsmi-topo_dgx1-v100-8gpu-hybridcube-4nic-oldlegend_pytorch-ddp-bench.txt"
A100 = DATA / "nvsmi-topo_hgx-a100-80gb-8gpu-8nic-roce_deepep-13.txt"
A30 = DATA / "nvsmi-topo_a30-pcie-4gpu-nvlink-bridge-pairs-1nic_vllm-29070.txt"
HOPPER = DATA / "nvsmi-topo_hopper-8gpu-12nic_mooncake-2039.txt"
RTX = DATA / "nvsmi-topo_rtx4090-pcie-8gpu-2nic-allsys-tabs_go-gpuallocator-17.txt"
IBM_XML = DATA / "ncclxml_hgx-h100-vm-8gpu-8nic-roce-dump_ibm-cloud-docs.xml"
P4D_XML = DATA / "ncclxml_p4d-a100-topofile-comments_aws-ofi-nccl.xml"
TREE = DATA / "slurm-topology-tree_3level-core-spine-leaf_topograph-oci-sim.conf"
BLOCK = DATA / "slurm-topology-block_12nvl-blocks-blocksizes_topograph-dra.conf"
YAML = DATA / "slurm-topology-yaml_tree-block-flat_schedmd-manpage-example.yaml"


# ---------------------------------------------------------------- helpers


def widest(G: nx.Graph, u, v) -> float:
    """Widest-path (max-min) bandwidth via the maximum spanning tree."""
    T = nx.maximum_spanning_tree(G, weight="bandwidth")
    path = nx.shortest_path(T, u, v)
    return min(T[a][b]["bandwidth"] for a, b in zip(path, path[1:]))


def route_bw(G: nx.Graph, u, v) -> float:
    """B(u, v) of DESIGN §2, computed independently: the widest path with the other GPUs removed."""
    others = {n for n, d in G.nodes(data=True) if d.get("kind", "gpu") == "gpu"} - {u, v}
    return widest(G.subgraph(set(G) - others), u, v)


def forest_after_twins(G: nx.Graph) -> bool:
    """The non-GPU nodes form a forest once twins (same neighbours, GPUs included) are merged."""
    H = nx.Graph(G)

    def non_gpu():
        return [n for n, d in H.nodes(data=True) if d.get("kind", "gpu") != "gpu"]

    for _ in range(8):
        if nx.is_forest(H.subgraph(non_gpu())):
            return True
        groups = {}
        for x in non_gpu():
            if H.degree(x) >= 2:
                groups.setdefault(frozenset(H[x]), []).append(x)
        merged = False
        for xs in groups.values():
            for y in xs[1:]:
                if y in H and xs[0] in H:
                    for z, d in list(H[y].items()):
                        H[xs[0]][z]["bandwidth"] += d["bandwidth"]
                    H.remove_node(y)
                    merged = True
        if not merged:
            break
    return nx.is_forest(H.subgraph(non_gpu()))


def kinds(G, kind):
    return [n for n, d in G.nodes(data=True) if d.get("kind") == kind]


def gpus(G, host=None):
    return [n for n, d in G.nodes(data=True) if d["kind"] == "gpu" and (host is None or d["host"] == host)]


def nvlink_edges(G) -> dict[frozenset, int]:
    """{frozenset(local_index pair): NV count} for direct GPU-GPU NVLink edges."""
    out = {}
    for u, v, d in G.edges(data=True):
        if d.get("link") == "nvlink" and G.nodes[u]["kind"] == "gpu" and G.nodes[v]["kind"] == "gpu":
            out[frozenset((G.nodes[u]["local_index"], G.nodes[v]["local_index"]))] = d["nvlinks"]
    return out


def pcie_islands(G) -> list[set[str]]:
    """Device groups that reach each other without going through a CPU (PIX/PXB); a NIC moved
    next to its GPUs (GPU - NIC edges) joins their island."""
    keep = [n for n, d in G.nodes(data=True) if d["kind"] in ("gpu", "nic", "pcie_switch")]
    H = G.edge_subgraph([(u, v) for u, v, d in G.edges(data=True) if d["link"] == "pcie"]).subgraph(keep)
    out = []
    for comp in nx.connected_components(H):
        short = {n.split("/", 1)[1] for n in comp if G.nodes[n]["kind"] in ("gpu", "nic")}
        if short:
            out.append(short)
    return sorted(out, key=lambda s: sorted(s))


def read_matrix(path: Path):
    """Independent minimal reader: (devices, {(a, b): cell}) of a topo -m file."""
    lines = path.read_text().splitlines()
    header = lines[0].split()
    cut = len(header)
    for i, tok in enumerate(header):
        if tok in ("CPU", "NUMA", "GPU") and i + 1 < len(header) and header[i + 1] in ("Affinity", "NUMA"):
            cut = i
            break
    devs = header[:cut]
    cells = {}
    for line in lines[1:]:
        toks = line.split()
        if toks and toks[0] in devs:
            for j, d in enumerate(devs):
                cells[(toks[0], d)] = toks[1 + j]
    return devs, cells


# ---------------------------------------------------------------- nvidia-smi topo -m


def test_dgx1_v100_hybrid_cube_mesh():
    G = read_nvsmi(DGX1, gpu="v100", host="dgx1")
    assert len(gpus(G)) == 8
    assert [G.nodes[n]["local_index"] for n in gpus(G)] == list(range(8))
    assert sorted(G.nodes[n]["name"] for n in kinds(G, "nic")) == ["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"]
    assert kinds(G, "nvswitch") == []  # hybrid cube mesh: direct links only
    nv = nvlink_edges(G)
    nv1 = {frozenset(p) for p in [(0, 1), (0, 2), (1, 3), (2, 6), (3, 7), (4, 5), (4, 6), (5, 7)]}
    nv2 = {frozenset(p) for p in [(0, 3), (0, 4), (1, 2), (1, 5), (2, 3), (4, 7), (5, 6), (6, 7)]}
    assert {p for p, c in nv.items() if c == 1} == nv1
    assert {p for p, c in nv.items() if c == 2} == nv2
    none = {frozenset(p) for p in itertools.combinations(range(8), 2)} - nv1 - nv2
    assert len(none) == 12 and frozenset((0, 5)) in none and frozenset((3, 4)) in none
    for u, v, d in G.edges(data=True):
        if d["link"] == "nvlink":
            assert d["bandwidth"] == 25.0 * d["nvlinks"]  # NVLink 2: 25 GB/s per link per direction
    # NICs out of column order, each on the PCIe switch of a GPU pair; with 4 NICs in use the
    # GPUs link to their own NIC: min(PIX path 15.75 (Gen3 x16), EDR port 100 Gb/s = 12.5)
    assert pcie_islands(G) == [{"gpu0", "gpu1", "nic:mlx5_0"}, {"gpu2", "gpu3", "nic:mlx5_1"},
                               {"gpu4", "gpu5", "nic:mlx5_2"}, {"gpu6", "gpu7", "nic:mlx5_3"}]
    assert set(G["dgx1/nic:mlx5_0"]) == {"dgx1/gpu0", "dgx1/gpu1"}
    assert G["dgx1/gpu0"]["dgx1/nic:mlx5_0"]["bandwidth"] == 12.5
    assert G.nodes["dgx1/nic:mlx5_0"]["fabric_port"] is True
    # identical CPU affinity on all GPUs does not merge the two sockets
    assert len(kinds(G, "cpu")) == 2
    # routes do not relay through a third GPU: NV2 pairs 50, NV1 pairs 25, the 12 pairs without
    # NVLink go over PCIe and the socket link (all cross-socket: SYS, NCCL BDW_QPI_BW 6)
    assert [(w, c) for w, c, _ in bandwidth_levels(G)] == [(50.0, 8), (25.0, 8), (6.0, 12)]
    assert route_bw(G, "dgx1/gpu0", "dgx1/gpu5") == 6.0
    assert widest(G, "dgx1/gpu0", "dgx1/gpu5") == 50.0  # only by relaying through other GPUs
    H = G.copy()
    H.remove_edges_from([(u, v) for u, v, d in G.edges(data=True) if d["link"] == "nvlink"])
    assert route_bw(H, "dgx1/gpu0", "dgx1/gpu1") == 15.75  # PIX, PCIe Gen3 x16
    assert route_bw(H, "dgx1/gpu0", "dgx1/gpu2") == 15.75  # PHB
    assert route_bw(H, "dgx1/gpu0", "dgx1/gpu4") == 6.0  # SYS: NCCL BDW_QPI_BW
    assert forest_after_twins(G)


def test_hgx_a100_nvswitch_and_nic_pairs():
    G = read_nvsmi(A100, gpu="a100")
    assert len(gpus(G)) == 8 and len(kinds(G, "nic")) == 8
    sw = kinds(G, "nvswitch")
    assert len(sw) == 1 and G.degree(sw[0]) == 8
    # NV12 on every pair of 8 GPUs: 12 x 7 links is more than a GPU has, so an NVSwitch board;
    # each GPU's 12 NVLink 3 links x 25 GB/s = 300 GB/s on one edge to the NVSwitch node
    assert all(G[g][sw[0]]["bandwidth"] == 300.0 and G[g][sw[0]]["nvlinks"] == 12 for g in gpus(G))
    assert nvlink_edges(G) == {}
    assert pcie_islands(G) == [
        {"gpu0", "gpu1", "nic:mlx5_0", "nic:mlx5_1"},
        {"gpu2", "gpu3", "nic:mlx5_2", "nic:mlx5_3"},
        {"gpu4", "gpu5", "nic:mlx5_4", "nic:mlx5_5"},
        {"gpu6", "gpu7", "nic:mlx5_6", "nic:mlx5_7"},
    ]
    # GPU0 and GPU1 are PXB to both NICs of their pair: both are nearest (tie), so each GPU
    # links to both, min(PXB path 31.5 (Gen4 x16), HDR port 200 Gb/s = 25) = 25 GB/s, and the
    # NICs leave the PCIe tree (their PIX switch, now empty, goes with them)
    nic0 = "host0/nic:mlx5_0"
    assert set(G[nic0]) == {"host0/gpu0", "host0/gpu1"}
    assert G["host0/gpu0"][nic0]["bandwidth"] == 25.0 and G["host0/gpu0"][nic0]["pcie_hops"] == 3
    assert G.nodes[nic0]["port_bandwidth"] == 25.0
    assert len(kinds(G, "cpu")) == 2 and {G.nodes[c]["numa"] for c in kinds(G, "cpu")} == {0, 1}
    assert G["host0/cpu0"]["host0/cpu1"]["bandwidth"] == 16.0  # EPYC Rome socket link (AMD_ZEN12_BW)
    assert [(w, c) for w, c, _ in bandwidth_levels(G)] == [(300.0, 28)]
    assert forest_after_twins(G)


def test_a30_nvlink_only_within_pairs():
    G = read_nvsmi(A30, gpu="a30")
    assert len(gpus(G)) == 4 and len(kinds(G, "nic")) == 1
    assert nvlink_edges(G) == {frozenset((0, 1)): 4, frozenset((2, 3)): 4}
    assert kinds(G, "nvswitch") == []
    assert widest(G, "host0/gpu0", "host0/gpu1") == 100.0
    assert widest(G, "host0/gpu2", "host0/gpu3") == 100.0
    assert widest(G, "host0/gpu0", "host0/gpu2") == 16.0  # SYS between the pairs
    # the one NIC sits on GPU3's switch (PIX), GPU2 is PXB to it, GPUs 0/1 are SYS
    assert pcie_islands(G) == [{"gpu0"}, {"gpu1"}, {"gpu2", "gpu3", "nic:mlx5_0"}]
    (sw,) = list(G["host0/nic:mlx5_0"])
    assert "host0/gpu3" in G[sw] and "host0/gpu2" not in G[sw]


def test_hopper_12_nics_three_on_gpu0():
    G = read_nvsmi(HOPPER, gpu="h100")
    assert len(gpus(G)) == 8 and len(kinds(G, "nic")) == 12
    assert {G[g]["host0/nvswitch"]["bandwidth"] for g in gpus(G)} == {450.0}  # 18 x 25
    islands = pcie_islands(G)
    assert {"gpu0", "nic:mlx5_0", "nic:mlx5_1", "nic:mlx5_2"} in islands
    assert {"gpu1", "nic:mlx5_3"} in islands and {"gpu4", "nic:mlx5_6", "nic:mlx5_7", "nic:mlx5_8"} in islands
    assert all(any(f"gpu{i}" in s and any(x.startswith("nic:") for x in s) for s in islands) for i in range(8))
    # GPU0 has three NICs on its PIX switch, all equally near: linked to all three (NCCL may
    # spread its channels over them), each at min(PCIe Gen5 x16 63, NDR 400 Gb/s = 50) = 50
    assert {x for x in G["host0/gpu0"] if "nic" in x} == {f"host0/nic:mlx5_{i}" for i in range(3)}
    assert {G["host0/gpu0"][f"host0/nic:mlx5_{i}"]["bandwidth"] for i in range(3)} == {50.0}
    assert {x for x in G["host0/gpu1"] if "nic" in x} == {"host0/nic:mlx5_3"}
    assert forest_after_twins(G)
    # Blackwell shows the same NV18 label at twice the link rate
    B = read_nvsmi(HOPPER, gpu="b200")
    assert {B[g]["host0/nvswitch"]["bandwidth"] for g in gpus(B)} == {900.0}
    # without gpu=, Hopper is assumed from NV18 and said so
    G2 = read_nvsmi(HOPPER)
    assert G2.graph["gpu"] == "h100" and any("NV18" in w for w in G2.graph["warnings"])


def test_rtx4090_tabs_all_sys():
    G = read_nvsmi(RTX, gpu="rtx4090")
    assert len(gpus(G)) == 8
    assert sorted(G.nodes[n]["name"] for n in kinds(G, "nic")) == ["NIC0", "NIC1"]  # no NIC legend
    assert nvlink_edges(G) == {} and kinds(G, "nvswitch") == []
    levels = bandwidth_levels(G)
    assert [(w, c) for w, c, _ in levels] == [(10.0, 28)]  # every pair SYS: SKL_QPI_BW 10
    # only GPU6 is near the NICs (PHB); both NICs are every GPU's nearest (a tie), so every GPU
    # links to both: GPU6 at min(PHB path 31.5, port 12.5) = 12.5, the others through the
    # socket link at 10 GB/s
    for i in range(8):
        for nic in ("host0/nic:NIC0", "host0/nic:NIC1"):
            assert G[f"host0/gpu{i}"][nic]["bandwidth"] == (12.5 if i == 6 else 10.0)
    assert G["host0/gpu6"]["host0/nic:NIC0"]["via"].startswith("hostbridge0")
    (hb,) = kinds(G, "host_bridge")
    assert "host0/gpu6" in G[hb]
    assert {G.nodes[c].get("numa") for c in kinds(G, "cpu")} == {0, 1}
    assert forest_after_twins(G)


@pytest.mark.parametrize("path", [DGX1, A100, A30, HOPPER, RTX], ids=lambda p: p.name[:30])
def test_pcie_routes_equal_matrix_classes(path):
    """Without NVLink edges, B(a, b) of two GPUs is exactly the rate of their matrix class, and
    each GPU is linked to the NICs of its closest class (NCCL's nearest NIC) at
    min(that class's rate, the NIC port)."""
    G = read_nvsmi(path)
    rates = G.graph["rates"]
    H = G.copy()
    H.remove_edges_from([(u, v) for u, v, d in G.edges(data=True) if d["link"] == "nvlink"])
    legend = dict(re.findall(r"^\s*(NIC\d+):\s*(\S+)", path.read_text(), re.M))
    devs, cells = read_matrix(path)

    def node(d):
        return f"host0/gpu{d[3:]}" if d.startswith("GPU") else f"host0/nic:{legend.get(d, d)}"

    rate = {"PIX": rates["pix"], "PXB": rates["pxb"], "PHB": rates["phb"], "NODE": rates["node"], "SYS": rates["sys"]}
    order = ["PIX", "PXB", "PHB", "NODE", "SYS"]
    checked = 0
    gpu_cols = [d for d in devs if d.startswith("GPU")]
    nic_cols = [d for d in devs if not d.startswith("GPU")]
    for a, b in itertools.combinations(gpu_cols, 2):
        c = cells.get((a, b))
        if c is None or c.startswith("NV"):
            continue
        assert route_bw(H, node(a), node(b)) == rate[c], (a, b, c)
        checked += 1
    many = len(nic_cols) > 1
    for a in gpu_cols:
        if not nic_cols:
            break
        closest = min(order.index(cells[(a, n)]) for n in nic_cols)
        near = {node(n) for n in nic_cols if order.index(cells[(a, n)]) == closest}
        linked = {x for x in G[node(a)] if G.nodes[x]["kind"] == "nic"}
        if many:
            assert linked == near, a
            for n in near:
                port = G.nodes[n]["port_bandwidth"]
                assert G[node(a)][n]["bandwidth"] == min(rate[order[closest]], port)
        else:  # one NIC stays in the PCIe tree
            assert route_bw(H, node(a), node(nic_cols[0])) == rate[cells[(a, nic_cols[0])]]
        checked += 1
    assert checked > 0
    assert forest_after_twins(G)


def test_nvsmi_generation_inference_and_rates():
    assert read_nvsmi(A100).graph["gpu"] == "a100"
    assert read_nvsmi(DGX1).graph["gpu"] == "v100"
    G = read_nvsmi(A100, gpu="20.6")  # an explicit per-link rate (NCCL's SM90 constant)
    assert {d["bandwidth"] for _, _, d in G.edges(data=True) if d["link"] == "nvlink"} == {12 * 20.6}
    G = read_nvsmi(A100, gpu="a100", pcie=15.75, sys=10, nic=50)
    # GPU -> nearest NIC: the PCIe path (15.75) is narrower than the 400 Gb/s port
    assert G["host0/gpu0"]["host0/nic:mlx5_0"]["bandwidth"] == 15.75
    assert G["host0/cpu0"]["host0/cpu1"]["bandwidth"] == 10.0
    for bad, msg in [("taper", "oversubscription"), ("fabric", "oversubscription")]:
        with pytest.raises(InvalidArgumentError, match=f"rate '{bad}' was removed.*{msg}"):
            read_nvsmi(A100, **{bad: 2})


def test_nvsmi_full_mesh_is_not_an_nvswitch():
    """4 GPUs with NV4 on every pair: 3 x 4 = 12 links fit an A100 (12 links), so direct links
    of 4 x 25 = 100 GB/s each (a mesh), not one 100 GB/s port to an NVSwitch."""
    text = ("        GPU0    GPU1    GPU2    GPU3    CPU Affinity    NUMA Affinity\n"
            "GPU0     X      NV4     NV4     NV4     0-31            0\n"
            "GPU1    NV4      X      NV4     NV4     0-31            0\n"
            "GPU2    NV4     NV4      X      NV4     0-31            0\n"
            "GPU3    NV4     NV4     NV4      X      0-31            0\n")
    from rankmap.solver.formats.nvsmi import parse_topo_matrix

    G = parse_topo_matrix(text, gpu="a100").to_graph("h")
    assert kinds(G, "nvswitch") == []
    assert nvlink_edges(G) == {frozenset(p): 4 for p in itertools.combinations(range(4), 2)}
    assert {d["bandwidth"] for _, _, d in G.edges(data=True) if d["link"] == "nvlink"} == {100.0}
    # the same matrix for H100 (18 links per GPU) is also a mesh; NV8 on 4 A100s is not possible
    # as a mesh (3 x 8 = 24 > 12): an NVSwitch with 8 x 25 = 200 GB/s per GPU
    G8 = parse_topo_matrix(text.replace("NV4", "NV8"), gpu="a100").to_graph("h")
    assert {G8[g]["h/nvswitch"]["bandwidth"] for g in gpus(G8)} == {200.0}


def test_nvsmi_errors_name_the_line(tmp_path):
    bad = tmp_path / "topo.txt"
    bad.write_text("\tGPU0\tGPU1\n" "GPU0\t X \tNV4\n" "GPU1\tNV4\t FOO \n")
    with pytest.raises(InvalidArgumentError, match=r"line 3: row GPU1, column GPU1: unknown value 'FOO'"):
        read_nvsmi(bad)
    bad.write_text("        GPU0    GPU1\nGPU0     X      NV4\nGPU1    NV4\n")
    with pytest.raises(InvalidArgumentError, match=r"line 3: row GPU1 has 1 cells, expected 2"):
        read_nvsmi(bad)
    bad.write_text("hello\n")
    with pytest.raises(InvalidArgumentError, match="no 'GPU0 GPU1 ...' header"):
        read_nvsmi(bad)
    with pytest.raises(InvalidArgumentError, match="does not exist"):
        read_nvsmi(tmp_path / "missing.txt")
    with pytest.raises(InvalidArgumentError, match="unknown GPU generation 'x100'"):
        read_nvsmi(A100, gpu="x100")


def test_nvsmi_ansi_header_and_soc_label():
    text = ("\t\x1b[4mGPU0\tGPU1\tmlx5_0\tCPU Affinity\x1b[0m\n"
            "GPU0\t X \tSOC\tPHB\t0-9\n"
            "GPU1\tSOC\t X \tSOC\t10-19\n"
            "mlx5_0\tPHB\tSOC\t X \n")
    from rankmap.solver.formats.nvsmi import parse_topo_matrix

    G = parse_topo_matrix(text, gpu="v100").to_graph("h")
    assert len(gpus(G)) == 2
    assert widest(G, "h/gpu0", "h/gpu1") == default_rates(resolve_generation("v100"))["sys"]


# ---------------------------------------------------------------- NCCL XML


def test_ibm_h100_vm_dump():
    G = read_nccl_xml(IBM_XML)
    assert G.graph["gpu"] == "h100"  # from sm="90"
    assert len(gpus(G)) == 8 and len(kinds(G, "nic")) == 8 and len(kinds(G, "cpu")) == 2
    assert {G.nodes[n]["port_bandwidth"] for n in kinds(G, "nic")} == {25.0}  # speed="200000" Mb/s
    sw = "host0/nvswitch"
    assert {G[g][sw]["nvlinks"] for g in gpus(G)} == {18}  # 5 + 5 + 4 + 4 to four NVSwitch chips
    assert {G[g][sw]["bandwidth"] for g in gpus(G)} == {450.0}
    # NIC names count down: mlx5_7 shares GPU0's bridge
    islands = pcie_islands(G)
    assert {"gpu0", "nic:mlx5_7"} in islands and {"gpu7", "nic:mlx5_0"} in islands
    # link_width="0" endpoints count as x16 (NCCL); the virtual 2.5 GT/s x1 bridges are kept
    assert G["host0/gpu0"]["host0/pci:0000:a1:00.0"]["bandwidth"] == pytest.approx(63.04)
    assert G["host0/cpu0"]["host0/pci:0000:a1:00.0"]["bandwidth"] == 0.25
    assert G["host0/cpu0"]["host0/cpu1"]["bandwidth"] == 22.0  # Sapphire Rapids (modelid 143): SRP_QPI_BW
    # 8 NICs in use: each GPU links to the NIC behind its bridge, min(63.04, port 25) = 25
    assert G["host0/gpu0"]["host0/nic:mlx5_7"]["bandwidth"] == 25.0
    assert {x for x in G["host0/nic:mlx5_7"]} == {"host0/gpu0"}
    assert G.nodes["host0/nic:mlx5_7"]["pcie_parent"] == "pci:0000:a1:00.0"
    assert forest_after_twins(G)


def test_p4d_handwritten_with_comments():
    G = read_nccl_xml(P4D_XML)
    assert len(gpus(G)) == 8 and len(kinds(G, "nic")) == 4
    assert [G.nodes[n]["local_index"] for n in gpus(G)] == list(range(8))
    assert G.nodes["host0/gpu0"]["pci_bus_id"] == "0000:10:1c.0"
    assert G.nodes["host0/gpu7"]["pci_bus_id"] == "0000:a0:1d.0"
    assert pcie_islands(G) == [{"gpu0", "gpu1", "nic:nic0"}, {"gpu2", "gpu3", "nic:nic1"},
                               {"gpu4", "gpu5", "nic:nic2"}, {"gpu6", "gpu7", "nic:nic3"}]
    assert route_bw(G, "host0/gpu0", "host0/gpu1") == pytest.approx(0.985 * 16)  # 8 GT/s x16
    assert route_bw(G, "host0/gpu0", "host0/gpu4") == 10.0  # Skylake (modelid 85): SKL_QPI_BW
    assert nvlink_edges(G) == {} and any("no <nvlink>" in w for w in G.graph["warnings"])
    # one EFA NIC per GPU pair: both GPUs link to it at min(15.76, 100 Gb/s = 12.5)
    assert {G["host0/gpu0"]["host0/nic:nic0"]["bandwidth"], G["host0/gpu1"]["host0/nic:nic0"]["bandwidth"]} == {12.5}
    assert forest_after_twins(G)


def test_nccl_xml_nvlink_forms_and_errors(tmp_path):
    xml = """<system version="1">
  <!-- two GPUs bridged directly, one NIC -->
  <cpu numaid="0" arch="x86_64" vendor="AuthenticAMD" familyid="25" modelid="1">
    <pci busid="0000:01:00.0" class="0x030200" link_speed="16.0 GT/s PCIe" link_width="16">
      <gpu dev="1" sm="80" rank="1"><nvlink target="0000:02:00.0" count="4" tclass="0x030200"/></gpu>
    </pci>
    <pci busid="0000:02:00.0" class="0x030200" link_speed="16.0 GT/s PCIe" link_width="16">
      <gpu dev="0" sm="80" rank="0"><nvlink target="0000:01:00.0" count="4" tclass="0x030200"/></gpu>
    </pci>
    <nic><net name="ib0" dev="0" speed="400000"/></nic>
  </cpu>
</system>"""
    f = tmp_path / "t.xml"
    f.write_text(xml)
    G = read_nccl_xml(f)
    assert nvlink_edges(G) == {frozenset((0, 1)): 4}
    assert G.nodes["host0/gpu0"]["pci_bus_id"] == "0000:02:00.0"
    assert G.nodes["host0/nic:ib0"]["port_bandwidth"] == 50.0
    f.write_text(xml.replace("</pci>\n    <nic>", "</pcx>\n    <nic>", 1))
    with pytest.raises(InvalidArgumentError, match=r"t.xml line \d+: malformed XML"):
        read_nccl_xml(f)
    f.write_text(xml.replace('count="4" tclass="0x030200"/></gpu>\n    </pci>\n    <pci',
                             'count="x" tclass="0x030200"/></gpu>\n    </pci>\n    <pci', 1))
    with pytest.raises(InvalidArgumentError, match=r"line 5: <nvlink count='x'>"):
        read_nccl_xml(f)


def test_nccl_xml_parallel_links_and_three_sockets(tmp_path):
    """A GPU whose PCIe link and NVLink-C2C both end at its CPU: two parallel links, one edge of
    the summed capacity.  Three sockets: a star through one ``sys`` node (a tree)."""
    cpu = '<cpu numaid="{n}" arch="x86_64" vendor="GenuineIntel" familyid="6" modelid="143">{body}</cpu>'
    gpu0 = ('<pci busid="0000:01:00.0" class="0x030200" link_speed="32.0 GT/s PCIe" link_width="16">'
            '<gpu dev="0" sm="90"><nvlink target="0000:00:00.0" count="10" tclass="0x068001"/></gpu></pci>')
    gpu1 = '<pci busid="0000:02:00.0" class="0x030200" link_speed="32.0 GT/s PCIe" link_width="16"><gpu dev="1" sm="90"/></pci>'
    xml = "<system>" + cpu.format(n=0, body=gpu0) + cpu.format(n=1, body=gpu1) + cpu.format(n=2, body="") + "</system>"
    f = tmp_path / "gh.xml"
    f.write_text(xml)
    G = read_nccl_xml(f)
    e = G["host0/gpu0"]["host0/cpu0"]
    # PCIe Gen5 x16 = 16 x 3.94 = 63.04, plus 10 NVLink 4 links x 25 = 250: 313.04 GB/s
    assert e["bandwidth"] == pytest.approx(63.04 + 250.0) and e["link"] == "pcie+nvlink"
    assert {G["host0/sys"][f"host0/cpu{i}"]["bandwidth"] for i in range(3)} == {22.0}  # SRP_QPI_BW
    assert not G.has_edge("host0/cpu0", "host0/cpu1") and forest_after_twins(G)
    assert route_bw(G, "host0/gpu0", "host0/gpu1") == 22.0


def test_pcie_rate_table():
    assert pcie_rate("16.0 GT/s PCIe", "16", 1.0) == pytest.approx(31.52)
    assert pcie_rate("32 GT/s", "0", 1.0) == pytest.approx(63.04)  # width 0 -> x16, as NCCL
    assert pcie_rate("8 GT/s", 8, 1.0) == pytest.approx(7.88)
    assert pcie_rate(None, None, 31.5) == 31.5


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
    with pytest.raises(InvalidArgumentError, match="flat and lists no nodes; give a nodelist"):
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
    from rankmap.solver.builders import FatTreeTier

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


def test_graph_file_errors(tmp_path):
    with pytest.raises(InvalidArgumentError, match="does not exist"):
        load_graph(tmp_path / "nope.json")
    f = tmp_path / "bad.json"
    f.write_text('{"nodes": [\n {"id": "a"},\n {"id": "b",}\n], "edges": []}')
    with pytest.raises(InvalidArgumentError, match=r"bad.json line 3 column 13: malformed JSON"):
        load_graph(f)
    f.write_text('{"nodes": [{"id": "a"}, {"id": "b"}], "edges": [{"source": "a", "target": "b"}]}')
    with pytest.raises(InvalidArgumentError, match=r"edge \('a', 'b'\) has no 'bandwidth'"):
        load_graph(f)
    f.write_text('{"nodes": [{"id": "a"}, {"id": "b"}], "edges": [{"source": "a", "target": "b", "bandwidth": -1}]}')
    with pytest.raises(InvalidArgumentError, match="bandwidth -1"):
        load_graph(f)
    f.write_text('{"nodes": [{"id": "a"}], "edges": [{"source": "a", "target": "z", "bandwidth": 1}]}')
    with pytest.raises(InvalidArgumentError, match="target 'z' is not a node id"):
        load_graph(f)
    f.write_text("<graphml><graph><node id='a'/></grph></graphml>")
    g = tmp_path / "bad.graphml"
    g.write_text(f.read_text())
    with pytest.raises(InvalidArgumentError, match=r"bad.graphml line 1: malformed GraphML"):
        load_graph(g)


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
