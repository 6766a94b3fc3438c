"""Reading a cluster graph (DESIGN §2): the accepted ranges, link capacities, GPUs by host.

The same ranges hold in process, in graph files and on the service (:mod:`.cluster` builds
the cluster model from what is read here).
"""

from __future__ import annotations

import math

import networkx as nx
import numpy as np

from ..errors import InvalidArgumentError

__all__ = ["MIN_BANDWIDTH_GBPS", "MAX_BANDWIDTH_GBPS", "MAX_LOCAL_INDEX", "edge_bandwidth", "simple_graph",
           "gpus_by_host"]

#: Accepted link capacities, GB/s per direction (1 KB/s .. 1 EB/s): outside this range the
#: predicted times overflow to infinity or underflow to zero (issue 11: 5e-324 printed
#: ``Infinity``).  The same range holds in process, in graph files and on the service.
MIN_BANDWIDTH_GBPS = 1e-6
MAX_BANDWIDTH_GBPS = 1e9
#: Largest ``local_index`` (the CUDA device index of a GPU inside its host): the service's
#: ``int32`` field, so that a cluster accepted in process is accepted by ``--server`` too.
MAX_LOCAL_INDEX = 2**31 - 1


def edge_bandwidth(u, v, data) -> float:
    """The capacity of edge (u, v), GB/s per direction, checked (``InvalidArgumentError`` naming the edge)."""
    if "bandwidth" not in data:
        raise InvalidArgumentError(f"edge ({u!r}, {v!r}) has no 'bandwidth' attribute (GB/s)", "cluster.edges")
    b = data["bandwidth"]
    try:
        if isinstance(b, bool):
            raise TypeError
        bf = float(b)
    except (TypeError, ValueError):
        raise InvalidArgumentError(
            f"edge ({u!r}, {v!r}) has bandwidth {b!r}, which is not a number (GB/s)", "cluster.edges"
        ) from None
    if not math.isfinite(bf) or bf <= 0:
        raise InvalidArgumentError(
            f"edge ({u!r}, {v!r}) has bandwidth {b!r}; it must be finite and > 0 (GB/s)", "cluster.edges"
        )
    if not MIN_BANDWIDTH_GBPS <= bf <= MAX_BANDWIDTH_GBPS:
        raise InvalidArgumentError(
            f"edge ({u!r}, {v!r}) has bandwidth {b!r} GB/s, outside the accepted range "
            f"{MIN_BANDWIDTH_GBPS:g}..{MAX_BANDWIDTH_GBPS:g} GB/s", "cluster.edges"
        )
    return bf


def simple_graph(graph: nx.Graph) -> nx.Graph:
    """``graph`` as a simple undirected graph: a directed graph read as undirected, parallel edges of a
    multigraph one link of the summed capacity (the widest latency kept).

    Raises
    ------
    InvalidArgumentError
        ``graph`` is not a networkx graph, or has a self-loop (naming its node).
    """
    if not isinstance(graph, nx.Graph):
        raise InvalidArgumentError(f"cluster must be a networkx graph, got {type(graph).__name__}", "cluster")
    if graph.is_multigraph():
        simple = nx.Graph()
        simple.add_nodes_from(graph.nodes(data=True))
        for u, v, data in graph.edges(data=True):
            b = edge_bandwidth(u, v, data)
            if simple.has_edge(u, v):
                old = simple[u][v]
                old["bandwidth"] += b
                old["latency_us"] = max(old.get("latency_us", 0.0), float(data.get("latency_us", 0.0) or 0.0))
            else:
                simple.add_edge(u, v, **{**data, "bandwidth": b})
        graph = simple
    elif graph.is_directed():
        graph = nx.Graph(graph)
    loop = next(nx.selfloop_edges(graph), None)
    if loop is not None:
        raise InvalidArgumentError(f"link {loop[0]!r} -- {loop[1]!r} joins a node to itself (a self-loop carries no "
                                   "traffic between devices: remove it)", "links")
    return graph


def gpus_by_host(graph: nx.Graph, gpu_nodes: list, check=None) -> tuple[list, list[str], list[int], list[int]]:
    """``(devices, host names, host of each device, local index of each device)``: hosts in order of
    first appearance, each host's GPUs by local index (absent: position among the host's GPUs).

    ``check`` (optional): a cancellation check point, called every 16,384 GPUs and every 2,048 hosts.

    Raises
    ------
    InvalidArgumentError
        A ``local_index`` that is not an integer in 0..``MAX_LOCAL_INDEX``, or shared by two GPUs of a host.
    """
    # hosts in order of first appearance; local indices
    host_names: list[str] = []
    host_pos: dict[str, int] = {}
    per_host: dict[str, list] = {}
    attrs = dict(graph.nodes(data=True))  # plain dict lookups (the node view's took a second at 131,072 GPUs)
    for k, n in enumerate(gpu_nodes):
        if check is not None and not k & 16383:
            check()
        data = attrs[n]
        host = data.get("host")
        host = str(n) if host is None or host == "" else str(host)
        if host not in host_pos:
            host_pos[host] = len(host_names)
            host_names.append(host)
            per_host[host] = []
        per_host[host].append(n)
    devices: list = []
    host_of: list[int] = []
    local: list[int] = []
    for k, host in enumerate(host_names):
        if check is not None and not k & 2047:
            check()
        members = per_host[host]
        locs = []
        for pos, n in enumerate(members):
            li = attrs[n].get("local_index", None)
            if li is None:
                li = pos
            if type(li) is int and 0 <= li <= MAX_LOCAL_INDEX:  # the usual case, checked below otherwise
                locs.append(li)
                continue
            if isinstance(li, bool) or not (isinstance(li, (int, np.integer)) or (isinstance(li, float) and li.is_integer())):
                if isinstance(li, str) and li.strip().lstrip("-").isdigit():
                    li = int(li)
                else:
                    raise InvalidArgumentError(
                        f"GPU {n!r} has local_index {li!r}; it must be a non-negative integer", "cluster.nodes"
                    )
            li = int(li)
            if li < 0:
                raise InvalidArgumentError(f"GPU {n!r} has negative local_index {li}", "cluster.nodes")
            if li > MAX_LOCAL_INDEX:
                raise InvalidArgumentError(
                    f"GPU {n!r} has local_index {li}; the accepted range is 0..{MAX_LOCAL_INDEX}", "cluster.nodes"
                )
            locs.append(li)
        if len(set(locs)) != len(locs):
            seen: dict[int, object] = {}
            for n, li in zip(members, locs):
                if li in seen:
                    raise InvalidArgumentError(
                        f"GPUs {seen[li]!r} and {n!r} on host {host!r} share local_index {li}", "cluster.nodes"
                    )
                seen[li] = n
        for li, n in sorted(zip(locs, range(len(members)))):
            devices.append(members[n])
            host_of.append(host_pos[host])
            local.append(li)
    return devices, host_names, host_of, local
