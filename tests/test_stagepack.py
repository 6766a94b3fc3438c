"""Knapsack points of large stage-cut domains (solver/bound/stagepack.py): every composition above a point,
hand-derived points, never above the exhaustive optimum, and the 3-tier pod instance against its layouts."""

from __future__ import annotations

import itertools
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from rankmap.solver import cluster_from_graph, fat_tree_cluster, parallel_config
from rankmap.solver.bound import stagecut
from rankmap.solver.bound.analytic import _part_sizes, class_lower_bound, search_lower_bound
from rankmap.solver.bound.ncclterms import latency_extra_seconds
from rankmap.solver.bound.stagepack import PackShape, _knapsack, _trace
from rankmap.solver.cost.timemodel import flow_bytes, layout_cost
from rankmap.solver.megatron.orders import candidate_orders
from rankmap.solver.search.exhaustive import enumerate_layouts
from rankmap.solver.traffic import TRAFFIC_CLASSES

from exact_optimum import optimum  # noqa: E402  (tests/ is on sys.path)

CLASSES = ("tp", "cp", "dp", "pp", "ep", "etp", "edp", "embedding")


class _FakeTables:
    """``delta`` / ``phi`` arrays as :class:`stagecut._Tables` holds them (no refinement)."""

    def __init__(self, delta, phi):
        self.delta, self.phi = np.asarray(delta, dtype=float), np.asarray(phi, dtype=float)

    def refine(self, xs) -> bool:
        return False


def _shape(m, S, P, delta, phi):
    return PackShape(m, _FakeTables(delta, phi), S, P, lambda X: np.asarray(X, dtype=float),
                     lambda Y: np.asarray(Y, dtype=float))


@settings(max_examples=40, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(msp=st.sampled_from([(6, 3, 4), (8, 4, 4), (7, 3, 5), (9, 4, 5), (12, 6, 3), (5, 8, 4), (10, 4, 4),
                            (8, 2, 6)]),
       seed=st.integers(0, 10_000), f0=st.sampled_from([0.0, 0.5, 3.0]))
def test_every_composition_lies_above_a_point_of_its_end_ranks(msp, seed, f0):
    """All compositions (m_0..m_{P−1}) of m, parts in [0, min(S, m)]: some point with the same end ranks e
    has V, X and Y at most the composition's (V = max(f0 + ΣΔ, ΣΦ), X = Σ|m_j − m_{j+1}|, Y = |m_0 − m_{P−1}|)."""
    m, S, P = msp
    rng = np.random.default_rng(seed)
    delta = np.concatenate([[0.0], rng.uniform(0, 3, S)])
    phi = delta + np.concatenate([[0.0], rng.uniform(0, 2, S)])
    sh = _shape(m, S, P, delta, phi)
    V = sh.values(f0)
    top = min(m, S)
    n = 0
    for comp in itertools.product(range(top + 1), repeat=P):
        if sum(comp) != m:
            continue
        c = np.array(comp)
        vc = max(f0 + delta[c].sum(), phi[c].sum())
        xc = int(np.abs(np.diff(c)).sum())
        yc = abs(int(c[0]) - int(c[-1]))
        ec = int(c[0] + c[-1])
        ok = (sh.ends == ec) & (V <= vc + 1e-12) & (sh.X <= xc) & (sh.Y <= yc)
        assert ok.any(), (comp, vc, xc)
        n += 1
    assert n > 0


def test_knapsack_trace_gives_parts_of_the_least_sum():
    """The traced parts of g[M, r, s] are at most r parts of at most M summing to s, of that least sum."""
    rng = np.random.default_rng(3)
    arr = np.concatenate([[0.0], rng.uniform(0.1, 5, 12)])
    g = _knapsack(arr, 30, 5, 12)
    for M, r, s in ((12, 5, 30), (7, 5, 30), (6, 5, 30), (12, 3, 20), (4, 5, 17), (12, 1, 9)):
        if not np.isfinite(g[M, r, s]):
            assert M * r < s
            continue
        parts = _trace(g, arr, M, r, s)
        assert sum(parts) == s and len(parts) <= r and max(parts) <= M
        assert arr[parts].sum() == pytest.approx(g[M, r, s])
        best = min((arr[list(p)].sum() for q in range(1, r + 1)
                    for p in itertools.combinations_with_replacement(range(1, M + 1), q) if sum(p) == s),
                   default=np.inf)
        assert g[M, r, s] == pytest.approx(best)


def test_pod_of_two_stages_hand_points():
    """A 3-tier pod: m = 128 ranks, stages of S = 64, P = 8; Δ = 0, Φ(x) = c for 0 < x < 64, Φ(64) = 0.

    Two whole middle stages (M = 64, no end ranks): V = 0, X = 2·64 = 128, Y = 0.  32 ranks of stage 0, a
    whole stage and 32 more (M = 64, a = 32, b = 0): V = 2c, X = 128 − 32 = 96, Y = 32 (the embedding pairs
    of the 32 first-stage ranks).  16 ranks of each end stage with an empty stage between (M = 64): the
    middle 96 is 64 + 32, V = 3c, X = 128 (the chain leaves the pod at the empty stage), Y = 0; with no
    stage empty X ≥ 128 − 32 = 96 (a relaxation: the knapsack takes fewer parts than stages).  Parts of
    at most 16 (M = 16, a = b = 16, every stage): V = 8c, X = 0."""
    c = 1.5
    phi = np.full(65, c)
    phi[0] = phi[64] = 0.0
    sh = _shape(128, 64, 8, np.zeros(65), phi)
    V = sh.values(0.0)

    def at(M, a, b, q):
        i = np.flatnonzero((sh.M == M) & (sh.a == a) & (sh.b == b) & (sh.q == q))
        assert i.size == 1
        return V[i[0]], sh.X[i[0]], sh.Y[i[0]]

    assert at(64, 0, 0, 6) == (0.0, 128, 0)
    assert at(64, 32, 0, 6) == (2 * c, 96, 32)
    assert at(64, 16, 16, 5) == (3 * c, 128, 0)
    assert at(64, 16, 16, 6) == (3 * c, 96, 0)
    assert at(16, 16, 16, 6) == (8 * c, 0, 0)
    # 5 middle parts of at most 16 cannot hold the other 96 ranks: no such point
    assert not ((sh.M == 16) & (sh.a == 16) & (sh.b == 16) & (sh.q == 5)).any()



@settings(max_examples=16, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(tree=st.sampled_from(["2 leaves of 2x2", "4 leaves of 2x1", "pods of leaves", "3 leaves of 2x1"]),
       sizes=st.sampled_from([dict(pp=4), dict(tp=2, pp=4), dict(cp=2, pp=4), dict(pp=8),
                              dict(ep=2, pp=4), dict(pp=3), dict(tp=2, pp=3)]),
       payloads=st.lists(st.sampled_from([0.0, 1e7, 1e8, 1e9, 4e9]), min_size=8, max_size=8))
def test_knapsack_domains_never_above_the_exhaustive_optimum(small_trees, monkeypatch, tree, sizes, payloads):
    """Every domain of two or more ranks bounded by the knapsack points (``STAGE_CUT_MAX_DOMAIN`` = 1): the
    stage cut (own floors, least latency) is at most the optimum over every layout and order."""
    monkeypatch.setattr(stagecut, "STAGE_CUT_MAX_DOMAIN", 1)
    built = []
    orig = PackShape.__init__

    def counting(self, *a, **k):
        built.append(1)
        orig(self, *a, **k)

    monkeypatch.setattr(PackShape, "__init__", counting)
    cl, layouts = small_trees[tree]
    W = cl.num_devices
    if W % int(np.prod(list(sizes.values()))):
        sizes = dict(pp=W if W in (3, 4, 6, 8) and W != 6 else 3)
    cfg = parallel_config(W, **sizes)
    traffic = dict(zip(CLASSES, payloads))
    traffic["pp"] = traffic["pp"] or 1e9
    parts = {c: _part_sizes(cfg, traffic, c) for c in TRAFFIC_CLASSES}
    own = {c: [class_lower_bound(cl, p.kind, g, k, p.payload_bytes) for p, g, k in v] for c, v in parts.items()}
    lat = sum(latency_extra_seconds(cl, p.kind, k, f) for c, v in parts.items() for (p, _g, k), f in zip(v, own[c]))
    value = stagecut.stage_cut_bound(cl, cfg, parts, {}, lambda c, i: own[c][i])
    assert built or value == 0.0
    opt = optimum(cl, candidate_orders(cfg, "all"), traffic, None, "free", layouts)
    assert value + lat <= opt * (1 + 1e-9) + 1e-15, (tree, sizes, traffic, value + lat, opt)


def _three_tier():
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
    from quality_instances import instances, traffic_for  # noqa: E402

    inst = next(i for i in instances(False) if i.name == "ft-3tier-4to1-64x8|tp4 cp2 pp8|gpt-24l-4096")
    cl = cluster_from_graph(inst.spec.build())
    cfg = parallel_config(cl.num_devices, **inst.sizes)
    return cl, cfg, traffic_for(inst.mix, cfg)


def test_three_tier_pods_pay_their_pipeline_and_every_rotated_layout_is_above():
    """``ft-3tier-4to1-64x8`` tp4 cp2 pp8: pods of 128 GPUs behind 384 GB/s, stages of 64 ranks.

    The pod of the fewest end-stage ranks (≤ 32) holds two whole middle stages (128 pipeline flows:
    22.4 ms) or cuts stages; the stage cut rises from 31.5 ms (pods left out) to above 43 ms, and the free
    bound stays below every launcher-like layout of every order rotated by 0..16 hosts (pods holding
    stage parts 32 + 64 + 32, 64 + 64, ...: the least 56.53 ms, above the best found, 55.98 ms)."""
    cl, cfg, traffic = _three_tier()
    parts = {c: _part_sizes(cfg, traffic, c) for c in TRAFFIC_CLASSES}
    own = {c: [class_lower_bound(cl, p.kind, g, k, p.payload_bytes) for p, g, k in v] for c, v in parts.items()}
    (pp, _g, k), = parts["pp"]
    per_flow = flow_bytes(pp.kind, pp.payload_bytes, k) / 384e9
    tables = stagecut._Tables(cl, [], {}, 384.0, True, 64, 64)
    sh = PackShape(128, tables, 64, 8, lambda X: np.maximum(own["pp"][0], per_flow * X),
                   lambda Y: np.full_like(Y, own["embedding"][0]))
    i = np.flatnonzero((sh.M == 64) & (sh.a == 0) & (sh.b == 0))[0]
    assert sh.X[i] == 128 and sh.pp[sh.X[i]] == pytest.approx(128 * per_flow)
    assert 128 * per_flow == pytest.approx(22.37e-3, rel=1e-3)
    value = stagecut.stage_cut_bound(cl, cfg, parts, {}, lambda c, i: own[c][i])
    assert value == pytest.approx(48.0027e-3, rel=1e-4)
    orders = candidate_orders(cfg, "all")
    bound = search_lower_bound(cl, orders, traffic, None, "free")
    assert bound >= value
    W = cl.num_devices
    least = np.inf
    for o in orders:
        for rot in range(17):
            least = min(least, layout_cost(cl, o, np.roll(np.arange(W), 8 * rot), traffic).total_seconds)
    assert bound <= least
    assert least >= 55.97e-3  # none below the best found


@pytest.fixture(scope="module")
def small_launcher_trees():
    """Tiny trees (2-GPU hosts, or 1-GPU hosts in pods of leaves) and every launcher layout of each."""
    out = {}
    for name, g in (("2 leaves of 2x2", fat_tree_cluster(4, 2, nic_bandwidth_gbps=25.0, tiers=[(2, 4.0)])),
                    ("pods of leaves", fat_tree_cluster(8, 1, nic_bandwidth_gbps=25.0, tiers=[(2, 2.0), (2, 2.0)]))):
        cl = cluster_from_graph(g)
        out[name] = (cl, enumerate_layouts(cl, "launcher"))
    return out


@settings(max_examples=12, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(tree=st.sampled_from(["2 leaves of 2x2", "pods of leaves"]),
       sizes=st.sampled_from([dict(pp=4), dict(tp=2, pp=4), dict(cp=2, pp=4), dict(pp=8), dict(tp=2, pp=8)]),
       payloads=st.lists(st.sampled_from([0.0, 1e7, 1e8, 1e9, 4e9]), min_size=8, max_size=8),
       knapsack=st.booleans())
def test_launcher_bound_with_least_order_floors_never_above_the_launcher_optimum(
        small_launcher_trees, monkeypatch, tree, sizes, payloads, knapsack):
    """Launcher mode's stage cut takes the least over the orders of each part's launcher floor: the launcher
    bound stays at most the least cost over every launcher layout and order (knapsack domains or not)."""
    if knapsack:
        monkeypatch.setattr(stagecut, "STAGE_CUT_MAX_DOMAIN", 1)
    cl, layouts = small_launcher_trees[tree]
    W = cl.num_devices
    if W % int(np.prod(list(sizes.values()))):
        sizes = dict(pp=4)
    cfg = parallel_config(W, **sizes)
    traffic = dict(zip(CLASSES, payloads))
    traffic["pp"] = traffic["pp"] or 1e9
    orders = candidate_orders(cfg, "all")
    opt = optimum(cl, orders, traffic, None, "launcher", layouts)
    lb = search_lower_bound(cl, orders, traffic, None, "launcher")
    assert lb <= opt * (1 + 1e-9) + 1e-15, (tree, sizes, traffic, lb, opt)


def test_least_order_floors_of_the_three_tier_tree():
    """``ft-3tier-4to1-64x8`` tp4 cp2 pp8: every searched order keeps pp outermost, so a host holds one
    stage and an embedding pair (first and last stage) always joins two hosts: its floor is one flow of
    ``S_emb`` at the 48 GB/s of a NIC channel (4.29 ms, not the 0.57 ms of NVSwitch); tp keeps its
    order-free floor (some order keeps tp inside hosts).  Launcher bound 36.57 -> 50.99 ms (cost 55.98)."""
    from rankmap.solver.bound.stagepack import least_order_floors

    cl, cfg, traffic = _three_tier()
    orders = candidate_orders(cfg, "all")
    size_terms = {c: [(p, class_lower_bound(cl, p.kind, g, k, p.payload_bytes)) for p, g, k in v]
                  for c, v in ((c, _part_sizes(cfg, traffic, c)) for c in TRAFFIC_CLASSES)}
    low = least_order_floors(cl, orders, size_terms)
    (emb, v), = size_terms["embedding"]
    assert v == pytest.approx(emb.payload_bytes / 360e9, rel=1e-3)
    assert low["embedding"][0] == pytest.approx(emb.payload_bytes / 48e9, rel=1e-3)
    assert low["tp"][0] == size_terms["tp"][0][1]
    assert all(f >= v for c in low for f, (_p, v) in zip(low[c], size_terms[c]))
    assert search_lower_bound(cl, orders, traffic, None, "launcher") == pytest.approx(50.991e-3, rel=1e-4)
