"""Answers on the wire: ``SolveResponse``, ``EvaluateResponse``, ``GetGroupsResponse``,
``ImportClusterResponse``, BatchSolve items and health answers <-> the solver's result types.

The server encodes with :func:`result_to_proto`, :func:`evaluate_response` and
:func:`get_groups_response`; the clients decode with :func:`result_from_proto`,
:func:`evaluate_cost`, :func:`groups_and_config`, :func:`import_cluster_graph`,
:func:`batch_outcome` and :func:`health_status_name`.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from rankmap.solver.megatron.config import ParallelConfig
from rankmap.solver.launch.files import LAUNCH_KEYS as _LAUNCH_KEYS  # the apply keys ApplyInfo types
from rankmap.solver.results import CostBreakdown, HostPlacement, Layout, SolveResult
from rankmap.v1 import rankmap_pb2 as pb
from rankmap.wire.measured import measured_links_from_proto, measured_links_to_proto
from rankmap.wire.costs import (
    _class_order,
    _layout_from_proto,
    _layout_to_proto,
    cost_from_proto,
    cost_to_proto,
    groups_from_proto,
    groups_to_proto,
)
from rankmap.wire.errors import error_from_batch, error_to_proto
from rankmap.wire.graph import graph_from_proto
from rankmap.wire.options import MODE_FROM_PROTO, MODE_TO_PROTO, nccl_from_proto, nccl_to_proto
from rankmap.wire.sizes import config_from_resolved, config_to_proto
from rankmap.wire.traffic import model_from_proto, model_to_proto, value_from_proto, value_to_proto

__all__ = [
    "STATUS_TO_PROTO",
    "STATUS_FROM_PROTO",
    "result_to_proto",
    "result_from_proto",
    "apply_to_proto",
    "apply_from_proto",
    "evaluate_response",
    "evaluate_cost",
    "get_groups_response",
    "groups_and_config",
    "import_cluster_graph",
    "batch_outcome",
    "batch_result",
    "batch_error",
    "health_status_name",
]

STATUS_TO_PROTO = {"OPTIMAL": pb.STATUS_OPTIMAL, "FEASIBLE": pb.STATUS_FEASIBLE}
STATUS_FROM_PROTO = {v: k for k, v in STATUS_TO_PROTO.items()}


def result_to_proto(result: SolveResult, omit_groups: bool = False) -> "pb.SolveResponse":
    """A ``SolveResponse`` carrying every field of a :class:`SolveResult`."""
    out = pb.SolveResponse(
        config=config_to_proto(result.config),
        mode=MODE_TO_PROTO.get(result.mode, pb.MODE_UNSPECIFIED),
        order=result.layout.order,
        assignment=[str(a) for a in result.layout.assignment],
        cost=cost_to_proto(result.layout.cost),
        baseline=_layout_to_proto(result.baseline),
        improvement=float(result.improvement),
        status=STATUS_TO_PROTO.get(str(result.status).upper(), pb.STATUS_UNSPECIFIED),
        bound_seconds=float(result.bound_seconds),
        solve_seconds=float(result.solve_seconds),
        orders_searched=list(result.orders_searched),
        stopped_by=str(getattr(result, "stopped_by", "") or ""),
    )
    for h in result.hosts:
        out.hosts.add(
            host=str(h.host),
            node_rank=int(h.node_rank),
            cuda_visible_devices=[int(x) for x in h.cuda_visible_devices],
            global_ranks=[int(x) for x in h.global_ranks],
        )
    for k, v in result.traffic.items():
        out.traffic_bytes[k] = float(v)
    model = getattr(result.traffic, "model", None)
    if model is not None:
        out.traffic_model.CopyFrom(model_to_proto(model))
        for k, v in (getattr(result.traffic, "explicit", None) or {}).items():
            out.traffic_explicit[k] = float(v)
    if getattr(result, "nccl", None) is not None:
        nccl_to_proto(out.nccl, result.nccl)
    apply_to_proto(result.apply or {}, out.apply)
    measured_links_to_proto(out.measured_links, getattr(result, "measured_links", ()))
    out.warnings.extend(str(w) for w in getattr(result, "warnings", ()))
    if not omit_groups:
        groups_to_proto(result.groups, out.groups)
    return out


def result_from_proto(msg: "pb.SolveResponse") -> SolveResult:
    """The :class:`SolveResult` of a ``SolveResponse``."""
    from rankmap.solver.traffic import Traffic

    cfg = config_from_resolved(msg.config)
    traffic = dict(msg.traffic_bytes)
    model = model_from_proto(msg.traffic_model) if msg.HasField("traffic_model") else None
    explicit = {k: float(msg.traffic_explicit[k]) for k in _class_order(msg.traffic_explicit)}
    return SolveResult(
        config=cfg,
        layout=Layout(order=msg.order, assignment=tuple(msg.assignment), cost=cost_from_proto(msg.cost)),
        baseline=_layout_from_proto(msg.baseline),
        hosts=tuple(
            HostPlacement(
                host=h.host,
                node_rank=int(h.node_rank),
                cuda_visible_devices=tuple(int(x) for x in h.cuda_visible_devices),
                global_ranks=tuple(int(x) for x in h.global_ranks),
            )
            for h in msg.hosts
        ),
        status=STATUS_FROM_PROTO.get(msg.status, "FEASIBLE"),
        bound_seconds=float(msg.bound_seconds),
        solve_seconds=float(msg.solve_seconds),
        groups=groups_from_proto(msg.groups),
        traffic=Traffic({k: float(traffic[k]) for k in _class_order(traffic)}, model=model, explicit=explicit),
        apply=apply_from_proto(msg.apply),
        mode=MODE_FROM_PROTO.get(msg.mode, "launcher"),
        orders_searched=tuple(msg.orders_searched),
        stopped_by=str(msg.stopped_by),
        nccl=nccl_from_proto(msg.nccl) if msg.HasField("nccl") else None,
        measured_links=measured_links_from_proto(msg.measured_links),
        warnings=tuple(msg.warnings),
    )




def apply_to_proto(apply: Mapping[str, Any], out: "pb.ApplyInfo") -> None:
    """Fill an ``ApplyInfo``: the Megatron entries as key/values, the launch files as typed messages."""
    for k, v in apply.items():
        if k not in _LAUNCH_KEYS:
            out.entries.add(key=str(k), value=value_to_proto(v))
    out.rendezvous = str(apply.get("rendezvous", ""))
    s = apply.get("slurm") or {}
    out.slurm.hostfile.extend(s.get("hostfile", ()))
    out.slurm.command = s.get("command", "")
    for t in apply.get("torchrun") or ():
        out.torchrun.add(host=t["host"], node_rank=int(t["node_rank"]), command=t["command"])
    m = apply.get("mpirun") or {}
    out.mpirun.rankfile.extend(m.get("rankfile", ()))
    out.mpirun.command = m.get("command", "")
    k8s = apply.get("kubernetes") or {}
    out.kubernetes.pod_nodes.extend(k8s.get("pod_nodes", ()))
    out.kubernetes.cuda_visible_devices.extend(k8s.get("cuda_visible_devices", ()))
    out.kubernetes.command = k8s.get("command", "")
    for k, v in (apply.get("unavailable") or {}).items():
        out.unavailable[k] = v
    out.gpus_file.extend(apply.get("gpus_file", ()))


def apply_from_proto(msg: "pb.ApplyInfo") -> dict[str, Any]:
    """The ``apply`` dict of an ``ApplyInfo``, with the keys and shapes an in-process solve gives."""
    out: dict[str, Any] = {e.key: value_from_proto(e.value) for e in msg.entries}
    if not (msg.rendezvous or msg.slurm.command or msg.torchrun or msg.unavailable):
        return out  # a server without launch files
    out["rendezvous"] = msg.rendezvous
    out["slurm"] = {"hostfile": list(msg.slurm.hostfile), "command": msg.slurm.command}
    out["torchrun"] = [{"host": t.host, "node_rank": int(t.node_rank), "command": t.command} for t in msg.torchrun]
    out["mpirun"] = {"rankfile": list(msg.mpirun.rankfile), "command": msg.mpirun.command}
    out["kubernetes"] = {"pod_nodes": list(msg.kubernetes.pod_nodes),
                         "cuda_visible_devices": list(msg.kubernetes.cuda_visible_devices),
                         "command": msg.kubernetes.command}
    out["unavailable"] = {k: msg.unavailable[k] for k in ("torchrun", "kubernetes") if k in msg.unavailable}
    out["unavailable"].update({k: v for k, v in sorted(msg.unavailable.items()) if k not in out["unavailable"]})
    if msg.gpus_file:
        out["gpus_file"] = list(msg.gpus_file)
    return out


def evaluate_response(cost: CostBreakdown, traffic: Mapping[str, float], measured_links=(),
                      warnings=()) -> "pb.EvaluateResponse":
    """An ``EvaluateResponse``: the cost and the payloads it was computed for (and the measured links
    the layout crosses, the request's warnings)."""
    out = pb.EvaluateResponse(cost=cost_to_proto(cost), warnings=[str(w) for w in warnings])
    for k, v in traffic.items():
        out.traffic_bytes[k] = float(v)
    measured_links_to_proto(out.measured_links, measured_links)
    return out


def get_groups_response(cfg: ParallelConfig, groups: Mapping[str, np.ndarray], check=None) -> "pb.GetGroupsResponse":
    """A ``GetGroupsResponse`` (``check``: a deadline check point, called while encoding)."""
    out = pb.GetGroupsResponse(config=config_to_proto(cfg))
    groups_to_proto(groups, out.groups, check)
    return out


def evaluate_cost(msg: "pb.EvaluateResponse") -> CostBreakdown:
    """The :class:`CostBreakdown` of an ``EvaluateResponse``."""
    return cost_from_proto(msg.cost)


def groups_and_config(msg: "pb.GetGroupsResponse") -> tuple[ParallelConfig, dict[str, np.ndarray]]:
    """``(validated ParallelConfig, {group name: int64 array (groups, group size)})`` of a
    ``GetGroupsResponse``."""
    return config_from_resolved(msg.config), groups_from_proto(msg.groups)


def import_cluster_graph(resp):
    """The ``nx.Graph`` of an ``ImportClusterResponse``; ``graph`` attributes ``name``, ``gpu``,
    ``warnings`` (list) and, when built, ``nvlink_domains`` / ``nvlink_domain_rate_gbps``."""
    G = graph_from_proto(resp.cluster)
    G.graph["name"] = resp.name
    G.graph["gpu"] = resp.gpu
    G.graph["warnings"] = list(resp.warnings)
    if resp.nvlink_domains:
        G.graph["nvlink_domains"] = int(resp.nvlink_domains)
        G.graph["nvlink_domain_rate_gbps"] = float(resp.nvlink_domain_rate_gbps)
    return G


def batch_outcome(msg: "pb.BatchSolveResponse") -> SolveResult | Exception:
    """One BatchSolve answer: its :class:`SolveResult`, or the exception of its error
    (see :func:`rankmap.wire.errors.error_from_batch`); its position is ``msg.index``."""
    if msg.WhichOneof("outcome") == "result":
        return result_from_proto(msg.result)
    return error_from_batch(msg.error)


def batch_result(index: int, msg: "pb.SolveResponse") -> "pb.BatchSolveResponse":
    """The BatchSolve answer of item ``index`` (its position in the request) that was solved."""
    return pb.BatchSolveResponse(index=index, result=msg)


def batch_error(index: int, exc: BaseException, code: int) -> "pb.BatchSolveResponse":
    """The BatchSolve answer of item ``index`` that failed with ``exc`` (``code``: its
    ``grpc.StatusCode`` value; see :func:`rankmap.wire.errors.error_to_proto`)."""
    return pb.BatchSolveResponse(index=index, error=error_to_proto(exc, code, "BatchSolve"))


def health_status_name(msg) -> str:
    """The status name (``SERVING``, ``NOT_SERVING`` ...) of a ``grpc.health.v1.HealthCheckResponse``."""
    from grpc_health.v1 import health_pb2

    return health_pb2.HealthCheckResponse.ServingStatus.Name(msg.status)
