"""Issue 11: a bounded fuzz of the live service (hypothesis over the proto messages).

A few hundred requests (Solve, Evaluate, GetGroups, BatchSolve and raw bytes),
derandomized so CI sees the same ones every run, each with a short deadline:
the only acceptable answers are OK, INVALID_ARGUMENT, FAILED_PRECONDITION,
RESOURCE_EXHAUSTED and DEADLINE_EXCEEDED (never INTERNAL, UNKNOWN or a
metadata-size failure), every BatchSolve item's error likewise, and the server
is healthy and still solves afterwards.
"""

from __future__ import annotations

import math

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rankmap import wire
from rankmap.server.service import serve
from service_helpers import LogLines, pb, raw_call, two_hosts

ALLOWED = {
    grpc.StatusCode.OK,
    grpc.StatusCode.INVALID_ARGUMENT,
    grpc.StatusCode.FAILED_PRECONDITION,
    grpc.StatusCode.RESOURCE_EXHAUSTED,
    grpc.StatusCode.DEADLINE_EXCEEDED,
}
ALLOWED_ITEM = {c.value[0] for c in ALLOWED}
EXAMPLES = 300
DEADLINE = 5.0

CLASSES = ["tp", "cp", "ep", "etp", "dp", "edp", "pp", "embedding"]
NAMES = st.one_of(
    st.sampled_from(["node1/gpu0", "node1/gpu1", "node2/gpu0", "leaf", "node1/nvswitch", "", "x"]),
    st.text(max_size=12),
    st.just("n" * 6000),
)
SIZE = st.one_of(
    st.sampled_from([0, 1, 2, 3, 4, 8, 16]),
    st.integers(min_value=0, max_value=2**31 - 1),
    st.sampled_from([262_144, 262_145, 4_194_304]),
)
FLOAT = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0.0, -1.0, 1e-300, 5e-324, 1e308, 4e9, 0.5]),
)


@st.composite
def sizes(draw, target):
    for name in ("world_size", "tp", "cp", "ep", "etp", "pp", "num_distributed_optimizer_instances"):
        if draw(st.booleans()):
            value = draw(SIZE)
            if name == "world_size" and draw(st.booleans()):
                value = draw(st.sampled_from([8, 16, 64, 1024]))
            setattr(target, name, value)
    if draw(st.integers(0, 9)) == 0:
        target.hierarchical_context_parallel_sizes.extend(draw(st.lists(st.integers(0, 4), max_size=70)))


def nccl_attributes(draw, target):
    """What the NCCL model reads off a cluster (issue 25): GPU generation, link kinds and ports, NICs."""
    target.gpu = draw(st.one_of(st.sampled_from(["h100", "a100", "gb200", "v100", ""]), st.text(max_size=6)))
    if target.links:
        link = target.links[draw(st.integers(0, len(target.links) - 1))]
        link.kind = draw(st.one_of(st.sampled_from(["nvlink", "net", "fabric", "pcie", "nvlink+pcie", ""]),
                                   st.text(max_size=6)))
        if draw(st.booleans()):
            link.nvlinks = draw(FLOAT)
        if draw(st.booleans()):
            link.ports = draw(FLOAT)
    if draw(st.booleans()):
        node = target.nodes.add(id=draw(NAMES), kind="nic")
        if draw(st.booleans()):
            node.host = draw(NAMES)
        if draw(st.booleans()):
            node.nic_index = draw(st.integers(-(2**31), 2**31 - 1))


def nccl_options(draw, target):
    """``NcclOptions``: any enum number, any rate keys and values."""
    target.algorithm = draw(st.one_of(st.integers(0, 4), st.integers(-3, 9)))
    target.disable_pxn = draw(st.booleans())
    target.disable_latency = draw(st.booleans())
    for _ in range(draw(st.integers(0, 2))):
        target.rates_gbps[draw(st.one_of(st.sampled_from(["nic", "nvlink", "NIC"]), st.text(max_size=5)))] = draw(FLOAT)


@st.composite
def cluster(draw, target):
    if draw(st.booleans()):
        target.CopyFrom(wire.graph_to_proto(two_hosts(draw(st.sampled_from([1, 2, 4])))))
        # mutate a little
        for _ in range(draw(st.integers(0, 2))):
            choice = draw(st.integers(0, 4))
            if choice == 0 and target.links:
                target.links[draw(st.integers(0, len(target.links) - 1))].bandwidth_gbps = draw(FLOAT)
            elif choice == 1 and target.devices:
                target.devices[draw(st.integers(0, len(target.devices) - 1))].local_index = draw(
                    st.integers(-(2**31), 2**31 - 1))
            elif choice == 2:
                target.nodes.add(id=draw(NAMES), kind=draw(st.sampled_from(["", "gpu", "switch", "nic"])))
            elif choice == 4:
                nccl_attributes(draw, target)
            else:
                target.links.add(source=draw(NAMES), target=draw(NAMES), latency_us=draw(FLOAT))
        return
    for _ in range(draw(st.integers(0, 6))):
        d = target.devices.add(id=draw(NAMES))
        if draw(st.booleans()):
            d.host = draw(NAMES)
        if draw(st.booleans()):
            d.local_index = draw(st.integers(-(2**31), 2**31 - 1))
    for _ in range(draw(st.integers(0, 3))):
        target.nodes.add(id=draw(NAMES), kind=draw(st.sampled_from(["", "gpu", "switch", "nvswitch"])))
    for _ in range(draw(st.integers(0, 8))):
        link = target.links.add(source=draw(NAMES), target=draw(NAMES))
        if draw(st.booleans()):
            link.bandwidth_gbps = draw(FLOAT)


VALUES = st.recursive(
    st.one_of(
        st.builds(lambda v: pb.Value(int_value=v), st.integers(-(2**63), 2**63 - 1)),
        st.builds(lambda v: pb.Value(double_value=v), FLOAT),
        st.builds(lambda v: pb.Value(string_value=v), st.text(max_size=8)),
        st.builds(lambda v: pb.Value(bool_value=v), st.booleans()),
        st.just(pb.Value(null_value=True)),
    ),
    lambda inner: st.builds(lambda vs: pb.Value(list_value=pb.ValueList(values=vs)), st.lists(inner, max_size=3)),
    max_leaves=6,
)


@st.composite
def traffic(draw, target):
    for _ in range(draw(st.integers(0, 3))):
        target.bytes[draw(st.one_of(st.sampled_from(CLASSES), st.text(max_size=6)))] = draw(FLOAT)
    if draw(st.booleans()):
        target.model.preset = draw(st.one_of(st.sampled_from(["", "llama3-8b", "mixtral-8x7b", "gpt3-175b"]),
                                             st.text(max_size=8)))
        for _ in range(draw(st.integers(0, 2))):
            key = draw(st.one_of(st.sampled_from(["num_layers", "hidden_size", "seq_length", "num_experts",
                                                   "micro_batch_size", "vocab_size"]), st.text(max_size=6)))
            target.model.overrides[key].CopyFrom(draw(VALUES))


def job_fields(draw, req):
    """``req`` (a SolveRequest or EvaluateRequest) with the fields both carry drawn: cluster, sizes, maybe traffic."""
    draw(cluster(req.cluster))
    draw(sizes(req.sizes))
    if draw(st.booleans()):
        draw(traffic(req.traffic))
    if draw(st.integers(0, 3)) == 0:
        nccl_options(draw, req.nccl)
    return req


@st.composite
def solve_request(draw):
    req = job_fields(draw, pb.SolveRequest())
    req.mode = draw(st.integers(-1, 5))
    req.orders.policy = draw(st.integers(-1, 8))
    if draw(st.booleans()):
        req.orders.orders.extend(draw(st.lists(st.one_of(
            st.sampled_from(["tp-cp-ep-dp-pp", "tp-cp-ep-pp-dp", "pp-tp-dp", "tp-tp-dp-pp", ""]),
            st.text(max_size=10), st.just("tp-" * 2000 + "pp")), max_size=3)))
    for _ in range(draw(st.integers(0, 2))):
        req.constraints.add(traffic_class=draw(st.text(max_size=5)), level=draw(st.text(max_size=6)))
    req.exclude_devices.extend(draw(st.lists(NAMES, max_size=2)))
    req.exclude_hosts.extend(draw(st.lists(NAMES, max_size=2)))
    if draw(st.booleans()):
        t = draw(FLOAT)
        req.time_limit_seconds = min(t, 0.5) if (isinstance(t, float) and math.isfinite(t) and t > 0) else t
    else:
        req.time_limit_seconds = 0.5
    req.seed = draw(st.integers(0, 2**63 - 1))
    for _ in range(draw(st.integers(0, 2))):
        req.exposure[draw(st.one_of(st.sampled_from(CLASSES), st.text(max_size=4)))] = draw(FLOAT)
    req.omit_groups = draw(st.booleans())
    return req


@st.composite
def evaluate_request(draw):
    req = job_fields(draw, pb.EvaluateRequest())
    req.order = draw(st.one_of(st.sampled_from(["", "tp-cp-ep-dp-pp", "pp-dp-tp"]), st.text(max_size=12)))
    req.assignment.extend(draw(st.lists(NAMES, max_size=10)))
    return req


@st.composite
def get_groups_request(draw):
    req = pb.GetGroupsRequest()
    draw(sizes(req.sizes))
    req.order = draw(st.one_of(st.sampled_from(["", "tp-cp-ep-dp-pp", "tp-pp-dp", "TP-DP"]), st.text(max_size=12)))
    return req


CALLS = st.one_of(
    st.tuples(st.just("Solve"), solve_request()),
    st.tuples(st.just("Evaluate"), evaluate_request()),
    st.tuples(st.just("GetGroups"), get_groups_request()),
    st.tuples(st.just("BatchSolve"), st.lists(solve_request(), max_size=3).map(
        lambda rs: pb.BatchSolveRequest(requests=rs))),
    st.tuples(st.sampled_from(["Solve", "Evaluate", "GetGroups", "BatchSolve"]), st.binary(max_size=64)),
)


@pytest.fixture(scope="module")
def live():
    srv = serve(host="127.0.0.1", port=0, workers=2, max_queued=8)
    channel = grpc.insecure_channel(srv.address)
    yield srv, channel
    channel.close()
    srv.stop(grace=None).wait(10)


def test_fuzzed_requests_get_only_client_error_codes(live):
    srv, channel = live
    seen: dict[str, int] = {}

    @settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))
    @given(CALLS)
    def one(call):
        method, request = call
        code, details, out = raw_call(channel, method, request, timeout=DEADLINE)
        seen[code.name] = seen.get(code.name, 0) + 1
        assert code in ALLOWED, (method, code, details[:300], request if isinstance(request, bytes) else None)
        if method == "BatchSolve" and code == grpc.StatusCode.OK:
            for raw in out:
                resp = pb.BatchSolveResponse.FromString(raw)
                if resp.WhichOneof("outcome") == "error":
                    assert resp.error.code in ALLOWED_ITEM, resp.error

    with LogLines() as logs:
        one()
    print("fuzz codes", seen)
    assert sum(seen.values()) >= EXAMPLES
    assert "INTERNAL" not in {e.get("code") for e in logs.entries()}
    assert seen.get("OK", 0) > 0 and seen.get("INVALID_ARGUMENT", 0) > 0
    # healthy afterwards: health, and a real solve
    health = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=10)
    assert health.status == health_pb2.HealthCheckResponse.SERVING
    assert srv.servicer.wait_idle(60)
    code, details, _ = raw_call(channel, "Solve", wire.solve_request(two_hosts(), tp=2), timeout=60)
    assert code == grpc.StatusCode.OK, details
