"""The gRPC service end to end (the proto conversion on its own: tests/test_wire.py).

A real server (``rankmap.server.service.serve``) is started on a free loopback
port and driven through the Python client (and, where the wire matters, the
raw stub): results must equal the in-process solve field for field, errors
must carry the CLI's message and the request field, deadlines must stop the
solve without hurting the server.
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from contextlib import redirect_stderr

import grpc
import numpy as np
import pytest
from google.rpc import error_details_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc
from grpc_status import rpc_status

from rankmap.client import AsyncRankmapClient, RankmapClient, RankmapRpcError
from rankmap import wire
from rankmap.server.service import SERVICE_NAME, serve
from service_helpers import TRAFFIC, assert_exposed, assert_same_result, live_server, make_cluster, wait_until
from rankmap.solver import (
    InfeasibleError,
    InvalidArgumentError,
    SolveOptions,
    evaluate,
    megatron_groups,
    parallel_config,
    parse_constraint,
    solve,
)
from rankmap.solver.traffic import model_preset, traffic_from_model
from rankmap.v1 import rankmap_pb2 as pb
from rankmap.v1 import rankmap_pb2_grpc

# --------------------------------------------------------------------------- fixtures


server = live_server(workers=2, max_queued=8)  # with the client and channel fixtures of conftest.py


def wait_idle(servicer, timeout=15.0):
    t = time.monotonic() + timeout
    while time.monotonic() < t:
        if servicer._pending == 0:
            return True
        time.sleep(0.05)
    return False


# --------------------------------------------------------------------------- the server


def test_health_serving(server, channel, client):
    stub = health_pb2_grpc.HealthStub(channel)
    for name in ("", SERVICE_NAME):
        resp = stub.Check(health_pb2.HealthCheckRequest(service=name), timeout=5)
        assert resp.status == health_pb2.HealthCheckResponse.SERVING
    assert client.health() == "SERVING"


def test_reflection_lists_the_service(channel):
    stub = reflection_pb2_grpc.ServerReflectionStub(channel)
    responses = list(
        stub.ServerReflectionInfo(iter([reflection_pb2.ServerReflectionRequest(list_services="")]), timeout=5)
    )
    names = {s.name for s in responses[0].list_services_response.service}
    assert "rankmap.v1.RankmapService" in names
    assert "grpc.health.v1.Health" in names
    # and the file descriptor of the contract is served
    req = reflection_pb2.ServerReflectionRequest(file_containing_symbol="rankmap.v1.RankmapService")
    resp = list(stub.ServerReflectionInfo(iter([req]), timeout=5))[0]
    assert resp.file_descriptor_response.file_descriptor_proto


@pytest.mark.parametrize(
    "case",
    [
        dict(hosts=2, gpus=4, sizes=dict(tp=2, pp=2), opts=dict()),
        dict(hosts=2, gpus=4, sizes=dict(tp=2, pp=2), opts=dict(mode="free", orders="megatron-cli", seed=3)),
        dict(hosts=4, gpus=4, sizes=dict(tp=2, cp=2, pp=2), opts=dict(orders="all", constraints=["tp within host"])),
        dict(hosts=3, gpus=4, sizes=dict(tp=2), opts=dict(mode="fixed", exclude_hosts=["h1"])),
        dict(hosts=2, gpus=4, sizes=dict(tp=2, ep=2, etp=1), opts=dict(orders=["tp-cp-ep-dp-pp", "tp-cp-ep-pp-dp"])),
        dict(hosts=2, gpus=4, sizes=dict(tp=4), opts=dict(), int_ids=True),
        dict(hosts=2, gpus=4, sizes=dict(tp=2), opts=dict(), traffic={"tp": 4e9, "dp": 1e9}),
    ],
)
def test_solve_equals_in_process(client, case):
    g = make_cluster(case["hosts"], case["gpus"], int_ids=case.get("int_ids", False))
    opts = dict(case["opts"])
    opts.setdefault("time_limit_seconds", 5.0)
    traffic = case.get("traffic", TRAFFIC)
    remote = client.solve(g, traffic=traffic, **case["sizes"], **opts)
    n = wire.count_gpus(g, opts.get("exclude_devices", ()), opts.get("exclude_hosts", ()))
    cfg = parallel_config(n, **case["sizes"])
    local_opts = dict(opts)
    if isinstance(local_opts.get("orders"), list):
        local_opts["orders"] = tuple(local_opts["orders"])
    local_opts["constraints"] = tuple(parse_constraint(c) for c in local_opts.get("constraints", ()))
    local_opts["exclude_hosts"] = tuple(local_opts.get("exclude_hosts", ()))
    local = solve(g, cfg, traffic, SolveOptions(**local_opts))
    assert_same_result(remote, local)


def test_solve_with_model_traffic(client):
    g = make_cluster(2, 4)
    remote = client.solve(g, tp=2, pp=2, model={"preset": "llama3-8b", "seq_length": 4096}, time_limit_seconds=5)
    cfg = parallel_config(8, tp=2, pp=2)
    traffic = traffic_from_model(model_preset("llama3-8b", seq_length=4096), cfg)
    local = solve(g, cfg, traffic, SolveOptions(time_limit_seconds=5))
    assert_same_result(remote, local)


def test_async_client_solve(server):
    g = make_cluster(2, 4)

    async def main():
        async with AsyncRankmapClient(server.address, timeout=60) as c:
            assert await c.health() == "SERVING"
            r = await c.solve(g, tp=2, pp=2, traffic=TRAFFIC, time_limit_seconds=5)
            groups = await c.get_groups(8, tp=2)
            cost = await c.evaluate(g, r.assignment, order=r.order, tp=2, pp=2, traffic=TRAFFIC)
            out = [x async for x in c.batch_solve([dict(graph=g, tp=2, traffic=TRAFFIC), dict(graph=g, tp=3)])]
            with pytest.raises(InvalidArgumentError) as err:
                await c.solve(g, tp=0)
            return r, groups, cost, out, err.value

    r, groups, cost, out, err = asyncio.run(main())
    local = solve(g, parallel_config(8, tp=2, pp=2), TRAFFIC, SolveOptions(time_limit_seconds=5))
    assert_same_result(r, local)
    assert cost == r.cost
    assert list(groups) == list(megatron_groups(parallel_config(8, tp=2)))
    assert sorted(i for i, _ in out) == [0, 1]
    assert err.field == "tp" and err.proto_field == "sizes.tp"


def test_evaluate_and_groups_equal_in_process(client):
    g = make_cluster(2, 4)
    assignment = [f"h{(i // 4) ^ 1}g{3 - i % 4}" for i in range(8)]
    cfg = parallel_config(8, tp=2, pp=2, order="tp-cp-ep-pp-dp")
    assert client.evaluate(g, assignment, order="tp-cp-ep-pp-dp", tp=2, pp=2, traffic=TRAFFIC) == evaluate(
        g, cfg, assignment, TRAFFIC
    )
    local = megatron_groups(parallel_config(64, tp=2, cp=2, ep=2, pp=2, order="tp-cp-ep-dp-pp"))
    remote = client.get_groups(64, tp=2, cp=2, ep=2, pp=2)
    assert list(remote) == list(local)
    assert all(np.array_equal(remote[k], local[k]) for k in local)
    with pytest.raises(InvalidArgumentError) as err:
        client.evaluate(g, assignment[:-1] + [assignment[0]], tp=2, pp=2, traffic=TRAFFIC)
    assert err.value.field == "assignment[7]"


def _cli_error_line(argv) -> str:
    from rankmap.cli import main

    buf = io.StringIO()
    with redirect_stderr(buf):
        assert main(argv) == 2
    return buf.getvalue().strip()


def test_bad_request_is_invalid_argument_with_field(channel, client):
    stub = rankmap_pb2_grpc.RankmapServiceStub(channel)
    req = wire.solve_request(make_cluster(2, 4))
    req.sizes.tp = 0
    with pytest.raises(grpc.RpcError) as err:
        stub.Solve(req, timeout=10)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    status = rpc_status.from_call(err.value)
    bad = [d for d in status.details if d.Is(error_details_pb2.BadRequest.DESCRIPTOR)]
    assert len(bad) == 1
    br = error_details_pb2.BadRequest()
    bad[0].Unpack(br)
    violation = br.field_violations[0]
    assert violation.field == "sizes.tp"
    # the message is the one the CLI prints
    line = _cli_error_line(["groups", "--world-size", "8", "--tp", "0"])
    assert line == f"rankmap: error: {violation.description} [tp]"
    assert err.value.details() == violation.description
    # through the client: InvalidArgumentError with the in-process field
    with pytest.raises(InvalidArgumentError) as e2:
        client.solve(make_cluster(2, 4), tp=0)
    assert (e2.value.field, e2.value.proto_field, e2.value.message) == ("tp", "sizes.tp", violation.description)


def test_bad_cluster_field_path(channel):
    stub = rankmap_pb2_grpc.RankmapServiceStub(channel)
    req = wire.solve_request(make_cluster(2, 4), tp=2)
    req.cluster.links[5].bandwidth_gbps = float("inf")
    with pytest.raises(grpc.RpcError) as err:
        stub.Solve(req, timeout=10)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    message, argument, path = wire.error_from_status(rpc_status.from_call(err.value))
    assert path == "cluster.links[5].bandwidth_gbps"
    assert argument == "cluster.edges"
    assert "bandwidth inf" in message


def test_infeasible_is_failed_precondition(client):
    g = make_cluster(2, 4)
    with pytest.raises(InfeasibleError) as err:
        client.solve(g, tp=8, traffic=TRAFFIC, constraints=["tp within host"], time_limit_seconds=2)
    with pytest.raises(InfeasibleError) as local:
        solve(g, parallel_config(8, tp=8), TRAFFIC, SolveOptions(constraints=(parse_constraint("tp within host"),)))
    assert err.value.message == local.value.message
    assert err.value.field == local.value.field


EXPOSURE = {"tp": 0.5, "dp": 0.2}


def test_exposure_round_trips_through_solve_evaluate_and_batch(client, server):
    g = make_cluster(2, 4)
    cfg = parallel_config(8, tp=2, pp=2)
    local = solve(g, cfg, TRAFFIC, SolveOptions(exposure=EXPOSURE, time_limit_seconds=5))
    assert_exposed(local.cost, EXPOSURE)
    remote = client.solve(g, tp=2, pp=2, traffic=TRAFFIC, exposure=EXPOSURE, time_limit_seconds=5)
    assert_same_result(remote, local)
    assert_exposed(remote.cost, EXPOSURE)
    assert_exposed(remote.baseline.cost, EXPOSURE)
    chosen = parallel_config(8, tp=2, pp=2, order=remote.order)
    cost = client.evaluate(g, remote.assignment, order=remote.order, tp=2, pp=2, traffic=TRAFFIC, exposure=EXPOSURE)
    assert cost == evaluate(g, chosen, remote.assignment, TRAFFIC, exposure=EXPOSURE)
    assert cost == remote.cost
    # without exposure every class counts fully; T_c of a layout does not depend on x_c
    plain = client.evaluate(g, remote.assignment, order=remote.order, tp=2, pp=2, traffic=TRAFFIC)
    assert_exposed(plain, {})
    assert plain.by_class == pytest.approx(cost.by_class)
    out = dict(client.batch_solve([dict(graph=g, tp=2, pp=2, traffic=TRAFFIC, exposure=EXPOSURE,
                                        time_limit_seconds=5)]))
    assert_same_result(out[0], local)

    async def main():
        async with AsyncRankmapClient(server.address, timeout=60) as c:
            r = await c.solve(g, tp=2, pp=2, traffic=TRAFFIC, exposure=EXPOSURE, time_limit_seconds=5)
            e = await c.evaluate(g, r.assignment, order=r.order, tp=2, pp=2, traffic=TRAFFIC, exposure=EXPOSURE)
            return r, e

    r, e = asyncio.run(main())
    assert_same_result(r, local)
    assert e == cost


def _violation(err):
    status = rpc_status.from_call(err)
    br = error_details_pb2.BadRequest()
    info = error_details_pb2.ErrorInfo()
    for d in status.details:
        if d.Is(error_details_pb2.BadRequest.DESCRIPTOR):
            d.Unpack(br)
        elif d.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            d.Unpack(info)
    return br.field_violations[0], info.metadata["argument"]


@pytest.mark.parametrize("cls, value, needle", [("dp", 1.5, "must be in [0, 1]"), ("dp", float("nan"), "must be in"),
                                                ("xx", 0.5, "unknown traffic class 'xx'")])
def test_bad_exposure_is_invalid_argument_naming_the_class(channel, client, tmp_path, cls, value, needle):
    from rankmap.solver.formats.graphfile import node_link_text

    stub = rankmap_pb2_grpc.RankmapServiceStub(channel)
    g = make_cluster(2, 4)
    req = wire.solve_request(g, tp=2, traffic=TRAFFIC)
    req.exposure[cls] = value
    ev = wire.evaluate_request(g, [f"h{i // 4}g{i % 4}" for i in range(8)], tp=2, traffic=TRAFFIC)
    ev.exposure[cls] = value
    descriptions = []
    for call, msg in ((stub.Solve, req), (stub.Evaluate, ev)):
        with pytest.raises(grpc.RpcError) as err:
            call(msg, timeout=10)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        violation, argument = _violation(err.value)
        assert violation.field == f"exposure[{cls}]" and argument == f"exposure.{cls}"
        assert needle in violation.description
        descriptions.append(violation.description)
    # the message is the CLI's
    path = tmp_path / "c8.json"
    path.write_text(node_link_text(g))
    text = "nan" if value != value else repr(value)
    line = _cli_error_line(["solve", str(path), "--tp", "2", "--exposure", f"{cls}={text}"])
    assert line == f"rankmap: error: {descriptions[0]} [exposure.{cls}]"
    # a BatchSolve item fails alone, with the same field
    good = wire.solve_request(g, tp=2, traffic=TRAFFIC, time_limit_seconds=5)
    got = {r.index: r for r in stub.BatchSolve(pb.BatchSolveRequest(requests=[good, req]), timeout=60)}
    assert got[1].WhichOneof("outcome") == "error"
    assert (got[1].error.field, got[1].error.argument) == (f"exposure[{cls}]", f"exposure.{cls}")
    assert got[1].error.code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
    # the client refuses it before sending, with the same message and argument
    with pytest.raises(InvalidArgumentError) as e2:
        client.solve(g, tp=2, traffic=TRAFFIC, exposure={cls: value})
    assert (e2.value.field, e2.value.message) == (f"exposure.{cls}", descriptions[0])


def test_cli_server_flag_carries_exposure(server, tmp_path, capsys):
    from rankmap.cli import main
    from rankmap.solver.formats.graphfile import node_link_text

    path = tmp_path / "c8.json"
    path.write_text(node_link_text(make_cluster(2, 4)))
    argv = ["solve", str(path), "--tp", "2", "--pp", "2", "--traffic", "tp=4e9,dp=1e9,pp=1e8",
            "--exposure", "tp=0.5,dp=0.2", "--time-limit", "5"]
    docs = []
    for extra in ([], ["--server", server.address]):
        assert main(argv + extra) == 0
        doc = json.loads(capsys.readouterr().out)
        doc.pop("solve_seconds")
        docs.append(doc)
    assert docs[0] == docs[1]
    assert {c: cc["exposure"] for c, cc in docs[1]["cost"]["classes"].items() if cc["exposure"] != 1} == EXPOSURE


def slow_request_kwargs():
    """A solve that takes seconds (16 hosts x 8 GPUs, every order)."""
    return dict(tp=2, cp=2, pp=2, orders="all", traffic={"tp": 4e9, "dp": 1e9, "pp": 1e8, "cp": 2e9},
                time_limit_seconds=60)


def test_tiny_deadline_answers_in_time_and_server_keeps_serving(server, client):
    """A 1 s deadline under a 60 s limit: the best layout found by then (issue 26.5; it was
    DEADLINE_EXCEEDED), and the worker is free at once.  A deadline that passes before any layout
    exists still ends DEADLINE_EXCEEDED (test_service_limits.py, a 131,072-GPU request)."""
    g = make_cluster(16, 8)
    client.solve(make_cluster(2, 4), tp=2, traffic=TRAFFIC, time_limit_seconds=5)  # the first call imports the solver
    got = client.solve(g, timeout=1.0, **slow_request_kwargs())
    assert got.status == "FEASIBLE" and got.stopped_by == "deadline"
    # the solve was stopped, not left running (waited on, not timed)
    assert wait_idle(server.servicer, 10), "cancelled solve still occupies a worker"
    assert client.health() == "SERVING"
    small = client.solve(make_cluster(2, 4), tp=2, traffic=TRAFFIC, time_limit_seconds=5)
    assert small.status in ("OPTIMAL", "FEASIBLE")


def test_client_cancel_stops_the_solve(server, channel):
    stub = rankmap_pb2_grpc.RankmapServiceStub(channel)
    req = wire.solve_request(make_cluster(16, 8), **slow_request_kwargs())
    fut = stub.Solve.future(req, timeout=60)
    assert wait_until(lambda: server.servicer._pending >= 1, 30), "the solve never reached the server"
    fut.cancel()
    assert wait_idle(server.servicer, 10)


def test_batch_solve_streams_every_index(client):
    g = make_cluster(2, 4)
    items = [
        dict(graph=g, tp=2, traffic=TRAFFIC, time_limit_seconds=5),
        dict(graph=g, tp=3),  # invalid: 8 % 3
        dict(graph=g, tp=2, pp=2, mode="free", traffic=TRAFFIC, time_limit_seconds=5),
        dict(graph=g, tp=8, constraints=["tp within host"], traffic=TRAFFIC),  # infeasible
        dict(graph=g, tp=4, traffic=TRAFFIC, time_limit_seconds=5),
        dict(graph=g, tp=2, bogus=1),  # rejected by the client before sending
    ]
    out = dict()
    for index, outcome in client.batch_solve(items):
        assert index not in out
        out[index] = outcome
    assert sorted(out) == list(range(len(items)))
    assert isinstance(out[1], InvalidArgumentError) and out[1].field == "world_size"
    assert out[1].proto_field == "sizes.world_size"
    assert isinstance(out[3], InfeasibleError)
    assert isinstance(out[5], InvalidArgumentError)
    for i, sizes in ((0, dict(tp=2)), (4, dict(tp=4))):
        local = solve(g, parallel_config(8, **sizes), TRAFFIC, SolveOptions(time_limit_seconds=5))
        assert_same_result(out[i], local)
    assert out[2].mode == "free"


def test_batch_solve_raw_stream_tags_indices(channel):
    stub = rankmap_pb2_grpc.RankmapServiceStub(channel)
    g = make_cluster(2, 4)
    reqs = [wire.solve_request(g, tp=tp, traffic=TRAFFIC, time_limit_seconds=5) for tp in (1, 2, 4, 8, 3)]
    got = list(stub.BatchSolve(pb.BatchSolveRequest(requests=reqs), timeout=60))
    assert sorted(r.index for r in got) == [0, 1, 2, 3, 4]
    by_index = {r.index: r for r in got}
    assert by_index[4].WhichOneof("outcome") == "error"
    assert by_index[4].error.code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
    assert by_index[4].error.field == "sizes.world_size"
    assert all(by_index[i].WhichOneof("outcome") == "result" for i in range(4))


def test_resource_exhausted_when_queue_full():
    srv = serve(port=0, workers=1, max_queued=0)
    try:
        ch = grpc.insecure_channel(srv.address)
        stub = rankmap_pb2_grpc.RankmapServiceStub(ch)
        slow = wire.solve_request(make_cluster(16, 8), **slow_request_kwargs())
        fut = stub.Solve.future(slow, timeout=60)
        t = time.monotonic() + 5
        while srv.servicer._pending < 1 and time.monotonic() < t:
            time.sleep(0.02)
        with pytest.raises(grpc.RpcError) as err:
            stub.Solve(wire.solve_request(make_cluster(2, 4), tp=2, traffic=TRAFFIC), timeout=10)
        assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        # not retried by the client: RESOURCE_EXHAUSTED surfaces as RankmapRpcError
        with RankmapClient(srv.address, timeout=10) as c, pytest.raises(RankmapRpcError) as e2:
            c.solve(make_cluster(2, 4), tp=2, traffic=TRAFFIC)
        assert e2.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED
        fut.cancel()
        assert wait_idle(srv.servicer, 10)
        ch.close()
    finally:
        srv.stop(grace=None).wait(10)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_client_retries_unavailable_until_the_server_is_up():
    port = _free_port()
    started = {}

    def start_later():
        time.sleep(0.6)
        started["srv"] = serve(port=port, workers=1)

    th = threading.Thread(target=start_later)
    th.start()
    try:
        with RankmapClient(f"127.0.0.1:{port}", timeout=20, retries=10, backoff_initial=0.1, backoff_max=0.4) as c:
            groups = c.get_groups(8, tp=2)
        assert "TENSOR_MODEL_PARALLEL_GROUP" in groups
    finally:
        th.join()
        if "srv" in started:
            started["srv"].stop(grace=None).wait(10)


def test_unavailable_gives_up_after_retries():
    port = _free_port()
    with RankmapClient(f"127.0.0.1:{port}", timeout=10, retries=2, backoff_initial=0.05, backoff_max=0.1) as c:
        with pytest.raises(RankmapRpcError) as err:
            c.get_groups(8)
    assert err.value.code == grpc.StatusCode.UNAVAILABLE


def test_health_not_serving_while_draining():
    srv = serve(port=0, workers=1)
    ch = grpc.insecure_channel(srv.address)
    stub = health_pb2_grpc.HealthStub(ch)
    assert stub.Check(health_pb2.HealthCheckRequest(), timeout=5).status == health_pb2.HealthCheckResponse.SERVING
    srv.drain()
    assert stub.Check(health_pb2.HealthCheckRequest(), timeout=5).status == health_pb2.HealthCheckResponse.NOT_SERVING
    srv.stop(grace=None).wait(10)
    ch.close()


def test_cli_serve_sigterm_graceful(tmp_path):
    port = _free_port()
    env = dict(os.environ)
    proc = subprocess.Popen(
        [sys.executable, "-m", "rankmap", "serve", "--port", str(port), "--workers", "1", "--grace", "5"],
        stderr=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        with RankmapClient(f"127.0.0.1:{port}", timeout=30, retries=20, backoff_initial=0.1, backoff_max=0.5) as c:
            assert c.health() == "SERVING"
            c.get_groups(8, tp=2)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    assert out == ""
    lines = [json.loads(line) for line in err.splitlines() if line.startswith("{")]
    assert any(entry.get("event") == "serving" for entry in lines)
    logged = [entry for entry in lines if entry.get("method") == "GetGroups"]
    assert logged and logged[0]["code"] == "OK" and "seconds" in logged[0] and logged[0]["sizes"]["tp"] == 2
    assert any(entry.get("event") == "draining" for entry in lines)


def test_solve_config_sends_exactly_the_solve_arguments(client, server):
    g = make_cluster(4, 4)
    cfg = parallel_config(16, tp=2, pp=2, ep=2, etp=1)
    opts = SolveOptions(mode="free", orders="tp-cp-ep-dp-pp, tp-cp-ep-pp-dp", seed=5, time_limit_seconds=3,
                        constraints=(parse_constraint("tp within host"),), exclude_devices=())
    partial = {"tp": 4e9, "ep": 2e9}
    remote = client.solve_config(g, cfg, partial, opts)
    assert_same_result(remote, solve(g, cfg, partial, opts))

    async def main():
        async with AsyncRankmapClient(server.address) as c:
            return await c.solve_config(g, cfg, partial, opts)

    assert_same_result(asyncio.run(main()), solve(g, cfg, partial, opts))


@pytest.mark.slow
def test_131072_gpus_fit_the_message_limits(client):
    """A 131,072-GPU cluster (~8 MB request) and its group catalogue (~7 MB answer) pass."""
    g = make_cluster(16384, 8)
    assert wire.graph_to_proto(g).ByteSize() > 4 << 20  # above gRPC's default 4 MiB limit
    groups = client.get_groups(131072, tp=8, cp=2, pp=8, timeout=300)
    assert groups["TENSOR_MODEL_PARALLEL_GROUP"].shape == (16384, 8)
    gpus = [n for n, d in g.nodes(data=True) if d.get("kind", "gpu") == "gpu"]
    traffic = {"tp": 4e9, "dp": 1e9}
    remote = client.evaluate(g, gpus, tp=8, cp=2, pp=8, traffic=traffic, timeout=300)
    assert remote == evaluate(g, parallel_config(131072, tp=8, cp=2, pp=8), gpus, traffic)


def test_batch_deadline_reports_remaining_indices_and_stops(server, client):
    g = make_cluster(2, 4)
    slow_graph = make_cluster(16, 8)
    items = [dict(graph=g, tp=2, traffic=TRAFFIC, time_limit_seconds=5)] + [
        dict(graph=slow_graph, **slow_request_kwargs()) for _ in range(3)
    ]
    out = dict(client.batch_solve(items, timeout=1.5))
    assert sorted(out) == [0, 1, 2, 3]
    # issue 26.5: an item whose 60 s limit outlasts the stream's deadline answers with the best layout found
    # by then (stopped_by "deadline"); one that could not start in time still ends DEADLINE_EXCEEDED
    late = [o for o in out.values() if isinstance(o, RankmapRpcError)]
    assert all(o.code == grpc.StatusCode.DEADLINE_EXCEEDED for o in late)
    answered = [out[i] for i in (1, 2, 3) if not isinstance(out[i], RankmapRpcError)]
    assert all(r.status == "FEASIBLE" and r.stopped_by == "deadline" for r in answered)
    assert answered or late
    assert wait_idle(server.servicer, 10), "batch items kept running after the deadline"
    assert client.health() == "SERVING"


# --------------------------------------------------------------------------- how NCCL runs collectives (issue 25)


def _h100_host(capsys, tmp_path):
    """``rankmap cluster --gpus-per-node 8 --gpu h100``: one 8×H100 host (NVSwitch, 18 NVLinks per GPU)."""
    from rankmap.cli import main

    path = tmp_path / "h100.json"
    assert main(["cluster", "--gpus-per-node", "8", "--gpu", "h100", "-o", str(path)]) == 0
    capsys.readouterr()
    return path


def test_nccl_options_through_a_server(server, client, tmp_path, capsys):
    """On a real server, 1 host × 8 H100, tp8 all-reduce of 4 GB: the answer names NVLS (8 channels) by default,
    ring when --nccl-algo ring forces it, and the times are NCCL's (ring busbw 18 × 20.6 = 370.8 GB/s, NVLS
    2·0.85·370.8·7/9 ≈ 490.3 GB/s, time 2·(7/8)·S / busbw + NCCL's latency): the same as in process,
    for rankmap solve/evaluate --server and the Python client."""
    from rankmap.cli import main
    from rankmap.solver import NcclModel
    from rankmap.solver.cost.nccl import latency_seconds
    from rankmap.solver.formats.graphfile import load_graph

    path = _h100_host(capsys, tmp_path)
    S = 4e9
    want = {"nvls": 2 * 7 / 8 * S / (2 * 0.85 * 370.8e9 * 7 / 9) + latency_seconds("nvls", "simple", "all_reduce", 8, 1),
            "ring": 2 * 7 / 8 * S / 370.8e9 + latency_seconds("ring", "simple", "all_reduce", 8, 1)}
    argv = ["solve", str(path), "--tp", "8", "--traffic", f"tp={S:g}", "--time-limit", "5"]
    tp = {}
    for flags, algo in (([], "nvls"), (["--nccl-algo", "ring"], "ring"), (["--nccl-algo", "RING", "--no-pxn"], "ring")):
        docs = []
        for extra in ([], ["--server", server.address]):
            assert main(argv + flags + extra) == 0
            doc = json.loads(capsys.readouterr().out)
            doc.pop("solve_seconds")
            docs.append(doc)
        assert docs[0] == docs[1], flags  # the server predicts exactly what the in-process solve predicts
        cc = docs[1]["cost"]["classes"]["tp"]
        assert cc["algorithm"] == algo and cc["channels"] == (8 if algo == "nvls" else 1), flags
        assert cc["seconds"] == pytest.approx(want[algo], rel=1e-9), flags
        tp[algo] = cc["seconds"]
    assert tp["ring"] > 1.3 * tp["nvls"]  # forcing ring costs NVLS's 1.32× busbw
    # evaluate --server, the result file's layout
    result = tmp_path / "result.json"
    assert main(argv + ["--server", server.address]) == 0
    result.write_text(capsys.readouterr().out)
    for flags, algo in (([], "nvls"), (["--nccl-algo", "ring", "--no-nccl-latency"], "ring")):
        docs = []
        for extra in ([], ["--server", server.address]):
            assert main(["evaluate", str(path), "--assignment", str(result), *flags, *extra]) == 0
            docs.append(json.loads(capsys.readouterr().out))
        assert docs[0] == docs[1], flags
        assert docs[1]["cost"]["classes"]["tp"]["algorithm"] == algo
    assert docs[1]["cost"]["classes"]["tp"]["latency_seconds"] == 0
    assert docs[1]["cost"]["classes"]["tp"]["seconds"] == pytest.approx(2 * 7 / 8 * S / 370.8e9, rel=1e-12)
    # the Python client: nccl= an NcclModel or a mapping of its fields
    g = load_graph(str(path))
    gpus = [n for n, d in g.nodes(data=True) if d.get("kind") == "gpu"]
    for nccl, algo in ((None, "nvls"), (NcclModel(algorithm="ring"), "ring"), ({"algorithm": "tree"}, "ring")):
        cost = client.evaluate(g, gpus, tp=8, traffic={"tp": S}, nccl=nccl)
        local = evaluate(g, parallel_config(8, tp=8), gpus, {"tp": S}, nccl=nccl if not isinstance(nccl, dict)
                         else NcclModel(**nccl))
        assert cost == local and cost.classes["tp"].algorithm == algo, nccl  # tree on one node: ring, as NCCL
    sol = client.solve(g, tp=8, traffic={"tp": S}, nccl={"algorithm": "ring", "rates": {"nvlink": 10}},
                       time_limit_seconds=5)
    assert sol.cost.classes["tp"].algorithm == "ring"
    assert sol.cost.classes["tp"].seconds == pytest.approx(
        2 * 7 / 8 * S / 180e9 + latency_seconds("ring", "simple", "all_reduce", 8, 1), rel=1e-9)


@pytest.mark.parametrize("mutate, path, argument, needle", [
    (lambda m: setattr(m, "algorithm", 7), "nccl.algorithm", "nccl_algo", "is not an NcclAlgorithm"),
    (lambda m: m.rates_gbps.__setitem__("nic", float("nan")), "nccl.rates_gbps[nic]", "nccl_rate.nic", "finite"),
    (lambda m: m.rates_gbps.__setitem__("nvlink", 0.0), "nccl.rates_gbps[nvlink]", "nccl_rate.nvlink", "nvlink=0.0"),
    (lambda m: m.rates_gbps.__setitem__("sys", 22.0), "nccl.rates_gbps[sys]", "nccl_rate.sys", "unknown NCCL rate key"),
])
def test_bad_nccl_options_are_invalid_argument_naming_the_field(channel, mutate, path, argument, needle):
    stub = rankmap_pb2_grpc.RankmapServiceStub(channel)
    g = make_cluster(2, 4)
    req = wire.solve_request(g, tp=2, traffic=TRAFFIC)
    ev = wire.evaluate_request(g, [f"h{i // 4}g{i % 4}" for i in range(8)], tp=2, traffic=TRAFFIC)
    mutate(req.nccl)
    mutate(ev.nccl)
    for call, msg in ((stub.Solve, req), (stub.Evaluate, ev)):
        with pytest.raises(grpc.RpcError) as err:
            call(msg, timeout=10)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        violation, arg = _violation(err.value)
        assert (violation.field, arg) == (path, argument) and needle in violation.description
    # a BatchSolve item fails alone, with the same field
    good = wire.solve_request(g, tp=2, traffic=TRAFFIC, time_limit_seconds=5)
    got = {r.index: r for r in stub.BatchSolve(pb.BatchSolveRequest(requests=[good, req]), timeout=60)}
    assert got[0].WhichOneof("outcome") == "result" and got[1].WhichOneof("outcome") == "error"
    assert (got[1].error.field, got[1].error.argument) == (path, argument)


def test_batch_entries_carry_nccl_keys_to_the_server(server, tmp_path, capsys):
    """`rankmap batch --server`: a job's nccl_algo / nccl_rate / nccl_latency keys travel with its SolveRequest."""
    from rankmap.cli import main

    path = _h100_host(capsys, tmp_path)
    jobs = tmp_path / "jobs.yaml"
    jobs.write_text(f"- {{name: auto, cluster: {path}, tp: 8, traffic: {{tp: 4e9}}, time_limit: 5}}\n"
                    f"- {{name: ring, cluster: {path}, tp: 8, traffic: {{tp: 4e9}}, time_limit: 5, nccl_algo: ring,\n"
                    f"   nccl_rate: {{nvlink: 10}}, nccl_latency: false}}\n")
    out = tmp_path / "out.jsonl"
    assert main(["batch", str(jobs), "--server", server.address, "-o", str(out), "--quiet"]) == 0
    capsys.readouterr()
    docs = {d["name"]: d for d in map(json.loads, out.read_text().splitlines())}
    auto, ring = (docs[n]["result"]["cost"]["classes"]["tp"] for n in ("auto", "ring"))
    assert (auto["algorithm"], ring["algorithm"]) == ("nvls", "ring")
    assert ring["latency_seconds"] == 0 and ring["seconds"] == pytest.approx(2 * 7 / 8 * 4e9 / 180e9, rel=1e-12)
