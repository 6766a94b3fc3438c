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
rail-aligned, ``src/graph/connect.cc:401-411``) carrying 1/c of the bytes.  Inside a node
a channel is a *path*, not a closed ring (``search.cc``: ``NET n -> GPU a -> .. -> GPU x
-> NET m``): it enters at the member beside its NIC, visits the other members and leaves
from its exit member (a second member on the same NIC, else the member of the paired
rail, :func:`_node_channels`), so every member sends each channel's bytes once, either to
the next member or out to the network.  One node: the ring over the members in rank order.

**All-to-all and send/recv** cross nodes through PXN (``NCCL_PXN_DISABLE=0``,
``NCCL_P2P_PXN_LEVEL=2``, ``src/graph/search.cc:1398-1477``): the bytes first cross NVLink
to the member on the destination's rail, then leave through that member's NIC; without
such a member, directly.

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


# --------------------------------------------------------------------------- flows


def nccl_member_order(dev: np.ndarray, node_of: np.ndarray) -> np.ndarray:
    """Each group's members in NCCL's ring order: nodes by first appearance, members of a node contiguous.

    Parameters
    ----------
    dev : numpy.ndarray of int, shape (g, k)
        Devices of each group's members in ascending global rank.
    node_of : numpy.ndarray of int, shape (num_devices,)
        NCCL node (host, or multi-node NVLink domain) of each device.

    Returns
    -------
    numpy.ndarray of int, shape (g, k): ``dev`` reordered row by row (a stable sort by the
    first position of each member's node).
    """
    g, k = dev.shape
    if k <= 1 or g == 0:
        return dev
    h = node_of[dev]
    breaks = (h[:, 1:] != h[:, :-1]).sum(axis=1)
    hs = np.sort(h, axis=1)
    if np.array_equal(breaks, (hs[:, 1:] != hs[:, :-1]).sum(axis=1)):
        return dev  # every node's members already contiguous
    rows = np.repeat(np.arange(g), k)
    cols = np.tile(np.arange(k), g)
    hf = h.ravel()
    order = np.lexsort((cols, hf, rows))
    start = np.ones(order.size, dtype=bool)
    start[1:] = (rows[order][1:] != rows[order][:-1]) | (hf[order][1:] != hf[order][:-1])
    first = cols[order][np.maximum.accumulate(np.where(start, np.arange(order.size), 0))]
    first_pos = np.empty_like(first)
    first_pos[order] = first
    new = np.lexsort((cols, first_pos, rows))
    return dev.ravel()[new].reshape(g, k)


def _blocks(dev: np.ndarray, node_of: np.ndarray):
    """Per member of NCCL-ordered groups: (rows, positions, block id, block size, block start, nodes per group)."""
    g, k = dev.shape
    h = node_of[dev]
    brk = np.zeros((g, k), dtype=bool)
    brk[:, 1:] = h[:, 1:] != h[:, :-1]
    nodes = 1 + brk.sum(axis=1)
    block = np.cumsum(brk, axis=1)
    rows = np.repeat(np.arange(g), k)
    bflat = rows * k + block.ravel()
    size = np.bincount(bflat, minlength=g * k)
    pos = np.tile(np.arange(k), g)
    start = np.full(g * k, k, dtype=np.int64)
    np.minimum.at(start, bflat, pos)
    return rows, pos, block, size[bflat], start[bflat], nodes


def _rail_channels(dev: np.ndarray, block: np.ndarray, nodes: np.ndarray, rail: np.ndarray, channels_cap: int = 0):
    """Rail-aligned channel endpoints of groups spanning several nodes.

    Returns ``(src, dst, blk, grp, c)``: for every group ``grp`` (row of ``dev``), block (node)
    ``blk`` and channel j < c[grp], the member on the j-th rail of that node (``src``) and of
    the next node (``dst``; the last node's next is the first); ``c`` (per group) = min over
    the group's nodes of their distinct rails.
    """
    g, k = dev.shape
    r = rail[dev].ravel()
    r = np.where(r < 0, -1, r)
    R = int(rail.max(initial=0)) + 2
    rr = np.repeat(np.arange(g), k)
    key = (rr * k + block.ravel()) * R + (r + 1)
    uk, first = np.unique(key, return_index=True)
    rep_dev = dev.ravel()[first]
    rb = uk // R  # group * k + block
    bstart = np.ones(uk.size, dtype=bool)
    bstart[1:] = rb[1:] != rb[:-1]
    idx = np.arange(uk.size)
    jpos = idx - np.maximum.accumulate(np.where(bstart, idx, 0))
    nrails = np.bincount(rb, minlength=g * k)
    grp, blk = rb // k, rb % k
    c = np.full(g, np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(c, grp, nrails[rb])
    if channels_cap > 0:
        c = np.minimum(c, channels_cap)
    keep = jpos < c[grp]
    s_key = rb[keep] * k + jpos[keep]
    s_dev, grp, blk, jp = rep_dev[keep], grp[keep], blk[keep], jpos[keep]
    t_key = (grp * k + (blk + 1) % nodes[grp]) * k + jp
    order = np.argsort(s_key, kind="stable")
    t_dev = s_dev[order][np.searchsorted(s_key[order], t_key)]
    return s_dev, t_dev, blk, grp, c


def _node_channels(dev: np.ndarray, block: np.ndarray, nodes: np.ndarray, rail: np.ndarray, channels_cap: int = 0):
    """NCCL's per-channel paths through each node of groups spanning several nodes (vectorised, no pair loops).

    Parameters
    ----------
    dev : numpy.ndarray of int, shape (g, k)
        Members' devices in NCCL order (:func:`nccl_member_order`: each node's members contiguous).
    block : numpy.ndarray of int, shape (g, k)
        Node block (0, 1, …) of each member within its group (:func:`_blocks`).
    nodes : numpy.ndarray of int, shape (g,)
        Nodes per group (all > 1).
    rail, channels_cap
        As in :func:`ring_flows`.

    Returns
    -------
    (i_src, i_dst, i_grp, x_src, x_dst, x_blk, x_grp, c)
        Intra-node hops of every channel (shapes (F,)), the inter-node flows (exit member of
        slot t on node b → entry member of slot t on node b+1, the last node to the first;
        shapes (X,)), and the channels ``c`` per group, shape (g,).  Every flow carries 1/c
        of the ring bytes.

    Notes
    -----
    A node's *slots* are the distinct rails of the group's members there, ascending (no rail
    first); slot t's entry member is its first member.  ``c`` = min over the group's nodes of
    their slots (``src/init.cc:1439-1442``), capped by ``channels_cap``.  Channel t enters
    at slot t's entry member and runs a path, not a closed ring, through all the node's
    members (``src/graph/search.cc`` pattern ``NET n -> GPU a -> .. -> GPU x -> NET m``,
    ``ncclTopoSearchRecGpu`` with ``backToNet = ngpus-1``; ``connect.cc`` ``ringRecv =
    intra[0]``, ``ringSend = intra[localRanks-1]``).  Its exit, as NCCL's search finds it
    (``NCCL_CROSS_NIC=2``, the default): used slots pair up in order (0↔1, 2↔3, …) and
    channel t leaves from the last member of its partner's slot — odd channels enter on
    the previous channel's exit NIC (``ncclTopoSearchRecNet``, ``search.cc:740``) and
    ``ncclTopoPostset`` (``connect.cc:401-411``) swaps channels c↔c^1 on odd nodes, so one
    node's exit NIC meets the next node's entry NIC on the same rail (nccl#1189, 2 GPUs on
    2 NICs: ``NET/3 GPU/0 GPU/1 NET/2`` and ``NET/2 GPU/1 GPU/0 NET/3``).  An unpaired
    slot (c odd) keeps its NIC (``crossNic`` 0, ``ncclTopoSearchCheckNet``): its path ends
    at the slot's last member when the NIC is shared (PIX), else at the member before the
    entry in the node's order, which hands the bytes back to the entry member (the PXN
    return to the channel's NIC, ``paths.cc``).  Between entry and exit the path visits the
    other members in the node's cyclic order from the entry.  So slot t's last member sends
    the channel leaving on rail t, and every member sends and receives each channel once.
    NCCL's search may keep a same-NIC (``crossNic`` 0) solution where it fits the speed
    equally; that moves a channel between PCIe links of a host, not between NICs.
    """
    g, k = dev.shape
    r = rail[dev].ravel()
    r = np.where(r < 0, -1, r) + 1
    rows = np.repeat(np.arange(g), k)
    pos = np.tile(np.arange(k), g)
    B = rows * k + block.ravel()  # block id
    order = np.lexsort((pos, r, B))  # members by block, rail, position
    Bo, ro = B[order], r[order]
    run_start = np.ones(order.size, dtype=bool)
    run_start[1:] = (Bo[1:] != Bo[:-1]) | (ro[1:] != ro[:-1])
    run_id = np.cumsum(run_start) - 1
    nrun = int(run_id[-1]) + 1 if order.size else 0
    first_i = np.flatnonzero(run_start)
    last_i = np.append(first_i[1:], order.size) - 1
    run_B = Bo[first_i]
    run_first = order[first_i]  # flat member index of the slot's entry member
    run_last = order[last_i]  # of its last member
    run_cnt = last_i - first_i + 1
    bstart = np.ones(nrun, dtype=bool)
    bstart[1:] = run_B[1:] != run_B[:-1]
    ridx = np.arange(nrun)
    slot = ridx - np.maximum.accumulate(np.where(bstart, ridx, 0))
    nslots = np.bincount(run_B, minlength=g * k)
    run_grp = run_B // k
    c = np.full(g, np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(c, run_grp, nslots[run_B])
    if channels_cap > 0:
        c = np.minimum(c, channels_cap)
    use = slot < c[run_grp]
    # used slots paired in order (0-1, 2-3, ...); runs of a block are consecutive by slot
    paired = use & ((slot ^ 1) < c[run_grp])
    partner_run = np.where(paired, ridx + (slot ^ 1) - slot, -1)
    # block geometry of each member (flat index): start position and size
    bsize = np.bincount(B, minlength=g * k)
    bst = np.full(g * k, k, dtype=np.int64)
    np.minimum.at(bst, B, pos)
    # channels: one per used slot
    ch = np.flatnonzero(use)
    E = run_first[ch]
    kb = bsize[run_B[ch]]
    st = bst[run_B[ch]]
    pe = pos[E] - st
    X = np.where(run_cnt[ch] >= 2, run_last[ch], -1)
    X = np.where(paired[ch], run_last[np.maximum(partner_run[ch], 0)], X)
    left = X < 0  # unpaired single slot: the path ends before the entry, then hands back to it
    X = np.where(left, rows[E] * k + st + (pe - 1) % kb, X)
    # every member of the channel's block, with its place on the path
    nch = ch.size
    rep = np.repeat(np.arange(nch), kb)
    off = np.arange(rep.size) - np.repeat(np.cumsum(kb) - kb, kb)
    mem = rows[E][rep] * k + st[rep] + off  # flat member index
    d = (off - pe[rep]) % kb[rep]  # cyclic distance from the entry
    dX = (pos[X] - st - pe) % kb
    place = np.where(d == 0, 0, np.where(mem == X[rep], kb[rep] - 1, d - (d > dX[rep])))
    o2 = np.lexsort((place, rep))
    mem_o, rep_o = mem[o2], rep[o2]
    nxt_same = np.zeros(mem_o.size, dtype=bool)
    nxt_same[:-1] = rep_o[1:] == rep_o[:-1]
    hop = np.flatnonzero(nxt_same)
    flat = dev.ravel()
    i_src, i_dst = flat[mem_o[hop]], flat[mem_o[hop + 1]]
    i_grp = rows[mem_o[hop]]
    back = np.flatnonzero(left & (kb > 1))
    if back.size:
        i_src = np.concatenate([i_src, flat[X[back]]])
        i_dst = np.concatenate([i_dst, flat[E[back]]])
        i_grp = np.concatenate([i_grp, rows[E[back]]])
    # inter-node flows: slot t's last member on block b -> slot t's entry member on block b+1
    u = np.flatnonzero(use)
    grp_u = run_grp[u]
    blk_u = run_B[u] % k
    s_key = run_B[u] * k + slot[u]
    t_key = (grp_u * k + (blk_u + 1) % nodes[grp_u]) * k + slot[u]
    so = np.argsort(s_key, kind="stable")
    x_src = flat[run_last[u]]
    x_dst = flat[run_first[u][so][np.searchsorted(s_key[so], t_key)]]
    return i_src, i_dst, i_grp, x_src, x_dst, blk_u, grp_u, c


def ring_flows(dev: np.ndarray, node_of: np.ndarray, rail: np.ndarray, fb: float, channels_cap: int = 0,
               return_rows: bool = False):
    """Flows of a ring collective as NCCL runs it: ``(src, dst, bytes, channels per group)``.

    Parameters
    ----------
    dev : numpy.ndarray of int, shape (g, k)
        Members' devices in ascending global rank.
    node_of, rail : numpy.ndarray of int, shape (num_devices,)
        NCCL node of each device; rail (index of its nearest NIC within its node, -1 none).
    fb : float
        Bytes per ring edge of a single ring (:func:`rankmap.solver.timemodel.flow_bytes`).
    channels_cap : int
        If > 0, at most this many channels.
    return_rows : bool
        Also return the group (row of ``dev``) of each flow, shape (F,).

    Returns
    -------
    (src, dst, nbytes, channels[, rows]) : numpy.ndarray, shapes (F,), (F,), (F,), (g,)[, (F,)]
        One node: the ring over the members, ``fb`` per edge.  Several nodes: ``c``
        channels of ``fb/c`` (``c`` = min over the nodes of the distinct rails of the
        group's members), each a path through every node's members from the member on its
        rail to its exit member, then rail-aligned to the next node (the last to the first);
        :func:`_node_channels` says which members NCCL's search makes entry and exit.
        Flows: ``c·k`` per group (``c·(k_h−1)`` hops inside nodes, ``c`` per node
        boundary), computed with array operations only.
    """
    dev = nccl_member_order(np.asarray(dev, dtype=np.int64), node_of)
    g, k = dev.shape
    rows, pos, block, ksz, st, nodes = _blocks(dev, node_of)
    chans = np.ones(g, dtype=np.int64)
    single = np.flatnonzero(nodes == 1)
    one = nodes[rows] == 1
    nxt = np.where(pos + 1 < st + ksz, pos + 1, st)
    src, dst, r1 = dev.ravel()[one], dev[rows, nxt][one], rows[one]
    nb = np.full(src.size, float(fb))
    multi = np.flatnonzero(nodes > 1)
    if multi.size == 0 or single.size == g:
        return (src, dst, nb, chans, r1) if return_rows else (src, dst, nb, chans)
    i_src, i_dst, i_grp, x_src, x_dst, _blk, x_grp, c = _node_channels(dev[multi], block[multi], nodes[multi], rail,
                                                                         channels_cap)
    chans[multi] = c
    out = (np.concatenate([src, i_src, x_src]), np.concatenate([dst, i_dst, x_dst]),
           np.concatenate([nb, float(fb) / c[i_grp], float(fb) / c[x_grp]]), chans)
    return (*out, np.concatenate([r1, multi[i_grp], multi[x_grp]])) if return_rows else out


def chain_flows(dev: np.ndarray, node_of: np.ndarray, rail: np.ndarray, nbytes: float, channels_cap: int = 0,
                return_rows: bool = False):
    """Network flows of a tree across nodes (tree / NVLSTree all-reduce): ``(src, dst, bytes, channels)``.

    The nodes, in first-appearance order, form a chain; each neighbouring pair exchanges
    ``nbytes`` both ways (partial sums up, results down: per NIC the bytes of a tree of
    depth log₂N, whose inner nodes also send and receive both ways), over ``c``
    rail-aligned channels of ``nbytes/c``.  Groups on one node have no flows (channels 1).
    With ``return_rows`` also the group (row of ``dev``) of each flow.
    """
    dev = nccl_member_order(np.asarray(dev, dtype=np.int64), node_of)
    g, k = dev.shape
    _rows, _pos, block, _ksz, _st, nodes = _blocks(dev, node_of)
    chans = np.ones(g, dtype=np.int64)
    multi = np.flatnonzero(nodes > 1)
    empty = np.zeros(0, dtype=np.int64)
    if multi.size == 0:
        return (empty, empty, np.zeros(0), chans, empty) if return_rows else (empty, empty, np.zeros(0), chans)
    s_dev, t_dev, blk, grp, c = _rail_channels(dev[multi], block[multi], nodes[multi], rail, channels_cap)
    chans[multi] = c
    keep = blk < nodes[multi][grp] - 1  # no closing edge
    s_dev, t_dev, b, r = s_dev[keep], t_dev[keep], float(nbytes) / c[grp[keep]], multi[grp[keep]]
    out = (np.concatenate([s_dev, t_dev]), np.concatenate([t_dev, s_dev]), np.concatenate([b, b]), chans)
    return (*out, np.concatenate([r, r])) if return_rows else out


def pxn_relay(src: np.ndarray, dst: np.ndarray, row: np.ndarray, dev: np.ndarray, node_of: np.ndarray,
              rail: np.ndarray) -> np.ndarray:
    """PXN relay device of each flow, shape (F,): the member of the flow's group (``row`` of
    ``dev``) on the sender's node whose rail is the receiver's rail; ``src`` where there is
    none or the flow stays inside a node (``src/graph/search.cc:1398-1477``)."""
    g, k = dev.shape
    R = int(rail.max(initial=0)) + 1
    NN = int(node_of.max(initial=0)) + 1
    mr = rail[dev].ravel()
    ok = mr >= 0
    keys = ((np.repeat(np.arange(g), k) * NN + node_of[dev].ravel()) * R + np.maximum(mr, 0))[ok]
    kd = dev.ravel()[ok]
    uk, first = np.unique(keys, return_index=True)
    ud = kd[first]
    out = src.copy()
    need = (node_of[src] != node_of[dst]) & (rail[dst] >= 0) & (rail[src] != rail[dst])
    if not need.any() or uk.size == 0:
        return out
    q = (row[need] * NN + node_of[src[need]]) * R + rail[dst[need]]
    pos = np.minimum(np.searchsorted(uk, q), uk.size - 1)
    hit = uk[pos] == q
    sel = np.flatnonzero(need)
    out[sel[hit]] = ud[pos[hit]]
    return out
