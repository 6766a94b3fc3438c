"""The answer of a solve from its candidates (DESIGN §5–§6): the best layout, ties, status, result.

* **Tie-breaking**: the baseline (default order, baseline devices) unless something is
  strictly cheaper; then the default order, the other megatron-cli order, then fewest
  ranks moved from the baseline; in free mode a layout torchrun can launch first.
* **Status and bound**: OPTIMAL when every layout was enumerated, or when the cost
  meets the analytic lower bound; never when the deadline stopped a phase.
* **Launch instructions** (:mod:`rankmap.solver.launch.placement`).
"""

from __future__ import annotations

import time

import numpy as np

from ..errors import InfeasibleError
from ..fabric.cluster import Cluster
from ..cost.measured_use import measured_links_used
from ..launch.placement import apply_instructions, host_placements
from ..megatron.catalogue import megatron_groups
from ..results import HostPlacement, Layout, SolveResult
from .constraints import satisfies
from .problem import REL_TOL, Candidate, Problem

__all__ = ["answer"]


def answer(p: Problem, candidates: list[Candidate], bound: float, proved: bool, reached: int,
           t0: float) -> SolveResult:
    """The solve's result: the best of ``candidates`` (ties as in the module doc), its status and bound.

    ``proved``: every layout of the searched space was scored; ``reached``: orders searched
    before the deadline; ``t0``: ``time.perf_counter()`` when the solve started.

    Raises
    ------
    InfeasibleError
        No candidate (no layout found satisfies the constraints).
    """
    if not candidates:
        _infeasible(p)
    best_cost = min(c.cost.total_seconds for c in candidates)
    tol = REL_TOL * max(best_cost, 1e-30)
    tied = [c for c in candidates if c.cost.total_seconds <= best_cost + tol]
    if p.options.mode == "free":
        # equal predicted time: a layout torchrun can launch (each host one block of ranks) first
        best = min(tied, key=lambda c: (not _host_blocks(p.cluster, c.dev_of_rank), c.key(p.baseline_dev)))
    else:
        best = min(tied, key=lambda c: c.key(p.baseline_dev))
    best = _in_index_order(p, best, tol)
    status, bound = _status(best.cost.total_seconds, bound, proved, bool(p.deadline.stopped_by))
    return _result(p, best, status, bound, t0, p.orders[:max(reached, 1)])


def _infeasible(p: Problem):
    constraints = p.constraints
    if p.deadline.stopped:
        raise InfeasibleError(
            f"no layout satisfying the constraints {'; '.join(str(c) for c in constraints)} was found within "
            f"the time limit of {p.options.time_limit_seconds:g} s; raise time_limit", "constraints"
        )
    hint = ("" if len(p.orders) > 1 else
            f" in order {p.orders[0].order} (the only order searched; orders megatron-cli or all search more)")
    implicit = [c for c in constraints if c not in tuple(p.options.constraints)]
    if implicit:  # launcher mode on hosts of several sizes (issue 27: mixed_host_constraints)
        sizes = sorted({int(x) for x in p.cluster.gpus_per_host}, reverse=True)
        hint += (f"; launcher mode on hosts of {'/'.join(map(str, sizes))} GPUs keeps each TP group on hosts of "
                 f"one type (each host runs a block of as many ranks as its GPUs): use sizes whose TP groups fit "
                 f"the hosts, or mode free")
    raise InfeasibleError(
        "no layout satisfies the constraints " + "; ".join(str(c) for c in constraints) + hint, "constraints"
    )


def _in_index_order(p: Problem, best: Candidate, tol: float) -> Candidate:
    """``best`` with each host's GPUs given to its ranks in index order, when that costs no more.

    Per host, the ranks on it (in global-rank order) take the GPUs they use there by
    ``local_index``: the same hosts for the same ranks, so the same host pattern, and a
    launch without a per-rank GPU map (``CUDA_VISIBLE_DEVICES`` in index order) whenever
    the search's local order was only one of equally good ones.  One evaluation.
    """
    cluster = p.cluster
    dev = np.asarray(best.dev_of_rank, dtype=np.int64)
    host = cluster.host_of[dev]
    ranks = np.lexsort((np.arange(dev.size), host))  # ranks by (host, global rank)
    gpus = np.lexsort((cluster.local_index[dev], host))  # the same positions' GPUs by (host, local index)
    out = np.empty_like(dev)
    out[ranks] = dev[gpus]
    if np.array_equal(out, dev):
        return best
    grp = megatron_groups(best.cfg)
    if not satisfies(cluster, best.cfg, grp, out, p.constraints):
        return best
    cand = Candidate(best.cfg, out, p.score(best.cfg, out, grp), best.rank)
    return cand if cand.cost.total_seconds <= best.cost.total_seconds + tol else best


def _host_blocks(cluster: Cluster, dev_of_rank: np.ndarray) -> bool:
    """Every host runs one contiguous block of global ranks (what torchrun and a Kubernetes
    pod per host can launch; any layout works with a Slurm hostfile or an MPI rankfile)."""
    host = cluster.host_of[np.asarray(dev_of_rank)]
    runs = 1 + int(np.count_nonzero(host[1:] != host[:-1])) if host.size else 0
    return runs == np.unique(host).size


def _status(cost: float, lower: float, enumerated: bool, stopped: bool = False) -> tuple[str, float]:
    """Status and reported bound (DESIGN §5).

    ``stopped``: the time limit cut some phase short; such a solve never
    claims OPTIMAL (DESIGN §5), whatever the bound.

    ``enumerated``: every layout of the searched space was scored, so ``cost``
    is the optimum.  Otherwise the bound is the analytic ``lower`` bound, and
    OPTIMAL needs it to meet the cost (relative 1e-9); the reported bound is
    never above the cost (``min`` with a valid bound stays valid), and is never
    taken from the cost of a layout found.
    """
    if enumerated and not stopped:
        return "OPTIMAL", cost
    if enumerated:
        return "FEASIBLE", min(lower, cost)
    optimal = not stopped and cost <= lower * (1 + 1e-9) + 1e-30
    return ("OPTIMAL" if optimal else "FEASIBLE"), min(lower, cost)


def _with_host_note(apply: dict, cluster) -> dict:
    """``apply`` with ``hosts_inferred`` (the note of :func:`~rankmap.solver.fabric.hostinfer.infer_hosts`)
    when the cluster's hosts were inferred from the graph."""
    note = getattr(cluster, "host_note", None)
    if note:
        apply = {**apply, "hosts_inferred": note}
    return apply


def _result(p: Problem, best: Candidate, status: str, bound: float, t0: float, orders) -> SolveResult:
    devices = p.cluster.devices
    # cancel check points (a gRPC deadline): each step below takes a tenth of a second or more at 131,072 ranks
    check = p.deadline.cancel_check() or (lambda: None)
    check()
    hosts = host_placements(p.cluster, best.dev_of_rank)
    check()
    if best.cfg.rank_offset:
        hosts = tuple(
            HostPlacement(h.host, h.node_rank, h.cuda_visible_devices,
                          tuple(r + best.cfg.rank_offset for r in h.global_ranks))
            for h in hosts
        )
    groups = megatron_groups(best.cfg)
    check()
    apply = _with_host_note(apply_instructions(best.cfg, hosts, p.launcher), p.cluster)
    check()
    return SolveResult(
        config=best.cfg,
        layout=Layout(best.cfg.order, tuple(str(devices[i]) for i in best.dev_of_rank), best.cost),
        baseline=Layout(p.baseline_cfg.order, tuple(str(devices[i]) for i in p.baseline_dev), p.baseline_cost),
        hosts=hosts,
        status=status,
        bound_seconds=float(bound),
        solve_seconds=time.perf_counter() - t0,
        groups=groups,
        traffic=p.traffic,
        apply=apply,
        mode=p.options.mode,
        orders_searched=tuple(c.order for c in orders),
        stopped_by=p.deadline.stopped_by,
        nccl=p.cluster.nccl,
        # the measured links (issue 27) the chosen layout's flows cross
        measured_links=tuple(measured_links_used(p.cluster, best.cfg, best.dev_of_rank, p.traffic)),
    )
