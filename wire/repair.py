"""``Repair`` and ``Compare`` on the wire (issue 26): requests and answers <-> the solver's job layer.

Both requests carry the job as a ``SolveRequest`` (``job``), read by
:func:`~rankmap.wire.parse.parse_solve_request` as a Solve is, with another default world
size (the running layout's length; each allocation's GPUs).  The client builds them with
:func:`repair_request` / :func:`compare_request` and decodes the answers with
:func:`repair_from_proto` / :func:`compare_from_proto`; the server reads them with
:func:`parse_repair_request` / :func:`parse_compare_request` and encodes with
:func:`repair_to_proto` / :func:`compare_to_proto`.  :func:`job_error` gives an error raised
while a Repair or Compare is parsed or run its request path (``job.sizes.tp``,
``failed_hosts``, ``spare_hosts.hosts``, ``running_assignment[3]``, ``allocations[1]``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Sequence

from rankmap.solver.errors import InvalidArgumentError, RankmapError
from rankmap.solver.megatron.config import ParallelConfig
from rankmap.solver.megatron.ranks import DEFAULT_ORDER
from rankmap.solver.results import HostPlacement
from rankmap.solver.types import SolveOptions
from rankmap.v1 import rankmap_pb2 as pb
from rankmap.wire.costs import cost_from_proto, cost_to_proto
from rankmap.wire.errors import invalid, proto_field

__all__ = ["RepairJob", "CompareJob", "repair_request", "parse_repair_request", "repair_to_proto",
           "repair_from_proto", "compare_request", "parse_compare_request", "compare_to_proto", "compare_from_proto",
           "job_error"]

#: Solver field -> request path of the fields Repair and Compare add to the job.
_OWN = {"failed_hosts": "failed_hosts", "failed_gpus": "failed_gpus", "spare_hosts": "spare_hosts.hosts",
        "max_moves": "max_moves", "running": "running_assignment", "allocations": "allocations",
        "running_order": "running_order"}


def job_error(exc: RankmapError, rpc: str) -> RankmapError:
    """``exc`` with its request path for a ``Repair`` / ``Compare`` (``rpc``): the fields the request adds
    keep their names, the job's go under ``job.`` (``job.sizes.tp``, ``job.traffic.bytes[dp]``)."""
    field = str(exc.field or "")
    argument = getattr(exc, "argument", None)
    if field in _OWN:
        path = _OWN[field]
    elif field.startswith("running.assignment["):
        path = "running_assignment" + field[len("running.assignment"):]
    elif field.startswith("allocations["):
        path = field
    elif argument is not None:  # already a path of the SolveRequest (the wire's own checks)
        path = "job." + field if field else "job"
    else:
        path = "job." + proto_field(field, "Solve") if field else "job"
    out = type(exc)(exc.message, path)
    out.argument = argument or field  # type: ignore[attr-defined]
    return out


def _job(graph, cfg: ParallelConfig, traffic, options: SolveOptions | None, orders) -> "pb.SolveRequest":
    from rankmap.wire.requests import solve_request_from_config

    options = options or SolveOptions()
    if orders is not None:
        options = dataclasses.replace(options, orders=orders)
    job = solve_request_from_config(graph, cfg, traffic, options, omit_groups=True)
    if orders is None:
        job.ClearField("orders")
    return job


# --------------------------------------------------------------------------- repair


@dataclass
class RepairJob:
    """The arguments of :func:`rankmap.solver.job.repair.repair` read from a ``RepairRequest``."""

    graph: Any
    cfg: ParallelConfig
    traffic: Any
    running: tuple[str, ...]
    failed_hosts: tuple[str, ...]
    failed_gpus: tuple[str, ...]
    spare_hosts: tuple[str, ...] | None
    max_moves: int | None
    options: SolveOptions
    orders: Any
    time_limit_given: bool


def repair_request(graph, cfg: ParallelConfig, traffic, running: Sequence[str], failed_hosts=(), failed_gpus=(),
                   spare_hosts=None, max_moves: int | None = None, options: SolveOptions | None = None,
                   orders=None) -> "pb.RepairRequest":
    """A ``RepairRequest`` carrying exactly the arguments of :func:`rankmap.solver.job.repair.repair`
    (``cfg.order`` is the running order; ``options.mode`` the running layout's)."""
    req = pb.RepairRequest(running_order=cfg.order, running_assignment=[str(a) for a in running],
                           failed_hosts=[str(h) for h in failed_hosts], failed_gpus=[str(g) for g in failed_gpus])
    req.job.CopyFrom(_job(graph, cfg, traffic, options, orders))
    if spare_hosts is not None:
        req.spare_hosts.hosts.extend(str(h) for h in spare_hosts)
    if max_moves is not None:
        req.max_moves = int(max_moves)
    return req


def parse_repair_request(req: "pb.RepairRequest", check=None) -> RepairJob:
    """Read a ``RepairRequest`` (``check``: a deadline check point).

    Raises
    ------
    InvalidArgumentError
        Bad job values (as a Solve's), a bad running order, a negative ``max_moves``.
    """
    from rankmap.wire.parse import parse_solve_request

    n = len(req.running_assignment)
    job = parse_solve_request(req.job, check, default_world_size=lambda graph, options: n)
    try:
        cfg = job.cfg.with_order(req.running_order or DEFAULT_ORDER)
    except InvalidArgumentError as exc:
        raise invalid(exc.message, "running_order", "order") from None
    if req.HasField("max_moves") and req.max_moves < 0:
        raise invalid(f"max_moves must be >= 0, got {req.max_moves}", "max_moves", "max_moves")
    orders = job.options.orders if req.job.HasField("orders") else None
    return RepairJob(job.graph, cfg, job.traffic, tuple(req.running_assignment), tuple(req.failed_hosts),
                     tuple(req.failed_gpus), tuple(req.spare_hosts.hosts) if req.HasField("spare_hosts") else None,
                     int(req.max_moves) if req.HasField("max_moves") else None, job.options, orders,
                     req.job.HasField("time_limit_seconds"))


def _hosts_to_proto(hosts, out) -> None:
    for h in hosts:
        out.add(host=str(h.host), node_rank=int(h.node_rank), cuda_visible_devices=[int(x) for x in
                h.cuda_visible_devices], global_ranks=[int(x) for x in h.global_ranks])


def _hosts_from_proto(msgs) -> tuple[HostPlacement, ...]:
    return tuple(HostPlacement(h.host, int(h.node_rank), tuple(int(x) for x in h.cuda_visible_devices),
                               tuple(int(x) for x in h.global_ranks)) for h in msgs)


def repair_to_proto(result) -> "pb.RepairResponse":
    """A ``RepairResponse`` of a :class:`~rankmap.solver.job.repair.RepairResult`."""
    from rankmap.wire.results import apply_to_proto
    from rankmap.wire.sizes import config_to_proto

    out = pb.RepairResponse(recommended=result.recommended, failed_hosts=list(result.failed_hosts),
                            spare_hosts=list(result.spare_hosts))
    for k, v in result.unavailable.items():
        out.unavailable[k] = v
    for o in result.options:
        m = out.options.add(kind=o.kind, order=o.order, assignment=list(o.assignment), ranks_moved=o.ranks_moved,
                            hosts_removed=list(o.hosts_removed), hosts_added=list(o.hosts_added),
                            stopped_by=o.stopped_by)
        m.cost.CopyFrom(cost_to_proto(o.cost))
        m.config.CopyFrom(config_to_proto(o.config))
        _hosts_to_proto(o.hosts, m.hosts)
        apply_to_proto(o.apply or {}, m.apply)
    return out


def repair_from_proto(msg: "pb.RepairResponse"):
    """The :class:`~rankmap.solver.job.repair.RepairResult` of a ``RepairResponse``."""
    from rankmap.solver.job.repair import RepairOption, RepairResult
    from rankmap.wire.results import apply_from_proto
    from rankmap.wire.sizes import config_from_resolved

    options = tuple(
        RepairOption(o.kind, config_from_resolved(o.config), tuple(o.assignment), cost_from_proto(o.cost),
                     int(o.ranks_moved), tuple(o.hosts_removed), tuple(o.hosts_added), _hosts_from_proto(o.hosts),
                     apply_from_proto(o.apply), o.stopped_by)
        for o in msg.options)
    return RepairResult(options, msg.recommended, dict(msg.unavailable), tuple(msg.failed_hosts),
                        tuple(msg.spare_hosts))


# --------------------------------------------------------------------------- compare


@dataclass
class CompareJob:
    """The arguments of :func:`rankmap.solver.job.compare.compare` read from a ``CompareRequest``."""

    graph: Any
    cfg: ParallelConfig
    traffic: Any
    allocations: list
    options: SolveOptions
    time_limit_given: bool


def compare_request(graph, cfg: ParallelConfig | None, traffic, allocations: Sequence[str],
                    options: SolveOptions | None = None, sizes=None) -> "pb.CompareRequest":
    """A ``CompareRequest``: the job (``cfg``, or ``sizes`` without a world size: each allocation's GPUs),
    the traffic and options as :func:`~rankmap.wire.requests.solve_request_from_config` sends them, and
    the allocations (Slurm hostlists)."""
    from rankmap.wire.requests import solve_request_from_config

    options = options or SolveOptions()
    if cfg is not None:
        job = solve_request_from_config(graph, cfg, traffic, options, omit_groups=True)
    else:
        from rankmap.solver.megatron.config import ParallelSizes

        job = _job_without_world_size(graph, (sizes or ParallelSizes()).replace(world_size=None), traffic, options)
    return pb.CompareRequest(job=job, allocations=[str(a) for a in allocations])


def _job_without_world_size(graph, sizes, traffic, options):
    from rankmap.wire.requests import _OPTION_KEYS, _traffic_split, solve_request

    wire_traffic, wire_model = _traffic_split(traffic)
    return solve_request(graph, sizes=sizes, traffic=wire_traffic, model=wire_model, omit_groups=True,
                         **{key: getattr(options, key) for key in _OPTION_KEYS})


def parse_compare_request(req: "pb.CompareRequest", check=None) -> CompareJob:
    """Read a ``CompareRequest`` (``check``: a deadline check point).

    Raises
    ------
    InvalidArgumentError
        Bad job values (as a Solve's), bad allocations (field ``allocations[i]``), allocations of
        different sizes without a world size.
    """
    from rankmap.solver.job.compare import allocation_world_size, parse_allocations
    from rankmap.wire.parse import parse_solve_request
    from rankmap.wire.sizes import sizes_from_proto

    state: dict[str, Any] = {}

    def world_size(graph, options):
        state["allocations"] = parse_allocations(list(req.allocations), graph)
        return allocation_world_size(graph, state["allocations"], sizes_from_proto(req.job.sizes),
                                     options.exclude_devices)

    job = parse_solve_request(req.job, check, default_world_size=world_size)
    allocations = state.get("allocations") or parse_allocations(list(req.allocations), job.graph)
    return CompareJob(job.graph, job.cfg, job.traffic, allocations, job.options,
                      req.job.HasField("time_limit_seconds"))


def compare_to_proto(result) -> "pb.CompareResponse":
    """A ``CompareResponse`` of a :class:`~rankmap.solver.job.compare.CompareResult` (groups omitted)."""
    from rankmap.wire.results import result_to_proto

    out = pb.CompareResponse(world_size=result.world_size)
    for a in result.allocations:
        m = out.allocations.add(rank=a.rank, index=a.index, allocation=a.allocation.text,
                                hosts=list(a.allocation.hosts))
        m.result.CopyFrom(result_to_proto(a.result, omit_groups=True))
        d = a.difference
        if d is not None:
            m.difference.CopyFrom(pb.AllocationDifference(
                seconds=d["seconds"], traffic_class=d["class"] or "", class_seconds=d["class_seconds"],
                best_class_seconds=d["best_class_seconds"], link=list(d["link"] or ()), bottleneck=d["bottleneck"],
                best_bottleneck=d["best_bottleneck"]))
    return out


def compare_from_proto(msg: "pb.CompareResponse"):
    """The :class:`~rankmap.solver.job.compare.CompareResult` of a ``CompareResponse``."""
    from rankmap.solver.job.compare import Allocation, AllocationResult, CompareResult
    from rankmap.wire.results import result_from_proto

    out = []
    for a in msg.allocations:
        d = None
        if a.HasField("difference"):
            x = a.difference
            d = {"seconds": x.seconds, "class": x.traffic_class or None, "class_seconds": x.class_seconds,
                 "best_class_seconds": x.best_class_seconds, "link": list(x.link) or None,
                 "bottleneck": x.bottleneck, "best_bottleneck": x.best_bottleneck}
        out.append(AllocationResult(int(a.rank), int(a.index), Allocation(a.allocation, tuple(a.hosts)),
                                    result_from_proto(a.result), d))
    return CompareResult(tuple(out), int(msg.world_size))
