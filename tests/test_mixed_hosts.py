"""Launcher mode on hosts of several sizes (issue 27 item 2): per-host --nproc-per-node, host_type constraint."""

from __future__ import annotations

import json

import networkx as nx
import numpy as np
import pytest

from cli_helpers import run
from rankmap.solver import solve
from rankmap.solver.errors import InfeasibleError
from rankmap.solver.fabric.builders import fat_tree_cluster
from rankmap.solver.fabric.cluster import cluster_from_graph
from rankmap.solver.megatron.catalogue import megatron_groups
from rankmap.solver.megatron.config import ParallelSizes
from rankmap.solver.search.exhaustive import enumerate_layouts
from rankmap.solver.types import SolveOptions


def eight_four_eight() -> nx.Graph:
    """Hosts n1 and n3 with 8 H100-like GPUs (NVSwitch, a rail NIC per GPU), n2 with 4 (its GPUs 4-7 removed)."""
    g = fat_tree_cluster(3, 8, host_names=["n1", "n2", "n3"])
    g.remove_nodes_from([f"n2/gpu{i}" for i in range(4, 8)] + [f"n2/nic{i}" for i in range(4, 8)])
    return g


def _blocks_ok(result, cluster) -> None:
    """Every host runs one contiguous block of as many ranks as it has GPUs, in node-rank order."""
    nxt = 0
    sizes = dict(zip(cluster.hosts, cluster.gpus_per_host.tolist()))
    for h in sorted(result.hosts, key=lambda h: h.node_rank):
        assert list(h.global_ranks) == list(range(nxt, nxt + sizes[h.host]))
        nxt += sizes[h.host]
    assert nxt == result.config.world_size


def test_two_eights_and_a_four_with_tp4():
    g = eight_four_eight()
    cfg = ParallelSizes(world_size=20, tp=4).to_config("tp-cp-ep-dp-pp")
    r = solve(g, cfg, {"tp": 4e9, "dp": 1e9}, SolveOptions(time_limit_seconds=5))
    cl = cluster_from_graph(g)
    # baseline by hand: torchrun's node_rank order = sorted host names n1, n2, n3, each host's GPUs filled
    # in CUDA order: ranks 0-7 -> n1 GPUs 0-7, ranks 8-11 -> n2 GPUs 0-3, ranks 12-19 -> n3 GPUs 0-7
    assert r.baseline.assignment == tuple([f"n1/gpu{i}" for i in range(8)] + [f"n2/gpu{i}" for i in range(4)]
                                          + [f"n3/gpu{i}" for i in range(8)])
    _blocks_ok(r, cl)
    assert r.layout.cost.total_seconds <= r.baseline.cost.total_seconds * (1 + 1e-9)
    # every TP group (4 consecutive ranks) on one host: all host blocks are multiples of 4
    host = {d: d.split("/")[0] for d in r.assignment}
    for grp in megatron_groups(r.config)["TENSOR_MODEL_PARALLEL_GROUP"]:
        assert len({host[r.assignment[k]] for k in grp}) == 1
    # torchrun: one command per host with that host's --nproc-per-node
    nproc = {t["host"]: int(t["command"].split("--nproc-per-node ")[1].split()[0]) for t in r.apply["torchrun"]}
    assert nproc == {"n1": 8, "n2": 4, "n3": 8}
    assert not r.apply["unavailable"]
    # Slurm hostfile: one line per rank, 8 + 4 + 8; rankfile slots are local ranks
    lines = r.apply["slurm"]["hostfile"]
    assert len(lines) == 20 and {h: lines.count(h) for h in set(lines)} == {"n1": 8, "n2": 4, "n3": 8}
    n2_slots = [int(x.split("slot=")[1]) for x in r.apply["mpirun"]["rankfile"] if "=n2 " in x]
    assert n2_slots == [0, 1, 2, 3]
    assert r.apply["kubernetes"]["pod_nodes"] == [h.host for h in sorted(r.hosts, key=lambda h: h.node_rank)]


def test_tp_never_straddles_hosts_of_different_sizes():
    # hosts a (3 GPUs) and b (1 GPU), tp 2, world 4: every launcher layout ([a a a b] or [b a a a]) puts one
    # TP group on a and b, hosts of different sizes: no layout keeps tp within host_type
    g = nx.Graph()
    g.add_node("sw", kind="switch")
    for h, n in (("a", 3), ("b", 1)):
        g.add_node(f"{h}/nvs", kind="nvswitch", host=h)
        g.add_edge(f"{h}/nvs", "sw", bandwidth=50.0)
        for i in range(n):
            g.add_node(f"{h}/gpu{i}", kind="gpu", host=h, local_index=i)
            g.add_edge(f"{h}/gpu{i}", f"{h}/nvs", bandwidth=300.0)
    cfg = ParallelSizes(world_size=4, tp=2).to_config("tp-cp-ep-dp-pp")
    with pytest.raises(InfeasibleError, match="tp within host_type.*hosts of 3/1 GPUs keeps each TP group.*mode free"):
        solve(g, cfg, {"tp": 1e9}, SolveOptions(time_limit_seconds=2))
    # free mode has no blocks: it places the two TP pairs inside a
    r = solve(g, cfg, {"tp": 1e9}, SolveOptions(mode="free", time_limit_seconds=2))
    assert r.status == "OPTIMAL"


def test_exhaustive_enumerates_unequal_blocks():
    # hosts of 2, 1 and 1 GPUs: 3! host orders x 2! local orders of the 2-GPU host = 12 launcher layouts
    g = nx.Graph()
    g.add_node("sw", kind="switch")
    for h, n in (("a", 2), ("b", 1), ("c", 1)):
        for i in range(n):
            g.add_node(f"{h}/gpu{i}", kind="gpu", host=h, local_index=i)
            g.add_edge(f"{h}/gpu{i}", "sw", bandwidth=10.0)
    lay = enumerate_layouts(cluster_from_graph(g), "launcher")
    assert lay.shape == (12, 4) and len({row.tobytes() for row in lay}) == 12
    cl = cluster_from_graph(g)
    for row in lay:  # a's two GPUs always hold two consecutive ranks
        pos = np.flatnonzero(cl.host_of[row] == cl.hosts.index("a"))
        assert pos[1] == pos[0] + 1


def test_world_size_from_mixed_whole_hosts():
    # world 12 on n1 (8), n2 (4), n3 (8): not a multiple of 8; the first hosts in launch order that add up
    # to 12 are n1 + n2
    g = eight_four_eight()
    cfg = ParallelSizes(world_size=12, tp=4).to_config("tp-cp-ep-dp-pp")
    r = solve(g, cfg, {"tp": 1e9}, SolveOptions(time_limit_seconds=4))
    assert sorted(h.host for h in r.hosts) == ["n1", "n2"]
    assert sorted(len(h.cuda_visible_devices) for h in r.hosts) == [4, 8]


def test_cli_emits_torchrun_with_per_host_nproc(tmp_path, capsys):
    path = tmp_path / "c.json"
    path.write_text(json.dumps(nx.node_link_data(eight_four_eight(), edges="edges")))
    script = tmp_path / "run.sh"
    code, out, err = run(capsys, "solve", path, "--tp", "4", "--traffic", "tp=4e9,dp=1e9", "--time-limit", "4",
                         "--emit", "torchrun", "-o", script, "--format", "table")
    assert code == 0, err
    text = script.read_text()
    assert "n2) " in text and "--nproc-per-node 4 " in text and text.count("--nproc-per-node 8 ") == 2


# --------------------------------------------------------------------------- several host topologies

REAL = str(__import__("pathlib").Path(__file__).parent / "data" / "real-inputs")
A100 = f"{REAL}/nvsmi-topo_hgx-a100-80gb-8gpu-8nic-roce_deepep-13.txt"
A30 = f"{REAL}/nvsmi-topo_a30-pcie-4gpu-nvlink-bridge-pairs-1nic_vllm-29070.txt"


def test_cluster_with_two_host_topologies(tmp_path, capsys):
    code, out, err = run(capsys, "cluster", "--host-topology", A100, "--host-topology", f"n2={A30}",
                         "--nodelist", "n[1-3]", "--gpu", "a100")
    assert code == 0, err
    g = nx.node_link_graph(json.loads(out), edges="edges")
    gpus = {h: sorted(n for n, d in g.nodes(data=True) if d.get("kind", "gpu") == "gpu" and d["host"] == h)
            for h in ("n1", "n2", "n3")}
    assert [len(gpus[h]) for h in ("n1", "n2", "n3")] == [8, 4, 8]
    types = {g.nodes[gpus[h][0]]["host_type"] for h in ("n1", "n3")}
    assert types == {A100.rsplit("/", 1)[1]} and g.nodes[gpus["n2"][0]]["host_type"] == A30.rsplit("/", 1)[1]
    # n2's one fabric NIC (the A30 file's mlx5_0; nvidia-smi gives no port speed, so the NIC rate of --gpu a100,
    # 25 GB/s = 200 Gb/s, as for the default hosts) is linked to the switch the default host's NICs were on
    from rankmap.solver.formats.hosts import load_host_template

    assert load_host_template(A30, gpu="a100").nic_rates() == {"nic:mlx5_0": 25.0}
    fabric = [(u, v, d) for u, v, d in g.edges(data=True) if d.get("link") == "net" and "n2/" in u + v]
    assert len(fabric) == 1 and fabric[0][2]["bandwidth"] == pytest.approx(25.0)
    assert {u if u.startswith("switch") else v for u, v, _d in fabric} == {"switch:fabric"}
    assert g.graph["name"].startswith("3 hosts (2 x 8, 1 x 4 GPUs) = 20 GPUs")
    # the constraint level sees two host types
    cl = cluster_from_graph(g)
    assert np.unique(cl.level_labels("host_type")).size == 2


@pytest.mark.parametrize("args,needle", [
    (["--host-topology", f"n2={A30}", "--nodelist", "n[1-3]"], "host 'n1' has no host topology"),
    (["--host-topology", A100, "--host-topology", f"n9={A30}", "--nodelist", "n[1-3]"], "host 'n9' is not in"),
    (["--host-topology", A100, "--host-topology", f"n2={A30}", "--host-topology", f"n[2-3]={A30}",
      "--nodelist", "n[1-3]"], "host 'n2' is listed for"),
    (["--host-topology", A100, "--host-topology", A30, "--nodelist", "n[1-3]"], "a second default topology"),
])
def test_host_topology_errors(capsys, args, needle):
    from cli_helpers import bad_input

    bad_input(capsys, "cluster", "--gpu", "a100", *args, needle=needle)


def test_excluded_gpu_host_runs_with_fewer_ranks():
    # two hosts of 4 GPUs, node000/gpu2 excluded: 7 usable GPUs; launcher mode runs node000 with
    # --nproc-per-node 3 on CUDA devices 0,1,3 (the baseline fills them in CUDA order: ranks 0-2 on
    # node000 GPUs 0,1,3, ranks 3-6 on node001 GPUs 0-3)
    g = fat_tree_cluster(2, 4)
    cfg = ParallelSizes(world_size=7).to_config("tp-cp-ep-dp-pp")
    r = solve(g, cfg, {"dp": 1e9}, SolveOptions(time_limit_seconds=3, exclude_devices=("node000/gpu2",)))
    assert r.baseline.assignment == ("node000/gpu0", "node000/gpu1", "node000/gpu3",
                                     "node001/gpu0", "node001/gpu1", "node001/gpu2", "node001/gpu3")
    cmds = {t["host"]: t["command"] for t in r.apply["torchrun"]}
    assert "--nproc-per-node 3 " in cmds["node000"] and "--nproc-per-node 4 " in cmds["node001"]
    assert sorted(next(h for h in r.hosts if h.host == "node000").cuda_visible_devices) == [0, 1, 3]
    assert r.status == "OPTIMAL"  # 7 GPUs: every launcher layout scored
