"""Launcher mode on hosts of several sizes (issue 27 item 2): 8 + 4 GPUs, or a host with an excluded GPU.

torchrun takes ``--nproc-per-node`` per host and numbers ranks ``base(node_rank) + local_rank``
with ``base`` the GPUs of the lower node ranks; Slurm's hostfile, Open MPI's rankfile and a
Kubernetes pod map express the same layouts.  A launcher layout is then a host order (each
host one contiguous block of as many ranks as its GPUs) and each host's local GPU order; the
baseline is torchrun's own: hosts in launch order, each host's GPUs filled by CUDA index in
turn (:func:`~rankmap.solver.launch.placement.launcher_device_order`).

The surrogate models of equal hosts (:mod:`.decompose`, :mod:`.polish`, :mod:`.tiling`,
:mod:`.partition`) assume one block size, so this search is simpler and exact where it matters
most (which host runs which block):

1. host orders: the launcher's, the fabric's depth-first order (:func:`~.decompose.dfs_host_order`),
   and both with the hosts grouped by type (largest hosts first, then smallest first; a stable
   sort, so the launch or fabric order holds inside a type), each laid out with GPUs by CUDA
   index and scored with the real objective for every order searched;
2. first-improvement descents on the real objective (:func:`~.localsearch.descend`, whose
   launcher moves on mixed hosts re-lay the blocks when two hosts exchange places, and swap
   GPU positions per host size) from the best layout of each group structure, within an
   evaluation budget of ``MIXED_SHARE`` of the time limit (:func:`~.refine.eval_budget`).

The constraints of :func:`~.problem.mixed_host_constraints` (``tp within host_type``) filter every
layout, so no TP group straddles hosts of different sizes.
"""

from __future__ import annotations

import numpy as np

from .constraints import constraint_check
from .decompose import dfs_host_order
from .localsearch import descend
from .problem import Candidate, Problem
from .refine import eval_budget, top_by_order

__all__ = ["MIXED_SHARE", "host_order_layout", "mixed_host_orders", "mixed_launcher_search"]

#: Share of the time limit (nominal work, real-objective evaluations) of the descents.
MIXED_SHARE = 0.5
#: Group structures descended from (the best layout of each).
MIXED_STARTS = 3
_REL = 1e-9


def host_order_layout(cluster, horder: np.ndarray) -> np.ndarray:
    """Device per rank of the launcher layout with hosts in ``horder``, GPUs by CUDA index, shape (n,)."""
    hd = cluster.host_devices
    return np.concatenate([hd[int(h)] for h in horder]).astype(np.int64)


def mixed_host_orders(p: Problem) -> list[np.ndarray]:
    """The host orders of step 1 (module doc), repeats removed."""
    cluster = p.cluster
    hob = cluster.host_of[p.baseline_dev]
    launch = hob[np.sort(np.unique(hob, return_index=True)[1])]
    dfs = dfs_host_order(cluster)
    size = cluster.gpus_per_host
    kind = np.unique(cluster.host_type_of()[cluster.first_device], return_inverse=True)[1]
    out, seen = [], set()
    for base in (launch, dfs):
        for ho in (base, base[np.lexsort((np.arange(base.size), kind[base], -size[base]))],
                   base[np.lexsort((np.arange(base.size), kind[base], size[base]))]):
            key = ho.tobytes()
            if key not in seen:
                seen.add(key)
                out.append(ho)
    return out


def mixed_launcher_search(p: Problem, initial: list[Candidate], bound: float) -> tuple[list[Candidate], int]:
    """Candidates of launcher mode on hosts of several sizes (module doc); returns (candidates, orders reached).

    ``initial``: the candidates so far (the baseline); ``bound``: the lower bound, seconds (a
    descent stops once it is met).
    """
    cluster, deadline = p.cluster, p.deadline
    out: list[Candidate] = []
    reached = len(p.orders)
    layouts = [host_order_layout(cluster, ho) for ho in mixed_host_orders(p)]
    for idx in range(len(p.orders)):
        if deadline.check():
            reached = idx
            break
        groups = p.groups(idx)
        for dev in layouts:
            cand = p.candidate(idx, dev, groups)
            if cand is not None:
                out.append(cand)
        p.report("search", list(initial) + out)
    pool = list(initial) + out
    if not pool or deadline.check():
        return out, reached
    active = frozenset(c for c, v in p.surrogate.items() if v > 0)
    starts = top_by_order(pool, p.baseline_dev, MIXED_STARTS, active)
    left = eval_budget(cluster, starts[0].cfg, p.traffic, p.options.time_limit_seconds * MIXED_SHARE)
    best = min(c.cost.total_seconds for c in pool)
    for i, start in enumerate(starts):
        if left <= 1 or deadline.check() or best <= bound * (1 + _REL):
            break
        groups = p.groups(start.rank) if start.rank >= 0 else p.baseline_groups
        check = constraint_check(cluster, start.cfg, groups, p.constraints)
        share = left // (len(starts) - i)
        dev, cost, used = descend(cluster, start.cfg, p.traffic, start.dev_of_rank, "launcher", share, groups,
                                  p.exposure, deadline, deadline.cancel, check, stop_at=bound * (1 + _REL))
        left -= used
        if not np.array_equal(dev, start.dev_of_rank):
            out.append(Candidate(start.cfg, dev, p.score(start.cfg, dev, groups), start.rank))
            best = min(best, cost)
        p.report("search", list(initial) + out)
    return out, reached
