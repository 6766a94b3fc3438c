"""Check a granted allocation (issue 26, ``rankmap check``): every group that straddles a required
domain, and the predicted cost against rankmap's best layout on the same hosts.

Requirements are the solve's constraints (:class:`~rankmap.solver.types.Constraint`, one
vocabulary: ``tp within nvlink``, ``ep=nvlink``, ``pp=leaf``; levels ``nvlink``, ``host``,
``leaf``, ``spine``, ``core``, ``level:N`` as
:meth:`~rankmap.solver.fabric.cluster.Cluster.level_labels` defines them).  A group of class c
*straddles* level L when its ranks' GPUs lie in more than one level-L domain (the test the
solve's constraint check uses, :func:`~rankmap.solver.search.constraints.satisfies`), vectorised
over all groups: O(world size) per requirement, no per-pair work.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from ..cost.timemodel import class_groups, layout_cost
from ..errors import InfeasibleError, InvalidArgumentError
from ..fabric.cluster import Cluster, cluster_from_graph
from ..megatron.catalogue import megatron_groups
from ..megatron.config import ParallelConfig
from ..megatron.ranks import DEFAULT_ORDER
from ..results import CostBreakdown
from ..types import Constraint, SolveOptions, check_exposure, parse_constraint

__all__ = ["Violation", "RequirementSummary", "CheckResult", "parse_within", "check_allocation",
           "straddling_groups", "DEFAULT_CHECK_SECONDS"]

#: Time limit of the best-layout solve of a check, seconds, unless the caller gives one.
DEFAULT_CHECK_SECONDS = 10.0


def parse_within(value: str | Sequence[str] | None) -> tuple[Constraint, ...]:
    """Requirements from ``"tp=nvlink,ep=nvlink,pp=leaf"`` (or a list of ``"tp within host"`` /
    ``"tp=host"`` / :class:`Constraint`); the solve's constraint syntax, one per class.

    Raises
    ------
    InvalidArgumentError
        An unknown class or level, a malformed entry, a class required twice (naming it;
        field ``within``).
    """
    if value is None:
        return ()
    items = value.split(",") if isinstance(value, str) else list(value)
    out: list[Constraint] = []
    seen: dict[str, str] = {}
    for item in items:
        if isinstance(item, Constraint):
            c = item
        else:
            text = str(item).strip()
            if not text:
                raise InvalidArgumentError(f"--within {value!r} has an empty entry (expected CLASS=LEVEL,...)",
                                           "within")
            if "within" not in text and "=" in text:  # CLASS=LEVEL (a level may hold ':', as level:N)
                cls, _, level = text.partition("=")
                text = f"{cls.strip()} within {level.strip()}"
            try:
                c = parse_constraint(text)
            except InvalidArgumentError as exc:
                raise InvalidArgumentError(f"--within: {exc.message}", "within") from None
        if c.traffic_class in seen and seen[c.traffic_class] != c.level:
            raise InvalidArgumentError(
                f"--within names {c.traffic_class} twice ({seen[c.traffic_class]} and {c.level})", "within")
        if c.traffic_class not in seen:
            seen[c.traffic_class] = c.level
            out.append(c)
    return tuple(out)


@dataclass(frozen=True)
class Violation:
    """One group that straddles a required domain.

    Attributes
    ----------
    traffic_class : str
        The class (``tp``, ``ep`` ...) whose group it is.
    level : str
        The required level (``nvlink``, ``host``, ``leaf`` ...).
    group : tuple of int
        The group's global ranks, ascending.
    domains : tuple of str
        Names of the level's domains its GPUs lie in, in order of first appearance along the group
        (a host's name; ``nvlink:D`` for the graph's ``nvlink_domain`` D; else ``LEVEL[first..last
        host]`` of the domain's hosts in natural order).
    """

    traffic_class: str
    level: str
    group: tuple[int, ...]
    domains: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        """``{"class", "level", "group": [ranks], "domains": [names]}``."""
        return {"class": self.traffic_class, "level": self.level, "group": list(self.group),
                "domains": list(self.domains)}


@dataclass(frozen=True)
class RequirementSummary:
    """How one requirement fares: ``groups`` of the class (size > 1), ``violations`` straddling."""

    requirement: Constraint
    groups: int
    violations: int

    def to_dict(self) -> dict[str, Any]:
        """``{"requirement", "class", "level", "groups", "violations"}``."""
        return {"requirement": str(self.requirement), "class": self.requirement.traffic_class,
                "level": self.requirement.level, "groups": self.groups, "violations": self.violations}


@dataclass(frozen=True)
class CheckResult:
    """What ``rankmap check`` reports (JSON: :meth:`to_dict`).

    Attributes
    ----------
    config : ParallelConfig
        Sizes and the layout's order.
    assignment : tuple of str
        GPU per global rank (as read from the launch file).
    hosts : tuple of str
        Hosts the allocation uses, in order of their lowest rank.
    requirements : tuple of RequirementSummary
    violations : tuple of Violation
        Every straddling group, requirement by requirement, groups in catalogue order.
    cost : CostBreakdown
        Predicted communication time of the allocation as granted (DESIGN §4).
    traffic : mapping class -> bytes per rank per step
    best : SolveResult or None
        rankmap's best layout on the same hosts (same mode's GPUs) under the requirements; None when
        not asked for.  When the granted layout is cheaper than what the search found, it is its own
        best (``best_note`` says so).
    best_note : str
        Why ``best`` differs from a plain solve with the requirements ("" when it does not).
    """

    config: ParallelConfig
    assignment: tuple[str, ...]
    hosts: tuple[str, ...]
    requirements: tuple[RequirementSummary, ...]
    violations: tuple[Violation, ...]
    cost: CostBreakdown
    traffic: Mapping[str, float]
    best: Any = None
    best_note: str = ""

    @property
    def ok(self) -> bool:
        """True when no group straddles a required domain."""
        return not self.violations

    @property
    def best_cost(self) -> CostBreakdown | None:
        """The best layout's cost, or None without a best."""
        return None if self.best is None else self.best.cost

    def to_dict(self) -> dict[str, Any]:
        """``{"ok", "order", "world_size", "sizes", "hosts", "requirements", "violations", "cost",
        "best_cost", "best_order", "best_assignment", "best_note", "improvement", "traffic_bytes"}``
        (``best_*`` null without a best; ``improvement`` = 1 - best / granted)."""
        best = self.best
        total = self.cost.total_seconds
        improvement = None
        if best is not None:
            improvement = 0.0 if total <= 0 else 1.0 - best.cost.total_seconds / total
        return {
            "ok": self.ok,
            "order": self.config.order,
            "world_size": self.config.world_size,
            "sizes": self.config.sizes,
            "hosts": list(self.hosts),
            "requirements": [r.to_dict() for r in self.requirements],
            "violations": [v.to_dict() for v in self.violations],
            "cost": self.cost.to_dict(),
            "best_cost": None if best is None else best.cost.to_dict(),
            "best_order": None if best is None else best.order,
            "best_assignment": None if best is None else list(best.assignment),
            "best_note": self.best_note,
            "improvement": improvement,
            "traffic_bytes": {k: float(v) for k, v in self.traffic.items()},
        }


def _device_indices(cluster: Cluster, assignment: Sequence[str], world_size: int) -> np.ndarray:
    """Device index per rank (the checks of :func:`rankmap.solver.evaluate`)."""
    if len(assignment) != world_size:
        raise InvalidArgumentError(f"assignment has {len(assignment)} entries but world_size is {world_size}",
                                   "assignment")
    index = cluster.device_index()
    dev = np.empty(len(assignment), dtype=np.int64)
    used: dict[int, int] = {}
    for r, a in enumerate(assignment):
        i = index.get(str(a))
        if i is None:
            raise InvalidArgumentError(f"assignment[{r}] = {str(a)[:120]!r} is not a GPU of the cluster",
                                       f"assignment[{r}]")
        if i in used:
            raise InvalidArgumentError(f"assignment[{r}] = {a!r} is already used by rank {used[i]}", f"assignment[{r}]")
        used[i] = r
        dev[r] = i
    return dev


def _domain_namer(cluster: Cluster, graph, level: str, labels: np.ndarray):
    """``name(label) -> str`` for the domains of ``level``.

    O(GPUs + hosts log hosts) once (per label: its first device, and its hosts that come first and
    last in natural order), then O(1) per name; only straddled domains are named.
    """
    from ..launch.placement import natural_key

    n_lab = int(labels.max()) + 1 if labels.size else 0
    rank_of_host = np.empty(len(cluster.hosts), dtype=np.int64)
    by_name = sorted(range(len(cluster.hosts)), key=lambda h: natural_key(cluster.hosts[h]))
    rank_of_host[np.array(by_name, dtype=np.int64)] = np.arange(len(by_name))
    hr = rank_of_host[cluster.host_of]
    lo = np.full(n_lab, np.iinfo(np.int64).max, dtype=np.int64)
    hi = np.full(n_lab, -1, dtype=np.int64)
    np.minimum.at(lo, labels, hr)
    np.maximum.at(hi, labels, hr)
    first_dev = np.full(n_lab, -1, dtype=np.int64)
    first_dev[labels[::-1]] = np.arange(labels.size - 1, -1, -1)  # the last write per label is its first device
    last_dev = np.full(n_lab, -1, dtype=np.int64)
    last_dev[labels] = np.arange(labels.size)

    def tag(d: int):
        return None if graph is None else graph.nodes[cluster.devices[d]].get("nvlink_domain")

    def name(label: int) -> str:
        first, last = cluster.hosts[by_name[int(lo[label])]], cluster.hosts[by_name[int(hi[label])]]
        if first == last and level in ("host", "nvlink"):
            return first
        t = tag(int(first_dev[label]))
        if level == "nvlink" and t is not None and t == tag(int(last_dev[label])):
            return f"nvlink:{t}"
        return f"{level}[{first}]" if first == last else f"{level}[{first}..{last}]"

    return name


def straddling_groups(cluster: Cluster, cfg: ParallelConfig, dev_of_rank: np.ndarray,
                      requirements: Sequence[Constraint], graph=None,
                      groups: Mapping[str, np.ndarray] | None = None
                      ) -> tuple[tuple[RequirementSummary, ...], tuple[Violation, ...]]:
    """Per requirement, the groups whose GPUs lie in more than one domain of its level.

    ``dev_of_rank``: int array (world size,) of device indices into ``cluster.devices``.
    Vectorised: one gather of shape (groups, group size) per requirement.

    Raises
    ------
    InvalidArgumentError
        A level this cluster does not have (``level:N`` out of range).
    """
    groups = megatron_groups(cfg) if groups is None else groups
    by_class = class_groups(cfg, groups)
    summaries, violations = [], []
    for req in requirements:
        arr = by_class[req.traffic_class] - cfg.rank_offset
        try:
            lab = cluster.level_labels(req.level)
        except InvalidArgumentError as exc:
            raise InvalidArgumentError(f"--within {req.traffic_class}={req.level}: {exc.message}", "within") from None
        if arr.shape[1] < 2:
            summaries.append(RequirementSummary(req, 0, 0))
            continue
        d = lab[dev_of_rank[arr]]
        bad = np.flatnonzero(np.any(d != d[:, :1], axis=1))
        summaries.append(RequirementSummary(req, int(arr.shape[0]), int(bad.size)))
        name = _domain_namer(cluster, graph, req.level, lab)
        for g in bad.tolist():
            row = d[g]
            _, first = np.unique(row, return_index=True)
            names = tuple(name(int(row[i])) for i in sorted(first.tolist()))
            violations.append(Violation(req.traffic_class, req.level,
                                        tuple(int(x) for x in (arr[g] + cfg.rank_offset).tolist()), names))
    return tuple(summaries), tuple(violations)


def check_allocation(graph, cfg: ParallelConfig, assignment: Sequence[str], traffic: Mapping[str, float],
                     requirements: Sequence[Constraint] | str = (), *, exposure: Mapping[str, float] | None = None,
                     nccl=None, best: bool = True, time_limit_seconds: float = DEFAULT_CHECK_SECONDS,
                     seed: int = 0, cancel=None, cluster: Cluster | None = None, deadline=None) -> CheckResult:
    """Check a granted layout: the groups that straddle required domains, its predicted cost, and
    rankmap's best layout for the same hosts.

    Parameters
    ----------
    graph : networkx.Graph
        The cluster (DESIGN §2).
    cfg : ParallelConfig
        Sizes and the order the layout runs (``cfg.order``).
    assignment : sequence of str
        GPU node id per global rank (length ``cfg.world_size``).
    traffic : mapping class -> bytes per rank per step
    requirements : sequence of Constraint, or ``"tp=nvlink,ep=nvlink"`` (:func:`parse_within`)
    exposure, nccl
        As for :func:`rankmap.solver.evaluate`.
    best : bool
        Also solve for the best layout on the same GPUs (launcher mode when the allocation uses
        whole hosts with equal GPU counts, else free mode), searching the default order and the
        layout's order, under the requirements; when they cannot hold on these hosts, without them
        (``best_note`` says so).
    time_limit_seconds : float
        Wall-clock limit of that solve (seconds).
    cancel : threading.Event, optional
        Stops the solve (``SolveCancelled``).
    cluster : Cluster, optional
        ``graph``'s cluster model when the caller has built it (with the same ``nccl``).
    deadline : Deadline, optional
        The best-layout solve's wall-clock stop (a gRPC call's budget); default one of
        ``time_limit_seconds`` from the solve's start.

    Returns
    -------
    CheckResult

    Raises
    ------
    InvalidArgumentError
        A GPU not in the cluster or used twice, a wrong number of entries, an unknown class or
        level in the requirements.
    SolveCancelled
        ``cancel`` was set during the best-layout solve.
    """
    from ..search.solve import solve

    if isinstance(requirements, str):
        requirements = parse_within(requirements)
    requirements = tuple(requirements)
    exposure = check_exposure(exposure)
    cluster = cluster if cluster is not None else cluster_from_graph(graph, nccl=nccl)
    assignment = tuple(str(a) for a in assignment)
    dev = _device_indices(cluster, assignment, cfg.world_size)
    groups = megatron_groups(cfg)
    summaries, violations = straddling_groups(cluster, cfg, dev, requirements, graph, groups)
    cost = layout_cost(cluster, cfg, dev, traffic, groups=groups, exposure=exposure)
    host_idx, first = np.unique(cluster.host_of[dev], return_index=True)
    used_hosts = tuple(cluster.hosts[h] for h in host_idx[np.argsort(first)].tolist())
    result = CheckResult(cfg, assignment, used_hosts, summaries, violations, cost, dict(traffic))
    if not best:
        return result
    # the same GPUs: the hosts used; whole hosts -> launcher mode, else free mode over exactly these GPUs
    used = np.zeros(cluster.num_devices, dtype=bool)
    used[dev] = True
    on_used_hosts = np.isin(cluster.host_of, host_idx)
    spare = np.flatnonzero(on_used_hosts & ~used)
    per_host = np.bincount(cluster.host_of[dev], minlength=len(cluster.hosts))[host_idx]
    whole = spare.size == 0 and np.unique(per_host).size == 1
    in_use = set(host_idx.tolist())
    unused_hosts = tuple(h for i, h in enumerate(cluster.hosts) if i not in in_use)
    orders = (DEFAULT_ORDER,) if cfg.order == DEFAULT_ORDER else (DEFAULT_ORDER, cfg.order)
    options = SolveOptions(mode="launcher" if whole else "free", orders=orders, constraints=requirements,
                           exclude_hosts=unused_hosts,
                           exclude_devices=tuple(cluster.devices[i] for i in spare.tolist()),
                           time_limit_seconds=time_limit_seconds, seed=seed, exposure=exposure,
                           nccl=cluster.nccl)
    note = ""
    try:
        found = solve(graph, cfg, traffic, options, cancel=cancel, deadline=deadline)
    except InfeasibleError as exc:
        note = f"the requirements cannot all hold on these hosts ({exc.message}); best is without them"
        found = solve(graph, cfg, traffic, dataclasses.replace(options, constraints=()), cancel=cancel,
                      deadline=deadline)
    if found.cost.total_seconds > cost.total_seconds and (not violations or note):
        # the search did not beat the granted layout, which meets what the search had to meet
        from ..results import Layout

        note = (note + "; " if note else "") + "the granted layout is the best found (the search's best predicts " \
                f"{found.cost.total_seconds:.6g} s)"
        found = dataclasses.replace(found, layout=Layout(cfg.order, assignment, cost))
    return dataclasses.replace(result, best=found, best_note=note)
