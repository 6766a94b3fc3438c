"""Multi-host NVLink domains (issue 12 item 4): gb200, Slurm blocks as NVLink domains,
``nvidia-smi -q`` ClusterUUIDs, the nvlink_domain attribute, the NVL72 builder and example."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rankmap.solver.fabric.builders import nvl72_cluster
from rankmap.solver.fabric.cluster import cluster_from_graph
from rankmap.solver.errors import InvalidArgumentError
from rankmap.solver.formats import bandwidth_levels, build_cluster, load_graph
from rankmap.solver.formats.common import GENERATIONS, resolve_generation
from rankmap.solver.formats.nvlink import parse_nvsmi_query

from rankmap.solver.formats import parse_nccl_xml

from cli_helpers import bad_input, run  # noqa: E402
from format_helpers import A100, BLOCK, IBM_XML, forest_after_twins, route_bw

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "clusters" / "gb200-nvl72-2racks.json"
EXAMPLE_CONF = ROOT / "examples" / "clusters" / "gb200-nvl72-2racks.topology.conf"




def test_gb200_is_its_own_generation():
    g = resolve_generation("gb200")
    assert g.name == "gb200" and g is not GENERATIONS["b200"]
    assert g.nvlink == 50.0 and g.links == 18 and g.links * g.nvlink == 900.0  # NVLink 5, per direction
    assert g.nvlink_domain and not GENERATIONS["b200"].nvlink_domain
    assert resolve_generation("NVIDIA-GB200").name == "gb200"
    assert resolve_generation("b200").name == "b200"
    G = build_cluster(gpus_per_node=4, gpu="gb200", nodelist="a")
    assert G.graph["gpu"] == "gb200"


def test_nccl_xml_sm100_arm_is_gb200():
    # the IBM H100 dump with its GPUs made sm=100: x86 CPUs -> B200 (said so), Arm CPUs -> GB200 (Grace)
    text = IBM_XML.read_text().replace('sm="90"', 'sm="100"')
    b = parse_nccl_xml(text, source="x86.xml")
    assert b.gpu == "b200" and any("B200 assumed" in w for w in b.warnings)
    arm = text.replace('arch="x86_64" vendor="GenuineIntel"', 'arch="arm64" vendor="ARM"')
    g = parse_nccl_xml(arm, source="arm.xml")
    assert g.gpu == "gb200" and any("GB200 (Grace Blackwell) assumed" in w for w in g.warnings)
    assert parse_nccl_xml(arm, gpu="b200", source="arm.xml").gpu == "b200"  # --gpu wins
    assert parse_nccl_xml(arm.replace('sm="100"', 'sm="103"'), source="arm.xml").gpu == "gb300"
    g3 = resolve_generation("gb300")
    assert g3.name == "gb300" and g3.nvlink_domain and g3.nic == 100.0 and resolve_generation("b300").name == "b300"


def test_slurm_blocks_are_nvlink_domains_gb200():
    G = build_cluster(gpus_per_node=4, gpu="gb200", fabric=BLOCK)
    doms = [n for n, d in G.nodes(data=True) if d.get("role") == "nvlink_domain"]
    assert len(doms) == 12  # 12 BlockName= lines
    info = G.graph["fabric"]["nvlink_domains"]
    assert info["count"] == 12 and info["hosts"] == 96 and info["rate_gbps"] == 900.0
    # every GPU of block rack11 (srv[1101-1108]) on nvlink:rack11 at 18 x 50 = 900 GB/s
    rack = [n for n, d in G.nodes(data=True) if d["kind"] == "gpu" and d.get("nvlink_domain") == "rack11"]
    assert len(rack) == 8 * 4
    assert all(G[g]["nvlink:rack11"]["bandwidth"] == 900.0 for g in rack)
    assert G.degree("nvlink:rack11") == 32
    # the host's own NVSwitch is gone (the GPUs' NVLink ports are the rack's)
    assert "srv1101/nvswitch" not in G
    # the NIC tree is unchanged: 8 hosts x 4 NICs x 50 into the block switch, 1600 up
    assert G["switch:rack11"]["switch:block16:0"]["bandwidth"] == 1600.0
    assert route_bw(G, "srv1101/gpu0", "srv1108/gpu3") == 900.0
    assert route_bw(G, "srv1101/gpu0", "srv1201/gpu0") == 50.0
    assert sorted({w for w, _, _ in bandwidth_levels(G)}, reverse=True) == [900.0, 50.0]
    assert forest_after_twins(G)
    cl = cluster_from_graph(G)
    # the cluster model runs at NCCL's calibrated rates (DESIGN §4): GB200's 18 NVLinks at 40.1 of 50 GB/s
    # each, 900 x 0.802 = 721.8 GB/s
    assert cl.widest_levels_gbps[0] == pytest.approx(900.0 * 0.802)
    # the rack domain is the first level: 32 GPUs per level-0 domain
    assert (cl.widest_domains[0] == cl.widest_domains[0][0]).sum() == 32


def test_slurm_blocks_as_network_only():
    G = build_cluster(gpus_per_node=4, gpu="gb200", fabric=BLOCK, block_links="network")
    assert not any(d.get("nvlink_domain") for _, d in G.nodes(data=True))
    assert "srv1101/nvswitch" in G
    assert any("without an NVLink domain" in w for w in G.graph["warnings"])
    with pytest.raises(InvalidArgumentError, match="block_links"):
        build_cluster(gpus_per_node=4, gpu="gb200", fabric=BLOCK, block_links="nvl")


def test_domain_rate_sources():
    # H100 hosts: the GPU's NVSwitch edge of the host, 18 x 25 = 450
    G = build_cluster(gpus_per_node=4, gpu="h100", fabric=BLOCK)
    assert G.graph["fabric"]["nvlink_domains"]["rate_gbps"] == 450.0
    # explicit: every domain edge at the given rate
    G = build_cluster(gpus_per_node=4, gpu="gb200", fabric=BLOCK, nvlink_domain_rate="1800")
    assert {d["bandwidth"] for _, _, d in G.edges("nvlink:rack62", data=True)} == {1800.0}
    assert G.graph["fabric"]["nvlink_domains"]["rate_from"] == "--nvlink-domain-rate"
    with pytest.raises(InvalidArgumentError, match="nvlink domain rate '-5' must be a positive number"):
        build_cluster(gpus_per_node=4, gpu="gb200", fabric=BLOCK, nvlink_domain_rate="-5")
    with pytest.raises(InvalidArgumentError, match="no input places any host in an NVLink domain"):
        build_cluster(gpus_per_node=4, gpu="gb200", nodelist="n[1-2]", nvlink_domain_rate=900)
    # PCIe-only GPUs: blocks stay network blocks, with a note
    G = build_cluster(gpus_per_node=4, gpu="l40s", fabric=BLOCK)
    assert "nvlink_domains" not in G.graph["fabric"]
    assert any("have no NVSwitch" in w for w in G.graph["warnings"])


def test_host_topology_in_domain_a100():
    # the real HGX A100 matrix: its NV12 NVSwitch edges (12 x 25 = 300) give the domain rate
    G = build_cluster(A100, gpu="a100", nodelist="h[1-2]", nvlink_domains={"h1": "d", "h2": "d"})
    assert G.graph["fabric"]["nvlink_domains"]["rate_gbps"] == 300.0
    assert route_bw(G, "h1/gpu0", "h2/gpu7") == 300.0
    assert not [n for n in G if str(n).endswith("/nvswitch")]


NVSMI_Q = """\
node01: ==============NVSMI LOG==============
node01:     Product Name                          : NVIDIA GB200
node01:     Fabric
node01:         State                             : Completed
node01:         Status                            : Success
node01:         CliqueId                          : 32766
node01:         ClusterUUID                       : 8a3c9f0e-6b1d-4f2a-9c3e-5d7b1a2e4f60
node01:     Fabric
node01:         CliqueId                          : 32766
node01:         ClusterUUID                       : 8a3c9f0e-6b1d-4f2a-9c3e-5d7b1a2e4f60
node02:         CliqueId                          : 32766
node02:         ClusterUUID                       : 8a3c9f0e-6b1d-4f2a-9c3e-5d7b1a2e4f60
node03:         ClusterUUID                       : 11111111-2222-3333-4444-555555555555
node04:         ClusterUUID                       : N/A
"""


def test_nvsmi_query_cluster_uuid(tmp_path):
    d = parse_nvsmi_query(NVSMI_Q, "q.txt")
    assert d == {"node01": "8a3c9f0e-6b1d-4f2a-9c3e-5d7b1a2e4f60.32766",
                 "node02": "8a3c9f0e-6b1d-4f2a-9c3e-5d7b1a2e4f60.32766",
                 "node03": "11111111-2222-3333-4444-555555555555"}
    assert parse_nvsmi_query("# host domain\nn1 rackA\nn2 rackA\n") == {"n1": "rackA", "n2": "rackA"}
    single = "==============NVSMI LOG==============\nGPU 00000000:01:00.0\n    Fabric\n        ClusterUUID : abc\n"
    assert parse_nvsmi_query(single, hosts=["only"]) == {"only": "abc"}
    with pytest.raises(InvalidArgumentError,
                       match=r"q line 2: host 'n1' reports ClusterUUID 'b' here but 'a' on line 1"):
        parse_nvsmi_query("n1:   ClusterUUID : a\nn1:   ClusterUUID : b\n", "q")
    with pytest.raises(InvalidArgumentError, match="q line 1: a ClusterUUID line without a 'HOST:' prefix"):
        parse_nvsmi_query("   ClusterUUID : a\n", "q", hosts=["a", "b"])
    with pytest.raises(InvalidArgumentError, match="q: no host with an NVLink domain"):
        parse_nvsmi_query("n1:   ClusterUUID : N/A\n", "q")
    # through build_cluster: node01 + node02 share a domain, node03 alone, node04 in none
    p = tmp_path / "q.txt"
    p.write_text(NVSMI_Q)
    G = build_cluster(gpus_per_node=4, gpu="gb200", nodelist="node[01-04]", nvlink_domains=p)
    assert G.graph["fabric"]["nvlink_domains"] == {"count": 2, "hosts": 3, "rate_gbps": 900.0,
                                                   "rate_from": "the GPUs' links to the host's NVSwitch"}
    assert route_bw(G, "node01/gpu0", "node02/gpu3") == 900.0
    assert route_bw(G, "node01/gpu0", "node03/gpu0") == 50.0
    assert "node04/nvswitch" in G and G.nodes["node04/gpu0"].get("nvlink_domain") is None


def test_cluster_from_graph_validates_nvlink_domain():
    G = nvl72_cluster(1, hosts_per_rack=2)
    G.nodes["r0t01/gpu2"]["nvlink_domain"] = 7
    with pytest.raises(InvalidArgumentError, match=r"GPU 'r0t01/gpu2' has nvlink_domain 7; it must be a non-empty"):
        cluster_from_graph(G)
    G.nodes["r0t01/gpu2"]["nvlink_domain"] = "  "
    with pytest.raises(InvalidArgumentError, match="GPU 'r0t01/gpu2' has nvlink_domain"):
        cluster_from_graph(G)


def test_nvl72_builder():
    G = nvl72_cluster(2)
    gpus = [n for n, d in G.nodes(data=True) if d["kind"] == "gpu"]
    assert len(gpus) == 2 * 18 * 4
    assert G.degree("nvlink:rack0") == 72 and G["r0t00/gpu0"]["nvlink:rack0"]["bandwidth"] == 900.0
    # 36 trays, 9 per leaf -> 4 leaves; 9 x 4 NICs x 50 = 1800 GB/s down, 900 up at 2:1
    assert G.nodes["switch:leaf0"]["downlink_gbps"] == 1800.0
    assert G["switch:leaf3"]["switch:spine"]["bandwidth"] == 900.0
    assert {G.nodes[g]["nvlink_domain"] for g in gpus} == {"rack0", "rack1"}
    assert forest_after_twins(G)
    cl = cluster_from_graph(G)
    # calibrated rates (DESIGN §4): the builder names no GPU generation, so NVLink at the default 20 of 25 GB/s
    # per port, 900 x 0.8 = 720; a 400G NIC carries 48 of its 50 GB/s (x0.96)
    assert list(cl.widest_levels_gbps) == pytest.approx([900.0 * 0.8, 50.0 * 0.96])
    with pytest.raises(InvalidArgumentError, match="racks 0 must be an integer >= 1"):
        nvl72_cluster(0)


def test_nvl72_example_reproducible(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(ROOT)  # the README's command runs from the repository root (the path is in graph.sources)
    out = tmp_path / "nvl72.json"
    code, _, err = run(capsys, "cluster", "--gpus-per-node", 4, "--gpu", "gb200", "--fabric",
                       "examples/clusters/gb200-nvl72-2racks.topology.conf", "-o", out)
    assert code == 0, err
    assert out.read_text() == EXAMPLE.read_text()
    G = load_graph(EXAMPLE)
    assert sum(1 for _, d in G.nodes(data=True) if d["kind"] == "gpu") == 144
    assert {d["bandwidth"] for _, _, d in G.edges("nvlink:nvl72-rack1", data=True)} == {900.0}
    assert G.degree("nvlink:nvl72-rack1") == 72
    cl = cluster_from_graph(G)
    # calibrated rates (DESIGN §4), --gpu gb200: NVLink 900 x 0.802 = 721.8 (40.1 of 50 GB/s per port), NIC 50 x 0.96 = 48
    assert list(cl.widest_levels_gbps) == pytest.approx([900.0 * 0.802, 50.0 * 0.96])


def test_cli_nvlink_flags(capsys, tmp_path):
    code, out, err = run(capsys, "cluster", "--gpus-per-node", 4, "--gpu", "gb200", "--fabric", EXAMPLE_CONF,
                         "--nvlink-domain-rate", "1000", "--format", "table")
    assert code == 0 and "NVLink domains 2" in out
    bad_input(capsys, "cluster", "--gpus-per-node", 4, "--gpu", "gb200", "--fabric", EXAMPLE_CONF,
        "--nvlink-domain-rate", "fast", needle="nvlink domain rate 'fast'")
    q = tmp_path / "q.txt"
    q.write_text("n1: ClusterUUID : a\nn1: ClusterUUID : b\n")
    bad_input(capsys, "cluster", "--gpus-per-node", 4, "--gpu", "gb200", "--nodelist", "n[1-2]", "--nvlink-domains", q,
        needle=f"{q} line 2: host 'n1' reports ClusterUUID 'b'")
    # solve reads the same flags
    code, out, err = run(capsys, "solve", "--gpus-per-node", 4, "--gpu", "gb200", "--fabric", EXAMPLE_CONF,
                         "--tp", 8, "--pp", 2, "--time-limit", 2)
    assert code == 0, err
    assert json.loads(out)["cost"]["total_seconds"] > 0
