"""Real-world topology formats -> cluster graph (rankmap.solver.formats, ``rankmap cluster``).

The inputs under ``tests/data/real-inputs`` are public dumps (see their README); the
expected counts and NVLink pairs below were read off those files by hand.  Every edge is a
physical link whose ``bandwidth`` is its capacity in GB/s per direction (DESIGN §2); the
expected capacities are derived by hand in the comments (rates: bandwidths.md).
"""

from __future__ import annotations

import itertools
import re

import pytest

from rankmap.solver.errors import InvalidArgumentError
from rankmap.solver.formats import (
    bandwidth_levels,
    read_nccl_xml,
    read_nvsmi,
)
from rankmap.solver.formats.common import default_rates, pcie_rate, resolve_generation

from format_helpers import (  # noqa: E402
    A100, A30, DGX1, HOPPER, IBM_XML, P4D_XML, RTX, assert_read_fails, forest_after_twins, gpus, kinds,
    nvlink_edges, pcie_islands, read_matrix, route_bw, widest,
)


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
    # GPU0 has three NICs on its PIX switch, all equally near, behind its one PCIe Gen5 x16 link (63 GB/s, 48 to
    # NCCL: topo.cc kvDictPciGen): NCCL's ring search puts one 48 GB/s channel through it (search.cc
    # ncclTopoFollowPath) and its sends use mlx5_0 (ncclTopoGetLocalNet, channel 0): linked to mlx5_0 alone at
    # min(63, NDR 400 Gb/s = 50) = 50; mlx5_1 and mlx5_2 stay on the PCIe switch, off the fabric, with a warning
    assert {x for x in G["host0/gpu0"] if "nic" in x} == {"host0/nic:mlx5_0"}
    assert G["host0/gpu0"]["host0/nic:mlx5_0"]["bandwidth"] == 50.0
    assert [G.nodes[f"host0/nic:mlx5_{i}"]["fabric_port"] for i in range(3)] == [True, False, False]
    assert any("GPU gpu0: NICs mlx5_1, mlx5_2 share its 63 GB/s PCIe link" in w for w in G.graph["warnings"])
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
            # all the nearest, or those NCCL drives through the GPU's own PCIe link (HostTemplate, with a warning)
            assert linked == near or (linked < near and any(f"GPU {node(a).split('/')[1]}: NICs" in w
                                                            for w in G.graph["warnings"])), a
            for n in linked:
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


@pytest.mark.parametrize("text, match", [
    ("\tGPU0\tGPU1\n" "GPU0\t X \tNV4\n" "GPU1\tNV4\t FOO \n", r"line 3: row GPU1, column GPU1: unknown value 'FOO'"),
    ("        GPU0    GPU1\nGPU0     X      NV4\nGPU1    NV4\n", r"line 3: row GPU1 has 1 cells, expected 2"),
    ("hello\n", "no 'GPU0 GPU1 ...' header"),
    (None, "does not exist"),
])
def test_nvsmi_errors_name_the_line(tmp_path, text, match):
    assert_read_fails(read_nvsmi, tmp_path / "topo.txt", text, match)


def test_nvsmi_unknown_gpu_generation():
    assert_read_fails(read_nvsmi, A100, None, "unknown GPU generation 'x100'", gpu="x100")


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




def test_gpu_of_another_family_than_the_nccl_xml_is_refused(capsys):
    """An sm90 NCCL XML: --gpu a100 (sm80) contradicts it (refused, naming both); --gpu h200 (sm90) is the
    documented override of the generation (README "NVLinks a file leaves out")."""
    from cli_helpers import bad_input, run

    from rankmap.solver.formats.nccl_xml import parse_nccl_xml

    xml = IBM_XML
    err = bad_input(capsys, "cluster", "--host-topology", str(xml), "--gpu", "a100",
                    needle="--gpu a100 (A100, sm80) contradicts")
    assert "whose GPUs are sm=90 (H100); give --gpu h100 or h20 or h200 or h800, or leave it out" in err
    code, out, _err = run(capsys, "cluster", "--host-topology", str(xml), "--gpu", "h200", "--format", "table")
    assert code == 0 and "8x h200" in out
    assert parse_nccl_xml(xml.read_text(), gpu="25") is not None  # an explicit NVLink rate: no family to check
