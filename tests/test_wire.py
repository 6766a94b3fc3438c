"""The protobuf conversion on its own (rankmap.wire), no server: graphs, sizes, traffic, options,
results and costs round-trip, and errors name the proto field."""

from __future__ import annotations


import numpy as np
import pytest

from rankmap import wire
from rankmap.solver import (
    InvalidArgumentError,
    NcclModel,
    SolveOptions,
    evaluate,
    megatron_groups,
    parallel_config,
    parse_constraint,
    solve,
)
from rankmap.solver.traffic import model_preset, traffic_from_model
from rankmap.solver.results import Bottleneck, ClassCost, CostBreakdown
from rankmap.v1 import rankmap_pb2 as pb

from service_helpers import TRAFFIC, assert_exposed, comparable, make_cluster, sample_cost


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

    def test_graph_carries_what_the_nccl_model_reads(self):
        """A real cluster file (link kinds, NVLink counts, NICs' hosts and indices, the GPU generation) crosses
        the wire whole: the solver sees the same NCCL topology and predicts the same times (issue 25)."""
        from pathlib import Path

        from rankmap.solver import cluster_from_graph
        from rankmap.solver.formats.graphfile import load_graph

        g = load_graph(str(Path(__file__).parents[1] / "examples" / "clusters" / "hgx-a100-2nodes.json"))
        msg = pb.Cluster.FromString(wire.graph_to_proto(g).SerializeToString())
        assert msg.gpu == "a100"
        assert {link.kind for link in msg.links} == {"pcie", "nvlink", "net", "sys"}
        assert any(link.HasField("nvlinks") for link in msg.links)
        nics = [n for n in msg.nodes if n.kind == "nic"]
        assert nics and all(n.HasField("host") and n.HasField("nic_index") for n in nics)
        back = wire.graph_from_proto(msg)
        assert back.graph["gpu"] == "a100"
        for u, v, data in g.edges(data=True):
            for attr in ("link", "nvlinks", "bandwidth"):
                assert back.edges[u, v].get(attr) == data.get(attr), (u, v, attr)
        for n, data in g.nodes(data=True):
            for attr in ("kind", "host", "nic_index", "local_index"):
                assert back.nodes[n].get(attr) == data.get(attr), (n, attr)
        a, b = cluster_from_graph(g), cluster_from_graph(back)
        for name in ("node_of", "rail", "nic_gbps", "nvlink_gbps"):
            assert np.array_equal(getattr(a.nccl_topology, name), getattr(b.nccl_topology, name)), name
        assert a.nccl_topology.arch == b.nccl_topology.arch == "ampere"
        cfg = parallel_config(16, tp=8)
        gpus = [n for n, d in g.nodes(data=True) if d.get("kind") == "gpu"]
        assert evaluate(back, cfg, gpus, TRAFFIC) == evaluate(g, cfg, gpus, TRAFFIC)
        # a graph without them (DESIGN §2's minimum) sends none of them
        bare = wire.graph_to_proto(make_cluster(1, 2))
        assert bare.gpu == "" and all(not link.kind and not link.HasField("nvlinks") for link in bare.links)
        assert all(not n.HasField("host") and not n.HasField("nic_index") for n in bare.nodes)
        # parallel links add their NVLink counts, as the importers do
        two = pb.Cluster(devices=[pb.Device(id="a"), pb.Device(id="b")],
                         links=[pb.Link(source="a", target="b", bandwidth_gbps=50, kind="nvlink", nvlinks=2),
                                pb.Link(source="b", target="a", bandwidth_gbps=25, kind="nvlink", nvlinks=1)])
        assert wire.graph_from_proto(two).edges["a", "b"] == {"bandwidth": 75.0, "latency_us": 0.0, "link": "nvlink",
                                                              "nvlinks": 3}

    @pytest.mark.parametrize("attr, value", [("nvlinks", 0.0), ("nvlinks", float("nan")), ("ports", -1.0),
                                             ("ports", float("inf"))])
    def test_bad_link_ports_name_the_proto_field(self, attr, value):
        c = wire.graph_to_proto(make_cluster(1, 2))
        setattr(c.links[1], attr, value)
        with pytest.raises(InvalidArgumentError) as err:
            wire.graph_from_proto(c)
        assert wire.error_fields(err.value) == (f"cluster.links[1].{attr}", "cluster.edges")

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

    def test_request_from_config_carries_every_option(self):
        """solve_request_from_config sends every SolveOptions field (it forwards them by name)."""
        g = make_cluster(2, 2)
        opts = SolveOptions(mode="free", orders=("tp-cp-ep-pp-dp",), constraints=(parse_constraint("tp within host"),),
                            exclude_devices=("h1g1",), exclude_hosts=("h9",), time_limit_seconds=7.5, seed=3,
                            exposure={"dp": 0.5}, launch_order="listed",
                            nccl=NcclModel(algorithm="tree", pxn=False, rates={"nic": 45.0}, latency=False))
        req = wire.solve_request_from_config(g, parallel_config(2, tp=2), {"dp": 1e9}, opts)
        assert wire.parse_solve_request(req).options == opts

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
        assert (dp.algorithm, dp.channels) == ("ring", 8)
        assert (msg.classes["tp"].algorithm, msg.classes["tp"].channels) == ("nvls", 1)
        assert (msg.classes["pp"].algorithm, msg.classes["pp"].channels) == ("", 0)
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




# --------------------------------------------------------------------------- NCCL options (issue 25)


class TestNccl:
    MODEL = NcclModel(algorithm="nvls", pxn=False, rates={"nic": 45.0, "nvlink": 20.6}, latency=False)

    @pytest.mark.parametrize("algorithm, value", [("auto", pb.NCCL_ALGORITHM_UNSPECIFIED),
                                                  ("ring", pb.NCCL_ALGORITHM_RING), ("tree", pb.NCCL_ALGORITHM_TREE),
                                                  ("nvls", pb.NCCL_ALGORITHM_NVLS),
                                                  ("nvlstree", pb.NCCL_ALGORITHM_NVLSTREE)])
    def test_every_algorithm_round_trips(self, algorithm, value):
        msg = pb.NcclOptions()
        wire.nccl_to_proto(msg, NcclModel(algorithm=algorithm))
        assert msg.algorithm == value
        assert wire.nccl_from_proto(pb.NcclOptions.FromString(msg.SerializeToString())) == NcclModel(algorithm)

    def test_solve_and_evaluate_requests_carry_it(self):
        g = make_cluster(1, 2)
        req = pb.SolveRequest.FromString(wire.solve_request(g, nccl=self.MODEL).SerializeToString())
        assert req.nccl.algorithm == pb.NCCL_ALGORITHM_NVLS and req.nccl.disable_pxn and req.nccl.disable_latency
        assert dict(req.nccl.rates_gbps) == {"nic": 45.0, "nvlink": 20.6}
        assert wire.parse_solve_request(req).options.nccl == self.MODEL
        # a mapping of NcclModel's fields (the client's spelling) is the same model
        mapped = wire.solve_request(g, nccl={"algorithm": "NVLS", "pxn": False, "rates": {"NIC": 45, "nvlink": 20.6},
                                             "latency": False})
        assert mapped == req
        ev = wire.evaluate_request(g, ["h0g0", "h0g1"], nccl=self.MODEL)
        assert wire.parse_evaluate_request(ev).nccl == self.MODEL
        cfg = parallel_config(2)
        ev2 = wire.evaluate_request_from_config(g, cfg, ["h0g0", "h0g1"], {"dp": 1e9}, nccl=self.MODEL)
        assert ev2.nccl == ev.nccl
        # NCCL's defaults leave the field unset: an old server sees the request it always saw
        for default in (None, NcclModel(), {"algorithm": "auto"}):
            assert not wire.solve_request(g, nccl=default).HasField("nccl")
            assert not wire.evaluate_request(g, ["h0g0", "h0g1"], nccl=default).HasField("nccl")
        from rankmap.solver.fabric.rates import DEFAULT_NCCL

        assert wire.parse_solve_request(wire.solve_request(g)).options.nccl == DEFAULT_NCCL
        assert wire.parse_evaluate_request(wire.evaluate_request(g, ["h0g0", "h0g1"])).nccl == DEFAULT_NCCL
        # batch items take it by name
        assert wire.solve_kwargs_request({"graph": g, "nccl": self.MODEL}).nccl == req.nccl

    @pytest.mark.parametrize("mutate, path, argument, needle", [
        (lambda m: setattr(m, "algorithm", 9), "nccl.algorithm", "nccl_algo", "not an NcclAlgorithm"),
        (lambda m: m.rates_gbps.__setitem__("nic", 0.0), "nccl.rates_gbps[nic]", "nccl_rate.nic", "nic=0.0"),
        (lambda m: m.rates_gbps.__setitem__("nic", -45.0), "nccl.rates_gbps[nic]", "nccl_rate.nic", "nic=-45.0"),
        (lambda m: m.rates_gbps.__setitem__("nvlink", float("nan")), "nccl.rates_gbps[nvlink]", "nccl_rate.nvlink",
         "finite"),
        (lambda m: m.rates_gbps.__setitem__("nvlink", float("inf")), "nccl.rates_gbps[nvlink]", "nccl_rate.nvlink",
         "finite"),
        (lambda m: m.rates_gbps.__setitem__("pcie", 20.0), "nccl.rates_gbps[pcie]", "nccl_rate.pcie",
         "unknown NCCL rate key 'pcie'"),
        (lambda m: m.rates_gbps.update({"NIC": 45.0, "nic": 50.0}), "nccl.rates_gbps[nic]", "nccl_rate.nic",
         "given twice"),
    ])
    def test_bad_values_name_the_proto_field(self, mutate, path, argument, needle):
        g = make_cluster(1, 2)
        for rpc, req, parse in (("Solve", wire.solve_request(g), wire.parse_solve_request),
                                ("Evaluate", wire.evaluate_request(g, ["h0g0", "h0g1"]), wire.parse_evaluate_request)):
            mutate(req.nccl)
            with pytest.raises(InvalidArgumentError) as err:
                parse(req)
            assert wire.error_fields(err.value, rpc) == (path, argument), rpc
            assert needle in err.value.message, err.value.message

    @pytest.mark.parametrize("nccl, field", [({"algorithm": "sideways"}, "nccl_algo"),
                                             ({"rates": {"nic": 0}}, "nccl_rate.nic"),
                                             ({"rates": {"sys": 22}}, "nccl_rate.sys"),
                                             ({"pxm": False}, "nccl"), ("ring", "nccl")])
    def test_bad_values_client_side(self, nccl, field):
        g = make_cluster(1, 2)
        for build in (lambda: wire.solve_request(g, nccl=nccl),
                      lambda: wire.evaluate_request(g, ["h0g0", "h0g1"], nccl=nccl)):
            with pytest.raises(InvalidArgumentError) as err:
                build()
            assert err.value.field == field
        # the solver's fields map to the request's paths (errors raised while solving)
        assert wire.proto_field("nccl_algo") == "nccl.algorithm"
        assert wire.proto_field("nccl_rate.nic") == "nccl.rates_gbps[nic]"

    def test_class_algorithm_and_channels_round_trip_from_a_real_cost(self):
        g = make_cluster(2, 4)
        cost = evaluate(g, parallel_config(8, tp=4), [f"h{i // 4}g{i % 4}" for i in range(8)], TRAFFIC)
        assert cost.classes["tp"].algorithm and cost.classes["dp"].channels >= 1
        back = wire.cost_from_proto(pb.Cost.FromString(wire.cost_to_proto(cost).SerializeToString()))
        assert back == cost
        assert {c: (v.algorithm, v.channels) for c, v in back.classes.items()} == {
            c: (v.algorithm, v.channels) for c, v in cost.classes.items()}
