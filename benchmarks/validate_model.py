"""Validate rankmap's predicted per-class times against a SimGrid flow-level simulation.

For every fabric (built here with networkx, independently of rankmap's
importers and builders) and several layouts of the job on it (Megatron orders
x host orders), each traffic class is simulated with max-min sharing
(``benchmarks/simgrid_model.py``: NCCL's flows written out pair by pair, on the
calibrated link rates) and compared with what rankmap predicts as the
bandwidth time of the ring algorithm (:func:`predict`: ``layout_cost`` on
``cluster_from_graph(graph, nccl=RING_BANDWIDTH)``, RING_BANDWIDTH =
``NcclModel(algorithm="ring", latency=False)``: SimGrid checks the
link-sharing arithmetic; NCCL's other algorithms and its latency model are
checked against published figures by ``benchmarks/validate_nccl.py``).
``rankmap.solver.solve`` (orders ``all``, same NCCL model) is run too and its
layout simulated: is it within 2 % of the fastest simulated alternative?

    python benchmarks/validate_model.py            # all fabrics
    python benchmarks/validate_model.py --quick    # a subset
    python benchmarks/validate_model.py --strict   # exit 1 if a check fails
    python benchmarks/validate_model.py --only issue-2leaf-4to1 --verbose

Checks (``--strict``): every class's predicted/simulated ratio within
``--tolerance`` (default 25 %), and the solved layout within 2 % of the
fastest simulated alternative on every fabric.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
from dataclasses import dataclass, field
from typing import Callable

import networkx as nx
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import simgrid_model as sm  # noqa: E402

from rankmap.solver import (  # noqa: E402
    Cluster,
    NcclModel,
    SolveOptions,
    candidate_orders,
    cluster_from_graph,
    layout_cost,
    parallel_config,
    solve,
)

DEFAULT_ORDER = "tp-cp-ep-dp-pp"
PP_BEFORE_DP = "tp-cp-ep-pp-dp"

#: What SimGrid checks: the bandwidth time of the ring algorithm (NCCL's flows, no latency model).
RING_BANDWIDTH = NcclModel(algorithm="ring", latency=False)


def ring_cluster(g: nx.Graph) -> Cluster:
    """rankmap's cluster model of ``g`` under :data:`RING_BANDWIDTH`."""
    return cluster_from_graph(g, nccl=RING_BANDWIDTH)


def predict(g, cfg, assignment, traffic, cluster: Cluster | None = None):
    """rankmap's prediction (``CostBreakdown``) of a layout under :data:`RING_BANDWIDTH`:
    ``layout_cost`` on ``cluster_from_graph(g, nccl=RING_BANDWIDTH)``, ``assignment[r]`` the GPU of rank r."""
    cluster = cluster if cluster is not None else ring_cluster(g)
    index = {str(d): i for i, d in enumerate(cluster.devices)}
    dev = np.array([index[str(a)] for a in assignment], dtype=np.int64)
    return layout_cost(cluster, cfg, dev, traffic)


# --------------------------------------------------------------------------- fabrics


def _host(g: nx.Graph, host: str, kind: str, gpus: int, nic_gbps: float, intra_gbps: float, leaf: str,
          lat: float | None, rail_switches: list[str] | None = None, planes: int = 1) -> None:
    """Add one host's GPUs and internal links, and its NIC links to ``leaf``.

    kind: ``nvswitch-rail``  every GPU on an NVSwitch (``intra_gbps``), one NIC per GPU
                             (gpu-nic and nic-leaf ``nic_gbps``; NIC i to ``rail_switches[i]`` if given);
                             ``planes`` > 1: that many NVSwitch chips, every GPU on each at
                             ``intra_gbps / planes`` (DGX H100 style; ECMP over the chips);
          ``shared-nic``     every GPU on a PCIe switch at 32 GB/s, one NIC for the host
                             (pcie-nic and nic-leaf ``nic_gbps``);
          ``nvlink-pairs``   GPUs 2i, 2i+1 joined by NVLink (``intra_gbps``), every GPU on a PCIe
                             switch at 32 GB/s, one shared NIC as ``shared-nic``.
    """
    extra = {} if lat is None else {"latency_us": lat}

    def link(a, b, bw):
        g.add_edge(a, b, bandwidth=float(bw), **extra)

    gpus_ids = [f"{host}/gpu{i}" for i in range(gpus)]
    for i, gid in enumerate(gpus_ids):
        g.add_node(gid, kind="gpu", host=host, local_index=i)
    if kind == "nvswitch-rail":
        chips = [f"{host}/nvswitch"] if planes == 1 else [f"{host}/nvswitch{k}" for k in range(planes)]
        for sw in chips:
            g.add_node(sw, kind="nvswitch")
        for i, gid in enumerate(gpus_ids):
            for sw in chips:
                link(gid, sw, intra_gbps / planes)
            nic = f"{host}/nic{i}"
            g.add_node(nic, kind="nic")
            link(gid, nic, nic_gbps)
            link(nic, rail_switches[i] if rail_switches else leaf, nic_gbps)
        return
    pcie = f"{host}/pcie"
    g.add_node(pcie, kind="pcie_switch")
    for i, gid in enumerate(gpus_ids):
        link(gid, pcie, 32.0)
        if kind == "nvlink-pairs" and i % 2 == 1:
            link(gpus_ids[i - 1], gid, intra_gbps)
    if kind not in ("shared-nic", "nvlink-pairs"):
        raise ValueError(kind)
    nic = f"{host}/nic"
    g.add_node(nic, kind="nic")
    link(pcie, nic, nic_gbps)
    link(nic, leaf, nic_gbps)


def leaf_spine(hosts_per_leaf: list[int], kind: str | list[str] = "nvswitch-rail", oversub: float | list[float] = 1.0,
               ports: int | None = None, spines: int = 1, gpus: int = 8, nic_gbps: float = 50.0,
               intra_gbps: float = 450.0, uplink_gbps: float | None = None,
               latency_us: float | None = None, planes: int = 1,
               spine_gbps: dict | None = None) -> nx.Graph:
    """Hosts under leaves, leaves under ``spines`` spine switches.

    Each leaf's uplink capacity = (its down-link capacity: ``ports`` hosts x the
    host's NIC capacity) / ``oversub``, split evenly over the spines
    (``uplink_gbps`` overrides the total).  ``ports`` defaults to the largest
    ``hosts_per_leaf``, so a fragmented job sees the leaves' full nominal uplinks.
    ``kind`` and ``oversub`` may be lists (one per leaf: mixed host types,
    unequal uplinks).  ``spine_gbps`` {(leaf index, spine index): GB/s} overrides single
    leaf-spine links (a degraded uplink).  ``planes``: NVSwitch chips per host.  Host names ``l{leaf}h{i}`` (zero-padded) sort leaf by leaf.
    """
    g = nx.Graph()
    ports = ports or max(hosts_per_leaf)
    nleaf = len(hosts_per_leaf)
    kinds = list(kind) if isinstance(kind, (list, tuple)) else [kind] * nleaf
    ratios = list(oversub) if isinstance(oversub, (list, tuple)) else [oversub] * nleaf
    multi = nleaf > 1
    for s in range(spines if multi else 0):
        g.add_node(f"spine{s}", kind="switch")
    for li, nh in enumerate(hosts_per_leaf):
        leaf = f"leaf{li}"
        g.add_node(leaf, kind="switch")
        host_nic = nic_gbps * (gpus if kinds[li] == "nvswitch-rail" else 1)
        up_total = uplink_gbps if uplink_gbps is not None else ports * host_nic / ratios[li]
        for s in range(spines if multi else 0):
            extra = {} if latency_us is None else {"latency_us": latency_us}
            bw = (spine_gbps or {}).get((li, s), up_total / spines)
            g.add_edge(leaf, f"spine{s}", bandwidth=float(bw), **extra)
        for h in range(nh):
            _host(g, f"l{li}h{h:02d}", kinds[li], gpus, nic_gbps, intra_gbps, leaf, latency_us, planes=planes)
    return g


def hgx_h100_leaf_pair(hosts: int = 2, oversub: float = 2.0) -> nx.Graph:
    """``rankmap cluster --gpus-per-node 8 --gpu h100 --fabric leaf.conf --oversubscription 2``, written by hand.

    leaf.conf: ``SwitchName=spine Switches=leaf[0-1]``, ``SwitchName=leaf{i} Nodes=n{i}``: one
    host per leaf.  A host as rankmap's synthetic 8xH100 (``solver/formats/compose.py``): GPU i
    on an NVSwitch (``link`` nvlink, 18 links, 450 GB/s), on PCIe switch i (63 GB/s) whose NIC i
    (``nic_index`` i) it reaches at 50 GB/s, PCIe switches 0-3 under CPU 0 and 4-7 under CPU 1
    (63 GB/s), the CPUs joined at 22 GB/s; NIC i to the leaf (``link`` net, 50 GB/s); each leaf to
    the spine at its 8 x 50 GB/s down over ``oversub`` (``link`` fabric).  ``graph['gpu']`` h100,
    so the calibrated rates are NVLink 370.8, NIC port 48, uplink 192 GB/s (2:1).
    """
    g = nx.Graph(gpu="h100")
    g.add_node("switch:spine", kind="switch")
    for h in range(hosts):
        host, leaf = f"n{h}", f"switch:leaf{h}"
        g.add_node(leaf, kind="switch")
        g.add_edge("switch:spine", leaf, bandwidth=8 * 50.0 / oversub, link="fabric")
        for c in range(2):
            g.add_node(f"{host}/cpu{c}", kind="cpu", numa=c, host=host)
        g.add_edge(f"{host}/cpu0", f"{host}/cpu1", bandwidth=22.0, link="sys")
        sw = f"{host}/nvswitch"
        g.add_node(sw, kind="nvswitch", host=host)
        for i in range(8):
            gpu, pcie, nic = f"{host}/gpu{i}", f"{host}/pcie{i}", f"{host}/nic:nic{i}"
            g.add_node(gpu, kind="gpu", local_index=i, numa=i // 4, host=host)
            g.add_node(pcie, kind="pcie_switch", host=host)
            g.add_node(nic, kind="nic", name=f"nic{i}", nic_index=i, port_bandwidth=50.0, host=host)
            g.add_edge(gpu, pcie, bandwidth=63.0, link="pcie")
            g.add_edge(gpu, sw, bandwidth=450.0, link="nvlink", nvlinks=18)
            g.add_edge(gpu, nic, bandwidth=50.0, link="pcie")
            g.add_edge(f"{host}/cpu{i // 4}", pcie, bandwidth=63.0, link="pcie")
            g.add_edge(nic, leaf, bandwidth=50.0, link="net")
    return g


def rail_optimized(num_hosts: int, gpus: int = 8, nic_gbps: float = 50.0, oversub: float = 1.0) -> nx.Graph:
    """NIC i of every host on rail switch i; rail switches under one spine."""
    g = nx.Graph()
    rails = [f"rail{i}" for i in range(gpus)]
    g.add_node("spine0", kind="switch")
    for r in rails:
        g.add_node(r, kind="switch")
        g.add_edge(r, "spine0", bandwidth=num_hosts * nic_gbps / oversub)
    for h in range(num_hosts):
        _host(g, f"r0h{h:02d}", "nvswitch-rail", gpus, nic_gbps, 450.0, "", None, rail_switches=rails)
    return g


def three_tier(pods: int, leaves_per_pod: int, hosts_per_leaf: int, r_leaf: float, r_pod: float) -> nx.Graph:
    """Shared-NIC hosts; leaves under a pod switch (``r_leaf``), pods under a core switch (``r_pod``)."""
    g = nx.Graph()
    g.add_node("core", kind="switch")
    down_leaf = hosts_per_leaf * 50.0
    up_leaf = down_leaf / r_leaf
    up_pod = leaves_per_pod * up_leaf / r_pod
    for p in range(pods):
        pod = f"pod{p}"
        g.add_node(pod, kind="switch")
        g.add_edge(pod, "core", bandwidth=up_pod)
        for li in range(leaves_per_pod):
            leaf = f"p{p}leaf{li}"
            g.add_node(leaf, kind="switch")
            g.add_edge(leaf, pod, bandwidth=up_leaf)
            for h in range(hosts_per_leaf):
                _host(g, f"p{p}l{li}h{h:02d}", "shared-nic", 8, 50.0, 32.0, leaf, None)
    return g


# --------------------------------------------------------------------------- cases


@dataclass
class Case:
    name: str
    build: Callable[[], nx.Graph]
    sizes: dict
    traffic: dict
    note: str = ""
    quick: bool = False
    extra_orders: int = 2
    expect_ms: dict = field(default_factory=dict)  # (order, host order) -> simulated total ms


ISSUE_TRAFFIC = {"tp": 40e9, "pp": 2.25e9, "dp": 6e9}

CASES = [
    Case("issue-2leaf-4to1", lambda: leaf_spine([4, 4], oversub=4), dict(tp=8, pp=2), ISSUE_TRAFFIC,
         "the issue: 2 leaves x 4 H100 hosts, rail NICs, 400 GB/s leaf uplinks", quick=True,
         expect_ms={(DEFAULT_ORDER, "sorted"): 426.0, (PP_BEFORE_DP, "sorted"): 381.0}),
    Case("issue-2leaf-2to1", lambda: leaf_spine([4, 4], oversub=2), dict(tp=8, pp=2), ISSUE_TRAFFIC, "800 GB/s uplinks"),
    Case("issue-2leaf-1to1", lambda: leaf_spine([4, 4], oversub=1), dict(tp=8, pp=2), ISSUE_TRAFFIC, "non-blocking"),
    Case("rail-4leaf-4to1-pp4", lambda: leaf_spine([2, 2, 2, 2], oversub=4), dict(tp=8, pp=4),
         {"tp": 20e9, "pp": 3e9, "dp": 8e9, "embedding": 1e9}, "4 leaves x 2 hosts, pp 4, embedding"),
    Case("rail-2spine-ecmp-2to1", lambda: leaf_spine([2, 2], oversub=2, spines=2), dict(tp=8, pp=2),
         {"tp": 20e9, "pp": 4e9, "dp": 6e9}, "two spines: ECMP over both", quick=True),
    Case("frag-rail-3-1-4-2to1", lambda: leaf_spine([3, 1, 4], oversub=2, ports=4), dict(tp=8, pp=2),
         {"tp": 30e9, "pp": 2e9, "dp": 8e9}, "fragmented: 3+1+4 hosts on three leaves"),
    Case("frag-rail-1-3-4to1", lambda: leaf_spine([1, 3], oversub=4, ports=4), dict(tp=8, pp=4),
         {"tp": 30e9, "pp": 4e9, "dp": 4e9}, "fragmented: 1+3 hosts"),
    Case("shared-1leaf", lambda: leaf_spine([4], kind="shared-nic"), dict(tp=8, pp=2),
         {"tp": 8e9, "pp": 1e9, "dp": 2e9}, "one 50 GB/s NIC per 8 GPUs, PCIe 32 GB/s", quick=True),
    Case("shared-2leaf-2to1", lambda: leaf_spine([2, 2], kind="shared-nic", oversub=2), dict(tp=4, pp=2),
         {"tp": 6e9, "pp": 1e9, "dp": 3e9}, "shared NIC, tp 4 (two tp groups per host)"),
    Case("shared-2leaf-4to1-dp", lambda: leaf_spine([4, 4], kind="shared-nic", oversub=4), dict(tp=8),
         {"tp": 8e9, "dp": 4e9}, "shared NIC, 64 GPUs, dp 8 across leaves"),
    Case("frag-shared-1-2-1-4to1", lambda: leaf_spine([1, 2, 1], kind="shared-nic", oversub=4, ports=2),
         dict(tp=4, pp=4), {"tp": 4e9, "pp": 1e9, "dp": 2e9}, "fragmented shared-NIC hosts"),
    Case("nvpairs-1leaf", lambda: leaf_spine([4], kind="nvlink-pairs", intra_gbps=100.0), dict(tp=2, pp=2),
         {"tp": 10e9, "pp": 1e9, "dp": 2e9}, "NVLink pairs (100 GB/s), PCIe, shared NIC", quick=True),
    Case("nvpairs-2leaf-2to1-cp", lambda: leaf_spine([2, 2], kind="nvlink-pairs", intra_gbps=100.0, oversub=2),
         dict(tp=2, cp=2, pp=2), {"tp": 8e9, "cp": 4e9, "pp": 1e9, "dp": 2e9}, "NVLink pairs with cp"),
    Case("moe-rail-ep8", lambda: leaf_spine([2, 2], oversub=2), dict(tp=2, ep=8),
         {"tp": 8e9, "ep": 16e9, "dp": 2e9, "edp": 6e9}, "MoE: ep 8 all-to-all, tp 2", quick=True),
    Case("moe-rail-ep16-4to1", lambda: leaf_spine([2, 2], oversub=4), dict(tp=1, ep=16),
         {"ep": 24e9, "dp": 2e9, "edp": 4e9}, "MoE: ep 16 spans leaves"),
    Case("moe-shared-ep8-etp1", lambda: leaf_spine([4], kind="shared-nic"), dict(tp=2, ep=4, etp=1, pp=2),
         {"tp": 4e9, "ep": 6e9, "etp": 1e9, "edp": 2e9, "pp": 1e9, "dp": 1e9}, "MoE on shared NICs, etp 1"),
    Case("pp-heavy-rail-pp8", lambda: leaf_spine([4, 4], oversub=4), dict(tp=8, pp=8),
         {"tp": 10e9, "pp": 20e9, "embedding": 2e9}, "pipeline-heavy: pp 8 over 8 hosts"),
    Case("pp-heavy-shared-pp8", lambda: leaf_spine([2, 2], kind="shared-nic", oversub=2), dict(tp=4, pp=8),
         {"tp": 2e9, "pp": 6e9, "dp": 1e9}, "pipeline-heavy, shared NIC"),
    Case("dp-heavy-rail-2to1", lambda: leaf_spine([4, 4], oversub=2), dict(tp=2), {"tp": 4e9, "dp": 20e9},
         "dp-heavy: dp 32"),
    Case("dp-heavy-shared", lambda: leaf_spine([4], kind="shared-nic"), dict(tp=1), {"dp": 8e9},
         "dp-heavy on shared NICs: dp 32 ring"),
    Case("cp-rail-2to1", lambda: leaf_spine([2, 2], oversub=2), dict(tp=4, cp=2, pp=2),
         {"tp": 10e9, "cp": 6e9, "pp": 2e9, "dp": 4e9}, "context parallel"),
    Case("rail-optimized", lambda: rail_optimized(4, oversub=2), dict(tp=8, pp=2),
         {"tp": 10e9, "pp": 3e9, "dp": 6e9}, "NIC i on rail switch i; cross-rail via the spine"),
    Case("three-tier-shared", lambda: three_tier(2, 2, 1, r_leaf=1, r_pod=2), dict(tp=8, pp=2),
         {"tp": 4e9, "pp": 2e9, "dp": 3e9}, "leaf -> pod -> core, shared NICs"),
    Case("mixed-hosts-asym", lambda: leaf_spine([2, 2], kind=["nvswitch-rail", "shared-nic"], oversub=[2, 1]),
         dict(tp=8, pp=2), {"tp": 10e9, "pp": 2e9, "dp": 6e9},
         "leaf 0: rail-NIC NVSwitch hosts (2:1), leaf 1: shared-NIC PCIe hosts (1:1)", quick=True),
    Case("frag-asym-moe", lambda: leaf_spine([3, 1], kind="nvswitch-rail", oversub=[4, 1], ports=4),
         dict(tp=2, ep=8), {"tp": 6e9, "ep": 12e9, "dp": 3e9, "edp": 4e9},
         "fragmented 3+1 hosts, leaf 0 at 4:1, leaf 1 at 1:1, MoE"),
    Case("nvswitch-planes", lambda: leaf_spine([2, 2], oversub=2, planes=4), dict(tp=8, pp=2),
         {"tp": 20e9, "pp": 3e9, "dp": 6e9}, "4 NVSwitch chips per host (112.5 GB/s per GPU each): ECMP inside hosts"),
    Case("ecmp-unequal-uplinks", lambda: leaf_spine([4, 4], oversub=2, spines=2, spine_gbps={(0, 1): 200.0, (1, 1): 200.0}),
         dict(tp=8, pp=2), ISSUE_TRAFFIC,
         "two spines, the spine1 uplinks degraded to 200 GB/s (spine0 400): flows split evenly over both "
         "(known disagreement: rankmap merges the spines as ECMP twins with summed capacity, 600 GB/s, while an "
         "even split is limited by 2 x 200 = 400 GB/s)"),
    Case("hgx-h100-2host-2to1", hgx_h100_leaf_pair, dict(tp=4, ep=4, etp=4), {"tp": 8e9, "dp": 4e9, "ep": 8e9},
         "2 x 8xH100 as `rankmap cluster --gpus-per-node 8 --gpu h100 --fabric leaf.conf`, 2:1 leaf uplinks; "
         "dp and ep groups of 2 members per host (2 channels, PXN)", quick=True,
         expect_ms={(DEFAULT_ORDER, "sorted"): 1e3 * (12e9 / 370.8e9 + 12e9 / 192e9 + 32e9 / 192e9)}),
    Case("issue-latency-5us", lambda: leaf_spine([4, 4], oversub=4, latency_us=5.0), dict(tp=8, pp=2),
         ISSUE_TRAFFIC, "the issue case with 5 us per link"),
]


# --------------------------------------------------------------------------- layouts


def hosts_of(g: nx.Graph) -> dict[str, list[str]]:
    """host -> its GPUs by local_index, hosts in graph insertion order."""
    out: dict[str, list] = {}
    for n, d in g.nodes(data=True):
        if d.get("kind", "gpu") == "gpu":
            out.setdefault(d.get("host", str(n)), []).append(n)
    return {h: sorted(v, key=lambda n: g.nodes[n].get("local_index", 0)) for h, v in out.items()}


def leaf_of(g: nx.Graph, gpu) -> str:
    """The first switch-like node a GPU's host reaches (for interleaving)."""
    for n in nx.bfs_tree(g, gpu):
        if g.nodes[n].get("kind") == "switch":
            return n
    return ""


def host_orders(g: nx.Graph) -> dict[str, list[str]]:
    hosts = hosts_of(g)
    names = sorted(hosts)
    by_leaf: dict[str, list[str]] = {}
    for h in names:
        by_leaf.setdefault(leaf_of(g, hosts[h][0]), []).append(h)
    inter = []
    columns = list(by_leaf.values())
    for i in range(max(map(len, columns))):
        inter += [c[i] for c in columns if i < len(c)]
    if inter == names and len(names) > 2:  # one leaf: interleave the halves instead
        inter = names[0::2] + names[1::2]
    return {"sorted": names, "interleaved": inter, "reversed": names[::-1], "shuffled": "shuffled", "random": "random"}


def assignment_for(g: nx.Graph, host_order) -> list:
    """GPUs host by host in ``host_order`` (by local_index); ``"shuffled"``: a seeded random
    host order and a random local GPU order on every host; ``"random"``: a seeded random
    bijection of ranks to GPUs (not a launcher layout)."""
    hosts = hosts_of(g)
    if host_order == "random":  # any bijection (rankmap's free mode): ranks scattered over hosts
        rng = random.Random(54321)
        devs = [gpu for h in sorted(hosts) for gpu in hosts[h]]
        rng.shuffle(devs)
        return devs
    if host_order == "shuffled":
        rng = random.Random(12345)
        names = sorted(hosts)
        rng.shuffle(names)
        return [gpu for h in names for gpu in rng.sample(hosts[h], len(hosts[h]))]
    return [gpu for h in host_order for gpu in hosts[h]]


def orders_for(cfg, extra: int) -> list[str]:
    cands = [c.order for c in candidate_orders(cfg, "all")]
    out = [DEFAULT_ORDER]
    if PP_BEFORE_DP in cands:
        out.append(PP_BEFORE_DP)
    rest = [o for o in cands if o not in out]
    # a deterministic spread over the remaining distinct orders
    if rest and extra > 0:
        step = max(1, len(rest) // extra)
        out += rest[::step][:extra]
    return out


# --------------------------------------------------------------------------- run


@dataclass
class Row:
    fabric: str
    layout: str
    predicted: dict
    simulated: dict
    solved: bool = False
    bottleneck: dict = field(default_factory=dict)  # class -> rankmap's bottleneck, one line

    def ratio(self, c):
        s, p = self.simulated.get(c, 0.0), self.predicted.get(c, 0.0)
        if s <= 0:
            return 1.0 if p <= 0 else float("inf")
        return p / s

    @property
    def sim_total(self):
        return sum(self.simulated.values())

    @property
    def pred_total(self):
        return sum(self.predicted.get(c, 0.0) for c in self.simulated)


def run_case(case: Case, time_limit: float, workers: int, verbose: bool):
    t0 = time.perf_counter()
    g = case.build()
    world = sum(len(v) for v in hosts_of(g).values())
    base = parallel_config(world, **case.sizes)
    router = sm.Router(g)
    cluster = ring_cluster(g)
    layouts = []  # (label, cfg, assignment)
    for order in orders_for(base, case.extra_orders):
        cfg = base.with_order(order)
        for hname, horder in host_orders(g).items():
            layouts.append((f"{order} / {hname}", cfg, assignment_for(g, horder)))
    # rankmap's choice
    ts = time.perf_counter()
    res = solve(cluster, base, case.traffic,
                SolveOptions(orders="all", time_limit_seconds=time_limit, nccl=RING_BANDWIDTH))
    solve_s = time.perf_counter() - ts
    solved_cfg = base.with_order(res.layout.order)
    layouts.append((f"solved: {res.layout.order}", solved_cfg, list(res.assignment)))
    sims = sm.simulate_layouts(g, [(c, a) for _, c, a in layouts], case.traffic, workers=workers, router=router)
    rows = []
    for (label, cfg, a), sim in zip(layouts, sims):
        cost = predict(g, cfg, a, case.traffic, cluster)
        rows.append(Row(case.name, label, {c: float(cost.by_class.get(c, 0.0)) for c in sim.by_class},
                        dict(sim.by_class), solved=label.startswith("solved"),
                        bottleneck={c: _describe(cost, c) for c in sim.by_class}))
    alts = [r for r in rows if not r.solved]
    best = min(alts, key=lambda r: r.sim_total)
    solved = rows[-1]
    ok = solved.sim_total <= 1.02 * best.sim_total + 1e-12
    expect = []
    for (order, hname), ms in case.expect_ms.items():
        row = next(r for r in rows if r.layout == f"{order} / {hname}")
        expect.append((row.layout, ms, 1e3 * row.sim_total))
    return dict(case=case, rows=rows, best=best, solved=solved, ok=ok, solve_s=solve_s,
                seconds=time.perf_counter() - t0, expect=expect, status=res.status)


def _describe(cost, c) -> str:
    try:
        return cost.classes[c].bottleneck.describe()
    except (AttributeError, KeyError, TypeError):
        return "?"


def fmt_ms(x):
    return f"{1e3 * x:8.1f}"


def print_case(out, tol, verbose):
    case = out["case"]
    print(f"\n== {case.name}: {case.note}; sizes {case.sizes}; traffic "
          + ", ".join(f"{k} {v / 1e9:g} GB" for k, v in case.traffic.items()))
    classes = list(case.traffic)
    hdr = f"  {'layout':34s} " + " ".join(f"{c + ' pred/sim ms (ratio)':>30s}" for c in classes) + f" {'total sim':>10s}"
    print(hdr)
    for r in out["rows"]:
        cells = []
        for c in classes:
            p, s = 1e3 * r.predicted.get(c, 0.0), 1e3 * r.simulated.get(c, 0.0)
            flag = " " if abs(r.ratio(c) - 1) <= tol else "!"
            cells.append(f"{p:9.1f}/{s:9.1f} ({r.ratio(c):5.2f}){flag}")
        mark = " <- fastest" if r is out["best"] else ""
        print(f"  {r.layout[:34]:34s} " + " ".join(f"{x:>30s}" for x in cells) + f" {fmt_ms(r.sim_total)}{mark}")
        if verbose:
            for c in classes:
                print(f"      {c}: rankmap {r.bottleneck.get(c, '-')}")
    s, b = out["solved"], out["best"]
    print(f"  rankmap solve ({out['status']}, {out['solve_s']:.1f} s): {s.layout[8:]} simulated {1e3 * s.sim_total:.1f} ms"
          f" vs fastest alternative {1e3 * b.sim_total:.1f} ms ({b.layout}): "
          + ("within 2%" if out["ok"] else f"NOT within 2% ({100 * (s.sim_total / b.sim_total - 1):+.1f}%)"))
    for label, want, got in out["expect"]:
        print(f"  expected {label}: ~{want:.0f} ms, simulated {got:.1f} ms")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="a subset of the fabrics")
    ap.add_argument("--strict", action="store_true", help="exit 1 if a check fails")
    ap.add_argument("--only", action="append", default=[], help="fabric name (repeatable)")
    ap.add_argument("--tolerance", type=float, default=0.25, help="allowed |predicted/simulated - 1| (0.25)")
    ap.add_argument("--time-limit", type=float, default=10.0, help="solve time limit per fabric, s (10)")
    ap.add_argument("--workers", type=int, default=min(2, os.cpu_count() or 1), help="parallel SimGrid children")
    ap.add_argument("--verbose", action="store_true")
    args = ap.parse_args(argv)
    ok, why = sm.simgrid_available()
    if not ok:
        print(f"SimGrid python bindings not importable by {sm._python_for_child()}: {why}", file=sys.stderr)
        return 2
    t_sanity = sm.sanity_check()
    print(f"SimGrid {why}; sanity: 1 GB over a 50 GB/s link = {1e3 * t_sanity:.4f} ms (expect 20)")
    cases = [c for c in CASES if (not args.only or c.name in args.only) and (not args.quick or c.quick or args.only)]
    if args.only and len(cases) != len(set(args.only)):
        print(f"unknown fabric in --only; known: {', '.join(c.name for c in CASES)}", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    outs = []
    for case in cases:
        out = run_case(case, args.time_limit, args.workers, args.verbose)
        print_case(out, args.tolerance, args.verbose)
        outs.append(out)
    tol = args.tolerance
    print("\n== summary")
    classes = sorted({c for o in outs for r in o["rows"] for c in r.simulated})
    n_in = n_all = 0
    bad = []
    for c in classes:
        entries = [(r.ratio(c), r) for o in outs for r in o["rows"] if c in r.simulated]
        lo = min(entries, key=lambda e: e[0])
        hi = max(entries, key=lambda e: e[0])
        within = sum(abs(x - 1) <= tol for x, _ in entries)
        n_in += within
        n_all += len(entries)
        med = float(np.median([x for x, _ in entries]))
        print(f"  {c:10s} ratio pred/sim min {lo[0]:.4f} ({lo[1].fabric}: {lo[1].layout})  median {med:.4f}"
              f"  max {hi[0]:.4f} ({hi[1].fabric}: {hi[1].layout});  within {100 * tol:.0f}%: {within}/{len(entries)}")
        bad += [(c, r) for x, r in entries if abs(x - 1) > tol]
    every = [r.ratio(c) for o in outs for r in o["rows"] for c in r.simulated]
    if every:
        print(f"  {'all':10s} ratio pred/sim min {min(every):.4f} median {float(np.median(every)):.4f}"
              f" max {max(every):.4f} (per-class entries)")
    tot = [(r.pred_total / r.sim_total if r.sim_total else 1.0, r) for o in outs for r in o["rows"]]
    print(f"  {'total':10s} ratio pred/sim min {min(t for t, _ in tot):.4f}"
          f" median {float(np.median([t for t, _ in tot])):.4f} max {max(t for t, _ in tot):.4f}")
    n_ok = sum(o["ok"] for o in outs)
    print(f"  per-class entries within {100 * tol:.0f}%: {n_in}/{n_all}")
    print(f"  fabrics where rankmap's solved layout is within 2% of the fastest simulated alternative: {n_ok}/{len(outs)}")
    exp_bad = [(o["case"].name, lab, w, g) for o in outs for lab, w, g in o["expect"] if abs(g - w) > 0.01 * w]
    for name, lab, w, g in exp_bad:
        print(f"  EXPECTED SIMULATION MISMATCH {name} {lab}: want ~{w:.0f} ms, got {g:.1f} ms")
    if bad:
        print(f"  outside {100 * tol:.0f}%:")
        for c, r in bad:
            print(f"    {r.fabric:24s} {r.layout:40s} {c:9s} pred {1e3 * r.predicted.get(c, 0):9.1f} ms"
                  f"  sim {1e3 * r.simulated[c]:9.1f} ms  ratio {r.ratio(c):.3f}")
    for o in outs:
        if not o["ok"]:
            s, b = o["solved"], o["best"]
            print(f"  solve not within 2%: {o['case'].name}: {s.layout} {1e3 * s.sim_total:.1f} ms vs "
                  f"{b.layout} {1e3 * b.sim_total:.1f} ms")
    print(f"  {len(outs)} fabrics, {sum(len(o['rows']) for o in outs)} layouts, {time.perf_counter() - t0:.1f} s")
    failed = bool(bad) or n_ok < len(outs) or bool(exp_bad) or abs(t_sanity - 0.02) > 1e-9
    if args.strict and failed:
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
