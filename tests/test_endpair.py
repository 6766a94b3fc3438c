"""Chain ends over a level (solver/bound/endpair.py) and NCCL's channels per domain (cutbound): valid, hand-derived."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from rankmap.solver import cluster_from_graph, fat_tree_cluster, parallel_config
from rankmap.solver.bound.analytic import lower_bound, search_lower_bound
from rankmap.solver.bound.endpair import emb_only_term
from rankmap.solver.bound.gridcut import _pieces
from rankmap.solver.cost.timemodel import flow_bytes
from rankmap.solver.megatron.orders import candidate_orders
from rankmap.solver.search.exhaustive import enumerate_layouts

from exact_optimum import eight_gpu_free_case, optimum  # noqa: E402  (tests/ is on sys.path)

CLASSES = ("tp", "cp", "dp", "pp", "ep", "etp", "edp", "embedding")


def test_first_and_last_stage_hosts_pay_the_embedding_pairs():
    """4 hosts x 2 GPUs (25 GB/s NIC per GPU: 48 GB/s out of a host at NCCL's rates), tp2 pp4, tied embeddings.

    The case of ``test_cutbound.test_embedding_pairs_tie_the_chain_ends``.  A host keeps its tp pair whole
    (splitting it costs ``fb_tp / 24`` GB/s alone) and holds one rank of each of the G = 2 chains (p = 2).
    One host at a time, the cheapest is a middle stage: 2 pipeline flows per chain, no embedding pair split
    (``4·fb_pp / 48``, the bound so far).  Over the level: each chain counts 1 in ``a + b + e/2`` summed over
    the n = 4 hosts, so some host D+ has ``a + b + e/2 ≥ G/n = 1/2`` and, with m = 2 ranks, ``e ≥ 2(G/n −
    m + p) = 1`` one-end chains: one embedding pair split, ``fb_emb / 48``; the host D− with the fewest
    one-end chains has ``e ≤ ē = 2G/n = 1``, so its pipeline flows are ``2s − ē = 3``: ``3·fb_pp / 48``.
    ``T_pp + T_emb ≥ pp(D−) + emb(D+)``, tp the same on both: bound ``fb_tp/360 + 3·fb_pp/48 + fb_emb/48``
    plus the parts' least latency (15.2 + 22.4 + 15.2 us, as in that test).  With ``fb_emb = 2·fb_pp`` it
    is ``5·fb_pp/48`` for the two classes, above the one-host ``4·fb_pp/48 + fb_emb/360``; the exhaustive
    optimum is ``4·fb_pp/48 + fb_emb/24`` (the first- and last-stage hosts each send 2 embedding flows).
    """
    cl = cluster_from_graph(fat_tree_cluster(4, 2, nic_bandwidth_gbps=25.0))
    cfg = parallel_config(8, tp=2, pp=4)
    traffic = {"tp": 4e9, "pp": 1e9, "embedding": 2e9}
    fbt, fbp = flow_bytes("all_reduce", 4e9, 2), flow_bytes("p2p_chain", 1e9, 4)
    fbe = flow_bytes("all_reduce", 2e9, 2)
    lb = lower_bound(cl, cfg, traffic)
    assert lb == pytest.approx(fbt / 360e9 + 3 * fbp / 48e9 + fbe / 48e9 + (15.2 + 22.4 + 15.2) * 1e-6, rel=1e-6)
    opt = optimum(cl, candidate_orders(cfg, "all"), traffic, None, "free")
    assert lb <= opt


def test_embedding_term_is_a_line_in_the_touched_chains():
    """``emb_only_term``: ``max(E0, g·2(p − (m − G/n)))`` once a chain is split, for both cases' ``s(p)``."""
    t = emb_only_term([(0.5, 2.0)], m=32, mean_chains=8)
    for a, b in ((1.0, 0.0), (4 / 3, -32 / 3)):  # N case: s = p; F case (k = 4): s = (4p − 32)/3
        pieces = _pieces([t], a, b)
        for p in (9.0, 20.0, 24.0, 25.0, 32.0):
            alpha, beta = next((al, be) for lo, hi, al, be in pieces if lo <= p <= hi)
            assert alpha + beta * p == pytest.approx(max(0.5, 2.0 * 2 * (p - 24.0)))


@pytest.fixture(scope="module")
def leaves_of_two():
    """4 hosts x 2 GPUs (one 25 GB/s NIC each), two leaves of 2 hosts behind 4:1 uplinks."""
    cl = cluster_from_graph(fat_tree_cluster(4, 2, nic_bandwidth_gbps=25.0, tiers=[(2, 4.0)]))
    return cl, enumerate_layouts(cl, "free")


@settings(max_examples=8, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(sizes=st.sampled_from([dict(tp=2, pp=4), dict(pp=4), dict(pp=8), dict(pp=2)]),
       payloads=st.lists(st.sampled_from([0.0, 1e8, 1e9, 4e9]), min_size=8, max_size=8))
def test_never_above_the_exhaustive_optimum_on_an_oversubscribed_tree(leaves_of_two, sizes, payloads):
    """All 8! bijections on two 4:1 leaves, every order, chains of 4 and 8 with their embedding pairs."""
    cl, layouts = leaves_of_two
    cfg = parallel_config(8, **sizes)
    traffic = dict(zip(CLASSES, payloads))
    traffic["pp"] = traffic["pp"] or 1e9
    orders = candidate_orders(cfg, "all")
    opt = optimum(cl, orders, traffic, None, "free", layouts)
    lb = search_lower_bound(cl, orders, traffic, None, "free")
    assert lb <= opt * (1 + 1e-9) + 1e-15, (sizes, traffic, lb, opt)


@pytest.mark.parametrize("hosts,gpus,sizes", [(3, 2, dict(tp=2, pp=3)), (4, 2, dict(pp=4)),
                                              (2, 4, dict(tp=2, pp=4)), (6, 2, dict(tp=2, pp=3))])
def test_never_above_the_exhaustive_optimum_on_nvlink_pair_hosts(hosts, gpus, sizes):
    """Hosts of NVLink pairs on PCIe behind slow NICs (the nvpairs instances in small): launcher and free."""
    kw = dict(intra="nvlink-pairs", intra_bandwidth_gbps=100.0) if gpus >= 2 else {}
    cl = cluster_from_graph(fat_tree_cluster(hosts, gpus, nic_bandwidth_gbps=25.0, **kw))
    cfg = parallel_config(hosts * gpus, **sizes)
    traffic = {"tp": 3e9, "dp": 2e9, "pp": 1e8, "embedding": 4e8}
    orders = candidate_orders(cfg, "all")
    for mode in ("launcher", "free") if hosts * gpus <= 8 else ("launcher",):
        opt = optimum(cl, orders, traffic, None, mode)
        lb = search_lower_bound(cl, orders, traffic, None, mode)
        assert lb <= opt * (1 + 1e-9), (mode, lb, opt)
        assert np.isfinite(lb) and lb > 0


# ------------------------------------------------------------------ the rates above 512 GPUs


def _clusters_small():
    import json
    import sys
    from pathlib import Path

    import networkx as nx

    from rankmap.solver.fabric.builders import nvl72_cluster

    root = Path(__file__).resolve().parent.parent
    sys.path.insert(0, str(root / "benchmarks"))
    from quality_instances import load_example_host, replicate_host  # noqa: E402

    yield "ft-oversub", fat_tree_cluster(8, 8, tiers=[(2, 4.0)])
    yield "nvpairs", fat_tree_cluster(4, 8, intra="nvlink-pairs", intra_bandwidth_gbps=100.0, nic_bandwidth_gbps=25.0)
    yield "pcie", fat_tree_cluster(4, 8, intra="pcie", nic_bandwidth_gbps=25.0)
    yield "nvl72", nvl72_cluster(2, hosts_per_rack=4)
    for name in ("dgx1-v100-hybridcube", "a30-pcie-nvlink-pairs", "hgx-a100-8gpu"):
        yield name, replicate_host(load_example_host(name), 4, 2, leaf_oversubscription=2)
    for name in ("hgx-a100-2nodes", "gb200-nvl72-2racks"):
        data = json.loads((root / "examples" / "clusters" / f"{name}.json").read_text())
        yield name, nx.node_link_graph(data, edges="edges")


@pytest.mark.parametrize("name,graph", list(_clusters_small()))
def test_cross_host_rate_is_above_every_exact_pair_rate(name, graph):
    """``cross_host_rate_gbps`` (no pair routed) ≥ the exact lone rate of every pair on two hosts (≤ 512 GPUs)."""
    from rankmap.solver.bound.rates import all_pair_first_hops, cross_host_rate_gbps
    from rankmap.solver.fabric.links import Fabric  # noqa: F401

    cl = cluster_from_graph(graph)
    cross = cross_host_rate_gbps(cl)
    s, d, _att, _direct = all_pair_first_hops(cl)
    two = np.asarray(cl.host_of)[s] != np.asarray(cl.host_of)[d]
    if not two.any():
        pytest.skip("one host")
    rate = cl.fabric.lone_rates_gbps(s[two], d[two])
    assert float(rate.max()) <= cross * (1 + 1e-12), (name, float(rate.max()), cross)


# ------------------------------------------------------------------ the tp case split (casesplit.py)


def test_split_floor_hand_derived():
    """tp8 on 8-GPU hosts, 50 GB/s NICs (48 GB/s at NCCL's calibrated rate), no GPU generation (ring only): a
    tp group on two hosts has some host with ≤ 4 members, so ≤ 4 channels (one NIC per GPU) of ``fb/4`` each
    between hosts at ≤ 48 GB/s: ``2·7/8·S / (4·48 GB/s)`` = 14.68 ms for S = 1.61 GB (``frag-2lvl-1024x8``'s
    tp, whose graph is not calibrated: 50 GB/s, 14.09 ms)."""
    from rankmap.solver.bound.casesplit import split_floor_seconds
    from rankmap.solver.traffic import Collective

    cl = cluster_from_graph(fat_tree_cluster(4, 8, nic_bandwidth_gbps=50.0))
    part = Collective("all_reduce", 1610612736.0)
    assert split_floor_seconds(cl, part, 8) == pytest.approx(2 * 7 / 8 * 1610612736.0 / (4 * 48e9))
    assert split_floor_seconds(cl, part, 8) == pytest.approx(14.68e-3, rel=1e-3)


@pytest.fixture
def case_split_everywhere(monkeypatch):
    import rankmap.solver.bound.casesplit as cs

    monkeypatch.setattr(cs, "CASE_SPLIT_RANKS", (0, 1 << 30))


@settings(max_examples=10, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(case=st.sampled_from([(2, 4, dict(tp=4)), (2, 4, dict(tp=4, pp=2)), (4, 2, dict(tp=2, pp=2)),
                             (4, 2, dict(tp=2, pp=4)), (4, 2, dict(tp=2))]),
       payloads=st.lists(st.sampled_from([0.0, 1e8, 1e9, 4e9]), min_size=8, max_size=8),
       oversub=st.sampled_from([None, 4.0]))
def test_case_split_never_above_the_exhaustive_free_optimum(case_split_everywhere, case, payloads, oversub):
    """The tp case split on 8 GPUs (all 8! bijections, every order), hosts of 2 or 4 GPUs, 25 GB/s NICs,
    with and without 4:1 leaves: bound ≤ optimum."""
    cl, _cfg, traffic, orders, opt = eight_gpu_free_case(case, payloads, oversub)
    lb = search_lower_bound(cl, orders, traffic, None, "free")
    assert lb <= opt * (1 + 1e-9) + 1e-15, (case, traffic, lb, opt)
