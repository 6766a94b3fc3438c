"""Issue 26.2 / 26.3 over gRPC, through a real server: ``Check`` (a layout as device ids or a launch
file's text) and ``RecommendAllocation`` answer what the in-process API answers; bad input is
INVALID_ARGUMENT with a ``google.rpc.BadRequest`` field violation naming the request field."""

from __future__ import annotations

import json
from pathlib import Path

import grpc
import pytest
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from rankmap import wire
from rankmap.solver import parallel_config
from rankmap.solver.allocation.check import check_allocation, parse_within
from rankmap.solver.allocation.request import recommend_allocation
from rankmap.solver.formats.graphfile import load_graph
from rankmap.v1 import rankmap_pb2 as pb
from rankmap.v1 import rankmap_pb2_grpc
from service_helpers import live_server

server = live_server(workers=2, max_queued=8)

GB200 = Path(__file__).resolve().parents[1] / "examples" / "clusters" / "gb200-nvl72-2racks.json"
TRAFFIC = {"tp": 1e9, "ep": 4e9, "dp": 1e9}
SIZES = dict(world_size=16, tp=8, ep=8, etp=1)
# ranks 0-3 r1t01, 4-7 r2t01, 8-11 r1t02, 12-15 r2t02: every tp/ep group (ranks 0-7, 8-15) spans both racks
INTERLEAVED = "".join(f"{h}\n" * 4 for h in ("r1t01", "r2t01", "r1t02", "r2t02"))


@pytest.fixture(scope="module")
def graph():
    return load_graph(str(GB200))


def _violation(err):
    status = rpc_status.from_call(err)
    br = error_details_pb2.BadRequest()
    for d in status.details:
        if d.Is(error_details_pb2.BadRequest.DESCRIPTOR):
            d.Unpack(br)
    return br.field_violations[0]


def test_check_over_grpc_matches_in_process(client, graph):
    remote = client.check(graph, INTERLEAVED, kind="hostfile", traffic=TRAFFIC, within="tp=nvlink,ep=nvlink",
                          best=False, **SIZES)
    assignment = [f"{h}/gpu{i}" for h in ("r1t01", "r2t01", "r1t02", "r2t02") for i in range(4)]
    local = check_allocation(graph, parallel_config(16, tp=8, ep=8, etp=1), assignment, TRAFFIC,
                             parse_within("tp=nvlink,ep=nvlink"), best=False)
    assert remote.to_dict() == json.loads(json.dumps(local.to_dict()))
    assert len(remote.violations) == 4 and not remote.ok
    assert remote.violations[0].domains == ("nvlink:nvl72-rack1", "nvlink:nvl72-rack2")
    # the same layout sent as device ids
    again = client.check(graph, assignment, traffic=TRAFFIC, within="tp=nvlink,ep=nvlink", best=False, **SIZES)
    assert again.to_dict() == remote.to_dict()


def test_check_best_over_grpc_keeps_the_groups_inside_racks(client, graph):
    res = client.check(graph, INTERLEAVED, kind="hostfile", traffic=TRAFFIC, within="tp=nvlink,ep=nvlink",
                       time_limit_seconds=5, **SIZES)
    assert res.best is not None and res.best.cost.total_seconds < res.cost.total_seconds
    clean = client.check(graph, list(res.best.assignment), order=res.best.order, traffic=TRAFFIC,
                         within="tp=nvlink,ep=nvlink", best=False, **SIZES)
    assert clean.ok and clean.cost.total_seconds == res.best.cost.total_seconds


def test_recommend_allocation_over_grpc_matches_in_process(client):
    remote = client.recommend_allocation(nvlink_domain_size=72, gpus_per_node=4, within="tp=nvlink,ep=nvlink",
                                         world_size=256, tp=8, ep=8, etp=1)
    local = recommend_allocation(parallel_config(256, tp=8, ep=8, etp=1), 4, 72, parse_within("tp=nvlink,ep=nvlink"))
    assert remote.to_dict() == local.to_dict()
    assert remote.segment_nodes == 16  # 2-node units, the largest multiple within 18 nodes dividing 64
    only = client.recommend_allocation(graph=load_graph(str(GB200)), schedulers="slurm", tp=8)
    assert [r.scheduler for r in only.requests] == ["slurm"] and only.requests[0].options[-1] == "--segment=18"


@pytest.mark.parametrize("build, field, needle", [
    (lambda g: wire.check_allocation_request(g, "r1t01\n" * 4 + "r9t09\n", kind="hostfile", tp=8, world_size=8),
     "launch_file.text", "hostfile line 5: host 'r9t09' is not a host of the cluster"),
    (lambda g: wire.check_allocation_request(g, "".join(f"rank {r}=r1t01 slot={r if r else 'abc'}\n" for r in range(4)),
                                             kind="rankfile", tp=4, world_size=4),
     "launch_file.text", "rankfile line 1: slot 'abc' is not an Open MPI slot"),
    (lambda g: wire.check_allocation_request(g, "r1t01\n" * 4, kind="hostfile", tp=4, world_size=8),
     "launch_file.text", "the launch file starts 4 ranks but sizes.world_size is 8"),
    (lambda g: _with(wire.check_allocation_request(g, "r1t01\n" * 4, kind="hostfile", tp=4), within=("tp", "rack")),
     "within", "unknown level 'rack'"),
    (lambda g: _with(wire.check_allocation_request(g, ["r1t01/gpu0"], tp=1), launch="x"),
     "launch_file", "give assignment or launch_file, not both"),
    (lambda g: pb.RecommendAllocationRequest(nvlink_domain_size=72, gpus_per_node=4,
                                             sizes=pb.ParallelSizes(world_size=64, tp=16),
                                             within=[pb.Constraint(traffic_class="tp", level="leaf")]),
     "within", "a request keeps groups inside an NVLink domain"),
    (lambda g: pb.RecommendAllocationRequest(nvlink_domain_size=72, sizes=pb.ParallelSizes(world_size=64, tp=8)),
     "nvlink_domain_size", "give cluster, or nvlink_domain_size and gpus_per_node"),
])
def test_bad_input_is_invalid_argument_with_the_field(channel, graph, build, field, needle):
    stub = rankmap_pb2_grpc.RankmapServiceStub(channel)
    req = build(graph)
    call = stub.Check if isinstance(req, pb.CheckRequest) else stub.RecommendAllocation
    with pytest.raises(grpc.RpcError) as err:
        call(req, timeout=60)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert needle in err.value.details()
    assert _violation(err.value).field == field


def test_infeasible_request_is_failed_precondition(channel):
    stub = rankmap_pb2_grpc.RankmapServiceStub(channel)
    req = pb.RecommendAllocationRequest(nvlink_domain_size=8, gpus_per_node=4,
                                        sizes=pb.ParallelSizes(world_size=64, tp=16))
    with pytest.raises(grpc.RpcError) as err:
        stub.RecommendAllocation(req, timeout=60)
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "more than the 8 GPUs of one NVLink domain" in err.value.details()


def _with(req, within=None, launch=None):
    if within is not None:
        req.within.add(traffic_class=within[0], level=within[1])
    if launch is not None:
        req.launch_file.kind = pb.LAUNCH_FILE_KIND_HOSTFILE
        req.launch_file.text = launch
    return req


def test_cli_check_server_prints_what_it_prints_in_process(capsys, server, tmp_path):
    from cli_helpers import run

    hf = tmp_path / "granted.hostfile"
    hf.write_text(INTERLEAVED)
    argv = ["check", GB200, "--hostfile", hf, "--world-size", "16", "--tp", "8", "--ep", "8", "--etp", "1",
            "--traffic", "tp=1e9,ep=4e9,dp=1e9", "--within", "tp=nvlink,ep=nvlink", "--no-best", "--strict"]
    code, local, err = run(capsys, *argv)
    assert code == 1, err
    code, remote, err = run(capsys, *argv, "--server", server.address)
    assert code == 1, err
    assert json.loads(remote) == json.loads(local)


def _fuzz_requests():
    from hypothesis import strategies as st

    from service_helpers import two_hosts

    cluster = wire.graph_to_proto(two_hosts())  # node1, node2: 4 GPUs each
    hosts = st.sampled_from(["node1", "node2", "node3", "", "node1 x", "rank 0=node1 slot=0", "  node2) x ;;"])
    text = st.lists(hosts, max_size=12).map(lambda xs: "\n".join(xs)) | st.text(max_size=40)
    sizes = st.builds(lambda w, tp, ep: pb.ParallelSizes(**{k: v for k, v in (("world_size", w), ("tp", tp),
                                                                                ("ep", ep)) if v is not None}),
                      st.one_of(st.none(), st.integers(-2, 20)), st.one_of(st.none(), st.integers(-1, 9)),
                      st.one_of(st.none(), st.integers(0, 4)))
    within = st.lists(st.builds(lambda c, lv: pb.Constraint(traffic_class=c, level=lv),
                                st.sampled_from(["tp", "ep", "pp", "xx", ""]),
                                st.sampled_from(["nvlink", "host", "leaf", "level:7", "rack", ""])), max_size=2)

    def check(kind, body, gpus, cvd, s, w, limit):
        req = pb.CheckRequest(sizes=s, within=w, skip_best=True)
        req.cluster.CopyFrom(cluster)
        if kind is None:
            req.assignment.extend(body.split("\n") if body else [])
        else:
            req.launch_file.kind = kind
            req.launch_file.text = body
            req.launch_file.gpus_file = gpus
            req.launch_file.cuda_visible_devices.extend(cvd)
        if limit is not None:
            req.time_limit_seconds = limit
        return "Check", req

    def recommend(d, g, s, w, leaf, tier, wait, label):
        req = pb.RecommendAllocationRequest(sizes=s, within=w, max_wait=wait, nvlink_label=label)
        for name, v in (("nvlink_domain_size", d), ("gpus_per_node", g), ("nodes_per_leaf", leaf),
                        ("volcano_nvlink_tier", tier)):
            if v is not None:
                setattr(req, name, v)
        return "RecommendAllocation", req

    small = st.one_of(st.none(), st.integers(-1, 80))
    valid = st.one_of(  # well-formed requests with random details, so that some succeed
        st.builds(check, st.just(pb.LAUNCH_FILE_KIND_HOSTFILE), st.just("node1\n" * 4 + "node2\n" * 4),
                  st.sampled_from(["", "node1 3,2,1,0\nnode2 0,1,2,3"]), st.just([]),
                  st.sampled_from([pb.ParallelSizes(tp=4), pb.ParallelSizes(world_size=8, tp=2)]), within,
                  st.none()),
        st.builds(recommend, st.sampled_from([8, 16, 72]), st.just(4), st.builds(
            lambda w, tp: pb.ParallelSizes(world_size=w, tp=tp), st.sampled_from([16, 64, 256]),
            st.sampled_from([1, 2, 4, 8])), st.just([]), small, st.one_of(st.none(), st.integers(1, 3)),
            st.just(""), st.just("")),
    )
    return st.one_of(
        valid,
        st.builds(check, st.one_of(st.none(), st.integers(0, 5)), text, st.sampled_from(["", "node1 3,2,1,0", "x"]),
                  st.lists(st.integers(-1, 5), max_size=4), sizes, within,
                  st.one_of(st.none(), st.sampled_from([float("nan"), -1.0, 0.5]))),
        st.builds(recommend, small, small, sizes, within, small, small, st.sampled_from(["", "1:00:00", "soon"]),
                  st.sampled_from(["", "nvidia.com/gpu.clique", "bad label!"])),
        st.tuples(st.sampled_from(["Check", "RecommendAllocation"]), st.binary(max_size=48)),
    )


def test_fuzzed_check_and_recommend_get_only_client_error_codes(channel):
    from hypothesis import HealthCheck, given, settings

    from service_helpers import LogLines, raw_call

    allowed = {grpc.StatusCode.OK, grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.FAILED_PRECONDITION}
    seen: dict[str, int] = {}

    @settings(max_examples=150, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))
    @given(_fuzz_requests())
    def one(call):
        method, request = call
        code, details, _ = raw_call(channel, method, request, timeout=30)
        seen[code.name] = seen.get(code.name, 0) + 1
        assert code in allowed, (method, code, details[:300], request)

    with LogLines() as logs:
        one()
    assert "INTERNAL" not in {e.get("code") for e in logs.entries()}
    assert seen.get("OK", 0) > 0 and seen.get("INVALID_ARGUMENT", 0) > 0, seen
