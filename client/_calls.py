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


@_call("CheckResult")
def check(graph, layout, *, kind: str = "assignment", order: str = DEFAULT_ORDER, sizes: ParallelSizes | None = None,
          within: str | Iterable | None = None, traffic: Mapping[str, float] | str | None = None,
          model: str | Mapping | Any | None = None, exposure: Mapping[str, float] | None = None, nccl: Any = None,
          best: bool = True, time_limit_seconds: float | None = None, seed: int = 0, source_name: str = "",
          gpus_file: str | None = None, cuda_visible_devices: Sequence[int] | None = None,
          timeout: float | None = None, **size_kwargs: Any) -> Call:
    """Check a granted allocation on the server (``rankmap check``): every group that straddles a
    required domain and the predicted cost against rankmap's best on the same hosts.

    ``layout``: device ids per global rank, or (``kind`` ``hostfile``, ``rankfile``, ``pod-map``,
    ``torchrun``) a launch file's text, with its GPU file's text as ``gpus_file``.  ``within``:
    ``"tp=nvlink,ep=nvlink"`` (the solve's constraint levels).  ``best=False`` skips the search;
    ``time_limit_seconds`` bounds it (default 10 s).  Sizes, traffic, model, exposure and nccl as in
    :meth:`solve`.  Returns a :class:`~rankmap.solver.allocation.check.CheckResult` (``best`` a
    :class:`~rankmap.solver.results.Layout`).
    """

    def build():
        return wire.check_allocation_request(
            graph, layout, kind=kind, order=order, sizes=sizes, within=within, traffic=traffic, model=model,
            exposure=exposure, nccl=nccl, best=best, time_limit_seconds=time_limit_seconds, seed=seed,
            source_name=source_name, gpus_file=gpus_file, cuda_visible_devices=cuda_visible_devices, **size_kwargs)

    return Call("Check", build, wire.check_result_from_proto, timeout)


@_call("AllocationAdvice")
def recommend_allocation(*, graph=None, nvlink_domain_size: int | None = None, gpus_per_node: int | None = None,
                         within: str | Iterable | None = None, schedulers: Iterable[str] | str = "all",
                         order: str = DEFAULT_ORDER, sizes: ParallelSizes | None = None,
                         nodes_per_leaf: int | None = None, nvlink_label: str = "", pack_label: str = "",
                         nvlink_tier: int | None = None, max_wait: str = "", timeout: float | None = None,
                         **size_kwargs: Any) -> Call:
    """The Slurm / Kueue / Volcano request that keeps the ``within`` groups (default tp) inside one
    NVLink domain (``rankmap request``), from the cluster ``graph`` or ``nvlink_domain_size`` (GPUs per
    domain) and ``gpus_per_node``.  Returns an
    :class:`~rankmap.solver.allocation.request.AllocationAdvice`."""

    def build():
        return wire.recommend_request(graph=graph, nvlink_domain_size=nvlink_domain_size, gpus_per_node=gpus_per_node,
                                      within=within, schedulers=schedulers, order=order, sizes=sizes,
                                      nodes_per_leaf=nodes_per_leaf, nvlink_label=nvlink_label, pack_label=pack_label,
                                      nvlink_tier=nvlink_tier, max_wait=max_wait, **size_kwargs)

    return Call("RecommendAllocation", build, wire.advice_from_proto, timeout)


@_call("CheckResult")
def check_config(graph, cfg, assignment, traffic, within=None, *, exposure=None, nccl=None, best: bool = True,
                 time_limit_seconds: float | None = None, seed: int = 0, timeout: float | None = None) -> Call:
    """``rankmap.solver.allocation.check.check_allocation(graph, cfg, assignment, traffic, within, ...)`` on the
    server (same arguments: a ``ParallelConfig`` with the layout's order, payloads or a model-derived
    ``Traffic``)."""
    return Call("Check", lambda: wire.check_allocation_request_from_job(graph, cfg, assignment, traffic, within,
                                                             exposure=exposure, nccl=nccl, best=best,
                                                             time_limit_seconds=time_limit_seconds, seed=seed),
                wire.check_result_from_proto, timeout)
@_call("RepairResult")
def repair(graph, cfg, traffic, running: Sequence[str], *, failed_hosts: Iterable[str] = (),
           failed_gpus: Iterable[str] = (), spare_hosts: Iterable[str] | None = None, max_moves: int | None = None,
           options=None, orders=None, timeout: float | None = None) -> Call:
    """:func:`rankmap.solver.job.repair.repair` on the server (``Repair``), same arguments: the cluster
    graph (failed hosts included), the running job's ``ParallelConfig`` (its order is the running
    order), payloads or a model-derived ``Traffic``, the running layout (GPU id per global rank),
    the failures, the spares (None: the hosts not in the running layout), ``max_moves`` (pinned),
    ``SolveOptions`` (mode of the running layout, time limit of the whole repair ...) and the orders
    of the full re-solve (None: the running order).  Returns a
    :class:`~rankmap.solver.job.repair.RepairResult`."""
    return Call("Repair",
                lambda: wire.repair_request(graph, cfg, traffic, running, list(failed_hosts), list(failed_gpus),
                                            None if spare_hosts is None else list(spare_hosts), max_moves, options,
                                            orders),
                wire.repair_from_proto, timeout)


@_call("CompareResult")
def compare(graph, cfg, traffic, allocations: Sequence[str], options=None, *, sizes: ParallelSizes | None = None,
            timeout: float | None = None) -> Call:
    """:func:`rankmap.solver.job.compare.compare` on the server (``Compare``): the job (``cfg``, or
    ``cfg=None`` and ``sizes`` without a world size: each allocation's GPUs) solved on each allocation
    (Slurm hostlists such as ``"node[01-04]"``), best first.  Returns a
    :class:`~rankmap.solver.job.compare.CompareResult`."""
    return Call("Compare", lambda: wire.compare_request(graph, cfg, traffic, list(allocations), options, sizes),
                wire.compare_from_proto, timeout)
