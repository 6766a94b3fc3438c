"""``rankmap.v1.RankmapService`` over the solver: a bounded pool, deadlines, status codes.

Every RPC's work (parsing the request, solving / evaluating / building groups,
encoding the answer) runs in one pool of ``workers`` threads, with up to
``max_queued`` more waiting; beyond that a call is refused at once with
RESOURCE_EXHAUSTED, so a flood of requests never takes the threads the health
service answers on.  Each call's deadline and cancellation reach the work
through a :class:`~rankmap.server.calls.CallGuard`: the solver's ``cancel``
event and check points in the conversion loops.  A call still queued when its
deadline passes leaves the queue at once.

Status codes (never INTERNAL for bad input; INTERNAL means a bug):

=====================  ===========================================================
INVALID_ARGUMENT       bad input, a request that does not parse, a request over a
                       limit (:mod:`rankmap.server.limits`); ``BadRequest`` detail
FAILED_PRECONDITION    infeasible constraints; ``PreconditionFailure`` detail
RESOURCE_EXHAUSTED     the queue is full; a request over ``--max-request-bytes``
                       (gRPC's own check); out of memory
DEADLINE_EXCEEDED      the deadline passed before any layout existed (the search
                       stops); a Solve whose deadline comes before its time
                       limit answers with the best layout found by then
                       (:mod:`rankmap.server.budget`, ``stopped_by: deadline``)
CANCELLED              the client cancelled (the search stops)
UNAVAILABLE            the server is draining (queued work, new calls)
UNAUTHENTICATED        no or a wrong bearer token (:mod:`rankmap.server.auth`)
=====================  ===========================================================
"""

from __future__ import annotations

import threading
import time
from concurrent import futures
from typing import Any, Callable, Iterator

import grpc
from grpc_status import rpc_status

from rankmap import wire
from rankmap.cpus import available_cpus
from rankmap.server.budget import call_budget
from rankmap.server.calls import Cancelled, CallGuard, exception_fields, log_request
from rankmap.server.registration import BadMessage, add_to_server
from rankmap.wire.costs import groups_to_proto
from rankmap.wire.errors import clip
from rankmap.server.limits import Limits, cap_time_limit, check_request
from rankmap.solver.errors import InfeasibleError, InvalidArgumentError
from rankmap.solver.types import SolveCancelled
from rankmap.v1 import rankmap_pb2_grpc

__all__ = ["RankmapServicer", "DEFAULT_MAX_QUEUED", "add_to_server"]

DEFAULT_MAX_QUEUED = 64


class _QueueFull(Exception):
    pass


class _Draining(Exception):
    """The server is shutting down: the work was not started."""


def _peer(context) -> str:
    try:
        return context.peer() or ""
    except Exception:  # noqa: BLE001 - a closed call
        return ""


class RankmapServicer(rankmap_pb2_grpc.RankmapServiceServicer):
    """``rankmap.v1.RankmapService`` over the solver, with a bounded pool and limits.

    Parameters
    ----------
    workers : int, optional
        Calls worked on at once (default: the CPUs this process may use, :func:`rankmap.cpus.available_cpus`).
    max_queued : int
        Calls that may wait for a worker; more are refused with RESOURCE_EXHAUSTED.
    limits : Limits, optional
        Per-request limits (default :class:`~rankmap.server.limits.Limits`).
    """

    def __init__(self, workers: int | None = None, max_queued: int = DEFAULT_MAX_QUEUED, limits: Limits | None = None):
        self.workers = max(1, int(workers or available_cpus()))
        self.max_queued = max(0, int(max_queued))
        self.limits = limits or Limits()
        self._pool = futures.ThreadPoolExecutor(max_workers=self.workers, thread_name_prefix="rankmap-work")
        self._cond = threading.Condition()
        self._pending = 0  # submitted to the pool and not finished (running + queued)
        self._futures: set[futures.Future] = set()
        self._streams = 0  # open BatchSolve streams
        self._draining = threading.Event()

    # ------------------------------------------------------------ the pool

    @property
    def capacity(self) -> int:
        """Calls that may be running or queued at once."""
        return self.workers + self.max_queued

    @property
    def draining(self) -> bool:
        """True once :meth:`begin_drain` was called."""
        return self._draining.is_set()

    def _submit(self, fn: Callable, *args, block_on: CallGuard | None = None) -> futures.Future:
        """Run ``fn`` in the pool; refuse (or, with ``block_on``, wait) when the queue is full."""
        with self._cond:
            while True:
                if self._draining.is_set():
                    raise _Draining()
                if self._pending < self.capacity:
                    break
                if block_on is None:
                    raise _QueueFull()
                block_on.check()
                self._cond.wait(0.1)
            self._pending += 1
            try:
                fut = self._pool.submit(fn, *args)
            except RuntimeError:  # the pool is shut down
                self._pending -= 1
                raise _Draining() from None
            self._futures.add(fut)
        fut.add_done_callback(self._done)
        return fut

    def _done(self, fut: futures.Future) -> None:
        with self._cond:
            self._pending -= 1
            self._futures.discard(fut)
            self._cond.notify_all()

    def _await(self, fut: futures.Future, guard: CallGuard):
        """The result of ``fut``; a call whose deadline passes while queued leaves the queue."""
        while True:
            try:
                result = fut.result(timeout=0.2)
            except futures.TimeoutError:
                try:
                    guard.check()
                except Cancelled:
                    if fut.cancel():  # not started: give its place back now
                        raise
                    # running: it sees the cancel at its next check point
                continue
            except futures.CancelledError:
                if self._draining.is_set():
                    raise _Draining() from None
                guard.check()
                raise Cancelled(False) from None
            guard.check()  # finished after the deadline: the client has gone, say so in the log
            return result

    def _run(self, fn: Callable, request, guard: CallGuard):
        return self._await(self._submit(fn, request, guard), guard)

    def begin_drain(self) -> None:
        """Refuse new work with UNAVAILABLE and answer queued (not started) work the same way."""
        self._draining.set()
        with self._cond:
            queued = list(self._futures)
        for fut in queued:
            fut.cancel()  # only the ones not started yet

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Wait until no work runs or waits; False on timeout."""
        end = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while self._pending > 0:
                left = None if end is None else end - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._cond.wait(left)
        return True

    def shutdown(self, wait: bool = True) -> None:
        """Stop the pool (queued work is dropped)."""
        self._draining.set()
        self._pool.shutdown(wait=wait, cancel_futures=True)

    # ------------------------------------------------------------ work items (run in the pool)

    def _solve_work(self, request, guard: CallGuard):
        from rankmap.solver import solve

        began = time.monotonic()
        guard.check()  # the deadline may have passed while queued
        if isinstance(request, BadMessage):
            raise request.error()
        check_request(request, self.limits)
        guard.mark("queued")
        job = wire.parse_solve_request(request, guard.check)
        guard.mark("request")  # the request read: the graph built
        explicit = request.HasField("time_limit_seconds")
        options = cap_time_limit(job.options, explicit, self.limits)
        guard.check()
        # the call's deadline less a margin bounds the search: the best layout found by then is the answer
        options, deadline = call_budget(options, explicit, guard.remaining(), job.cfg.world_size, guard.cancel,
                                        # a Solve's limit counts from the call's start, a batch item's from its own
                                        time.monotonic() - (began if guard.stream else guard.started))
        # the solve's phase boundaries (it only observes): "orders" follows the cluster model, "search" the
        # baseline and bound; the log line of the call then says where a deadline's time went (issue 28.1)
        after = {"orders": "cluster_model", "search": "baseline_bound"}

        def progress(phase, _best):
            if phase in after and after[phase] not in guard.stages:
                guard.mark(after[phase])

        try:
            result = solve(job.graph, job.cfg, job.traffic, options, cancel=guard.cancel, deadline=deadline,
                           progress=progress)
        except SolveCancelled:
            raise Cancelled(guard.deadline_hit) from None
        guard.mark("solve")  # the search and the result (groups, launch files)
        guard.check()
        msg = wire.result_to_proto(result, omit_groups=True)
        if job.measured is not None:  # measured rates (issue 27): notes and the hosts exclude_slow left out
            msg.warnings.extend(job.measured.warnings)
            msg.excluded_slow_hosts.extend(job.measured.slow_hosts)
        if not job.omit_groups:
            groups_to_proto(result.groups, msg.groups, guard.check)
        guard.mark("encode")
        return msg

    def _evaluate_work(self, request, guard: CallGuard):
        from rankmap.solver import evaluate

        guard.check()
        job = wire.parse_evaluate_request(request, guard.check)
        guard.check()
        cost = evaluate(job.graph, job.cfg, job.assignment, job.traffic, exposure=job.exposure, nccl=job.nccl)
        guard.check()
        if job.measured is None:
            return wire.evaluate_response(cost, job.traffic)
        from rankmap.solver.fabric.cluster import cluster_from_graph
        from rankmap.solver.cost.measured_use import measured_links_used

        cl = cluster_from_graph(job.graph, check=guard.check, nccl=job.nccl)
        index = cl.device_index()
        used = measured_links_used(cl, job.cfg, [index[a] for a in job.assignment], job.traffic)
        return wire.evaluate_response(cost, job.traffic, used, job.measured.warnings)

    def _groups_work(self, request, guard: CallGuard):
        from rankmap.solver import megatron_groups

        guard.check()
        cfg = wire.parse_get_groups_request(request)
        guard.check()
        groups = megatron_groups(cfg)
        return wire.get_groups_response(cfg, groups, guard.check)

    def _import_work(self, request, guard: CallGuard):
        from rankmap.wire.importer import import_cluster

        guard.check()
        return import_cluster(request, self.limits.max_world_size, guard.check)

    def _budget(self, options, explicit: bool, world_size: int, guard: CallGuard):
        """``(options, Deadline)`` of a call's work: as a Solve's (:func:`~rankmap.server.budget.call_budget`),
        the time limit capped by the server's, counted from the call's start, and the deadline less a margin."""
        options = cap_time_limit(options, explicit, self.limits)
        return call_budget(options, explicit, guard.remaining(), world_size, guard.cancel,
                           time.monotonic() - guard.started)

    def _check_work(self, request, guard: CallGuard):
        from rankmap.solver.allocation.check import DEFAULT_CHECK_SECONDS, check_allocation
        from rankmap.solver.types import SolveOptions

        guard.check()
        job = wire.parse_check_request(request, guard.check)
        limit = min(job.time_limit_seconds or DEFAULT_CHECK_SECONDS, float(self.limits.max_time_limit))
        # the best-layout solve: the budget of a Solve of that limit (the call's deadline less the margin)
        options, deadline = self._budget(SolveOptions(time_limit_seconds=limit), bool(job.time_limit_seconds),
                                         job.cfg.world_size, guard)
        guard.check()
        try:
            result = check_allocation(job.graph, job.cfg, job.assignment, job.traffic, job.within,
                                      exposure=job.exposure, best=job.best, time_limit_seconds=options.time_limit_seconds,
                                      seed=job.seed, cancel=guard.cancel, cluster=job.cluster, deadline=deadline)
        except SolveCancelled:
            raise Cancelled(guard.deadline_hit) from None
        guard.check()
        return wire.check_response(result)

    def _recommend_work(self, request, guard: CallGuard):
        from rankmap.solver.allocation.request import recommend_allocation

        guard.check()
        args, kwargs = wire.parse_recommend_request(request, guard.check)
        return wire.advice_response(recommend_allocation(*args, **kwargs))
    def _repair_work(self, request, guard: CallGuard):
        from rankmap.solver.errors import RankmapError
        from rankmap.solver.job.repair import repair

        guard.check()
        try:
            job = wire.parse_repair_request(request, guard.check)
            options, deadline = self._budget(job.options, job.time_limit_given, job.cfg.world_size, guard)
            guard.check()
            result = repair(job.graph, job.cfg, job.traffic, job.running, job.failed_hosts, job.failed_gpus,
                            job.spare_hosts, job.max_moves, options, job.orders, cancel=guard.cancel,
                            deadline=deadline)
        except SolveCancelled:
            raise Cancelled(guard.deadline_hit) from None
        except RankmapError as exc:
            raise wire.job_error(exc, "Repair") from None
        guard.check()
        return wire.repair_to_proto(result)

    def _compare_work(self, request, guard: CallGuard):
        from rankmap.solver.errors import RankmapError
        from rankmap.solver.job.compare import compare

        guard.check()
        try:
            job = wire.parse_compare_request(request, guard.check)
            options, deadline = self._budget(job.options, job.time_limit_given, job.cfg.world_size, guard)
            guard.check()
            result = compare(job.graph, job.cfg, job.traffic, job.allocations, options, cancel=guard.cancel,
                             deadline=deadline)
        except SolveCancelled:
            raise Cancelled(guard.deadline_hit) from None
        except RankmapError as exc:
            raise wire.job_error(exc, "Compare") from None
        guard.check()
        return wire.compare_to_proto(result)

    # ------------------------------------------------------------ status codes

    def _outcome(self, exc: BaseException, guard: CallGuard, method: str):
        """``(code, message, rich google.rpc.Status or None, log fields)`` for an exception."""
        C = grpc.StatusCode
        if isinstance(exc, _QueueFull):
            return C.RESOURCE_EXHAUSTED, (
                f"server busy: {self.workers} calls running and {self.max_queued} queued; retry later"
            ), None, {}
        if isinstance(exc, _Draining):
            return C.UNAVAILABLE, "server is shutting down; the call was not started: retry", None, {}
        if isinstance(exc, InvalidArgumentError):
            status = rpc_status.to_status(wire.error_status(C.INVALID_ARGUMENT.value[0], exc, method))
            return C.INVALID_ARGUMENT, exc.message, status, {"field": clip(wire.error_fields(exc, method)[0], 160)}
        if isinstance(exc, InfeasibleError):
            status = rpc_status.to_status(wire.error_status(C.FAILED_PRECONDITION.value[0], exc, method))
            return C.FAILED_PRECONDITION, exc.message, status, {}
        if isinstance(exc, (Cancelled, SolveCancelled)):
            deadline = getattr(exc, "deadline", guard.deadline_hit)
            if deadline:
                return C.DEADLINE_EXCEEDED, "deadline exceeded: the work was stopped", None, {}
            return C.CANCELLED, "cancelled: the work was stopped", None, {}
        if isinstance(exc, MemoryError):
            return C.RESOURCE_EXHAUSTED, "out of memory: the request is too large for this server", None, {}
        return C.INTERNAL, f"internal error: {type(exc).__name__}: {exc}", None, exception_fields(exc)

    def _handle(self, method: str, request, context, fn: Callable):
        t0 = time.perf_counter()
        code = grpc.StatusCode.OK
        fields: dict[str, Any] = {}
        guard = CallGuard(context)
        try:
            if isinstance(request, BadMessage):
                raise request.error()
            check_request(request, self.limits)
            return self._run(fn, request, guard)
        except Exception as exc:  # noqa: BLE001 - every failure becomes a status code
            code, message, status, fields = self._outcome(exc, guard, method)
            fields["error"] = message
            if status is not None:
                context.abort_with_status(status)
            context.abort(code, clip(message))
        finally:
            guard.close()
            described = {} if isinstance(request, BadMessage) else wire.describe_request(request)
            if guard.stages:  # seconds since the call's start at which each stage ended
                fields["stages"] = dict(guard.stages)
            log_request(method, _peer(context), code, time.perf_counter() - t0, **described, **fields)

    # ------------------------------------------------------------ RPCs

    def Solve(self, request, context):
        """Solve one placement (runs in the pool)."""
        return self._handle("Solve", request, context, self._solve_work)

    def Evaluate(self, request, context):
        """Cost of a given layout (runs in the pool)."""
        return self._handle("Evaluate", request, context, self._evaluate_work)

    def GetGroups(self, request, context):
        """Megatron's process groups (runs in the pool)."""
        return self._handle("GetGroups", request, context, self._groups_work)

    def ImportCluster(self, request, context):
        """A topology file given as text -> the Cluster message (runs in the pool)."""
        return self._handle("ImportCluster", request, context, self._import_work)

    def Check(self, request, context):
        """A granted allocation: straddling groups, cost vs the best on its hosts (runs in the pool)."""
        return self._handle("Check", request, context, self._check_work)

    def RecommendAllocation(self, request, context):
        """The Slurm / Kueue / Volcano request for a job (runs in the pool)."""
        return self._handle("RecommendAllocation", request, context, self._recommend_work)
    def Repair(self, request, context):
        """The patch, pinned and full repairs of a running layout after failures (runs in the pool)."""
        return self._handle("Repair", request, context, self._repair_work)

    def Compare(self, request, context):
        """One job solved on each candidate allocation, best first (runs in the pool)."""
        return self._handle("Compare", request, context, self._compare_work)

    def BatchSolve(self, request, context) -> Iterator:
        """Solve many requests, streaming each answer (tagged with its index) as it completes.

        At most ``workers`` items of one stream are in the pool at once.  An item's
        bad input or infeasibility is that item's answer; the deadline, a cancel or
        the server draining end the stream (draining: UNAVAILABLE after the
        running items were answered, so a client retries the others elsewhere).
        """
        t0 = time.perf_counter()
        guard = CallGuard(context)
        guard.stream = True
        code = grpc.StatusCode.OK
        fields: dict[str, Any] = {"ok": 0, "failed": 0}
        opened = False
        try:
            if isinstance(request, BadMessage):
                raise request.error()
            check_request(request, self.limits)
            n = len(request.requests)
            with self._cond:
                if n and (self._pending >= self.capacity or self._streams >= self.capacity):
                    raise _QueueFull()
                self._streams += 1
                opened = True
            inflight: dict[futures.Future, int] = {}
            nxt = 0
            not_started = 0
            while nxt < n or inflight:
                while nxt < n and len(inflight) < self.workers and not self._draining.is_set():
                    guard.check()
                    fut = self._submit(self._solve_work, request.requests[nxt], guard, block_on=guard)
                    inflight[fut] = nxt
                    nxt += 1
                if self._draining.is_set() and not inflight:
                    break
                done, _ = futures.wait(list(inflight), timeout=0.25, return_when=futures.FIRST_COMPLETED)
                guard.check()
                for fut in sorted(done, key=inflight.get):
                    index = inflight.pop(fut)
                    if fut.cancelled():  # drained before it started
                        not_started += 1
                        continue
                    try:
                        msg = fut.result()
                    except (Cancelled, SolveCancelled):
                        guard.check()
                        raise
                    except Exception as exc:  # noqa: BLE001 - one failed item must not end the stream
                        item_code, message, _, item_fields = self._outcome(exc, guard, "BatchSolve")
                        fields["failed"] += 1
                        if item_code == grpc.StatusCode.INTERNAL:
                            log_request("BatchSolve", _peer(context), item_code, time.perf_counter() - t0,
                                        index=index, error=message, **item_fields)
                        yield wire.batch_error(index, exc, item_code.value[0])
                    else:
                        fields["ok"] += 1
                        yield wire.batch_result(index, msg)
            if nxt < n or not_started:
                raise _Draining()
        except Exception as exc:  # noqa: BLE001 - every failure becomes a status code
            code, message, status, extra = self._outcome(exc, guard, "BatchSolve")
            fields.update(extra)
            fields["error"] = message
            guard.cancel.set()  # stop whatever of the batch still runs
            if status is not None:
                context.abort_with_status(status)
            context.abort(code, clip(message))
        finally:
            guard.cancel.set()
            guard.close()
            if opened:
                with self._cond:
                    self._streams -= 1
            described = {} if isinstance(request, BadMessage) else wire.describe_request(request)
            log_request("BatchSolve", _peer(context), code, time.perf_counter() - t0, **described, **fields)
