"""Shared by the sync and asyncio clients: the client state, retries, TLS credentials,
tokens, batch items and the bookkeeping of a BatchSolve stream.

Requests and answers are built and read by :mod:`rankmap.wire`; each call's pair lives in
:mod:`rankmap.client._calls`.  What differs between the two clients is only how they wait
(blocking or ``await``).
"""

from __future__ import annotations

import os
import random
import time
from typing import Any, Iterable, Iterator

import grpc

from rankmap import wire
from rankmap.solver.errors import InvalidArgumentError, RankmapError
from rankmap.wire.errors import RankmapRpcError, error_from_rpc

__all__ = [
    "RankmapRpcError",
    "DEFAULT_TIMEOUT",
    "DEFAULT_RETRIES",
    "ClientBase",
    "BatchChunk",
    "backoff_delays",
    "retry_delay",
    "batch_items",
    "chunk_requests",
    "channel_credentials",
    "auth_metadata",
]

#: Default per-call deadline, seconds.
DEFAULT_TIMEOUT = 300.0
#: Default retries on UNAVAILABLE (so up to DEFAULT_RETRIES + 1 attempts).
DEFAULT_RETRIES = 4
#: A BatchSolve stream carries at most this many request bytes (split beyond).
MAX_BATCH_BYTES = 256 << 20


def backoff_delays(retries: int, initial: float, maximum: float, multiplier: float = 2.0) -> Iterable[float]:
    """Exponential backoff with full jitter: ``retries`` delays in seconds."""
    delay = initial
    for _ in range(retries):
        yield random.uniform(0.5 * delay, delay)
        delay = min(maximum, delay * multiplier)


def retry_delay(err: grpc.RpcError, delays, deadline: float) -> float | None:
    """Seconds to wait before retrying a failed call, or None to give up: only UNAVAILABLE is
    retried, while ``delays`` (an iterator of :func:`backoff_delays`) lasts and the wait ends
    before ``deadline`` (a ``time.monotonic()`` instant)."""
    if err.code() != grpc.StatusCode.UNAVAILABLE:
        return None
    delay = next(delays, None)
    if delay is not None and deadline - time.monotonic() > delay:
        return delay
    return None


def batch_items(requests: Iterable) -> tuple[list[tuple[int, Exception]], list[tuple[int, Any]]]:
    """``(refused, pending)`` of ``batch_solve`` items: ``(index, InvalidArgumentError)`` for
    items that do not make a request, ``(index, SolveRequest)`` for the others
    (see :func:`rankmap.wire.solve_kwargs_request`)."""
    refused: list[tuple[int, Exception]] = []
    pending: list[tuple[int, Any]] = []
    for index, item in enumerate(requests):
        try:
            pending.append((index, wire.solve_kwargs_request(item)))
        except RankmapError as exc:
            refused.append((index, exc))
    return refused, pending


def chunk_requests(items: list[tuple[int, Any]], max_bytes: int = MAX_BATCH_BYTES):
    """Split (index, request) pairs into lists whose serialized size stays under ``max_bytes``."""
    chunk: list[tuple[int, Any]] = []
    size = 0
    for index, req in items:
        n = req.ByteSize() + 8
        if chunk and size + n > max_bytes:
            yield chunk
            chunk, size = [], 0
        chunk.append((index, req))
        size += n
    if chunk:
        yield chunk


def _pem_bytes(value, what: str) -> bytes | None:
    if value is None:
        return None
    if isinstance(value, bytes):
        return value
    with open(value, "rb") as fh:
        data = fh.read()
    if b"-----BEGIN " not in data:
        raise InvalidArgumentError(f"{what} {os.fspath(value)!r} is not a PEM file", "tls_ca")
    return data


def channel_credentials(
    tls: bool | None = None, tls_ca=None, tls_cert=None, tls_key=None
) -> grpc.ChannelCredentials | None:
    """TLS credentials of a client channel, or None for plaintext.

    TLS is used when ``tls`` is true or any of the files is given: ``tls_ca``
    (path or PEM bytes) is the CA that signed the server's certificate (default:
    the system's roots); ``tls_cert`` / ``tls_key`` a client certificate for
    mutual TLS.
    """
    if not (tls or tls_ca is not None or tls_cert is not None or tls_key is not None):
        return None
    if (tls_cert is None) != (tls_key is None):
        raise InvalidArgumentError("a client certificate needs its key (tls_cert and tls_key)", "tls_key")
    return grpc.ssl_channel_credentials(
        root_certificates=_pem_bytes(tls_ca, "TLS CA"),
        private_key=_pem_bytes(tls_key, "TLS key"),
        certificate_chain=_pem_bytes(tls_cert, "TLS certificate"),
    )


def auth_metadata(token: str | None = None, token_file=None) -> tuple[tuple[str, str], ...] | None:
    """``(("authorization", "Bearer TOKEN"),)`` from a token or the first token of a file; None without."""
    if token is None and token_file is not None:
        with open(token_file, encoding="utf-8") as fh:
            lines = [line.strip() for line in fh if line.strip()]
        if not lines:
            raise InvalidArgumentError(f"token file {os.fspath(token_file)!r} holds no token", "token_file")
        token = lines[0]
    if token is None:
        return None
    token = token.strip()
    if not token or any(ch.isspace() for ch in token):
        raise InvalidArgumentError("an auth token must be non-empty and without whitespace", "token")
    return (("authorization", f"Bearer {token}"),)


class BatchChunk:
    """One chunk of a ``batch_solve`` across the streams (retries) it takes.

    Per stream: :meth:`start` (the items not answered yet), :meth:`answer` for each
    message, :meth:`failed` if the stream raised, :meth:`close` when it ended.  Every
    index is answered exactly once.
    """

    def __init__(self, chunk: list[tuple[int, Any]], deadline: float, delays):
        self.items = list(chunk)
        self.deadline = deadline
        self._delays = delays
        self._indices: list[int] = []
        self._seen: set[int] = set()
        self._failure: Exception | None = None
        self._retry = False

    def start(self):
        """``(BatchSolveRequest of the items left, seconds left)``; None once the deadline has
        passed (the items left then fail with DEADLINE_EXCEEDED)."""
        self._indices = [i for i, _ in self.items]
        self._seen, self._failure, self._retry = set(), None, False
        left = self.deadline - time.monotonic()
        if left <= 0:
            self._failure = RankmapRpcError(grpc.StatusCode.DEADLINE_EXCEEDED, "deadline exceeded")
            return None
        return wire.batch_request(r for _, r in self.items), left

    def answer(self, msg) -> tuple[int, Any] | None:
        """``(index, SolveResult or exception)`` of one ``BatchSolveResponse``; None for an
        index out of range or already answered."""
        pos = int(msg.index)
        if pos < 0 or pos >= len(self._indices) or pos in self._seen:
            return None
        self._seen.add(pos)
        return self._indices[pos], wire.batch_outcome(msg)

    def answers(self, stream) -> Iterator[tuple[int, Any]]:
        """:meth:`answer` of every message of a (blocking) response stream, skipping the None ones.

        A ``grpc.RpcError`` the stream raises passes through (the caller's :meth:`failed`).
        """
        for msg in stream:
            out = self.answer(msg)
            if out is not None:
                yield out

    def failed(self, err: grpc.RpcError) -> float | None:
        """The stream raised ``err``: seconds to wait before the retry, or None (no retry: the
        items left fail with ``err``'s exception)."""
        delay = retry_delay(err, self._delays, self.deadline)
        self._retry = delay is not None
        if delay is None:
            self._failure = error_from_rpc(err)
        return delay

    def close(self) -> list[tuple[int, Exception]]:
        """The stream ended: ``(index, exception)`` for the items that then get no answer (all
        that are left after a failure, or when the server ended the stream early and there is
        no retry); :attr:`items` is what the next stream carries."""
        self.items = [item for pos, item in enumerate(self.items) if pos not in self._seen]
        failure = self._failure
        if failure is None and not self._retry and self.items:
            failure = RankmapRpcError(grpc.StatusCode.INTERNAL, "the server ended the stream without an answer")
        if failure is None:
            return []
        out = [(index, failure) for index, _ in self.items]
        self.items = []
        return out


class ClientBase:
    """The state both clients share: target, deadlines, retries, channel, stubs, token.

    Parameters are those of :class:`rankmap.client.RankmapClient`; a subclass sets
    ``_channels`` to the module that opens its channels (``grpc`` or ``grpc.aio``).
    """

    _channels: Any = grpc

    def __init__(
        self,
        target: str,
        timeout: float = DEFAULT_TIMEOUT,
        retries: int = DEFAULT_RETRIES,
        backoff_initial: float = 0.1,
        backoff_max: float = 5.0,
        channel=None,
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
                channel = self._channels.insecure_channel(target, options=wire.channel_options())
            else:
                channel = self._channels.secure_channel(target, creds, options=wire.channel_options())
        self._channel = channel
        self._stub = wire.service_stub(self._channel)
        self._health = None

    def _deadline(self, timeout: float | None) -> float:
        return time.monotonic() + (self.timeout if timeout is None else timeout)

    def _delays(self):
        return iter(backoff_delays(self.retries, self.backoff_initial, self.backoff_max))

    def _start(self, call):
        """``(request, stub method, deadline, retry delays)`` of a :class:`~rankmap.client._calls.Call`
        (building the request raises for bad arguments)."""
        request = call.build()
        if call.health:
            if self._health is None:
                self._health = wire.health_stub(self._channel)
            rpc = getattr(self._health, call.method)
        else:
            rpc = getattr(self._stub, call.method)
        return request, rpc, self._deadline(call.timeout), self._delays()

    @staticmethod
    def _retry_or_raise(err: grpc.RpcError, delays, deadline: float) -> float:
        """Seconds to wait before retrying after ``err``; raises its exception when there is
        no retry (see :func:`retry_delay`, :func:`rankmap.wire.error_from_rpc`)."""
        delay = retry_delay(err, delays, deadline)
        if delay is None:
            raise error_from_rpc(err) from None
        return delay

    @staticmethod
    def _remaining(deadline: float) -> float:
        """Seconds left before ``deadline``; raises DEADLINE_EXCEEDED when none are."""
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise RankmapRpcError(grpc.StatusCode.DEADLINE_EXCEEDED, "deadline exceeded before the call was made")
        return remaining
