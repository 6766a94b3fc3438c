"""The anytime phase: spend what is left of the work budget where it pays (issue 15 item 3).

After the proposals and :func:`~rankmap.solver.search.refine.refine`, large clusters
used to stop after a fraction of a second of a 30 s limit.  This phase keeps
improving the best layout until its own deterministic budget is spent, the
lower bound is met (the answer is then proved optimal, DESIGN §5) or the
wall-clock deadline passes (a safety stop, recorded as ``stopped_by``):

1. **multi-start tree partitions**: the recursive METIS partition
   (:mod:`.partition`) of the best order with seeds ``seed+1, seed+2, …``,
   each laid out (local GPU orders by :func:`~rankmap.solver.search.decompose.local_orders`
   in launcher mode) and scored with the real objective;
2. **descent** on the real objective (:func:`~rankmap.solver.search.localsearch.descend`)
   from the best layout (up to ``LOCAL_SEARCH_MAX_RANKS`` ranks only when a
   partition improved it: refine has descended from it already), with the
   evaluations left (half of them up to ``LOCAL_SEARCH_MAX_RANKS`` ranks);
3. **more group structures** (up to ``LOCAL_SEARCH_MAX_RANKS`` ranks): descents
   from the best layouts of the next ``ANYTIME_STRUCTURES`` group structures
   after refine's, in equal shares of what is left.

The budget is a count of real-objective evaluations sized from the time limit
(:func:`~rankmap.solver.search.refine.eval_budget` of ``ANYTIME_SHARE`` of it): same
input, same work budget, same answer on an idle or a loaded machine.
"""

from __future__ import annotations

import numpy as np

from ..megatron.catalogue import megatron_groups
from .constraints import constraint_check, satisfies
from .decompose import local_orders
from .localsearch import descend
from .partition import partition_seconds, tree_partition_host_order, tree_partition_layout
from .problem import Candidate
from .refine import LOCAL_SEARCH_MAX_RANKS, REFINE_STARTS, eval_budget, eval_seconds, phase_idle, top_by_order

__all__ = ["ANYTIME_SHARE", "ANYTIME_MAX_STARTS", "anytime_search"]

#: Share of the time limit (nominal work, real-objective evaluations) of the anytime phase.
ANYTIME_SHARE = 0.07  # issue 28.4 (was 1/10)
#: At most this many extra partition seeds (then the descent takes the rest of the budget).
ANYTIME_MAX_STARTS = 16
#: Group structures beyond refine's whose best layouts the phase descends from (up to
#: ``LOCAL_SEARCH_MAX_RANKS`` ranks).
ANYTIME_STRUCTURES = 4
_REL = 1e-9


def anytime_search(cluster, candidates, surrogate, traffic, exposure, options, launcher, constraints, baseline_dev,
                   deadline, score, bound: float) -> list[Candidate]:
    """Candidates from the anytime phase (module doc); empty when there is nothing to improve.

    The arguments are those of :func:`~rankmap.solver.search.refine.refine` (``candidates``: everything
    scored so far, the best one is improved), plus ``bound``, the solve's lower bound in
    seconds: the phase stops once a layout meets it.
    """
    if phase_idle(candidates, options, deadline):
        return []
    best = min(candidates, key=lambda c: c.cost.total_seconds)
    if best.cost.total_seconds <= bound * (1 + _REL):
        return []
    W = best.cfg.world_size
    left = eval_budget(cluster, best.cfg, traffic, options.time_limit_seconds * ANYTIME_SHARE)
    cfg = best.cfg
    grp = megatron_groups(cfg)
    equal_hosts = cluster.equal_hosts
    out: list[Candidate] = []
    cur = best
    starts = min(ANYTIME_MAX_STARTS, max(0, left // 2))
    # a start's partitions cost evaluations too (work model: partition_seconds)
    per_eval = eval_seconds(cluster, cfg, traffic)
    host_cost = int(np.ceil(partition_seconds(cluster.gpus_per_host.size) / per_eval)) if equal_hosts else 0
    free_cost = 0 if launcher else int(np.ceil(partition_seconds(W) / per_eval))
    for k in range(1, starts + 1):
        if left <= 0 or deadline.check() or cur.cost.total_seconds <= bound * (1 + _REL):
            break
        seed = int(options.seed) + k
        layouts = []
        if equal_hosts:
            ho = tree_partition_host_order(cluster, cfg, grp, surrogate, seed, False, deadline)
            if ho is not None:
                layouts.append(local_orders(cluster, cfg, grp, surrogate, ho, options, 0.05, deadline.cancel,
                                            constraints, deadline))
        if not launcher:
            lay = tree_partition_layout(cluster, cfg, grp, surrogate, seed, False, deadline)
            if lay is not None:
                layouts.append(lay)
        if not layouts:
            break
        left -= host_cost + free_cost
        for dev in layouts:
            if left <= 0 or deadline.check():
                break
            if constraints and not satisfies(cluster, cfg, grp, dev, constraints):
                continue
            left -= 1
            cand = Candidate(cfg, dev, score(cfg, dev, grp), cur.rank)
            out.append(cand)
            if cand.cost.total_seconds < cur.cost.total_seconds * (1 - _REL):
                cur = cand
    check = constraint_check(cluster, cfg, grp, constraints)
    if left > 1 and not deadline.check() and cur.cost.total_seconds > bound * (1 + _REL) and (
            W > LOCAL_SEARCH_MAX_RANKS or cur is not best):
        share = left // 2 if W <= LOCAL_SEARCH_MAX_RANKS else left
        dev, _c, used = descend(cluster, cfg, traffic, cur.dev_of_rank, options.mode, share, grp, exposure,
                                deadline, deadline.cancel, check, stop_at=bound * (1 + _REL))
        left -= used
        if not np.array_equal(dev, cur.dev_of_rank):
            out.append(Candidate(cfg, dev, score(cfg, dev, grp), cur.rank))
    if W <= LOCAL_SEARCH_MAX_RANKS:
        out += _more_structures(cluster, candidates + out, surrogate, traffic, exposure, options, constraints,
                                baseline_dev, deadline, score, bound, left)
    return out


def _more_structures(cluster, pool, surrogate, traffic, exposure, options, constraints, baseline_dev, deadline,
                     score, bound, left) -> list[Candidate]:
    """Descents from the best layouts of the next ``ANYTIME_STRUCTURES`` group structures (after refine's 3).

    :func:`~rankmap.solver.search.refine.refine` descends from the best layout of
    the 3 best group structures (orders with the same groups are one,
    :func:`~rankmap.solver.search.refine.top_by_order`); an order whose proposals
    scored worse can still descend lower (its groups sit differently on the
    hosts' NICs), so what is left of the budget goes, in equal shares, to the
    next ones.  Stops when a layout meets the bound.
    """
    active = frozenset(c for c, v in surrogate.items() if v > 0)
    tops = top_by_order(pool, baseline_dev, REFINE_STARTS + ANYTIME_STRUCTURES, active)[REFINE_STARTS:]
    out: list[Candidate] = []
    best = min(c.cost.total_seconds for c in pool)
    for i, cand in enumerate(tops):
        if left <= 1 or deadline.check() or best <= bound * (1 + _REL):
            break
        grp = megatron_groups(cand.cfg)
        check = constraint_check(cluster, cand.cfg, grp, constraints)
        share = left // (len(tops) - i)
        dev, c, used = descend(cluster, cand.cfg, traffic, cand.dev_of_rank, options.mode, share, grp, exposure,
                               deadline, deadline.cancel, check, stop_at=bound * (1 + _REL))
        left -= used
        if not np.array_equal(dev, cand.dev_of_rank):
            out.append(Candidate(cand.cfg, dev, score(cand.cfg, dev, grp), cand.rank))
            best = min(best, c)
    return out
