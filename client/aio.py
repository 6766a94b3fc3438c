"""asyncio Python client of ``rankmap.v1.RankmapService`` (``grpc.aio``).

::

    from rankmap.client import AsyncRankmapClient

    async with AsyncRankmapClient("127.0.0.1:50051") as client:
        result = await client.solve(graph, tp=2, pp=4)
        async for index, outcome in client.batch_solve(items):
            ...

Same arguments, results, retries and errors as :class:`rankmap.client.RankmapClient`.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, AsyncIterator, Iterable, Mapping, Sequence

import grpc
import networkx as nx
import numpy as np
from grpc import aio

from rankmap import wire
from rankmap.wire.channel import channel_options
from rankmap.solver.errors import RankmapError
from rankmap.solver.ranks import DEFAULT_ORDER
from rankmap.solver.catalogue import ParallelConfig
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

__all__ = ["AsyncRankmapClient"]


class AsyncRankmapClient:
    """asyncio client; see :class:`rankmap.client.RankmapClient` for the parameters.

    Create it inside a running event loop (the ``grpc.aio`` channel binds to it).
    """

    def __init__(
        self,
        target: str,
        timeout: float = DEFAULT_TIMEOUT,
        retries: int = DEFAULT_RETRIES,
        backoff_initial: float = 0.1,
        backoff_max: float = 5.0,
        channel: aio.Channel | None = None,
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
                channel = aio.insecure_channel(target, options=channel_options())
            else:
                channel = aio.secure_channel(target, creds, options=channel_options())
        self._channel = channel
        self._stub = rankmap_pb2_grpc.RankmapServiceStub(self._channel)

    async def close(self) -> None:
        """Close the channel (unless it was given)."""
        if self._own_channel:
            await self._channel.close()

    async def __aenter__(self) -> "AsyncRankmapClient":
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()

    def _deadline(self, timeout: float | None) -> float:
        return time.monotonic() + (self.timeout if timeout is None else timeout)

    async def _call(self, method, request, timeout: float | None):
        deadline = self._deadline(timeout)
        delays = iter(backoff_delays(self.retries, self.backoff_initial, self.backoff_max))
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise RankmapRpcError(grpc.StatusCode.DEADLINE_EXCEEDED, "deadline exceeded before the call was made")
            try:
                return await method(request, timeout=remaining, metadata=self._metadata)
            except grpc.RpcError as err:
                if err.code() == grpc.StatusCode.UNAVAILABLE:
                    delay = next(delays, None)
                    if delay is not None and deadline - time.monotonic() > delay:
                        await asyncio.sleep(delay)
                        continue
                raise error_from_rpc(err) from None

    async def health(self, service: str = "", timeout: float | None = None) -> str:
        """The server's health status name (``SERVING``, ``NOT_SERVING``, ...)."""
        from grpc_health.v1 import health_pb2, health_pb2_grpc

        stub = health_pb2_grpc.HealthStub(self._channel)
        resp = await self._call(stub.Check, health_pb2.HealthCheckRequest(service=service), timeout)
        return health_pb2.HealthCheckResponse.ServingStatus.Name(resp.status)

    async def solve(
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
        """See :meth:`rankmap.client.RankmapClient.solve`."""
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
        return wire.result_from_proto(await self._call(self._stub.Solve, req, timeout))

    async def solve_config(
        self,
        graph: nx.Graph,
        cfg: ParallelConfig,
        traffic: Mapping[str, float] | None,
        options: SolveOptions | None = None,
        *,
        omit_groups: bool = False,
        timeout: float | None = None,
    ) -> SolveResult:
        """See :meth:`rankmap.client.RankmapClient.solve_config`."""
        req = wire.solve_request_from_config(graph, cfg, traffic, options, omit_groups=omit_groups)
        return wire.result_from_proto(await self._call(self._stub.Solve, req, timeout))

    async def import_cluster(self, text, format: str, *, timeout: float | None = None, **options) -> nx.Graph:
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
        return import_cluster_graph(await self._call(self._stub.ImportCluster, req, timeout))

    async def evaluate(
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
        """See :meth:`rankmap.client.RankmapClient.evaluate`."""
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
        return wire.cost_from_proto((await self._call(self._stub.Evaluate, req, timeout)).cost)

    async def get_groups(
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
        """See :meth:`rankmap.client.RankmapClient.get_groups`."""
        req = wire.get_groups_request(
            world_size,
            order=order,
            tp=tp,
            cp=cp,
            ep=ep,
            etp=etp,
            pp=pp,
            num_distributed_optimizer_instances=num_distributed_optimizer_instances,
            hierarchical_context_parallel_sizes=hierarchical_context_parallel_sizes,
        )
        resp = await self._call(self._stub.GetGroups, req, timeout)
        return wire.groups_from_proto(resp.groups)

    async def batch_solve(
        self, requests: Iterable, timeout: float | None = None
    ) -> AsyncIterator[tuple[int, SolveResult | Exception]]:
        """See :meth:`rankmap.client.RankmapClient.batch_solve` (an async iterator)."""
        pending: list[tuple[int, Any]] = []
        for index, item in enumerate(requests):
            try:
                pending.append((index, solve_kwargs_request(item)))
            except RankmapError as exc:
                yield index, exc
        deadline = self._deadline(timeout)
        for chunk in chunk_requests(pending):
            async for out in self._batch_chunk(chunk, deadline):
                yield out

    async def _batch_chunk(self, chunk, deadline: float):
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
                    async for resp in self._stub.BatchSolve(req, timeout=left, metadata=self._metadata):
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
                            await asyncio.sleep(delay)
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
