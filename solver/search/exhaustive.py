"""Exhaustive search on small clusters: every layout of the mode, scored in bulk (DESIGN §5).

Up to ``EXHAUSTIVE_MAX_DEVICES`` GPUs the searched space is small enough to
enumerate (at most 8! = 40,320 layouts per order), so the optimum of the real
objective (:mod:`rankmap.solver.cost.timemodel`) is proved by enumeration: status OPTIMAL.

Scoring in bulk: for every ordered device pair (d, e) the route of a 1-byte
flow is computed once (:meth:`Fabric.route_loads`), giving its load on every
directed link ``R[d, e, ℓ]``, its per-flow time ``q[d, e]`` and latency.  Each part's
flows are NCCL's for each layout (channels, node order, PXN, all-reduce algorithms and
latency: :func:`~rankmap.solver.cost.collective.part_times`, the time model's own code),
and a layout's flows (s_f, d_f) of ``b_f`` bytes take
``max(max_ℓ Σ_f b_f·R[s_f, d_f, ℓ] / cap_ℓ, max_f b_f·q[s_f, d_f])`` — what
:meth:`Fabric.route_loads` gives the time model for that layout.
"""

from __future__ import annotations

import itertools
from typing import Mapping

import numpy as np

from ..fabric.cluster import Cluster
from ..cost.collective import part_times
from ..cost.timemodel import class_groups
from ..traffic import TRAFFIC_CLASSES, class_collectives
from .constraints import satisfies_batch
from .problem import REL_TOL, Candidate, Problem

__all__ = ["EXHAUSTIVE_MAX_DEVICES", "PairRoutes", "enumerate_layouts", "bulk_cost", "exhaustive_search"]

#: Clusters up to this many GPUs are searched exhaustively.
EXHAUSTIVE_MAX_DEVICES = 8
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
        self.cluster = cluster


def enumerate_layouts(cluster: Cluster, mode: str) -> np.ndarray:
    """Every layout of a mode as device-per-rank rows, shape (L, n), baseline first.

    ``free``: all n! bijections; ``launcher``: host order × each host's local
    GPU order (blocks of G_h consecutive ranks on host h, G_h its GPUs: torchrun's
    ``--nproc-per-node`` per host); ``fixed``: the baseline.
    """
    n = cluster.num_devices
    if mode == "fixed":
        return np.arange(n, dtype=np.int64)[None, :]
    if mode == "free":
        return np.array(list(itertools.permutations(range(n))), dtype=np.int64)
    hdev = cluster.host_devices
    H = len(hdev)
    # each host's local GPU orders (hosts of different sizes: their own G_h! orders)
    local = [hdev[h][np.array(list(itertools.permutations(range(hdev[h].size))), dtype=np.int64)] for h in range(H)]
    out = []
    for horder in itertools.permutations(range(H)):
        blocks = [local[h] for h in horder]  # each (G_h!, G_h)
        for combo in itertools.product(*(range(b.shape[0]) for b in blocks)):
            out.append(np.concatenate([blocks[i][c] for i, c in enumerate(combo)]))
    return np.array(out, dtype=np.int64).reshape(-1, n)


def _table_timer(routes: PairRoutes, L: int):
    """A :data:`~rankmap.solver.cost.collective.Timer` over ``L`` layouts from the per-pair table: per layout,
    ``max(max link load / rate, slowest flow)`` and the largest route latency (no bottleneck objects)."""

    def timer(batches, _record):
        load = np.zeros((L, routes.inv_cap.size))
        per_flow = np.zeros(L)
        lat = np.zeros(L)
        for src, dst, b, seg in batches:
            b = np.broadcast_to(np.asarray(b, dtype=float), np.shape(src))
            keep = (src != dst) & (b > 0)
            src, dst, b, seg = src[keep], dst[keep], b[keep], np.asarray(seg)[keep]
            if not src.size:
                continue
            r = routes.R[src, dst] * b[:, None]  # (F, L')
            for j in range(r.shape[1]):
                load[:, j] += np.bincount(seg, weights=r[:, j], minlength=L)
            np.maximum.at(per_flow, seg, routes.q[src, dst] * b)
            np.maximum.at(lat, seg, routes.lat[src, dst])
        link_t = (load * routes.inv_cap).max(axis=1) if load.shape[1] else np.zeros(L)
        return np.maximum(link_t, per_flow), lat, None

    return timer


def bulk_cost(
    routes: PairRoutes, cfg, groups, traffic: Mapping[str, float], layouts: np.ndarray,
    exposure: Mapping[str, float] | None = None, deadline=None,
) -> np.ndarray:
    """Predicted communication time (seconds) of each layout row, shape (L,): exactly
    :func:`~rankmap.solver.cost.timemodel.layout_cost`'s total (the same
    :func:`~rankmap.solver.cost.collective.part_times`, timed from the pair table).

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
    cluster = routes.cluster
    total = np.zeros(layouts.shape[0])
    parts = []
    for c in TRAFFIC_CLASSES:
        arr = fam[c] - cfg.rank_offset
        if arr.shape[1] <= 1:
            continue
        for part in class_collectives(traffic, c):
            parts.append((part, arr, float(exposure.get(c, 1.0))))
    for lo in range(0, layouts.shape[0], _CHUNK):
        if deadline is not None and deadline.check():
            total[lo:] = np.inf
            break
        P = layouts[lo:lo + _CHUNK]
        timer = _table_timer(routes, P.shape[0])
        for part, arr, x in parts:
            pt = part_times(cluster, part, arr, P, timer)
            if pt is not None:
                total[lo:lo + _CHUNK] += x * pt.seconds
    return total


def exhaustive_search(p: Problem) -> tuple[list[Candidate], int]:
    """Best layout of every order by enumeration (small clusters, or fixed mode).

    Returns (candidates, orders reached); when ``p.deadline`` stops it, the
    orders scored so far (and the best fully scored layouts of a partly scored
    order) are kept and the stop is recorded on the deadline.
    """
    deadline, orders = p.deadline, p.orders
    if p.options.mode == "fixed":
        out = []
        for idx in range(len(orders)):
            if deadline.check():
                return out, idx
            cand = p.candidate(idx, p.baseline_dev)
            if cand is not None:
                out.append(cand)
        return out, len(orders)
    if deadline.check():
        return [], 0
    routes = PairRoutes(p.cluster)
    layouts = enumerate_layouts(p.cluster, p.options.mode)
    changes = (layouts != p.baseline_dev[None, :]).sum(axis=1)
    out = []
    for idx, ocfg in enumerate(orders):
        if deadline.check():
            return out, idx
        groups = p.groups(idx)
        ok = satisfies_batch(p.cluster, ocfg, groups, layouts, p.constraints) if p.constraints else None
        cost = bulk_cost(routes, ocfg, groups, p.traffic, layouts, p.exposure, deadline)
        if not np.isfinite(cost).any():
            return out, idx
        if ok is not None:
            if not ok.any():
                continue
            cost = np.where(ok, cost, np.inf)
        lo = float(cost.min())
        if not np.isfinite(lo):
            continue  # stopped before any layout allowed by the constraints was scored
        tied = np.flatnonzero(cost <= lo + REL_TOL * max(lo, 1e-30))
        pick = int(tied[np.argmin(changes[tied])])  # fewest changes; first enumerated on ties
        dev = layouts[pick].copy()
        out.append(Candidate(ocfg, dev, p.score(ocfg, dev, groups), idx))
    return out, len(orders)
