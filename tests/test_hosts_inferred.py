"""GPUs without a ``host`` attribute (issue 27 deliverable 4: no phantom hosts).

Before: every such GPU was a host of its own named by its id (``node2/gpu3``); launcher mode
then ran 8 one-GPU "hosts" and free mode returned OPTIMAL with no usable launch file (a host
name with ``/`` cannot go in one).  Now the GPUs sharing an NVSwitch / PCIe tree below the
NICs are one machine, named by the graph (the ids' ``HOST/`` prefix, or the ``host`` of its
other GPUs), with a note; a machine the graph does not name is a clear error.
"""

from __future__ import annotations

import json

import grpc
import networkx as nx
import pytest
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from rankmap.solver import SolveOptions, parallel_config, solve
from rankmap.solver.errors import InvalidArgumentError
from rankmap.solver.fabric.hostinfer import NOTE_KEY, infer_hosts

from rankmap.wire.graph import graph_to_proto
from rankmap.v1 import rankmap_pb2 as pb

from cli_helpers import bad_input, run
from service_helpers import live_server, stub_for

server = live_server(workers=1, max_queued=4)  # client, channel: conftest.py


def hostless(hosts=("node1", "node2"), gpus: int = 4, prefix: bool = True) -> nx.Graph:
    """``hosts`` x ``gpus`` GPUs, each host's GPUs on an NVSwitch with one NIC to a leaf; no ``host``."""
    g = nx.Graph()
    for h in hosts:
        for i in range(gpus):
            gid = f"{h}/gpu{i}" if prefix else f"{h}-gpu{i}"
            g.add_node(gid, kind="gpu")
            g.add_edge(gid, f"{h}/nvswitch", bandwidth=450.0)
        g.nodes[f"{h}/nvswitch"]["kind"] = "nvswitch"
        g.add_node(f"{h}/nic0", kind="nic")
        g.add_edge(f"{h}/nvswitch", f"{h}/nic0", bandwidth=50.0)
        g.add_edge(f"{h}/nic0", "leaf", bandwidth=50.0)
    g.nodes["leaf"]["kind"] = "switch"
    return g


def write(tmp_path, g, name="cluster.json"):
    p = tmp_path / name
    p.write_text(json.dumps(nx.node_link_data(g, edges="edges")))
    return p


# ---------------------------------------------------------------- the inference itself


def test_prefix_names_the_machine_and_a_note_says_so():
    g = hostless()
    out = infer_hosts(g)
    assert {n: d["host"] for n, d in out.nodes(data=True) if d["kind"] == "gpu"} == {
        **{f"node1/gpu{i}": "node1" for i in range(4)}, **{f"node2/gpu{i}": "node2" for i in range(4)}}
    assert "node1 (4 GPUs), node2 (4 GPUs)" in out.graph[NOTE_KEY]
    assert "host" not in g.nodes["node1/gpu0"]  # the input is not changed


def test_graph_with_hosts_is_returned_as_is():
    g = hostless()
    for n, d in g.nodes(data=True):
        if d["kind"] == "gpu":
            d["host"] = n.split("/")[0]
    assert infer_hosts(g) is g


def test_lonely_gpu_keeps_its_own_host_and_direct_links_join_nothing():
    # DESIGN §2: a GPU alone (only a network switch / a direct GPU link next to it) is a host of its own
    g = nx.Graph()
    g.add_node("a", kind="gpu")
    g.add_node("b", kind="gpu")
    g.add_edge("a", "b", bandwidth=50.0)
    g.add_node("s", kind="switch")
    g.add_edge("a", "s", bandwidth=10.0)
    assert infer_hosts(g) is g


def test_other_gpus_host_is_adopted():
    g = hostless(hosts=("n1",), gpus=2)
    g.nodes["n1/gpu0"]["host"] = "machine-7"
    out = infer_hosts(g)
    assert out.nodes["n1/gpu1"]["host"] == "machine-7"
    # or the host of the NVSwitch they share
    g = hostless(hosts=("n1",), gpus=2, prefix=False)
    g.nodes["n1/nvswitch"]["host"] = "machine-8"
    assert {infer_hosts(g).nodes[f"n1-gpu{i}"]["host"] for i in (0, 1)} == {"machine-8"}


def test_unnamed_machine_is_an_error():
    g = hostless(prefix=False)  # ids node1-gpu0 ...: nothing names the machine
    with pytest.raises(InvalidArgumentError, match="give each GPU its host") as e:
        infer_hosts(g)
    assert e.value.field == "cluster.nodes" and "'node1-gpu0' and 'node1-gpu1' (and 2 more)" in e.value.message


def test_two_hosts_in_one_tree_is_an_error():
    g = hostless(hosts=("n1",), gpus=3)
    g.nodes["n1/gpu0"]["host"] = "a"
    g.nodes["n1/gpu1"]["host"] = "b"
    with pytest.raises(InvalidArgumentError, match="'n1/gpu2' has no host and shares .* nodes of hosts a, b"):
        infer_hosts(g)


def test_nvlink_domain_does_not_merge_machines():
    # an NVL72-style domain node (kind nvswitch, role nvlink_domain) joins trays, not machines
    g = hostless(hosts=("t1", "t2"), gpus=2)
    g.add_node("nvlink:rack1", kind="nvswitch", role="nvlink_domain", nvlink_domain="rack1")
    for n in [n for n, d in g.nodes(data=True) if d["kind"] == "gpu"]:
        g.add_edge(n, "nvlink:rack1", bandwidth=900.0)
    out = infer_hosts(g)
    assert {out.nodes[f"t{h}/gpu{i}"]["host"] for h in (1, 2) for i in (0, 1)} == {"t1", "t2"}


# ---------------------------------------------------------------- solver, CLI, gRPC


@pytest.mark.parametrize("mode", ["launcher", "free"])
def test_solve_uses_the_inferred_hosts(mode):
    res = solve(hostless(), parallel_config(8, tp=4), {"tp": 1e9, "dp": 1e9},
                SolveOptions(mode=mode, time_limit_seconds=10))
    assert [h.host for h in res.hosts] == ["node1", "node2"]
    # the Slurm hostfile: one line per global rank, 4 ranks per machine
    assert res.apply["slurm"]["hostfile"] == ["node1"] * 4 + ["node2"] * 4
    assert "node1 (4 GPUs)" in res.apply["hosts_inferred"]
    # each TP group of 4 sits on one machine's NVSwitch
    assert sorted(h.global_ranks for h in res.hosts) == [(0, 1, 2, 3), (4, 5, 6, 7)]


def test_cli_hostfile_names_real_machines(tmp_path, capsys):
    cluster = write(tmp_path, hostless())
    out_file = tmp_path / "hosts.txt"
    code, out, err = run(capsys, "solve", cluster, "--tp", "4", "--mode", "free", "--emit", "slurm-hostfile",
                         "-o", out_file)
    assert code == 0, err
    assert out_file.read_text().split() == ["node1"] * 4 + ["node2"] * 4
    assert "rankmap: warning: hosts inferred from the graph for 8 GPUs" in err
    code, out, err = run(capsys, "solve", cluster, "--tp", "4", "--exclude-host", "node2", "--format", "table")
    assert code == 0, err
    rows = [ln.split()[:2] for ln in out.splitlines() if ln[:1].isdigit()]
    assert rows == [["0", "node1"]] and out.startswith("rankmap solve: 4 GPUs")


def test_cli_unnamed_machine_is_bad_input(tmp_path, capsys):
    bad_input(capsys, "solve", write(tmp_path, hostless(prefix=False)), "--tp", "4",
              needle="give each GPU its host")


def test_grpc_solve_and_error(client, channel):
    req = pb.SolveRequest(cluster=graph_to_proto(hostless()), sizes=pb.ParallelSizes(tp=4), mode=pb.MODE_FREE,
                          time_limit_seconds=10)
    req.traffic.bytes["tp"] = 1e9
    resp = stub_for(channel).Solve(req, timeout=60)
    assert [h.host for h in resp.hosts] == ["node1", "node2"]
    entries = {e.key: e.value.string_value for e in resp.apply.entries}
    assert "node2 (4 GPUs)" in entries["hosts_inferred"]
    assert list(resp.apply.slurm.hostfile) == ["node1"] * 4 + ["node2"] * 4
    bad = pb.SolveRequest(cluster=graph_to_proto(hostless(prefix=False)), sizes=pb.ParallelSizes(tp=4))
    with pytest.raises(grpc.RpcError) as err:
        stub_for(channel).Solve(bad, timeout=60)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "give each GPU its host" in err.value.details()
    status = rpc_status.from_call(err.value)
    br = error_details_pb2.BadRequest()
    next(d for d in status.details if d.Is(error_details_pb2.BadRequest.DESCRIPTOR)).Unpack(br)
    assert [v.field for v in br.field_violations] == ["cluster.devices"]  # GPUs are the request's devices


def test_host_topology_graph_without_hosts_is_one_host(tmp_path, capsys):
    # a one-host graph file (--host-topology) whose GPUs carry no host: one host, not one per GPU
    g = nx.Graph()
    for i in range(4):
        g.add_node(f"gpu{i}", kind="gpu", local_index=i)
        g.add_edge(f"gpu{i}", "nvs", bandwidth=450.0)
    g.nodes["nvs"]["kind"] = "nvswitch"
    g.add_node("nic0", kind="nic")
    g.add_edge("nvs", "nic0", bandwidth=50.0)
    code, out, err = run(capsys, "cluster", "--host-topology", write(tmp_path, g, "host.json"), "--nodelist", "a,b",
                         "--format", "table")
    assert code == 0, err
    assert "hosts 2  GPUs 8  NICs 2" in out  # 2 hosts x 4 GPUs (was: "has 4 hosts", exit 2)
