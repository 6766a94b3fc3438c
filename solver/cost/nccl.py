"""How NCCL runs a collective: calibrated rates, channels, rails, PXN, algorithms and latency (DESIGN §3–§4).

Sources are cited as ``NVIDIA/nccl:path:line`` of NCCL 2.30 (HEAD ``5067397``) and as
published nccl-tests figures; the research note ``references/nccl.md`` of the design
repository holds them all.  Units: GB/s (1e9 bytes/s) per direction, seconds, bytes.

**Rates** are NCCL's calibrated link rates (:mod:`rankmap.solver.fabric.rates`), applied
when the cluster model is built.

**Ring collectives** (all-reduce, all-gather, reduce-scatter, ring send/recv) of a group
whose members sit on several NCCL nodes (hosts, or multi-node NVLink domains) run as
``c`` channels, ``c`` = min over the group's nodes of the distinct NICs nearest its
members there (``src/init.cc:1439-1442`` takes the least over ranks; sub-communicators
see only their own GPUs, ``src/graph/topo.cc:1800``).  Nodes are ordered by first
appearance in the group's rank list (``src/init.cc:1290-1301``); channel j crosses from
node i to node i+1 between the members on the j-th rail of each (rings are kept
rail-aligned, ``src/graph/connect.cc:401-411``) carrying 1/c of the bytes; on an odd
number of nodes the wrap from the last node to the first crosses rails (NCCL swaps
channel pairs on odd-index nodes only, :func:`.ncclflows._wrap_crosses`).  Inside a node
a channel is a *path*, not a closed ring (``search.cc``: ``NET n -> GPU a -> .. -> GPU x
-> NET m``): it enters at the member beside its NIC, visits the other members and leaves
from its exit member (the last member on the paired rail, or on its own shared NIC;
:mod:`.ncclflows` ``_node_channels``), so every member sends each channel's bytes once,
either to the next member or out to the network.  One node: the ring over the members
in rank order.

**All-to-all and send/recv** cross nodes through PXN (``NCCL_PXN_DISABLE=0``,
``NCCL_P2P_PXN_LEVEL=2``, ``src/graph/search.cc:1398-1477``): the bytes first cross NVLink
to the member on the sender's host with the destination's device index (the destination's
rail), or to the first member sharing the NIC that one uses (``ncclTopoGetLocalGpu``), then
leave through that member's NIC; without such a member, or one NVLink-connected to the
sender, directly (:func:`.ncclflows.pxn_relay`).

**Algorithms** (``src/graph/tuning.cc``): all-reduce runs as ring, tree, NVLS (one NVSwitch
node, Hopper and later) or NVLSTree (NVSwitch nodes across the network), the fastest at
the payload as NCCL's tuner picks (``ncclTopoGetAlgoTime``), unless ``NcclModel.algorithm``
forces one (``NCCL_ALGO``); all-gather and reduce-scatter run as ring.  Each algorithm's
time is ``latency(protocol) + bandwidth time / protocol efficiency``, the least over
Simple, LL128 and LL.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = [
    "p2p_channels_per_peer",
    "ring_protocol_caps",
    "nvls_bus_gbps",
    "nvlstree_bus_gbps",
    "tree_bus_gbps",
    "latency_seconds",
    "PROTOCOLS",
]

#: NVLS efficiency (``src/graph/tuning.cc:139-144``: Hopper 0.85, Blackwell 0.74).
NVLS_EFFICIENCY = {"hopper": 0.85, "blackwell": 0.74}
#: NVLS heads of one node.  One head per GPU up to a node of 8 (``8 heads x 40 GB/s`` on
#: 8xH100, nccl.md §2.4); a GB200 NVL72 domain is taken at 8 heads too, which reproduces
#: its published 835-847 GB/s (coreweave/nccl-tests PR #43) within 2%.
NVLS_MAX_HEADS = 8
#: NVLSTree per-channel cap, GB/s, by nodes (2, >2) (``perChMaxNVLSTreeBw``, ``tuning.cc:184-211``).
NVLSTREE_CH_MAX = {"hopper": (57.7, 45.5), "blackwell": (96.0, 80.0)}
#: Tree all-reduce per-channel cap, GB/s, by nodes (1, 2, >2) (``perChMaxTreeBw``, ``tuning.cc:184-211``).
TREE_CH_MAX = {"volta": (24.0, 23.6, 17.8), "ampere": (24.0, 23.6, 17.8), "hopper": (38.7, 41.4, 36.0),
               "blackwell": (70.0, 42.8, 24.0)}
#: Tree refinements: ``min(0.92 busBw, nCh x perChMaxTreeBw)`` then the TREE pattern's x0.85 (``tuning.cc:327-337``).
TREE_BUS_FACTOR, TREE_PATTERN_FACTOR = 0.92, 0.85

#: Protocols: (name, bandwidth factor on the Simple bandwidth) (``tuning.cc:327-337``: ring LL
#: ``0.5 busBw``, LL128 ``0.92 busBw``).
PROTOCOLS = (("simple", 1.0), ("ll128", 0.92), ("ll", 0.5))
_P = {"ll": 0, "ll128": 1, "simple": 2}
#: Latencies, microseconds, (LL, LL128, Simple) (``tuning.cc:149-177``).
BASE_LAT_US = {"ring": (6.6, 14.0, 8.4), "tree": (6.8, 14.0, 8.4), "nvls": (0.0, 0.0, 0.0),
               "nvlstree": (0.0, 0.0, 0.0)}
NVLINK_LAT_US = {"ring": (0.6, 1.9, 3.4), "tree": (0.6, 1.25, 4.0), "nvls": (0.0, 0.0, 25.0),
                 "nvlstree": (0.0, 0.0, 25.0)}
NET_LAT_US = {"ring": (2.7, 4.0, 14.0), "tree": (5.0, 8.5, 14.0), "nvls": (0.0, 0.0, 18.0),
              "nvlstree": (0.0, 0.0, 20.9)}
#: Ring LL128 per-channel cap, GB/s (``perChMaxRingLL128Bws``, ``tuning.cc:184-190``; the same for 1, 2 and
#: more nodes): ``busBw = min(0.92·busBw, nChannels·cap)`` (``tuning.cc:328-329``).
LL128_CH_MAX = {"volta": 20.0, "ampere": 20.0, "hopper": 36.7, "blackwell": 40.0}
#: Ring LL bus bandwidth cap, GB/s (``llMaxBws``, ``tuning.cc:177-183``): one node by GPU generation;
#: across nodes by CPU (Intel rows: 2 nodes 39.0, more 20.4): ``busBw = min(llMaxBw, 0.5·busBw)`` (``tuning.cc:327``).
LL_MAX_ONE_NODE = {"volta": 39.0, "ampere": 87.7, "hopper": 141.0, "blackwell": 282.0}
LL_MAX_NODES = (39.0, 20.4)


def ring_protocol_caps(arch: str | None, nodes: np.ndarray, channels: np.ndarray) -> dict | None:
    """NCCL's bus-bandwidth caps of ring LL and LL128, GB/s per layout (``tuning.cc:327-329``), or None.

    Parameters
    ----------
    arch : str or None
        GPU generation; None (a graph that names none): no caps.
    nodes, channels : numpy.ndarray of int, shape (L,)
        Nodes the groups span and their channels across nodes.

    Returns
    -------
    dict protocol -> numpy.ndarray of float, shape (L,)
        ``ll``: ``llMaxBw`` (one node by generation: H100 141; across nodes 39.0 on 2, 20.4 on more);
        ``ll128``: ``channels · perChMaxRingLL128Bw`` across nodes (H100 36.7 per channel against the
        NIC's 48: LL128 reaches 0.76 of Simple there); inside a node no LL128 cap (NCCL's intra-node
        rings run 12-24 channels of ≤ 30 GB/s, under it; rankmap does not count them).
    """
    if arch not in LL128_CH_MAX:
        return None
    nodes = np.asarray(nodes)
    ll = np.where(nodes <= 1, LL_MAX_ONE_NODE[arch], np.where(nodes == 2, LL_MAX_NODES[0], LL_MAX_NODES[1]))
    ll128 = np.where(nodes <= 1, np.inf, np.asarray(channels, dtype=float) * LL128_CH_MAX[arch])
    return {"ll": ll.astype(float), "ll128": ll128}


#: Multi-node ring all-reduce, Simple: latency x1.4, "plateau effect of ring" (``tuning.cc:647-650``).
RING_PLATEAU = 1.4
#: Protocols each algorithm runs (NVLS and NVLSTree: Simple only).
ALGO_PROTOCOLS = {"ring": ("simple", "ll128", "ll"), "tree": ("simple", "ll128", "ll"),
                  "nvls": ("simple",), "nvlstree": ("simple",)}

#: NCCL's GB/s per NVLink (``ncclTopoNVLinkBw``, ``src/graph/topo.h:19-24``: SM80 20.0, SM90 20.6, SM100 40.1).
NVLINK_LINK_GBPS = {"volta": 20.0, "ampere": 20.0, "hopper": 20.6, "blackwell": 40.1}
#: ``NCCL_P2P_PER_CHANNEL_NET_BW`` default, GB/s (``src/graph/paths.cc:918``).
P2P_PER_CHANNEL_NET_GBPS = 14.0
#: ``NCCL_MAX_DEV_WORK_P2P_PER_BATCH`` (``src/include/device.h:391``).
P2P_PER_BATCH = 8
#: p2p channels NCCL opens (``comm->p2pnChannels`` = pow2Up of the ring channels, capped at
#: ``MAXCHANNELS`` 64): NCCL logs 32 on 8xH100/A100 hosts (24-32 ring channels after
#: ``connect.cc``'s duplication); rankmap does not model the ring channel duplication, so this
#: constant stands for it.
P2P_NCHANNELS = 32


def _pow2up(x: int) -> int:
    return 1 << max(0, int(x) - 1).bit_length()


def p2p_channels_per_peer(nodes: int, n: int, nic_gbps: float, nics: int, nvlink_gbps: float,
                          arch: str | None) -> int:
    """NCCL's p2p channels per peer (``comm->p2pnChannelsPerPeer``) of a send/recv or all-to-all group.

    ``ncclTopoGetNchannels`` (``src/graph/paths.cc:920-955``) per peer: across the network
    ``max(local NICs, ceil(NIC GB/s / 14))`` (400G: 4, 200G: 2, 100G: 1); over NVLink
    ``2·max(1, NVLink GB/s / per-link GB/s)`` (8xH100 on NVSwitches: 2·18 = 36); over PCIe 2.
    The least over the peers, rounded up to a power of two and capped at :data:`P2P_NCHANNELS`
    (``ncclTopoComputeP2pChannels``, ``paths.cc:975-1004``); across nodes halved while
    ``perPeer · ceil(n / 8) > P2P_NCHANNELS`` (every peer in one round).  Only reported: the
    model's rates are the routes' (each pair's flow at its route's rate).

    Parameters
    ----------
    nodes, n : int
        NCCL nodes the group spans, its members.
    nic_gbps : float
        Least NIC rate of the members, GB/s (0: none).
    nics : int
        Least number of NICs local to a member (≥ 1 when ``nic_gbps`` > 0).
    nvlink_gbps : float
        Least NVSwitch rate of the members, GB/s (0: none, PCIe).
    arch : str or None
        GPU generation, for NCCL's per-link NVLink rate.
    """
    if n <= 1:
        return 0
    if nodes > 1:
        per = max(int(nics), math.ceil(nic_gbps / P2P_PER_CHANNEL_NET_GBPS - 1e-9)) if nic_gbps > 0 else 2
    else:
        link = NVLINK_LINK_GBPS.get(arch or "", 20.0)
        per = 2 * max(1, int(nvlink_gbps / link + 1e-9)) if nvlink_gbps > 0 else 2
    per = min(_pow2up(max(per, 1)), P2P_NCHANNELS)
    if nodes > 1:
        while per * -(-n // P2P_PER_BATCH) > P2P_NCHANNELS and per > 1:
            per //= 2
    return per


def nvls_bus_gbps(k: int, nvlink_gbps: float, arch: str | None) -> float:
    """NVLS all-reduce bus bandwidth of ``k`` GPUs on one NVSwitch node, GB/s (0 when NVLS cannot run).

    NCCL's model (``tuning.cc:307-323``): ``busBw = nHeads · bw · nvlsEff · (nHeads−1)/nHeads · 2``,
    where the search settles ``bw`` so that ``(nHeads+1)·bw`` fits the GPU's NVLink
    (8xH100: 9 × 40 ≤ 370.8).  Continuous form: ``2 · eff · B · (h−1)/(h+1)``, h = min(k, 8):
    8xH100 490 GB/s (published ~480, sjeaugey nccl-tests#212), 5/6/7 GPUs 420/450/473
    (published 420/440/460, nccl#1455).  Needs Hopper or later and ≥ 2 heads.
    """
    eff = NVLS_EFFICIENCY.get(arch or "")
    h = min(int(k), NVLS_MAX_HEADS)
    if eff is None or h < 2 or nvlink_gbps <= 0:
        return 0.0
    return 2.0 * eff * nvlink_gbps * (h - 1) / (h + 1)


def nvlstree_bus_gbps(k_min: int, nodes: int, channels: int, nvlink_gbps: float, nic_gbps: float,
                      arch: str | None) -> float:
    """NVLSTree all-reduce bus bandwidth cap, GB/s (0 when it cannot run).

    ``busBw = nCh · min(intraBw, interBw, perChMaxNVLSTreeBw)`` with ``intraBw`` the NVLS
    per-head rate ``2 · eff · B/(h+1) · (h−1)/h``, ``interBw`` the NIC channel rate, doubled
    on ≤ 2 nodes (``tuning.cc:307-323``): 2 × 8xH100 8 × min(61, 96, 57.7) = 462 GB/s
    (published ~470, nccl-tests#309), more nodes 8 × 45.5 = 364 (published 365.8).
    """
    eff = NVLS_EFFICIENCY.get(arch or "")
    caps = NVLSTREE_CH_MAX.get(arch or "")
    h = min(int(k_min), NVLS_MAX_HEADS)
    if eff is None or caps is None or h < 2 or nodes < 2 or channels < 1 or nvlink_gbps <= 0 or nic_gbps <= 0:
        return 0.0
    intra = 2.0 * eff * nvlink_gbps / (h + 1) * (h - 1) / h
    inter = nic_gbps * (2.0 if nodes <= 2 else 1.0)
    return channels * min(intra, inter, caps[0] if nodes <= 2 else caps[1])


def tree_bus_gbps(nodes: int, channels: int, nic_gbps: float, arch: str | None) -> float:
    """Tree all-reduce bus bandwidth cap, GB/s: ``min(0.92 · nCh · bw, nCh · perChMaxTreeBw) · 0.85`` (``tuning.cc:327-337``)."""
    caps = TREE_CH_MAX.get(arch or "", TREE_CH_MAX["ampere"])
    if nodes < 2 or channels < 1 or nic_gbps <= 0:
        return 0.0
    cap = caps[1] if nodes == 2 else caps[2]
    return min(TREE_BUS_FACTOR * channels * nic_gbps, channels * cap) * TREE_PATTERN_FACTOR


def latency_seconds(algorithm: str, protocol: str, kind: str, n: int, nodes: int) -> float:
    """NCCL's latency of one collective, seconds (``tuning.cc:393-413``).

    Ring: ``base + (nsteps − nInter)·intra + nInter·net`` with nsteps 2(n−1) (all-reduce) or
    n−1, nInter 2(nodes−1) or nodes−1; multi-node Simple all-reduce x1.4.  Tree:
    ``base + 2((n/nodes − 1)·intra + log2(nodes)·net)``.  NVLS: ``intra``.  NVLSTree:
    ``base + intra + 2·log2(nodes)·net``.  All-to-all and send/recv: one ring step
    (``base + intra`` inside a node, ``base + net`` across nodes).
    """
    p = _P[protocol]
    if n <= 1:
        return 0.0
    base, intra, net = BASE_LAT_US[algorithm][p], NVLINK_LAT_US[algorithm][p], NET_LAT_US[algorithm][p]
    if kind in ("all_to_all", "p2p_chain"):
        return (base + (net if nodes > 1 else intra)) * 1e-6
    if algorithm == "ring":
        ar = kind == "all_reduce"
        nsteps = 2 * (n - 1) if ar else n - 1
        ninter = min(nsteps, (2 if ar else 1) * (nodes - 1)) if nodes > 1 else 0
        lat = base + (nsteps - ninter) * intra + ninter * net
        if ar and nodes > 1 and protocol == "simple":
            lat *= RING_PLATEAU
        return lat * 1e-6
    logn = math.log2(nodes) if nodes > 1 else 0.0
    if algorithm == "tree":
        return (base + 2 * ((max(n // max(nodes, 1), 1) - 1) * intra + logn * net)) * 1e-6
    if algorithm == "nvls":
        return (base + intra) * 1e-6
    return (base + intra + 2 * logn * net) * 1e-6


# the flows live in .ncclflows; re-exported here for the modules that import them from .nccl
from .ncclflows import (_blocks, _node_channels, chain_flows, nccl_member_order, pxn_relay,  # noqa: E402,F401
                        ring_flows)
