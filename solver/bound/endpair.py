"""Chain ends over a whole level: pipeline flows on one domain, embedding flows on another (DESIGN §5).

Used by :mod:`rankmap.solver.bound.cutbound` (notation there).  The joint cut bounds the
pipeline class and its embedding pairs (Megatron's ``EMBEDDING_GROUP``: first and last stage
of each chain) together, one domain at a time: a split chain whose members in ``D`` are a
prefix or a suffix holds exactly one end, crosses ``D``'s boundary on one edge instead of two,
and splits its embedding pair.  One domain alone may hold no end at all (a middle stage: its
chains cross twice, no embedding pair is split), or many (a first stage: half the pipeline
flows, every embedding pair split): the least over the two is the middle stage.  But the
ends are somewhere.  Across a level the pipeline class pays for its busiest domain and the
embedding class for its own busiest one, so

``T_pp + T_emb ≥ pp(D−) + emb(D+)``  for any two domains ``D−``, ``D+`` of the level,

and the other classes pay at least ``max(t_c(D−), t_c(D+)) ≥ (t_c(D−) + t_c(D+))/2``: the two
domains are bounded apart, each with the other classes at half their time
(:func:`_half_side`), and the two least values summed.

Which two.  In a domain ``D`` let ``a`` chains lie whole, ``b`` be split with both ends in
``D``, ``e`` split with exactly one end in ``D`` (each splits its embedding pair: one flow of
``fb_emb`` out of ``D``), of ``s`` split chains touching ``D``.  Every chain is counted once
over the level's ``n`` domains by ``a_D + b_D + e_D/2`` (whole or both ends in one domain: 1
there; ends in two domains: ½ in each), so Σ_D (a_D + b_D + e_D/2) = G, the number of
chains, and some domain ``D+`` has ``a + b + e/2 ≥ G/n``.  Its ``m`` ranks hold ``k`` of each
whole chain, at least two of each ``b`` chain (its two ends) and one of every other split one:
``m ≥ k·a + b + s``, so ``b ≤ m − k·a − s`` and, with ``a = p − s`` (``p`` chains touched) and
``s ≤ p``, ``e/2 ≥ G/n − a − b ≥ G/n − m + (k−1)·p − (k−2)·s ≥ G/n − m + p``:
``emb(D+) ≥ max(E0, g_e·2(p − (m − G/n)))`` once a chain is split (``g_e`` seconds per split
pair, ``E0`` the embedding parts' own floor; a line in ``p``, ``_Term.plines``).  ``D−`` is the domain of fewest one-end chains (``e ≤ ē =
2G/n``, the mean), whose pipeline flows are ``max(s, 2s − ē)`` per chain part
(:func:`~rankmap.solver.bound.gridcut._chain_term` without embedding parts).  ``D−`` and ``D+``
may be the same domain: the bound then holds a fortiori (one domain meets both
constraints).  The domains' shapes are not known: each side is the least over the level's shapes
(up to ``PAIR_SHAPES_MAX`` shapes).  (Charging each other class on the side of its higher floor,
as :func:`~rankmap.solver.bound.gridcut.nested_grid_bound` does for nested domains, raised no
quality instance further and took shapes² pairs of duals.)

Example (``tests/test_endpair.py``): eight leaves of 32 GPUs under 4:1 uplinks, tp4 cp2 pp4:
dp at its floor needs each leaf to hold one stage, so the leaves of the first and last stage
send 32 embedding flows each and the others 64 pipeline flows: one domain alone saw only the
second.
"""

from __future__ import annotations

import numpy as np

from .gridcut import _chain_term, _dual_bound, _half, _Term, _weights, domain_combos

__all__ = ["level_end_pair_bound", "PAIR_SHAPES_MAX", "END_PAIR_MAX_RANKS"]

#: Levels with more distinct domain shapes than this skip the end-pair bound (fragmented levels).
PAIR_SHAPES_MAX = 4
#: The end-pair bound runs up to this many ranks: at 512 GPUs it added 0.1-0.3 s of bound work and
#: raised no quality instance's bound (ft-oversub-32x8, 256 GPUs: 44.9 -> 45.5 ms; nvpairs-8x8: 101.0 -> 102.2).
END_PAIR_MAX_RANKS = 256


def emb_only_term(embs, m: float, mean_chains: float) -> _Term:
    """The embedding parts' term on ``D+`` as a function of the pipeline class's touched chains ``p``.

    ``embs``: ``[(c0, g)]`` per embedding part (own floor, seconds per split pair).
    ``max(Σ c0, [s ≥ 1]·Σ g · 2(p − (m − G/n)))`` (module doc; Σ_i max(c0_i, g_i e) ≥ max(Σ c0_i, Σ g_i e)).
    """
    c0 = sum(c for c, _g in embs)
    g = sum(g for _c, g in embs)
    return _Term(c0, 0.0, 0.0, ((0.0, 0.0),), plines=((2.0 * g, -2.0 * g * (m - mean_chains)),))


def _half_side(m: int, combos: list, pp: int, wmat: np.ndarray) -> float:
    """Least over ``combos`` of the dual with every class but ``pp`` at half its time (``inf``: none)."""
    logm = float(np.log(m))
    scale = np.full(len(combos[0][0]), 0.5) if combos else np.zeros(0)
    if combos:
        scale[pp] = 1.0
    best = np.inf
    for floors, boxes, pieces in sorted(combos, key=lambda t: float((t[0] * scale).sum())):
        if float((floors * scale).sum()) >= best:
            break
        best = min(best, _dual_bound(logm, wmat, boxes, [p if c == pp else _half(p) for c, p in enumerate(pieces)]))
    return best


def level_end_pair_bound(shapes: dict, axes, classes, covers, class_k, class_groups) -> float:
    """The end-pair bound of one level (module doc), seconds (0: none).

    ``shapes``: ``{(m, capacity): (terms, ends)}`` with ``terms`` the shape's class terms and
    ``ends = (other pp terms, chain parts, embedding parts, ē, G/n)`` (the chain and embedding
    tuples of :func:`~rankmap.solver.bound.gridcut._chain_term`).
    """
    if not shapes or "pp" not in classes or len(shapes) > PAIR_SHAPES_MAX:
        return 0.0
    names = sorted(classes)
    minus, plus = {}, {}
    for key, (terms, (other, chain, embs, ebar, mean)) in shapes.items():
        m = int(key[0])
        t_minus = dict(terms)
        t_minus["pp"] = list(other) + [_chain_term(chain, [], ebar)]
        t_plus = dict(terms)
        t_plus["pp"] = [emb_only_term(embs, m, mean)]
        minus[key] = domain_combos(m, axes, classes, t_minus, class_k, class_groups)
        plus[key] = domain_combos(m, axes, classes, t_plus, class_k, class_groups)
    if any(not c for c in minus.values()) or any(not c for c in plus.values()):
        return 0.0
    # Σ_c max(t_c(D−), t_c(D+)) ≥ Σ_c (t_c(D−) + t_c(D+))/2: the two domains apart, each at its least shape
    wmat = _weights(covers, names)
    half = (min(_half_side(int(k[0]), c, names.index("pp"), wmat) for k, c in minus.items())
            + min(_half_side(int(k[0]), c, names.index("pp"), wmat) for k, c in plus.items()))
    return float(half) if np.isfinite(half) else 0.0
