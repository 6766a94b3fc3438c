"""The anytime phase (solver/anytime.py): it improves within its own evaluation budget and stops at the bound."""

from __future__ import annotations

import numpy as np
import pytest

from rankmap.solver import SolveOptions, cluster_from_graph, layout_cost, parallel_config
from rankmap.solver.search.anytime import anytime_search
from rankmap.solver.megatron.catalogue import megatron_groups
from rankmap.solver.search.deadline import Deadline
from rankmap.solver.search.problem import Candidate

from test_partition import two_leaves  # noqa: E402  (tests/ is on sys.path)

pytest.importorskip("pymetis")


def setup():
    cl = cluster_from_graph(two_leaves())
    cfg = parallel_config(32, tp=8, pp=2)
    traffic = {"pp": 4e9, "dp": 1e8}
    grp = megatron_groups(cfg)

    def score(c, dev, g=None):
        return layout_cost(cl, c, dev, traffic, g)

    base = Candidate(cfg, np.arange(32), score(cfg, np.arange(32), grp), 0)
    return cl, cfg, traffic, score, base


def run(bound, opts):
    cl, cfg, traffic, score, base = setup()
    never = Deadline(3600.0)
    return base, anytime_search(cl, [base], traffic, traffic, {}, opts, opts.mode == "launcher", (),
                                np.arange(32), never, score, bound)


def test_anytime_improves_the_baseline_to_leaf_local_pipelines():
    """From the 321 ms baseline (pp across leaves, tests/test_partition.py) to 84 ms (pp leaf-local, dp across).

    The first extra partition seed already finds the leaf-local pipeline: pp
    4e9 / 50 GB/s = 80 ms, dp 16 x 5e7 over a 200 GB/s leaf uplink = 4 ms.  Both layouts add
    NCCL's latency of a pp send and a dp all-gather of 2 across hosts: 2 x (8.4 + 14) = 44.8 us.
    Same input, same budget: the same candidates twice.
    """
    opts = SolveOptions(mode="launcher", time_limit_seconds=2.0)
    base, out = run(0.0, opts)
    assert base.cost.total_seconds == pytest.approx(0.321 + 44.8e-6, rel=1e-9)
    assert min(c.cost.total_seconds for c in out) == pytest.approx(0.084 + 44.8e-6, rel=1e-9)
    _, again = run(0.0, opts)
    assert [c.dev_of_rank.tolist() for c in out] == [c.dev_of_rank.tolist() for c in again]


def test_anytime_stops_at_the_bound():
    """A best candidate already at the bound: nothing to improve, nothing is evaluated."""
    opts = SolveOptions(mode="launcher", time_limit_seconds=2.0)
    _, out = run(0.321 + 44.8e-6, opts)  # the baseline's cost (see above)
    assert out == []


def test_anytime_fixed_mode_does_nothing():
    _, out = run(0.0, SolveOptions(mode="fixed", time_limit_seconds=2.0))
    assert out == []
