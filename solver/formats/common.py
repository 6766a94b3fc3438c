"""Shared pieces of the format readers: link-rate constants, GPU generations, host templates.

Every bandwidth here is **GB/s in one direction** (DESIGN §2), taken from the published
figures collected in ``tests/data/real-inputs/bandwidths.md`` (a copy of
``/work/shared/real-inputs/bandwidths.md``).  The section of that file is cited next to
each number as ``[bw §N]``; its numbered sources as ``[src N]``.

Every edge the readers write is one **physical link** (parallel links between the same two
nodes summed into one edge) and its ``bandwidth`` is the link's capacity, shared by all the
flows routed over it: an NVSwitch port bundle of 18 NVLink 4 links is 18 x 25 = 450 GB/s, a
ConnectX-7 port 400 Gb/s = 50 GB/s, a PCIe Gen5 x16 link 63 GB/s.  No edge carries a per-GPU
or per-pair share of something else.

Rate keys (all overridable, ``build_cluster(..., nic=50)`` or ``--rate nic=50``):

========  =====================================================================
key       meaning
========  =====================================================================
nvlink    one NVLink, GB/s per direction (an ``NV#`` bundle gets ``# * nvlink``)
pcie      a PCIe x16 link (sets ``pix pxb phb node`` unless those are given)
pix       GPU/NIC to its own PCIe switch (``PIX``)
pxb       PCIe switch to PCIe switch (``PXB``)
phb       PCIe switch to host bridge (``PHB``)
node      host bridge to host bridge inside one NUMA node (``NODE``)
sys       socket to socket (``SYS``: QPI / UPI / xGMI)
nic       one NIC port (its link to the leaf switch)
========  =====================================================================

Switch uplinks are not a rate: they follow from the links below a switch and the fabric's
oversubscription ratio (``build_cluster(oversubscription=R)``, default 1 = non-blocking; see
:mod:`.compose`).  The former ``fabric`` and ``taper`` keys (per-GPU shares of an uplink) are
gone and rejected with a message saying so.

Hosts with several NICs
-----------------------
A host's PCIe tree joins all its NICs; linking each NIC to a leaf switch as well would close
a cycle (leaf - NIC a - PCIe - CPU - PCIe - NIC b - leaf), and the fabric model needs the
non-GPU nodes to form a tree.  So :meth:`HostTemplate.finish`, when two or more NICs carry GPU
traffic, takes those NICs out of the PCIe tree and links each GPU directly to its nearest NIC
(or NICs, on a tie): NCCL's choice, the NIC(s) with the widest path then the fewest PCIe
hops (``ncclTopoGetLocalNet``).  That GPU - NIC edge stands for the GPU's PCIe path to the NIC;
its capacity is the narrowest PCIe link on that path, capped at the NIC's port rate (the NIC
moves no more than its port between PCIe and the network, and every route over the edge also
crosses the NIC's port link, so the cap changes no inter-host route).  The path's PCIe nodes
are kept in ``via`` and the NIC's former PCIe parent in ``pcie_parent``.  What is lost: PCIe
links shared between a GPU's path to its NIC and other traffic inside the host.  NICs that
are no GPU's nearest stay in the PCIe tree with ``fabric_port=False`` and are not linked to
the fabric.  A host with a single NIC in use keeps it in the PCIe tree (no cycle arises).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any, Mapping

import networkx as nx

from ..errors import InvalidArgumentError

__all__ = [
    "GENERATIONS",
    "GpuGeneration",
    "RATE_KEYS",
    "HostTemplate",
    "resolve_generation",
    "generation_from_sm",
    "generation_from_product",
    "default_rates",
    "check_rate_overrides",
    "pcie_rate",
    "nccl_inter_cpu_rate",
    "fmt_gbps",
    "link_sockets",
    "merge_parallel_edges",
]

# ---------------------------------------------------------------- PCIe

#: NCCL's PCIe bandwidth over the data rate these readers give a PCIe link: NCCL counts width x (240 per Gen5 lane) / 80
#: (``kvDictPciGen``, ``NVIDIA/nccl:src/graph/topo.cc:545-557,657``: Gen5 x16 = 48, Gen4 x16 = 24 GB/s) where
#: :func:`pcie_rate` gives 63 and 31.5 (128b/130b): 0.75 x 130/128.
NCCL_PCIE_FACTOR = 0.75 * 130 / 128

#: PCIe per-lane data rate, GB/s per direction, by transfer rate in GT/s.
#: Gen3/4/5: 0.985 / 1.97 / 3.94 GB/s per lane [bw §4, src 14, 15]; Gen6: the lower of
#: the published ~7.56-7.88 GB/s [bw §4, src 15, 16].  Gen1/Gen2 (2.5 / 5 GT/s, 8b/10b
#: line code) are not in bandwidths.md: 2.5 GT/s x 8/10 / 8 = 0.25 GB/s, 5 GT/s = 0.5 GB/s.
PCIE_LANE_GBPS = {2.5: 0.25, 5.0: 0.5, 8.0: 0.985, 16.0: 1.97, 32.0: 3.94, 64.0: 7.56}



def pcie_rate(speed: str | None, width: Any, default_x16: float) -> float:
    """GB/s of a PCIe link given NCCL XML ``link_speed`` / ``link_width`` strings.

    ``"16.0 GT/s PCIe"`` / ``"16 GT/s"`` -> per-lane rate of that generation times the width.
    A width of 0 or a missing width counts as x16, as NCCL does (``if (width == 0) width =
    16;`` in ``src/graph/topo.cc``, ``ncclTopoAddPci``); a missing or unreadable speed gives
    ``default_x16`` scaled by the width.
    """
    try:
        w = int(str(width).strip()) if width is not None and str(width).strip() != "" else 0
    except ValueError:
        w = 0
    if w <= 0:
        w = 16
    lane = None
    if speed:
        m = re.search(r"([0-9]*\.?[0-9]+)\s*GT/s", str(speed), re.I)
        if m:
            gts = float(m.group(1))
            lane = PCIE_LANE_GBPS.get(gts)
            if lane is None:  # an unlisted rate: 8b/10b below 8 GT/s, 128b/130b from 8 GT/s
                lane = gts * (0.8 if gts < 8 else 128 / 130) / 8
    if lane is None:
        return default_x16 * w / 16
    return lane * w


# ---------------------------------------------------------------- CPUs

#: Socket-to-socket rates NCCL assumes (``src/graph/topo.h``) [bw §2, src 8], GB/s.
NCCL_INTER_CPU = {
    "BDW": 6.0,  # BDW_QPI_BW, Intel Broadwell and older
    "SKL": 10.0,  # SKL_QPI_BW, Skylake .. Ice Lake
    "SRP": 22.0,  # SRP_QPI_BW, Sapphire Rapids
    "ERP": 40.0,  # ERP_QPI_BW, Emerald / Granite Rapids
    "ZEN12": 16.0,  # AMD_ZEN12_BW, EPYC Naples / Rome
    "ZEN34": 24.0,  # AMD_ZEN34_BW, Milan / Genoa
    "ZEN5": 32.0,  # AMD_ZEN5_BW, Turin
    "P9": 32.0,  # P9_BW, POWER9
    "ARM": 6.0,  # ARM_BW
    "ZPI": 6.0,  # ZPI_BW, Zhaoxin
}


def nccl_inter_cpu_rate(arch: str | None, vendor: str | None, familyid: Any, modelid: Any) -> float | None:
    """The socket-to-socket GB/s NCCL picks for a ``<cpu>`` element, or None if unknown.

    Same decision as ``ncclTopoGetInterCpuBw`` / ``ncclTopoAddCpu`` in NCCL's
    ``src/graph/topo.cc``: Intel family 6 model >= 0xCF (or 0xAD-0xAF) -> ERP, >= 0x8F -> SRP,
    >= 0x55 -> SKL, else BDW; AMD family 26 -> Zen5, 25 -> Zen3/4, else Zen1/2.
    """

    def _int(v: Any) -> int | None:
        if v is None:
            return None
        try:
            return int(str(v), 0)
        except ValueError:
            return None

    a = (arch or "").lower()
    v = (vendor or "").strip()
    if a.startswith("ppc"):
        return NCCL_INTER_CPU["P9"]
    if a in ("arm64", "aarch64"):
        return NCCL_INTER_CPU["ARM"]
    if a and a != "x86_64":
        return None
    if v == "GenuineIntel":
        fam, mod = _int(familyid), _int(modelid)
        if fam == 6 and mod is not None:
            if mod >= 0xCF or mod in (0xAD, 0xAE, 0xAF):
                return NCCL_INTER_CPU["ERP"]
            if mod >= 0x8F:
                return NCCL_INTER_CPU["SRP"]
            if mod >= 0x55:
                return NCCL_INTER_CPU["SKL"]
        return NCCL_INTER_CPU["BDW"]
    if v == "AuthenticAMD":
        fam = _int(familyid)
        if fam in (26, 0xBF):
            return NCCL_INTER_CPU["ZEN5"]
        if fam in (25, 0xAF):
            return NCCL_INTER_CPU["ZEN34"]
        return NCCL_INTER_CPU["ZEN12"]
    if v in ("CentaurHauls", "Shanghai"):
        return NCCL_INTER_CPU["ZPI"]
    return None


# GPU generations live in .generations (re-exported here)
from .generations import (  # noqa: E402,F401
    GENERATIONS,
    PCIE_X16_GBPS,
    GpuGeneration,
    generation_from_product,
    generation_from_sm,
    resolve_generation,
)


RATE_KEYS = ("nvlink", "pcie", "pix", "pxb", "phb", "node", "sys", "nic")

#: Removed keys and what replaces them.
_REMOVED_RATE_KEYS = {
    "taper": "links are physical capacities now; give the fabric's oversubscription ratio instead "
             "(oversubscription=R, --oversubscription R; 1 = non-blocking)",
    "fabric": "links are physical capacities now: a switch's uplink capacity is its downlink capacity / "
              "oversubscription (oversubscription=R, --oversubscription R), or LinkSpeed in topology.conf",
}


def check_rate_overrides(overrides: Mapping[str, Any] | None) -> dict[str, float]:
    """Validate ``**rate_overrides``: known keys, finite positive numbers (GB/s)."""
    out: dict[str, float] = {}
    for key, value in (overrides or {}).items():
        k = str(key).strip().lower()
        if k in _REMOVED_RATE_KEYS:
            raise InvalidArgumentError(f"rate {key!r} was removed: {_REMOVED_RATE_KEYS[k]}", f"rate.{key}")
        if k not in RATE_KEYS:
            raise InvalidArgumentError(
                f"unknown rate {key!r} (known: {', '.join(RATE_KEYS)})", f"rate.{key}"
            )
        if value is None:
            continue
        try:
            v = float(value)
        except (TypeError, ValueError):
            raise InvalidArgumentError(f"rate {key}={value!r} is not a number", f"rate.{key}") from None
        if not math.isfinite(v) or v <= 0:
            raise InvalidArgumentError(f"rate {key}={value!r} must be finite and > 0", f"rate.{key}")
        out[k] = v
    return out


def default_rates(gen: GpuGeneration | None, overrides: Mapping[str, float] | None = None) -> dict[str, float]:
    """All rate keys for a generation (None = unknown GPU), overrides applied.

    PCIe classes default to the generation's x16 rate (PIX = PXB = PHB = NODE; bandwidths.md
    gives no separate figure for a bridge hop, and NCCL models the same PCIe link rate on
    every hop).  Rates are then made non-increasing along PIX >= PXB >= PHB >= NODE >= SYS so
    that the widest path of a pair is the rate of its class.
    """
    g = gen or GENERATIONS["generic"]
    o = dict(overrides or {})
    pcie = o.get("pcie", g.pcie)
    r = {
        "nvlink": o.get("nvlink", g.nvlink if g.nvlink > 0 else GENERATIONS["generic"].nvlink),
        "pcie": pcie,
        "pix": o.get("pix", pcie),
        "pxb": o.get("pxb", pcie),
        "phb": o.get("phb", pcie),
        "node": o.get("node", pcie),
        "sys": o.get("sys", g.sys),
        "nic": o.get("nic", g.nic),
    }
    r["pxb"] = min(r["pxb"], r["pix"])
    r["phb"] = min(r["phb"], r["pxb"])
    r["node"] = min(r["node"], r["phb"])
    r["sys"] = min(r["sys"], r["node"])
    return r


def fmt_gbps(x: float) -> str:
    """Compact GB/s text: 450, 31.5, 0.985."""
    return f"{x:.4g}" if x < 1000 else f"{x:.0f}"


# ---------------------------------------------------------------- host templates


def merge_parallel_edges(edges: list[tuple[str, str, dict]]) -> list[tuple[str, str, dict]]:
    """Parallel links between the same two nodes -> one edge with the summed capacity.

    The first edge's attributes are kept; ``bandwidth`` (and ``nvlinks`` when both have it)
    are summed; different ``link`` kinds are joined with ``+`` (e.g. a GPU's PCIe link and
    its NVLink-C2C to the same CPU: ``"pcie+nvlink"``).
    """
    merged: dict[tuple[str, str], tuple[str, str, dict]] = {}
    for u, v, a in edges:
        key = (u, v) if u <= v else (v, u)
        if key not in merged:
            merged[key] = (u, v, dict(a))
            continue
        m = merged[key][2]
        m["bandwidth"] = float(m["bandwidth"]) + float(a["bandwidth"])
        if "nvlinks" in m and "nvlinks" in a:
            m["nvlinks"] = m["nvlinks"] + a["nvlinks"]
        if a.get("link") and a.get("link") not in str(m.get("link", "")).split("+"):
            m["link"] = f"{m['link']}+{a['link']}" if m.get("link") else a["link"]
    return list(merged.values())


def _widest_fewest_hops(src: str, adj: Mapping[str, Mapping[str, float]], kind: Mapping[str, str]):
    """From ``src``: per node, (widest bottleneck GB/s, fewest hops at that width) and a predecessor.

    Paths do not pass through GPUs or NICs (they are reached, never crossed): NVLink and
    NICs do not forward through a third device (DESIGN §2).
    """
    import heapq

    best: dict[str, tuple[float, int]] = {src: (math.inf, 0)}
    prev: dict[str, str] = {}
    heap = [(-math.inf, 0, src)]
    while heap:
        negw, hops, x = heapq.heappop(heap)
        if best.get(x) != (-negw, hops):
            continue
        if x != src and kind.get(x, "gpu") in ("gpu", "nic"):
            continue
        for y, bw in adj[x].items():
            w = min(-negw, bw)
            cur = best.get(y)
            if cur is None or w > cur[0] or (w == cur[0] and hops + 1 < cur[1]):
                best[y] = (w, hops + 1)
                prev[y] = x
                heapq.heappush(heap, (-w, hops + 1, y))
    return best, prev


def link_sockets(t: "HostTemplate", cpus: list[tuple[str, float]], **attrs: Any) -> None:
    """Join a host's CPU sockets: ``cpus`` = [(suffix, GB/s of its socket link)].

    Two sockets: one edge at the lower rate.  Three or more: each socket links to one
    ``sys`` node (kind ``socket_interconnect``) at its rate, a star that keeps the non-GPU
    part of the graph a tree (a full mesh of socket links would be a cycle); a pair's
    bottleneck is still the lower of the two sockets' rates.
    """
    if len(cpus) < 2:
        return
    if len(cpus) == 2:
        (a, ra), (b, rb) = cpus
        t.add_edge(a, b, min(ra, rb), **attrs)
        return
    hub = t.add_node("sys", kind="socket_interconnect")
    for c, r in cpus:
        t.add_edge(c, hub, r, **attrs)




@dataclass
class HostTemplate:
    """One host's topology with host-relative node ids (``"gpu0"``, ``"nic:mlx5_0"``).

    ``instantiate(G, host)`` adds a copy to ``G`` with ids ``"<host>/<suffix>"`` and
    ``host=<host>`` on every node, so a fabric of many identical hosts is built without
    re-parsing.  ``nodes`` are ordered GPUs first (by ``local_index``), which fixes the
    baseline device order (DESIGN §2).
    """

    nodes: list[tuple[str, dict]] = field(default_factory=list)
    edges: list[tuple[str, str, dict]] = field(default_factory=list)
    gpu: str = "generic"
    rates: dict[str, float] = field(default_factory=dict)
    source: str = ""
    format: str = ""
    warnings: list[str] = field(default_factory=list)

    # -- building
    def add_node(self, suffix: str, **attrs: Any) -> str:
        self.nodes.append((suffix, attrs))
        return suffix

    def add_edge(self, u: str, v: str, bandwidth: float, **attrs: Any) -> None:
        if not (math.isfinite(bandwidth) and bandwidth > 0):
            raise InvalidArgumentError(f"{self.source}: link {u} - {v} has bandwidth {bandwidth!r}", "bandwidth")
        attrs["bandwidth"] = float(bandwidth)
        self.edges.append((u, v, attrs))

    def finish(self) -> "HostTemplate":
        """Order nodes GPUs first by local_index (the rest in insertion order), sum parallel
        links into one edge, and attach the NICs (see the module docstring)."""
        gpus = [n for n in self.nodes if n[1].get("kind") == "gpu"]
        rest = [n for n in self.nodes if n[1].get("kind") != "gpu"]
        gpus.sort(key=lambda n: n[1]["local_index"])
        self.nodes = gpus + rest
        self.edges = merge_parallel_edges(self.edges)
        self._attach_nics()
        return self

    def _attach_nics(self) -> None:
        """Mark fabric NICs; with two or more, link GPUs to their nearest NICs (module docstring)."""
        kind = {s: a.get("kind", "gpu") for s, a in self.nodes}
        attrs_of = {s: a for s, a in self.nodes}
        nics = [s for s, k in kind.items() if k == "nic"]
        if not nics:
            return
        adj: dict[str, dict[str, float]] = {s: {} for s in kind}
        for u, v, a in self.edges:
            adj[u][v] = a["bandwidth"]
            adj[v][u] = a["bandwidth"]
        port = {n: float(attrs_of[n].get("port_bandwidth", self.rates.get("nic", 12.5))) for n in nics}
        chosen: dict[str, list[tuple[str, float, int, list[str]]]] = {}
        for g in (s for s, k in kind.items() if k == "gpu"):
            best, prev = _widest_fewest_hops(g, adj, kind)
            cands = [(min(best[n][0], port[n]), -best[n][1], n) for n in nics if n in best]
            if not cands:
                continue
            top = max((w, h) for w, h, _ in cands)
            picks = []
            for w, h, n in cands:
                if (w, h) != top:
                    continue
                path, x = [], prev.get(n)
                while x is not None and x != g:
                    path.append(x)
                    x = prev.get(x)
                picks.append((n, best[n][0], best[n][1], path[::-1]))
            chosen[g] = picks
        self._one_channel_per_gpu_link(chosen, adj, port)
        used = list(dict.fromkeys(n for picks in chosen.values() for n, *_ in picks))
        for n in nics:
            attrs_of[n]["fabric_port"] = n in used
        if len(used) < 2:
            return
        movable = []
        for n in used:
            parents = [y for y in adj[n] if kind[y] != "gpu"]
            if len(parents) > 1:
                attrs_of[n]["fabric_port"] = False
                self.warnings.append(f"NIC {n} links to several PCIe nodes ({', '.join(parents)}); it is not linked "
                                     "to the fabric")
                continue
            if parents:
                attrs_of[n]["pcie_parent"] = parents[0]
            movable.append(n)
        moved = set(movable)
        self.edges = [(u, v, a) for u, v, a in self.edges
                      if not ((u in moved and kind[v] != "gpu") or (v in moved and kind[u] != "gpu"))]
        existing = {(u, v) for u, v, _ in self.edges} | {(v, u) for u, v, _ in self.edges}
        for g, picks in chosen.items():
            for n, width, hops, path in picks:
                if n not in moved or (g, n) in existing:
                    continue
                self.edges.append((g, n, {"bandwidth": float(min(width, port[n])), "link": "pcie",
                                          "pcie_hops": hops, "via": ",".join(path)}))
        # PCIe switches / host bridges left with nothing below them
        while True:
            deg: dict[str, int] = {s: 0 for s in kind}
            for u, v, _ in self.edges:
                deg[u] += 1
                deg[v] += 1
            dead = {s for s, k in kind.items() if k in ("pcie_switch", "host_bridge") and deg[s] <= 1}
            if not dead:
                break
            self.edges = [(u, v, a) for u, v, a in self.edges if u not in dead and v not in dead]
            self.nodes = [(s, a) for s, a in self.nodes if s not in dead]
            for s in dead:
                del kind[s]
        unused = [n for n in nics if n not in used]
        if unused:
            self.warnings.append(
                f"NICs {', '.join(x.removeprefix('nic:') for x in unused)} are no GPU's nearest NIC: kept on their "
                "PCIe switch, not linked to the fabric")
    
    def _one_channel_per_gpu_link(self, chosen: dict, adj: Mapping, port: Mapping) -> None:
        """Several NICs nearest one GPU alone, behind its own PCIe link: keep those NCCL can drive through it.

        NCCL's ring search takes the channel's speed (one NIC's, 48 GB/s per 400G) on every link of
        the GPU <-> NIC path (``ncclTopoFollowPath``, ``src/graph/search.cc:81-166``), and its PCIe
        rate is ``width · GT/s`` per ``kvDictPciGen`` (``src/graph/topo.cc:545-557,657``: Gen5 x16 =
        48, Gen4 x16 = 24 GB/s; :data:`NCCL_PCIE_FACTOR` of the data rate): a GPU with three NICs on
        its switch (12-NIC Hopper hosts) runs one channel at 48, not three, and its sends use its
        first NIC (``ncclTopoGetLocalNet``, channel 0).  Linking every NIC to the GPU would give it
        3 x 50 GB/s to the network through a 63 GB/s link; so the GPU keeps ``max(1, ⌊link ·
        factor / (0.96 · port)⌋)`` of them, first by NIC index, and the rest are left on the PCIe
        switch (no GPU's nearest), with a warning.
        """
        from collections import Counter

        count = Counter(n for picks in chosen.values() for n, *_ in picks)
        for g, picks in chosen.items():
            alone = [p for p in picks if count[p[0]] == 1]
            if len(alone) < 2:
                continue
            first = {p[3][0] if p[3] else None for p in alone}
            if len(first) != 1 or None in first:
                continue
            link = adj[g].get(first.pop())
            if not link:
                continue
            channel = min(port[n] for n, *_ in alone) * 0.96  # NCCL's ladder speed for the NIC (fabric.rates)
            keep = max(1, int(link * NCCL_PCIE_FACTOR / channel + 0.01))
            if keep >= len(alone):
                continue
            drop = {p[0] for p in alone[keep:]}
            chosen[g] = [p for p in picks if p[0] not in drop]
            self.warnings.append(
                f"GPU {g}: NICs {', '.join(sorted(x.removeprefix('nic:') for x in drop))} share its "
                f"{fmt_gbps(link)} GB/s PCIe link with {', '.join(p[0].removeprefix('nic:') for p in alone[:keep])}; "
                f"NCCL runs {keep} ring channel{'s' if keep > 1 else ''} through it at the NIC's speed "
                "(search.cc ncclTopoFollowPath): they are not linked to the GPU")

    # -- queries
    @property
    def gpu_count(self) -> int:
        return sum(1 for _, a in self.nodes if a.get("kind") == "gpu")

    def suffixes(self, kind: str) -> list[str]:
        return [s for s, a in self.nodes if a.get("kind") == kind]

    def nic_rates(self) -> dict[str, float]:
        """Fabric NIC suffix -> port GB/s (NICs with ``fabric_port=False`` are left out)."""
        return {s: float(a.get("port_bandwidth", self.rates.get("nic", 12.5))) for s, a in self.nodes
                if a.get("kind") == "nic" and a.get("fabric_port", True)}

    # -- output
    def instantiate(self, G: nx.Graph, host: str) -> None:
        """Add this host's nodes (ids ``"<host>/<suffix>"``, attribute ``host``) and links to ``G``
        (:func:`~rankmap.solver.formats.fill.add_graph_items`: as ``add_nodes_from`` / ``add_edges_from``)."""
        from .fill import add_graph_items

        p = f"{host}/"
        add_graph_items(G, ((p + s, {**a, "host": host}) for s, a in self.nodes),
                        ((p + u, p + v, a) for u, v, a in self.edges))

    def to_graph(self, host: str = "host0", name: str | None = None) -> nx.Graph:
        G = nx.Graph()
        G.graph["name"] = name or f"{host} ({self.gpu_count} GPUs, {self.format} {self.source})"
        G.graph["gpu"] = self.gpu
        G.graph["rates"] = dict(self.rates)
        G.graph["sources"] = [self.source]
        if self.warnings:
            G.graph["warnings"] = list(self.warnings)
        self.instantiate(G, host)
        return G


#: The most bytes a topology text file may hold (a 131,072-node ``kubectl get nodes -o json`` is ~360 MB).
MAX_TEXT_BYTES = 1 << 30


def read_text(path: Any, what: str, max_bytes: int = MAX_TEXT_BYTES) -> str:
    """Read a text file of at most ``max_bytes`` characters, or raise InvalidArgumentError naming it.

    Reads no more than ``max_bytes + 1`` characters whatever the file is (``/dev/zero``, a
    pipe that never ends): an endless or huge input is refused, not loaded.
    """
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            text = fh.read(max_bytes + 1)
        if len(text) > max_bytes:
            raise InvalidArgumentError(
                f"{what} file {str(path)!r} has more than {max_bytes:,} characters; the limit for a topology file",
                what)
        return text
    except FileNotFoundError:
        raise InvalidArgumentError(f"{what} file {str(path)!r} does not exist", what) from None
    except IsADirectoryError:
        raise InvalidArgumentError(f"{what} file {str(path)!r} is a directory", what) from None
    except OSError as exc:
        raise InvalidArgumentError(f"cannot read {what} file {str(path)!r}: {exc.strerror or exc}", what) from None
