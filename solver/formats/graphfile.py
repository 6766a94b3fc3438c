"""Cluster graph files: networkx node-link JSON and GraphML (DESIGN §2).

:func:`load_graph` reads either format (node-link with an ``"edges"`` or a ``"links"``
key; GraphML detected by the ``<graphml`` root), returns an undirected ``nx.Graph`` and
checks the schema lightly: every edge has a finite ``bandwidth`` > 0, ``local_index`` is an
integer.  :func:`dump_graph` writes node-link JSON (one node or edge per line, ``"edges"``
key, as ``networkx.node_link_data(G, edges="edges")``) or, for ``*.graphml``, GraphML.
"""

from __future__ import annotations

import json
import math
import os
from typing import Any

import networkx as nx

from ..errors import InvalidArgumentError
from ..fabric.graph import MAX_BANDWIDTH_GBPS, MAX_LOCAL_INDEX, MIN_BANDWIDTH_GBPS
from .safe import MAX_JSON_BYTES, is_strict_int_text, load_json
from .safe_xml import check_xml

__all__ = ["load_graph", "dump_graph", "graph_from_data", "node_link_text"]


def _num(v: Any) -> float | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, (int, float)):
        return float(v)
    if isinstance(v, str):
        try:
            return float(v)
        except ValueError:
            return None
    return None


def _check(G: nx.Graph, label: str) -> nx.Graph:
    for i, (u, v, d) in enumerate(G.edges(data=True)):
        if "bandwidth" not in d:
            raise InvalidArgumentError(f"{label}: edge ({u!r}, {v!r}) has no 'bandwidth' attribute (GB/s)",
                                       f"edges[{i}].bandwidth")
        bw = _num(d["bandwidth"])
        if bw is None or not math.isfinite(bw) or bw <= 0:
            raise InvalidArgumentError(
                f"{label}: edge ({u!r}, {v!r}) has bandwidth {d['bandwidth']!r}; it must be finite and > 0 (GB/s)",
                f"edges[{i}].bandwidth")
        if not MIN_BANDWIDTH_GBPS <= bw <= MAX_BANDWIDTH_GBPS:
            raise InvalidArgumentError(
                f"{label}: edge ({u!r}, {v!r}) has bandwidth {d['bandwidth']!r} GB/s, outside the accepted range "
                f"{MIN_BANDWIDTH_GBPS:g}..{MAX_BANDWIDTH_GBPS:g} GB/s", f"edges[{i}].bandwidth")
        d["bandwidth"] = bw
        if "latency_us" in d:
            lat = _num(d["latency_us"])
            if lat is None or not math.isfinite(lat) or lat < 0:
                raise InvalidArgumentError(f"{label}: edge ({u!r}, {v!r}) has latency_us {d['latency_us']!r}",
                                           f"edges[{i}].latency_us")
            d["latency_us"] = lat
    kinds: dict = {}
    for n, d in G.nodes(data=True):
        k = d.get("kind", "gpu")
        if k not in kinds:
            kinds[k] = n
        if "local_index" in d:
            li = d["local_index"]
            if isinstance(li, float) and li.is_integer():
                li = int(li)
            if isinstance(li, bool) or not (isinstance(li, int) or is_strict_int_text(str(li).strip())):
                raise InvalidArgumentError(f"{label}: node {n!r} has local_index {d['local_index']!r}; "
                                           "it must be a non-negative integer", "nodes.local_index")
            li = int(str(li).strip()) if not isinstance(li, int) else li
            if not 0 <= li <= MAX_LOCAL_INDEX:
                raise InvalidArgumentError(f"{label}: node {n!r} has local_index {d['local_index']!r}; "
                                           f"the accepted range is 0..{MAX_LOCAL_INDEX}", "nodes.local_index")
            d["local_index"] = li
        if "host" in d and not isinstance(d["host"], str):
            d["host"] = str(d["host"])
    warnings = kind_warnings(kinds)
    if warnings:
        G.graph[KIND_WARNINGS_KEY] = warnings
    return G


#: Graph attribute holding :func:`kind_warnings` of a loaded graph file (the file's own ``warnings``, from the
#: importers of ``rankmap cluster``, are not repeated on every solve).
KIND_WARNINGS_KEY = "kind_warnings"


#: Node kinds with a meaning (DESIGN §2; any other string is a non-GPU node without one).
KNOWN_KINDS = ("gpu", "nic", "nvswitch", "pcie_switch", "cpu", "switch")


def kind_warnings(kinds: dict) -> list[str]:
    """One warning per node kind that is not one of ``KNOWN_KINDS`` but close to one (``"GPU"``, ``"gpuu"``,
    ``"Nic"``): such nodes are silently non-GPU nodes without that kind's meaning (DESIGN §2), which is
    almost always a typo.  ``kinds``: kind -> the first node of that kind."""
    import difflib

    out = []
    for kind, node in kinds.items():
        if kind in KNOWN_KINDS:
            continue
        text = str(kind).strip().lower()
        near = [text] if text in KNOWN_KINDS else difflib.get_close_matches(text, KNOWN_KINDS, n=1, cutoff=0.75)
        if near:
            what = "GPUs" if near[0] == "gpu" else f"{near[0]!r} nodes"
            out.append(f"node kind {kind!r} (e.g. node {node!r}) is not {near[0]!r}: those nodes are not {what} "
                       f"(did you mean {near[0]!r}?)")
    return out


def _simple_undirected(G: nx.Graph) -> nx.Graph:
    """A simple undirected graph: parallel edges of a multigraph are parallel physical links
    and become one edge with the summed ``bandwidth`` (DESIGN §2; the other attributes are the
    first edge's).  In a directed graph ``u -> v`` and ``v -> u`` are the two directions of one
    link (``bandwidth`` is per direction): the edge gets the larger of the two."""
    if not G.is_directed() and not G.is_multigraph():
        return G
    summed: dict = {}
    for u, v, d in G.edges(data=True):
        key = (u, v) if G.is_directed() else frozenset((u, v)) if u != v else (u, u)
        if key in summed:
            a = summed[key][2]
            a["bandwidth"] = (_num(a.get("bandwidth")) or 0.0) + (_num(d.get("bandwidth")) or 0.0)
        else:
            summed[key] = (u, v, dict(d))
    H = nx.Graph()
    H.graph.update(G.graph)
    H.add_nodes_from(G.nodes(data=True))
    for u, v, d in summed.values():
        if H.has_edge(u, v):
            old = _num(H[u][v].get("bandwidth")) or 0.0
            new = _num(d.get("bandwidth")) or 0.0
            if new <= old:
                continue
        H.add_edge(u, v, **d)
    return H


def graph_from_data(data: Any, label: str = "graph") -> nx.Graph:
    """A node-link mapping (``"edges"`` or ``"links"``) -> checked undirected graph."""
    if not isinstance(data, dict) or "nodes" not in data:
        raise InvalidArgumentError(f"{label}: not node-link JSON (no 'nodes' list)", "cluster")
    key = "edges" if "edges" in data else ("links" if "links" in data else None)
    if key is None:
        raise InvalidArgumentError(f"{label}: node-link JSON has neither 'edges' nor 'links'", "cluster")
    if not isinstance(data["nodes"], list) or not isinstance(data[key], list):
        raise InvalidArgumentError(f"{label}: 'nodes' and '{key}' must be lists", "cluster")
    for i, n in enumerate(data["nodes"]):
        if not isinstance(n, dict) or "id" not in n:
            raise InvalidArgumentError(f"{label}: nodes[{i}] has no 'id'", f"nodes[{i}]")
    directed, multigraph = bool(data.get("directed", False)), bool(data.get("multigraph", False))
    if not directed and not multigraph and all(type(n["id"]) is str for n in data["nodes"]):
        return _check(_string_graph(data, key, label), label)
    ids = {json.dumps(n["id"]) for n in data["nodes"]}
    for i, e in enumerate(data[key]):
        if not isinstance(e, dict) or "source" not in e or "target" not in e:
            raise InvalidArgumentError(f"{label}: {key}[{i}] needs 'source' and 'target'", f"{key}[{i}]")
        for end in ("source", "target"):
            if json.dumps(e[end]) not in ids:
                raise InvalidArgumentError(f"{label}: {key}[{i}] {end} {e[end]!r} is not a node id", f"{key}[{i}]")
    try:
        G = nx.node_link_graph(data, directed=directed, multigraph=multigraph, edges=key)
    except (KeyError, TypeError, ValueError, nx.NetworkXError) as exc:
        raise InvalidArgumentError(f"{label}: invalid node-link data ({exc})", "cluster") from None
    return _check(_simple_undirected(G), label)


def _string_graph(data: dict, key: str, label: str) -> nx.Graph:
    """``nx.node_link_graph`` of an undirected simple node-link mapping whose node ids are all
    strings, built in bulk (the same graph; at 131,072 GPUs about 2x faster than the general path,
    which serialises every id to compare it).

    Raises
    ------
    InvalidArgumentError
        An edge without ``source`` and ``target``, or naming a node that does not exist.
    """
    nodes = data["nodes"]
    ids = {n["id"] for n in nodes}
    edges = data[key]
    for i, e in enumerate(edges):
        if not isinstance(e, dict) or "source" not in e or "target" not in e:
            raise InvalidArgumentError(f"{label}: {key}[{i}] needs 'source' and 'target'", f"{key}[{i}]")
        u, v = e["source"], e["target"]
        if type(u) is not str or u not in ids or type(v) is not str or v not in ids:
            end = "source" if type(u) is not str or u not in ids else "target"
            raise InvalidArgumentError(f"{label}: {key}[{i}] {end} {e[end]!r} is not a node id", f"{key}[{i}]")
    G = nx.Graph()
    G.graph = data.get("graph", {})
    G.add_nodes_from((n["id"], {k: v for k, v in n.items() if k != "id"}) for n in nodes)
    G.add_edges_from((e["source"], e["target"], {k: v for k, v in e.items() if k != "source" and k != "target"})
                     for e in edges)
    return G


def load_graph(path: Any) -> nx.Graph:
    """Read a cluster graph from node-link JSON or GraphML.

    Raises
    ------
    InvalidArgumentError
        Missing file, malformed JSON (with line and column), malformed GraphML, schema
        violations (edge without a positive ``bandwidth``, bad ``local_index``).
    """
    p = str(path)
    try:
        size = os.path.getsize(p) if os.path.isfile(p) else 0
        if size > MAX_JSON_BYTES:
            raise InvalidArgumentError(f"cluster file {p!r} has {size:,} bytes; the limit is {MAX_JSON_BYTES:,}",
                                       "cluster")
        with open(p, "rb") as fh:
            raw = fh.read(MAX_JSON_BYTES + 1)  # an endless input (/dev/zero, a pipe) stops here
        if len(raw) > MAX_JSON_BYTES:
            raise InvalidArgumentError(f"cluster file {p!r} has more than {MAX_JSON_BYTES:,} bytes", "cluster")
    except FileNotFoundError:
        raise InvalidArgumentError(f"cluster file {p!r} does not exist", "cluster") from None
    except IsADirectoryError:
        raise InvalidArgumentError(f"cluster file {p!r} is a directory", "cluster") from None
    except OSError as exc:
        raise InvalidArgumentError(f"cannot read cluster file {p!r}: {exc.strerror or exc}", "cluster") from None
    head = raw[:4096].lstrip().lower()
    if p.lower().endswith(".graphml") or (head.startswith(b"<") and b"<graphml" in raw[:65536].lower()):
        import xml.etree.ElementTree as ET

        check_xml(raw, p, "cluster", kind="GraphML XML")  # entity declarations / external references refused (defusedxml)
        try:
            G = nx.parse_graphml(raw)
        except ET.ParseError as exc:
            line, col = getattr(exc, "position", (0, 0))
            raise InvalidArgumentError(f"{p} line {line}: malformed GraphML XML (column {col + 1})",
                                       "cluster") from None
        except (nx.NetworkXError, KeyError, ValueError, TypeError) as exc:
            raise InvalidArgumentError(f"{p}: invalid GraphML ({exc})", "cluster") from None
        for k, v in list(G.graph.items()):
            if isinstance(v, str) and v[:1] in "[{":
                try:
                    G.graph[k] = load_json(v, p)
                except InvalidArgumentError:
                    pass
        return _check(_simple_undirected(G), p)
    data = load_json(raw, p, "cluster")  # depth, size, duplicate keys, finite numbers (safe.py)
    return graph_from_data(data, p)


def _jsonable(x: Any) -> Any:
    if isinstance(x, float) and not math.isfinite(x):
        return str(x)
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple, set)):
        return [_jsonable(v) for v in x]
    if hasattr(x, "item") and callable(x.item):  # numpy scalars
        return x.item()
    return x


def node_link_text(G: nx.Graph) -> str:
    """Node-link JSON of ``G`` (``"edges"`` key), one node or edge per line."""
    data = _jsonable(nx.node_link_data(G, edges="edges"))
    head = {k: v for k, v in data.items() if k not in ("nodes", "edges")}
    parts = ["{"]
    for k, v in head.items():
        parts.append(f" {json.dumps(k)}: {json.dumps(v)},")
    for key in ("nodes", "edges"):
        items = data.get(key, [])
        parts.append(f" {json.dumps(key)}: [")
        for i, it in enumerate(items):
            parts.append("  " + json.dumps(it) + ("," if i + 1 < len(items) else ""))
        parts.append(" ]" + ("," if key == "nodes" else ""))
    parts.append("}")
    return "\n".join(parts) + "\n"


def dump_graph(G: nx.Graph, path: Any) -> None:
    """Write ``G`` as node-link JSON, or GraphML when ``path`` ends in ``.graphml``.

    GraphML cannot hold lists or mappings, so such graph/node/edge attributes are written as
    JSON strings (graph attributes are decoded again by :func:`load_graph`).
    """
    p = str(path)
    try:
        if p.lower().endswith(".graphml"):
            H = G.copy()
            for k, v in list(H.graph.items()):
                if isinstance(v, (dict, list, tuple)):
                    H.graph[k] = json.dumps(_jsonable(v))
                elif v is None:
                    del H.graph[k]
            for _, d in list(H.nodes(data=True)) + [(None, d) for *_, d in H.edges(data=True)]:
                for k, v in list(d.items()):
                    if isinstance(v, (dict, list, tuple)):
                        d[k] = json.dumps(_jsonable(v))
                    elif v is None:
                        del d[k]
            nx.write_graphml(H, p)
        else:
            tmp = p + ".tmp" if os.path.dirname(p) != "/dev" and not p.startswith("/dev/") else None
            text = node_link_text(G)
            if tmp:
                with open(tmp, "w", encoding="utf-8") as fh:
                    fh.write(text)
                os.replace(tmp, p)
            else:
                with open(p, "w", encoding="utf-8") as fh:
                    fh.write(text)
    except OSError as exc:
        raise InvalidArgumentError(f"cannot write {p!r}: {exc.strerror or exc}", "output") from None
