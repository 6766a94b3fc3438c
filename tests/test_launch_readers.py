"""Issue 26.2: every launch file rankmap writes reads back into the layout it was written for.

Round trips: a layout -> :func:`rankmap.solver.launch.files.emit_files` (what ``rankmap solve --emit``
writes) -> :func:`rankmap.solver.allocation.readers.read_launch_file` -> the same GPU per rank, for
the hostfile, the rankfile, the Kubernetes pod map and the torchrun script, with hosts in a
non-sorted order and GPU orders that differ per host (the GPU file) or not; then through the CLI
(``rankmap solve --emit KIND -o F`` and ``rankmap evaluate --hostfile F`` ... give the cost of
``rankmap evaluate --assignment RESULT.json``).  Bad files: one line naming the file, line and value.
"""

from __future__ import annotations

import json

import networkx as nx
import numpy as np
import pytest

from cli_helpers import bad_input, run
from rankmap.solver import InvalidArgumentError, fat_tree_cluster
from rankmap.solver.allocation.readers import host_gpus, read_gpus_file, read_launch_file
from rankmap.solver.fabric.cluster import cluster_from_graph
from rankmap.solver.launch.files import emit_files, launch_files
from rankmap.solver.launch.placement import host_placements

KINDS = {"slurm-hostfile": "hostfile", "rankfile": "rankfile", "kubernetes": "pod-map", "torchrun": "torchrun"}


@pytest.fixture(scope="module")
def cluster():
    """3 hosts x 4 GPUs (ids host{h}/gpu{i}), NVSwitch hosts under one leaf."""
    return cluster_from_graph(fat_tree_cluster(3, 4, host_names=["host0", "host1", "host2"]))


def _layout(cluster, host_order, cvd_per_host):
    """Launcher layout: host ``host_order[k]`` runs ranks 4k..4k+3, local rank j on CUDA index
    ``cvd_per_host[k][j]``; returns (device index per rank, GPU id per rank)."""
    dev = []
    index = cluster.device_index()
    for h, cvd in zip(host_order, cvd_per_host):
        dev += [index[f"{cluster.hosts[h]}/gpu{i}"] for i in cvd]
    dev = np.array(dev, dtype=np.int64)
    return dev, [cluster.devices[d] for d in dev]


@pytest.mark.parametrize("emit", sorted(KINDS))
@pytest.mark.parametrize("uniform", [True, False])
def test_round_trip_every_launch_file(cluster, tmp_path, emit, uniform):
    # hosts 2, 0, 1 (not sorted); uniform: every host 3,2,1,0; else each host its own order (GPU file)
    cvds = [(3, 2, 1, 0)] * 3 if uniform else [(3, 2, 1, 0), (0, 1, 2, 3), (1, 0, 3, 2)]
    dev, expected = _layout(cluster, [2, 0, 1], cvds)
    hosts = host_placements(cluster, dev)
    path = str(tmp_path / "launch")
    files = emit_files(emit, {}, hosts, 12, path)
    assert (path + ".gpus" in files) == (not uniform and emit != "torchrun")  # torchrun carries each host's list
    gpus_text = files.get(path + ".gpus")
    # a uniform list is in the emitted command, not in a file: given as cuda_visible_devices
    cvd = list(cvds[0]) if uniform and emit != "torchrun" else None
    got = read_launch_file(KINDS[emit], files[path], host_gpus(cluster), source=path, gpus_text=gpus_text,
                           cuda_visible_devices=cvd)
    assert got == expected
    # without the GPU order a hostfile means GPUs by index: rank 0 (host2's local rank 0) on host2/gpu0
    if emit == "slurm-hostfile":
        plain = read_launch_file("hostfile", files[path], host_gpus(cluster))
        assert plain[:4] == ["host2/gpu0", "host2/gpu1", "host2/gpu2", "host2/gpu3"]


def test_free_layout_hostfile_and_rankfile(cluster):
    """A free-mode layout (a host's ranks not contiguous) reads back from the per-rank files; its local
    rank k is the host's k-th lowest rank (SLURM_LOCALID / OMPI_COMM_WORLD_LOCAL_RANK)."""
    rng = np.random.default_rng(7)
    dev = rng.permutation(cluster.num_devices)
    expected = [cluster.devices[d] for d in dev]
    hosts = host_placements(cluster, dev)
    files = launch_files(hosts, 12)
    assert files["unavailable"]["torchrun"]  # not a contiguous layout
    gpus_text = "\n".join(files["gpus_file"]) + "\n"
    table = host_gpus(cluster)
    assert read_launch_file("hostfile", "\n".join(files["slurm"]["hostfile"]), table, gpus_text=gpus_text) == expected
    assert read_launch_file("rankfile", "\n".join(files["mpirun"]["rankfile"]), table, gpus_text=gpus_text) == expected
    # the rankfile's slot binds cores: a user's NUMA edit changes no GPU
    edited = [line.replace("slot=", "slot=1:") for line in files["mpirun"]["rankfile"]]
    assert read_launch_file("rankfile", "\n".join(edited), table, gpus_text=gpus_text) == expected


def test_pod_map_ranks_per_pod(cluster):
    # 2 pods on host1, host0; world size 8 -> 4 ranks each: ranks 0-3 on host1/gpu0-3, 4-7 on host0/gpu0-3
    got = read_launch_file("pod-map", "host1\nhost0\n", host_gpus(cluster), world_size=8)
    assert got == [f"host1/gpu{i}" for i in range(4)] + [f"host0/gpu{i}" for i in range(4)]
    # world size 4 on 2 pods: 2 ranks each, GPUs 0 and 1
    got = read_launch_file("pod-map", "host1\nhost0\n", host_gpus(cluster), world_size=4)
    assert got == ["host1/gpu0", "host1/gpu1", "host0/gpu0", "host0/gpu1"]


def test_gpus_file_lines():
    assert read_gpus_file("a 0,1\n# note\nb 1,0\n") == [("a", [0, 1]), ("b", [1, 0])]
    with pytest.raises(InvalidArgumentError, match="line 1: expected 'HOST GPU,GPU,...'"):
        read_gpus_file("a\n")


@pytest.mark.parametrize("kind, text, message", [
    ("hostfile", "host0\nnodeX\n", "line 2: host 'nodeX' is not a host of the cluster"),
    ("hostfile", "host0 slots=4\n", "line 1: expected one host name per line"),
    ("hostfile", "host0\n" * 5, "host host0 has no GPU of CUDA index 4"),
    ("rankfile", "rank 0=host0 slot=0\nrank 2=host0 slot=1\n", "rank 1 is missing"),
    ("rankfile", "rank 0=host0 slot=0\nrank 0=host1 slot=0\n", "line 2: rank 0 is already on line 1"),
    ("rankfile", "rank zero=host0\n", "line 1: expected 'rank R=HOST slot=S'"),
    ("rankfile", "rank 0=host0 slot=0\nrank 1=host0 slot=abc\n", "line 2: slot 'abc' is not an Open MPI slot"),
    ("rankfile", "rank 0=host0 slot=1:x\n", "line 1: slot '1:x' is not an Open MPI slot"),
    ("pod-map", "host0\nhost0\n", "host host0 is also on line 1"),
    ("torchrun", "#!/bin/sh\necho hi\n", "no 'HOST) ... torchrun ... ;;' line"),
    ("torchrun", "  host0) CUDA_VISIBLE_DEVICES=0,1 exec torchrun --nproc-per-node 2 --node-rank 1 x ;;\n",
     "node rank 0 is missing"),
    ("torchrun", "  host0) CUDA_VISIBLE_DEVICES=0,1 exec torchrun --nnodes 5 --nproc-per-node 2 --node-rank 0 x ;;\n",
     "--nnodes 5 but the script starts 1 nodes"),
])
def test_bad_launch_files_name_the_value(cluster, kind, text, message):
    with pytest.raises(InvalidArgumentError) as err:
        read_launch_file(kind, text, host_gpus(cluster), source="F", world_size=4)
    assert message in err.value.message


# --------------------------------------------------------------------------- the CLI: solve --emit, evaluate


@pytest.fixture(scope="module")
def solved(tmp_path_factory):
    """``rankmap solve`` on 2 HGX A100 hosts (tp 4, pp 2), each launch file written with --emit."""
    from pathlib import Path

    from rankmap.cli import main

    d = tmp_path_factory.mktemp("emit")
    cluster = str(Path(__file__).resolve().parents[1] / "examples" / "clusters" / "hgx-a100-2nodes.json")
    out = {}
    for emit in KINDS:
        path = d / f"{emit}.txt"
        res = d / f"{emit}.json"
        import contextlib
        import io

        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            code = main(["solve", cluster, "--tp", "4", "--pp", "2", "--traffic", "tp=4e9,pp=8e9,dp=1e8",
                         "--orders", "megatron-cli", "--time-limit", "5", "--emit", emit, "-o", str(path)])
        assert code == 0
        res.write_text(buf.getvalue())
        out[emit] = (path, res)
    return cluster, out


@pytest.mark.parametrize("emit, flag", [("slurm-hostfile", "--hostfile"), ("rankfile", "--rankfile"),
                                        ("kubernetes", "--pod-map"), ("torchrun", "--torchrun-script")])
def test_evaluate_reads_each_emitted_file(capsys, solved, emit, flag):
    cluster, files = solved
    path, res = files[emit]
    doc = json.loads(res.read_text())
    base = ["--tp", "4", "--pp", "2", "--traffic", "tp=4e9,pp=8e9,dp=1e8", "--order", doc["order"]]
    code, out, err = run(capsys, "evaluate", cluster, "--assignment", res, *base)
    assert code == 0, err
    want = json.loads(out)["cost"]
    # the uniform CUDA_VISIBLE_DEVICES of the emitted commands (identity here: the example's hosts use 0..7)
    code, out, err = run(capsys, "evaluate", cluster, flag, path, *base)
    assert code == 0, err
    assert json.loads(out)["cost"] == want
    assert json.loads(out)["cost"]["total_seconds"] == doc["cost"]["total_seconds"]


def test_evaluate_hostfile_with_wrong_number_of_lines(capsys, solved, tmp_path):
    cluster, files = solved
    lines = files["slurm-hostfile"][0].read_text().splitlines()
    short = tmp_path / "short.hostfile"
    short.write_text("\n".join(lines[:12]) + "\n")  # 12 of the 16 ranks
    bad_input(capsys, "evaluate", cluster, "--hostfile", short, "--tp", "4", "--pp", "2",
              needle=f"hostfile {short} has 12 lines (one per global rank) but the cluster has 16 GPUs")
    bad_input(capsys, "evaluate", cluster, "--hostfile", short, "--tp", "4", "--pp", "2", "--world-size", "16",
              needle=f"hostfile {short} has 12 lines (one per global rank) but --world-size is 16")
    unknown = tmp_path / "unknown.hostfile"
    unknown.write_text("\n".join(lines[:15] + ["gpu-node-99"]) + "\n")
    bad_input(capsys, "evaluate", cluster, "--hostfile", unknown, "--tp", "4", "--pp", "2",
              needle="line 16: host 'gpu-node-99' is not a host of the cluster")
    bad_input(capsys, "evaluate", cluster, "--hostfile", unknown, "--assignment", files["slurm-hostfile"][1],
              needle="not allowed with argument")


def test_evaluate_reads_the_gpu_file_next_to_the_hostfile(capsys, tmp_path):
    """Hosts with different GPU orders: --emit writes FILE.gpus and evaluate reads it by itself."""
    g = fat_tree_cluster(2, 4, host_names=["host0", "host1"])
    cl = cluster_from_graph(g)
    cfile = tmp_path / "c.json"
    cfile.write_text(json.dumps(nx.node_link_data(g, edges="edges")))
    dev, expected = _layout(cl, [1, 0], [(3, 2, 1, 0), (0, 1, 2, 3)])
    hf = tmp_path / "h.hostfile"
    for p, text in emit_files("slurm-hostfile", {}, host_placements(cl, dev), 8, str(hf)).items():
        open(p, "w").write(text)
    asg = tmp_path / "a.json"
    asg.write_text(json.dumps(expected))
    flags = ["--tp", "2", "--traffic", "tp=4e9,dp=1e9"]
    code, out, err = run(capsys, "evaluate", cfile, "--assignment", asg, *flags)
    assert code == 0, err
    want = json.loads(out)["cost"]
    code, out, err = run(capsys, "evaluate", cfile, "--hostfile", hf, *flags)
    assert code == 0, err
    assert json.loads(out)["cost"] == want


def test_evaluate_takes_the_order_from_the_torchrun_script(capsys, solved):
    """The script rankmap writes for order tp-cp-ep-pp-dp passes Megatron --use-tp-pp-dp-mapping: evaluate
    and check read the order from it (they evaluated the default order's groups, another cost)."""
    cluster, files = solved
    path, res = files["torchrun"]
    doc = json.loads(res.read_text())
    assert doc["order"] == "tp-cp-ep-pp-dp" and "--use-tp-pp-dp-mapping" in path.read_text()
    code, out, err = run(capsys, "evaluate", cluster, "--torchrun-script", path, "--tp", "4", "--pp", "2",
                         "--traffic", "tp=4e9,pp=8e9,dp=1e8")
    assert code == 0, err
    got = json.loads(out)
    assert got["order"] == "tp-cp-ep-pp-dp" and got["cost"]["total_seconds"] == doc["cost"]["total_seconds"]


def test_rankfile_slot_forms_open_mpi_accepts(cluster):
    """A core, SOCKET:CORES, a list, a physical socket: all Open MPI slots, none changes the GPUs."""
    text = "rank 0=host0 slot=0\nrank 1=host0 slot=1:0-2\nrank 2=host0 slot=0,2\nrank 3=host0 slot=p0:1\n"
    got = read_launch_file("rankfile", text, host_gpus(cluster), source="F", world_size=4)
    assert got == read_launch_file("rankfile", "".join(f"rank {r}=host0 slot={r}\n" for r in range(4)),
                                   host_gpus(cluster), source="F", world_size=4)
