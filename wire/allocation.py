"""``Check`` and ``RecommendAllocation`` on the wire (issue 26): requests as the clients build them,
as the server reads them, and the answers both ways.

Client side: :func:`check_allocation_request` (a layout as device ids or a launch file's text),
:func:`check_result_from_proto`, :func:`recommend_request`, :func:`advice_from_proto`.  Server side:
:func:`parse_check_request` -> :class:`CheckJob` (the arguments of
:func:`rankmap.solver.allocation.check.check_allocation`), :func:`check_response`,
:func:`parse_recommend_request` -> the arguments of
:func:`rankmap.solver.allocation.request.recommend_allocation`, :func:`advice_response`.
Errors are the solver's :class:`~rankmap.solver.errors.InvalidArgumentError` with the proto path
of the field (``launch_file.text``, ``within``, ``sizes.world_size`` ...).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

from rankmap.solver.errors import InvalidArgumentError
from rankmap.solver.megatron.config import ParallelSizes
from rankmap.solver.megatron.ranks import DEFAULT_ORDER
from rankmap.solver.results import Layout
from rankmap.solver.types import Constraint
from rankmap.v1 import rankmap_pb2 as pb
from rankmap.wire.costs import cost_from_proto, cost_to_proto
from rankmap.wire.errors import invalid
from rankmap.wire.graph import count_gpus, graph_from_proto, graph_to_proto
from rankmap.wire.options import _constraint, _nccl_field_to_proto, exposure_from_proto, exposure_to_proto, \
    nccl_from_proto
from rankmap.wire.sizes import config_from_proto, config_from_resolved, config_to_proto, sizes_to_proto
from rankmap.wire.traffic import sizes_with_megatron, traffic_from_proto, traffic_to_proto, value_from_proto, \
    value_to_proto

__all__ = ["LAUNCH_FILE_KINDS_TO_PROTO", "SCHEDULER_TO_PROTO", "CheckJob", "check_allocation_request",
           "check_allocation_request_from_job", "parse_check_request", "check_response", "check_result_from_proto",
           "recommend_request",
           "parse_recommend_request", "advice_response", "advice_from_proto"]

LAUNCH_FILE_KINDS_TO_PROTO = {"hostfile": pb.LAUNCH_FILE_KIND_HOSTFILE, "rankfile": pb.LAUNCH_FILE_KIND_RANKFILE,
                              "pod-map": pb.LAUNCH_FILE_KIND_POD_MAP, "torchrun": pb.LAUNCH_FILE_KIND_TORCHRUN}
_KIND_FROM_PROTO = {v: k for k, v in LAUNCH_FILE_KINDS_TO_PROTO.items()}
SCHEDULER_TO_PROTO = {"slurm": pb.SCHEDULER_SLURM, "kueue": pb.SCHEDULER_KUEUE, "volcano": pb.SCHEDULER_VOLCANO}
_SCHEDULER_FROM_PROTO = {v: k for k, v in SCHEDULER_TO_PROTO.items()}


def _within_to_proto(target, within) -> None:
    from rankmap.solver.allocation.check import parse_within

    for c in parse_within(within):
        target.add(traffic_class=c.traffic_class, level=c.level)


def _within_from_proto(source) -> tuple[Constraint, ...]:
    from rankmap.solver.allocation.check import parse_within

    try:
        return parse_within([f"{c.traffic_class} within {c.level}" for c in source])
    except InvalidArgumentError as exc:
        raise invalid(exc.message, "within", "within") from None


# ---------------------------------------------------------------- Check


def check_allocation_request(graph, layout, *, kind: str = "assignment", order: str = DEFAULT_ORDER,
                  sizes: ParallelSizes | None = None, within=None, traffic=None, model=None,
                  exposure: Mapping[str, float] | None = None, nccl=None, best: bool = True,
                  time_limit_seconds: float | None = None, seed: int = 0, source_name: str = "",
                  gpus_file: str | None = None, cuda_visible_devices: Sequence[int] | None = None,
                  **size_kwargs) -> "pb.CheckRequest":
    """A ``CheckRequest``.

    ``layout``: a sequence of device ids (``kind="assignment"``) or the text of a launch file of
    ``kind`` ``hostfile``, ``rankfile``, ``pod-map`` or ``torchrun`` (``gpus_file``: the text of its
    GPU file; ``cuda_visible_devices``: one list for every host).  ``within``: ``"tp=nvlink,ep=nvlink"``
    or constraints.  Sizes, traffic, model, exposure, nccl as in :func:`rankmap.wire.solve_request`.

    Raises
    ------
    InvalidArgumentError
        An unknown kind, a bad ``within``, values the wire cannot carry.
    """
    req = pb.CheckRequest(order=order or "", skip_best=not best, seed=int(seed))
    req.cluster.CopyFrom(graph if isinstance(graph, pb.Cluster) else graph_to_proto(graph))
    req.sizes.CopyFrom(sizes_to_proto(sizes, **size_kwargs))
    if kind == "assignment":
        if isinstance(layout, (str, bytes)):
            raise InvalidArgumentError("assignment must be a list of device ids (or give kind= and a launch file's "
                                       "text)", "assignment")
        req.assignment.extend(str(a) for a in layout)
    elif kind in LAUNCH_FILE_KINDS_TO_PROTO:
        if not isinstance(layout, str):
            raise InvalidArgumentError(f"a {kind} layout is the file's text", "launch_file")
        req.launch_file.kind = LAUNCH_FILE_KINDS_TO_PROTO[kind]
        req.launch_file.text = layout
        req.launch_file.source_name = source_name or ""
        req.launch_file.gpus_file = gpus_file or ""
        req.launch_file.cuda_visible_devices.extend(int(x) for x in (cuda_visible_devices or ()))
    else:
        raise InvalidArgumentError(f"layout kind {kind!r} is not assignment, "
                                   f"{', '.join(LAUNCH_FILE_KINDS_TO_PROTO)}", "launch_file")
    _within_to_proto(req.within, within)
    if traffic is not None or model is not None:
        req.traffic.CopyFrom(traffic_to_proto(traffic, model))
    exposure_to_proto(req.exposure, exposure)
    _nccl_field_to_proto(req, nccl)
    if time_limit_seconds is not None:
        req.time_limit_seconds = float(time_limit_seconds)
    return req


def check_allocation_request_from_job(graph, cfg, assignment, traffic, within=None, *, exposure=None, nccl=None,
                           best: bool = True, time_limit_seconds: float | None = None,
                           seed: int = 0) -> "pb.CheckRequest":
    """A ``CheckRequest`` with exactly the arguments of ``check_allocation(graph, cfg, assignment, traffic,
    within, ...)`` (a model-derived traffic travels as its model, as for Evaluate)."""
    from rankmap.wire.requests import _traffic_split

    wire_traffic, wire_model = _traffic_split(traffic)
    return check_allocation_request(graph, list(assignment), order=cfg.order, sizes=ParallelSizes.of(cfg),
                                    within=within, traffic=wire_traffic, model=wire_model, exposure=exposure,
                                    nccl=nccl, best=best, time_limit_seconds=time_limit_seconds, seed=seed)


@dataclass
class CheckJob:
    """The arguments of ``check_allocation`` read from a ``CheckRequest``."""

    graph: Any
    cluster: Any
    cfg: Any
    assignment: list[str]
    traffic: Any
    within: tuple[Constraint, ...]
    exposure: dict[str, float]
    best: bool
    time_limit_seconds: float | None
    seed: int


def parse_check_request(req: "pb.CheckRequest", check=None) -> CheckJob:
    """Read a ``CheckRequest``: the cluster (and its model), the layout (device ids, or a launch
    file read with :func:`rankmap.solver.allocation.readers.read_launch_file`), the validated
    configuration (world size: the layout's ranks when unset), traffic and requirements.

    Raises
    ------
    InvalidArgumentError
        Both or neither of ``assignment`` and ``launch_file``; a launch file the readers refuse
        (field ``launch_file.text`` / ``launch_file.gpus_file``); a layout whose length is not the
        world size; bad sizes, traffic, requirements (``within``), exposure or seed.
    """
    from rankmap.solver.allocation.readers import host_gpus, read_launch_file
    from rankmap.solver.fabric.cluster import cluster_from_graph

    graph = graph_from_proto(req.cluster, check)
    nccl = nccl_from_proto(req.nccl)
    within = _within_from_proto(req.within)
    has_file = req.HasField("launch_file")
    if has_file and req.assignment:
        raise invalid("give assignment or launch_file, not both", "launch_file", "assignment")
    if not has_file and not req.assignment:
        raise invalid("the layout is missing: give assignment (a device id per rank) or launch_file", "assignment",
                      "assignment")
    if req.seed < 0 or req.seed >= 2**31:
        raise invalid(f"seed must be an integer in [0, 2147483647], got {req.seed}", "seed", "seed")
    if check is not None:
        check()
    cluster = cluster_from_graph(graph, check, nccl=nccl)
    sizes = sizes_with_megatron(req.sizes, req.traffic, req.HasField("traffic"))
    if has_file:
        lf = req.launch_file
        if lf.kind not in _KIND_FROM_PROTO:
            raise invalid(f"launch_file.kind {lf.kind} is not a launch file kind (hostfile, rankfile, pod map, "
                          "torchrun)", "launch_file.kind", "launch_file.kind")
        kind = _KIND_FROM_PROTO[lf.kind]
        ws = int(sizes.world_size) if sizes.HasField("world_size") else None
        try:
            assignment = read_launch_file(kind, lf.text, host_gpus(cluster), source=lf.source_name or kind,
                                          gpus_text=lf.gpus_file or None,
                                          gpus_source=(lf.source_name or kind) + ".gpus",
                                          cuda_visible_devices=list(lf.cuda_visible_devices) or None, world_size=ws)
        except InvalidArgumentError as exc:
            path = "launch_file.gpus_file" if exc.field == "gpus_file" else "launch_file.text"
            raise invalid(exc.message, path, path) from None
    else:
        assignment = [str(a) for a in req.assignment]
    if sizes.HasField("world_size") and sizes.world_size != len(assignment):
        what = "the launch file starts" if has_file else "assignment has"
        raise invalid(f"{what} {len(assignment)} ranks but sizes.world_size is {sizes.world_size}",
                      "launch_file.text" if has_file else "assignment", "world_size")
    cfg = config_from_proto(sizes, req.order or DEFAULT_ORDER, default_world_size=len(assignment), rpc="Evaluate")
    traffic = traffic_from_proto(req.traffic, cfg, has_traffic=req.HasField("traffic"))
    limit = float(req.time_limit_seconds) if req.HasField("time_limit_seconds") else None
    if limit is not None and not (limit > 0 and limit == limit and limit != float("inf")):
        raise invalid(f"time_limit_seconds must be a positive number, got {limit!r}", "time_limit_seconds",
                      "time_limit_seconds")
    return CheckJob(graph, cluster, cfg, assignment, traffic, within, exposure_from_proto(req.exposure),
                    not req.skip_best, limit, int(req.seed))


def check_response(result) -> "pb.CheckResponse":
    """A ``CheckResponse`` carrying a :class:`~rankmap.solver.allocation.check.CheckResult`."""
    out = pb.CheckResponse(config=config_to_proto(result.config), assignment=list(result.assignment),
                           hosts=list(result.hosts), best_note=result.best_note)
    for r in result.requirements:
        out.requirements.add(requirement=pb.Constraint(traffic_class=r.requirement.traffic_class,
                                                       level=r.requirement.level),
                             groups=r.groups, violations=r.violations)
    for v in result.violations:
        out.violations.add(traffic_class=v.traffic_class, level=v.level, group=list(v.group), domains=list(v.domains))
    out.cost.CopyFrom(cost_to_proto(result.cost))
    if result.best is not None:
        out.best.order = result.best.order
        out.best.assignment.extend(result.best.assignment)
        out.best.cost.CopyFrom(cost_to_proto(result.best.cost))
    for k, v in result.traffic.items():
        out.traffic_bytes[k] = float(v)
    return out


def check_result_from_proto(msg: "pb.CheckResponse"):
    """The :class:`~rankmap.solver.allocation.check.CheckResult` of a ``CheckResponse`` (``best`` a
    :class:`~rankmap.solver.results.Layout`, or None)."""
    from rankmap.solver.allocation.check import CheckResult, RequirementSummary, Violation

    best = None
    if msg.HasField("best"):
        best = Layout(msg.best.order, tuple(msg.best.assignment), cost_from_proto(msg.best.cost))
    return CheckResult(
        config_from_resolved(msg.config), tuple(msg.assignment), tuple(msg.hosts),
        tuple(RequirementSummary(Constraint(r.requirement.traffic_class, r.requirement.level), int(r.groups),
                                 int(r.violations)) for r in msg.requirements),
        tuple(Violation(v.traffic_class, v.level, tuple(int(x) for x in v.group), tuple(v.domains))
              for v in msg.violations),
        cost_from_proto(msg.cost), dict(msg.traffic_bytes), best, msg.best_note)


# ---------------------------------------------------------------- RecommendAllocation


def recommend_request(*, graph=None, nvlink_domain_size: int | None = None, gpus_per_node: int | None = None,
                      within=None, schedulers: Iterable[str] | str = (), order: str = DEFAULT_ORDER,
                      sizes: ParallelSizes | None = None, nodes_per_leaf: int | None = None,
                      nvlink_label: str = "", pack_label: str = "", nvlink_tier: int | None = None,
                      max_wait: str = "", **size_kwargs) -> "pb.RecommendAllocationRequest":
    """A ``RecommendAllocationRequest``: ``graph`` (the cluster) or ``nvlink_domain_size`` (GPUs per
    NVLink domain) with ``gpus_per_node``; ``schedulers``: ``"all"`` or names of
    :data:`~rankmap.solver.allocation.request.SCHEDULERS`; the rest as ``rankmap request``'s flags.

    Raises
    ------
    InvalidArgumentError
        An unknown scheduler, a bad ``within``.
    """
    req = pb.RecommendAllocationRequest(order=order or "", nvlink_label=nvlink_label or "",
                                        pack_label=pack_label or "", max_wait=max_wait or "")
    req.sizes.CopyFrom(sizes_to_proto(sizes, **size_kwargs))
    if graph is not None:
        req.cluster.CopyFrom(graph if isinstance(graph, pb.Cluster) else graph_to_proto(graph))
    for name, value in (("nvlink_domain_size", nvlink_domain_size), ("gpus_per_node", gpus_per_node),
                        ("nodes_per_leaf", nodes_per_leaf), ("volcano_nvlink_tier", nvlink_tier)):
        if value is not None:
            setattr(req, name, int(value))
    names = [schedulers] if isinstance(schedulers, str) else list(schedulers)
    for s in names:
        if s == "all":
            continue
        if s not in SCHEDULER_TO_PROTO:
            raise InvalidArgumentError(f"scheduler {s!r} is not one of {', '.join(SCHEDULER_TO_PROTO)}, all",
                                       "scheduler")
        req.schedulers.append(SCHEDULER_TO_PROTO[s])
    _within_to_proto(req.within, within)
    return req


def parse_recommend_request(req: "pb.RecommendAllocationRequest", check=None) -> tuple[tuple, dict]:
    """``(args, kwargs)`` of :func:`~rankmap.solver.allocation.request.recommend_allocation` read from
    a ``RecommendAllocationRequest``.

    Raises
    ------
    InvalidArgumentError
        Both or neither of the cluster and the two sizes; a missing world size; an unknown scheduler
        value; bad sizes, requirements or labels (field paths of the request).
    """
    from rankmap.solver.allocation.request import DEFAULT_MAX_WAIT, DEFAULT_NVLINK_LABEL, SCHEDULERS, \
        cluster_shape

    has_cluster = len(req.cluster.devices) > 0
    given = req.HasField("nvlink_domain_size") or req.HasField("gpus_per_node")
    if has_cluster and given:
        raise invalid("give cluster or nvlink_domain_size with gpus_per_node, not both", "cluster", "cluster")
    leaf = int(req.nodes_per_leaf) if req.HasField("nodes_per_leaf") else None
    if has_cluster:
        from rankmap.solver.fabric.cluster import cluster_from_graph

        graph = graph_from_proto(req.cluster, check)
        cluster = cluster_from_graph(graph, check)
        g, d, cl_leaf = cluster_shape(cluster, graph)
        leaf = leaf if leaf is not None else cl_leaf
        default_ws = count_gpus(graph)
    else:
        if not (req.HasField("nvlink_domain_size") and req.HasField("gpus_per_node")):
            raise invalid("give cluster, or nvlink_domain_size and gpus_per_node", "nvlink_domain_size",
                          "nvlink_domain_size")
        g, d, default_ws = int(req.gpus_per_node), int(req.nvlink_domain_size), None
        for name, v in (("gpus_per_node", g), ("nvlink_domain_size", d)):
            if v < 1:
                raise invalid(f"{name} must be a positive integer, got {v}", name, name)
    if leaf is not None and leaf < 1:
        raise invalid(f"nodes_per_leaf must be a positive integer, got {leaf}", "nodes_per_leaf", "nodes_per_leaf")
    cfg = config_from_proto(req.sizes, req.order or DEFAULT_ORDER, default_world_size=default_ws,
                            rpc="RecommendAllocation")
    schedulers = []
    for s in req.schedulers:
        if s not in _SCHEDULER_FROM_PROTO:
            raise invalid(f"scheduler value {s} is not a Scheduler", "schedulers", "scheduler")
        schedulers.append(_SCHEDULER_FROM_PROTO[s])
    tier = int(req.volcano_nvlink_tier) if req.HasField("volcano_nvlink_tier") else 1
    within = _within_from_proto(req.within)
    kwargs = dict(nodes_per_leaf=leaf, nvlink_label=req.nvlink_label or DEFAULT_NVLINK_LABEL,
                  pack_label=req.pack_label or None, nvlink_tier=tier, max_wait=req.max_wait or DEFAULT_MAX_WAIT)
    return (cfg, g, d, within or (Constraint("tp", "nvlink"),), tuple(schedulers) or SCHEDULERS), kwargs


def advice_response(advice) -> "pb.RecommendAllocationResponse":
    """A ``RecommendAllocationResponse`` carrying an :class:`~rankmap.solver.allocation.request.AllocationAdvice`."""
    out = pb.RecommendAllocationResponse(
        world_size=advice.world_size, order=advice.order, gpus_per_node=advice.gpus_per_node, nodes=advice.nodes,
        nvlink_domain_gpus=advice.nvlink_domain_gpus, nodes_per_domain=advice.nodes_per_domain,
        unit_ranks=advice.unit_ranks, unit_nodes=advice.unit_nodes, segment_nodes=advice.segment_nodes,
        min_segment_nodes=advice.min_segment_nodes)
    for c in advice.requirements:
        out.within.add(traffic_class=c.traffic_class, level=c.level)
    for r in advice.requests:
        item = out.requests.add(scheduler=SCHEDULER_TO_PROTO[r.scheduler], options=list(r.options), why=r.why)
        for k, v in r.annotations.items():
            item.annotations[k] = v
        if r.spec:
            item.spec.CopyFrom(value_to_proto(dict(r.spec)))
    return out


def advice_from_proto(msg: "pb.RecommendAllocationResponse"):
    """The :class:`~rankmap.solver.allocation.request.AllocationAdvice` of a ``RecommendAllocationResponse``."""
    from rankmap.solver.allocation.request import AllocationAdvice, SchedulerRequest

    requests = tuple(
        SchedulerRequest(_SCHEDULER_FROM_PROTO[r.scheduler], tuple(r.options), dict(r.annotations),
                         value_from_proto(r.spec) if r.HasField("spec") else {}, r.why)
        for r in msg.requests)
    return AllocationAdvice(int(msg.world_size), int(msg.gpus_per_node), int(msg.nodes), int(msg.nvlink_domain_gpus),
                            int(msg.nodes_per_domain), tuple(Constraint(c.traffic_class, c.level) for c in msg.within),
                            int(msg.unit_ranks), int(msg.unit_nodes), int(msg.segment_nodes),
                            int(msg.min_segment_nodes), requests, msg.order)
