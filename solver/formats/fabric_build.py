"""The fabric part of :func:`.compose.build_cluster`: switches and their links over the hosts.

Every edge written here is one physical link (or a bundle of parallel links between two nodes,
summed) whose ``bandwidth`` is its capacity in GB/s per direction (DESIGN §2); the rules
(NIC ports, trunks, ``LinkSpeed``, oversubscription per level, synthetic roots) are described
in :mod:`.compose`.
"""

from __future__ import annotations

from typing import Any

import networkx as nx

from .hostlist import compress
from .slurm import Fabric

__all__ = ["FabricBuilder", "unique_id"]


def unique_id(G: nx.Graph, wanted: str) -> str:
    """``wanted``, or ``wanted~1``, ``wanted~2`` ... if that node id is taken."""
    out, i = wanted, 1
    while out in G:
        out = f"{wanted}~{i}"
        i += 1
    return out


class FabricBuilder:
    """Adds the fabric's switches and links (physical capacities) to a graph of hosts.

    ``hosts`` are the host names in the graph, ``nics`` the fabric NIC suffix -> port GB/s of
    the host template, ``ratios`` the oversubscription per level (leaf first, last repeats).
    """

    def __init__(self, G: nx.Graph, hosts: list[str], nics: dict[str, float], ratios: list[float]):
        self.G = G
        self.hosts = hosts
        self.nics = nics  # fabric NIC suffix -> port GB/s
        self.ratios = ratios
        self.warnings: list[str] = []

    def ratio(self, level: int) -> float:
        """Oversubscription of a switch's uplinks at ``level`` (0 = leaves)."""
        return self.ratios[min(level, len(self.ratios) - 1)]

    def switch(self, sid: str, **attrs: Any) -> str:
        self.G.add_node(sid, kind="switch", **attrs)
        return sid

    def ports(self, cap_gbps: float | None, share: tuple[int, int] = (0, 1)) -> list[tuple[str, float]]:
        """The (NIC, GB/s) links a host puts under one switch: NIC i when i % m == k of share (k, m)."""
        k, m = share
        return [(nic, port if cap_gbps is None else min(port, cap_gbps / 8.0))
                for i, (nic, port) in enumerate(self.nics.items()) if i % m == k]

    def attach_host(self, host: str, sid: str, cap_gbps: float | None = None, share: tuple[int, int] = (0, 1)) -> None:
        for nic, bw in self.ports(cap_gbps, share):
            self.G.add_edge(f"{host}/{nic}", sid, bandwidth=bw, link="net")

    def link(self, child: str, parent: str, bw: float) -> None:
        self.G.add_edge(child, parent, bandwidth=float(bw), link="fabric")

    def root_over(self, tops: list[tuple[str, float, int]], why: str) -> None:
        """Join ``tops`` = [(switch id, its downlink GB/s, its level)] under a synthetic root."""
        if len(tops) <= 1:
            return
        level = max(t[2] for t in tops) + 1
        rid = self.switch(unique_id(self.G, "switch:root"), name="root", synthetic=True, tier=level)
        for sid, down, lvl in tops:
            up = down / self.ratio(lvl)
            self.G.nodes[sid]["uplink_gbps"] = up
            self.link(sid, rid, up)
        self.warnings.append(why)

    # -- flat
    def flat(self, name: str) -> None:
        sid = self.switch(unique_id(self.G, f"switch:{name}"), name=name, tier=0)
        for h in self.hosts:
            self.attach_host(h, sid)

    # -- tree
    def tree(self, fab: Fabric) -> None:
        selected = set(self.hosts)
        sw = fab.switches
        parents = fab.parents()
        homes = fab.leaves_of()
        multi = sorted(h for h, ss in homes.items() if len(ss) > 1)
        if multi:
            self.warnings.append(
                f"{fab.source}: hosts {compress(multi)} are listed under several switches; their NICs are spread "
                "over those switches")

        def share(host: str, name: str) -> tuple[int, int]:
            ss = homes[host]
            return (ss.index(name), len(ss))

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
                kids = sw[name].switches
                height[name] = 1 + max(h(c) for c in kids) if kids else 0
            return height[name]

        # capacities over the whole file (the cabling does not depend on the job's hosts)
        down: dict[str, float] = {}

        def cap(s, n: str) -> float | None:  # Gb/s cap of a host's NIC ports under switch s
            return s.port_gbps[n] * 8.0 if n in s.port_gbps else s.link_speed

        def trunk(child: str, parent: str) -> float:
            p = sw[parent]
            if child in p.trunk_gbps:
                return p.trunk_gbps[child]
            if p.link_speed:
                return p.link_speed / 8.0
            return down_of(child) / self.ratio(h(child)) / len(parents[child])

        def down_of(name: str) -> float:
            if name not in down:
                s = sw[name]
                down[name] = (sum(bw for n in s.nodes for _, bw in self.ports(cap(s, n), share(n, name)))
                              + sum(trunk(c, name) for c in s.switches))
            return down[name]

        ids = {}
        for name, s in sw.items():
            if keep[name]:
                ids[name] = self.switch(unique_id(self.G, f"switch:{name}"), name=name, tier=h(name),
                                        downlink_gbps=down_of(name),
                                        **({"link_speed": s.link_speed} if s.link_speed else {}))
        for name, s in sw.items():
            if not keep[name]:
                continue
            for n in s.nodes:
                if n in selected:
                    self.attach_host(n, ids[name], cap(s, n), share(n, name))
            for c in s.switches:
                if keep[c]:
                    self.link(ids[c], ids[name], trunk(c, name))
        has_parent = {c for name, s in sw.items() if keep[name] for c in s.switches if keep[c]}
        tops = [n for n in sw if keep[n] and n not in has_parent]
        comps = list(nx.connected_components(self.G.subgraph(ids.values())))
        if len(comps) > 1:
            heads = []
            for comp in comps:
                heads += [(ids[t], down_of(t), h(t)) for t in tops if ids[t] in comp]
            self.root_over(heads, f"{fab.source}: {len(comps)} switch trees have no common root; joined by a "
                                  "synthetic switch:root")

    # -- block / ring
    def blocks(self, fab: Fabric) -> None:
        selected = set(self.hosts)
        prefix = "ring" if fab.kind == "ring" else "block"
        host_down = sum(bw for _, bw in self.ports(None))
        blocks = list(fab.switches.values())
        # level 0: base blocks (all of the file: the capacities do not depend on the job's hosts)
        down = {j: host_down * len(b.nodes) for j, b in enumerate(blocks)}
        level: dict[int, str] = {}  # group index at the current level -> switch id (kept groups only)
        for j, b in enumerate(blocks):
            if any(n in selected for n in b.nodes):
                level[j] = self.switch(unique_id(self.G, f"switch:{b.name}"), name=b.name, role=b.role, tier=0,
                                       downlink_gbps=down[j])
                for n in b.nodes:
                    if n in selected:
                        self.attach_host(n, level[j])
        if fab.kind == "ring":
            self.root_over([(sid, down[j], 0) for j, sid in level.items()],
                           f"{fab.source}: rings joined by a synthetic switch:root")
            return
        base = fab.block_sizes[0]
        prev_k, lvl = 1, 0
        for lvl, size in enumerate(fab.block_sizes[1:], 1):
            k = size // base  # base blocks per group at this level
            ratio = max(1, k // prev_k)
            r = self.ratio(lvl - 1)
            nxt_down: dict[int, float] = {}
            for g in sorted(down):
                nxt_down[g // ratio] = nxt_down.get(g // ratio, 0.0) + down[g] / r
            nxt: dict[int, str] = {}
            for g in sorted(level):
                c = g // ratio
                if c not in nxt:
                    name = f"{prefix}{size}:{c}"
                    nxt[c] = self.switch(unique_id(self.G, f"switch:{name}"), name=name, role="block_group",
                                         block_size=size, tier=lvl, downlink_gbps=nxt_down[c])
                self.G.nodes[level[g]]["uplink_gbps"] = down[g] / r
                self.link(level[g], nxt[c], down[g] / r)
            level, down, prev_k = nxt, nxt_down, k
        self.root_over([(sid, down[g], lvl) for g, sid in level.items()],
                       f"{fab.source}: {len(level)} top-level block groups joined by a synthetic switch:root")
