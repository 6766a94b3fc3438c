"""Host orders that tile Megatron's rank grid along the fabric tree (launcher-mode proposals).

In launcher mode host ``h`` of the host order runs the rank block ``[bG, (b+1)G)``.
The blocks are the points of a grid: the order's dense axes (``tp cp dp pp``, ep
omitted: it indexes the expert grid) with the innermost ``G`` ranks removed, e.g.
``dp16 × pp4`` for tp8 on 8-GPU hosts.  A switch of the fabric tree (a leaf, a pod)
holds a set of hosts; the bound (:mod:`rankmap.solver.bound.cutbound`) says which shapes of grid box a
domain should hold (a leaf that keeps 4 dp neighbours of one stage, a pod with 8 dp
neighbours × 2 stages: dp rings and pp chains then both cross few boundaries).  This
module enumerates such nested box shapes, one per tree level (the factors of each
level's fan-out over the grid axes), and lays the boxes over the hosts in tree order.

Trees whose levels are uniform (at every depth each switch has the same number of
hosts below it: fat trees, NVL72-style racks) get boxes that fill each switch exactly.
Ragged trees (a fragmented allocation: leaves of 5, 9 and 2 hosts) get boxes of the
median switch's size, the largest the grid allows, laid over consecutive hosts in tree
order: most boxes sit under one switch, some straddle two.
"""

from __future__ import annotations

import itertools
import weakref

import numpy as np

from ..megatron.config import ParallelConfig
from ..fabric.cluster import Cluster

__all__ = ["TILINGS_MAX", "fabric_host_levels", "ragged_host_levels", "block_grid", "tiling_host_orders",
           "domain_packed_host_orders", "node_runs"]

#: At most this many tilings per order (the enumeration is in a fixed order).
TILINGS_MAX = 24


_LEVELS: "weakref.WeakKeyDictionary[Cluster, list | None]" = weakref.WeakKeyDictionary()
_RAGGED: "weakref.WeakKeyDictionary[Cluster, list | None]" = weakref.WeakKeyDictionary()


def fabric_host_levels(cluster: Cluster) -> list[np.ndarray] | None:
    """Switch of each host at each height of the fabric tree, finest first, shape (H,) each; None if not uniform.

    The fabric's forest is rooted anywhere; this re-roots the tree most GPUs attach
    to (the NIC tree, not a host's own NVSwitch) at its centre and walks up from each
    host's first GPU's attachment: its leaf, then pod, and so on.  Levels that hold
    every host, or one host each, are left out; a level is uniform when every switch
    has the same number of hosts below it and every host has the same height.
    Computed once per cluster (every order of a solve asks).
    """
    if cluster not in _LEVELS:
        _LEVELS[cluster] = _host_levels(cluster)
    return _LEVELS[cluster]


def ragged_host_levels(cluster: Cluster) -> list[np.ndarray] | None:
    """As :func:`fabric_host_levels` for trees whose switches hold different numbers of hosts
    (a fragmented allocation: 5, 9 and 2 hosts under three leaves); every host still at the same
    height.  None when the tree is uniform (use :func:`fabric_host_levels`) or has no such levels."""
    if cluster not in _RAGGED:
        _RAGGED[cluster] = None if fabric_host_levels(cluster) is not None else _host_levels(cluster, uniform=False)
    return _RAGGED[cluster]


def _host_levels(cluster: Cluster, uniform: bool = True) -> list[np.ndarray] | None:
    fab = cluster.fabric
    H = len(cluster.hosts)
    N = fab.parent.size
    if H < 2 or N == 0 or fab.att_node.shape[1] == 0:
        return None
    first = cluster.first_device
    att = fab.att_node[first]  # (H, A)
    roots = np.where(att >= 0, fab.anc[np.maximum(att, 0), 0], -1)
    vals, counts = np.unique(roots[roots >= 0], return_counts=True)
    if vals.size == 0:
        return None
    root = vals[np.argmax(counts)]
    pick = np.argmax(roots == root, axis=1)
    if not np.all(roots[np.arange(H), pick] == root):
        return None  # a host outside the main tree
    a = att[np.arange(H), pick]
    adj: list[list[int]] = [[] for _ in range(N)]
    for x in np.flatnonzero((fab.parent >= 0) & (fab.anc[:, 0] == root)).tolist():
        p = int(fab.parent[x])
        adj[x].append(p)
        adj[p].append(x)

    def bfs(src):
        dist = np.full(N, -1, dtype=np.int64)
        par = np.full(N, -1, dtype=np.int64)
        dist[src] = 0
        queue = [src]
        for u in queue:
            for v in adj[u]:
                if dist[v] < 0:
                    dist[v], par[v] = dist[u] + 1, u
                    queue.append(v)
        return dist, par

    d0, _ = bfs(int(a[0]))
    u = int(np.argmax(d0))
    du, pu = bfs(u)
    v = int(np.argmax(du))
    path = [v]
    while path[-1] != u:
        path.append(int(pu[path[-1]]))
    centre = path[len(path) // 2]
    dist, par = bfs(centre)
    height = dist[a]
    if np.unique(height).size != 1:
        return None
    levels: list[np.ndarray] = []
    cur = a.copy()
    for _ in range(int(height[0]) - 1):
        cur = par[cur]
        _, inv, cnt = np.unique(cur, return_inverse=True, return_counts=True)
        if cnt.size in (1, H):
            continue
        if uniform and np.unique(cnt).size != 1:
            return None
        inv = inv.reshape(-1).astype(np.int64)
        if levels and np.unique(levels[-1] * (cnt.size + 1) + inv).size == cnt.size == int(levels[-1].max()) + 1:
            continue  # the same partition as the level below
        levels.append(inv)
    return levels or None


def block_grid(cfg: ParallelConfig, gpus_per_host: int) -> list[tuple[str, int]] | None:
    """Axes of the block grid (innermost first, sizes > 1) of ``cfg``'s order on hosts of ``gpus_per_host``, or None."""
    axes = [(a, int(cfg.sizes.get(a, 1))) for a in cfg.order.split("-") if a != "ep"]
    left = int(gpus_per_host)
    out = []
    for name, n in axes:
        if left >= n:
            if left % n:
                return None
            left //= n
        else:
            if n % left:
                return None
            out.append((name, n // left))
            left = 1
    if left != 1:
        return None
    return [(a, n) for a, n in out if n > 1]


def _factorings(f: int, room: list[int]) -> list[tuple[int, ...]]:
    """Per-axis factors of a fan-out ``f`` (product ``f``, each dividing the axis' room left)."""
    out = []

    def rec(i, left, acc):
        if i == len(room):
            if left == 1:
                out.append(tuple(acc))
            return
        for x in range(1, left + 1):
            if left % x == 0 and room[i] % x == 0:
                rec(i + 1, left // x, acc + [x])

    rec(0, f, [])
    return out


def tiling_host_orders(cluster: Cluster, cfg: ParallelConfig) -> list[np.ndarray]:
    """Host orders (node rank -> host) laying nested grid boxes over the fabric tree (module doc); may be empty."""
    G = int(cluster.gpus_per_host[0])
    H = len(cluster.hosts)
    if not cluster.equal_hosts or cfg.world_size != G * H:
        return []
    levels = fabric_host_levels(cluster)
    ragged = levels is None
    if ragged:
        levels = ragged_host_levels(cluster)
    grid = block_grid(cfg, G)
    if levels is None or not grid or int(np.prod([n for _a, n in grid])) != H:
        return []
    sizes = [n for _a, n in grid]
    if not ragged:
        # hosts per domain, finest level first, and the fan-outs between levels
        per = [H // int(lab.max() + 1) for lab in levels] + [H]
        fan = [per[0]] + [per[i + 1] // per[i] for i in range(len(per) - 1)]
        return _tilings(H, sizes, fan, levels, False)
    # switches of one level hold different numbers of hosts: boxes of the lower quartile's switch size
    # (few straddle two switches) and of the median's, alternately, each the largest the grid allows,
    # laid over consecutive hosts in tree order; the top level takes the rest
    runs = []
    for q in (25, 50):
        fan, below = [], 1
        for lab in levels:
            fan.append(max(1, int(np.percentile(np.bincount(lab), q)) // below))
            below *= fan[-1]
        fan.append(0)
        runs.append(_tilings(H, sizes, fan, levels, True))
    out: list[np.ndarray] = []
    seen: set = set()
    for ho in itertools.chain.from_iterable(itertools.zip_longest(*runs)):  # alternately: a budget may take few
        if ho is not None and ho.tobytes() not in seen:
            seen.add(ho.tobytes())
            out.append(ho)
    return out[:TILINGS_MAX]


def _tilings(H: int, sizes: list[int], fan: list[int], levels: list[np.ndarray], ragged: bool) -> list[np.ndarray]:
    """Host orders of nested boxes over the block grid ``sizes``, level ``i``'s box holding ``fan[i]`` boxes
    of the level below (0: the rest of the grid; ``ragged``: the largest count ≤ ``fan[i]`` the grid
    allows), laid over the hosts in tree order (``levels``: switch of each host, finest first)."""
    order_keys = [np.arange(H)] + levels  # the tree order of hosts: coarsest level primary
    tree_hosts = np.lexsort(order_keys)
    coords = np.stack(np.unravel_index(np.arange(H), sizes[::-1]), axis=1)[:, ::-1]  # block -> (innermost first)

    tilings = [[]]
    room = [list(sizes)]
    for f in fan:
        nxt, nroom = [], []
        for t, r in zip(tilings, room):
            want = int(np.prod(r)) if f == 0 else f
            facs = _factorings(want, r)
            while ragged and not facs and want > 1:  # the largest box of at most ``f`` the grid allows
                want -= 1
                facs = _factorings(want, r)
            for fac in facs:
                nxt.append(t + [fac])
                nroom.append([ri // x for ri, x in zip(r, fac)])
        tilings, room = nxt, nroom
        if len(tilings) > 64 * TILINGS_MAX:
            return []
    out, seen = [], set()
    for t in itertools.islice(tilings, TILINGS_MAX * 4):
        box = np.ones(len(sizes), dtype=np.int64)
        pos = np.zeros(H, dtype=np.int64)
        below = 1  # hosts per box of the level below
        for fac in t:
            fac = np.asarray(fac, dtype=np.int64)
            sub = (coords // box) % fac  # position of the lower box in this level's box, per axis
            idx = np.zeros(H, dtype=np.int64)
            for a in range(len(sizes) - 1, -1, -1):  # innermost axis varies fastest
                idx = idx * fac[a] + sub[:, a]
            pos += idx * below
            below *= int(fac.prod())
            box = box * fac
        if np.unique(pos).size != H:
            continue
        ho = tree_hosts[pos]
        key = ho.tobytes()
        if key not in seen:
            seen.add(key)
            out.append(ho)
        if len(out) >= TILINGS_MAX:
            break
    return out


def node_runs(cluster: Cluster, cfg: ParallelConfig):
    """The runs of the outermost block axis and the hosts' NCCL nodes, for proposals that place whole nodes.

    Returns ``(grid, B, tree, node_of_host)``: the order's block grid (:func:`block_grid`), ``B`` hosts per
    run of its outermost axis, the hosts in depth-first fabric order (shape (H,)) and the NCCL node of each
    of them in that order (shape (H,)); None when the hosts are uneven, there is no NCCL topology, the
    world is not every GPU, the grid does not tile the hosts, or every NCCL node is one host.
    """
    G = int(cluster.gpus_per_host[0]) if len(cluster.gpus_per_host) else 0
    H = len(cluster.hosts)
    topo = cluster.nccl_topology
    if not cluster.equal_hosts or topo is None or cfg.world_size != G * H:
        return None
    grid = block_grid(cfg, G)
    if not grid or int(np.prod([n for _a, n in grid])) != H:
        return None
    from .decompose import dfs_host_order

    tree = dfs_host_order(cluster)
    node_of_host = topo.node_of[cluster.first_device][tree]
    if np.unique(node_of_host).size >= H:
        return None
    return grid, H // int(grid[-1][1]), tree, node_of_host


def domain_packed_host_orders(cluster: Cluster, cfg: ParallelConfig) -> list[np.ndarray]:
    """Host orders that keep whole multi-host NCCL nodes (NVLink domains) inside one block of the outermost axis.

    In launcher mode the outermost axis of the order's block grid (pp in ``tp-cp-ep-dp-pp``) cuts the
    host order into ``outer`` runs of ``B = H / outer`` hosts.  A ring group of an inner axis (edp, dp)
    lives inside one run, and NCCL runs as many channels as its fewest members on one node
    (:func:`rankmap.solver.cost.nccl.ring_flows`): a rack that a run boundary leaves with one or two
    hosts of a run gives every group of that run one channel (an 8,192-GPU NVL72 fragment, tp4 ep8 pp4:
    edp 22 -> 10.4 ms, the launcher order's own runs against packed ones).  The nodes fill each run
    whole where a subset of them sums to ``B`` exactly (subset sum, tree order preferred), else as
    close as possible, the largest remaining node split over the run's end and the next run's start.
    One order; none when the nodes are the hosts, the hosts uneven, or the grid has a single block
    axis.
    """
    runs_of = node_runs(cluster, cfg)
    if runs_of is None or len(runs_of[0]) < 2:
        return []
    grid, B, tree, node_of_host = runs_of
    H = len(cluster.hosts)
    outer = int(grid[-1][1])
    nodes, first, counts = np.unique(node_of_host, return_index=True, return_counts=True)
    if nodes.size < 2:
        return []
    members = {int(n): tree[node_of_host == n] for n in nodes.tolist()}
    left = sorted(members, key=lambda n: int(first[np.searchsorted(nodes, n)]))  # tree order
    runs: list[list[np.ndarray]] = []
    carry = np.zeros(0, dtype=np.int64)  # the hosts of a node split at the previous run's end
    for r in range(outer):
        if carry.size >= B:  # a node larger than a run: its next B hosts make the run
            runs.append([carry[:B]])
            carry = carry[B:]
            continue
        room = B - carry.size
        pick = _exact_fill([members[n].size for n in left], room) if r < outer - 1 else list(range(len(left)))
        run = [carry] + [members[left[i]] for i in pick]
        left = [n for i, n in enumerate(left) if i not in set(pick)]
        got = sum(x.size for x in run)
        carry = np.zeros(0, dtype=np.int64)
        if got < B and left:  # split the largest remaining node: both parts as large as the room allows
            big = max(left, key=lambda n: members[n].size)
            left.remove(big)
            need = B - got
            run.append(members[big][:need])
            carry = members[big][need:]
        runs.append(run)
    order = np.concatenate([np.concatenate(run) for run in runs])
    if order.size != H or np.unique(order).size != H:
        return []
    return [order]


def _exact_fill(sizes: list[int], room: int) -> list[int]:
    """Indices of a subset of ``sizes`` summing to ``room`` exactly if any, else to the most below it
    (subset-sum table over ``room + 1`` sums; the first items preferred)."""
    reach = np.full(room + 1, -1, dtype=np.int64)  # reach[t]: the item that first reached sum t
    reach[0] = len(sizes)
    for i, w in enumerate(sizes):
        if w <= 0 or w > room:
            continue
        new = np.flatnonzero(reach[: room + 1 - w] >= 0)
        new = new[reach[new + w] < 0]
        new = new[reach[new] != i]  # each item once: sums reached before item i only
        reach[new + w] = i
    t = int(np.flatnonzero(reach >= 0).max())
    out = []
    while t > 0:
        i = int(reach[t])
        out.append(i)
        t -= sizes[i]
    return sorted(out)
