"""NCCL's flows of a collective: node order, channels through the nodes, PXN relays (DESIGN §3).

Split from :mod:`.nccl` (rates, algorithms and latency stay there); :mod:`.nccl` re-exports
these names.  Array operations only: no per-rank-pair loops, so 131,072 GPUs stay cheap.
Sources are cited as in :mod:`.nccl` (NCCL 2.30, ``NVIDIA/nccl`` HEAD ``5067397``).
"""

from __future__ import annotations

import numpy as np

__all__ = ["nccl_member_order", "ring_flows", "chain_flows", "pxn_relay"]


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


def _node_channels(dev: np.ndarray, block: np.ndarray, nodes: np.ndarray, rail: np.ndarray, channels_cap: int = 0,
                   paths: bool = True):
    """NCCL's per-channel paths through each node of groups spanning several nodes (vectorised, no pair loops).

    Parameters
    ----------
    dev : numpy.ndarray of int, shape (g, k)
        Members' devices in NCCL order (:func:`nccl_member_order`: each node's members contiguous).
    block : numpy.ndarray of int, shape (g, k)
        Node block (0, 1, …) of each member within its group (:func:`_blocks`).
    nodes : numpy.ndarray of int, shape (g,)
        Nodes per group (all > 1).
    rail : numpy.ndarray of int, shape (num_devices,) or (num_devices, m)
        Rail of each device, or every rail near it (:meth:`~rankmap.solver.fabric.rails.NcclTopology.rails`,
        -1 padded): a member near several NICs is a slot's member on each of their rails.
    channels_cap : int
        As in :func:`ring_flows`.
    paths : bool
        False: no paths inside nodes (empty intra-node hops) and the inter-node flows from each
        slot's *first* member: a tree channel enters and leaves a node on one NIC at one GPU
        (``ncclTopoSearchCheckNet``: "Trees are symmetric").

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
    (``NCCL_CROSS_NIC=2``, the default): the node's slots pair up in order (0↔1, 2↔3, …, by
    the node's own slot count, as its own search pairs them before ``init.cc`` takes the
    least channel count) and channel t leaves from the last member of its partner's slot — odd channels enter on
    the previous channel's exit NIC (``ncclTopoSearchRecNet``, ``search.cc:740``) and
    ``ncclTopoPostset`` (``connect.cc:401-411``) swaps channels c↔c^1 on odd nodes, so one
    node's exit NIC meets the next node's entry NIC on the same rail (nccl#1189, 2 GPUs on
    2 NICs: ``NET/3 GPU/0 GPU/1 NET/2`` and ``NET/2 GPU/1 GPU/0 NET/3``); a partner slot
    beyond ``c`` is a NIC the next node's channels do not enter, and the channel crosses
    rails to the next node's slot t.  With an odd number of nodes and an even ``c`` the wrap (last node ->
    first) enters node 0 at the channel's own slot t, crossing rails (:func:`_wrap_crosses`).  The node's last slot when it has an odd count keeps its NIC (``crossNic`` 0, ``ncclTopoSearchCheckNet``): its path ends
    at the slot's last member when the NIC is shared (PIX), else at the member before the
    entry in the node's order, which hands the bytes back to the entry member (the PXN
    return to the channel's NIC, ``paths.cc``); so does a channel whose exit NIC is beside its
    entry member (a member near two NICs).  Between entry and exit the path visits the
    other members in the node's cyclic order from the entry.  So slot t's last member sends
    the channel leaving on rail t, and every member sends and receives each channel once.
    NCCL's search may keep a same-NIC (``crossNic`` 0) solution where it fits the speed
    equally; that moves a channel between PCIe links of a host, not between NICs.
    """
    g, k = dev.shape
    rows = np.repeat(np.arange(g), k)
    pos = np.tile(np.arange(k), g)
    B = rows * k + block.ravel()  # block id
    # (member, rail) entries: a member near several NICs sits on each of their rails
    R = np.asarray(rail)
    R = R[:, None] if R.ndim == 1 else R
    rm = R[dev.ravel()]  # (g·k, m)
    keep = rm >= 0
    keep[:, 0] |= ~keep.any(axis=1)  # no NIC: one entry on "no rail"
    e_mem = np.nonzero(keep)[0]
    r = np.maximum(rm[keep], -1) + 1
    order_e = np.lexsort((pos[e_mem], r, B[e_mem]))  # entries by block, rail, position
    order = e_mem[order_e]  # member flat index of each entry in that order
    Bo, ro = B[order], r[order_e]
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
    # slots paired in order (0-1, 2-3, ...) as the node's own search pairs its NICs (its own slot count, which
    # may exceed c); runs of a block are consecutive by slot
    paired = use & ((slot ^ 1) < nslots[run_B])
    partner_run = np.where(paired, ridx + (slot ^ 1) - slot, -1)
    flat = dev.ravel()
    if not paths:
        u = np.flatnonzero(use)
        grp_u, blk_u = run_grp[u], run_B[u] % k
        s_key = run_B[u] * k + slot[u]
        t_key = (grp_u * k + (blk_u + 1) % nodes[grp_u]) * k + slot[u]
        so = np.argsort(s_key, kind="stable")
        empty = np.zeros(0, dtype=np.int64)
        return (empty, empty, empty, flat[run_first[u]], flat[run_first[u][so][np.searchsorted(s_key[so], t_key)]],
                blk_u, grp_u, c)
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
    # unpaired single slot, or an exit NIC beside the entry member itself (a member on two rails): the path
    # ends at the member before the entry, which hands the bytes back to it (PXN to the exit NIC)
    left = (X < 0) | ((X == E) & (kb > 1))
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
    # inter-node flows, one per channel t: from the last member of its exit slot x on block b to the first
    # member of slot x on block b+1 (rail-aligned), or of slot t when x >= c (the partner NIC is one the
    # next node's channels do not enter: the channel crosses rails, as NCCL's would); on an odd number of
    # nodes the wrap (last node -> first) of a paired channel crosses rails too (:func:`_wrap_crosses`)
    u = np.flatnonzero(use)
    grp_u = run_grp[u]
    blk_u = run_B[u] % k
    xr = np.where(paired[u], partner_run[u], u)
    y = np.where(slot[xr] < c[grp_u], slot[xr], slot[u])
    y = np.where(_wrap_crosses(blk_u, nodes[grp_u], c[grp_u]), slot[u], y)
    s_key = run_B[u] * k + slot[u]
    t_key = (grp_u * k + (blk_u + 1) % nodes[grp_u]) * k + y
    so = np.argsort(s_key, kind="stable")
    x_src = flat[run_last[xr]]
    x_dst = flat[run_first[u][so][np.searchsorted(s_key[so], t_key)]]
    return i_src, i_dst, i_grp, x_src, x_dst, blk_u, grp_u, c


def _wrap_crosses(blk: np.ndarray, nodes: np.ndarray, c: np.ndarray) -> np.ndarray:
    """Per inter-node flow leaving node block ``blk``: True where it is the ring's wrap (last node -> first) and
    NCCL's rail alternation leaves it crossing rails.

    NCCL's search (``NCCL_CROSS_NIC=2``) pairs the channels: odd channel c+1 enters on channel c's exit NIC
    and leaves on its entry NIC (``ncclTopoSearchRecNet``, ``src/graph/search.cc:740-742``;
    ``ncclTopoSearchCheckNet``, ``search.cc:602-603``).  ``ncclTopoPostset`` ("Alternate rings to avoid
    crossing rails", ``src/graph/connect.cc:401-411``) then swaps channels c <-> c^1 on the nodes of odd
    index (``rankToNode[r] % 2 == 1``), only when the channel count is even, so node i's exit NIC and node
    i+1's entry NIC share a rail.  ``connectRings`` (``connect.cc:95-113``) closes the ring from the last
    node to node 0: with an odd number of nodes both are of even index, unswapped, so channel c leaves
    the last node on its exit NIC (the partner rail) and enters node 0 on its entry NIC: the wrap hop
    crosses rails (on a rail-optimised fabric: leaf -> spine -> leaf).  The caller applies this to
    channels whose exit is a paired slot within ``c``; an odd ``c`` (no swap, and NCCL's channel
    duplication mixes the pairs) is not modelled: those rings stay rail-aligned.
    """
    return (blk == nodes - 1) & (nodes % 2 == 1) & (c % 2 == 0)


def ring_flows(dev: np.ndarray, node_of: np.ndarray, rail: np.ndarray, fb: float, channels_cap: int = 0,
               return_rows: bool = False):
    """Flows of a ring collective as NCCL runs it: ``(src, dst, bytes, channels per group)``.

    Parameters
    ----------
    dev : numpy.ndarray of int, shape (g, k)
        Members' devices in ascending global rank.
    node_of : numpy.ndarray of int, shape (num_devices,)
        NCCL node of each device.
    rail : numpy.ndarray of int, shape (num_devices,) or (num_devices, m)
        Rail of each device (index of its nearest NIC within its node, -1 none), or every
        nearest NIC's rail (-1 padded): a GPU with two PIX NICs gives two channels
        (``ncclTopoSelectNets`` lists every NIC local to the GPU; ``ncclTopoSearchRecNet``
        starts a channel at each whose bandwidth remains).
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
    rail-aligned channels of ``nbytes/c`` (``c`` as for rings, a GPU near several NICs on
    each of their rails), each between the first members on its rail of the two nodes.
    Groups on one node have no flows (channels 1).  With ``return_rows`` also the group (row
    of ``dev``) of each flow.
    """
    dev = nccl_member_order(np.asarray(dev, dtype=np.int64), node_of)
    g, k = dev.shape
    _rows, _pos, block, _ksz, _st, nodes = _blocks(dev, node_of)
    chans = np.ones(g, dtype=np.int64)
    multi = np.flatnonzero(nodes > 1)
    empty = np.zeros(0, dtype=np.int64)
    if multi.size == 0:
        return (empty, empty, np.zeros(0), chans, empty) if return_rows else (empty, empty, np.zeros(0), chans)
    _i, _j, _g, s_dev, t_dev, blk, grp, c = _node_channels(dev[multi], block[multi], nodes[multi], rail,
                                                           channels_cap, paths=False)
    chans[multi] = c
    keep = blk < nodes[multi][grp] - 1  # no closing edge
    s_dev, t_dev, b, r = s_dev[keep], t_dev[keep], float(nbytes) / c[grp[keep]], multi[grp[keep]]
    out = (np.concatenate([s_dev, t_dev]), np.concatenate([t_dev, s_dev]), np.concatenate([b, b]), chans)
    return (*out, np.concatenate([r, r])) if return_rows else out


def pxn_relay(src: np.ndarray, dst: np.ndarray, row: np.ndarray, dev: np.ndarray, node_of: np.ndarray,
              rail: np.ndarray, local_index: np.ndarray | None = None, host_of: np.ndarray | None = None,
              p2p_rail: np.ndarray | None = None, nvlink: tuple | None = None) -> np.ndarray:
    """PXN relay device of each flow, shape (F,); ``src`` where the flow goes out directly.

    NCCL's send/recv with ``NCCL_P2P_PXN_LEVEL=2`` (``ncclTopoGetNetDev``,
    ``src/graph/search.cc:1420-1477``): the sender looks up, on its own host, the GPU with the
    receiver's device index (``ncclTopoDevToRank(.., peerInfo[peer].nvmlDev ..)``, ``search.cc:1430-1434``;
    none in the communicator: the sender's own NIC, no relay), takes that GPU's NIC
    (``ncclTopoGetLocalNet``, ``search.cc:1436``; ``p2p_rail``) and proxies through the NIC's local
    GPU (``ncclTopoGetLocalGpu``, ``search.cc:1459``, ``src/graph/topo.cc:2110-2133``: the first GPU
    whose own NIC it is).  So the relay is the member on the sender's host on the *receiver's* rail
    (same device index), or the member that owns the NIC that GPU uses (GPUs sharing one NIC: the
    first of them).

    Parameters
    ----------
    src, dst, row : numpy.ndarray of int, shape (F,)
        Flows and the group (row of ``dev``) of each.
    dev : numpy.ndarray of int, shape (g, k)
        Members' devices.
    node_of : numpy.ndarray of int, shape (num_devices,)
        NCCL node: flows inside one node are never relayed.
    rail : numpy.ndarray of int, shape (num_devices,)
        Nearest NIC's rail (-1: none; a member without a NIC relays nothing).
    local_index : numpy.ndarray of int, shape (num_devices,), optional
        CUDA device index; None: the member whose ``rail`` is the receiver's rail (the rule before
        NCCL's device-index lookup was modelled, kept for callers without device indices).
    host_of : numpy.ndarray of int, shape (num_devices,), optional
        Host of each device (NCCL's ``systemId``: on a multi-node NVLink domain the relay is on
        the sender's own tray); None: ``node_of``.
    p2p_rail : numpy.ndarray of int, shape (num_devices,), optional
        NCCL's send/recv NIC per device (:meth:`~rankmap.solver.fabric.rails.NcclTopology.p2p_rails`);
        None: ``rail``.
    nvlink : (on_nvswitch, direct_key), optional
        NCCL proxies only through a GPU NVLink-connected to the sender (``peerGpu->paths[GPU][g1].type
        <= PATH_NVL``, ``search.cc:1465``): ``on_nvswitch`` (bool per device: linked to an NVSwitch; two
        such GPUs of one host reach each other over it) and ``direct_key`` (sorted ``lo·n + hi`` of GPU
        pairs joined by a direct link: NVLink bridges, hybrid cube meshes).  A relay that is neither
        is dropped: the sender uses its own NIC.  None: no check.
    """
    g, k = dev.shape
    out = src.copy()
    need = node_of[src] != node_of[dst]
    if not need.any():
        return out
    if local_index is None:
        R = int(rail.max(initial=0)) + 1
        NN = int(node_of.max(initial=0)) + 1
        mr = rail[dev].ravel()
        ok = mr >= 0
        keys = ((np.repeat(np.arange(g), k) * NN + node_of[dev].ravel()) * R + np.maximum(mr, 0))[ok]
        kd = dev.ravel()[ok]
        uk, first = np.unique(keys, return_index=True)
        ud = kd[first]
        need &= (rail[dst] >= 0) & (rail[src] != rail[dst])
        if not need.any() or uk.size == 0:
            return out
        q = (row[need] * NN + node_of[src[need]]) * R + rail[dst[need]]
        pos = np.minimum(np.searchsorted(uk, q), uk.size - 1)
        hit = uk[pos] == q
        sel = np.flatnonzero(need)
        out[sel[hit]] = ud[pos[hit]]
        return out
    host = node_of if host_of is None else host_of
    p2p = rail if p2p_rail is None else p2p_rail
    li = np.asarray(local_index, dtype=np.int64)
    rows = np.repeat(np.arange(g), k)
    md = dev.ravel()
    has = rail[md] >= 0
    md, rows = md[has], rows[has]
    if md.size == 0:
        return out
    H = int(host.max(initial=0)) + 1
    LI = int(li.max(initial=0)) + 1
    R = int(p2p.max(initial=0)) + 2
    # the member with a given device index on a given host, per group
    k1 = (rows * H + host[md]) * LI + li[md]
    u1, f1 = np.unique(k1, return_index=True)
    d1 = md[f1]
    # the owner of a NIC among a group's members on a host: the least device index using it
    o = np.lexsort((li[md], (rows * H + host[md]) * R + p2p[md] + 1))
    k2s = ((rows * H + host[md]) * R + p2p[md] + 1)[o]
    first2 = np.ones(k2s.size, dtype=bool)
    first2[1:] = k2s[1:] != k2s[:-1]
    u2, d2 = k2s[first2], md[o][first2]
    sel = np.flatnonzero(need)
    q = (row[sel] * H + host[src[sel]]) * LI + li[dst[sel]]
    pos = np.minimum(np.searchsorted(u1, q), u1.size - 1)
    hit = u1[pos] == q
    sel, cand = sel[hit], d1[pos[hit]]
    q2 = (row[sel] * H + host[src[sel]]) * R + p2p[cand] + 1
    pos2 = np.minimum(np.searchsorted(u2, q2), u2.size - 1)
    relay = np.where(u2[pos2] == q2, d2[pos2], cand)
    if nvlink is not None:
        on_nvs, direct = nvlink
        a, b = src[sel], relay
        ok = (a == b) | (np.asarray(on_nvs)[a] & np.asarray(on_nvs)[b])
        direct = np.asarray(direct, dtype=np.int64)
        if direct.size:
            n = int(np.asarray(on_nvs).size)
            key = np.minimum(a, b) * n + np.maximum(a, b)
            p = np.minimum(np.searchsorted(direct, key), direct.size - 1)
            ok |= direct[p] == key
        relay = np.where(ok, relay, a)
    out[sel] = relay
    return out
