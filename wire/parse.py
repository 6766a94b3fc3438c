"""Requests, as the server reads them: ``rankmap.v1`` request messages -> the solver's arguments.

:func:`parse_solve_request`, :func:`parse_evaluate_request` and
:func:`parse_get_groups_request` give the arguments of :func:`rankmap.solver.solve`,
``evaluate`` and ``megatron_groups``; errors are the solver's
:class:`~rankmap.solver.errors.InvalidArgumentError` (see :mod:`rankmap.wire.errors`
for the field names).  :func:`describe_request` summarises a request for the log line, :func:`request_extent`
for the server's limits.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import networkx as nx

from rankmap.solver.errors import InvalidArgumentError
from rankmap.solver.megatron.config import ParallelConfig
from rankmap.solver.megatron.ranks import DEFAULT_ORDER
from rankmap.solver.types import SolveOptions
from rankmap.v1 import rankmap_pb2 as pb
from rankmap.wire.graph import count_gpus, graph_from_proto
from rankmap.wire.measured import measurements_from_proto
from rankmap.wire.options import exposure_from_proto, nccl_from_proto, options_from_proto
from rankmap.wire.sizes import config_from_proto
from rankmap.wire.traffic import sizes_with_megatron, traffic_from_proto

__all__ = [
    "SolveJob",
    "EvaluateJob",
    "parse_solve_request",
    "parse_evaluate_request",
    "parse_get_groups_request",
    "describe_request",
    "RequestExtent",
    "request_extent",
]


@dataclass
class SolveJob:
    """The arguments of ``rankmap.solver.solve`` read from a ``SolveRequest``."""

    graph: nx.Graph
    cfg: ParallelConfig
    traffic: dict[str, float]
    options: SolveOptions
    omit_groups: bool = False
    measured: Any = None
    """The request's measured rates applied (:class:`~rankmap.solver.fabric.measured.MeasuredGraph`), or None."""


@dataclass
class EvaluateJob:
    """The arguments of ``rankmap.solver.evaluate`` read from an ``EvaluateRequest``."""

    graph: nx.Graph
    cfg: ParallelConfig
    assignment: tuple[str, ...]
    traffic: dict[str, float]
    exposure: dict[str, float] = dataclasses.field(default_factory=dict)
    nccl: Any = None
    """How NCCL runs the collectives (:class:`~rankmap.solver.NcclModel`)."""
    measured: Any = None
    """The request's measured rates applied (:class:`~rankmap.solver.fabric.measured.MeasuredGraph`), or None."""


def parse_solve_request(req: "pb.SolveRequest", check=None, default_world_size=None) -> SolveJob:
    """Read a ``SolveRequest``: graph, validated config, traffic and options.

    ``check``: called at check points of the conversion (raises to stop it).
    ``default_world_size``: callable ``(graph, options) -> int``, the world size when
    ``sizes.world_size`` is unset (default: the usable GPUs; a Repair's job: the running
    layout's ranks, a Compare's: each allocation's GPUs).

    The options, sizes and traffic are validated against the GPU count of the raw message
    (``cluster.devices`` less the excluded devices and hosts) before the graph is built, so a
    bad request is refused in milliseconds at any cluster size (issue 28: 7 s at 131,072 GPUs);
    not with ``default_world_size`` or measured rates (which may leave slow hosts out).
    """
    options = options_from_proto(req)
    sizes = sizes_with_megatron(req.sizes, req.traffic, req.HasField("traffic"))
    if req.HasField("traffic") and req.traffic.megatron_args:
        from rankmap.solver.traffic import parse_megatron_args

        # --use-tp-pp-dp-mapping: the order Megatron will build, so the baseline's, and the one searched
        # unless the request names orders
        order = parse_megatron_args(req.traffic.megatron_args).order
        options = dataclasses.replace(options, baseline_order=order)
        orders_unset = not req.HasField("orders") or (req.orders.policy == pb.ORDER_POLICY_UNSPECIFIED
                                                      and not req.orders.orders)
        if order != DEFAULT_ORDER and orders_unset:
            options = dataclasses.replace(options, orders=order)
    early = None
    if default_world_size is None and not len(req.measured):
        early = raw_gpu_count(req.cluster, options.exclude_devices, options.exclude_hosts)
    cfg = traffic = None
    if early is not None:  # the raw count is the graph's GPU count (unique device ids)
        cfg = config_from_proto(sizes, DEFAULT_ORDER, default_world_size=early, rpc="Solve")
        if cfg.world_size > early:
            raise InvalidArgumentError(f"world_size {cfg.world_size} is more than the {early} usable GPUs of the "
                                       "cluster; a job needs one GPU per rank", "world_size")
        traffic = traffic_from_proto(req.traffic, cfg, has_traffic=req.HasField("traffic"))
    graph = graph_from_proto(req.cluster, check)
    measured = _measured(req, graph, options.nccl, req.exclude_slow if req.HasField("exclude_slow") else None, check)
    if measured is not None:
        graph = measured.graph
        if measured.slow_hosts:
            options = dataclasses.replace(options, exclude_hosts=tuple(dict.fromkeys(
                (*options.exclude_hosts, *measured.slow_hosts))))
    n = (count_gpus(graph, options.exclude_devices, options.exclude_hosts) if default_world_size is None
         else default_world_size(graph, options))
    if cfg is None or n != early:
        cfg = config_from_proto(sizes, DEFAULT_ORDER, default_world_size=n, rpc="Solve")
        traffic = traffic_from_proto(req.traffic, cfg, has_traffic=req.HasField("traffic"))
    return SolveJob(graph, cfg, traffic, options, bool(req.omit_groups), measured)


def raw_gpu_count(cluster: "pb.Cluster", exclude_devices=(), exclude_hosts=()) -> int | None:
    """GPUs of a ``rankmap.v1.Cluster`` message not excluded, read from ``cluster.devices`` alone
    (O(devices), no graph), or None when device ids repeat (the graph conversion then names the
    repeated id)."""
    devices = cluster.devices
    ids = [d.id for d in devices]
    if len(set(ids)) != len(ids):
        return None
    if not exclude_devices and not exclude_hosts:
        return len(ids)
    devs = {str(d) for d in exclude_devices}
    hosts = {str(h) for h in exclude_hosts}
    return sum(1 for d in devices if d.id not in devs and (d.host or d.id) not in hosts)


def _measured(req, graph, nccl, exclude_slow, check):
    """The request's ``measured`` rates applied to ``graph`` (None when it has none)."""
    from rankmap.solver.errors import InvalidArgumentError
    from rankmap.solver.fabric.measured import apply_measured, check_exclude_slow

    try:
        exclude_slow = check_exclude_slow(exclude_slow)
    except InvalidArgumentError as exc:
        raise InvalidArgumentError(exc.message, "exclude_slow") from None
    ms = measurements_from_proto(req.measured)
    if not ms:
        if exclude_slow is not None:
            raise InvalidArgumentError("exclude_slow needs measured rates (SolveRequest.measured)", "exclude_slow")
        return None
    return apply_measured(graph, ms, nccl, exclude_slow, check)


def parse_evaluate_request(req: "pb.EvaluateRequest", check=None) -> EvaluateJob:
    """Read an ``EvaluateRequest`` (``check`` as in :func:`parse_solve_request`)."""
    graph = graph_from_proto(req.cluster, check)
    nccl = nccl_from_proto(req.nccl)
    measured = _measured(req, graph, nccl, None, check)
    if measured is not None:
        graph = measured.graph
    sizes = sizes_with_megatron(req.sizes, req.traffic, req.HasField("traffic"))
    cfg = config_from_proto(sizes, req.order or DEFAULT_ORDER, default_world_size=count_gpus(graph), rpc="Evaluate")
    traffic = traffic_from_proto(req.traffic, cfg, has_traffic=req.HasField("traffic"))
    return EvaluateJob(graph, cfg, tuple(req.assignment), traffic, exposure_from_proto(req.exposure), nccl, measured)


def parse_get_groups_request(req: "pb.GetGroupsRequest") -> ParallelConfig:
    """Read a ``GetGroupsRequest`` (world_size required)."""
    return config_from_proto(req.sizes, req.order or DEFAULT_ORDER, default_world_size=None, rpc="GetGroups")


def describe_request(req) -> dict[str, Any]:
    """Sizes and GPU count of a request, for the server's log line."""
    out: dict[str, Any] = {}
    sizes = getattr(req, "sizes", None)
    if sizes is not None:
        out["sizes"] = {
            f.name: (list(v)[:20] if f.name == "hierarchical_context_parallel_sizes" else v)
            for f, v in sizes.ListFields()
        }
    if isinstance(req, (pb.RepairRequest, pb.CompareRequest)):
        return describe_request(req.job)
    cluster = getattr(req, "cluster", None)
    if cluster is not None:
        out["gpus"] = len(cluster.devices)
    if isinstance(req, pb.BatchSolveRequest):
        out["requests"] = len(req.requests)
        out["gpus"] = sum(len(r.cluster.devices) for r in req.requests)
    return out


@dataclass(frozen=True)
class RequestExtent:
    """How much a request asks for, as the server's limits see it (None: not in this request).

    Attributes
    ----------
    world_size : int or None
        ``sizes.world_size`` when set.
    hierarchical_cp_levels : int
        Entries of ``sizes.hierarchical_context_parallel_sizes``.
    devices : int or None
        GPUs of the request's cluster (Solve, Evaluate).
    assignment : int or None
        Ranks of an Evaluate's assignment.
    batch_length : int or None
        Items of a BatchSolve (each item is checked when it is solved).
    time_limit_seconds : float or None
        A Solve's explicit search time, seconds.
    """

    world_size: int | None = None
    hierarchical_cp_levels: int = 0
    devices: int | None = None
    assignment: int | None = None
    batch_length: int | None = None
    time_limit_seconds: float | None = None


def request_extent(request) -> RequestExtent:
    """The :class:`RequestExtent` of a Solve / Evaluate / GetGroups / BatchSolve / Check /
    RecommendAllocation / Repair / Compare request (Repair and Compare: their job's, and a Repair's
    running layout as ``assignment``; anything else: an empty one)."""
    if isinstance(request, pb.BatchSolveRequest):
        return RequestExtent(batch_length=len(request.requests))
    if isinstance(request, pb.CheckRequest):  # its launch file's lines are bounded by the request bytes
        return RequestExtent(
            world_size=int(request.sizes.world_size) if request.sizes.HasField("world_size") else None,
            hierarchical_cp_levels=len(request.sizes.hierarchical_context_parallel_sizes),
            devices=len(request.cluster.devices), assignment=len(request.assignment),
            time_limit_seconds=float(request.time_limit_seconds) if request.HasField("time_limit_seconds") else None)
    if isinstance(request, pb.RecommendAllocationRequest):
        return RequestExtent(
            world_size=int(request.sizes.world_size) if request.sizes.HasField("world_size") else None,
            hierarchical_cp_levels=len(request.sizes.hierarchical_context_parallel_sizes),
            devices=len(request.cluster.devices))
    if isinstance(request, (pb.RepairRequest, pb.CompareRequest)):  # the job's extent, and a running layout's
        inner = request_extent(request.job)
        running = len(request.running_assignment) if isinstance(request, pb.RepairRequest) else None
        return dataclasses.replace(inner, assignment=running)
    if not isinstance(request, (pb.SolveRequest, pb.EvaluateRequest, pb.GetGroupsRequest)):
        return RequestExtent()
    sizes = request.sizes
    return RequestExtent(
        world_size=int(sizes.world_size) if sizes.HasField("world_size") else None,
        hierarchical_cp_levels=len(sizes.hierarchical_context_parallel_sizes),
        devices=len(request.cluster.devices) if not isinstance(request, pb.GetGroupsRequest) else None,
        assignment=len(request.assignment) if isinstance(request, pb.EvaluateRequest) else None,
        time_limit_seconds=(float(request.time_limit_seconds)
                            if isinstance(request, pb.SolveRequest) and request.HasField("time_limit_seconds")
                            else None),
    )

