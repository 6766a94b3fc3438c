"""The tp case split of free mode (solver/bound/casesplit.py) up to 512 ranks, and the gate on its work."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from rankmap.solver import cluster_from_graph, fat_tree_cluster, parallel_config
from rankmap.solver.bound.analytic import search_lower_bound
from rankmap.solver.bound.casesplit import split_floor_seconds
from rankmap.solver.bound.work import work_meter
from rankmap.solver.cost.timemodel import flow_bytes, layout_cost
from rankmap.solver.megatron.orders import candidate_orders
from rankmap.solver.traffic import Collective, model_preset, traffic_from_model

from exact_optimum import eight_gpu_free_case  # noqa: E402  (tests/ is on sys.path)

CLASSES = ("tp", "cp", "dp", "pp", "ep", "etp", "edp", "embedding")


@pytest.fixture
def gate_open(monkeypatch):
    """The split everywhere, and case B computed whatever A and the joint bound are."""
    import rankmap.solver.bound.casesplit as cs

    monkeypatch.setattr(cs, "CASE_SPLIT_RANKS", (0, 1 << 30))
    monkeypatch.setattr(cs, "CASE_SPLIT_RATIO", np.inf)
    monkeypatch.setattr(cs, "CASE_SPLIT_MIN_GAIN", -1.0)
    return cs


@settings(max_examples=12, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(case=st.sampled_from([(2, 4, dict(tp=4)), (2, 4, dict(tp=4, pp=2)), (4, 2, dict(tp=2, pp=2)),
                             (4, 2, dict(tp=2, pp=4)), (4, 2, dict(tp=2))]),
       payloads=st.lists(st.sampled_from([0.0, 1e8, 1e9, 4e9]), min_size=8, max_size=8),
       oversub=st.sampled_from([None, 4.0]), joint_first=st.sampled_from([0, 512]))
def test_gate_open_never_above_the_exhaustive_free_optimum(gate_open, monkeypatch, case, payloads, oversub,
                                                         joint_first):
    """Both flows (joint bound first, or case B first) with B always computed, on 8 GPUs (all 8! bijections,
    every order), hosts of 2 or 4 GPUs, 25 GB/s NICs, with and without 4:1 leaves: bound ≤ optimum."""
    monkeypatch.setattr(gate_open, "JOINT_FIRST_RANKS", joint_first)
    cl, _cfg, traffic, orders, opt = eight_gpu_free_case(case, payloads, oversub)
    lb = search_lower_bound(cl, orders, traffic, None, "free")
    assert lb <= opt * (1 + 1e-9) + 1e-15, (case, traffic, lb, opt)


@settings(max_examples=15, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(case=st.sampled_from([(4, 4, dict(tp=4, pp=2)), (4, 4, dict(tp=4)), (8, 2, dict(tp=2, pp=4)),
                             (4, 8, dict(tp=8, pp=2)), (8, 4, dict(tp=4, pp=4))]),
       payloads=st.lists(st.sampled_from([0.0, 1e8, 1e9, 4e9]), min_size=8, max_size=8),
       oversub=st.sampled_from([None, 2.0]))
def test_the_gate_only_leaves_work_out(monkeypatch, case, payloads, oversub):
    """Gate closed (the default), open, or no split at all: ``no split ≤ default ≤ open`` (the split returns
    at least the joint bound without it, and the gate only skips case B's joint cut)."""
    import rankmap.solver.bound.casesplit as cs

    hosts, gpus, sizes = case
    tiers = [(2, oversub)] if oversub else []
    cl = cluster_from_graph(fat_tree_cluster(hosts, gpus, nic_bandwidth_gbps=50.0, tiers=tiers))
    cfg = parallel_config(hosts * gpus, **sizes)
    traffic = dict(zip(CLASSES, payloads))
    traffic["tp"] = traffic["tp"] or 1e9
    orders = candidate_orders(cfg, "all")
    default = search_lower_bound(cl, orders, traffic, None, "free")
    monkeypatch.setattr(cs, "CASE_SPLIT_RANKS", (0, 0))
    none = search_lower_bound(cl, orders, traffic, None, "free")
    monkeypatch.setattr(cs, "CASE_SPLIT_RANKS", (0, 1 << 30))
    monkeypatch.setattr(cs, "CASE_SPLIT_RATIO", np.inf)
    monkeypatch.setattr(cs, "CASE_SPLIT_MIN_GAIN", -1.0)
    opened = search_lower_bound(cl, orders, traffic, None, "free")
    assert none <= default * (1 + 1e-12) and default <= opened * (1 + 1e-12), (none, default, opened)


def test_ft_uniform_16x8_tp8_pp4_free_bound_reaches_the_launcher_layout():
    """``ft-uniform-16x8`` tp8 pp4, GPT 24L/4096 (quality set): the default launcher layout (tp groups on the
    hosts) costs 43.37 ms; the free bound was the joint cut's 40.76 ms.  Case B (some tp group over two
    hosts): that group has ≤ 4 members on some host, so ≤ 4 channels (one 400G NIC, 48 GB/s at NCCL's rate,
    per GPU) of ``fb/4``: tp alone takes ``2·7/8·S_tp / (4 · 48 GB/s)`` against ``2·7/8·S_tp / 360 GB/s`` on
    NVSwitch, 13.7 ms more, and with the joint cut B is above A, the launcher bound of the tp-first orders,
    which is the default layout's cost (that layout is one of case A's).  So the free bound is that cost."""
    cl = cluster_from_graph(fat_tree_cluster(16, 8, tiers=[(8, 1.0)]))
    cfg = parallel_config(128, tp=8, pp=4)
    traffic = traffic_from_model(model_preset("gpt-24l-4096"), cfg)
    S = traffic["tp"]
    part = Collective("all_reduce", S)
    assert split_floor_seconds(cl, part, 8) == pytest.approx(flow_bytes("all_reduce", S, 8) / (4 * 48e9))
    assert split_floor_seconds(cl, part, 8) == pytest.approx(2 * 7 / 8 * S / (4 * 48e9))
    orders = candidate_orders(cfg, "all")
    cost = layout_cost(cl, cfg, np.arange(128), traffic).total_seconds
    with work_meter() as m:
        lb = search_lower_bound(cl, orders, traffic, None, "free")
    assert lb <= cost * (1 + 1e-9)
    assert lb == pytest.approx(cost, rel=1e-6)
    assert m() < 0.25  # counted work, nominal seconds (0.18 s: joint cut, A, then B)
