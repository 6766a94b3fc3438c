"""asyncio Python client of ``rankmap.v1.RankmapService`` (``grpc.aio``).

::

    from rankmap.client import AsyncRankmapClient

    async with AsyncRankmapClient("127.0.0.1:50051") as client:
        result = await client.solve(graph, tp=2, pp=4)
        async for index, outcome in client.batch_solve(items):
            ...

Same arguments, results, retries and errors as :class:`rankmap.client.RankmapClient`:
the methods are the same calls (:mod:`rankmap.client._calls`) run as coroutines; this
module only does the asyncio transport.
"""

from __future__ import annotations

import asyncio
from typing import AsyncIterator, Iterable

import grpc
from grpc import aio

from rankmap.solver.results import SolveResult

from . import _calls
from ._common import BatchChunk, ClientBase, batch_items, chunk_requests

__all__ = ["AsyncRankmapClient"]


def _awaitable(spec):
    async def method(self, *args, **kwargs):
        return await self._unary(spec(*args, **kwargs))

    return method


class AsyncRankmapClient(ClientBase):
    """asyncio client; see :class:`rankmap.client.RankmapClient` for the parameters and methods
    (here coroutines, and :meth:`batch_solve` an async iterator).

    Create it inside a running event loop (the ``grpc.aio`` channel binds to it).
    """

    _channels = aio

    async def close(self) -> None:
        """Close the channel (unless it was given)."""
        if self._own_channel:
            await self._channel.close()

    async def __aenter__(self) -> "AsyncRankmapClient":
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()

    async def _unary(self, call: _calls.Call):
        """Run a unary call with retries on UNAVAILABLE inside one overall deadline."""
        request, rpc, deadline, delays = self._start(call)
        while True:
            try:
                answer = await rpc(request, timeout=self._remaining(deadline), metadata=self._metadata)
            except grpc.RpcError as err:
                await asyncio.sleep(self._retry_or_raise(err, delays, deadline))
                continue
            return call.decode(answer)

    async def batch_solve(
        self, requests: Iterable, timeout: float | None = None
    ) -> AsyncIterator[tuple[int, SolveResult | Exception]]:
        """See :meth:`rankmap.client.RankmapClient.batch_solve` (an async iterator)."""
        refused, pending = batch_items(requests)
        for out in refused:
            yield out
        deadline = self._deadline(timeout)
        for chunk in chunk_requests(pending):
            async for out in self._batch_chunk(chunk, deadline):
                yield out

    async def _batch_chunk(self, chunk, deadline: float):
        state = BatchChunk(chunk, deadline, self._delays())
        while state.items:
            started, delay = state.start(), None
            if started is not None:
                try:
                    async for msg in self._stub.BatchSolve(started[0], timeout=started[1], metadata=self._metadata):
                        out = state.answer(msg)
                        if out is not None:
                            yield out
                except grpc.RpcError as err:
                    delay = state.failed(err)
            if delay is not None:
                await asyncio.sleep(delay)
            for out in state.close():
                yield out


_calls.install(AsyncRankmapClient, _awaitable)
