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


class _UnionFind:
    """Disjoint sets over hashable items (path halving, union by size)."""

    def __init__(self):
        self.parent: dict = {}
        self.size: dict = {}

    def find(self, x):
        parent = self.parent
        p = parent.setdefault(x, x)
        while p != x:
            gp = parent[p]
            parent[x] = gp
            x, p = p, gp
        return x

    def union(self, a, b) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra == rb:
            return
        if self.size.get(ra, 1) < self.size.get(rb, 1):
            ra, rb = rb, ra
        self.parent[rb] = ra
        self.size[ra] = self.size.get(ra, 1) + self.size.get(rb, 1)


#: Most components one GPU may touch at one bandwidth for :func:`_level_counts` (2**k subsets per GPU).
MAX_PORT_COMPONENTS = 8


def _level_counts(G: nx.Graph, gpus: list, is_gpu: dict):
    """Exact GPU-pair counts per route bandwidth without a search per GPU, or None.

    Kruskal over the distinct link bandwidths t, widest first: the non-GPU nodes are
    joined by their links of at least t (union-find), and each GPU touches the set
    ``C_t(u)`` of components its own links of at least t reach.  A route from u to v that
    relays through no GPU and whose bottleneck is at least t exists iff ``C_t(u)`` and
    ``C_t(v)`` intersect or a direct u-v link is at least t (the definition of B(u, v) in
    :func:`bandwidth_levels`).  Pairs with intersecting sets are counted by
    inclusion-exclusion over the subsets S of each GPU's set, ``Σ_S (-1)^(|S|+1) C(n_S, 2)``
    with n_S the GPUs whose set contains S; direct links are checked one by one.  Cost:
    O(thresholds × (links + GPUs × 2**k)), k the components a GPU touches (1-3 on real
    hosts); no per-pair or per-source work.

    Returns ``[(GB/s, pairs)]`` widest first, only levels with pairs; None when some GPU
    touches more than :data:`MAX_PORT_COMPONENTS` components, or when some connected GPU
    pair has no route avoiding other GPUs (the caller then searches per source).
    """
    from math import comb

    pos = {n: i for i, n in enumerate(gpus)}
    ports: list[list] = [[] for _ in gpus]
    direct: dict[tuple[int, int], float] = {}
    plain: list[tuple[float, Any, Any]] = []
    widths = set()
    for a, b, d in G.edges(data=True):
        w = float(d["bandwidth"])
        widths.add(w)
        ga, gb = is_gpu[a], is_gpu[b]
        if ga and gb:
            if a != b:
                key = (min(pos[a], pos[b]), max(pos[a], pos[b]))
                direct[key] = max(direct.get(key, 0.0), w)
        elif ga:
            ports[pos[a]].append((w, b))
        elif gb:
            ports[pos[b]].append((w, a))
        else:
            plain.append((w, a, b))
    plain.sort(key=lambda e: -e[0])
    uf = _UnionFind()
    k = 0
    ge: dict[float, int] = {}
    for t in sorted(widths, reverse=True):
        while k < len(plain) and plain[k][0] >= t:
            uf.union(plain[k][1], plain[k][2])
            k += 1
        sig = [frozenset(uf.find(x) for w, x in ps if w >= t) for ps in ports]
        n_sub: dict[frozenset, int] = {}
        for s in sig:
            if len(s) > MAX_PORT_COMPONENTS:
                return None
            items = tuple(s)
            for mask in range(1, 1 << len(items)):
                sub = frozenset(items[j] for j in range(len(items)) if mask >> j & 1)
                n_sub[sub] = n_sub.get(sub, 0) + 1
        shared = sum((comb(n, 2) if len(sub) % 2 else -comb(n, 2)) for sub, n in n_sub.items())
        extra = sum(1 for (i, j), w in direct.items() if w >= t and not (sig[i] & sig[j]))
        ge[t] = shared + extra
    # every connected GPU pair must have a GPU-free route (else the caller's fallback)
    connected = sum(comb(sum(1 for n in comp if is_gpu[n]), 2) for comp in nx.connected_components(G))
    lowest = min(widths) if widths else None
    if lowest is not None and ge[lowest] != connected:
        return None
    counts = []
    prev = 0
    for t in sorted(widths, reverse=True):
        if ge[t] > prev:
            counts.append((t, ge[t] - prev))
        prev = ge[t]
    return counts


def bandwidth_levels(G: nx.Graph, max_sources: int = 1024) -> list[tuple[float, int, tuple[Any, Any]]]:
    """Distinct GPU-GPU route bandwidths B(u, v): ``[(GB/s, number of GPU pairs, example pair)]``.

    B(u, v) is the bottleneck capacity of the widest path whose interior nodes are not GPUs
    (DESIGN §2: NVLink and NICs do not forward through a third GPU); only when no such path
    exists, the widest path through GPUs.  It is the most one flow alone can get, not what
    it gets when links are shared.  Pairs in different connected components are not listed.

    The counts are exact for every GPU pair, from :func:`_level_counts` (union-find per
    bandwidth, no search per GPU: the cost grows with links × distinct bandwidths, not with
    GPU pairs).  The example of a level is the first pair (u, v), u before v in node order,
    found by widest-path searches from the first GPU, then one GPU of each distinct set of
    link bandwidths (a host type), then the other GPUs in node order until every level has
    one (usually a single search).  Only graphs where some GPU pair is connected through
    GPUs alone, or a GPU touches more than :data:`MAX_PORT_COMPONENTS` separate networks,
    fall back to one search per source GPU; there above ``max_sources`` GPUs only that many
    evenly spaced sources are searched and the counts are those of their pairs.
    """
    return _bandwidth_levels(G, max_sources)[0]


def _bandwidth_levels(G: nx.Graph, max_sources: int = 1024) -> tuple[list, bool]:
    """:func:`bandwidth_levels` and whether its counts are those of sampled sources only."""
    is_gpu = {n: d.get("kind", "gpu") == "gpu" for n, d in G.nodes(data=True)}
    gpus = [n for n in G.nodes if is_gpu[n]]
    fast = _level_counts(G, gpus, is_gpu)
    if fast is None:
        return _levels_per_source(G, gpus, is_gpu, max_sources), len(gpus) > max_sources
    counts = fast
    pos = {n: i for i, n in enumerate(gpus)}
    want = {w for w, _ in counts}
    examples: dict[float, tuple] = {}
    profile: dict[tuple, int] = {}
    for i, u in enumerate(gpus):
        profile.setdefault(tuple(sorted(float(d["bandwidth"]) for d in G[u].values())), i)
    first = sorted(set(profile.values()) | ({0} if gpus else set()))
    seen = set(first)
    order = first + [i for i in range(len(gpus)) if i not in seen]
    for i in order:
        if len(examples) == len(want):
            break
        u = gpus[i]
        found: dict[float, int] = {}
        for v, w in _route_widths(G, u, is_gpu).items():
            if w in want and w not in examples and is_gpu.get(v) and v != u:
                j = pos[v]
                if j > i and (w not in found or j < found[w]):
                    found[w] = j
        for w, j in found.items():
            examples[w] = (u, gpus[j])
    return [(w, c, examples[w]) for w, c in counts], False


def _levels_per_source(G: nx.Graph, gpus: list, is_gpu: dict, max_sources: int):
    """:func:`bandwidth_levels` by one widest-path search per source GPU (the fallback)."""
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
    lev, sampled = _bandwidth_levels(G, max_sources=max_sources)
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
