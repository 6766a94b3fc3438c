"""Topograph's switch/block model -> cluster graph (issue 12 items 4, 5).

Samples (Apache-2.0, NVIDIA/topograph ``tests/models/``; see tests/data/topograph/README.md):
``model_nvl72_topograph.yaml`` (core -> 2 spines -> 4 leaves, each leaf one block of 18 nodes
with an accelerator domain nvl-X-Y), ``model_medium_topograph.yaml`` (3 levels, 4 blocks of 2
nodes with hostlist names ``[1101-1102]``), ``model_medium-block-v1_topograph.yaml`` (the earlier
shape: switch list + capacity_blocks with ``nvlink`` and ``type: H100``).
"""

from __future__ import annotations


import pytest

from rankmap.cli import main
from rankmap.solver.fabric.cluster import cluster_from_graph
from rankmap.solver.errors import InvalidArgumentError
from rankmap.solver.formats import build_cluster
from rankmap.solver.formats.topograph import parse_topograph_model, read_topograph_model

from format_helpers import NVL72, forest_after_twins, route_bw

D = NVL72.parent
MEDIUM = D / "model_medium_topograph.yaml"
V1 = D / "model_medium-block-v1_topograph.yaml"


def test_nvl72_model():
    fab = read_topograph_model(NVL72)
    assert len(fab.hosts) == 4 * 18 and fab.switches["core"].switches == ["spine-1", "spine-2"]
    assert fab.switches["leaf-2-2"].nodes[0] == "node2201" and fab.domains["node2218"] == "nvl-2-2"
    G = build_cluster(topograph_model=NVL72, gpus_per_node=4, gpu="gb200")
    info = G.graph["fabric"]["nvlink_domains"]
    assert info["count"] == 4 and info["hosts"] == 72 and info["rate_gbps"] == 900.0
    assert G.degree("nvlink:nvl-1-1") == 18 * 4
    # leaf: 18 trays x 4 NICs x 50 = 3600 GB/s down and up (non-blocking); spine 2 x 3600 = 7200
    assert G["switch:leaf-1-1"]["switch:spine-1"]["bandwidth"] == 3600.0
    assert G["switch:spine-1"]["switch:core"]["bandwidth"] == 7200.0
    assert route_bw(G, "node1101/gpu0", "node1118/gpu3") == 900.0
    assert route_bw(G, "node1101/gpu0", "node1201/gpu0") == 50.0
    assert forest_after_twins(G)
    # the cluster model's calibrated rates (DESIGN §4), gb200: NVLink 900 x 0.802 = 721.8, NIC 50 x 0.96 = 48
    assert list(cluster_from_graph(G).widest_levels_gbps) == pytest.approx([900.0 * 0.802, 50.0 * 0.96])


def test_medium_and_v1_models():
    fab = read_topograph_model(MEDIUM)
    assert fab.hosts == ["1101", "1102", "1201", "1202", "1301", "1302", "1401", "1402"]
    assert fab.switches["sw3"].switches == ["sw21", "sw22"] and fab.domains["1402"] == "nvl4"
    v1 = read_topograph_model(V1)
    assert len(v1.hosts) == 16 and v1.switches["ibleaf2"].nodes[:1] == ["n3-1"]
    assert v1.domains["n4-4"] == "nv4" and v1.host_products["n1-1"] == "H100"
    G = build_cluster(topograph_model=V1, gpus_per_node=8)  # type: H100 gives the generation
    assert G.graph["gpu"] == "h100" and G.graph["fabric"]["nvlink_domains"]["rate_gbps"] == 450.0
    # ibleaf1: 8 hosts x 8 NICs x 50 = 3200 GB/s up to spine1
    assert G["switch:ibleaf1"]["switch:spine1"]["bandwidth"] == 3200.0


_CHAIN = "switches:\n" + "".join(f"  s{i}: {{switches: [s{i + 1}]}}\n" for i in range(3000))


@pytest.mark.parametrize("text, match", [
    ("foo: 1\n", r"m.yaml line 1: not a Topograph model"),
    ("switches:\n  s1:\n    switches: [l1]\nblocks:\n- switch: leafX\n  nodes: [a]\n",
     r"m.yaml line 5: block 0 references unknown switch 'leafX'"),
    ("switches:\n  s1:\n    switches: [l1, l2]\nblocks:\n- switch: l1\n  nodes: [a]\n- switch: l2\n  nodes: [a]\n",
     r"m.yaml line 7: node 'a' belongs to more than one block \(also m.yaml line 5\)"),
    ("switches:\n  s1:\n    switches: [l1]\n  s2:\n    switches: [l1]\nblocks:\n- switch: l1\n  nodes: [a]\n",
     r"switch 'l1' has two parent switches 's1' and 's2'"),
    ("switches:\n- name: ibleaf1\n  capacity_blocks: [cb9]\ncapacity_blocks: []\n",
     r"m.yaml line 2: switch 'ibleaf1' lists capacity block 'cb9'"),
    ("switches:\n  s1:\n    switches: [l1]\nblocks:\n- switch: l1\n  nodes: []\n",
     r"m.yaml line 5: block must declare at least one node"),
    ('blocks:\n- nodes: ["n[1-"]\n', r"m.yaml line 2: nodes: hostlist 'n\[1-': '\[' is never closed"),
    (_CHAIN + "blocks:\n- switch: s3000\n  nodes: [a]\n", r"the switch tree below 's\d+' is more than 64 levels deep"),
    ("switches:\n  s1:\n  switches: [l1\n", r"m.yaml line 4: malformed YAML"),
], ids=["not-a-model", "unknown-switch", "node-in-two-blocks", "two-parents", "unknown-capacity-block",
        "empty-block", "bad-hostlist", "deep-chain", "malformed-yaml"])
def test_malformed(text, match):
    with pytest.raises(InvalidArgumentError, match=match):
        parse_topograph_model(text, "m.yaml")


def test_cli(capsys, tmp_path):
    code = main(["cluster", "--topograph-model", str(NVL72), "--gpus-per-node", "4", "--gpu", "gb200",
                 "--format", "table"])
    out, err = capsys.readouterr()
    assert code == 0 and "hosts 72  GPUs 288" in out and "NVLink domains 4" in out, err
    bad = tmp_path / "bad.yaml"
    bad.write_text("switches:\n  s1:\n    switches: [l1]\nblocks:\n- switch: nope\n  nodes: [a]\n")
    code = main(["cluster", "--topograph-model", str(bad), "--gpus-per-node", "4", "--gpu", "gb200"])
    out, err = capsys.readouterr()
    assert code == 2 and out == "" and err.count("\n") == 1 and f"{bad} line 5: block 0 references" in err
