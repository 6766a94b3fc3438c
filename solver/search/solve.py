"""The search over orders and rank-to-device assignments (DESIGN §5).

:func:`solve` is the entry point; the objective is the predicted communication
time per step on shared links (:mod:`rankmap.solver.cost.timemodel`).  Strategy, one module each:

* **Orders** (:mod:`rankmap.solver.megatron.orders`): ``default``, ``megatron-cli``, ``all`` or a list;
  orders that give identical groups are searched once.
* **fixed** mode: every order on the baseline device order; exact.
* **Small clusters** (≤ ``EXHAUSTIVE_MAX_DEVICES`` GPUs, :mod:`.exhaustive`):
  every layout of the mode for every order, scored in bulk: the optimum is
  proved by enumeration (status OPTIMAL).
* **Larger clusters**: candidate layouts from surrogate models over the
  widest-path domains (:mod:`.decompose`: host orders by depth-first order and
  CP-SAT, local GPU orders by CP-SAT per host type; :mod:`.polish`: scipy FAQ
  and swap search up to 512 ranks; :mod:`.partition`: recursive METIS
  partitioning of the rank graph along the fabric tree, host blocks in
  launcher mode, ranks in free mode), each scored with the real objective; then
  a first-improvement descent on the real objective (:mod:`.localsearch`) from
  the best few, within a deterministic evaluation budget.  Status OPTIMAL only
  when the cost meets the lower bound (:func:`~rankmap.solver.cost.timemodel.lower_bound`).
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
* **Tie-breaking**: the baseline (default order, baseline devices) unless
  something is strictly cheaper; then the default order, the other
  megatron-cli order, then fewest ranks moved from the baseline.
* **Launch instructions** (:mod:`rankmap.solver.launch.placement`).
"""

from __future__ import annotations

import threading
import time
from dataclasses import replace
from typing import Callable, Mapping, Sequence

import networkx as nx
import numpy as np

from .anytime import anytime_search
from ..bound.analytic import search_lower_bound
from ..megatron.catalogue import ParallelConfig, megatron_groups
from ..fabric.cluster import Cluster, cluster_from_graph
from .constraints import check_capacity, satisfies, satisfies_batch
from .deadline import Deadline, search_seconds
from .decompose import (
    EXACT_MAX_DEVICES,
    HOST_MODEL_MAX_HOSTS,
    dfs_host_order,
    domain_level_orders,
    host_model_order,
    local_orders,
    surrogate_exact,
)
from ..errors import InfeasibleError, InvalidArgumentError
from .exhaustive import EXHAUSTIVE_MAX_DEVICES, PairRoutes, bulk_cost, enumerate_layouts
from ..launch.placement import apply_instructions, host_placements, launcher_device_order
from ..megatron.orders import MEGATRON_CLI_ORDERS, candidate_orders
from .partition import partition_seconds, tree_partition_host_order, tree_partition_layout
from .polish import host_order_search
from ..megatron.ranks import DEFAULT_ORDER
from .refine import CPSAT_SHARE, Candidate, eval_seconds, refine
from .tiling import tiling_host_orders
from ..cost.timemodel import layout_cost
from ..traffic import TRAFFIC_CLASSES, Traffic
from ..types import CostBreakdown, HostPlacement, Layout, SolveOptions, SolveResult

__all__ = ["solve", "evaluate", "candidate_orders", "host_placements", "EXACT_MAX_DEVICES",
           "EXHAUSTIVE_MAX_DEVICES", "MEGATRON_CLI_ORDERS"]

_REL_TOL = 1e-9
#: Free mode on equal hosts: the share of the time limit sizing the free-layout search that follows the
#: launcher-mode search (whose budgets are those of a launcher solve).
FREE_AFTER_LAUNCHER_SHARE = 0.25
#: Share of the time limit for free mode's tree partitions (:func:`_free_partitions`, by its work model).
FREE_PARTITION_SHARE = 0.12


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
        from now (tests force a stop with it; budgets still come from
        ``time_limit_seconds``).  ``cancel`` is attached to it when it has none.

    Returns
    -------
    SolveResult
        ``stopped_by`` is ``"time_limit"`` when the deadline stopped some phase
        before its deterministic budget completed, else ``""``.

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
    if deadline is None:
        deadline = Deadline(search_seconds(options.time_limit_seconds, cfg.world_size), cancel)
    elif deadline.cancel is None:
        deadline.cancel = cancel
    report = _progress_reporter(progress)
    report("cluster model")
    traffic = _check_traffic(traffic)
    exposure = dict(options.exposure or {})
    if isinstance(graph, Cluster):
        cluster = graph
    else:
        g = graph
        if options.exclude_devices or options.exclude_hosts:
            g = _exclude(graph, options)
        # the cluster model takes seconds at 131,072 GPUs: cancellation (a gRPC deadline) stops it
        cluster = cluster_from_graph(g, check=deadline.cancel_check(), nccl=options.nccl)
    deadline.check()  # raises if cancelled; a passed deadline is recorded
    if cfg.world_size < cluster.num_devices and not isinstance(graph, Cluster) and cfg.world_size > 0:
        # DESIGN §5: fewer ranks than GPUs: which hosts (GPUs) to use is part of the search
        from .hostchoice import solve_subset

        return solve_subset(graph, cluster, cfg, traffic, options, cancel, progress)
    if cfg.world_size != cluster.num_devices:
        more = cfg.world_size > cluster.num_devices
        raise InvalidArgumentError(
            f"world_size {cfg.world_size} {'is more than' if more else 'does not match'} the "
            f"{cluster.num_devices} usable GPUs of the cluster"
            + ("" if not more else "; a job needs one GPU per rank"),
            "world_size",
        )
    W = cfg.world_size
    launcher = options.mode == "launcher"
    if launcher:
        gph = cluster.gpus_per_host
        if np.unique(gph).size != 1:
            detail = ", ".join(f"{h}={c}" for h, c in list(zip(cluster.hosts, gph.tolist()))[:6])
            raise InvalidArgumentError(
                f"launcher mode needs the same GPU count on every host (torchrun --nproc-per-node), got {detail}; "
                f"use mode free",
                "mode",
            )
    report("orders")
    orders = candidate_orders(cfg, options.orders)
    if not orders:
        raise InvalidArgumentError(f"no order in {options.orders!r} is valid for these sizes", "orders")
    constraints = tuple(options.constraints)
    base_cfg = cfg.with_order(options.baseline_order)
    # DESIGN §5: the baseline is what the launcher does without rankmap (hosts in launch order)
    baseline_dev = launcher_device_order(cluster, options.launch_order, options.exclude_hosts)
    base_groups = megatron_groups(base_cfg)

    def score(c, dev, grp=None):
        return layout_cost(cluster, c, dev, traffic, grp, exposure)

    baseline_cost = score(base_cfg, baseline_dev, base_groups)
    for c in constraints:
        cluster.level_labels(c.level)  # validates the level name
    check_capacity(cluster, base_cfg, constraints)
    # surrogate models weigh bytes by how exposed they are
    surrogate = {c: v * exposure.get(c, 1.0) for c, v in traffic.items()}

    candidates: list[Candidate] = []
    if satisfies(cluster, base_cfg, base_groups, baseline_dev, constraints):
        candidates.append(Candidate(base_cfg, baseline_dev, baseline_cost, -1))
    bound = search_lower_bound(cluster, orders, traffic, exposure, options.mode)
    proved = False
    reached = len(orders)  # orders searched before the deadline
    report("search", candidates)

    if options.mode == "fixed" or W <= EXHAUSTIVE_MAX_DEVICES:
        found, reached = _exhaustive(cluster, orders, traffic, exposure, options.mode, constraints, baseline_dev,
                                     deadline, score)
        candidates += found
        proved = not deadline.stopped  # every layout of every order was scored
    else:
        args = (cluster, orders, surrogate, traffic, exposure, constraints, baseline_dev, deadline, score, report)
        any_opts = options
        if options.mode == "free" and np.unique(cluster.gpus_per_host).size == 1:
            # every launcher layout is a free layout: free mode first runs the launcher-mode search
            # (same budgets, so the same answer), then searches free layouts from all its candidates
            # the free tree partitions first (cheap): kept aside from the launcher phase, whose pool stays its own
            free_first = _free_partitions(cluster, orders, surrogate, options, constraints, deadline, score)
            lopts = replace(options, mode="launcher")
            # refine runs in full here (no bound): its candidates contain the launcher-mode answer either way
            # (that search skips refine only once a proposal meets its bound), and the free phase starts from them
            lbound = search_lower_bound(cluster, orders, traffic, exposure, "launcher", plain=bound)
            found, reached = _search(*args, candidates, lopts, True)
            candidates += found
            candidates += anytime_search(cluster, candidates, surrogate, traffic, exposure, lopts, True, constraints,
                                         baseline_dev, deadline, score, lbound)
            candidates += free_first
            fopts = replace(options, time_limit_seconds=options.time_limit_seconds * FREE_AFTER_LAUNCHER_SHARE)
            # above 16 GPUs the other free proposals are the launcher ones
            found, _r = _search(*args, candidates, fopts, False, proposals=W <= EXACT_MAX_DEVICES, bound=bound)
            candidates += found
            any_opts = fopts  # the free anytime phase below: budget from the free share too
        else:
            found, reached = _search(*args, candidates, options, launcher, bound=bound)
            candidates += found
    if options.mode != "fixed" and W > EXHAUSTIVE_MAX_DEVICES and not deadline.stopped:  # after the search
        candidates += anytime_search(cluster, candidates, surrogate, traffic, exposure, any_opts, launcher,
                                     constraints, baseline_dev, deadline, score, bound)
    report("search", candidates)

    if not candidates:
        if deadline.stopped:
            raise InfeasibleError(
                f"no layout satisfying the constraints {'; '.join(str(c) for c in constraints)} was found within "
                f"the time limit of {options.time_limit_seconds:g} s; raise time_limit", "constraints"
            )
        hint = ("" if len(orders) > 1 else
                f" in order {orders[0].order} (the only order searched; orders megatron-cli or all search more)")
        raise InfeasibleError(
            "no layout satisfies the constraints " + "; ".join(str(c) for c in constraints) + hint, "constraints"
        )
    best_cost = min(c.cost.total_seconds for c in candidates)
    tol = _REL_TOL * max(best_cost, 1e-30)
    tied = [c for c in candidates if c.cost.total_seconds <= best_cost + tol]
    if options.mode == "free":
        # equal predicted time: a layout torchrun can launch (each host one block of ranks) first
        best = min(tied, key=lambda c: (not _host_blocks(cluster, c.dev_of_rank), c.key(baseline_dev)))
    else:
        best = min(tied, key=lambda c: c.key(baseline_dev))
    best = _in_index_order(cluster, best, score, constraints, tol)
    status, bound = _status(best.cost.total_seconds, bound, proved, bool(deadline.stopped_by))
    return _result(cluster, best, base_cfg, baseline_dev, baseline_cost, status, bound, t0, traffic, options,
                   orders[:max(reached, 1)], launcher, deadline.stopped_by)


def _in_index_order(cluster: Cluster, best: Candidate, score, constraints, tol: float) -> Candidate:
    """``best`` with each host's GPUs given to its ranks in index order, when that costs no more.

    Per host, the ranks on it (in global-rank order) take the GPUs they use there by
    ``local_index``: the same hosts for the same ranks, so the same host pattern, and a
    launch without a per-rank GPU map (``CUDA_VISIBLE_DEVICES`` in index order) whenever
    the search's local order was only one of equally good ones.  One evaluation.
    """
    dev = np.asarray(best.dev_of_rank, dtype=np.int64)
    host = cluster.host_of[dev]
    ranks = np.lexsort((np.arange(dev.size), host))  # ranks by (host, global rank)
    gpus = np.lexsort((cluster.local_index[dev], host))  # the same positions' GPUs by (host, local index)
    out = np.empty_like(dev)
    out[ranks] = dev[gpus]
    if np.array_equal(out, dev):
        return best
    grp = megatron_groups(best.cfg)
    if not satisfies(cluster, best.cfg, grp, out, constraints):
        return best
    cand = Candidate(best.cfg, out, score(best.cfg, out, grp), best.rank)
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


def _progress_reporter(progress):
    """``report(phase, candidates=())``: calls ``progress(phase, best)`` on a new phase or a better best."""
    state = {"phase": None, "best": None}

    def report(phase, candidates=()):
        if progress is None:
            return
        best = min((c.cost.total_seconds for c in candidates), default=None)
        better = best is not None and (state["best"] is None or best < state["best"])
        if better:
            state["best"] = best
        if better or phase != state["phase"]:
            state["phase"] = phase
            progress(phase, state["best"])

    return report


def _exhaustive(cluster, orders, traffic, exposure, mode, constraints, baseline_dev, deadline, score):
    """Best layout of every order by enumeration (small clusters, or fixed mode).

    Returns (candidates, orders reached); when ``deadline`` stops it, the
    orders scored so far (and the best fully scored layouts of a partly scored
    order) are kept and the stop is recorded on the deadline.
    """
    if mode == "fixed":
        out = []
        for idx, ocfg in enumerate(orders):
            if deadline.check():
                return out, idx
            groups = megatron_groups(ocfg)
            if satisfies(cluster, ocfg, groups, baseline_dev, constraints):
                out.append(Candidate(ocfg, baseline_dev, score(ocfg, baseline_dev, groups), idx))
        return out, len(orders)
    if deadline.check():
        return [], 0
    routes = PairRoutes(cluster)
    layouts = enumerate_layouts(cluster, mode)
    changes = (layouts != baseline_dev[None, :]).sum(axis=1)
    out = []
    for idx, ocfg in enumerate(orders):
        if deadline.check():
            return out, idx
        groups = megatron_groups(ocfg)
        ok = satisfies_batch(cluster, ocfg, groups, layouts, constraints) if constraints else None
        cost = bulk_cost(routes, ocfg, groups, traffic, layouts, exposure, deadline)
        if not np.isfinite(cost).any():
            return out, idx
        if ok is not None:
            if not ok.any():
                continue
            cost = np.where(ok, cost, np.inf)
        lo = float(cost.min())
        if not np.isfinite(lo):
            continue  # stopped before any layout allowed by the constraints was scored
        tied = np.flatnonzero(cost <= lo + _REL_TOL * max(lo, 1e-30))
        pick = int(tied[np.argmin(changes[tied])])  # fewest changes; first enumerated on ties
        dev = layouts[pick].copy()
        out.append(Candidate(ocfg, dev, score(ocfg, dev, groups), idx))
    return out, len(orders)


def _search(cluster, orders, surrogate, traffic, exposure, constraints, baseline_dev, deadline, score, report,
            initial, options, launcher, proposals=True, bound=None):
    """Candidates of the proposals of every order (without ``proposals``: the tree partition only), then :func:`refine`.

    ``initial``: the candidates so far (refine starts from them too); ``bound``: the searched
    space's lower bound (refine is skipped once a candidate meets it).  Returns
    (new candidates, orders reached before the deadline).
    """
    out: list[Candidate] = []
    reached = len(orders)
    per_order_limit = max(0.05, options.time_limit_seconds * CPSAT_SHARE / max(1, len(orders)))
    for idx, ocfg in enumerate(orders):
        if deadline.check():
            reached = idx
            break
        groups = megatron_groups(ocfg)
        seen_dev: set = set()
        for dev in _proposals(cluster, ocfg, groups, surrogate, options, launcher, constraints, baseline_dev,
                              per_order_limit, deadline, surrogate_models=proposals):
            key = dev.tobytes()
            if key in seen_dev:
                continue
            seen_dev.add(key)
            if satisfies(cluster, ocfg, groups, dev, constraints):
                out.append(Candidate(ocfg, dev, score(ocfg, dev, groups), idx))
        report("search", list(initial) + out)
    out += refine(cluster, list(initial) + out, surrogate, traffic, exposure, options, launcher, constraints,
                  baseline_dev, deadline, score, bound)
    return out, reached


def _free_partitions(cluster, orders, surrogate, options, constraints, deadline, score) -> list[Candidate]:
    """Free-mode tree-partition layouts (:mod:`.partition`), scored (skipped past the deadline).

    Three variants (recursive bisection on ring pairs, one k-way cut on ring pairs, bisection on
    all-pairs cliques) of the first order, then each variant over the other orders.  In free mode every order reaches
    the same layouts up to a relabelling of the ranks, so the orders only restart METIS from other
    numberings, and those differ (512 GPUs, 3-tier tree, tp4 cp2 pp8: 71.3 to 112 ms).  Work model:
    each costs :func:`~rankmap.solver.search.partition.partition_seconds` plus one evaluation; taken until
    ``FREE_PARTITION_SHARE`` of the time limit is spent (at least 3).
    """
    out = []
    per = partition_seconds(orders[0].world_size) + eval_seconds(cluster, orders[0], surrogate)
    count = max(3, int(options.time_limit_seconds * FREE_PARTITION_SHARE / per))
    variants = ((True, "ring"), (False, "ring"), (True, "clique"))
    todo = [(0, v) for v in variants] + [(idx, v) for v in variants for idx in range(1, len(orders))]
    groups = {}
    for idx, (bisect, pairs) in todo[:count]:
        if deadline.check():
            break
        ocfg = orders[idx]
        if idx not in groups:
            groups[idx] = megatron_groups(ocfg)
        grp = groups[idx]
        lay = tree_partition_layout(cluster, ocfg, grp, surrogate, options.seed, bisect, deadline, pairs)
        if lay is not None and satisfies(cluster, ocfg, grp, lay, constraints):
            out.append(Candidate(ocfg, lay, score(ocfg, lay, grp), idx))
    return out


def _proposals(cluster, ocfg, groups, surrogate, options, launcher, constraints, baseline_dev, time_limit, deadline,
               surrogate_models=True):
    """Layouts proposed by the surrogate models for one order (device per rank arrays).

    ``time_limit``: deterministic budget of the order's models, seconds;
    ``deadline``: the solve's wall-clock stop (models not started by then are skipped).
    Free mode on uneven hosts adds the recursive tree partition (:mod:`.partition`;
    on equal hosts :func:`_free_partitions` makes it first); without
    ``surrogate_models`` only the baseline (and that partition) is returned.
    """
    W = ocfg.world_size
    out = [baseline_dev]
    cancel = deadline.cancel
    if not launcher and np.unique(cluster.gpus_per_host).size != 1 and not deadline.check():  # equal hosts: first
        for bisect in (False, True):
            lay = tree_partition_layout(cluster, ocfg, groups, surrogate, options.seed, bisect, deadline)
            if lay is not None:
                out.append(lay)
    if not surrogate_models:
        return out
    if W <= EXACT_MAX_DEVICES:
        res = surrogate_exact(cluster, ocfg, groups, surrogate, options, launcher, constraints, baseline_dev,
                              time_limit, cancel, deadline)
        if res.slot_of_item is not None:
            out.append(res.slot_of_item)
        return out
    if launcher or np.unique(cluster.gpus_per_host).size == 1:
        hob = cluster.host_of[baseline_dev]
        launch_hosts = hob[np.sort(np.unique(hob, return_index=True)[1])]  # the launcher's host order
        host_orders = [launch_hosts, np.arange(len(cluster.hosts)), dfs_host_order(cluster)]
        if len(cluster.hosts) <= HOST_MODEL_MAX_HOSTS and not deadline.check():
            ho = host_model_order(cluster, ocfg, groups, surrogate, options, time_limit / 2, cancel, deadline)
            if ho is not None:
                host_orders.append(ho)
        dom_orders = domain_level_orders(cluster, ocfg, groups, surrogate, options, time_limit / 4, cancel,
                                         host_orders[2], deadline)
        host_orders += dom_orders
        if not deadline.check():
            host_orders += host_order_search(cluster, ocfg, surrogate, (dom_orders or host_orders)[-1],
                                             time_limit / 4, options.seed, groups, cancel, deadline)
        for bisect in (False, True):
            ho = None if deadline.check() else tree_partition_host_order(cluster, ocfg, groups, surrogate,
                                                                          options.seed, bisect, deadline)
            if ho is not None:
                host_orders.append(ho)
        # nested grid boxes along the fabric tree: as many as half the order's model budget evaluates
        tilings = int(time_limit / 2 / eval_seconds(cluster, ocfg, surrogate))
        if tilings > 0 and not deadline.check():
            host_orders += tiling_host_orders(cluster, ocfg)[:tilings]
        seen = set()
        for ho in host_orders:
            k = ho.tobytes()
            if k in seen:
                continue
            if seen and deadline.check():
                break  # the baseline host order is always laid out
            seen.add(k)
            out.append(local_orders(cluster, ocfg, groups, surrogate, ho, options, time_limit / 4, cancel,
                                    constraints, deadline))
    else:
        keys = [np.arange(W)] + [cluster.domains[k] for k in range(cluster.domains.shape[0])]
        out.append(np.lexsort(keys))  # free mode, uneven hosts: depth-first device order
    return out


def _check_traffic(traffic: Mapping[str, float]) -> Traffic:
    out = {}
    for k, v in dict(traffic or {}).items():
        if k not in TRAFFIC_CLASSES:
            raise InvalidArgumentError(
                f"unknown traffic class {k!r}; known: {', '.join(TRAFFIC_CLASSES)}", f"traffic.{k}"
            )
        try:
            fv = float(v)
        except (TypeError, ValueError):
            raise InvalidArgumentError(f"traffic {k} = {v!r} is not a number of bytes", f"traffic.{k}") from None
        if not np.isfinite(fv) or fv < 0:
            raise InvalidArgumentError(f"traffic {k} = {v!r} must be finite and >= 0 bytes", f"traffic.{k}")
        out[k] = fv
    # keep each class's parts (shapes) when the traffic came from a model
    return Traffic(out, getattr(traffic, "collectives", None), getattr(traffic, "notes", None),
                   getattr(traffic, "model", None), getattr(traffic, "explicit", None))


def _exclude(graph: nx.Graph, options: SolveOptions) -> nx.Graph:
    drop = []
    hosts = set(options.exclude_hosts)
    devs = set(options.exclude_devices)
    seen_hosts = set()
    for n, d in graph.nodes(data=True):
        if d.get("kind", "gpu") != "gpu":
            continue
        h = str(d.get("host", n))
        seen_hosts.add(h)
        if n in devs or str(n) in devs or h in hosts:
            drop.append(n)
    gpu_ids = {str(n) for n, d in graph.nodes(data=True) if d.get("kind", "gpu") == "gpu"}
    not_gpu = {str(x) for x in devs} - gpu_ids
    if not_gpu:
        name = sorted(not_gpu)[0]
        what = "is not a node of the cluster" if name not in {str(n) for n in graph.nodes} else "is not a GPU"
        raise InvalidArgumentError(f"excluded device {name!r} {what}", "exclude_devices")
    missing_devs = devs - {str(n) for n in graph.nodes} - set(graph.nodes)
    if missing_devs:
        raise InvalidArgumentError(
            f"excluded device {sorted(map(str, missing_devs))[0]!r} is not a node of the cluster", "exclude_devices"
        )
    missing_hosts = hosts - seen_hosts
    if missing_hosts:
        raise InvalidArgumentError(
            f"excluded host {sorted(missing_hosts)[0]!r} is not a host of the cluster", "exclude_hosts"
        )
    g = graph.copy()
    g.remove_nodes_from(drop)
    return g



def _result(cluster, best, base_cfg, baseline_dev, baseline_cost, status, bound, t0, traffic, options, orders,
            launcher, stopped_by="") -> SolveResult:
    devices = cluster.devices
    hosts = host_placements(cluster, best.dev_of_rank)
    if best.cfg.rank_offset:
        hosts = tuple(
            HostPlacement(h.host, h.node_rank, h.cuda_visible_devices,
                          tuple(r + best.cfg.rank_offset for r in h.global_ranks))
            for h in hosts
        )
    return SolveResult(
        config=best.cfg,
        layout=Layout(best.cfg.order, tuple(str(devices[i]) for i in best.dev_of_rank), best.cost),
        baseline=Layout(base_cfg.order, tuple(str(devices[i]) for i in baseline_dev), baseline_cost),
        hosts=hosts,
        status=status,
        bound_seconds=float(bound),
        solve_seconds=time.perf_counter() - t0,
        groups=megatron_groups(best.cfg),
        traffic=traffic,
        apply=apply_instructions(best.cfg, hosts, launcher),
        mode=options.mode,
        orders_searched=tuple(c.order for c in orders),
        stopped_by=stopped_by,
        nccl=cluster.nccl,
    )


def evaluate(
    graph: nx.Graph | Cluster,
    cfg: ParallelConfig,
    assignment: Sequence[str],
    traffic: Mapping[str, float],
    exposure: Mapping[str, float] | None = None,
    nccl=None,
) -> CostBreakdown:
    """Predicted communication time of a given layout (DESIGN §4).

    ``assignment[r]`` is the GPU node id running global rank r; ``exposure``
    gives x_c per class (missing classes: 1); ``nccl`` (:class:`~rankmap.solver.nccl.NcclModel`)
    how NCCL runs the collectives (default NCCL's defaults; ignored when ``graph`` is a
    :class:`Cluster`, which carries its own).

    Raises
    ------
    InvalidArgumentError
        If the assignment's length differs from the world size, names an
        unknown or non-GPU node, or uses a GPU twice; on a bad exposure.
    """
    from ..types import check_exposure

    exposure = check_exposure(exposure)
    cluster = graph if isinstance(graph, Cluster) else cluster_from_graph(graph, nccl=nccl)
    traffic = _check_traffic(traffic)
    assignment = list(assignment)
    if len(assignment) != cfg.world_size:
        raise InvalidArgumentError(
            f"assignment has {len(assignment)} entries but world_size is {cfg.world_size}", "assignment"
        )
    index = {str(d): i for i, d in enumerate(cluster.devices)}
    dev = np.empty(len(assignment), dtype=np.int64)
    used: dict[int, int] = {}
    for r, a in enumerate(assignment):
        i = index.get(str(a))
        if i is None:
            raise InvalidArgumentError(f"assignment[{r}] = {a!r} is not a GPU of the cluster", f"assignment[{r}]")
        if i in used:
            raise InvalidArgumentError(
                f"assignment[{r}] = {a!r} is already used by rank {used[i]}", f"assignment[{r}]"
            )
        used[i] = r
        dev[r] = i
    return layout_cost(cluster, cfg, dev, traffic, exposure=exposure)

