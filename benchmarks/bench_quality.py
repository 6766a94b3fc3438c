"""Quality of rankmap's layouts against simple and general-purpose peers.

    python benchmarks/bench_quality.py            # full suite, about 12 minutes on 2 cores
    python benchmarks/bench_quality.py --quick    # a subset, about 2 minutes
    python benchmarks/bench_quality.py --no-speed # without bench_solve.py / bench_catalogue.py
    python benchmarks/bench_quality.py --no-sim   # without the SimGrid cross-check
    python benchmarks/bench_quality.py --instance 'frag-1lvl-16x8|tp8 pp2|gpt-24l-4096'   # one instance, verbose
    python benchmarks/bench_quality.py --match nvl72 --match 8192 --no-sim --no-speed   # a subset by name
    python benchmarks/bench_quality.py --max-gpus 2048 --time-limit 3 --no-sim --no-speed

The summary adds, per rankmap mode, wins / ties / losses against the best
peer of the mode, free <= launcher, solves within the time limit, and the
distribution of the gap (cost - bound) / cost of the solve's reported bound.

For every instance (cluster x parallel sizes x traffic mix) all layouts are scored
with rankmap's objective, the predicted communication time per step on shared
links (:func:`rankmap.solver.layout_cost`, DESIGN §4: per class, all groups at
once, max over flows and directed links of bytes / capacity; summed over
classes), whatever the peer itself optimised:

* **rankmap launcher**: ``solve(mode="launcher", orders="all")``; compared with
  the launcher-compatible peers (Megatron default, greedy);
* **rankmap free**: ``solve(mode="free", orders="all")``; compared with the
  free bijections (random, QAP);
* **Megatron**: default order ``tp-cp-ep-dp-pp``, baseline device order;
* **greedy**: the non-trivial dims ordered by bytes per rank (most bytes
  innermost = first in the order string; the closest order Megatron accepts),
  baseline device order with the hosts sorted by fabric domain (coarsest
  level first, stable);
* **random**: a random valid order and a random bijection, median of 5 seeds;
* **METIS tree / Scotch** (``benchmarks/tree_peers.py``): process mappers,
  own code on the tools' public APIs: top-down recursive METIS bisection
  (``pymetis``) along the fabric tree, and Scotch 7 static mapping
  (``pyscotch``) onto a tree-leaf architecture of the fabric's levels; the
  launcher variants map host blocks (compared with rankmap launcher), the
  free variants ranks (rankmap free); every megatron-cli order plus the
  orders rankmap chose, best kept.  Scotch is skipped when ``pyscotch`` does
  not import;
* **QAP faq / QAP 2opt**: ``scipy.optimize.quadratic_assignment`` on the W x W
  rank traffic matrix (bytes, from the Megatron groups of an order) and the
  W x W matrix of 1/bandwidth (from ``cluster.bandwidth_gbps``, the widest-path
  bandwidth of a pair; 0 on the diagonal): the classic pairwise surrogate
  Σ bytes / B, which ignores link sharing; the peer optimises it and its result
  is scored with ``layout_cost`` like every other layout.  faq starts at the barycenter; 2opt starts from the better of the
  faq result and the Megatron device order for that order (scipy's 2opt
  recomputes the full O(W^2) objective per swap, so it is only run for
  W <= 128; from a random start it needs ~50 s at W = 128).  Orders: every
  order Megatron accepts when W <= 64, else the megatron-cli orders Megatron
  accepts plus the order rankmap (free) chose; 2opt: every faq order for
  W <= 32, the best faq order for W <= 128; faq only for W <= 512.  The best
  over orders is kept.

Ratios are peer cost / rankmap cost (>= 1: rankmap is at least as good).  A
peer strictly below rankmap (relative tolerance 1e-9) is a *loss*; losses are
printed and written to ``benchmarks/out/losses.json`` with the peer's order and
device order (indices into ``cluster.devices``) so the case can be replayed.
A free-mode peer whose layout happens to be launchable (every block of G
consecutive ranks on one host) and is cheaper than rankmap launcher is listed
as a launcher-mode loss too.  An exception raised by ``solve`` is not hidden:
the row says ERROR and ``errors.json`` has the message.  Also checked: every
layout's cost >= rankmap's lower bound; rankmap's reported cost equals
``layout_cost``; rankmap free <= rankmap launcher; no OPTIMAL claim is beaten.
rankmap's time limit is ``TIME_LIMIT`` (6 s per solve, split over orders).

Simulation cross-check (``benchmarks/simgrid_model.py``, skipped with
``--no-sim`` or when SimGrid is not importable): for every instance up to
``SIM_MAX_W`` GPUs with at most ``SIM_MAX_FLOWS`` flows in a class, rankmap's
layout and the best peer's layout of each mode (lowest predicted time) are
simulated class by class with SimGrid's max-min flow model (routes by
networkx; no code shared with rankmap's time model); the report gives the
simulated times, whether rankmap is still <= the peer under simulation, and
how far the prediction is from the simulation.

Speed: ``benchmarks/bench_solve.py --repeat 1`` (solve time and peak RSS at
1,024 / 16,384 / 131,072 GPUs) and ``benchmarks/bench_catalogue.py`` run as
subprocesses and their tables are included.

Outputs (``benchmarks/out/``, git-ignored): ``quality.md`` (all tables),
``quality.png`` (left: time ratio per instance and peer, and the simulated
ratio against the best peer; right: rankmap solve time versus GPUs, log-log),
``quality.json`` (every number, simulations included), ``losses.json`` and
``errors.json``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import statistics
import subprocess
import sys
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import networkx as nx
import numpy as np
from scipy.optimize import quadratic_assignment

from rankmap.solver import (
    SolveOptions,
    candidate_orders,
    cluster_from_graph,
    fat_tree_cluster,
    layout_cost,
    lower_bound,
    megatron_groups,
    parallel_config,
    solve,
)
from rankmap.solver.traffic import (
    CLASS_GROUP,
    CLASS_KIND,
    TRAFFIC_CLASSES,
    model_preset,
    pair_bytes_factor,
    traffic_from_model,
)

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

import simgrid_model as sm  # noqa: E402  (benchmarks/simgrid_model.py: SimGrid flow-level reference)
import tree_peers  # noqa: E402  (benchmarks/tree_peers.py: METIS tree mapping, Scotch static mapping)

SCOTCH_OK, SCOTCH_WHY = tree_peers.scotch_available()

OUT = HERE / "out"
EXAMPLES = ROOT / "examples" / "clusters"
DEFAULT_ORDER = "tp-cp-ep-dp-pp"
REL_TOL = 1e-9
TIME_LIMIT = 6.0  # rankmap time limit per solve (seconds, split over orders)
QAP_MAX_W = 512
QAP_ALL_ORDERS_MAX_W = 64
TWO_OPT_ALL_ORDERS_MAX_W = 32
TWO_OPT_MAX_W = 128
RANDOM_SEEDS = 5
SIM_MAX_W = 512  # simulate instances up to this many GPUs (the whole suite; about 1 s per layout)
SIM_MAX_FLOWS = 20_000  # ... and with at most this many device-level flows in any class of a layout
SIM_WORKERS = 2  # SimGrid children at a time (one per class; run after the instance's solves, not beside them)
SIM_REL_TOL = 1e-6  # SimGrid's max-min solver works to ~1e-9 relative; a simulated loss must exceed this

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


# NVL72 racks: rankmap.solver.builders.nvl72_cluster (moved there, issue 12 item 4)
from rankmap.solver.builders import nvl72_cluster  # noqa: E402


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


def traffic_matrix(cfg, traffic) -> np.ndarray:
    """W x W bytes from rank i to rank j (DESIGN §3), for the order of ``cfg``."""
    W = cfg.world_size
    A = np.zeros((W, W))
    groups = megatron_groups(cfg)
    for c in TRAFFIC_CLASSES:
        s = float(traffic.get(c, 0.0) or 0.0)
        arr = groups[CLASS_GROUP[c]] - cfg.rank_offset
        n = arr.shape[1]
        if s <= 0 or n <= 1:
            continue
        pb = pair_bytes_factor(CLASS_KIND[c], n) * s
        if CLASS_KIND[c] == "p2p_chain":
            u, v = arr[:, :-1].ravel(), arr[:, 1:].ravel()
            np.add.at(A, (u, v), pb)
            np.add.at(A, (v, u), pb)
        else:
            iu, ju = np.nonzero(~np.eye(n, dtype=bool))
            np.add.at(A, (arr[:, iu].ravel(), arr[:, ju].ravel()), pb)
    return A


def inverse_bandwidth_matrix(cluster) -> np.ndarray:
    """W x W seconds per byte, 0 on the diagonal."""
    idx = np.arange(cluster.num_devices)
    b = cluster.bandwidth_gbps(idx[:, None], idx[None, :]) * 1e9
    return np.where(np.isinf(b), 0.0, 1.0 / b)


def dim_weights(cfg, traffic) -> dict[str, float]:
    """Payload bytes per rank attributed to each order token (only non-trivial dims)."""
    s = {c: float(traffic.get(c, 0.0) or 0.0) for c in TRAFFIC_CLASSES}
    w = {
        "tp": (s["tp"] if cfg.tp > 1 else 0.0) + (s["etp"] if cfg.etp > 1 else 0.0),
        "cp": s["cp"] if cfg.cp > 1 else 0.0,
        "ep": s["ep"] if cfg.ep > 1 else 0.0,
        "dp": (s["dp"] if cfg.dp * cfg.cp > 1 else 0.0) + (s["edp"] if cfg.edp > 1 else 0.0),
        "pp": (s["pp"] + s["embedding"]) if cfg.pp > 1 else 0.0,
    }
    nontrivial = {
        "tp": cfg.tp > 1 or cfg.etp > 1, "cp": cfg.cp > 1, "ep": cfg.ep > 1,
        "dp": cfg.dp > 1 or cfg.edp > 1, "pp": cfg.pp > 1,
    }
    return {t: w[t] for t in ("tp", "cp", "ep", "dp", "pp") if nontrivial[t]}


def greedy_order(cfg, traffic) -> str:
    """Non-trivial dims sorted by bytes per rank, most first; the closest order Megatron accepts."""
    default_pos = {t: i for i, t in enumerate(DEFAULT_ORDER.split("-"))}
    w = dim_weights(cfg, traffic)
    want = sorted(w, key=lambda t: (-w[t], default_pos[t]))
    rank_of = {t: i for i, t in enumerate(want)}
    best, best_key = None, None
    for c in candidate_orders(cfg, "all"):
        seq = [t for t in c.order.split("-") if t in rank_of]
        key = [rank_of[t] for t in seq]
        if best_key is None or key < best_key:
            best, best_key = c.order, key
    return best


def domain_sorted_devices(cluster) -> np.ndarray:
    """Baseline device order with hosts sorted by their domains (coarsest level first, stable)."""
    H = len(cluster.hosts)
    first = np.zeros(H, dtype=np.int64)
    first[cluster.host_of[::-1]] = np.arange(cluster.num_devices)[::-1]
    keys = [np.arange(H)] + [cluster.domains[k][first] for k in range(cluster.domains.shape[0])]
    host_order = np.lexsort(keys)
    return np.concatenate([np.flatnonzero(cluster.host_of == h) for h in host_order])


# ============================================================== one instance


@dataclass
class Instance:
    name: str
    spec: ClusterSpec
    sizes: dict
    mix: str


@dataclass
class Outcome:
    inst: Instance
    W: int
    cfg_sizes: dict
    traffic: dict
    rm: dict = field(default_factory=dict)  # mode -> {cost, bound, status, solve_s, order, dev}
    peers: dict = field(default_factory=dict)  # peer -> {cost, order, dev, ref, seconds, note}
    errors: list = field(default_factory=list)  # rankmap exceptions
    devices: list = field(default_factory=list)  # cluster.devices (index -> GPU node id)
    bound: float = float("nan")
    sim: dict = field(default_factory=dict)  # mode -> simulation of rankmap's and the best peer's layouts
    sim_s: float = 0.0  # wall-clock seconds spent simulating


PEERS = [  # (name, rankmap mode it is compared with); launcher peers first
    ("Megatron", "launcher"),
    ("greedy", "launcher"),
    ("METIS tree", "launcher"),
    ("Scotch", "launcher"),
    ("random", "free"),
    ("QAP faq", "free"),
    ("QAP 2opt", "free"),
    ("METIS tree free", "free"),
    ("Scotch free", "free"),
]


def best_peer(o: Outcome, mode: str) -> str | None:
    """The peer of ``mode`` with the lowest predicted time (ties: the first in ``PEERS``)."""
    cands = [(o.peers[p]["cost"], i, p) for i, (p, m) in enumerate(PEERS) if m == mode and p in o.peers]
    return min(cands)[2] if cands else None


def simulate_instance(o: Outcome, graph: nx.Graph, cluster, cfg, router: sm.Router | None = None) -> None:
    """Simulate rankmap's layout and the best peer's layout of each mode with SimGrid (``o.sim``).

    Each class of a layout is one SimGrid run (all its groups at once, max-min fair sharing,
    routes by networkx in ``simgrid_model``); the simulated time of the layout is the sum
    over classes, to compare with ``layout_cost``'s total (exposure 1 everywhere here).
    Skipped (``o.sim[mode]["skipped"]``) above ``SIM_MAX_W`` GPUs or ``SIM_MAX_FLOWS`` flows
    in a class.
    """
    if o.W > SIM_MAX_W:
        for mode in ("launcher", "free"):
            o.sim[mode] = dict(skipped=f"W = {o.W} > {SIM_MAX_W}")
        return
    router = router or sm.Router(graph)
    todo = []  # (mode, who, order, dev, predicted)
    for mode in ("launcher", "free"):
        rm, p = o.rm[mode], best_peer(o, mode)
        if rm is None or p is None:
            o.sim[mode] = dict(skipped="rankmap raised" if rm is None else "no peer")
            continue
        o.sim[mode] = dict(peer=p)
        todo.append((mode, "rankmap", rm["order"], rm["dev"], rm["exact"]))
        todo.append((mode, "peer_sim", o.peers[p]["order"], o.peers[p]["dev"], o.peers[p]["cost"]))
    layouts = []
    for mode, who, order, dev, pred in todo:
        c = cfg.with_order(order)
        assign = [cluster.devices[i] for i in dev]
        nflows = max((len(f) for f in sm.class_flows(c, assign, o.traffic).values()), default=0)
        if nflows > SIM_MAX_FLOWS:
            o.sim[mode] = dict(skipped=f"{nflows} flows in one class > {SIM_MAX_FLOWS}")
        layouts.append((c, assign))
    keep = [i for i, (mode, *_) in enumerate(todo) if "skipped" not in o.sim[mode]]
    try:
        sims = sm.simulate_layouts(graph, [layouts[i] for i in keep], o.traffic, workers=SIM_WORKERS, router=router)
    except sm.SimulationError as exc:
        for mode in ("launcher", "free"):
            if "skipped" not in o.sim[mode]:
                o.sim[mode] = dict(skipped=f"SimGrid failed: {exc}".splitlines()[0])
        return
    for i, r in zip(keep, sims):
        mode, who, order, dev, pred = todo[i]
        o.sim[mode][who] = dict(simulated=r.total, predicted=pred,
                                by_class={c: t for c, t in r.by_class.items() if r.flows.get(c)})


def run_instance(inst: Instance, verbose: bool = False, simulate: bool = True) -> Outcome | None:
    graph = inst.spec.build()
    cluster = cluster_from_graph(graph)
    W = cluster.num_devices
    try:
        cfg = parallel_config(W, **inst.sizes)
    except Exception:
        return None
    traffic = traffic_for(inst.mix, cfg)
    if traffic is None:
        return None
    out = Outcome(inst, W, dict(cfg.sizes), traffic, devices=[str(d) for d in cluster.devices])
    out.bound = lower_bound(cluster, cfg, traffic)

    def cost_of(order: str, dev: np.ndarray) -> float:
        return layout_cost(cluster, cfg.with_order(order), np.asarray(dev, dtype=np.int64), traffic).total_seconds

    # rankmap
    for mode in ("launcher", "free"):
        t0 = time.perf_counter()
        try:
            r = solve(cluster, cfg, traffic, SolveOptions(mode=mode, orders="all", time_limit_seconds=TIME_LIMIT))
        except Exception as exc:  # a solver bug: reported, not hidden
            out.rm[mode] = None
            out.errors.append(dict(mode=mode, error=f"{type(exc).__name__}: {exc}",
                                   seconds=time.perf_counter() - t0))
            continue
        idx = cluster.device_index()
        dev = np.array([idx[a] for a in r.assignment], dtype=np.int64)
        exact = cost_of(r.order, dev)
        out.rm[mode] = dict(cost=r.cost.total_seconds, exact=exact, bound=r.bound_seconds, status=r.status,
                            solve_s=r.solve_seconds, order=r.order, dev=dev.tolist(),
                            baseline=r.baseline.cost.total_seconds)

    # Megatron default
    base = np.arange(W, dtype=np.int64)
    out.peers["Megatron"] = dict(cost=cost_of(DEFAULT_ORDER, base), order=DEFAULT_ORDER, dev=base.tolist())

    # greedy
    t0 = time.perf_counter()
    g_order = greedy_order(cfg, traffic)
    g_dev = domain_sorted_devices(cluster)
    out.peers["greedy"] = dict(cost=cost_of(g_order, g_dev), order=g_order, dev=g_dev.tolist(),
                               seconds=time.perf_counter() - t0)

    # random: median of seeds
    orders_all = [c.order for c in candidate_orders(cfg, "all")]
    rnd = []
    for seed in range(RANDOM_SEEDS):
        rng = np.random.default_rng(seed)
        o = orders_all[int(rng.integers(len(orders_all)))]
        d = rng.permutation(W)
        rnd.append((cost_of(o, d), o, d, seed))
    rnd.sort(key=lambda x: x[0])
    c, o, d, seed = rnd[len(rnd) // 2]
    out.peers["random"] = dict(cost=c, order=o, dev=d.tolist(), note=f"median of seeds 0..{RANDOM_SEEDS - 1} "
                               f"(this is seed {seed}: numpy default_rng({seed}): integers(orders), permutation(W))")

    # QAP
    if W <= QAP_MAX_W:
        if W <= QAP_ALL_ORDERS_MAX_W:
            qorders = orders_all
        else:
            qorders = [c.order for c in candidate_orders(cfg, "megatron-cli")]
            if out.rm.get("free") and out.rm["free"]["order"] not in qorders:
                qorders.append(out.rm["free"]["order"])
        B = inverse_bandwidth_matrix(cluster)
        Bn = B / B.max()
        faq_runs = []
        t0 = time.perf_counter()
        for o in qorders:
            A = traffic_matrix(cfg.with_order(o), traffic)
            An = A / max(A.max(), 1e-300)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                res = quadratic_assignment(An, Bn, method="faq")
            d = np.asarray(res.col_ind, dtype=np.int64)
            faq_runs.append((cost_of(o, d), o, d, An))
        faq_s = time.perf_counter() - t0
        best = min(faq_runs, key=lambda x: x[0])
        out.peers["QAP faq"] = dict(cost=best[0], order=best[1], dev=best[2].tolist(), seconds=faq_s,
                                    note=f"orders tried: {len(qorders)}")
        if W <= TWO_OPT_MAX_W:
            runs = faq_runs if W <= TWO_OPT_ALL_ORDERS_MAX_W else [best]
            t0 = time.perf_counter()
            two = []
            for fc, o, d, An in runs:
                start = d if fc <= cost_of(o, base) else base
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    res = quadratic_assignment(An, Bn, method="2opt",
                                               options=dict(partial_guess=np.stack([np.arange(W), start], 1)))
                d2 = np.asarray(res.col_ind, dtype=np.int64)
                two.append((cost_of(o, d2), o, d2))
            b2 = min(two, key=lambda x: x[0])
            out.peers["QAP 2opt"] = dict(cost=b2[0], order=b2[1], dev=b2[2].tolist(),
                                         seconds=time.perf_counter() - t0, note=f"orders tried: {len(runs)}")
    # process mappers (benchmarks/tree_peers.py): every megatron-cli order and the orders rankmap chose
    porders = [c.order for c in candidate_orders(cfg, "megatron-cli")]
    for m in ("launcher", "free"):
        if out.rm.get(m) and out.rm[m]["order"] not in porders:
            porders.append(out.rm[m]["order"])
    mappers = [("METIS tree", tree_peers.metis_tree, True), ("METIS tree free", tree_peers.metis_tree, False)]
    if SCOTCH_OK:
        mappers += [("Scotch", tree_peers.scotch_map, True), ("Scotch free", tree_peers.scotch_map, False)]
    for name, fn, as_launcher in mappers:
        t0 = time.perf_counter()
        runs = []
        for o in porders:
            try:
                d = fn(cluster, cfg.with_order(o), traffic, as_launcher)
            except Exception as exc:  # a peer failing is reported in its note, not fatal
                out.peers.setdefault(name, dict(cost=math.inf, order=o, dev=base.tolist(),
                                                note=f"{type(exc).__name__}: {exc}"))
                continue
            if d is not None:
                runs.append((cost_of(o, d), o, d))
        if runs:
            c, o, d = min(runs, key=lambda x: x[0])
            out.peers[name] = dict(cost=c, order=o, dev=d.tolist(), seconds=time.perf_counter() - t0,
                                   note=f"orders tried: {len(porders)}")
        elif name in out.peers:
            del out.peers[name]
    # is a peer's layout one torchrun/Slurm could launch (blocks of G consecutive ranks per host)?
    G = int(cluster.gpus_per_host[0])
    uniform = np.unique(cluster.gpus_per_host).size == 1
    for p in out.peers.values():
        h = cluster.host_of[np.asarray(p["dev"], dtype=np.int64)].reshape(-1, G)
        p["launcher_layout"] = bool(uniform and (h == h[:, :1]).all())
    if simulate:
        t0 = time.perf_counter()
        simulate_instance(out, graph, cluster, cfg)
        out.sim_s = time.perf_counter() - t0
    if verbose:
        print(json.dumps({"instance": inst.name, "W": W, "sizes": out.cfg_sizes, "traffic": traffic,
                          "bound": out.bound,
                          "rankmap": {m: x and {k: v for k, v in x.items() if k != "dev"} for m, x in out.rm.items()},
                          "errors": out.errors,
                          "peers": {p: {k: v for k, v in x.items() if k != "dev"} for p, x in out.peers.items()},
                          "simulated": out.sim},
                         indent=1))
    return out


# ============================================================== report


def sizes_str(s: dict) -> str:
    parts = [f"{k}{v}" for k, v in s.items() if k in ("tp", "cp", "ep", "pp") and v > 1]
    if "etp" in s and s["etp"] != s.get("tp", 1):
        parts.append(f"etp{s['etp']}")
    return " ".join(parts) or "dp only"


def ratio(peer: dict | None, ref: float) -> float | None:
    if peer is None:
        return None
    if ref <= 0:
        return 1.0 if peer["cost"] <= 0 else math.inf
    return peer["cost"] / ref


def is_loss(peer_cost: float, rm_cost: float) -> bool:
    return peer_cost < rm_cost * (1 - REL_TOL) - 1e-30


def fmt_ratio(r: float | None, tol: float = REL_TOL) -> str:
    if r is None:
        return "—"
    s = f"{r:.3f}" if r < 100 else f"{r:.0f}"
    if r < 1 - tol:
        s = f"**{r:.4f}** ⚠"
    return s


def fmt_s(x: float) -> str:
    if x >= 1:
        return f"{x:.3f}"
    if x >= 1e-3:
        return f"{x * 1e3:.2f} ms"
    return f"{x * 1e6:.1f} µs"


def gap_of(x: dict) -> float:
    """(cost − bound) / cost of one rankmap solve (the MIP convention: 0 = proved optimal)."""
    return (x["cost"] - x["bound"]) / x["cost"] if x["cost"] > 0 else 0.0


def gap_and_record(outs: list[Outcome], max_w: int = 2048) -> str:
    """Wins / ties / losses per rankmap mode against every peer of the mode, the gap distribution, time limits."""
    lines = ["| rankmap mode | instances | wins | ties | losses | free ≤ launcher | within time limit | "
             f"gap median (W ≤ {max_w}) | gap max (W ≤ {max_w}) | gap > 25% | OPTIMAL |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for mode in ("launcher", "free"):
        wins = ties = losses = n = fl = inlim = opt = 0
        gaps = []
        for o in outs:
            x = o.rm.get(mode)
            if not x:
                continue
            n += 1
            peers = [o.peers[p]["cost"] for p, m in PEERS if m == mode and p in o.peers]
            best = min(peers) if peers else math.inf
            if is_loss(best, x["cost"]):
                losses += 1
            elif x["cost"] < best * (1 - REL_TOL):
                wins += 1
            else:
                ties += 1
            L, F = o.rm.get("launcher"), o.rm.get("free")
            fl += bool(L and F and not is_loss(L["cost"], F["cost"]))
            inlim += x["solve_s"] <= TIME_LIMIT
            opt += x["status"] == "OPTIMAL"
            if o.W <= max_w:
                gaps.append(gap_of(x))
        med = statistics.median(gaps) if gaps else float("nan")
        mx = max(gaps) if gaps else float("nan")
        big = sum(g > 0.25 for g in gaps)
        lines.append(f"| {mode} | {n} | {wins} | {ties} | {losses} | {fl} / {n} | {inlim} / {n} | {100 * med:.1f}% | "
                     f"{100 * mx:.1f}% | {big} / {len(gaps)} | {opt} |")
    return "\n".join(lines)


def quality_table(outs: list[Outcome]) -> str:
    lp = [p for p, m in PEERS if m == "launcher"]
    fp = [p for p, m in PEERS if m == "free"]
    head = ("| # | instance | W | rankmap launcher | " + " | ".join(f"{p} / rm" for p in lp) + " | rankmap free | "
            + " | ".join(f"{p} / rm" for p in fp) + " | gap to bound (L / F) | status (L / F) | solve s (L / F) |")
    lines = [head, "|---:|---|---:|---:|" + "---:|" * (len(lp) + 1 + len(fp)) + "---:|---|---:|"]
    err = {"cost": float("nan"), "bound": float("nan"), "status": "ERROR", "solve_s": float("nan")}
    for i, o in enumerate(outs, 1):
        L, F = o.rm["launcher"] or err, o.rm["free"] or err
        cells = [str(i), f"`{o.inst.name}`", str(o.W), fmt_s(L["cost"]) if o.rm["launcher"] else "**ERROR**"]
        for p, mode in PEERS:
            if p == fp[0]:
                cells.append(fmt_s(F["cost"]) if o.rm["free"] else "**ERROR**")
            cells.append(fmt_ratio(ratio(o.peers.get(p), o.rm[mode]["cost"])) if o.rm[mode] else "—")

        def gap(x):
            return "—" if x is err else f"{100 * gap_of(x):.1f}%"

        def st(x):
            return "ERR" if x is err else x["status"][:3]

        def sec(x):
            return "—" if x is err else f"{x['solve_s']:.2f}"

        cells += [f"{gap(L)} / {gap(F)}", f"{st(L)} / {st(F)}", f"{sec(L)} / {sec(F)}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def summary(outs: list[Outcome]) -> tuple[str, list[dict], list[str]]:
    lines = ["| peer | compared with | instances | rankmap ≤ peer | peer < rankmap (losses) | "
             "median ratio | geo-mean ratio | max ratio |",
             "|---|---|---:|---:|---:|---:|---:|---:|"]
    losses = []
    for p, mode in PEERS:
        rs, n, wins = [], 0, 0
        for o in outs:
            peer = o.peers.get(p)
            if peer is None or o.rm[mode] is None:
                continue
            n += 1
            rm = o.rm[mode]
            if not is_loss(peer["cost"], rm["cost"]):
                wins += 1
            else:
                losses.append(loss_record(o, p, mode))
            r = ratio(peer, rm["cost"])
            if r is not None and math.isfinite(r) and r > 0:
                rs.append(r)
        med = statistics.median(rs) if rs else float("nan")
        geo = math.exp(sum(math.log(r) for r in rs) / len(rs)) if rs else float("nan")
        mx = max(rs) if rs else float("nan")
        lines.append(f"| {p} | rankmap {mode} | {n} | {wins} / {n} | {n - wins} | {med:.3f} | {geo:.3f} | {mx:.3f} |")
    # a free peer whose layout happens to be launchable also competes with rankmap launcher
    extra = 0
    for o in outs:
        if o.rm["launcher"] is None:
            continue
        for p, mode in PEERS:
            peer = o.peers.get(p)
            if mode == "free" and peer and peer["launcher_layout"] and is_loss(peer["cost"], o.rm["launcher"]["cost"]):
                losses.append(loss_record(o, p, "launcher"))
                extra += 1
    lines.append(f"\nFree-mode peer layouts that are launcher-compatible (blocks of G consecutive ranks per host) "
                 f"and cheaper than rankmap launcher: {extra} (listed as losses in mode launcher).")
    # sanity checks
    notes = []
    for o in outs:
        for e in o.errors:
            notes.append(f"`{o.inst.name}`: rankmap mode {e['mode']} raised {e['error']}")
        L, F = o.rm["launcher"], o.rm["free"]
        if L is None or F is None:
            continue
        for m, x in o.rm.items():
            if abs(x["cost"] - x["exact"]) > 1e-9 * max(x["cost"], 1e-30):
                notes.append(f"`{o.inst.name}`: rankmap {m} reports cost {x['cost']!r} but layout_cost gives "
                             f"{x['exact']!r}")
        if is_loss(L["cost"], F["cost"]):
            notes.append(f"`{o.inst.name}`: rankmap free ({F['cost']:.6g} s) is worse than rankmap launcher "
                         f"({L['cost']:.6g} s), although free mode's search space contains every launcher layout")
        costs = [("rankmap launcher", L["cost"]), ("rankmap free", F["cost"])] + \
                [(p, x["cost"]) for p, x in o.peers.items()]
        for who, c in costs:
            if c < o.bound * (1 - REL_TOL):
                notes.append(f"`{o.inst.name}`: {who} cost {c!r} is below the lower bound {o.bound!r}")
        for m, x in o.rm.items():
            if x["status"] == "OPTIMAL" and o.W > 8 and x["cost"] > x["bound"] * (1 + 1e-6) + 1e-30:
                notes.append(f"`{o.inst.name}`: rankmap {m} says OPTIMAL with cost {x['cost']!r} above its bound "
                             f"{x['bound']!r} (beyond 8 GPUs OPTIMAL needs the cost to meet the bound)")
            if x["bound"] > x["cost"] * (1 + 1e-9) + 1e-30:
                notes.append(f"`{o.inst.name}`: rankmap {m}'s bound {x['bound']!r} exceeds its cost {x['cost']!r}")
            if x["status"] == "OPTIMAL" and any(is_loss(o.peers[p]["cost"], x["cost"])
                                                for p, mm in PEERS if mm == m and p in o.peers):
                notes.append(f"`{o.inst.name}`: rankmap {m} says OPTIMAL but a peer is cheaper")
    return "\n".join(lines), losses, notes


def sim_table(outs: list[Outcome]) -> str:
    """Per instance: simulated times of rankmap's and the best peer's layouts (both modes)."""
    lines = ["| # | instance | W | rankmap launcher sim | best launcher peer | peer / rm (sim) | peer / rm (pred) | "
             "rankmap free sim | best free peer | peer / rm (sim) | peer / rm (pred) | max abs(pred / sim − 1) |",
             "|---:|---|---:|---:|---|---:|---:|---:|---|---:|---:|---:|"]
    for i, o in enumerate(outs, 1):
        cells = [str(i), f"`{o.inst.name}`", str(o.W)]
        errs = []
        for mode in ("launcher", "free"):
            x = o.sim.get(mode) or {}
            if "skipped" in x or "rankmap" not in x or "peer_sim" not in x:
                cells += ["—", f"({x.get('skipped', 'not simulated')})", "—", "—"]
                continue
            rm, pe = x["rankmap"], x["peer_sim"]
            cells += [fmt_s(rm["simulated"]), x["peer"], fmt_ratio(sim_ratio(pe["simulated"], rm["simulated"]), SIM_REL_TOL),
                      fmt_ratio(sim_ratio(pe["predicted"], rm["predicted"]))]
            errs += [rel_err(rm), rel_err(pe)]
        cells.append(f"{100 * max(errs):.2f}%" if errs else "—")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def rel_err(x: dict) -> float:
    """abs(predicted / simulated − 1) of one simulated layout (0 when both are 0)."""
    if x["simulated"] <= 0:
        return 0.0 if x["predicted"] <= 0 else math.inf
    return abs(x["predicted"] / x["simulated"] - 1.0)


def sim_ratio(peer: float, rm: float) -> float:
    if rm <= 0:
        return 1.0 if peer <= 0 else math.inf
    return peer / rm


def sim_summary(outs: list[Outcome]) -> tuple[str, list[dict]]:
    """Per mode: how rankmap fares against the best peer under simulation; model-vs-simulation error."""
    lines = ["| rankmap mode | vs best peer of | instances simulated | rankmap ≤ peer (simulated) | "
             "peer < rankmap (simulated) | median ratio (sim) | geo-mean ratio (sim) | min ratio (sim) | "
             "predicted and simulated winner agree |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    losses, errs = [], []
    for mode, peers in (("launcher", "Megatron, greedy"), ("free", "random, QAP faq, QAP 2opt")):
        rs, n, wins, agree = [], 0, 0, 0
        for o in outs:
            x = o.sim.get(mode) or {}
            if "skipped" in x or "rankmap" not in x or "peer_sim" not in x:
                continue
            rm, pe = x["rankmap"], x["peer_sim"]
            errs += [(rel_err(rm), o.inst.name, mode, "rankmap"), (rel_err(pe), o.inst.name, mode, x["peer"])]
            n += 1
            sim_loss = pe["simulated"] < rm["simulated"] * (1 - SIM_REL_TOL)
            pred_loss = is_loss(pe["predicted"], rm["predicted"])
            wins += not sim_loss
            agree += sim_loss == pred_loss
            if sim_loss:
                losses.append(dict(instance=o.inst.name, mode=mode, peer=x["peer"],
                                   peer_simulated=pe["simulated"], rankmap_simulated=rm["simulated"],
                                   peer_predicted=pe["predicted"], rankmap_predicted=rm["predicted"]))
            r = sim_ratio(pe["simulated"], rm["simulated"])
            if math.isfinite(r) and r > 0:
                rs.append(r)
        med = statistics.median(rs) if rs else float("nan")
        geo = math.exp(sum(math.log(r) for r in rs) / len(rs)) if rs else float("nan")
        mn = min(rs) if rs else float("nan")
        lines.append(f"| {mode} | {peers} | {n} | {wins} / {n} | {n - wins} | {med:.3f} | {geo:.3f} | {mn:.4f} | "
                     f"{agree} / {n} |")
    skipped = sorted({f"`{o.inst.name}` ({o.sim[m]['skipped']})" for o in outs for m in ("launcher", "free")
                      if "skipped" in (o.sim.get(m) or {})})
    text = "\n".join(lines)
    if errs:
        e = sorted(errs, reverse=True)
        within = sum(x[0] <= 0.25 for x in errs)
        exact = sum(x[0] <= 1e-6 for x in errs)
        text += (f"\n\nModel against simulation, {len(errs)} simulated layouts (rankmap's and the best peer's, "
                 f"both modes; predicted = `layout_cost` total): median abs(predicted / simulated − 1) "
                 f"{100 * statistics.median(x[0] for x in errs):.3g}%, {exact} within 1e-6, {within} within "
                 f"25% (DESIGN §4's tolerance); largest: "
                 + "; ".join(f"{100 * v:.2f}% (`{name}`, {m}, {who})" for v, name, m, who in e[:3]) + ".")
    if skipped:
        text += "\n\nNot simulated: " + ", ".join(skipped) + "."
    return text, losses


def loss_record(o: Outcome, peer: str, mode: str) -> dict:
    p, rm = o.peers[peer], o.rm[mode]
    return {
        "instance": o.inst.name,
        "cluster": o.inst.spec.name,
        "cluster_recipe": o.inst.spec.recipe,
        "world_size": o.W,
        "sizes": o.cfg_sizes,
        "parallel_config_kwargs": o.inst.sizes,
        "traffic_mix": o.inst.mix,
        "traffic": o.traffic,
        "mode": mode,
        "peer": peer,
        "peer_cost_seconds": p["cost"],
        "rankmap_cost_seconds": rm["cost"],
        "ratio_peer_over_rankmap": p["cost"] / rm["cost"] if rm["cost"] else None,
        "rankmap_status": rm["status"],
        "rankmap_bound_seconds": rm["bound"],
        "rankmap_order": rm["order"],
        "rankmap_device_of_rank": rm["dev"],
        "peer_order": p["order"],
        "peer_device_of_rank": p["dev"],
        "peer_layout_is_launcher_compatible": p["launcher_layout"],
        "peer_beats_rankmap_launcher_too": bool(o.rm["launcher"] and is_loss(p["cost"], o.rm["launcher"]["cost"])),
        "rankmap_launcher_cost_seconds": o.rm["launcher"]["cost"] if o.rm["launcher"] else None,
        "cluster_devices": o.devices,
        "peer_note": p.get("note", ""),
        "replay": f"python benchmarks/bench_quality.py --instance '{o.inst.name}'",
    }


def run_sub(args: list[str]) -> tuple[str, float]:
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=ROOT)
    if p.returncode:
        return f"(failed, exit {p.returncode})\n\n```\n{p.stderr[-2000:]}\n```", time.perf_counter() - t0
    lines = [ln for ln in p.stdout.splitlines() if not ln.startswith("# done")]
    return "\n".join(lines).strip(), time.perf_counter() - t0


def parse_solve_table(text: str) -> list[tuple[int, float, float]]:
    """(GPUs, solve s, peak RSS MiB) rows of bench_solve's table."""
    rows = []
    for ln in text.splitlines():
        m = re.match(r"\|\s*([\d,]+)\s*\|\s*([\d.]+)\s*\|\s*([\d.]+)\s*\|\s*([\d.]+)\s*\|\s*([\d.]+)\s*\|", ln)
        if m:
            rows.append((int(m.group(1).replace(",", "")), float(m.group(4)), float(m.group(5))))
    return rows


def plot(outs: list[Outcome], solve_rows, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(15, 6.2), gridspec_kw=dict(width_ratios=[2.2, 1]))
    x = np.arange(1, len(outs) + 1)
    markers = {"Megatron": "o", "greedy": "s", "random": "x", "QAP faq": "^", "QAP 2opt": "v"}
    for p, mode in PEERS:
        xs, ys = [], []
        for i, o in zip(x, outs):
            r = ratio(o.peers.get(p), o.rm[mode]["cost"]) if o.rm[mode] else None
            if r is not None and math.isfinite(r) and r > 0:
                xs.append(i)
                ys.append(r)
        ax1.scatter(xs, ys, marker=markers[p], s=22, label=f"{p} / rankmap {mode}", alpha=0.8)
    for mode, mk, col in (("launcher", "_", "k"), ("free", "|", "0.35")):
        xs, ys = [], []
        for i, o in zip(x, outs):
            s = o.sim.get(mode) or {}
            if "rankmap" in s and "peer_sim" in s:
                r = sim_ratio(s["peer_sim"]["simulated"], s["rankmap"]["simulated"])
                if math.isfinite(r) and r > 0:
                    xs.append(i)
                    ys.append(r)
        if xs:
            ax1.scatter(xs, ys, marker=mk, s=90, color=col, linewidths=1.4,
                        label=f"best {mode} peer / rankmap {mode}, SimGrid")
    ax1.axhline(1.0, color="k", lw=0.8)
    ax1.set_yscale("log")
    ax1.set_xlabel("instance # (see table)")
    ax1.set_ylabel("peer time / rankmap time  (> 1: rankmap better)")
    ax1.set_title("Predicted communication time per step relative to rankmap (layout_cost; bars: simulated)")
    ax1.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=4, frameon=False)
    ax1.grid(True, which="both", alpha=0.3)
    for mode, mk in (("launcher", "o"), ("free", "s")):
        ok = [o for o in outs if o.rm[mode]]
        ax2.scatter([o.W for o in ok], [o.rm[mode]["solve_s"] for o in ok], marker=mk, s=20, alpha=0.6,
                    label=f"suite, mode {mode}")
    if solve_rows:
        ax2.plot([r[0] for r in solve_rows], [r[1] for r in solve_rows], "k-D", label="bench_solve.py (launcher)")
        for W, s, rss in solve_rows:
            ax2.annotate(f"{rss:.0f} MiB", (W, s), textcoords="offset points", xytext=(-30, 8), fontsize=8)
    ax2.set_xscale("log")
    ax2.set_yscale("log")
    ax2.set_xlabel("GPUs")
    ax2.set_ylabel("rankmap solve seconds (orders=all)")
    ax2.set_title("Solve time vs cluster size")
    ax2.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=2, frameon=False)
    ax2.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def instances(quick: bool) -> list[Instance]:
    out = []
    for spec in cluster_suite():
        if quick and not spec.quick:
            continue
        for sz, mixes in spec.cases:
            for mix in mixes[:1] if quick else mixes:
                out.append(Instance(f"{spec.name}|{sizes_str(sz)}|{mix}", spec, sz, mix))
    return out


def main(argv=None) -> int:
    global TIME_LIMIT
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="a 3-minute subset")
    ap.add_argument("--instance", help="run one instance by name (see the table) and print everything")
    ap.add_argument("--no-speed", action="store_true", help="skip bench_solve.py and bench_catalogue.py")
    ap.add_argument("--no-sim", action="store_true", help="skip the SimGrid cross-check of rankmap's and the best "
                    "peer's layouts")
    ap.add_argument("--match", action="append", default=[],
                    help="run only instances whose name contains this text (repeatable: any of them)")
    ap.add_argument("--max-gpus", type=int, default=0, help="skip instances with more GPUs than this (0: no limit)")
    ap.add_argument("--time-limit", type=float, default=None, help="rankmap time limit per solve (default "
                    "TIME_LIMIT = 6 s)")
    ap.add_argument("--out", default=str(OUT))
    args = ap.parse_args(argv)
    if args.time_limit:
        TIME_LIMIT = float(args.time_limit)
    t_start = time.perf_counter()
    if args.instance:
        for inst in instances(False):
            if inst.name == args.instance:
                o = run_instance(inst, verbose=True, simulate=not args.no_sim)
                if o is None:
                    print("instance not applicable (sizes or traffic do not fit)")
                return 0
        print(f"unknown instance {args.instance!r}", file=sys.stderr)
        return 2
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)

    simulate = not args.no_sim
    if simulate:
        ok, why = sm.simgrid_available()
        if not ok:
            print(f"SimGrid not importable ({why}); the simulation cross-check is skipped "
                  "(apt-get install python3-simgrid; a venv with --system-site-packages)", file=sys.stderr)
            simulate = False
    outs: list[Outcome] = []
    for inst in instances(args.quick):
        if args.match and not any(m in inst.name for m in args.match):
            continue
        if args.max_gpus and inst.spec.gpus and inst.spec.gpus > args.max_gpus:
            continue
        t0 = time.perf_counter()
        o = run_instance(inst, simulate=simulate)
        if o is None:
            continue
        outs.append(o)
        L, F = o.rm["launcher"], o.rm["free"]
        flags = [p for p, m in PEERS if p in o.peers and o.rm[m] and is_loss(o.peers[p]["cost"], o.rm[m]["cost"])]
        simtxt = ""
        for m in ("launcher", "free"):
            x = o.sim.get(m) or {}
            if "rankmap" in x and "peer_sim" in x:
                simtxt += (f" sim{m[0].upper()} {sim_ratio(x['peer_sim']['simulated'], x['rankmap']['simulated']):.3f}"
                           f"/{rel_err(x['rankmap']):.0e}")
        print(f"# {len(outs):3d} {inst.name:48s} W={o.W:4d} L={L['cost'] if L else float('nan'):.4g} "
              f"F={F['cost'] if F else float('nan'):.4g} {time.perf_counter() - t0:5.1f}s{simtxt}"
              f"{'  LOSS vs ' + ','.join(flags) if flags else ''}{'  ERROR' if o.errors else ''}",
              file=sys.stderr, flush=True)
    t_quality = time.perf_counter() - t_start

    table = quality_table(outs)
    summ, losses, notes = summary(outs)
    t_sim = sum(o.sim_s for o in outs)
    sim_md = []
    if simulate:
        s_summ, s_losses = sim_summary(outs)
        sim_md = [
            "## Cross-check by simulation (SimGrid)",
            "",
            f"Every instance up to {SIM_MAX_W} GPUs (and at most {SIM_MAX_FLOWS:,} flows in a class): rankmap's layout "
            "and the best peer's layout (lowest predicted time among the peers of that mode) are simulated with "
            "`benchmarks/simgrid_model.py`: SimGrid's flow-level max-min sharing, routes computed by networkx "
            "(widest path, fewest hops, ECMP), no code shared with rankmap's time model. A layout's simulated time "
            "is the sum over classes of each class's makespan (all its groups at once). Ratios are peer / rankmap "
            f"(simulated, and predicted for comparison); a simulated loss needs the peer below rankmap by more than "
            f"{SIM_REL_TOL:g} relative. {t_sim:.0f} s of simulation in all.",
            "",
            s_summ,
            "",
        ]
        if s_losses:
            sim_md += ["Simulated losses (peer faster than rankmap under simulation):", "",
                       "| instance | mode | peer | peer sim | rankmap sim | peer / rankmap (sim) | "
                       "peer / rankmap (predicted) |", "|---|---|---|---:|---:|---:|---:|"]
            for l in s_losses:
                sim_md.append(f"| `{l['instance']}` | {l['mode']} | {l['peer']} | {fmt_s(l['peer_simulated'])} | "
                              f"{fmt_s(l['rankmap_simulated'])} | "
                              f"{sim_ratio(l['peer_simulated'], l['rankmap_simulated']):.4f} | "
                              f"{sim_ratio(l['peer_predicted'], l['rankmap_predicted']):.4f} |")
            sim_md += [""]
        else:
            sim_md += ["No simulated losses: under simulation rankmap's layout is never slower than the best peer's.",
                       ""]
        sim_md += ["Per instance:", "", sim_table(outs), ""]

    speed_md, solve_rows = "", []
    t_speed = 0.0
    if not args.no_speed:
        sizes = "1024,16384" if args.quick else "1024,16384,131072"
        solve_txt, t1 = run_sub(["benchmarks/bench_solve.py", "--repeat", "1", "--sizes", sizes])
        cat_args = ["benchmarks/bench_catalogue.py", "--worlds", sizes, "--repeats", "3", "--megatron-repeats", "1"]
        cat_txt, t2 = run_sub(cat_args)
        solve_rows = parse_solve_table(solve_txt)
        t_speed = t1 + t2
        speed_md = (f"## Speed\n\n`python benchmarks/bench_solve.py --repeat 1 --sizes {sizes}` ({t1:.0f} s):\n\n"
                    f"{solve_txt}\n\n`python {' '.join(cat_args)}` ({t2:.0f} s):\n\n{cat_txt}\n")

    n_opt = sum(bool(o.rm[m]) and o.rm[m]["status"] == "OPTIMAL" for o in outs for m in ("launcher", "free"))
    n_err = sum(len(o.errors) for o in outs)
    total = time.perf_counter() - t_start
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                cwd=ROOT).stdout.strip() or "unknown"
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "solver", "rankmap"], capture_output=True,
                               text=True, cwd=ROOT).stdout.strip()
        if dirty:
            commit += " (+ uncommitted changes under solver/ or rankmap/ at the end of the run)"
    except OSError:
        commit = "unknown"
    md = [
        f"# rankmap layout quality ({'quick subset' if args.quick else 'full suite'})",
        "",
        f"`python benchmarks/bench_quality.py{' --quick' if args.quick else ''}` at commit {commit}, "
        f"{time.strftime('%Y-%m-%d')}.",
        "",
        f"{len(outs)} instances (cluster | sizes | traffic mix). Costs are the predicted communication time per "
        "step on shared links (DESIGN §4: per class, all groups at once, max over flows and directed links of "
        "bytes / capacity, summed over classes; seconds), every layout scored with `layout_cost`, whatever "
        "objective the peer itself optimised (the QAP peers minimise Σ bytes / pairwise bandwidth, a surrogate). "
        "Ratios are peer / rankmap "
        "(> 1: rankmap better; **bold ⚠** < 1: the peer beats rankmap). Megatron and greedy are launcher "
        "layouts and are compared with rankmap `mode=launcher`; random and QAP are free bijections and are "
        "compared with rankmap `mode=free` (both `orders=all`, time limit "
        f"{TIME_LIMIT:g} s). Gap = (rankmap cost − its reported lower bound) / cost. Status OPT = proved optimal, "
        "FEA = feasible. METIS tree / Scotch: process mappers (benchmarks/tree_peers.py), launcher variants map "
        "host blocks, free variants ranks" + ("" if SCOTCH_OK else f" (Scotch not importable: {SCOTCH_WHY})") + ".",
        "",
        table,
        "",
        "## Summary",
        "",
        summ,
        "",
        "Per rankmap mode: wins (rankmap strictly below every peer of the mode), ties (equal to the best peer "
        f"within {REL_TOL:g}), losses (some peer strictly below); free ≤ launcher; solves within the time limit "
        "(`solve_seconds` ≤ the limit); gap = (cost − bound) / cost with the solve's reported bound.",
        "",
        gap_and_record(outs),
        "",
        f"rankmap status OPTIMAL in {n_opt} of {2 * len(outs)} solves; {n_err} solves raised an exception. "
        f"Losses (peer strictly cheaper, relative tolerance {REL_TOL:g}): {len(losses)}.",
        "",
    ]
    if notes:
        md += ["Consistency notes:", ""] + [f"* {n}" for n in notes] + [""]
    else:
        md += ["Consistency checks passed: every layout costs at least rankmap's lower bound; rankmap's "
               "reported costs equal `layout_cost`; no OPTIMAL claim is beaten or above its bound; rankmap free ≤ "
               "rankmap launcher.", ""]
    if losses:
        md += ["## Losses", "", "Instances where a peer's predicted time is below rankmap's; margin = how much "
               "slower rankmap is (rankmap / peer − 1).", "",
               "| instance | mode | peer | peer cost | rankmap cost | peer / rankmap | margin | peer order | "
               "rankmap order | rankmap status | peer layout launcher-compatible |",
               "|---|---|---|---:|---:|---:|---:|---|---|---|---|"]
        for l in losses:
            margin = l["rankmap_cost_seconds"] / l["peer_cost_seconds"] - 1 if l["peer_cost_seconds"] > 0 else math.inf
            md.append(f"| `{l['instance']}` | {l['mode']} | {l['peer']} | {l['peer_cost_seconds']:.9g} | "
                      f"{l['rankmap_cost_seconds']:.9g} | {l['ratio_peer_over_rankmap']:.4f} | {100 * margin:.2f}% | "
                      f"{l['peer_order']} | {l['rankmap_order']} | {l['rankmap_status']} | "
                      f"{'yes' if l['peer_layout_is_launcher_compatible'] else 'no'} |")
        md += ["", "Device orders: `benchmarks/out/losses.json`.", ""]
    md += sim_md
    md += [speed_md, f"Runtime: quality suite {t_quality:.0f} s (of which SimGrid {t_sim:.0f} s), speed benchmarks "
           f"{t_speed:.0f} s, total {total:.0f} s on {os.cpu_count()} CPUs.", ""]
    md_text = "\n".join(md)
    (out_dir / "quality.md").write_text(md_text)
    errors = [dict(instance=o.inst.name, cluster_recipe=o.inst.spec.recipe, world_size=o.W,
                   parallel_config_kwargs=o.inst.sizes, traffic=o.traffic, **e) for o in outs for e in o.errors]
    (out_dir / "losses.json").write_text(json.dumps(losses, indent=1))
    (out_dir / "errors.json").write_text(json.dumps(errors, indent=1))
    (out_dir / "quality.json").write_text(json.dumps([
        {"instance": o.inst.name, "cluster_recipe": o.inst.spec.recipe, "W": o.W, "sizes": o.cfg_sizes,
         "traffic": o.traffic, "bound": o.bound,
         "rankmap": {m: x and {k: v for k, v in x.items() if k != "dev"} for m, x in o.rm.items()},
         "errors": o.errors,
         "peers": {p: {k: v for k, v in x.items() if k != "dev"} for p, x in o.peers.items()},
         "simulated": o.sim}
        for o in outs], indent=1))
    try:
        plot(outs, solve_rows, out_dir / "quality.png")
    except ImportError as exc:  # matplotlib is in the [bench] extra
        print(f"no plot ({exc}); pip install matplotlib", file=sys.stderr)
    print(md_text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
