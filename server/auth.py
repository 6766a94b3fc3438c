"""Transport security and authentication of ``rankmap serve``.

* TLS: :func:`server_credentials` from PEM files (``--tls-cert``, ``--tls-key``);
  with ``--tls-client-ca`` every client must present a certificate signed by
  that CA (mutual TLS).
* Bearer token: :class:`TokenAuth`, a server interceptor that admits a call only
  when its ``authorization`` metadata is ``Bearer <token>`` for one of the
  tokens of ``--auth-token-file`` (one per line: several allow a rotation).
  Tokens are compared as SHA-256 digests with :func:`hmac.compare_digest`, all of
  them every time, so the time taken says nothing about a token.  The health
  service stays open for load-balancer probes; everything else, reflection
  included, answers UNAUTHENTICATED without a valid token, before the request
  body is even parsed.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import time
from typing import Iterable, Sequence

import grpc

from rankmap.server.calls import log_request

__all__ = ["TokenAuth", "read_tokens", "read_pem", "server_credentials", "OPEN_PREFIXES"]

#: Method prefixes that need no token (load-balancer and Kubernetes probes).
OPEN_PREFIXES: tuple[str, ...] = ("/grpc.health.v1.Health/",)


def read_pem(path: str | os.PathLike, what: str) -> bytes:
    """The bytes of a PEM file; ``ValueError`` naming ``what`` when it is not PEM."""
    with open(path, "rb") as fh:
        data = fh.read()
    if b"-----BEGIN " not in data:
        raise ValueError(f"{what} {os.fspath(path)!r} is not a PEM file")
    return data


def read_tokens(path: str | os.PathLike) -> list[str]:
    """The tokens of a token file: one per non-empty line, surrounding blanks stripped.

    Raises
    ------
    ValueError
        When the file holds no token, or a token with inner whitespace.
    """
    with open(path, encoding="utf-8") as fh:
        tokens = [line.strip() for line in fh if line.strip()]
    if not tokens:
        raise ValueError(f"auth token file {os.fspath(path)!r} holds no token")
    for t in tokens:
        if any(ch.isspace() for ch in t):
            raise ValueError(f"auth token file {os.fspath(path)!r}: a token contains whitespace")
    return tokens


def server_credentials(cert: bytes, key: bytes, client_ca: bytes | None = None) -> grpc.ServerCredentials:
    """TLS credentials; with ``client_ca`` clients must present a certificate it signed."""
    return grpc.ssl_server_credentials(
        [(key, cert)], root_certificates=client_ca, require_client_auth=client_ca is not None
    )


def _digest(value: bytes) -> bytes:
    return hashlib.sha256(value).digest()


class TokenAuth(grpc.ServerInterceptor):
    """Admit calls carrying ``authorization: Bearer <token>`` for one of ``tokens``.

    Parameters
    ----------
    tokens : sequence of str
    open_prefixes : method-name prefixes admitted without a token (the health service).
    """

    def __init__(self, tokens: Sequence[str], open_prefixes: Iterable[str] = OPEN_PREFIXES):
        if not tokens:
            raise ValueError("TokenAuth needs at least one token")
        self._digests = [_digest(t.encode("utf-8")) for t in tokens]
        self._open = tuple(open_prefixes)

    def authorized(self, metadata) -> bool:
        """Whether ``metadata`` (key, value pairs) carries a valid bearer token."""
        value = ""
        for key, val in metadata or ():
            if key == "authorization":
                value = val if isinstance(val, str) else val.decode("latin-1")
                break
        scheme, _, token = value.strip().partition(" ")
        given = _digest(token.strip().encode("utf-8"))
        ok = False
        for d in self._digests:  # every token, whatever matched: constant time
            ok |= hmac.compare_digest(given, d)
        return ok and scheme.lower() == "bearer"

    def intercept_service(self, continuation, handler_call_details):
        """Pass authorised (and open) calls on; answer the rest UNAUTHENTICATED."""
        method = handler_call_details.method
        if method.startswith(self._open) or self.authorized(handler_call_details.invocation_metadata):
            return continuation(handler_call_details)
        handler = continuation(handler_call_details)
        if handler is None:
            return None  # unknown method: gRPC answers UNIMPLEMENTED
        name = method.rsplit("/", 1)[-1]

        def deny(_request, context):
            t0 = time.perf_counter()
            message = "missing or invalid bearer token: send metadata 'authorization: Bearer <token>'"
            log_request(name, context.peer(), grpc.StatusCode.UNAUTHENTICATED, time.perf_counter() - t0, error=message)
            context.abort(grpc.StatusCode.UNAUTHENTICATED, message)

        # the request body is never parsed (no deserializer): an unauthenticated
        # caller costs the server no more than reading its bytes
        if handler.request_streaming and handler.response_streaming:
            return grpc.stream_stream_rpc_method_handler(deny)
        if handler.request_streaming:
            return grpc.stream_unary_rpc_method_handler(deny)
        if handler.response_streaming:
            return grpc.unary_stream_rpc_method_handler(deny)
        return grpc.unary_unary_rpc_method_handler(deny)
