"""Compose a cluster graph: host topologies placed into a Slurm fabric (``rankmap cluster``).

``build_cluster`` makes one of three things:

1. **one host** from a host topology file (``nvidia-smi topo -m`` text, NCCL topology XML,
   or a one-host node-link JSON / GraphML graph; detected from the text);
2. **every host of a fabric**: each host named in the Slurm ``topology.conf`` /
   ``topology.yaml`` (or only those of ``nodelist``) is a copy of the host topology, its
   NICs linked to the switch (block, ring) the fabric puts it under, the switches linked as
   in the file;
3. **every host of a nodelist** without a fabric file: all hosts under one switch
   (Slurm's topology/flat).

Other fabric sources (Kubernetes node labels, Volcano HyperNodes, a Topograph model,
``ibnetdiscover``; :mod:`.sources`) are read into the same :class:`~.slurm.Fabric` tree and
placed like a Slurm tree.  Hosts in a multi-host NVLink domain (Slurm blocks, Topograph
blocks, ``gpu.clique`` labels, ``nvidia-smi -q`` ClusterUUIDs) then share one domain node
(:mod:`.nvlink`).  The switches and their links are written by :mod:`.fabric_build`.

Without a host topology file, ``gpus_per_node`` + ``gpu`` describe a synthetic host (see
:func:`~.hosts.synthetic_host`); with neither, composing is refused - a GPU count cannot be guessed.

Fabric links: physical capacities (GB/s per direction)
------------------------------------------------------
Every edge is one physical link, or the bundle of parallel links between two nodes summed
into one edge, and all flows routed over it share its capacity (DESIGN §2).  No edge carries
a per-GPU or per-pair share.

* NIC -> leaf switch (``link="net"``): the NIC's port rate (NCCL XML ``speed``, else the
  ``nic`` default of the GPU generation: ConnectX-7 NDR 400 Gb/s = 50 GB/s for H100/B200,
  HDR 200 Gb/s = 25 GB/s for A100), capped by the leaf's ``LinkSpeed`` read as Gb/s per
  port.  Only the host's fabric NICs are linked (``fabric_port``; see :mod:`.common`).
* Switch -> parent (``link="fabric"``): one edge standing for all the child's uplink ports
  to that parent.  Its capacity is the parent's ``LinkSpeed`` (Gb/s / 8) when the file gives
  one, else the child's **downlink capacity / r**, where the downlink capacity is the sum of
  the child's links below it (NIC ports of its hosts, uplinks of its child switches) over
  the *whole* fabric file, not just the hosts of ``nodelist`` (a switch's cabling does not
  change with the job), and r is the **oversubscription ratio** of the child's level
  (``oversubscription``: default **1.0, non-blocking**; one number for every level, or one
  per level leaf first, e.g. ``[2, 1]`` = leaves 2:1, spines and above 1:1).  A child with
  several parents (the spines of a two-level Clos) splits that capacity evenly over them;
  parallel spines wired to the same switches are "twins" that the fabric model merges into
  one switch with the summed capacity (ECMP).
  Example: a leaf of 4 hosts x 8 GPUs with one 50 GB/s NIC each has 4 x 8 x 50 = 1600 GB/s
  of downlinks; at 2:1 its uplink is 800 GB/s.
* Blocks (topology/block): a block's hosts link their NICs at the NIC rate to the block
  switch; a block level of size ``k x base`` is a switch over ``k`` consecutive base blocks,
  each block (group) linked to it by its downlink capacity / r of its level.
* Top-level switches with no common parent (a "missing root"), rings and top-level block
  groups are joined by a synthetic ``switch:root``, each by its downlink capacity / r; the
  graph's ``warnings`` say so.
* A host listed under several switches spreads its fabric NICs over them (NIC i to the
  i-th switch, modulo their number).

``LinkSpeed`` ("arbitrary units, currently not used" by Slurm) is read as **Gb/s per link
below that switch**: it caps each NIC port of a host directly below, and it *is* the
capacity of the whole trunk from each child switch.
"""

from __future__ import annotations

from typing import Any, Iterable

import networkx as nx

from ..errors import InvalidArgumentError
from .common import GENERATIONS, HostTemplate, check_rate_overrides
from .hostlist import compress, expand
from .fabric_build import FabricBuilder
from .nvlink import apply_nvlink_domains, check_domain_name, check_domain_rate, domain_rate, read_nvlink_domains
from .slurm import Fabric
from .sources import read_network
from .hosts import _with_default_nic, load_host_template, synthetic_host

__all__ = ["build_cluster", "parse_oversubscription"]

DEFAULT_HOST = "host0"


def parse_oversubscription(value: Any) -> list[float]:
    """``2`` / ``"2"`` / ``"2,1"`` / ``[2, 1]`` -> ratios per level, leaf first (last one repeats)."""
    if value is None:
        return [1.0]
    items = value.split(",") if isinstance(value, str) else (list(value) if isinstance(value, (list, tuple))
                                                             else [value])
    out = []
    for x in items:
        try:
            if isinstance(x, str) and ":" in x:  # "2:1"
                a, _, b = x.partition(":")
                r = float(a) / float(b)
            else:
                r = float(x)
        except (TypeError, ValueError, ZeroDivisionError):
            r = float("nan")
        if isinstance(x, bool) or not (0 < r < float("inf")):
            raise InvalidArgumentError(
                f"oversubscription {value!r}: {x!r} is not a positive ratio (e.g. 1 for non-blocking, 2 for 2:1)",
                "oversubscription")
        out.append(r)
    if not out:
        raise InvalidArgumentError(f"oversubscription {value!r} is empty", "oversubscription")
    return out


# ---------------------------------------------------------------- build


#: Most GPUs :func:`build_cluster` builds (hosts x GPUs per host), checked before any node is
#: created: 8 x the largest cluster rankmap is benchmarked on (131,072 GPUs).
MAX_CLUSTER_GPUS = 1 << 20


def build_cluster(host_topology: Any = None, gpu: Any = None, fabric: Any = None, nodelist: Any = None,
                  topology_name: str | None = None, gpus_per_node: int | None = None,
                  oversubscription: Any = None, *, kubernetes_nodes: Any = None, topology_labels: Any = None,
                  kueue_topology: Any = None, volcano_hypernodes: Any = None, topograph_model: Any = None,
                  ibnetdiscover: Any = None, nvlink_domains: Any = None, nvlink_domain_rate: Any = None,
                  block_links: str = "nvlink", max_gpus: int = None, **rate_overrides: Any) -> nx.Graph:
    """Build the cluster graph (DESIGN §2) from real-world inputs.

    Parameters
    ----------
    host_topology : path, optional
        ``nvidia-smi topo -m`` output, NCCL topology XML, or a one-host graph file.
    gpu : str or float, optional
        GPU generation (``"h100"``, ``"a100"``, ``"v100"``, ``"a30"``, ``"b200"``, ...) or a
        per-link NVLink rate in GB/s; sets the NVLink, PCIe, socket and NIC defaults.
    fabric : path, optional
        Slurm ``topology.conf`` or ``topology.yaml``.
    nodelist : str or list of str, optional
        Slurm hostlist (``node[001-016]``) of the hosts to include, in rank order.  With a
        fabric: a subset of its hosts (others are left out; unknown ones are an error).
        Without: those hosts under one switch.  A single name just names the one host.
    topology_name : str, optional
        Which topology of a ``topology.yaml`` (default: the ``cluster_default`` one, else
        the first).
    gpus_per_node : int, optional
        Without a host topology file: a synthetic host (:func:`synthetic_host`).
    oversubscription : float, str or sequence of float, optional
        Ratio of a switch's downlink to uplink capacity, for switches whose uplinks the fabric
        file does not give (no ``LinkSpeed``): one number for every level or one per level,
        leaf first (``2``, ``"2:1"``, ``[2, 1]``, ``"2,1"``).  Default 1: non-blocking.
    kubernetes_nodes, topology_labels, kueue_topology, volcano_hypernodes, topograph_model, ibnetdiscover
        The other fabric sources of DESIGN §8, each a path (or, except ``topology_labels``, an
        already parsed :class:`~.slurm.Fabric`); see :func:`.sources.read_network` for which
        combine.  Kubernetes nodes also give each host's GPU count (``nvidia.com/gpu``
        capacity) and product (``nvidia.com/gpu.product``), used when neither
        ``host_topology`` nor ``gpus_per_node`` / ``gpu`` is given.
    nvlink_domains : path or mapping, optional
        Host -> NVLink domain: ``nvidia-smi -q`` output of the hosts (``HOST: ...`` lines with
        ``ClusterUUID`` / ``CliqueId``) or ``HOST DOMAIN`` lines (:func:`.nvlink.parse_nvsmi_query`);
        a mapping is used as is.  Adds to the domains the fabric source gives (wins over them).
    nvlink_domain_rate : float, optional
        GB/s per direction of each GPU's link to its NVLink domain (default: see
        :func:`.nvlink.domain_rate`, 900 for GB200 NVL72).
    block_links : ``"nvlink"`` or ``"network"``
        Whether Slurm ``topology/block`` base blocks are NVLink domains (default) or only
        network switches.
    max_gpus : int, optional
        Refuse to build more GPUs than this (default :data:`MAX_CLUSTER_GPUS`), checked
        before any node is created.
    **rate_overrides
        GB/s: ``nvlink pcie pix pxb phb node sys nic`` (see :mod:`.common` and this module's
        docstring).

    Returns
    -------
    networkx.Graph
        Hosts in nodelist / fabric order, GPUs by ``local_index`` inside a host; graph
        attributes ``name``, ``gpu``, ``rates``, ``sources``, ``hosts``, ``fabric`` and
        ``warnings`` (when any).
    """
    overrides = check_rate_overrides(rate_overrides)
    ratios = parse_oversubscription(oversubscription)
    domain_gbps = check_domain_rate(nvlink_domain_rate)
    if block_links not in ("nvlink", "network"):
        raise InvalidArgumentError(f"block_links {block_links!r} must be 'nvlink' or 'network'", "block_links")
    if topology_name is not None and fabric is None:
        raise InvalidArgumentError(f"--topology-name {topology_name!r} given without --fabric FILE", "topology_name")
    if host_topology is not None and gpus_per_node is not None:
        raise InvalidArgumentError("give either --host-topology FILE or --gpus-per-node N, not both", "gpus_per_node")
    fab: Fabric | None = read_network(fabric=fabric, topology_name=topology_name, kubernetes_nodes=kubernetes_nodes,
                                      topology_labels=topology_labels, kueue_topology=kueue_topology,
                                      volcano_hypernodes=volcano_hypernodes, topograph_model=topograph_model,
                                      ibnetdiscover=ibnetdiscover)
    if host_topology is None and fab is not None and ((gpus_per_node is None and fab.host_gpus)
                                                      or (gpu is None and fab.host_products)):
        gpus_per_node, gpu = _hosts_from_inventory(fab, nodelist, gpu, gpus_per_node)
    if isinstance(host_topology, HostTemplate):
        template = host_topology
    elif host_topology is not None:
        template = load_host_template(host_topology, gpu=gpu, **overrides)
    elif gpus_per_node is not None:
        template = synthetic_host(gpus_per_node, gpu, **overrides)
    elif fab is not None or nodelist is not None:
        what = f"{fab.source} gives no GPUs per host and" if fab is not None else "a nodelist"
        raise InvalidArgumentError(
            f"{what} needs the hosts' topology: give --gpus-per-node N with --gpu GEN (e.g. --gpus-per-node 8 "
            "--gpu h100), or --host-topology FILE (nvidia-smi topo -m or NCCL XML)", "gpus_per_node")
    else:
        raise InvalidArgumentError("nothing to build: give --host-topology FILE (and optionally --fabric / --nodelist), "
                                   "or --gpus-per-node N with --gpu GEN and a network source", "host_topology")
    if template.gpu_count == 0:
        raise InvalidArgumentError(f"{template.source}: the host topology has no GPU", "host_topology")

    if nodelist is not None:
        hosts = expand(nodelist, field="nodelist")
        if not hosts:
            raise InvalidArgumentError(f"nodelist {nodelist!r} is empty", "nodelist")
        seen: set[str] = set()
        dups = [h for h in hosts if h in seen or seen.add(h)]
        if dups:
            raise InvalidArgumentError(f"nodelist lists {compress(dict.fromkeys(dups), sort=True)} more than once",
                                       "nodelist")
        if fab is not None and fab.kind != "flat":
            known = fab.host_set()
            missing = [h for h in hosts if h not in known]
            if missing:
                raise InvalidArgumentError(
                    f"nodelist hosts {_short(missing)} are not in the fabric file {fab.source} "
                    f"(it has {_short(fab.hosts)})", "nodelist")
    elif fab is not None:
        if fab.kind == "flat":
            raise InvalidArgumentError(f"{fab.source}: topology {fab.name!r} is flat and lists no nodes; give "
                                       "--nodelist HOSTLIST", "nodelist")
        hosts = list(fab.hosts)
    else:
        hosts = [DEFAULT_HOST]

    limit = MAX_CLUSTER_GPUS if max_gpus is None else min(int(max_gpus), MAX_CLUSTER_GPUS)
    if len(hosts) * template.gpu_count > limit:
        raise InvalidArgumentError(
            f"{len(hosts):,} hosts x {template.gpu_count} GPUs = {len(hosts) * template.gpu_count:,} GPUs; the limit "
            f"is {limit:,}", "nodelist" if nodelist is not None else "fabric")
    multi = fab is not None or len(hosts) > 1
    if multi and not template.nic_rates():
        template = _with_default_nic(template)
    if fab is not None and fab.host_gpus:
        odd = [h for h in hosts if fab.host_gpus.get(h, template.gpu_count) != template.gpu_count]
        if odd:
            fab.warnings.append(
                f"{fab.source}: {len(odd)} hosts (e.g. {odd[0]!r}: {fab.host_gpus[odd[0]]} GPUs) report a GPU count "
                f"other than the {template.gpu_count} of the host topology; every host is built with "
                f"{template.gpu_count} (select the hosts with --nodelist)")
    if fab is not None and fab.host_links:
        nics = len(template.nic_rates())
        short = [h for h in hosts if 0 < fab.host_links.get(h, nics) < nics]
        if short:
            fab.warnings.append(
                f"{fab.source}: {len(short)} hosts (e.g. {short[0]!r}: {fab.host_links[short[0]]} port(s)) have fewer "
                f"network ports in the file than the {nics} fabric NICs of the host topology; all {nics} NICs are "
                "linked to the switches the file names, which overstates their network capacity (a partial "
                "discovery, or give a host topology with that many NICs)")
    for h in hosts:
        if "/" in h:
            raise InvalidArgumentError(f"host name {h!r} contains '/', which separates host and device in node ids",
                                       "nodelist")

    G = nx.Graph()
    for h in hosts:
        template.instantiate(G, h)
    rates = dict(template.rates)
    warnings = list(template.warnings)
    sources = [template.source]
    fabric_info: dict[str, Any] = {"kind": "none"}
    if multi:
        fb = FabricBuilder(G, hosts, template.nic_rates(), ratios)
        if fab is None:
            fb.flat("fabric")
            fabric_info = {"kind": "flat"}
        else:
            sources.append(fab.source)
            warnings += fab.warnings
            fabric_info = {"kind": fab.kind, "name": fab.name} if fab.name else {"kind": fab.kind}
            if fab.kind == "flat":
                fb.flat(fab.name or "flat")
            elif fab.kind == "tree":
                fb.tree(fab)
            else:
                if fab.kind == "block":
                    fabric_info["block_sizes"] = list(fab.block_sizes)
                fb.blocks(fab)
        warnings += fb.warnings
        fabric_info["oversubscription"] = ratios[0] if len(ratios) == 1 else list(ratios)
        if fab is not None and fab.format != "slurm":
            fabric_info["format"] = fab.format

    domains = _domains(fab, block_links, nvlink_domains, hosts)
    gen = GENERATIONS.get(template.gpu)
    if domains:
        rate, why = domain_rate(template, gen, domain_gbps)
        if domain_gbps is None and gen is not None and (gen.links == 0 or gen.topology != "nvswitch") and \
                not (fab is not None and fab.domains) and nvlink_domains is None:
            warnings.append(f"{template.gpu} GPUs have no NVSwitch: the fabric's blocks are not treated as NVLink "
                            "domains (give --nvlink-domain-rate to force it)")
        else:
            count = apply_nvlink_domains(G, template, hosts, domains, rate, gen.links if gen and gen.links else None)
            fabric_info["nvlink_domains"] = {"count": len(count), "hosts": sum(count.values()), "rate_gbps": rate,
                                             "rate_from": why}
    elif domain_gbps is not None:
        raise InvalidArgumentError("an NVLink domain rate is given but no input places any host in an NVLink domain "
                                   "(Slurm topology/block, --nvlink-domains, Kubernetes gpu.clique labels, a "
                                   "Topograph model)", "nvlink_domain_rate")
    elif gen is not None and gen.nvlink_domain and len(hosts) > 1:
        warnings.append(f"{template.gpu} hosts without an NVLink domain: each host's GPUs reach only each other over "
                        "NVLink; give --nvlink-domains (nvidia-smi -q ClusterUUIDs) or a fabric with NVLink blocks")

    ngpu = template.gpu_count * len(hosts)
    if len(hosts) == 1:
        label = f"{hosts[0]}: {template.gpu_count}x {template.gpu} ({template.format})"
    else:
        label = f"{len(hosts)} hosts x {template.gpu_count} {template.gpu} GPUs = {ngpu} GPUs ({fabric_info['kind']})"
    G.graph["name"] = label
    G.graph["gpu"] = template.gpu
    G.graph["rates"] = rates
    G.graph["sources"] = sources
    G.graph["hosts"] = compress(hosts) if len(hosts) <= 100000 else f"{len(hosts)} hosts"
    G.graph["fabric"] = fabric_info
    if warnings:
        G.graph["warnings"] = list(dict.fromkeys(warnings))
    return G


def _domains(fab: Fabric | None, block_links: str, nvlink_domains: Any, hosts: list[str]) -> dict[str, str]:
    """Host -> NVLink domain of the selected hosts: the fabric source's domains, Slurm base
    blocks (``block_links="nvlink"``), then ``nvlink_domains`` (which wins)."""
    out: dict[str, str] = {}
    if fab is not None:
        if fab.kind == "block" and block_links == "nvlink":
            for b in fab.switches.values():
                for n in b.nodes:
                    out.setdefault(n, b.name)
        out.update(fab.domains)
    if nvlink_domains is not None:
        if isinstance(nvlink_domains, dict):
            extra = {str(h): check_domain_name(d, f"nvlink_domains[{h!r}]") for h, d in nvlink_domains.items()}
        else:
            extra = read_nvlink_domains(nvlink_domains, hosts)
        unknown = [h for h in extra if h not in set(hosts)]
        if unknown and len(unknown) == len(extra):
            raise InvalidArgumentError(f"nvlink domains: none of its hosts ({_short(unknown)}) is in the cluster "
                                       f"({_short(hosts)})", "nvlink_domains")
        out.update(extra)
    selected = set(hosts)
    return {h: d for h, d in out.items() if h in selected}


def _hosts_from_inventory(fab: Fabric, nodelist: Any, gpu: Any, gpus_per_node: Any = None) -> tuple[Any, Any]:
    """GPUs per host and GPU generation from a node inventory (Kubernetes node capacities,
    Topograph block types), where ``gpus_per_node`` / ``gpu`` are not given.

    All selected hosts must have the same GPU count; the generation comes from ``gpu`` or
    else from the hosts' product names (:func:`.common.generation_from_product`)."""
    from .common import generation_from_product

    hosts = expand(nodelist, field="nodelist") if nodelist is not None else fab.hosts
    n = gpus_per_node
    if n is None:
        counts: dict[int, list[str]] = {}
        for h in hosts:
            if h in fab.host_gpus:
                counts.setdefault(fab.host_gpus[h], []).append(h)
        if not counts:
            raise InvalidArgumentError(f"{fab.source}: none of the selected hosts reports a GPU count; give "
                                       "--gpus-per-node and --gpu", "gpus_per_node")
        if len(counts) > 1:
            parts = "; ".join(f"{c} GPUs: {_short(hs, 60)}" for c, hs in sorted(counts.items()))
            raise InvalidArgumentError(f"{fab.source}: the hosts have different GPU counts ({parts}); select hosts "
                                       "of one kind with --nodelist or give --gpus-per-node", "gpus_per_node")
        n = next(iter(counts))
    if gpu is None:
        products = sorted({fab.host_products[h] for h in hosts if h in fab.host_products})
        gens = {generation_from_product(p) for p in products}
        if len(products) == 0 or None in gens or len({g.name for g in gens}) != 1:
            raise InvalidArgumentError(
                f"{fab.source}: cannot tell the GPU generation from the product labels "
                f"({', '.join(products) or 'none'}); give --gpu", "gpu")
        gpu = next(iter(gens)).name
    return n, gpu


def _short(hosts: Iterable[str], limit: int = 160) -> str:
    text = compress(list(dict.fromkeys(hosts)), sort=True)
    return text if len(text) <= limit else text[: limit - 3] + "..."
