"""Stage-split domain cuts: a domain's ranks fall into pipeline stages (DESIGN §5; used by :mod:`.analytic`).

Notation of :mod:`.cutbound`.  Every group of a class other than the pipeline (tp, cp, dp, ep,
etp, edp: the lines of both rank grids off the ``pp`` axis) lies inside one pipeline *stage*
(the ranks at one position ``j`` of their pipeline chains, ``W/P`` of them, ``P = pp``).  A
domain ``D`` of ``m`` ranks is therefore cut by the stages into parts ``D_j`` of ``m_j`` ranks
(``Σ_j m_j = m``, ``m_j ≤ W/P``), and a group of such a class split by ``D`` is split by exactly
one part, inside its stage.  So, per part of a class with own floor ``F`` and cut time
``X_j`` of stage part ``j`` (the bytes its groups split by ``D_j`` send out of ``D`` over
``C_D``, the same links for every part), the part takes at least
``max(F, Σ_j X_j) ≥ Σ_j max(F, X_j) − (q − 1)·F`` over the ``q`` nonempty stage parts (induction
on ``max(F, a + b) ≥ max(F, a) + max(F, b) − F`` for ``a, b ≥ 0``), and ``≥ Σ_j X_j``.  Summed over
the classes, the classes off the pipeline axis take at least
``V = max(F_Σ + Σ_j Δ(m_j), Σ_j Φ(m_j))`` with ``F_Σ`` their floors' sum, ``Δ(x) = Σ_grids
max(0, Ψ(x) − F_grid)`` where ``Ψ(x)`` is the joint cut bound of one domain of ``x`` ranks of one
stage (:func:`~rankmap.solver.bound.gridcut.domain_grid_bound` on the stage's grids ``tp × cp × dp``
and ``etp × ep × edp``, each part's term ``max(F, g·s)``, ``g`` its seconds per split group out of
``D``; a stage holds ``(W/P)/k`` groups of each class), and ``Φ(x)`` the same without the floors
(terms ``g·s``).  Both start at each class's own least splits and are made exact for the part
sizes the least combination below uses (:class:`.stageshapes._Tables`): lower bounds all along.

The pipeline and embedding classes see the stage counts directly: each chain has one edge
between stages ``j`` and ``j + 1``; at least ``|m_j − m_{j+1}|`` of them have one end in ``D``
and send a flow out of it (pipeline flows run both ways), so the chain parts take at least
``Σ max(F, g·X)`` with ``X = Σ_j |m_j − m_{j+1}|``; the embedding pairs (first and last stage of
each chain, ``P ≥ 3``) with one rank in ``D`` number at least ``Y = |m_0 − m_{P−1}|``.

Which domains.  The end stages hold ``2W/P`` ranks, so over a level of ``n`` domains (all GPUs
used) some domain ``D+`` holds at least ``⌈2W/(P·n)⌉`` of them (``m_0 + m_{P−1}`` at least that)
and some ``D−`` at most ``⌊2W/(P·n)⌋``.  Each class pays for its busiest domain, so with ``V``
the classes off the pipeline axis, ``T ≥ max_i V(D_i) + max_i pp(D_i) + max_i emb(D_i)`` over
any domains ``D_i`` at once (``Σ_c max_i ≥ max_i Σ_{c ∈ V}``): every level's ``D+`` and ``D−``.
Per domain the least over its compositions ``(m_j)`` gives a set of triples; the bound is the
least over one triple per domain of that sum (:func:`_combine`).  Compositions of up to
``EXACT_PARTS`` nonempty stage parts are enumerated (two when they would be more than
``COMPOSITIONS_MAX``); those of more parts are charged ``max(F_Σ + min Σ Δ, min Σ Φ)`` over their
part sizes (two knapsacks) and the floors of pp and embedding.  Domains above ``STAGE_CUT_MAX_DOMAIN``
ranks (up to :data:`~rankmap.solver.bound.stagepack.PACK_MAX_DOMAIN`: the pods of a three-tier tree)
have too many compositions: :class:`~rankmap.solver.bound.stagepack.PackShape` bounds each by a point
of its largest part and end parts (module stagepack); those sides join only beside smaller domains'
sides and when they raise the least combination.  Any floors valid for every layout searched may be
``base``: launcher mode passes each part's least launcher floor over the searched orders
(:func:`~rankmap.solver.bound.stagepack.least_order_floors`).
A level of more shapes than
``STAGE_CUT_MAX_SHAPES`` (a fragmented allocation) has no ``D±`` sides: its ``FRAGMENT_SHAPES`` shapes of
least capacity per GPU each name a domain of the level, one side each, every composition; two-axis stage
grids take their exact split counts (:mod:`.stageplane`; there the knapsack is replaced by its cases).

Example: ``ft-oversub-32x8`` tp4 cp2 pp4 (leaves of 32 GPUs, 4:1 uplinks, stages of 64 ranks):
a leaf of one stage splits 4 dp groups; one spanning two stages splits 8.  The leaf with the
most end-stage ranks (≥ 16) thus either holds 32 ranks of an end stage (32 embedding flows,
17.2 ms) or pays 4 more dp cuts; the leaf with the fewest (≤ 16) is a middle stage (64 pipeline
flows, 11.2 ms) or also pays them: the joint cut of one domain saw only the middle stage
(bound 45.5 -> 57.9 ms, cost 61.9 ms).  ``ft-oversub-64x8`` tp8 pp4: 61.6 -> 71.5 ms (cost 72.0).
"""

from __future__ import annotations

import numpy as np

from ..fabric.cluster import Cluster
from ..megatron.config import ParallelConfig
from .stagepack import PACK_MAX_DOMAIN, PACK_MAX_PART, PackShape
from .stageshapes import (COMPOSITION_SECONDS, COMPOSITIONS_MAX, EXACT_PARTS, _compositions, _count,  # noqa: F401
                          _Shape, _stage_grids, _Tables)
from .work import BOUND_PART_SECONDS, charge

__all__ = ["stage_cut_bound", "stage_cut_applies", "STAGE_CUT_MAX_RANKS", "EXACT_PARTS"]

#: World sizes up to which the stage-split cut runs.
STAGE_CUT_MAX_RANKS = 512
#: Domains larger than this (ranks) are left out (their compositions are many).
STAGE_CUT_MAX_DOMAIN = 64
#: Levels with more distinct domain shapes than this are left out (fragmented levels: many tables).
STAGE_CUT_MAX_SHAPES = 2
#: On a level left out for its many shapes: this many of its domain shapes of at most ``STAGE_CUT_MAX_DOMAIN``
#: ranks, least capacity per GPU first, each one side of its own (any composition).
FRAGMENT_SHAPES = 3


def _frontier(shapes_masks, f0_sum: float):
    """Points ``(V, pp, emb)`` and their origins of one domain side: per (X, Y) the least ``V``, undominated."""
    pts, ids = [], []
    for si, (shape, mask) in enumerate(shapes_masks):
        V = shape.values(f0_sum)
        idx = np.flatnonzero(mask)
        if idx.size:
            m = shape.m
            grid = np.full((2 * m + 1, m + 1), np.inf)
            arg = np.full((2 * m + 1, m + 1), -1)
            order = idx[np.argsort(-V[idx], kind="stable")]  # the least V written last
            grid[shape.X[order], shape.Y[order]] = V[order]
            arg[shape.X[order], shape.Y[order]] = order
            run = np.minimum.accumulate(np.minimum.accumulate(grid, axis=0), axis=1)
            prev = np.full_like(run, np.inf)
            prev[1:, :] = run[:-1, :]
            prev[:, 1:] = np.minimum(prev[:, 1:], run[:, :-1])
            xs, ys = np.nonzero(grid < prev)
            for x, y in zip(xs.tolist(), ys.tolist()):
                pts.append((grid[x, y], shape.pp[x], shape.emb[y]))
                ids.append((si, int(arg[x, y])))
        tp = shape.tail_point(f0_sum)
        if tp is not None:
            pts.append((tp[0], shape.pp[0], shape.emb[0]))
            ids.append((si, tuple(tp[1])))
    return np.array(pts).reshape(-1, 3), ids


def _combine(sets: list[np.ndarray]):
    """``min over one point (v, a, b) per set of max v + max a + max b`` and the chosen point of each set.

    Thresholds ``v*`` and ``a*`` range over the points' own values; for each, every set's least ``b``
    among its points with ``v ≤ v*`` and ``a ≤ a*`` (a 2-D running minimum), their largest added.
    Returns ``(inf, None)`` when a set is empty.
    """
    if not sets or any(s.shape[0] == 0 for s in sets):
        return np.inf, None
    vs = np.unique(np.concatenate([s[:, 0] for s in sets]))
    as_ = np.unique(np.concatenate([s[:, 1] for s in sets]))
    charge(COMPOSITION_SECONDS * vs.size * as_.size * len(sets))
    worst = np.full((vs.size, as_.size), -np.inf)
    grids = []
    for s in sets:
        grid = np.full((vs.size, as_.size), np.inf)
        np.minimum.at(grid, (np.searchsorted(vs, s[:, 0]), np.searchsorted(as_, s[:, 1])), s[:, 2])
        grid = np.minimum.accumulate(np.minimum.accumulate(grid, axis=0), axis=1)
        grids.append(grid)
        worst = np.maximum(worst, grid)
    total = vs[:, None] + as_[None, :] + worst
    i, j = np.unravel_index(int(np.argmin(total)), total.shape)
    chosen = []
    for s, grid in zip(sets, grids):
        ok = np.flatnonzero((s[:, 0] <= vs[i]) & (s[:, 1] <= as_[j]) & (s[:, 2] <= grid[i, j]))
        chosen.append(int(ok[0]) if ok.size else None)
    return float(total[i, j]), chosen


#: Rounds of refining the tables at the sizes the least combination uses.
REFINE_ROUNDS = 12


def stage_cut_applies(cluster: Cluster, cfg: ParallelConfig) -> bool:
    """Whether :func:`stage_cut_bound` may be above 0 (``pp ≥ 3``, at most ``STAGE_CUT_MAX_RANKS`` ranks, every GPU used)."""
    return int(cfg.pp) >= 3 and int(cfg.world_size) <= STAGE_CUT_MAX_RANKS and cluster.num_devices == cfg.world_size


def stage_cut_bound(cluster: Cluster, cfg: ParallelConfig, parts, exposure, base) -> float:
    """The stage-split cut bound (module doc), seconds, on ``Σ_c x_c·T_c`` over every layout of ``cfg``'s sizes.

    Parameters
    ----------
    cluster : Cluster
        Its GPUs must all be used (``cluster.num_devices == cfg.world_size``); else 0.
    cfg : ParallelConfig
        The sizes (any order).
    parts : Mapping[str, list]
        Per class its parts ``(Collective, groups, size)`` (:func:`rankmap.solver.bound.analytic._part_sizes`).
    exposure : Mapping[str, float]
        ``x_c``, 1 for classes it does not name.
    base : callable
        ``base(class, index of the part) -> seconds``: the part's own bandwidth floor (any layout).

    Returns
    -------
    float
        A lower bound, seconds, without NCCL's latency beyond the floors (the caller adds it, as for
        :func:`~rankmap.solver.bound.cutbound.joint_cut_bound`); 0 where the bound does not apply
        (``pp < 3``, no pipeline chain part, more than ``STAGE_CUT_MAX_RANKS`` ranks, GPUs left unused).
    """
    from ..cost.timemodel import flow_bytes
    from ..traffic import class_group_size
    from .cutbound import _hierarchies, _rate_out_of
    from .rates import suffix_rates
    from .ncclterms import crossing_bytes, node_levels

    P, W = int(cfg.pp), int(cfg.world_size)
    if P < 3 or W > STAGE_CUT_MAX_RANKS or cluster.num_devices != W:
        return 0.0
    S = W // P
    grids = _stage_grids(cfg)
    held = {c for _a, cl in grids for c in cl}
    const = 0.0
    within: dict[str, list] = {}
    chains, embs = [], []
    for c, plist in parts.items():
        x = float(exposure.get(c, 1.0))
        n = class_group_size(c, cfg)
        for i, (p, _g, k) in enumerate(plist):
            if x <= 0:
                continue
            f0 = x * float(base(c, i))
            if c == "pp" and p.kind == "p2p_chain" and k == P == n:
                chains.append((p, k, x, f0))
            elif c == "embedding" and p.kind == "all_reduce" and k == n == 2:
                embs.append((p, k, x, f0))
            elif c in held and k == n:
                within.setdefault(c, []).append((p, k, x, f0))
            else:
                const += f0
    if not chains:
        return 0.0
    charge(BOUND_PART_SECONDS)
    f0_sum = float(sum(f0 for v in within.values() for *_r, f0 in v))
    tables: dict = {}
    sides: dict = {}  # (level key, side) -> [(shape, mask)]

    def _shape(m: int, cap: float, node_level: bool, r_above: float, fragment: bool = False):
        tkey = (cap, node_level, r_above, fragment)
        if tkey not in tables:
            tables[tkey] = _Tables(cluster, grids, within, cap, node_level, S, S, r_above, fragment)
        g_pp = [(x * crossing_bytes(p.kind, flow_bytes(p.kind, p.payload_bytes, k), p.payload_bytes,
                                    cluster, k, node_level)[1] / (cap * 1e9), f0) for p, k, x, f0 in chains]
        g_e = [(x * flow_bytes(p.kind, p.payload_bytes, k) / (cap * 1e9), f0) for p, k, x, f0 in embs]

        def pp_time(X):
            return sum(np.maximum(f0, g * X) for g, f0 in g_pp)

        def emb_time(Y):
            return sum((np.maximum(f0, g * Y) for g, f0 in g_e), np.zeros_like(Y))

        if m > STAGE_CUT_MAX_DOMAIN:  # too many compositions: knapsack points (module stagepack)
            return PackShape(m, tables[tkey], S, P, pp_time, emb_time)
        return _Shape(m, cap, tables[tkey], S, P, pp_time, emb_time)

    rates = suffix_rates(cluster) * 1e9
    for doms, outs, widest in _hierarchies(cluster):
        whole_nodes = node_levels(cluster, doms)
        for lvl in range(min(doms.shape[0], len(outs))):
            # the most a flow out of one of the level's domains gets alone (module cutbound)
            r_above = rates[lvl + 1] if widest and lvl + 1 < rates.size else (
                np.inf if widest else _rate_out_of(cluster, doms[lvl], rates))
            sizes = np.bincount(doms[lvl])
            caps = np.asarray(outs[lvl], dtype=float)
            if caps.size != sizes.size or sizes.size < 2 or np.any(caps <= 0):
                continue
            node_level = bool(whole_nodes[lvl])
            shapes = sorted(set(zip(sizes.tolist(), caps.tolist())))
            key = (tuple(shapes), sizes.size, node_level)
            if (key, "+") in sides:
                continue
            if len(shapes) > STAGE_CUT_MAX_SHAPES or max(m for m, _c in shapes) > (
                    PACK_MAX_DOMAIN if S <= PACK_MAX_PART else STAGE_CUT_MAX_DOMAIN):
                # a fragmented level: its few most crowded small domains, one side each, any composition
                few = sorted(((c / m, m, c) for m, c in shapes if m <= STAGE_CUT_MAX_DOMAIN))[:FRAGMENT_SHAPES]
                for _r, m, cap in few:
                    m, cap = int(m), float(cap)
                    if ((m, cap, node_level, r_above), "1") in sides:
                        continue
                    shape = _shape(m, cap, node_level, r_above, True)
                    sides[((m, cap, node_level, r_above), "1")] = [(shape, np.ones(shape.ends.shape, dtype=bool))]
                continue
            mean_ends = 2.0 * W / (P * sizes.size)
            r_plus, r_minus = int(np.ceil(mean_ends - 1e-9)), int(np.floor(mean_ends + 1e-9))
            for m, cap in shapes:
                shape = _shape(int(m), float(cap), node_level, r_above)
                sides.setdefault((key, "+"), []).append((shape, shape.ends >= r_plus))
                sides.setdefault((key, "-"), []).append((shape, shape.ends <= r_minus))
    if not sides:
        return 0.0
    # sides with a large domain (knapsack points, module stagepack) join only those of smaller domains,
    # and only when, at the tables refined without them, they raise the least combination (else their
    # refinement is work for nothing)
    later = {k: v for k, v in sides.items() if any(isinstance(sh, PackShape) for sh, _m in v)}
    now = {k: v for k, v in sides.items() if k not in later}
    core = _settle(now, f0_sum) if now else None
    if core is None:
        return 0.0
    ahead = _combine([_frontier(v, f0_sum)[0] for v in sides.values()])[0] if later else -np.inf
    if np.isfinite(ahead) and ahead > core * (1 + 1e-9):
        for v in later.values():  # their points use nearly every part size: all refined at once (fewer rounds)
            for sh, _m in v:
                sh.tables.refine(range(1, sh.top + 1))
        more = _settle(sides, f0_sum)
        core = core if more is None else max(core, more)  # (both bounds)
    return const + core if np.isfinite(core) else 0.0


def _settle(sides: dict, f0_sum: float):
    """The least combination of ``sides`` (seconds) with its tables refined at the sizes it uses; None when a
    side has no point."""
    core = np.inf
    for _round in range(REFINE_ROUNDS):
        fronts = [_frontier(v, f0_sum) for v in sides.values()]
        core, chosen = _combine([f for f, _ids in fronts])
        if chosen is None:
            return None
        # a combination is at least each of its points' sum: every point that could be in one below the
        # least so far is made exact (its parts' sizes), until none is left (values only rise)
        refined = False
        for (pts, ids), v in zip(fronts, sides.values()):
            for i in np.flatnonzero(pts.sum(axis=1) <= core * (1.0 + 1e-12)).tolist():
                si, what = ids[i]
                shape = v[si][0]
                xs = what if isinstance(what, tuple) else shape.part_sizes(what)
                refined = shape.tables.refine(xs) or refined
        if not refined:
            break
    return core
