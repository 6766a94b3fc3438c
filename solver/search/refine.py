"""Second stage of the search on larger clusters, and the work budgets of the search (DESIGN §5).

:func:`refine` adds candidates to the surrogate models' proposals
(:mod:`.solve`): free-mode digit orders (:func:`~rankmap.solver.search.decompose.virtual_layouts`),
scipy FAQ starts and swap polish on the surrogate (:mod:`.polish`), then a
first-improvement descent on the real objective (:mod:`.localsearch`).

Every step has a deterministic work budget sized from the time limit T by a
nominal work model (an idle core, with margin): the answer depends on the
input only, whatever the machine's load, as long as the budgets complete
before the deadline.  The shares of T below add up to well under T so that
they do on an idle machine; the wall-clock :class:`~rankmap.solver.search.deadline.Deadline`
is only a safety stop (a solve it stops says ``stopped_by = "time_limit"``).
"""

from __future__ import annotations

from typing import Mapping

import numpy as np

from ..megatron.config import ParallelConfig

from ..megatron.catalogue import megatron_groups
from ..fabric.cluster import Cluster
from .constraints import constraint_check, satisfies
from .decompose import VIRTUAL_ORDER_MAX_RANKS, virtual_layouts
from .localsearch import descend
from ..megatron.orders import MEGATRON_CLI_ORDERS, order_priority
from .polish import FAQ_MAX_RANKS, POLISH_MAX_RANKS, faq_iteration_seconds, faq_layout, launcher_projection, polish
from .problem import Candidate

__all__ = ["CPSAT_SHARE", "FAQ_SHARE", "POLISH_SHARE", "VIRTUAL_SHARE", "DESCENT_SHARE", "LOCAL_SEARCH_MAX_RANKS",
           "eval_budget", "eval_seconds", "phase_idle", "refine"]

#: A cost within this relative tolerance of the bound meets it (as the anytime phase's stop).
BOUND_REL_TOL = 1e-9
#: Share of the time limit for the CP-SAT proposals of all orders (CP-SAT deterministic seconds).
#: The shares below are issue 28.4's recalibration: with the free-mode phases after them (solve.py),
#: the work models' shares add up to 0.62 of the limit in launcher mode and 0.82 in free mode (0.91 and
#: 1.24 before: free 512-GPU solves ended at the wall-clock stop, not at their budgets; measured CPU
#: time of the five 512-GPU quality instances at T = 6 s with a load average of 2-3: launcher
#: 0.9-1.05 T, free 1.1-1.35 T including the analytic bound's 0.9-1.5 s, which no budget sizes).
CPSAT_SHARE = 0.15
#: Share of the time limit for the FAQ starts (sizes their iteration counts).
FAQ_SHARE = 1 / 12
#: Share of the time limit for the swap polish of all starts (sizes their swap counts).
POLISH_SHARE = 0.1
#: Share of the time limit for the free-mode digit-order layouts (real-objective evaluations).
VIRTUAL_SHARE = 1 / 8
#: Share of the time limit for the descent on the real objective (real-objective evaluations).
DESCENT_SHARE = 0.22
#: The descent starts from the best layout of this many group structures (:func:`top_by_order`).
REFINE_STARTS = 3
#: Work model of one evaluation of the real objective (:func:`eval_seconds`), seconds: per
#: routed part (a class, or one part of it, with bytes), per route option of that part
#: (``A² + 1`` options for GPUs of ``A`` attachments, looped over in Python), and per flow
#: and route option (vectorised), plus per rank (per-node sums over the fabric).  Measured on this
#: project's 2-core machine, idle, over the benchmark's clusters (16–512 GPUs, A = 1–4): 1.6–8.2 ms
#: per evaluation, the model 0.8–1.5×; bench_solve's 8-part traffic: 9.3 ms at 1,024 GPUs (model
#: 18), 240 ms at 16,384 for a random layout (model 233).  Issue 28.4: with the NCCL time model the
#: five 512-GPU quality instances measured 10–16 ms of CPU per evaluation, 1.3–1.5× the model of
#: then, so every term is 1.3× what it was (the 512-GPU solves overran their budgets).  After the
#: channel paths through each host (issue 25) the 35 quality instances of 128–512 GPUs measured
#: 1.0–1.9× (median 1.3×) of that model, idle: the per-part terms are 1.5× and the per-flow term
#: 1.1× what they were (now 0.6–1.15× of the measured).
EVAL_SECONDS_PER_PART = 8.8e-4
EVAL_SECONDS_PER_PART_OPTION = 7.8e-5
EVAL_SECONDS_PER_FLOW_OPTION = 2.9e-7
EVAL_SECONDS_PER_RANK = 7.8e-6
#: The descent on the real objective runs up to this many ranks (beyond this the budget buys
#: too few moves to matter and the decomposition's proposals stand).
LOCAL_SEARCH_MAX_RANKS = 4096


def eval_seconds(cluster: Cluster, cfg: ParallelConfig, traffic: Mapping[str, float]) -> float:
    """Nominal seconds of one real-objective evaluation of a layout of ``cfg`` (the work model above).

    Raises nothing; a traffic without bytes costs one part's fixed time.

    Parts with bytes and groups of more than one rank; a part of ``g`` groups of ``k``
    ranks routes ``g·k·(k − 1)`` flows if it is an all-to-all, else ``g·k``.
    """
    from ..bound.analytic import _part_sizes
    from ..traffic import TRAFFIC_CLASSES

    A = int(cluster.fabric.att_node.shape[1])
    options = A * A + 1
    parts = flows = 0
    for c in TRAFFIC_CLASSES:
        if float(traffic.get(c, 0.0)) <= 0:
            continue
        for p, g, k in _part_sizes(cfg, traffic, c):
            parts += 1
            flows += g * k * ((k - 1) if p.kind == "all_to_all" else 1)
    return (parts * (EVAL_SECONDS_PER_PART + EVAL_SECONDS_PER_PART_OPTION * options)
            + flows * options * EVAL_SECONDS_PER_FLOW_OPTION + cfg.world_size * EVAL_SECONDS_PER_RANK
            ) or EVAL_SECONDS_PER_PART


def eval_budget(cluster: Cluster, cfg: ParallelConfig, traffic: Mapping[str, float], seconds: float) -> int:
    """Real-objective evaluations that fit ``seconds`` of nominal work (at least 1).

    A deterministic count from the work model :func:`eval_seconds`.
    """
    return max(1, int(seconds / eval_seconds(cluster, cfg, traffic)))


def phase_idle(candidates, options, deadline) -> bool:
    """Whether a phase after the first proposals (:func:`refine`, the anytime phase) has nothing to do:
    no candidate yet, mode ``fixed``, or ``deadline`` has passed (:meth:`Deadline.check` records it)."""
    return not candidates or options.mode == "fixed" or deadline.check()


def refine(cluster, candidates, surrogate, traffic, exposure, options, launcher, constraints, baseline_dev,
           deadline, score, bound: float | None = None, faq_min_calls: int = 1) -> list[Candidate]:
    """More candidates: free-mode digit orders, FAQ and swap polish (surrogate), then descent on the real objective.

    Parameters
    ----------
    candidates : list of Candidate
        The proposals so far (non-empty for anything to happen).
    surrogate, traffic : mapping class -> bytes
        Exposure-weighted bytes for the surrogate models; the real traffic.
    deadline : Deadline
        The solve's wall-clock stop: each step checks it and is skipped or cut
        short once it has passed (the stop is recorded on it).
    score : callable(cfg, dev, groups) -> CostBreakdown
        The real objective.
    bound : float, optional
        A lower bound (seconds) over the searched space: when a candidate already
        meets it nothing can be better, and refine adds nothing (deterministic:
        it depends on the candidates, not on the clock).

    faq_min_calls : int
        FAQ calls made even when ``FAQ_SHARE`` of the limit pays for fewer (each costs at least two
        iterations from each of two starts: about a second at 512 GPUs); 0 in free mode's phase after
        the launcher phase, whose share (a tenth of the limit's) pays for none and whose FAQ layouts
        never won there (the 18 quality instances of 256–512 GPUs: the same answers without it).

    Raises
    ------
    SolveCancelled
        If ``deadline.cancel`` is set.
    """
    if phase_idle(candidates, options, deadline):
        return []
    if bound is not None and min(c.cost.total_seconds for c in candidates) <= bound * (1 + BOUND_REL_TOL):
        return []  # a candidate meets the bound: proved optimal, nothing to refine
    cancel = deadline.cancel
    T = options.time_limit_seconds
    W = candidates[0].cfg.world_size
    out: list[Candidate] = []
    if options.mode == "free" and W <= VIRTUAL_ORDER_MAX_RANKS:
        # any digit order laid along the depth-first device order, numbered by the best order so far
        best_now = min(candidates, key=lambda c: c.cost.total_seconds)
        keys = [np.arange(W)] + [cluster.domains[k] for k in range(cluster.domains.shape[0])]
        dev_seq = np.lexsort(keys)
        grp = megatron_groups(best_now.cfg)
        left = eval_budget(cluster, best_now.cfg, traffic, T * VIRTUAL_SHARE)
        for vdev in virtual_layouts(best_now.cfg, dev_seq):
            if left <= 0 or deadline.check():
                break
            if constraints and not satisfies(cluster, best_now.cfg, grp, vdev, constraints):
                continue
            left -= 1
            out.append(Candidate(best_now.cfg, vdev, score(best_now.cfg, vdev, grp), best_now.rank))
    pool = candidates + out
    active = frozenset(c for c, v in surrogate.items() if v > 0)
    top = top_by_order(pool, baseline_dev, REFINE_STARTS, active)
    starts = [(cand, cand.dev_of_rank) for cand in top]
    if W <= POLISH_MAX_RANKS:
        if W <= FAQ_MAX_RANKS:
            faq_for = list(top)
            for cand in sorted(pool, key=lambda c: (order_priority(c.cfg.order), c.cost.total_seconds)):
                if cand.cfg.order in MEGATRON_CLI_ORDERS and all(cand.cfg.order != t.cfg.order for t in faq_for):
                    faq_for.append(cand)
            # FAQ runs at least 2 iterations from each of its two starts (barycenter, identity): only as many
            # calls as the share pays for (at least the best one; 5 calls of 2 iterations at 512 GPUs were
            # 2-5x the share)
            faq_for = faq_for[:max(faq_min_calls, int(T * FAQ_SHARE / (2 * 2 * faq_iteration_seconds(W))))]
            for cand in faq_for:
                if deadline.check():
                    break
                start = faq_layout(cluster, cand.cfg, surrogate, options.seed, T * FAQ_SHARE / len(faq_for))
                if launcher:
                    start = launcher_projection(cluster, start)
                starts.append((cand, start))
        budget = T * POLISH_SHARE / max(1, len(starts))
        polished = []
        for cand, start in starts:
            if deadline.check():
                break
            grp = megatron_groups(cand.cfg)
            check = constraint_check(cluster, cand.cfg, grp, constraints)
            if check is not None and not check(start):
                continue
            dev = polish(cluster, cand.cfg, surrogate, start, options.mode, budget, grp, cancel, check, deadline)
            polished.append(Candidate(cand.cfg, dev, score(cand.cfg, dev, grp), cand.rank))
        out += polished
        pool = pool + polished
    # descent on the real objective from the best layout of each of the best orders
    if W > LOCAL_SEARCH_MAX_RANKS:
        return out
    tops = top_by_order(pool, baseline_dev, REFINE_STARTS, active)
    evals = max(1, eval_budget(cluster, tops[0].cfg, traffic, T * DESCENT_SHARE) // len(tops))
    for cand in tops:
        if deadline.check():
            break
        grp = megatron_groups(cand.cfg)
        check = constraint_check(cluster, cand.cfg, grp, constraints)
        dev, _c, _used = descend(cluster, cand.cfg, traffic, cand.dev_of_rank, options.mode, evals, grp, exposure,
                                 deadline, cancel, check)
        if not np.array_equal(dev, cand.dev_of_rank):
            out.append(Candidate(cand.cfg, dev, score(cand.cfg, dev, grp), cand.rank))
    return out


def top_by_order(pool, baseline_dev, k, active=None):
    """The best candidate of each of the ``k`` best orders (cost, then tie-break key).

    With ``active`` (the classes that move bytes), orders whose groups of
    those classes are the same sets (e.g. ``tp-cp-ep-pp-dp`` and
    ``cp-pp-tp-ep-dp`` when cp = 1) count as one: they score every device
    assignment alike, so a second start from them would repeat the first.
    Only up to ``LOCAL_SEARCH_MAX_RANKS`` ranks (the structure key costs a
    sort of every active group array).
    """
    seen: set = set()
    keys: dict = {}
    top = []
    for cand in sorted(pool, key=lambda c: (c.cost.total_seconds, c.key(baseline_dev))):
        key = cand.cfg.order
        if active and cand.cfg.world_size <= LOCAL_SEARCH_MAX_RANKS:
            key = structure_key(cand.cfg, active, keys)
        if key not in seen:
            seen.add(key)
            top.append(cand)
        if len(top) == k:
            break
    return top


def structure_key(cfg: ParallelConfig, active, cache: dict | None = None) -> bytes:
    """A digest of the groups of the ``active`` classes of ``cfg``'s order, as sets (rows and members sorted).

    Two orders with the same key have the same flows for every class that
    moves bytes, hence the same cost for every device assignment.
    """
    import hashlib

    from ..traffic import CLASS_GROUP

    if cache is not None and cfg.order in cache:
        return cache[cfg.order]
    groups = megatron_groups(cfg)
    h = hashlib.blake2b(digest_size=16)
    for c in sorted(active):
        arr = np.sort(np.asarray(groups[CLASS_GROUP[c]]) - cfg.rank_offset, axis=1)
        arr = arr[np.lexsort(arr.T[::-1])] if arr.size else arr
        h.update(c.encode())
        h.update(np.ascontiguousarray(arr, dtype=np.int64).tobytes())
    key = h.digest()
    if cache is not None:
        cache[cfg.order] = key
    return key
