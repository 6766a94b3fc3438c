"""Issue 11, service side: bounded work, limits, status codes, logs (one reproducer per test).

A live in-process server on a free loopback port; raw calls where the wire
matters.  No test depends on timing beyond generous bounded waits.
"""

from __future__ import annotations

import json
import threading
from concurrent import futures

import grpc
import pytest
from google.rpc import error_details_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_status import rpc_status

from rankmap.client import RankmapClient
from rankmap import wire
from rankmap.server.calls import Cancelled
from rankmap.server.limits import Limits
from rankmap.server.service import serve
from rankmap.solver import InvalidArgumentError
from service_helpers import LogLines, cluster_proto, live_server, pb, raw_call, two_hosts, wait_until


server = live_server(workers=2, max_queued=4)  # with the channel fixture of conftest.py


def bad_request(err) -> tuple[str, str]:
    """(field, description) of the BadRequest detail of a failed call."""
    status = rpc_status.from_call(err)
    for d in status.details:
        if d.Is(error_details_pb2.BadRequest.DESCRIPTOR):
            br = error_details_pb2.BadRequest()
            d.Unpack(br)
            return br.field_violations[0].field, br.field_violations[0].description
    raise AssertionError("no BadRequest detail")


def health_ok(channel, timeout=10.0) -> bool:
    stub = health_pb2_grpc.HealthStub(channel)
    return stub.Check(health_pb2.HealthCheckRequest(), timeout=timeout).status == health_pb2.HealthCheckResponse.SERVING


# --------------------------------------------------------------------------- limits


def test_get_groups_of_4m_ranks_is_refused_at_once(channel):
    """The 25-byte request that cost 21 s / 2.9 GB: over --max-world-size, INVALID_ARGUMENT naming it."""
    req = wire.get_groups_request(4_194_304, tp=8, pp=8, cp=2, ep=4, etp=1)
    assert req.ByteSize() < 40
    code, details, err = raw_call(channel, "GetGroups", req, timeout=30)
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    field, message = bad_request(err)
    assert field == "sizes.world_size"
    assert "4194304" in message and "262144" in message and "--max-world-size" in message


def test_get_groups_runs_in_the_pool_and_honours_the_deadline(channel, server):
    req = wire.get_groups_request(131_072, tp=8, pp=8, cp=2, ep=4, etp=1)
    with LogLines() as logs:
        code, _, _ = raw_call(channel, "GetGroups", req, timeout=0.05)
        assert code == grpc.StatusCode.DEADLINE_EXCEEDED
        # the server side ends with DEADLINE_EXCEEDED too (work stopped at a check point), and the pool empties
        assert wait_until(lambda: any(e.get("method") == "GetGroups" for e in logs.entries()), 30)
    entry = [e for e in logs.entries() if e.get("method") == "GetGroups"][0]
    assert entry["code"] == "DEADLINE_EXCEEDED"
    assert server.servicer.wait_idle(30)
    assert health_ok(channel)


def test_flood_of_get_groups_does_not_starve_health():
    """40 big GetGroups at once: the pool admits workers + max_queued, refuses the rest, health answers."""
    srv = serve(host="127.0.0.1", port=0, workers=1, max_queued=2)
    ch = grpc.insecure_channel(srv.address)
    try:
        req = wire.get_groups_request(131_072, tp=8, pp=8, cp=2, ep=4, etp=1)
        with futures.ThreadPoolExecutor(40) as ex:
            calls = [ex.submit(raw_call, ch, "GetGroups", req, 60) for _ in range(40)]
            assert health_ok(ch, timeout=10)
            codes = [c.result()[0] for c in calls]
        assert set(codes) <= {grpc.StatusCode.OK, grpc.StatusCode.RESOURCE_EXHAUSTED}
        assert codes.count(grpc.StatusCode.RESOURCE_EXHAUSTED) >= 40 - 3 - 3  # a few may finish and free a place
        assert health_ok(ch)
    finally:
        ch.close()
        srv.stop(grace=None).wait(10)


def test_time_limit_over_the_server_cap_is_invalid_argument(channel):
    req = wire.solve_request(two_hosts(), tp=2, time_limit_seconds=1e9)
    code, _, err = raw_call(channel, "Solve", req)
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    field, message = bad_request(err)
    assert field == "time_limit_seconds"
    assert "1e+09" in message and "600" in message and "--max-time-limit" in message


def test_default_time_limit_is_capped_by_the_server():
    srv = serve(host="127.0.0.1", port=0, workers=1, max_queued=1, limits=Limits(max_time_limit=5))
    try:
        with RankmapClient(srv.address) as client:
            assert client.solve(two_hosts(), tp=2, timeout=60).status in ("OPTIMAL", "FEASIBLE")
            with pytest.raises(InvalidArgumentError) as info:
                client.solve(two_hosts(), tp=2, time_limit_seconds=6, timeout=60)
            assert info.value.field == "time_limit_seconds"
    finally:
        srv.stop(grace=None).wait(10)


def test_request_bytes_batch_length_and_cluster_size_limits():
    limits = Limits(max_world_size=8, max_request_bytes=4096, max_batch_length=2)
    srv = serve(host="127.0.0.1", port=0, workers=1, max_queued=1, limits=limits)
    ch = grpc.insecure_channel(srv.address)
    try:
        big = wire.solve_request(two_hosts(), tp=2)
        big.cluster.nodes.add(id="x" * 5000, kind="switch")
        code, details, _ = raw_call(ch, "Solve", big)
        assert code == grpc.StatusCode.RESOURCE_EXHAUSTED and "4096" in details

        sixteen = wire.solve_request(two_hosts(8), tp=2)
        code, _, err = raw_call(ch, "Solve", sixteen)
        assert code == grpc.StatusCode.INVALID_ARGUMENT
        assert bad_request(err)[0] == "cluster.devices" and "16" in bad_request(err)[1]

        code, _, err = raw_call(ch, "Evaluate", wire.evaluate_request(two_hosts(), [f"node1/gpu{i}" for i in range(9)]))
        assert code == grpc.StatusCode.INVALID_ARGUMENT and bad_request(err)[0] == "assignment"

        small = wire.solve_request(two_hosts(), tp=2)
        code, _, err = raw_call(ch, "BatchSolve", pb.BatchSolveRequest(requests=[small] * 3))
        assert code == grpc.StatusCode.INVALID_ARGUMENT
        field, message = bad_request(err)
        assert field == "requests" and "--max-batch-length" in message
        code, _, out = raw_call(ch, "BatchSolve", pb.BatchSolveRequest(requests=[small] * 2))
        assert code == grpc.StatusCode.OK and len(out) == 2
    finally:
        ch.close()
        srv.stop(grace=None).wait(10)


def test_conversion_has_check_points():
    """A deadline reaches the parsing of a big cluster (the 131k-GPU request that overran 0.5 s by 2.4 s)."""
    cluster = cluster_proto(4096, 8)  # 32,768 GPUs
    calls = []

    def check():
        calls.append(1)
        if len(calls) > 3:
            raise Cancelled(True)

    with pytest.raises(Cancelled):
        wire.graph_from_proto(cluster, check)
    assert len(calls) == 4  # stopped at the 4th check point, long before the end
    groups = {"G": __import__("numpy").arange(1 << 20).reshape(-1, 8)}
    calls.clear()
    with pytest.raises(Cancelled):
        wire.groups_to_proto(groups, pb.GetGroupsResponse().groups, check)


def test_big_solve_request_stops_at_its_deadline_while_parsing(channel, server):
    req = pb.SolveRequest(cluster=cluster_proto(16_384, 8))  # 131,072 GPUs, ~10 MB
    req.sizes.tp = 8
    with LogLines() as logs:
        code, _, _ = raw_call(channel, "Solve", req, timeout=0.5)
        assert code == grpc.StatusCode.DEADLINE_EXCEEDED
        assert wait_until(lambda: any(e.get("method") == "Solve" for e in logs.entries()), 60)
    assert [e for e in logs.entries() if e.get("method") == "Solve"][0]["code"] == "DEADLINE_EXCEEDED"
    assert server.servicer.wait_idle(60)
    assert health_ok(channel)


def test_model_dimension_errors_map_to_invalid_argument(channel):
    """The traffic model's own InvalidArgumentError (e.g. a limit on num_layers) is INVALID_ARGUMENT with its field."""
    req = wire.solve_request(two_hosts(), tp=2, model={"preset": "llama3-8b", "num_layers": -3})
    code, _, err = raw_call(channel, "Solve", req)
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert bad_request(err)[0].startswith("traffic.model")


# --------------------------------------------------------------------------- errors


@pytest.mark.parametrize("with_orders", [False, True])
def test_unknown_enum_value_is_invalid_argument(channel, with_orders):
    req = wire.solve_request(two_hosts(), tp=2)
    req.orders.policy = 7
    if with_orders:
        req.orders.orders.append("tp-cp-ep-dp-pp")
    code, _, err = raw_call(channel, "Solve", req)
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert bad_request(err)[0] == "orders.policy"
    req = wire.solve_request(two_hosts(), tp=2)
    req.mode = 9
    assert raw_call(channel, "Solve", req)[0] == grpc.StatusCode.INVALID_ARGUMENT


def test_huge_strings_in_errors_stay_invalid_argument(channel):
    req = wire.solve_request(two_hosts(), tp=2, orders=["tp-" * 1700 + "pp"])
    code, details, err = raw_call(channel, "Solve", req)
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert len(details) < 1024 and "more characters" in details
    g = two_hosts()
    name = "d" * 20_000
    g.add_node(name, kind="gpu", host="node3", local_index=0)  # no link: the solver names it
    req = wire.solve_request(g, tp=2)
    req.cluster.links.add(source=name, target="nowhere" * 3000, bandwidth_gbps=1.0)
    code, details, err = raw_call(channel, "Solve", req)
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    field, message = bad_request(err)
    assert len(message) < 1024 and len(field) < 200


def test_hundred_hierarchical_cp_levels_is_invalid_argument(channel):
    req = wire.get_groups_request(8, hierarchical_context_parallel_sizes=[1] * 100)
    code, _, err = raw_call(channel, "GetGroups", req)
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert bad_request(err)[0] == "sizes.hierarchical_context_parallel_sizes"


def test_undecodable_request_is_invalid_argument(channel):
    for method in ("Solve", "Evaluate", "GetGroups", "BatchSolve"):
        code, details, _ = raw_call(channel, method, b"\xff\xff\xff\xff\x0f garbage")
        assert code == grpc.StatusCode.INVALID_ARGUMENT, method
        assert "not a valid rankmap.v1." in details


def test_no_deadline_no_traceback_and_one_json_line_per_request(channel, monkeypatch):
    seen = []
    monkeypatch.setattr(threading, "excepthook", lambda args: seen.append(args))
    with LogLines() as logs:
        code, _, _ = raw_call(channel, "GetGroups", wire.get_groups_request(8, tp=2), timeout=None)
        assert code == grpc.StatusCode.OK
        code, _, _ = raw_call(channel, "GetGroups", wire.get_groups_request(8, tp=3), timeout=None)
        assert code == grpc.StatusCode.INVALID_ARGUMENT
        assert wait_until(lambda: len([e for e in logs.entries() if e.get("method") == "GetGroups"]) >= 2, 10)
    assert not seen
    entries = [e for e in logs.entries() if e.get("method") == "GetGroups"]
    assert [e["code"] for e in entries] == ["OK", "INVALID_ARGUMENT"]
    for e in entries:
        assert e["peer"].startswith(("ipv4:", "ipv6:")) and e["seconds"] >= 0
    assert entries[1]["field"] == "sizes.world_size" and "not divisible by tp" in entries[1]["error"]
    assert not any("Traceback" in line for line in logs.lines)


def test_a_bug_is_internal_logged_as_one_line_without_traceback(server, channel, monkeypatch):
    def broken(request, guard):
        raise RuntimeError("boom\nsecond line")

    monkeypatch.setattr(server.servicer, "_evaluate_work", broken)
    with LogLines() as logs:
        code, details, _ = raw_call(channel, "Evaluate", wire.evaluate_request(two_hosts(), []))
        assert wait_until(lambda: any(e.get("method") == "Evaluate" for e in logs.entries()), 10)
    assert code == grpc.StatusCode.INTERNAL
    entry = [e for e in logs.entries() if e.get("method") == "Evaluate"][0]
    assert entry["code"] == "INTERNAL"
    assert entry["exception"] == "RuntimeError: boom second line"
    assert "test_service_limits.py" in entry["where"]
    assert all("\n" not in line and "Traceback" not in line for line in logs.lines)
    json.dumps(entry)
