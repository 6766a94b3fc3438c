"""Pick and read the fabric source of a cluster (DESIGN §8): one :class:`~.slurm.Fabric`.

Sources, each read by its own module into a ``Fabric`` (switches over hosts, optional NVLink
domains and per-host GPU counts):

==========================  ====================================================  ==============
argument                    file                                                  module
==========================  ====================================================  ==============
``fabric``                  Slurm ``topology.conf`` / ``topology.yaml``           :mod:`.slurm`
``kubernetes_nodes``        ``kubectl get nodes -o json`` / ``-o yaml``           :mod:`.kubernetes`
``volcano_hypernodes``      Volcano ``HyperNode`` objects (YAML / JSON)           :mod:`.volcano`
``topograph_model``         Topograph's switch/block model (YAML)                 :mod:`.topograph`
``ibnetdiscover``           ``ibnetdiscover`` output                              :mod:`.ibnetdiscover`
==========================  ====================================================  ==============

At most one of ``fabric``, ``volcano_hypernodes``, ``topograph_model``, ``ibnetdiscover``
gives the network.  ``kubernetes_nodes`` gives it when none of them does (its topology
labels, named by ``topology_labels`` or ``kueue_topology``, else detected); together with one
of them, the nodes only add what the other file does not say: each host's GPU count and
product and its NVLink domain (``nvidia.com/gpu.clique``).  Every argument may also be an
already parsed ``Fabric`` (the gRPC service parses request text itself).
"""

from __future__ import annotations

from typing import Any

from ..errors import InvalidArgumentError
from .slurm import Fabric, read_fabric

__all__ = ["read_network", "merge_inventory", "NETWORK_SOURCES"]

#: Argument name -> flag name, for messages.
NETWORK_SOURCES = {
    "fabric": "--fabric",
    "volcano_hypernodes": "--volcano-hypernodes",
    "topograph_model": "--topograph-model",
    "ibnetdiscover": "--ibnetdiscover",
}


def _read(name: str, value: Any, topology_name: str | None, nodes: Fabric | None) -> Fabric:
    if isinstance(value, Fabric):
        return value
    if name == "fabric":
        return read_fabric(value, topology_name)
    if name == "volcano_hypernodes":
        from .volcano import read_volcano_hypernodes

        return read_volcano_hypernodes(value, node_labels=nodes.node_labels if nodes is not None else None)
    if name == "topograph_model":
        from .topograph import read_topograph_model

        return read_topograph_model(value)
    from .ibnetdiscover import read_ibnetdiscover

    return read_ibnetdiscover(value)


def read_network(fabric: Any = None, topology_name: str | None = None, kubernetes_nodes: Any = None,
                 topology_labels: Any = None, kueue_topology: Any = None, volcano_hypernodes: Any = None,
                 topograph_model: Any = None, ibnetdiscover: Any = None) -> Fabric | None:
    """The cluster's :class:`~.slurm.Fabric` from the given sources (module docstring), or None.

    Raises
    ------
    InvalidArgumentError
        Two network sources; label options without ``kubernetes_nodes``; any reader's error
        (``<file> line N: ...``).
    """
    given = {k: v for k, v in (("fabric", fabric), ("volcano_hypernodes", volcano_hypernodes),
                               ("topograph_model", topograph_model), ("ibnetdiscover", ibnetdiscover))
             if v is not None}
    if len(given) > 1:
        raise InvalidArgumentError(
            f"give one network source, not {' and '.join(NETWORK_SOURCES[k] for k in given)}", next(iter(given)))
    if (topology_labels is not None or kueue_topology is not None) and kubernetes_nodes is None:
        raise InvalidArgumentError("--topology-labels / --kueue-topology name labels of Kubernetes nodes; give "
                                   "--kubernetes-nodes too", "kubernetes_nodes")
    if topology_labels is not None and kueue_topology is not None:
        raise InvalidArgumentError("give --topology-labels or --kueue-topology, not both", "topology_labels")
    nodes = None
    if kubernetes_nodes is not None:
        if isinstance(kubernetes_nodes, Fabric):
            nodes = kubernetes_nodes
        else:
            from .kubernetes import read_kubernetes_nodes, read_kueue_topology, split_labels

            levels = None
            if kueue_topology is not None:
                levels = kueue_topology if isinstance(kueue_topology, list) else read_kueue_topology(kueue_topology)
            elif topology_labels is not None:
                levels = split_labels(topology_labels)
            nodes = read_kubernetes_nodes(kubernetes_nodes, levels=levels)
    if not given:
        return nodes
    name, value = next(iter(given.items()))
    fab = _read(name, value, topology_name, nodes)
    if nodes is not None:
        merge_inventory(fab, nodes)
    return fab


def merge_inventory(fab: Fabric, nodes: Fabric) -> None:
    """Copy GPU counts, products and NVLink domains of ``nodes`` (Kubernetes) into ``fab`` for
    the hosts ``fab`` lists, where ``fab`` does not say them itself."""
    hosts = fab.host_set()
    for h, n in nodes.host_gpus.items():
        if h in hosts:
            fab.host_gpus.setdefault(h, n)
    for h, p in nodes.host_products.items():
        if h in hosts:
            fab.host_products.setdefault(h, p)
    for h, d in nodes.domains.items():
        if h in hosts:
            fab.domains.setdefault(h, d)
    missing = [h for h in fab.hosts if h not in nodes.host_set()]
    if missing and len(missing) == len(fab.hosts):
        raise InvalidArgumentError(f"{nodes.source}: none of the hosts of {fab.source} is a Kubernetes node there "
                                   f"(e.g. {missing[0]!r})", "kubernetes_nodes")
    if missing:
        fab.warnings.append(f"{len(missing)} hosts of {fab.source} are not nodes in {nodes.source} "
                            f"(e.g. {missing[0]!r})")
    fab.source = f"{fab.source} + {nodes.source}"
