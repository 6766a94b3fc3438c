"""A Solve answers within the caller's deadline (issue 26.5), through a real server.

* a deadline shorter than the requested time limit: the best layout found before it,
  FEASIBLE, ``stopped_by: "deadline"`` (never DEADLINE_EXCEEDED once the baseline exists);
* no explicit time limit: the limit is the deadline less the margin of
  :func:`rankmap.server.budget.deadline_margin`;
* the arithmetic of :func:`rankmap.server.budget.call_budget`, hand-derived.
"""

from __future__ import annotations

import time

import pytest

from rankmap.server.budget import call_budget, deadline_margin
from rankmap.solver import SolveOptions
from rankmap.solver.search.deadline import CALL_DEADLINE, TIME_LIMIT, Deadline
from service_helpers import live_server, make_cluster, wait_until

server = live_server(workers=2, max_queued=8)

#: 16 hosts x 8 GPUs, every order, tp2 cp2 pp2: its search takes far longer than the deadlines below.
SLOW = dict(tp=2, cp=2, pp=2, orders="all", traffic={"tp": 4e9, "dp": 1e9, "pp": 1e8, "cp": 2e9})


@pytest.fixture(scope="module")
def warm(client):
    """One small solve first: the server's first call also imports the solver."""
    client.solve(make_cluster(2, 4), tp=2, traffic={"tp": 1e9}, time_limit_seconds=5)
    return client


@pytest.mark.parametrize("timeout", [1.0, 3.0])
def test_deadline_shorter_than_the_limit_answers_the_best_layout_found(warm, server, timeout):
    client = warm
    t0 = time.monotonic()
    r = client.solve(make_cluster(16, 8), timeout=timeout, time_limit_seconds=60, **SLOW)
    took = time.monotonic() - t0
    assert took < timeout  # an answer, not DEADLINE_EXCEEDED
    assert r.status == "FEASIBLE" and r.stopped_by == CALL_DEADLINE
    # the answer is a layout: every one of the 128 ranks on its own GPU, no worse than the baseline
    assign = list(r.layout.assignment)
    assert len(assign) == 128 and len(set(assign)) == 128
    assert r.layout.cost.total_seconds <= r.baseline.cost.total_seconds * (1 + 1e-9)
    # the search stopped at the budget: remaining (< timeout) less the margin, at most
    assert r.solve_seconds < timeout - deadline_margin(timeout, 128) + 0.1
    assert wait_until(lambda: server.servicer._pending == 0, 10), "the solve kept its worker"


def test_no_time_limit_takes_the_deadline_less_the_margin(warm, server):
    # 3 s deadline, no time_limit_seconds: the solve's limit is about 3 - (0.2 + 0.05·3 + 1.5e-5·128) = 2.648 s,
    # not the 30 s default (a 30 s solve would be cut by the deadline: DEADLINE_EXCEEDED or stopped_by "deadline")
    t0 = time.monotonic()
    r = warm.solve(make_cluster(16, 8), timeout=3.0, **SLOW)
    took = time.monotonic() - t0
    assert took < 3.0
    assert r.stopped_by in ("", TIME_LIMIT)
    assert r.solve_seconds <= 3.0 - deadline_margin(3.0, 128) + 0.05
    assert wait_until(lambda: server.servicer._pending == 0, 10)


def test_a_deadline_longer_than_the_limit_changes_nothing(warm):
    # 8 GPUs, 2 s limit, 60 s deadline: budget 60 - (0.2 + 3 + 0.00012) > 2: the solve's own limit,
    # and the answer is the one of an in-process solve (exhaustive at 8 GPUs: OPTIMAL)
    r = warm.solve(make_cluster(2, 4), tp=2, traffic={"tp": 4e9, "dp": 1e9}, time_limit_seconds=2, timeout=60)
    assert r.status == "OPTIMAL" and r.stopped_by == ""


def test_call_budget_arithmetic():
    opts = SolveOptions(time_limit_seconds=30.0)
    # no deadline: the limit, counted from the call's start (2 s spent reading it) less the encoding:
    # search_seconds(30, 128) - 2 - 1.5e-5·128 = (28.5 - 5.5e-5·128) - 2 - 0.00192 = 26.49104 s
    got, dl = call_budget(opts, True, None, 128, elapsed_seconds=2.0)
    assert got is opts and dl.reason == TIME_LIMIT and dl.end - dl.start == pytest.approx(26.49104)
    # margin: 0.2 + 0.05·10 + 1.5e-5·1000 = 0.715 s
    assert deadline_margin(10.0, 1000) == pytest.approx(0.715)
    # budget 40 - (0.2 + 2 + 0.0015) = 37.7985 >= 30: the limit holds (28.5 - 0.0055 - 0.0015 = 28.493 s)
    got, dl = call_budget(opts, True, 40.0, 100)
    assert got is opts and dl.reason == TIME_LIMIT and dl.end - dl.start == pytest.approx(28.493)
    # explicit 30 s, deadline 10 s on 1,000 ranks: budget 10 - 0.715 = 9.285 s; the search stops at
    # search_seconds(9.285, 1000) = 0.95·9.285 - 5.5e-5·1000 = 8.76575 s, reason "deadline"; limit unchanged
    got, dl = call_budget(opts, True, 10.0, 1000)
    assert got.time_limit_seconds == 30.0 and dl.reason == CALL_DEADLINE
    assert dl.end - dl.start == pytest.approx(8.76575)
    # no explicit limit: the limit becomes the budget, 9.285 s, reason "time_limit"
    got, dl = call_budget(opts, False, 10.0, 1000)
    assert got.time_limit_seconds == pytest.approx(9.285) and dl.reason == TIME_LIMIT
    # a deadline shorter than the margin: a zero search (the baseline) and, without a limit, the minimum limit
    got, dl = call_budget(opts, False, 0.1, 8)
    assert got.time_limit_seconds == 0.01
    got, dl = call_budget(opts, True, 0.1, 8)
    assert dl.end == dl.start and dl.reason == CALL_DEADLINE


def test_deadline_within_takes_the_earlier_end():
    now = [100.0]
    outer = Deadline(5.0, clock=lambda: now[0], reason=CALL_DEADLINE)
    inner = outer.within(2.0)  # ends at 102 < 105: its own reason
    assert (inner.end, inner.reason) == (102.0, TIME_LIMIT)
    late = outer.within(9.0)  # 109 > 105: the outer end and reason
    assert (late.end, late.reason) == (105.0, CALL_DEADLINE)
    now[0] = 106.0
    assert late.check() and late.stopped_by == CALL_DEADLINE
    with pytest.raises(ValueError):
        Deadline(1.0, reason="soon")


def test_fewer_ranks_than_gpus_ends_by_the_deadline(warm, server):
    # 64 of 128 GPUs: the host sets are solved one after another, each ending by the call's deadline;
    # the ones not started when it passed are skipped (the launcher's hosts always run)
    t0 = time.monotonic()
    r = warm.solve(make_cluster(16, 8), timeout=1.5, time_limit_seconds=60, world_size=64,
                   **{k: v for k, v in SLOW.items()})
    assert time.monotonic() - t0 < 1.5
    assert r.status == "FEASIBLE" and r.stopped_by == CALL_DEADLINE
    assert len(set(r.layout.assignment)) == 64
    assert wait_until(lambda: server.servicer._pending == 0, 10)


def test_bad_request_at_131072_gpus_is_refused_before_the_cluster_is_built(warm, channel):
    """Sizes and the traffic model are checked against the raw message's device count first (issue 28.1:
    the refusal took ~7 s, after the graph was built)."""
    from rankmap.v1 import rankmap_pb2 as pb
    from service_helpers import cluster_proto, raw_call
    from test_service_limits import bad_request

    big = cluster_proto(16_384, 8)  # 131,072 GPUs
    cases = [
        ({"tp": 3}, "sizes.world_size", "world_size 131072 is not divisible by tp*cp*pp = 3*1*1 = 3"),
        ({"tp": 8, "world_size": 262_144}, "sizes.world_size", "more than the 131072 usable GPUs"),
    ]
    for sizes, field, needle in cases:
        req = pb.SolveRequest(cluster=big, time_limit_seconds=30)
        for k, v in sizes.items():
            setattr(req.sizes, k, v)
        t0 = time.monotonic()
        code, _, err = raw_call(channel, "Solve", req, timeout=60)
        took = time.monotonic() - t0
        got_field, message = bad_request(err)
        assert code.name == "INVALID_ARGUMENT" and (got_field, needle in message) == (field, True), message
        assert took < 2.0, took  # sending ~10 MB and counting the devices; building the graph took seconds
    req = pb.SolveRequest(cluster=big)
    req.sizes.tp = 8
    req.traffic.model.preset = "no-such-model"
    t0 = time.monotonic()
    code, _, err = raw_call(channel, "Solve", req, timeout=60)
    assert code.name == "INVALID_ARGUMENT" and bad_request(err)[0].startswith("traffic.model")
    assert time.monotonic() - t0 < 2.0
