"""The quality benchmark's instances: cluster builders, the cluster suite and its job mixes.

Used by ``benchmarks/bench_quality.py`` (which runs rankmap and the peers on them).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import networkx as nx

from rankmap.solver import fat_tree_cluster
from rankmap.solver.traffic import model_preset, traffic_from_model

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
EXAMPLES = ROOT / "examples" / "clusters"

# ============================================================== clusters


def _add_leaf_tree(g: nx.Graph, leaf_of_host: list[int], pod_of_leaf: list[int] | None,
                   leaf_oversubscription: float, pod_oversubscription: float | None) -> None:
    """Leaves ``switch:leaf{i}`` -> (pods ``switch:pod{j}`` ->) ``switch:spine``, physical links.

    A leaf's uplink (one edge, all its uplink ports summed) has the capacity of the NIC links
    into that leaf divided by ``leaf_oversubscription``; a pod's uplink, the summed uplinks of
    its leaves divided by ``pod_oversubscription``.
    """
    leaves = sorted(set(leaf_of_host))
    up = {}
    for i in leaves:
        leaf = f"switch:leaf{i}"
        g.add_node(leaf, kind="switch")
        down = sum(d["bandwidth"] for _, d in g[leaf].items())
        up[i] = down / float(leaf_oversubscription)
        if pod_of_leaf is None:
            g.add_node("switch:spine", kind="switch")
            g.add_edge(leaf, "switch:spine", bandwidth=up[i])
        else:
            p = pod_of_leaf[i]
            g.add_node(f"switch:pod{p}", kind="switch")
            g.add_edge(leaf, f"switch:pod{p}", bandwidth=up[i])
    if pod_of_leaf is not None:
        g.add_node("switch:spine", kind="switch")
        for p in sorted(set(pod_of_leaf)):
            down = sum(up[i] for i in leaves if pod_of_leaf[i] == p)
            g.add_edge(f"switch:pod{p}", "switch:spine", bandwidth=down / float(pod_oversubscription))


def scattered_cluster(leaf_counts: list[int], gpus_per_host: int = 8, nvswitch_gbps: float = 450.0,
                      nic_gbps: float = 50.0, leaf_oversubscription: float = 4.0,
                      pods: list[list[int]] | None = None, pod_oversubscription: float = 2.0,
                      interleave: bool = True) -> nx.Graph:
    """A fragmented allocation: ``leaf_counts[i]`` hosts under leaf i (uneven).

    With ``interleave`` the hosts are listed (first appearance in the graph, hence
    the baseline device order) round-robin over the leaves: leaf 0, leaf 1, ...,
    leaf 0, ... so consecutive hosts sit under different leaves.  ``pods`` groups
    leaves under pod switches (a second oversubscribed tier).  Links are physical: a leaf's
    uplink is its hosts' NIC links (here, in this graph) / ``leaf_oversubscription`` (4:1 by
    default: 50 GB/s NICs, 8 per host), a pod's uplink its leaves' uplinks /
    ``pod_oversubscription``.
    """
    queues = [[i] * c for i, c in enumerate(leaf_counts)]
    leaf_of_host: list[int] = []
    if interleave:
        while any(queues):
            for q in queues:
                if q:
                    leaf_of_host.append(q.pop())
    else:
        leaf_of_host = [i for q in queues for i in q]
    g = nx.Graph(name=f"scattered {leaf_counts}")
    for h, leaf in enumerate(leaf_of_host):
        host = f"h{h:02d}"
        hub = f"{host}/nvswitch"
        g.add_node(hub, kind="nvswitch", host=host)
        for i in range(gpus_per_host):
            gpu = f"{host}/gpu{i}"
            g.add_node(gpu, kind="gpu", host=host, local_index=i)
            g.add_edge(gpu, hub, bandwidth=nvswitch_gbps)
            nic = f"{host}/nic{i}"
            g.add_node(nic, kind="nic", host=host)
            g.add_edge(gpu, nic, bandwidth=nic_gbps)
            g.add_edge(nic, f"switch:leaf{leaf}", bandwidth=nic_gbps)
    pod_of_leaf = None
    if pods:
        pod_of_leaf = [0] * len(leaf_counts)
        for p, members in enumerate(pods):
            for i in members:
                pod_of_leaf[i] = p
    _add_leaf_tree(g, leaf_of_host, pod_of_leaf, leaf_oversubscription, pod_oversubscription if pods else None)
    return g


def load_example_host(name: str) -> nx.Graph:
    """One-host graph from examples/clusters/<name>.json."""
    data = json.loads((EXAMPLES / f"{name}.json").read_text())
    return nx.node_link_graph(data, edges="edges")


def replicate_host(template: nx.Graph, num_hosts: int, hosts_per_leaf: int, nic_gbps: float | None = None,
                   leaf_oversubscription: float = 2.0, prefix: str = "n") -> nx.Graph:
    """Copy a one-host graph ``num_hosts`` times; every fabric NIC of a host (``kind == "nic"``,
    unless ``fabric_port`` is False) links to its leaf switch (``hosts_per_leaf`` consecutive
    hosts per leaf) at ``nic_gbps`` (default: the NIC's ``port_bandwidth``), leaves to one
    spine by uplinks of (the leaf's NIC links) / ``leaf_oversubscription``."""
    hosts_in = {d.get("host") for _, d in template.nodes(data=True) if d.get("host") is not None}
    if len(hosts_in) != 1:
        raise ValueError(f"template must describe one host, got {sorted(hosts_in)}")
    old = hosts_in.pop()
    g = nx.Graph(name=f"{num_hosts} x {template.graph.get('name', old)}")
    leaf_of_host = []
    for h in range(num_hosts):
        host = f"{prefix}{h:02d}"
        leaf = h // hosts_per_leaf
        leaf_of_host.append(leaf)
        ren = {n: f"{host}/{str(n).split('/', 1)[-1]}" for n in template.nodes}
        for n, d in template.nodes(data=True):
            nd = dict(d)
            nd["host"] = host
            g.add_node(ren[n], **nd)
        for u, v, d in template.edges(data=True):
            g.add_edge(ren[u], ren[v], **d)
        for n, d in template.nodes(data=True):
            if d.get("kind") == "nic" and d.get("fabric_port", True):
                bw = nic_gbps if nic_gbps is not None else float(d.get("port_bandwidth", 12.5))
                g.add_edge(ren[n], f"switch:leaf{leaf}", bandwidth=float(bw))
    _add_leaf_tree(g, leaf_of_host, None, leaf_oversubscription, None)
    return g


# NVL72 racks: rankmap.solver.fabric.builders.nvl72_cluster (moved there, issue 12 item 4)
from rankmap.solver.fabric.builders import nvl72_cluster  # noqa: E402


@dataclass
class ClusterSpec:
    name: str
    build: Callable[[], nx.Graph]
    recipe: str  # how to rebuild it (for the loss report)
    cases: list[tuple[dict, list[str]]]  # (parallel sizes, traffic mixes)
    quick: bool = False  # part of --quick (first mix of each case)
    gpus: int = 0  # GPUs (for --max-gpus without building the graph; 0 = unknown)


def cluster_suite() -> list[ClusterSpec]:
    ft = fat_tree_cluster
    dgx1 = load_example_host("dgx1-v100-hybridcube")
    a30 = load_example_host("a30-pcie-nvlink-pairs")
    hgx = load_example_host("hgx-a100-8gpu")
    S = []
    GPT = "gpt-24l-4096"

    def add(name, build, recipe, cases, quick=False, gpus=0):
        S.append(ClusterSpec(name, build, recipe, cases, quick, gpus))

    # uniform (non-blocking) fat trees: 1:1, one inter-host level
    add("ft-uniform-2x8", lambda: ft(2, 8, tiers=[(8, 1.0)]), "fat_tree_cluster(2, 8, tiers=[(8, 1.0)])",
        [(dict(tp=4, pp=2), ["pp-heavy", GPT]), (dict(tp=2, cp=2, pp=2), ["pp-heavy", GPT])], quick=True)
    add("ft-uniform-16x8", lambda: ft(16, 8, tiers=[(8, 1.0)]), "fat_tree_cluster(16, 8, tiers=[(8, 1.0)])",
        [(dict(tp=8, pp=4), [GPT]), (dict(tp=4, cp=2, pp=2), [GPT])])
    add("ft-uniform-64x8", lambda: ft(64, 8, tiers=[(8, 1.0)]), "fat_tree_cluster(64, 8, tiers=[(8, 1.0)])",
        [(dict(tp=8, pp=8), [GPT]), (dict(tp=4, ep=8, pp=4, etp=1), [GPT, "moe-ep"])])
    # oversubscribed leaves: 50 GB/s NICs, leaf uplinks at 4:1, 2:1 above
    add("ft-oversub-8x8", lambda: ft(8, 8, tiers=[(2, 4.0)]), "fat_tree_cluster(8, 8, tiers=[(2, 4.0)])",
        [(dict(tp=4, pp=2), ["dp-heavy", "pp-heavy"]), (dict(tp=2, ep=8, etp=1), ["moe-ep", "dp-heavy", "pp-heavy"])],
        quick=True)
    add("ft-oversub-4x8", lambda: ft(4, 8, tiers=[(2, 4.0)]), "fat_tree_cluster(4, 8, tiers=[(2, 4.0)])",
        [(dict(tp=2, cp=2, pp=2), ["dp-heavy", GPT])], quick=True)
    add("ft-oversub-32x8", lambda: ft(32, 8, tiers=[(4, 4.0), (4, 2.0)]),
        "fat_tree_cluster(32, 8, tiers=[(4, 4.0), (4, 2.0)])",
        [(dict(tp=8, pp=4), ["pp-heavy"]), (dict(tp=4, cp=2, pp=4), [GPT])])
    add("ft-oversub-64x8", lambda: ft(64, 8, tiers=[(4, 4.0), (4, 2.0)]),
        "fat_tree_cluster(64, 8, tiers=[(4, 4.0), (4, 2.0)])",
        [(dict(tp=8, pp=4), [GPT]), (dict(tp=2, ep=8, pp=2, etp=1), [GPT, "moe-ep"])])
    # fragmented allocations: uneven leaves, hosts listed interleaved
    add("frag-1lvl-16x8", lambda: scattered_cluster([3, 1, 4, 2, 5, 1]),
        "scattered_cluster([3, 1, 4, 2, 5, 1])  # 8 GPUs/host on NVSwitch 450, NIC 50, leaf uplinks 4:1, hosts "
        "listed round-robin over the leaves",
        [(dict(tp=8, pp=2), ["pp-heavy", GPT]), (dict(tp=2, ep=4, pp=2, etp=1), ["pp-heavy", "moe-ep"])], quick=True)
    add("frag-2lvl-16x8", lambda: scattered_cluster([2, 3, 1, 3, 1, 2, 4], pods=[[0, 1, 2], [3, 4, 5, 6]]),
        "scattered_cluster([2, 3, 1, 3, 1, 2, 4], pods=[[0, 1, 2], [3, 4, 5, 6]])  # leaf uplinks 4:1, pod uplinks 2:1",
        [(dict(tp=8, pp=4), ["pp-heavy", "dp-heavy"]), (dict(tp=4, cp=2, pp=2), ["pp-heavy", "dp-heavy"])])
    add("frag-1lvl-6x8", lambda: scattered_cluster([1, 3, 2]), "scattered_cluster([1, 3, 2])",
        [(dict(tp=2, pp=4), [GPT, "pp-heavy", "dp-heavy"]), (dict(tp=4, pp=2), ["pp-heavy", "dp-heavy", GPT]),
         (dict(tp=8, pp=3), ["pp-heavy", "dp-heavy", GPT])], quick=True)
    add("frag-2lvl-40x8",
        lambda: scattered_cluster([5, 1, 7, 3, 2, 6, 4, 1, 8, 3], pods=[[0, 1, 2, 3], [4, 5, 6], [7, 8, 9]]),
        "scattered_cluster([5, 1, 7, 3, 2, 6, 4, 1, 8, 3], pods=[[0, 1, 2, 3], [4, 5, 6], [7, 8, 9]])",
        [(dict(tp=8, pp=4), ["pp-heavy", GPT]), (dict(tp=4, pp=8), ["pp-heavy", GPT])])
    # PCIe boxes and NVLink pairs
    add("pcie-2x8", lambda: ft(2, 8, intra="pcie", intra_bandwidth_gbps=32.0, nic_bandwidth_gbps=25.0),
        "fat_tree_cluster(2, 8, intra='pcie', intra_bandwidth_gbps=32.0, nic_bandwidth_gbps=25.0)",
        [(dict(tp=4, pp=2), ["tp-heavy"]), (dict(tp=2, ep=4, etp=1, pp=2), ["moe-ep", "tp-heavy"])], quick=True)
    add("pcie-8x8", lambda: ft(8, 8, intra="pcie", intra_bandwidth_gbps=32.0, nic_bandwidth_gbps=25.0,
                               tiers=[(4, 2.0)]),
        "fat_tree_cluster(8, 8, intra='pcie', intra_bandwidth_gbps=32.0, nic_bandwidth_gbps=25.0, tiers=[(4, 2.0)])",
        [(dict(tp=8, pp=2), ["tp-heavy", GPT]), (dict(tp=2, pp=4), ["tp-heavy", GPT])])
    add("nvpairs-2x8", lambda: ft(2, 8, intra="nvlink-pairs", intra_bandwidth_gbps=100.0, nic_bandwidth_gbps=25.0),
        "fat_tree_cluster(2, 8, intra='nvlink-pairs', intra_bandwidth_gbps=100.0, nic_bandwidth_gbps=25.0)",
        [(dict(tp=2, pp=2), ["tp-heavy", GPT]), (dict(tp=4, pp=2), [GPT, "tp-heavy"]),
         (dict(tp=2, cp=2, pp=2), [GPT])], quick=True)
    add("nvpairs-8x8", lambda: ft(8, 8, intra="nvlink-pairs", intra_bandwidth_gbps=100.0, nic_bandwidth_gbps=25.0,
                                  tiers=[(4, 2.0)]),
        "fat_tree_cluster(8, 8, intra='nvlink-pairs', intra_bandwidth_gbps=100.0, nic_bandwidth_gbps=25.0, "
        "tiers=[(4, 2.0)])",
        [(dict(tp=2, pp=4), ["tp-heavy", GPT]), (dict(tp=4, cp=2, pp=2), ["tp-heavy", GPT])])
    # real host types replicated under leaves
    add("dgx1-hcm-4x8", lambda: replicate_host(dgx1, 4, 2, leaf_oversubscription=2),
        "replicate_host(examples/clusters/dgx1-v100-hybridcube.json, 4, hosts_per_leaf=2, leaf_oversubscription=2)  "
        "# 4 NICs/host at 12.5",
        [(dict(tp=8, pp=2), ["tp-heavy", "pp-heavy"]), (dict(tp=4, pp=2), ["pp-heavy", GPT])])
    add("dgx1-hcm-16x8", lambda: replicate_host(dgx1, 16, 4, leaf_oversubscription=2),
        "replicate_host(examples/clusters/dgx1-v100-hybridcube.json, 16, hosts_per_leaf=4, leaf_oversubscription=2)",
        [(dict(tp=4, pp=4, cp=2), [GPT])])
    add("a30-pairs-4x4", lambda: replicate_host(a30, 4, 2, leaf_oversubscription=2),
        "replicate_host(examples/clusters/a30-pcie-nvlink-pairs.json, 4, hosts_per_leaf=2, leaf_oversubscription=2)  "
        "# 1 NIC/host at 12.5",
        [(dict(tp=4, pp=2), [GPT, "pp-heavy"]), (dict(tp=2, ep=2, pp=2, etp=1), ["moe-ep", "pp-heavy", GPT])],
        quick=True)
    add("a30-pairs-16x4", lambda: replicate_host(a30, 16, 4, leaf_oversubscription=2),
        "replicate_host(examples/clusters/a30-pcie-nvlink-pairs.json, 16, hosts_per_leaf=4, leaf_oversubscription=2)",
        [(dict(tp=2, pp=4), ["dp-heavy", GPT]), (dict(tp=4, cp=2, pp=2), ["tp-heavy", GPT])])
    add("hgx-a100-4x8", lambda: replicate_host(hgx, 4, 2, leaf_oversubscription=2),
        "replicate_host(examples/clusters/hgx-a100-8gpu.json, 4, hosts_per_leaf=2, leaf_oversubscription=2)  "
        "# 8 NICs/host at 12.5",
        [(dict(tp=8, pp=2), ["pp-heavy", GPT]), (dict(tp=4, ep=4, etp=1, pp=2), ["moe-ep", "pp-heavy", GPT])])
    # NVL72-style racks: 18 trays x 4 GPUs on one 900 GB/s NVLink domain per rack
    add("nvl72-2racks", lambda: nvl72_cluster(2), "nvl72_cluster(2)  # 2 racks x 18 hosts x 4 GPUs, NVLink 900 "
        "per rack, NIC 50, leaves of 9 hosts, leaf uplinks 2:1",
        [(dict(tp=4, pp=4), [GPT]), (dict(tp=8, pp=2), [GPT]), (dict(tp=4, ep=8, etp=1, pp=2), ["moe-ep", GPT])],
        quick=True)
    add("nvl72-4racks", lambda: nvl72_cluster(4), "nvl72_cluster(4)",
        [(dict(tp=4, pp=8), [GPT]), (dict(tp=4, ep=8, etp=1, pp=2), ["moe-ep", GPT])])
    # issue 15's instance families: fragmented NVL72 racks (512 GPUs, tp4 pp8; EP-heavy), a 3-tier 4:1 fat tree
    # (512 GPUs, tp4 cp2 pp8), and 8,192-GPU fabrics (NVL72-style EP-heavy, fragmented fat tree)
    frag_racks = [18, 5, 12, 18, 9, 14, 18, 7, 11, 16]  # 128 hosts x 4 GPUs
    add("nvl72-frag-512", lambda: nvl72_fragment(frag_racks), f"nvl72_fragment({frag_racks})  # partly used racks",
        [(dict(tp=4, pp=8), [GPT, "pp-heavy"]), (dict(tp=4, ep=8, etp=1, pp=2), ["moe-ep"])], gpus=512)
    add("ft-3tier-4to1-64x8", lambda: ft(64, 8, tiers=[(4, 4.0), (4, 4.0)]),
        "fat_tree_cluster(64, 8, tiers=[(4, 4.0), (4, 4.0)])", [(dict(tp=4, cp=2, pp=8), [GPT, "pp-heavy"])],
        gpus=512)
    big_racks = [18] * 100 + [12, 16, 9, 17, 14, 11, 18, 15, 13, 10, 17, 16, 12, 18, 18, 16, 16]  # 2,048 x 4 GPUs
    add("nvl72-frag-8192", lambda: nvl72_fragment(big_racks), "nvl72_fragment([18] * 100 + [12, 16, 9, 17, 14, "
        "11, 18, 15, 13, 10, 17, 16, 12, 18, 18, 16, 16])", [(dict(tp=4, ep=8, etp=1, pp=4), ["moe-ep"])], gpus=8192)
    add("frag-2lvl-1024x8", lambda: scattered_cluster([37, 21, 44, 29, 33, 18, 41, 25] * 4 + [16] * 2,
                                                      pods=[list(range(i, min(i + 6, 34))) for i in range(0, 34, 6)]),
        "scattered_cluster([37, 21, 44, 29, 33, 18, 41, 25] * 4 + [16] * 2, pods of 6 leaves)",
        [(dict(tp=8, pp=8), [GPT])], gpus=8192)
    return S


def nvl72_fragment(hosts_per_rack: list[int], gpus_per_host: int = 4) -> nx.Graph:
    """NVL72-style racks (``nvl72_cluster``) of which rack r contributes its first ``hosts_per_rack[r]`` hosts
    (a fragmented allocation: the other trays run other jobs); leaves keep their physical uplinks."""
    g = nvl72_cluster(len(hosts_per_rack), gpus_per_host=gpus_per_host)
    drop = []
    for n, d in g.nodes(data=True):
        h = d.get("host")
        if h is not None:
            r, t = h[1:].split("t")
            if int(t) >= hosts_per_rack[int(r)]:
                drop.append(n)
    g.remove_nodes_from(drop)
    g.remove_nodes_from([n for n in list(g.nodes) if g.degree(n) == 0])
    return g


# ============================================================== traffic mixes

EXPLICIT_MIXES = {
    # bytes per rank per step; classes whose group has one rank cost nothing
    "tp-heavy": dict(tp=8e9, cp=1e9, ep=1e9, etp=2e9, dp=4e8, edp=1e8, pp=2e8),
    "dp-heavy": dict(tp=5e8, cp=2e8, ep=5e8, etp=2e8, dp=8e9, edp=4e9, pp=1e8),
    "pp-heavy": dict(tp=1e9, cp=2e8, ep=2e8, etp=1e8, dp=5e7, edp=1e7, pp=4e9),  # LoRA-like: few gradients
    "moe-ep": dict(tp=1e9, cp=2e8, ep=8e9, etp=1e9, dp=5e8, edp=1e9, pp=2e8),
}


def traffic_for(mix: str, cfg) -> dict[str, float] | None:
    """Payloads of a mix for a configuration; None when the mix does not apply."""
    if mix in EXPLICIT_MIXES:
        if mix == "moe-ep" and cfg.ep == 1:
            return None
        return dict(EXPLICIT_MIXES[mix])
    try:
        return traffic_from_model(model_preset(mix), cfg)
    except Exception:
        return None


# ============================================================== layouts



@dataclass
class Instance:
    name: str
    spec: ClusterSpec
    sizes: dict
    mix: str



def sizes_str(s: dict) -> str:
    parts = [f"{k}{v}" for k, v in s.items() if k in ("tp", "cp", "ep", "pp") and v > 1]
    if "etp" in s and s["etp"] != s.get("tp", 1):
        parts.append(f"etp{s['etp']}")
    return " ".join(parts) or "dp only"



def instances(quick: bool) -> list[Instance]:
    out = []
    for spec in cluster_suite():
        if quick and not spec.quick:
            continue
        for sz, mixes in spec.cases:
            for mix in mixes[:1] if quick else mixes:
                out.append(Instance(f"{spec.name}|{sizes_str(sz)}|{mix}", spec, sz, mix))
    return out


