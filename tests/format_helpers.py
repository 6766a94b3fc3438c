"""Shared by the tests/test_formats*.py files and tests/test_service_import.py: sample paths and graph helpers
(and :func:`two_leaf_cluster`, the small random clusters of tests/test_solve.py and tests/test_status.py)."""

from __future__ import annotations

from pathlib import Path

import networkx as nx
import pytest

from rankmap.solver.errors import InvalidArgumentError


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
#: ``kubectl get nodes -o json`` of 8-GPU nodes with Kueue block/rack labels, and the Kueue Topology.
NODES_JSON = DATA.parent / "k8s" / "nodes_kueue-block-rack_8gpu-nodes.json"
KUEUE = DATA / "k8s-kueue-topology_block-rack-hostname-gpu_kueue-sample.yaml"
VOLCANO = DATA / "k8s-volcano-hypernode_8node-3tier-tree_volcano-website.yaml"
IB = DATA / "ibnetdiscover_ndr-superpod-2leaf-excerpt_topograph-test.out"
#: A Topograph model: core -> 2 spines -> 4 leaves, each leaf one NVL72 block of 18 nodes.
NVL72 = DATA.parent / "topograph" / "model_nvl72_topograph.yaml"



# ---------------------------------------------------------------- helpers


def assert_read_fails(reader, path: Path, text: str | None, match: str, **kwargs) -> None:
    """``reader(path, **kwargs)`` with ``text`` written to ``path`` (``None``: left absent) raises
    InvalidArgumentError matching ``match``."""
    if text is not None:
        path.write_text(text)
    with pytest.raises(InvalidArgumentError, match=match):
        reader(path, **kwargs)


def two_leaf_cluster(rng, hosts: int, per: int, gpu_widths, nvlink_widths) -> nx.Graph:
    """``hosts`` x ``per`` GPUs, each on its host's switch at a width drawn from ``gpu_widths``, direct
    NVLink-like links of a width from ``nvlink_widths`` between ~40% of a host's GPU pairs, host switches
    alternately on ``leaf0``/``leaf1`` (5, 10 or 20 GB/s).  The leaves are not linked: the caller links them."""
    g = nx.Graph()
    for h in range(hosts):
        sw = f"h{h}/sw"
        g.add_node(sw, kind="switch")
        for i in range(per):
            d = f"h{h}/gpu{i}"
            g.add_node(d, kind="gpu", host=f"h{h}", local_index=i)
            g.add_edge(d, sw, bandwidth=float(rng.choice(gpu_widths)))
        for i in range(per):
            for j in range(i + 1, per):
                if rng.random() < 0.4:
                    g.add_edge(f"h{h}/gpu{i}", f"h{h}/gpu{j}", bandwidth=float(rng.choice(nvlink_widths)))
        g.add_edge(sw, f"leaf{h % 2}", bandwidth=float(rng.choice([5, 10, 20])))
    g.add_node("leaf0", kind="switch")
    g.add_node("leaf1", kind="switch")
    return g


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


