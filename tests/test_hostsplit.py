"""tp groups over hosts, or inside them with one pipeline stage a host or several (solver/bound/hostsplit.py)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from rankmap.solver import cluster_from_graph, fat_tree_cluster, parallel_config
from rankmap.solver.bound.analytic import _part_sizes, class_lower_bound
from rankmap.solver.bound.hostsplit import host_out_gbps, stage_case_bound
from rankmap.solver.bound.ncclterms import latency_extra_seconds
from rankmap.solver.cost.timemodel import flow_bytes
from rankmap.solver.traffic import TRAFFIC_CLASSES

from exact_optimum import eight_gpu_free_case  # noqa: E402  (tests/ is on sys.path)



def _bound(cl, cfg, traffic):
    parts = {c: _part_sizes(cfg, traffic, c) for c in TRAFFIC_CLASSES}
    own = {c: [class_lower_bound(cl, p.kind, g, k, p.payload_bytes) for p, g, k in v] for c, v in parts.items()}
    return stage_case_bound(cl, cfg, parts, own)


@settings(max_examples=14, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(case=st.sampled_from([(2, 4, dict(tp=2, pp=2)), (2, 4, dict(tp=2, pp=4)), (2, 4, dict(tp=2, cp=2, pp=2)),
                             (2, 4, dict(tp=4, pp=2)), (2, 4, dict(tp=2)), (4, 2, dict(tp=2, pp=2)),
                             (4, 2, dict(tp=2, pp=4)), (2, 4, dict(tp=2, ep=2, pp=2, etp=1))]),
       payloads=st.lists(st.sampled_from([0.0, 1e8, 1e9, 4e9]), min_size=8, max_size=8),
       oversub=st.sampled_from([None, 4.0]))
def test_never_above_the_exhaustive_free_optimum(case, payloads, oversub):
    """On 8 GPUs (all 8! bijections, every order), hosts of 2 or 4 GPUs, 25 GB/s NICs, with and without 4:1
    leaves: the term alone ≤ the free optimum."""
    cl, cfg, traffic, _orders, opt = eight_gpu_free_case(case, payloads, oversub)
    lb = _bound(cl, cfg, traffic)
    assert lb <= opt * (1 + 1e-9) + 1e-15, (case, traffic, lb, opt)


def test_hand_derived_hosts_of_one_stage():
    """4 hosts x 8 GPUs, 400G NICs (48 GB/s at NCCL's rate, hosts 8 x 48 = 384 GB/s out), NVSwitch 360 GB/s,
    tp4 pp2 (dp 4, q = 2 tp groups a host), tp 4 GB (all-reduce), dp 1 GB (all-gather), pp 0.1 GB, ring
    only (no GPU generation).

    B (a tp group over two hosts, ≤ 2 channels): tp ``2·3/4·4 GB / (2·48 GB/s)`` = 62.5 ms alone.
    M (a host of two stages): a dp group with 1 member there, 1 channel: ``3/4·1 GB / 48 GB/s`` = 15.6 ms,
    plus tp's own ``2·3/4·4 GB / 360 GB/s`` = 16.7 ms and pp's own 0.28 ms: 32.6 ms.  U (hosts of one
    stage): dp on ≤ 2 channels, 7.8 ms; every pipeline flow leaves its host, a first-stage host sends 8 of
    0.1 GB over 384 GB/s: 2.1 ms; tp 16.7 ms: 26.6 ms, the least; with NCCL's least latency beyond each."""
    cl = cluster_from_graph(fat_tree_cluster(4, 8))
    assert host_out_gbps(cl) == pytest.approx(384.0)
    cfg = parallel_config(32, tp=4, pp=2)
    traffic = {"tp": 4e9, "dp": 1e9, "pp": 1e8}
    parts = {c: _part_sizes(cfg, traffic, c) for c in TRAFFIC_CLASSES}
    assert [(p.kind, k) for p, _g, k in parts["dp"]] == [("all_gather", 4)]
    tp_own = class_lower_bound(cl, "all_reduce", 8, 4, 4e9)
    assert tp_own == pytest.approx(2 * 3 / 4 * 4e9 / 360e9)
    dp_u = 3 / 4 * 1e9 / (2 * 48e9)
    assert dp_u == pytest.approx(flow_bytes("all_gather", 1e9, 4) / (2 * 48e9))
    pp_u = 8 * 1e8 / 384e9
    assert pp_u == pytest.approx(8 * flow_bytes("p2p_chain", 1e8, 2) / 384e9)
    want = sum(f + latency_extra_seconds(cl, kind, k, f)
               for kind, k, f in (("all_reduce", 4, tp_own), ("all_gather", 4, dp_u), ("p2p_chain", 2, pp_u)))
    assert _bound(cl, cfg, traffic) == pytest.approx(want, rel=1e-9)
    assert 26.5e-3 < want < 27.5e-3


def test_not_claimed_when_tp_does_not_divide_the_hosts():
    """tp 8 on hosts of 4 GPUs, or GPUs left unused: nothing (0)."""
    cl = cluster_from_graph(fat_tree_cluster(4, 4))
    assert _bound(cl, parallel_config(16, tp=8), {"tp": 1e9, "dp": 1e9}) == 0.0
