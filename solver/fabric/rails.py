"""What NCCL sees of each GPU: its node, its rail NIC, its NIC and NVLink rates (DESIGN §3).

NCCL builds rings per *node*: the GPUs of one host, or of one multi-node NVLink domain
(an NVL72 rack: MNNVL makes the rack one node).  Between nodes a ring channel leaves and
enters through NICs; each GPU has a *rail*, the NIC nearest to it (NCCL's PIX/PXB path
type, ``src/graph/paths.cc``), numbered inside its node.  One pass over each GPU's
neighbourhood (no all-pairs structure), so 131,072 GPUs cost a few seconds at most.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import networkx as nx
import numpy as np

__all__ = ["NcclTopology", "nccl_topology"]

#: Hops (through PCIe switches and CPUs of the GPU's host) searched for the nearest NIC.
NIC_SEARCH_HOPS = 3


@dataclass(frozen=True, eq=False)
class NcclTopology:
    """Per-device NCCL view of a cluster.

    Attributes
    ----------
    node_of : numpy.ndarray of int64, shape (n,)
        NCCL node of each device (device order): its ``nvlink_domain`` if any, else its host.
    rail : numpy.ndarray of int64, shape (n,)
        Index of the device's nearest NIC among its node's NICs (sorted by host, then
        ``nic_index``/name); -1 when no NIC is near (one host without NICs).
    nic_gbps : numpy.ndarray of float64, shape (n,)
        Calibrated rate of that NIC's port (its link out of the host), GB/s; 0 when none.
    nvlink_gbps : numpy.ndarray of float64, shape (n,)
        Calibrated rate of the device's links to NVSwitches (or its NVLink domain), GB/s;
        0 when it has none (NVLS needs it).
    arch : str or None
        GPU architecture family of the cluster (``graph.graph['gpu']``), for NCCL's per-architecture constants.
    """

    node_of: np.ndarray
    rail: np.ndarray
    nic_gbps: np.ndarray
    nvlink_gbps: np.ndarray
    arch: str | None = None


def _nic_key(graph: nx.Graph, x) -> tuple:
    d = graph.nodes[x]
    idx = d.get("nic_index")
    idx = int(idx) if isinstance(idx, (int, np.integer)) and not isinstance(idx, bool) else 1 << 30
    return (idx, str(x))


def nccl_topology(graph: nx.Graph, devices: Sequence, host_of: np.ndarray,
                  rate: Callable[[object, object, dict], float], arch: str | None) -> NcclTopology:
    """The :class:`NcclTopology` of a validated cluster graph.

    Parameters
    ----------
    graph : networkx.Graph
        Simple undirected graph (DESIGN §2 schema).
    devices : sequence
        GPU node ids in device order, length n.
    host_of : numpy.ndarray of int, shape (n,)
        Host index of each device.
    rate : callable (u, v, edge data) -> float
        Calibrated rate of an edge, GB/s.
    arch : str or None
    """
    n = len(devices)
    nodes = graph.nodes
    dom_ids: dict = {}
    node_of = np.empty(n, dtype=np.int64)
    H = int(host_of.max(initial=-1)) + 1
    nic_of: list = [None] * n
    nvl = np.zeros(n)
    for i, d in enumerate(devices):
        dom = nodes[d].get("nvlink_domain")
        node_of[i] = H + dom_ids.setdefault(dom, len(dom_ids)) if dom is not None else host_of[i]
        host = nodes[d].get("host")
        best = None
        frontier, seen = [d], {d}
        for hop in range(NIC_SEARCH_HOPS):
            nxt = []
            found = []
            for x in frontier:
                for y, data in graph[x].items():
                    if y in seen:
                        continue
                    seen.add(y)
                    kind = nodes[y].get("kind", "gpu")
                    if hop == 0 and kind == "nvswitch":
                        nvl[i] += rate(x, y, data)
                    if kind == "nic":
                        found.append(y)
                    elif kind in ("pcie_switch", "cpu") and (nodes[y].get("host") in (None, host)):
                        nxt.append(y)
            if found:
                best = min(found, key=lambda x: _nic_key(graph, x))
                break
            frontier = nxt
        if best is None:
            # NVSwitch attachments beyond the first hop's scan are still counted above
            pass
        nic_of[i] = best
    # rails: NICs numbered inside each NCCL node
    rail = np.full(n, -1, dtype=np.int64)
    nic_gbps = np.zeros(n)
    per_node: dict = {}
    for i, x in enumerate(nic_of):
        if x is not None:
            per_node.setdefault(int(node_of[i]), set()).add(x)
    index: dict = {}
    for nd, nics in per_node.items():
        for j, x in enumerate(sorted(nics, key=lambda x: (str(nodes[x].get("host", "")), _nic_key(graph, x)))):
            index[(nd, x)] = j
    port: dict = {}
    for i, x in enumerate(nic_of):
        if x is None:
            continue
        rail[i] = index[(int(node_of[i]), x)]
        if x not in port:
            host = nodes[x].get("host")
            out = [rate(x, y, data) for y, data in graph[x].items()
                   if nodes[y].get("kind", "gpu") not in ("gpu", "pcie_switch", "cpu")
                   and (host is None or nodes[y].get("host") != host)]
            port[x] = max(out) if out else 0.0
        nic_gbps[i] = port[x]
    return NcclTopology(node_of, rail, nic_gbps, nvl, arch)
