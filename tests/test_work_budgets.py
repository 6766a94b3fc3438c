"""Work budgets that fit the time limit, and the same answer for the same budget (issue 28.4).

The deterministic work budgets (evaluation, swap, FAQ-iteration counts, CP-SAT deterministic
time) decide the answer; the wall clock is only a safety stop.  Free-mode 512-GPU solves used to
end at the wall-clock stop (their shares added up to 1.24 of the limit), so their answer depended
on the machine's speed.
"""

from __future__ import annotations

import numpy as np
import pytest

from rankmap.solver import SolveOptions, cluster_from_graph, fat_tree_cluster, parallel_config, solve
from rankmap.solver.search import anytime, refine
from rankmap.solver.search import solve as solve_module
from rankmap.solver.search.deadline import Deadline
from rankmap.solver.search.polish import FAQ_FLOPS_PER_SECOND, faq_iteration_seconds


def test_the_shares_leave_room_under_the_limit():
    launcher = (refine.CPSAT_SHARE + refine.FAQ_SHARE + refine.POLISH_SHARE + refine.DESCENT_SHARE
                + anytime.ANYTIME_SHARE)
    # 0.15 + 1/12 + 0.1 + 0.22 + 0.07 = 0.6233
    assert launcher == pytest.approx(0.15 + 1 / 12 + 0.1 + 0.22 + 0.07)
    assert launcher < 0.65
    # free mode: the launcher budgets, the tree partitions (0.12), then a free phase of 0.12 of the limit
    # (digit orders 1/8, FAQ 1/12, polish 0.1, descent 0.22, anytime 0.07 of it: 0.5983): 0.6233 + 0.12 + 0.12 · 0.5983 = 0.8151
    free = launcher + solve_module.FREE_PARTITION_SHARE + solve_module.FREE_AFTER_LAUNCHER_SHARE * (
        refine.VIRTUAL_SHARE + refine.FAQ_SHARE + refine.POLISH_SHARE + refine.DESCENT_SHARE + anytime.ANYTIME_SHARE)
    assert free == pytest.approx(0.8151, abs=1e-3)
    assert free < 0.85  # was 1.24
    assert solve_module.budget_shares("launcher") == pytest.approx(launcher)
    assert solve_module.budget_shares("free") == pytest.approx(free)
    assert solve_module.budget_shares("fixed") == 0.0


def test_faq_starts_fit_their_share():
    # one FAQ iteration on 512 items: 512³ / 1.5e8 = 0.8948 s nominal; 2 iterations (FAQ's minimum) = 1.79 s
    assert faq_iteration_seconds(512) == pytest.approx(512 ** 3 / FAQ_FLOPS_PER_SECOND) == pytest.approx(0.89478, rel=1e-4)
    # T = 6 s: the FAQ share is 6/12 = 0.5 s, which pays for 0.28 starts -> the best start only (it ran 5)
    assert max(1, int(6 * refine.FAQ_SHARE / (2 * faq_iteration_seconds(512)))) == 1
    # 128 items, T = 6 s: 128³ / 1.5e8 = 13.98 ms; 0.5 s / 27.96 ms = 17 starts (all of them)
    assert int(6 * refine.FAQ_SHARE / (2 * faq_iteration_seconds(128))) == 17


def test_same_input_same_budget_same_answer():
    """Free mode, 128 GPUs, every order: two solves whose budgets complete (no wall-clock stop) agree
    layout for layout, and both say they were not stopped."""
    g = fat_tree_cluster(16, 8, tiers=[(4, 4.0), (2, 2.0)])
    cluster = cluster_from_graph(g)
    cfg = parallel_config(128, tp=4, cp=2, pp=4)
    traffic = {"tp": 4e9, "cp": 1e9, "dp": 2e9, "pp": 6e8}
    runs = [solve(cluster, cfg, traffic, SolveOptions(mode="free", orders="all", time_limit_seconds=2.0),
                  deadline=Deadline(1e9)) for _ in range(2)]
    a, b = runs
    assert a.stopped_by == b.stopped_by == ""
    assert a.order == b.order and a.layout.assignment == b.layout.assignment
    assert a.cost.total_seconds == b.cost.total_seconds
    assert np.isfinite(a.cost.total_seconds) and a.cost.total_seconds <= a.baseline.cost.total_seconds


def test_load_reserve():
    from rankmap.solver.search.deadline import load_reserve

    # 131,072 ranks: nominal cluster model 3e-5 · 131072 = 3.932 s; the reserve of a 30 s limit is
    # min(12, 5.5e-5 · 131072 = 7.209) = 7.209 s
    assert load_reserve(30.0, 131072, 3.9) == 0.0  # as fast as assumed
    # twice as slow (7.864 s): one more reserve, 7.209 s earlier
    assert load_reserve(30.0, 131072, 2 * 3e-5 * 131072) == pytest.approx(5.5e-5 * 131072)
    # four times as slow: 3 · 7.209 = 21.6 s, capped at 0.4 · 30 = 12 s
    assert load_reserve(30.0, 131072, 4 * 3e-5 * 131072) == pytest.approx(12.0)
    # below 16,384 ranks nothing changes, however slow
    assert load_reserve(30.0, 8192, 100.0) == 0.0


def test_the_bound_work_is_counted_and_left_out_of_the_search_budgets(monkeypatch):
    """The bound runs outside every work budget; its counted work (deterministic) is taken from the limit the
    search's budgets are sized from (issue 28.4: at 512 GPUs the bound took a fifth of a 6 s limit)."""
    from rankmap.solver.bound.analytic import search_lower_bound
    from rankmap.solver.bound.rates import pair_route_seconds
    from rankmap.solver.bound.work import BOUND_PART_SECONDS, bound_work_meter
    from rankmap.solver.megatron.orders import candidate_orders

    # the limit less the work beyond the room under 0.8 of it, at least half of it.  Free mode's shares
    # (0.8151) leave no room: 1.93 s of bound work leaves 6 - 1.93 = 4.07 s
    assert solve_module.SOLVE_WORK_SHARE == 0.8
    assert solve_module.budget_shares("free") == pytest.approx(0.8151, abs=1e-4)
    assert solve_module.search_budget_seconds(6.0, 1.93, "free") == pytest.approx(4.07)
    # launcher: room (0.8 - 0.6233) * 6 = 1.06 s; 1.93 s leaves 6 - 0.87 = 5.13 s; 1 s leaves the whole limit
    assert solve_module.search_budget_seconds(6.0, 1.93, "launcher") == pytest.approx(5.13, abs=1e-3)
    assert solve_module.search_budget_seconds(6.0, 1.0, "launcher") == 6.0
    assert solve_module.search_budget_seconds(6.0, 5.0, "free") == pytest.approx(3.0)
    assert solve_module.SEARCH_BUDGET_MIN_SHARE == 0.5

    cluster = cluster_from_graph(fat_tree_cluster(8, 8, tiers=[(2, 4.0)]))
    cfg = parallel_config(64, tp=4, pp=2)
    traffic = {"tp": 4e9, "dp": 2e9, "pp": 6e8}
    orders = candidate_orders(cfg, "all")
    works = []
    for _ in range(2):
        with bound_work_meter() as work:
            b = search_lower_bound(cluster, orders, traffic, None, "launcher")
        works.append(work())
    # 3 classes with bytes, one part each: at least their part terms, once for the sizes and once per order,
    # and the exact ECMP pass over every GPU pair: 64 · 63 pairs × (2² + 1) route options × 3e-7 s = 6.048 ms
    # (counted on both runs although the second found it cached)
    assert pair_route_seconds(cluster) == pytest.approx(64 * 63 * 5 * 3e-7) == pytest.approx(6.048e-3)
    assert works[0] == works[1] >= BOUND_PART_SECONDS * 3 * (1 + len(orders)) + pair_route_seconds(cluster)
    # above ECMP_EXACT_MAX_DEVICES (512) GPUs the pass is not made and not counted
    assert pair_route_seconds(cluster_from_graph(fat_tree_cluster(65, 8, tiers=[(2, 4.0)]))) == 0.0
    assert b > 0
    seen = []
    real_limit = solve_module.refine_limit_seconds

    def spy(time_limit_seconds, scoring_seconds, mode):
        seen.append(time_limit_seconds)
        return real_limit(time_limit_seconds, scoring_seconds, mode)

    monkeypatch.setattr(solve_module, "refine_limit_seconds", spy)
    r = solve(cluster, cfg, traffic, SolveOptions(mode="launcher", orders="all", time_limit_seconds=0.2),
              deadline=Deadline(1e9))
    # a 0.2 s limit leaves (0.8 - 0.6233) * 0.2 = 0.035 s of room: the rest of the bound's work comes off, down
    # to half the limit (SEARCH_BUDGET_MIN_SHARE; the per-order joint cuts of orderjoint.py made this bound's
    # work more than 0.135 s, so the floor decides here)
    assert works[0] > 0.05
    room = (0.8 - solve_module.budget_shares("launcher")) * 0.2
    assert seen and seen[0] == pytest.approx(max(0.5 * 0.2, 0.2 - (works[0] - room)), rel=1e-12)
    # and with a limit whose room covers most of the bound's work, the limit less the rest (no floor)
    seen.clear()
    T = 4 * works[0]  # room 0.71 of the work: 0.29 of it comes off
    solve(cluster, cfg, traffic, SolveOptions(mode="launcher", orders="all", time_limit_seconds=T),
          deadline=Deadline(1e9))
    room = (0.8 - solve_module.budget_shares("launcher")) * T
    assert seen and seen[0] == pytest.approx(T - max(0.0, works[0] - room), rel=1e-12)
    assert r.bound_seconds == pytest.approx(b, rel=1e-12)


def test_free_mode_launcher_phase_has_the_launcher_solves_budgets(monkeypatch):
    """Free mode runs the launcher search first with exactly a launcher solve's budgets (its two bounds count
    the launcher bound's work), so it reaches the launcher answer (free mode is never worse); the free-only
    phases are sized from the free limit.  (nvl72-frag-8192: a launcher phase sized from the free limit gave
    130.8 ms against the launcher solve's 116.1 ms.)"""
    cluster = cluster_from_graph(fat_tree_cluster(8, 8, tiers=[(2, 4.0)]))
    cfg = parallel_config(64, tp=4, pp=2)
    traffic = {"tp": 4e9, "dp": 2e9, "pp": 6e8}
    seen = []

    def spy(time_limit_seconds, scoring_seconds, mode):
        seen.append((mode, time_limit_seconds))
        return real_limit(time_limit_seconds, scoring_seconds, mode)

    real_limit = solve_module.refine_limit_seconds
    monkeypatch.setattr(solve_module, "refine_limit_seconds", spy)
    runs = {}
    for mode in ("launcher", "free"):
        seen.clear()
        runs[mode] = solve(cluster, cfg, traffic, SolveOptions(mode=mode, orders="all", time_limit_seconds=0.2),
                           deadline=Deadline(1e9))
        runs[mode + " limits"] = list(seen)
    launcher_T = runs["launcher limits"][0]
    assert launcher_T[0] == "launcher"
    free_launcher_phase = [t for m, t in runs["free limits"] if m == "launcher"]
    assert free_launcher_phase == [launcher_T[1]]
    # the free phase after it: FREE_AFTER_LAUNCHER_SHARE of the free limit, which is below the launcher's
    free_phase = [t for m, t in runs["free limits"] if m == "free"]
    assert len(free_phase) == 1 and free_phase[0] < launcher_T[1] * solve_module.FREE_AFTER_LAUNCHER_SHARE + 1e-12
    assert runs["free"].cost.total_seconds <= runs["launcher"].cost.total_seconds


def test_refine_limit_takes_the_proposals_scoring_off_refines_budgets():
    """Scoring the proposals is real-objective evaluations no share paid for (0.78 s of a 6 s limit at 512 GPUs):
    their nominal seconds come off refine's budgets, so proposals and refine stay within refine's shares."""
    # launcher: refine's shares FAQ 1/12 + polish 0.1 + descent 0.22 = 0.40333; free adds digit orders 1/8: 0.52833
    assert solve_module.refine_shares("launcher") == pytest.approx(1 / 12 + 0.1 + 0.22)
    assert solve_module.refine_shares("free") == pytest.approx(1 / 12 + 0.1 + 0.22 + 1 / 8)
    # 0.40333 s of scoring in launcher mode: 6 - 0.40333 / 0.40333 = 5 s; refine's budgets 5 · 0.40333 = 2.0167 s,
    # which with the scoring is 6 · 0.40333 = 2.42 s, as without proposals
    assert solve_module.refine_limit_seconds(6.0, 1 / 12 + 0.1 + 0.22, "launcher") == pytest.approx(5.0)
    assert solve_module.refine_limit_seconds(6.0, 0.52833, "free") == pytest.approx(5.0, abs=1e-4)
    assert solve_module.refine_limit_seconds(6.0, 0.0, "free") == 6.0
    assert solve_module.refine_limit_seconds(1.0, 5.0, "launcher") == 1e-3  # never below a millisecond


def test_search_counts_one_evaluation_per_scored_proposal(monkeypatch):
    """``_search`` charges each distinct proposal it scores one real-objective evaluation (``eval_seconds`` of the
    order) and each tree partition its work model, and sizes refine from what is left."""
    from rankmap.solver.search.problem import Problem

    cluster = cluster_from_graph(fat_tree_cluster(8, 8, tiers=[(2, 4.0)]))
    cfg = parallel_config(64, tp=4, pp=2)
    traffic = {"tp": 4e9, "dp": 2e9, "pp": 6e8}
    events = []
    real_candidate, real_limit = Problem.candidate, solve_module.refine_limit_seconds

    def count(self, idx, dev, groups):
        events.append(("scored", refine.eval_seconds(self.cluster, self.orders[idx], self.traffic)))
        return real_candidate(self, idx, dev, groups)

    def spy(time_limit_seconds, scoring_seconds, mode):
        events.append(("refine", scoring_seconds))
        return real_limit(time_limit_seconds, scoring_seconds, mode)

    monkeypatch.setattr(Problem, "candidate", count)
    monkeypatch.setattr(solve_module, "refine_limit_seconds", spy)
    r = solve(cluster, cfg, traffic, SolveOptions(mode="launcher", orders="all", time_limit_seconds=1.0),
              deadline=Deadline(1e9))
    kinds = [k for k, _v in events]
    assert kinds.count("refine") == 1
    before = [v for k, v in events[:kinds.index("refine")] if k == "scored"]
    # the proposals of every order, each scored once (the baseline is scored by Problem.baseline, not here);
    # 64 GPUs, 3 classes: a few milliseconds each
    assert len(before) >= 2 and all(0 < v < 0.05 for v in before)
    # and per order its two tree partitions of the 8 hosts: 2 · (2e-3 + 8 · 1.6e-4) = 6.56 ms (partition_seconds)
    from rankmap.solver.search.partition import partition_seconds

    assert partition_seconds(8) == pytest.approx(3.28e-3)
    orders = len(r.orders_searched)
    assert orders == 6  # tp4 pp2 on 64 GPUs: every order fits the budget
    assert events[kinds.index("refine")][1] == pytest.approx(sum(before) + orders * 2 * 3.28e-3, rel=1e-12)


def test_orders_stop_when_the_proposals_budget_is_spent(monkeypatch):
    """The next order's proposals start only if what the first order took (CP-SAT budget, partitions, scoring)
    still fits CP-SAT's and refine's shares of the limit: a count, not the clock (at 8,192 GPUs the wall clock
    decided how many proposals were scored, and the answer with it)."""
    cluster = cluster_from_graph(fat_tree_cluster(8, 8, tiers=[(2, 4.0)]))
    cfg = parallel_config(64, tp=4, pp=2)
    traffic = {"tp": 4e9, "dp": 2e9, "pp": 6e8}
    # each evaluation counted as 0.05 s, T = 1 s: the proposals may take (0.15 + 0.40333) · 1 = 0.55333 s.  The
    # first order takes its CP-SAT budget max(0.05, 0.15 / 6) = 0.05 s, two partitions of 8 hosts 6.56 ms and
    # 0.05 s per distinct proposal; the second would start only if 0.05 + 2 · first <= 0.55333, i.e. first
    # <= 0.2517 s: at most 3 proposals scored.  The first order has more (its launcher, index, depth-first,
    # CP-SAT, domain and partition host orders), so it is the only one.
    monkeypatch.setattr(solve_module, "eval_seconds", lambda *a: 0.05)
    runs = [solve(cluster, cfg, traffic, SolveOptions(mode="launcher", orders="all", time_limit_seconds=1.0),
                  deadline=Deadline(1e9)) for _ in range(2)]
    assert runs[0].orders_searched == runs[1].orders_searched
    assert runs[0].orders_searched == ("tp-cp-ep-dp-pp",)  # the budget, not the 6 orders, ended the proposals
    assert runs[0].stopped_by == "" and runs[0].layout.assignment == runs[1].layout.assignment
