"""Process-mapping peers for bench_quality.py: METIS tree mapping and Scotch static mapping.

Both are written here from the tools' public APIs; of rankmap's own
partitioner (solver/partition.py) they use only the assembly of the sparse
item graph (``item_graph``), not its traffic model, METIS calls or repair.
Both optimise a pairwise surrogate (``quality_peers.rank_pairs``) and their
layouts are scored with rankmap's objective.

* **METIS tree** (``pymetis``): top-down recursive *bisection* along the
  fabric tree (``cluster.domains``, coarsest level first): at each tree node
  its children are split in two halves (children in order of first device),
  METIS bisects the items with target weights equal to the halves' sizes,
  sizes are made exact by moving the items with the best (bytes to the other
  side − bytes to their own side), recursion into each half.  Launcher mode:
  items are rank blocks of G (whole hosts), local GPU order = local index;
  free mode: items are ranks, down to single GPUs.
* **Scotch** (``pyscotch``, Scotch 7 ``SCOTCH_graphMap``): the rank graph
  (launcher: block graph) mapped onto a tree-leaf target architecture
  (``tleaf``) whose levels are the fabric's domain levels (fan-out = the
  largest number of children at that level, link cost ∝ 1 / level
  bandwidth), restricted to the real terminals with ``SCOTCH_archSub``
  (fragmented allocations are irregular trees).  Default mapping strategy,
  ``random_seed(0)`` before each map (reproducible).

Graph weights: bytes between ranks per step (DESIGN §3 shapes), both
directions summed, scaled to positive integers.
"""

from __future__ import annotations

import numpy as np
from scipy.sparse import csr_matrix

from rankmap.solver.search.partition import item_graph

from quality_peers import rank_pairs

MAX_FLOWS = 1 << 23


def rank_graph(cfg, traffic, block: int = 1) -> csr_matrix | None:
    """Symmetric sparse graph of bytes between items of ``block`` consecutive ranks (no diagonal)."""
    flows = ((u, v, 2.0 * pb) for u, v, pb in rank_pairs(cfg, traffic))
    return item_graph(flows, cfg.world_size // block, block, MAX_FLOWS)


def _int_weights(A: csr_matrix) -> csr_matrix:
    B = A.copy()
    B.data = np.maximum(1, np.rint(B.data * (1e6 / B.data.max()))).astype(np.int64)
    return B


def _tree(cluster, per_host: bool) -> np.ndarray:
    """Slot labels per level, coarsest first, shape (L, S); slots = hosts (per_host) or GPUs."""
    doms = cluster.domains[::-1]
    if per_host:
        first = np.zeros(len(cluster.hosts), dtype=np.int64)
        first[cluster.host_of[::-1]] = np.arange(cluster.num_devices)[::-1]
        keep = [k for k in range(doms.shape[0]) if np.array_equal(doms[k], doms[k][first][cluster.host_of])]
        return np.vstack([doms[keep][:, first], np.arange(first.size)[None, :]])
    return np.vstack([doms, cluster.host_of[None, :], np.arange(cluster.num_devices)[None, :]])


def _bisect(A: csr_matrix, na: int, nb: int, seed: int) -> np.ndarray:
    """0/1 side of each item, exactly ``na`` items on side 0."""
    import pymetis

    n = A.shape[0]
    side = None
    if A.nnz:
        B = _int_weights(A)
        opt = pymetis.Options()
        opt.seed = seed
        try:
            adj = pymetis.CSRAdjacency(B.indptr.astype(np.int64), B.indices.astype(np.int64))
            side = np.asarray(pymetis.part_graph(2, adj, eweights=B.data, tpwgts=[na / n, nb / n], options=opt)[1])
        except Exception:
            side = None
    if side is None or side.size != n:
        return (np.arange(n) >= na).astype(np.int64)
    side = side.astype(np.int64)
    for _ in range(4):
        c0 = int((side == 0).sum())
        if c0 == na:
            break
        frm, to, need = (0, 1, c0 - na) if c0 > na else (1, 0, na - c0)
        conn_to = np.asarray(A @ (side == to).astype(float)).ravel()
        conn_fr = np.asarray(A @ (side == frm).astype(float)).ravel()
        items = np.flatnonzero(side == frm)
        gain = conn_to[items] - conn_fr[items]
        side[items[np.lexsort((items, -gain))[:need]]] = to
    return side


def metis_tree(cluster, cfg, traffic, launcher: bool, seed: int = 0) -> np.ndarray | None:
    """Device per rank of the METIS tree mapping (module doc), or None."""
    G = int(cluster.gpus_per_host[0])
    if launcher and np.unique(cluster.gpus_per_host).size != 1:
        return None
    A = rank_graph(cfg, traffic, G if launcher else 1)
    if A is None:
        return None
    levels = _tree(cluster, launcher)
    S = levels.shape[1]
    slot_of = np.empty(S, dtype=np.int64)
    stack = [(np.arange(S), np.arange(S), 0)]
    while stack:
        items, slots, lvl = stack.pop()
        while lvl < levels.shape[0] and np.unique(levels[lvl, slots]).size == 1:
            lvl += 1
        if lvl >= levels.shape[0] or items.size == 1:
            slot_of[np.sort(items)] = np.sort(slots)
            continue
        lab = levels[lvl, slots]
        _, first, inv = np.unique(lab, return_index=True, return_inverse=True)
        rank = np.empty(first.size, dtype=np.int64)
        rank[np.argsort(first, kind="stable")] = np.arange(first.size)
        child = rank[inv]
        half = (first.size + 1) // 2
        left = child < half
        side = _bisect(A[items][:, items], int(left.sum()), int((~left).sum()), seed)
        stack.append((items[side == 0], slots[left], lvl if half > 1 else lvl + 1))
        stack.append((items[side == 1], slots[~left], lvl if first.size - half > 1 else lvl + 1))
    if launcher:
        return np.concatenate([cluster.host_devices[h] for h in slot_of])
    return slot_of


def scotch_available() -> tuple[bool, str]:
    try:
        import pyscotch  # noqa: F401
    except Exception as exc:  # ImportError, or the bundled library failing to load
        return False, f"{type(exc).__name__}: {exc}"
    return True, ""


def scotch_map(cluster, cfg, traffic, launcher: bool) -> np.ndarray | None:
    """Device per rank of Scotch's static mapping onto the fabric's tree-leaf architecture (module doc), or None."""
    import pyscotch

    if launcher and np.unique(cluster.gpus_per_host).size != 1:
        return None
    G = int(cluster.gpus_per_host[0])
    A = rank_graph(cfg, traffic, G if launcher else 1)
    if A is None:
        return None
    levels = _tree(cluster, launcher)  # (L, S), coarsest first, last row = slot itself
    S = levels.shape[1]
    # keep levels that split something; relabel each level's children 0.. inside its parent
    rows = [levels[0]]
    for k in range(1, levels.shape[0]):
        if np.unique(levels[k]).size > np.unique(rows[-1]).size:
            rows.append(levels[k])
    rows = np.vstack(rows)
    L = rows.shape[0]
    fan, pos = [], np.zeros(S, dtype=np.int64)
    idx = []
    for k in range(1, L):
        parent, me = rows[k - 1], rows[k]
        pairs = np.unique(np.stack([parent, me], 1), axis=0)
        # position of each child inside its parent, in order of label
        child_pos = {}
        for p in np.unique(pairs[:, 0]):
            kids = pairs[pairs[:, 0] == p, 1]
            for i, c in enumerate(sorted(kids.tolist())):
                child_pos[(int(p), c)] = i
        f = max(np.bincount(pairs[:, 0]).max(), 1)
        fan.append(int(f))
        idx.append(np.array([child_pos[(int(a), int(b))] for a, b in zip(parent, me)]))
    if not fan:
        return None
    for k, f in enumerate(fan):
        pos = pos * f + idx[k]
    # link cost per level: inverse of the bandwidth at which that level joins (finest level cheapest)
    inv = 1.0 / cluster.levels_gbps
    lvl_cost = np.linspace(inv.max(), inv.min(), len(fan)) if len(fan) > 1 else np.array([inv.max()])
    links = np.maximum(1, np.rint(lvl_cost / lvl_cost.min())).astype(np.int64)
    pyscotch.random_seed(0)
    pyscotch.random_reset()
    full = pyscotch.Architecture()
    full.tree_leaf(len(fan), np.array(fan, dtype=np.int64), links)
    arch = pyscotch.Architecture()
    order = np.argsort(pos, kind="stable")
    arch.sub(full, pos[order].astype(np.int64))
    g = pyscotch.Graph.from_scipy_sparse(_int_weights(A))
    term = np.asarray(g.map(arch), dtype=np.int64)  # index into the sub-architecture's terminals
    slot = order[term]
    if np.unique(slot).size != S:  # Scotch may map unevenly: not a bijection, no layout
        return None
    if launcher:
        return np.concatenate([cluster.host_devices[h] for h in slot])
    return slot
