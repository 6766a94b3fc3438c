"""Volcano HyperNode objects -> cluster graph (issue 12 item 5).

Sample: ``tests/data/real-inputs/k8s-volcano-hypernode_8node-3tier-tree_volcano-website.yaml``
(volcano-sh/website, network_topology_aware_scheduling.md): 4 tier-1 HyperNodes of 2 nodes,
2 tier-2, 1 tier-3.
"""

from __future__ import annotations

import json

import pytest

from rankmap.cli import main
from rankmap.solver.fabric.cluster import cluster_from_graph
from rankmap.solver.errors import InvalidArgumentError
from rankmap.solver.formats import build_cluster
from rankmap.solver.formats.volcano import parse_volcano_hypernodes, read_volcano_hypernodes

from format_helpers import VOLCANO, forest_after_twins, route_bw



def hn(name, tier, members, kind="Node", sel="exactMatch"):
    key = "name" if sel == "exactMatch" else "pattern"
    ms = "".join(f"  - type: {kind}\n    selector:\n      {sel}:\n        {key}: "
                 f"\"{m}\"\n" for m in members)
    return (f"apiVersion: topology.volcano.sh/v1alpha1\nkind: HyperNode\nmetadata:\n  name: {name}\nspec:\n"
            f"  tier: {tier}\n  members:\n{ms}")


def test_volcano_sample_tree():
    fab = read_volcano_hypernodes(VOLCANO)
    assert fab.hosts == [f"node-{i}" for i in range(8)]
    assert fab.switches["s0"].nodes == ["node-0", "node-1"] and fab.switches["s0"].role == "tier1"
    assert fab.switches["s4"].switches == ["s0", "s1"] and fab.switches["s6"].switches == ["s4", "s5"]
    assert fab.switches["s5"].line == 84  # its metadata.name line in the sample
    G = build_cluster(volcano_hypernodes=VOLCANO, gpus_per_node=8, gpu="h100")
    assert sum(1 for _, d in G.nodes(data=True) if d["kind"] == "gpu") == 64
    # tier 1: 2 hosts x 8 NICs x 50 GB/s = 800 down, 800 up (non-blocking); tier 2: 2 x 800 = 1600 up
    assert G["switch:s0"]["switch:s4"]["bandwidth"] == 800.0
    assert G["switch:s4"]["switch:s6"]["bandwidth"] == 1600.0
    assert "switch:root" not in G  # s6 is the one root
    G2 = build_cluster(volcano_hypernodes=VOLCANO, gpus_per_node=8, gpu="h100", oversubscription="2,1")
    assert G2["switch:s0"]["switch:s4"]["bandwidth"] == 400.0
    assert G2["switch:s4"]["switch:s6"]["bandwidth"] == 800.0
    assert route_bw(G, "node-0/gpu0", "node-7/gpu0") == 50.0
    assert forest_after_twins(G)
    assert len(cluster_from_graph(G).hosts) == 8


def nodes_json(tmp_path):
    items = [{"kind": "Node", "metadata": {"name": f"node-{i}", "labels": {"rack": f"r{i // 4}"}},
              "status": {"capacity": {"nvidia.com/gpu": "8"}}} for i in range(8)]
    items[0]["metadata"]["labels"]["nvidia.com/gpu.product"] = "NVIDIA-H100-80GB-HBM3"
    p = tmp_path / "nodes.json"
    p.write_text(json.dumps({"kind": "List", "items": items}, indent=2))
    return p


def test_volcano_regex_and_labels_with_kubernetes_nodes(tmp_path):
    nodes = nodes_json(tmp_path)
    text = (hn("leaf-a", 1, ["^node-[0-3]$"], sel="regexMatch") + "---\n"
            + "apiVersion: topology.volcano.sh/v1alpha1\nkind: HyperNode\nmetadata:\n  name: leaf-b\nspec:\n  tier: 1\n"
              "  members:\n  - type: Node\n    selector:\n      labelMatch:\n        matchLabels:\n          rack: r1\n"
            + "---\n" + hn("spine", 2, ["leaf-a", "leaf-b"], kind="HyperNode"))
    v = tmp_path / "hn.yaml"
    v.write_text(text)
    G = build_cluster(kubernetes_nodes=nodes, volcano_hypernodes=v)  # GPU count and product from the nodes
    assert G.graph["gpu"] == "h100" and len(cluster_from_graph(G).devices) == 64
    assert sorted(n for n in G["switch:leaf-b"] if "/" in n)[:1] == ["node-4/nic:nic0"]
    with pytest.raises(InvalidArgumentError, match=r"hn.yaml line 8: HyperNode 'leaf-a' member 0: regexMatch selects "
                                                   r"among the cluster's nodes; give --kubernetes-nodes"):
        parse_volcano_hypernodes(hn("leaf-a", 1, ["^node-[0-3]$"], sel="regexMatch"), "hn.yaml")


def test_volcano_regex_safety():
    labels = {f"node-{i}": {} for i in range(8)} | {"a" * 40: {}}
    for bad, why in ((r"(a+)+b", "a repeat inside a repeat"), (r"(a|aa)*c", "alternation inside a repeat"),
                     (r"(?=n)node", "backreferences and lookarounds"), (r"a*b*c*", "more than 2 unbounded repeats")):
        with pytest.raises(InvalidArgumentError, match=rf"h.yaml line 8: HyperNode 's0' member 0: regexMatch pattern "
                                                       rf".* uses {why}"):
            parse_volcano_hypernodes(hn("s0", 1, [bad], sel="regexMatch"), "h.yaml", node_labels=labels)
    fab = parse_volcano_hypernodes(hn("s0", 1, ["-[4-7]$"], sel="regexMatch"), "h.yaml", node_labels=labels)
    assert fab.switches["s0"].nodes == ["node-4", "node-5", "node-6", "node-7"]  # Go MatchString: anywhere
    with pytest.raises(InvalidArgumentError, match=r"pattern 'zzz' matches no node"):
        parse_volcano_hypernodes(hn("s0", 1, ["zzz"], sel="regexMatch"), "h.yaml", node_labels=labels)
    with pytest.raises(InvalidArgumentError, match=r"regexMatch pattern '\(' is not a valid regular expression"):
        parse_volcano_hypernodes(hn("s0", 1, ["("], sel="regexMatch"), "h.yaml", node_labels=labels)


def test_volcano_malformed():
    with pytest.raises(InvalidArgumentError, match="h.yaml: no HyperNode object"):
        parse_volcano_hypernodes("kind: Node\nmetadata: {name: a}\n", "h.yaml")
    with pytest.raises(InvalidArgumentError, match=r"h.yaml line 6: HyperNode 's0': spec.tier 0 must be an integer"):
        parse_volcano_hypernodes(hn("s0", 0, ["a"]), "h.yaml")
    with pytest.raises(InvalidArgumentError, match=r"h.yaml line 20: HyperNode 's1' lists HyperNode 'sX', which is "
                                                   "not defined"):
        parse_volcano_hypernodes(hn("s0", 1, ["a"]) + "---\n" + hn("s1", 2, ["sX"], kind="HyperNode"), "h.yaml")
    with pytest.raises(InvalidArgumentError, match=r"HyperNode 's1' \(tier 1\) lists 's0' of tier 1; a member's tier "
                                                   "must be lower"):
        parse_volcano_hypernodes(hn("s0", 1, ["a"]) + "---\n" + hn("s1", 1, ["s0"], kind="HyperNode"), "h.yaml")
    with pytest.raises(InvalidArgumentError, match=r"h.yaml line 16: HyperNode 's0' is defined twice \(first at "
                                                   r"h.yaml line 4\)"):
        parse_volcano_hypernodes(hn("s0", 1, ["a"]) + "---\n" + hn("s0", 1, ["b"]), "h.yaml")
    with pytest.raises(InvalidArgumentError, match=r"h.yaml line 8: HyperNode 's0' member 0: type 'Pod' is not Node"):
        parse_volcano_hypernodes(hn("s0", 1, ["a"], kind="Pod"), "h.yaml")
    with pytest.raises(InvalidArgumentError, match=r"h.yaml line \d+: malformed YAML"):
        parse_volcano_hypernodes(hn("s0", 1, ["a"]) + "  - type: [\n", "h.yaml")
    with pytest.raises(InvalidArgumentError, match="the selector needs exactly one of exactMatch"):
        parse_volcano_hypernodes("kind: HyperNode\nmetadata: {name: s}\nspec:\n  tier: 1\n  members:\n"
                                 "  - type: Node\n    selector: {}\n", "h.yaml")


def test_cli_volcano(capsys, tmp_path):
    code = main(["cluster", "--volcano-hypernodes", str(VOLCANO), "--gpus-per-node", "8", "--gpu", "h100",
                 "--format", "table"])
    out, err = capsys.readouterr()
    assert code == 0 and "hosts 8  GPUs 64" in out, err
    bad = tmp_path / "bad.yaml"
    bad.write_text(hn("s0", "x", ["a"]))
    code = main(["cluster", "--volcano-hypernodes", str(bad), "--gpus-per-node", "8", "--gpu", "h100"])
    out, err = capsys.readouterr()
    assert code == 2 and out == "" and err.count("\n") == 1 and f"{bad} line 6: HyperNode 's0': spec.tier 'x'" in err
    code = main(["cluster", "--volcano-hypernodes", str(VOLCANO), "--fabric", str(VOLCANO)])
    out, err = capsys.readouterr()
    assert code == 2 and "give one network source, not --fabric and --volcano-hypernodes" in err


def test_volcano_kubectl_json_list():
    # kubectl get hypernodes -o json: a List; errors name the line of the HyperNode's name
    items = [{"apiVersion": "topology.volcano.sh/v1alpha1", "kind": "HyperNode", "metadata": {"name": f"leaf{i}"},
              "spec": {"tier": 1, "members": [{"type": "Node", "selector": {"exactMatch": {"name": f"n{2 * i + j}"}}}
                                              for j in range(2)]}} for i in range(2)]
    tops = [{"type": "HyperNode", "selector": {"exactMatch": {"name": f"leaf{i}"}}} for i in range(2)]
    items.append({"apiVersion": "topology.volcano.sh/v1alpha1", "kind": "HyperNode", "metadata": {"name": "top"},
                  "spec": {"tier": 2, "members": tops}})
    text = json.dumps({"apiVersion": "v1", "kind": "List", "items": items}, indent=2)
    fab = parse_volcano_hypernodes(text, "hn.json")
    assert fab.hosts == ["n0", "n1", "n2", "n3"] and fab.switches["top"].switches == ["leaf0", "leaf1"]
    items[2]["spec"]["tier"] = 0
    text = json.dumps({"apiVersion": "v1", "kind": "List", "items": items}, indent=2)
    line = [i for i, x in enumerate(text.splitlines(), 1) if '"name": "top"' in x][0]
    with pytest.raises(InvalidArgumentError, match=rf"hn.json line {line}: HyperNode 'top': spec.tier 0"):
        parse_volcano_hypernodes(text, "hn.json")


def test_volcano_misspelt_kind_is_refused():
    """An object of Volcano's topology API group whose kind is not HyperNode is a typo, refused naming
    the kind and its line (the second document starts at line 13, its name is on line 16; it was skipped: the tree lost that switch with only a 'no common root'
    warning); objects of other API groups are still skipped."""
    bad = hn("s1", 2, ["s0"], kind="HyperNode").replace("kind: HyperNode\nmetadata", "kind: HyperNodes\nmetadata")
    with pytest.raises(InvalidArgumentError, match=r"h.yaml line 16: kind 'HyperNodes' is not a kind of "
                                                   r"topology.volcano.sh/v1alpha1 \(HyperNode\)"):
        parse_volcano_hypernodes(hn("s0", 1, ["a"]) + "---\n" + bad, "h.yaml")
    other = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\n"
    fab = parse_volcano_hypernodes(hn("s0", 1, ["a", "b"]) + "---\n" + other, "h.yaml")
    assert sorted(fab.switches["s0"].nodes) == ["a", "b"]
