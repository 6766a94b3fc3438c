"""Measured link rates (issue 27 item 1): readers, the cap on the route's bottleneck, CLI and gRPC."""

from __future__ import annotations

import json

import networkx as nx
import numpy as np
import pytest

from cli_helpers import bad_input, run
from rankmap.solver import evaluate
from rankmap.solver.errors import InvalidArgumentError
from rankmap.solver.fabric.cluster import cluster_from_graph
from rankmap.solver.cost.measured_use import measured_links_used
from rankmap.solver.fabric.measured import apply_measured
from rankmap.solver.fabric.rates import NcclModel
from rankmap.solver.formats.measured import Measurement, parse_measured, read_measured
from rankmap.solver.megatron.config import ParallelSizes
from service_helpers import live_server

NO_LAT = NcclModel(latency=False)

# --------------------------------------------------------------------------- sample outputs

# nccl-tests all_reduce_perf between two hosts, 2 GPUs each (the layout of nccl-tests' output:
# the "# Rank" lines name host and CUDA device; columns as in its header)
NCCL_TESTS = """\
# nThread 1 nGpus 1 minBytes 1048576 maxBytes 1073741824 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0
#
# Using devices
#  Rank  0 Group  0 Pid  40001 on      a device  0 [0x18] NVIDIA H100 80GB HBM3
#  Rank  1 Group  0 Pid  40002 on      a device  1 [0x2a] NVIDIA H100 80GB HBM3
#  Rank  2 Group  0 Pid  50001 on      b device  0 [0x18] NVIDIA H100 80GB HBM3
#  Rank  3 Group  0 Pid  50002 on      b device  1 [0x2a] NVIDIA H100 80GB HBM3
#
#                                                              out-of-place                       in-place
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
     1048576        262144     float     sum      -1    120.1    8.73   13.10      0    119.8    8.75   13.13      0
  1073741824     268435456     float     sum      -1    59652   18.00   27.00      0    59700   17.99   26.98      0
   536870912     134217728     float     sum      -1    29900   17.96   26.93      0    29950   17.93   26.89      0
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 22.3
#
"""

IB_TEXT = """\
---------------------------------------------------------------------------------------
                    RDMA_Write BW Test
 Dual-port       : OFF		Device         : mlx5_0
 Number of qps   : 1		Transport type : IB
---------------------------------------------------------------------------------------
 #bytes     #iterations    BW peak[MiB/sec]    BW average[MiB/sec]   MsgRate[Mpps]
 65536      5000             11740.33            11738.79		   0.187821
 8388608    5000             23841.86            23841.86		   0.002980
---------------------------------------------------------------------------------------
"""

NVBW = {"nvbandwidth": {"version": "v0.7", "testcases": [
    {"name": "device_to_device_memcpy_read_ce", "status": "Passed",
     "bandwidth_description": "memcpy CE GPU(row) <- GPU(column) bandwidth (GB/s)",
     "bandwidth_matrix": [["N/A", "30.5"], ["40", "N/A"]], "sum": 70.5},
    {"name": "device_to_device_memcpy_write_ce", "status": "Passed",
     "bandwidth_description": "memcpy CE GPU(row) -> GPU(column) bandwidth (GB/s)",
     "bandwidth_matrix": [["N/A", "35"], ["38", "N/A"]], "sum": 73},
    {"name": "device_to_device_bidirectional_memcpy_read_ce", "status": "Passed",
     "bandwidth_matrix": [["N/A", "1"], ["1", "N/A"]]},
    {"name": "host_to_device_memcpy_ce", "status": "Passed", "bandwidth_matrix": [["5", "5"]]},
]}}


def test_csv_reader(tmp_path):
    f = tmp_path / "m.csv"
    f.write_text("a,b,gbps,source\n# a comment\nnode1,node2,20.5,iperf run 3\nnode1/gpu0, node2:1 ,7\n\n")
    ms = read_measured(str(f))
    assert ms == [Measurement("node1", "node2", 20.5, "iperf run 3"),
                  Measurement("node1/gpu0", "node2:1", 7.0, "m.csv line 4")]


def test_nccl_tests_reader():
    (m,) = parse_measured(NCCL_TESTS, "ar.txt")
    # the largest size (1073741824 B) is the second row; its out-of-place busbw is 27.00
    assert (m.a, m.b, m.gbps, m.gpus_per_host) == ("a", "b", 27.0, 2)
    assert m.devices_a == (0, 1) and m.devices_b == (0, 1)
    assert "1073741824" in m.source


def test_ib_write_bw_text_and_json():
    (m,) = parse_measured(IB_TEXT, "ib.txt", ("a", "b"))
    # largest message 8388608 B: 23841.86 MiB/s = 23841.86 * 2^20 / 1e9 = 25.0 GB/s
    assert m.gbps == pytest.approx(23841.86 * 1048576 / 1e9) and m.gbps == pytest.approx(25.0, rel=1e-6)
    assert "mlx5_0" in m.source
    gbit = IB_TEXT.replace("[MiB/sec]", "[Gb/sec]").replace("23841.86            23841.86", "392.00   392.00")
    (g,) = parse_measured(gbit, "ib.txt", ("a", "b"))
    assert g.gbps == pytest.approx(392.0 / 8)  # 392 Gb/s = 49 GB/s
    doc = json.dumps({"test_info": {"test": "RDMA_Write_BW_Test", "Device": "mlx5_1"},
                      "results": {"MsgSize": 65536, "n_iterations": 5000, "BW_peak": 11740.33,
                                  "BW_average": 11738.79, "MsgRate": 0.187821}})
    (j,) = parse_measured(doc, "ib.json", ("a", "b"))
    assert j.gbps == pytest.approx(11738.79 * 1048576 / 1e9)
    with pytest.raises(InvalidArgumentError, match="HOSTA,HOSTB"):
        parse_measured(IB_TEXT, "ib.txt")


def test_nvbandwidth_reader():
    ms = parse_measured(json.dumps(NVBW), "nvbw.json", ("a",))
    # pair (0, 1): row 0 -> max(30.5, 35) = 35; row 1 -> max(40, 38) = 40; the slower direction: 35
    # (bidirectional and host test cases are not read)
    assert ms == [Measurement("a:0", "a:1", 35.0, "nvbandwidth nvbw.json")]
    with pytest.raises(InvalidArgumentError, match="HOST="):
        parse_measured(json.dumps(NVBW), "nvbw.json")


@pytest.mark.parametrize("text,needle", [
    ("a,b\n", "line 1: expected a,b,GB/s"),
    ("a,b,fast\nc,d,1\n", "line 2"),  # the first line is a header; "x" below is not a number
    ("a,b,1\nc,d,x\n", "line 2: rate 'x'"),
    ("a,b,-3\n", "line 1: rate '-3'"),
    ("a,b,nan\n", "must be finite"),
    ("# only comments\n", "no a,b,GB/s line"),
])
def test_csv_errors(text, needle):
    if needle == "line 2":
        assert parse_measured(text, "m.csv") == [Measurement("c", "d", 1.0, "m.csv line 2")]
        return
    with pytest.raises(InvalidArgumentError, match=needle):
        parse_measured(text, "m.csv")


def test_nccl_tests_needs_two_hosts():
    one = "\n".join(line for line in NCCL_TESTS.splitlines() if " on      b " not in line)
    with pytest.raises(InvalidArgumentError, match="between 2 hosts"):
        parse_measured(one, "ar.txt")


# --------------------------------------------------------------------------- the cap


def one_gpu_hosts() -> nx.Graph:
    """Hosts a and b, one GPU each: GPU -(100 GB/s)- NIC -(50 GB/s)- switch (no link kinds: rates as given)."""
    g = nx.Graph()
    g.add_node("switch", kind="switch")
    for h in ("a", "b"):
        g.add_node(f"{h}/gpu0", kind="gpu", host=h, local_index=0)
        g.add_node(f"{h}/nic0", kind="nic", host=h)
        g.add_edge(f"{h}/gpu0", f"{h}/nic0", bandwidth=100.0)
        g.add_edge(f"{h}/nic0", "switch", bandwidth=50.0)
    return g


def test_measured_pair_caps_the_cross_host_ring():
    g = one_gpu_hosts()
    cfg = ParallelSizes(world_size=2, tp=2).to_config("tp-cp-ep-dp-pp")
    # tp ring all-reduce of n = 2 ranks, S = 1e9 bytes: 2(n-1)/n * S = 1e9 bytes per ring edge, over
    # GPU -> NIC (100) -> switch (50) -> NIC -> GPU: bottleneck 50 GB/s -> 1e9 / 50e9 = 0.02 s
    base = evaluate(g, cfg, ["a/gpu0", "b/gpu0"], {"tp": 1e9}, nccl=NO_LAT)
    assert base.by_class["tp"] == pytest.approx(0.02)
    mg = apply_measured(g, [Measurement("a", "b", 20.0, "busbw")], NO_LAT)
    # the route's bottleneck links are the two 50 GB/s NIC uplinks: both capped at 20 (x 20/50)
    caps = {tuple(sorted((u, v))): d["measured_gbps"] for u, v, d in mg.graph.edges(data=True) if "measured_gbps" in d}
    assert caps == {("a/nic0", "switch"): pytest.approx(20.0), ("b/nic0", "switch"): pytest.approx(20.0)}
    assert "measured_gbps" not in g["a/nic0"]["switch"]  # the input graph is left alone
    assert mg.pairs[0]["model_gbps"] == pytest.approx(50.0) and mg.pairs[0]["ratio"] == pytest.approx(0.4)
    # the same ring at 20 GB/s: 1e9 / 20e9 = 0.05 s (2.5 x)
    cost = evaluate(mg.graph, cfg, ["a/gpu0", "b/gpu0"], {"tp": 1e9}, nccl=NO_LAT)
    assert cost.by_class["tp"] == pytest.approx(0.05)
    cl = cluster_from_graph(mg.graph, nccl=NO_LAT)
    used = measured_links_used(cl, cfg, np.array([0, 1]), {"tp": 1e9})
    assert sorted(tuple(sorted(u["link"])) for u in used) == [("a/nic0", "switch"), ("b/nic0", "switch")]
    assert all(u["classes"] == ["tp"] and u["line_gbps"] == 50.0 for u in used)


def test_measurement_never_raises_a_rate():
    mg = apply_measured(one_gpu_hosts(), [Measurement("a", "b", 80.0, "fast")], NO_LAT)
    assert mg.capped == 0 and not any("measured_gbps" in d for _u, _v, d in mg.graph.edges(data=True))


def test_nccl_tests_busbw_is_spread_over_the_rails():
    # two hosts of 2 GPUs on one NVSwitch (200) each, GPU i with its own rail NIC nic{i}: GPU -(100)- NIC
    # -(50)- switch.  nccl-tests busbw 27 GB/s with 2 GPUs per host on 2 rails: 27 / 2 = 13.5 GB/s per
    # flow; each rail's route GPU i -> nic i -> switch -> nic i -> GPU i has bottleneck 50, capped at 13.5
    g = nx.Graph()
    g.add_node("switch", kind="switch")
    for h in ("a", "b"):
        g.add_node(f"{h}/nvswitch", kind="nvswitch", host=h)
        for i in range(2):
            g.add_node(f"{h}/gpu{i}", kind="gpu", host=h, local_index=i)
            g.add_node(f"{h}/nic{i}", kind="nic", host=h, nic_index=i)
            g.add_edge(f"{h}/gpu{i}", f"{h}/nvswitch", bandwidth=200.0)
            g.add_edge(f"{h}/gpu{i}", f"{h}/nic{i}", bandwidth=100.0)
            g.add_edge(f"{h}/nic{i}", "switch", bandwidth=50.0)
    (m,) = parse_measured(NCCL_TESTS, "ar.txt")
    mg = apply_measured(g, [m], NO_LAT)
    caps = {tuple(sorted((u, v))): d["measured_gbps"] for u, v, d in mg.graph.edges(data=True) if "measured_gbps" in d}
    assert caps == {(f"{h}/nic{i}", "switch"): pytest.approx(13.5) for h in "ab" for i in range(2)}


def test_unknown_host_is_a_warning_and_exclude_slow():
    g = one_gpu_hosts()
    g.add_node("c/gpu0", kind="gpu", host="c", local_index=0)
    g.add_node("c/nic0", kind="nic", host="c")
    g.add_edge("c/gpu0", "c/nic0", bandwidth=100.0)
    g.add_edge("c/nic0", "switch", bandwidth=50.0)
    ms = [Measurement("a", "b", 45.0, "ok"), Measurement("a", "c", 10.0, "slow1"),
          Measurement("b", "c", 12.0, "slow2"), Measurement("a", "zz", 1.0, "ghost")]
    mg = apply_measured(g, ms, NO_LAT, exclude_slow=0.5)
    assert len(mg.warnings) == 1 and "'zz'" in mg.warnings[0]
    # model 50 GB/s for every pair: ratios a-b 0.9, a-c 0.2, b-c 0.24.  c: 2 of 2 slow -> dropped;
    # a and b: 1 of 2 slow (not more than half) -> kept
    assert mg.slow_hosts == ("c",)
    # a-b at 45 of 50 caps its own route's bottleneck, a's and b's uplinks, at 45; at 0.9 of the model it
    # also shows them healthy, so a-c and b-c blame c's uplink alone, capped at the lower of the two: 10 GB/s
    caps = {tuple(sorted((u, v))): d["measured_gbps"] for u, v, d in mg.graph.edges(data=True) if "measured_gbps" in d}
    assert caps == {("a/nic0", "switch"): pytest.approx(45.0), ("b/nic0", "switch"): pytest.approx(45.0),
                    ("c/nic0", "switch"): pytest.approx(10.0)}
    cfg = ParallelSizes(world_size=2, tp=2).to_config("tp-cp-ep-dp-pp")
    sub = mg.graph.subgraph([n for n in mg.graph if not n.startswith("b/")]).copy()
    # a tp ring a-c: 1e9 B per ring edge at the route's new bottleneck, 10 GB/s -> 0.1 s
    assert evaluate(sub, cfg, ["a/gpu0", "c/gpu0"], {"tp": 1e9}, nccl=NO_LAT).by_class["tp"] == pytest.approx(0.1)
    sub = mg.graph.subgraph([n for n in mg.graph if not n.startswith("c/")]).copy()
    # a-b: 1e9 B at 45 GB/s
    assert evaluate(sub, cfg, ["a/gpu0", "b/gpu0"], {"tp": 1e9}, nccl=NO_LAT).by_class["tp"] == pytest.approx(1 / 45)


def test_disagreeing_measurements_cap_all_and_warn():
    # a-b at 45 (healthy) shows a's and b's uplinks healthy; a slow a-b of 10 in the same file contradicts
    # it: both uplinks (the route's bottleneck) are capped at 10, with a warning
    mg = apply_measured(one_gpu_hosts(), [Measurement("a", "b", 45.0, "run1"), Measurement("a", "b", 10.0, "run2")],
                        NO_LAT)
    assert len(mg.warnings) == 1 and "healthy" in mg.warnings[0]
    caps = {tuple(sorted((u, v))): d["measured_gbps"] for u, v, d in mg.graph.edges(data=True) if "measured_gbps" in d}
    assert caps == {("a/nic0", "switch"): pytest.approx(10.0), ("b/nic0", "switch"): pytest.approx(10.0)}


# --------------------------------------------------------------------------- command line


def _write_graph(path, g):
    path.write_text(json.dumps(nx.node_link_data(g, edges="edges")))
    return path


def test_cli_solve_reports_measured_links(tmp_path, capsys):
    cluster = _write_graph(tmp_path / "c.json", one_gpu_hosts())
    meas = tmp_path / "m.csv"
    meas.write_text("a,b,20,iperf\nzz,b,5\n")
    code, out, err = run(capsys, "solve", cluster, "--tp", "2", "--traffic", "tp=1e9", "--no-nccl-latency",
                         "--measured", meas)
    assert code == 0, err
    assert "rankmap: warning: measurement zz-b" in err
    doc = json.loads(out)
    assert doc["cost"]["by_class"]["tp"] == pytest.approx(0.05)  # 1e9 / 20e9, as derived above
    links = doc["measured"]["links"]
    assert sorted(tuple(sorted(x["link"])) for x in links) == [("a/nic0", "switch"), ("b/nic0", "switch")]
    assert links[0]["measured_gbps"] == pytest.approx(20.0) and links[0]["classes"] == ["tp"]
    assert doc["measured"]["pairs"][0]["ratio"] == pytest.approx(0.4)
    # evaluate reads the same caps
    res = tmp_path / "r.json"
    res.write_text(out)
    code, out2, _ = run(capsys, "evaluate", cluster, "--assignment", res, "--measured", meas)
    assert code == 0 and json.loads(out2)["cost"]["by_class"]["tp"] == pytest.approx(0.05)


def test_cli_cluster_writes_caps_and_drops_slow_hosts(tmp_path, capsys):
    meas = tmp_path / "m.csv"
    meas.write_text("n1,n2,5\n")
    code, out, err = run(capsys, "cluster", "--gpu", "h100", "--gpus-per-node", "2", "--nodelist", "n[1-3]",
                         "--measured", meas)
    assert code == 0, err
    doc = json.loads(out)
    capped = [e for e in doc["edges"] if "measured_gbps" in e]
    assert capped and all(e["measured_gbps"] <= 5.0 + 1e-9 for e in capped)
    code, out, err = run(capsys, "cluster", "--gpu", "h100", "--gpus-per-node", "2", "--nodelist", "n[1-3]",
                         "--measured", meas, "--exclude-slow", "0.5")
    assert code == 0 and "left out: n1, n2" in err
    hosts = {n.get("host") for n in json.loads(out)["nodes"] if n.get("kind", "gpu") == "gpu"}
    assert hosts == {"n3"}


def test_cli_bad_measured_input(tmp_path, capsys):
    cluster = _write_graph(tmp_path / "c.json", one_gpu_hosts())
    bad = tmp_path / "bad.csv"
    bad.write_text("a,b,fast?\na,b,x\n")
    bad_input(capsys, "solve", cluster, "--tp", "2", "--measured", bad, needle="line 2: rate 'x'")
    bad_input(capsys, "solve", cluster, "--tp", "2", "--measured", tmp_path / "nope.csv", needle="does not exist")
    bad_input(capsys, "solve", cluster, "--tp", "2", "--exclude-slow", "0.5", needle="needs measured rates")
    ok = tmp_path / "ok.csv"
    ok.write_text("a,b,20\n")
    bad_input(capsys, "solve", cluster, "--tp", "2", "--measured", ok, "--exclude-slow", "1.5", needle="(0, 1]")


def test_job_file_measured_relative_path(tmp_path, capsys):
    cluster = _write_graph(tmp_path / "c.json", one_gpu_hosts())
    (tmp_path / "m.csv").write_text("a,b,20\n")
    job = tmp_path / "job.yaml"
    job.write_text(f"cluster: {cluster.name}\ntp: 2\ntraffic: {{tp: 1.0e9}}\nnccl_latency: false\n"
                   "measured: m.csv\n")
    code, out, err = run(capsys, "solve", job)
    assert code == 0, err
    assert json.loads(out)["cost"]["by_class"]["tp"] == pytest.approx(0.05)


# --------------------------------------------------------------------------- gRPC

server = live_server(workers=1, max_queued=4)


def test_grpc_solve_with_measurements(client, channel):
    from rankmap import wire
    from rankmap.v1 import rankmap_pb2_grpc

    g = one_gpu_hosts()
    req = wire.solve_request(g, tp=2, traffic={"tp": 1e9}, nccl={"latency": False},
                             measured=[Measurement("a", "b", 20.0, "busbw"), Measurement("a", "zz", 1.0, "ghost")])
    resp = rankmap_pb2_grpc.RankmapServiceStub(channel).Solve(req, timeout=60)
    assert resp.cost.by_class_seconds["tp"] == pytest.approx(0.05)
    assert len(resp.warnings) == 1 and "'zz'" in resp.warnings[0]
    assert sorted(tuple(sorted((m.source_node, m.target_node))) for m in resp.measured_links) == [
        ("a/nic0", "switch"), ("b/nic0", "switch")]
    assert all(m.measured_gbps == pytest.approx(20.0) and list(m.classes) == ["tp"] for m in resp.measured_links)
    # a graph carrying the caps (rankmap cluster --measured) travels as Link.measured_gbps
    capped = apply_measured(g, [Measurement("a", "b", 20.0, "busbw")], NO_LAT).graph
    req2 = wire.solve_request(capped, tp=2, traffic={"tp": 1e9}, nccl={"latency": False})
    assert any(link.HasField("measured_gbps") for link in req2.cluster.links)
    resp2 = rankmap_pb2_grpc.RankmapServiceStub(channel).Solve(req2, timeout=60)
    assert resp2.cost.by_class_seconds["tp"] == pytest.approx(0.05)


def test_grpc_bad_measurement_is_invalid_argument(channel):
    import grpc
    from google.rpc import error_details_pb2
    from grpc_status import rpc_status

    from rankmap import wire
    from rankmap.v1 import rankmap_pb2_grpc

    req = wire.solve_request(one_gpu_hosts(), tp=2, traffic={"tp": 1e9})
    req.measured.add(a="a", b="b", gbps=-1.0)
    with pytest.raises(grpc.RpcError) as info:
        rankmap_pb2_grpc.RankmapServiceStub(channel).Solve(req, timeout=60)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    status = rpc_status.from_call(info.value)
    fields = []
    for d in status.details:
        if d.Is(error_details_pb2.BadRequest.DESCRIPTOR):
            br = error_details_pb2.BadRequest()
            d.Unpack(br)
            fields += [v.field for v in br.field_violations]
    assert fields == ["measured[0].gbps"]


def test_nccl_tests_older_and_tagged_outputs():
    # older nccl-tests: no "Group" on the rank lines, an "error" column, no "root"; Open MPI's --tag-output
    text = """\
[1,0]<stdout>:# nThread 1 nGpus 1 minBytes 8 maxBytes 268435456 step: 2(factor) warmup iters: 5 iters: 20 validation: 1
[1,0]<stdout>:#   Rank  0 Pid  1001 on gpu-a device  0 [0x00] Tesla V100-SXM2-16GB
[1,0]<stdout>:#   Rank  1 Pid  2002 on gpu-b device  0 [0x00] Tesla V100-SXM2-16GB
[1,0]<stdout>:#       size         count    type   redop     time   algbw   busbw  error     time   algbw   busbw  error
[1,0]<stdout>:#        (B)    (elements)                     (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
gpu-a:1001:1001 [0] NCCL INFO Bootstrap : Using eth0
[1,0]<stdout>:   134217728      33554432   float     sum    29770    4.51    4.51  0e+00    29873    4.49    4.49  0e+00
[1,0]<stdout>:   268435456      67108864   float     sum    55270    4.86    4.86  0e+00    55213    4.86    4.86  0e+00
"""
    (m,) = parse_measured(text, "old.txt")
    # one GPU per host: busbw 4.86 GB/s at 268435456 B is one flow's rate (gpus_per_host 0)
    assert (m.a, m.b, m.gbps, m.gpus_per_host) == ("gpu-a", "gpu-b", 4.86, 0)
    # two processes each printing "Rank 0": separate communicators (a build without MPI=1), not a 2-host test
    twice = text.replace("Rank  1 Pid", "Rank  0 Pid")
    with pytest.raises(InvalidArgumentError, match="rank 0 is listed twice"):
        parse_measured(twice, "old.txt")


def test_client_solve_and_evaluate_with_measurements(client):
    g = one_gpu_hosts()
    ms = [Measurement("a", "b", 20.0, "busbw"), Measurement("a", "zz", 1.0, "ghost")]
    r = client.solve(g, tp=2, traffic={"tp": 1e9}, nccl={"latency": False}, measured=ms)
    assert r.cost.by_class["tp"] == pytest.approx(0.05)  # 1e9 B at 20 GB/s, as derived above
    assert len(r.warnings) == 1 and "'zz'" in r.warnings[0]
    assert sorted(tuple(sorted(x["link"])) for x in r.measured_links) == [("a/nic0", "switch"), ("b/nic0", "switch")]
    assert r.to_dict()["measured"]["warnings"] == list(r.warnings)
    cost = client.evaluate(g, ["a/gpu0", "b/gpu0"], tp=2, traffic={"tp": 1e9}, nccl={"latency": False}, measured=ms)
    assert cost.by_class["tp"] == pytest.approx(0.05)


def test_cli_solve_server_and_evaluate_table(tmp_path, capsys, server):
    cluster = _write_graph(tmp_path / "c.json", one_gpu_hosts())
    meas = tmp_path / "m.csv"
    meas.write_text("a,b,20,iperf\n")
    # --server: the CLI applies the measurements to the graph it sends (Link.measured_gbps)
    code, out, err = run(capsys, "solve", cluster, "--tp", "2", "--traffic", "tp=1e9", "--no-nccl-latency",
                         "--measured", meas, "--server", server.address)
    assert code == 0, err
    doc = json.loads(out)
    assert doc["cost"]["by_class"]["tp"] == pytest.approx(0.05)
    assert len(doc["measured"]["links"]) == 2 and doc["measured"]["pairs"][0]["ratio"] == pytest.approx(0.4)
    res = tmp_path / "r.json"
    res.write_text(out)
    code, out, err = run(capsys, "evaluate", cluster, "--assignment", res, "--measured", meas, "--format", "table")
    assert code == 0, err
    assert "measured links this layout relies on (2;" in out and "20 / 50 GB/s  tp  iperf" in out


def test_batch_entry_with_measured(tmp_path, capsys):
    _write_graph(tmp_path / "c.json", one_gpu_hosts())
    (tmp_path / "m.csv").write_text("a,b,20\n")
    entries = [{"name": "nominal", "cluster": "c.json", "tp": 2, "traffic": {"tp": 1e9}, "nccl_latency": False},
               {"name": "measured", "cluster": "c.json", "tp": 2, "traffic": {"tp": 1e9}, "nccl_latency": False,
                "measured": "m.csv"}]
    jobs = tmp_path / "jobs.jsonl"
    jobs.write_text("".join(json.dumps(e) + "\n" for e in entries))
    code, out, err = run(capsys, "batch", jobs, "--workers", "1")
    assert code == 0, err
    docs = {d["name"]: d for d in map(json.loads, out.splitlines())}
    # paths relative to the batch file; 1e9 B at 50 vs 20 GB/s
    assert docs["nominal"]["result"]["cost"]["by_class"]["tp"] == pytest.approx(0.02)
    assert docs["measured"]["result"]["cost"]["by_class"]["tp"] == pytest.approx(0.05)
    assert len(docs["measured"]["result"]["measured"]["links"]) == 2


def test_nvbandwidth_blames_the_degraded_gpu():
    # one host, 4 GPUs each linked to an NVSwitch at 300 GB/s (no link kinds: rates as given); nvbandwidth
    # measured every pair with GPU 1 at 100 GB/s, the others at 285 (0.95 of the model's 300)
    g = nx.Graph()
    g.add_node("h/nvs", kind="nvswitch", host="h")
    for i in range(4):
        g.add_node(f"h/gpu{i}", kind="gpu", host="h", local_index=i)
        g.add_edge(f"h/gpu{i}", "h/nvs", bandwidth=300.0)
    mat = [["N/A" if i == j else ("100" if 1 in (i, j) else "285") for j in range(4)] for i in range(4)]
    doc = {"nvbandwidth": {"testcases": [{"name": "device_to_device_memcpy_write_ce", "status": "Passed",
                                          "bandwidth_matrix": mat}]}}
    ms = parse_measured(json.dumps(doc), "nvbw.json", ("h",))
    assert len(ms) == 6 and {m.gbps for m in ms} == {100.0, 285.0}
    mg = apply_measured(g, ms, NO_LAT)
    assert mg.warnings == []
    caps = {u if u != "h/nvs" else v: d["measured_gbps"] for u, v, d in mg.graph.edges(data=True)
            if "measured_gbps" in d}
    # GPU 1's link: shown healthy by no pair (its pairs are at 1/3 of the model): capped at 300 / 3 = 100;
    # the others: the healthy 285 GB/s pairs cap their routes' links at 285 (a measurement never raises)
    assert caps == {"h/gpu0": pytest.approx(285.0), "h/gpu1": pytest.approx(100.0),
                    "h/gpu2": pytest.approx(285.0), "h/gpu3": pytest.approx(285.0)}


def test_sendrecv_busbw_is_one_flow():
    # the same output named as a sendrecv_perf run: its busbw (27 GB/s) is one flow's rate, not spread
    # over the 2 GPUs' rails
    (m,) = parse_measured(NCCL_TESTS, "sendrecv_perf-a-b.txt")
    assert (m.gbps, m.gpus_per_host) == (27.0, 0)


def test_cluster_refuses_to_write_a_cluster_that_exclude_slow_emptied(capsys, tmp_path):
    """Every host measured far below its rate and --exclude-slow: one error line, no graph with no GPU."""
    meas = tmp_path / "allslow.csv"
    meas.write_text("node1,node2,1\nnode3,node4,1\nnode1,node3,1\nnode2,node4,1\n")
    err = bad_input(capsys, "cluster", "--gpu", "h100", "--gpus-per-node", "8", "--nodelist", "node[1-4]",
                    "--measured", str(meas), "--exclude-slow", "0.5", "-o", str(tmp_path / "x.json"))
    assert "drops every host" in err
    assert not (tmp_path / "x.json").exists()


@pytest.mark.parametrize("text", ["1_0", "\u0662\u0660"])
def test_csv_rates_are_ascii_decimal(text):
    """float() reads 1_0 as 10 and Arabic-Indic digits as 20; a rate must be written in ASCII digits."""
    from rankmap.solver.formats.measured import _rate

    with pytest.raises(InvalidArgumentError, match="not a number of GB/s"):
        _rate(text, "pairs.csv line 1")
