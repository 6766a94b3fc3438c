"""How a Solve call's deadline and its time limit share the time (issue 26.5).

A scheduler calls Solve with a gRPC deadline and, or instead of, a
``time_limit_seconds``.  The server answers within the deadline whenever a
layout exists by then, rather than DEADLINE_EXCEEDED with nothing:

* the **budget** of the call is its remaining time when the solve starts less
  the **margin** (:func:`deadline_margin`): time kept for encoding the answer
  (groups included) and sending it;
* without an explicit ``time_limit_seconds`` the solve's time limit is the
  budget (at most the server's ``--max-time-limit``);
* with an explicit limit longer than the budget, the search keeps the limit's
  deterministic work budgets but stops at the budget: the answer is the best
  layout found by then (at worst the baseline), status FEASIBLE,
  ``stopped_by: "deadline"``;
* a call whose deadline passes before any layout exists (the cluster is still
  being read or modelled) ends DEADLINE_EXCEEDED, as before.

Pure arithmetic on the request's numbers; no grpc import.
"""

from __future__ import annotations

import dataclasses
import threading

from rankmap.solver.search.deadline import CALL_DEADLINE, TIME_LIMIT, Deadline, search_seconds
from rankmap.solver.types import SolveOptions

__all__ = ["MARGIN_SECONDS", "MARGIN_SHARE", "ENCODE_SECONDS_PER_RANK", "MIN_TIME_LIMIT", "deadline_margin",
           "call_budget"]

#: Fixed part of the margin, seconds: building the answer after the search stops (about 0.1 s at
#: 128 GPUs under load), sending it and the client's decoding.
MARGIN_SECONDS = 0.2
#: Share of the remaining time kept as margin (a loaded machine runs everything slower).
MARGIN_SHARE = 0.05
#: Encoding the answer after the solve, seconds per rank: ``result_to_proto`` and every
#: Megatron group (``groups_to_proto``) and serialising, measured at 131,072 ranks on this
#: project's 2-core machine under load (about 1.2 s), with margin.
ENCODE_SECONDS_PER_RANK = 1.5e-5
#: A time limit taken from a deadline is at least this (seconds; ``SolveOptions`` needs > 0).
MIN_TIME_LIMIT = 0.01


def deadline_margin(remaining_seconds: float, world_size: int) -> float:
    """Seconds of a call's remaining time kept for encoding and sending the answer.

    ``MARGIN_SECONDS + MARGIN_SHARE · remaining + ENCODE_SECONDS_PER_RANK · world_size``:
    0.2 + 0.05 · 10 = 0.7 s of a 10 s deadline on 16 GPUs; 0.2 + 0.4 + 1.97 = 2.57 s of 8 s at 131,072 ranks.
    """
    return MARGIN_SECONDS + MARGIN_SHARE * max(0.0, float(remaining_seconds)) + \
        ENCODE_SECONDS_PER_RANK * max(0, int(world_size))


def call_budget(options: SolveOptions, explicit: bool, remaining_seconds: float | None, world_size: int,
                cancel: threading.Event | None = None, elapsed_seconds: float = 0.0
                ) -> tuple[SolveOptions, Deadline | None]:
    """The options and wall-clock stop of a Solve with ``remaining_seconds`` before its deadline.

    Parameters
    ----------
    options : SolveOptions
        The request's options (time limit already capped by the server's limit).
    explicit : bool
        Whether the request set ``time_limit_seconds``.
    remaining_seconds : float or None
        Seconds left before the call's deadline (None: no deadline).
    world_size : int
        Ranks of the job (sizes the margin).
    cancel : threading.Event, optional
        The call's cancel event, attached to the returned deadline.
    elapsed_seconds : float
        Seconds the call has already spent (reading the request): the time limit counts from the
        call's start, as ``rankmap solve``'s counts from the command's.

    Returns
    -------
    (SolveOptions, Deadline)
        Without a deadline, or when the budget (remaining less :func:`deadline_margin`) is at
        least the time limit: the options and a :class:`Deadline` of the limit's
        ``search_seconds(limit, world_size)`` less ``elapsed_seconds`` and the encoding
        (``ENCODE_SECONDS_PER_RANK · world_size``), reason ``"time_limit"``.
        Without an explicit limit: the limit becomes the budget (at least ``MIN_TIME_LIMIT``).
        With an explicit longer limit: the options unchanged and a :class:`Deadline` of
        ``search_seconds(budget, world_size)`` whose reason is ``"deadline"``.
    """
    limit = float(options.time_limit_seconds)
    own = max(0.0, search_seconds(limit, world_size) - max(0.0, float(elapsed_seconds))
              - ENCODE_SECONDS_PER_RANK * max(0, int(world_size)))
    if remaining_seconds is None:
        return options, Deadline(own, cancel, reason=TIME_LIMIT)
    budget = float(remaining_seconds) - deadline_margin(remaining_seconds, world_size)
    if budget >= limit:
        return options, Deadline(own, cancel, reason=TIME_LIMIT)
    if not explicit:
        options = dataclasses.replace(options, time_limit_seconds=max(MIN_TIME_LIMIT, budget))
        return options, Deadline(search_seconds(options.time_limit_seconds, world_size), cancel, reason=TIME_LIMIT)
    return options, Deadline(search_seconds(max(0.0, budget), world_size), cancel, reason=CALL_DEADLINE)
