"""The picture of a layout (issue 27 deliverable 5): what ``rankmap view`` and ``solve --emit html`` draw.

:func:`layout_html` turns a solve result (the ``rankmap solve`` JSON document,
:meth:`~rankmap.solver.results.SolveResult.to_dict`) and, when known, the cluster graph into
one self-contained HTML page (:mod:`rankmap.layout_page`: inline CSS, JS and SVG, nothing
fetched from the network).  This module computes the page's data:

* **the fabric tree**: network switches (any node kind other than ``gpu``, ``nic`` and the
  host-internal kinds of :mod:`rankmap.solver.fabric.hostinfer`) by level, leaves first: a
  leaf is a switch a host's NIC (or other host node) links to, level k+1 the switches next
  to level k not seen before; each switch is drawn under its first parent by name (the
  number of parents is kept: 8 core switches over every edge switch show as ``8 uplinks``).
  A host hangs under its first leaf by name.  O(nodes + edges).  Without a graph, every host
  hangs under one ``network`` node.
* **per layout** (chosen and baseline): each GPU's global rank, TP group (its colour), PP
  stage and DP index, from megatron-core's groups of the layout's order (the TP group's row,
  the rank's column in its PP and DP groups); per class its time (seconds) and its
  bottleneck link, mapped to what is drawn (a GPU, a host's uplink, a switch link, or the
  host itself for a link inside it).
* **at scale**: above ``max_hosts`` hosts (default 256) no GPU is drawn; each leaf is one box
  with its hosts' count and the TP groups that leave a host, the host names stay in a
  collapsed list, and the page says so.

Raises :class:`~rankmap.solver.errors.InvalidArgumentError` for a document that is not a
solve result (field ``result``).
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from rankmap.solver.errors import InvalidArgumentError

__all__ = ["MAX_DRAWN_HOSTS", "layout_data", "layout_html", "fabric_tree"]

#: Above this many hosts, leaves are drawn as aggregates (no GPU cells).
MAX_DRAWN_HOSTS = 256
#: Host names listed in the page's collapsed list at most (aggregated mode).
MAX_LISTED_HOSTS = 20000


def _kind(d: Mapping) -> str:
    return str(d.get("kind", "gpu"))


def fabric_tree(graph, host_of_gpu: Mapping[str, str]) -> dict:
    """The drawn fabric of ``graph`` (module docstring).

    Parameters
    ----------
    graph : networkx.Graph
        The cluster graph (DESIGN §2).
    host_of_gpu : mapping str -> str
        GPU node id -> host name (the hosts the result uses).

    Returns
    -------
    dict
        ``switches``: ``[{"id", "level", "parent" (id or None), "parents" (count)}]`` leaves
        first; ``host_leaf``: host -> leaf id; ``node_host``: every host node's id -> host
        (GPUs, NICs, NVSwitches, PCIe switches, CPUs).
    """
    from rankmap.solver.fabric.hostinfer import HOST_INTERNAL_KINDS

    nodes = graph.nodes

    def network(n) -> bool:
        d = nodes[n]
        k = _kind(d)
        if k in ("gpu", "nic") or d.get("role") == "nvlink_domain":
            return False
        return k not in HOST_INTERNAL_KINDS

    node_host: dict[str, str] = {}
    frontier = []
    for n in graph.nodes:
        h = host_of_gpu.get(str(n))
        if h is not None:
            node_host[str(n)] = h
            frontier.append(n)
    attach: dict[str, set] = {}
    while frontier:  # multi-source BFS through the hosts' own nodes; the first host to reach a node owns it
        nxt = []
        for x in frontier:
            h = node_host[str(x)]
            for y in graph[x]:
                if network(y):
                    attach.setdefault(h, set()).add(y)
                    continue
                if str(y) in node_host or _kind(nodes[y]) == "gpu" or nodes[y].get("role") == "nvlink_domain":
                    continue
                node_host[str(y)] = h
                nxt.append(y)
        frontier = nxt
    host_leaf = {h: min(s, key=str) for h, s in attach.items()}
    level: dict = {s: 0 for ss in attach.values() for s in ss}
    frontier = sorted(level, key=str)
    k = 0
    while frontier:
        nxt = []
        for x in frontier:
            for y in graph[x]:
                if network(y) and y not in level:
                    level[y] = k + 1
                    nxt.append(y)
        frontier = sorted(set(nxt), key=str)
        k += 1
    switches = []
    for s in sorted(level, key=lambda s: (level[s], str(s))):
        ups = sorted((y for y in graph[s] if y in level and level[y] == level[s] + 1), key=str)
        switches.append({"id": str(s), "level": level[s], "parent": str(ups[0]) if ups else None,
                         "parents": len(ups)})
    return {"switches": switches, "host_leaf": {h: str(s) for h, s in host_leaf.items()}, "node_host": node_host}


def _config(result: Mapping, order: str):
    """The result's parallel sizes under ``order`` (dp follows from world_size)."""
    from rankmap.solver import parallel_config

    sizes = dict(result.get("sizes") or {})
    world = result.get("world_size")
    if not isinstance(world, int) or not sizes:
        raise InvalidArgumentError("the result has no world_size / sizes: not a rankmap solve result", "result")
    hcp = sizes.pop("hierarchical_context_parallel_sizes", None)
    kw = {k: v for k, v in sizes.items() if k in ("tp", "cp", "ep", "etp", "pp", "num_distributed_optimizer_instances")}
    if hcp:
        kw["hierarchical_context_parallel_sizes"] = hcp
    return parallel_config(world, order=order, **kw)


def _index(groups: np.ndarray, world: int) -> tuple[np.ndarray, np.ndarray]:
    """(row, column) of every rank in a groups array of shape (g, s)."""
    row = np.empty(world, dtype=np.int64)
    col = np.empty(world, dtype=np.int64)
    flat = np.asarray(groups, dtype=np.int64).ravel()
    g, s = np.asarray(groups).shape
    row[flat] = np.repeat(np.arange(g), s)
    col[flat] = np.tile(np.arange(s), g)
    return row, col


def _layout(result: Mapping, part: Mapping, host_of_gpu: Mapping[str, str], tree: dict, aggregated: bool) -> dict:
    """One side of the page: the GPU labels, class times and bottleneck marks of ``part``."""
    from rankmap.solver import megatron_groups

    order = part.get("order")
    assignment = part.get("assignment")
    if not isinstance(order, str) or not isinstance(assignment, list):
        raise InvalidArgumentError("the result has no order / assignment: not a rankmap solve result", "result")
    cfg = _config(result, order)
    if len(assignment) != cfg.world_size:
        raise InvalidArgumentError(f"the result's assignment has {len(assignment)} entries for world_size "
                                   f"{cfg.world_size}", "result")
    groups = megatron_groups(cfg)
    tp_row, _ = _index(groups["TENSOR_MODEL_PARALLEL_GROUP"], cfg.world_size)
    _, pp_col = _index(groups["PIPELINE_MODEL_PARALLEL_GROUP"], cfg.world_size)
    _, dp_col = _index(groups["DATA_PARALLEL_GROUP"], cfg.world_size)
    out: dict[str, Any] = {"order": order, "total_seconds": float((part.get("cost") or {}).get("total_seconds", 0.0))}
    if not aggregated:
        out["gpus"] = {str(d): [r, int(tp_row[r]), int(pp_col[r]), int(dp_col[r])] for r, d in enumerate(assignment)}
    else:  # per leaf: TP groups that leave a host (their bytes cross a NIC)
        hosts_of_tp: dict[int, set] = {}
        for r, d in enumerate(assignment):
            hosts_of_tp.setdefault(int(tp_row[r]), set()).add(host_of_gpu.get(str(d), ""))
        split: dict[str, int] = {}
        for t, hs in hosts_of_tp.items():
            if len(hs) > 1:
                leaf = tree["host_leaf"].get(min(hs), "network")
                split[leaf] = split.get(leaf, 0) + 1
        out["tp_split_by_leaf"] = split
        out["tp_groups"] = len(hosts_of_tp)
    classes = (part.get("cost") or {}).get("classes") or {}
    out["classes"] = {c: float(v.get("seconds", 0.0)) for c, v in classes.items()}
    out["marks"] = [m for c, v in classes.items() for m in _marks(c, v.get("bottleneck") or {}, tree, aggregated)]
    return out


def _marks(cls: str, bn: Mapping, tree: dict, aggregated: bool) -> list[dict]:
    """What to mark for one class's bottleneck: element keys of the page (see :mod:`rankmap.layout_page`)."""
    link = bn.get("link")
    if bn.get("kind") in (None, "none") or not link or len(link) != 2:
        return []
    drawn = {s["id"]: s for s in tree["switches"]}
    node_host = tree["node_host"]
    host_leaf = tree["host_leaf"]

    def where(n: str):
        if n in drawn:
            return ("switch", n)
        h = node_host.get(n)
        if h is None and "/" in n:
            h = n.split("/", 1)[0]
        return ("host", h) if h is not None else (None, n)

    a, b = (str(x) for x in link)
    (ka, va), (kb, vb) = where(a), where(b)
    keys: list[str] = []
    if ka == "switch" and kb == "switch":
        if drawn[va]["parent"] == vb:
            keys.append(f"edge:switch:{va}")
        elif drawn[vb]["parent"] == va:
            keys.append(f"edge:switch:{vb}")
        else:
            keys += [f"switch:{va}", f"switch:{vb}"]
    elif {ka, kb} == {"switch", "host"}:
        h, s = (va, vb) if ka == "host" else (vb, va)
        if aggregated:
            keys += [f"leaf:{host_leaf.get(h, 'network')}"] + ([f"edge:switch:{s}"] if host_leaf.get(h) != s else [])
        else:
            keys += [f"edge:host:{h}"] if host_leaf.get(h) == s else [f"host:{h}", f"switch:{s}"]
    elif ka == "host" and kb == "host":
        if aggregated:
            keys += sorted({f"leaf:{host_leaf.get(va, 'network')}", f"leaf:{host_leaf.get(vb, 'network')}"})
        else:
            gpus = tree["gpus"]
            gpu = a if a in gpus else (b if b in gpus else None)
            keys += [f"gpu:{gpu}"] if gpu is not None else []
            keys += sorted({f"host:{va}", f"host:{vb}"})
    if not keys:
        return []
    gbps = bn.get("flow_gbps") if bn.get("kind") == "per-flow" else bn.get("capacity_gbps")
    text = f"{cls}: {bn.get('kind')} {a} → {b}" + (f" at {float(gbps):g} GB/s" if gbps else "")
    return [{"cls": cls, "keys": keys, "text": text}]


def layout_data(result: Mapping, graph=None, max_hosts: int = MAX_DRAWN_HOSTS) -> dict:
    """The page's data (module docstring) for a result document and, optionally, its cluster graph.

    Returns
    -------
    dict
        ``hosts`` ``[[name, [GPU ids by local index]]]`` (drawn mode) or ``leaves`` with host
        counts (aggregated mode), ``switches``, ``host_leaf``, ``chosen`` / ``baseline``
        (:func:`_layout`), ``aggregated`` (bool), ``summary`` lines.

    Raises
    ------
    InvalidArgumentError
        Not a solve result (field ``result``).
    """
    if not isinstance(result, Mapping) or "hosts" not in result or "baseline" not in result:
        raise InvalidArgumentError("not a rankmap solve result (no 'hosts' / 'baseline'): give the JSON that "
                                   "`rankmap solve` prints", "result")
    host_of_gpu: dict[str, str] = {}
    local: dict[str, int] = {}
    assignment = [str(x) for x in result.get("assignment") or []]
    for hp in result.get("hosts") or []:
        cvd = [int(x) for x in str(hp.get("cuda_visible_devices", "")).split(",") if x.strip().isdigit()]
        for k, r in enumerate(hp.get("global_ranks") or []):
            if 0 <= r < len(assignment):
                host_of_gpu[assignment[r]] = str(hp.get("host"))
                if k < len(cvd):
                    local[assignment[r]] = cvd[k]
    if graph is not None:
        from rankmap.solver.fabric.hostinfer import infer_hosts

        g = infer_hosts(graph)
        gpu_ids = {str(n) for n, d in g.nodes(data=True) if _kind(d) == "gpu"}
        for part in (result, result.get("baseline") or {}):
            missing = [d for d in (str(x) for x in part.get("assignment") or []) if d not in gpu_ids]
            if missing:
                raise InvalidArgumentError(f"the result's GPU {missing[0]!r} is not a GPU of the cluster given "
                                           f"({len(missing)} such): give the cluster the result was solved on",
                                           "cluster")
        for n, d in g.nodes(data=True):
            if _kind(d) == "gpu":
                host_of_gpu[str(n)] = str(d.get("host") or n)
                if isinstance(d.get("local_index"), int):
                    local[str(n)] = d["local_index"]
        tree = fabric_tree(g, host_of_gpu)
    else:
        for d in (result.get("baseline") or {}).get("assignment") or []:
            host_of_gpu.setdefault(str(d), str(d).split("/", 1)[0] if "/" in str(d) else str(d))
        tree = {"switches": [], "host_leaf": {}, "node_host": dict(host_of_gpu)}
    tree["gpus"] = set(host_of_gpu)
    hosts: dict[str, list[str]] = {}
    for gid, h in host_of_gpu.items():
        hosts.setdefault(h, []).append(gid)
    aggregated = len(hosts) > max_hosts
    data: dict[str, Any] = {
        "switches": tree["switches"],
        "host_leaf": {h: tree["host_leaf"].get(h, "network") for h in hosts},
        "aggregated": aggregated,
        "max_hosts": max_hosts,
        "has_fabric": graph is not None,
        "chosen": _layout(result, result, host_of_gpu, tree, aggregated),
        "baseline": _layout(result, result["baseline"], host_of_gpu, tree, aggregated),
        "sizes": dict(result.get("sizes") or {}),
        "world_size": result.get("world_size"),
        "status": result.get("status"),
        "improvement": result.get("improvement"),
        "mode": result.get("mode"),
    }
    from rankmap.solver.launch.placement import natural_key

    names = sorted(hosts, key=natural_key)
    if aggregated:
        leaves: dict[str, list] = {}
        for h in names:
            e = leaves.setdefault(data["host_leaf"][h], [0, 0])
            e[0] += 1
            e[1] += len(hosts[h])
        data["leaves"] = leaves
        data["host_names"] = names[:MAX_LISTED_HOSTS]
        data["host_count"] = len(names)
    else:
        data["hosts"] = [[h, sorted(hosts[h], key=lambda g: (local.get(g, 1 << 30), natural_key(g)))] for h in names]
        data["local"] = {g: local[g] for g in host_of_gpu if g in local}
    return data


def layout_html(result: Mapping, graph=None, max_hosts: int = MAX_DRAWN_HOSTS) -> str:
    """One self-contained HTML page of the layout (:func:`layout_data` drawn by :mod:`rankmap.layout_page`)."""
    from rankmap.layout_page import render_page

    return render_page(layout_data(result, graph, max_hosts))
