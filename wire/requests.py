"""Requests, as the clients build them: plain Python values -> ``rankmap.v1`` request messages.

:func:`solve_request`, :func:`solve_request_from_config`, :func:`evaluate_request`,
:func:`get_groups_request`, :func:`import_cluster_request`, :func:`batch_request` and
:func:`health_request`; :func:`solve_kwargs_request` reads one ``batch_solve`` item.
Values are checked here with the solver's own parsers where that can be done without the
cluster (traffic, Megatron-LM arguments, orders, constraints), so a bad call fails before
anything is sent, with the message the CLI prints.
"""

from __future__ import annotations

from typing import Iterable, Mapping, Sequence

import networkx as nx

from rankmap.solver.megatron.config import PARALLEL_SIZE_KEYS, ParallelConfig, ParallelSizes
from rankmap.solver.errors import InvalidArgumentError
from rankmap.solver.megatron.ranks import DEFAULT_ORDER
from rankmap.solver.types import SolveOptions
from rankmap.v1 import rankmap_pb2 as pb
from rankmap.wire.graph import graph_to_proto
from rankmap.wire.measured import measurements_to_proto
from rankmap.wire.options import _nccl_field_to_proto, exposure_to_proto, options_to_proto
from rankmap.wire.sizes import sizes_to_proto
from rankmap.wire.traffic import traffic_to_proto

__all__ = [
    "SIZE_ARGUMENTS",
    "solve_request",
    "solve_request_from_config",
    "evaluate_request",
    "evaluate_request_from_config",
    "get_groups_request",
    "solve_kwargs_request",
    "import_cluster_request",
    "TOPOLOGY_FORMATS",
    "batch_request",
    "health_request",
    "is_solve_request",
]


#: The size arguments of the builders (and of the clients' calls): ``sizes`` (a
#: :class:`~rankmap.solver.ParallelSizes`) and/or the size keywords ``world_size``, ``tp``,
#: ``cp``, ``ep``, ``etp``, ``pp``, ``num_distributed_optimizer_instances``,
#: ``hierarchical_context_parallel_sizes`` (:data:`~rankmap.solver.PARALLEL_SIZE_KEYS`); a
#: size not given takes the server's default (world_size: the usable GPUs; etp: tp; others 1).
SIZE_ARGUMENTS = PARALLEL_SIZE_KEYS


#: The ``SolveOptions`` fields, which :func:`solve_request` takes under the same names.
_OPTION_KEYS = ("mode", "orders", "constraints", "exclude_devices", "exclude_hosts", "time_limit_seconds", "seed",
                "exposure", "launch_order", "nccl")


def _cluster(graph) -> "pb.Cluster":
    return graph if isinstance(graph, pb.Cluster) else graph_to_proto(graph)


def solve_request(
    graph: nx.Graph | "pb.Cluster",
    *,
    sizes: ParallelSizes | None = None,
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
    nccl=None,
    measured: Iterable = (),
    exclude_slow: float | None = None,
    **size_kwargs,
) -> "pb.SolveRequest":
    """A ``SolveRequest`` from a graph (or an already converted ``Cluster``) and plain values.

    Parallel sizes: ``sizes`` and/or the size keywords (``tp=2, pp=4``; see
    :data:`SIZE_ARGUMENTS`).  ``orders``: ``"default"``, ``"megatron-cli"``, ``"all"``, a
    comma-separated string of orders or a list of orders.  ``constraints``: strings such as
    ``"tp within host"`` or :class:`Constraint`.  ``exposure``: ``x_c`` in
    [0, 1] per traffic class (classes not named are 1).  ``launch_order``:
    ``"sorted"`` (default), ``"listed"`` or the host names in launch order.
    ``nccl``: how NCCL runs the collectives, an :class:`~rankmap.solver.NcclModel` or a
    mapping of its fields (``{"algorithm": "ring", "pxn": False, "rates": {"nic": 45},
    "latency": False}``); None: NCCL's defaults.  ``measured``:
    :class:`~rankmap.solver.formats.measured.Measurement` records (issue 27), each capping the
    bottleneck links of its route; ``exclude_slow``: F in (0, 1], hosts measured below F × the
    model's rate are left out.
    Other arguments as in :func:`traffic_to_proto` and :class:`SolveOptions`.

    Raises
    ------
    InvalidArgumentError
        A value the wire cannot carry or the solver's parsers refuse (the CLI's message).
    TypeError
        An unknown keyword.
    """
    req = pb.SolveRequest(omit_groups=bool(omit_groups))
    req.cluster.CopyFrom(_cluster(graph))
    req.sizes.CopyFrom(sizes_to_proto(sizes, **size_kwargs))
    if traffic is not None or model is not None:
        req.traffic.CopyFrom(traffic_to_proto(traffic, model))
    options_to_proto(
        req, mode, orders, constraints, exclude_devices, exclude_hosts, time_limit_seconds, seed, exposure,
        launch_order, nccl,
    )
    measurements_to_proto(req.measured, measured)
    if exclude_slow is not None:
        req.exclude_slow = float(exclude_slow)
    return req


def _traffic_split(traffic):
    """``(bytes, model)`` for the wire: a model-derived Traffic as its model plus the classes given on top."""
    model = getattr(traffic, "model", None)
    if model is not None:
        explicit = dict(getattr(traffic, "explicit", {}) or {})
        return (explicit or None), model
    return (None if traffic is None else {k: float(v) for k, v in traffic.items()}), None


def evaluate_request_from_config(
    graph: nx.Graph | "pb.Cluster",
    cfg: ParallelConfig,
    assignment: Sequence,
    traffic: Mapping[str, float] | None,
    exposure: Mapping[str, float] | None = None,
    nccl=None,
) -> "pb.EvaluateRequest":
    """An ``EvaluateRequest`` carrying exactly the arguments of
    ``evaluate(graph, cfg, assignment, traffic, exposure=exposure, nccl=nccl)``: ``cfg``'s sizes and
    order, the traffic as in :func:`solve_request_from_config` (a model travels as the model, so the
    server derives the same shapes)."""
    wire_traffic, wire_model = _traffic_split(traffic)
    return evaluate_request(graph, assignment, order=cfg.order, sizes=ParallelSizes.of(cfg), traffic=wire_traffic,
                            model=wire_model, exposure=exposure, nccl=nccl)


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
    wire_traffic, wire_model = _traffic_split(traffic)
    return solve_request(
        graph,
        sizes=ParallelSizes.of(cfg),
        traffic=wire_traffic,
        model=wire_model,
        omit_groups=omit_groups,
        **{key: getattr(options, key) for key in _OPTION_KEYS},
    )


def evaluate_request(
    graph: nx.Graph | "pb.Cluster",
    assignment: Sequence,
    *,
    order: str = DEFAULT_ORDER,
    sizes: ParallelSizes | None = None,
    traffic=None,
    model=None,
    exposure: Mapping[str, float] | None = None,
    nccl=None,
    measured: Iterable = (),
    **size_kwargs,
) -> "pb.EvaluateRequest":
    """An ``EvaluateRequest``: the predicted time of ``assignment`` (device per global rank) under ``order``.

    Parallel sizes as in :func:`solve_request`; ``exposure``: ``x_c`` in [0, 1] per traffic
    class, ``nccl`` (how NCCL runs the collectives) and ``measured`` (measured rates), as there.
    """
    if isinstance(assignment, (str, bytes)) or not isinstance(assignment, Iterable):
        raise InvalidArgumentError(f"assignment must be a list of device ids, got {assignment!r}", "assignment")
    req = pb.EvaluateRequest(order=order or "", assignment=[str(a) for a in assignment])
    req.cluster.CopyFrom(_cluster(graph))
    req.sizes.CopyFrom(sizes_to_proto(sizes, **size_kwargs))
    if traffic is not None or model is not None:
        req.traffic.CopyFrom(traffic_to_proto(traffic, model))
    exposure_to_proto(req.exposure, exposure)
    _nccl_field_to_proto(req, nccl)
    measurements_to_proto(req.measured, measured)
    return req


def get_groups_request(
    world_size: int | None = None,
    *,
    order: str = DEFAULT_ORDER,
    sizes: ParallelSizes | None = None,
    **size_kwargs,
) -> "pb.GetGroupsRequest":
    """A ``GetGroupsRequest`` (the server requires a world size: ``world_size`` or ``sizes.world_size``).

    Other sizes as in :func:`solve_request`.
    """
    req = pb.GetGroupsRequest(order=order or "")
    req.sizes.CopyFrom(sizes_to_proto(sizes, world_size=world_size, **size_kwargs))
    return req


_SOLVE_KEYS = (
    *PARALLEL_SIZE_KEYS,
    "sizes",
    "traffic",
    "model",
    "mode",
    "orders",
    "constraints",
    "exclude_devices",
    "exclude_hosts",
    "time_limit_seconds",
    "seed",
    "omit_groups",
    "exposure",
    "launch_order",
    "nccl",
)


def solve_kwargs_request(item) -> "pb.SolveRequest":
    """A SolveRequest from one batch item: a ``SolveRequest`` or a mapping with
    ``graph`` (an ``nx.Graph``) and the keyword arguments of ``solve``."""
    if isinstance(item, pb.SolveRequest):
        return item
    if not isinstance(item, Mapping):
        raise InvalidArgumentError(
            f"a batch item must be a mapping with 'graph' and solve arguments, got {type(item).__name__}", "requests"
        )
    kw = dict(item)
    graph = kw.pop("graph", None)
    if graph is None:
        raise InvalidArgumentError("a batch item needs a 'graph'", "cluster")
    unknown = sorted(set(kw) - set(_SOLVE_KEYS))
    if unknown:
        raise InvalidArgumentError(
            f"unknown solve argument {unknown[0]!r}; known: graph, {', '.join(_SOLVE_KEYS)}", unknown[0]
        )
    return solve_request(graph, **kw)


#: ``import_cluster(format=...)`` spellings -> ``rankmap.v1.TopologyFormat`` names (the CLI flag names).
TOPOLOGY_FORMATS = {
    "slurm": "TOPOLOGY_FORMAT_SLURM_TOPOLOGY_CONF",
    "topology.conf": "TOPOLOGY_FORMAT_SLURM_TOPOLOGY_CONF",
    "topology.yaml": "TOPOLOGY_FORMAT_SLURM_TOPOLOGY_YAML",
    "kubernetes-nodes": "TOPOLOGY_FORMAT_KUBERNETES_NODES",
    "volcano-hypernodes": "TOPOLOGY_FORMAT_VOLCANO_HYPERNODES",
    "topograph-model": "TOPOLOGY_FORMAT_TOPOGRAPH_MODEL",
    "ibnetdiscover": "TOPOLOGY_FORMAT_IBNETDISCOVER",
    "host-topology": "TOPOLOGY_FORMAT_HOST_TOPOLOGY",
}


def _text(value, what: str) -> str:
    if value is None:
        return ""
    if isinstance(value, (bytes, bytearray)):
        try:
            return bytes(value).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InvalidArgumentError(f"{what} is not UTF-8 text (byte {exc.start})", what) from None
    if not isinstance(value, str):
        raise InvalidArgumentError(f"{what} must be text (str or UTF-8 bytes), got {type(value).__name__}", what)
    return value


def import_cluster_request(text, format: str, *, source_name: str | None = None, host_topology=None,
                           kubernetes_nodes=None, topology_labels=None, kueue_topology=None, nvlink_domains=None,
                           nvlink_domain_rate: float | None = None, gpu: str | None = None,
                           gpus_per_node: int | None = None, nodelist: str | None = None,
                           topology_name: str | None = None, rates: Mapping[str, float] | None = None,
                           oversubscription=None, block_links: str | None = None):
    """A ``rankmap.v1.ImportClusterRequest`` from the arguments of ``import_cluster``.

    ``format``: one of :data:`TOPOLOGY_FORMATS` (``"kubernetes-nodes"``, ``"volcano-hypernodes"``,
    ``"topograph-model"``, ``"ibnetdiscover"``, ``"topology.conf"``, ``"topology.yaml"``,
    ``"host-topology"``) or a ``TopologyFormat`` name; texts are ``str`` or UTF-8 ``bytes``;
    ``oversubscription`` a number, ``"2,1"`` or a list (leaf first); ``block_links``
    ``"nvlink"`` or ``"network"``.

    Raises
    ------
    InvalidArgumentError
        An unknown format or block_links, a text that is not text.
    """
    key = str(format).strip()
    name = TOPOLOGY_FORMATS.get(key.lower(), key.upper())
    if name not in pb.TopologyFormat.keys() or name == "TOPOLOGY_FORMAT_UNSPECIFIED":
        raise InvalidArgumentError(f"unknown topology format {format!r} (known: {', '.join(TOPOLOGY_FORMATS)})",
                                   "format")
    req = pb.ImportClusterRequest(format=pb.TopologyFormat.Value(name), text=_text(text, "text"))
    if source_name:
        req.source_name = str(source_name)
    req.host_topology = _text(host_topology, "host_topology")
    req.kubernetes_nodes = _text(kubernetes_nodes, "kubernetes_nodes")
    req.kueue_topology = _text(kueue_topology, "kueue_topology")
    req.nvlink_domains = _text(nvlink_domains, "nvlink_domains")
    if topology_labels:
        req.topology_labels.extend(topology_labels.split(",") if isinstance(topology_labels, str)
                                   else [str(x) for x in topology_labels])
    if nvlink_domain_rate is not None:
        req.nvlink_domain_rate_gbps = float(nvlink_domain_rate)
    if gpu is not None:
        req.gpu = str(gpu)
    if gpus_per_node is not None:
        req.gpus_per_node = int(gpus_per_node)
    if nodelist:
        req.nodelist = nodelist if isinstance(nodelist, str) else ",".join(nodelist)
    if topology_name:
        req.topology_name = str(topology_name)
    for k, v in (rates or {}).items():
        req.rates_gbps[str(k)] = float(v)
    if oversubscription is not None:
        from rankmap.solver.formats.compose import parse_oversubscription

        req.oversubscription.extend(parse_oversubscription(oversubscription))
    if block_links is not None:
        if block_links not in ("nvlink", "network"):
            raise InvalidArgumentError(f"block_links {block_links!r} must be 'nvlink' or 'network'", "block_links")
        req.block_links = pb.BLOCK_LINKS_NVLINK if block_links == "nvlink" else pb.BLOCK_LINKS_NETWORK
    return req


def batch_request(requests: Iterable["pb.SolveRequest"]) -> "pb.BatchSolveRequest":
    """A ``BatchSolveRequest`` of already built ``SolveRequest`` messages (in stream order)."""
    return pb.BatchSolveRequest(requests=list(requests))


def is_solve_request(value) -> bool:
    """Whether ``value`` is a ``rankmap.v1.SolveRequest`` message (a ready ``batch_solve`` item)."""
    return isinstance(value, pb.SolveRequest)


def health_request(service: str = ""):
    """A ``grpc.health.v1.HealthCheckRequest`` for ``service`` (``""``: the whole server)."""
    from grpc_health.v1 import health_pb2

    return health_pb2.HealthCheckRequest(service=service)
