"""One RPC's bookkeeping: its deadline and cancel event, and its JSON log line.

:class:`CallGuard` holds the ``cancel`` event handed to the solver; it is set
when the client cancels, when the RPC ends, or when the deadline passes (one
shared timer thread for all calls, not a thread per call).  Long loops call
:meth:`CallGuard.check`, which raises :class:`Cancelled` as soon as either
happened.  A call without a deadline (gRPC reports a remaining time of years)
has no timer.

:func:`log_request` writes the one JSON line per request on the
``rankmap.server`` logger: no traceback ever reaches the log; an unexpected
exception is a field (``exception``: type and message, ``where``: the
innermost frame).
"""

from __future__ import annotations

import heapq
import itertools
import json
import logging
import threading
import time
import traceback
from typing import Any

from rankmap.wire.errors import clip

__all__ = ["Cancelled", "CallGuard", "log_request", "log_event", "exception_fields", "LOG"]

LOG = logging.getLogger("rankmap.server")

#: Remaining times beyond this are "no deadline" (gRPC reports ~292 years).
_NO_DEADLINE = 1e7


class Cancelled(Exception):
    """The RPC's deadline passed (``deadline=True``) or the client cancelled it."""

    def __init__(self, deadline: bool):
        super().__init__("deadline exceeded" if deadline else "cancelled")
        self.deadline = deadline


class _Timers:
    """One daemon thread that fires callbacks at monotonic times."""

    def __init__(self):
        self._heap: list[tuple[float, int, Any]] = []
        self._cond = threading.Condition()
        self._ids = itertools.count()
        self._thread: threading.Thread | None = None

    def add(self, when: float, fn) -> list:
        entry = [fn]  # cancel by clearing it
        with self._cond:
            heapq.heappush(self._heap, (when, next(self._ids), entry))
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="rankmap-deadlines", daemon=True)
                self._thread.start()
            self._cond.notify()
        return entry

    def _run(self) -> None:
        while True:
            with self._cond:
                while True:
                    # drop cancelled entries so the heap does not grow with finished calls
                    while self._heap and not self._heap[0][2]:
                        heapq.heappop(self._heap)
                    now = time.monotonic()
                    if self._heap and self._heap[0][0] <= now:
                        _, _, entry = heapq.heappop(self._heap)
                        break
                    self._cond.wait(None if not self._heap else min(60.0, self._heap[0][0] - now))
            fn = entry[0] if entry else None
            if fn is not None:
                try:
                    fn()
                except Exception:  # noqa: BLE001 - a timer callback must not kill the timer thread
                    pass


_TIMERS = _Timers()


class CallGuard:
    """The ``cancel`` event and deadline of one RPC.

    Parameters
    ----------
    context : grpc.ServicerContext
        The RPC; its remaining time and its end (client cancel included) set ``cancel``.
    """

    def __init__(self, context):
        self.started = time.monotonic()
        self.stream = False  # a BatchSolve stream: each item's time limit counts from the item's start
        self.cancel = threading.Event()
        self.deadline_hit = False
        self.deadline: float | None = None
        self._timer: list | None = None
        #: Seconds since the call started at which each stage of the work ended (``mark``), for the log line.
        self.stages: dict[str, float] = {}
        remaining = context.time_remaining()
        if remaining is not None and remaining < _NO_DEADLINE:
            self.deadline = time.monotonic() + max(0.0, remaining)
            self._timer = _TIMERS.add(self.deadline, self._on_deadline)
        context.add_callback(self.cancel.set)  # client cancel, or the RPC finished

    def _on_deadline(self) -> None:
        self.deadline_hit = True
        self.cancel.set()

    def remaining(self) -> float | None:
        """Seconds left before the call's deadline (0.0 once passed); None when it has none."""
        if self.deadline is None:
            return None
        return max(0.0, self.deadline - time.monotonic())

    def mark(self, stage: str) -> None:
        """Record that ``stage`` ended now (seconds since the call started, in :attr:`stages`)."""
        self.stages[stage] = round(time.monotonic() - self.started, 3)

    def check(self) -> None:
        """Raise :class:`Cancelled` if the call was cancelled or its deadline passed."""
        if self.deadline is not None and not self.deadline_hit and time.monotonic() >= self.deadline:
            self._on_deadline()
        if self.cancel.is_set():
            raise Cancelled(self.deadline_hit)

    def close(self) -> None:
        """Forget the deadline timer (the call is over)."""
        if self._timer is not None:
            self._timer.clear()
            self._timer = None


def exception_fields(exc: BaseException) -> dict[str, str]:
    """``{"exception": "Type: message", "where": "file.py:123 in func"}`` for a log line."""
    out = {"exception": clip(f"{type(exc).__name__}: {' '.join(str(exc).split())}")}
    tb = traceback.extract_tb(exc.__traceback__) if exc.__traceback__ is not None else None
    if tb:
        frame = tb[-1]
        out["where"] = f"{frame.filename.rsplit('/', 1)[-1]}:{frame.lineno} in {frame.name}"
    return out


def _emit(level: int, entry: dict[str, Any]) -> None:
    if LOG.isEnabledFor(level):
        LOG.log(level, json.dumps(entry, separators=(",", ":"), default=str))


def log_request(method: str, peer: str, code, seconds: float, **fields: Any) -> None:
    """One JSON line for a finished request: method, peer, status code, duration, then ``fields``."""
    entry: dict[str, Any] = {"method": method, "peer": peer, "code": code.name, "seconds": round(seconds, 6)}
    for k, v in fields.items():
        if v is None:
            continue
        entry[k] = clip(v) if isinstance(v, str) else v
    _emit(logging.ERROR if code.name == "INTERNAL" else logging.INFO, entry)


def log_event(event: str, level: int = logging.INFO, **fields: Any) -> None:
    """One JSON line for a server event (serving, draining, stopped)."""
    _emit(level, {"event": event, **fields})
