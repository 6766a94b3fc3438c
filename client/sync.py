"""Blocking Python client of ``rankmap.v1.RankmapService``.

::

    from rankmap.client import RankmapClient

    with RankmapClient("127.0.0.1:50051") as client:
        result = client.solve(graph, tp=2, pp=4, traffic={"tp": 4e9, "dp": 1e9})
        print(result.order, result.assignment, result.cost.total_seconds)

Methods take an ``nx.Graph`` and plain Python values and return the solver's
own types (:class:`~rankmap.solver.types.SolveResult`,
:class:`~rankmap.solver.types.CostBreakdown`, ``dict`` of numpy arrays),
converted by :mod:`rankmap.wire` exactly as the server reads them.
UNAVAILABLE is retried with exponential backoff (``retries`` times) within the
call's deadline; INVALID_ARGUMENT raises
:class:`~rankmap.solver.errors.InvalidArgumentError` and FAILED_PRECONDITION
:class:`~rankmap.solver.errors.InfeasibleError` (``field`` as the in-process
call would set it, ``proto_field`` the request path); anything else raises
:class:`RankmapRpcError`.
"""

from __future__ import annotations

import time
from typing import Any, Iterable, Iterator, Mapping, Sequence

import grpc
import networkx as nx
import numpy as np

from rankmap import wire
from rankmap.wire.channel import channel_options
from rankmap.solver.catalogue import ParallelConfig
from rankmap.solver.errors import RankmapError
from rankmap.solver.ranks import DEFAULT_ORDER
from rankmap.solver.types import CostBreakdown, SolveOptions, SolveResult
from rankmap.v1 import rankmap_pb2_grpc

from ._common import (
    DEFAULT_RETRIES,
    DEFAULT_TIMEOUT,
    RankmapRpcError,
    auth_metadata,
    backoff_delays,
    channel_credentials,
    chunk_requests,
    error_from_batch,
    error_from_rpc,
    import_cluster_graph,
    import_cluster_request,
    solve_kwargs_request,
)

__all__ = ["RankmapClient", "RankmapRpcError"]


class RankmapClient:
    """Blocking client.

    Parameters
    ----------
    target : str
        ``host:port`` of a ``rankmap serve``.
    timeout : float
        Default deadline of each call, seconds (the whole call, retries included).
    retries : int
        Retries on UNAVAILABLE.
    backoff_initial, backoff_max : float
        First retry delay and its cap, seconds (doubling, with jitter).
    channel : grpc.Channel, optional
        Use this channel instead of opening one to ``target``.
    tls : bool, optional
        Speak TLS (implied by any of the TLS files), trusting the system's roots
        unless ``tls_ca`` is given.
    tls_ca : path or PEM bytes, optional
        CA certificate that signed the server's (a private CA, a self-signed server).
    tls_cert, tls_key : path or PEM bytes, optional
        Client certificate and key, for a server that requires mutual TLS.
    token, token_file : str / path, optional
        Bearer token (or a file whose first line is one), sent as
        ``authorization: Bearer TOKEN`` on every call.
    """

    def __init__(
        self,
        target: str,
        timeout: float = DEFAULT_TIMEOUT,
        retries: int = DEFAULT_RETRIES,
        backoff_initial: float = 0.1,
        backoff_max: float = 5.0,
        channel: grpc.Channel | None = None,
       *,
        tls: bool | None = None,
        tls_ca=None,
        tls_cert=None,
        tls_key=None,
        token: str | None = None,
        token_file=None,
    ):
        self.target = target
        self.timeout = timeout
        self.retries = retries
        self.backoff_initial = backoff_initial
        self.backoff_max = backoff_max
        self._own_channel = channel is None
        self._metadata = auth_metadata(token, token_file)
        if channel is None:
            creds = channel_credentials(tls, tls_ca, tls_cert, tls_key)
            if creds is None:
                channel = grpc.insecure_channel(target, options=channel_options())
            else:
                channel = grpc.secure_channel(target, creds, options=channel_options())
        self._channel = channel
        self._stub = rankmap_pb2_grpc.RankmapServiceStub(self._channel)

    # ------------------------------------------------------------ plumbing

    def close(self) -> None:
        """Close the channel (unless it was given)."""
        if self._own_channel:
            self._channel.close()

    def __enter__(self) -> "RankmapClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _deadline(self, timeout: float | None) -> float:
        return time.monotonic() + (self.timeout if timeout is None else timeout)

    def _call(self, method, request, timeout: float | None):
        """Unary call with retries on UNAVAILABLE inside one overall deadline."""
        deadline = self._deadline(timeout)
        delays = iter(backoff_delays(self.retries, self.backoff_initial, self.backoff_max))
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise RankmapRpcError(grpc.StatusCode.DEADLINE_EXCEEDED, "deadline exceeded before the call was made")
            try:
                return method(request, timeout=remaining, metadata=self._metadata)
            except grpc.RpcError as err:
                if err.code() == grpc.StatusCode.UNAVAILABLE:
                    delay = next(delays, None)
                    if delay is not None and deadline - time.monotonic() > delay:
                        time.sleep(delay)
                        continue
                raise error_from_rpc(err) from None

    def wait_until_ready(self, timeout: float | None = None) -> None:
        """Block until the channel is connected (raises RankmapRpcError UNAVAILABLE on timeout)."""
        try:
            grpc.channel_ready_future(self._channel).result(timeout=self.timeout if timeout is None else timeout)
        except grpc.FutureTimeoutError:
            raise RankmapRpcError(grpc.StatusCode.UNAVAILABLE, f"{self.target} not reachable") from None

    def health(self, service: str = "", timeout: float | None = None) -> str:
        """The server's health status name (``SERVING``, ``NOT_SERVING``, ...)."""
        from grpc_health.v1 import health_pb2, health_pb2_grpc

        stub = health_pb2_grpc.HealthStub(self._channel)
        resp = self._call(stub.Check, health_pb2.HealthCheckRequest(service=service), timeout)
        return health_pb2.HealthCheckResponse.ServingStatus.Name(resp.status)

    # ------------------------------------------------------------ RPCs

    def solve(
        self,
        graph: nx.Graph,
        *,
        world_size: int | None = None,
        tp: int | None = None,
        cp: int | None = None,
        ep: int | None = None,
        etp: int | None = None,
        pp: int | None = None,
        num_distributed_optimizer_instances: int | None = None,
        hierarchical_context_parallel_sizes: Sequence[int] | None = None,
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
        timeout: float | None = None,
    ) -> SolveResult:
        """Solve on the server; the same arguments and result as ``rankmap solve``.

        ``traffic`` (class -> bytes, or ``"tp=4e9,dp=1GB"``) and/or ``model``
        (preset name, mapping with ``preset`` and overrides, or ``ModelSpec``):
        as the CLI's ``--traffic`` / ``--model``; neither = the default model.
        ``orders``: ``"default"``, ``"megatron-cli"``, ``"all"`` or a list of
        orders.  ``constraints``: e.g. ``["tp within host"]``.  ``exposure``:
        ``x_c`` in [0, 1] per traffic class, e.g. ``{"tp": 0.5, "dp": 0.2}``
        (the share of the class's time not overlapped with compute; classes
        not named are 1): the objective is ``Σ_c x_c·T_c``.  ``launch_order``:
        how the launcher numbers the hosts, the baseline: ``"sorted"`` (default,
        natural-sorted names), ``"listed"`` or the host names in launch order.
        """
        req = wire.solve_request(
            graph,
            world_size=world_size,
            tp=tp,
            cp=cp,
            ep=ep,
            etp=etp,
            pp=pp,
            num_distributed_optimizer_instances=num_distributed_optimizer_instances,
            hierarchical_context_parallel_sizes=hierarchical_context_parallel_sizes,
            traffic=traffic,
            model=model,
            mode=mode,
            orders=orders,
            constraints=constraints,
            exclude_devices=exclude_devices,
            exclude_hosts=exclude_hosts,
            time_limit_seconds=time_limit_seconds,
            seed=seed,
            omit_groups=omit_groups,
            exposure=exposure,
            launch_order=launch_order,
        )
        return wire.result_from_proto(self._call(self._stub.Solve, req, timeout))

    def solve_config(
        self,
        graph: nx.Graph,
        cfg: ParallelConfig,
        traffic: Mapping[str, float] | None,
        options: SolveOptions | None = None,
        *,
        omit_groups: bool = False,
        timeout: float | None = None,
    ) -> SolveResult:
        """``rankmap.solver.solve(graph, cfg, traffic, options)`` on the server (same arguments)."""
        req = wire.solve_request_from_config(graph, cfg, traffic, options, omit_groups=omit_groups)
        return wire.result_from_proto(self._call(self._stub.Solve, req, timeout))

    def solve_request(self, request, timeout: float | None = None) -> SolveResult:
        """Send an already built ``rankmap.v1.SolveRequest``."""
        return wire.result_from_proto(self._call(self._stub.Solve, request, timeout))

    def import_cluster(self, text, format: str, *, timeout: float | None = None, **options) -> nx.Graph:
        """Build the cluster graph from a topology file's text on the server (``ImportCluster``).

        ``text`` in ``format`` (``"kubernetes-nodes"``, ``"volcano-hypernodes"``, ``"topograph-model"``,
        ``"ibnetdiscover"``, ``"topology.conf"``, ``"topology.yaml"``, ``"host-topology"``); the other
        arguments are those of ``rankmap cluster`` (texts instead of files, ``rates`` in GB/s,
        ``nvlink_domain_rate`` GB/s per GPU).  Returns the ``nx.Graph`` (DESIGN §2) with
        ``graph["name"]``, ``graph["gpu"]``, ``graph["warnings"]``; raises
        :class:`~rankmap.solver.errors.InvalidArgumentError` for bad input (``proto_field`` names
        the request field, the message the file and line).
        """
        req = import_cluster_request(text, format, **options)
        return import_cluster_graph(self._call(self._stub.ImportCluster, req, timeout))

    def evaluate(
        self,
        graph: nx.Graph,
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
        traffic: Mapping[str, float] | str | None = None,
        model: str | Mapping | Any | None = None,
        exposure: Mapping[str, float] | None = None,
        timeout: float | None = None,
    ) -> CostBreakdown:
        """Predicted communication time of running global rank r on GPU ``assignment[r]`` under ``order``.

        ``exposure`` as in :meth:`solve`; the result's ``total_seconds`` is ``Σ_c x_c·T_c``.
        """
        req = wire.evaluate_request(
            graph,
            assignment,
            order=order,
            world_size=world_size,
            tp=tp,
            cp=cp,
            ep=ep,
            etp=etp,
            pp=pp,
            num_distributed_optimizer_instances=num_distributed_optimizer_instances,
            hierarchical_context_parallel_sizes=hierarchical_context_parallel_sizes,
            traffic=traffic,
            model=model,
            exposure=exposure,
        )
        return wire.cost_from_proto(self._call(self._stub.Evaluate, req, timeout).cost)

    def get_groups(
        self,
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
        timeout: float | None = None,
    ) -> dict[str, np.ndarray]:
        """Megatron's process groups, as :func:`rankmap.solver.megatron_groups` returns them."""
        return self.get_groups_with_config(
            world_size,
            order=order,
            tp=tp,
            cp=cp,
            ep=ep,
            etp=etp,
            pp=pp,
            num_distributed_optimizer_instances=num_distributed_optimizer_instances,
            hierarchical_context_parallel_sizes=hierarchical_context_parallel_sizes,
            timeout=timeout,
        )[1]

    def get_groups_with_config(self, world_size: int, *, timeout: float | None = None, **sizes) -> tuple[ParallelConfig, dict]:
        """``(validated ParallelConfig, groups)``."""
        req = wire.get_groups_request(world_size, **sizes)
        resp = self._call(self._stub.GetGroups, req, timeout)
        return wire.config_from_resolved(resp.config), wire.groups_from_proto(resp.groups)

    def batch_solve(
        self, requests: Iterable, timeout: float | None = None
    ) -> Iterator[tuple[int, SolveResult | Exception]]:
        """Solve many requests; yield ``(index, SolveResult or exception)`` as each completes.

        Each item is a mapping ``{"graph": nx.Graph, **solve keyword arguments}``
        or a ``rankmap.v1.SolveRequest``.  Every index is yielded exactly once:
        an invalid item yields its :class:`InvalidArgumentError`, an infeasible
        one its :class:`InfeasibleError`; if the stream itself fails (deadline,
        server gone after the retries) the remaining indices yield a
        :class:`RankmapRpcError`.  Large batches are split into several streams.
        """
        pending: list[tuple[int, Any]] = []
        for index, item in enumerate(requests):
            try:
                pending.append((index, solve_kwargs_request(item)))
            except RankmapError as exc:
                yield index, exc
        deadline = self._deadline(timeout)
        for chunk in chunk_requests(pending):
            yield from self._batch_chunk(chunk, deadline)

    def _batch_chunk(self, chunk: list[tuple[int, Any]], deadline: float):
        remaining_items = list(chunk)
        delays = iter(backoff_delays(self.retries, self.backoff_initial, self.backoff_max))
        while remaining_items:
            indices = [i for i, _ in remaining_items]
            req = wire.batch_request(r for _, r in remaining_items)
            seen: set[int] = set()
            left = deadline - time.monotonic()
            failure: Exception | None = None
            retry = False
            if left <= 0:
                failure = RankmapRpcError(grpc.StatusCode.DEADLINE_EXCEEDED, "deadline exceeded")
            else:
                try:
                    for resp in self._stub.BatchSolve(req, timeout=left, metadata=self._metadata):
                        pos = int(resp.index)
                        if pos < 0 or pos >= len(indices) or pos in seen:
                            continue
                        seen.add(pos)
                        if resp.WhichOneof("outcome") == "result":
                            yield indices[pos], wire.result_from_proto(resp.result)
                        else:
                            yield indices[pos], error_from_batch(resp.error)
                except grpc.RpcError as err:
                    if err.code() == grpc.StatusCode.UNAVAILABLE:
                        delay = next(delays, None)
                        if delay is not None and deadline - time.monotonic() > delay:
                            time.sleep(delay)
                            retry = True
                    if not retry:
                        failure = error_from_rpc(err)
            remaining_items = [item for pos, item in enumerate(remaining_items) if pos not in seen]
            if failure is not None:
                for index, _ in remaining_items:
                    yield index, failure
                return
            if not retry and remaining_items:
                failure = RankmapRpcError(grpc.StatusCode.INTERNAL, "the server ended the stream without an answer")
                for index, _ in remaining_items:
                    yield index, failure
                return
