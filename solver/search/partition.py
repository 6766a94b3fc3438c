"""Starting layouts by top-down recursive partitioning along the fabric tree (issue 15 item 1).

The classic process-mapping recipe (Scotch's dual recursive bipartitioning,
Pellegrini & Roman, HPCN 1996; the hierarchical "top-down" mapping of
METIS-based mappers, e.g. Schulz & Träff, "Better process mapping and sparse
quadratic assignment", SEA 2017, §3): partition the communication graph into
as many parts as the fabric's top level has domains, with part sizes equal to
the domains' sizes, so that as few bytes as possible cross the most expensive
links; then recurse into every domain with its part, down to the hosts (and,
in free mode, to the GPUs).

* **graph**: rank pairs weighted by the exposure-weighted bytes of every flow
  of every class (:func:`~rankmap.solver.cost.objective.active_families`), both
  directions summed (METIS minimises the weight of cut edges);
* **tree**: the nested domains ``cluster.domains`` (fair-share levels: a leaf
  behind a 4:1 uplink is its own level), coarsest first;
* **launcher mode**: the items are the rank blocks of G consecutive ranks
  (whole hosts), so the answer is a host order; the local GPU orders come from
  :func:`~rankmap.solver.search.decompose.local_orders` like every other host order;
* **free mode**: the items are the ranks, recursed down to single GPUs.

METIS (``pymetis``, k-way with target part weights; or, with ``bisect``, two
halves of a node's children at a time, as Scotch's dual recursive
bipartitioning does) gives parts of about the right sizes; a greedy repair moves the items that lose the fewest internal
bytes from parts over their size to parts under it, so sizes are exact.
METIS is seeded (``options.seed``): same input, same layout.  The layouts
are proposals: each is scored with the real objective and improved by the
local search like every other candidate.
"""

from __future__ import annotations

from typing import Iterable, Mapping

import numpy as np
from scipy.sparse import coo_matrix, csr_matrix

from ..megatron.config import ParallelConfig
from ..fabric.cluster import Cluster
from ..cost.objective import active_families, ordered_pairs

__all__ = ["tree_partition_host_order", "tree_partition_layout", "item_graph", "PARTITION_MAX_ITEMS", "available",
           "PAIR_MODELS", "CLIQUE_MAX_RANKS", "partition_seconds"]

#: Largest number of items (blocks in launcher mode, ranks in free mode) partitioned.
PARTITION_MAX_ITEMS = 16384
#: Work model of one tree partition (:func:`tree_partition_layout`, :func:`tree_partition_host_order`):
#: seconds fixed + per item (rank or host).  Upper envelope measured on the 2-core reference machine
#: (pymetis 2025.2): 10-83 ms for 128-512 ranks, 2-11 ms for 16-128 hosts.
PARTITION_SECONDS = 2e-3
PARTITION_SECONDS_PER_ITEM = 1.6e-4


def partition_seconds(items: int) -> float:
    """Nominal seconds of one tree partition of ``items`` items (the work model above)."""
    return PARTITION_SECONDS + PARTITION_SECONDS_PER_ITEM * max(int(items), 0)


#: Largest number of rank-pair flows turned into the graph (all-to-all classes at scale are sampled out).
PARTITION_MAX_FLOWS = 1 << 23


def available() -> bool:
    """Whether pymetis imports (the proposals are skipped without it)."""
    try:
        import pymetis  # noqa: F401
    except ImportError:  # pragma: no cover - pymetis is a dependency
        return False
    return True


def item_graph(
    flows: Iterable[tuple[np.ndarray, np.ndarray, float]], num_items: int, block: int,
    max_flows: int = PARTITION_MAX_FLOWS,
) -> csr_matrix | None:
    """Symmetric graph of the bytes between items of ``block`` consecutive ranks, CSR, no diagonal.

    Parameters
    ----------
    flows : iterable of (senders, receivers, bytes)
        Per family: two int arrays of ranks of one shape (one flow each, rank ``senders[i]``
        to ``receivers[i]``) and the bytes of one flow; a flow weighs both directions.
    num_items : int
        Rows (and columns) of the graph: world size // ``block``.
    max_flows : int
        Largest number of flows read (counted before flows inside one item are dropped).

    Returns
    -------
    scipy.sparse.csr_matrix of float, shape (num_items, num_items), or None
        None when no flow joins two items or the flows exceed ``max_flows``.
    """
    src_all, dst_all, w_all = [], [], []
    total = 0
    for a, b, w in flows:
        total += a.size
        if total > max_flows:
            return None
        a, b = a // block, b // block
        keep = a != b
        src_all.append(a[keep])
        dst_all.append(b[keep])
        w_all.append(np.full(int(keep.sum()), float(w)))
    if not src_all:
        return None
    s = np.concatenate(src_all)
    d = np.concatenate(dst_all)
    w = np.concatenate(w_all)
    if s.size == 0:
        return None
    N = num_items
    m = coo_matrix((np.concatenate([w, w]), (np.concatenate([s, d]), np.concatenate([d, s]))), shape=(N, N)).tocsr()
    m.sum_duplicates()
    return m


#: Edge sets of the rank graph: ``ring`` the flows themselves (ring neighbours, pipeline
#: neighbours, all-to-all pairs); ``clique`` every pair of a group's members, each ring
#: collective's bytes spread evenly over its peers (the classic process-mapping input, Σ bytes
#: between ranks whatever the ring; what the METIS tree-mapping peer of bench_quality.py reads).
PAIR_MODELS = ("ring", "clique")
#: The ``clique`` model has n(n−1)/2 edges per group of n: only up to this many ranks.
CLIQUE_MAX_RANKS = 2048


def _clique_flows(arr: np.ndarray, kind: str, fb: float):
    """(senders, receivers, bytes) of the ``clique`` model: every member pair, both directions."""
    if kind in ("p2p_chain", "all_to_all"):
        yield (*ordered_pairs(arr, kind), fb)
        return
    n = arr.shape[1]
    iu, ju = np.nonzero(np.triu(~np.eye(n, dtype=bool)))
    a, b = arr[:, iu].ravel(), arr[:, ju].ravel()
    yield np.concatenate([a, b]), np.concatenate([b, a]), fb / (n - 1)


def _rank_graph(cfg: ParallelConfig, traffic: Mapping[str, float], groups, block: int,
                pairs: str = "ring") -> csr_matrix | None:
    """Symmetric item graph (bytes between items of ``block`` consecutive ranks), CSR, no diagonal.

    ``pairs``: one of :data:`PAIR_MODELS`.
    """
    fams = active_families(cfg, traffic, groups)
    if pairs == "clique":
        flows = (f for _c, kind, arr, fb in fams for f in _clique_flows(arr, kind, fb))
    else:
        flows = ((*ordered_pairs(arr, kind), fb) for _c, kind, arr, fb in fams)
    return item_graph(flows, cfg.world_size // block, block)


def _metis_parts(A: csr_matrix, sizes: np.ndarray, seed: int) -> np.ndarray:
    """Part of each row of ``A`` (k = len(sizes) parts), exactly ``sizes[p]`` rows in part p."""
    import pymetis

    n = A.shape[0]
    k = sizes.size
    part = None
    if A.nnz and k > 1:
        data = A.data
        scale = 1e6 / float(data.max())
        ew = np.maximum(1, np.rint(data * scale)).astype(np.int64)
        opt = pymetis.Options()
        opt.seed = int(seed)
        try:
            adj = pymetis.CSRAdjacency(A.indptr.astype(np.int64), A.indices.astype(np.int64))
            res = pymetis.part_graph(int(k), adj, eweights=ew, tpwgts=(sizes / sizes.sum()).tolist(), options=opt)
            part = np.asarray(res[1], dtype=np.int64)
        except Exception:  # pragma: no cover - METIS refuses some degenerate graphs
            part = None
    if part is None or part.size != n:
        return np.repeat(np.arange(k), sizes)
    return _repair(A, part, sizes)


def _repair(A: csr_matrix, part: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """Move items from parts over their size to parts under it, fewest internal bytes lost first.

    The bytes from an item to a part are summed over the item's row of ``A`` for the two parts a
    move compares only, for every move of a round at once (O(nonzeros of the giving parts' rows);
    an items x parts matrix was 2 GiB and 20 s for 16,384 hosts cut into 16,384 slots at 131,072
    GPUs, one sparse row slice per move still 4 s).
    """
    k = sizes.size
    part = part.copy()
    for _ in range(4 * k + 4):
        count = np.bincount(part, minlength=k)
        over = np.flatnonzero(count > sizes)
        under = np.flatnonzero(count < sizes)
        if over.size == 0:
            break
        start = part.copy()  # the parts the bytes are counted against in this round
        # the round's moves: each over part gives to the first part still under its size (the
        # targets depend on the counts only, so every move's gains are then computed at once)
        plan = []
        ui = 0
        for p in over.tolist():
            while ui < under.size and count[under[ui]] >= sizes[under[ui]]:
                ui += 1
            if ui >= under.size:
                break
            q = int(under[ui])
            need = min(int(count[p] - sizes[p]), int(sizes[q] - count[q]))
            plan.append((p, q, need))
            count[p] -= need
            count[q] += need
        if not plan:
            break
        src, dst, need = (np.array(x, dtype=np.int64) for x in zip(*plan))
        # members of each giving part at the start of the round, ascending (an over part only loses items)
        by_part = np.argsort(start, kind="stable")
        bounds = np.searchsorted(start[by_part], np.arange(k + 1))
        length = bounds[src + 1] - bounds[src]
        move = np.repeat(np.arange(src.size), length)  # the move of each candidate item
        offset = np.arange(move.size) - np.repeat(np.cumsum(length) - length, length)
        items = by_part[bounds[src][move] + offset]
        rows = A[items]
        row = np.repeat(np.arange(items.size), np.diff(rows.indptr))
        to = start[rows.indices]
        mv = move[row]
        gain = (np.bincount(row, weights=rows.data * (to == dst[mv]), minlength=items.size)
                - np.bincount(row, weights=rows.data * (to == src[mv]), minlength=items.size))
        order = np.lexsort((items, -gain, move))  # per move: best gain, then lowest index
        first = np.cumsum(length) - length
        take = order[(np.arange(order.size) - first[move[order]]) < need[move[order]]]
        part[items[take]] = dst[move[take]]
    return part


def _recurse(A: csr_matrix, slot_levels: np.ndarray, seed: int, bisect: bool = False, deadline=None) -> np.ndarray:
    """Slot of each item: items partitioned level by level (coarsest first) onto the slots' domains.

    ``slot_levels`` has shape (L, S), ``slot_levels[l, s]`` the level-l domain of slot s (level 0
    coarsest); the number of items equals S.  With ``bisect`` a node with more than two children
    is split into two halves of its children (in order) first, Scotch-style dual recursive
    bipartitioning (not at the last level, whose children are single slots); else one k-way cut
    per node.  Once ``deadline`` (a :class:`~rankmap.solver.search.deadline.Deadline`) has passed, the
    nodes left get their items in index order (the stop is recorded on it).  Returns slot per
    item, shape (S,).
    """
    S = slot_levels.shape[1]
    out = np.empty(S, dtype=np.int64)
    stack = [(np.arange(S), np.arange(S), 0)]  # items, slots, level
    while stack:
        items, slots, lvl = stack.pop()
        while lvl < slot_levels.shape[0] and np.unique(slot_levels[lvl, slots]).size == 1:
            lvl += 1
        if lvl >= slot_levels.shape[0] or items.size == 1 or (deadline is not None and deadline.check()):
            out[np.sort(items)] = np.sort(slots)
            continue
        labels = slot_levels[lvl, slots]
        kids, first, inv = np.unique(labels, return_index=True, return_inverse=True)
        order = np.argsort(first, kind="stable")  # children in order of first slot
        rank = np.empty_like(order)
        rank[order] = np.arange(order.size)
        child = rank[inv]
        sub = A[items][:, items]
        if bisect and kids.size > 2 and lvl < slot_levels.shape[0] - 1:
            half = child >= (kids.size + 1) // 2
            part = _metis_parts(sub, np.bincount(half.astype(np.int64), minlength=2), seed)
            stack.append((items[part == 0], slots[~half], lvl))
            stack.append((items[part == 1], slots[half], lvl))
            continue
        sizes = np.bincount(child, minlength=kids.size)
        part = _metis_parts(sub, sizes, seed)
        for c in range(kids.size):
            stack.append((items[part == c], slots[child == c], lvl + 1))
    return out


def _levels_coarse_first(cluster: Cluster, per_host: bool) -> np.ndarray:
    doms = cluster.domains[::-1]  # coarsest first
    if not per_host:
        return doms
    first = cluster.first_device
    keep = [k for k in range(doms.shape[0]) if np.array_equal(doms[k], doms[k][first][cluster.host_of])]
    return doms[keep][:, first]  # (L, H)


def tree_partition_host_order(
    cluster: Cluster, cfg: ParallelConfig, groups, traffic: Mapping[str, float], seed: int = 0, bisect: bool = False,
    deadline=None,
) -> np.ndarray | None:
    """Launcher mode: the host of each node rank (block of G ranks), shape (H,), or None.

    Parameters
    ----------
    traffic : mapping class -> bytes per rank per step (exposure-weighted)
    bisect : bool
        Recursive bisection of each tree node's children instead of one k-way cut (:func:`_recurse`).
    deadline : Deadline, optional
        The solve's wall-clock stop: tree nodes not cut by then keep their items in index order.

    Returns
    -------
    numpy.ndarray of int64 or None
        A permutation of host indices (``host_order[node_rank]``), None when the
        hosts are uneven, pymetis is missing, or the graph is empty or too large.
    """
    gph = cluster.gpus_per_host
    if not cluster.equal_hosts or not available():
        return None
    G = int(gph[0])
    H = gph.size
    if H < 2 or H > PARTITION_MAX_ITEMS:
        return None
    A = _rank_graph(cfg, traffic, groups, G)
    if A is None:
        return None
    levels = _levels_coarse_first(cluster, per_host=True)
    slot = _recurse(A, np.vstack([levels, np.arange(H)[None, :]]), seed, bisect, deadline)
    return slot.astype(np.int64)  # block b -> host slot[b]


def tree_partition_layout(
    cluster: Cluster, cfg: ParallelConfig, groups, traffic: Mapping[str, float], seed: int = 0, bisect: bool = False,
    deadline=None, pairs: str = "ring",
) -> np.ndarray | None:
    """Free mode: the device of each rank, shape (W,), or None (pymetis missing, too large, no traffic).

    ``bisect``: recursive bisection of each tree node's children instead of one k-way cut;
    ``deadline``: as for :func:`tree_partition_host_order`; ``pairs``: the rank graph's edges
    (:data:`PAIR_MODELS`).
    """
    W = cfg.world_size
    if W < 2 or W > PARTITION_MAX_ITEMS or not available() or (pairs == "clique" and W > CLIQUE_MAX_RANKS):
        return None
    A = _rank_graph(cfg, traffic, groups, 1, pairs)
    if A is None:
        return None
    levels = _levels_coarse_first(cluster, per_host=False)
    # hosts are a level too (GPUs of one host stay together), then the GPUs in device order
    host_lv = cluster.host_of[None, :]
    slot = _recurse(A, np.vstack([levels, host_lv, np.arange(W)[None, :]]), seed, bisect, deadline)
    return slot.astype(np.int64)
