"""The wall-clock deadline of one solve (DESIGN §5: the time limit bounds the whole solve).

``solve`` creates one :class:`Deadline` when it starts and passes it down to every
phase (cluster model, orders, CP-SAT models, polish, local search).  The
deterministic work budgets of those phases (CP-SAT's ``max_deterministic_time``,
move and evaluation counts) decide the answer; the deadline is only a safety
stop.  A phase that stops because the deadline passed calls :meth:`Deadline.hit`,
and the result then says ``stopped_by = "time_limit"`` and never claims OPTIMAL
unless the analytic lower bound meets the cost.

Tests force a stop without timing by giving a deadline a fake ``clock`` or a
zero limit.
"""

from __future__ import annotations

import threading
import time
from typing import Callable

from ..types import SolveCancelled

__all__ = ["Deadline", "TIME_LIMIT", "CALL_DEADLINE", "SEARCH_FRACTION", "search_seconds", "load_reserve"]

#: ``SolveResult.stopped_by`` of a search the wall clock stopped before its work budget completed.
TIME_LIMIT = "time_limit"
#: ``SolveResult.stopped_by`` of a search stopped by the caller's deadline (a gRPC deadline shorter
#: than the time limit), before the time limit: the best layout found by then is the answer.
CALL_DEADLINE = "deadline"


#: The search stops at this fraction of the time limit, less a reserve for the step running
#: then (at most one real-objective evaluation, ``LAST_STEP_SECONDS_PER_RANK``) and the
#: result (``RESULT_SECONDS_PER_RANK``), so that a solve ends before the limit at every scale.
SEARCH_FRACTION = 0.95
#: The step running at the stop, seconds per rank: one real-objective evaluation on a loaded
#: machine at 131,072 ranks (measured about 15 µs per rank; twice that).
LAST_STEP_SECONDS_PER_RANK = 3e-5
#: Building the result after the search (groups, costs, launch data), seconds per rank (measured
#: at 131,072 ranks on this project's 2-core machine: 3.5 s with a load average of 4, issue 28.1;
#: 1.5e-5 before, which a 30 s limit overran by 2.5 s under that load).
RESULT_SECONDS_PER_RANK = 2.5e-5
#: The reserve never takes more than this share of the limit.
RESERVE_MAX_SHARE = 0.4
#: The cluster model's nominal seconds per GPU (measured at 131,072 GPUs on this project's 2-core
#: machine with a load average of 2-3: 3.4-4.5 s).  A cluster model that takes k times this tells the
#: search that the machine is k times slower than the reserve assumes (:func:`load_reserve`).
CLUSTER_MODEL_SECONDS_PER_RANK = 3e-5
#: :func:`load_reserve` applies from this many ranks (below, the reserve is milliseconds).
LOAD_RESERVE_MIN_RANKS = 16_384


def search_seconds(time_limit_seconds: float, world_size: int) -> float:
    """Wall-clock seconds the search may run in a solve of ``time_limit_seconds`` on ``world_size`` ranks.

    ``SEARCH_FRACTION`` of the limit less the reserve for the last step and the result
    (``(LAST_STEP_SECONDS_PER_RANK + RESULT_SECONDS_PER_RANK) · world_size``, at most
    ``RESERVE_MAX_SHARE`` of the limit): about 7.2 s of a 30 s limit at 131,072 ranks, a few
    milliseconds at 512.
    """
    T = float(time_limit_seconds)
    reserve = min(RESERVE_MAX_SHARE * T, (LAST_STEP_SECONDS_PER_RANK + RESULT_SECONDS_PER_RANK) * max(int(world_size), 1))
    return max(0.0, T * SEARCH_FRACTION - reserve)


def load_reserve(time_limit_seconds: float, world_size: int, model_seconds: float) -> float:
    """Seconds to stop the search earlier on a machine slower than the reserve assumes (issue 28.1).

    The step running at the stop and building the result take the reserve of :func:`search_seconds`
    on this project's machine; when the cluster model took ``model_seconds``, ``k = model_seconds /
    (CLUSTER_MODEL_SECONDS_PER_RANK · world_size)`` times its nominal time, they take about ``k``
    times their reserve too: ``(k - 1) · reserve`` more, at most ``RESERVE_MAX_SHARE`` of the limit;
    0 below ``LOAD_RESERVE_MIN_RANKS`` ranks or when ``k <= 1``.  (30 s limit at 131,072 GPUs with a
    load average of 3.5: the answer came 5 s after the limit with the fixed reserve.)
    """
    W = max(int(world_size), 1)
    if W < LOAD_RESERVE_MIN_RANKS:
        return 0.0
    k = float(model_seconds) / (CLUSTER_MODEL_SECONDS_PER_RANK * W)
    if k <= 1.0:
        return 0.0
    T = float(time_limit_seconds)
    base = min(RESERVE_MAX_SHARE * T, (LAST_STEP_SECONDS_PER_RANK + RESULT_SECONDS_PER_RANK) * W)
    return min(RESERVE_MAX_SHARE * T, (k - 1.0) * base)


class Deadline:
    """A point in wall-clock time after which a solve stops searching, plus its cancel event.

    Parameters
    ----------
    seconds : float
        Time from now (seconds, >= 0) until the deadline.
    cancel : threading.Event, optional
        Set it to stop the solve at the next check point (:class:`SolveCancelled`).
    clock : callable returning seconds, optional
        Monotonic clock (default ``time.monotonic``); tests inject a fake one.
    reason : str
        What :attr:`stopped_by` says once a phase stopped at this deadline: :data:`TIME_LIMIT`
        (default) or :data:`CALL_DEADLINE` (the caller's deadline came before the time limit).

    Attributes
    ----------
    stopped : bool
        Whether some phase stopped early because the deadline passed.
    """

    def __init__(
        self,
        seconds: float,
        cancel: threading.Event | None = None,
        clock: Callable[[], float] | None = None,
        reason: str = TIME_LIMIT,
    ) -> None:
        if reason not in (TIME_LIMIT, CALL_DEADLINE):
            raise ValueError(f"reason must be {TIME_LIMIT!r} or {CALL_DEADLINE!r}, got {reason!r}")
        self.reason = reason
        self._clock = clock or time.monotonic
        self.start = self._clock()
        self.end = self.start + max(0.0, float(seconds))
        self.cancel = cancel
        self.stopped = False

    def remaining(self) -> float:
        """Seconds left before the deadline (0.0 once it has passed)."""
        return max(0.0, self.end - self._clock())

    def elapsed(self) -> float:
        """Seconds since the deadline was created."""
        return self._clock() - self.start

    def expired(self) -> bool:
        """Whether the deadline has passed (does not record a stop)."""
        return self._clock() >= self.end

    def hit(self) -> None:
        """Record that a phase stopped before its work budget completed because of the deadline."""
        self.stopped = True

    def check(self) -> bool:
        """A check point: raise if cancelled; return True (and record the stop) if the deadline passed.

        Raises
        ------
        SolveCancelled
            If the cancel event is set.
        """
        if self.cancel is not None and self.cancel.is_set():
            raise SolveCancelled("solve cancelled")
        if self.expired():
            self.stopped = True
            return True
        return False

    def cancel_check(self) -> Callable[[], None] | None:
        """A check point that raises :class:`SolveCancelled` once :attr:`cancel` is set and ignores
        the wall clock (for work that must finish to give any answer, e.g. the cluster model);
        None without a cancel event."""
        cancel = self.cancel
        if cancel is None:
            return None

        def check() -> None:
            if cancel.is_set():
                raise SolveCancelled("solve cancelled")

        return check

    def shorten(self, seconds: float) -> None:
        """Move the deadline ``seconds`` earlier (>= 0; e.g. :func:`load_reserve`)."""
        self.end -= max(0.0, float(seconds))

    def within(self, seconds: float, reason: str = TIME_LIMIT) -> "Deadline":
        """A deadline ``seconds`` from now, or this one when it comes first (its :attr:`reason` then),
        sharing this one's clock and cancel event: a part of the solve given its own share of the time
        (e.g. one candidate host set) that still ends by this deadline."""
        own = Deadline(seconds, self.cancel, self._clock, reason)
        if self.end < own.end:
            own.end, own.reason = self.end, self.reason
        return own

    @property
    def stopped_by(self) -> str:
        """:attr:`reason` (``"time_limit"`` or ``"deadline"``) when some phase stopped at the deadline, else ``""``."""
        return self.reason if self.stopped else ""
