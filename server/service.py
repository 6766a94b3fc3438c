"""The rankmap gRPC service: a thin servicer over :mod:`rankmap.solver`.

``serve()`` starts a ``grpc.server`` with

* ``rankmap.v1.RankmapService`` (Solve, Evaluate, GetGroups, BatchSolve);
* the standard health service ``grpc.health.v1.Health`` (SERVING once started,
  NOT_SERVING while draining) and server reflection;
* message size limits of 1 GiB each way (a 131,072-GPU cluster is ~10 MB);
* a bounded solve pool: ``workers`` solves run at once (CP-SAT releases the
  GIL, one search thread per solve), up to ``max_queued`` more wait; beyond
  that a request is refused with RESOURCE_EXHAUSTED.  Request parsing, the
  solve and the encoding of the answer all run in the pool.

Errors: :class:`~rankmap.solver.errors.InvalidArgumentError` -> INVALID_ARGUMENT
with a ``google.rpc.BadRequest`` field violation (field = the proto path,
description = the CLI's message) and a ``google.rpc.ErrorInfo`` whose metadata
``argument`` is the CLI spelling of the field; ``InfeasibleError`` ->
FAILED_PRECONDITION (``PreconditionFailure`` + ``ErrorInfo``); the deadline or a
client cancel sets the solve's ``cancel`` event -> DEADLINE_EXCEEDED /
CANCELLED.  Every request logs one JSON line on the ``rankmap.server`` logger:
``{"method", "sizes", "gpus", "code", "seconds", ...}``.

Protobuf messages are only built and read through :mod:`rankmap.server.convert`.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
import traceback
from concurrent import futures
from typing import Any, Callable, Iterator

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection
from grpc_status import rpc_status

from rankmap.server import convert
from rankmap.solver.errors import InfeasibleError, InvalidArgumentError, RankmapError
from rankmap.solver.types import SolveCancelled
from rankmap.v1 import rankmap_pb2_grpc

__all__ = [
    "SERVICE_NAME",
    "MAX_MESSAGE_BYTES",
    "DEFAULT_PORT",
    "DEFAULT_MAX_QUEUED",
    "RankmapServicer",
    "RankmapServer",
    "serve",
    "channel_options",
]

log = logging.getLogger("rankmap.server")

#: Full name of the service, as reflection lists it.
SERVICE_NAME: str = convert.pb.DESCRIPTOR.services_by_name["RankmapService"].full_name
#: Send and receive limit: admits a 131,072-GPU cluster with room to spare.
MAX_MESSAGE_BYTES = 1 << 30
DEFAULT_PORT = 50051
DEFAULT_MAX_QUEUED = 64


def channel_options() -> list[tuple[str, Any]]:
    """gRPC channel/server options shared by the server and the client (message limits)."""
    return [
        ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
        ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    ]


class _QueueFull(Exception):
    pass


class _Cancelled(Exception):
    """The RPC's deadline passed (``deadline=True``) or the client cancelled it."""

    def __init__(self, deadline: bool):
        super().__init__("deadline exceeded" if deadline else "cancelled")
        self.deadline = deadline


class _CallGuard:
    """The ``cancel`` event of one RPC: set by the deadline timer or the RPC's end."""

    def __init__(self, context: grpc.ServicerContext):
        self.cancel = threading.Event()
        self.deadline_hit = False
        self._timer: threading.Timer | None = None
        context.add_callback(self.cancel.set)  # client cancel, or the RPC finished
        remaining = context.time_remaining()
        if remaining is not None:
            self._timer = threading.Timer(max(0.0, remaining), self._on_deadline)
            self._timer.daemon = True
            self._timer.start()

    def _on_deadline(self) -> None:
        self.deadline_hit = True
        self.cancel.set()

    def check(self) -> None:
        if self.cancel.is_set():
            raise _Cancelled(self.deadline_hit)

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()


def _rich_status(code: grpc.StatusCode, exc: RankmapError, rpc: str) -> grpc.Status:
    return rpc_status.to_status(convert.error_status(code.value[0], exc, rpc))


class RankmapServicer(rankmap_pb2_grpc.RankmapServiceServicer):
    """``rankmap.v1.RankmapService`` over the solver, with a bounded solve pool."""

    def __init__(self, workers: int | None = None, max_queued: int = DEFAULT_MAX_QUEUED):
        self.workers = max(1, int(workers or os.cpu_count() or 1))
        self.max_queued = max(0, int(max_queued))
        self._pool = futures.ThreadPoolExecutor(max_workers=self.workers, thread_name_prefix="rankmap-solve")
        self._cond = threading.Condition()
        self._pending = 0  # submitted to the pool and not finished (running + queued)

    # ------------------------------------------------------------ the pool

    @property
    def capacity(self) -> int:
        """Solves that may be running or queued at once."""
        return self.workers + self.max_queued

    def _submit(self, fn: Callable, *args, block_on: _CallGuard | None = None) -> futures.Future:
        """Run ``fn`` in the pool; refuse (or, with ``block_on``, wait) when the queue is full."""
        with self._cond:
            while self._pending >= self.capacity:
                if block_on is None:
                    raise _QueueFull()
                block_on.check()
                self._cond.wait(0.1)
            self._pending += 1
        try:
            fut = self._pool.submit(fn, *args)
        except BaseException:
            self._done()
            raise
        fut.add_done_callback(lambda _f: self._done())
        return fut

    def _done(self) -> None:
        with self._cond:
            self._pending -= 1
            self._cond.notify_all()

    def shutdown(self, wait: bool = True) -> None:
        self._pool.shutdown(wait=wait, cancel_futures=True)

    # ------------------------------------------------------------ work items (run in the pool)

    @staticmethod
    def _solve_work(request, guard: _CallGuard):
        from rankmap.solver import solve

        guard.check()  # the deadline may have passed while queued
        job = convert.parse_solve_request(request)
        try:
            result = solve(job.graph, job.cfg, job.traffic, job.options, cancel=guard.cancel)
        except SolveCancelled:
            raise _Cancelled(guard.deadline_hit) from None
        return convert.result_to_proto(result, omit_groups=job.omit_groups)

    @staticmethod
    def _evaluate_work(request, guard: _CallGuard):
        from rankmap.solver import evaluate

        guard.check()
        job = convert.parse_evaluate_request(request)
        cost = evaluate(job.graph, job.cfg, job.assignment, job.traffic, exposure=job.exposure)
        return convert.evaluate_response(cost, job.traffic)

    # ------------------------------------------------------------ error handling and logging

    def _handle(self, method: str, request, context, work: Callable[[_CallGuard], Any]):
        t0 = time.perf_counter()
        code = grpc.StatusCode.OK
        extra: dict[str, Any] = {}
        guard = _CallGuard(context)
        try:
            return work(guard)
        except _QueueFull:
            code = grpc.StatusCode.RESOURCE_EXHAUSTED
            context.abort(code, f"server busy: {self.workers} solves running and {self.max_queued} queued; retry later")
        except InvalidArgumentError as exc:
            code = grpc.StatusCode.INVALID_ARGUMENT
            extra["field"] = convert.error_fields(exc, method)[0]
            context.abort_with_status(_rich_status(code, exc, method))
        except InfeasibleError as exc:
            code = grpc.StatusCode.FAILED_PRECONDITION
            context.abort_with_status(_rich_status(code, exc, method))
        except (_Cancelled, SolveCancelled) as exc:
            deadline = getattr(exc, "deadline", guard.deadline_hit)
            code = grpc.StatusCode.DEADLINE_EXCEEDED if deadline else grpc.StatusCode.CANCELLED
            context.abort(code, "deadline exceeded: solve stopped" if deadline else "cancelled: solve stopped")
        except Exception as exc:  # a bug: report INTERNAL, keep serving
            code = grpc.StatusCode.INTERNAL
            extra["error"] = f"{type(exc).__name__}: {exc}"
            log.error("internal error in %s:\n%s", method, traceback.format_exc())
            context.abort(code, f"internal error: {type(exc).__name__}: {exc}")
        finally:
            guard.close()
            self._log(method, request, code, time.perf_counter() - t0, extra)

    @staticmethod
    def _log(method: str, request, code: grpc.StatusCode, seconds: float, extra: dict) -> None:
        if not log.isEnabledFor(logging.INFO):
            return
        entry = {"method": method, **convert.describe_request(request), "code": code.name, "seconds": round(seconds, 6)}
        entry.update(extra)
        log.info(json.dumps(entry, separators=(",", ":")))

    # ------------------------------------------------------------ RPCs

    def Solve(self, request, context):
        return self._handle(
            "Solve", request, context, lambda g: self._submit(self._solve_work, request, g).result()
        )

    def Evaluate(self, request, context):
        return self._handle(
            "Evaluate", request, context, lambda g: self._submit(self._evaluate_work, request, g).result()
        )

    def GetGroups(self, request, context):
        def work(guard):
            from rankmap.solver import megatron_groups

            cfg = convert.parse_get_groups_request(request)
            return convert.get_groups_response(cfg, megatron_groups(cfg))

        return self._handle("GetGroups", request, context, work)

    def BatchSolve(self, request, context) -> Iterator:
        t0 = time.perf_counter()
        guard = _CallGuard(context)
        code = grpc.StatusCode.OK
        counts = {"ok": 0, "failed": 0}
        try:
            n = len(request.requests)
            with self._cond:
                if n and self._pending >= self.capacity:
                    code = grpc.StatusCode.RESOURCE_EXHAUSTED
            if code != grpc.StatusCode.OK:
                context.abort(code, f"server busy: {self.workers} solves running and {self.max_queued} queued; retry later")
            window = self.workers  # at most this many of the batch in the pool at once
            inflight: dict[futures.Future, int] = {}
            nxt = 0
            while nxt < n or inflight:
                while nxt < n and len(inflight) < window:
                    guard.check()
                    fut = self._submit(self._solve_work, request.requests[nxt], guard, block_on=guard)
                    inflight[fut] = nxt
                    nxt += 1
                done, _ = futures.wait(list(inflight), timeout=0.5, return_when=futures.FIRST_COMPLETED)
                guard.check()
                for fut in sorted(done, key=inflight.get):
                    index = inflight.pop(fut)
                    try:
                        msg = fut.result()
                        counts["ok"] += 1
                        yield convert.pb.BatchSolveResponse(index=index, result=msg)
                    except (_Cancelled, SolveCancelled):
                        guard.check()
                        raise
                    except InvalidArgumentError as exc:
                        counts["failed"] += 1
                        err = convert.error_to_proto(exc, grpc.StatusCode.INVALID_ARGUMENT.value[0], "BatchSolve")
                        yield convert.pb.BatchSolveResponse(index=index, error=err)
                    except InfeasibleError as exc:
                        counts["failed"] += 1
                        err = convert.error_to_proto(exc, grpc.StatusCode.FAILED_PRECONDITION.value[0], "BatchSolve")
                        yield convert.pb.BatchSolveResponse(index=index, error=err)
                    except Exception as exc:  # noqa: BLE001 - one failed item must not end the stream
                        counts["failed"] += 1
                        log.error("internal error in BatchSolve[%d]:\n%s", index, traceback.format_exc())
                        err = convert.error_to_proto(exc, grpc.StatusCode.INTERNAL.value[0], "BatchSolve")
                        yield convert.pb.BatchSolveResponse(index=index, error=err)
        except (_Cancelled, SolveCancelled) as exc:
            deadline = getattr(exc, "deadline", guard.deadline_hit)
            code = grpc.StatusCode.DEADLINE_EXCEEDED if deadline else grpc.StatusCode.CANCELLED
            guard.cancel.set()
            context.abort(code, "deadline exceeded: batch stopped" if deadline else "cancelled: batch stopped")
        finally:
            guard.cancel.set()  # stop whatever of the batch is still running
            guard.close()
            self._log("BatchSolve", request, code, time.perf_counter() - t0, counts)


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
    """

    def __init__(self, server, servicer, health_servicer, host: str, port: int):
        self.server = server
        self.servicer = servicer
        self.health = health_servicer
        self.host = host
        self.port = port
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

    def stop(self, grace: float | None = 10.0) -> threading.Event:
        """Drain, refuse new RPCs, let running ones finish for ``grace`` seconds, then stop."""
        self.drain()
        done = self.server.stop(grace)

        def finish():
            done.wait()
            self.servicer.shutdown(wait=False)
            self._stopped.set()

        threading.Thread(target=finish, name="rankmap-stop", daemon=True).start()
        return done

    def wait_for_termination(self, timeout: float | None = None) -> bool:
        return self.server.wait_for_termination(timeout)

    def __enter__(self) -> "RankmapServer":
        return self

    def __exit__(self, *exc) -> None:
        self.stop(grace=None).wait()


def serve(
    host: str = "127.0.0.1",
    port: int = DEFAULT_PORT,
    workers: int | None = None,
    max_queued: int = DEFAULT_MAX_QUEUED,
) -> RankmapServer:
    """Start the service on ``host:port`` (``port=0``: any free port) and return it.

    Parameters
    ----------
    workers : int, optional
        Solves running at once (default: the CPU count).
    max_queued : int
        Solves that may wait for a worker; more are refused with RESOURCE_EXHAUSTED.

    Raises
    ------
    OSError
        When the address cannot be bound.
    """
    servicer = RankmapServicer(workers=workers, max_queued=max_queued)
    # one handler thread per admissible solve, plus spares for health, GetGroups and refusals
    handlers = futures.ThreadPoolExecutor(
        max_workers=servicer.capacity + 16, thread_name_prefix="rankmap-rpc"
    )
    server = grpc.server(handlers, options=channel_options() + [("grpc.so_reuseport", 0)])
    rankmap_pb2_grpc.add_RankmapServiceServicer_to_server(servicer, server)
    health_servicer = health.HealthServicer(experimental_non_blocking=True)
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    reflection.enable_server_reflection(
        (SERVICE_NAME, health.SERVICE_NAME, reflection.SERVICE_NAME), server
    )
    bind_host = f"[{host}]" if ":" in host and not host.startswith("[") else host
    try:
        bound = server.add_insecure_port(f"{bind_host}:{int(port)}")
    except RuntimeError as exc:
        servicer.shutdown(wait=False)
        raise OSError(f"cannot listen on {bind_host}:{port}: {exc}") from None
    if not bound:
        servicer.shutdown(wait=False)
        raise OSError(f"cannot listen on {bind_host}:{port}")
    server.start()
    for name in ("", SERVICE_NAME):
        health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
    log.info(
        json.dumps(
            {"event": "serving", "host": host, "port": bound, "workers": servicer.workers, "max_queued": servicer.max_queued},
            separators=(",", ":"),
        )
    )
    return RankmapServer(server, servicer, health_servicer, host, bound)
