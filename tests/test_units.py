"""Direct tests of units the search and the service are built from (issue 14): the CP-SAT
assignment model, scipy FAQ layouts, the block-level host-order QAP and the gRPC error status.

Each expected value is derived by hand in the test's docstring.
"""

from __future__ import annotations

import grpc
import numpy as np
import pytest

from rankmap.solver import cluster_from_graph, fat_tree_cluster, layout_cost, megatron_groups, parallel_config
from rankmap.solver.search.cpsat import AssignmentProblem, pair_cost, solve_assignment
from rankmap.solver.errors import InfeasibleError, InvalidArgumentError
from rankmap.solver.search.polish import faq_layout, host_order_search


def _two_pairs_problem(hint=None):
    """4 items on 4 slots; slots {0,1} and {2,3} share a 100 GB/s domain, everything else 10 GB/s.
    Items 0-1 and 2-3 exchange 1 GB each, 0-2 0.1 GB."""
    return AssignmentProblem(
        domains=np.array([[0, 0, 1, 1], [0, 0, 0, 0]]),
        levels_bps=np.array([100e9, 10e9]),
        pairs=np.array([[0, 1], [2, 3], [0, 2]]),
        weights=np.array([1e9, 1e9, 1e8]),
        hint=hint,
    )


def test_solve_assignment_keeps_heavy_pairs_in_a_domain():
    """Optimum: each heavy pair inside one fast domain, the light pair across:
    1e9/100e9 + 1e9/100e9 + 1e8/10e9 = 0.01 + 0.01 + 0.01 = 0.03 s.  Any layout splitting a
    heavy pair pays 1e9/10e9 = 0.1 s for it alone, so CP-SAT proves 0.03 optimal."""
    res = solve_assignment(_two_pairs_problem(), time_limit_seconds=5.0)
    assert res.optimal and not res.infeasible and not res.stopped
    assert res.cost_seconds == pytest.approx(0.03, rel=1e-12)
    slot = res.slot_of_item
    assert sorted(slot.tolist()) == [0, 1, 2, 3]
    dom = np.array([0, 0, 1, 1])
    assert dom[slot[0]] == dom[slot[1]] and dom[slot[2]] == dom[slot[3]] and dom[slot[0]] != dom[slot[2]]
    assert res.bound_seconds <= res.cost_seconds + 1e-12
    assert pair_cost(_two_pairs_problem(), slot) == pytest.approx(res.cost_seconds, rel=1e-12)


def test_solve_assignment_tie_break_moves_fewest_items_from_the_hint():
    """Slots 2,3,0,1 for items 0..3 is optimal too (0.03 s); with it as the hint, the tie-break
    (DESIGN §5: fewest changes) returns it unchanged."""
    hint = np.array([2, 3, 0, 1])
    res = solve_assignment(_two_pairs_problem(hint=hint), time_limit_seconds=5.0)
    assert res.cost_seconds == pytest.approx(0.03, rel=1e-12)
    assert res.slot_of_item.tolist() == hint.tolist()


def _hosts4():
    # 4 hosts x 2 GPUs, 2 hosts per leaf, leaves 2:1 oversubscribed
    return cluster_from_graph(fat_tree_cluster(4, gpus_per_host=2, tiers=[(2, 2.0)]))


def test_host_pairs_cost_the_calibrated_nvswitch_time():
    """A tp pair on one host's NVSwitch: a 2-rank ring all-reduce sends 2·(2−1)/2·1e9 = 1e9 B per flow
    over the GPU's NVSwitch link at NCCL's calibrated rate (``link: nvlink``, no GPU generation named:
    20 of 25 GB/s per port, 450 x 0.8 = 360 GB/s) = 2.78 ms, plus NCCL's latency of a one-host ring
    all-reduce of 2, Simple: 8.4 + 2·1·3.4 = 15.2 us."""
    cl = _hosts4()
    cfg = parallel_config(8, tp=2)
    cost = layout_cost(cl, cfg, np.arange(8), {"tp": 1e9})  # ranks 2h, 2h+1 on host h
    assert cost.by_class["tp"] == pytest.approx(1e9 / 360e9 + 15.2e-6, rel=1e-12)


def test_faq_layout_is_a_permutation_that_keeps_tp_pairs_on_nvlink():
    """tp 2 with 1 GB of all-reduce and nothing else: the only cheap place for a tp pair is one
    host's NVSwitch (360 GB/s calibrated against 48 GB/s NICs), so FAQ's layout should put every pair
    on a host and cost the intra-host time (test_host_pairs_cost_the_calibrated_nvswitch_time)."""
    cl = _hosts4()
    cfg = parallel_config(8, tp=2)
    dev = faq_layout(cl, cfg, {"tp": 1e9}, seed=0)
    assert sorted(dev.tolist()) == list(range(8))
    for pair in megatron_groups(cfg)["TENSOR_MODEL_PARALLEL_GROUP"]:
        assert cl.host_of[dev[pair[0]]] == cl.host_of[dev[pair[1]]]
    cost = layout_cost(cl, cfg, dev, {"tp": 1e9})
    assert cost.by_class["tp"] == pytest.approx(1e9 / 360e9 + 15.2e-6, rel=1e-12)


def test_host_order_search_brings_pipeline_neighbours_under_one_leaf():
    """tp 2 (one host), pp 2, dp 2 on 4 hosts: order tp-cp-ep-dp-pp puts stage s of replica d
    on node rank d + 2s.  Starting from hosts
    0, 2, 1, 3 (node ranks 0,1 under different leaves, 2,3 likewise) every pp pair crosses the
    2:1 spine; the block QAP returns an order at least as good as the start, and its best keeps
    each pp pair (node ranks d and d+2) under one leaf: no pp bytes on the spine."""
    cl = _hosts4()
    cfg = parallel_config(8, tp=2, pp=2)
    traffic = {"pp": 4e9, "tp": 1e8}
    leaf = [cl.host_of[d] // 2 for d in range(8)]  # hosts 0,1 under leaf 0; 2,3 under leaf 1
    start = np.array([0, 2, 1, 3])

    def devices(order):
        return np.concatenate([cl.host_devices[h] for h in order])

    start_cost = layout_cost(cl, cfg, devices(start), traffic).total_seconds
    orders = host_order_search(cl, cfg, traffic, start, time_limit_seconds=2.0, seed=0)
    assert orders, "no host order returned"
    costs = [layout_cost(cl, cfg, devices(o), traffic).total_seconds for o in orders]
    assert min(costs) <= start_cost
    best = orders[int(np.argmin(costs))]
    assert sorted(best.tolist()) == [0, 1, 2, 3]
    dev = devices(best)
    for pair in megatron_groups(cfg)["PIPELINE_MODEL_PARALLEL_GROUP"]:
        assert leaf[dev[pair[0]]] == leaf[dev[pair[1]]]


def test_error_status_carries_field_violation_and_argument():
    """INVALID_ARGUMENT: a BadRequest violation on the proto path (sizes.tp) with the CLI's
    message, and ErrorInfo metadata naming the CLI/Python argument (tp); FAILED_PRECONDITION
    for an infeasible request: a PreconditionFailure on the constraint path."""
    from google.rpc import error_details_pb2

    from rankmap.wire.errors import ERROR_DOMAIN, error_status

    st = error_status(grpc.StatusCode.INVALID_ARGUMENT.value[0], InvalidArgumentError("tp 3 does not divide 8", "tp"))
    assert st.code == grpc.StatusCode.INVALID_ARGUMENT.value[0] and st.message == "tp 3 does not divide 8"
    br, info = error_details_pb2.BadRequest(), error_details_pb2.ErrorInfo()
    assert st.details[0].Unpack(br) and st.details[1].Unpack(info)
    assert [(v.field, v.description) for v in br.field_violations] == [("sizes.tp", "tp 3 does not divide 8")]
    assert info.domain == ERROR_DOMAIN and info.reason == "INVALID_ARGUMENT"
    assert dict(info.metadata) == {"argument": "tp", "field": "sizes.tp"}

    st = error_status(grpc.StatusCode.FAILED_PRECONDITION.value[0], InfeasibleError("no layout", "constraints"))
    pf = error_details_pb2.PreconditionFailure()
    assert st.details[0].Unpack(pf)
    assert pf.violations[0].type == "INFEASIBLE" and pf.violations[0].description == "no layout"
    st.details[1].Unpack(info)
    assert info.reason == "INFEASIBLE"


def test_host_blocks_tells_launchable_layouts():
    """torchrun can launch a layout when every host runs one contiguous block of ranks: hosts
    A A B B (ranks 0-1 on A, 2-3 on B) yes, A B A B no; free mode prefers the first among ties."""
    from rankmap.solver.search.answer import _host_blocks

    cl = _hosts4()  # 4 hosts x 2 GPUs: devices 0,1 on host 0, 2,3 on host 1, ...
    assert _host_blocks(cl, np.array([0, 1, 2, 3, 4, 5, 6, 7]))
    assert _host_blocks(cl, np.array([2, 3, 0, 1, 5, 4, 6, 7]))  # order of hosts and GPUs free
    assert not _host_blocks(cl, np.array([0, 2, 1, 3, 4, 5, 6, 7]))


def test_search_seconds_reserves_the_last_step_and_the_result():
    """deadline.search_seconds: 95% of the limit less 55 µs per rank (one evaluation + the result), capped at 40%."""
    from rankmap.solver.search.deadline import search_seconds

    assert search_seconds(30.0, 131072) == pytest.approx(28.5 - 5.5e-5 * 131072)  # 21.3 s
    assert search_seconds(6.0, 512) == pytest.approx(5.7 - 5.5e-5 * 512)
    assert search_seconds(1.0, 131072) == pytest.approx(0.95 - 0.4)  # the reserve's cap
    assert search_seconds(0.0, 8) == 0.0


def test_constraint_forms_split_at_the_first_separator():
    """``tp=level:2`` is class tp within level:2 (the level keeps its colon); the other spellings agree."""
    from rankmap.solver.types import Constraint, parse_constraint

    for text in ("tp within level:2", "tp=level:2", "tp:level:2", " tp = level:2 "):
        assert parse_constraint(text) == Constraint("tp", "level:2")
    assert parse_constraint("ep=nvlink") == Constraint("ep", "nvlink")
    with pytest.raises(InvalidArgumentError, match="unknown level ''"):
        parse_constraint("tp=")
