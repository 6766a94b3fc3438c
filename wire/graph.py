"""The cluster graph on the wire: ``nx.Graph`` (DESIGN §2) <-> ``rankmap.v1.Cluster``."""

from __future__ import annotations

import math
from typing import Any, Callable, Hashable, Iterable, Mapping

import networkx as nx
import numpy as np

from rankmap.wire.errors import invalid
from rankmap.solver.errors import InvalidArgumentError
from rankmap.v1 import rankmap_pb2 as pb

__all__ = ["graph_to_proto", "graph_from_proto", "count_gpus"]

#: Loops call their check point every 4,096 items (~1 ms of work).
_CHECK_MASK = 4095


def _no_check() -> None:
    return None


def _is_gpu(data: Mapping) -> bool:
    kind = data.get("kind", "gpu")
    return kind is None or kind == "gpu"


def graph_to_proto(graph: nx.Graph) -> "pb.Cluster":
    """An ``nx.Graph`` of DESIGN §2 as a ``rankmap.v1.Cluster``.

    GPUs (``kind`` "gpu" or absent) become devices (``host``, ``local_index``,
    ``nvlink_domain``), other nodes nodes (``kind``, ``host``, ``nic_index``), edges
    links (``bandwidth``, ``latency_us``, and what the NCCL model reads: ``link`` as
    ``kind``, ``nvlinks``, ``ports``), all in graph order, the graph's ``gpu`` as
    ``Cluster.gpu``; node ids become strings.  Attributes outside the schema are dropped.

    Raises
    ------
    InvalidArgumentError
        For values the wire cannot carry: two node ids with the same string,
        a non-numeric bandwidth or latency, a non-integer ``local_index`` (the
        messages are the solver's).
    """
    if not isinstance(graph, nx.Graph):
        raise InvalidArgumentError(f"cluster must be a networkx graph, got {type(graph).__name__}", "cluster")
    out = pb.Cluster()
    gpu = graph.graph.get("gpu")
    if isinstance(gpu, str) and gpu:
        out.gpu = gpu
    seen: dict[str, Hashable] = {}
    for n, data in graph.nodes(data=True):
        key = str(n)
        if key in seen:
            raise InvalidArgumentError(
                f"nodes {seen[key]!r} and {n!r} have the same id {key!r} as text", "cluster.nodes"
            )
        seen[key] = n
        if _is_gpu(data):
            dev = out.devices.add(id=key)
            host = data.get("host")
            if host is not None and host != "":
                dev.host = str(host)
            li = data.get("local_index")
            if li is not None:
                dev.local_index = _local_index(n, li)
            dom = data.get("nvlink_domain")
            if dom is not None:
                dev.nvlink_domain = str(dom)
        else:
            node = out.nodes.add(id=key, kind=str(data["kind"]))
            host = data.get("host")
            if host is not None and host != "":
                node.host = str(host)
            nic = data.get("nic_index")
            if isinstance(nic, (int, np.integer)) and not isinstance(nic, bool) and -(2**31) <= nic < 2**31:
                node.nic_index = int(nic)  # the solver ignores any other value
    for u, v, data in graph.edges(data=True):
        link = out.links.add(source=str(u), target=str(v))
        if "bandwidth" in data:
            link.bandwidth_gbps = _wire_number(u, v, data, "bandwidth")
        if data.get("latency_us") is not None:
            link.latency_us = _wire_number(u, v, data, "latency_us")
        kind = data.get("link")
        if isinstance(kind, str) and kind:
            link.kind = kind
        for attr in ("nvlinks", "ports"):
            value = data.get(attr)
            # the solver reads a positive number and ignores anything else: send only what it reads
            if isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool) \
                    and math.isfinite(value) and value > 0:
                setattr(link, attr, float(value))
        if data.get("measured_gbps") is not None:  # a measured cap (issue 27), checked by the cluster model
            link.measured_gbps = _wire_number(u, v, data, "measured_gbps")
            link.measured_source = str(data.get("measured_source", "") or "")[:512]
    return out


def _local_index(n, li) -> int:
    ok = not isinstance(li, bool) and (
        isinstance(li, (int, np.integer))
        or (isinstance(li, float) and li.is_integer())
        or (isinstance(li, str) and li.strip().lstrip("-").isdigit())
    )
    if not ok or not (-(2**31) <= int(li) < 2**31):
        raise InvalidArgumentError(f"GPU {n!r} has local_index {li!r}; it must be a non-negative integer", "cluster.nodes")
    return int(li)


def _wire_number(u, v, data, attr: str) -> float:
    value = data[attr]
    try:
        if isinstance(value, bool):
            raise TypeError
        return float(value)
    except (TypeError, ValueError):
        if attr == "bandwidth":
            _check_bandwidth(u, v, data)  # raises the solver's message
        raise InvalidArgumentError(
            f"edge ({u!r}, {v!r}) has {attr} {value!r}, which is not a number", "cluster.edges"
        ) from None


def _check_bandwidth(u, v, data) -> float:
    """The solver's own bandwidth check (same message as the CLI)."""
    try:
        from rankmap.solver.fabric.graph import edge_bandwidth as _edge_bandwidth
    except ImportError:  # pragma: no cover - solver module not present
        _edge_bandwidth = None
    if _edge_bandwidth is not None:
        return _edge_bandwidth(u, v, data)
    b = data.get("bandwidth")
    if b is None:
        raise InvalidArgumentError(f"edge ({u!r}, {v!r}) has no 'bandwidth' attribute (GB/s)", "cluster.edges")
    if not math.isfinite(b) or b <= 0:
        raise InvalidArgumentError(
            f"edge ({u!r}, {v!r}) has bandwidth {b!r}; it must be finite and > 0 (GB/s)", "cluster.edges"
        )
    return float(b)


def _where(cluster: "pb.Cluster", node_id: str) -> str:
    for i, d in enumerate(cluster.devices):
        if d.id == node_id:
            return f"cluster.devices[{i}]"
    for i, n in enumerate(cluster.nodes):
        if n.id == node_id:
            return f"cluster.nodes[{i}]"
    return "?"


def graph_from_proto(cluster: "pb.Cluster", check: Callable[[], None] | None = None) -> nx.Graph:
    """The ``nx.Graph`` of a ``rankmap.v1.Cluster`` (devices first, then nodes, then links).

    ``check`` is called every few thousand items (a deadline or cancel check
    point: it raises to stop the conversion).

    Raises
    ------
    InvalidArgumentError
        With the proto path as field, for an empty or repeated id, a node of
        kind "gpu" or without kind, a link to an unknown node, a missing,
        non-finite or non-positive bandwidth, a negative or non-finite latency.
    """
    g = nx.Graph()
    # the graph's own node and adjacency dicts are filled in place (add_nodes_from / add_edges_from copy every
    # attribute dict again: about a second at 131,072 GPUs); same insertion order, same graph
    nodes: dict[str, dict[str, Any]] = g._node
    adj: dict[str, dict[str, Any]] = g._adj
    check = check or _no_check
    for i, d in enumerate(cluster.devices):
        if not i & _CHECK_MASK:
            check()
        did = d.id
        if not did or did in nodes:
            path = f"cluster.devices[{i}]"
            if not did:
                raise invalid(f"device {i} has an empty id", f"{path}.id", "cluster.nodes")
            raise invalid(f"node id {did!r} is given twice ({_where(cluster, did)} and {path})", f"{path}.id",
                          "cluster.nodes")
        attrs: dict[str, Any] = {"kind": "gpu"}
        if d.HasField("host") and d.host:
            attrs["host"] = d.host
        if d.HasField("local_index"):
            attrs["local_index"] = int(d.local_index)
        if d.HasField("nvlink_domain"):
            attrs["nvlink_domain"] = d.nvlink_domain  # validated by cluster_from_graph
        nodes[did] = attrs
        adj[did] = {}
    for i, n in enumerate(cluster.nodes):
        if not i & _CHECK_MASK:
            check()
        nid, kind = n.id, n.kind
        if not nid or nid in nodes or not kind or kind == "gpu":
            path = f"cluster.nodes[{i}]"
            if not nid:
                raise invalid(f"node {i} has an empty id", f"{path}.id", "cluster.nodes")
            if nid in nodes:
                raise invalid(f"node id {nid!r} is given twice ({_where(cluster, nid)} and {path})", f"{path}.id",
                              "cluster.nodes")
            raise invalid(
                f"node {nid!r} has kind {kind!r}; GPUs belong in cluster.devices, other nodes need a kind "
                f"such as 'nvswitch' or 'nic'",
                f"{path}.kind",
                "cluster.nodes",
            )
        attrs = {"kind": kind}
        if n.HasField("host") and n.host:
            attrs["host"] = n.host
        if n.HasField("nic_index"):
            attrs["nic_index"] = int(n.nic_index)
        nodes[nid] = attrs
        adj[nid] = {}
    isfinite = math.isfinite
    for i, link in enumerate(cluster.links):
        if not i & _CHECK_MASK:
            check()
        u, v = link.source, link.target
        if u not in nodes or v not in nodes:
            end, node = ("source", u) if u not in nodes else ("target", v)
            raise invalid(
                f"link {i} ({u!r}, {v!r}) names unknown node {node!r}", f"cluster.links[{i}].{end}", "cluster.edges"
            )
        has_bw = link.HasField("bandwidth_gbps")
        bw = link.bandwidth_gbps
        if not has_bw or not (isfinite(bw) and bw > 0):
            try:
                _check_bandwidth(u, v, {"bandwidth": bw} if has_bw else {})
            except InvalidArgumentError as exc:
                raise invalid(exc.message, f"cluster.links[{i}].bandwidth_gbps", "cluster.edges") from None
        data: dict[str, Any] = {"bandwidth": bw}
        if link.HasField("latency_us"):
            lat = link.latency_us
            if not isfinite(lat) or lat < 0:
                raise invalid(
                    f"edge ({u!r}, {v!r}) has latency_us {lat!r}; it must be finite and >= 0",
                    f"cluster.links[{i}].latency_us",
                    "cluster.edges",
                )
            data["latency_us"] = lat
        if link.kind:
            data["link"] = link.kind
        for attr in ("nvlinks", "ports"):
            if link.HasField(attr):
                value = getattr(link, attr)
                if not isfinite(value) or value <= 0:
                    raise invalid(f"edge ({u!r}, {v!r}) has {attr} {value!r}; it must be a finite number > 0",
                                  f"cluster.links[{i}].{attr}", "cluster.edges")
                data[attr] = int(value) if value.is_integer() else value
        if link.HasField("measured_gbps"):
            m = link.measured_gbps
            if not isfinite(m) or not 1e-6 <= m <= 1e9:
                raise invalid(f"edge ({u!r}, {v!r}) has measured_gbps {m!r}; it must be finite and in 1e-6..1e9 GB/s",
                              f"cluster.links[{i}].measured_gbps", "cluster.edges")
            data["measured_gbps"] = m
            data["measured_source"] = link.measured_source
        old = adj[u].get(v)
        if old is not None:
            # parallel physical links between two nodes are one link of the summed capacity (DESIGN §2)
            data["bandwidth"] = old["bandwidth"] + bw
            data["latency_us"] = max(old.get("latency_us", 0.0), data.get("latency_us", 0.0))
            for attr in ("nvlinks", "ports"):  # ports of both (as the importers merge NVLink counts)
                if attr in old and attr in data:
                    data[attr] = old[attr] + data[attr]
                elif attr in old:
                    data[attr] = old[attr]
            if "link" in old and "link" not in data:
                data["link"] = old["link"]
        adj[u][v] = adj[v][u] = data
    if cluster.gpu:
        g.graph["gpu"] = cluster.gpu
    check()
    return g


def count_gpus(graph: nx.Graph, exclude_devices: Iterable[str] = (), exclude_hosts: Iterable[str] = ()) -> int:
    """GPUs of ``graph`` that are not excluded (the default world size): :func:`rankmap.solver.job.model.usable_gpus`."""
    from rankmap.solver.job.model import usable_gpus

    return usable_gpus(graph, exclude_devices, exclude_hosts)
