"""The split tp and dp groups one host touches, on the rank grid (solver/bound/hostlines.py)."""

from __future__ import annotations

import itertools
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from rankmap.solver import cluster_from_graph, parallel_config
from rankmap.solver.bound.analytic import _part_sizes, class_lower_bound, search_lower_bound
from rankmap.solver.bound.hostlines import host_combos, host_lines_bound, stage_combos
from rankmap.solver.bound.nodering import ring_case_floors
from rankmap.solver.cost.timemodel import flow_bytes, layout_cost
from rankmap.solver.megatron.orders import candidate_orders
from rankmap.solver.traffic import TRAFFIC_CLASSES

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from exact_optimum import eight_gpu_free_case  # noqa: E402  (tests/ is on sys.path)



def _bound(cl, cfg, traffic):
    parts = {c: _part_sizes(cfg, traffic, c) for c in TRAFFIC_CLASSES}
    own = {c: [class_lower_bound(cl, p.kind, g, k, p.payload_bytes) for p, g, k in v] for c, v in parts.items()}
    return host_lines_bound(cl, cfg, parts, own)


def _actual(cells, t, K):
    """(s_tp, s_dp, whole tp, whole dp) of a set of (stage, row, column) cells of t x K matrices."""
    out = np.zeros(5, dtype=np.int64)
    out[4] = len({c[0] for c in cells}) == 1
    for s in {c[0] for c in cells}:
        here = [(r, c) for st_, r, c in cells if st_ == s]
        rows = {r for r, _c in here}
        cols = {c for _r, c in here}
        wc = sum(1 for c in cols if sum(1 for _r, cc in here if cc == c) == t)
        wr = sum(1 for r in rows if sum(1 for rr, _c in here if rr == r) == K)
        out[:4] += [len(cols) - wc, len(rows) - wr, int(wc > 0), int(wr > 0)]
    out[2:] = np.minimum(out[2:], 1)
    return out


@pytest.mark.parametrize("t,K,pp,G", [(2, 2, 2, 4), (2, 3, 2, 4), (3, 2, 1, 4), (4, 4, 1, 8), (2, 4, 2, 4),
                                      (4, 2, 2, 6), (3, 3, 2, 5), (2, 2, 3, 5)])
def test_every_host_set_is_covered(t, K, pp, G):
    """Every set of G cells of pp stages of t x K matrices (brute force) has a combination of
    :func:`host_combos` at most its own in every component (the relaxation holds: the least over combinations
    of a nondecreasing cost is at most the set's)."""
    combos = host_combos(t, K, G, pp)
    cells = [(s, r, c) for s in range(pp) for r in range(t) for c in range(K)]
    seen = set()
    for sub in itertools.combinations(cells, G):
        a = tuple(_actual(sub, t, K).tolist())
        if a in seen:
            continue
        seen.add(a)
        assert (combos <= np.array(a)).all(axis=1).any(), (sub, a, combos)


def test_stage_combos_hand_derived():
    """tp 4, dp 4, 8 ranks of one stage: two whole tp groups (s_dp = 4); one whole tp group and a whole dp
    group (every column touched: s_tp = 3, s_dp = 3); none whole: 3 + 3 + 2 (s_tp = 3, s_dp = 3); two whole
    dp groups: s_tp = 4.  Over two stages (pp 2): the same, one stage each; 4 + 4 ranks: s_dp = 8 with a
    whole tp group in each."""
    got = {tuple(r) for r in stage_combos(4, 4, 8).tolist()}
    assert (0, 4, 1, 0) in got
    assert (4, 0, 0, 1) in got
    assert (3, 3, 0, 0) in got
    assert all(not (a < 3 and b < 4) for a, b, _w, _v in got)
    two = {tuple(r) for r in host_combos(4, 4, 8, 2).tolist()}
    assert {(0, 4, 1, 0, 1), (3, 3, 0, 0, 1), (4, 0, 0, 1, 1), (0, 8, 1, 0, 0)} <= two


def test_hand_derived_dgx1_tp4_pp2():
    """4 DGX-1 hosts (hybrid cube mesh, 4 NICs of 12.5 GB/s a host: 50 GB/s out), tp4 pp2 (dp 4), GPT mix,
    the module doc's example: tp 9.66 GB a ring edge (T_W 483.2 ms), dp 3.79 GB (T_W 189.3 ms).  Least host:
    two whole tp groups of one stage, dp ``4·3.79 GB / 50 GB/s`` = 302.9 ms, pipeline ``8·134 MB / 50 GB/s``
    = 21.5 ms, embedding ``8·206 MB / 50 GB/s`` = 33.0 ms: 840.6 ms where the classes' own floors give
    681.0 ms; every layout the solver finds costs 895.1 ms."""
    from quality_instances import instances, traffic_for

    inst = next(i for i in instances(False) if i.name == "dgx1-hcm-4x8|tp4 pp2|gpt-24l-4096")
    cl = cluster_from_graph(inst.spec.build())
    cfg = parallel_config(cl.num_devices, **inst.sizes)
    traffic = traffic_for(inst.mix, cfg)
    parts = {c: _part_sizes(cfg, traffic, c) for c in TRAFFIC_CLASSES}
    (tp, _g, k_tp), = parts["tp"]
    (dp, _g, k_dp), = parts["dp"]
    (pp, _g, k_pp), = parts["pp"]
    (emb, _g, k_emb), = parts["embedding"]
    assert set(c for c in TRAFFIC_CLASSES if parts[c]) == {"tp", "dp", "pp", "embedding"}
    fb_dp = flow_bytes(dp.kind, dp.payload_bytes, k_dp)
    w_tp, _s = ring_case_floors(cl, tp.kind, k_tp, tp.payload_bytes)
    assert w_tp == pytest.approx(flow_bytes(tp.kind, tp.payload_bytes, k_tp) / 20e9, rel=1e-9)
    got = _bound(cl, cfg, traffic)
    from rankmap.solver.bound.ncclterms import latency_extra_seconds

    t_dp = 4 * fb_dp / 50e9
    t_pp = 8 * flow_bytes(pp.kind, pp.payload_bytes, k_pp) / 50e9
    t_emb = 8 * emb.payload_bytes / 50e9
    want = sum(t + latency_extra_seconds(cl, p.kind, k, t)
               for p, k, t in ((tp, k_tp, w_tp), (dp, k_dp, t_dp), (pp, k_pp, t_pp), (emb, k_emb, t_emb)))
    assert got == pytest.approx(want, rel=1e-9)
    assert w_tp + t_dp + t_pp + t_emb == pytest.approx(0.8406, abs=2e-4)
    orders = candidate_orders(cfg, "all")
    free = search_lower_bound(cl, orders, traffic, None, "free")
    assert free >= got * (1 - 1e-12)
    # random layouts and the tp-in-host layouts of the rank order: never below
    rng = np.random.default_rng(3)
    for i in range(40):
        dev = rng.permutation(cl.num_devices) if i % 2 else np.concatenate(
            [8 * h + rng.permutation(8) for h in rng.permutation(4)])
        assert layout_cost(cl, orders[i % len(orders)], dev, traffic).total_seconds >= free * (1 - 1e-12)


@settings(max_examples=16, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(case=st.sampled_from([(2, 4, dict(tp=2, pp=2)), (2, 4, dict(tp=2)), (2, 4, dict(tp=2, cp=2)),
                             (4, 2, dict(tp=2, pp=2)), (4, 2, dict(tp=2)), (2, 4, dict(tp=4))]),
       intra=st.sampled_from(["pcie", "nvlink-pairs"]),
       payloads=st.lists(st.sampled_from([0.0, 1e8, 1e9, 4e9]), min_size=8, max_size=8),
       nic=st.sampled_from([12.5, 25.0]), oversub=st.sampled_from([None, 2.0, 4.0]))
def test_never_above_the_exhaustive_free_optimum(case, intra, payloads, nic, oversub):
    """On 8 GPUs (all 8! bijections, every order), hosts of 2 or 4 GPUs (PCIe or NVLink pairs), with and without
    oversubscribed leaves of two hosts (the leaf level of the term): the term alone ≤ the free optimum."""
    cl, cfg, traffic, _orders, opt = eight_gpu_free_case(case, payloads, oversub, need=("tp", "dp"), intra=intra,
                                                        intra_bandwidth_gbps=100.0, nic_bandwidth_gbps=nic)
    lb = _bound(cl, cfg, traffic)
    assert lb <= opt * (1 + 1e-9) + 1e-15, (case, traffic, lb, opt)


def test_leaf_level_on_a30_pairs():
    """a30-pairs-16x4 tp4 cp2 pp2 (GPT mix): 16 hosts of 4 GPUs under leaves of 4 hosts.  A host holds one tp
    group (4 split dp groups touch it) and a leaf of one stage sends every pipeline and embedding flow out; the
    host and leaf terms together reach 1669.85 ms, where the layouts found (launcher and free) cost 1669.99 ms
    (the classes' own floors and joint cuts: 1582.16 ms).  Layouts of the rank order and perturbations of
    them never cost less."""
    from quality_instances import instances, traffic_for

    inst = next(i for i in instances(False) if i.name == "a30-pairs-16x4|tp4 cp2 pp2|gpt-24l-4096")
    cl = cluster_from_graph(inst.spec.build())
    cfg = parallel_config(cl.num_devices, **inst.sizes)
    traffic = traffic_for(inst.mix, cfg)
    got = _bound(cl, cfg, traffic)
    assert got == pytest.approx(1.66985, abs=2e-5)
    orders = candidate_orders(cfg, "all")
    rng = np.random.default_rng(11)
    for i in range(24):
        dev = np.arange(cl.num_devices)
        for _ in range(i % 6):
            a, b = rng.integers(cl.num_devices, size=2)
            dev[[a, b]] = dev[[b, a]]
        assert layout_cost(cl, orders[i % len(orders)], dev, traffic).total_seconds >= got * (1 - 1e-12)
