"""Shared by the sync and asyncio clients: retries, TLS credentials, tokens, batch chunks.

Requests and answers are built and read by :mod:`rankmap.wire`."""

from __future__ import annotations

import os
import random
from typing import Any, Iterable

import grpc
from rankmap.solver.errors import InvalidArgumentError
from rankmap.wire.errors import RankmapRpcError, error_from_batch, error_from_rpc
from rankmap.wire.requests import TOPOLOGY_FORMATS, import_cluster_request, solve_kwargs_request
from rankmap.wire.results import import_cluster_graph

__all__ = [
    "RankmapRpcError",
    "DEFAULT_TIMEOUT",
    "DEFAULT_RETRIES",
    "error_from_rpc",
    "error_from_batch",
    "backoff_delays",
    "solve_kwargs_request",
    "chunk_requests",
    "channel_credentials",
    "auth_metadata",
    "import_cluster_request",
    "import_cluster_graph",
    "TOPOLOGY_FORMATS",
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
