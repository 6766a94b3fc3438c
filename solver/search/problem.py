"""One solve's inputs, checked, and what is computed once from them (DESIGN §5).

A :class:`Problem` is the value every phase of the search reads: the cluster model, the
checked traffic and exposure, the options, the wall-clock :class:`~.deadline.Deadline`,
the orders searched, the constraints, the baseline (the default order on the launcher's
device order) and each order's Megatron groups (computed once, on first use).  A phase
that searches another space (free mode's launcher phase, its shorter free phase) reads
the same problem with other options (:meth:`Problem.with_options`).  Strategies return
:class:`Candidate` layouts, scored on the real objective.
"""

from __future__ import annotations

import dataclasses
import threading
from dataclasses import dataclass, field
from typing import Callable, Mapping

import networkx as nx
import numpy as np

from ..cost.timemodel import layout_cost
from ..errors import InvalidArgumentError
from ..fabric.cluster import Cluster, cluster_from_graph
from ..fabric.hostinfer import infer_hosts
from ..launch.placement import launcher_device_order
from ..megatron.config import ParallelConfig
from ..megatron.catalogue import megatron_groups
from ..megatron.orders import candidate_orders, order_priority
from ..traffic import TRAFFIC_CLASSES, Traffic
from ..results import CostBreakdown
from ..types import SolveOptions
from .constraints import check_capacity, satisfies
from .deadline import Deadline, search_seconds

__all__ = ["Candidate", "Problem", "REL_TOL", "check_traffic", "cluster_model", "progress_reporter",
           "solve_deadline", "mixed_host_constraints"]

#: Costs within this relative tolerance of the best are tied.
REL_TOL = 1e-9


@dataclass
class Candidate:
    """A scored layout: order (config), device per rank, cost, position of the order in the candidate list."""

    cfg: ParallelConfig
    dev_of_rank: np.ndarray
    cost: CostBreakdown
    rank: int  # position of the order in the candidate list

    def key(self, baseline: np.ndarray):
        """Tie-break key: order priority, ranks moved from ``baseline``, order position."""
        changes = int(np.count_nonzero(self.dev_of_rank != baseline))
        return (order_priority(self.cfg.order), changes, self.rank)


@dataclass
class Problem:
    """A solve on a cluster whose usable GPUs all run a rank (see the module docstring).

    ``surrogate`` is the traffic weighted by exposure (what the surrogate models weigh);
    ``report(phase, candidates)`` observes progress.  Built by :meth:`prepare`.
    """

    cluster: Cluster
    traffic: Traffic
    exposure: dict
    surrogate: dict
    options: SolveOptions
    deadline: Deadline
    report: Callable
    orders: list
    constraints: tuple
    baseline_cfg: ParallelConfig
    baseline_dev: np.ndarray
    baseline_cost: CostBreakdown
    baseline_groups: dict
    _groups: dict = field(default_factory=dict, repr=False)

    @classmethod
    def prepare(cls, cluster: Cluster, cfg: ParallelConfig, traffic: Traffic, options: SolveOptions,
                deadline: Deadline, report: Callable) -> "Problem":
        """Check the sizes, mode, orders and constraints against ``cluster`` and score the baseline.

        Raises
        ------
        InvalidArgumentError
            A world size other than the cluster's usable GPUs, launcher mode on unequal hosts,
            no valid order, a bad constraint level.
        InfeasibleError
            A constrained group that fits no domain of its level.
        """
        if cfg.world_size != cluster.num_devices:
            more = cfg.world_size > cluster.num_devices
            raise InvalidArgumentError(
                f"world_size {cfg.world_size} {'is more than' if more else 'does not match'} the "
                f"{cluster.num_devices} usable GPUs of the cluster"
                + ("" if not more else "; a job needs one GPU per rank"),
                "world_size",
            )
        report("orders")
        orders = candidate_orders(cfg, options.orders)
        if not orders:
            raise InvalidArgumentError(f"no order in {options.orders!r} is valid for these sizes", "orders")
        exposure = dict(options.exposure or {})
        base_cfg = cfg.with_order(options.baseline_order)
        # DESIGN §5: the baseline is what the launcher does without rankmap (hosts in launch order)
        baseline_dev = launcher_device_order(cluster, options.launch_order, options.exclude_hosts)
        base_groups = megatron_groups(base_cfg)
        baseline_cost = layout_cost(cluster, base_cfg, baseline_dev, traffic, base_groups, exposure)
        constraints = tuple(options.constraints) + mixed_host_constraints(cluster, options, cfg)
        for c in constraints:
            cluster.level_labels(c.level)  # validates the level name
        check_capacity(cluster, base_cfg, constraints)
        # surrogate models weigh bytes by how exposed they are
        surrogate = {c: v * exposure.get(c, 1.0) for c, v in traffic.items()}
        return cls(cluster, traffic, exposure, surrogate, options, deadline, report, orders, constraints,
                   base_cfg, baseline_dev, baseline_cost, base_groups)

    @property
    def world_size(self) -> int:
        return self.baseline_cfg.world_size

    @property
    def launcher(self) -> bool:
        """Layouts are launcher layouts: each host runs one contiguous block of ranks."""
        return self.options.mode == "launcher"

    def with_options(self, options: SolveOptions) -> "Problem":
        """The same problem searched with other options (a phase's mode or time limit)."""
        return dataclasses.replace(self, options=options)

    def groups(self, idx: int) -> dict:
        """The Megatron groups of order ``idx`` (computed once)."""
        got = self._groups.get(idx)
        if got is None:
            got = self._groups[idx] = megatron_groups(self.orders[idx])
        return got

    def score(self, cfg: ParallelConfig, dev: np.ndarray, groups=None) -> CostBreakdown:
        """The real objective of a layout (DESIGN §4)."""
        return layout_cost(self.cluster, cfg, dev, self.traffic, groups, self.exposure)

    def candidate(self, idx: int, dev: np.ndarray, groups=None) -> Candidate | None:
        """Layout ``dev`` of order ``idx`` scored, or None when it breaks a constraint."""
        cfg = self.orders[idx]
        groups = self.groups(idx) if groups is None else groups
        if not satisfies(self.cluster, cfg, groups, dev, self.constraints):
            return None
        return Candidate(cfg, dev, self.score(cfg, dev, groups), idx)

    def baseline(self) -> Candidate | None:
        """The baseline layout as a candidate (order position -1), or None when it breaks a constraint."""
        if not satisfies(self.cluster, self.baseline_cfg, self.baseline_groups, self.baseline_dev, self.constraints):
            return None
        return Candidate(self.baseline_cfg, self.baseline_dev, self.baseline_cost, -1)


def mixed_host_constraints(cluster: Cluster, options: SolveOptions, cfg: ParallelConfig) -> tuple:
    """The constraints launcher mode adds on hosts of several sizes (issue 27 item 2): ``tp within
    host_type``, so that no TP group straddles hosts of different sizes (or topologies).

    Launcher layouts give each host one contiguous block of ranks, as many as its GPUs (torchrun
    ``--nproc-per-node`` per host); a TP group across an 8-GPU and a 4-GPU host would run its
    all-reduce at the slower host's NIC rate.  Nothing is added on equal hosts, in other modes,
    when tp is 1, or when the user constrains tp already.
    """
    from ..types import Constraint

    if options.mode != "launcher" or cluster.equal_hosts or cfg.tp <= 1 and cfg.etp <= 1:
        return ()
    given = {c.traffic_class for c in options.constraints}
    return tuple(Constraint(c, "host_type") for c in ("tp", "etp")
                 if c not in given and getattr(cfg, c) > 1)


def solve_deadline(deadline: Deadline | None, options: SolveOptions, world_size: int,
                   cancel: threading.Event | None) -> Deadline:
    """The solve's wall-clock stop: ``deadline`` (``cancel`` attached when it has none), else one of
    ``options.time_limit_seconds`` from now."""
    if deadline is None:
        return Deadline(search_seconds(options.time_limit_seconds, world_size), cancel)
    if deadline.cancel is None:
        deadline.cancel = cancel
    return deadline


def cluster_model(graph: nx.Graph | Cluster, options: SolveOptions, deadline: Deadline) -> Cluster:
    """The cluster model of ``graph`` without the excluded devices and hosts (a Cluster is taken as is).

    Raises
    ------
    InvalidArgumentError
        Bad graph, or an excluded device or host that is not in it.
    SolveCancelled
        The deadline's cancel event was set.
    """
    if isinstance(graph, Cluster):
        cluster = graph
    else:
        g = infer_hosts(graph)  # excluded hosts may name inferred ones
        if options.exclude_devices or options.exclude_hosts:
            g = _exclude(graph, options)
        # the cluster model takes seconds at 131,072 GPUs: cancellation (a gRPC deadline) stops it
        cluster = cluster_from_graph(g, check=deadline.cancel_check(), nccl=options.nccl)
    deadline.check()  # raises if cancelled; a passed deadline is recorded
    return cluster


def progress_reporter(progress):
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


def check_traffic(traffic: Mapping[str, float]) -> Traffic:
    """``traffic`` (class -> bytes per rank per step) checked, as a :class:`~rankmap.solver.traffic.Traffic`.

    Raises
    ------
    InvalidArgumentError
        An unknown class, or bytes that are not a finite number >= 0.
    """
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
