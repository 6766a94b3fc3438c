"""Launcher mode: the joint cut with a launcher order's own floors, for the orders that set the bound.

:func:`~rankmap.solver.bound.analytic.search_lower_bound` bounds launcher mode by the least over the
searched orders of each order's bound; an order's bound is the sum over parts of its floors (the size
terms raised by the order's launcher terms: block graph cuts, inter-host flows, rings kept inside hosts),
and, when a ring the order keeps inside hosts is slower than its order-free floor, the joint cut bound
(:func:`~rankmap.solver.bound.cutbound.joint_cut_bound`) with those floors.  The joint cut is valid with
*any* per-part floors that hold for every layout it bounds (its ``F0``): an order's launcher floors hold
for every launcher layout of that order, so the joint cut with them bounds that order's layouts whether
or not a ring is kept inside hosts.  It is left out elsewhere for its work only.

Where the least order's bound is its plain sum, the joint cut with its floors may raise it (classes that
the order sends over the same uplinks: ``ft-oversub-8x8`` tp4 pp2 dp-heavy, order ``cp-ep-dp-tp-pp``: tp,
etp and pp share a host's oversubscribed uplink; their floors sum to 75.35 ms, the order-free joint cut
gives 81.38 ms, the joint cut with the order's floors 81.60 ms, the cost of the layout found).
:func:`refine_least_orders` computes it for the order that sets the bound while that order is below the
order-free bound (where the order-free joint cut is what binds), again for the next one if that one then
sets it, at most ``REFINE_MAX`` new joint cuts: the bound stays the least over orders of
valid per-order bounds (an order not refined keeps its sum), so it is valid whatever is refined.
Deterministic: the orders are taken by value, ties in the searched orders' order.
"""

from __future__ import annotations

from typing import Callable, Hashable

__all__ = ["REFINE_MAX", "refine_least_orders"]

#: Most new joint cuts :func:`refine_least_orders` computes per bound (each one is counted bound work).
REFINE_MAX = 2


def refine_least_orders(values: list[float], pending: dict[int, tuple[Hashable, float]],
                        joint_of: dict, joint: Callable[[Hashable], float], below: float = float("inf"),
                        limit: int = REFINE_MAX) -> float:
    """The least of ``values`` after raising the least ones by their order's joint cut (module doc), seconds.

    Parameters
    ----------
    values : list of float
        Each searched order's bound so far (seconds); changed in place.
    pending : dict
        ``{order index: (floors key, latency seconds)}`` for the orders whose value is their plain sum and
        whose floors the launcher terms raised; entries are removed as they are refined.
    joint_of : dict
        ``{floors key: joint cut seconds}`` already computed (shared with the caller's cache).
    joint : callable
        ``joint(key)`` computes the joint cut bound with the floors of ``key`` (seconds, bandwidth part).
    below : float
        Refine only while the least value is below this (seconds): the order-free bound, which the caller
        takes anyway (an order already above it rarely gains from its joint cut: work spared).
    limit : int
        Most new joint cuts to compute (``≥ 0``).

    Returns
    -------
    float
        ``min(values)`` (``inf`` when empty).
    """
    new = 0
    while values:
        i = min(range(len(values)), key=lambda j: (values[j], j))
        if i not in pending or values[i] >= below:
            break
        key, lat = pending.pop(i)
        if key not in joint_of:
            if new >= limit:
                break
            joint_of[key] = joint(key)
            new += 1
        values[i] = max(values[i], joint_of[key] + lat)
    return float(min(values)) if values else float("inf")
