"""Real-world topology formats -> the cluster graph (DESIGN §2).

Modules
-------
``hostlist``   Slurm hostlist expressions (``node[001-016,040]``): :func:`expand`, :func:`compress`.
``nvsmi``      ``nvidia-smi topo -m`` matrices -> one host.
``nccl_xml``   NCCL topology XML (dumps and hand-written files) -> one host.
``slurm``      Slurm ``topology.conf`` (tree / block / ring) and ``topology.yaml`` -> a :class:`Fabric`.
``compose``    :func:`build_cluster` (hosts placed in a fabric; the switches by ``fabric_build``).
``summary``    :func:`summarize`, :func:`bandwidth_levels` (the ``--format table`` text).
``sources``    which fabric source: Slurm, ``kubernetes`` (node labels, Kueue ``Topology``),
               ``volcano`` (``HyperNode``), ``topograph`` (switch/block model), ``ibnetdiscover``.
``nvlink``     multi-host NVLink domains (GB200 NVL72), ``nvidia-smi -q`` ClusterUUIDs.
``graphfile``  node-link JSON / GraphML: :func:`load_graph`, :func:`dump_graph`.
``common``     link-rate constants (with their published sources), GPU generations, host templates.
"""

from .._lazy import lazy_exports

#: Exported names, loaded on first use (PEP 562) so that reading one format does not import
#: every other (and ``rankmap groups`` imports none): name -> module.
_LAZY = {
    "GENERATIONS": "common", "RATE_KEYS": "common", "GpuGeneration": "common", "HostTemplate": "common",
    "default_rates": "common", "resolve_generation": "common",
    "build_cluster": "compose", "host_template_from_text": "hosts", "load_host_template": "hosts",
    "synthetic_host": "hosts", "bandwidth_levels": "summary", "summarize": "summary",
    "dump_graph": "graphfile", "load_graph": "graphfile", "node_link_text": "graphfile",
    "compress": "hostlist", "expand": "hostlist",
    "parse_nccl_xml": "nccl_xml", "read_nccl_xml": "nccl_xml",
    "parse_topo_matrix": "nvsmi", "read_nvsmi": "nvsmi",
    "Fabric": "slurm", "Switch": "slurm", "parse_topology_conf": "slurm", "parse_topology_yaml": "slurm",
    "read_fabric": "slurm",
}


__getattr__, __dir__ = lazy_exports(__name__, _LAZY, globals())

__all__ = sorted(_LAZY)
