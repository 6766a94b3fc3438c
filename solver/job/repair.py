"""Repair a running layout after host or GPU failures (issue 26): options ``patch``, ``pinned``, ``full``.

From a running layout (an order and the GPU of every global rank) and the failures, three
ways to go on, each scored with the solve's time model (:func:`~rankmap.solver.cost.timemodel.layout_cost`)
on one cluster model, the surviving hosts plus the spares, so their costs compare:

* ``patch``: each failed host's ranks move to one spare host, each rank to the spare's GPU of
  the same position (its old GPU's rank among the failed host's GPUs by ``local_index``); no other
  rank moves.  The spare of each failed host is chosen by predicted cost: every free spare is
  tried for each failed host in turn (failed hosts by lowest rank, spares in the order given,
  default natural name order; a spare is taken only when strictly cheaper, so ties go to the
  first), within an evaluation budget.
* ``pinned``: the failed ranks stay on spare GPUs and, besides them, at most ``max_moves``
  surviving ranks may move (default: one host's worth of GPUs, the most ranks one running host
  runs).  A first-improvement descent from the patch on the predicted time (the solve's local
  search, :mod:`rankmap.solver.search.localsearch`, over a restricted move set): move one host's
  block of ranks to a free spare host; exchange the blocks of two hosts; exchange two ranks'
  GPUs inside a host; in free mode also exchange two ranks across hosts and move one rank to a
  free spare GPU.  A move is taken when the time drops, or stays and the squared link load
  (``pressure``) drops, and the surviving ranks moved from the running layout stay within
  ``max_moves``.  The hosts behind the costliest class's bottleneck link
  (:func:`~rankmap.solver.search.localsearch.hot_hosts`) are tried first.
* ``full``: a new :func:`~rankmap.solver.search.solve.solve` over the surviving hosts and the
  spares (any rank may move; with more GPUs than ranks, which hosts run the job is part of the
  search).

A host with a failed GPU counts as failed (``--failed-gpus``): a launcher layout runs one block of
ranks per host with one ``--nproc-per-node``, so the host's ranks move together.  ``ranks_moved``
counts the ranks whose GPU changed, the failed ranks included.  The recommended option is the
cheapest; ties (relative 1e-9) go to the fewest ranks moved, then patch, pinned, full.

Budgets (deterministic, from ``options.time_limit_seconds`` = T): the patch scores at most
:data:`PATCH_SHARE`·T of nominal evaluations (:func:`~rankmap.solver.search.refine.eval_budget`), the
pinned descent :data:`PINNED_SHARE`·T, the full solve gets a time limit of :data:`FULL_SHARE`·T.
T also bounds the whole repair in wall-clock time: after the cluster model, the patch and the pinned
descent stop at a :class:`~rankmap.solver.search.deadline.Deadline` of their share of the time left
(``stopped_by: "time_limit"`` on the option), and the full solve's limit is at most what is left
less the time its own cluster model will take (measured on the first); when nothing is left the full
option is ``unavailable`` and says so (131,072 GPUs need a limit of about a minute for it).
The searches are in :mod:`.repair_search`.

Pure Python over plain types: no argparse, no protobuf.
"""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from ..errors import InfeasibleError, InvalidArgumentError
from ..megatron.config import ParallelConfig
from ..results import CostBreakdown, HostPlacement
from ..types import SolveOptions
from .repair_search import _REL, PATCH_SHARE, PINNED_SHARE

__all__ = ["REPAIR_KINDS", "PATCH_SHARE", "PINNED_SHARE", "FULL_SHARE", "RepairOption", "RepairResult", "repair",
           "running_hosts_of"]

#: The options of a repair, in the order they are listed (and win ties).
REPAIR_KINDS = ("patch", "pinned", "full")
#: Shares of the time limit: the patch's evaluations, the pinned descent's (both defined with their
#: searches, :mod:`.repair_search`), the full solve's time limit.
FULL_SHARE = 0.55
#: The full solve's time limit when little is left of the repair's (seconds; its cluster model and
#: baseline are computed whatever the limit).
MIN_FULL_SECONDS = 0.05


@dataclass(frozen=True)
class RepairOption:
    """One way to go on after the failures.

    Attributes
    ----------
    kind : str
        ``patch``, ``pinned`` or ``full`` (module docstring).
    config : ParallelConfig
        Sizes and order of the layout (``patch`` and ``pinned`` keep the running order).
    assignment : tuple of str
        GPU node id of each global rank, shape (world_size,).
    cost : CostBreakdown
        Predicted communication time per step (the solve's ``cost``), seconds.
    ranks_moved : int
        Ranks whose GPU differs from the running layout (failed ranks included).
    hosts_removed, hosts_added : tuple of str
        Hosts of the running layout the option no longer uses / hosts it uses that the running
        layout did not (natural name order).
    hosts : tuple of HostPlacement
        Node rank, ``CUDA_VISIBLE_DEVICES`` and global ranks per host (node-rank order).
    apply : dict
        Megatron flags and launch files, as a solve's ``apply``
        (:func:`~rankmap.solver.launch.placement.apply_instructions`).
    stopped_by : str
        ``"time_limit"`` when the wall clock stopped this option's search before its budget, else ``""``.
    """

    kind: str
    config: ParallelConfig
    assignment: tuple[str, ...]
    cost: CostBreakdown
    ranks_moved: int
    hosts_removed: tuple[str, ...]
    hosts_added: tuple[str, ...]
    hosts: tuple[HostPlacement, ...]
    apply: Mapping[str, Any]
    stopped_by: str = ""

    @property
    def order(self) -> str:
        """The option's order (``patch`` and ``pinned``: the running order)."""
        return self.config.order

    def to_dict(self) -> dict[str, Any]:
        """The JSON of one option: ``kind, order, assignment, cost, ranks_moved, hosts_removed, hosts_added,
        hosts, apply, stopped_by``."""
        return {
            "kind": self.kind,
            "order": self.config.order,
            "assignment": list(self.assignment),
            "cost": self.cost.to_dict(),
            "ranks_moved": self.ranks_moved,
            "hosts_removed": list(self.hosts_removed),
            "hosts_added": list(self.hosts_added),
            "hosts": [h.to_dict() for h in self.hosts],
            "apply": dict(self.apply),
            "stopped_by": self.stopped_by,
        }


@dataclass(frozen=True)
class RepairResult:
    """The options of a repair (:func:`repair`).

    Attributes
    ----------
    options : tuple of RepairOption
        In :data:`REPAIR_KINDS` order; an option that cannot be built is absent and named in ``unavailable``.
    recommended : str
        The kind of the cheapest option (ties: fewest ranks moved, then :data:`REPAIR_KINDS` order).
    unavailable : dict of str -> str
        Kind -> why it could not be built (e.g. no spare host with enough GPUs for a patch).
    failed_hosts : tuple of str
        The hosts taken out: ``failed_hosts`` and the hosts of ``failed_gpus`` that run ranks.
    spare_hosts : tuple of str
        The spares considered.
    """

    options: tuple[RepairOption, ...]
    recommended: str
    unavailable: Mapping[str, str] = field(default_factory=dict)
    failed_hosts: tuple[str, ...] = ()
    spare_hosts: tuple[str, ...] = ()

    def option(self, kind: str) -> RepairOption | None:
        """The option of ``kind``, or None when unavailable."""
        return next((o for o in self.options if o.kind == kind), None)

    def to_dict(self) -> dict[str, Any]:
        """The JSON of ``rankmap repair``: ``{"options": [...], "recommended": KIND, "unavailable": {...},
        "failed_hosts": [...], "spare_hosts": [...]}``."""
        return {
            "options": [o.to_dict() for o in self.options],
            "recommended": self.recommended,
            "unavailable": dict(self.unavailable),
            "failed_hosts": list(self.failed_hosts),
            "spare_hosts": list(self.spare_hosts),
        }


# --------------------------------------------------------------------------- inputs


def _gpu_hosts(graph) -> dict[str, str]:
    """GPU node id -> host of every GPU of ``graph`` (DESIGN §2: ``kind`` gpu, ``host`` or itself)."""
    out: dict[str, str] = {}
    for node, data in graph.nodes(data=True):
        if data.get("kind", "gpu") != "gpu":
            continue
        host = data.get("host")
        out[str(node)] = str(node) if host is None or host == "" else str(host)
    return out


def running_hosts_of(graph, assignment: Sequence[str], world_size: int | None = None,
                     field_name: str = "running") -> list[str]:
    """The host of each rank of a running layout, checked against the cluster, shape (world_size,).

    Raises
    ------
    InvalidArgumentError
        A layout whose length is not ``world_size``, an entry that is not a GPU of the cluster, or a
        GPU used twice; each named (field ``running`` / ``running.assignment[r]``).
    """
    gpus = _gpu_hosts(graph)
    assignment = [str(a) for a in assignment]
    if world_size is not None and len(assignment) != world_size:
        raise InvalidArgumentError(
            f"the running layout has {len(assignment)} ranks but world_size is {world_size}", field_name)
    if not assignment:
        raise InvalidArgumentError("the running layout has no ranks", field_name)
    seen: dict[str, int] = {}
    out = []
    for r, a in enumerate(assignment):
        host = gpus.get(a)
        if host is None:
            raise InvalidArgumentError(
                f"running layout rank {r} is on {a[:80]!r}, which is not a GPU of the cluster (is it the cluster "
                f"the job runs on?)", f"{field_name}.assignment[{r}]")
        if a in seen:
            raise InvalidArgumentError(
                f"running layout rank {r} is on {a[:80]!r}, which rank {seen[a]} already uses",
                f"{field_name}.assignment[{r}]")
        seen[a] = r
        out.append(host)
    return out


def _natural(hosts: Iterable[str]) -> list[str]:
    from ..launch.placement import natural_key

    return sorted(set(hosts), key=natural_key)


def _check_hosts(names: Iterable[str], known: set[str], field_name: str, what: str,
                 gpus: Mapping[str, str] | None = None) -> list[str]:
    out = []
    for h in names:
        h = str(h)
        if h not in known:
            hint = (f" (it is a GPU of host {gpus[h][:80]!r}: name failed GPUs with --failed-gpus / failed_gpus)"
                    if gpus is not None and h in gpus else "")
            raise InvalidArgumentError(f"{what} {h[:80]!r} is not a host of the cluster{hint}", field_name)
        if h not in out:
            out.append(h)
    return out


# --------------------------------------------------------------------------- the repair


def repair(graph, cfg: ParallelConfig, traffic: Mapping[str, float], running: Sequence[str],
           failed_hosts: Iterable[str] = (), failed_gpus: Iterable[str] = (),
           spare_hosts: Iterable[str] | None = None, max_moves: int | None = None,
           options: SolveOptions | None = None, orders: str | Sequence[str] | None = None,
           cancel: threading.Event | None = None, deadline=None) -> RepairResult:
    """The ``patch``, ``pinned`` and ``full`` repairs of a running layout (module docstring).

    Parameters
    ----------
    graph : networkx.Graph
        The whole cluster (DESIGN §2), failed hosts included.
    cfg : ParallelConfig
        Sizes and order of the running job (``cfg.order`` is the running order).
    traffic : mapping class -> bytes per rank per step
    running : sequence of str, shape (world_size,)
        GPU node id of each global rank in the running layout.
    failed_hosts, failed_gpus : iterables of str
        Hosts / GPU node ids that failed (a failed GPU takes its host out).
    spare_hosts : iterable of str, optional
        Hosts that may take ranks; default: the cluster's hosts not in the running layout and not failed.
    max_moves : int, optional
        ``pinned``: surviving ranks that may move (>= 0); default: the most ranks one running host runs.
    options : SolveOptions, optional
        ``mode`` (the running layout's: launcher or free), ``exposure``, ``nccl``, ``constraints`` (of
        the full solve), ``time_limit_seconds`` (the whole repair, seconds), ``seed``.
    orders : str or sequence, optional
        Orders the full solve searches (default: the running order only).
    cancel : threading.Event, optional
        Set it to stop the repair (raises :class:`~rankmap.solver.types.SolveCancelled`).
    deadline : Deadline, optional
        A wall-clock stop before the time limit's (a gRPC call's budget): the phases share what is
        left of it; an option it cut short says ``stopped_by`` (``"deadline"`` for patch and pinned).

    Returns
    -------
    RepairResult

    Raises
    ------
    InvalidArgumentError
        A running layout that does not match the cluster (a GPU it lacks, a length other than
        the world size, a GPU used twice); an unknown host in ``failed_hosts`` / ``spare_hosts`` or an
        unknown GPU in ``failed_gpus``; a spare that is failed or runs ranks; failures that hit no rank;
        too few GPUs left (the message says how many are missing); a negative ``max_moves``; no option
        possible (e.g. launcher mode and only spares with other GPU counts: why, for each).
    SolveCancelled
        ``cancel`` was set.
    """
    from ..fabric.cluster import cluster_from_graph
    from ..megatron.catalogue import megatron_groups
    from ..search.deadline import Deadline, search_seconds
    from ..search.problem import check_traffic
    from .repair_search import RepairState, full_layout, patch_layout, pinned_layout

    options = options or SolveOptions()
    if options.mode not in ("launcher", "free"):
        raise InvalidArgumentError(f"mode {options.mode!r}: a repair keeps the running layout's mode, launcher or "
                                   f"free", "mode")
    if max_moves is not None and (isinstance(max_moves, bool) or not isinstance(max_moves, (int, np.integer))
                                  or max_moves < 0):
        raise InvalidArgumentError(f"max_moves must be an integer >= 0, got {max_moves!r}", "max_moves")
    traffic = check_traffic(traffic)
    W = cfg.world_size
    rank_host = running_hosts_of(graph, running, W)
    gpu_host = _gpu_hosts(graph)
    all_hosts = set(gpu_host.values())
    running_set = set(rank_host)

    failed = set(_check_hosts(failed_hosts, all_hosts, "failed_hosts", "failed host", gpu_host))
    for g in failed_gpus:
        g = str(g)
        if g not in gpu_host:
            raise InvalidArgumentError(f"failed GPU {g[:80]!r} is not a GPU of the cluster", "failed_gpus")
        failed.add(gpu_host[g])
    if not failed:
        raise InvalidArgumentError("no failure given: name the failed hosts (--failed) or GPUs (--failed-gpus)",
                                   "failed_hosts")
    hit = _natural(failed & running_set)
    if not hit:
        raise InvalidArgumentError(
            f"none of the failed hosts ({', '.join(_natural(failed))[:200]}) runs a rank of the running layout; "
            f"nothing to repair", "failed_hosts")
    if spare_hosts is None:
        spares = _natural(all_hosts - running_set - failed)
    else:
        spares = _check_hosts(spare_hosts, all_hosts, "spare_hosts", "spare host")
        for h in spares:
            if h in failed:
                raise InvalidArgumentError(f"spare host {h[:80]!r} is also failed", "spare_hosts")
            if h in running_set:
                raise InvalidArgumentError(f"spare host {h[:80]!r} already runs ranks of the running layout",
                                           "spare_hosts")
    survivors = running_set - failed
    keep_hosts = survivors | set(spares)
    host_gpus: dict[str, int] = {}
    for h in gpu_host.values():
        host_gpus[h] = host_gpus.get(h, 0) + 1
    have = sum(host_gpus[h] for h in keep_hosts)
    if have < W:
        raise InvalidArgumentError(
            f"too few GPUs left: the job needs {W}, the surviving hosts and the spares have {have}: {W - have} "
            f"missing (name more spare hosts)", "spare_hosts")

    # one cluster model for every option: the surviving hosts and the spares
    sub = graph.copy()
    sub.remove_nodes_from([n for n, d in graph.nodes(data=True)
                           if d.get("kind", "gpu") == "gpu" and gpu_host[str(n)] not in keep_hosts])
    total = Deadline(search_seconds(options.time_limit_seconds, W), cancel)
    if deadline is not None:  # a caller's stop (a gRPC call's budget): the earlier of the two, its reason
        total = deadline.within(total.remaining(), total.reason)
        total.cancel = total.cancel or cancel
    t_model = total.elapsed()
    cluster = cluster_from_graph(sub, check=total.cancel_check(), nccl=options.nccl)
    t_model = total.elapsed() - t_model  # what one more cluster model of these hosts costs, seconds
    total.check()
    # patch and pinned: their share of what is left; the full solve: the rest (search.deadline)
    deadline = Deadline(total.remaining() * (PATCH_SHARE + PINNED_SHARE) / (PATCH_SHARE + PINNED_SHARE + FULL_SHARE),
                        cancel, reason=total.reason)
    index = {str(d): i for i, d in enumerate(cluster.devices)}
    host_index = {h: i for i, h in enumerate(cluster.hosts)}
    running = [str(a) for a in running]
    failed_rank = np.array([h in failed for h in rank_host], dtype=bool)
    running_dev = np.array([-1 if failed_rank[r] else index[a] for r, a in enumerate(running)], dtype=np.int64)
    st = RepairState(cluster, cfg, traffic, dict(options.exposure or {}), megatron_groups(cfg), running_dev,
                     failed_rank, [host_index[h] for h in spares], deadline, options.mode)
    local = {str(n): d.get("local_index", 0) for n, d in graph.nodes(data=True) if d.get("kind", "gpu") == "gpu"}
    old_local = [_int_or_zero(local[a]) for a in running]

    built: list[tuple[str, np.ndarray, CostBreakdown, ParallelConfig, str]] = []
    unavailable: dict[str, str] = {}
    hint = None
    patch = patch_layout(st, rank_host, old_local, hit, options)
    if isinstance(patch, str):
        unavailable["patch"] = unavailable["pinned"] = patch
    else:
        dev, cost, stopped = patch
        built.append(("patch", dev, cost, cfg, stopped))
        limit = max_moves if max_moves is not None else Counter(rank_host).most_common(1)[0][1]
        dev2, cost2, stopped2 = pinned_layout(st, dev, limit, options, deadline)
        built.append(("pinned", dev2, cost2, cfg, stopped2))
        hint = dev2
    # the full solve builds its own cluster model unless the hosts have exactly the job's GPUs
    rebuild = 0.0 if cluster.num_devices == W else t_model
    seconds = min(options.time_limit_seconds * FULL_SHARE, total.remaining() - rebuild)
    if seconds < MIN_FULL_SECONDS and built:
        unavailable["full"] = (f"no time left for a full re-solve within the time limit of "
                               f"{options.time_limit_seconds:g} s (a cluster model of these hosts takes about "
                               f"{t_model:.1f} s); raise the time limit")
    else:
        try:
            built.append(("full", *full_layout(sub, cluster, st, options, orders, cancel,
                                               max(MIN_FULL_SECONDS, seconds), hint)))
        except (InvalidArgumentError, InfeasibleError) as exc:
            if not built:  # no option at all: say why for each
                raise type(exc)(f"no repair possible: patch and pinned: {unavailable.get('patch')}; full re-solve: "
                                f"{exc.message}", "spare_hosts") from None
            unavailable["full"] = exc.message

    out = []
    for kind, dev, cost, ocfg, stopped in built:
        out.append(_option(kind, st, ocfg, dev, cost, running, rank_host, stopped))
    best = min(out, key=lambda o: o.cost.total_seconds).cost.total_seconds
    tied = [o for o in out if o.cost.total_seconds <= best + _REL * max(best, 1e-30)]
    recommended = min(tied, key=lambda o: (o.ranks_moved, REPAIR_KINDS.index(o.kind))).kind
    return RepairResult(tuple(out), recommended, unavailable, tuple(hit), tuple(spares))


def _int_or_zero(value) -> int:
    """``int(value)``, 0 when it is not a number (a GPU's ``local_index`` only orders the patch's GPUs)."""
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0


def _option(kind, st: RepairState, cfg, dev, cost, running, rank_host, stopped) -> RepairOption:
    from ..launch.placement import apply_instructions, host_placements

    cluster = st.cluster
    assignment = tuple(str(cluster.devices[i]) for i in dev)
    moved = sum(1 for a, b in zip(assignment, running) if a != b)
    new_hosts = {cluster.hosts[h] for h in np.unique(cluster.host_of[dev]).tolist()}
    old_hosts = set(rank_host)
    hosts = host_placements(cluster, dev)
    return RepairOption(kind, cfg, assignment, cost, moved, tuple(_natural(old_hosts - new_hosts)),
                        tuple(_natural(new_hosts - old_hosts)), hosts, apply_instructions(cfg, hosts), stopped)


