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
import numbers
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

import networkx as nx
import numpy as np

from rankmap.solver.catalogue import ParallelConfig
from rankmap.solver.errors import InvalidArgumentError
from rankmap.solver.launch_files import LAUNCH_KEYS as _LAUNCH_KEYS  # the apply keys ApplyInfo types
from rankmap.solver.ranks import DEFAULT_ORDER
from rankmap.solver.types import CostBreakdown, HostPlacement, Layout, SolveOptions, SolveResult
from rankmap.v1 import rankmap_pb2 as pb

# The conversion is split by topic; every public name stays importable from here.
from rankmap.server.costs import (  # noqa: F401
    BOTTLENECK_FROM_PROTO,
    BOTTLENECK_TO_PROTO,
    _class_order,
    _layout_from_proto,
    _layout_to_proto,
    cost_from_proto,
    cost_to_proto,
    groups_from_proto,
    groups_to_proto,
)
from rankmap.server.errors import (  # noqa: F401
    ERROR_DOMAIN,
    SIZE_FIELDS,
    clip,
    error_fields,
    error_from_proto,
    error_from_status,
    error_status,
    error_to_proto,
    invalid,
    proto_field,
)
from rankmap.server.graph import count_gpus, graph_from_proto, graph_to_proto  # noqa: F401
from rankmap.server.options import (  # noqa: F401
    MODE_FROM_PROTO,
    MODE_TO_PROTO,
    POLICY_FROM_PROTO,
    POLICY_TO_PROTO,
    _constraint,
    _orders_from_proto,
    _orders_to_proto,
    enum_name,
    exposure_from_proto,
    exposure_to_proto,
    options_from_proto,
    options_to_proto,
)
from rankmap.server.sizes import (  # noqa: F401
    config_from_proto,
    config_from_resolved,
    config_to_proto,
    sizes_to_proto,
)

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

STATUS_TO_PROTO = {"OPTIMAL": pb.STATUS_OPTIMAL, "FEASIBLE": pb.STATUS_FEASIBLE}
STATUS_FROM_PROTO = {v: k for k, v in STATUS_TO_PROTO.items()}

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
        ``ModelSpec``, Megatron-LM arguments, or None.
        Megatron-LM arguments are a string with ``--`` flags
        (``"--num-layers 80 --hidden-size 8192 ..."``, a ``torchrun ...
        pretrain_gpt.py`` prefix allowed) or a
        :class:`~rankmap.solver.traffic.MegatronArgs`; they travel as
        ``Traffic.megatron_args`` and are read on the server.
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
        from rankmap.solver.traffic import MegatronArgs, parse_megatron_args

        if isinstance(model, MegatronArgs):
            model = model.text
        if isinstance(model, str) and "--" in model:
            parse_megatron_args(model)  # same messages as the CLI, before anything is sent
            out.megatron_args = model
        else:
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
    from rankmap.solver.job import SIZE_KEYS, megatron_sizes, resolve_traffic
    from rankmap.solver.traffic import Traffic, parse_megatron_args, traffic_from_mapping

    explicit = traffic_from_mapping(dict(msg.bytes)) if (has_traffic and msg.bytes) else None
    model = meg = over = None
    if has_traffic and msg.megatron_args:
        meg = parse_megatron_args(msg.megatron_args)

        def conflict(key, given, value):
            return InvalidArgumentError(f"sizes.{key}={given} disagrees with {key}={value} in traffic.megatron_args",
                                        "traffic.megatron_args")

        # the sizes the arguments spell out must match the request's (filled in when it left them out)
        megatron_sizes(meg, {k: int(getattr(cfg, k)) for k in SIZE_KEYS}, conflict)
        if msg.HasField("model"):
            if msg.model.preset:
                raise InvalidArgumentError(
                    "give traffic.model.preset or traffic.megatron_args, not both", "traffic.model.preset"
                )
            over = {k: value_from_proto(v, tuples=True) for k, v in sorted(msg.model.overrides.items())}
    elif has_traffic and msg.HasField("model"):
        model = _model_from_proto(msg.model)
    out = resolve_traffic(cfg, explicit, model=model, megatron=meg, overrides=over, fill=False)
    order = _class_order(out)
    return Traffic({c: float(out[c]) for c in order}, out.collectives, out.notes, out.model, out.explicit)


def _sizes_with_megatron(sizes: "pb.ParallelSizes", traffic: "pb.Traffic", has_traffic: bool) -> "pb.ParallelSizes":
    """``sizes`` with the parallel sizes of ``traffic.megatron_args`` filled in where the request
    leaves them out (as ``rankmap solve --megatron-args`` fills ``--tp`` ...)."""
    if not (has_traffic and traffic.megatron_args):
        return sizes
    from rankmap.solver.traffic import parse_megatron_args

    meg = parse_megatron_args(traffic.megatron_args)
    out = pb.ParallelSizes()
    out.CopyFrom(sizes)
    for key, value in meg.sizes.items():
        if not out.HasField(key):
            setattr(out, key, int(value))
    return out


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
    launch_order=None,
) -> "pb.SolveRequest":
    """A ``SolveRequest`` from a graph (or an already converted ``Cluster``) and plain values.

    ``orders``: ``"default"``, ``"megatron-cli"``, ``"all"``, a comma-separated
    string of orders or a list of orders.  ``constraints``: strings such as
    ``"tp within host"`` or :class:`Constraint`.  ``exposure``: ``x_c`` in
    [0, 1] per traffic class (classes not named are 1).  ``launch_order``:
    ``"sorted"`` (default), ``"listed"`` or the host names in launch order.
    Other arguments as in :func:`traffic_to_proto` and :class:`SolveOptions`.
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
        req, mode, orders, constraints, exclude_devices, exclude_hosts, time_limit_seconds, seed, exposure,
        launch_order,
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

    A :class:`~rankmap.solver.traffic.Traffic` derived from a model travels as
    that model (every field) plus the classes given explicitly on top, so the
    server derives the same payloads *and shapes* (sequence-parallel
    all-gathers, ring attention, the interleaved pipeline's wrap...); other
    traffic travels as explicit bytes (classes not given are 0, as in
    ``solve``); ``None`` asks for the default model.  ``cfg.order`` is not sent
    (the search starts from the default order whatever it is).
    """
    options = options or SolveOptions()
    model = getattr(traffic, "model", None)
    if model is not None:
        explicit = dict(getattr(traffic, "explicit", {}) or {})
        wire_traffic, wire_model = (explicit or None), model
    else:
        wire_traffic = None if traffic is None else {k: float(v) for k, v in traffic.items()}
        wire_model = None
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
        traffic=wire_traffic,
        model=wire_model,
        mode=options.mode,
        orders=options.orders,
        constraints=options.constraints,
        exclude_devices=options.exclude_devices,
        exclude_hosts=options.exclude_hosts,
        time_limit_seconds=options.time_limit_seconds,
        seed=options.seed,
        omit_groups=omit_groups,
        exposure=options.exposure,
        launch_order=options.launch_order,
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


def parse_solve_request(req: "pb.SolveRequest", check=None) -> SolveJob:
    """Read a ``SolveRequest``: graph, validated config, traffic and options.

    ``check``: called at check points of the conversion (raises to stop it).
    """
    graph = graph_from_proto(req.cluster, check)
    options = options_from_proto(req)
    n = count_gpus(graph, options.exclude_devices, options.exclude_hosts)
    sizes = _sizes_with_megatron(req.sizes, req.traffic, req.HasField("traffic"))
    if req.HasField("traffic") and req.traffic.megatron_args and not req.HasField("orders"):
        from rankmap.solver.traffic import parse_megatron_args

        order = parse_megatron_args(req.traffic.megatron_args).order
        if order != DEFAULT_ORDER:  # --use-tp-pp-dp-mapping: the order Megatron will build
            options = dataclasses.replace(options, orders=order)
    cfg = config_from_proto(sizes, DEFAULT_ORDER, default_world_size=n, rpc="Solve")
    traffic = traffic_from_proto(req.traffic, cfg, has_traffic=req.HasField("traffic"))
    return SolveJob(graph, cfg, traffic, options, bool(req.omit_groups))


def parse_evaluate_request(req: "pb.EvaluateRequest", check=None) -> EvaluateJob:
    """Read an ``EvaluateRequest`` (``check`` as in :func:`parse_solve_request`)."""
    graph = graph_from_proto(req.cluster, check)
    sizes = _sizes_with_megatron(req.sizes, req.traffic, req.HasField("traffic"))
    cfg = config_from_proto(sizes, req.order or DEFAULT_ORDER, default_world_size=count_gpus(graph), rpc="Evaluate")
    traffic = traffic_from_proto(req.traffic, cfg, has_traffic=req.HasField("traffic"))
    return EvaluateJob(graph, cfg, tuple(req.assignment), traffic, exposure_from_proto(req.exposure))


def parse_get_groups_request(req: "pb.GetGroupsRequest") -> ParallelConfig:
    """Read a ``GetGroupsRequest`` (world_size required)."""
    return config_from_proto(req.sizes, req.order or DEFAULT_ORDER, default_world_size=None, rpc="GetGroups")


# --------------------------------------------------------------------------- results

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
        out.traffic_model.CopyFrom(_model_to_proto(model))
        for k, v in (getattr(result.traffic, "explicit", None) or {}).items():
            out.traffic_explicit[k] = float(v)
    apply_to_proto(result.apply or {}, out.apply)
    if not omit_groups:
        groups_to_proto(result.groups, out.groups)
    return out


def result_from_proto(msg: "pb.SolveResponse") -> SolveResult:
    """The :class:`SolveResult` of a ``SolveResponse``."""
    from rankmap.solver.traffic import Traffic

    cfg = config_from_resolved(msg.config)
    traffic = dict(msg.traffic_bytes)
    model = _model_from_proto(msg.traffic_model) if msg.HasField("traffic_model") else None
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


def evaluate_response(cost: CostBreakdown, traffic: Mapping[str, float]) -> "pb.EvaluateResponse":
    """An ``EvaluateResponse``: the cost and the payloads it was computed for."""
    out = pb.EvaluateResponse(cost=cost_to_proto(cost))
    for k, v in traffic.items():
        out.traffic_bytes[k] = float(v)
    return out


def get_groups_response(cfg: ParallelConfig, groups: Mapping[str, np.ndarray], check=None) -> "pb.GetGroupsResponse":
    """A ``GetGroupsResponse`` (``check``: a deadline check point, called while encoding)."""
    out = pb.GetGroupsResponse(config=config_to_proto(cfg))
    groups_to_proto(groups, out.groups, check)
    return out


def describe_request(req) -> dict[str, Any]:
    """Sizes and GPU count of a request, for the server's log line."""
    out: dict[str, Any] = {}
    sizes = getattr(req, "sizes", None)
    if sizes is not None:
        out["sizes"] = {
            f.name: (list(v)[:20] if f.name == "hierarchical_context_parallel_sizes" else v)
            for f, v in sizes.ListFields()
        }
    cluster = getattr(req, "cluster", None)
    if cluster is not None:
        out["gpus"] = len(cluster.devices)
    if isinstance(req, pb.BatchSolveRequest):
        out["requests"] = len(req.requests)
        out["gpus"] = sum(len(r.cluster.devices) for r in req.requests)
    return out

