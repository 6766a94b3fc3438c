"""Every call of the clients, once: how its request is built and its answer decoded.

Each function here takes the public arguments of one client method (plus ``timeout``,
the call's deadline in seconds, ``None`` = the client's default) and returns a
:class:`Call`: the RPC, a thunk that builds the request (run when the call starts, so a
bad argument raises from the call, or from the ``await`` of the asyncio client) and the
decoder of the answer, all from :mod:`rankmap.wire`.  :class:`~rankmap.client.RankmapClient`
and :class:`~rankmap.client.AsyncRankmapClient` expose them as methods
(:func:`as_method`) and only do the transport: deadlines, retries, the stream.
"""

from __future__ import annotations

import functools
import inspect
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping, Sequence

from rankmap import wire
from rankmap.solver.megatron.config import ParallelSizes
from rankmap.solver.megatron.ranks import DEFAULT_ORDER

__all__ = ["Call", "CALLS", "as_method", "install"]


@dataclass(frozen=True)
class Call:
    """One unary call: ``decode(stub.<method>(build()))``.

    Attributes
    ----------
    method : str
        The RPC's name on the stub (``"Solve"``, ``"Check"`` ...).
    build : callable () -> request message
    decode : callable (answer message) -> the method's result
    timeout : float or None
        Seconds for the whole call, retries included (None: the client's default).
    health : bool
        Call the ``grpc.health.v1.Health`` stub instead of ``rankmap.v1.RankmapService``.
    """

    method: str
    build: Callable[[], Any]
    decode: Callable[[Any], Any]
    timeout: float | None = None
    health: bool = False


#: Method name -> the function building its :class:`Call`, in the order the clients list them.
CALLS: dict[str, Callable[..., Call]] = {}


def _call(returns: str):
    """Register a call; ``returns`` is the client method's return annotation."""

    def register(spec):
        spec.returns = returns
        CALLS[spec.__name__] = spec
        return spec

    return register


def as_method(transport: Callable, spec: Callable[..., Call]) -> Callable:
    """``transport(self, *args, **kwargs)`` dressed as the client method of ``spec``:
    its name, docstring and signature (``self`` first, the decoded type as return annotation)."""
    functools.update_wrapper(transport, spec, updated=())
    sig = inspect.signature(spec)
    self_param = inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)
    transport.__signature__ = sig.replace(parameters=[self_param, *sig.parameters.values()],
                                          return_annotation=spec.returns)
    del transport.__wrapped__
    return transport


def install(cls: type, transport: Callable[[Callable[..., Call]], Callable]) -> type:
    """Give ``cls`` one method per entry of :data:`CALLS`: ``transport(spec)`` returns the
    function running the spec's :class:`Call` (blocking or a coroutine), dressed by
    :func:`as_method`."""
    for name, spec in CALLS.items():
        method = as_method(transport(spec), spec)
        method.__qualname__ = f"{cls.__name__}.{name}"
        method.__module__ = cls.__module__
        setattr(cls, name, method)
    return cls


@_call("str")
def health(service: str = "", timeout: float | None = None) -> Call:
    """The server's health status name (``SERVING``, ``NOT_SERVING``, ...)."""
    return Call("Check", lambda: wire.health_request(service), wire.health_status_name, timeout, health=True)


@_call("SolveResult")
def solve(
    graph,
    *,
    sizes: ParallelSizes | None = None,
    traffic: Mapping[str, float] | str | None = None,
    model: str | Mapping | Any | None = None,
    mode: str | None = None,
    orders: str | Sequence[str] | None = None,
    constraints: Iterable = (),
    exclude_devices: Iterable[str] = (),
    exclude_hosts: Iterable[str] = (),
    time_limit_seconds: float | None = None,
    seed: int | None = None,
    omit_groups: bool = False,
    exposure: Mapping[str, float] | None = None,
    launch_order: str | Sequence[str] | None = None,
    nccl: Any = None,
    measured: Iterable = (),
    exclude_slow: float | None = None,
    timeout: float | None = None,
    **size_kwargs: Any,
) -> Call:
    """Solve on the server; the same arguments and result as ``rankmap solve``.

    Parallel sizes: ``sizes`` (a :class:`~rankmap.solver.ParallelSizes`) and/or the size
    keywords ``world_size``, ``tp``, ``cp``, ``ep``, ``etp``, ``pp``,
    ``num_distributed_optimizer_instances``, ``hierarchical_context_parallel_sizes``
    (not given: the cluster's usable GPUs, etp = tp, the others 1).
    ``traffic`` (class -> bytes, or ``"tp=4e9,dp=1GB"``) and/or ``model``
    (preset name, mapping with ``preset`` and overrides, ``ModelSpec`` or
    Megatron-LM arguments): as the CLI's ``--traffic`` / ``--model``; neither =
    the default model.  ``orders``: ``"default"``, ``"megatron-cli"``, ``"all"``
    or a list of orders.  ``constraints``: e.g. ``["tp within host"]``.
    ``exposure``: ``x_c`` in [0, 1] per traffic class, e.g. ``{"tp": 0.5, "dp": 0.2}``
    (the share of the class's time not overlapped with compute; classes
    not named are 1): the objective is ``Σ_c x_c·T_c``.  ``launch_order``:
    how the launcher numbers the hosts, the baseline: ``"sorted"`` (default,
    natural-sorted names), ``"listed"`` or the host names in launch order.
    ``nccl``: how NCCL runs the collectives, as the CLI's ``--nccl-algo``, ``--nccl-rate``,
    ``--no-pxn``, ``--no-nccl-latency``: an :class:`~rankmap.solver.NcclModel` or a mapping of
    its fields, e.g. ``{"algorithm": "ring", "rates": {"nic": 45}}`` (None: NCCL's defaults).
    ``measured``: :class:`~rankmap.solver.formats.measured.Measurement` records (``rankmap
    solve --measured``; :func:`~rankmap.solver.formats.measured.read_measured` reads the files),
    each capping the bottleneck links of its route; ``exclude_slow``: F in (0, 1], hosts measured
    below F × the model's rate are left out.
    Returns a :class:`~rankmap.solver.results.SolveResult` (``measured_links``: the measured links
    the layout crosses; ``warnings``: e.g. a measurement naming an unknown host).
    """

    def build():
        return wire.solve_request(
            graph, sizes=sizes, traffic=traffic, model=model, mode=mode, orders=orders, constraints=constraints,
            exclude_devices=exclude_devices, exclude_hosts=exclude_hosts, time_limit_seconds=time_limit_seconds,
            seed=seed, omit_groups=omit_groups, exposure=exposure, launch_order=launch_order, nccl=nccl,
            measured=measured, exclude_slow=exclude_slow, **size_kwargs,
        )

    return Call("Solve", build, wire.result_from_proto, timeout)


@_call("SolveResult")
def solve_config(graph, cfg, traffic, options=None, *, omit_groups: bool = False,
                 timeout: float | None = None) -> Call:
    """``rankmap.solver.solve(graph, cfg, traffic, options)`` on the server (same arguments:
    an ``nx.Graph``, a ``ParallelConfig``, payloads or a ``Traffic``, ``SolveOptions``)."""
    return Call("Solve", lambda: wire.solve_request_from_config(graph, cfg, traffic, options, omit_groups=omit_groups),
                wire.result_from_proto, timeout)


@_call("SolveResult")
def solve_request(request, timeout: float | None = None) -> Call:
    """Send an already built ``rankmap.v1.SolveRequest`` (:func:`rankmap.wire.solve_request`)."""
    return Call("Solve", lambda: request, wire.result_from_proto, timeout)


@_call("nx.Graph")
def import_cluster(text, format: str, *, timeout: float | None = None, **options: Any) -> Call:
    """Build the cluster graph from a topology file's text on the server (``ImportCluster``).

    ``text`` in ``format`` (``"kubernetes-nodes"``, ``"volcano-hypernodes"``, ``"topograph-model"``,
    ``"ibnetdiscover"``, ``"topology.conf"``, ``"topology.yaml"``, ``"host-topology"``); the other
    arguments are those of ``rankmap cluster`` (texts instead of files, ``rates`` in GB/s,
    ``nvlink_domain_rate`` GB/s per GPU; see :func:`rankmap.wire.import_cluster_request`).
    Returns the ``nx.Graph`` (DESIGN §2) with ``graph["name"]``, ``graph["gpu"]``,
    ``graph["warnings"]``; raises :class:`~rankmap.solver.errors.InvalidArgumentError` for bad
    input (``proto_field`` names the request field, the message the file and line).
    """
    return Call("ImportCluster", lambda: wire.import_cluster_request(text, format, **options),
                wire.import_cluster_graph, timeout)


@_call("CostBreakdown")
def evaluate(
    graph,
    assignment: Sequence,
    *,
    order: str = DEFAULT_ORDER,
    sizes: ParallelSizes | None = None,
    traffic: Mapping[str, float] | str | None = None,
    model: str | Mapping | Any | None = None,
    exposure: Mapping[str, float] | None = None,
    nccl: Any = None,
    measured: Iterable = (),
    timeout: float | None = None,
    **size_kwargs: Any,
) -> Call:
    """Predicted communication time of running global rank r on GPU ``assignment[r]`` under ``order``.

    Sizes, traffic, model, ``exposure``, ``nccl`` and ``measured`` as in :meth:`solve`; returns a
    :class:`~rankmap.solver.results.CostBreakdown` whose ``total_seconds`` is ``Σ_c x_c·T_c``.
    """

    def build():
        return wire.evaluate_request(graph, assignment, order=order, sizes=sizes, traffic=traffic, model=model,
                                     exposure=exposure, nccl=nccl, measured=measured, **size_kwargs)

    return Call("Evaluate", build, wire.evaluate_cost, timeout)


@_call("CostBreakdown")
def evaluate_config(graph, cfg, assignment, traffic, exposure=None, *, nccl=None,
                    timeout: float | None = None) -> Call:
    """``rankmap.solver.evaluate(graph, cfg, assignment, traffic, exposure=exposure, nccl=nccl)`` on the server
    (same arguments: a ``ParallelConfig`` with its order, payloads or a model-derived ``Traffic``, an
    ``NcclModel``)."""
    return Call("Evaluate",
                lambda: wire.evaluate_request_from_config(graph, cfg, assignment, traffic, exposure, nccl=nccl),
                wire.evaluate_cost, timeout)


@_call("dict[str, np.ndarray]")
def get_groups(world_size: int | None = None, *, order: str = DEFAULT_ORDER, sizes: ParallelSizes | None = None,
               timeout: float | None = None, **size_kwargs: Any) -> Call:
    """Megatron's process groups, as :func:`rankmap.solver.megatron_groups` returns them
    (name -> int64 array of shape (groups, group size)); sizes as in :meth:`solve`, the world
    size required."""
    return Call("GetGroups", lambda: wire.get_groups_request(world_size, order=order, sizes=sizes, **size_kwargs),
                lambda msg: wire.groups_and_config(msg)[1], timeout)


@_call("tuple[ParallelConfig, dict[str, np.ndarray]]")
def get_groups_with_config(world_size: int | None = None, *, order: str = DEFAULT_ORDER,
                           sizes: ParallelSizes | None = None, timeout: float | None = None,
                           **size_kwargs: Any) -> Call:
    """``(validated ParallelConfig, groups)``; arguments as in :meth:`get_groups`."""
    return Call("GetGroups", lambda: wire.get_groups_request(world_size, order=order, sizes=sizes, **size_kwargs),
                wire.groups_and_config, timeout)
