"""``ibnetdiscover`` output -> cluster graph (issue 12 item 5).

Sample: ``tests/data/real-inputs/ibnetdiscover_ndr-superpod-2leaf-excerpt_topograph-test.out``
(NVIDIA/topograph tests/output/ibnetdiscover/example.out, first 2 switch blocks): leaves
leaf-04-04 (17 named hosts + a SHARP aggregation node) and leaf-04-02 (11 named hosts, 5 HCAs
with the vendor default description, an aggregation node), each with 2 NDR cables to each of
8 spines.
"""

from __future__ import annotations


import pytest

from rankmap.cli import main
from rankmap.solver.fabric.cluster import cluster_from_graph
from rankmap.solver.errors import InvalidArgumentError
from rankmap.solver.formats import build_cluster
from rankmap.solver.formats.ibnetdiscover import link_gbps, parse_ibnetdiscover, read_ibnetdiscover

from format_helpers import IB, forest_after_twins, route_bw


def test_link_rates():
    # width x per-lane data rate / 8 (bandwidths.md §3)
    assert link_gbps("4xNDR") == 50.0 and link_gbps("4xHDR") == 25.0 and link_gbps("2xNDR") == 25.0
    assert link_gbps("4xEDR") == 12.5 and link_gbps("4xXDR") == 100.0 and link_gbps("1xSDR") == 0.25
    assert link_gbps("4xZZZ") is None and link_gbps("3xNDR") is None and link_gbps("999999xNDR") is None


def test_sample_tree():
    fab = read_ibnetdiscover(IB)
    assert len(fab.hosts) == 17 + 11
    assert fab.switches["leaf-04-04"].nodes[:2] == ["node101", "node102"]
    assert fab.switches["leaf-04-02"].nodes[-1] == "node218" and "node205" not in fab.hosts  # default description
    # the 8 spines share both leaves (ECMP): one logical switch; 2 cables x 4xNDR (50 GB/s) to each of
    # 8 spines, summed: an 800 GB/s trunk per leaf
    spines = [s for s in fab.switches.values() if s.role == "level1"]
    assert [s.name for s in spines] == ["spine-02+7"]
    assert spines[0].trunk_gbps == {"leaf-04-04": 800.0, "leaf-04-02": 800.0}
    assert any("8 level-1 switches (spine-02 ... spine-09) share" in w for w in fab.warnings)
    assert fab.switches["leaf-04-04"].port_gbps["node117"] == 50.0
    assert any("7 HCAs report no host name" in w for w in fab.warnings)


def test_sample_cluster_capacities():
    # one H100 with one ConnectX-7 per host: the HCA port the file shows
    G = build_cluster(ibnetdiscover=IB, gpus_per_node=1, gpu="h100")
    assert len(cluster_from_graph(G).devices) == 28
    # leaf-04-04: 17 hosts x 50 GB/s down; 8 spines x 2 x 50 = 800 GB/s up
    assert G["switch:leaf-04-04"]["switch:spine-02+7"]["bandwidth"] == 800.0
    assert G.nodes["switch:leaf-04-04"]["downlink_gbps"] == 850.0
    assert route_bw(G, "node101/gpu0", "node201/gpu0") == 50.0
    assert forest_after_twins(G)
    assert not any("fewer network ports" in w for w in G.graph.get("warnings", []))
    # 8 rail NICs per host but one HCA each in the excerpt: said so
    G8 = build_cluster(ibnetdiscover=IB, gpus_per_node=8, gpu="h100")
    assert any("28 hosts (e.g. 'node101': 1 port(s)) have fewer network ports" in w for w in G8.graph["warnings"])


def test_clos_with_missing_cables_and_rails():
    """Spines that do not reach every leaf (a cable missing) are still one ECMP layer; a host on
    two leaves spreads its NICs in HCA order (mlx5_0 -> its leaf first)."""
    def sw(guid, name, ports):
        lines = [f'Switch\t8 "S-{guid}"\t\t# "MF0;{name}:MQM9700/U1" enhanced port 0 lid 1 lmc 0']
        for p, (peer, pp, desc) in enumerate(ports, 1):
            lines.append(f'[{p}]\t"{peer}"[{pp}]\t\t# "{desc}" lid 2 4xNDR')
        return "\n".join(lines) + "\n\n"

    text = (sw("a1", "leaf-a", [("H-01", 1, "h1 mlx5_1"), ("H-02", 1, "h2 mlx5_0"), ("S-s1", 1, "s1"),
                                ("S-s2", 1, "s2")])
            + sw("a2", "leaf-b", [("H-03", 1, "h1 mlx5_0"), ("H-04", 1, "h2 mlx5_1"), ("S-s1", 2, "s1")]))
    fab = parse_ibnetdiscover(text, "clos.out")
    assert [s.name for s in fab.switches.values() if s.role == "level1"] == ["s1+1"]
    # leaf-a: one cable to s1 and one to s2 = 100; leaf-b only to s1 = 50 (its cable to s2 is missing)
    assert fab.switches["s1+1"].trunk_gbps == {"leaf-a": 100.0, "leaf-b": 50.0}
    assert fab.leaves_of()["h1"] == ["leaf-b", "leaf-a"]  # mlx5_0 is on leaf-b
    G = build_cluster(ibnetdiscover=None, fabric=fab, gpus_per_node=2, gpu="h100")
    assert G["h1/nic:nic0"]["switch:leaf-b"]["bandwidth"] == 50.0 and "switch:leaf-a" in G["h1/nic:nic1"]
    assert forest_after_twins(G) and len(cluster_from_graph(G).hosts) == 2


def test_malformed():
    head = 'Switch\t4 "S-1"\t\t# "MF0;leaf-a:X/U1" enhanced port 0 lid 1 lmc 0\n'
    with pytest.raises(InvalidArgumentError,
                       match=r"ib.out line 2: 'garbage here' is not an ibnetdiscover node header"):
        parse_ibnetdiscover(head + "garbage here\n", "ib.out")
    with pytest.raises(InvalidArgumentError, match="ib.out line 1: port line before any Switch/Ca header"):
        parse_ibnetdiscover('[1]\t"H-2"[1](2)\t\t# "n1 mlx5_0" lid 3 4xNDR\n', "ib.out")
    with pytest.raises(InvalidArgumentError, match=r"ib.out line 2: unknown link rate 4xQQR"):
        parse_ibnetdiscover(head + '[1]\t"H-2"[1](2)\t\t# "n1 mlx5_0" lid 3 4xQQR\n', "ib.out")
    with pytest.raises(InvalidArgumentError, match=r"ib.out line 2: link S-1\[1\] - H-2\[1\] has no rate"):
        parse_ibnetdiscover(head + '[1]\t"H-2"[1](2)\t\t# "n1 mlx5_0" lid 3\n', "ib.out")
    with pytest.raises(InvalidArgumentError, match="no Switch or Ca block"):
        parse_ibnetdiscover("# nothing\nvendid=0x2c9\n", "ib.out")
    with pytest.raises(InvalidArgumentError, match="no HCA with a host name"):
        parse_ibnetdiscover(head + '[1]\t"H-2"[1](2)\t\t# "MT4129 ConnectX7   Mellanox Technologies" lid 3 4xNDR\n',
                            "ib.out")
    # a Ca block alone (the HCA side of the cable) is read too, counted once with the switch side
    ca = 'Ca\t1 "H-2"\t\t# "n1 mlx5_0"\n[1](2) \t"S-1"[1]\t\t# lid 3 lmc 0 "MF0;leaf-a:X/U1" lid 1 4xHDR\n'
    fab = parse_ibnetdiscover(head + '[1]\t"H-2"[1](2)\t\t# "n1 mlx5_0" lid 3 4xHDR\n\n' + ca, "ib.out")
    assert fab.hosts == ["n1"] and fab.switches["leaf-a"].port_gbps == {"n1": 25.0} and fab.host_links == {"n1": 1}


def test_cli(capsys, tmp_path):
    code = main(["cluster", "--ibnetdiscover", str(IB), "--gpus-per-node", "1", "--gpu", "h100", "--format", "table"])
    out, err = capsys.readouterr()
    assert code == 0 and "hosts 28  GPUs 28" in out, err
    bad = tmp_path / "bad.out"
    bad.write_text('Switch 2 "S-1" # "x"\n[1] "H-2"[1] # "n1 mlx5_0" lid 2 4xNDR\n[2 oops\n')
    code = main(["cluster", "--ibnetdiscover", str(bad), "--gpus-per-node", "1", "--gpu", "h100"])
    out, err = capsys.readouterr()
    assert code == 2 and out == "" and err.count("\n") == 1 and f"{bad} line 3:" in err
