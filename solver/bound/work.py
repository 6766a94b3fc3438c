"""The bound's work in nominal seconds: a deterministic count, so the search's budgets can leave room for it.

The lower bound is always computed (DESIGN §5) and is not cut by the search's work budgets: at
512 GPUs on fragmented racks its joint cut (:mod:`.gridcut`) takes about a second, a sixth of a
6 s limit (issue 28.4).  :func:`bound_work_meter` counts that work while a solve computes its
bounds: each dual of :mod:`.gridcut` charges per multiplier vector it evaluates, each case
combination it builds; the counts depend on the input only, so the search budgets sized from
``time limit − counted seconds`` (:mod:`rankmap.solver.search.solve`) keep the answer a function
of the input and the limit, on an idle or a loaded machine.

Calibration (the 512-GPU quality instances, idle 2-core machine, 2026-12-03): the joint cut of
``nvl72-frag-512 tp4 pp8`` evaluated 5,588 multiplier rows (of 656 duals) and built 279 domains'
combinations in 0.97 s of CPU (0.61 s in the duals, 0.28 s building combinations).  After the channel
paths of issue 25 the free and launcher bounds of that instance took 2.3 s idle against 1.93 s counted:
every constant is 1.25× its first calibration.
"""

from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar
from typing import Callable, Iterator

__all__ = ["BOUND_PART_SECONDS", "PAIR_ROUTE_SECONDS", "bound_work_meter", "charge", "meter_memo", "work_meter"]

#: Nominal seconds per evaluation of a dual's value (a batch of multiplier vectors, :mod:`.gridcut`).
DUAL_VALUE_SECONDS = 1.5e-4
#: Nominal seconds per domain whose case combinations are built (:func:`.gridcut.domain_combos`).
DOMAIN_COMBOS_SECONDS = 1.4e-3
#: Nominal seconds per part of a class (and per order, for a launcher order's terms) of
#: :func:`.analytic.search_lower_bound` outside the joint cut: rates, rings, cuts per part.
BOUND_PART_SECONDS = 1.9e-3

#: Nominal seconds per ordered GPU pair and route option of the exact ECMP pass over every pair
#: (:func:`.rates._pair_rates`, up to ``ECMP_EXACT_MAX_DEVICES`` GPUs).  It is computed once per cluster and
#: cached, but charged to every bound that needs it (a reused cluster must not change the budgets).
#: Calibration (issue 28.4, 2026-12-03, CPU time scaled by the ratio of counted to measured work of the
#: rest of the same bound): 212–360 ns on the 288–512-GPU quality instances (0.37–0.48 s of CPU at 512
#: GPUs, uncounted until then: free 512-GPU solves on fat trees overran their budgets by that much).
PAIR_ROUTE_SECONDS = 3.0e-7

_METER: ContextVar[list | None] = ContextVar("rankmap_bound_work", default=None)


def charge(seconds: float) -> None:
    """Add ``seconds`` of nominal work to the meter of the running :func:`bound_work_meter` (none: nothing)."""
    box = _METER.get()
    if box is not None:
        box[0] += seconds


def meter_memo() -> dict | None:
    """A dict living as long as the running :func:`work_meter` (None outside one): a pure function computed
    again inside one meter may return its first answer, uncharged (it does no work), so the count stays a
    function of the calls made inside the meter."""
    box = _METER.get()
    return None if box is None else box[1]


@contextmanager
def work_meter() -> Iterator[Callable[[], float]]:
    """Count the nominal work (seconds) :func:`charge` d inside the ``with`` block of this thread / context.

    The bound's work (:func:`bound_work_meter`), and the search's proposals' work outside CP-SAT's
    deterministic budgets (tree partitions, :func:`rankmap.solver.search.solve._search`).
    Yields a function returning the seconds counted so far.  Meters do not nest: an inner one counts
    its block only, and the outer one resumes after it.
    """
    box = [0.0, {}]
    token = _METER.set(box)
    try:
        yield lambda: box[0]
    finally:
        _METER.reset(token)


#: The meter of the bound's work (:func:`work_meter`).
bound_work_meter = work_meter
