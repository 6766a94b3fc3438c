"""Joint domain-cut lower bound: classes compete for the same domains (DESIGN §5).

:func:`~rankmap.solver.bound.analytic.class_lower_bound` bounds each traffic class
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
``s·w·fb / C_D`` (``w`` = 1 or ``k − 1``).  A pipeline chain sends both ways
on every edge, so a split chain sends one flow out of ``D`` per edge crossing
its boundary, and at least two unless its members in ``D`` are a prefix or a
suffix of it, which holds a chain end (a first- or last-stage rank).  With
``e_D`` the chain ends in ``D``, ``out ≥ 2s − e_D``; the ends number two per
chain, so some domain of a level of ``n_D`` domains has ``e_D ≤ ē = 2G/n_D``
(``G`` chains): the least over the level's domain shapes of the bound with
``max(s, 2s − ē)`` in place of ``s`` holds too (NVL72 racks holding two middle
stages of 36 chains send 72 flows out, not 36).  A split chain holding
exactly one end in ``D`` also splits its embedding pair (Megatron's
``EMBEDDING_GROUP``: the first and last stage of each pipeline group), which
sends a flow out of ``D``: the pipeline and embedding parts together cost at
least ``min over e ≤ s of pp(2s − e) + embedding(e)``
(:func:`~rankmap.solver.bound.gridcut._chain_term`).  And when ``s ≥ 1`` one of its flows
joins GPUs first joined above ``D``'s widest level: at least ``fb / R_{>k}``
(:func:`~rankmap.solver.bound.rates.suffix_rates`).  With ``F0`` the part's own
bound (any layout), the part's time is at least
``max(F0, [s ≥ 1]·fb/R_{>k}, s·w·fb/C_D)``.

The bound of the domain is the least ``Σ_c x_c Σ_parts`` of those terms over
every ``(p_c)`` the constraints allow, with ``p`` and ``s`` relaxed to reals
(only smaller): for each pattern of which classes split none (``s = 0`` forces
``p = m/k``; ``S`` is then a union of boxes along those classes' axes, so each
``p_d`` is a multiple of a box's projection and a whole group of any class
touches at least its box's projection:
:func:`~rankmap.solver.bound.gridcut.domain_combos`) the rest is a convex problem in ``y_c = log p_c`` whose
Lagrangian dual is evaluated exactly (each term is piecewise ``α + β·e^y``, its
minimum against ``λ·w·y`` closed-form), so every multiplier ``λ ≥ 0`` gives a
valid value and the best of a log-spaced grid of them is kept.  Every domain,
every weight vector (classes subsets of equal weight) and both grids give a
valid bound; the bound is the largest over domains and weights of the dense
grid's plus the expert grid's (the pp class, whose groups both grids share,
bounded with either: megatron-core's ``initialize_model_parallel`` asserts
the two generators' pipeline groups are the same), plus each remaining part's own bound (parts on
subgroups, the embedding group; with two pipeline stages the embedding group is the
pipeline group, and its parts count with the pp class).

Nested domains.  A class's time is at least its term for every domain, so a
domain inside another of a coarser level (a host inside its leaf) charges
each class the larger of its two terms: ``Σ_c max(t_c(inner), t_c(outer))``
over every pair of patterns (:func:`~rankmap.solver.bound.gridcut.nested_grid_bound`).
A host that keeps its pipeline chain whole splits its tp groups over hosts;
a leaf that keeps those tp groups whole splits cp over leaves: each level
alone sees one of the two.  Nothing here is per rank pair: the work is per
level (pair) and distinct ``(m, C_D)``.
"""

from __future__ import annotations

from itertools import combinations
from typing import Callable, Mapping

import numpy as np

from ..megatron.config import ParallelConfig
from ..fabric.cluster import Cluster
from .rates import suffix_rates
from .endpair import END_PAIR_MAX_RANKS, level_end_pair_bound
from .gridcut import _chain_term, _Term, domain_combos, domain_grid_bound, nested_grid_bound

__all__ = ["joint_cut_bound", "grid_classes"]

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


def _rate_out_of(cluster: Cluster, labels: np.ndarray, rates: np.ndarray) -> float:
    """The most a flow leaving a domain of ``labels`` can get alone, bytes/s (inf: not known).

    When every domain of the coarsest possible widest level ``j`` lies inside one
    domain of ``labels``, a flow out of a domain joins GPUs first joined at a widest
    level above ``j``: at most ``R_{≥j+1}`` (:func:`~rankmap.solver.bound.rates.suffix_rates`).
    """
    wd = cluster.widest_domains
    K = int(labels.max()) + 1
    for j in range(wd.shape[0] - 1, -1, -1):
        if np.unique(wd[j] * K + labels).size == np.unique(wd[j]).size:  # level j refines the labels
            return float(rates[j + 1]) if j + 1 < rates.size else np.inf
    return np.inf


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


def _nested_best(levels, axes, classes, covers, class_k, class_groups, target: float) -> float:
    """The largest :func:`~rankmap.solver.bound.gridcut.nested_grid_bound` over nested domain pairs of two levels.

    ``levels``: ``(labels (n,), sizes, capacities, {(m, capacity): (class terms, own bound)})`` per
    level.  A level's domains nest in another's when every one of its domains
    lies inside one of the other's (fewer, larger domains); each distinct pair
    of (inner shape, outer shape) that occurs is bounded once, unless the two
    domains' own bounds sum to at most the bound so far (``target``): a pair's
    bound is at most that sum (each pair of patterns is at most the sum of
    their duals), so it could not raise it.
    """
    best = target
    combos: dict = {}

    def side(ia, shape, terms):
        if (ia, shape) not in combos:
            combos[(ia, shape)] = (domain_combos(shape[0], axes, classes, terms, class_k, class_groups), {})
        return combos[(ia, shape)]

    done = set()
    for ia, (la, sa, ca, wa) in enumerate(levels):
        for ib, (lb, sb, cb, wb) in enumerate(levels):
            if sb.size >= sa.size or not wa or not wb:
                continue
            key = int(lb.max()) + 1
            pairs = np.unique(la.astype(np.int64) * key + lb)
            if pairs.size != sa.size:
                continue  # some inner domain straddles two outer ones
            for code in pairs.tolist():
                a, b = divmod(code, key)
                inner, outer = (int(sa[a]), float(ca[a])), (int(sb[b]), float(cb[b]))
                if inner not in wa or outer not in wb or (ia, ib, inner, outer) in done:
                    continue
                done.add((ia, ib, inner, outer))
                if wa[inner][1] + wb[outer][1] <= best:
                    continue  # the pair's bound is at most the sum of the two domains' own: it cannot raise best
                ci, own_i = side(ia, inner, wa[inner][0])
                co, own_o = side(ib, outer, wb[outer][0])
                best = max(best, nested_grid_bound(inner[0], ci, outer[0], co, classes, covers, best,
                                                   (own_i, own_o)))
    return best


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
        (:func:`rankmap.solver.bound.analytic._part_sizes`).
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
    from .ncclterms import RING_KINDS, crossing_bytes, max_channels, nics_per_gpu, node_levels
    from ..cost.timemodel import flow_bytes
    from ..traffic import class_group_size

    exposure = dict(exposure or {})
    base = base or (lambda c, i: 0.0)
    total_f0 = 0.0
    grid_parts: dict[str, list] = {}
    emb_parts: list = []
    for c, plist in parts.items():
        x = float(exposure.get(c, 1.0))
        n = class_group_size(c, cfg)
        for i, (p, g, k) in enumerate(plist):
            f0 = x * float(base(c, i))
            full = k == n  # the part runs over the class's whole groups (not subgroups)
            if x > 0 and full and c != "embedding":
                grid_parts.setdefault(c, []).append((p, g, k, x, f0))
            elif x > 0 and full and c == "embedding" and cfg.pp == 2:
                # with two stages the embedding group (first and last stage) is the pipeline group
                grid_parts.setdefault("pp", []).append((p, g, k, x, f0))
            elif x > 0 and full and c == "embedding" and p.kind == "all_reduce" and k == 2:
                emb_parts.append((p, g, k, x, f0))  # on the end ranks of the pipeline chains: see _chain_term
            else:
                total_f0 += f0
    if not any(p.kind == "p2p_chain" and k == cfg.pp for p, _g, k, _x, _f in grid_parts.get("pp", [])):
        total_f0 += sum(f0 for *_r, f0 in emb_parts)
        emb_parts = []
    if cluster.num_devices != cfg.world_size or not grid_parts:
        return total_f0 + sum(f0 for v in grid_parts.values() for *_r, f0 in v)
    rates = suffix_rates(cluster) * 1e9
    grids = grid_classes(cfg)
    def grid_bound(axes, classes) -> float:
        """The bound of one rank grid's classes (their parts' F0 at least)."""
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
        embs_here = emb_parts if "pp" in classes else []
        f0_here += sum(f0 for *_r, f0 in embs_here)
        best = f0_here

        def shape_terms(m, cap, r_above, n_domains, node_level=True):
            """Per class, the parts' terms for one domain shape: (weak, strong, has chains, chain ends).

            Chain ends: ``(other pp terms, chain parts, embedding parts, ē, G/n)`` for :mod:`.endpair`
            when the pipeline class has chains and embedding parts, else None.
            """
            terms, strong, chains, ends = {}, {}, False, None
            for c in classes:
                if c not in grid_parts:
                    continue
                lst, slst, chain, ebar = [], [], [], np.inf
                for p, g_p, kp, x, f0 in grid_parts[c]:
                    fb = flow_bytes(p.kind, p.payload_bytes, kp)
                    w = (kp - 1) if p.kind == "all_to_all" else 1
                    # NCCL's channels and all-reduce algorithms (solver/bound/ncclterms.py)
                    fb_flow, fb_cut = crossing_bytes(p.kind, fb, p.payload_bytes, cluster, kp, node_level)
                    g = x * w * fb_cut / (cap * 1e9)
                    if c == "pp" and p.kind == "p2p_chain" and kp == cfg.pp and kp >= 2:
                        chain.append((f0, max(f0, x * fb / r_above), g))
                        ebar = 2.0 * g_p / n_domains  # mean chain ends per domain
                        continue
                    beta = 0.0
                    if node_level and p.kind in RING_KINDS and np.isfinite(r_above) and r_above > 0:
                        # NCCL's channels: a split group has at most nics·|g ∩ D| of them, and the group
                        # of the class touching D with the fewest members there has at most m/p
                        beta = x * fb_flow * max_channels(cluster, kp) / (nics_per_gpu(cluster) * m * r_above)
                    lst.append(_Term(f0, x * fb_flow / r_above, g, plines=((beta, 0.0),)))
                    slst.append(lst[-1])
                if chain:
                    embs = [(f0, x * flow_bytes(p.kind, p.payload_bytes, kp) / (cap * 1e9))
                            for p, _g, kp, x, f0 in embs_here]
                    # a split pair's flow joins GPUs first joined above D (as a split chain's c'): embpair.py
                    esplit = [max(f0, x * crossing_bytes(p.kind, flow_bytes(p.kind, p.payload_bytes, kp),
                                                         p.payload_bytes, cluster, kp, node_level)[0] / r_above)
                              for p, _g, kp, x, f0 in embs_here]
                    if embs:
                        ends = (list(lst), chain, embs, ebar, ebar / 2.0)
                    lst.append(_chain_term(chain, embs, emb_split=esplit))
                    slst.append(_chain_term(chain, embs, ebar, emb_split=esplit))
                    chains = True
                terms[c], strong[c] = lst, slst
            return terms, strong, chains, ends

        levels = []  # (labels, {label: weak terms or None})
        for doms, outs, widest in _hierarchies(cluster):
            whole_nodes = node_levels(cluster, doms)
            for lvl in range(min(doms.shape[0], len(outs))):
                sizes = np.bincount(doms[lvl])
                caps = np.asarray(outs[lvl], dtype=float)
                if caps.size != sizes.size:
                    continue
                r_above = rates[lvl + 1] if widest and lvl + 1 < rates.size else (
                    np.inf if widest else _rate_out_of(cluster, doms[lvl], rates))
                least_strong = np.inf  # the chain-crossing bound holds for one domain of the level: the least
                weak_of = {}  # shape -> (terms, its own bound)
                pair_shapes: dict | None = {}  # shape -> (terms, chain ends) for the end-pair bound (.endpair)
                for m, cap in set(zip(sizes.tolist(), caps.tolist())):
                    if cap <= 0 or m < 1 or m >= cfg.world_size:
                        least_strong = 0.0  # that domain may be the one
                        pair_shapes = None
                        continue
                    terms, strong, chains, ends = shape_terms(m, cap, r_above, sizes.size, bool(whole_nodes[lvl]))
                    if pair_shapes is not None:
                        pair_shapes = None if ends is None else {**pair_shapes, (m, cap): (terms, ends)}
                    weak = domain_grid_bound(int(m), axes, classes, covers, terms, class_k, class_groups)
                    weak_of[(m, cap)] = (terms, weak)
                    best = max(best, weak)
                    least_strong = min(least_strong, weak if not chains else domain_grid_bound(
                        int(m), axes, classes, covers, strong, class_k, class_groups))
                if np.isfinite(least_strong):
                    best = max(best, least_strong)
                if pair_shapes and cfg.world_size <= END_PAIR_MAX_RANKS:
                    best = max(best, level_end_pair_bound(pair_shapes, axes, classes, covers, class_k,
                                                          class_groups))
                levels.append((doms[lvl], sizes, caps, weak_of))
        best = max(best, _nested_best(levels, axes, classes, covers, class_k, class_groups, best))
        return best

    extra = sum(grid_bound(axes, classes) for axes, classes in grids)
    if len(grids) == 2 and "pp" in grids[0][1] and "pp" in grids[1][0] and "pp" in grid_parts:
        # megatron-core builds the same pipeline groups from both rank generators (initialize_model_parallel
        # asserts it), so the pp class and its embedding pairs may be bounded with the expert grid instead,
        # where they compete with ep and edp for the domains
        (dense_axes, dense), (expert_axes, expert) = grids
        extra = max(extra, grid_bound(dense_axes, {c: v for c, v in dense.items() if c != "pp"})
                    + grid_bound(expert_axes, {**expert, "pp": frozenset({"pp"})}))
    # parts of grid classes that no grid holds (cannot happen for the registry's classes): their F0
    held = {c for _a, classes in grids for c in classes}
    rest = sum(f0 for c, v in grid_parts.items() if c not in held for *_r, f0 in v)
    return total_f0 + extra + rest
