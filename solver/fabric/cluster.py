"""The cluster model: GPUs, hosts and nested bandwidth domains (DESIGN §2).

A cluster is an undirected networkx graph whose edges carry ``bandwidth`` in
GB/s (1e9 bytes/s, one direction).  The effective bandwidth between two GPUs is
the *widest path* (max over paths of the min edge bandwidth).  Widest-path
bandwidth is an ultrametric: sorting the distinct edge bandwidths
``b_0 > b_1 > ... > b_{K-1}`` and taking, for each ``b_k``, the connected
components of the subgraph of edges with bandwidth >= ``b_k`` gives nested
partitions of the GPUs (NVLink island ⊂ host ⊂ leaf ⊂ spine ...), and
``B(u, v) = b_k`` for the first level ``k`` at which ``u`` and ``v`` share a
component (Hu, "The maximum capacity route problem", Operations Research 9,
1961; the same components are the maximum spanning tree's Kruskal stages).

:class:`Cluster` stores only those partitions, ``K`` integer labels per GPU,
so nothing n×n is ever built: 131,072 GPUs take a few MB.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Iterator

import networkx as nx
import numpy as np

from ..errors import InvalidArgumentError
from .build import fabric_from_graph
from .domains import bandwidth_levels, non_relay_extra
from .graph import MAX_BANDWIDTH_GBPS, MIN_BANDWIDTH_GBPS, edge_bandwidth, gpus_by_host, simple_graph
from .hostinfer import NOTE_KEY, infer_hosts
from .links import Fabric
from .rails import NcclTopology, nccl_topology
from .measured_caps import measured_cap, measured_links
from .rates import DEFAULT_NCCL, NcclModel, check_gpu_name, gpu_arch, link_efficiency

__all__ = ["Cluster", "cluster_from_graph", "CHECK_EVERY"]

#: Nodes or edges between two cancellation check points of :func:`cluster_from_graph`.
CHECK_EVERY = 1 << 14


@dataclass(frozen=True, eq=False)
class Cluster:
    """GPUs of a cluster in baseline device order, with their bandwidth domains.

    Attributes
    ----------
    devices : tuple of str
        GPU node ids, shape (n,), in baseline order: hosts in order of first
        appearance in the graph, GPUs by ``local_index`` inside a host.
    hosts : tuple of str
        Host names in order of first appearance.
    host_of : numpy.ndarray of int64, shape (n,)
        Index into ``hosts`` of each device.
    local_index : numpy.ndarray of int64, shape (n,)
        CUDA device index of each device inside its host.
    levels_gbps : numpy.ndarray of float64, shape (K,)
        Distinct widest-path bandwidths between GPUs, descending, GB/s, where
        each switch link counts at its per-GPU fair share (capacity / GPUs
        attached below it): the surrogate the decomposition searches over.
    domains : numpy.ndarray of int64, shape (K, n)
        ``domains[k, d]``: the level-``k`` domain of device ``d`` (labels in
        order of first appearance).  The last level is the whole cluster.
    widest_levels_gbps, widest_domains : numpy.ndarray, shapes (K',), (K', n)
        The same levels for the plain widest path over physical capacities
        (no sharing): ``B(route) <= widest_levels_gbps[k]`` for GPUs first
        joined at level k; used by the lower bound.
    widest_boundary_gbps : numpy.ndarray, shape (K',)
        Total capacity, GB/s summed over both directions, of the links leaving
        the components of each of those levels (every flow between two level-k
        domains crosses one of them outward); used by the lower bound.
    boundary_gbps : numpy.ndarray, shape (K,)
        The same for the levels of ``domains`` (physical capacities of the
        links leaving each level's components).
    domain_out_gbps, widest_domain_out_gbps : tuple of numpy.ndarray
        Per level of ``domains`` / ``widest_domains``: for each domain label,
        the capacity (GB/s, outward) of the physical links leaving the domain's
        component (every flow from the domain to a GPU outside it crosses one
        of them outward); empty when not computed.  Used by the lower bound.
    fabric : Fabric
        The physical links (capacities, routes) used by the time model
        (:mod:`.links`); built by :func:`cluster_from_graph`.  Its capacities are the rates NCCL
        achieves (:mod:`.rates`), not line rates.
    nccl : NcclModel
        How NCCL runs the collectives (:mod:`.rates`); the time model reads it.
    nccl_topology : NcclTopology
        Each GPU's NCCL node, rail NIC and NIC / NVLink rates (:mod:`.rails`).
    measured_links : tuple of MeasuredLink
        The graph's links with a measured rate (``measured_gbps``, :mod:`.measured`), each with
        its directed link ids in :attr:`fabric`; empty without measurements.
    host_extra : dict of int -> numpy.ndarray of float64, shape (G_h, G_h)
        For hosts where some GPU pair is slower than the ultrametric says
        because its widest path relays through a third GPU (e.g. a DGX-1
        hybrid cube mesh: GPUs without a direct NVLink), ``1/B' - 1/B`` in
        seconds per byte for each pair of the host's devices (in device
        order), where ``B'`` is the widest path that does not pass through
        another GPU.  Empty for clusters where it changes nothing.
    host_note : str or None
        When GPUs had no ``host`` attribute and their hosts were inferred from the graph
        (:func:`.hostinfer.infer_hosts`), the one-line note saying so; else None.
    """

    devices: tuple[str, ...]
    hosts: tuple[str, ...]
    host_of: np.ndarray
    local_index: np.ndarray
    levels_gbps: np.ndarray
    domains: np.ndarray
    host_extra: dict = None  # type: ignore[assignment]
    fabric: "Fabric" = None  # type: ignore[assignment]
    widest_levels_gbps: np.ndarray = None  # type: ignore[assignment]
    widest_domains: np.ndarray = None  # type: ignore[assignment]
    widest_boundary_gbps: np.ndarray = None  # type: ignore[assignment]
    boundary_gbps: np.ndarray = None  # type: ignore[assignment]
    domain_out_gbps: tuple = ()
    widest_domain_out_gbps: tuple = ()
    nccl: "NcclModel" = None  # type: ignore[assignment]
    nccl_topology: "NcclTopology" = None  # type: ignore[assignment]
    measured_links: tuple = ()
    host_note: str | None = None

    def __post_init__(self) -> None:
        if self.host_extra is None:
            object.__setattr__(self, "host_extra", {})

    @property
    def num_devices(self) -> int:
        """Number of GPUs."""
        return len(self.devices)

    @property
    def gpus_per_host(self) -> np.ndarray:
        """GPU count of each host, shape (hosts,)."""
        return np.bincount(self.host_of, minlength=len(self.hosts))

    @cached_property
    def equal_hosts(self) -> bool:
        """Every host has the same number of GPUs (launcher mode needs it: torchrun --nproc-per-node)."""
        return np.unique(self.gpus_per_host).size == 1

    @cached_property
    def host_devices(self) -> tuple[np.ndarray, ...]:
        """Device indices of each host (device order), one array per host; O(n log n)."""
        order = np.argsort(self.host_of, kind="stable")
        counts = np.bincount(self.host_of, minlength=len(self.hosts))
        return tuple(np.split(order, np.cumsum(counts)[:-1]))

    def hosts_by_size(self) -> Iterator[tuple[int, np.ndarray, np.ndarray]]:
        """Hosts of two GPUs or more grouped by GPU count, for work done on all hosts of one size together.

        Yields
        ------
        (G, hosts, devices)
            Per GPU count G ≥ 2, ascending: the indices of the hosts with G GPUs (ascending)
            and their device indices, shape (len(hosts), G), each row in device order.
        """
        devs = self.host_devices
        sizes = np.array([d.size for d in devs])
        for G in np.unique(sizes):
            if G < 2:
                continue
            hs = np.flatnonzero(sizes == G)
            yield int(G), hs, np.stack([devs[h] for h in hs])

    @cached_property
    def first_device(self) -> np.ndarray:
        """The first device of each host, shape (hosts,)."""
        return np.unique(self.host_of, return_index=True)[1]

    def device_index(self) -> dict[str, int]:
        """Node id -> index into :attr:`devices`."""
        return {d: i for i, d in enumerate(self.devices)}

    def bandwidth_gbps(self, u: np.ndarray, v: np.ndarray) -> np.ndarray:
        """Widest-path bandwidth between device indices ``u`` and ``v`` (same shape).

        Same device gives ``inf``.
        """
        u = np.asarray(u)
        v = np.asarray(v)
        level = self.pair_level(u, v)
        out = np.where(level < 0, np.inf, self.levels_gbps[np.maximum(level, 0)])
        if self.host_extra:
            inv = np.where(level < 0, 0.0, 1.0 / (out * 1e9)) + self.extra_inv_bps(u, v)
            out = np.where(level < 0, np.inf, 1.0 / np.where(inv > 0, inv, np.inf) / 1e9)
        return out

    def local_position(self) -> np.ndarray:
        """Position of each device among its host's devices (device order), shape (n,)."""
        first = np.zeros(len(self.hosts), dtype=np.int64)
        order = np.argsort(self.host_of, kind="stable")
        counts = np.bincount(self.host_of, minlength=len(self.hosts))
        first[1:] = np.cumsum(counts)[:-1]
        pos = np.empty(self.num_devices, dtype=np.int64)
        pos[order] = np.arange(self.num_devices) - np.repeat(first, counts)
        return pos

    def extra_inv_bps(self, u: np.ndarray, v: np.ndarray) -> np.ndarray:
        """``1/B' - 1/B`` (seconds per byte) for device pairs; 0 unless both sit in an irregular host."""
        u = np.asarray(u)
        v = np.asarray(v)
        out = np.zeros(np.broadcast(u, v).shape)
        if not self.host_extra:
            return out
        hu, hv = self.host_of[u], self.host_of[v]
        pos = self.local_position()
        for h, mat in self.host_extra.items():
            sel = (hu == h) & (hv == h)
            if np.any(sel):
                uu = np.broadcast_to(u, out.shape)[sel]
                vv = np.broadcast_to(v, out.shape)[sel]
                out[sel] = mat[pos[uu], pos[vv]]
        return out

    def pair_level(self, u: np.ndarray, v: np.ndarray) -> np.ndarray:
        """First level at which devices ``u`` and ``v`` share a domain; -1 if ``u == v``."""
        u = np.asarray(u)
        v = np.asarray(v)
        level = np.full(u.shape, self.domains.shape[0] - 1, dtype=np.int64)
        for k in range(self.domains.shape[0] - 2, -1, -1):
            same = self.domains[k][u] == self.domains[k][v]
            level = np.where(same, k, level)
        return np.where(u == v, -1, level)

    def level_labels(self, level: str) -> np.ndarray:
        """Domain label per device for a named level (see ``types.DOMAIN_LEVELS``).

        ``nvlink``: finest bandwidth level; ``host``: the host attribute; ``host_type``: hosts of
        one type (:meth:`host_type_of`);
        ``leaf``/``spine``/``core``: the 1st/2nd/3rd bandwidth level whose
        domains are unions of whole hosts and join several hosts (the whole
        cluster if there are fewer such levels); ``level:N``: bandwidth level N.

        Raises
        ------
        InvalidArgumentError
            For an unknown name or a level number out of range.
        """
        if level == "host":
            return self.host_of
        if level == "host_type":
            return self.host_type_of()
        if level == "nvlink":
            return self.domains[0]
        if level.startswith("level:"):
            k = int(level[6:])
            if not 0 <= k < self.domains.shape[0]:
                raise InvalidArgumentError(
                    f"level {level!r} is out of range; this cluster has levels 0..{self.domains.shape[0] - 1}",
                    "constraints",
                )
            return self.domains[k]
        names = {"leaf": 0, "spine": 1, "core": 2}
        if level not in names:
            raise InvalidArgumentError(f"unknown domain level {level!r}", "constraints")
        inter = self.inter_host_levels()
        if not inter:
            return np.zeros(self.num_devices, dtype=np.int64)
        return self.domains[inter[min(names[level], len(inter) - 1)]]

    def host_type_of(self) -> np.ndarray:
        """Host type label per device, shape (n,): hosts with the same GPU count and the same
        ``host_type`` attribute (set per GPU by the graph; absent: ``""``) share a label."""
        names = self.__dict__.get("_host_type_names")
        key = np.asarray(self.gpus_per_host)[self.host_of].astype(str)
        if names is not None:
            key = np.char.add(np.char.add(key, "|"), names)
        return np.unique(key, return_inverse=True)[1].astype(np.int64)

    def inter_host_levels(self) -> list[int]:
        """Bandwidth levels whose domains are unions of hosts joining >= 2 hosts, finest first."""
        out = []
        n_hosts = len(self.hosts)
        for k in range(self.domains.shape[0]):
            lab = self.domains[k]
            # every host inside one domain?
            per_host = np.zeros(n_hosts, dtype=np.int64) - 1
            per_host[self.host_of] = lab
            if not np.array_equal(per_host[self.host_of], lab):
                continue
            n_dom = np.unique(lab).size
            if n_dom < n_hosts and (not out or n_dom < np.unique(self.domains[out[-1]]).size):
                out.append(k)
        return out

    def describe_levels(self) -> list[tuple[str, float, int, int]]:
        """(name, GB/s, number of domains, largest domain size) per bandwidth level."""
        inter = self.inter_host_levels()
        names = {k: n for k, n in zip(inter, ("leaf", "spine", "core"))}
        out = []
        for k, b in enumerate(self.levels_gbps):
            counts = np.bincount(self.domains[k])
            name = names.get(k, "nvlink" if k == 0 else f"level:{k}")
            out.append((name, float(b), int(counts.size), int(counts.max())))
        return out

    def subset(self, keep: np.ndarray, graph: nx.Graph) -> "Cluster":
        """The cluster restricted to the devices where ``keep`` is True (recomputed from ``graph``)."""
        drop = [self.devices[i] for i in np.flatnonzero(~keep)]
        g = graph.copy()
        g.remove_nodes_from(drop)
        return cluster_from_graph(g, nccl=self.nccl)


def cluster_from_graph(graph: nx.Graph, check=None, nccl: "NcclModel | None" = None) -> Cluster:
    """Validate a cluster graph and compute its devices and bandwidth domains.

    ``check``: called every :data:`CHECK_EVERY` nodes or edges and between phases (a
    cancellation check point: it raises to stop the build, e.g. a gRPC deadline; at
    131,072 GPUs the build takes seconds).

    Parameters
    ----------
    graph : networkx.Graph
        Schema of DESIGN §2: nodes with ``kind`` (``"gpu"`` when absent),
        GPUs with ``host`` (str; absent = a host of its own named after the
        node) and ``local_index`` (int; absent = position among the host's GPUs
        in graph order); every edge with ``bandwidth`` in GB/s.  A directed
        graph is read as undirected; parallel edges of a multigraph are one
        link of the summed capacity (DESIGN §2).

    nccl : NcclModel, optional
        How collectives run (:mod:`.rates`); its rate overrides and NCCL's link efficiencies
        turn each edge's capacity into the rate NCCL achieves on it (``link`` ``net``,
        ``fabric``, ``nvlink``; other links as given), which every later computation uses.

    Returns
    -------
    Cluster

    Raises
    ------
    InvalidArgumentError
        Naming the node or edge: no GPUs; a missing, non-numeric, non-finite
        or non-positive bandwidth; a non-integer or duplicate ``local_index``
        inside a host; an ``nvlink_domain`` that is not a non-empty string
        (<= 256 characters); GPUs not connected to each other.
    """
    graph = infer_hosts(simple_graph(graph))
    if check is not None:
        check()
    nccl = DEFAULT_NCCL if nccl is None else nccl
    check_gpu_name(graph.graph.get("gpu"))
    arch = gpu_arch(graph.graph.get("gpu"))
    memo: dict = {}

    measured: list = []

    def rate(u, v, data) -> float:
        """NCCL's rate on an edge (:func:`link_efficiency`), GB/s, capped by a measured rate
        (``measured_gbps``, :mod:`.measured`); memoised per link kind and port counts."""
        link = data.get("link")
        if link is None:
            r = edge_bandwidth(u, v, data)
        else:
            key = (link, data.get("nvlinks"), data.get("ports"))
            got = memo.get(key)
            if got is None:
                got = memo[key] = link_efficiency(data, arch, nccl)
            b = edge_bandwidth(u, v, data)  # validated even when an override replaces it
            r = got[1] if got[1] is not None else b * got[0]
        if "measured_gbps" in data:
            r = min(r, measured_cap(u, v, data))
        return r
    nodes = list(graph.nodes)
    index = {n: i for i, n in enumerate(nodes)}
    gpu_nodes = []
    for k, (n, data) in enumerate(graph.nodes(data=True)):
        if check is not None and not k % CHECK_EVERY:
            check()
        kind = data.get("kind", "gpu")
        if kind == "gpu":
            gpu_nodes.append(n)
            dom = data.get("nvlink_domain")
            if dom is not None and (not isinstance(dom, str) or not dom.strip() or len(dom) > 256):
                raise InvalidArgumentError(
                    f"GPU {n!r} has nvlink_domain {dom!r}; it must be a non-empty string of at most 256 characters "
                    "(the NVLink domain's name, e.g. an NVL72 rack or a ClusterUUID)", "cluster.nodes")
    if not gpu_nodes:
        raise InvalidArgumentError("the cluster graph has no GPU nodes (kind 'gpu' or no kind)", "cluster.nodes")

    devices, host_names, host_of, local = gpus_by_host(graph, gpu_nodes, check)

    # edges -> arrays (Python lists filled in one pass; the common edge, a float bandwidth in range and no
    # link kind or measured rate, is read inline: 164k-672k edges at 131,072 GPUs)
    src_l: list = []
    dst_l: list = []
    bw_l: list = []
    lat_at: list = []  # (edge position, latency_us) of the edges that give one
    lo, hi = MIN_BANDWIDTH_GBPS, MAX_BANDWIDTH_GBPS
    for i, (u, v, data) in enumerate(graph.edges(data=True)):
        b = data.get("bandwidth")
        if type(b) is not float or not lo <= b <= hi or "link" in data or "measured_gbps" in data:
            b = rate(u, v, data)
            if "measured_gbps" in data:
                measured.append((u, v, data))
        src_l.append(index[u])
        dst_l.append(index[v])
        bw_l.append(b)
        if "latency_us" in data:
            lat_at.append((i, data["latency_us"]))
        if check is not None and not (i + 1) % CHECK_EVERY:
            check()
    src = np.array(src_l, dtype=np.int64)
    dst = np.array(dst_l, dtype=np.int64)
    bw = np.array(bw_l, dtype=np.float64)
    del src_l, dst_l, bw_l
    lat = np.zeros(bw.size, dtype=np.float64)
    for i, t in lat_at:
        lat[i] = float(t or 0.0) * 1e-6
    gpu_idx = np.array([index[d] for d in devices], dtype=np.int64)

    if check is not None:
        check()
    # the general build (ECMP twins) reads the edges' rates again through ``rate`` (memoised per link kind)
    fabric = fabric_from_graph(graph, devices, check, rate, (nodes, src, dst, bw, lat, gpu_idx))
    if check is not None:
        check()
    # Domains come from per-GPU fair shares of the switch links: a leaf uplink of 400 GB/s under 32
    # GPUs counts as 12.5 GB/s, so leaves, pods and spines nest as bandwidth levels (DESIGN §2's
    # capacities are shared; widest path alone would not see oversubscription).
    share = fabric.fair_share_gbps()
    raw_bw = bw.copy()
    n_nodes = len(nodes)
    # a switch-to-switch edge (no GPU end) between a fabric node and its parent carries at most the
    # child's fair share (vectorised over the edges: a Python loop took seconds at 131,072 GPUs)
    fidx = np.full(n_nodes, -1, dtype=np.int64)
    for name, fi in fabric.node_index.items():
        k = index.get(name)
        if k is not None:
            fidx[k] = fi
    fidx[gpu_idx] = -1
    parent = np.asarray(fabric.parent)
    if parent.size:  # no switch at all: GPUs joined directly
        fu, fv = fidx[src], fidx[dst]
        ok = (fu >= 0) & (fv >= 0)
        pu = np.where(ok, parent[np.maximum(fu, 0)], -2)
        pv = np.where(ok, parent[np.maximum(fv, 0)], -2)
        up = ok & (pu == fv)
        down = ok & ~up & (pv == fu)
        bw[up] = np.minimum(bw[up], share[fu[up]])
        bw[down] = np.minimum(bw[down], share[fv[down]])
    boundary: list[float] = []
    out_caps: list[np.ndarray] = []
    if check is not None:  # each phase takes a second or more at 131,072 GPUs on a loaded machine
        check()
    levels, doms = bandwidth_levels(src, dst, bw, gpu_idx, n_nodes, boundary, raw_bw, out_caps)
    raw_boundary: list[float] = []
    raw_out_caps: list[np.ndarray] = []
    if check is not None:
        check()
    raw_levels, raw_doms = bandwidth_levels(src, dst, raw_bw, gpu_idx, n_nodes, raw_boundary, None, raw_out_caps)
    values = np.unique(bw)[::-1]
    if len(devices) == 1:
        levels, doms = [float(values[0]) if values.size else 1.0], [np.zeros(1, dtype=np.int64)]
    if not doms or np.unique(doms[-1]).size != 1:
        # find a GPU not connected to the first one
        if doms:
            lab = doms[-1]
        else:
            lab = np.arange(len(devices))
        other = devices[int(np.flatnonzero(lab != lab[0])[0])]
        raise InvalidArgumentError(
            f"GPU {other!r} is not connected to GPU {devices[0]!r}; every GPU must reach every other", "cluster.edges"
        )
    cl = Cluster(
        devices=tuple(devices),
        hosts=tuple(host_names),
        host_of=np.asarray(host_of, dtype=np.int64),
        local_index=np.asarray(local, dtype=np.int64),
        levels_gbps=np.asarray(levels, dtype=np.float64),
        domains=np.vstack(doms).astype(np.int64),
    )
    object.__setattr__(cl, "boundary_gbps", np.asarray(boundary if len(boundary) == len(levels) else
                                                       np.zeros(len(levels)), dtype=np.float64))
    if len(devices) > 1 and raw_doms:
        object.__setattr__(cl, "widest_levels_gbps", np.asarray(raw_levels, dtype=np.float64))
        object.__setattr__(cl, "widest_domains", np.vstack(raw_doms).astype(np.int64))
        object.__setattr__(cl, "widest_boundary_gbps", np.asarray(raw_boundary, dtype=np.float64))
    else:
        object.__setattr__(cl, "widest_levels_gbps", cl.levels_gbps)
        object.__setattr__(cl, "widest_domains", cl.domains)
        object.__setattr__(cl, "widest_boundary_gbps", np.zeros(cl.levels_gbps.size))
    # per-domain outward capacities (lower bound, solver/bound.py), only when the levels are the computed ones
    object.__setattr__(cl, "domain_out_gbps", tuple(out_caps) if len(out_caps) == cl.domains.shape[0]
                       and all(o.size == np.unique(d).size for o, d in zip(out_caps, cl.domains)) else ())
    object.__setattr__(cl, "widest_domain_out_gbps", tuple(raw_out_caps) if len(raw_out_caps) ==
                       cl.widest_domains.shape[0] and cl.widest_domains is not cl.domains else ())
    if check is not None:  # each phase takes a second or more at 131,072 GPUs on a loaded machine
        check()
    extra = non_relay_extra(cl, gpu_idx, src, dst, bw, n_nodes)
    if extra:
        object.__setattr__(cl, "host_extra", extra)
    object.__setattr__(cl, "fabric", fabric)
    object.__setattr__(cl, "host_note", graph.graph.get(NOTE_KEY))
    object.__setattr__(cl, "nccl", nccl)
    if measured:
        object.__setattr__(cl, "measured_links", measured_links(fabric, measured))
    attrs = graph.nodes
    types = [attrs[d].get("host_type") for d in devices] if any(
        "host_type" in d for _n, d in graph.nodes(data=True)) else []
    if any(t is not None for t in types):  # --host-topology HOSTLIST=FILE: hosts of several topologies
        cl.__dict__["_host_type_names"] = np.array(["" if t is None else str(t)[:256] for t in types])
    if check is not None:  # each phase takes a second or more at 131,072 GPUs on a loaded machine
        check()
    object.__setattr__(cl, "nccl_topology", nccl_topology(graph, devices, cl.host_of, fabric, arch,
                                                        (nodes, src, dst, raw_bw), check, cl.local_index))
    return cl
