"""Real-world topology formats -> the cluster graph (DESIGN §2).

Modules
-------
``hostlist``   Slurm hostlist expressions (``node[001-016,040]``): :func:`expand`, :func:`compress`.
``nvsmi``      ``nvidia-smi topo -m`` matrices -> one host.
``nccl_xml``   NCCL topology XML (dumps and hand-written files) -> one host.
``slurm``      Slurm ``topology.conf`` (tree / block / ring) and ``topology.yaml`` -> a :class:`Fabric`.
``compose``    :func:`build_cluster` (hosts placed in a fabric) and :func:`summarize`.
``graphfile``  node-link JSON / GraphML: :func:`load_graph`, :func:`dump_graph`.
``common``     link-rate constants (with their published sources), GPU generations, host templates.
"""

from .common import GENERATIONS, RATE_KEYS, GpuGeneration, HostTemplate, default_rates, resolve_generation
from .compose import bandwidth_levels, build_cluster, load_host_template, summarize, synthetic_host
from .graphfile import dump_graph, load_graph, node_link_text
from .hostlist import compress, expand
from .nccl_xml import parse_nccl_xml, read_nccl_xml
from .nvsmi import parse_topo_matrix, read_nvsmi
from .slurm import Fabric, Switch, parse_topology_conf, parse_topology_yaml, read_fabric

__all__ = [
    "GENERATIONS",
    "RATE_KEYS",
    "Fabric",
    "GpuGeneration",
    "HostTemplate",
    "Switch",
    "bandwidth_levels",
    "build_cluster",
    "compress",
    "default_rates",
    "dump_graph",
    "expand",
    "load_graph",
    "load_host_template",
    "node_link_text",
    "parse_nccl_xml",
    "parse_topo_matrix",
    "parse_topology_conf",
    "parse_topology_yaml",
    "read_fabric",
    "read_nccl_xml",
    "read_nvsmi",
    "resolve_generation",
    "summarize",
    "synthetic_host",
]
