"""Issue 26.1 and 26.4 through a real server: the ``Repair`` and ``Compare`` RPCs and the client methods.

The cluster, job and hand-derived times are those of ``tests/test_repair.py`` (its module doc):
6 hosts x 4 GPUs, leaves of 2 hosts under a 4:1 root; tp 4 pp 2 dp 2, 8 GB of pipeline traffic per
rank; a pipeline flow alone on a 48 GB/s NIC takes 1/6 s, four through a 96 GB/s leaf uplink 1/3 s.
"""

from __future__ import annotations

import grpc
import pytest
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from rankmap import wire
from rankmap.solver import InvalidArgumentError, SolveOptions, parallel_config
from rankmap.solver.fabric.rates import NcclModel
from service_helpers import live_server, raw_call
from cli_helpers import run
from test_repair import ALLOC_A, ALLOC_B, PP_ALONE, PP_UPLINK, RUNNING, _graph, files  # noqa: F401 (fixture)

server = live_server(workers=2, max_queued=8)

CFG = parallel_config(16, tp=4, pp=2)
TRAFFIC = {"pp": 8e9}


def _options(seconds: float = 10.0) -> SolveOptions:
    return SolveOptions(nccl=NcclModel(latency=False), time_limit_seconds=seconds)


def test_repair_rpc_matches_in_process(client):
    from rankmap.solver.job.repair import repair

    res = client.repair(_graph(), CFG, TRAFFIC, RUNNING, failed_hosts=["node001"], options=_options())
    local = repair(_graph(), CFG, TRAFFIC, RUNNING, failed_hosts=["node001"], options=_options())
    assert [o.kind for o in res.options] == ["patch", "pinned", "full"]
    assert res.recommended == "pinned" and res.spare_hosts == ("node004", "node005")
    patch, pinned = res.option("patch"), res.option("pinned")
    # patch: only ranks 8-11 (node001's) moved, to node004's GPUs of the same local index
    assert patch.assignment == tuple(RUNNING[:8] + [f"node004/gpu{i}" for i in range(4)] + RUNNING[12:])
    assert patch.ranks_moved == 4 and patch.cost.total_seconds == pytest.approx(PP_UPLINK, rel=1e-9)
    assert pinned.ranks_moved == 8 and pinned.cost.total_seconds == pytest.approx(PP_ALONE, rel=1e-9)
    assert (pinned.hosts_removed, pinned.hosts_added) == (("node000", "node001"), ("node004", "node005"))
    assert res.option("full").cost.total_seconds == pytest.approx(PP_ALONE, rel=1e-9)
    # the same patch and pinned answers, costs and launch files as in process (deterministic budgets)
    for kind in ("patch", "pinned"):
        a, b = res.option(kind), local.option(kind)
        assert (a.assignment, a.ranks_moved, a.order, a.hosts) == (b.assignment, b.ranks_moved, b.order, b.hosts)
        assert a.cost.to_dict() == b.cost.to_dict()
        assert a.apply["slurm"] == b.apply["slurm"] and a.apply["hostfile"] == b.apply["hostfile"]


def test_repair_rpc_spares_and_max_moves(client):
    res = client.repair(_graph(), CFG, TRAFFIC, RUNNING, failed_gpus=["node001/gpu0"], spare_hosts=["node005"],
                        max_moves=0, options=_options(2.0))
    patch = res.option("patch")
    assert res.failed_hosts == ("node001",) and res.spare_hosts == ("node005",)
    assert patch.assignment[8:12] == tuple(f"node005/gpu{i}" for i in range(4))
    # no surviving rank may move: pinned is the patch (one spare, nowhere else to go)
    assert res.option("pinned").assignment == patch.assignment


def test_compare_rpc(client):
    res = client.compare(_graph(), CFG, TRAFFIC, [ALLOC_B, ALLOC_A], _options())
    first, second = res.allocations
    assert (first.rank, first.index, first.allocation.hosts) == (1, 1, ("node000", "node001", "node002", "node003"))
    assert first.result.cost.total_seconds == pytest.approx(PP_ALONE, rel=1e-9) and first.difference is None
    assert (second.rank, second.index) == (2, 0)
    assert second.result.cost.total_seconds == pytest.approx(PP_UPLINK, rel=1e-9)
    d = second.difference
    assert d["class"] == "pp" and d["seconds"] == pytest.approx(PP_UPLINK - PP_ALONE, rel=1e-9)
    assert "switch:root" in d["link"]
    # without a world size: each allocation's GPUs (16)
    from rankmap.solver import ParallelSizes

    res2 = client.compare(_graph(), None, TRAFFIC, [ALLOC_A, ALLOC_B], _options(), sizes=ParallelSizes(tp=4, pp=2))
    assert res2.world_size == 16 and [a.index for a in res2.allocations] == [0, 1]


def test_async_client_repair_and_compare(server):
    import asyncio

    from rankmap.client import AsyncRankmapClient

    async def main():
        async with AsyncRankmapClient(server.address, timeout=60) as c:
            return (await c.repair(_graph(), CFG, TRAFFIC, RUNNING, failed_hosts=["node001"], options=_options()),
                    await c.compare(_graph(), CFG, TRAFFIC, [ALLOC_B, ALLOC_A], _options(4.0)))

    res, cmp = asyncio.run(main())
    assert res.option("patch").ranks_moved == 4 and res.recommended == "pinned"
    assert [a.index for a in cmp.allocations] == [1, 0]


@pytest.mark.parametrize("kwargs, path, needle", [
    ({"failed_hosts": ["node999"]}, "failed_hosts", "failed host 'node999' is not a host of the cluster"),
    ({"failed_hosts": ["node001"], "spare_hosts": ["node002"]}, "spare_hosts.hosts", "already runs ranks"),
    ({"failed_hosts": ["node001"], "failed_gpus": ["x/gpu0"]}, "failed_gpus", "failed GPU 'x/gpu0'"),
    ({"failed_hosts": ["node000", "node001", "node002"]}, "spare_hosts.hosts", "have 12: 4 missing"),
])
def test_repair_rpc_bad_input(client, kwargs, path, needle):
    with pytest.raises(InvalidArgumentError) as exc:
        client.repair(_graph(), CFG, TRAFFIC, RUNNING, options=_options(1.0), **kwargs)
    assert needle in exc.value.message
    assert exc.value.proto_field == path


def _violation(err):
    status = rpc_status.from_call(err)
    br = error_details_pb2.BadRequest()
    for d in status.details:
        if d.Is(error_details_pb2.BadRequest.DESCRIPTOR):
            d.Unpack(br)
    return br.field_violations[0]


def test_repair_rpc_running_layout_not_of_cluster(channel):
    req = wire.repair_request(_graph(), CFG, TRAFFIC, RUNNING[:15] + ["rack9/gpu0"], failed_hosts=["node001"],
                              options=_options(1.0))
    code, details, err = raw_call(channel, "Repair", req)
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    v = _violation(err)
    assert v.field == "running_assignment[15]"
    assert "running layout rank 15 is on 'rack9/gpu0', which is not a GPU of the cluster" in v.description
    # a running layout shorter than the world size
    req = wire.repair_request(_graph(), CFG, TRAFFIC, RUNNING[:12], failed_hosts=["node001"], options=_options(1.0))
    code, details, err = raw_call(channel, "Repair", req)
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert _violation(err).field == "running_assignment" and "has 12 ranks but world_size is 16" in details
    # a bad job value keeps its Solve path under job.
    req = wire.repair_request(_graph(), CFG, TRAFFIC, RUNNING, failed_hosts=["node001"], options=_options(1.0))
    req.job.sizes.tp = 3
    code, details, err = raw_call(channel, "Repair", req)
    assert code == grpc.StatusCode.INVALID_ARGUMENT and _violation(err).field == "job.sizes.world_size"
    assert "tp" in details


def test_compare_rpc_bad_input(channel, client):
    req = wire.compare_request(_graph(), CFG, TRAFFIC, [ALLOC_A, "node[000-002],nodeQ"], _options(1.0))
    code, details, err = raw_call(channel, "Compare", req)
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    v = _violation(err)
    assert v.field == "allocations[1]" and "'nodeQ' is not a host of the cluster" in v.description
    with pytest.raises(InvalidArgumentError) as exc:
        client.compare(_graph(), CFG, TRAFFIC, [ALLOC_A, "node[000-002]"], _options(1.0))
    assert exc.value.proto_field == "allocations[1]" and "12 GPUs; the job needs 16: 4 missing" in exc.value.message


def test_cli_server_flag(capsys, files, server):  # noqa: F811 (the imported fixture)
    """``rankmap repair/compare --server``: the same patch and pinned answers, and the same ranking."""
    import json

    cluster, running = files
    argv = ["repair", cluster, "--running", running, "--failed", "node001", "--time-limit", 10]
    code, out, err = run(capsys, *argv, "--server", server.address)
    assert code == 0, err
    remote = {o["kind"]: o for o in json.loads(out)["options"]}
    code, out, err = run(capsys, *argv)
    local = {o["kind"]: o for o in json.loads(out)["options"]}
    for kind in ("patch", "pinned"):
        assert remote[kind]["assignment"] == local[kind]["assignment"]
        assert remote[kind]["cost"] == local[kind]["cost"] and remote[kind]["apply"] == local[kind]["apply"]
    assert remote["patch"]["cost"]["total_seconds"] == pytest.approx(PP_UPLINK, rel=1e-9)
    code, out, err = run(capsys, "compare", cluster, "--allocation", ALLOC_B, "--allocation", ALLOC_A, "--tp", 4,
                         "--pp", 2, "--traffic", "pp=8e9", "--no-nccl-latency", "--time-limit", 2, "--server",
                         server.address)
    assert code == 0, err
    doc = json.loads(out)
    assert [a["index"] for a in doc["allocations"]] == [1, 0] and doc["allocations"][1]["difference"]["class"] == "pp"
    # bad input is refused on the server with the CLI's one line
    code, out, err = run(capsys, *argv[:-2], "--failed", "node999", "--server", server.address)
    assert code == 2 and out == "" and "failed host 'node999' is not a host of the cluster" in err


# --------------------------------------------------------------------------- fuzz

def test_fuzzed_repair_and_compare_get_only_client_error_codes(channel):
    """A bounded, derandomized fuzz of Repair and Compare (the job from tests/test_service_fuzz.py's
    strategies, plus drawn running layouts, failures, spares, move caps and allocations): never
    INTERNAL or UNKNOWN, and the server answers a real Repair afterwards."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    from service_helpers import pb
    from test_service_fuzz import ALLOWED, NAMES, solve_request

    hosts = st.one_of(st.sampled_from(["node1", "node2", "node3", "node[1-2]", "node[2-1]", "node1,node1", ""]),
                      NAMES)

    @st.composite
    def repair_request(draw):
        req = pb.RepairRequest()
        req.job.CopyFrom(draw(solve_request()))
        req.running_order = draw(st.sampled_from(["", "tp-cp-ep-dp-pp", "pp-dp-tp", "tp-tp-dp-pp", "x"]))
        if draw(st.booleans()):  # a plausible layout of the drawn cluster
            req.running_assignment.extend(draw(st.permutations([f"node{h}/gpu{i}" for h in (1, 2) for i in range(2)])))
        else:
            req.running_assignment.extend(draw(st.lists(NAMES, max_size=6)))
        req.failed_hosts.extend(draw(st.lists(hosts, max_size=2)))
        req.failed_gpus.extend(draw(st.lists(NAMES, max_size=2)))
        if draw(st.booleans()):
            req.spare_hosts.hosts.extend(draw(st.lists(hosts, max_size=2)))
        if draw(st.booleans()):
            req.max_moves = draw(st.integers(-2**63, 2**63 - 1))
        return req

    @st.composite
    def compare_request(draw):
        req = pb.CompareRequest()
        req.job.CopyFrom(draw(solve_request()))
        req.allocations.extend(draw(st.lists(hosts, max_size=4)))
        return req

    calls = st.one_of(st.tuples(st.just("Repair"), repair_request()),
                      st.tuples(st.just("Compare"), compare_request()),
                      st.tuples(st.sampled_from(["Repair", "Compare"]), st.binary(max_size=64)))
    seen: dict[str, int] = {}

    @settings(max_examples=80, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))
    @given(calls)
    def one(call):
        method, request = call
        code, details, _ = raw_call(channel, method, request, timeout=5.0)
        seen[code.name] = seen.get(code.name, 0) + 1
        assert code in ALLOWED, (method, code, details[:300])

    one()
    print("fuzz codes", seen)
    assert seen.get("INVALID_ARGUMENT", 0) > 0
    req = wire.repair_request(_graph(), CFG, TRAFFIC, RUNNING, failed_hosts=["node001"], options=_options(1.0))
    code, details, _ = raw_call(channel, "Repair", req, timeout=60)
    assert code == grpc.StatusCode.OK, details


@pytest.mark.parametrize("method", ["Repair", "Compare", "Check"])
def test_short_deadlines_answer_or_refuse_cleanly(channel, server, method):
    """The same deadline budget as Solve (issue 28): with a 30 s limit and a short deadline the call answers
    (stopped by the deadline) or ends DEADLINE_EXCEEDED, never INTERNAL, and the worker is free after."""
    if method == "Repair":
        req = wire.repair_request(_graph(), CFG, TRAFFIC, RUNNING, failed_hosts=["node001"], options=_options(30.0))
    elif method == "Compare":
        req = wire.compare_request(_graph(), CFG, TRAFFIC, [ALLOC_A, ALLOC_B], _options(30.0))
    else:
        from rankmap.wire.allocation import check_allocation_request_from_job

        req = check_allocation_request_from_job(_graph(), CFG, RUNNING, TRAFFIC, time_limit_seconds=30.0)
    for timeout in (0.01, 0.5, 2.0):
        code, details, got = raw_call(channel, method, req, timeout=timeout)
        assert code in (grpc.StatusCode.OK, grpc.StatusCode.DEADLINE_EXCEEDED), (timeout, code, details)
    assert code == grpc.StatusCode.OK  # 2 s: the answer within the deadline (the work stops at its budget)
    assert server.servicer.wait_idle(30)
