"""Per-domain relaxation of the joint cut bound: which groups a domain's ranks touch and split.

Used by :mod:`rankmap.solver.bound.cutbound` (the module doc there derives the
terms).  For one domain of ``m`` ranks and the classes of one rank grid, each
class is in one of three cases (**Z** no split group, **F** some split and
some whole, **N** no whole group); per case combination the least total time
over the touched-group counts ``p_c`` (relaxed to reals, ``y_c = log p_c``,
Shearer rows ``W y ≥ log m``) is bounded by its Lagrangian dual, evaluated
exactly per multiplier.  :func:`nested_grid_bound` bounds two nested domains
at once (a host inside its leaf): each class pays the larger of its two
terms.
"""

from __future__ import annotations

from typing import Mapping

import numpy as np

from .work import DOMAIN_COMBOS_SECONDS, DUAL_VALUE_SECONDS, charge

__all__ = ["domain_grid_bound", "nested_grid_bound"]

#: Multipliers tried per coordinate of the dual (log-spaced, plus 0).
LAMBDA_GRID = 40
#: Coordinate-ascent sweeps over the dual's multipliers.
DUAL_ROUNDS = 3


class _Term:
    """One part's time as a function of the split count ``s`` of its class and its touched-group count ``p``:
    ``max(c0, [s≥1]·c1, max over lines (g·s + h), [s≥1]·max over plines (β·p + h))`` (the cut term:
    ``g·s``; a chain's also ``2g·s − g·ē``; ``β·p``: NCCL's channels (:mod:`.cutbound`), embedding
    pairs a domain must split (:mod:`.endpair`))."""

    __slots__ = ("c0", "c1", "lines", "plines")

    def __init__(self, c0: float, c1: float, g: float, lines: tuple = (), plines: tuple = ()):
        self.c0, self.c1 = float(c0), float(c1)
        self.lines = tuple((float(a), float(b)) for a, b in lines) or ((float(g), 0.0),)
        self.plines = tuple((float(a), float(b)) for a, b in plines if a > 0)


def _chain_term(chains, embs, emax: float = np.inf, emb_split=None) -> _Term:
    """One term for a pipeline class's chain parts and the embedding parts on the chains' end ranks.

    ``chains``: ``[(c0, c', g)]`` per chain part (time ``c0`` with no split chain,
    ``c' ≥ c0`` once one is split, ``g`` seconds per flow out of the domain);
    ``embs``: ``[(c0, g)]`` per embedding part (Megatron's ``EMBEDDING_GROUP``:
    first and last stage of each chain, a two-rank all-reduce).  A split chain
    whose members in ``D`` are a prefix or suffix holds exactly one end, so its
    embedding pair is split too and sends one flow out of ``D``; every other
    split chain crosses ``D``'s boundary on two edges.  With ``e`` split
    embedding pairs (``0 ≤ e ≤ s``, and ``e ≤ emax`` where the chain-end count
    bounds them), the parts take at least
    ``h(s) = min_e Σ_chains max(c', g(2s − e)) + Σ_embs E(e)``, ``E`` the
    embedding part's convex minorant of ``c0`` at ``e = 0`` and ``max(c1, g·e)``
    on whole ``e ≥ 1`` (``c1``: ``emb_split``, its floor once a pair is split, else
    ``c0``; :mod:`.embpair`) (``e`` counts pairs; relaxed to reals): convex
    and non-decreasing in ``s`` (the minimum of a jointly convex function over
    a convex set), exact on its breakpoints (intersections of ``2s − e = c'/g``,
    ``e = c0/g``, ``e = 1``, ``e = 0``, ``e = s``, ``e = emax``), returned as the max of
    its segments' lines.  Without embedding parts it is
    ``Σ max(c', g·max(s, 2s − emax))``.
    """
    from .embpair import emb_lines

    tp_ = [c / g for _c0, c, g in chains if g > 0]
    # e counts pairs: each part's max(c0, c0 + σ·e, g·e), convex under its floors at whole e (embpair.py;
    # emb_split: each part's floor once a pair is split)
    el = emb_lines(embs, emb_split)
    be = [1.0] + [c / g for c, g in embs if g > 0]  # the embedding terms' breakpoints in e
    be += [c / (g - sg) for c, sg, g in el if g > sg]
    ecaps = [emax] if np.isfinite(emax) else []

    def emb(e: float) -> float:
        return sum(max(c, c + sg * e, g * e) for c, sg, g in el)

    def h(s: float) -> float:
        top = min(s, emax)
        cand = {0.0, top}
        cand.update(min(max(2 * s - t, 0.0), top) for t in tp_)
        cand.update(min(t, top) for t in be)
        return min(sum(max(c, g * (2 * s - e)) for _c0, c, g in chains) + emb(e) for e in cand)

    bps = {0.0, 1.0}
    bps.update(t / 2 for t in tp_)
    bps.update(tp_)
    bps.update(be)
    bps.update((a + b) / 2 for a in tp_ for b in be + ecaps)
    bps.update(ecaps)
    xs = []
    for x in sorted(x for x in bps if x >= 0 and np.isfinite(x)):
        if not xs or x > xs[-1] + 1e-9 * max(1.0, xs[-1]):  # breakpoints equal but for rounding: one
            xs.append(x)
    xs.append(xs[-1] + 1.0)
    ys = [h(x) for x in xs]
    lines = []
    for (x0, y0), (x1, y1) in zip(zip(xs[:-1], ys[:-1]), zip(xs[1:], ys[1:])):
        if x1 > x0:
            g = max((y1 - y0) / (x1 - x0), 0.0)
            lines.append((g, y0 - g * x0))
    # no line above h at a breakpoint: h is piecewise linear with its kinks among them, so a line below it
    # there is below it on [0, xs[-1]]; a chord is (issue 25: two breakpoints 3.5 apart only by rounding gave
    # a flat chord at h(3.5) that the max of lines kept for every s, 3 ms above h at s = 2)
    lines = [(g, min([b] + [y - g * x for x, y in zip(xs, ys)])) for g, b in lines]
    c0 = sum(c for c, _c1, _g in chains) + sum(c for c, _g in embs)
    return _Term(c0, 0.0, 0.0, tuple(lines))


def _pieces(terms: list[_Term], a: float, b: float):
    """Σ_terms max(c', max over lines (g·u + h), β_t·P) with ``u = a·P + b`` (``P = e^y``), as pieces
    (P lo, P hi, α, β).

    The cost of a class with at least one split group when ``s ≥ u``: ``s ≥
    max(1, u)`` makes each term ``max(c0, c1, g·max(1, u) + h, …) = max(c', g·u + h, …)``
    (slopes ``g ≥ 0``).  A term's line ``β·P + h`` in ``P`` itself (``plines``, not in ``s``) joins
    the lines as ``(β/a)·u − β·b/a + h`` but not ``c'`` (its value at ``s = 1`` is no floor).
    On each piece the sum is ``α + β·P`` (``β ≥ 0``); pieces are in increasing ``P`` and cover ``[0, ∞)``.
    """
    cs = [max([t.c0, t.c1] + [g + h for g, h in t.lines]) for t in terms]
    lines_of = [t.lines + tuple((be / a, h - be * b / a) for be, h in t.plines) for t in terms]
    bps = set()
    for c, t, tl in zip(cs, terms, lines_of):
        for i, (g, h) in enumerate(tl):
            if g > 0:
                bps.add(((c - h) / g - b) / a)  # g·(aP + b) + h = c'
            for g2, h2 in tl[i + 1:]:
                if g != g2:
                    bps.add(((h2 - h) / (g - g2) - b) / a)  # two lines cross
    edges = [0.0] + sorted(x for x in bps if x > 0 and np.isfinite(x)) + [np.inf]
    out = []
    for lo, hi in zip(edges[:-1], edges[1:]):
        mid = lo + 1.0 if hi == np.inf else 0.5 * (lo + hi)
        u = a * mid + b
        alpha = beta = 0.0
        for c, tl in zip(cs, lines_of):
            g, h = max(tl, key=lambda gh: gh[0] * u + gh[1])
            if g > 0 and g * u + h > c:
                alpha += g * b + h
                beta += g * a
            else:
                alpha += c
        out.append((lo, hi, alpha, beta))
    return out


def _inner_min(pieces, ylo: float, yhi: float, lw: np.ndarray) -> np.ndarray:
    """``min over y in [ylo, yhi] of f(y) − lw·y`` for each ``lw`` (μ, shape (L,)), exact per piece."""
    best = np.full(lw.shape, np.inf)
    for plo, phi, alpha, beta in pieces:
        a = max(ylo, np.log(plo) if plo > 0 else -np.inf)
        b = min(yhi, np.log(phi) if np.isfinite(phi) else np.inf)
        if a > b:
            continue
        if beta > 0:
            with np.errstate(divide="ignore", over="ignore"):
                ystar = np.log(np.maximum(lw, 1e-300) / beta)
            y = np.clip(ystar, a, b)
            val = alpha + beta * np.exp(y) - lw * y
        else:
            y = np.full(lw.shape, b)  # −lw·y decreases in y
            val = alpha - lw * y
        best = np.minimum(best, val)
    return best


class _InnerMins:
    """:func:`_inner_min` of every class at once: ``mins[n, c] = min over y in [lo_c, hi_c] of f_c(y) − mu[n, c]·y``.

    Built once per dual from each class's pieces (the pieces outside a class's box dropped); a call
    evaluates every remaining piece of every class in one array of shape (N, pieces) and takes each
    class's least (``np.minimum.reduceat``): the same arithmetic per piece as :func:`_inner_min`,
    a few numpy calls instead of a few per piece.
    """

    def __init__(self, pieces, lo: np.ndarray, hi: np.ndarray):
        cls, a_all, b_all, al_all, be_all = [], [], [], [], []
        self.empty = np.zeros(len(pieces), dtype=bool)
        for c, pcs in enumerate(pieces):
            n0 = len(cls)
            for plo, phi, alpha, beta in pcs:
                a = max(lo[c], np.log(plo) if plo > 0 else -np.inf)
                b = min(hi[c], np.log(phi) if np.isfinite(phi) else np.inf)
                if a > b:
                    continue
                cls.append(c)
                a_all.append(a)
                b_all.append(b)
                al_all.append(alpha)
                be_all.append(beta)
            self.empty[c] = len(cls) == n0
        self.cls = np.asarray(cls, dtype=np.int64)
        self.a, self.b = np.asarray(a_all, dtype=float), np.asarray(b_all, dtype=float)
        self.alpha, self.beta = np.asarray(al_all, dtype=float), np.asarray(be_all, dtype=float)
        self.pos = self.beta > 0
        self.beta_div = np.where(self.pos, self.beta, 1.0)
        self.starts = np.flatnonzero(np.r_[True, self.cls[1:] != self.cls[:-1]]) if self.cls.size else self.cls
        self.C = len(pieces)

    def __call__(self, mu: np.ndarray) -> np.ndarray:
        """``mu`` shape (N, C) -> the inner minima, shape (N, C) (``inf`` for a class with no piece in its box)."""
        N = mu.shape[0]
        out = np.full((N, self.C), np.inf)
        if not self.cls.size:
            return out
        lw = mu[:, self.cls]
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            ystar = np.log(np.maximum(lw, 1e-300) / self.beta_div)
            y = np.where(self.pos, np.clip(ystar, self.a, self.b), self.b)  # β = 0: −lw·y decreases in y
            val = self.alpha + np.where(self.pos, self.beta * np.exp(y), 0.0) - lw * y
        out[:, ~self.empty] = np.minimum.reduceat(val, self.starts, axis=1)
        return out


def _dual_bound(logm: float, wmat: np.ndarray, boxes, pieces) -> float:
    """A lower bound on ``min Σ_c f_c(y_c)`` over ``y_c ∈ boxes[c]`` with ``wmat @ y ≥ log m`` (every row).

    The Lagrangian dual ``max over λ ≥ 0 of λ·1·log m + Σ_c min_{y ∈ box} (f_c(y)
    − (λ·wmat)_c·y)`` is separable and each inner minimum exact
    (:func:`_inner_min`), so every λ gives a valid value; λ is improved by
    coordinate ascent over log-spaced grids (``DUAL_ROUNDS`` sweeps).
    ``inf`` when no ``y`` in the boxes meets a row.
    """
    lo = np.array([b[0] for b in boxes])
    hi = np.array([b[1] for b in boxes])
    if np.any(lo > hi + 1e-12) or np.any(wmat @ hi < logm - 1e-12):
        return np.inf
    J, C = wmat.shape
    inner = _InnerMins(pieces, lo, hi)

    def value(lam: np.ndarray) -> np.ndarray:  # lam (N, J)
        charge(DUAL_VALUE_SECONDS)
        mins = inner(lam @ wmat)
        v = lam.sum(axis=1) * logm
        for c in range(C):
            v = v + mins[:, c]
        return v

    lam = np.zeros(J)
    best = float(value(lam[None])[0])
    if J == 0 or np.all(wmat @ lo >= logm - 1e-12):
        return best  # the lower ends meet every row: each f_c is least there
    slope = max(max(b for _l, _h, _a, b in pcs) * float(np.exp(h)) for pcs, h in zip(pieces, hi))
    top = max(slope / max(float(wmat[wmat > 0].min()), 1e-12), 1e-300)
    grid = np.concatenate([[0.0], np.geomspace(top * 1e-9, top * 4.0, LAMBDA_GRID)])
    for _sweep in range(DUAL_ROUNDS):
        for j in range(J):
            trial = np.repeat(lam[None], grid.size, axis=0)
            trial[:, j] = grid
            v = value(trial)
            i = int(np.argmax(v))
            if v[i] > best:
                best, lam = float(v[i]), trial[i]
    return best


def _prod(axes: Mapping[str, int], names) -> int:
    """Π of the sizes of the axes ``names``."""
    out = 1
    for a in names:
        out *= int(axes[a])
    return out


#: Case-combination pairs whose duals :func:`nested_grid_bound` evaluates at most (then the next pair's floor).
NESTED_DUALS_MAX = 32


def _weights(covers, names) -> np.ndarray:
    """Shearer rows, shape (len(covers), len(names))."""
    return np.array([[w.get(c, 0.0) for c in names] for w in covers]).reshape(len(covers), len(names))


def domain_combos(m: int, axes, classes, class_terms, class_k, class_groups) -> list:
    """The feasible case combinations of one domain of ``m`` ranks: ``[(floors (C,), boxes, pieces)]``.

    Each class with bytes is in one of three cases: **Z** no split group
    (``p = m/k``), **F** some split and some whole group, **N** no whole group
    (``s = p``, ``p ≥ m/(k−1)``).  The domain's rank set ``S`` is closed along
    the axes of every Z class, so it is a union of boxes spanning those axes
    ("Z axes"): ``m`` is a multiple of a box and each ``p_d`` (and ``s_d``) a
    multiple of ``Π_{Z axes ∖ axes(d)} n_a``.  A whole group of a Z or F class
    ``c``, closed along the Z axes, is a box in ``S`` spanning ``axes(c) ∪ Z
    axes``: it touches ``Π_{(axes(c) ∪ Z axes) ∖ axes(d)} n_a`` groups of every
    other class ``d``.  ``boxes`` are the resulting ``[log p_lo, log p_hi]``
    per class (classes in sorted order), ``pieces`` each class's time as a
    function of ``P = p`` (:func:`_pieces`), ``floors`` each class's least time
    in its box.  An empty list when nothing is costed.
    """
    names = sorted(classes)
    if not any(class_terms.get(c) for c in names):
        return []
    charge(DOMAIN_COMBOS_SECONDS)
    options = {}
    for c in names:
        k, terms = class_k[c], class_terms.get(c, [])
        if not terms:
            options[c] = [("N", None)]
            continue
        opts = []
        if m % k == 0 and m // k <= class_groups[c]:
            opts.append(("Z", [(0.0, np.inf, sum(t.c0 for t in terms), 0.0)]))
        if m >= k:
            opts.append(("F", _pieces(terms, k / (k - 1), -m / (k - 1))))
        if k > 1:
            opts.append(("N", _pieces(terms, 1.0, 0.0)))
        options[c] = opts
    combos = [[]]
    for c in names:
        combos = [cb + [(c, o)] for cb in combos for o in options[c]]
    out = []
    for cb in combos:
        zaxes = frozenset().union(*(classes[c] for c, (case, _p) in cb if case == "Z"))
        if m % _prod(axes, zaxes):
            continue
        lo = {c: -(-m // class_k[c]) for c in names}
        hi = {c: min(m, class_groups[c]) for c in names}
        pcs = {}
        for c, (case, pieces) in cb:
            k = class_k[c]
            if case == "Z":
                lo[c], hi[c] = max(lo[c], m // k), min(hi[c], m // k)
            elif case == "F":
                lo[c] = max(lo[c], m // k + 1)
            elif pieces is not None:  # N with bytes: every touched group holds at most k − 1 ranks
                lo[c] = max(lo[c], m / (k - 1))
            if case in ("Z", "F"):
                box = zaxes | classes[c]
                for d in names:
                    if d != c:
                        lo[d] = max(lo[d], _prod(axes, box - classes[d]))
            pcs[c] = pieces if pieces is not None else [(0.0, np.inf, 0.0, 0.0)]
        for c in names:
            step = _prod(axes, zaxes - classes[c])
            lo[c] = float(np.log(step * np.ceil(lo[c] / step - 1e-9)))
            hi[c] = float(np.log(max(step * np.floor(hi[c] / step + 1e-9), 1e-300)))
        boxes = [(lo[c], hi[c]) for c in names]
        if any(a > b + 1e-12 for a, b in boxes):
            continue
        floors = _InnerMins([pcs[c] for c in names], [lo[c] for c in names], [hi[c] for c in names])(
            np.zeros((1, len(names))))[0]
        out.append((floors, boxes, [pcs[c] for c in names]))
    return out


def domain_grid_bound(m: int, axes, classes, covers, class_terms, class_k, class_groups) -> float:
    """Least Σ over the grid's classes of their parts' times for one domain of ``m`` ranks, seconds.

    The least over :func:`domain_combos` of each combination's dual
    (:func:`_dual_bound`, linear in ``y = log p`` next to the Shearer rows of
    every weight vector in ``covers``); combinations in increasing floor, so
    the search stops at the first floor above the least found.  0 when nothing
    is costed or no combination is feasible.
    """
    combos = domain_combos(m, axes, classes, class_terms, class_k, class_groups)
    if not combos:
        return 0.0
    logm, wmat = float(np.log(m)), _weights(covers, sorted(classes))
    best = np.inf
    for floors, boxes, pieces in sorted(combos, key=lambda t: float(t[0].sum())):
        if float(floors.sum()) >= best:
            break  # this combination's dual is at least its floor: it cannot lower the least
        best = min(best, _dual_bound(logm, wmat, boxes, pieces))
    return 0.0 if not np.isfinite(best) else best


def _half(pieces):
    """A class's pieces at half its time (``α/2 + β/2·P``; :mod:`.endpair`)."""
    return [(lo, hi, a / 2.0, b / 2.0) for lo, hi, a, b in pieces]


def nested_grid_bound(m_in: int, inner: list, m_out: int, outer: list, classes, covers,
                      target: float = 0.0, own: tuple[dict, dict] | None = None) -> float:
    """Least Σ_c max(T_c of the inner domain, T_c of the outer) over two nested domains, seconds.

    A class's time is at least its term for every domain, so for a domain of
    ``m_in`` ranks inside one of ``m_out`` (a host inside its leaf, with each
    level's class terms) the total is at least ``Σ_c max(t_c(inner), t_c(outer))``
    whatever either domain holds: the least over every pair of case
    combinations (``inner``, ``outer``: :func:`domain_combos` of each) bounds
    it.  Per pair, each class is charged to the domain where its floor is
    higher (``θ_c``), and ``Σ_c max(a_c, b_c) ≥ Σ_{θ} a_c + Σ_{¬θ} b_c`` splits
    the pair into two single-domain duals; each domain's own dual bounds it
    too.  Pairs in increasing ``Σ_c max(floors)``; after ``NESTED_DUALS_MAX``
    pairs the next pair's floor stands for the rest, and the search stops as
    soon as a pair's value is at most ``target`` (the caller's bound so far:
    the result could not raise it).  ``own``: caches of each side's own duals
    by combination index, shared between calls on the same combinations.
    0 when either side has no combination.
    """
    if not inner or not outer:
        return 0.0
    wmat = _weights(covers, sorted(classes))
    lm_in, lm_out = float(np.log(m_in)), float(np.log(m_out))
    own_in, own_out = own if own is not None else ({}, {})
    f_in = np.array([f for f, _b, _p in inner])
    f_out = np.array([f for f, _b, _p in outer])
    floors = np.maximum(f_in[:, None, :], f_out[None, :, :]).sum(axis=2)
    order = np.argsort(floors, axis=None, kind="stable")
    free = [(0.0, np.inf, 0.0, 0.0)]
    best = np.inf
    for n, idx in enumerate(order):
        i, j = divmod(int(idx), len(outer))
        fl = float(floors[i, j])
        if fl >= best:
            break
        if n >= NESTED_DUALS_MAX:
            best = min(best, fl)
            break
        theta = f_in[i] >= f_out[j]
        (_f, b_in, p_in), (_g, b_out, p_out) = inner[i], outer[j]
        if i not in own_in:
            own_in[i] = _dual_bound(lm_in, wmat, b_in, p_in)
        if j not in own_out:
            own_out[j] = _dual_bound(lm_out, wmat, b_out, p_out)
        v = max(own_in[i], own_out[j])
        if v < best:
            v = max(v, _dual_bound(lm_in, wmat, b_in, [p if t else free for p, t in zip(p_in, theta)])
                    + _dual_bound(lm_out, wmat, b_out, [free if t else p for p, t in zip(p_out, theta)]))
        best = min(best, v)
        if best <= target:
            break
    return 0.0 if not np.isfinite(best) else best
