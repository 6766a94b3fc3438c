"""Kubernetes node labels and Kueue Topology objects -> cluster graph (issue 12 item 5).

Samples: ``tests/data/real-inputs/k8s-kueue-topology_...yaml`` is Kueue's published TAS sample
(kubernetes-sigs/kueue, site/static/examples/tas/sample-gpu-queues.yaml); the node lists in
``tests/data/k8s/`` are in ``kubectl get nodes -o json|yaml`` form (core/v1 NodeList), written for
these tests with the label keys of that Kueue sample and of Topograph + GPU Feature Discovery
(their README says so).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rankmap.solver.fabric.cluster import cluster_from_graph
from rankmap.solver.errors import InvalidArgumentError
from rankmap.solver.formats import build_cluster
from rankmap.solver.formats.kubernetes import parse_kubernetes_nodes, parse_kueue_topology, read_kueue_topology

from cli_helpers import bad_input, run  # noqa: E402
from format_helpers import KUEUE, NODES_JSON, forest_after_twins, route_bw

HERE = Path(__file__).resolve().parent
NODES_GB200 = HERE / "data" / "k8s" / "nodes_topograph-gb200_4trays.yaml"




def nodes_doc(*nodes) -> str:
    items = [{"apiVersion": "v1", "kind": "Node", "metadata": {"name": n, "labels": lab},
              "status": {"capacity": {"nvidia.com/gpu": str(g)}}} for n, lab, g in nodes]
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": items}, indent=2)


def test_kueue_sample_levels():
    assert read_kueue_topology(KUEUE) == ["cloud.provider.com/topology-block", "cloud.provider.com/topology-rack",
                                          "kubernetes.io/hostname"]


def test_kubectl_json_with_kueue_levels():
    G = build_cluster(kubernetes_nodes=NODES_JSON, kueue_topology=KUEUE)
    gpus = [n for n, d in G.nodes(data=True) if d["kind"] == "gpu"]
    assert len(gpus) == 8 * 8  # 8 GPU nodes x nvidia.com/gpu 8; control-plane-1 left out
    assert G.graph["gpu"] == "h100"  # from nvidia.com/gpu.product NVIDIA-H100-80GB-HBM3
    assert any("1 nodes without nvidia.com/gpu capacity left out" in w for w in G.graph["warnings"])
    # racks r1, r2 exist in both blocks: qualified by the block
    racks = sorted(n for n, d in G.nodes(data=True) if d.get("kind") == "switch" and ">" in str(n))
    assert racks == ["switch:b1>r1", "switch:b1>r2", "switch:b2>r1", "switch:b2>r2"]
    # rack b1>r1 = gpu-node-01, -02: 2 hosts x 8 NICs x 50 GB/s (H100 ConnectX-7) = 800 GB/s of downlinks,
    # non-blocking: 800 up to block b1; b1 has 2 x 800 = 1600 down and up (to the synthetic root)
    assert G.degree("switch:b1>r1") == 2 * 8 + 1
    assert G["switch:b1>r1"]["switch:b1"]["bandwidth"] == 800.0
    assert G["switch:b1"]["switch:root"]["bandwidth"] == 1600.0
    assert route_bw(G, "gpu-node-01/gpu0", "gpu-node-02/gpu0") == 50.0
    assert route_bw(G, "gpu-node-01/gpu0", "gpu-node-01/gpu5") == 450.0
    assert forest_after_twins(G)
    cl = cluster_from_graph(G)
    assert len(cl.hosts) == 8
    # the same levels named on the command line
    H = build_cluster(kubernetes_nodes=NODES_JSON,
                      topology_labels="cloud.provider.com/topology-block,cloud.provider.com/topology-rack")
    assert sorted(H.edges(data="bandwidth")) == sorted(G.edges(data="bandwidth"))
    # one level only: racks merge across blocks (r1 holds nodes 01, 02, 05, 06)
    R = build_cluster(kubernetes_nodes=NODES_JSON, topology_labels="cloud.provider.com/topology-rack")
    assert G.graph["fabric"]["kind"] == "tree" and R.degree("switch:r1") == 4 * 8 + 1


def test_topograph_gb200_labels_nvlink_domains():
    G = build_cluster(kubernetes_nodes=NODES_GB200)
    assert G.graph["gpu"] == "gb200"
    assert G.graph["fabric"]["name"] == "Topograph fabric.topograph.run/tier-N"
    # tier-1 S-2c5eab0306555424 over the two tier-0 leaves; 2 trays x 4 NICs x 50 = 400 per leaf
    assert G["switch:S-2c5eab036832a42e"]["switch:S-2c5eab0306555424"]["bandwidth"] == 400.0
    # accelerator.topograph.run/domain: trays 1-2 and 3-4 are two NVLink domains at 900 GB/s per GPU
    dom = "7f3c2a10-5b4e-4d6a-9c1e-2b8f0e6d4a91.1"
    assert G.graph["fabric"]["nvlink_domains"]["count"] == 2
    assert G.nodes["gb200-tray-2/gpu3"]["nvlink_domain"] == dom
    assert G.degree(f"nvlink:{dom}") == 8 and G["gb200-tray-1/gpu0"][f"nvlink:{dom}"]["bandwidth"] == 900.0
    assert route_bw(G, "gb200-tray-1/gpu0", "gb200-tray-2/gpu0") == 900.0
    assert route_bw(G, "gb200-tray-1/gpu0", "gb200-tray-3/gpu0") == 50.0
    assert forest_after_twins(G)


def test_detected_families():
    aws = nodes_doc(*[(f"ip-{i}", {"topology.k8s.aws/network-node-layer-1": "nn-a",
                                   "topology.k8s.aws/network-node-layer-2": f"nn-b{i // 2}",
                                   "topology.k8s.aws/network-node-layer-3": f"nn-c{i}"}, 8) for i in range(4)])
    f = parse_kubernetes_nodes(aws, "aws.json")
    assert f.name.startswith("AWS") and f.switches["nn-a"].switches == ["nn-b0", "nn-b1"]
    assert f.switches["nn-c3"].nodes == ["ip-3"] and f.switches["nn-b1"].switches == ["nn-c2", "nn-c3"]
    gke = nodes_doc(*[(f"gke-{i}", {"cloud.google.com/gce-topology-block": "blk",
                                    "cloud.google.com/gce-topology-subblock": f"sb{i % 2}",
                                    "cloud.google.com/gce-topology-host": f"h{i}"}, 4) for i in range(4)])
    f = parse_kubernetes_nodes(gke, "gke.json")
    assert f.name.startswith("GKE") and f.switches["blk"].switches == ["sb0", "sb1"]
    assert f.switches["sb1"].switches == ["h1", "h3"]
    # tier-0 closest to the node: tier-2 is the top
    tg = nodes_doc(("a", {"fabric.topograph.run/tier-0": "l0", "fabric.topograph.run/tier-1": "s0",
                          "fabric.topograph.run/tier-2": "c0"}, 8))
    f = parse_kubernetes_nodes(tg, "tg.json")
    assert f.switches["c0"].switches == ["s0"] and f.switches["s0"].switches == ["l0"]
    assert f.switches["l0"].nodes == ["a"]
    # no known label: one switch, a note
    f = parse_kubernetes_nodes(nodes_doc(("a", {}, 8), ("b", {}, 8)), "plain.json")
    assert f.switches["unlabelled"].nodes == ["a", "b"] and "no topology labels" in f.warnings[0]


def test_kubernetes_malformed(tmp_path):
    with pytest.raises(InvalidArgumentError, match=r"n\.json line 3 column \d+: malformed JSON"):
        parse_kubernetes_nodes('{"items": [\n {"metadata": {"name": "a"}},\n ,]}', "n.json")
    with pytest.raises(InvalidArgumentError, match=r"n\.yaml line 4: malformed YAML"):
        parse_kubernetes_nodes("items:\n- metadata:\n    name: a\n   labels: [\n", "n.yaml")
    dup = nodes_doc(("a", {}, 8), ("b", {}, 8), ("a", {}, 8))
    line = [i for i, x in enumerate(dup.splitlines(), 1) if '"name": "a"' in x][1]  # the second node 'a'
    assert line > 30
    with pytest.raises(InvalidArgumentError, match=rf"n\.json line {line}: node 'a' is listed twice"):
        parse_kubernetes_nodes(dup, "n.json")
    with pytest.raises(InvalidArgumentError, match=r"n\.yaml line 4: GPU count 'four' \(nvidia\.com/gpu\)"):
        parse_kubernetes_nodes("items:\n- kind: Node\n  metadata:\n    name: a\n  status:\n    capacity:\n"
                               "      nvidia.com/gpu: four\n", "n.yaml")
    with pytest.raises(InvalidArgumentError, match=r"n\.yaml line 4: item 0 has no metadata.name"):
        parse_kubernetes_nodes("items:\n- kind: Node\n  metadata:\n    labels: {}\n", "n.yaml")
    with pytest.raises(InvalidArgumentError, match="expected `kubectl get nodes` output"):
        parse_kubernetes_nodes("kind: Pod\nmetadata:\n  name: x\n", "n.yaml")
    many = {f"fabric.topograph.run/tier-{i}": f"s{i}" for i in range(100)}  # hostile: 100 levels
    with pytest.raises(InvalidArgumentError, match="n.json: 100 topology levels; at most 64"):
        parse_kubernetes_nodes(nodes_doc(("a", many, 8)), "n.json")
    with pytest.raises(InvalidArgumentError, match="no node has the topology label 'x.io/rack'"):
        parse_kubernetes_nodes(nodes_doc(("a", {}, 8)), "n.json", levels=["x.io/rack"])
    with pytest.raises(InvalidArgumentError, match=r"hosts have different GPU counts \(4 GPUs: b; 8 GPUs: a\)"):
        p = tmp_path / "mixed.json"
        p.write_text(nodes_doc(("a", {}, 8), ("b", {}, 4)))
        build_cluster(kubernetes_nodes=p)
    with pytest.raises(InvalidArgumentError, match=r"cannot tell the GPU generation .*\(none\); give --gpu"):
        p = tmp_path / "noprod.json"
        p.write_text(nodes_doc(("a", {}, 8)))
        build_cluster(kubernetes_nodes=p)
    assert build_cluster(kubernetes_nodes=p, gpu="a100").graph["gpu"] == "a100"
    # a host topology of 8 GPUs on nodes that report 4: built with 8, said so
    p = tmp_path / "four.json"
    p.write_text(nodes_doc(("a", {}, 4), ("b", {}, 4)))
    from format_helpers import A100

    G = build_cluster(A100, gpu="a100", kubernetes_nodes=p)
    assert any("2 hosts (e.g. 'a': 4 GPUs) report a GPU count other than the 8" in w for w in G.graph["warnings"])


def test_control_characters_are_one_line_errors():
    # PyYAML's reader refuses NUL & co. while the loader is built: still one InvalidArgumentError with the line
    with pytest.raises(InvalidArgumentError, match=r"n.yaml line 2: malformed YAML \(unacceptable character #x0000"):
        parse_kubernetes_nodes("items:\n- \x00\n", "n.yaml")
    from rankmap.solver.formats.safe import load_yaml

    with pytest.raises(InvalidArgumentError, match=r"y.yaml line 3: malformed YAML \(unacceptable character #x0001"):
        load_yaml("a: 1\nb: 2\nc: \x01\n", "y.yaml")


@pytest.mark.parametrize("text, match", [
    ("kind: ResourceFlavor\napiVersion: kueue.x-k8s.io/v1beta1\n", "t.yaml: no Kueue Topology object"),
    ("apiVersion: kueue.x-k8s.io/v1beta1\nkind: Topology\nspec:\n  levels:\n  - nodeLabel: a.io/b\n  - label: c\n",
     r"t.yaml line 6: spec.levels\[1\] has no nodeLabel string"),
    ("apiVersion: kueue.x-k8s.io/v1beta1\nkind: Topology\nspec:\n  levels:\n"
     "  - nodeLabel: a.io/b\n  - nodeLabel: a.io/b\n", r"t.yaml line 4: topology labels .* name a label twice"),
    ("kind: Topology\nmetadata: {name: x}\nspec: {levels: [{nodeLabel: a}]}\n---\n"
     "kind: Topology\nmetadata: {name: y}\nspec: {levels: [{nodeLabel: a}]}\n", r"t.yaml line 5: 2 Topology objects \(x, y\)"),
])
def test_kueue_malformed(text, match):
    with pytest.raises(InvalidArgumentError, match=match):
        parse_kueue_topology(text, "t.yaml")


def test_cli_kubernetes(capsys, tmp_path):
    code, out, err = run(capsys, "cluster", "--kubernetes-nodes", NODES_JSON, "--kueue-topology", KUEUE,
                         "--format", "table")
    assert code == 0, err
    assert "hosts 8  GPUs 64" in out
    bad_input(capsys, "cluster", "--kueue-topology", KUEUE, needle="give --kubernetes-nodes too")
    bad_input(capsys, "cluster", "--kubernetes-nodes", NODES_JSON, "--topology-labels", "bad label!",
        needle="topology label 'bad label!' is not a Kubernetes label key")
    p = tmp_path / "broken.json"
    p.write_text('{"items": [\n  {"metadata": {"name": "a"}\n]}')
    bad_input(capsys, "cluster", "--kubernetes-nodes", p, needle=f"{p} line 3 column")
    code, out, err = run(capsys, "solve", "--kubernetes-nodes", NODES_GB200, "--tp", 4, "--pp", 2,
                         "--time-limit", 2)
    assert code == 0, err


def test_16k_nodes_import_in_seconds(tmp_path):
    """A 16,384-node kubectl JSON (AWS EKS labels, ~20 labels a node) parses in seconds (no per-node
    text search, no n x n structure)."""
    import time

    items = []
    for i in range(16384):
        labels = {"kubernetes.io/hostname": f"ip-10-0-{i // 256}-{i % 256}",
                  "topology.k8s.aws/network-node-layer-1": f"nn-{i // 4096}",
                  "topology.k8s.aws/network-node-layer-2": f"nn-{i // 4096}-{(i // 512) % 8}",
                  "topology.k8s.aws/network-node-layer-3": f"nn-{i // 4096}-{(i // 512) % 8}-{(i // 32) % 16}",
                  "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
                  **{f"example.com/label-{j}": "x" * 16 for j in range(15)}}
        items.append({"kind": "Node", "metadata": {"name": f"ip-10-0-{i // 256}-{i % 256}", "labels": labels},
                      "status": {"capacity": {"cpu": "192", "nvidia.com/gpu": "8"}}})
    p = tmp_path / "nodes16k.json"
    p.write_text(json.dumps({"kind": "List", "items": items}, indent=2))
    t0 = time.perf_counter()
    from rankmap.solver.formats.kubernetes import read_kubernetes_nodes

    fab = read_kubernetes_nodes(p)
    parse_s = time.perf_counter() - t0
    assert len(fab.hosts) == 16384 and fab.name.startswith("AWS")
    # 4 layer-1 nodes, 4 x 8 layer-2, 32 x 16 layer-3 (32 hosts each)
    assert len(fab.switches) == 4 + 32 + 512 and len(fab.switches["nn-3-7-15"].nodes) == 32
    assert parse_s < 30, parse_s  # ~0.7 s on one core; generous for a shared CI machine
    G = build_cluster(kubernetes_nodes=p, gpus_per_node=1, gpu="h100")
    assert sum(1 for _, d in G.nodes(data=True) if d["kind"] == "gpu") == 16384


def test_job_file_takes_the_new_cluster_keys(capsys, tmp_path):
    import shutil

    shutil.copy(NODES_GB200, tmp_path / "nodes.yaml")
    job = tmp_path / "job.yaml"
    job.write_text("kubernetes_nodes: nodes.yaml\nnvlink_domain_rate: 1800\ntp: 4\npp: 2\ntime_limit: 2\n")
    code, out, err = run(capsys, "solve", job)  # the relative path is resolved against the job file
    assert code == 0, err
    assert json.loads(out)["cost"]["total_seconds"] > 0
    job.write_text("kubernetes_nodes: 5\ntp: 4\n")
    bad_input(capsys, "solve", job, needle="job key 'kubernetes_nodes' must be a string, got 5")
