"""The rankmap gRPC service: ``serve()`` and the running :class:`RankmapServer`.

``serve()`` starts a ``grpc.server`` with

* ``rankmap.v1.RankmapService`` (Solve, Evaluate, GetGroups, BatchSolve), the
  servicer of :mod:`rankmap.server.servicer`: every call's work in one bounded
  pool, deadlines and cancels reaching the work, status codes as documented
  there;
* per-request limits (:mod:`rankmap.server.limits`): world size, request bytes,
  BatchSolve length, the search time a client may ask for;
* the standard health service ``grpc.health.v1.Health`` (SERVING once started,
  NOT_SERVING from the first moment of a drain) and server reflection;
* optional TLS (mutual with a client CA) and bearer-token authentication
  (:mod:`rankmap.server.auth`); the health service needs no token.

Draining (:meth:`RankmapServer.stop`, ``rankmap serve`` on SIGTERM): health
reports NOT_SERVING, the server keeps serving for ``drain_delay`` seconds so
load balancers notice, then refuses new calls, answers queued (not started)
work with UNAVAILABLE, gives running work ``grace`` seconds, and stops.

Every request logs one JSON line on the ``rankmap.server`` logger (method,
peer, code, seconds, sizes, error); see :mod:`rankmap.server.calls`.
Protobuf messages are only built and read through :mod:`rankmap.wire`.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import threading
from concurrent import futures
from typing import Sequence

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from rankmap.server.auth import TokenAuth, read_pem, server_credentials
from rankmap.server.calls import log_event
from rankmap.server.limits import Limits
from rankmap.server.servicer import DEFAULT_MAX_QUEUED, RankmapServicer, add_to_server
from rankmap.wire.channel import MAX_MESSAGE_BYTES, SERVICE_NAME

__all__ = [
    "SERVICE_NAME",
    "MAX_MESSAGE_BYTES",
    "DEFAULT_PORT",
    "DEFAULT_MAX_QUEUED",
    "DEFAULT_GRACE",
    "DEFAULT_DRAIN_DELAY",
    "Limits",
    "RankmapServicer",
    "RankmapServer",
    "serve",
]

log = logging.getLogger("rankmap.server")

DEFAULT_PORT = 50051
#: Seconds running calls get to finish when the server stops (``--grace``).
DEFAULT_GRACE = 30.0
#: Seconds between NOT_SERVING and refusing calls (``--drain-delay``).
DEFAULT_DRAIN_DELAY = 5.0


def _is_loopback(host: str) -> bool:
    h = host.strip("[]")
    if h == "localhost":
        return True
    try:
        return ipaddress.ip_address(h).is_loopback
    except ValueError:
        return False


class RankmapServer:
    """A running rankmap gRPC server (what :func:`serve` returns).

    Attributes
    ----------
    server : grpc.Server
    servicer : RankmapServicer
    health : grpc_health.v1.health.HealthServicer
    host : str
    port : int
        The bound port (useful with ``port=0``).
    tls : bool
        Whether the port speaks TLS.
    """

    def __init__(self, server, servicer, health_servicer, host: str, port: int, tls: bool = False):
        self.server = server
        self.servicer = servicer
        self.health = health_servicer
        self.host = host
        self.port = port
        self.tls = tls
        self._lock = threading.Lock()
        self._stopping: threading.Thread | None = None
        self._skip_delay = threading.Event()
        self._stopped = threading.Event()

    @property
    def address(self) -> str:
        """``host:port`` to give a client."""
        host = "127.0.0.1" if self.host in ("0.0.0.0", "") else ("[::1]" if self.host in ("::", "[::]") else self.host)
        if ":" in host and not host.startswith("["):
            host = f"[{host}]"
        return f"{host}:{self.port}"

    def drain(self) -> None:
        """Report NOT_SERVING on the health service (load balancers stop sending)."""
        self.health.enter_graceful_shutdown()

    def stop(self, grace: float | None = 10.0, drain_delay: float = 0.0) -> threading.Event:
        """Drain and stop; returns an event set once the server has stopped.

        1. health reports NOT_SERVING (at once, before this returns);
        2. calls are still served for ``drain_delay`` seconds (load balancers
           notice the health change);
        3. new calls are refused and queued (not started) work is answered
           UNAVAILABLE; running calls get ``grace`` seconds (``None``: none),
           then they are cancelled;
        4. the event is set.

        Calling it again while a stop is under way skips what is left of the
        drain delay and cancels running calls now.
        """
        with self._lock:
            if self._stopping is not None:
                self._skip_delay.set()
                self.servicer.begin_drain()
                self.server.stop(0)
                return self._stopped
            self.drain()
            log_event("draining", logging.WARNING, drain_delay_seconds=drain_delay, grace_seconds=grace)

            def run():
                if drain_delay and drain_delay > 0:
                    self._skip_delay.wait(drain_delay)
                self.servicer.begin_drain()
                done = self.server.stop(grace)
                done.wait()
                self.servicer.shutdown(wait=False)
                log_event("stopped", logging.WARNING)
                self._stopped.set()

            self._stopping = threading.Thread(target=run, name="rankmap-stop", daemon=True)
            self._stopping.start()
            return self._stopped

    def wait_for_termination(self, timeout: float | None = None) -> bool:
        """Block until the server stopped (or ``timeout``); True if it did."""
        return self.server.wait_for_termination(timeout)

    def __enter__(self) -> "RankmapServer":
        return self

    def __exit__(self, *exc) -> None:
        self.stop(grace=None).wait()


def _pem(value, what: str) -> bytes | None:
    if value is None:
        return None
    if isinstance(value, bytes):
        return value
    return read_pem(value, what)


def serve(
    host: str = "127.0.0.1",
    port: int = DEFAULT_PORT,
    workers: int | None = None,
    max_queued: int = DEFAULT_MAX_QUEUED,
    *,
    limits: Limits | None = None,
    tls_cert: str | os.PathLike | bytes | None = None,
    tls_key: str | os.PathLike | bytes | None = None,
    tls_client_ca: str | os.PathLike | bytes | None = None,
    auth_tokens: Sequence[str] | None = None,
) -> RankmapServer:
    """Start the service on ``host:port`` (``port=0``: any free port) and return it.

    Parameters
    ----------
    workers, max_queued, limits
        As for :class:`~rankmap.server.servicer.RankmapServicer` (calls worked on at once,
        calls that may wait for a worker, per-request limits).
    tls_cert, tls_key : path or PEM bytes, optional
        Serve TLS with this certificate chain and private key (both or neither).
    tls_client_ca : path or PEM bytes, optional
        Require client certificates signed by this CA (mutual TLS; needs ``tls_cert``).
    auth_tokens : sequence of str, optional
        Require ``authorization: Bearer <token>`` with one of these on every call
        but the health service's.

    Raises
    ------
    OSError
        When the address cannot be bound or a PEM file cannot be read.
    ValueError
        For an inconsistent TLS setup or a file that is not PEM.
    """
    if (tls_cert is None) != (tls_key is None):
        raise ValueError("TLS needs both a certificate and its private key (--tls-cert and --tls-key)")
    if tls_client_ca is not None and tls_cert is None:
        raise ValueError("a client CA (--tls-client-ca) needs TLS (--tls-cert and --tls-key)")
    credentials = None
    if tls_cert is not None:
        credentials = server_credentials(
            _pem(tls_cert, "TLS certificate"), _pem(tls_key, "TLS key"), _pem(tls_client_ca, "TLS client CA")
        )
    limits = limits or Limits()
    interceptors = [TokenAuth(list(auth_tokens))] if auth_tokens else []
    servicer = RankmapServicer(workers=workers, max_queued=max_queued, limits=limits)
    # threads that wait on the pool: admitted unary calls and open BatchSolve
    # streams (each at most ``capacity``), plus spares for health and refusals
    handlers = futures.ThreadPoolExecutor(max_workers=2 * servicer.capacity + 16, thread_name_prefix="rankmap-rpc")
    options = [
        ("grpc.max_receive_message_length", int(limits.max_request_bytes)),
        ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
        ("grpc.so_reuseport", 0),
    ]
    server = grpc.server(handlers, interceptors=interceptors, options=options)
    add_to_server(servicer, server)
    health_servicer = health.HealthServicer(experimental_non_blocking=True)
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    reflection.enable_server_reflection((SERVICE_NAME, health.SERVICE_NAME, reflection.SERVICE_NAME), server)
    bind_host = f"[{host}]" if ":" in host and not host.startswith("[") else host
    address = f"{bind_host}:{int(port)}"
    try:
        bound = server.add_secure_port(address, credentials) if credentials else server.add_insecure_port(address)
    except RuntimeError as exc:
        servicer.shutdown(wait=False)
        raise OSError(f"cannot listen on {address}: {exc}") from None
    if not bound:
        servicer.shutdown(wait=False)
        raise OSError(f"cannot listen on {address}")
    server.start()
    for name in ("", SERVICE_NAME):
        health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
    log_event(
        "serving",
        host=host,
        port=bound,
        workers=servicer.workers,
        max_queued=servicer.max_queued,
        tls=credentials is not None,
        mutual_tls=tls_client_ca is not None,
        auth_token=bool(auth_tokens),
        max_world_size=limits.max_world_size,
        max_request_bytes=limits.max_request_bytes,
        max_batch_length=limits.max_batch_length,
        max_time_limit=limits.max_time_limit,
    )
    if not _is_loopback(host) and (credentials is None or not auth_tokens):
        log_event(
            "exposed",
            logging.WARNING,
            message=f"listening on {host} "
            + ("without TLS" if credentials is None else "")
            + (" and " if credentials is None and not auth_tokens else "")
            + ("without an auth token" if not auth_tokens else "")
            + ": anyone who can reach the port can use it",
        )
    return RankmapServer(server, servicer, health_servicer, host, bound, tls=credentials is not None)
