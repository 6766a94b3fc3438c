"""NCCL topology files without ``<nvlink>`` (issue 27 deliverable 3): Azure ND H100 v5's ``topo.xml``.

The file (``tests/data/real-inputs/ncclxml_azure-ndv5-h100-8gpu-8ib-no-nvlink_azhpc-images.xml``,
from ``Azure/azhpc-images:topology/ndv5-topo.xml``, MIT) lists 8 H100 (class 0x0302) and 8
InfiniBand NICs (0x0207), one of each per PCIe Gen5 x16 bridge, 4 bridges per socket, and no
``<nvlink>``: NCCL finds the NVLinks at run time.  ``--gpu`` of an NVSwitch generation adds
that generation's NVSwitch fabric (with a note); without it the warning names the flag.
"""

from __future__ import annotations

import grpc
import pytest
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from rankmap.solver.formats import bandwidth_levels, build_cluster, summarize
from rankmap.solver.formats.generations import GENERATIONS
from rankmap.v1 import rankmap_pb2 as pb

from cli_helpers import bad_input, run
from format_helpers import DATA, NVL72
from service_helpers import live_server, stub_for

NDV5 = DATA / "ncclxml_azure-ndv5-h100-8gpu-8ib-no-nvlink_azhpc-images.xml"

server = live_server(workers=1, max_queued=4)  # client, channel: conftest.py


def nvlink_edges(G):
    return {(u, v): d["bandwidth"] for u, v, d in G.edges(data=True) if d.get("link") == "nvlink"}


def test_without_gpu_pcie_only_and_the_warning_names_the_flag():
    G = build_cluster(NDV5)
    assert nvlink_edges(G) == {}
    # PCIe only: GPUs under one socket meet at the CPU through two Gen5 x16 bridges,
    # 32 GT/s x 16 lanes x 128/130 / 8 = 63.04 GB/s: 2 sockets x C(4, 2) = 12 pairs; the other
    # 4 x 4 = 16 pairs cross the socket link, Sapphire Rapids (modelid 143) SRP_QPI_BW 22 GB/s
    assert [(w, c) for w, c, _ in bandwidth_levels(G)] == [(63.04, 12), (22.0, 16)]
    (note,) = [w for w in G.graph["warnings"] if "no <nvlink>" in w]
    assert "give --gpu GEN" in note and "h100" in note and "gb200" in note


@pytest.mark.parametrize("gpu", ["h100", "h200", "b200"])
def test_gpu_of_an_nvswitch_generation_adds_its_fabric(gpu):
    G = build_cluster(NDV5, gpu=gpu)
    gen = GENERATIONS[gpu]
    # every GPU: 18 NVLinks to one NVSwitch node, 18 x 25 = 450 GB/s (NVLink 4), 18 x 50 = 900 (NVLink 5)
    per_gpu = {"h100": 450.0, "h200": 450.0, "b200": 900.0}[gpu]
    assert gen.links * gen.nvlink == per_gpu
    edges = nvlink_edges(G)
    assert sorted(edges) == [(f"host0/gpu{i}", "host0/nvswitch") for i in range(8)]
    assert set(edges.values()) == {per_gpu}
    # every one of the C(8, 2) = 28 pairs now meets at the NVSwitch (was 22 GB/s across sockets)
    assert [(w, c) for w, c, _ in bandwidth_levels(G)] == [(per_gpu, 28)]
    assert G.graph["gpu"] == gpu  # h200 is reported as h200 (was h100)
    (note,) = [w for w in G.graph["warnings"] if "no <nvlink>" in w]
    assert f"NVSwitch fabric of --gpu {gpu} added" in note and f"18 x {gen.nvlink:g} = {per_gpu:g} GB/s" in note
    assert f"gpu {gpu}" in summarize(G)


@pytest.mark.parametrize("gpu", ["h100-pcie", "h100nvl", "v100", "a30", "25"])
def test_no_nvswitch_board_no_fabric(gpu):
    # PCIe cards, NVL bridge pairs, DGX-1's hybrid cube mesh, a bare rate: no NVSwitch is invented
    G = build_cluster(NDV5, gpu=gpu)
    assert nvlink_edges(G) == {}
    assert any("give --gpu GEN" in w for w in G.graph["warnings"])


def test_cli_note_and_h200(capsys):
    code, out, err = run(capsys, "cluster", "--host-topology", NDV5, "--gpu", "h200", "--format", "table")
    assert code == 0
    assert "gpu h200" in out.splitlines()[1]
    # the table on stdout lists the note (once: not also on stderr)
    assert "  - no <nvlink> elements: the H200 NVSwitch fabric of --gpu h200 added" in out and err == ""
    code, out, err = run(capsys, "cluster", "--host-topology", NDV5, "--gpu", "h200")
    assert code == 0 and "rankmap: warning: no <nvlink> elements: the H200 NVSwitch fabric of --gpu h200 added" in err
    code, out, err = run(capsys, "cluster", "--host-topology", NDV5)
    assert code == 0 and "give --gpu GEN of their generation" in err


def test_solve_tp8_over_nvlink_not_the_cpu(capsys):
    # tp=8 on one ND H100 v5 host: with the NVSwitch the TP all-reduce runs NVLS, not a ring over 22 GB/s
    code, out, err = run(capsys, "solve", "--host-topology", NDV5, "--gpu", "h100", "--tp", "8",
                         "--time-limit", "5", "--format", "table")
    assert code == 0, err
    tp = next(ln for ln in out.splitlines() if ln.startswith("tp "))
    assert "nvls" in tp and "22 GB/s" not in tp


def test_topograph_without_gpus_per_node_names_the_flag(capsys):
    bad_input(capsys, "cluster", "--topograph-model", NVL72, "--gpu", "gb200", needle="--gpus-per-node N with --gpu GEN")
    bad_input(capsys, "cluster", "--topograph-model", NVL72, "--gpus-per-node", "4",
              needle="--gpus-per-node needs a GPU generation (give --gpu GEN")
    # the other cluster errors name their flags too
    bad_input(capsys, "cluster", "--topology-name", "t", "--gpus-per-node", "8", "--gpu", "h100",
              needle="--topology-name 't' given without --fabric FILE")
    bad_input(capsys, "cluster", "--host-topology", NDV5, "--gpus-per-node", "8",
              needle="give either --host-topology FILE or --gpus-per-node N")
    bad_input(capsys, "cluster", "--gpu", "h100", needle="nothing to build: give --host-topology FILE")


def test_grpc_import(channel, client):
    G = client.import_cluster(NDV5.read_text(), "host-topology", gpu="h200")
    assert G.graph["gpu"] == "h200" and set(nvlink_edges(G).values()) == {450.0}
    assert any("NVSwitch fabric of --gpu h200 added" in w for w in G.graph["warnings"])
    with pytest.raises(grpc.RpcError) as err:
        stub_for(channel).ImportCluster(pb.ImportClusterRequest(format=pb.TOPOLOGY_FORMAT_TOPOGRAPH_MODEL,
                                                                text=NVL72.read_text(), gpu="gb200"), timeout=30)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "--gpus-per-node" in err.value.details()
    status = rpc_status.from_call(err.value)
    br = error_details_pb2.BadRequest()
    next(d for d in status.details if d.Is(error_details_pb2.BadRequest.DESCRIPTOR)).Unpack(br)
    assert [v.field for v in br.field_violations] == ["gpus_per_node"]
