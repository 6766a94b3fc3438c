"""Stage-split domain cuts (solver/bound/stagecut.py): hand-derived values, and never above the exhaustive optimum."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from rankmap.solver import cluster_from_graph, fat_tree_cluster, parallel_config
from rankmap.solver.bound.analytic import _part_sizes, class_lower_bound, search_lower_bound
from rankmap.solver.bound.ncclterms import latency_extra_seconds
from rankmap.solver.bound.stagecut import _combine, _compositions, _count, stage_cut_bound
from rankmap.solver.bound.work import work_meter
from rankmap.solver.cost.timemodel import flow_bytes
from rankmap.solver.megatron.orders import candidate_orders
from rankmap.solver.traffic import TRAFFIC_CLASSES

from exact_optimum import optimum  # noqa: E402  (tests/ is on sys.path)

CLASSES = ("tp", "cp", "dp", "pp", "ep", "etp", "edp", "embedding")


def _stage_only(cl, cfg, traffic, floors: bool = True) -> float:
    """The stage cut with the parts' own floors (or none) and their least latency, as analytic adds it."""
    parts = {c: _part_sizes(cfg, traffic, c) for c in TRAFFIC_CLASSES}
    own = {c: [class_lower_bound(cl, p.kind, g, k, p.payload_bytes) if floors else 0.0 for p, g, k in v]
           for c, v in parts.items()}
    lat = sum(latency_extra_seconds(cl, p.kind, k, f) for c, v in parts.items() for (p, _g, k), f in zip(v, own[c]))
    return stage_cut_bound(cl, cfg, parts, {}, lambda c, i: own[c][i]), lat


def test_compositions_are_every_placement_of_bounded_parts():
    """6 ranks in 3 nonempty parts of at most 3 on 3 of 4 stages: (1,2,3) in 6 orders, (2,2,2), (3,3,0) no:
    7 size vectors x C(4, 3) = 4 placements; the count agrees with inclusion-exclusion."""
    rows, sizes = _compositions(6, 3, 4, 3)
    assert rows.shape == (28, 4) and sizes.shape == (28, 3)
    assert np.all(rows.sum(axis=1) == 6) and np.all(rows.max(axis=1) <= 3)
    assert np.all((rows > 0).sum(axis=1) == 3)
    assert len({tuple(r) for r in rows.tolist()}) == 28
    for m, S, P, q in ((6, 3, 4, 3), (32, 64, 8, 3), (32, 16, 8, 3), (5, 3, 6, 2), (8, 2, 4, 3), (7, 7, 3, 1)):
        assert _count(m, S, P, q) == _compositions(m, S, P, q)[0].shape[0]


def test_combine_takes_one_point_per_domain_and_each_class_at_its_busiest():
    """Two domains: A offers (V, pp, emb) = (1, 5, 0) or (4, 1, 1); B offers (2, 2, 3) or (0, 6, 0).

    The four pairs: (1,5,0)+(2,2,3): 2+5+3 = 10; (1,5,0)+(0,6,0): 1+6+0 = 7; (4,1,1)+(2,2,3): 4+2+3 = 9;
    (4,1,1)+(0,6,0): 4+6+1 = 11.  Least: 7, the first of A and the second of B."""
    a = np.array([[1.0, 5.0, 0.0], [4.0, 1.0, 1.0]])
    b = np.array([[2.0, 2.0, 3.0], [0.0, 6.0, 0.0]])
    value, chosen = _combine([a, b])
    assert value == pytest.approx(7.0)
    assert chosen == [0, 1]
    assert _combine([a, np.zeros((0, 3))]) == (np.inf, None)


def test_chain_of_four_over_two_leaves():
    """4 hosts x 1 GPU (25 GB/s NICs) in two leaves of 2 behind 4:1 uplinks (12 GB/s at NCCL's rate), pp4.

    One chain; its end stages hold 2 ranks, one per leaf on average: the leaf of most ends (D+) and of
    fewest (D−) both hold at most and at least 1.  A leaf holds two stages (a stage is one rank): stages
    (0,1) or (2,3) cross the chain once and split the embedding pair (X = 1, Y = 1); (0,3) and (1,2) cross
    it twice (X = 2, Y = 0); (0,2), (1,3) three times.  With no floors the bound is the least of
    ``b + e`` (both leaves one crossing and the pair) and ``2b`` (b = S_pp / 12 GB/s per pipeline flow,
    e = fb_emb / 12 GB/s per embedding flow): the optimum's leaves send one of each."""
    cl = cluster_from_graph(fat_tree_cluster(4, 1, nic_bandwidth_gbps=25.0, tiers=[(2, 4.0)]))
    assert list(np.asarray(cl.domain_out_gbps[0])) == [12.0, 12.0]
    cfg = parallel_config(4, pp=4)
    for s_pp, s_emb in ((1e9, 2e9), (1e9, 0.3e9)):
        traffic = {"pp": s_pp, "embedding": s_emb}
        b = flow_bytes("p2p_chain", s_pp, 4) / 12e9
        e = flow_bytes("all_reduce", s_emb, 2) / 12e9
        value, _lat = _stage_only(cl, cfg, traffic, floors=False)
        assert value == pytest.approx(min(b + e, 2 * b), rel=1e-9)
        opt = optimum(cl, candidate_orders(cfg, "all"), traffic, None, "free")
        assert value <= opt


def test_oversubscribed_leaves_tp4_cp2_pp4_pay_the_embedding_or_the_dp_cuts():
    """The module doc's example, ``ft-oversub-32x8`` tp4 cp2 pp4 (GPT 24 layers, hidden 4096), by its terms.

    Leaves of 32 GPUs behind 384 GB/s; a stage holds 64 ranks (4 dp groups of 16).  A leaf of one stage
    keeping tp and cp whole splits its 4 dp groups (``4·fb_dp``); of two stages, 8.  Per pipeline flow
    ``S_pp``, per embedding pair ``S_emb`` (tied embeddings).  The least combination is every leaf on two
    stage halves: ``V = 2·Ψ(16) − F_Σ`` (Ψ(16) = F_tp + F_cp + 4·fb_dp/384) with 32 pipeline flows and no
    embedding pair, below one end stage per leaf: ``Ψ(32) + 64·S_pp/384 + 32·S_emb/384`` (D− a middle stage)."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
    from quality_instances import instances, traffic_for  # noqa: E402

    inst = next(i for i in instances(False) if i.name == "ft-oversub-32x8|tp4 cp2 pp4|gpt-24l-4096")
    cl = cluster_from_graph(inst.spec.build())
    cfg = parallel_config(cl.num_devices, **inst.sizes)
    traffic = traffic_for(inst.mix, cfg)
    parts = {c: _part_sizes(cfg, traffic, c) for c in TRAFFIC_CLASSES}
    own = {c: [class_lower_bound(cl, p.kind, g, k, p.payload_bytes) for p, g, k in v] for c, v in parts.items()}
    (dp, _g, k), = parts["dp"]
    (pp, _g2, _k2), = parts["pp"]
    (emb, _g3, _k3), = parts["embedding"]
    cut = flow_bytes(dp.kind, dp.payload_bytes, k) / 384e9
    f_sum = own["tp"][0] + own["cp"][0] + own["dp"][0]
    psi = own["tp"][0] + own["cp"][0] + max(own["dp"][0], 4 * cut)
    halves = 2 * psi - f_sum + max(own["pp"][0], 32 * pp.payload_bytes / 384e9) + own["embedding"][0]
    ends = psi + max(own["pp"][0], 64 * pp.payload_bytes / 384e9) + max(own["embedding"][0],
                                                                       32 * emb.payload_bytes / 384e9)
    with work_meter() as w:
        value = stage_cut_bound(cl, cfg, parts, {}, lambda c, i: own[c][i])
    assert value == pytest.approx(min(halves, ends), rel=1e-6)
    assert w() < 0.3
    assert value + 1e-3 < 61.87e-3  # the cost of the best layout found (benchmarks/RESULTS.md), latency aside



@settings(max_examples=12, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(tree=st.sampled_from(["2 leaves of 2x2", "4 leaves of 2x1", "pods of leaves", "3 leaves of 2x1"]),
       sizes=st.sampled_from([dict(pp=4), dict(tp=2, pp=4), dict(dp=2, pp=4), dict(cp=2, pp=4), dict(pp=8),
                              dict(ep=2, pp=4), dict(pp=3), dict(tp=2, pp=3)]),
       payloads=st.lists(st.sampled_from([0.0, 1e7, 1e8, 1e9, 4e9]), min_size=8, max_size=8))
def test_never_above_the_exhaustive_optimum(small_trees, tree, sizes, payloads):
    """Stage cut alone (own floors, least latency) and the free bound: at most the optimum of every layout."""
    cl, layouts = small_trees[tree]
    W = cl.num_devices
    if W % int(np.prod(list(sizes.values()))):
        sizes = dict(pp=W if W in (3, 4, 6, 8) and W != 6 else 3)
    cfg = parallel_config(W, **sizes)
    traffic = dict(zip(CLASSES, payloads))
    traffic["pp"] = traffic["pp"] or 1e9
    orders = candidate_orders(cfg, "all")
    opt = optimum(cl, orders, traffic, None, "free", layouts)
    value, lat = _stage_only(cl, cfg, traffic)
    assert value + lat <= opt * (1 + 1e-9) + 1e-15, (tree, sizes, traffic, value + lat, opt)
    lb = search_lower_bound(cl, orders, traffic, None, "free")
    assert lb <= opt * (1 + 1e-9) + 1e-15, (tree, sizes, traffic, lb, opt)
