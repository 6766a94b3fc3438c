"""Blocking Python client of ``rankmap.v1.RankmapService``.

::

    from rankmap.client import RankmapClient

    with RankmapClient("127.0.0.1:50051") as client:
        result = client.solve(graph, tp=2, pp=4, traffic={"tp": 4e9, "dp": 1e9})
        print(result.order, result.assignment, result.cost.total_seconds)

Methods take an ``nx.Graph`` and plain Python values and return the solver's
own types (:class:`~rankmap.solver.results.SolveResult`,
:class:`~rankmap.solver.results.CostBreakdown`, ``dict`` of numpy arrays),
converted by :mod:`rankmap.wire` exactly as the server reads them; each call's
request and answer are defined once in :mod:`rankmap.client._calls`, this module
only does the blocking transport.  UNAVAILABLE is retried with exponential
backoff (``retries`` times) within the call's deadline; INVALID_ARGUMENT raises
:class:`~rankmap.solver.errors.InvalidArgumentError` and FAILED_PRECONDITION
:class:`~rankmap.solver.errors.InfeasibleError` (``field`` as the in-process
call would set it, ``proto_field`` the request path); anything else raises
:class:`RankmapRpcError`.
"""

from __future__ import annotations

import time
from typing import Iterable, Iterator

import grpc

from rankmap.solver.results import SolveResult

from . import _calls
from ._common import BatchChunk, ClientBase, RankmapRpcError, batch_items, chunk_requests

__all__ = ["RankmapClient", "RankmapRpcError"]


def _blocking(spec):
    def method(self, *args, **kwargs):
        return self._unary(spec(*args, **kwargs))

    return method


class RankmapClient(ClientBase):
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

    Methods (one per RPC, built by :mod:`rankmap.client._calls`): :meth:`health`,
    :meth:`solve`, :meth:`solve_config`, :meth:`solve_request`, :meth:`import_cluster`,
    :meth:`evaluate`, :meth:`evaluate_config`, :meth:`get_groups`, :meth:`get_groups_with_config`, :meth:`check`,
    :meth:`recommend_allocation`, :meth:`repair`, :meth:`compare`, :meth:`batch_solve`.
    """

    _channels = grpc

    def close(self) -> None:
        """Close the channel (unless it was given)."""
        if self._own_channel:
            self._channel.close()

    def __enter__(self) -> "RankmapClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _unary(self, call: _calls.Call):
        """Run a unary call with retries on UNAVAILABLE inside one overall deadline."""
        request, rpc, deadline, delays = self._start(call)
        while True:
            try:
                answer = rpc(request, timeout=self._remaining(deadline), metadata=self._metadata)
            except grpc.RpcError as err:
                time.sleep(self._retry_or_raise(err, delays, deadline))
                continue
            return call.decode(answer)

    def wait_until_ready(self, timeout: float | None = None) -> None:
        """Block until the channel is connected (raises RankmapRpcError UNAVAILABLE on timeout)."""
        try:
            grpc.channel_ready_future(self._channel).result(timeout=self.timeout if timeout is None else timeout)
        except grpc.FutureTimeoutError:
            raise RankmapRpcError(grpc.StatusCode.UNAVAILABLE, f"{self.target} not reachable") from None

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
        refused, pending = batch_items(requests)
        yield from refused
        deadline = self._deadline(timeout)
        for chunk in chunk_requests(pending):
            yield from self._batch_chunk(chunk, deadline)

    def _batch_chunk(self, chunk, deadline: float):
        state = BatchChunk(chunk, deadline, self._delays())
        while state.items:
            started, delay = state.start(), None
            if started is not None:
                try:
                    yield from state.answers(self._stub.BatchSolve(started[0], timeout=started[1],
                                                                   metadata=self._metadata))
                except grpc.RpcError as err:
                    delay = state.failed(err)
            if delay is not None:
                time.sleep(delay)
            yield from state.close()


_calls.install(RankmapClient, _blocking)
