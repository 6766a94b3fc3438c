"""Compose a cluster graph: host topologies placed into a Slurm fabric (``rankmap cluster``).

``build_cluster`` makes one of three things:

1. **one host** from a host topology file (``nvidia-smi topo -m`` text, NCCL topology XML,
   or a one-host node-link JSON / GraphML graph; detected from the text);
2. **every host of a fabric**: each host named in the Slurm ``topology.conf`` /
   ``topology.yaml`` (or only those of ``nodelist``) is a copy of the host topology, its
   NICs linked to the switch (block, ring) the fabric puts it under, the switches linked as
   in the file;
3. **every host of a nodelist** without a fabric file: all hosts under one switch
   (Slurm's topology/flat).

Without a host topology file, ``gpus_per_node`` + ``gpu`` describe a synthetic host (see
:func:`synthetic_host`); with neither, composing is refused - a GPU count cannot be guessed.

Fabric link rates (GB/s, one direction, per GPU share)
------------------------------------------------------
* NIC -> leaf switch: the NIC's port rate (NCCL XML ``speed``, else the ``nic`` default of
  the GPU generation), capped by the leaf's ``LinkSpeed`` read as Gb/s.
* switch -> parent at tier ``t`` (``t`` = height of the parent above the leaves, 1 for a
  spine over leaves): the parent's ``LinkSpeed`` (Gb/s / 8) when given; else
  ``fabric / taper**(t-1)`` when a ``fabric`` rate is given; else
  ``nic / taper**t``.  ``taper`` (default 2, i.e. 2:1 oversubscription per tier) makes the
  bandwidth levels nest as leaf > spine > core, which is how Slurm's tree plugin treats
  switch hops (fewer is better); ``taper=1`` models a non-blocking fat tree (then all
  inter-host pairs are equal).
* Blocks: hosts -> block switch at the NIC rate; a block level of size ``k x base`` is a
  switch over ``k`` consecutive base blocks at tier ``log2(k)``.
* Top-level switches with no common parent (a "missing root") are joined by a synthetic
  ``switch:root`` one tier up, so every GPU pair has a finite bandwidth; the graph's
  ``warnings`` say so.
"""

from __future__ import annotations

from typing import Any, Iterable

import networkx as nx

from ..errors import InvalidArgumentError
from .common import (
    GENERATIONS,
    HostTemplate,
    check_rate_overrides,
    default_rates,
    fmt_gbps,
    read_text,
    resolve_generation,
)
from .graphfile import load_graph
from .hostlist import compress, expand
from .nccl_xml import looks_like_nccl_xml, parse_nccl_xml
from .nvsmi import looks_like_nvsmi, parse_topo_matrix
from .slurm import Fabric, read_fabric

__all__ = ["build_cluster", "load_host_template", "synthetic_host", "summarize", "bandwidth_levels"]

DEFAULT_HOST = "host0"


# ---------------------------------------------------------------- hosts


def load_host_template(path: Any, gpu: Any = None, **rate_overrides: Any) -> HostTemplate:
    """Read a host topology file of any supported format into a :class:`HostTemplate`."""
    p = str(path)
    text = read_text(path, "host_topology")
    if not text.strip():
        raise InvalidArgumentError(f"host topology file {p!r} is empty", "host_topology")
    if "<graphml" in text[:65536].lower() or text.lstrip().startswith("{"):
        return _template_from_graph(p, gpu, rate_overrides)
    if looks_like_nccl_xml(text):
        return parse_nccl_xml(text, gpu=gpu, source=p, **rate_overrides)
    if looks_like_nvsmi(text):
        return parse_topo_matrix(text, gpu=gpu, source=p, **rate_overrides)
    raise InvalidArgumentError(
        f"host topology file {p!r}: not `nvidia-smi topo -m` output, NCCL topology XML, node-link JSON or GraphML",
        "host_topology")


def _template_from_graph(path: str, gpu: Any, overrides: dict) -> HostTemplate:
    G = load_graph(path)
    hosts = list(dict.fromkeys(d.get("host", n) for n, d in G.nodes(data=True) if d.get("kind", "gpu") == "gpu"))
    if len(hosts) != 1:
        raise InvalidArgumentError(
            f"host topology graph {path!r} has {len(hosts)} hosts; a host topology must describe one host",
            "host_topology")
    host = hosts[0]
    prefix = f"{host}/"
    t = HostTemplate(gpu=str(G.graph.get("gpu", "generic")), rates=dict(G.graph.get("rates", {}) or {}),
                     source=path, format="graph file")
    if gpu is not None or overrides:
        t.warnings.append("gpu= and rate overrides do not apply to a host given as a graph file; its bandwidths are "
                          "used as written")
    names = {}
    for i, (n, d) in enumerate(G.nodes(data=True)):
        s = str(n)
        s = s[len(prefix):] if s.startswith(prefix) else s
        names[n] = s
        attrs = {k: v for k, v in d.items() if k != "host"}
        attrs.setdefault("kind", "gpu")
        if attrs["kind"] == "gpu" and "local_index" not in attrs:
            attrs["local_index"] = i
        t.add_node(s, **attrs)
    for u, v, d in G.edges(data=True):
        a = dict(d)
        bw = a.pop("bandwidth")
        t.add_edge(names[u], names[v], bw, **a)
    return t.finish()


def synthetic_host(gpus_per_node: int, gpu: Any, **rate_overrides: Any) -> HostTemplate:
    """A DGX/HGX-like host of ``gpus_per_node`` GPUs of generation ``gpu``.

    * NVSwitch generations (V100 .. B300): every GPU -> one ``nvswitch`` node at
      ``links x nvlink`` (A100 12 x 25 = 300, H100 18 x 25 = 450, B200 18 x 50 = 900 GB/s),
      one NIC per GPU on the GPU's own PCIe switch (rail-optimised, as on DGX systems).
    * NVLink-bridge generations (A30, GA102): GPUs bridged in pairs (0-1, 2-3, ...) at
      ``links x nvlink``, one NIC for the host.
    * PCIe-only generations (Ada): no NVLink, one NIC for the host.

    GPUs are split over two sockets (first half on ``cpu0``) when the count is even and > 1.
    """
    overrides = check_rate_overrides(rate_overrides)
    try:
        n = int(gpus_per_node)
    except (TypeError, ValueError):
        raise InvalidArgumentError(f"gpus_per_node {gpus_per_node!r} is not an integer", "gpus_per_node") from None
    if n <= 0 or n > 4096:
        raise InvalidArgumentError(f"gpus_per_node {gpus_per_node!r} must be between 1 and 4096", "gpus_per_node")
    gen = resolve_generation(gpu)
    if gen is None:
        raise InvalidArgumentError("gpus_per_node needs a GPU generation (gpu=, e.g. 'h100') to know the NVLink "
                                   "layout", "gpu")
    if gen.name.startswith("nvlink") or gen.name == "generic":
        raise InvalidArgumentError(f"gpu {gpu!r} is a bare NVLink rate; gpus_per_node needs a generation name "
                                   "(e.g. 'h100')", "gpu")
    rates = default_rates(gen, overrides)
    t = HostTemplate(gpu=gen.name, rates=rates, source=f"synthetic {n}x{gen.name}", format="synthetic")
    sockets = 2 if n > 1 and n % 2 == 0 else 1
    for i in range(n):
        t.add_node(f"gpu{i}", kind="gpu", local_index=i, numa=i * sockets // n)
    for s in range(sockets):
        t.add_node(f"cpu{s}", kind="cpu", numa=s)
    if sockets == 2:
        t.add_edge("cpu0", "cpu1", rates["sys"], link="sys")
    rail = gen.topology == "nvswitch"
    for i in range(n):
        sw = f"pcie{i}"
        t.add_node(sw, kind="pcie_switch")
        t.add_edge(f"gpu{i}", sw, rates["pix"], link="pcie")
        t.add_edge(sw, f"cpu{i * sockets // n}", rates["node"], link="pcie")
        if rail:
            t.add_node(f"nic:nic{i}", kind="nic", name=f"nic{i}", nic_index=i, port_bandwidth=rates["nic"])
            t.add_edge(f"nic:nic{i}", sw, rates["pix"], link="pcie")
    if not rail:
        t.add_node("nic:nic0", kind="nic", name="nic0", nic_index=0, port_bandwidth=rates["nic"])
        t.add_edge("nic:nic0", "cpu0", rates["phb"], link="pcie")
    if gen.topology == "nvswitch" and n > 1:
        t.add_node("nvswitch", kind="nvswitch")
        for i in range(n):
            t.add_edge(f"gpu{i}", "nvswitch", gen.links * rates["nvlink"], link="nvlink", nvlinks=gen.links)
    elif gen.topology == "pairs":
        for i in range(0, n - 1, 2):
            t.add_edge(f"gpu{i}", f"gpu{i + 1}", gen.links * rates["nvlink"], link="nvlink", nvlinks=gen.links)
    return t.finish()


def _with_default_nic(t: HostTemplate) -> HostTemplate:
    """Give a NIC-less host one synthetic NIC on each CPU (else on each GPU)."""
    cpus = t.suffixes("cpu") or t.suffixes("gpu")
    t.add_node("nic:default", kind="nic", name="default", nic_index=0, synthetic=True,
               port_bandwidth=t.rates.get("nic", GENERATIONS["generic"].nic))
    for c in cpus:
        t.add_edge("nic:default", c, t.rates.get("phb", GENERATIONS["generic"].pcie), link="pcie")
    t.warnings.append("the host topology lists no NIC; a synthetic NIC 'nic:default' carries inter-host traffic")
    return t


# ---------------------------------------------------------------- fabric


def _unique_id(G: nx.Graph, wanted: str) -> str:
    out, i = wanted, 1
    while out in G:
        out = f"{wanted}~{i}"
        i += 1
    return out


class _FabricBuilder:
    def __init__(self, G: nx.Graph, hosts: list[str], nics: dict[str, float], rates: dict, overrides: dict):
        self.G = G
        self.hosts = hosts
        self.nics = nics  # NIC suffix -> port GB/s
        self.rates = rates
        self.overrides = overrides
        self.taper = rates.get("taper", 2.0)
        self.base = max(nics.values()) if nics else rates["nic"]
        self.warnings: list[str] = []
        self.fabric_rates: dict[str, float] = {}

    def tier_rate(self, tier: int) -> float:
        tier = max(tier, 1)
        if "fabric" in self.overrides:
            r = self.overrides["fabric"] / self.taper ** (tier - 1)
        else:
            r = self.base / self.taper ** tier
        self.fabric_rates[f"tier{tier}"] = r
        return r

    def switch(self, sid: str, **attrs: Any) -> str:
        self.G.add_node(sid, kind="switch", **attrs)
        return sid

    def attach_host(self, host: str, sid: str, cap_gbps: float | None = None) -> None:
        for nic, port in self.nics.items():
            bw = port if cap_gbps is None else min(port, cap_gbps / 8.0)
            self.G.add_edge(f"{host}/{nic}", sid, bandwidth=bw, link="net")

    def link(self, child: str, parent: str, bw: float) -> None:
        self.G.add_edge(child, parent, bandwidth=bw, link="fabric")

    def root_over(self, tops: list[str], tier: int, why: str) -> None:
        if len(tops) <= 1:
            return
        rid = self.switch(_unique_id(self.G, "switch:root"), name="root", synthetic=True, tier=tier)
        bw = self.tier_rate(tier)
        for t in tops:
            self.link(t, rid, bw)
        self.warnings.append(why)

    # -- flat
    def flat(self, name: str) -> None:
        sid = self.switch(_unique_id(self.G, f"switch:{name}"), name=name, tier=0)
        for h in self.hosts:
            self.attach_host(h, sid)

    # -- tree
    def tree(self, fab: Fabric) -> None:
        selected = set(self.hosts)
        sw = fab.switches
        keep: dict[str, bool] = {}

        def kept(name: str) -> bool:
            if name not in keep:
                keep[name] = False
                s = sw[name]
                keep[name] = any(n in selected for n in s.nodes) or any([kept(c) for c in s.switches])
            return keep[name]

        for name in sw:
            kept(name)
        height: dict[str, int] = {}

        def h(name: str) -> int:
            if name not in height:
                kids = [c for c in sw[name].switches if keep[c]]
                height[name] = 1 + max(h(c) for c in kids) if kids else 0
            return height[name]

        ids = {}
        for name, s in sw.items():
            if keep[name]:
                ids[name] = self.switch(_unique_id(self.G, f"switch:{name}"), name=name, tier=h(name),
                                        **({"link_speed": s.link_speed} if s.link_speed else {}))
        for name, s in sw.items():
            if not keep[name]:
                continue
            for n in s.nodes:
                if n in selected:
                    self.attach_host(n, ids[name], s.link_speed)
            for c in s.switches:
                if keep[c]:
                    bw = s.link_speed / 8.0 if s.link_speed else self.tier_rate(h(name))
                    self.link(ids[c], ids[name], bw)
        has_parent = {c for name, s in sw.items() if keep[name] for c in s.switches if keep[c]}
        tops = [ids[n] for n in sw if keep[n] and n not in has_parent]
        comps = list(nx.connected_components(self.G.subgraph(ids.values())))
        if len(comps) > 1:
            heads = []
            for comp in comps:
                heads += [t for t in tops if t in comp]
            self.root_over(heads, max(height.values(), default=0) + 1,
                           f"{fab.source}: {len(comps)} switch trees have no common root; joined by a synthetic "
                           "switch:root")

    # -- block / ring
    def blocks(self, fab: Fabric) -> None:
        selected = set(self.hosts)
        prefix = "ring" if fab.kind == "ring" else "block"
        level: dict[int, str] = {}  # group index at the current level -> switch id
        for j, b in enumerate(fab.switches.values()):
            if any(n in selected for n in b.nodes):
                level[j] = self.switch(_unique_id(self.G, f"switch:{b.name}"), name=b.name, role=b.role, tier=0)
                for n in b.nodes:
                    if n in selected:
                        self.attach_host(n, level[j])
        if fab.kind == "ring":
            self.root_over(list(level.values()), 1, f"{fab.source}: rings joined by a synthetic switch:root")
            return
        base = fab.block_sizes[0]
        prev_k, tier = 1, 0
        for tier, size in enumerate(fab.block_sizes[1:], 1):
            k = size // base  # base blocks per group at this level
            ratio = max(1, k // prev_k)
            bw = self.tier_rate(tier)
            nxt: dict[int, str] = {}
            for g in sorted(level):
                c = g // ratio
                if c not in nxt:
                    name = f"{prefix}{size}:{c}"
                    nxt[c] = self.switch(_unique_id(self.G, f"switch:{name}"), name=name, role="block_group",
                                         block_size=size, tier=tier)
                self.link(level[g], nxt[c], bw)
            level, prev_k = nxt, k
        self.root_over(list(level.values()), tier + 1,
                       f"{fab.source}: {len(level)} top-level block groups joined by a synthetic switch:root")


# ---------------------------------------------------------------- build


def build_cluster(host_topology: Any = None, gpu: Any = None, fabric: Any = None, nodelist: Any = None,
                  topology_name: str | None = None, gpus_per_node: int | None = None,
                  **rate_overrides: Any) -> nx.Graph:
    """Build the cluster graph (DESIGN §2) from real-world inputs.

    Parameters
    ----------
    host_topology : path, optional
        ``nvidia-smi topo -m`` output, NCCL topology XML, or a one-host graph file.
    gpu : str or float, optional
        GPU generation (``"h100"``, ``"a100"``, ``"v100"``, ``"a30"``, ``"b200"``, ...) or a
        per-link NVLink rate in GB/s; sets the NVLink, PCIe, socket and NIC defaults.
    fabric : path, optional
        Slurm ``topology.conf`` or ``topology.yaml``.
    nodelist : str or list of str, optional
        Slurm hostlist (``node[001-016]``) of the hosts to include, in rank order.  With a
        fabric: a subset of its hosts (others are left out; unknown ones are an error).
        Without: those hosts under one switch.  A single name just names the one host.
    topology_name : str, optional
        Which topology of a ``topology.yaml`` (default: the ``cluster_default`` one, else
        the first).
    gpus_per_node : int, optional
        Without a host topology file: a synthetic host (:func:`synthetic_host`).
    **rate_overrides
        GB/s: ``nvlink pcie pix pxb phb node sys nic fabric``, and ``taper`` (see
        :mod:`.common` and this module's docstring).

    Returns
    -------
    networkx.Graph
        Hosts in nodelist / fabric order, GPUs by ``local_index`` inside a host; graph
        attributes ``name``, ``gpu``, ``rates``, ``sources``, ``hosts``, ``fabric`` and
        ``warnings`` (when any).
    """
    overrides = check_rate_overrides(rate_overrides)
    if topology_name is not None and fabric is None:
        raise InvalidArgumentError(f"topology name {topology_name!r} given without a fabric file", "topology_name")
    if host_topology is not None and gpus_per_node is not None:
        raise InvalidArgumentError("give either a host topology file or gpus_per_node, not both", "gpus_per_node")
    if host_topology is not None:
        template = load_host_template(host_topology, gpu=gpu, **overrides)
    elif gpus_per_node is not None:
        template = synthetic_host(gpus_per_node, gpu, **overrides)
    elif fabric is not None or nodelist is not None:
        raise InvalidArgumentError(
            "a fabric or nodelist needs the hosts' topology: give host_topology (nvidia-smi topo -m or NCCL XML) "
            "or gpus_per_node with gpu", "host_topology")
    else:
        raise InvalidArgumentError("nothing to build: give host_topology, and optionally fabric / nodelist",
                                   "host_topology")
    if template.gpu_count == 0:
        raise InvalidArgumentError(f"{template.source}: the host topology has no GPU", "host_topology")

    fab: Fabric | None = read_fabric(fabric, topology_name) if fabric is not None else None
    if nodelist is not None:
        hosts = expand(nodelist, field="nodelist")
        if not hosts:
            raise InvalidArgumentError(f"nodelist {nodelist!r} is empty", "nodelist")
        seen: set[str] = set()
        dups = [h for h in hosts if h in seen or seen.add(h)]
        if dups:
            raise InvalidArgumentError(f"nodelist lists {compress(dict.fromkeys(dups), sort=True)} more than once",
                                       "nodelist")
        if fab is not None and fab.kind != "flat":
            known = fab.host_set()
            missing = [h for h in hosts if h not in known]
            if missing:
                raise InvalidArgumentError(
                    f"nodelist hosts {_short(missing)} are not in the fabric file {fab.source} "
                    f"(it has {_short(fab.hosts)})", "nodelist")
    elif fab is not None:
        if fab.kind == "flat":
            raise InvalidArgumentError(f"{fab.source}: topology {fab.name!r} is flat and lists no nodes; give a "
                                       "nodelist", "nodelist")
        hosts = list(fab.hosts)
    else:
        hosts = [DEFAULT_HOST]

    multi = fab is not None or len(hosts) > 1
    if multi and not template.suffixes("nic"):
        template = _with_default_nic(template)
    for h in hosts:
        if "/" in h:
            raise InvalidArgumentError(f"host name {h!r} contains '/', which separates host and device in node ids",
                                       "nodelist")

    G = nx.Graph()
    for h in hosts:
        template.instantiate(G, h)
    rates = dict(template.rates)
    warnings = list(template.warnings)
    sources = [template.source]
    fabric_info: dict[str, Any] = {"kind": "none"}
    if multi:
        fb = _FabricBuilder(G, hosts, template.nic_rates(), rates, overrides)
        if fab is None:
            fb.flat("fabric")
            fabric_info = {"kind": "flat"}
        else:
            sources.append(fab.source)
            warnings += fab.warnings
            fabric_info = {"kind": fab.kind, "name": fab.name} if fab.name else {"kind": fab.kind}
            if fab.kind == "flat":
                fb.flat(fab.name or "flat")
            elif fab.kind == "tree":
                fb.tree(fab)
            else:
                if fab.kind == "block":
                    fabric_info["block_sizes"] = list(fab.block_sizes)
                fb.blocks(fab)
        warnings += fb.warnings
        rates.update({f"fabric_{k}": v for k, v in sorted(fb.fabric_rates.items())})

    ngpu = template.gpu_count * len(hosts)
    if len(hosts) == 1:
        label = f"{hosts[0]}: {template.gpu_count}x {template.gpu} ({template.format})"
    else:
        label = f"{len(hosts)} hosts x {template.gpu_count} {template.gpu} GPUs = {ngpu} GPUs ({fabric_info['kind']})"
    G.graph["name"] = label
    G.graph["gpu"] = template.gpu
    G.graph["rates"] = rates
    G.graph["sources"] = sources
    G.graph["hosts"] = compress(hosts) if len(hosts) <= 100000 else f"{len(hosts)} hosts"
    G.graph["fabric"] = fabric_info
    if warnings:
        G.graph["warnings"] = list(dict.fromkeys(warnings))
    return G


def _short(hosts: Iterable[str], limit: int = 160) -> str:
    text = compress(list(dict.fromkeys(hosts)), sort=True)
    return text if len(text) <= limit else text[: limit - 3] + "..."


# ---------------------------------------------------------------- summary


def bandwidth_levels(G: nx.Graph) -> list[tuple[float, int, tuple[Any, Any]]]:
    """Distinct GPU-GPU widest-path bandwidths: ``[(GB/s, number of GPU pairs, example pair)]``.

    Kruskal on edges by decreasing bandwidth: when two components holding ``a`` and ``b``
    GPUs merge over an edge of bandwidth ``w``, ``a x b`` GPU pairs have widest-path
    bandwidth ``w`` (the maximum spanning tree gives every pair's bottleneck).  O(E log E),
    no n x n matrix.  Pairs in different connected components are not listed.
    """
    parent: dict[Any, Any] = {}
    gpus: dict[Any, int] = {}
    rep: dict[Any, Any] = {}
    for n, d in G.nodes(data=True):
        parent[n] = n
        is_gpu = d.get("kind", "gpu") == "gpu"
        gpus[n] = 1 if is_gpu else 0
        rep[n] = n if is_gpu else None

    def find(x):
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    levels: dict[float, list] = {}
    for u, v, d in sorted(G.edges(data=True), key=lambda e: -float(e[2]["bandwidth"])):
        ru, rv = find(u), find(v)
        if ru == rv:
            continue
        if gpus[ru] and gpus[rv]:
            w = float(d["bandwidth"])
            ent = levels.setdefault(w, [0, (rep[ru], rep[rv])])
            ent[0] += gpus[ru] * gpus[rv]
        parent[rv] = ru
        gpus[ru] += gpus[rv]
        rep[ru] = rep[ru] if rep[ru] is not None else rep[rv]
    return [(w, c, ex) for w, (c, ex) in sorted(levels.items(), key=lambda kv: -kv[0])]


def summarize(G: nx.Graph, max_hosts: int = 16) -> str:
    """A text table: hosts with their GPU and NIC counts, then the distinct bandwidth levels."""
    hosts: dict[str, dict[str, Any]] = {}
    switches = 0
    for n, d in G.nodes(data=True):
        kind = d.get("kind", "gpu")
        if kind == "switch":
            switches += 1
            continue
        if kind not in ("gpu", "nic", "nvswitch"):
            continue
        h = str(d.get("host", n))
        e = hosts.setdefault(h, {"gpus": [], "nics": [], "nvswitch": False})
        if kind == "gpu":
            e["gpus"].append(d.get("local_index"))
        elif kind == "nic":
            e["nics"].append(d.get("name", str(n)))
        else:
            e["nvswitch"] = True
    hosts = {h: e for h, e in hosts.items() if e["gpus"]}
    ngpu = sum(len(e["gpus"]) for e in hosts.values())
    nnic = sum(len(e["nics"]) for e in hosts.values())
    lines = [f"cluster: {G.graph.get('name', '')}".rstrip(),
             f"hosts {len(hosts)}  GPUs {ngpu}  NICs {nnic}  switches {switches}  gpu {G.graph.get('gpu', '?')}"]
    rows = [("host", "GPUs", "NICs", "NVSwitch", "NIC names")]
    for h, e in list(hosts.items())[:max_hosts]:
        names = ",".join(e["nics"])
        rows.append((h, str(len(e["gpus"])), str(len(e["nics"])), "yes" if e["nvswitch"] else "no",
                     names if len(names) <= 60 else names[:57] + "..."))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines.append("")
    for i, r in enumerate(rows):
        lines.append("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
        if i == 0:
            lines.append("  ".join("-" * w for w in widths))
    if len(hosts) > max_hosts:
        lines.append(f"... {len(hosts) - max_hosts} more hosts")
    lines.append("")
    lines.append("GPU-GPU bandwidth levels (widest path, GB/s per direction):")
    lev = bandwidth_levels(G)
    rows = [("GB/s", "GPU pairs", "example")]
    total = 0
    for w, c, (a, b) in lev:
        rows.append((fmt_gbps(w), str(c), f"{a} - {b}"))
        total += c
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    for i, r in enumerate(rows):
        lines.append("  " + "  ".join(c.rjust(w) if j < 2 else c for j, (c, w) in enumerate(zip(r, widths))).rstrip())
    all_pairs = ngpu * (ngpu - 1) // 2
    if total < all_pairs:
        lines.append(f"  unreachable GPU pairs: {all_pairs - total}")
    warnings = G.graph.get("warnings") or []
    if warnings:
        lines.append("")
        lines.append("notes:")
        lines += [f"  - {w}" for w in warnings]
    return "\n".join(lines)
