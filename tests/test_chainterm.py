"""The pipeline chain term of the joint cut bound (solver/bound/gridcut.py ``_chain_term``): its lines stay below
the least time they stand for."""

from __future__ import annotations

import numpy as np
import pytest

from rankmap.solver.bound.gridcut import _chain_term


def _h(chains, embs, emax: float, s: float) -> float:
    """The least over e in [0, min(s, emax)] of the chain and embedding parts' times (``_chain_term`` doc), on a
    fine grid of e (the function is piecewise linear in e: exact at its kinks, which the grid holds here)."""
    es = np.linspace(0.0, min(s, emax), 4001)
    return min(sum(max(c, g * (2 * s - e)) for _c0, c, g in chains)
               + sum(max(c, c + (max(c, g) - c) * e, g * e) for c, g in embs) for e in es)


def test_breakpoints_equal_but_for_rounding_do_not_lift_the_term():
    """nvpairs-8x8 tp2 pp4, the NVLink pairs' domain (issue 25): the chain's c'/g and the embedding's c0/g are
    both 3.5 up to rounding.  At s = 2 the least time is the chain's c' = 4.194304 ms (2·2 − 1 = 3 flows of
    1.198 ms: 3.595 ms < c') plus the embedding's 12.877824 ms (one split pair, e = 1: its g·e = 3.68 ms <
    c0): 17.072128 ms.  The term said 20.068 ms (a flat chord at h(3.5)) before the fix."""
    chains = [(0.004194304, 0.004194304, 0.0011983725714285714)]
    embs = [(0.012877824, 0.0036793782857142856)]
    t = _chain_term(chains, embs, 1.0)
    at2 = max(t.c0, max(a * 2.0 + b for a, b in t.lines))
    assert at2 == pytest.approx(0.004194304 + 0.012877824, rel=1e-12)
    for s in np.linspace(0.0, 6.0, 61):
        val = max(t.c0, max(a * s + b for a, b in t.lines))
        assert val <= _h(chains, embs, 1.0, s) + 1e-12, s


@pytest.mark.parametrize("seed", range(20))
def test_lines_never_above_the_least_time(seed):
    rng = np.random.default_rng(seed)
    g = float(rng.uniform(0.5, 2.0)) * 1e-3
    c1 = float(rng.choice([2.5, 3.0, 3.5, rng.uniform(1, 5)])) * g
    ge = float(rng.uniform(0.5, 4.0)) * 1e-3
    ce = float(rng.choice([3.5 * g / ge, rng.uniform(0.5, 5)])) * ge  # sometimes the same breakpoint
    chains = [(c1 * (1 - 1e-16), c1, g)]
    embs = [(ce * (1 + 1e-16), ge)]
    emax = float(rng.choice([1.0, 2.0, np.inf]))
    t = _chain_term(chains, embs, emax)
    for s in np.linspace(0.0, 8.0, 33):
        val = max(t.c0, max(a * s + b for a, b in t.lines))
        assert val <= _h(chains, embs, emax, s) * (1 + 1e-9) + 1e-15, s
