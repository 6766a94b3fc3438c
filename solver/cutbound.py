"""Joint domain-cut lower bound: classes compete for the same domains (DESIGN §5).

:func:`~rankmap.solver.bound.class_lower_bound` bounds each traffic class
alone, as if it had the cluster to itself: tp, dp and pp groups could each sit
inside one host.  They cannot all do so at once.  This module bounds the sum
over classes jointly, domain by domain.

The rank grid.  Whatever the order, Megatron's groups are the lines of a
product grid (``RankGenerator`` in megatron-core ``parallel_state.py``): the
dense grid ``[tp] × [cp] × [dp] × [pp]`` has the tp groups along the tp axis,
cp along cp, pp along pp and the dp class (``DATA_PARALLEL_GROUP_WITH_CP``)
along the (cp, dp) plane; the expert grid ``[etp] × [ep] × [edp] × [pp]``
(the same ranks) has the etp, ep and edp groups along its axes.  Only the
labelling of grid points by global ranks depends on the order, so what follows
holds for every order and, in free mode, every bijection of ranks to GPUs.

One domain.  Let a domain ``D`` (a level-``k`` component of
``cluster.domains`` or ``cluster.widest_domains``) hold ``m`` GPUs, hence a set
``S`` of ``m`` ranks, and let ``C_D`` be the capacity of the links leaving it
(``domain_out_gbps``).  For a class ``c`` with groups of ``k`` ranks let ``p``
be the number of its groups ``S`` touches and ``s`` the number it splits.
Whole groups hold ``k`` ranks of ``S``, split ones at least one, so
``m ≥ k(p − s) + s``, i.e. ``s ≥ (kp − m)/(k − 1)``.  The touched groups are a
projection of ``S`` (onto the axes the group does not span), and Shearer's
lemma (Chung, Graham, Frankl & Shearer 1986; fractional form: Friedgut 2004)
ties the projections together: for weights ``w_c ≥ 0`` giving every axis of
size > 1 a total weight ≥ 1 over the classes whose groups do not span it,
``log m ≤ Σ_c w_c log p_c``.  E.g. tp8·dp4·pp4 on 8-GPU hosts (weights ½):
``p_tp·p_dp·p_pp ≥ 64``, so a host that keeps its tp group whole
(``p_tp = 1``) touches 8 dp and 8 pp groups and splits all of them.

Each split group sends at least one flow out of ``D`` (a ring or chain with
members inside and outside crosses the boundary both ways; an all-to-all with
``a`` of ``k`` members inside sends ``a(k − a) ≥ k − 1``), all of it over the
links leaving ``D``, so a part with flows of ``fb`` bytes takes at least
``s·w·fb / C_D`` (``w`` = 1 or ``k − 1``); and when ``s ≥ 1`` one of its flows
joins GPUs first joined above ``D``'s widest level: at least ``fb / R_{>k}``
(:func:`~rankmap.solver.bound.suffix_rates`).  With ``F0`` the part's own
bound (any layout), the part's time is at least
``max(F0, [s ≥ 1]·fb/R_{>k}, s·w·fb/C_D)``.

The bound of the domain is the least ``Σ_c x_c Σ_parts`` of those terms over
every ``(p_c)`` the constraints allow, with ``p`` and ``s`` relaxed to reals
(only smaller): for each pattern of which classes split none (``s = 0`` forces
``p = m/k``) the rest is a convex problem in ``y_c = log p_c`` whose
Lagrangian dual is evaluated exactly (each term is piecewise ``α + β·e^y``, its
minimum against ``λ·w·y`` closed-form), so every multiplier ``λ ≥ 0`` gives a
valid value and the best of a log-spaced grid of them is kept.  Every domain,
every weight vector (classes subsets of equal weight) and both grids give a
valid bound; the bound is the largest over domains and weights of the dense
grid's plus the expert grid's, plus each remaining part's own bound (parts on
subgroups, the embedding group).  Nothing here is per rank pair: the work is
per level and distinct ``(m, C_D)``.
"""

from __future__ import annotations

from itertools import combinations
from typing import Callable, Mapping

import numpy as np

from .catalogue import ParallelConfig
from .cluster import Cluster

__all__ = ["joint_cut_bound", "grid_classes"]

#: Multipliers λ tried per convex problem (log-spaced, then refined once around the best).
LAMBDA_GRID = 64


def grid_classes(cfg: ParallelConfig) -> list[tuple[dict[str, int], dict[str, frozenset]]]:
    """The two rank grids of ``cfg``: ``[(axes {name: size}, classes {class: axes its groups span})]``.

    Dense ``tp × cp × dp × pp`` (tp, cp, dp = the (cp, dp) plane, pp) and
    expert ``etp × ep × edp × pp`` (etp, ep, edp); axes and classes of size 1
    are left out.  Source: megatron-core ``parallel_state.RankGenerator``
    (``decoder_rank_generator`` / ``expert_decoder_rank_generator``).
    """
    dense_axes = {"tp": cfg.tp, "cp": cfg.cp, "dp": cfg.dp, "pp": cfg.pp}
    dense = {"tp": frozenset({"tp"}), "cp": frozenset({"cp"}), "dp": frozenset({"cp", "dp"}),
             "pp": frozenset({"pp"})}
    expert_axes = {"etp": cfg.etp, "ep": cfg.ep, "edp": cfg.edp, "pp": cfg.pp}
    expert = {"etp": frozenset({"etp"}), "ep": frozenset({"ep"}), "edp": frozenset({"edp"})}
    out = []
    for axes, classes in ((dense_axes, dense), (expert_axes, expert)):
        axes = {a: int(v) for a, v in axes.items() if int(v) > 1}
        classes = {c: g & axes.keys() for c, g in classes.items() if g & axes.keys()}
        if axes and classes:
            out.append((axes, classes))
    return out


def _covers(axes: dict[str, int], classes: dict[str, frozenset]) -> list[dict[str, float]]:
    """Shearer weight vectors: for each subset Q of classes covering every axis, ``1/r`` on Q.

    A class covers the axes its groups do not span (the projection that counts
    its touched groups keeps them); ``r`` is the least cover count over axes.
    """
    names = sorted(classes)
    out = []
    for size in range(1, len(names) + 1):
        for q in combinations(names, size):
            r = min(sum(1 for c in q if a not in classes[c]) for a in axes)
            if r >= 1:
                out.append({c: 1.0 / r for c in q})
    return out


class _Term:
    """One part's time as a function of the split count ``s`` of its class: ``max(c0, [s≥1]·c1, g·s)``."""

    __slots__ = ("c0", "c1", "g")

    def __init__(self, c0: float, c1: float, g: float):
        self.c0, self.c1, self.g = float(c0), float(c1), float(g)


def _pieces(terms: list[_Term], k: int, m: int):
    """Σ_terms max(max(c0, c1), g·max(1, u)) with u = (k·e^y − m)/(k − 1), as pieces (e^y lo, e^y hi, α, β).

    On each piece the sum is ``α + β·e^y`` (``β ≥ 0``); pieces are in
    increasing ``e^y`` and cover ``[0, ∞)``.
    """
    # u = (k·P − m)/(k − 1) with P = e^y; the term is max(c, g·max(1, u)) = max(c', g·u), c' = max(c0, c1, g)
    cs = [max(t.c0, t.c1, t.g) for t in terms]
    gs = [t.g for t in terms]
    # breakpoint of term i in P: g·(kP − m)/(k − 1) = c'  ->  P = (c'(k − 1)/g + m)/k
    bps = sorted({(c * (k - 1) / g + m) / k for c, g in zip(cs, gs) if g > 0})
    edges = [0.0] + bps + [np.inf]
    out = []
    for lo, hi in zip(edges[:-1], edges[1:]):
        mid = lo + 1.0 if hi == np.inf else 0.5 * (lo + hi)
        alpha = beta = 0.0
        for c, g in zip(cs, gs):
            if g > 0 and g * (k * mid - m) / (k - 1) > c:
                alpha -= g * m / (k - 1)
                beta += g * k / (k - 1)
            else:
                alpha += c
        out.append((lo, hi, alpha, beta))
    return out


def _inner_min(pieces, ylo: float, yhi: float, lw: np.ndarray) -> np.ndarray:
    """``min over y in [ylo, yhi] of f(y) − lw·y`` for each ``lw`` (λ·w, shape (L,)), exact per piece."""
    best = np.full(lw.shape, np.inf)
    for plo, phi, alpha, beta in pieces:
        a = max(ylo, np.log(plo) if plo > 0 else -np.inf)
        b = min(yhi, np.log(phi) if np.isfinite(phi) else np.inf)
        if a > b:
            continue
        if beta > 0:
            with np.errstate(divide="ignore"):
                ystar = np.log(np.maximum(lw, 1e-300) / beta)
            y = np.clip(ystar, a, b)
            val = alpha + beta * np.exp(y) - lw * y
        else:
            y = np.full(lw.shape, b)  # −lw·y decreases in y
            val = alpha - lw * y
        best = np.minimum(best, val)
    return best


def _domain_grid_bound(m: int, axes, classes, covers, class_terms, class_k, class_groups) -> float:
    """Least Σ over the grid's classes of their parts' times for one domain of ``m`` ranks (module doc)."""
    logm = float(np.log(m))
    costed = [c for c in classes if class_terms.get(c)]
    if not costed:
        return 0.0
    info = {}
    for c in classes:
        k, ng = class_k[c], class_groups[c]
        terms = class_terms.get(c, [])
        hi = float(np.log(min(m, ng)))
        zero_ok = m % k == 0 and m // k <= ng
        zero_cost = sum(t.c0 for t in terms)
        lo1 = float(np.log(m // k + 1))  # s ≥ 1 needs p > m/k
        lo0 = float(np.log(-(-m // k)))  # p ≥ ⌈m/k⌉ always
        pcs = _pieces(terms, k, m) if terms else [(0.0, np.inf, 0.0, 0.0)]
        info[c] = (k, terms, hi, zero_ok, zero_cost, lo0 if not terms else lo1, pcs)
    best = 0.0
    for w in covers:
        q = [c for c in w]
        # classes outside the cover: their own least cost (s = 0 if possible)
        outside = 0.0
        for c in costed:
            if c in w:
                continue
            k, terms, hi, zero_ok, zero_cost, lo1, pcs = info[c]
            outside += zero_cost if zero_ok else sum(max(t.c0, t.c1, t.g) for t in terms)
        value = np.inf
        choices = [c for c in q if info[c][1]]
        for nz in range(len(choices) + 1):
            for zset in combinations(choices, nz):
                v = _case_bound(logm, w, info, set(zset), q)
                value = min(value, v)
                if value <= best - outside:
                    break
            if value <= best - outside:
                break
        best = max(best, value + outside)
    return best


def _case_bound(logm: float, w, info, zset: set, q) -> float:
    """Dual bound of one zero pattern: classes in ``zset`` split nothing (``p = m/k``), the others ≥ 1 split."""
    need = logm
    const = 0.0
    free = []
    for c in q:
        k, terms, hi, zero_ok, zero_cost, lo1, pcs = info[c]
        if c in zset:
            if not zero_ok:
                return np.inf
            need -= w[c] * (logm - float(np.log(k)))
            const += zero_cost
        else:  # at least one split group (or, moving no bytes, any p at no cost)
            if lo1 > hi:
                return np.inf
            free.append((w[c], pcs, lo1, hi))
    if sum(wc * yhi for wc, _p, _lo, yhi in free) < need - 1e-12:
        return np.inf  # no p vector meets Shearer's inequality
    if need <= sum(wc * ylo for wc, _p, ylo, _hi in free) + 1e-12:
        return const + sum(float(_inner_min(p, ylo, yhi, np.zeros(1))[0]) for _w, p, ylo, yhi in free)
    # λ range: the largest slope any term can have at its upper end, over its weight
    top = 1e-300
    for wc, pcs, ylo, yhi in free:
        beta = max(b for _lo, _hi, _a, b in pcs)
        top = max(top, beta * float(np.exp(yhi)) / wc)
    lam = np.geomspace(top * 1e-12, top * 4.0, LAMBDA_GRID)
    for _round in range(2):
        val = const + lam * need
        for wc, pcs, ylo, yhi in free:
            val = val + _inner_min(pcs, ylo, yhi, lam * wc)
        i = int(np.argmax(val))
        lo_i, hi_i = max(i - 1, 0), min(i + 1, lam.size - 1)
        best = float(val[i])
        lam = np.geomspace(lam[lo_i], lam[hi_i], LAMBDA_GRID)
    return max(best, const)


def _hierarchies(cluster: Cluster):
    """``(domains (K, n), out capacities per level, widest?)`` of the cluster's two level hierarchies.

    The widest hierarchy (physical capacities) also gives the per-flow term; when
    it is the fair-share one (``cluster.widest_domains is cluster.domains``) the
    latter's capacities serve for both.
    """
    if cluster.widest_domains is cluster.domains or not cluster.widest_domain_out_gbps:
        same = cluster.widest_domains is cluster.domains or (
            cluster.widest_domains.shape == cluster.domains.shape
            and np.array_equal(cluster.widest_domains, cluster.domains))
        return [(cluster.domains, cluster.domain_out_gbps, same)]
    return [(cluster.widest_domains, cluster.widest_domain_out_gbps, True),
            (cluster.domains, cluster.domain_out_gbps, False)]


def joint_cut_bound(
    cluster: Cluster, cfg: ParallelConfig, parts, exposure: Mapping[str, float] | None = None,
    base: Callable | None = None,
) -> float:
    """The joint domain-cut bound (module doc), seconds, on ``Σ_c x_c·T_c`` over every layout of ``cfg``'s sizes.

    Parameters
    ----------
    cluster : Cluster
        Its GPUs must all be used (``cluster.num_devices == cfg.world_size``); else 0.
    cfg : ParallelConfig
        The sizes (any order: the bound does not depend on it).
    parts : Mapping[str, list]
        Per class, its parts as ``(Collective, number of groups, group size)``
        (:func:`rankmap.solver.bound._part_sizes`).
    exposure : Mapping[str, float], optional
        ``x_c``, 1 for classes it does not name.
    base : callable, optional
        ``base(class, index of the part) -> seconds``: the part's own bound
        ``F0`` (any layout of the searched space); default 0.

    Returns
    -------
    float
        A lower bound, seconds; at least ``Σ x_c·F0`` of the parts.
    """
    from .bound import suffix_rates
    from .timemodel import flow_bytes
    from .traffic import class_group_size

    exposure = dict(exposure or {})
    base = base or (lambda c, i: 0.0)
    total_f0 = 0.0
    grid_parts: dict[str, list] = {}
    for c, plist in parts.items():
        x = float(exposure.get(c, 1.0))
        n = class_group_size(c, cfg)
        for i, (p, g, k) in enumerate(plist):
            f0 = x * float(base(c, i))
            full = k == n  # the part runs over the class's whole groups (not subgroups)
            if x > 0 and full and c != "embedding":
                grid_parts.setdefault(c, []).append((p, g, k, x, f0))
            else:
                total_f0 += f0
    if cluster.num_devices != cfg.world_size or not grid_parts:
        return total_f0 + sum(f0 for v in grid_parts.values() for *_r, f0 in v)
    rates = suffix_rates(cluster) * 1e9
    grids = grid_classes(cfg)
    extra = 0.0
    grid_sum_f0 = 0.0
    for axes, classes in grids:
        covers = _covers(axes, classes)
        class_k = {}
        class_groups = {}
        for c in classes:
            span = 1
            for a in classes[c]:
                span *= axes[a]
            class_k[c] = span
            class_groups[c] = cfg.world_size // span
        f0_here = sum(f0 for c in classes for *_r, f0 in grid_parts.get(c, []))
        grid_sum_f0 += f0_here
        best = f0_here
        for doms, outs, widest in _hierarchies(cluster):
            for lvl in range(min(doms.shape[0], len(outs))):
                sizes = np.bincount(doms[lvl])
                caps = np.asarray(outs[lvl], dtype=float)
                if caps.size != sizes.size:
                    continue
                r_above = rates[lvl + 1] if widest and lvl + 1 < rates.size else np.inf
                for m, cap in set(zip(sizes.tolist(), caps.tolist())):
                    if cap <= 0 or m < 1 or m >= cfg.world_size:
                        continue
                    terms = {}
                    for c in classes:
                        if c not in grid_parts:
                            continue
                        k = class_k[c]
                        lst = []
                        for p, _g, kp, x, f0 in grid_parts[c]:
                            fb = flow_bytes(p.kind, p.payload_bytes, kp)
                            w = (kp - 1) if p.kind == "all_to_all" else 1
                            lst.append(_Term(f0, x * fb / r_above, x * w * fb / (cap * 1e9)))
                        terms[c] = lst
                    best = max(best, _domain_grid_bound(int(m), axes, classes, covers, terms, class_k,
                                                        class_groups))
        extra += best
    # parts of grid classes that no grid holds (cannot happen for the registry's classes): their F0
    held = {c for _a, classes in grids for c in classes}
    rest = sum(f0 for c, v in grid_parts.items() if c not in held for *_r, f0 in v)
    return total_f0 + extra + rest
