"""The gRPC service end to end, and the proto conversion on its own.

A real server (``rankmap.server.service.serve``) is started on a free loopback
port and driven through the Python client (and, where the wire matters, the
raw stub): results must equal the in-process solve field for field, errors
must carry the CLI's message and the request field, deadlines must stop the
solve without hurting the server.
"""

from __future__ import annotations

import asyncio
import dataclasses
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
import networkx as nx
import numpy as np
import pytest
from google.rpc import error_details_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc
from grpc_status import rpc_status

from rankmap.client import AsyncRankmapClient, RankmapClient, RankmapRpcError
from rankmap import wire
from rankmap.server.service import SERVICE_NAME, serve
from service_helpers import wait_until
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
from rankmap.solver.traffic import TRAFFIC_CLASSES, model_preset, traffic_from_model
from rankmap.solver.types import Bottleneck, ClassCost, CostBreakdown
from rankmap.v1 import rankmap_pb2 as pb
from rankmap.v1 import rankmap_pb2_grpc

TRAFFIC = {"tp": 4e9, "cp": 0.0, "ep": 0.0, "etp": 0.0, "dp": 1e9, "edp": 0.0, "pp": 1e8, "embedding": 0.0}


def make_cluster(hosts: int = 2, gpus: int = 4, int_ids: bool = False) -> nx.Graph:
    """hosts x gpus GPUs behind an NVSwitch per host, leaves of 4 hosts, one spine."""
    g = nx.Graph()
    gid = 0
    for h in range(hosts):
        ids = []
        for i in range(gpus):
            node = gid if int_ids else f"h{h}g{i}"
            gid += 1
            ids.append(node)
            g.add_node(node, host=f"h{h}", local_index=i)
        sw = f"h{h}-nvs"
        g.add_node(sw, kind="nvswitch")
        for node in ids:
            g.add_edge(node, sw, bandwidth=450.0)
        leaf = f"leaf{h // 4}"
        g.add_node(leaf, kind="leaf")
        g.add_edge(sw, leaf, bandwidth=50.0, latency_us=2.0)
        g.add_node("spine", kind="spine")
        g.add_edge(leaf, "spine", bandwidth=25.0)
    return g


def comparable(result) -> str:
    d = result.to_dict()
    d.pop("solve_seconds")
    return json.dumps(d, sort_keys=True)


def assert_same_result(remote, local):
    assert comparable(remote) == comparable(local)
    assert remote.config == local.config
    assert remote.layout == local.layout
    assert remote.baseline == local.baseline
    assert remote.hosts == local.hosts
    assert remote.status == local.status
    assert remote.bound_seconds == local.bound_seconds
    assert remote.mode == local.mode
    assert remote.orders_searched == local.orders_searched
    assert dict(remote.traffic) == dict(local.traffic)
    assert list(remote.traffic) == list(local.traffic)
    assert list(remote.groups) == list(local.groups)
    for name in local.groups:
        assert np.array_equal(remote.groups[name], local.groups[name]), name
    assert json.loads(json.dumps(remote.apply)) == json.loads(json.dumps(local.apply))
    assert list(remote.apply) == list(local.apply)
    assert remote.solve_seconds > 0


def assert_exposed(cost, exposure):
    """total = Σ x_c·T_c, T_c = by_class = classes[c].seconds, x_c as asked (1 where not named)."""
    assert set(cost.classes) == set(cost.by_class)
    for c, cc in cost.classes.items():
        assert cc.seconds == cost.by_class[c], c
        assert cc.exposure == exposure.get(c, 1.0), c
    assert cost.total_seconds == pytest.approx(
        sum(cc.exposure * cost.by_class[c] for c, cc in cost.classes.items()), rel=1e-12, abs=1e-15
    )


def sample_cost() -> CostBreakdown:
    """A cost with every field set (no solver needed)."""
    link = Bottleneck("link", ("leaf0", "spine"), 72e9, 400.0, 1.0, 32, 2.25e9, 50.0)
    flow = Bottleneck("per-flow", ("h0g0", "h0-nvs"), 1e9, 450.0, 0.25, 1, 4e9, 450.0)
    classes = {
        "tp": ClassCost(0.0089, 0.5, 3e9, 4e9, 1e-5, flow),
        "cp": ClassCost(0.0),
        "dp": ClassCost(0.18, 0.2, 1.75e9, 1e9, 2e-6, link),
        "pp": ClassCost(0.0, 1.0, 0.0, 0.0, 0.0, Bottleneck()),
    }
    by_class = {c: cc.seconds for c, cc in classes.items()}
    return CostBreakdown(sum(cc.exposure * cc.seconds for cc in classes.values()), by_class, classes)


# --------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def server():
    srv = serve(host="127.0.0.1", port=0, workers=2, max_queued=8)
    yield srv
    srv.stop(grace=None).wait(10)


@pytest.fixture(scope="module")
def client(server):
    with RankmapClient(server.address, timeout=60) as c:
        yield c


@pytest.fixture(scope="module")
def channel(server):
    ch = grpc.insecure_channel(server.address)
    yield ch
    ch.close()


def wait_idle(servicer, timeout=15.0):
    t = time.monotonic() + timeout
    while time.monotonic() < t:
        if servicer._pending == 0:
            return True
        time.sleep(0.05)
    return False


# --------------------------------------------------------------------------- conversion, no server


class TestConvert:
    def test_graph_round_trip(self):
        g = make_cluster(2, 4)
        g.nodes["h1g3"].pop("local_index")
        g.add_node("lonely", kind="gpu")  # no host: a host of its own
        g.add_edge("lonely", "spine", bandwidth=10.0)
        back = wire.graph_from_proto(wire.graph_to_proto(g))
        assert list(back.nodes) == [n for n in g.nodes if g.nodes[n].get("kind", "gpu") == "gpu"] + [
            n for n in g.nodes if g.nodes[n].get("kind", "gpu") != "gpu"
        ]
        for n, data in g.nodes(data=True):
            got = back.nodes[n]
            assert got.get("kind", "gpu") == data.get("kind", "gpu")
            assert got.get("host") == data.get("host")
            assert got.get("local_index") == data.get("local_index")
        assert {frozenset(e) for e in back.edges} == {frozenset(e) for e in g.edges}
        for u, v, data in g.edges(data=True):
            assert back.edges[u, v]["bandwidth"] == data["bandwidth"]
            assert back.edges[u, v].get("latency_us") == data.get("latency_us")
        # the solver sees the same cluster
        from rankmap.solver import cluster_from_graph

        a, b = cluster_from_graph(g), cluster_from_graph(back)
        assert a.devices == b.devices and a.hosts == b.hosts
        assert np.array_equal(a.domains, b.domains) and np.array_equal(a.levels_gbps, b.levels_gbps)

    def test_graph_int_ids_become_strings(self):
        g = make_cluster(1, 2, int_ids=True)
        c = wire.graph_to_proto(g)
        assert [d.id for d in c.devices] == ["0", "1"]

    @pytest.mark.parametrize(
        "mutate, path, argument",
        [
            (lambda c: setattr(c.links[1], "bandwidth_gbps", -1.0), "cluster.links[1].bandwidth_gbps", "cluster.edges"),
            (lambda c: c.links[2].ClearField("bandwidth_gbps"), "cluster.links[2].bandwidth_gbps", "cluster.edges"),
            (lambda c: setattr(c.links[0], "target", "nope"), "cluster.links[0].target", "cluster.edges"),
            (lambda c: setattr(c.links[0], "latency_us", float("nan")), "cluster.links[0].latency_us", "cluster.edges"),
            (lambda c: setattr(c.devices[3], "id", "h0g0"), "cluster.devices[3].id", "cluster.nodes"),
            (lambda c: setattr(c.nodes[0], "kind", "gpu"), "cluster.nodes[0].kind", "cluster.nodes"),
        ],
    )
    def test_graph_errors_name_the_proto_field(self, mutate, path, argument):
        c = wire.graph_to_proto(make_cluster(2, 4))
        mutate(c)
        with pytest.raises(InvalidArgumentError) as err:
            wire.graph_from_proto(c)
        assert wire.error_fields(err.value) == (path, argument)

    def test_bandwidth_message_is_the_solvers(self):
        from rankmap.solver import cluster_from_graph

        g = make_cluster(1, 2)
        g.edges["h0g0", "h0-nvs"]["bandwidth"] = 0.0
        with pytest.raises(InvalidArgumentError) as local:
            cluster_from_graph(g)
        with pytest.raises(InvalidArgumentError) as remote:
            wire.graph_from_proto(wire.graph_to_proto(g))
        assert remote.value.message == local.value.message

    def test_sizes_and_config(self):
        sizes = wire.sizes_to_proto(tp=2, pp=2, ep=2, etp=1, num_distributed_optimizer_instances=2)
        cfg = wire.config_from_proto(sizes, "tp-cp-ep-dp-pp", default_world_size=16)
        assert cfg == parallel_config(16, tp=2, pp=2, ep=2, etp=1, num_distributed_optimizer_instances=2)
        assert wire.config_from_resolved(wire.config_to_proto(cfg)) == cfg
        hcp = parallel_config(16, cp=4, hierarchical_context_parallel_sizes=[2, 2])
        assert wire.config_from_resolved(wire.config_to_proto(hcp)) == hcp

    def test_size_errors_map_to_sizes_path(self):
        with pytest.raises(InvalidArgumentError) as err:
            wire.config_from_proto(pb.ParallelSizes(tp=0), default_world_size=8)
        assert err.value.field == "tp"
        assert wire.error_fields(err.value) == ("sizes.tp", "tp")
        with pytest.raises(InvalidArgumentError) as err:
            wire.config_from_proto(pb.ParallelSizes(tp=3), default_world_size=8)
        assert wire.error_fields(err.value) == ("sizes.world_size", "world_size")
        assert wire.proto_field("order", "Solve") == "orders.orders"
        assert wire.proto_field("order", "Evaluate") == "order"
        assert wire.proto_field("traffic.tp") == "traffic.bytes[tp]"
        assert wire.proto_field("model.seq_length") == "traffic.model.overrides[seq_length]"

    def test_values_keep_ints_floats_and_order(self):
        v = {"b": 1, "a": [1.5, True, None, "x", {"z": 2**40}], "c": (1, 2)}
        back = wire.value_from_proto(wire.value_to_proto(v))
        assert back == {"b": 1, "a": [1.5, True, None, "x", {"z": 2**40}], "c": [1, 2]}
        assert list(back) == ["b", "a", "c"]
        assert isinstance(back["b"], int) and isinstance(back["a"][0], float) and back["a"][1] is True

    def test_traffic_semantics_match_the_cli(self):
        cfg = parallel_config(8, tp=2, pp=2)
        # explicit only: exactly those classes (solve counts the others as 0), report order
        t = wire.traffic_from_proto(wire.traffic_to_proto({"dp": 1e9, "tp": "4GB"}), cfg)
        assert t == {"tp": 4e9, "dp": 1e9} and list(t) == ["tp", "dp"]
        t = wire.traffic_from_proto(wire.traffic_to_proto({}), cfg)
        assert sum(t.values()) == 0.0
        # a model with overrides, explicit classes on top
        msg = wire.traffic_to_proto({"pp": 5.0}, {"preset": "llama3-8b", "seq_length": 4096})
        t = wire.traffic_from_proto(msg, cfg)
        expect = traffic_from_model(model_preset("llama3-8b", seq_length=4096), cfg)
        expect["pp"] = 5.0
        assert t == expect
        # neither: the default model
        from rankmap.solver.traffic import DEFAULT_MODEL

        assert wire.traffic_from_proto(pb.Traffic(), cfg, has_traffic=False) == traffic_from_model(DEFAULT_MODEL, cfg)
        # a full ModelSpec travels field for field (None included)
        spec = model_preset("mixtral-8x7b", global_batch_size=256)
        msg = wire.traffic_to_proto(None, spec)
        assert wire.model_from_proto(msg.model) == spec

    def test_traffic_errors(self):
        with pytest.raises(InvalidArgumentError) as err:
            wire.traffic_to_proto({"xx": 1})
        assert err.value.field == "traffic"
        cfg = parallel_config(8)
        bad = pb.Traffic()
        bad.bytes["tp"] = -1.0
        with pytest.raises(InvalidArgumentError) as err:
            wire.traffic_from_proto(bad, cfg)
        assert wire.error_fields(err.value) == ("traffic.bytes[tp]", "traffic.tp")
        bad = pb.Traffic(model=pb.ModelSpec(preset="nope"))
        with pytest.raises(InvalidArgumentError) as err:
            wire.traffic_from_proto(bad, cfg)
        assert wire.error_fields(err.value) == ("traffic.model.preset", "model")

    def test_options(self):
        req = pb.SolveRequest()
        wire.options_to_proto(
            req, "free", "megatron-cli", ["tp within host", ("dp", "leaf")], ["h0g1"], ["h1"], 2.5, 7,
            {"dp": 0.2, "tp": 0},
        )
        assert dict(req.exposure) == {"dp": 0.2, "tp": 0.0}
        opts = wire.options_from_proto(req)
        assert opts == SolveOptions(
            mode="free",
            orders="megatron-cli",
            constraints=(parse_constraint("tp within host"), parse_constraint("dp within leaf")),
            exclude_devices=("h0g1",),
            exclude_hosts=("h1",),
            time_limit_seconds=2.5,
            seed=7,
            exposure={"tp": 0.0, "dp": 0.2},
        )
        assert list(opts.exposure) == ["tp", "dp"]  # report order
        req = pb.SolveRequest()
        wire.options_to_proto(req, orders="tp-cp-ep-dp-pp,tp-cp-ep-pp-dp")
        assert wire.options_from_proto(req).orders == ("tp-cp-ep-dp-pp", "tp-cp-ep-pp-dp")
        assert wire.options_from_proto(pb.SolveRequest()) == SolveOptions()
        with pytest.raises(InvalidArgumentError) as err:
            wire.options_to_proto(pb.SolveRequest(), mode="sideways")
        assert err.value.field == "mode"
        both = pb.SolveRequest(orders=pb.OrderSearch(policy=pb.ORDER_POLICY_ALL, orders=["tp-dp"]))
        with pytest.raises(InvalidArgumentError) as err:
            wire.options_from_proto(both)
        assert err.value.field == "orders.policy"
        with pytest.raises(InvalidArgumentError) as err:
            wire.options_from_proto(pb.SolveRequest(time_limit_seconds=-1))
        assert wire.error_fields(err.value) == ("time_limit_seconds", "time_limit_seconds")

    def test_result_round_trip(self):
        g = make_cluster(2, 4)
        cfg = parallel_config(8, tp=2, pp=2)
        local = solve(g, cfg, TRAFFIC, SolveOptions(mode="free", orders="megatron-cli", time_limit_seconds=5))
        msg = pb.SolveResponse.FromString(wire.result_to_proto(local).SerializeToString())
        assert msg.status in (pb.STATUS_OPTIMAL, pb.STATUS_FEASIBLE)
        assert msg.improvement == pytest.approx(local.improvement)
        back = wire.result_from_proto(msg)
        assert comparable(back) == comparable(local)
        assert back.solve_seconds == local.solve_seconds
        assert back.config == local.config and back.layout == local.layout and back.hosts == local.hosts
        assert list(back.groups) == list(local.groups)
        omitted = wire.result_from_proto(wire.result_to_proto(local, omit_groups=True))
        assert omitted.groups == {}

    def test_cost_and_groups_round_trip(self):
        cfg = parallel_config(32, tp=2, cp=4, pp=2, hierarchical_context_parallel_sizes=[2, 2],
                              num_distributed_optimizer_instances=2)
        groups = megatron_groups(cfg)
        resp = wire.get_groups_response(cfg, groups)
        back = wire.groups_from_proto(pb.GetGroupsResponse.FromString(resp.SerializeToString()).groups)
        assert list(back) == list(groups)
        for k in groups:
            assert back[k].dtype == np.int64 and np.array_equal(back[k], groups[k])
        g = make_cluster(2, 4)
        cost = evaluate(g, parallel_config(8, tp=2), [f"h{i // 4}g{i % 4}" for i in range(8)], TRAFFIC)
        assert wire.cost_from_proto(wire.cost_to_proto(cost)) == cost

    def test_cost_fields_round_trip(self):
        cost = sample_cost()
        msg = pb.Cost.FromString(wire.cost_to_proto(cost).SerializeToString())
        assert msg.total_seconds == cost.total_seconds
        assert dict(msg.by_class_seconds) == dict(cost.by_class)
        assert set(msg.classes) == set(cost.classes)
        dp = msg.classes["dp"]
        assert (dp.seconds, dp.exposure, dp.bytes_per_rank, dp.payload_bytes, dp.latency_seconds) == (
            0.18, 0.2, 1.75e9, 1e9, 2e-6
        )
        b = dp.bottleneck
        assert b.kind == pb.BOTTLENECK_KIND_LINK and (b.link_from, b.link_to) == ("leaf0", "spine")
        assert (b.load_bytes, b.capacity_gbps, b.utilization, b.flows, b.flow_bytes, b.flow_gbps) == (
            72e9, 400.0, 1.0, 32, 2.25e9, 50.0
        )
        assert msg.classes["tp"].bottleneck.kind == pb.BOTTLENECK_KIND_PER_FLOW
        none = msg.classes["pp"].bottleneck
        assert none.kind == pb.BOTTLENECK_KIND_NONE and none.link_from == none.link_to == ""
        back = wire.cost_from_proto(msg)
        assert back == cost
        assert list(back.by_class) == ["tp", "cp", "dp", "pp"] and list(back.classes) == list(back.by_class)
        assert back.classes["pp"].bottleneck.link is None
        assert back.to_dict() == cost.to_dict()
        assert_exposed(back, {"tp": 0.5, "dp": 0.2})

    def test_cost_without_classes_gets_the_defaults(self):
        msg = pb.Cost(total_seconds=0.3, by_class_seconds={"dp": 0.2, "tp": 0.1})
        back = wire.cost_from_proto(msg)
        assert list(back.by_class) == ["tp", "dp"]
        assert back.classes == {"tp": ClassCost(0.1), "dp": ClassCost(0.2)}
        assert back == CostBreakdown(0.3, {"tp": 0.1, "dp": 0.2})

    def test_unknown_bottleneck_kind_is_a_bug_not_bad_input(self):
        bad = CostBreakdown(1.0, {"dp": 1.0}, {"dp": ClassCost(1.0, bottleneck=Bottleneck(kind="sideways"))})
        with pytest.raises(ValueError, match="sideways"):
            wire.cost_to_proto(bad)

    def test_exposure_on_requests(self):
        g = make_cluster(1, 2)
        req = wire.solve_request(g, exposure={"dp": 0.2, "tp": 0.5})
        assert dict(req.exposure) == {"dp": 0.2, "tp": 0.5}
        assert wire.options_from_proto(req).exposure == {"tp": 0.5, "dp": 0.2}
        assert len(wire.solve_request(g).exposure) == 0
        ev = wire.evaluate_request(g, ["h0g0", "h0g1"], exposure={"pp": 0.0})
        assert dict(ev.exposure) == {"pp": 0.0}
        assert wire.parse_evaluate_request(ev).exposure == {"pp": 0.0}
        assert wire.parse_evaluate_request(wire.evaluate_request(g, ["h0g0", "h0g1"])).exposure == {}
        # SolveOptions -> request (the CLI's --server path and batch) keeps it
        req = wire.solve_request_from_config(g, parallel_config(2), {"dp": 1e9}, SolveOptions(exposure={"dp": 0.25}))
        assert wire.parse_solve_request(req).options.exposure == {"dp": 0.25}

    @pytest.mark.parametrize(
        "exposure, argument, needle",
        [
            ({"dp": 1.5}, "exposure.dp", "must be in [0, 1]"),
            ({"dp": "abc"}, "exposure.dp", "is not a number"),
            ({"dp": True}, "exposure.dp", "is not a number"),
            ({"dp": float("nan")}, "exposure.dp", "must be in [0, 1]"),
            ({"xx": 0.5}, "exposure.xx", "unknown traffic class 'xx'"),
            ("dp=0.2", "exposure", "must be a mapping"),
        ],
    )
    def test_bad_exposure_client_side(self, exposure, argument, needle):
        g = make_cluster(1, 2)
        for build in (lambda: wire.solve_request(g, exposure=exposure),
                      lambda: wire.evaluate_request(g, ["h0g0", "h0g1"], exposure=exposure)):
            with pytest.raises(InvalidArgumentError) as err:
                build()
            assert err.value.field == argument and needle in err.value.message

    @pytest.mark.parametrize("value", [1.5, -0.5, float("nan"), float("inf")])
    def test_bad_exposure_server_side_names_the_field(self, value):
        req = wire.solve_request(make_cluster(1, 2))
        req.exposure["dp"] = value
        with pytest.raises(InvalidArgumentError) as err:
            wire.parse_solve_request(req)
        assert wire.error_fields(err.value, "Solve") == ("exposure[dp]", "exposure.dp")
        ev = wire.evaluate_request(make_cluster(1, 2), ["h0g0", "h0g1"])
        ev.exposure["dp"] = value
        with pytest.raises(InvalidArgumentError) as err:
            wire.parse_evaluate_request(ev)
        assert wire.error_fields(err.value, "Evaluate") == ("exposure[dp]", "exposure.dp")


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


def test_tiny_deadline_is_deadline_exceeded_and_server_keeps_serving(server, client):
    g = make_cluster(16, 8)
    with pytest.raises(RankmapRpcError) as err:
        client.solve(g, timeout=0.3, **slow_request_kwargs())
    assert err.value.code == grpc.StatusCode.DEADLINE_EXCEEDED
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
    late = [o for o in out.values() if isinstance(o, RankmapRpcError)]
    assert late and all(o.code == grpc.StatusCode.DEADLINE_EXCEEDED for o in late)
    assert wait_idle(server.servicer, 10), "batch items kept running after the deadline"
    assert client.health() == "SERVING"
