"""Experiment: pipeline stages on multi-host NCCL nodes and leaf switches, a CP-SAT model of host counts.

Not part of the solver (yet): with ``interleave_search`` its deterministic limit does not bound the
work (``--det 0.5`` ran 3.2 deterministic seconds, 7-9 s of wall clock), so it does not fit a 6 s
solve.  It shows what rankmap's launcher search misses on fragmented NVL72 racks::

    python benchmarks/stage_cells.py            # nvl72-frag-512 tp4 pp8 gpt-24l-4096

prints the model's layout cost (21.74 ms at ``--det 1``) beside rankmap's 6 s launcher answer
(23.58 ms, from the stage-pair host orders of ``solver/search/stagepairs.py``, which follow this
model's solution shape without a solver; 26.63 ms before them) and the solve's lower bound (20.47 ms).

Launcher mode cuts the host order into ``pp`` runs of ``B`` hosts when ``pp`` is the outermost
axis of the order (``tp-cp-ep-dp-pp``): run ``s`` is pipeline stage ``s`` and position ``j`` of
every run holds the same inner coordinates, so host ``j`` of stage ``s`` exchanges the pipeline
sends with host ``j`` of stages ``s ± 1`` and the embedding all-reduce with host ``j`` of the
other end stage.  On racks that are one NCCL node each (GB200 NVL72: the rack's NVLink domain,
NICs on leaf switches with oversubscribed uplinks) three things decide the time, and no
host-level proposal sees them together:

* a stage split over several nodes sends its data-parallel rings out of every node piece
  (``a`` bytes per piece, one ring flow per group and channel), and NCCL runs as many channels as
  the group's fewest members on one node (``src/init.cc``), so a small piece caps the ring;
* a pipeline or embedding pair on one node moves over NVLink, one on two nodes loads the leaves'
  uplinks;
* the uplink of a leaf carries the pieces and pairs of every stage on it.

Hosts are grouped into *cells* (same NCCL node, same leaf switch).  The first model chooses how
many hosts of each stage each cell holds and how many position-matched pairs of adjacent stages
(and of the two end stages) each node keeps, minimising the sum over the three classes of the
busiest leaf's bytes over its uplink capacity (a split stage's piece counted on every leaf it
touches), and the data-parallel per-flow floor of the smallest piece
(``fb / (piece hosts · members per host · NIC rate)``).  The second gives each stage's positions
to cells so that the matches are met.  Both are CP-SAT (8 subsolvers interleaved on one thread).
"""

from __future__ import annotations

from typing import Mapping

import numpy as np

from rankmap.solver.cost.collective import flow_bytes
from rankmap.solver.fabric.cluster import Cluster
from rankmap.solver.megatron.config import ParallelConfig
from rankmap.solver.search.tiling import block_grid


#: Largest number of cells (node x leaf) and stages x cells the model takes.
STAGE_CELLS_MAX = 256
STAGE_VARS_MAX = 4096
#: Time unit of the model's integer times, seconds.
_UNIT = 1e-6
#: Piece sizes (hosts) below which the ring's channel floor is modelled.
THRESHOLD_HOSTS = 4
#: CP-SAT subsolvers interleaved on one thread (``interleave_search``).
INTERLEAVED_WORKERS = 8


def host_cells(cluster: Cluster) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """Each host's cell: (node id, leaf id, leaf uplink GB/s) arrays of shape (hosts,), or None.

    The node is the host's NCCL node (:attr:`~rankmap.solver.fabric.rails.NcclTopology.node_of`);
    the leaf is, in the switch forest tree of the host's first GPU that reaches the most hosts (the
    NIC fabric, not the NVLink switch of the rack), the lowest node above that GPU whose subtree
    holds GPUs of more than one host; its uplink is the node's link to its parent (``inf`` at a
    root).  None without a fabric or NCCL topology.
    """
    fab = cluster.fabric
    topo = cluster.nccl_topology
    if fab is None or topo is None:
        return None
    H = len(cluster.hosts)
    first = cluster.first_device
    att = np.asarray(fab.att_node)
    anc = np.asarray(fab.anc)
    N = anc.shape[0]
    # hosts below each forest node: (node, host) pairs over every GPU's attachments and their ancestors
    pairs = []
    for a in range(att.shape[1]):
        ok = att[:, a] >= 0
        nodes = anc[att[ok, a]]  # (m, D+1), -1 padded
        hosts = np.repeat(cluster.host_of[ok], nodes.shape[1])
        flat = nodes.ravel()
        keep = flat >= 0
        pairs.append(np.stack([flat[keep], hosts[keep]], axis=1))
    if not pairs:
        return None
    pr = np.unique(np.concatenate(pairs), axis=0)
    hosts_below = np.bincount(pr[:, 0], minlength=N)
    leaf = np.full(H, -1, dtype=np.int64)
    for h in range(H):
        d = int(first[h])
        best, reach = -1, -1
        for a in att[d]:
            if a < 0:
                continue
            chain = anc[int(a)]
            root = int(chain[chain >= 0][0])  # anc: the ancestor at each depth, root first
            if hosts_below[root] > reach:
                reach, best = int(hosts_below[root]), int(a)
        if best < 0:
            return None
        chain = anc[best]
        chain = chain[chain >= 0][::-1]  # the attachment itself first, up to the root
        multi = chain[hosts_below[chain] > 1]
        leaf[h] = int(multi[0]) if multi.size else int(chain[-1])
    # a leaf's uplink: the tree links from it towards other leaves' hosts (the forest may be rooted at a leaf:
    # its spine is then its child)
    parent = np.asarray(fab.parent)
    up_gbps = np.asarray(fab.up_gbps, dtype=float)
    up = np.zeros(H)
    for x in np.unique(leaf).tolist():
        own = np.zeros(H, dtype=bool)
        own[leaf == x] = True
        other_below = np.bincount(pr[~own[pr[:, 1]], 0], minlength=N)  # hosts not on leaf x below each node
        cap = sum(float(up_gbps[y]) for y in np.flatnonzero(parent == x).tolist() if other_below[y] > 0)
        if parent[x] >= 0 and int((~own).sum()) > int(other_below[x]):
            cap += float(up_gbps[x])
        up[leaf == x] = cap if cap > 0 else np.inf
    node = np.asarray(topo.node_of)[first]
    return node.astype(np.int64), leaf, up.astype(float)


def _weights(cluster: Cluster, cfg: ParallelConfig, traffic: Mapping[str, float], groups: Mapping[str, np.ndarray],
             G: int, B: int):
    """The model's byte weights from the order's groups: (bytes a split stage's piece sends out of its node,
    [(ring flow bytes, members per host)] of the stage's ring parts, bytes a host sends to one pipeline
    neighbour, bytes a host sends to its embedding partner)."""
    from rankmap.solver.traffic import CLASS_GROUP, TRAFFIC_CLASSES, class_collectives, subgroups

    pp = cfg.pp
    stage = np.arange(cfg.world_size) // G // B
    split = 0.0
    rings: list[tuple[float, float]] = []
    w_pp = w_emb = 0.0
    for c in TRAFFIC_CLASSES:
        arr = groups.get(CLASS_GROUP[c])
        if arr is None:
            continue
        for part in class_collectives(traffic, c):
            rows = subgroups(np.asarray(arr), part)
            k = rows.shape[1]
            if k < 2:
                continue
            fb = flow_bytes(part.kind, part.payload_bytes, k)
            st = stage[rows]
            blk = rows // G
            if (st == st[:, :1]).all():
                leaving = int((blk != blk[:, :1]).any(axis=1).sum()) / pp  # groups per stage over several hosts
                if leaving == 0:
                    continue
                split += leaving * (fb * (k - 1) if part.kind == "all_to_all" else fb)
                if part.kind in ("all_reduce", "all_gather", "ring_p2p"):
                    rings.append((fb, k / len(np.unique(blk[0]))))
            elif part.kind == "p2p_chain" and k == pp:
                w_pp += G * fb
            elif k == 2 and set(np.unique(st).tolist()) == {0, pp - 1}:
                w_emb += G * fb
    return split, rings, w_pp, w_emb


def stage_cell_host_orders(cluster: Cluster, cfg: ParallelConfig, traffic: Mapping[str, float],
                           groups: Mapping[str, np.ndarray], det_limit: float, seed: int = 0,
                           deadline=None, hints: list | None = None) -> list[np.ndarray]:
    """Host orders of the stage-cell models (module doc): a list of at most one array of host indices, shape (H,).

    ``det_limit``: CP-SAT deterministic time of the two models together (seconds, nominal); ``hints``: host
    orders (arrays of shape (H,)) whose stage counts per cell start the first model (the first one);
    ``deadline``: the solve's wall-clock stop (the models are capped by it).  Empty when the order's
    outermost block axis is not ``pp``, the hosts are uneven, no NCCL node spans two hosts, the model
    would be too large (``STAGE_CELLS_MAX``, ``STAGE_VARS_MAX``) or finds nothing in its budget.
    """
    from ortools.sat.python import cp_model

    G = int(cluster.gpus_per_host[0]) if len(cluster.gpus_per_host) else 0
    H = len(cluster.hosts)
    pp = int(cfg.pp)
    if not cluster.equal_hosts or pp < 2 or cfg.world_size != G * H or H % pp:
        return []
    grid = block_grid(cfg, G)
    if not grid or grid[-1] != ("pp", pp):
        return []
    B = H // pp
    cells_of = host_cells(cluster)
    if cells_of is None or B < 2:
        return []
    node, leaf, up = cells_of
    if np.unique(node).size >= H:
        return []  # every NCCL node one host: nothing for the model to keep together
    from rankmap.solver.search.decompose import dfs_host_order

    tree = dfs_host_order(cluster)
    keys = sorted({(int(node[h]), int(leaf[h])) for h in range(H)})
    cell_id = {k: i for i, k in enumerate(keys)}
    C = len(keys)
    if C > STAGE_CELLS_MAX or pp * C * B > STAGE_VARS_MAX * 8 or pp * C > STAGE_VARS_MAX:
        return []
    hosts = [[] for _ in range(C)]
    for h in tree.tolist():
        hosts[cell_id[(int(node[h]), int(leaf[h]))]].append(h)
    size = [len(x) for x in hosts]
    nodes = sorted({k[0] for k in keys})
    leaves = sorted({k[1] for k in keys})
    cells_in_node = {n: [i for i, k in enumerate(keys) if k[0] == n] for n in nodes}
    cells_in_leaf = {x: [i for i, k in enumerate(keys) if k[1] == x] for x in leaves}
    cap = {x: float(up[leaf == x][0]) for x in leaves}
    split_bytes, rings, w_pp, w_emb = _weights(cluster, cfg, traffic, groups, G, B)
    if split_bytes <= 0 and w_pp <= 0 and w_emb <= 0:
        return []
    nic = cluster.nccl_topology.nic_gbps
    nic = float(nic[nic > 0].min()) if np.any(nic > 0) else 0.0

    def ticks(seconds: float) -> int:
        return int(round(seconds / _UNIT))

    m = cp_model.CpModel()
    y = {(s, c): m.NewIntVar(0, size[c], "") for s in range(pp) for c in range(C)}
    yb = {(s, c): m.NewBoolVar("") for s in range(pp) for c in range(C)}
    for c in range(C):
        m.Add(sum(y[s, c] for s in range(pp)) == size[c])
        for s in range(pp):
            m.Add(y[s, c] <= size[c] * yb[s, c])
            m.Add(y[s, c] >= yb[s, c])
    x = {(s, n): sum(y[s, c] for c in cells_in_node[n]) for s in range(pp) for n in nodes}
    whole = {}
    for s in range(pp):
        m.Add(sum(y[s, c] for c in range(C)) == B)
        for n in nodes:
            if sum(size[c] for c in cells_in_node[n]) >= B:
                whole[s, n] = w = m.NewBoolVar("")
                m.Add(x[s, n] == B).OnlyEnforceIf(w)
                m.Add(x[s, n] <= B - 1).OnlyEnforceIf(w.Not())
    split = {s: m.NewBoolVar("") for s in range(pp)}
    for s in range(pp):
        m.Add(split[s] + sum(whole.get((s, n), 0) for n in nodes) == 1)
    t_split, t_pp, t_emb = (m.NewIntVar(0, 1 << 40, "") for _ in range(3))
    finite = [x_ for x_ in leaves if np.isfinite(cap[x_]) and cap[x_] > 0]
    for x_ in finite:  # a split stage's piece on a leaf: its rings leave through the leaf's uplink
        on = []
        for s in range(pp):
            q = m.NewBoolVar("")
            for c in cells_in_leaf[x_]:
                m.Add(q >= yb[s, c] + split[s] - 1)
            on.append(q)
        if split_bytes > 0:
            m.Add(t_split >= ticks(split_bytes / (cap[x_] * 1e9)) * sum(on))
    if rings and nic > 0:  # the fewest hosts of a split stage on one node cap its ring's channels
        for s in range(pp):
            for n in nodes:
                present = m.NewBoolVar("")
                m.Add(x[s, n] >= 1).OnlyEnforceIf(present)
                m.Add(x[s, n] == 0).OnlyEnforceIf(present.Not())
                for k in range(1, min(B, THRESHOLD_HOSTS) + 1):
                    floor = max(fb / (k * mph * nic * 1e9) for fb, mph in rings)
                    small = m.NewBoolVar("")
                    m.Add(x[s, n] <= k).OnlyEnforceIf(small)
                    m.Add(x[s, n] >= k + 1).OnlyEnforceIf(small.Not())
                    m.Add(t_split >= ticks(floor)).OnlyEnforceIf([present, small, split[s]])
    pairs = [(s, s + 1) for s in range(pp - 1)]
    ends = len(pairs)
    if pp > 2:
        pairs.append((pp - 1, 0))
    else:
        ends = 0
    e = {}
    f = {}
    for i, (a, b) in enumerate(pairs):
        for n in nodes:
            for c in cells_in_node[n]:
                e[i, c] = m.NewIntVar(0, size[c], "")
                f[i, c] = m.NewIntVar(0, size[c], "")
                m.Add(e[i, c] <= y[a, c])
                m.Add(f[i, c] <= y[b, c])
            m.Add(sum(e[i, c] for c in cells_in_node[n]) == sum(f[i, c] for c in cells_in_node[n]))
    for x_ in finite:
        cs = cells_in_leaf[x_]
        if w_pp > 0:
            cross = sum(y[s, c] * (1 if s in (0, pp - 1) else 2) for s in range(pp) for c in cs) - sum(
                e[i, c] + f[i, c] for i in range(pp - 1) for c in cs)
            m.Add(t_pp >= 0)
            m.Add(t_pp * 1000 >= ticks(w_pp / (cap[x_] * 1e9) * 1000) * cross)
        if w_emb > 0:
            cross = sum(y[0, c] + y[pp - 1, c] - e[ends, c] - f[ends, c] for c in cs)
            m.Add(t_emb * 1000 >= ticks(w_emb / (cap[x_] * 1e9) * 1000) * cross)
    m.Minimize(t_split + t_pp + t_emb)
    for ho in (hints or [])[:1]:
        cnt = np.zeros((pp, C), dtype=np.int64)
        cell_of_host = np.array([cell_id[(int(node[h]), int(leaf[h]))] for h in range(H)])
        np.add.at(cnt, (np.arange(H) // B, cell_of_host[np.asarray(ho)]), 1)
        for (s, c), v in y.items():
            m.AddHint(v, int(cnt[s, c]))
            m.AddHint(yb[s, c], int(cnt[s, c] > 0))
    first = _solve(m, det_limit / 2, seed, deadline)
    if first is None:
        return []
    Y = {k: first.Value(v) for k, v in y.items()}
    # positions: stage s's B positions over its cells, adjacent stages' positions matched on nodes
    m2 = cp_model.CpModel()
    z = {(s, c, j): m2.NewBoolVar("") for s in range(pp) for c in range(C) if Y[s, c] for j in range(B)}
    for s in range(pp):
        for j in range(B):
            m2.AddExactlyOne(z[s, c, j] for c in range(C) if Y[s, c])
        for c in range(C):
            if Y[s, c]:
                m2.Add(sum(z[s, c, j] for j in range(B)) == Y[s, c])
    gain = []
    for i, (a, b) in enumerate(pairs):
        w = w_emb if (pp > 2 and i == ends) else w_pp + (w_emb if pp == 2 else 0.0)
        if w <= 0:
            continue
        for n in nodes:
            ca = [c for c in cells_in_node[n] if Y[a, c]]
            cb = [c for c in cells_in_node[n] if Y[b, c]]
            if not ca or not cb:
                continue
            for j in range(B):
                v = m2.NewBoolVar("")
                m2.Add(v <= sum(z[a, c, j] for c in ca))
                m2.Add(v <= sum(z[b, c, j] for c in cb))
                gain.append((v, w))
    if gain:
        top = max(w for _v, w in gain)
        m2.Maximize(sum(v * max(1, int(round(1000 * w / top))) for v, w in gain))
    second = _solve(m2, det_limit / 2, seed, deadline)
    if second is None:
        return []
    order = np.empty(H, dtype=np.int64)
    nxt = [0] * C
    for s in range(pp):
        for j in range(B):
            c = next(c for c in range(C) if Y[s, c] and second.Value(z[s, c, j]))
            order[s * B + j] = hosts[c][nxt[c]]
            nxt[c] += 1
    return [order] if np.unique(order).size == H else []


def _solve(model, det_limit: float, seed: int, deadline):
    """One CP-SAT worker within ``det_limit`` deterministic seconds (the deadline's time left as the wall-clock
    cap, :func:`~.cpsat._wall_cap`); the solver, or None when it found nothing or the wall clock cut it."""
    from ortools.sat.python import cp_model

    from rankmap.solver.search.cpsat import _wall_cap, _wall_stopped

    det_limit = max(0.01, float(det_limit))
    solver = cp_model.CpSolver()
    # several subsolvers (LNS among them) interleaved on one thread: deterministic, and far better on these
    # min-max models than the single default search
    solver.parameters.num_workers = INTERLEAVED_WORKERS
    solver.parameters.interleave_search = True
    solver.parameters.random_seed = int(seed)
    solver.parameters.max_deterministic_time = det_limit
    solver.parameters.max_time_in_seconds = max(0.01, _wall_cap(deadline, det_limit))
    status = solver.Solve(model)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE) or _wall_stopped(solver, status, det_limit, deadline):
        return None  # a wall-clock cut answer would depend on the machine's load
    return solver


def main(argv=None) -> int:
    """Run the model on one bench_quality instance and print its layout's cost beside rankmap's."""
    import argparse
    import sys
    import time
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from quality_instances import instances, traffic_for

    from rankmap.solver import SolveOptions, cluster_from_graph, layout_cost, parallel_config, solve
    from rankmap.solver.megatron.catalogue import megatron_groups

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--instance", default="nvl72-frag-512|tp4 pp8|gpt-24l-4096")
    ap.add_argument("--det", type=float, default=1.0, help="CP-SAT deterministic seconds (both models)")
    a = ap.parse_args(argv)
    inst = next(i for i in instances(False) if i.name == a.instance)
    graph = inst.spec.build()
    cluster = cluster_from_graph(graph)
    cfg = parallel_config(cluster.num_devices, **inst.sizes)
    traffic = traffic_for(inst.mix, cfg)
    r = solve(cluster, cfg, traffic, SolveOptions(mode="launcher", orders="all", time_limit_seconds=6))
    ocfg = cfg.with_order("tp-cp-ep-dp-pp")
    t0 = time.perf_counter()
    from rankmap.solver.search.deadline import Deadline

    # a generous wall clock: the deterministic limit decides (it is not a bound on the work, see above)
    ho = stage_cell_host_orders(cluster, ocfg, traffic, megatron_groups(ocfg), a.det, deadline=Deadline(600.0))
    dt = time.perf_counter() - t0
    print(f"{a.instance}: rankmap launcher (6 s) {r.cost.total_seconds * 1e3:.3f} ms, bound {r.bound_seconds * 1e3:.3f} ms")
    if not ho:
        print(f"stage-cell model: no layout ({dt:.1f} s)")
        return 1
    dev = np.concatenate([np.asarray(cluster.host_devices[h]) for h in ho[0]])
    c = layout_cost(cluster, ocfg, dev, traffic)
    parts = ", ".join(f"{k} {v.seconds * 1e3:.3f}" for k, v in c.classes.items() if v.seconds)
    print(f"stage-cell model ({a.det} det s, {dt:.1f} s wall): {c.total_seconds * 1e3:.3f} ms ({parts})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
