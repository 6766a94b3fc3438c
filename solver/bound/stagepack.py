"""Stage-split cuts of large domains by knapsack (DESIGN §5; a domain shape of :mod:`.stagecut`).

Notation of :mod:`.stagecut`.  A domain ``D`` of ``m`` ranks is cut by the ``P`` pipeline stages
(``S = W/P`` ranks each) into parts ``m_0, …, m_{P−1}`` (``Σ_j m_j = m``, ``0 ≤ m_j ≤ S``); the classes
off the pipeline axis take at least ``V = max(F_Σ + Σ_j Δ(m_j), Σ_j Φ(m_j))``, the pipeline chains
at least ``pp(X)`` with ``X = Σ_j |m_j − m_{j+1}|`` and the embedding pairs ``emb(Y)``.
:mod:`.stagecut` enumerates the compositions ``(m_j)`` of domains up to ``STAGE_CUT_MAX_DOMAIN``
ranks; a pod of a three-tier tree (128 GPUs: ``ft-3tier-4to1-64x8``) has far too many of them, and
leaving it out lost its pipeline cuts: a pod holding two whole middle stages sends ``2S`` pipeline
flows up, and any pod that avoids that cuts stages, which costs its dp / cp / tp groups.

This module lower-bounds every composition of such a domain by a few points ``(V, X, Y)``.

* **Pipeline.**  With ``M = max_j m_j`` (reached at stage ``j*``) and ``e = m_0 + m_{P−1}`` the
  domain's end-stage ranks, the chain edges from stage 0 up to ``j*`` and from ``j*`` down to
  ``P − 1`` change the count by at least ``M − m_0`` and ``M − m_{P−1}``, disjoint edge sets (or one
  empty when ``j*`` is an end), so ``X ≥ 2M − e``.  The embedding is charged ``Y ≥ 0``.
* **Other classes.**  For a threshold ``M`` and end ranks ``e``, ``K_A(M, e)`` is the least of
  ``Σ_j A(m_j)`` (``A`` = ``Δ`` or ``Φ`` of :class:`~rankmap.solver.bound.stagecut._Tables`, lower bounds
  of the stage parts' joint cuts, ``A(0) = 0``) over ``P − 2`` middle parts and two end parts summing
  to ``e``, every part in ``[0, M]`` and all summing to ``m``: a bounded knapsack (middle parts) and a
  two-part least (ends), exact for the tables.
* **Points.**  A composition of largest part ``M`` and end ranks ``e`` has ``V ≥ max(F_Σ + K_Δ(M, e),
  K_Φ(M, e))`` (it is one of the knapsack's choices) and ``X ≥ max(0, 2M − e)``: it lies above the point
  ``(M, e)`` in every coordinate, so the least over the points of any nondecreasing combination of
  ``(V, pp(X), emb(Y))`` (:func:`~rankmap.solver.bound.stagecut._combine`) is at most its value over the
  compositions.  The side masks of :mod:`.stagecut` (``e ≥ r+`` or ``e ≤ r−``) apply to ``e`` as is.
  The parts the knapsacks chose are returned for :mod:`.stagecut`'s refinement of the tables (values
  only rise, the knapsacks are recomputed at every call).

Example: ``ft-3tier-4to1-64x8`` tp4 cp2 pp8 (pods of 128 GPUs with 4:1 uplinks, stages of 64): the pod
with the fewest end-stage ranks (``e ≤ 32``) either holds two whole stages (``M = 64``, ``e = 0``: 128
pipeline flows, 22.4 ms on its uplink) or cuts stages; the pod level was left out before.
"""

from __future__ import annotations

import numpy as np

from .work import charge

__all__ = ["PackShape", "PACK_MAX_DOMAIN"]

#: Domains up to this many ranks (and above ``STAGE_CUT_MAX_DOMAIN``) are bounded by the knapsack.
PACK_MAX_DOMAIN = 256
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
    """A domain shape of :mod:`.stagecut` bounded by points ``(M, e)`` (module doc), duck-typing its ``_Shape``.

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
        self.top = min(m, S)
        E = min(m, 2 * self.top)
        Ms, es = np.meshgrid(np.arange(1, self.top + 1), np.arange(E + 1), indexing="ij")
        ok = (es <= 2 * Ms) & (m - es <= (P - 2) * Ms) & (m - es >= 0)
        self.M, self.e = Ms[ok], es[ok]
        self.X = np.maximum(0, 2 * self.M - self.e)
        self.Y = np.zeros_like(self.X)
        self.ends = self.e
        self.pp = pp_time(np.arange(2 * m + 1, dtype=float))
        self.emb = emb_time(np.arange(m + 1, dtype=float))
        self._cache = None

    def _sums(self, arr: np.ndarray):
        """Per point the least ``Σ A(m_j)`` and the knapsacks used (module doc)."""
        top, m, P = self.top, self.m, self.P
        a = arr[:top + 1].copy()
        a[0] = 0.0
        g = _knapsack(a, m, P - 2, top)
        # the two end parts: pair[M, e] = least a(x) + a(e − x) over x, e − x in [0, M]
        E = min(m, 2 * top)
        x = np.arange(top + 1)
        y = np.arange(E + 1)[:, None] - x[None, :]  # (E + 1, top + 1): the other end part
        valid = (y >= 0) & (y <= top)
        cost = np.where(valid, a[x][None, :] + a[np.clip(y, 0, top)], np.inf)
        big = np.where(valid, np.maximum(x[None, :], y), top + 1)  # the larger of the two parts
        best = np.full((E + 1, top + 2), np.inf)
        np.minimum.at(best, (np.broadcast_to(np.arange(E + 1)[:, None], big.shape), big), cost)
        pair = np.minimum.accumulate(best[:, :top + 1], axis=1).T  # (top + 1, E + 1)
        charge(CELL_SECONDS * (E + 1) * (top + 1))
        mid = g[self.M, P - 2, m - self.e]
        return mid + pair[self.M, self.e], (g, pair, a)

    def _state(self):
        """``(K_Δ, K_Φ, Δ knapsacks, Φ knapsacks)``, recomputed for a table that changed since the last call."""
        old = self._cache or {}
        new = {}
        for name in ("delta", "phi"):
            arr = getattr(self.tables, name)[:self.top + 1]
            if name in old and np.array_equal(old[name][0], arr):
                new[name] = old[name]
            else:
                new[name] = (arr.copy(),) + self._sums(arr)
        self._cache = new
        return None, new["delta"][1], new["phi"][1], new["delta"][2], new["phi"][2]

    def values(self, f0_sum: float) -> np.ndarray:
        """``V`` of every point: ``max(F_Σ + K_Δ, K_Φ)`` (inf where no composition exists)."""
        _key, d, ph, _dk, _pk = self._state()
        return np.maximum(f0_sum + d, ph)

    def part_sizes(self, i: int) -> np.ndarray:
        """The part sizes the two knapsacks chose at point ``i`` (for the tables' refinement)."""
        _key, _d, _ph, dk, pk = self._state()
        M, e, m, P = int(self.M[i]), int(self.e[i]), self.m, self.P
        out = []
        for g, pair, a in (dk, pk):
            out += _trace(g, a, M, P - 2, m - e)
            best = min(range(max(0, e - M), min(M, e) + 1), key=lambda x: a[x] + a[e - x], default=None)
            if best is not None:
                out += [v for v in (best, e - best) if v > 0]
        return np.array(out, dtype=np.int64)

    def tail_point(self, f0_sum: float):
        """None: every composition is covered by the points."""
        return None
