"""The embedding pairs' time as a convex function of how many a domain splits (used by :mod:`.gridcut`).

The joint cut (:mod:`.cutbound`) charges the pipeline class and its embedding pairs (Megatron's
``EMBEDDING_GROUP``: the first and last stage of every chain, a two-rank all-reduce) together:
with ``e`` chains holding exactly one end in a domain ``D``, ``e`` embedding pairs are split by
``D`` (:func:`~.gridcut._chain_term`).  Per embedding part, with ``c`` its own floor (any layout),
``g`` seconds per flow out of ``D`` (the cut) and ``c1 ≥ c`` its floor once one pair is split,
the part takes at least

    ``E(e) = c`` at ``e = 0``,   ``max(c1, g·e)`` at whole ``e ≥ 1``.

``c1``: a split pair runs between a GPU in ``D`` and one outside, first joined above ``D``'s
level, so its flow takes at least ``fb_flow / R_above`` (``fb_flow`` the pair's crossing bytes
per channel, :func:`~.ncclterms.crossing_bytes`), as a split chain's ``c'``.  Before, ``c1 = c``:
on an NVL72 rack a split embedding pair is a 206 MB flow over a 48 GB/s NIC (4.3 ms) while the
pair inside the rack takes 0.29 ms, so the joint cut let a rack trade pipeline flows for
embedding flows at 0.12 ms per pair instead of 4.3 ms for the first.

The bound needs ``E`` convex over real ``e ≥ 0`` (:func:`~.gridcut._chain_term` minimises a jointly
convex function) and below the true value at whole ``e``: the largest such function of the form
``max(c, c + σ·e, g·e)`` takes the least slope ``σ`` from ``(0, c)`` to any point ``(e, max(c1,
g·e))``, ``e ≥ 1`` whole, which is reached at ``e = 1``, ``⌊c1/g⌋`` or ``⌈c1/g⌉`` (the slope
``(max(c1, g·e) − c)/e`` falls while ``g·e ≤ c1`` and rises after).  Validity at whole ``e ≥ 1``:
``c + σ·e ≤ max(c1, g·e)`` by the choice of ``σ``, and ``c ≤ c1``, ``g·e ≤ max(c1, g·e)``.
With ``c1 = c`` this is the former ``max(c, c + (max(c, g) − c)·e, g·e)``.
"""

from __future__ import annotations

import math

__all__ = ["emb_slope", "emb_lines"]


def emb_slope(c: float, c1: float, g: float) -> float:
    """``σ`` (module doc), seconds per split pair: the least slope from ``(0, c)`` to ``(e, max(c1, g·e))``, ``e ≥ 1``.

    Parameters
    ----------
    c, c1 : float
        The part's floor with no pair split and once one is (seconds, ``c1 ≥ c`` is enforced).
    g : float
        Seconds per split pair's flow out of the domain (``≥ 0``).

    Returns
    -------
    float
        ``σ ≥ 0``; 0 when ``g ≤ 0`` and ``c1 ≤ c`` or the slope to far points tends to 0.
    """
    c1 = max(c, c1)
    if g <= 0:
        return 0.0  # max(c1, 0) = c1 for every e: the slope (c1 − c)/e tends to 0
    cands = {1}
    r = c1 / g
    if math.isfinite(r):
        cands.update(e for e in (math.floor(r), math.ceil(r)) if e >= 1)
    return max(0.0, min((max(c1, g * e) - c) / e for e in cands))


def emb_lines(embs, emb_split=None) -> list[tuple[float, float, float]]:
    """Per embedding part ``(c, σ, g)`` with ``E(e) = max(c, c + σ·e, g·e)`` (module doc).

    ``embs``: ``[(c, g)]``; ``emb_split``: ``[c1]`` per part, or None (``c1 = c``).
    """
    out = []
    for i, (c, g) in enumerate(embs):
        c1 = c if emb_split is None else max(c, float(emb_split[i]))
        out.append((float(c), emb_slope(float(c), c1, float(g)), float(g)))
    return out
