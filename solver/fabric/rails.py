"""What NCCL sees of each GPU: its node, its rail NIC, its NIC and NVLink rates (DESIGN §3).

NCCL builds rings per *node*: the GPUs of one host, or of one multi-node NVLink domain
(an NVL72 rack: MNNVL makes the rack one node).  Between nodes a ring channel leaves and
enters through NICs; each GPU has a *rail*, the NIC nearest to it (NCCL's PIX/PXB path
type, ``src/graph/paths.cc``), numbered inside its node.  One pass over each GPU's
neighbourhood (no all-pairs structure), so 131,072 GPUs cost a few seconds at most.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

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
    nic_rails : numpy.ndarray of int64, shape (n, m), or None
        Every NIC nearest the device (all at its nearest distance: NCCL's PIX NICs of the GPU,
        ``ncclTopoSelectNets`` lists them all and a ring channel may enter at each), as rail
        indices ascending, padded with -1; column 0 is ``rail``.  None: ``rail`` alone.
    p2p_rail : numpy.ndarray of int64, shape (n,), or None
        The NIC NCCL's send/recv uses for the device on channel 0 (``ncclTopoGetLocalNet``,
        :func:`p2p_rails`): differs from ``rail`` only for a GPU among several sharing several
        NICs (HGX A100: GPUs 0 and 1 on NICs 0 and 1 -> GPU 1 uses NIC 1).  None: ``rail``.
    """

    node_of: np.ndarray
    rail: np.ndarray
    nic_gbps: np.ndarray
    nvlink_gbps: np.ndarray
    arch: str | None = None
    nic_rails: np.ndarray | None = None
    p2p_rail: np.ndarray | None = None

    def p2p_rails(self) -> np.ndarray:
        """NCCL's channel-0 send/recv NIC (rail) of each device, shape (n,) (:attr:`p2p_rail`, else ``rail``)."""
        return self.rail if self.p2p_rail is None else self.p2p_rail

    def rails(self) -> np.ndarray:
        """Every nearest NIC's rail per device, shape (n, m) (:attr:`nic_rails`, or ``rail`` as one column)."""
        return self.rail[:, None] if self.nic_rails is None else self.nic_rails

    def nic_count(self) -> np.ndarray:
        """NICs nearest each device, shape (n,) (0: none)."""
        return (self.rails() >= 0).sum(axis=1)


def _nic_key(graph: nx.Graph, x) -> tuple:
    d = graph.nodes[x]
    idx = d.get("nic_index")
    idx = int(idx) if isinstance(idx, (int, np.integer)) and not isinstance(idx, bool) else 1 << 30
    return (idx, str(x))


def _nearest_nic(graph: nx.Graph, d, every: bool = False) -> object:
    """The nearest NIC of GPU ``d`` through PCIe switches and CPUs of its host (≤ NIC_SEARCH_HOPS hops), or None;
    ``every``: all NICs at that nearest distance, sorted (an empty list for none)."""
    nodes = graph.nodes
    host = nodes[d].get("host")
    frontier, seen = [d], {d}
    for _hop in range(NIC_SEARCH_HOPS):
        nxt, found = [], []
        for x in frontier:
            for y in graph[x]:
                if y in seen:
                    continue
                seen.add(y)
                kind = nodes[y].get("kind", "gpu")
                if kind == "nic":
                    found.append(y)
                elif kind in ("pcie_switch", "cpu") and nodes[y].get("host") in (None, host):
                    nxt.append(y)
        if found:
            found = sorted(found, key=lambda x: _nic_key(graph, x))
            return found if every else found[0]
        frontier = nxt
    return [] if every else None


def _mirror_bits(val: int, pow2: int) -> int:
    """NCCL's ``mirrorBits`` (``src/graph/topo.h:288-294``): the low log2(pow2) bits of ``val`` reversed."""
    out, b, mb = 0, 1, pow2 >> 1
    while b < pow2:
        if val & b:
            out |= mb
        b, mb = b << 1, mb >> 1
    return out


#: NCCL's PCIe bandwidth over the data rate rankmap's readers give a PCIe link: NCCL counts 240 (x100 Mb/s) per
#: Gen5 lane and width·speed/80 GB/s (``kvDictPciGen``, ``src/graph/topo.cc:545-557,657``: Gen5 x16 = 48, Gen4 x16
#: = 24 GB/s) where the readers give 63 and 31.5 (128b/130b data rate): 0.75 · 130/128.
NCCL_PCIE_FACTOR = 0.75 * 130 / 128


def nccl_local_nets(node_of: np.ndarray, nic_rails: np.ndarray, local_index: np.ndarray,
                    slots: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The NICs NCCL lets each GPU use, and its send/recv NIC: ``(rails (n, m), p2p (n,))``.

    ``ncclTopoGetLocalNetType`` (``src/graph/topo.cc:2039-2075``, NETDEVS_POLICY AUTO): the GPU's
    local NICs (``localNets``: its nearest, ascending), the GPUs local to the first of them
    (``localGpuCount``), ``netsPerGpu = ceil(#localNets / localGpuCount)``; channel c uses
    ``localNets[(dev % localGpuCount, bits mirrored when #localNets is a power of two) + c % netsPerGpu]``.
    So GPUs sharing one NIC all use it, two GPUs sharing two NICs use one each (HGX A100: dev 0
    the first, dev 1 the second), a GPU with three NICs of its own all three.  A ring channel enters
    a node at its NIC's local GPU (``net->net.localGpu``, ``ncclTopoSearchRecNet``, ``search.cc:791``;
    ``ncclTopoGetLocalGpu``, ``topo.cc:2110-2133``: the GPU whose channel-0.. NIC it is).

    ``slots`` caps the NICs per GPU: a ring channel of the search's speed (one NIC's: 48 GB/s per
    400G) takes that bandwidth on the GPU's PCIe link each way (``ncclTopoFollowPath`` subtracts it
    from every link of the GPU <-> NIC path, ``search.cc:81-166``), so a GPU whose x16 link is 48 GB/s
    to NCCL (Gen5) carries one channel at 48 however many NICs sit on its switch (12-NIC Hopper
    hosts: 8 channels, not 12).  Computed over every GPU of the node (a sub-communicator sees only
    its members: a group holding one GPU of a pair sharing two NICs may use both where PCIe allows,
    which this under-counts).

    Parameters
    ----------
    node_of : numpy.ndarray of int, shape (n,)
    nic_rails : numpy.ndarray of int, shape (n, m)
        Every nearest NIC's rail per device, ascending, -1 padded.
    local_index : numpy.ndarray of int, shape (n,)
        CUDA device index (NCCL's ``gpu.dev``).
    slots : numpy.ndarray of int, shape (n,), optional
        Most channels the GPU's PCIe link carries at the NIC's speed (≥ 1); None: no cap.

    Returns
    -------
    rails : numpy.ndarray of int64, shape (n, m)
        The NICs each GPU may run ring channels on, ascending, -1 padded.
    p2p : numpy.ndarray of int64, shape (n,)
        Its channel-0 NIC (send/recv, PXN), -1 for none.
    """
    R = np.asarray(nic_rails, dtype=np.int64)
    out = R.copy()
    p2p = R[:, 0].copy()
    cnt = (R >= 0).sum(axis=1)
    multi = np.flatnonzero(cnt > 1)
    if multi.size == 0:
        return out, p2p
    ok = R >= 0
    width = int(R.max(initial=0)) + 1
    keys = (np.broadcast_to(node_of[:, None], R.shape)[ok].astype(np.int64) * width + R[ok])
    uk, gpus = np.unique(keys, return_counts=True)  # GPUs near each NIC
    Rm, c = R[multi], cnt[multi].astype(np.int64)
    n_gpu = np.maximum(gpus[np.searchsorted(uk, node_of[multi].astype(np.int64) * width + Rm[:, 0])], 1)
    base = np.asarray(local_index, dtype=np.int64)[multi] % n_gpu
    # mirrorBits(base, c) where c is a power of two (topo.h:288-294): the low log2(c) bits reversed
    pow2 = (c & (c - 1)) == 0
    bits = np.where(pow2, np.log2(np.maximum(c, 1)).round().astype(np.int64), 0)
    mirrored = np.zeros_like(base)
    for b in range(int(bits.max(initial=0))):
        mirrored |= np.where(b < bits, ((base >> b) & 1) << np.maximum(bits - 1 - b, 0), 0)
    base = np.where(pow2, mirrored, base)
    per = -(-c // n_gpu)
    if slots is not None:
        per = np.maximum(1, np.minimum(per, np.asarray(slots, dtype=np.int64)[multi]))
    j = np.arange(R.shape[1])[None, :]
    pick = np.where(j < per[:, None], Rm[np.arange(multi.size)[:, None], (base[:, None] + j) % c[:, None]], -1)
    p2p[multi] = pick[:, 0]
    out[multi] = np.sort(np.where(pick >= 0, pick, np.iinfo(np.int64).max), axis=1)
    out[out == np.iinfo(np.int64).max] = -1
    return out, p2p


def p2p_rails(node_of: np.ndarray, nic_rails: np.ndarray, local_index: np.ndarray) -> np.ndarray:
    """NCCL's channel-0 NIC of each GPU for send/recv, shape (n,) (-1: no NIC; :func:`nccl_local_nets`)."""
    return nccl_local_nets(node_of, nic_rails, local_index)[1]


def nccl_topology(graph: nx.Graph, devices: Sequence, host_of: np.ndarray, fabric, arch: str | None,
                  edges: tuple, check=None, local_index: np.ndarray | None = None) -> NcclTopology:
    """The :class:`NcclTopology` of a validated cluster graph.

    Parameters
    ----------
    graph : networkx.Graph
        Simple undirected graph (DESIGN §2 schema).
    devices : sequence
        GPU node ids in device order, length n.
    host_of : numpy.ndarray of int, shape (n,)
        Host index of each device.
    fabric : Fabric
        The cluster's links (:mod:`.links`), whose GPU attachments and rates give each GPU's
        NVSwitch and NIC links without a per-GPU graph search (one is run only for GPUs with
        no NIC among their attachments, e.g. a DGX-1's, whose NICs sit behind PCIe switches).
    arch : str or None
    edges : (nodes, src, dst, rate)
        The graph's node list and its edges as index arrays with their calibrated rates
        (GB/s), shapes (m,): a NIC's port rate is its fastest link to a network switch.
    check : callable, optional
        A cancellation check point, called every few thousand GPUs searched (it raises to stop).
    local_index : numpy.ndarray of int, shape (n,), optional
        CUDA device index of each device, for NCCL's send/recv NIC (:func:`p2p_rails`); None:
        the send/recv NIC is ``rail``.
    """
    n = len(devices)
    nodes = dict(graph.nodes(data=True))  # plain dict lookups: the node view's cost a second at 131,072 GPUs
    names = fabric.node_names
    N = len(names)
    rep = [m.split("|")[0] for m in names]  # a merged twin set's first member stands for it
    kind = np.array([str(nodes[x].get("kind", "")) if x in nodes else "" for x in rep] + [""])
    att = np.where(fabric.att_node >= 0, fabric.att_node, N)  # (n, A), N = no attachment
    akind = kind[att]
    nvl = np.where(akind == "nvswitch", fabric.att_gbps, 0.0).sum(axis=1)
    # node of each device: its NVLink domain, else its host
    H = int(host_of.max(initial=-1)) + 1
    dom_ids: dict = {}
    node_of = np.asarray(host_of, dtype=np.int64).copy()
    for i, d in enumerate(devices):
        dom = nodes[d].get("nvlink_domain")
        if dom is not None:
            node_of[i] = H + dom_ids.setdefault(dom, len(dom_ids))
    # nearest NIC: a NIC among the GPU's attachments (the first by nic_index/name), else a short search
    is_nic = akind == "nic"
    nic_node = np.full(n, -1, dtype=np.int64)  # forest node index of the rail NIC, or -1
    has = is_nic.any(axis=1)
    if has.any():
        nic_rank = {}
        cand = np.unique(att[is_nic])
        for x in cand.tolist():
            nic_rank[x] = _nic_key(graph, rep[x])
        order = sorted(nic_rank, key=lambda x: nic_rank[x])
        pos = np.full(N + 1, 1 << 40, dtype=np.int64)
        pos[np.asarray(order, dtype=np.int64)] = np.arange(len(order))
        keyed = np.where(is_nic, pos[att], 1 << 40)
        pick = np.argmin(keyed, axis=1)
        nic_node[has] = att[np.flatnonzero(has), pick[has]]
    extra: dict = {}  # device -> graph NIC for GPUs found by the search (not a forest attachment)
    more: dict = {}  # device -> every nearest graph NIC, when more than one
    # the search finds nothing in a graph without NICs (one pass over the nodes instead of a search per GPU:
    # 131,072 searches took about half a second)
    search = (~has).any() and any(d.get("kind") == "nic" for d in nodes.values())
    for j, i in enumerate(np.flatnonzero(~has).tolist() if search else []):
        if check is not None and not j % 4096:
            check()
        xs = _nearest_nic(graph, devices[i], every=True)
        if xs:
            x = xs[0]
            extra[i] = x
            nic_node[i] = fabric.node_index.get(x, -1) if fabric.node_index else -1
            if len(xs) > 1:
                more[i] = xs
    if has.any():  # GPUs with several NICs among their attachments (a merged twin set counts each member)
        merged = np.array(["|" in x for x in names] + [False])
        for i in np.flatnonzero((is_nic.sum(axis=1) > 1) | (is_nic & merged[att]).any(axis=1)).tolist():
            xs = sorted({y for a in att[i][is_nic[i]].tolist() for y in names[a].split("|")},
                        key=lambda x: _nic_key(graph, x))
            if len(xs) > 1:
                more[i] = xs
    # rails: each node's NICs numbered by (host, nic_index, name)
    rail = np.full(n, -1, dtype=np.int64)
    nic_gbps = np.zeros(n)
    key_dev = [(int(node_of[i]), rep[int(nic_node[i])] if nic_node[i] >= 0 else extra.get(i))
               for i in range(n)] if extra or has.any() else []
    per_node: dict = {}
    for nd, x in key_dev:
        if x is not None:
            per_node.setdefault(nd, set()).add(x)
    for i, xs in more.items():
        per_node.setdefault(int(node_of[i]), set()).update(xs)
    index: dict = {}
    for nd, nics in per_node.items():
        for j, x in enumerate(sorted(nics, key=lambda x: (str(nodes[x].get("host", "")), _nic_key(graph, x)))):
            index[(nd, x)] = j
    # port rate of each NIC: its fastest link to a node that is not a GPU, PCIe switch, CPU, NVSwitch or NIC
    gnodes, esrc, edst, erate = edges
    local_kinds = {"gpu", "pcie_switch", "cpu", "nvswitch", "nic"}
    if key_dev:
        kinds = [nodes[x].get("kind", "gpu") for x in gnodes]
        code = np.array([0 if k == "nic" else (1 if k not in local_kinds else 2) for k in kinds] + [2])
    else:  # no rail anywhere: no port rate is read
        code = np.full(len(gnodes) + 1, 2)
    port = np.zeros(len(gnodes) + 1)
    for a, b in ((esrc, edst), (edst, esrc)):
        sel = (code[a] == 0) & (code[b] == 1)
        np.maximum.at(port, a[sel], erate[sel])
    gidx = {x: i for i, x in enumerate(gnodes)} if key_dev else {}
    for i, (nd, x) in enumerate(key_dev):
        if x is None:
            continue
        rail[i] = index[(nd, x)]
        nic_gbps[i] = port[gidx[x]]
    nic_rails = None
    if more:
        m = max(len(xs) for xs in more.values())
        nic_rails = np.full((n, m), -1, dtype=np.int64)
        nic_rails[:, 0] = rail
        for i, xs in more.items():
            rs = sorted(index[(int(node_of[i]), x)] for x in xs)
            nic_rails[i, :len(rs)] = rs
            rail[i] = rs[0]
    p2p = None
    if nic_rails is not None and local_index is not None:
        # channels a GPU's PCIe link carries at its NIC's speed: NCCL's PCIe rate of its link to its PCIe parent
        # over the NIC's (no PCIe parent in the graph: no cap)
        pcie = np.where(np.isin(akind, ("pcie_switch", "host_bridge", "cpu")), fabric.att_gbps, 0.0).max(axis=1)
        slots = np.where((pcie > 0) & (nic_gbps > 0),
                         np.floor(pcie * NCCL_PCIE_FACTOR / np.maximum(nic_gbps, 1e-9) + 0.01), 1 << 20)
        nic_rails, p2p = nccl_local_nets(node_of, nic_rails, np.asarray(local_index, dtype=np.int64),
                                         np.maximum(slots, 1).astype(np.int64))
        rail = nic_rails[:, 0].copy()
        nic_rails = nic_rails[:, (nic_rails >= 0).any(axis=0)]
        if nic_rails.shape[1] <= 1:
            nic_rails = None
        if np.array_equal(p2p, rail):
            p2p = None
    return NcclTopology(node_of, rail, nic_gbps, nvl, arch, nic_rails, p2p)
