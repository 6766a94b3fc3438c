"""Protobuf <-> plain domain types: the only module that touches ``rankmap.v1`` messages.

Both sides of the wire use it, so they agree by construction:

* the client builds requests with :func:`solve_request`, :func:`evaluate_request`
  and :func:`get_groups_request` from an ``nx.Graph`` and plain Python values,
  and decodes answers with :func:`result_from_proto`, :func:`cost_from_proto`
  and :func:`groups_from_proto`;
* the server reads requests with :func:`parse_solve_request`,
  :func:`parse_evaluate_request` and :func:`parse_get_groups_request` into the
  arguments of :func:`rankmap.solver.solve` / ``evaluate`` /
  ``megatron_groups``, and encodes answers with :func:`result_to_proto`,
  :func:`cost_to_proto` and :func:`groups_to_proto`.

Errors
------
Invalid input raises :class:`~rankmap.solver.errors.InvalidArgumentError`.  Two
spellings of "which field" exist: the *proto path* of the request field
(``sizes.tp``, ``cluster.links[3].bandwidth_gbps``, ``traffic.bytes[tp]``,
``exposure[dp]``), which goes into the ``google.rpc.BadRequest`` field
violation, and the *argument*, the command-line / Python spelling the solver
uses (``tp``, ``cluster.edges``, ``traffic.tp``, ``exposure.dp``).
:func:`error_fields` gives both for any error raised while a request is
parsed or solved; the client raises errors whose ``field`` is the
argument (as an in-process call would) and whose ``proto_field`` is the path.
The message is always the solver's, i.e. the line the CLI prints.

Node ids travel as strings (the solver reports assignments as strings too).
"""

from __future__ import annotations

import dataclasses
import math
import numbers
import re
from dataclasses import dataclass
from typing import Any, Hashable, Iterable, Mapping, Sequence

import networkx as nx
import numpy as np

from rankmap.solver.catalogue import GROUP_NAMES, ParallelConfig, parallel_config
from rankmap.solver.errors import InfeasibleError, InvalidArgumentError, RankmapError
from rankmap.solver.ranks import DEFAULT_ORDER
from rankmap.solver.types import (
    MODES,
    Bottleneck,
    ClassCost,
    Constraint,
    CostBreakdown,
    HostPlacement,
    Layout,
    SolveOptions,
    SolveResult,
    check_exposure,
    parse_constraint,
)
from rankmap.v1 import rankmap_pb2 as pb

__all__ = [
    "pb",
    "SolveJob",
    "EvaluateJob",
    "MODE_TO_PROTO",
    "MODE_FROM_PROTO",
    "STATUS_TO_PROTO",
    "STATUS_FROM_PROTO",
    "graph_to_proto",
    "graph_from_proto",
    "count_gpus",
    "sizes_to_proto",
    "config_from_proto",
    "config_to_proto",
    "config_from_resolved",
    "traffic_to_proto",
    "traffic_from_proto",
    "exposure_to_proto",
    "exposure_from_proto",
    "options_to_proto",
    "options_from_proto",
    "value_to_proto",
    "value_from_proto",
    "solve_request",
    "solve_request_from_config",
    "evaluate_request",
    "get_groups_request",
    "parse_solve_request",
    "parse_evaluate_request",
    "parse_get_groups_request",
    "cost_to_proto",
    "cost_from_proto",
    "groups_to_proto",
    "groups_from_proto",
    "result_to_proto",
    "result_from_proto",
    "error_fields",
    "error_to_proto",
    "error_from_proto",
    "error_status",
    "error_from_status",
    "proto_field",
    "invalid",
]

MODE_TO_PROTO = {"launcher": pb.MODE_LAUNCHER, "free": pb.MODE_FREE, "fixed": pb.MODE_FIXED}
MODE_FROM_PROTO = {v: k for k, v in MODE_TO_PROTO.items()}
MODE_FROM_PROTO[pb.MODE_UNSPECIFIED] = "launcher"
POLICY_TO_PROTO = {
    "default": pb.ORDER_POLICY_DEFAULT,
    "megatron-cli": pb.ORDER_POLICY_MEGATRON_CLI,
    "all": pb.ORDER_POLICY_ALL,
}
POLICY_FROM_PROTO = {v: k for k, v in POLICY_TO_PROTO.items()}
STATUS_TO_PROTO = {"OPTIMAL": pb.STATUS_OPTIMAL, "FEASIBLE": pb.STATUS_FEASIBLE}
STATUS_FROM_PROTO = {v: k for k, v in STATUS_TO_PROTO.items()}
BOTTLENECK_TO_PROTO = {
    "none": pb.BOTTLENECK_KIND_NONE,
    "link": pb.BOTTLENECK_KIND_LINK,
    "per-flow": pb.BOTTLENECK_KIND_PER_FLOW,
}
BOTTLENECK_FROM_PROTO = {v: k for k, v in BOTTLENECK_TO_PROTO.items()}
BOTTLENECK_FROM_PROTO[pb.BOTTLENECK_KIND_UNSPECIFIED] = "none"

#: Size fields of ``ParallelSizes`` (the solver spells them the same).
SIZE_FIELDS = (
    "world_size",
    "tp",
    "cp",
    "ep",
    "etp",
    "pp",
    "num_distributed_optimizer_instances",
    "hierarchical_context_parallel_sizes",
)

#: Traffic classes in report order (DESIGN §3); the traffic module's when present.
try:  # pragma: no cover - depends on which solver modules exist
    from rankmap.solver.traffic import TRAFFIC_CLASSES as _TRAFFIC_CLASSES
except ImportError:  # pragma: no cover
    _TRAFFIC_CLASSES = ("tp", "cp", "ep", "etp", "dp", "edp", "pp", "embedding")


# --------------------------------------------------------------------------- errors


def invalid(message: str, path: str, argument: str | None = None) -> InvalidArgumentError:
    """An :class:`InvalidArgumentError` about proto field ``path``.

    ``argument`` is the CLI / Python spelling of the field (default: ``path``).
    """
    err = InvalidArgumentError(message, path)
    err.argument = argument if argument is not None else path  # type: ignore[attr-defined]
    return err


_SIMPLE = {
    "mode": "mode",
    "orders": "orders",
    "constraints": "constraints",
    "exclude_devices": "exclude_devices",
    "exclude_hosts": "exclude_hosts",
    "time_limit_seconds": "time_limit_seconds",
    "time_limit": "time_limit_seconds",
    "seed": "seed",
    "assignment": "assignment",
    "traffic": "traffic",
    "model": "traffic.model.preset",
    "model_file": "traffic.model",
    "cluster": "cluster",
    "cluster.edges": "cluster.links",
    "cluster.nodes": "cluster.devices",
    "rank": "assignment",
    "rank_offset": "sizes",
}


def proto_field(field: str, rpc: str = "Solve") -> str:
    """Map a solver field (``tp``, ``order``, ``traffic.tp``, ``model.seq_length``)
    to the path of the request field it came from, for request type ``rpc``.

    Unknown fields are returned unchanged.
    """
    if not field:
        return ""
    if field in SIZE_FIELDS:
        return f"sizes.{field}"
    if field == "order":
        return "orders.orders" if rpc in ("Solve", "BatchSolve") else "order"
    if field in _SIMPLE:
        return _SIMPLE[field]
    if field.startswith("traffic.") and not field.startswith("traffic.bytes") and not field.startswith("traffic.model"):
        return f"traffic.bytes[{field[len('traffic.'):]}]"
    if field.startswith("model."):
        return f"traffic.model.overrides[{field[len('model.'):]}]"
    if field.startswith("exposure."):
        return f"exposure[{field[len('exposure.'):]}]"
    if field.startswith("cluster.edges"):
        return "cluster.links" + field[len("cluster.edges"):]
    return field


def error_fields(exc: RankmapError, rpc: str = "Solve") -> tuple[str, str]:
    """``(proto path, argument)`` of an error raised while parsing or solving a request."""
    argument = getattr(exc, "argument", None)
    if argument is not None:
        return exc.field, argument
    return proto_field(exc.field, rpc), exc.field


def error_to_proto(exc: BaseException, code: int, rpc: str = "Solve") -> "pb.Error":
    """A ``rankmap.v1.Error`` (BatchSolve) for an exception and a ``grpc.StatusCode`` value."""
    if isinstance(exc, RankmapError):
        path, argument = error_fields(exc, rpc)
        return pb.Error(code=code, message=exc.message, field=path, argument=argument)
    return pb.Error(code=code, message=" ".join(str(exc).split()) or type(exc).__name__)


def error_from_proto(err: "pb.Error") -> tuple[int, str, str, str]:
    """``(code, message, argument, proto path)`` of a ``rankmap.v1.Error``."""
    return int(err.code), err.message, err.argument or err.field, err.field


#: ``google.rpc.ErrorInfo.domain`` of rankmap's errors.
ERROR_DOMAIN = "rankmap.v1"


def error_status(code: int, exc: RankmapError, rpc: str = "Solve"):
    """A ``google.rpc.Status`` for an invalid or infeasible request.

    INVALID_ARGUMENT carries a ``BadRequest`` field violation (field = proto
    path, description = the CLI's message); FAILED_PRECONDITION a
    ``PreconditionFailure`` (subject = proto path); both an ``ErrorInfo`` whose
    metadata ``argument`` is the CLI / Python spelling of the field.
    """
    from google.protobuf import any_pb2
    from google.rpc import error_details_pb2, status_pb2

    path, argument = error_fields(exc, rpc)
    infeasible = isinstance(exc, InfeasibleError)
    info = error_details_pb2.ErrorInfo(
        reason="INFEASIBLE" if infeasible else "INVALID_ARGUMENT",
        domain=ERROR_DOMAIN,
        metadata={"argument": argument, "field": path},
    )
    if infeasible:
        detail = error_details_pb2.PreconditionFailure(
            violations=[
                error_details_pb2.PreconditionFailure.Violation(type="INFEASIBLE", subject=path, description=exc.message)
            ]
        )
    else:
        detail = error_details_pb2.BadRequest(
            field_violations=[error_details_pb2.BadRequest.FieldViolation(field=path, description=exc.message)]
        )
    details = []
    for m in (detail, info):
        a = any_pb2.Any()
        a.Pack(m)
        details.append(a)
    return status_pb2.Status(code=int(code), message=exc.message, details=details)


def error_from_status(status, default_message: str = "") -> tuple[str, str, str]:
    """``(message, argument, proto path)`` from a ``google.rpc.Status`` built by :func:`error_status`."""
    from google.rpc import error_details_pb2

    message = (status.message if status is not None else "") or default_message
    path = argument = ""
    for d in status.details if status is not None else ():
        if d.Is(error_details_pb2.BadRequest.DESCRIPTOR):
            br = error_details_pb2.BadRequest()
            d.Unpack(br)
            if br.field_violations:
                path = br.field_violations[0].field
                message = br.field_violations[0].description or message
        elif d.Is(error_details_pb2.PreconditionFailure.DESCRIPTOR):
            pf = error_details_pb2.PreconditionFailure()
            d.Unpack(pf)
            if pf.violations:
                path = pf.violations[0].subject
                message = pf.violations[0].description or message
        elif d.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            info = error_details_pb2.ErrorInfo()
            d.Unpack(info)
            argument = info.metadata.get("argument", "")
            path = path or info.metadata.get("field", "")
    return message, argument or path, path


# --------------------------------------------------------------------------- generic values


def value_to_proto(value: Any) -> "pb.Value":
    """A JSON-like Python value as ``rankmap.v1.Value`` (ints stay ints)."""
    out = pb.Value()
    if value is None:
        out.null_value = True
    elif isinstance(value, (bool, np.bool_)):
        out.bool_value = bool(value)
    elif isinstance(value, numbers.Integral):
        iv = int(value)
        if -(2**63) <= iv < 2**63:
            out.int_value = iv
        else:
            out.double_value = float(iv)
    elif isinstance(value, numbers.Real):
        out.double_value = float(value)
    elif isinstance(value, str):
        out.string_value = value
    elif isinstance(value, Mapping):
        for k, v in value.items():
            out.map_value.entries.add(key=str(k), value=value_to_proto(v))
    elif isinstance(value, (list, tuple, np.ndarray)):
        items = value.tolist() if isinstance(value, np.ndarray) else value
        out.list_value.values.extend(value_to_proto(v) for v in items)
    else:
        out.string_value = str(value)
    return out


def value_from_proto(value: "pb.Value", tuples: bool = False) -> Any:
    """The Python value of a ``rankmap.v1.Value`` (lists, or tuples if ``tuples``)."""
    kind = value.WhichOneof("kind")
    if kind is None or kind == "null_value":
        return None
    if kind == "list_value":
        items = [value_from_proto(v, tuples) for v in value.list_value.values]
        return tuple(items) if tuples else items
    if kind == "map_value":
        return {e.key: value_from_proto(e.value, tuples) for e in value.map_value.entries}
    return getattr(value, kind)


# --------------------------------------------------------------------------- cluster graph


def _is_gpu(data: Mapping) -> bool:
    kind = data.get("kind", "gpu")
    return kind is None or kind == "gpu"


def graph_to_proto(graph: nx.Graph) -> "pb.Cluster":
    """An ``nx.Graph`` of DESIGN §2 as a ``rankmap.v1.Cluster``.

    GPUs (``kind`` "gpu" or absent) become devices, other nodes nodes, edges
    links, all in graph order; node ids become strings.  Attributes outside the
    schema are dropped.

    Raises
    ------
    InvalidArgumentError
        For values the wire cannot carry: two node ids with the same string,
        a non-numeric bandwidth or latency, a non-integer ``local_index`` (the
        messages are the solver's).
    """
    if not isinstance(graph, nx.Graph):
        raise InvalidArgumentError(f"cluster must be a networkx graph, got {type(graph).__name__}", "cluster")
    out = pb.Cluster()
    seen: dict[str, Hashable] = {}
    for n, data in graph.nodes(data=True):
        key = str(n)
        if key in seen:
            raise InvalidArgumentError(
                f"nodes {seen[key]!r} and {n!r} have the same id {key!r} as text", "cluster.nodes"
            )
        seen[key] = n
        if _is_gpu(data):
            dev = out.devices.add(id=key)
            host = data.get("host")
            if host is not None and host != "":
                dev.host = str(host)
            li = data.get("local_index")
            if li is not None:
                dev.local_index = _local_index(n, li)
        else:
            out.nodes.add(id=key, kind=str(data["kind"]))
    for u, v, data in graph.edges(data=True):
        link = out.links.add(source=str(u), target=str(v))
        if "bandwidth" in data:
            link.bandwidth_gbps = _wire_number(u, v, data, "bandwidth")
        if data.get("latency_us") is not None:
            link.latency_us = _wire_number(u, v, data, "latency_us")
    return out


def _local_index(n, li) -> int:
    ok = not isinstance(li, bool) and (
        isinstance(li, (int, np.integer))
        or (isinstance(li, float) and li.is_integer())
        or (isinstance(li, str) and li.strip().lstrip("-").isdigit())
    )
    if not ok or not (-(2**31) <= int(li) < 2**31):
        raise InvalidArgumentError(f"GPU {n!r} has local_index {li!r}; it must be a non-negative integer", "cluster.nodes")
    return int(li)


def _wire_number(u, v, data, attr: str) -> float:
    value = data[attr]
    try:
        if isinstance(value, bool):
            raise TypeError
        return float(value)
    except (TypeError, ValueError):
        if attr == "bandwidth":
            _check_bandwidth(u, v, data)  # raises the solver's message
        raise InvalidArgumentError(
            f"edge ({u!r}, {v!r}) has {attr} {value!r}, which is not a number", "cluster.edges"
        ) from None


def _check_bandwidth(u, v, data) -> float:
    """The solver's own bandwidth check (same message as the CLI)."""
    try:
        from rankmap.solver.cluster import _edge_bandwidth
    except ImportError:  # pragma: no cover - solver module not present
        _edge_bandwidth = None
    if _edge_bandwidth is not None:
        return _edge_bandwidth(u, v, data)
    b = data.get("bandwidth")
    if b is None:
        raise InvalidArgumentError(f"edge ({u!r}, {v!r}) has no 'bandwidth' attribute (GB/s)", "cluster.edges")
    if not math.isfinite(b) or b <= 0:
        raise InvalidArgumentError(
            f"edge ({u!r}, {v!r}) has bandwidth {b!r}; it must be finite and > 0 (GB/s)", "cluster.edges"
        )
    return float(b)


def _where(cluster: "pb.Cluster", node_id: str) -> str:
    for i, d in enumerate(cluster.devices):
        if d.id == node_id:
            return f"cluster.devices[{i}]"
    for i, n in enumerate(cluster.nodes):
        if n.id == node_id:
            return f"cluster.nodes[{i}]"
    return "?"


def graph_from_proto(cluster: "pb.Cluster") -> nx.Graph:
    """The ``nx.Graph`` of a ``rankmap.v1.Cluster`` (devices first, then nodes, then links).

    Raises
    ------
    InvalidArgumentError
        With the proto path as field, for an empty or repeated id, a node of
        kind "gpu" or without kind, a link to an unknown node, a missing,
        non-finite or non-positive bandwidth, a negative or non-finite latency.
    """
    nodes: dict[str, dict[str, Any]] = {}
    for i, d in enumerate(cluster.devices):
        did = d.id
        if not did or did in nodes:
            path = f"cluster.devices[{i}]"
            if not did:
                raise invalid(f"device {i} has an empty id", f"{path}.id", "cluster.nodes")
            raise invalid(f"node id {did!r} is given twice ({_where(cluster, did)} and {path})", f"{path}.id",
                          "cluster.nodes")
        attrs: dict[str, Any] = {"kind": "gpu"}
        if d.HasField("host") and d.host:
            attrs["host"] = d.host
        if d.HasField("local_index"):
            attrs["local_index"] = int(d.local_index)
        nodes[did] = attrs
    for i, n in enumerate(cluster.nodes):
        nid, kind = n.id, n.kind
        if not nid or nid in nodes or not kind or kind == "gpu":
            path = f"cluster.nodes[{i}]"
            if not nid:
                raise invalid(f"node {i} has an empty id", f"{path}.id", "cluster.nodes")
            if nid in nodes:
                raise invalid(f"node id {nid!r} is given twice ({_where(cluster, nid)} and {path})", f"{path}.id",
                              "cluster.nodes")
            raise invalid(
                f"node {nid!r} has kind {kind!r}; GPUs belong in cluster.devices, other nodes need a kind "
                f"such as 'nvswitch' or 'nic'",
                f"{path}.kind",
                "cluster.nodes",
            )
        nodes[nid] = {"kind": kind}
    edges: dict[tuple[str, str], dict[str, Any]] = {}
    isfinite = math.isfinite
    for i, link in enumerate(cluster.links):
        u, v = link.source, link.target
        if u not in nodes or v not in nodes:
            end, node = ("source", u) if u not in nodes else ("target", v)
            raise invalid(
                f"link {i} ({u!r}, {v!r}) names unknown node {node!r}", f"cluster.links[{i}].{end}", "cluster.edges"
            )
        has_bw = link.HasField("bandwidth_gbps")
        bw = link.bandwidth_gbps
        if not has_bw or not (isfinite(bw) and bw > 0):
            try:
                _check_bandwidth(u, v, {"bandwidth": bw} if has_bw else {})
            except InvalidArgumentError as exc:
                raise invalid(exc.message, f"cluster.links[{i}].bandwidth_gbps", "cluster.edges") from None
        data: dict[str, Any] = {"bandwidth": bw}
        if link.HasField("latency_us"):
            lat = link.latency_us
            if not isfinite(lat) or lat < 0:
                raise invalid(
                    f"edge ({u!r}, {v!r}) has latency_us {lat!r}; it must be finite and >= 0",
                    f"cluster.links[{i}].latency_us",
                    "cluster.edges",
                )
            data["latency_us"] = lat
        key = (u, v) if u <= v else (v, u)
        old = edges.get(key)
        if old is not None:
            # parallel physical links between two nodes are one link of the summed capacity (DESIGN §2)
            data["bandwidth"] = old["bandwidth"] + bw
            data["latency_us"] = max(old.get("latency_us", 0.0), data.get("latency_us", 0.0))
        edges[key] = data
    g = nx.Graph()
    g.add_nodes_from(nodes.items())
    g.add_edges_from((u, v, d) for (u, v), d in edges.items())
    return g


def count_gpus(graph: nx.Graph, exclude_devices: Iterable[str] = (), exclude_hosts: Iterable[str] = ()) -> int:
    """GPUs of ``graph`` that are not excluded (the default world size)."""
    devs = {str(d) for d in exclude_devices}
    hosts = {str(h) for h in exclude_hosts}
    n = 0
    for node, data in graph.nodes(data=True):
        if not _is_gpu(data):
            continue
        host = data.get("host")
        host = str(node) if host is None or host == "" else str(host)
        if str(node) in devs or host in hosts:
            continue
        n += 1
    return n


# --------------------------------------------------------------------------- sizes


def _check_size(value, name: str) -> int:
    """The client-side type check of a size (same message as ``parallel_config``)."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        if isinstance(value, float) and value.is_integer():
            return int(value)
        raise InvalidArgumentError(f"{name} must be a positive integer, got {value!r}", name)
    return int(value)


def sizes_to_proto(
    world_size: int | None = None,
    tp: int | None = None,
    cp: int | None = None,
    ep: int | None = None,
    etp: int | None = None,
    pp: int | None = None,
    num_distributed_optimizer_instances: int | None = None,
    hierarchical_context_parallel_sizes: Sequence[int] | None = None,
) -> "pb.ParallelSizes":
    """``ParallelSizes`` with the given (non-None) sizes set."""
    out = pb.ParallelSizes()
    values = dict(
        world_size=world_size,
        tp=tp,
        cp=cp,
        ep=ep,
        etp=etp,
        pp=pp,
        num_distributed_optimizer_instances=num_distributed_optimizer_instances,
    )
    for name, value in values.items():
        if value is not None:
            setattr(out, name, _check_size(value, name))
    if hierarchical_context_parallel_sizes:
        out.hierarchical_context_parallel_sizes.extend(
            _check_size(v, "hierarchical_context_parallel_sizes") for v in hierarchical_context_parallel_sizes
        )
    return out


def config_from_proto(
    sizes: "pb.ParallelSizes", order: str = DEFAULT_ORDER, default_world_size: int | None = None, rpc: str = "Solve"
) -> ParallelConfig:
    """Validate ``ParallelSizes`` (+ order) with :func:`~rankmap.solver.parallel_config`.

    Errors keep the solver's field (``tp``); :func:`error_fields` maps it to
    the proto path.
    """
    if sizes.HasField("world_size"):
        ws = sizes.world_size
    elif default_world_size is not None:
        ws = default_world_size
    else:
        raise invalid("world_size is required", "sizes.world_size", "world_size")

    def get(name, default):
        return getattr(sizes, name) if sizes.HasField(name) else default

    return parallel_config(
        int(ws),
        tp=get("tp", 1),
        cp=get("cp", 1),
        ep=get("ep", 1),
        etp=get("etp", None),
        pp=get("pp", 1),
        order=order or DEFAULT_ORDER,
        num_distributed_optimizer_instances=get("num_distributed_optimizer_instances", 1),
        hierarchical_context_parallel_sizes=list(sizes.hierarchical_context_parallel_sizes) or None,
    )


def config_to_proto(cfg: ParallelConfig) -> "pb.ParallelConfig":
    """A validated configuration, as reported back."""
    return pb.ParallelConfig(
        world_size=cfg.world_size,
        tp=cfg.tp,
        cp=cfg.cp,
        ep=cfg.ep,
        etp=cfg.etp,
        dp=cfg.dp,
        edp=cfg.edp,
        pp=cfg.pp,
        order=cfg.order,
        num_distributed_optimizer_instances=cfg.num_distributed_optimizer_instances,
        hierarchical_context_parallel_sizes=list(cfg.hierarchical_context_parallel_sizes),
        rank_offset=cfg.rank_offset,
    )


def config_from_resolved(msg: "pb.ParallelConfig") -> ParallelConfig:
    """The :class:`ParallelConfig` of a reported ``rankmap.v1.ParallelConfig``."""
    return parallel_config(
        int(msg.world_size),
        tp=int(msg.tp),
        cp=int(msg.cp),
        ep=int(msg.ep),
        etp=int(msg.etp),
        pp=int(msg.pp),
        order=msg.order or DEFAULT_ORDER,
        num_distributed_optimizer_instances=int(msg.num_distributed_optimizer_instances) or 1,
        hierarchical_context_parallel_sizes=list(msg.hierarchical_context_parallel_sizes) or None,
        rank_offset=int(msg.rank_offset),
    )


# --------------------------------------------------------------------------- traffic


def _model_to_proto(model) -> "pb.ModelSpec":
    out = pb.ModelSpec()
    if model is None:
        return out
    if isinstance(model, str):
        out.preset = model
        return out
    if dataclasses.is_dataclass(model) and not isinstance(model, type):
        # a full ModelSpec: every field, None included (see traffic_from_proto)
        for f in dataclasses.fields(model):
            out.overrides[f.name].CopyFrom(value_to_proto(getattr(model, f.name)))
        return out
    if isinstance(model, Mapping):
        d = dict(model)
        if len(d) == 1 and isinstance(d.get("model"), Mapping):
            d = dict(d["model"])
        preset = d.pop("preset", None)
        if preset is not None:
            if not isinstance(preset, str):
                raise InvalidArgumentError(f"model preset name must be a string, got {preset!r}", "model")
            out.preset = preset
        for k, v in d.items():
            out.overrides[str(k).strip().replace("-", "_")].CopyFrom(value_to_proto(v))
        return out
    raise InvalidArgumentError(
        f"model must be a preset name, a mapping of model fields or a ModelSpec, got {type(model).__name__}", "model"
    )


def traffic_to_proto(traffic=None, model=None) -> "pb.Traffic":
    """``Traffic`` from explicit payloads and/or a model.

    Parameters
    ----------
    traffic : mapping class -> bytes, or str ``"tp=4e9,dp=1GB"``, or None
        Validated here with the solver's parser (same messages as the CLI).
    model : str preset name, mapping (``preset`` plus ModelSpec fields),
        ``ModelSpec``, or None.
    """
    from rankmap.solver.traffic import parse_traffic, traffic_from_mapping

    out = pb.Traffic()
    if traffic is not None:
        explicit = parse_traffic(traffic) if isinstance(traffic, str) else traffic_from_mapping(traffic)
        for cls, b in explicit.items():
            out.bytes[cls] = float(b)
        if not explicit and model is None:
            # an empty mapping still means "explicit, no traffic" (not "default model")
            out.bytes["tp"] = 0.0
    if model is not None:
        out.model.CopyFrom(_model_to_proto(model))
    return out


def _model_from_proto(msg: "pb.ModelSpec"):
    from rankmap.solver.traffic import model_preset, with_overrides

    overrides = {k: value_from_proto(v, tuples=True) for k, v in sorted(msg.overrides.items())}
    present = {k: v for k, v in overrides.items() if v is not None}
    nulls = {k: None for k, v in overrides.items() if v is None}
    model = with_overrides(model_preset(msg.preset or "default"), **present)
    if nulls:
        known = {f.name for f in dataclasses.fields(model)}
        unknown = {k: 1 for k in nulls if k not in known}
        if unknown:
            with_overrides(model, **unknown)  # raises the solver's "unknown model field" error
        model = dataclasses.replace(model, **nulls)
    return model


def traffic_from_proto(msg: "pb.Traffic", cfg: ParallelConfig, has_traffic: bool = True) -> dict[str, float]:
    """Payloads per class (bytes per rank per step), as ``rankmap solve`` computes them.

    * ``model`` set: the model's payloads (every class), classes in ``bytes``
      replaced;
    * only ``bytes``: exactly those classes (the solver counts the others as
      0), so a client's ``traffic`` dict reaches ``solve`` unchanged;
    * neither: the default model's payloads (DESIGN §3).

    Classes come in report order.
    """
    from rankmap.solver.traffic import DEFAULT_MODEL, traffic_from_mapping, traffic_from_model

    explicit = traffic_from_mapping(dict(msg.bytes)) if (has_traffic and msg.bytes) else {}
    if has_traffic and msg.HasField("model"):
        base = traffic_from_model(_model_from_proto(msg.model), cfg)
    elif explicit:
        base = {}
    else:
        base = traffic_from_model(DEFAULT_MODEL, cfg)
    base.update(explicit)
    return {c: float(base[c]) for c in _class_order(base)}


# --------------------------------------------------------------------------- options


def _orders_to_proto(orders) -> "pb.OrderSearch":
    out = pb.OrderSearch()
    if orders is None:
        return out
    if isinstance(orders, str):
        key = orders.strip().lower()
        if key in POLICY_TO_PROTO:
            out.policy = POLICY_TO_PROTO[key]
            return out
        out.orders.extend(o.strip() for o in orders.split(","))
        return out
    if isinstance(orders, Iterable):
        items = list(orders)
        if len(items) == 1 and isinstance(items[0], str) and items[0].strip().lower() in POLICY_TO_PROTO:
            out.policy = POLICY_TO_PROTO[items[0].strip().lower()]
            return out
        for o in items:
            if not isinstance(o, str):
                raise InvalidArgumentError(f"orders must be order strings like 'tp-cp-ep-dp-pp', got {o!r}", "orders")
            out.orders.append(o)
        return out
    raise InvalidArgumentError(f"orders must be a policy name or a list of orders, got {orders!r}", "orders")


def _orders_from_proto(msg: "pb.OrderSearch"):
    if msg.orders:
        if msg.policy != pb.ORDER_POLICY_UNSPECIFIED:
            raise invalid(
                f"give an order policy ({pb.OrderPolicy.Name(msg.policy)}) or explicit orders, not both",
                "orders.policy",
                "orders",
            )
        return tuple(msg.orders)
    if msg.policy == pb.ORDER_POLICY_UNSPECIFIED:
        return "default"
    if msg.policy not in POLICY_FROM_PROTO:
        raise invalid(f"unknown order policy {msg.policy}", "orders.policy", "orders")
    return POLICY_FROM_PROTO[msg.policy]


def _constraint(c) -> Constraint:
    if isinstance(c, Constraint):
        return c
    if isinstance(c, str):
        return parse_constraint(c)
    if isinstance(c, (tuple, list)) and len(c) == 2:
        return parse_constraint(f"{c[0]} within {c[1]}")
    raise InvalidArgumentError(f"constraint {c!r} is not of the form 'CLASS within LEVEL' (e.g. 'tp within host')", "constraints")


def exposure_to_proto(target, exposure: Mapping[str, float] | None) -> None:
    """Write exposure ``x_c`` per class into a request's ``exposure`` map.

    Validated first with :func:`~rankmap.solver.types.check_exposure` (the
    solver's messages; field ``exposure.CLASS``).  ``None`` or an empty mapping
    writes nothing (every class 1).
    """
    if exposure is None:
        return
    if not isinstance(exposure, Mapping):
        raise InvalidArgumentError(
            f"exposure must be a mapping of traffic class -> x in [0, 1] (e.g. {{'dp': 0.2}}), got {exposure!r}",
            "exposure",
        )
    for k, v in check_exposure(exposure).items():
        target[k] = v


def exposure_from_proto(source) -> dict[str, float]:
    """Exposure per class of a request's ``exposure`` map, validated, in report order.

    Raises
    ------
    InvalidArgumentError
        Field ``exposure.CLASS`` (proto path ``exposure[CLASS]``) for an unknown
        class or a value outside [0, 1] (NaN included).
    """
    raw = dict(source)
    return check_exposure({k: raw[k] for k in _class_order(raw)})


def options_to_proto(
    req: "pb.SolveRequest",
    mode: str | None = None,
    orders=None,
    constraints: Iterable = (),
    exclude_devices: Iterable = (),
    exclude_hosts: Iterable = (),
    time_limit_seconds: float | None = None,
    seed: int | None = None,
    exposure: Mapping[str, float] | None = None,
) -> None:
    """Fill the search fields of ``req`` (mode, orders, constraints, exclusions, limits, exposure)."""
    if mode is not None:
        key = mode.strip().lower() if isinstance(mode, str) else mode
        if key not in MODE_TO_PROTO:
            raise InvalidArgumentError(f"mode {mode!r} is not one of {', '.join(MODES)}", "mode")
        req.mode = MODE_TO_PROTO[key]
    req.orders.CopyFrom(_orders_to_proto(orders))
    if isinstance(constraints, (str, Constraint)):
        constraints = [constraints]
    for c in constraints or ():
        c = _constraint(c)
        req.constraints.add(traffic_class=c.traffic_class, level=c.level)
    req.exclude_devices.extend(str(d) for d in (exclude_devices or ()))
    req.exclude_hosts.extend(str(h) for h in (exclude_hosts or ()))
    if time_limit_seconds is not None:
        if isinstance(time_limit_seconds, bool) or not isinstance(time_limit_seconds, numbers.Real):
            raise InvalidArgumentError(
                f"time_limit_seconds must be a positive number, got {time_limit_seconds!r}", "time_limit_seconds"
            )
        req.time_limit_seconds = float(time_limit_seconds)
    if seed is not None:
        if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or seed < 0:
            raise InvalidArgumentError(f"seed must be a non-negative integer, got {seed!r}", "seed")
        req.seed = int(seed)
    exposure_to_proto(req.exposure, exposure)


def options_from_proto(req: "pb.SolveRequest") -> SolveOptions:
    """``SolveOptions`` of a request (validated by ``SolveOptions`` itself)."""
    if req.mode not in MODE_FROM_PROTO:
        raise invalid(f"mode {req.mode} is not one of {', '.join(MODES)}", "mode", "mode")
    constraints = []
    for i, c in enumerate(req.constraints):
        try:
            constraints.append(parse_constraint(f"{c.traffic_class} within {c.level}"))
        except InvalidArgumentError as exc:
            raise invalid(exc.message, f"constraints[{i}]", "constraints") from None
    kw: dict[str, Any] = {}
    if req.HasField("time_limit_seconds"):
        kw["time_limit_seconds"] = float(req.time_limit_seconds)
    exposure = exposure_from_proto(req.exposure)
    return SolveOptions(
        mode=MODE_FROM_PROTO[req.mode],
        orders=_orders_from_proto(req.orders),
        constraints=tuple(constraints),
        exclude_devices=tuple(req.exclude_devices),
        exclude_hosts=tuple(req.exclude_hosts),
        seed=int(req.seed),
        exposure=exposure,
        **kw,
    )


# --------------------------------------------------------------------------- requests


@dataclass
class SolveJob:
    """The arguments of ``rankmap.solver.solve`` read from a ``SolveRequest``."""

    graph: nx.Graph
    cfg: ParallelConfig
    traffic: dict[str, float]
    options: SolveOptions
    omit_groups: bool = False


@dataclass
class EvaluateJob:
    """The arguments of ``rankmap.solver.evaluate`` read from an ``EvaluateRequest``."""

    graph: nx.Graph
    cfg: ParallelConfig
    assignment: tuple[str, ...]
    traffic: dict[str, float]
    exposure: dict[str, float] = dataclasses.field(default_factory=dict)


def solve_request(
    graph: nx.Graph | "pb.Cluster",
    *,
    world_size: int | None = None,
    tp: int | None = None,
    cp: int | None = None,
    ep: int | None = None,
    etp: int | None = None,
    pp: int | None = None,
    num_distributed_optimizer_instances: int | None = None,
    hierarchical_context_parallel_sizes: Sequence[int] | None = None,
    traffic=None,
    model=None,
    mode: str | None = None,
    orders=None,
    constraints: Iterable = (),
    exclude_devices: Iterable = (),
    exclude_hosts: Iterable = (),
    time_limit_seconds: float | None = None,
    seed: int | None = None,
    omit_groups: bool = False,
    exposure: Mapping[str, float] | None = None,
) -> "pb.SolveRequest":
    """A ``SolveRequest`` from a graph (or an already converted ``Cluster``) and plain values.

    ``orders``: ``"default"``, ``"megatron-cli"``, ``"all"``, a comma-separated
    string of orders or a list of orders.  ``constraints``: strings such as
    ``"tp within host"`` or :class:`Constraint`.  ``exposure``: ``x_c`` in
    [0, 1] per traffic class (classes not named are 1).  Other arguments as in
    :func:`traffic_to_proto` and :class:`SolveOptions`.
    """
    req = pb.SolveRequest(omit_groups=bool(omit_groups))
    req.cluster.CopyFrom(graph if isinstance(graph, pb.Cluster) else graph_to_proto(graph))
    req.sizes.CopyFrom(
        sizes_to_proto(
            world_size, tp, cp, ep, etp, pp, num_distributed_optimizer_instances, hierarchical_context_parallel_sizes
        )
    )
    if traffic is not None or model is not None:
        req.traffic.CopyFrom(traffic_to_proto(traffic, model))
    options_to_proto(
        req, mode, orders, constraints, exclude_devices, exclude_hosts, time_limit_seconds, seed, exposure
    )
    return req


def solve_request_from_config(
    graph: nx.Graph | "pb.Cluster",
    cfg: ParallelConfig,
    traffic: Mapping[str, float] | None,
    options: SolveOptions | None = None,
    omit_groups: bool = False,
) -> "pb.SolveRequest":
    """A ``SolveRequest`` carrying exactly the arguments of ``solve(graph, cfg, traffic, options)``.

    ``traffic`` travels as explicit bytes (classes not given are 0, as in
    ``solve``); ``None`` asks for the default model.  ``cfg.order`` is not sent
    (the search starts from the default order whatever it is).
    """
    options = options or SolveOptions()
    return solve_request(
        graph,
        world_size=cfg.world_size,
        tp=cfg.tp,
        cp=cfg.cp,
        ep=cfg.ep,
        etp=cfg.etp,
        pp=cfg.pp,
        num_distributed_optimizer_instances=cfg.num_distributed_optimizer_instances,
        hierarchical_context_parallel_sizes=cfg.hierarchical_context_parallel_sizes or None,
        traffic=None if traffic is None else {k: float(v) for k, v in traffic.items()},
        mode=options.mode,
        orders=options.orders,
        constraints=options.constraints,
        exclude_devices=options.exclude_devices,
        exclude_hosts=options.exclude_hosts,
        time_limit_seconds=options.time_limit_seconds,
        seed=options.seed,
        omit_groups=omit_groups,
        exposure=options.exposure,
    )


def evaluate_request(
    graph: nx.Graph | "pb.Cluster",
    assignment: Sequence,
    *,
    order: str = DEFAULT_ORDER,
    world_size: int | None = None,
    tp: int | None = None,
    cp: int | None = None,
    ep: int | None = None,
    etp: int | None = None,
    pp: int | None = None,
    num_distributed_optimizer_instances: int | None = None,
    hierarchical_context_parallel_sizes: Sequence[int] | None = None,
    traffic=None,
    model=None,
    exposure: Mapping[str, float] | None = None,
) -> "pb.EvaluateRequest":
    """An ``EvaluateRequest``: the predicted time of ``assignment`` (device per global rank) under ``order``.

    ``exposure``: ``x_c`` in [0, 1] per traffic class, as in :func:`solve_request`.
    """
    if isinstance(assignment, (str, bytes)) or not isinstance(assignment, Iterable):
        raise InvalidArgumentError(f"assignment must be a list of device ids, got {assignment!r}", "assignment")
    req = pb.EvaluateRequest(order=order or "", assignment=[str(a) for a in assignment])
    req.cluster.CopyFrom(graph if isinstance(graph, pb.Cluster) else graph_to_proto(graph))
    req.sizes.CopyFrom(
        sizes_to_proto(
            world_size, tp, cp, ep, etp, pp, num_distributed_optimizer_instances, hierarchical_context_parallel_sizes
        )
    )
    if traffic is not None or model is not None:
        req.traffic.CopyFrom(traffic_to_proto(traffic, model))
    exposure_to_proto(req.exposure, exposure)
    return req


def get_groups_request(
    world_size: int,
    *,
    order: str = DEFAULT_ORDER,
    tp: int | None = None,
    cp: int | None = None,
    ep: int | None = None,
    etp: int | None = None,
    pp: int | None = None,
    num_distributed_optimizer_instances: int | None = None,
    hierarchical_context_parallel_sizes: Sequence[int] | None = None,
) -> "pb.GetGroupsRequest":
    """A ``GetGroupsRequest``."""
    req = pb.GetGroupsRequest(order=order or "")
    req.sizes.CopyFrom(
        sizes_to_proto(
            world_size, tp, cp, ep, etp, pp, num_distributed_optimizer_instances, hierarchical_context_parallel_sizes
        )
    )
    return req


def parse_solve_request(req: "pb.SolveRequest") -> SolveJob:
    """Read a ``SolveRequest``: graph, validated config, traffic and options."""
    graph = graph_from_proto(req.cluster)
    options = options_from_proto(req)
    n = count_gpus(graph, options.exclude_devices, options.exclude_hosts)
    cfg = config_from_proto(req.sizes, DEFAULT_ORDER, default_world_size=n, rpc="Solve")
    traffic = traffic_from_proto(req.traffic, cfg, has_traffic=req.HasField("traffic"))
    return SolveJob(graph, cfg, traffic, options, bool(req.omit_groups))


def parse_evaluate_request(req: "pb.EvaluateRequest") -> EvaluateJob:
    """Read an ``EvaluateRequest``."""
    graph = graph_from_proto(req.cluster)
    cfg = config_from_proto(req.sizes, req.order or DEFAULT_ORDER, default_world_size=count_gpus(graph), rpc="Evaluate")
    traffic = traffic_from_proto(req.traffic, cfg, has_traffic=req.HasField("traffic"))
    return EvaluateJob(graph, cfg, tuple(req.assignment), traffic, exposure_from_proto(req.exposure))


def parse_get_groups_request(req: "pb.GetGroupsRequest") -> ParallelConfig:
    """Read a ``GetGroupsRequest`` (world_size required)."""
    return config_from_proto(req.sizes, req.order or DEFAULT_ORDER, default_world_size=None, rpc="GetGroups")


# --------------------------------------------------------------------------- results


def _class_order(keys: Iterable[str]) -> list[str]:
    keys = list(keys)
    known = [c for c in _TRAFFIC_CLASSES if c in keys]
    return known + sorted(k for k in keys if k not in _TRAFFIC_CLASSES)


def _bottleneck_to_proto(b: Bottleneck, out: "pb.Bottleneck") -> None:
    kind = BOTTLENECK_TO_PROTO.get(b.kind)
    if kind is None:  # a solver bug, not bad input: fail loudly (INTERNAL)
        raise ValueError(f"bottleneck kind {b.kind!r} is not one of {', '.join(BOTTLENECK_TO_PROTO)}")
    out.kind = kind
    if b.link is not None:
        out.link_from, out.link_to = str(b.link[0]), str(b.link[1])
    out.load_bytes = float(b.load_bytes)
    out.capacity_gbps = float(b.capacity_gbps)
    out.utilization = float(b.utilization)
    out.flows = int(b.flows)
    out.flow_bytes = float(b.flow_bytes)
    out.flow_gbps = float(b.flow_gbps)


def _bottleneck_from_proto(msg: "pb.Bottleneck") -> Bottleneck:
    link = (msg.link_from, msg.link_to) if (msg.link_from or msg.link_to) else None
    return Bottleneck(
        kind=BOTTLENECK_FROM_PROTO.get(msg.kind, "none"),
        link=link,
        load_bytes=float(msg.load_bytes),
        capacity_gbps=float(msg.capacity_gbps),
        utilization=float(msg.utilization),
        flows=int(msg.flows),
        flow_bytes=float(msg.flow_bytes),
        flow_gbps=float(msg.flow_gbps),
    )


def cost_to_proto(cost: CostBreakdown) -> "pb.Cost":
    """A ``rankmap.v1.Cost``: total ``Σ x_c·T_c``, ``T_c`` per class, and each class's :class:`ClassCost`."""
    out = pb.Cost(total_seconds=float(cost.total_seconds))
    for k, v in cost.by_class.items():
        out.by_class_seconds[k] = float(v)
    for k, c in (cost.classes or {}).items():
        m = out.classes[k]
        m.seconds = float(c.seconds)
        m.exposure = float(c.exposure)
        m.bytes_per_rank = float(c.bytes_per_rank)
        m.payload_bytes = float(c.payload_bytes)
        m.latency_seconds = float(c.latency_seconds)
        _bottleneck_to_proto(c.bottleneck, m.bottleneck)
    return out


def cost_from_proto(msg: "pb.Cost") -> CostBreakdown:
    """The :class:`CostBreakdown` of a ``rankmap.v1.Cost`` (classes in report order).

    A ``Cost`` without ``classes`` gets the per-class defaults of
    :class:`CostBreakdown` (``T_c`` from ``by_class_seconds``, exposure 1).
    """
    by = dict(msg.by_class_seconds)
    classes = None
    if msg.classes:
        classes = {}
        for k in _class_order(msg.classes.keys()):
            m = msg.classes[k]
            classes[k] = ClassCost(
                seconds=float(m.seconds),
                exposure=float(m.exposure),
                bytes_per_rank=float(m.bytes_per_rank),
                payload_bytes=float(m.payload_bytes),
                latency_seconds=float(m.latency_seconds),
                bottleneck=_bottleneck_from_proto(m.bottleneck),
            )
    return CostBreakdown(
        total_seconds=float(msg.total_seconds),
        by_class={k: by[k] for k in _class_order(by)},
        classes=classes,
    )


_HIER = re.compile(r"^(.*_L)(\d+)$")


def _group_sort_key(name: str) -> tuple[int, int, str]:
    if name in GROUP_NAMES:
        return GROUP_NAMES.index(name), 0, name
    m = _HIER.match(name)
    if m and f"{m.group(1)}*" in GROUP_NAMES:
        return GROUP_NAMES.index(f"{m.group(1)}*"), int(m.group(2)), name
    return len(GROUP_NAMES), 0, name


def groups_to_proto(groups: Mapping[str, np.ndarray], target) -> None:
    """Write ``{name: (groups, size) array}`` into a ``map<string, RankGroups>`` field."""
    for name, arr in groups.items():
        rg = target[name]
        for row in np.asarray(arr).tolist():
            rg.groups.add().ranks.extend(row)


def groups_from_proto(source) -> dict[str, np.ndarray]:
    """``{name: int64 array (groups, size)}`` from a ``map<string, RankGroups>``, in Megatron's order."""
    out = {}
    for name in sorted(source.keys(), key=_group_sort_key):
        rows = [list(g.ranks) for g in source[name].groups]
        width = len(rows[0]) if rows else 0
        out[name] = np.asarray(rows, dtype=np.int64).reshape(len(rows), width)
    return out


def _layout_to_proto(layout: Layout) -> "pb.Layout":
    return pb.Layout(order=layout.order, assignment=[str(a) for a in layout.assignment], cost=cost_to_proto(layout.cost))


def _layout_from_proto(msg: "pb.Layout") -> Layout:
    return Layout(order=msg.order, assignment=tuple(msg.assignment), cost=cost_from_proto(msg.cost))


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
    for k, v in (result.apply or {}).items():
        out.apply.entries.add(key=str(k), value=value_to_proto(v))
    if not omit_groups:
        groups_to_proto(result.groups, out.groups)
    return out


def result_from_proto(msg: "pb.SolveResponse") -> SolveResult:
    """The :class:`SolveResult` of a ``SolveResponse``."""
    cfg = config_from_resolved(msg.config)
    traffic = dict(msg.traffic_bytes)
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
        traffic={k: float(traffic[k]) for k in _class_order(traffic)},
        apply={e.key: value_from_proto(e.value) for e in msg.apply.entries},
        mode=MODE_FROM_PROTO.get(msg.mode, "launcher"),
        orders_searched=tuple(msg.orders_searched),
    )


def evaluate_response(cost: CostBreakdown, traffic: Mapping[str, float]) -> "pb.EvaluateResponse":
    out = pb.EvaluateResponse(cost=cost_to_proto(cost))
    for k, v in traffic.items():
        out.traffic_bytes[k] = float(v)
    return out


def get_groups_response(cfg: ParallelConfig, groups: Mapping[str, np.ndarray]) -> "pb.GetGroupsResponse":
    out = pb.GetGroupsResponse(config=config_to_proto(cfg))
    groups_to_proto(groups, out.groups)
    return out


def describe_request(req) -> dict[str, Any]:
    """Sizes and GPU count of a request, for the server's log line."""
    out: dict[str, Any] = {}
    sizes = getattr(req, "sizes", None)
    if sizes is not None:
        out["sizes"] = {
            f.name: (list(v) if f.name == "hierarchical_context_parallel_sizes" else v)
            for f, v in sizes.ListFields()
        }
    cluster = getattr(req, "cluster", None)
    if cluster is not None:
        out["gpus"] = len(cluster.devices)
    if isinstance(req, pb.BatchSolveRequest):
        out["requests"] = len(req.requests)
        out["gpus"] = sum(len(r.cluster.devices) for r in req.requests)
    return out
