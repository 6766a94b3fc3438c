"""Issue 12 items 1, 2, 6, 7: the launcher's baseline, launch files, --emit, the table width.

The fragmented fabric below is the issue's report in small: hosts 01 and 03 share
leaf A, 02 and 04 leaf B, and the cluster file lists them 01, 03, 02, 04.  srun and
torchrun launch in sorted name order (01, 02, 03, 04), which puts each data-parallel
pair across the 100 GB/s spine.
"""

from __future__ import annotations

import json
import shlex

import networkx as nx
import pytest

from rankmap.cli import main
from rankmap.solver import InvalidArgumentError, SolveOptions, evaluate, parallel_config, solve
from rankmap.solver.fabric.cluster import cluster_from_graph
from rankmap.solver.formats.graphfile import node_link_text
from rankmap.solver.launch.placement import launcher_device_order, launcher_host_order, natural_key, parse_host_list
from rankmap.solver.launch.files import emit_files, launch_files, torchrun_launchable
from rankmap.solver.results import HostPlacement

from service_helpers import live_server

TRAFFIC = {"tp": 4e9, "dp": 1e9, "pp": 1e8}
LEAF = {"host01": "leafA", "host03": "leafA", "host02": "leafB", "host04": "leafB"}


def fragmented(hosts=("host01", "host03", "host02", "host04"), gpus: int = 8, leaf=None) -> nx.Graph:
    """8 GPUs per host on a 450 GB/s NVSwitch, 400 GB/s host uplink to its leaf, 100 GB/s leaf uplinks."""
    leaf = leaf or LEAF
    g = nx.Graph()
    for h in hosts:
        sw = f"{h}-nvsw"
        g.add_node(sw, kind="nvswitch")
        for i in range(gpus):
            g.add_node(f"{h}-gpu{i}", kind="gpu", host=h, local_index=i)
            g.add_edge(f"{h}-gpu{i}", sw, bandwidth=450.0)
        g.add_node(leaf[h], kind="switch")
        g.add_edge(sw, leaf[h], bandwidth=400.0)
    g.add_node("spine", kind="switch")
    for lf in sorted(set(leaf.values())):
        g.add_edge(lf, "spine", bandwidth=100.0)
    return g


CFG = parallel_config(world_size=32, tp=8, pp=2)


def host_of(device: str) -> str:
    return device.split("-gpu")[0]


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def assert_bad(capsys, needle, *argv):
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == "" and err.count("\n") == 1 and needle in err, err


# ----------------------------------------------------------------------------- launcher order


def test_natural_sort_and_slurm_order():
    names = ["node10", "node2", "node1", "gpu-b1", "gpu-a10", "gpu-a2", "node01"]
    assert sorted(names, key=natural_key) == ["gpu-a2", "gpu-a10", "gpu-b1", "node1", "node01", "node2", "node10"]
    assert sorted(["rack2-n10", "rack10-n1", "rack2-n9"], key=natural_key) == ["rack2-n9", "rack2-n10", "rack10-n1"]


def test_launcher_device_order_sorted_listed_and_given():
    c = cluster_from_graph(fragmented(gpus=2))
    assert c.hosts == ("host01", "host03", "host02", "host04")
    sorted_dev = launcher_device_order(c, "sorted")
    assert [c.devices[i] for i in sorted_dev] == [f"host0{h}-gpu{i}" for h in (1, 2, 3, 4) for i in (0, 1)]
    assert launcher_device_order(c, "listed").tolist() == list(range(8))
    given = launcher_device_order(c, ("host04", "host03", "host02", "host01"))
    assert [c.devices[i] for i in given] == [f"host0{h}-gpu{i}" for h in (4, 3, 2, 1) for i in (0, 1)]
    # an excluded host may be named; GPUs go by local_index, not by graph order
    assert launcher_host_order(c, ("gone", "host04", "host03", "host02", "host01"), skip_hosts=("gone",)).tolist() \
        == [3, 1, 2, 0]


def test_gpus_go_by_local_index_whatever_the_graph_order():
    g = nx.Graph()
    g.add_node("sw", kind="nvswitch")
    for i in (3, 1, 0, 2):
        g.add_node(f"n1g{i}", host="n1", local_index=i)
        g.add_edge(f"n1g{i}", "sw", bandwidth=100.0)
    c = cluster_from_graph(g)
    assert [int(c.local_index[d]) for d in launcher_device_order(c)] == [0, 1, 2, 3]


@pytest.mark.parametrize("order, needle", [
    (("host01", "host02", "host03", "hostX", "host04"), "launch_order host 'hostX' (entry 3) is not a host"),
    (("host01", "host02", "host01", "host03", "host04"), "names host 'host01' twice (entries 0 and 2)"),
    (("host01", "host02", "host03"), "leaves out 1 host(s) of the cluster, first 'host04'"),
    ("random", "launch_order 'random' is not one of sorted, listed"),
])
def test_bad_launch_order_names_the_value(order, needle):
    with pytest.raises(InvalidArgumentError) as err:
        solve(fragmented(gpus=2), parallel_config(world_size=8, tp=2), TRAFFIC, SolveOptions(launch_order=order))
    assert needle in err.value.message and err.value.field == "launch_order"


def test_parse_host_list_reads_hostfiles_and_hostlists():
    text = "# scheduler hostfile\nnode[02-03] \nnode10 slots=8\n\nnode1  # last\n"
    assert parse_host_list(text) == ("node02", "node03", "node10", "node1")
    with pytest.raises(InvalidArgumentError, match="names no host"):
        parse_host_list("# nothing\n")
    # one line per slot (PBS_NODEFILE, a per-task SLURM_HOSTFILE): consecutive repeats are one host
    assert parse_host_list("b\nb\nb\na\na\n") == ("b", "a")
    assert parse_host_list("a\nb\na\n") == ("a", "b", "a")  # ... a host coming back is a duplicate


# ----------------------------------------------------------------------------- done when


def test_fragmented_fabric_listed_out_of_name_order_improves_on_the_sorted_launch():
    """The issue's case: the baseline is the sorted launch; improvement > 0, from evaluate()."""
    g = fragmented()
    res = solve(g, CFG, TRAFFIC)
    # baseline = srun/torchrun: sorted host names, GPUs by local index
    assert list(res.baseline.assignment) == [f"host0{h}-gpu{i}" for h in (1, 2, 3, 4) for i in range(8)]
    assert res.baseline.order == "tp-cp-ep-dp-pp"
    # chosen: data-parallel pairs inside a leaf (01+03, 02+04)
    assert [host_of(a) for a in res.assignment[::8]] == ["host01", "host03", "host02", "host04"]
    base = evaluate(g, CFG.with_order(res.baseline.order), res.baseline.assignment, TRAFFIC).total_seconds
    chosen = evaluate(g, CFG.with_order(res.order), res.assignment, TRAFFIC).total_seconds
    assert res.improvement > 0
    assert res.improvement == pytest.approx((base - chosen) / base, rel=1e-12)
    # hand-derived: dp ring of 2, (n-1)/n * 1 GB = 0.5 GB per flow; the baseline puts 16 dp flows on
    # leaf->spine (100 GB/s): 0.08 s; chosen 8 flows per host uplink (400 GB/s): 0.01 s.  pp 0.1 GB
    # flows: baseline 8 per host uplink 0.002 s, chosen 16 across the spine 0.016 s.  The graph has no `link`
    # attributes: these rates as given.  NCCL's latency (Simple), the same in both layouts: every dp and pp
    # group of 2 spans 2 hosts in both (an all-gather / a send across hosts, 8.4 + 14 = 22.4 us each), tp's
    # ring all-reduce of 8 inside a host 8.4 + 14·3.4 = 56 us over 2·7/8·4 GB / 450 GB/s = 15.56 ms
    xh = 22.4e-6
    assert res.baseline.cost.by_class["dp"] == pytest.approx(16 * 0.5e9 / 100e9 + xh)
    assert res.cost.by_class["dp"] == pytest.approx(8 * 0.5e9 / 400e9 + xh)
    assert res.baseline.cost.by_class["pp"] == pytest.approx(8 * 1e8 / 400e9 + xh)
    assert res.cost.by_class["pp"] == pytest.approx(16 * 1e8 / 100e9 + xh)
    tp = res.cost.by_class["tp"]
    assert tp == pytest.approx(2 * 7 / 8 * 4e9 / 450e9 + 56e-6)
    assert res.baseline.cost.by_class["tp"] == pytest.approx(tp)
    assert res.improvement == pytest.approx(1 - (tp + 0.026 + 2 * xh) / (tp + 0.082 + 2 * xh))
    # the SLURM_HOSTFILE reproduces the chosen assignment rank by rank
    hostfile = res.apply["slurm"]["hostfile"]
    assert hostfile == [host_of(a) for a in res.assignment]
    # ... and the GPU of each rank: local rank = position among the host's ranks, CUDA_VISIBLE_DEVICES[local rank]
    cvd = {h.host: h.cuda_visible_devices for h in res.hosts}
    seen: dict[str, int] = {}
    for r, h in enumerate(hostfile):
        local = seen.get(h, 0)
        seen[h] = local + 1
        assert res.assignment[r] == f"{h}-gpu{cvd[h][local]}"


def test_listed_launch_order_is_the_old_baseline_and_nothing_beats_it():
    """With launch_order listed the cluster file's order is the baseline; here it is optimal: returned as is."""
    res = solve(fragmented(), CFG, TRAFFIC, SolveOptions(launch_order="listed"))
    assert res.improvement == 0.0
    assert res.assignment == res.baseline.assignment
    assert res.order == "tp-cp-ep-dp-pp"


def test_given_launch_order_is_the_baseline_and_fixed_mode_uses_it():
    order = ("host04", "host02", "host03", "host01")
    res = solve(fragmented(), CFG, TRAFFIC, SolveOptions(mode="fixed", launch_order=order))
    assert [host_of(a) for a in res.baseline.assignment[::8]] == list(order)
    assert res.assignment == res.baseline.assignment  # fixed: only the order is searched


# ----------------------------------------------------------------------------- launch files


def two_host_placement():
    """n2 runs ranks 0-1 on GPUs 1,0; n10 runs ranks 2-3 on GPUs 0,1 (different local orders)."""
    return (HostPlacement("n2", 0, (1, 0), (0, 1)), HostPlacement("n10", 1, (0, 1), (2, 3)))


def test_launch_files_of_a_two_host_layout():
    f = launch_files(two_host_placement(), 4, ["--use-tp-pp-dp-mapping"])
    assert list(f) == ["rendezvous", "slurm", "torchrun", "mpirun", "kubernetes", "unavailable", "gpus_file"]
    assert f["rendezvous"] == "n2:29500"
    assert f["slurm"]["hostfile"] == ["n2", "n2", "n10", "n10"]
    assert f["slurm"]["command"] == (
        "SLURM_HOSTFILE=rankmap.hostfile srun --distribution=arbitrary --ntasks=4 --nodes=2 bash -c 'export "
        "RANK=$SLURM_PROCID WORLD_SIZE=$SLURM_NTASKS LOCAL_RANK=$SLURM_LOCALID MASTER_ADDR=n2 MASTER_PORT=29500 "
        "CUDA_VISIBLE_DEVICES=$(sed -n \"s/^$SLURMD_NODENAME //p\" rankmap.hostfile.gpus); "
        "exec python pretrain_gpt.py --use-tp-pp-dp-mapping'")
    assert f["gpus_file"] == ["n2 1,0", "n10 0,1"]
    assert f["mpirun"]["rankfile"] == ["rank 0=n2 slot=0", "rank 1=n2 slot=1", "rank 2=n10 slot=0",
                                       "rank 3=n10 slot=1"]
    assert f["mpirun"]["command"].startswith("mpirun -np 4 --rankfile rankmap.rankfile bash -c 'export "
                                             "RANK=$OMPI_COMM_WORLD_RANK ")
    assert f["torchrun"] == [
        {"host": "n2", "node_rank": 0,
         "command": "CUDA_VISIBLE_DEVICES=1,0 torchrun --nnodes 2 --nproc-per-node 2 --node-rank 0 "
                    "--rdzv-backend static --master-addr n2 --master-port 29500 pretrain_gpt.py "
                    "--use-tp-pp-dp-mapping"},
        {"host": "n10", "node_rank": 1,
         "command": "CUDA_VISIBLE_DEVICES=0,1 torchrun --nnodes 2 --nproc-per-node 2 --node-rank 1 "
                    "--rdzv-backend static --master-addr n2 --master-port 29500 pretrain_gpt.py "
                    "--use-tp-pp-dp-mapping"},
    ]
    assert f["kubernetes"]["pod_nodes"] == ["n2", "n10"]
    assert f["kubernetes"]["cuda_visible_devices"] == ["1,0", "0,1"]
    assert "--node-rank $JOB_COMPLETION_INDEX" in f["kubernetes"]["command"]
    assert f["unavailable"] == {}
    # the commands are valid shell words
    assert shlex.split(f["slurm"]["command"])[-1].startswith("export RANK=")


def test_free_layout_is_launched_by_slurm_and_mpirun_not_torchrun():
    """Ranks 0,2 on a and 1,3 on b: srun/mpirun take it rank by rank; torchrun cannot, and says why."""
    hosts = (HostPlacement("a", 0, (0, 1), (0, 2)), HostPlacement("b", 1, (1, 0), (1, 3)))
    f = launch_files(hosts, 4)
    assert f["slurm"]["hostfile"] == ["a", "b", "a", "b"]
    assert f["mpirun"]["rankfile"] == ["rank 0=a slot=0", "rank 1=b slot=0", "rank 2=a slot=1", "rank 3=b slot=1"]
    assert f["torchrun"] == [] and f["kubernetes"]["pod_nodes"] == []
    assert "host a runs ranks 0,2" in f["unavailable"]["torchrun"]
    assert f["unavailable"]["kubernetes"] == f["unavailable"]["torchrun"]
    assert torchrun_launchable(hosts) == f["unavailable"]["torchrun"]
    with pytest.raises(InvalidArgumentError, match="host a: global_ranks are not ascending"):
        launch_files((HostPlacement("a", 0, (0, 1), (2, 0)), HostPlacement("b", 1, (1, 0), (1, 3))), 4)
    with pytest.raises(InvalidArgumentError, match="rank 3 is on no host"):
        launch_files((HostPlacement("a", 0, (0, 1), (0, 2)), HostPlacement("b", 1, (1,), (1,))), 4)
    with pytest.raises(InvalidArgumentError, match="--emit torchrun: host a runs ranks 0,2"):
        emit_files("torchrun", f, hosts, 4, "x.sh")
    # the table says so in full, within 160 columns
    import dataclasses

    from rankmap.solve_report import solve_table
    from rankmap.solver.launch.placement import apply_instructions

    g = fragmented(("a", "b"), 2, leaf={"a": "leafA", "b": "leafB"})
    res = solve(g, parallel_config(world_size=4, tp=2), TRAFFIC)
    res = dataclasses.replace(res, hosts=hosts, apply=apply_instructions(res.config, hosts))
    text = solve_table(res, "torchrun")
    assert "launch (torchrun): not possible: host a runs ranks 0,2" in text and "apply.mpirun (rankfile)" in text
    assert max(map(len, text.splitlines())) <= 160


def test_free_mode_result_gets_the_files():
    g = fragmented(gpus=2)
    res = solve(g, parallel_config(world_size=8, tp=2, pp=2), TRAFFIC, SolveOptions(mode="free"))
    assert res.apply["slurm"]["hostfile"] == [host_of(a) for a in res.assignment]
    lines = res.apply["mpirun"]["rankfile"]
    assert [ln.split("=")[1].split()[0] for ln in lines] == [host_of(a) for a in res.assignment]
    assert bool(res.apply["torchrun"]) == (not res.apply["unavailable"])


def test_emit_files_texts(tmp_path):
    hosts = two_host_placement()
    f = launch_files(hosts, 4)
    out = emit_files("slurm-hostfile", f, hosts, 4, "job.hosts")
    assert out == {"job.hosts": "n2\nn2\nn10\nn10\n", "job.hosts.gpus": "n2 1,0\nn10 0,1\n"}
    script = emit_files("torchrun", f, hosts, 4, "run.sh")["run.sh"]
    assert '  n10) CUDA_VISIBLE_DEVICES=0,1 exec torchrun --nnodes 2 --nproc-per-node 2 --node-rank 1 ' in script
    assert emit_files("kubernetes", f, hosts, 4, "pods")["pods"] == "n2\nn10\n"
    assert emit_files("rankfile", f, hosts, 4, "rf")["rf"].splitlines()[2] == "rank 2=n10 slot=0"
    with pytest.raises(InvalidArgumentError, match="--emit 'hostfile' is not one of slurm-hostfile"):
        emit_files("hostfile", f, hosts, 4, "x")


# ----------------------------------------------------------------------------- command line


@pytest.fixture
def frag_file(tmp_path):
    path = tmp_path / "frag.json"
    path.write_text(node_link_text(fragmented()))
    return path


def test_cli_emit_slurm_hostfile_and_table(capsys, tmp_path, frag_file):
    hf = tmp_path / "job.hostfile"
    args = [str(frag_file), "--tp", "8", "--pp", "2", "--traffic", "tp=4e9,dp=1e9,pp=1e8"]
    code, out, err = run(capsys, "solve", *args, "--emit", "slurm-hostfile", "-o", str(hf))
    assert code == 0, err
    doc = json.loads(out)
    assert doc["written"] == [str(hf)]
    assert hf.read_text().splitlines() == [host_of(a) for a in doc["assignment"]]
    assert doc["improvement"] > 0.5
    code, out, err = run(capsys, "solve", *args, "--format", "table", "--emit", "slurm-hostfile", "-o", str(hf))
    assert code == 0, err
    assert f"wrote {hf} (32 lines)" in out
    assert f"SLURM_HOSTFILE={hf} srun --distribution=arbitrary --ntasks=32" in out
    assert "host01 x8, host03 x8, host02 x8, host04 x8 (32 lines, 4 hosts)" in out
    # as derived in the test above: baseline tp 15.556 ms + 56 us, dp 80 ms + 22.4 us, pp 2 ms + 22.4 us =
    # 97.656 ms; chosen 15.556 ms + 56 us, dp 10 ms + 22.4 us, pp 16 ms + 22.4 us = 41.656 ms;
    # 1 - 41.656 / 97.656 = 56 / 97.656 = 57.34% (57.4% before NCCL's 100.8 us of latency in each)
    assert "improvement 57.3% over the baseline (default order, hosts in sorted name order" in out
    assert max(len(line) for line in out.splitlines()) <= 160


def test_cli_launch_order_file_and_job_key(capsys, tmp_path, frag_file):
    lo = tmp_path / "hosts.txt"
    lo.write_text("host01\nhost01\nhost03\nhost02 slots=8\nhost04\n")  # one line per slot is fine
    base = [str(frag_file), "--tp", "8", "--pp", "2", "--traffic", "tp=4e9,dp=1e9,pp=1e8"]
    code, out, err = run(capsys, "solve", *base, "--launch-order", str(lo))
    assert code == 0, err
    assert json.loads(out)["improvement"] == 0.0
    job = tmp_path / "job.yaml"
    job.write_text(f"cluster: {frag_file.name}\ntp: 8\npp: 2\ntraffic: {{tp: 4e9, dp: 1e9, pp: 1e8}}\n"
                   "launch_order: hosts.txt\n")
    code, out, err = run(capsys, "solve", str(job))
    assert code == 0 and json.loads(out)["improvement"] == 0.0, err
    job.write_text(f"cluster: {frag_file.name}\ntp: 8\npp: 2\ntraffic: {{tp: 4e9, dp: 1e9, pp: 1e8}}\n"
                   "launch_order: [host04, host03, host02, host01]\n")
    code, out, err = run(capsys, "solve", str(job))
    assert code == 0, err
    assert [host_of(a) for a in json.loads(out)["baseline"]["assignment"][::8]] == \
        ["host04", "host03", "host02", "host01"]


@pytest.mark.parametrize("hosts, extra, needle", [
    ("host01\nhost02\nhostX\nhost03\nhost04\n", (), "launch_order host 'hostX' (entry 2) is not a host"),
    ("host01\nhost02\nhost03\n", (), "leaves out 1 host(s) of the cluster, first 'host04'"),
    ("host01\nhost02\nhost03\nhost02\nhost04\n", (), "names host 'host02' twice (entries 1 and 3)"),
    ("host01\n", ("--emit", "hostfile", "-o", "x"), "--emit 'hostfile' is not one of slurm-hostfile, torchrun"),
    ("host01\n", ("--emit", "rankfile"), "--emit rankfile needs -o FILE"),
    ("host01\n", ("-o", "x"), "-o x needs --emit"),
])
def test_cli_bad_launch_input_is_exit_2_one_line(capsys, tmp_path, frag_file, hosts, extra, needle):
    lo = tmp_path / "hosts.txt"
    lo.write_text(hosts)
    argv = ["solve", str(frag_file), "--tp", "8", "--launch-order", str(lo), *extra]
    assert_bad(capsys, needle, *argv)


def test_cli_missing_launch_order_file(capsys, frag_file):
    assert_bad(capsys, "launch order 'nope.txt' is neither sorted, listed nor an existing host list file",
               "solve", str(frag_file), "--tp", "8", "--launch-order", "nope.txt")


def test_table_stays_narrow_on_a_large_cluster_with_long_names():
    from rankmap.solve_report import solve_table
    from rankmap.solver import fat_tree_cluster

    names = [f"very-long-rack-name-{i // 32:03d}-gpu-node-{i:05d}.cluster.example.com" for i in range(256)]
    g = fat_tree_cluster(256, 8, host_names=names)
    res = solve(g, parallel_config(world_size=2048, tp=8, pp=4, cp=2), TRAFFIC, SolveOptions(time_limit_seconds=3))
    for launcher in ("slurm", "torchrun", "mpirun", "kubernetes"):
        text = solve_table(res, launcher)
        assert max(len(line) for line in text.splitlines()) <= 160, launcher
        assert len(text.splitlines()) < 90
    assert "more hosts (node ranks 15..254)" in solve_table(res)


# ----------------------------------------------------------------------------- gRPC


server = live_server(workers=1, max_queued=4)


def _comparable(result) -> dict:
    d = result.to_dict()
    d.pop("solve_seconds")
    return json.loads(json.dumps(d))


def test_grpc_launch_order_and_typed_launch_files(server):
    import grpc

    from rankmap.client import RankmapClient
    from rankmap import wire
    from rankmap.v1 import rankmap_pb2_grpc

    g = fragmented()
    order = ("host04", "host02", "host03", "host01")
    local = solve(g, CFG, TRAFFIC, SolveOptions(launch_order=order))
    with RankmapClient(server.address, timeout=60) as c:
        remote = c.solve(g, tp=8, pp=2, traffic=TRAFFIC, launch_order=list(order))
    assert _comparable(remote) == _comparable(local)
    assert list(remote.apply) == list(local.apply)
    req = wire.solve_request_from_config(g, CFG, TRAFFIC, SolveOptions(launch_order=order))
    assert list(req.launch_order.hosts) == list(order)
    with grpc.insecure_channel(server.address) as ch:
        msg = rankmap_pb2_grpc.RankmapServiceStub(ch).Solve(req, timeout=60)
    assert list(msg.apply.slurm.hostfile) == [host_of(a) for a in local.assignment]
    assert [(t.host, t.node_rank) for t in msg.apply.torchrun] == [(h.host, h.node_rank) for h in local.hosts]
    assert list(msg.apply.kubernetes.pod_nodes) == [h.host for h in local.hosts]
    assert len(msg.apply.mpirun.rankfile) == 32 and msg.apply.rendezvous == f"{local.hosts[0].host}:29500"
    assert {e.key for e in msg.apply.entries} == {"order", "megatron_args", "note", "hostfile"}


@pytest.mark.parametrize("hosts, policy, field, needle", [
    (("host01", "hostX", "host02", "host03", "host04"), 0, "launch_order.hosts", "launch_order host 'hostX'"),
    (("host01", "host01", "host02", "host03", "host04"), 0, "launch_order.hosts", "names host 'host01' twice"),
    (("host01",), 0, "launch_order.hosts", "leaves out 3 host(s)"),
    (("host01", "host02", "host03", "host04"), 2, "launch_order.policy", "gives both policy"),
    ((), 7, "launch_order.policy", "launch_order.policy 7 is not a LaunchOrderPolicy"),
])
def test_grpc_bad_launch_order_is_invalid_argument_with_field(server, hosts, policy, field, needle):
    import grpc
    from google.rpc import error_details_pb2
    from grpc_status import rpc_status

    from rankmap import wire
    from rankmap.v1 import rankmap_pb2_grpc

    req = wire.solve_request(fragmented(), tp=8, pp=2, traffic=TRAFFIC)
    req.launch_order.hosts.extend(hosts)
    req.launch_order.policy = policy
    with grpc.insecure_channel(server.address) as ch:
        with pytest.raises(grpc.RpcError) as err:
            rankmap_pb2_grpc.RankmapServiceStub(ch).Solve(req, timeout=30)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    status = rpc_status.from_call(err.value)
    br = error_details_pb2.BadRequest()
    for d in status.details:
        if d.Is(error_details_pb2.BadRequest.DESCRIPTOR):
            d.Unpack(br)
    assert br.field_violations[0].field == field
    assert needle in br.field_violations[0].description


def test_cli_server_launch_order_and_emit(server, capsys, tmp_path, frag_file):
    lo = tmp_path / "hosts"
    lo.write_text("host0[1-4]\n")  # a hostlist expression: the sorted order, given explicitly
    rf = tmp_path / "job.rankfile"
    argv = ["solve", str(frag_file), "--tp", "8", "--pp", "2", "--traffic", "tp=4e9,dp=1e9,pp=1e8",
            "--launch-order", str(lo), "--emit", "rankfile", "-o", str(rf)]
    code, out, err = run(capsys, *argv, "--server", server.address)
    assert code == 0, err
    remote = json.loads(out)
    code, out, err = run(capsys, *argv)
    local = json.loads(out)
    for d in (remote, local):
        d.pop("solve_seconds")
    assert remote == local
    assert remote["improvement"] > 0.5
    lines = rf.read_text().splitlines()
    assert lines == [f"rank {r}={host_of(a)} slot={r % 8}" for r, a in enumerate(local["assignment"])]
    assert local["apply"]["mpirun"]["command"].startswith(f"mpirun -np 32 --rankfile {rf} ")


def test_the_srun_and_mpirun_task_commands_run_in_a_shell(tmp_path):
    """Run the task part of the commands with bash, as srun/mpirun would on host n10 (fake python, hostname)."""
    import os
    import shutil
    import subprocess

    bash = shutil.which("bash")
    if bash is None:
        pytest.skip("no bash")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python").write_text('#!/bin/sh\necho "$CUDA_VISIBLE_DEVICES $RANK $WORLD_SIZE $LOCAL_RANK '
                                    '$MASTER_ADDR:$MASTER_PORT $*"\n')
    (bin_dir / "hostname").write_text("#!/bin/sh\necho n10\n")
    for f in bin_dir.iterdir():
        f.chmod(0o755)
    hosts = two_host_placement()
    f = launch_files(hosts, 4, ["--use-tp-pp-dp-mapping"])
    for kind, path in (("slurm-hostfile", "rankmap.hostfile"), ("rankfile", "rankmap.rankfile")):
        for name, text in emit_files(kind, f, hosts, 4, path).items():
            (tmp_path / name).write_text(text)
    env = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "SLURMD_NODENAME": "n10", "SLURM_PROCID": "3",
           "SLURM_NTASKS": "4", "SLURM_LOCALID": "1", "OMPI_COMM_WORLD_RANK": "3", "OMPI_COMM_WORLD_SIZE": "4",
           "OMPI_COMM_WORLD_LOCAL_RANK": "1"}
    for command in (f["slurm"]["command"], f["mpirun"]["command"]):
        inner = shlex.split(command)[-1]  # the bash -c '...' argument srun / mpirun starts per task
        out = subprocess.run([bash, "-c", inner], cwd=tmp_path, env=env, capture_output=True, text=True, check=True)
        assert out.stdout == "0,1 3 4 1 n2:29500 pretrain_gpt.py --use-tp-pp-dp-mapping\n", command


def test_the_torchrun_script_starts_its_hosts_node_rank(tmp_path):
    import os
    import subprocess

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "torchrun").write_text('#!/bin/sh\necho "$CUDA_VISIBLE_DEVICES $*"\n')
    (bin_dir / "hostname").write_text("#!/bin/sh\necho n10\n")
    for f in bin_dir.iterdir():
        f.chmod(0o755)
    hosts = two_host_placement()
    script = emit_files("torchrun", launch_files(hosts, 4), hosts, 4, "run.sh")["run.sh"]
    (tmp_path / "run.sh").write_text(script)
    env = {"PATH": f"{bin_dir}:{os.environ['PATH']}"}
    out = subprocess.run(["sh", "run.sh"], cwd=tmp_path, env=env, capture_output=True, text=True, check=True)
    assert out.stdout == ("0,1 --nnodes 2 --nproc-per-node 2 --node-rank 1 --rdzv-backend static "
                          "--master-addr n2 --master-port 29500 pretrain_gpt.py\n")
    (bin_dir / "hostname").write_text("#!/bin/sh\necho other\n")
    bad = subprocess.run(["sh", "run.sh"], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert bad.returncode == 1 and "host other is not in this layout" in bad.stderr


def test_batch_entries_take_launch_order(capsys, tmp_path, frag_file):
    """Batch entries share the job model: launch_order as a list, a file relative to the list, or bad (one entry)."""
    (tmp_path / "order.txt").write_text("host01\nhost03\nhost02\nhost04\n")
    common = f"cluster: {frag_file.name}, tp: 8, pp: 2, traffic: {{tp: 4e9, dp: 1e9, pp: 1e8}}, time_limit: 5"
    (tmp_path / "list.yaml").write_text(
        f"- {{name: sorted, {common}}}\n"
        f"- {{name: file, {common}, launch_order: order.txt}}\n"
        f"- {{name: given, {common}, launch_order: [host04, host03, host02, host01]}}\n"
        f"- {{name: bad, {common}, launch_order: [host01, host02]}}\n"
    )
    code = main(["batch", str(tmp_path / "list.yaml"), "--workers", "1", "--quiet"])
    out, _ = capsys.readouterr()
    docs = {d["name"]: d for d in (json.loads(line) for line in out.splitlines() if line.strip())}
    assert code == 1
    assert docs["sorted"]["result"]["improvement"] > 0.5
    assert docs["file"]["result"]["improvement"] == 0.0
    assert [host_of(a) for a in docs["given"]["result"]["baseline"]["assignment"][::8]] == \
        ["host04", "host03", "host02", "host01"]
    assert not docs["bad"]["ok"] and docs["bad"]["error"]["field"] == "launch_order"
    assert "leaves out 2 host(s)" in docs["bad"]["error"]["message"]


@pytest.mark.parametrize("gpus, hosts", [(2, ("n10", "n2")), (8, ("n10", "n2", "n3", "n1"))])
def test_when_nothing_beats_the_sorted_launch_it_is_returned(gpus, hosts):
    """DESIGN §5 tie rule with the new baseline: a symmetric fabric listed out of order gives the sorted launch."""
    g = fragmented(hosts, gpus, leaf={h: "leaf" for h in hosts})
    cfg = parallel_config(world_size=gpus * len(hosts), tp=gpus)
    res = solve(g, cfg, TRAFFIC, SolveOptions(time_limit_seconds=5))
    assert res.improvement == 0.0
    assert res.assignment == res.baseline.assignment
    assert [h.host for h in res.hosts] == sorted(hosts, key=natural_key)


def test_host_names_a_shell_would_run_get_no_launch_files(capsys, tmp_path):
    """A host named ``$(touch PWN)`` (or with a space or newline) would run in the pasted srun /
    mpirun / torchrun commands or break the hostfile's one-host-per-line format: the launch files
    are withheld with the reason, --emit refuses, and the solve itself still answers."""
    import networkx as nx

    from rankmap.solver import SolveOptions, parallel_config, solve

    bad = f"$(touch {tmp_path}/PWN)"
    g = nx.Graph()
    for h in (bad, "n2"):
        for i in range(2):
            g.add_node(f"{h}/g{i}", host=h, local_index=i)
            g.add_edge(f"{h}/g{i}", f"{h}/sw", bandwidth=300)
        g.nodes[f"{h}/sw"]["kind"] = "nvswitch"
        g.add_edge(f"{h}/sw", "leaf", bandwidth=50)
    g.nodes["leaf"]["kind"] = "switch"
    res = solve(g, parallel_config(4, tp=2), {"tp": 1e9, "dp": 1e8}, SolveOptions(time_limit_seconds=2))
    assert res.apply["slurm"]["command"] == "" and res.apply["slurm"]["hostfile"] == []
    assert res.apply["torchrun"] == [] and res.apply["mpirun"]["rankfile"] == []
    assert "cannot carry" in res.apply["unavailable"]["slurm"]
    path = tmp_path / "c.json"
    path.write_text(json.dumps(nx.node_link_data(g, edges="edges")))
    code, out, err = run(capsys, "solve", str(path), "--tp", "2", "--traffic", "tp=1e9", "--emit", "torchrun",
                         "-o", str(tmp_path / "run.sh"))
    assert code == 2 and out == "" and "cannot carry" in err
    assert not (tmp_path / "PWN").exists() and not (tmp_path / "run.sh").exists()
    code, out, err = run(capsys, "solve", str(path), "--tp", "2", "--emit", "slurm-hostfile", "-o", "a b;id")
    assert code == 2 and "output path 'a b;id'" in err
