"""Hosts of GPUs that carry no ``host`` attribute, inferred from the graph (issue 27: no phantom hosts).

DESIGN §2 reads a GPU without ``host`` as a host of its own, named by the GPU's id.  For a
graph whose GPUs share an NVSwitch or a PCIe tree that gave hosts such as ``node2/gpu3``:
one single-GPU "host" per GPU, launch files naming hosts that do not exist.  Here the GPUs
of one machine are found as the graph shows them:

* **Host-internal nodes** are the kinds a machine holds between its GPUs and its first NIC:
  ``nvswitch`` (except a multi-host NVLink domain: ``role="nvlink_domain"`` or an
  ``nvlink_domain`` attribute), ``pcie_switch``, ``cpu`` and ``socket_interconnect``.  NICs,
  network switches (``switch``, ``leaf``, ``spine``, any other kind) and direct GPU-GPU
  links do not join machines.
* The GPUs without ``host`` in one connected piece of GPUs + host-internal nodes are one
  machine.  Its name is, in this order: the ``host`` of the other nodes in the piece that have
  one (GPUs, NVSwitches, PCIe switches, CPUs; exactly one name), else the common prefix of the GPU ids before their first ``/``
  (``node2/gpu3`` -> ``node2``, the names rankmap's own builders give), else, for a piece
  of one GPU, the GPU's id (DESIGN §2's host of its own).  Anything else (several GPUs and
  no name in the graph, or a piece holding GPUs of two hosts) is an error: rankmap never
  invents a name a launch file would carry.

One pass over nodes and edges (union-find), no per-pair work; a graph whose GPUs all have
``host`` is returned as is after one scan of its nodes.
"""

from __future__ import annotations

import networkx as nx

from ..errors import InvalidArgumentError

__all__ = ["HOST_INTERNAL_KINDS", "infer_hosts", "NOTE_KEY"]

#: Node kinds inside one machine (below its NICs).
HOST_INTERNAL_KINDS = frozenset({"nvswitch", "pcie_switch", "cpu", "socket_interconnect"})
#: ``graph.graph`` key of the note saying which hosts were inferred.
NOTE_KEY = "hosts_inferred"


def _missing(data) -> bool:
    h = data.get("host")
    return h is None or h == ""


def _internal(data) -> bool:
    return (data.get("kind", "gpu") in HOST_INTERNAL_KINDS and data.get("role") != "nvlink_domain"
            and not data.get("nvlink_domain"))


def infer_hosts(graph: nx.Graph) -> nx.Graph:
    """``graph`` with a ``host`` on every GPU that had none where the graph names it (module docstring).

    Parameters
    ----------
    graph : networkx.Graph
        A cluster graph (DESIGN §2).

    Returns
    -------
    networkx.Graph
        ``graph`` itself when every GPU has ``host`` or no GPU's host can be told apart from
        DESIGN §2's host of its own; otherwise a copy whose GPUs carry the inferred ``host``
        and whose ``graph.graph[NOTE_KEY]`` is one line saying what was inferred.

    Raises
    ------
    InvalidArgumentError
        (field ``cluster.nodes``) GPUs without ``host`` that share an NVSwitch/PCIe tree but
        whose ids name no common host, or that share one with GPUs of two different hosts.
    """
    nodes = graph.nodes
    missing = [n for n, d in nodes(data=True) if d.get("kind", "gpu") == "gpu" and _missing(d)]
    if not missing:
        return graph
    parent: dict = {}

    def find(x):
        p = parent.setdefault(x, x)
        while p != x:
            gp = parent.setdefault(p, p)
            parent[x] = gp
            x, p = p, gp
        return x

    for u, v in graph.edges():
        du, dv = nodes[u], nodes[v]
        gu, gv = du.get("kind", "gpu") == "gpu", dv.get("kind", "gpu") == "gpu"
        if gu and gv:
            continue  # a direct GPU-GPU link does not make one machine
        if (gu or _internal(du)) and (gv or _internal(dv)):
            ru, rv = find(u), find(v)
            if ru != rv:
                parent[ru] = rv
    pieces: dict = {}
    for n in missing:
        pieces.setdefault(find(n), []).append(n)
    known: dict = {}
    for n, d in nodes(data=True):  # hosts named in a piece: by its other GPUs, or by its NVSwitch/PCIe/CPU nodes
        if not _missing(d) and n in parent:
            r = find(n)
            if r in pieces:
                known.setdefault(r, set()).add(str(d["host"]))
    names: dict = {}
    inferred = 0
    for root, gpus in pieces.items():
        hosts = known.get(root, set())
        if len(hosts) > 1:
            raise InvalidArgumentError(
                f"GPU {gpus[0]!r} has no host and shares an NVSwitch/PCIe tree with nodes of hosts "
                f"{', '.join(sorted(hosts)[:3])}: give it its host", "cluster.nodes")
        if hosts:
            name = next(iter(hosts))
        else:
            prefixes = {str(g).split("/", 1)[0] if "/" in str(g) else None for g in gpus}
            if len(prefixes) == 1 and None not in prefixes and next(iter(prefixes)):
                name = next(iter(prefixes))
            elif len(gpus) == 1:
                continue  # DESIGN §2: a host of its own, named by the GPU
            else:
                raise InvalidArgumentError(
                    f"GPUs {gpus[0]!r} and {gpus[1]!r} (and {len(gpus) - 2} more) have no host attribute and share "
                    "an NVSwitch/PCIe tree (one machine), but their ids name no common host (HOST/...): give each "
                    "GPU its host (the machine's name the launch files use)", "cluster.nodes")
        for g in gpus:
            names[g] = name
        inferred += len(gpus)
    if not names:
        return graph
    out = graph.copy()
    for g, name in names.items():
        out.nodes[g]["host"] = name
    counts: dict = {}
    for name in names.values():
        counts[name] = counts.get(name, 0) + 1
    shown = ", ".join(f"{h} ({c} GPUs)" for h, c in list(counts.items())[:4])
    more = f" and {len(counts) - 4} more" if len(counts) > 4 else ""
    out.graph[NOTE_KEY] = (
        f"hosts inferred from the graph for {inferred} GPUs without a host attribute (GPUs sharing an "
        f"NVSwitch/PCIe tree below the NICs; named by their ids' HOST/ prefix): {shown}{more}")
    return out
