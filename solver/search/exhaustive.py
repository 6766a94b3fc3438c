"""Exhaustive screen on small clusters: every layout of the mode, scored in bulk (DESIGN §5).

Up to ``EXHAUSTIVE_MAX_DEVICES`` GPUs the searched space is small enough to
enumerate (at most 8! = 40,320 layouts per order).  The bulk score is the single-ring
formula below (one ring in rank order, direct routes, the graph's per-hop latency): the
real objective (:mod:`rankmap.solver.cost.timemodel`) runs collectives as NCCL does
(channels, node order, PXN, algorithms, latency), which depends on the layout in ways a
per-pair table cannot hold, so the search scores the screen's best
``EXHAUSTIVE_RESCORE`` layouts of each order exactly and keeps the best; OPTIMAL then
needs the lower bound.

Scoring in bulk: for every ordered device pair (d, e) the route of a 1-byte
flow is computed once (:meth:`Fabric.route_loads`), giving its load on every
directed link ``R[d, e, ℓ]``, its per-flow time ``q[d, e]`` and latency.  A
class with flows (src_f, dst_f) of ``b`` bytes then costs, for each layout p,
``max(max_ℓ b·Σ_f R[p(src_f), p(dst_f), ℓ] / cap_ℓ, max_f b·q[p(src_f), p(dst_f)])
+ steps·max_f lat[…]`` — the same formula as :func:`~rankmap.solver.cost.timemodel.class_time`.
"""

from __future__ import annotations

import itertools
from typing import Mapping

import numpy as np

from ..fabric.cluster import Cluster
from ..cost.timemodel import class_groups, collective_steps, part_flows
from ..traffic import TRAFFIC_CLASSES, class_collectives

__all__ = ["EXHAUSTIVE_MAX_DEVICES", "EXHAUSTIVE_RESCORE", "PairRoutes", "enumerate_layouts", "bulk_cost"]

#: Clusters up to this many GPUs are searched exhaustively.
EXHAUSTIVE_MAX_DEVICES = 8
#: Layouts of the screen scored exactly per order.
EXHAUSTIVE_RESCORE = 24
_CHUNK = 2048


class PairRoutes:
    """Per ordered device pair: link loads of a 1-byte flow, per-flow seconds per byte, latency.

    Attributes
    ----------
    R : numpy.ndarray, shape (n, n, L')
        Bytes on each used directed link per byte sent from d to e.
    q : numpy.ndarray, shape (n, n)
        Seconds per byte of the flow alone (1 / (ECMP parts · B(route)) / 1e9).
    lat : numpy.ndarray, shape (n, n)
        Route latency, seconds.
    inv_cap : numpy.ndarray, shape (L',)
        Seconds per byte of each used link (1 / capacity).
    """

    def __init__(self, cluster: Cluster):
        n = cluster.num_devices
        fab = cluster.fabric
        cap = fab.capacities_gbps()
        rows = np.zeros((n, n, cap.size))
        self.q = np.zeros((n, n))
        self.lat = np.zeros((n, n))
        for d in range(n):
            for e in range(n):
                if d == e:
                    continue
                ll = fab.route_loads(np.array([d]), np.array([e]), 1.0)
                rows[d, e] = ll.load_bytes
                self.q[d, e] = ll.max_flow_seconds
                self.lat[d, e] = ll.max_latency_seconds
        used = np.flatnonzero(rows.reshape(-1, cap.size).any(axis=0))
        self.R = rows[:, :, used]
        self.inv_cap = 1.0 / (cap[used] * 1e9)


def enumerate_layouts(cluster: Cluster, mode: str) -> np.ndarray:
    """Every layout of a mode as device-per-rank rows, shape (L, n), baseline first.

    ``free``: all n! bijections; ``launcher``: host order × each host's local
    GPU order (blocks of G consecutive ranks per host); ``fixed``: the baseline.
    """
    n = cluster.num_devices
    if mode == "fixed":
        return np.arange(n, dtype=np.int64)[None, :]
    if mode == "free":
        return np.array(list(itertools.permutations(range(n))), dtype=np.int64)
    hdev = cluster.host_devices
    H = len(hdev)
    G = hdev[0].size
    local = np.array(list(itertools.permutations(range(G))), dtype=np.int64)  # (G!, G)
    out = []
    for horder in itertools.permutations(range(H)):
        blocks = [hdev[h][local] for h in horder]  # each (G!, G)
        for combo in itertools.product(range(local.shape[0]), repeat=H):
            out.append(np.concatenate([blocks[i][c] for i, c in enumerate(combo)]))
    return np.array(out, dtype=np.int64).reshape(-1, n)


def bulk_cost(
    routes: PairRoutes, cfg, groups, traffic: Mapping[str, float], layouts: np.ndarray,
    exposure: Mapping[str, float] | None = None, deadline=None,
) -> np.ndarray:
    """Predicted communication time (seconds) of each layout row, shape (L,).

    Layouts are scored in chunks of ``_CHUNK`` rows; once ``deadline`` (a
    :class:`~rankmap.solver.search.deadline.Deadline`) has passed, the rows not scored
    yet are ``inf`` and the stop is recorded on the deadline.

    Raises
    ------
    SolveCancelled
        If ``deadline.cancel`` is set.
    """
    exposure = dict(exposure or {})
    fam = class_groups(cfg, groups)
    total = np.zeros(layouts.shape[0])
    phases = []
    for c in TRAFFIC_CLASSES:
        arr = fam[c] - cfg.rank_offset
        if arr.shape[1] <= 1:
            continue
        for part in class_collectives(traffic, c):
            batches = list(part_flows(part, arr))
            if not batches:
                continue
            src = np.concatenate([f[0] for f in batches])
            dst = np.concatenate([f[1] for f in batches])
            fb = np.concatenate([np.full(f[0].shape[0], f[2]) for f in batches])
            steps = collective_steps(part.kind, part.size or arr.shape[1])
            phases.append((src, dst, fb, steps, float(exposure.get(c, 1.0))))
    for lo in range(0, layouts.shape[0], _CHUNK):
        if deadline is not None and deadline.check():
            total[lo:] = np.inf
            break
        P = layouts[lo:lo + _CHUNK]
        for src, dst, fb, steps, x in phases:
            ds, dd = P[:, src], P[:, dst]
            load = (routes.R[ds, dd] * fb[None, :, None]).sum(axis=1)  # (l, L')
            link_t = (load * routes.inv_cap).max(axis=1) if load.shape[1] else np.zeros(P.shape[0])
            per_flow = (routes.q[ds, dd] * fb[None, :]).max(axis=1)
            lat = routes.lat[ds, dd].max(axis=1) * steps
            total[lo:lo + _CHUNK] += x * (np.maximum(link_t, per_flow) + lat)
    return total
