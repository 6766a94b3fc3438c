"""ImportCluster RPC (issue 12 item 6): topology files as text -> the Cluster message."""

from __future__ import annotations

from pathlib import Path

import asyncio

import grpc
import networkx as nx
import numpy as np
import pytest
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from rankmap.client import AsyncRankmapClient
from rankmap.wire.graph import graph_from_proto, graph_to_proto
from rankmap.server.limits import Limits
from rankmap.solver.fabric.cluster import cluster_from_graph
from rankmap.solver.errors import InvalidArgumentError
from rankmap.solver.formats import build_cluster
from rankmap.v1 import rankmap_pb2 as pb

from format_helpers import A100, BLOCK, IB, KUEUE, NVL72, VOLCANO, NODES_JSON as NODES
from service_helpers import live_server, stub_for


server = live_server(workers=2, max_queued=8, limits=Limits(max_world_size=4096))  # client, channel: conftest.py


@pytest.fixture(scope="module")
def stub(channel):
    return stub_for(channel)


def same_graph(a: nx.Graph, b: nx.Graph) -> None:
    assert sorted(map(str, a.nodes)) == sorted(map(str, b.nodes))
    ea = sorted((min(str(u), str(v)), max(str(u), str(v)), d["bandwidth"]) for u, v, d in a.edges(data=True))
    eb = sorted((min(str(u), str(v)), max(str(u), str(v)), d["bandwidth"]) for u, v, d in b.edges(data=True))
    assert ea == eb


def test_slurm_block_gb200_same_as_cli(client):
    G = client.import_cluster(BLOCK.read_text(), "topology.conf", gpus_per_node=4, gpu="gb200")
    local = build_cluster(gpus_per_node=4, gpu="gb200", fabric=BLOCK)
    same_graph(G, local)
    assert G.graph["nvlink_domains"] == 12 and G.graph["nvlink_domain_rate_gbps"] == 900.0
    assert G.nodes["srv1101/gpu0"]["nvlink_domain"] == "rack11"  # carried by Device.nvlink_domain
    assert G.graph["gpu"] == "gb200" and "96 hosts" in G.graph["name"]
    assert any("synthetic switch:root" in w for w in G.graph["warnings"])
    cl = cluster_from_graph(G)
    # the link kinds and the GPU generation crossed the wire too: NCCL's per-NVLink rate on Blackwell,
    # 18 x 40.1 GB/s of the nominal 900, exactly as in process
    assert len(cl.devices) == 384 and cl.widest_levels_gbps[0] == pytest.approx(18 * 40.1)
    assert np.array_equal(cl.widest_levels_gbps, cluster_from_graph(local).widest_levels_gbps)


def test_kubernetes_nodes_with_kueue(client):
    G = client.import_cluster(NODES.read_text(), "kubernetes-nodes", kueue_topology=KUEUE.read_text(),
                              source_name="nodes.json")
    same_graph(G, build_cluster(kubernetes_nodes=NODES, kueue_topology=KUEUE))
    assert G.graph["gpu"] == "h100" and G["switch:b1>r1"]["switch:b1"]["bandwidth"] == 800.0


def test_other_formats(client):
    G = client.import_cluster(VOLCANO.read_text(), "volcano-hypernodes", gpus_per_node=8, gpu="h100",
                              oversubscription="2,1")
    assert G["switch:s0"]["switch:s4"]["bandwidth"] == 400.0
    G = client.import_cluster(IB.read_text(), "ibnetdiscover", gpus_per_node=1, gpu="h100")
    assert G["switch:leaf-04-04"]["switch:spine-02+7"]["bandwidth"] == 800.0 and len(cluster_from_graph(G).hosts) == 28
    G = client.import_cluster(NVL72.read_text(), "topograph-model", gpus_per_node=4, gpu="gb200",
                              nvlink_domain_rate=1800)
    assert G["node1101/gpu0"]["nvlink:nvl-1-1"]["bandwidth"] == 1800.0
    # one host from nvidia-smi topo -m, with a rate override
    G = client.import_cluster(A100.read_text(), "host-topology", gpu="a100", rates={"nic": 12.5})
    assert len(cluster_from_graph(G).devices) == 8
    assert {d["bandwidth"] for u, v, d in G.edges(data=True) if "nic" in str(u) + str(v)} == {12.5}
    # a Slurm fabric with the hosts from an nvidia-smi matrix and domains from nvidia-smi -q lines
    conf = "SwitchName=leaf Nodes=n[1-2]\n"
    G = client.import_cluster(conf, "topology.conf", host_topology=A100.read_text(), gpu="a100",
                              nvlink_domains="n1 rackA\nn2 rackA\n")
    assert G.graph["nvlink_domains"] == 1 and G.graph["nvlink_domain_rate_gbps"] == 300.0


def test_async_client(server):
    async def go():
        async with AsyncRankmapClient(server.address, timeout=60) as c:
            return await c.import_cluster(VOLCANO.read_bytes(), "volcano-hypernodes", gpus_per_node=8, gpu="h100")

    G = asyncio.run(go())
    assert G["switch:s4"]["switch:s6"]["bandwidth"] == 1600.0


def violation(err):
    status = rpc_status.from_call(err)
    bad = [d for d in status.details if d.Is(error_details_pb2.BadRequest.DESCRIPTOR)]
    br = error_details_pb2.BadRequest()
    bad[0].Unpack(br)
    return br.field_violations[0]


@pytest.mark.parametrize("req, field, needle", [
    (pb.ImportClusterRequest(text="x"), "format", "is not a TopologyFormat"),
    (pb.ImportClusterRequest(format=pb.TOPOLOGY_FORMAT_IBNETDISCOVER, text=""), "text", "text is empty"),
    (pb.ImportClusterRequest(format=pb.TOPOLOGY_FORMAT_KUBERNETES_NODES, text='{"items": [\n ,]}',
                             source_name="nodes.json"), "text", "nodes.json line 2 column"),
    (pb.ImportClusterRequest(format=pb.TOPOLOGY_FORMAT_SLURM_TOPOLOGY_CONF, text="BlockName=b Nodes=n[1-4]\n",
                             gpus_per_node=4, gpu="gb200", nvlink_domain_rate_gbps=-1.0),
     "nvlink_domain_rate_gbps", "nvlink domain rate -1.0 must be a positive number"),
    (pb.ImportClusterRequest(format=pb.TOPOLOGY_FORMAT_SLURM_TOPOLOGY_CONF, text="BlockName=b Nodes=n[1-4]\n",
                             gpus_per_node=4, gpu="gb300x"), "gpu", "unknown GPU generation 'gb300x'"),
    (pb.ImportClusterRequest(format=pb.TOPOLOGY_FORMAT_SLURM_TOPOLOGY_CONF, text="BlockName=b Nodes=n[1-4]\n",
                             gpus_per_node=4, gpu="h100", rates_gbps={"nic": -5}), "rates_gbps[nic]", "nic=-5"),
    (pb.ImportClusterRequest(format=pb.TOPOLOGY_FORMAT_VOLCANO_HYPERNODES, gpus_per_node=4, gpu="h100",
                             text="kind: HyperNode\nmetadata: {name: s}\nspec:\n  tier: 1\n  members:\n"
                                  "  - type: Node\n    selector: {regexMatch: {pattern: 'n.*'}}\n",
                             source_name="hn.yaml"), "text", "hn.yaml line 6: HyperNode 's' member 0: regexMatch"),
    (pb.ImportClusterRequest(format=pb.TOPOLOGY_FORMAT_VOLCANO_HYPERNODES, text="kind: HyperNode\n",
                             kubernetes_nodes="{", gpu="h100"), "kubernetes_nodes", "kubernetes nodes"),
    (pb.ImportClusterRequest(format=pb.TOPOLOGY_FORMAT_SLURM_TOPOLOGY_CONF, text="BlockName=b Nodes=n[1-4]\n",
                             nvlink_domains="n1 a b\n"), "nvlink_domains", "nvlink domains line 1"),
    # an NCCL XML of sm90 GPUs and a --gpu of another family (issue 28): both named
    (pb.ImportClusterRequest(format=pb.TOPOLOGY_FORMAT_HOST_TOPOLOGY, gpu="a100",
                             text=(Path(__file__).resolve().parent / "data" / "real-inputs" /
                                   "ncclxml_hgx-h100-vm-8gpu-8nic-roce-dump_ibm-cloud-docs.xml").read_text()),
     "gpu", "--gpu a100 (A100, sm80) contradicts"),
    # the server's --max-world-size (4096 here) is checked before the graph is built
    (pb.ImportClusterRequest(format=pb.TOPOLOGY_FORMAT_SLURM_TOPOLOGY_CONF, text="SwitchName=s Nodes=n[1-1000]\n",
                             gpus_per_node=8, gpu="h100"), "text", "8,000 GPUs; the limit is 4,096"),
])
def test_bad_requests_are_invalid_argument(stub, req, field, needle):
    with pytest.raises(grpc.RpcError) as err:
        stub.ImportCluster(req, timeout=30)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT, err.value.details()
    v = violation(err.value)
    assert v.field == field and needle in v.description, (v.field, v.description)


def test_client_raises_invalid_argument(client):
    with pytest.raises(InvalidArgumentError) as e:
        client.import_cluster("Switch 2 \"S-1\"\n[1 broken\n", "ibnetdiscover", source_name="ib.out")
    assert e.value.proto_field == "text" and "ib.out line 2:" in e.value.message
    with pytest.raises(InvalidArgumentError, match="unknown topology format 'xml'"):
        client.import_cluster("x", "xml")


def test_nvlink_domain_on_the_wire():
    g = nx.Graph()
    g.add_node("a/gpu0", kind="gpu", host="a", local_index=0, nvlink_domain="rack1")
    g.add_node("a/gpu1", kind="gpu", host="a", local_index=1)
    g.add_node("sw", kind="nvswitch")
    g.add_edge("a/gpu0", "sw", bandwidth=900.0)
    g.add_edge("a/gpu1", "sw", bandwidth=900.0)
    msg = graph_to_proto(g)
    assert msg.devices[0].nvlink_domain == "rack1" and not msg.devices[1].HasField("nvlink_domain")
    back = graph_from_proto(msg)
    assert back.nodes["a/gpu0"]["nvlink_domain"] == "rack1" and "nvlink_domain" not in back.nodes["a/gpu1"]
