"""Two-axis stage grids: exact split counts of a domain's part of one pipeline stage (used by :mod:`.stagecut`).

Notation of :mod:`.cutbound` and :mod:`.stagecut`.  Without context parallelism the ranks of one pipeline
stage form the grid ``tp × dp`` (``a × b``): the tp groups are its ``b`` lines along the tp axis
(*A-lines*, ``a`` points each), the dp groups its ``a`` lines along the dp axis (*B-lines*, ``b`` points).
The part ``D_j`` of a domain ``D`` in stage ``j`` is a set of ``x`` of these points, and a group of either
class is split by ``D`` iff it is split by ``D_j``.  The joint cut of :mod:`.gridcut` relaxes the split
counts to reals (Shearer's lemma); with two axes they can be had exactly:

* **plane bound** (:func:`plane_bound`): a set of ``x`` points with ``F`` whole and ``P`` split A-lines
  touching ``t`` B-lines of which ``R`` are whole satisfies the integer conditions of the function's
  docstring, so the least of the parts' times over the tuples that do is at most the set's.  E.g. 36 of
  the 64 ranks of a tp4 × dp16 stage: 9 whole tp groups split all 4 dp groups (the relaxation: 1.87).
* **whole A-lines across parts** (``_Tables.whole_lines``, :meth:`.stagecut._Shape.values`): over a
  composition ``(x_j)`` of ``D`` into stage parts, either some part splits an A-line, and then every part
  (collective) of class A has a split group whose flow joins GPUs first joined above ``D``: at least
  ``max(F, c1)`` with ``c1 = fb_flow / R_above`` (module :mod:`.cutbound`); or none does, each ``x_j`` is a
  multiple of ``a`` and each part with ``x_j < a·b`` splits all ``a`` B-lines of its stage, so class B's
  part takes at least ``max(F, g·Σ_j a·[x_j < a·b])`` (its flows all leave ``D`` over the same links),
  per class rather than the per-part sum of :mod:`.stagecut` (``max(F, X₁ + X₂) ≥ max(F, X₁) +
  max(F, X₂) − F``), which loses a floor per extra part.  The least of the two cases holds.  (The per-part
  tables of :mod:`.stagecut` take the plane bound with ``c1 = 0``: their values add over the parts, and a
  per-flow floor does not add.)

On the ``nvl72-frag-512`` quality instance (tp4 pp8, GPT): the 9-host rack behind one leaf (864 GB/s up)
holds 36 ranks; in one middle stage its 4 dp rings and 72 pipeline flows leave over that uplink
(3.36 + 5.48 + 11.19 + 0.29 = 20.30 ms); in two stages 8 dp rings (14.3 ms with tp) and 40 pipeline flows;
with split tp groups the tp floor rises to ``c1``: the stage cut gives 20.30 ms (joint cut 18.74).
"""

from __future__ import annotations

import numpy as np

from .work import charge

__all__ = ["plane_bound", "PLANE_POINT_SECONDS"]

#: Nominal seconds per candidate tuple ``(F, P, t, R)`` of :func:`plane_bound` (numpy, vectorised).
PLANE_POINT_SECONDS = 2.0e-7


def plane_bound(x: int, plane) -> tuple[float, float]:
    """Least time of the two classes of an ``a × b`` grid over every set of ``x`` of its points, seconds.

    ``plane``: ``[(a, lines_A), (b, lines_B)]``, class A's groups the lines along the axis of size ``a``
    (``b`` of them), class B's along the other (``a`` of them); ``lines``: per part ``(F, c1, g)``, its
    time ``max(F, [s ≥ 1]·c1, g·s)`` with ``s`` the groups the set splits; returns that least and the
    least of the cut terms alone (``F`` and ``c1`` taken as 0), (0, 0) when no set fits.  A set of ``x`` points has ``F`` whole A-lines, ``P`` split
    ones (each ``1..a−1`` points), touches ``t`` B-lines of which ``R`` are whole: ``t = a`` when
    ``F ≥ 1`` (a whole A-line meets every B-line), ``x ≥ t`` and each split A-line holds at most ``t``
    points; a whole B-line meets every A-line (``F + P = b``) and lies in each split one (``≥ R``
    points each, ``R ≤ a − 1`` when ``P ≥ 1``).  Every set satisfies these with its own ``(F, P, t, R)``,
    so the least over the integer tuples that do, of the parts' times at ``s_A = P`` and
    ``s_B = t − R``, is at most the set's (the relaxation of :mod:`.gridcut` lets ``s_B`` go below
    ``a`` when the A-lines are all whole; here it is ``a`` unless ``x`` fills whole B-lines).
    """
    (a, la), (b, lb) = plane
    if x <= 0 or x > a * b:
        return 0.0, 0.0
    F, P, t, R = np.meshgrid(np.arange(x // a + 1), np.arange(b + 1), np.arange(a + 1), np.arange(a + 1),
                             indexing="ij")
    charge(PLANE_POINT_SECONDS * F.size)
    lo = np.maximum(1, R)
    hi = np.minimum(a - 1, t)
    ok = (F + P <= b) & (R <= t) & (np.where(F >= 1, t == a, (t >= 1) & (t <= x)))
    ok &= np.where(P >= 1, (F * a + P * lo <= x) & (x <= F * a + P * hi) & (lo <= hi), F * a == x)
    ok &= (R == 0) | ((F + P == b) & ((P == 0) | (R <= a - 1)))
    ok &= (P >= 1) | (F == 0) | (R == np.where(F == b, a, 0)) | (R == 0)
    if not ok.any():
        return 0.0, 0.0
    sA, sB = P[ok].astype(float), (t - R)[ok].astype(float)
    total, cut = np.zeros(sA.size), np.zeros(sA.size)
    for s_, lines in ((sA, la), (sB, lb)):
        for f0, c1, g in lines:
            total += np.maximum(np.maximum(f0, c1 * (s_ >= 1)), g * s_)
            cut += g * s_
    return float(total.min()), float(cut.min())
