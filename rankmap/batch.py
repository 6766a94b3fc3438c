"""Solve many jobs at once: in a local process pool or as Ray tasks.

::

    from rankmap.batch import solve_many

    docs = solve_many("jobs.yaml")                       # process pool, all usable CPUs
    docs = solve_many("jobs.yaml", executor="ray")       # a local Ray instance
    docs = solve_many(jobs, executor="ray", ray_address="auto")   # an existing Ray cluster

Each document is one line of ``rankmap batch`` output::

    {"index": 3, "name": "llama-64", "ok": True, "result": {...rankmap solve JSON...}}
    {"index": 4, "name": "bad", "ok": False, "error": {"type": ..., "message": ..., "field": ...}}

:func:`solve_many` returns them in input order; :func:`iter_solve_many`
yields them as jobs complete (what ``rankmap batch`` streams).  Both
executors give the same documents, byte for byte apart from ``solve_seconds``.

Executors
---------
``process``
    A :class:`concurrent.futures.ProcessPoolExecutor`; each worker reads its
    job's files itself and runs its share of the usable CPUs in BLAS threads
    (:func:`worker_pool`).
``ray``
    Each job is one Ray task.  Job files are read here, in the driver: each
    distinct cluster graph is put in the object store once and shared by
    every job on it, so the Ray workers need no access to the files (but do
    need rankmap installed).  Without ``ray_address`` a local Ray instance is
    started on ``workers`` CPUs (default: this machine's cores) and shut down
    at the end; an already initialised Ray (``ray.init`` in this process) is
    used as it is; ``ray_address="auto"`` joins the cluster named by
    ``RAY_ADDRESS`` (or the one ``ray start`` left running here), any other
    address is passed to ``ray.init``.  Ray is the optional extra
    ``pip install 'rankmap[ray]'``.
"""

from __future__ import annotations

import hashlib
import logging
import os
import pickle
import time
from concurrent import futures
from dataclasses import dataclass, field
from typing import Any, Iterator, Mapping

from rankmap.cpus import available_cpus
from rankmap.solver.errors import InvalidArgumentError, RankmapError

__all__ = [
    "EXECUTORS",
    "SolveJob",
    "solve_many",
    "iter_solve_many",
    "prepare_job",
    "run_entry",
    "error_document",
    "worker_pool",
    "ray_missing_message",
]

#: The executors :func:`solve_many` accepts.
EXECUTORS = ("process", "ray")
#: Ray tasks in flight per CPU of the Ray cluster (the rest wait in the driver, unprepared).
_RAY_TASKS_PER_CPU = 4


def ray_missing_message() -> str:
    """The one-line error when ``--executor ray`` is asked for without Ray installed."""
    return "--executor ray needs Ray, which is not installed: pip install 'rankmap[ray]'"


@dataclass
class SolveJob:
    """One job given in memory rather than as a job file entry.

    Attributes
    ----------
    graph : networkx.Graph
        The cluster (DESIGN §2).  Jobs that share one graph object share one
        copy in Ray's object store.
    cfg : ParallelConfig
        Parallel sizes (``rankmap.solver.parallel_config``).
    traffic : mapping class -> bytes per rank per step
    options : SolveOptions, optional
    name : str, optional
        Shown in the output; default ``job<index>``.
    """

    graph: Any
    cfg: Any
    traffic: Mapping[str, float]
    options: Any = None
    name: str | None = None


@dataclass
class _Item:
    index: int
    name: str
    job: dict | None = None  # a job-file entry, read by prepare_job
    prepared: tuple | None = None  # (graph, cfg, traffic, options)
    error: BaseException | None = None  # could not be read
    graph_key: Any = field(default=None, repr=False)


# --------------------------------------------------------------------------- one job


def prepare_job(job: dict):
    """``(graph, cfg, traffic, options)`` of a job dict, exactly as ``rankmap solve JOB.yaml``
    (:func:`rankmap.solver.job.resolve.resolve_job`; its warnings go where the command line's do)."""
    from rankmap.cli import warn
    from rankmap.solver.job.resolve import resolve_job

    return tuple(resolve_job(job, warn=warn))


def error_document(exc: BaseException) -> dict[str, Any]:
    """The ``error`` object of a failed job's JSON line."""
    out: dict[str, Any] = {"type": type(exc).__name__, "message": getattr(exc, "message", None) or str(exc)}
    if isinstance(exc, RankmapError):
        out["field"] = exc.field
    code = getattr(exc, "code", None)
    if code is not None and hasattr(code, "name"):
        out["code"] = code.name
    return out


def _failure(index: int, name: str, exc: BaseException) -> dict[str, Any]:
    return {"index": index, "name": name, "ok": False, "error": error_document(exc)}


def _internal_error(index: int, name: str, exc: BaseException) -> dict[str, Any]:
    return {"index": index, "name": name, "ok": False,
            "error": {"type": type(exc).__name__, "message": f"internal error: {exc}"}}


def solve_prepared(index: int, name: str, graph, cfg, traffic, options, omit_groups: bool = False) -> dict[str, Any]:
    """Solve one prepared job; the JSON line's document (bad input and infeasibility become failures)."""
    from rankmap.solver import solve

    try:
        result = solve(graph, cfg, traffic, options)
    except (RankmapError, OSError) as exc:
        return _failure(index, name, exc)
    doc = result.to_dict()
    if omit_groups:
        doc.pop("groups", None)
    return {"index": index, "name": name, "ok": True, "result": doc}


def run_entry(index: int, name: str, job: dict, omit_groups: bool = False) -> dict[str, Any]:
    """Read and solve one job-file entry in this process; the JSON line's document (never raises on bad input)."""
    try:
        graph, cfg, traffic, options = prepare_job(job)
    except (RankmapError, OSError) as exc:
        return _failure(index, name, exc)
    return solve_prepared(index, name, graph, cfg, traffic, options, omit_groups)


def _run_item(item: _Item, omit_groups: bool) -> dict[str, Any]:
    if item.prepared is not None:
        return solve_prepared(item.index, item.name, *item.prepared, omit_groups=omit_groups)
    return run_entry(item.index, item.name, item.job, omit_groups)


# --------------------------------------------------------------------------- input


def _items(jobs, base_dir: str | None) -> list[_Item]:
    """Normalise what :func:`solve_many` accepts into numbered items."""
    from rankmap.batch_input import Entry, job_from_entry, load_entries

    if isinstance(jobs, (str, os.PathLike)):
        jobs = load_entries(os.fspath(jobs))
    base = os.path.abspath(base_dir or os.getcwd())
    items: list[_Item] = []
    for i, j in enumerate(jobs):
        if isinstance(j, Entry):
            items.append(_Item(j.index, j.name, job=j.job, error=j.error))
        elif isinstance(j, SolveJob):
            from rankmap.solver.types import SolveOptions

            items.append(_Item(i, j.name or f"job{i}",
                               prepared=(j.graph, j.cfg, dict(j.traffic), j.options or SolveOptions()),
                               graph_key=("object", id(j.graph))))
        elif isinstance(j, Mapping):
            try:
                name, job = job_from_entry(dict(j), base, f"job {i}")
                items.append(_Item(i, name or f"job{i}", job=job))
            except RankmapError as exc:
                items.append(_Item(i, str(j.get("name") or f"job{i}"), error=exc))
        else:
            raise InvalidArgumentError(
                f"job {i}: expected a mapping of job keys, a SolveJob or a batch Entry, got {type(j).__name__}", "jobs"
            )
    return items


# --------------------------------------------------------------------------- executors


def _limit_worker_threads(threads: int) -> None:
    """Process-pool initializer: this worker's BLAS / OpenMP thread pools at ``threads`` threads.

    A forked worker inherits the parent's pools, sized for the whole process (rankmap.entry caps them
    at the CPUs it may use): ``workers`` solves at once would each run that many BLAS threads on the
    same CPUs.  threadpoolctl resizes the already loaded libraries (OpenBLAS, MKL, BLIS, OpenMP) in
    place; the limit stays for the worker's life.
    """
    from threadpoolctl import threadpool_limits

    global _WORKER_THREAD_LIMIT
    _WORKER_THREAD_LIMIT = threadpool_limits(limits=threads)


_WORKER_THREAD_LIMIT = None


def worker_pool(workers: int, cpus: int | None = None) -> futures.ProcessPoolExecutor:
    """A process pool of ``workers`` solves whose BLAS threads share the CPUs: ``max(1, cpus // workers)`` each.

    ``cpus`` defaults to :func:`~rankmap.cpus.available_cpus`.

    Raises
    ------
    ValueError
        If ``workers < 1``.
    """
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    threads = max(1, (available_cpus() if cpus is None else cpus) // workers)
    return futures.ProcessPoolExecutor(max_workers=workers, initializer=_limit_worker_threads, initargs=(threads,))


def _process_pool(items: list[_Item], workers: int, omit_groups: bool) -> Iterator[dict]:
    if workers <= 1 or len(items) <= 1:
        for it in items:
            try:
                yield _run_item(it, omit_groups)
            except Exception as exc:  # noqa: BLE001 - keep going, report it
                yield _internal_error(it.index, it.name, exc)
        return
    with worker_pool(min(workers, len(items))) as pool:
        pending = {pool.submit(_run_item, it, omit_groups): it for it in items}
        try:
            for fut in futures.as_completed(pending):
                it = pending[fut]
                try:
                    yield fut.result()
                except Exception as exc:  # noqa: BLE001 - a crashed worker is one failed job
                    yield _internal_error(it.index, it.name, exc)
        finally:
            for fut in pending:
                fut.cancel()


def _import_ray():
    try:
        import ray
    except ImportError:
        raise InvalidArgumentError(ray_missing_message(), "executor") from None
    return ray


def _start_ray(ray, address: str | None, workers: int | None) -> bool:
    """Connect to (or start) Ray; True when this call started it (and so must shut it down)."""
    if ray.is_initialized():
        return False
    quiet = dict(include_dashboard=False, logging_level=logging.ERROR, log_to_driver=False)
    try:
        if address is None:
            ray.init(address="local", num_cpus=workers or available_cpus(), **quiet)
        else:
            ray.init(address=address, **quiet)
    except Exception as exc:  # noqa: BLE001 - ConnectionError, ValueError, RuntimeError depending on the address
        where = "a local Ray instance" if address is None else f"Ray at {address!r}"
        msg = f"cannot start {where}" if address is None else f"cannot connect to {where}"
        detail = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise InvalidArgumentError(f"{msg}: {detail}", "ray_address") from None
    return True


def _graph_key(graph) -> str:
    """Content fingerprint of a graph (jobs read from the same file share one object-store copy)."""
    return hashlib.sha1(pickle.dumps(graph, protocol=pickle.HIGHEST_PROTOCOL)).hexdigest()


def _ray_failure(it: _Item, exc: BaseException) -> dict:
    cause = getattr(exc, "cause", None)  # RayTaskError wraps the task's own exception
    return _internal_error(it.index, it.name, cause if isinstance(cause, BaseException) else exc)


def _deadline_failure(it: _Item, timeout: float) -> dict:
    return {"index": it.index, "name": it.name, "ok": False,
            "error": {"type": "DeadlineExceeded", "message": f"the batch deadline ({timeout:g} s) passed before this job "
                                                             f"finished", "code": "DEADLINE_EXCEEDED"}}


def _ray_tasks(items: list[_Item], workers: int | None, address: str | None, omit_groups: bool,
               timeout: float | None) -> Iterator[dict]:
    ray = _import_ray()
    started = _start_ray(ray, address, workers)
    deadline = None if timeout is None else time.monotonic() + timeout
    pending: dict = {}  # ObjectRef -> _Item
    try:
        task = ray.remote(num_cpus=1)(solve_prepared)
        cpus = int(ray.cluster_resources().get("CPU", 1) or 1)
        in_flight = max(8, _RAY_TASKS_PER_CPU * cpus)
        graph_refs: dict = {}

        def drain(block: bool) -> Iterator[dict]:
            wait = 0.0
            if block:
                wait = None if deadline is None else max(0.0, deadline - time.monotonic())
            ready, _ = ray.wait(list(pending), num_returns=1 if block else len(pending), timeout=wait)
            if block and not ready:  # the deadline passed
                return
            for ref in ready:
                it = pending.pop(ref)
                try:
                    yield ray.get(ref)
                except Exception as exc:  # noqa: BLE001 - a task that raised or a worker that died: one failed job
                    yield _ray_failure(it, exc)

        for pos, it in enumerate(items):
            if deadline is not None and time.monotonic() >= deadline:
                for late in list(pending.values()) + items[pos:]:
                    yield _deadline_failure(late, timeout)
                return  # the pending tasks are cancelled below
            if it.prepared is None:
                try:
                    it.prepared = prepare_job(it.job)
                except (RankmapError, OSError) as exc:
                    yield _failure(it.index, it.name, exc)
                    continue
            graph, cfg, traffic, options = it.prepared
            key = it.graph_key if it.graph_key is not None else _graph_key(graph)
            ref = graph_refs.get(key)
            if ref is None:
                ref = graph_refs[key] = ray.put(graph)
            pending[task.remote(it.index, it.name, ref, cfg, traffic, options, omit_groups)] = it
            it.prepared = None  # the driver keeps only the shared object-store copy
            while len(pending) >= in_flight and (deadline is None or time.monotonic() < deadline):
                yield from drain(block=True)
            if pending:
                yield from drain(block=False)
        while pending and (deadline is None or time.monotonic() < deadline):
            yield from drain(block=True)
        for late in list(pending.values()):
            yield _deadline_failure(late, timeout)
    finally:
        for ref in pending:
            try:
                ray.cancel(ref, force=True)
            except Exception:  # noqa: BLE001 - best effort on the way out
                pass
        if started:
            ray.shutdown()


# --------------------------------------------------------------------------- API


def iter_solve_many(
    jobs,
    executor: str = "process",
    *,
    workers: int | None = None,
    ray_address: str | None = None,
    omit_groups: bool = False,
    base_dir: str | None = None,
    timeout: float | None = None,
) -> Iterator[dict[str, Any]]:
    """Solve every job; yield one document per job as it completes (jobs that cannot be read first).

    Parameters
    ----------
    jobs : str, path, or iterable
        A ``rankmap batch`` INPUT (folder of job YAML files, YAML list or
        JSONL file), or an iterable of job mappings (the keys of a ``rankmap
        solve`` job file plus ``name``; relative paths against ``base_dir``),
        :class:`SolveJob` objects or ``rankmap.batch_input.Entry`` objects.
    executor : ``"process"`` or ``"ray"``
        A local process pool, or one Ray task per job (see the module doc).
    workers : int, optional
        Processes of the pool, or CPUs of a local Ray instance started here
        (default: the CPUs this process may use).  Ignored when joining an existing Ray.
    ray_address : str, optional
        ``None`` (start a local instance unless Ray is already initialised),
        ``"auto"`` (the ``RAY_ADDRESS`` convention) or an address for ``ray.init``.
    omit_groups : bool
        Leave the group catalogue out of each result.
    base_dir : str, optional
        Where relative paths of in-memory job mappings start (default: the
        current directory).
    timeout : float, optional
        Ray only: seconds for the whole batch; jobs not finished by then are
        cancelled and reported as failures (``DeadlineExceeded``).

    Yields
    ------
    dict
        ``{"index", "name", "ok": True, "result"}`` or ``{"index", "name",
        "ok": False, "error": {"type", "message", "field"?}}``.

    Raises
    ------
    InvalidArgumentError
        An unknown executor, INPUT that cannot be read, Ray asked for but not
        installed, or a Ray that cannot be started or reached.
    """
    if executor not in EXECUTORS:
        raise InvalidArgumentError(f"executor {executor!r} is not one of {', '.join(EXECUTORS)}", "executor")
    if ray_address is not None and executor != "ray":
        raise InvalidArgumentError("ray_address is only for executor 'ray'", "ray_address")
    if executor == "ray":
        _import_ray()  # fail before reading anything
    items = _items(jobs, base_dir)
    for it in items:
        if it.error is not None:
            yield _failure(it.index, it.name, it.error)
    todo = [it for it in items if it.error is None]
    if not todo:
        return
    if executor == "ray":
        yield from _ray_tasks(todo, workers, ray_address, omit_groups, timeout)
    else:
        yield from _process_pool(todo, workers or available_cpus(), omit_groups)


def solve_many(jobs, executor: str = "process", **settings) -> list[dict[str, Any]]:
    """Solve every job and return the documents in input order.

    Same parameters (``workers``, ``ray_address``, ``omit_groups``, ``base_dir``
    and ``timeout``, keyword-only) and documents as :func:`iter_solve_many`,
    which yields them as they complete instead.  A failed job is a document
    with ``"ok": False`` and its ``error``; nothing is raised for it.
    """
    return sorted(iter_solve_many(jobs, executor, **settings), key=lambda d: d["index"])
