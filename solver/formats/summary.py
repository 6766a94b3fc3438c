"""Summaries of a cluster graph: route bandwidth levels, links by kind, the ``--format table`` text."""

from __future__ import annotations

import math
from typing import Any

import networkx as nx

from .common import fmt_gbps

__all__ = ["bandwidth_levels", "link_capacities", "summarize"]


def _route_widths(G: nx.Graph, src: Any, is_gpu: dict) -> dict:
    """Bottleneck GB/s of the widest path from ``src`` to every node, not relaying through GPUs."""
    import heapq

    best = {src: math.inf}
    heap = [(-math.inf, 0, src)]
    tie = 0
    while heap:
        negw, _, x = heapq.heappop(heap)
        w = -negw
        if best.get(x, -1.0) > w:
            continue
        if x != src and is_gpu[x]:
            continue  # reached, never crossed
        for y, d in G[x].items():
            nw = min(w, float(d["bandwidth"]))
            if nw > best.get(y, -1.0):
                best[y] = nw
                tie += 1
                heapq.heappush(heap, (-nw, tie, y))
    return best


def bandwidth_levels(G: nx.Graph, max_sources: int = 1024) -> list[tuple[float, int, tuple[Any, Any]]]:
    """Distinct GPU-GPU route bandwidths B(u, v): ``[(GB/s, number of GPU pairs, example pair)]``.

    B(u, v) is the bottleneck capacity of the widest path whose interior nodes are not GPUs
    (DESIGN §2: NVLink and NICs do not forward through a third GPU); only when no such path
    exists, the widest path through GPUs.  It is the most one flow alone can get, not what
    it gets when links are shared.  One widest-path search per source GPU; above
    ``max_sources`` GPUs only that many evenly spaced sources are searched and the counts are
    those of their pairs.  Pairs in different connected components are not listed.
    """
    is_gpu = {n: d.get("kind", "gpu") == "gpu" for n, d in G.nodes(data=True)}
    gpus = [n for n in G.nodes if is_gpu[n]]
    pos = {n: i for i, n in enumerate(gpus)}
    if len(gpus) <= max_sources:
        sources = gpus
    else:
        step = len(gpus) / max_sources
        sources = [gpus[int(i * step)] for i in range(max_sources)]
    mst = None
    levels: dict[float, list] = {}
    for u in sources:
        widths = _route_widths(G, u, is_gpu)
        missing = [v for v in gpus if pos[v] > pos[u] and v not in widths]
        if missing:  # no GPU-free path: the widest path through GPUs
            if mst is None:
                mst = nx.maximum_spanning_tree(G, weight="bandwidth")
            for v in missing:
                if nx.has_path(mst, u, v):
                    path = nx.shortest_path(mst, u, v)
                    widths[v] = min(float(mst[a][b]["bandwidth"]) for a, b in zip(path, path[1:]))
        for v in (gpus[pos[u] + 1:] if len(sources) == len(gpus) else gpus):
            if v == u or v not in widths:
                continue
            ent = levels.setdefault(widths[v], [0, (u, v)])
            ent[0] += 1
    return [(w, c, ex) for w, (c, ex) in sorted(levels.items(), key=lambda kv: -kv[0])]


def link_capacities(G: nx.Graph) -> list[tuple[str, float, int]]:
    """Physical links by kind: ``[("gpu-nvswitch", GB/s, count), ...]``, widest first."""
    kinds = {n: d.get("kind", "gpu") for n, d in G.nodes(data=True)}
    out: dict[tuple[str, float], int] = {}
    for u, v, d in G.edges(data=True):
        a, b = sorted((kinds[u], kinds[v]))
        key = (f"{a}-{b}", float(d["bandwidth"]))
        out[key] = out.get(key, 0) + 1
    return [(k, w, c) for (k, w), c in sorted(out.items(), key=lambda kv: (-kv[0][1], kv[0][0]))]


def summarize(G: nx.Graph, max_hosts: int = 16) -> str:
    """A text table: hosts with their GPU and NIC counts, the links by kind and capacity, then
    the distinct GPU-GPU route bandwidths (:func:`bandwidth_levels`)."""
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
            if d.get("nvlink_domain"):
                e["nvswitch"] = f"domain {d['nvlink_domain']}"
        elif kind == "nic":
            e["nics"].append(d.get("name", str(n)))
        else:
            e["nvswitch"] = True
    hosts = {h: e for h, e in hosts.items() if e["gpus"]}
    ngpu = sum(len(e["gpus"]) for e in hosts.values())
    nnic = sum(len(e["nics"]) for e in hosts.values())
    ndom = sum(1 for _, d in G.nodes(data=True) if d.get("role") == "nvlink_domain")
    lines = [f"cluster: {G.graph.get('name', '')}".rstrip(),
             f"hosts {len(hosts)}  GPUs {ngpu}  NICs {nnic}  switches {switches}  gpu {G.graph.get('gpu', '?')}"
             + (f"  NVLink domains {ndom}" if ndom else "")]
    rows = [("host", "GPUs", "NICs", "NVSwitch", "NIC names")]
    for h, e in list(hosts.items())[:max_hosts]:
        names = ",".join(e["nics"])
        nvs = e["nvswitch"] if isinstance(e["nvswitch"], str) else ("yes" if e["nvswitch"] else "no")
        rows.append((h, str(len(e["gpus"])), str(len(e["nics"])), nvs,
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
    lines.append("Links (physical capacity, GB/s per direction, shared by the flows crossing them):")
    rows = [("link", "GB/s", "count")]
    for k, w, c in link_capacities(G):
        rows.append((k, fmt_gbps(w), str(c)))
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    for i, r in enumerate(rows):
        lines.append("  " + "  ".join(c.rjust(w) if j else c.ljust(w) for j, (c, w) in enumerate(zip(r, widths))).rstrip())
    lines.append("")
    lines.append("GPU-GPU route bandwidths (bottleneck of the widest path not relaying through a GPU; "
                 "what one flow alone gets, GB/s per direction):")
    max_sources = 1024
    lev = bandwidth_levels(G, max_sources=max_sources)
    sampled = ngpu > max_sources
    if sampled:
        lines.append(f"  (searched from {max_sources} evenly spaced source GPUs of {ngpu}; counts are their pairs)")
    rows = [("GB/s", "GPU pairs", "example")]
    total = 0
    for w, c, (a, b) in lev:
        rows.append((fmt_gbps(w), str(c), f"{a} - {b}"))
        total += c
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    for i, r in enumerate(rows):
        lines.append("  " + "  ".join(c.rjust(w) if j < 2 else c for j, (c, w) in enumerate(zip(r, widths))).rstrip())
    all_pairs = ngpu * (ngpu - 1) // 2
    if total < all_pairs and not sampled:
        lines.append(f"  unreachable GPU pairs: {all_pairs - total}")
    warnings = G.graph.get("warnings") or []
    if warnings:
        lines.append("")
        lines.append("notes:")
        lines += [f"  - {w}" for w in warnings]
    return "\n".join(lines)
