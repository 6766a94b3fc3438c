"""The search over orders and rank-to-device assignments (DESIGN §5).

:func:`solve` is the entry point; the objective is the predicted communication
time per step on shared links (:mod:`rankmap.solver.cost.timemodel`).  Strategy, one module each:

* **Orders** (:mod:`rankmap.solver.megatron.orders`): ``default``, ``megatron-cli``, ``all`` or a list;
  orders that give identical groups are searched once.
* **fixed** mode: every order on the baseline device order; exact.
* **Small clusters** (≤ ``EXHAUSTIVE_MAX_DEVICES`` GPUs, :mod:`.exhaustive`):
  every layout of the mode for every order, scored in bulk: the optimum is
  proved by enumeration (status OPTIMAL).
* **Larger clusters**: candidate layouts from surrogate models (:mod:`.proposals`) over the
  widest-path domains (:mod:`.decompose`: host orders by depth-first order and
  CP-SAT, local GPU orders by CP-SAT per host type; :mod:`.polish`: scipy FAQ
  and swap search up to 512 ranks; :mod:`.partition`: recursive METIS
  partitioning of the rank graph along the fabric tree, host blocks in
  launcher mode, ranks in free mode), each scored with the real objective; then
  a first-improvement descent on the real objective (:mod:`.localsearch`) from
  the best few, within a deterministic evaluation budget.  Status OPTIMAL only
  when the cost meets the lower bound (:func:`~rankmap.solver.bound.analytic.search_lower_bound`).
* **Launcher mode on hosts of several sizes** (8 + 4 GPUs, an excluded GPU; :mod:`.mixed`): host
  orders (launch, depth-first, grouped by host type) then descents on the real objective; TP
  groups are kept on hosts of one type (:func:`~.problem.mixed_host_constraints`).
* **Free mode on equal hosts** runs the launcher-mode search and anytime
  phase first (the same budgets, so the launcher solve's answer), then the free-layout steps from
  all its candidates: every launcher layout is a free layout, so free mode is
  never worse than launcher mode.
* **Anytime phase** (:mod:`.anytime`): more tree-partition seeds, then the
  descent, within its own evaluation budget, until the bound is met.
* **Status, bound and time limit**: the bound is the optimum when every layout
  was enumerated, else the analytic lower bound; never the cost of a layout
  found, and never a CP-SAT bound (its models are surrogates, not relaxations
  of the predicted time).  Deterministic work budgets (CP-SAT deterministic
  time, swap and evaluation counts, all sized from ``time_limit_seconds``)
  decide the answer; one :class:`~rankmap.solver.search.deadline.Deadline` created
  when ``solve`` starts is the wall-clock safety stop of every phase.  A
  search it stopped has ``stopped_by = "time_limit"`` and is FEASIBLE, even
  when the lower bound meets the cost (DESIGN §5: a stopped solve never claims
  OPTIMAL, so a loaded machine cannot turn one answer into another status).
* **Constraints** (:mod:`.constraints`) filter every candidate.
* **Baseline** (DESIGN §5): the default order on the launcher's device order,
  :func:`~rankmap.solver.launch.placement.launcher_device_order` (hosts natural-sorted by
  name unless ``options.launch_order`` says otherwise, GPUs by local index).
* **Answer** (:mod:`.answer`): tie-breaking (the baseline unless something is strictly
  cheaper; then the default order, the other megatron-cli order, fewest ranks moved),
  status, bound and launch instructions.

Every phase reads one :class:`~.problem.Problem` (the checked inputs, the baseline, each
order's groups) and returns :class:`~.problem.Candidate` layouts.
"""

from __future__ import annotations

import threading
import time
from dataclasses import replace
from typing import Callable, Mapping

import networkx as nx

from ..bound.analytic import search_lower_bound
from ..bound.work import bound_work_meter, work_meter
from ..fabric.cluster import Cluster
from ..megatron.config import ParallelConfig
from ..results import SolveResult
from ..types import SolveOptions
from .anytime import anytime_search
from .answer import answer
from .deadline import Deadline, load_reserve
from .decompose import EXACT_MAX_DEVICES
from .exhaustive import EXHAUSTIVE_MAX_DEVICES, exhaustive_search
from .hostchoice import solve_subset
from .mixed import mixed_launcher_search
from .partition import partition_seconds, tree_partition_layout
from .problem import Candidate, Problem, check_traffic, cluster_model, progress_reporter, solve_deadline
from .proposals import propose
from .refine import CPSAT_SHARE, eval_seconds, refine

__all__ = ["solve"]

#: Free mode on equal hosts: the share of the time limit sizing the free-layout search that follows the
#: launcher-mode search (whose budgets are those of a launcher solve).
FREE_AFTER_LAUNCHER_SHARE = 0.12
#: Share of the time limit for free mode's tree partitions (:func:`_free_partitions`, by its work model).
#: (Issue 28.4: the free phase's share was 0.25; free mode's budgets then added up to 1.24 of the limit;
#: the partitions keep theirs: at 0.08 the 512-GPU pp-heavy fat tree lost its best partition, 27% dearer.)
FREE_PARTITION_SHARE = 0.12
#: Free mode makes at least 3 tree partitions when they take at most this share of the time limit.
PARTITION_MIN_SHARE = 0.25
#: The search's budgets are sized from the time limit less the bound's counted work beyond the room the
#: mode's shares leave (:func:`search_budget_seconds`), but from at least this share of it.
SEARCH_BUDGET_MIN_SHARE = 0.5
#: What the search's budgets, the bound and the rest of a solve (cluster model, baseline, answer) may
#: take together, as a share of the time limit, on an idle machine (issue 28.4: end before 0.9 of it).
SOLVE_WORK_SHARE = 0.8
#: Share of the time limit for free mode's grid-permutation layouts (:mod:`.gridperm`, by the evaluation work
#: model; at least the first order's).
FREE_GRID_SHARE = 0.03
#: The least limit refine's budgets are sized from after the proposals' scoring (:func:`refine_limit_seconds`).
REFINE_MIN_LIMIT_SECONDS = 1e-3


def solve(
    graph: nx.Graph | Cluster,
    cfg: ParallelConfig,
    traffic: Mapping[str, float],
    options: SolveOptions | None = None,
    cancel: threading.Event | None = None,
    progress: Callable[[str, float | None], None] | None = None,
    *,
    deadline: Deadline | None = None,
) -> SolveResult:
    """Find the order and rank-to-GPU assignment minimising the predicted communication time.

    Parameters
    ----------
    graph : networkx.Graph or Cluster
        The cluster (DESIGN §2).
    cfg : ParallelConfig
        Parallel sizes; ``cfg.world_size`` must equal the number of usable GPUs.
    traffic : mapping class -> bytes per rank per step
    options : SolveOptions
        Mode, orders, constraints, exposure, time limit, seed.
        ``time_limit_seconds`` bounds the whole solve in wall-clock time
        (cluster model, orders, CP-SAT, polish, local search); the result
        built after the search stops adds a margin that grows with the world
        size (README "Status and time limit").
    cancel : threading.Event, optional
        Set it to stop the search (gRPC deadline or cancellation).
    progress : callable(phase, best_seconds), optional
        Called at each phase boundary (``"cluster model"``, ``"orders"``,
        ``"search"``) and whenever the best predicted time found so far
        improves (``best_seconds``, None until a layout is scored).  It only
        observes: the result does not depend on it.
    deadline : Deadline, optional
        The wall-clock stop to use instead of one of ``time_limit_seconds``
        from now (tests force a stop with it; the gRPC server gives the call's
        deadline less its margin, with reason ``"deadline"``, when that comes
        before the time limit; budgets still come from
        ``time_limit_seconds``).  ``cancel`` is attached to it when it has none.

    Returns
    -------
    SolveResult
        ``stopped_by`` is the deadline's reason (``"time_limit"``, or ``"deadline"``
        for a caller's deadline) when it stopped some phase before its
        deterministic budget completed, else ``""``.

    Raises
    ------
    InvalidArgumentError
        Bad graph, sizes, orders, traffic or options.
    InfeasibleError
        Constraints that no layout satisfies.
    SolveCancelled
        ``cancel`` was set.
    """
    t0 = time.perf_counter()
    options = options or SolveOptions()
    given = deadline
    deadline = solve_deadline(deadline, options, cfg.world_size, cancel)
    report = progress_reporter(progress)
    report("cluster model")
    traffic = check_traffic(traffic)
    cluster = cluster_model(graph, options, deadline)
    # a slow cluster model means a slow machine: the step at the stop and the result will be slow too
    deadline.shorten(load_reserve(options.time_limit_seconds, cfg.world_size, time.perf_counter() - t0))
    if cfg.world_size < cluster.num_devices and not isinstance(graph, Cluster) and cfg.world_size > 0:
        # DESIGN §5: fewer ranks than GPUs: which hosts (GPUs) to use is part of the search
        return solve_subset(solve, graph, cluster, cfg, traffic, options, cancel, progress, given)
    p = Problem.prepare(cluster, cfg, traffic, options, deadline, report)
    base = p.baseline()
    candidates: list[Candidate] = [] if base is None else [base]
    # the bound takes seconds at 131,072 GPUs; once the deadline has passed no search follows it, and 0 is valid
    free_first = options.mode == "free" and cluster.equal_hosts and p.world_size > EXHAUSTIVE_MAX_DEVICES
    bound = lbound = 0.0
    with bound_work_meter() as bound_work:
        if not deadline.check():
            bound = search_lower_bound(cluster, p.orders, traffic, p.exposure, options.mode)
            if free_first:  # free mode's launcher phase stops at the launcher bound (never below the free one)
                lbound = search_lower_bound(cluster, p.orders, traffic, p.exposure, "launcher", plain=bound)
    # the search's budgets leave room for the bound's (counted, deterministic) work (issue 28.4)
    p = p.with_options(replace(options, time_limit_seconds=search_budget_seconds(
        options.time_limit_seconds, bound_work(), options.mode)))
    # free mode's launcher phase gets a launcher solve's budgets (the two bounds count what a launcher
    # solve's bound counts), so it reaches the launcher solve's answer: free mode is never worse
    launcher_limit = search_budget_seconds(options.time_limit_seconds, bound_work(), "launcher")
    report("search", candidates)

    if options.mode == "fixed" or p.world_size <= EXHAUSTIVE_MAX_DEVICES:
        found, reached = exhaustive_search(p)
        candidates += found
        proved = not deadline.stopped  # every layout of every order was scored
    else:
        proved = False
        last = p  # the problem of the last phase, whose budget sizes the anytime phase
        mixed = options.mode == "launcher" and not cluster.equal_hosts
        if free_first:
            found, reached, last = _free_after_launcher(p, candidates, bound, lbound, launcher_limit)
        elif mixed:  # hosts of several sizes (issue 27): blocks of G_h ranks per host
            found, reached = mixed_launcher_search(p, candidates, bound)
        else:
            grid = _free_grid_layouts(p) if options.mode == "free" else []
            found, reached = _search(p, candidates + grid, bound=bound)
            found += grid
        candidates += found
        if not deadline.stopped and not mixed:
            candidates += anytime_search(cluster, candidates, p.surrogate, traffic, p.exposure, last.options,
                                         last.launcher, p.constraints, p.baseline_dev, deadline, p.score, bound)
    report("search", candidates)
    return answer(p.with_options(options), candidates, bound, proved, reached, t0)


def budget_shares(mode: str) -> float:
    """The shares of the time limit the search's work budgets add up to in ``mode`` (nominal seconds per second).

    Launcher (and mixed-host launcher) mode: CP-SAT, FAQ, polish, descent and the anytime phase;
    free mode adds its tree partitions and a free phase of ``FREE_AFTER_LAUNCHER_SHARE`` of the limit
    (digit orders, FAQ, polish, descent, anytime); fixed mode: none.
    """
    from .anytime import ANYTIME_SHARE
    from .refine import DESCENT_SHARE, FAQ_SHARE, POLISH_SHARE, VIRTUAL_SHARE

    launcher = CPSAT_SHARE + FAQ_SHARE + POLISH_SHARE + DESCENT_SHARE + ANYTIME_SHARE
    if mode == "launcher":
        return launcher
    if mode == "free":
        return launcher + FREE_PARTITION_SHARE + FREE_AFTER_LAUNCHER_SHARE * (
            VIRTUAL_SHARE + FAQ_SHARE + POLISH_SHARE + DESCENT_SHARE + ANYTIME_SHARE)
    return 0.0


def search_budget_seconds(time_limit_seconds: float, bound_seconds: float, mode: str = "free") -> float:
    """The time limit the search's work budgets are sized from, seconds.

    The limit less the bound's work beyond the room the mode's shares leave under
    ``SOLVE_WORK_SHARE`` of it (``SOLVE_WORK_SHARE − budget_shares(mode)``: 0.23 of the limit in
    launcher mode, 0.035 in free mode), and at least ``SEARCH_BUDGET_MIN_SHARE`` of the limit.
    ``bound_seconds``: the nominal work the bounds counted (:func:`~rankmap.solver.bound.work.bound_work_meter`,
    deterministic), so budgets stay a function of the input and the limit.
    """
    T = float(time_limit_seconds)
    room = max(0.0, SOLVE_WORK_SHARE - budget_shares(mode)) * T
    return max(T * SEARCH_BUDGET_MIN_SHARE, T - max(0.0, float(bound_seconds) - room))


def _free_after_launcher(p: Problem, candidates: list[Candidate], bound: float, lbound: float,
                         launcher_limit: float):
    """Free mode on equal hosts: every launcher layout is a free layout, so the launcher-mode search
    and anytime phase run first (same budgets, so the same answer), then free layouts are searched
    from all their candidates.  ``bound`` and ``lbound``: the free and the launcher search's lower bounds;
    ``launcher_limit``: the limit a launcher solve sizes its budgets from (:func:`search_budget_seconds`).
    Returns (new candidates, orders reached, the free phase's problem: its budget, from
    ``FREE_AFTER_LAUNCHER_SHARE`` of the time limit, also sizes the anytime phase)."""
    options = p.options
    lp = p.with_options(replace(options, mode="launcher", time_limit_seconds=launcher_limit))
    # refine runs in full here (no bound): its candidates contain the launcher-mode answer either way
    # (that search skips refine only once a proposal meets its bound), and the free phase starts from them
    found, reached = _search(lp, candidates)
    found += anytime_search(p.cluster, candidates + found, p.surrogate, p.traffic, p.exposure, lp.options, True,
                            p.constraints, p.baseline_dev, p.deadline, p.score, lbound)
    # the free tree partitions and grid layouts after the launcher phase, so they cannot delay it past the
    # wall clock (free mode is never worse than launcher mode; at 8,192 GPUs the partitions ran first and
    # the launcher phase was stopped short of the launcher solve's answer)
    found += _free_partitions(p)
    found += _free_grid_layouts(p)
    fp = p.with_options(replace(options, time_limit_seconds=options.time_limit_seconds * FREE_AFTER_LAUNCHER_SHARE))
    # above 16 GPUs the other free proposals are the launcher ones
    more, _r = _search(fp, candidates + found, proposals=p.world_size <= EXACT_MAX_DEVICES, bound=bound,
                       faq_min_calls=0)
    return found + more, reached, fp


def _search(p: Problem, initial: list[Candidate], proposals: bool = True, bound: float | None = None,
            faq_min_calls: int = 1):
    """Candidates of the proposals of every order (without ``proposals``: the tree partition only), then :func:`refine`.

    ``initial``: the candidates so far (refine starts from them too); ``bound``: the searched
    space's lower bound (refine is skipped once a candidate meets it).  Returns
    (new candidates, orders reached).  ``faq_min_calls``: :func:`refine`'s.

    Work (issue 28.4): each order's CP-SAT models have ``CPSAT_SHARE`` of the limit over the orders
    (deterministic time); its tree partitions (:func:`~.partition.partition_seconds`, charged by
    :func:`~.proposals.propose`) and one real-objective evaluation per distinct proposal scored
    (:func:`~.refine.eval_seconds`) are counted too.  The proposals may take ``CPSAT_SHARE`` and
    refine's shares of the limit together: an order after the first starts only if what the first
    took still fits (at 8,192 GPUs one order's partitions and scoring are ~2 s; the wall clock
    decided how many were scored, and the answer with it), and refine is sized from what is left
    (:func:`refine_limit_seconds`).  The deadline stays the safety stop.
    """
    out: list[Candidate] = []
    reached = len(p.orders)
    T = p.options.time_limit_seconds
    per_order_limit = max(0.05, T * CPSAT_SHARE / max(1, len(p.orders)))
    # the proposals' work outside CP-SAT's budgets (tree partitions, scoring) is refine's kind of work: the
    # proposals may take CP-SAT's share and refine's; the next order starts only if what the first took is left
    cap = T * (CPSAT_SHARE + refine_shares(p.options.mode))
    extra = first = 0.0  # nominal seconds outside CP-SAT's budgets; what the first order took in all
    for idx, ocfg in enumerate(p.orders):
        if p.deadline.check() or (idx > 0 and per_order_limit * idx + extra + first > cap):
            reached = idx
            break
        groups = p.groups(idx)
        seen_dev: set = set()
        with work_meter() as partitions:
            devs = propose(p, ocfg, groups, per_order_limit, surrogate_models=proposals)
        extra += partitions()
        for dev in devs:
            if out and p.deadline.check():
                break  # scoring one proposal takes ~0.3 s at 8,192 GPUs: the stop is checked before each
            key = dev.tobytes()
            if key in seen_dev:
                continue
            seen_dev.add(key)
            extra += eval_seconds(p.cluster, ocfg, p.traffic)
            cand = p.candidate(idx, dev, groups)
            if cand is not None:
                out.append(cand)
        if idx == 0:
            first = per_order_limit + extra
        p.report("search", list(initial) + out)
    ropts = replace(p.options, time_limit_seconds=refine_limit_seconds(T, extra, p.options.mode))
    out += refine(p.cluster, list(initial) + out, p.surrogate, p.traffic, p.exposure, ropts, p.launcher,
                  p.constraints, p.baseline_dev, p.deadline, p.score, bound, faq_min_calls)
    return out, reached


def refine_limit_seconds(time_limit_seconds: float, scoring_seconds: float, mode: str) -> float:
    """The limit :func:`refine` sizes its budgets from after the proposals, seconds.

    Scoring a proposal is one real-objective evaluation (:func:`~.refine.eval_seconds`), the work
    refine's own budgets buy, and no share of the limit paid for it nor for the tree partitions:
    68 proposals of 11.5 ms each at 512 GPUs on fragmented NVL72 racks were 0.78 s of a 6 s limit,
    and the free solve ended at the wall-clock stop (issue 28.4).  That nominal work
    (``scoring_seconds``, partitions included) comes off refine's budgets
    (FAQ, polish, descent, and free mode's digit orders: ``refine_shares(mode)`` of the limit), so the
    proposals and refine together stay within those shares; never below ``REFINE_MIN_LIMIT_SECONDS``
    (refine's least budgets: one FAQ call, one evaluation per descent).  Deterministic: the count
    of proposals depends on the input and the budgets only.
    """
    T = float(time_limit_seconds)
    return max(REFINE_MIN_LIMIT_SECONDS, T - float(scoring_seconds) / refine_shares(mode))


def refine_shares(mode: str) -> float:
    """The shares of the limit :func:`refine`'s budgets add up to in ``mode`` (FAQ, polish, descent; free
    mode's digit orders too)."""
    from .refine import DESCENT_SHARE, FAQ_SHARE, POLISH_SHARE, VIRTUAL_SHARE

    return FAQ_SHARE + POLISH_SHARE + DESCENT_SHARE + (VIRTUAL_SHARE if mode == "free" else 0.0)


def _free_partitions(p: Problem) -> list[Candidate]:
    """Free-mode tree-partition layouts (:mod:`.partition`), scored (skipped past the deadline).

    Three variants (recursive bisection on ring pairs, one k-way cut on ring pairs, bisection on
    all-pairs cliques) of the first order, then each variant over the other orders.  In free mode every order reaches
    the same layouts up to a relabelling of the ranks, so the orders only restart METIS from other
    numberings, and those differ (512 GPUs, 3-tier tree, tp4 cp2 pp8: 71.3 to 112 ms).  Work model:
    each costs :func:`~rankmap.solver.search.partition.partition_seconds` plus one evaluation; taken until
    ``FREE_PARTITION_SHARE`` of the time limit is spent (at least 3 when they take at most
    ``PARTITION_MIN_SHARE`` of it: at 8,192 GPUs three were 4.5 s of a 6 s limit, after the launcher
    phase, and the wall clock stopped them).
    """
    orders = p.orders
    out = []
    per = partition_seconds(orders[0].world_size) + eval_seconds(p.cluster, orders[0], p.surrogate)
    T = p.options.time_limit_seconds
    count = max(3 if 3 * per <= T * PARTITION_MIN_SHARE else 0, int(T * FREE_PARTITION_SHARE / per))
    variants = ((True, "ring"), (False, "ring"), (True, "clique"))
    todo = [(0, v) for v in variants] + [(idx, v) for v in variants for idx in range(1, len(orders))]
    for idx, (bisect, pairs) in todo[:count]:
        if p.deadline.check():
            break
        lay = tree_partition_layout(p.cluster, orders[idx], p.groups(idx), p.surrogate, p.options.seed, bisect,
                                    p.deadline, pairs)
        cand = None if lay is None else p.candidate(idx, lay)
        if cand is not None:
            out.append(cand)
    return out


def _free_grid_layouts(p: Problem) -> list[Candidate]:
    """Free-mode layouts filling the hosts along other axis orders (:mod:`.gridperm`), scored.

    Every order's permutations when the job has experts (the expert grid differs between
    orders), else the first order's (the others give the same layouts renumbered).  Work
    model: one evaluation each; taken until ``FREE_GRID_SHARE`` of the time limit is spent
    (none on large clusters where one evaluation costs more).  Skipped past the deadline.
    """
    from .gridperm import grid_permutation_layouts

    orders = p.orders if p.orders[0].ep > 1 else p.orders[:1]
    per = eval_seconds(p.cluster, orders[0], p.surrogate)
    count = int(p.options.time_limit_seconds * FREE_GRID_SHARE / per)
    out: list[Candidate] = []
    done = 0
    for idx, ocfg in enumerate(orders):
        groups = p.groups(idx)
        for _name, dev in grid_permutation_layouts(ocfg, p.baseline_dev):
            if p.deadline.check() or done >= count:
                return out
            done += 1
            cand = p.candidate(idx, dev, groups)
            if cand is not None:
                out.append(cand)
    return out
