"""Stage-split cuts of large domains by knapsack (DESIGN §5; a domain shape of :mod:`.stagecut`).

Notation of :mod:`.stagecut`.  A domain ``D`` of ``m`` ranks is cut by the ``P`` pipeline stages
(``S = W/P`` ranks each) into parts ``m_0, …, m_{P−1}`` (``Σ_j m_j = m``, ``0 ≤ m_j ≤ S``); the classes
off the pipeline axis take at least ``V = max(F_Σ + Σ_j Δ(m_j), Σ_j Φ(m_j))``, the pipeline chains
at least ``pp(X)`` with ``X = Σ_j |m_j − m_{j+1}|`` and the embedding pairs ``emb(Y)``.
:mod:`.stagecut` enumerates the compositions ``(m_j)`` of domains up to ``STAGE_CUT_MAX_DOMAIN``
ranks; a pod of a three-tier tree (128 GPUs: ``ft-3tier-4to1-64x8``) has far too many of them, and
leaving it out lost its pipeline cuts: a pod holding two whole middle stages sends ``2S`` pipeline
flows up, and any pod that avoids that cuts stages, which costs its dp / cp / tp groups.

This module lower-bounds every composition of such a domain by points ``(V, X, Y)``, one per
``(M, a, b, z)``: ``M = max_j m_j``, end parts ``a = m_0 ≥ b = m_{P−1}`` (a chain read backwards is
the same problem: both orders give the same ``X``, ``Y`` and ``V``), ``z`` whether some stage is empty.

* **Pipeline.**  Pad the sequence with an empty stage at both ends: its total variation is
  ``X + a + b``.  From stage 0 up to the peak (``M``, at ``j*``) and from ``j*`` down to ``P − 1`` the
  count changes by at least ``M − a`` and ``M − b`` (disjoint chain edges), so ``X ≥ 2M − a − b``
  always.  If some stage ``j₀`` is empty (``z``) and ``b > 0``, it lies between ``j*`` and one end, say
  ``j* < j₀``: the edges from ``j*`` to ``j₀`` change the count by ``M`` and those from ``j₀`` to
  ``P − 1`` by ``b``, so ``X ≥ (M − a) + M + b ≥ 2M − (a − b)`` (likewise on the other side); with
  ``b = 0`` that is the first bound.  So ``X ≥ 2M − Y`` when ``z``, ``Y = a − b = |m_0 − m_{P−1}|``,
  exactly the embedding pairs' count of :mod:`.stagecut`; a domain with every stage nonempty keeps
  ``X ≥ 2M − a − b``.
* **Other classes.**  ``K_A(M, a, b, z) = A(a) + A(b) + g_A[M, q, m − a − b]`` (``A`` = ``Δ`` or ``Φ``
  of :class:`~rankmap.solver.bound.stagecut._Tables`, lower bounds of the stage parts' joint cuts,
  ``A(0) = 0``), with ``g_A[M, q, s]`` the least ``Σ A`` over at most ``q`` middle parts in
  ``[1, M]`` summing to ``s`` (a bounded knapsack, exact for the tables): ``q = P − 3`` when ``z`` and
  ``b > 0`` (an empty middle stage), else ``P − 2``.
* **Points.**  A composition of ``(M, a, b, z)`` is one of that knapsack's choices, so ``V ≥
  max(F_Σ + K_Δ, K_Φ)``, and ``X`` and ``Y`` are at least the point's: it lies above the point in
  every coordinate, so the least over the points of any nondecreasing combination of ``(V, pp(X),
  emb(Y))`` (:func:`~rankmap.solver.bound.stagecut._combine`) is at most its value over the
  compositions.  The side masks of :mod:`.stagecut` (end ranks ``a + b ≥ r+`` or ``≤ r−``) apply as
  is.  The parts the knapsacks chose are returned for :mod:`.stagecut`'s refinement of the tables
  (values only rise; the knapsacks are recomputed when a table changed).

Work: ``O(S·P·m)`` per knapsack and ``O(S³)`` points (64 → 0.1 M points); :mod:`.stagecut` adds a
knapsack side only when, at its tables refined without it, it raises the least combination, and then
refines the tables at every part size at once (the points use nearly all of them).

Example: ``ft-3tier-4to1-64x8`` tp4 cp2 pp8 gpt (pods of 128 GPUs with 4:1 uplinks, stages of 64):
the pod with the fewest end-stage ranks (``a + b ≤ 32``) either holds two whole middle stages
(``M = 64``: 128 pipeline flows, 22.4 ms on its uplink), or splits the embedding pairs of its end
ranks, or cuts stages into parts whose dp / cp / tp groups cross its uplink; stage cut 31.5 -> 48.0 ms
(cost 55.98 ms).
"""

from __future__ import annotations

import numpy as np

from .work import charge

__all__ = ["PackShape", "PACK_MAX_DOMAIN", "PACK_MAX_PART", "least_order_floors"]

#: Domains up to this many ranks (and above ``STAGE_CUT_MAX_DOMAIN``) are bounded by the knapsack points.
PACK_MAX_DOMAIN = 256
#: Stages up to this many ranks (the points are O(min(m, S)^3): 64 -> 0.1 M, 128 -> 0.5 M and 0.4 s).
PACK_MAX_PART = 64
#: Nominal seconds per part and order of :func:`least_order_floors` (measured 0.7-1.0 ms on the 512-GPU trees,
#: 2026-12-04, a loaded 2-core machine).
ORDER_FLOOR_SECONDS = 1.2e-3
#: Nominal seconds per knapsack cell update (numpy, vectorised).
CELL_SECONDS = 2.0e-8


def _knapsack(arr: np.ndarray, m: int, q: int, top: int):
    """Least sums of ``arr`` over at most ``q`` parts in ``[1, M]`` summing to ``s``, for every ``M``.

    Parameters
    ----------
    arr : ndarray, shape (top + 1,)
        Seconds per part size (``arr[0]`` unused: empty parts cost 0).
    m, q, top : int
        Largest sum, most parts, largest part size.

    Returns
    -------
    ndarray, shape (top + 1, q + 1, m + 1)
        ``g[M, r, s]``: the least over at most ``r`` parts of sizes ``1..M`` summing to ``s`` (inf if none).
    """
    g = np.full((top + 1, q + 1, m + 1), np.inf)
    cur = np.full((q + 1, m + 1), np.inf)
    cur[:, 0] = 0.0
    g[0] = cur
    for M in range(1, top + 1):
        if M <= m:
            for r in range(1, q + 1):
                cur[r, M:] = np.minimum(cur[r, M:], cur[r - 1, :m + 1 - M] + arr[M])
        g[M] = cur
    charge(CELL_SECONDS * top * q * (m + 1))
    return g


def _trace(g: np.ndarray, arr: np.ndarray, M: int, r: int, s: int) -> list[int]:
    """The part sizes of one least sum ``g[M, r, s]`` of :func:`_knapsack`."""
    out = []
    while s > 0 and M > 0:
        if g[M, r, s] == g[M - 1, r, s]:
            M -= 1
            continue
        out.append(M)
        s, r = s - M, r - 1
    return out


class PackShape:
    """A domain shape of :mod:`.stagecut` bounded by points ``(M, a, b, z)`` (module doc), duck-typing its ``_Shape``.

    Parameters
    ----------
    m : int
        Ranks of the domain (``> STAGE_CUT_MAX_DOMAIN``).
    tables : stagecut._Tables
        ``Δ`` and ``Φ`` of the domain's capacity (shared, refined by the caller).
    S, P : int
        Stage size and pipeline depth (``P ≥ 3``).
    pp_time, emb_time : callable
        Seconds of the pipeline / embedding parts for arrays of ``X`` / ``Y`` (as in :mod:`.stagecut`).
    """

    tail = False

    def __init__(self, m: int, tables, S: int, P: int, pp_time, emb_time):
        self.m, self.tables, self.S, self.P = m, tables, S, P
        self.top = top = min(m, S)
        Ms, a, b = np.meshgrid(np.arange(1, top + 1), np.arange(top + 1), np.arange(top + 1), indexing="ij")
        base = (a >= b) & (a <= Ms) & (a + b <= m)
        rows = []
        for z in (True, False):  # some stage empty (z) or every stage holds ranks
            q = np.where(z & (b > 0), P - 3, P - 2)
            ok = base & (m - a - b <= q * Ms) & (z | (b > 0))
            if z:
                X = 2 * Ms - (a - b)
            else:
                X = 2 * Ms - (a + b)
            rows.append((Ms[ok], a[ok], b[ok], q[ok], np.maximum(0, X[ok])))
        self.M, self.a, self.b, self.q, self.X = (np.concatenate(v) for v in zip(*rows))
        self.Y = self.a - self.b
        self.ends = self.a + self.b
        charge(4 * CELL_SECONDS * Ms.size)  # (the masks and point arrays: measured 4x a knapsack cell)
        self.pp = pp_time(np.arange(2 * m + 1, dtype=float))
        self.emb = emb_time(np.arange(m + 1, dtype=float))
        self._cache = None

    def _sums(self, arr: np.ndarray):
        """Per point the least ``Σ A(m_j)`` (inf where none) and the knapsack (module doc)."""
        a = arr[:self.top + 1].copy()
        a[0] = 0.0
        g = _knapsack(a, self.m, self.P - 2, self.top)
        charge(CELL_SECONDS * self.M.size)
        return g[self.M, self.q, self.m - self.a - self.b] + a[self.a] + a[self.b], (g, a)

    def _state(self):
        """``(K_Δ, K_Φ, Δ knapsack, Φ knapsack)``, recomputed for a table that changed since the last call."""
        old = self._cache or {}
        new = {}
        for name in ("delta", "phi"):
            arr = getattr(self.tables, name)[:self.top + 1]
            if name in old and np.array_equal(old[name][0], arr):
                new[name] = old[name]
            else:
                new[name] = (arr.copy(),) + self._sums(arr)
        self._cache = new
        return new["delta"][1], new["phi"][1], new["delta"][2], new["phi"][2]

    def values(self, f0_sum: float) -> np.ndarray:
        """``V`` of every point: ``max(F_Σ + K_Δ, K_Φ)`` (inf where no composition exists)."""
        d, ph, _dk, _pk = self._state()
        return np.maximum(f0_sum + d, ph)

    def part_sizes(self, i: int) -> np.ndarray:
        """The part sizes the two knapsacks chose at point ``i`` and its end parts (for the tables' refinement)."""
        _d, _ph, dk, pk = self._state()
        M, a, b, q = int(self.M[i]), int(self.a[i]), int(self.b[i]), int(self.q[i])
        out = [v for v in (a, b) if v > 0]
        for g, arr in (dk, pk):
            out += _trace(g, arr, M, q, self.m - a - b)
        return np.array(out, dtype=np.int64)

    def tail_point(self, f0_sum: float):
        """None: every composition is covered by the points."""
        return None


def least_order_floors(cluster, orders, size_terms) -> dict:
    """Per class and part the least over ``orders`` of its launcher floor (launcher mode's stage cut floors).

    A launcher layout runs one order of ``orders``; under it each part takes at least its order-free floor and
    its launcher terms (:func:`~rankmap.solver.bound.launcher.launcher_part_bound`,
    :func:`~rankmap.solver.bound.launcher.in_host_ring_floor`, :func:`~rankmap.solver.bound.nodering.order_floor`),
    so at least their least over the orders: a floor of every launcher layout (seconds).

    Parameters
    ----------
    orders : sequence of ParallelConfig
        The searched orders (same sizes).
    size_terms : Mapping[str, list]
        Per class its parts ``(Collective, order-free floor seconds)`` (:func:`.analytic._search_bound`).

    Returns
    -------
    dict
        ``{class: [seconds per part]}``, each at least the order-free floor.
    """
    from ..megatron.catalogue import megatron_groups
    from ..traffic import CLASS_GROUP
    from .launcher import in_host_ring_floor, launcher_part_bound
    from .nodering import order_floor
    out = {c: [np.inf] * len(v) for c, v in size_terms.items()}
    charge(ORDER_FLOOR_SECONDS * sum(len(v) for v in size_terms.values()) * len(orders))
    for ocfg in orders:
        groups = megatron_groups(ocfg)
        for c, plist in size_terms.items():
            if not plist:
                continue
            arr = groups[CLASS_GROUP[c]] - ocfg.rank_offset
            for i, (p, v) in enumerate(plist):
                f = max(v, launcher_part_bound(cluster, p, arr), in_host_ring_floor(cluster, p, arr),
                        order_floor(cluster, p, arr))
                out[c][i] = min(out[c][i], f)
    return {c: [max(f, v) if np.isfinite(f) else v for f, (_p, v) in zip(out[c], size_terms[c])]
            for c in size_terms}
