"""CP-SAT model for placing ranks on devices over an ultrametric (DESIGN §4–§5).

The building block of the search: given ``n`` items (ranks, or blocks of ranks),
``n`` slots (devices, or hosts) whose widest-path bandwidths form nested
domains, and weighted item pairs, find the bijection minimising
``Σ_pairs w(u, v) / B(slot(u), slot(v))``.  This is a quadratic assignment
problem; the ultrametric makes it linear.  With levels ``b_0 > ... > b_{K-1}``::

    1/B(s, t) = 1/b_{K-1} - Σ_{k<K-1} same_k(s, t) · (1/b_{k+1} - 1/b_k)

so minimising the cost is maximising ``Σ_pairs Σ_k w·g_k·same_k(u, v)`` with
``g_k = 1/b_{k+1} - 1/b_k > 0``.  ``same_k(u, v)`` is a Boolean that may be 1
only if ``u`` and ``v`` sit in one level-``k`` domain:
``same_k(u, v) <= 1 - z(u, D) + z(v, D)`` for every level-``k`` domain ``D``,
where ``z(u, D) = Σ_{s in D} x(u, s)`` is linear in the assignment Booleans.
Optional block constraints express torchrun/Slurm launch order (items in
blocks of G go to one host), and "same domain" constraints express
``tp within host``-style requirements.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Sequence

import numpy as np
from ortools.sat.python import cp_model

from .deadline import Deadline
from ..types import SolveCancelled

__all__ = ["AssignmentProblem", "AssignmentResult", "solve_assignment"]


@dataclass
class AssignmentProblem:
    """A bijection problem over an ultrametric.

    Attributes
    ----------
    domains : numpy.ndarray of int, shape (K, n)
        Level-``k`` domain label of each slot; the last level may be the whole set.
    levels_bps : numpy.ndarray of float, shape (K,)
        Bandwidth of each level, bytes/s, strictly decreasing.
    pairs : numpy.ndarray of int, shape (m, 2)
        Unordered item pairs with traffic.
    weights : numpy.ndarray of float, shape (m,)
        Bytes exchanged per pair (both directions together).
    item_block : numpy.ndarray of int, shape (n,), optional
        Block of each item; with ``slot_group`` forces each block onto one group.
    slot_group : numpy.ndarray of int, shape (n,), optional
        Group (host) of each slot; blocks and groups have equal sizes.
    together : list of (item array (p, 2), slot labels (n,))
        Each item pair must share a slot label (e.g. ranks of one TP group in
        one host).
    hint : numpy.ndarray of int, shape (n,), optional
        A starting assignment (slot per item), also the reference for
        "fewest changes" tie-breaking.
    extra : numpy.ndarray of float, shape (n, n), optional
        Extra seconds per byte for a pair on slots (s, t), on top of the
        ultrametric (non-negative, symmetric; see ``Cluster.host_extra``).
        Linearised with one Boolean per (item pair, slot pair) where it is > 0.
    """

    domains: np.ndarray
    levels_bps: np.ndarray
    pairs: np.ndarray
    weights: np.ndarray
    item_block: np.ndarray | None = None
    slot_group: np.ndarray | None = None
    together: list | None = None
    hint: np.ndarray | None = None
    extra: np.ndarray | None = None


@dataclass
class AssignmentResult:
    """Outcome of :func:`solve_assignment`.

    Attributes
    ----------
    slot_of_item : numpy.ndarray of int, shape (n,), or None if infeasible
    optimal : bool
        Proved optimal.
    infeasible : bool
        Proved infeasible.
    cost_seconds : float
        Σ w/B of the returned assignment (exact float arithmetic).
    bound_seconds : float
        A valid lower bound on the optimum of *this model*, seconds (CP-SAT's
        proved objective bound).  The models of the search are surrogates
        (widest-path bandwidths, no link sharing), neither the predicted time
        nor a relaxation of it, so this is never reported as a bound on the
        predicted time.
    stopped : bool
        The wall-clock cap stopped CP-SAT before its deterministic time limit
        (the answer may then depend on the machine's load).
    """

    slot_of_item: np.ndarray | None
    optimal: bool
    infeasible: bool
    cost_seconds: float
    bound_seconds: float
    stopped: bool = False


def pair_cost(problem: AssignmentProblem, slot_of_item: np.ndarray) -> float:
    """Σ_pairs w / B of an assignment, seconds (float, no rounding)."""
    if problem.pairs.size == 0:
        return 0.0
    su = slot_of_item[problem.pairs[:, 0]]
    sv = slot_of_item[problem.pairs[:, 1]]
    K = problem.domains.shape[0]
    level = np.full(su.shape, K - 1)
    for k in range(K - 2, -1, -1):
        level = np.where(problem.domains[k][su] == problem.domains[k][sv], k, level)
    cost = float((problem.weights / problem.levels_bps[level]).sum())
    if problem.extra is not None:
        cost += float((problem.weights * problem.extra[su, sv]).sum())
    return cost


def solve_assignment(
    problem: AssignmentProblem,
    time_limit_seconds: float = 10.0,
    seed: int = 0,
    cancel: threading.Event | None = None,
    tie_break: bool = True,
    deadline: Deadline | None = None,
) -> AssignmentResult:
    """Solve an :class:`AssignmentProblem` with CP-SAT.

    The search is deterministic for a given ``seed``: one worker, and the
    limit is CP-SAT's deterministic time (``max_deterministic_time``,
    ``time_limit_seconds`` deterministic seconds).  The wall-clock cap is the
    time left before ``deadline`` (without one, 3× the limit) and is only a
    safety stop: when it stops CP-SAT first, the result has ``stopped`` set
    and the deadline records the stop (:meth:`Deadline.hit`).  With
    ``tie_break`` a second solve keeps the optimal cost and minimises the
    number of items moved from ``problem.hint`` (DESIGN §5: fewest changes).

    Raises
    ------
    SolveCancelled
        If ``cancel`` (or ``deadline.cancel``) is set before or during the search.
    """
    n = problem.domains.shape[1]
    K = problem.domains.shape[0]
    b = np.asarray(problem.levels_bps, dtype=np.float64)
    pairs = np.asarray(problem.pairs, dtype=np.int64).reshape(-1, 2)
    w = np.asarray(problem.weights, dtype=np.float64)
    keep = w > 0
    pairs, w = pairs[keep], w[keep]
    if cancel is None and deadline is not None:
        cancel = deadline.cancel
    if cancel is not None and cancel.is_set():
        raise SolveCancelled("solve cancelled")
    det_limit = float(time_limit_seconds)
    if deadline is not None and deadline.remaining() <= 0.0:
        deadline.hit()  # no time left: CP-SAT is not started
        return AssignmentResult(None, False, False, float("inf"), 0.0, stopped=True)

    model = cp_model.CpModel()
    x = [[model.NewBoolVar(f"x{i}_{s}") for s in range(n)] for i in range(n)]
    for i in range(n):
        model.AddExactlyOne(x[i])
    for s in range(n):
        model.AddExactlyOne(x[i][s] for i in range(n))

    if problem.item_block is not None and problem.slot_group is not None:
        blocks = np.asarray(problem.item_block)
        groups = np.asarray(problem.slot_group)
        nb = int(blocks.max()) + 1
        ng = int(groups.max()) + 1
        y = [[model.NewBoolVar(f"y{bk}_{g}") for g in range(ng)] for bk in range(nb)]
        for bk in range(nb):
            model.AddExactlyOne(y[bk])
        for g in range(ng):
            model.AddExactlyOne(y[bk][g] for bk in range(nb))
        for i in range(n):
            for s in range(n):
                model.AddImplication(x[i][s], y[int(blocks[i])][int(groups[s])])

    def zexpr(i: int, members: np.ndarray):
        return sum(x[i][int(s)] for s in members)

    # "together" constraints
    for item_pairs, labels in problem.together or []:
        labels = np.asarray(labels)
        doms = [np.flatnonzero(labels == v) for v in np.unique(labels)]
        for u, v in np.asarray(item_pairs).reshape(-1, 2):
            for members in doms:
                model.Add(zexpr(int(u), members) == zexpr(int(v), members))

    # objective: maximise weighted same-domain indicators
    gains = []  # (var, gain seconds)
    for k in range(K - 1):
        g_k = 1.0 / b[k + 1] - 1.0 / b[k]
        labels = problem.domains[k]
        doms = [np.flatnonzero(labels == v) for v in np.unique(labels)]
        doms = [d for d in doms if d.size >= 2]
        if not doms:
            continue
        z = {}
        for i in np.unique(pairs):
            for di, members in enumerate(doms):
                z[(int(i), di)] = zexpr(int(i), members)
        for (u, v), wt in zip(pairs.tolist(), w.tolist()):
            same = model.NewBoolVar(f"same{k}_{u}_{v}")
            for di in range(len(doms)):
                model.Add(same <= 1 - z[(u, di)] + z[(v, di)])
                model.Add(same <= 1 - z[(v, di)] + z[(u, di)])
            gains.append((same, wt * g_k))
    const = float((w / b[K - 1]).sum())
    penalties = []  # (var, seconds) added to the cost
    if problem.extra is not None and np.any(problem.extra > 0):
        ss, tt = np.nonzero(problem.extra > 0)
        for (u, v), wt in zip(pairs.tolist(), w.tolist()):
            for s_, t_ in zip(ss.tolist(), tt.tolist()):
                q = model.NewBoolVar(f"q{u}_{v}_{s_}_{t_}")
                model.Add(q >= x[u][s_] + x[v][t_] - 1)
                penalties.append((q, wt * float(problem.extra[s_, t_])))
    max_gain = max([gv for _, gv in gains] + [pv for _, pv in penalties], default=0.0)
    scale = 1e12 / max_gain if max_gain > 0 else 1.0
    coeffs = [int(round(gv * scale)) for _, gv in gains]
    pcoeffs = [int(round(pv * scale)) for _, pv in penalties]
    objective = sum(c * v for (v, _), c in zip(gains, coeffs)) - sum(
        c * v for (v, _), c in zip(penalties, pcoeffs)
    )
    gains = gains + penalties  # for the rounding slack of the bound
    model.Maximize(objective)

    hint = problem.hint
    if hint is not None:
        for i in range(n):
            for s in range(n):
                model.AddHint(x[i][s], int(hint[i]) == s)

    solver = cp_model.CpSolver()
    solver.parameters.num_workers = 1
    solver.parameters.random_seed = int(seed)
    solver.parameters.max_deterministic_time = det_limit
    solver.parameters.max_time_in_seconds = _wall_cap(deadline, det_limit)

    stop = threading.Event()

    def watch():
        while not stop.is_set():
            if cancel is not None and cancel.wait(0.05):
                solver.StopSearch()
                return

    watcher = None
    if cancel is not None:
        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
    try:
        status = solver.Solve(model)
        if cancel is not None and cancel.is_set():
            raise SolveCancelled("solve cancelled")
        stopped = _wall_stopped(solver, status, det_limit, deadline)
        if status == cp_model.INFEASIBLE:
            return AssignmentResult(None, False, True, float("inf"), float("inf"))
        if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            return AssignmentResult(None, False, False, float("inf"), _bound(const, solver, scale, gains), stopped)
        slot = _read(solver, x, n)
        optimal = status == cp_model.OPTIMAL
        bound = _bound(const, solver, scale, gains)
        tie = optimal and tie_break and hint is not None and gains
        if tie and deadline is not None and deadline.remaining() <= 0.0:
            deadline.hit()  # the tie-break solve would start after the deadline: skip it
            stopped = True
        elif tie:
            best = int(round(solver.ObjectiveValue()))
            model.Add(objective >= best)
            # fewest items moved; among those, keep the lowest items (ranks) in place
            big = n * (n + 1) * (2 * n + 1) // 6 + 1
            model.Minimize(sum((big + (n - i) ** 2) * (1 - x[i][int(hint[i])]) for i in range(n)))
            model.ClearHints()
            for i in range(n):
                for s in range(n):
                    model.AddHint(x[i][s], int(slot[i]) == s)
            solver.parameters.max_time_in_seconds = _wall_cap(deadline, det_limit)
            status2 = solver.Solve(model)
            if cancel is not None and cancel.is_set():
                raise SolveCancelled("solve cancelled")
            stopped = _wall_stopped(solver, status2, det_limit, deadline) or stopped
            if status2 in (cp_model.OPTIMAL, cp_model.FEASIBLE):
                slot = _read(solver, x, n)
        elif optimal and tie_break and hint is not None and not gains:
            slot = np.asarray(hint, dtype=np.int64) if _feasible_hint(problem, hint) else slot
        return AssignmentResult(slot, optimal, False, pair_cost(problem, slot), bound, stopped)
    finally:
        stop.set()


def _wall_cap(deadline: Deadline | None, det_limit: float) -> float:
    """CP-SAT's wall-clock cap, seconds: the time left before the deadline (3× the limit without one)."""
    if deadline is None:
        return 3.0 * det_limit
    return deadline.remaining()


def _wall_stopped(solver: cp_model.CpSolver, status, det_limit: float, deadline: Deadline | None) -> bool:
    """Whether the wall-clock cap, not the deterministic limit or a proof, ended the search.

    CP-SAT stops on its deterministic limit only once the deterministic time
    reaches it, so an unproved answer with less deterministic time was cut by
    the wall clock.  Records the stop on ``deadline``.
    """
    if status in (cp_model.OPTIMAL, cp_model.INFEASIBLE):
        return False
    if solver.ResponseProto().deterministic_time >= det_limit:
        return False
    if deadline is not None:
        deadline.hit()
    return True


def _feasible_hint(problem: AssignmentProblem, hint: np.ndarray) -> bool:
    """Whether ``hint`` satisfies the block and together constraints."""
    hint = np.asarray(hint)
    if problem.item_block is not None and problem.slot_group is not None:
        g = np.asarray(problem.slot_group)[hint]
        blocks = np.asarray(problem.item_block)
        for bk in np.unique(blocks):
            if np.unique(g[blocks == bk]).size != 1:
                return False
    for item_pairs, labels in problem.together or []:
        ip = np.asarray(item_pairs).reshape(-1, 2)
        lab = np.asarray(labels)
        if np.any(lab[hint[ip[:, 0]]] != lab[hint[ip[:, 1]]]):
            return False
    return True


def _read(solver: cp_model.CpSolver, x, n: int) -> np.ndarray:
    slot = np.empty(n, dtype=np.int64)
    for i in range(n):
        for s in range(n):
            if solver.BooleanValue(x[i][s]):
                slot[i] = s
                break
    return slot


def _bound(const: float, solver: cp_model.CpSolver, scale: float, gains: Sequence) -> float:
    """Lower bound on the cost from CP-SAT's upper bound on the gain (with rounding slack)."""
    if not gains:
        return const
    ub_gain = solver.BestObjectiveBound() / scale
    slack = 0.5 * len(gains) / scale  # coefficient rounding
    return max(0.0, const - ub_gain - slack)
