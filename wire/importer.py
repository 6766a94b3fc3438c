"""``ImportCluster`` as the server reads it: a topology file given as text -> the ``rankmap.v1.Cluster`` message.

The same readers and options as ``rankmap cluster`` (:func:`rankmap.solver.formats.build_cluster`),
fed from the request's strings instead of files: ``text`` in the ``format`` the request names,
plus optional ``host_topology``, ``kubernetes_nodes``, ``kueue_topology``, ``nvlink_domains``
texts and typed options.  Every reader error becomes INVALID_ARGUMENT whose field is the
request field the bad value came from (``text``, ``kubernetes_nodes``, ``nvlink_domain_rate_gbps``,
``rates_gbps[nic]`` ...) and whose message is the CLI's (``nodes.json line 12: ...``, with
``source_name`` as the file name).
"""

from __future__ import annotations

from typing import Any

from rankmap.wire.errors import invalid
from rankmap.wire.graph import graph_to_proto
from rankmap.solver.errors import InvalidArgumentError
from rankmap.v1 import rankmap_pb2 as pb

__all__ = ["import_cluster", "FORMAT_NAMES"]

#: Format -> (default source name, what the text is).
FORMAT_NAMES = {
    pb.TOPOLOGY_FORMAT_SLURM_TOPOLOGY_CONF: "topology.conf",
    pb.TOPOLOGY_FORMAT_SLURM_TOPOLOGY_YAML: "topology.yaml",
    pb.TOPOLOGY_FORMAT_KUBERNETES_NODES: "kubernetes nodes",
    pb.TOPOLOGY_FORMAT_VOLCANO_HYPERNODES: "volcano hypernodes",
    pb.TOPOLOGY_FORMAT_TOPOGRAPH_MODEL: "topograph model",
    pb.TOPOLOGY_FORMAT_IBNETDISCOVER: "ibnetdiscover",
    pb.TOPOLOGY_FORMAT_HOST_TOPOLOGY: "host topology",
}

#: Solver field -> request field, for the fields that are not the main text.
_FIELDS = {
    "host_topology": "host_topology",
    "kueue_topology": "kueue_topology",
    "topology_labels": "topology_labels",
    "nvlink_domains": "nvlink_domains",
    "nvlink_domain_rate": "nvlink_domain_rate_gbps",
    "gpu": "gpu",
    "gpus_per_node": "gpus_per_node",
    "nodelist": "nodelist",
    "topology_name": "topology_name",
    "oversubscription": "oversubscription",
    "block_links": "block_links",
}


def _request_field(solver_field: str, main: str) -> str:
    """The ImportClusterRequest field an error of ``solver_field`` is about."""
    if solver_field.startswith("rate."):
        return f"rates_gbps[{solver_field[len('rate.'):]}]"
    if solver_field == "kubernetes_nodes":
        return "text" if main == "kubernetes_nodes" else "kubernetes_nodes"
    if solver_field == "host_topology" and main == "host_topology":
        return "text"
    return _FIELDS.get(solver_field, "text")


def import_cluster(req: "pb.ImportClusterRequest", max_gpus: int, check=None) -> "pb.ImportClusterResponse":
    """Build the cluster graph of an ImportClusterRequest and encode it.

    Parameters
    ----------
    req : rankmap.v1.ImportClusterRequest
    max_gpus : int
        Refuse clusters of more GPUs (the server's ``--max-world-size``), checked before
        the graph is built.
    check : callable, optional
        Deadline / cancel check point (raises to stop).

    Raises
    ------
    InvalidArgumentError
        With the request field (see the module docstring).
    """
    check = check or (lambda: None)
    if req.format not in FORMAT_NAMES:
        raise invalid(f"format {req.format} is not a TopologyFormat (give one of "
                      f"{', '.join(pb.TopologyFormat.Name(f) for f in FORMAT_NAMES)})", "format", "format")
    name = req.source_name or FORMAT_NAMES[req.format]
    main = {pb.TOPOLOGY_FORMAT_KUBERNETES_NODES: "kubernetes_nodes",
            pb.TOPOLOGY_FORMAT_HOST_TOPOLOGY: "host_topology"}.get(req.format, "fabric")
    try:
        return _build(req, name, main, max_gpus, check)
    except InvalidArgumentError as exc:
        if getattr(exc, "argument", None) is not None:  # already a request field
            raise
        raise invalid(exc.message, _request_field(exc.field, main), exc.field or "text") from None


def _build(req, name: str, main: str, max_gpus: int, check) -> "pb.ImportClusterResponse":
    from rankmap.solver.formats import common, compose, hosts, kubernetes, nvlink, slurm

    F = pb
    kw: dict[str, Any] = {}
    text = req.text
    if not text.strip():
        raise invalid(f"{name}: text is empty", "text", "text")
    nodes = None
    if req.kubernetes_nodes:
        if req.format == F.TOPOLOGY_FORMAT_KUBERNETES_NODES:
            raise invalid("kubernetes_nodes is for a second file; the format already is KUBERNETES_NODES",
                          "kubernetes_nodes", "kubernetes_nodes")
        nodes = kubernetes.parse_kubernetes_nodes(req.kubernetes_nodes, "kubernetes nodes")
    levels = None
    if req.kueue_topology:
        levels = kubernetes.parse_kueue_topology(req.kueue_topology, "kueue topology")
    if req.topology_labels:
        if levels is not None:
            raise invalid("give topology_labels or kueue_topology, not both", "topology_labels", "topology_labels")
        levels = kubernetes.split_labels(list(req.topology_labels))
    if levels is not None and req.format != F.TOPOLOGY_FORMAT_KUBERNETES_NODES and nodes is None:
        raise invalid("topology_labels / kueue_topology name labels of Kubernetes nodes; the format is not "
                      "KUBERNETES_NODES and kubernetes_nodes is empty", "topology_labels", "topology_labels")
    check()
    fmt = req.format
    if fmt == F.TOPOLOGY_FORMAT_HOST_TOPOLOGY:
        kw["host_topology"] = text
    elif fmt == F.TOPOLOGY_FORMAT_KUBERNETES_NODES:
        kw["kubernetes_nodes"] = kubernetes.parse_kubernetes_nodes(text, name, levels=levels)
    elif fmt == F.TOPOLOGY_FORMAT_SLURM_TOPOLOGY_CONF:
        if req.topology_name:
            raise invalid("topology_name is for a topology.yaml; a topology.conf has one topology", "topology_name",
                          "topology_name")
        kw["fabric"] = slurm.parse_topology_conf(text, source=name)
    elif fmt == F.TOPOLOGY_FORMAT_SLURM_TOPOLOGY_YAML:
        kw["fabric"] = slurm.parse_topology_yaml(text, source=name, topology_name=req.topology_name or None)
    elif fmt == F.TOPOLOGY_FORMAT_VOLCANO_HYPERNODES:
        from rankmap.solver.formats.volcano import parse_volcano_hypernodes

        kw["volcano_hypernodes"] = parse_volcano_hypernodes(text, name, nodes.node_labels if nodes else None)
    elif fmt == F.TOPOLOGY_FORMAT_TOPOGRAPH_MODEL:
        from rankmap.solver.formats.topograph import parse_topograph_model

        kw["topograph_model"] = parse_topograph_model(text, name)
    else:
        from rankmap.solver.formats.ibnetdiscover import parse_ibnetdiscover

        kw["ibnetdiscover"] = parse_ibnetdiscover(text, name)
    if nodes is not None:
        kw["kubernetes_nodes"] = nodes
    check()
    gpu = req.gpu or None
    rates = dict(req.rates_gbps)
    if req.host_topology:
        if fmt == F.TOPOLOGY_FORMAT_HOST_TOPOLOGY:
            raise invalid("host_topology is for a second file; the format already is HOST_TOPOLOGY", "host_topology",
                          "host_topology")
        kw["host_topology"] = req.host_topology
    if isinstance(kw.get("host_topology"), str):
        src = name if fmt == F.TOPOLOGY_FORMAT_HOST_TOPOLOGY else "host topology"
        overrides = common.check_rate_overrides(rates)
        kw["host_topology"] = hosts.host_template_from_text(kw["host_topology"], src, gpu=gpu, **overrides)
    if req.nvlink_domains:
        kw["nvlink_domains"] = nvlink.parse_nvsmi_query(req.nvlink_domains, "nvlink domains")
    if req.HasField("nvlink_domain_rate_gbps"):
        kw["nvlink_domain_rate"] = req.nvlink_domain_rate_gbps
    if req.HasField("gpus_per_node"):
        kw["gpus_per_node"] = req.gpus_per_node
    if req.oversubscription:
        kw["oversubscription"] = list(req.oversubscription)
    kw["block_links"] = "network" if req.block_links == F.BLOCK_LINKS_NETWORK else "nvlink"
    if req.block_links not in (F.BLOCK_LINKS_UNSPECIFIED, F.BLOCK_LINKS_NVLINK, F.BLOCK_LINKS_NETWORK):
        raise invalid(f"block_links {req.block_links} is not a BlockLinks value", "block_links", "block_links")
    G = compose.build_cluster(gpu=gpu, nodelist=req.nodelist or None, max_gpus=max_gpus, **kw, **rates)
    check()
    msg = pb.ImportClusterResponse(cluster=graph_to_proto(G), name=str(G.graph.get("name", "")),
                                   gpu=str(G.graph.get("gpu", "")))
    msg.warnings.extend(str(w) for w in G.graph.get("warnings", []) or [])
    dom = (G.graph.get("fabric") or {}).get("nvlink_domains")
    if dom:
        msg.nvlink_domains = int(dom["count"])
        msg.nvlink_domain_rate_gbps = float(dom["rate_gbps"])
    return msg
