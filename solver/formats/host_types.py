"""Several host topologies in one cluster (issue 27 item 2): ``--host-topology HOSTLIST=FILE``, repeatable.

``rankmap cluster --host-topology topo-8gpu.txt --host-topology 'node[05-06]=topo-4gpu.txt'
--fabric topology.conf``: every host gets the plain ``FILE`` (the default topology), the hosts of
each ``HOSTLIST=FILE`` that one instead.  Without a plain ``FILE`` every host must be in some
``HOSTLIST``.  The cluster is built with the default topology (:func:`~.compose.build_cluster`: the
fabric, NVLink domains, rates), then each listed host is rebuilt from its own topology
(:meth:`~.common.HostTemplate.instantiate`) and its fabric NICs are linked to the switches the
default host's NICs were linked to (round robin when the counts differ), each at its own port
rate.  The GPUs get a ``host_type`` attribute naming their topology file, which the constraint
level ``host_type`` reads (:meth:`~rankmap.solver.fabric.cluster.Cluster.host_type_of`).  A
switch's uplink capacity stays what the fabric file (or the default hosts' NICs and the
oversubscription) made it.

Errors (:class:`~rankmap.solver.errors.InvalidArgumentError`, field ``host_topology``) name the
offending value: a host listed in two ``HOSTLIST``\\ s or missing from the cluster, a host covered
by no topology, a rebuilt host in a multi-host NVLink domain (its domain links are not rebuilt).
"""

from __future__ import annotations

import os
from typing import Any

import networkx as nx

from ..errors import InvalidArgumentError

__all__ = ["split_host_topologies", "build_mixed_cluster"]

_FIELD = "host_topology"


def split_host_topologies(value: Any) -> tuple[Any, list[tuple[str, str]]]:
    """``(default FILE or None, [(HOSTLIST, FILE), ...])`` of ``--host-topology`` values (a string or a list).

    A value that names an existing file is a plain FILE even if it contains ``=``.

    Raises
    ------
    InvalidArgumentError
        Two plain FILEs, or an empty HOSTLIST or FILE.
    """
    items = value if isinstance(value, (list, tuple)) else [value]
    default, listed = None, []
    for item in items:
        if not isinstance(item, str) or "=" not in item or os.path.exists(item):
            if default is not None:
                raise InvalidArgumentError(
                    f"--host-topology {item!r}: a second default topology (the first is {default!r}); give the "
                    "other hosts' topologies as HOSTLIST=FILE", _FIELD)
            default = item
            continue
        hosts, _, path = item.partition("=")
        if not hosts.strip() or not path.strip():
            raise InvalidArgumentError(f"--host-topology {item!r}: expected FILE or HOSTLIST=FILE", _FIELD)
        listed.append((hosts.strip(), path.strip()))
    return default, listed


def build_mixed_cluster(host_topology: Any, build, gpu: Any = None, **overrides: Any) -> nx.Graph:
    """The cluster graph of several host topologies (module doc).

    Parameters
    ----------
    host_topology : str or list
        ``--host-topology`` values (:func:`split_host_topologies`).
    build : callable(host_topology) -> networkx.Graph
        :func:`~.compose.build_cluster` with every other argument bound.
    gpu, overrides
        As for :func:`~.hosts.load_host_template` (the GPU generation and rate overrides).

    Raises
    ------
    InvalidArgumentError
        See the module doc.
    """
    from .hostlist import expand
    from .hosts import load_host_template

    default, listed = split_host_topologies(host_topology)
    if not listed:
        return build(default)
    G = build(default if default is not None else listed[0][1])
    present = {str(d.get("host")) for _n, d in G.nodes(data=True) if d.get("kind", "gpu") == "gpu"}
    owner: dict[str, str] = {}
    for hosts_expr, path in listed:
        for h in expand(hosts_expr, field=_FIELD):
            if h in owner:
                raise InvalidArgumentError(f"--host-topology: host {h!r} is listed for {owner[h]!r} and {path!r}",
                                           _FIELD)
            if h not in present:
                raise InvalidArgumentError(f"--host-topology {hosts_expr}={path}: host {h!r} is not in the cluster",
                                           _FIELD)
            owner[h] = path
    if default is None:
        missing = sorted(present - set(owner))
        if missing:
            raise InvalidArgumentError(
                f"host {missing[0]!r} has no host topology: give a plain --host-topology FILE for the hosts no "
                "HOSTLIST=FILE names", _FIELD)
    templates = {path: load_host_template(path, gpu=gpu, **overrides) for path in dict.fromkeys(owner.values())}
    warnings = list(G.graph.get("warnings", ()) or ())
    for path, t in templates.items():
        warnings += [f"{path}: {w}" for w in t.warnings]
    base_name = os.path.basename(str(default)) if default is not None else None
    for n, d in G.nodes(data=True):
        if d.get("kind", "gpu") == "gpu" and str(d.get("host")) not in owner and base_name is not None:
            d["host_type"] = base_name
    for h, path in owner.items():
        _replace_host(G, h, templates[path], os.path.basename(path))
    G.graph["sources"] = list(G.graph.get("sources", ())) + [p for p in templates if p not in G.graph.get("sources", ())]
    gpus: dict = {}
    for _n, d in G.nodes(data=True):
        if d.get("kind", "gpu") == "gpu":
            gpus[str(d.get("host"))] = gpus.get(str(d.get("host")), 0) + 1
    sizes = ", ".join(f"{sum(1 for c in gpus.values() if c == k)} x {k}" for k in sorted(set(gpus.values()), reverse=True))
    G.graph["name"] = (f"{len(gpus)} hosts ({sizes} GPUs) = {sum(gpus.values())} GPUs, "
                       f"{len(templates) + (default is not None)} host topologies")
    if warnings:
        G.graph["warnings"] = list(dict.fromkeys(warnings))
    return G


def _replace_host(G: nx.Graph, host: str, template, type_name: str) -> None:
    """Rebuild ``host`` from ``template``, keeping its fabric attachments (module doc)."""
    mine = [n for n, d in G.nodes(data=True) if str(d.get("host", "")) == host]
    mine_set = set(mine)
    attach: list[str] = []  # the switches the host's fabric NICs linked to, in NIC order
    for n in mine:
        for m in G.neighbors(n):
            if m in mine_set:
                continue
            if G.nodes[n].get("kind", "gpu") == "gpu":
                raise InvalidArgumentError(
                    f"--host-topology: host {host!r} has GPU {n!r} linked to {m!r} outside the host (a multi-host "
                    "NVLink domain); rebuilding it from another topology would drop that link", _FIELD)
            attach.append(m)
    if attach and not template.nic_rates():
        from .compose import _with_default_nic

        template = _with_default_nic(template)  # as build_cluster gives NIC-less hosts in a fabric
    G.remove_nodes_from(mine)
    template.instantiate(G, host)
    for n in (f"{host}/{s}" for s, a in template.nodes if a.get("kind") == "gpu"):
        G.nodes[n]["host_type"] = type_name
    nics = template.nic_rates()
    if not attach:
        return
    for i, (nic, port) in enumerate(nics.items()):
        G.add_edge(f"{host}/{nic}", attach[i % len(attach)], bandwidth=float(port), link="net")
