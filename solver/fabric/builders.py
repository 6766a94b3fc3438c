"""Cluster graph builders: common fabrics as networkx graphs of physical links (DESIGN §2).

Every edge written here is one physical link (or a bundle of parallel links between the
same two nodes, summed) and its ``bandwidth`` is that link's capacity in GB/s (1e9 bytes/s)
per direction, shared by every flow routed over it.  No edge carries a per-GPU or per-pair
share.

Rates used as defaults (``tests/data/real-inputs/bandwidths.md``):

* NVLink 4 (H100/H200 SXM): 18 links x 25 GB/s per link per direction = 450 GB/s per GPU
  to the NVSwitch (NVIDIA markets it as 900 GB/s, both directions added).
* ConnectX-7 / NDR InfiniBand 400 Gb/s = 50 GB/s per direction per NIC port.
* PCIe Gen4 x16 = 31.5 GB/s per direction (rounded to 32 here, as before).
"""

from __future__ import annotations

import math
from typing import Iterable, NamedTuple, Sequence

import networkx as nx

from ..errors import InvalidArgumentError

__all__ = ["FatTreeTier", "fat_tree_cluster", "nvl72_cluster"]


class FatTreeTier(NamedTuple):
    """One switch tier of :func:`fat_tree_cluster`, leaves first.

    Attributes
    ----------
    fan_in : int
        Children per switch of this tier: hosts per leaf for the first tier, switches of the
        tier below for the others.
    oversubscription : float
        Ratio r of the switch's downlink capacity to its uplink capacity (``4.0`` = 4:1,
        ``1.0`` = non-blocking).  Uplink capacity = downlink capacity / r, where the downlink
        capacity is ``fan_in`` x the capacity of one child's link (a leaf: ``fan_in`` hosts x
        NIC ports per host x NIC rate).
    uplink_gbps : float or None
        The switch's total uplink capacity in GB/s, given explicitly (overrides
        ``oversubscription``).
    """

    fan_in: int
    oversubscription: float = 1.0
    uplink_gbps: float | None = None


def _check_gpu(gpu) -> None:
    """``gpu`` must be None or a GPU model :func:`~rankmap.solver.fabric.rates.gpu_arch` knows."""
    from .rates import gpu_arch

    if gpu is not None and gpu_arch(gpu) is None:
        raise InvalidArgumentError(f"gpu {gpu!r} is not a GPU model rankmap knows (e.g. a100, h100, h200, b200, gb200)",
                                   "cluster")


def _positive(x, what: str) -> float:
    try:
        v = float(x)
    except (TypeError, ValueError):
        raise InvalidArgumentError(f"{what} {x!r} is not a number", "cluster") from None
    if not math.isfinite(v) or v <= 0:
        raise InvalidArgumentError(f"{what} {x!r} must be finite and > 0", "cluster")
    return v


def _tier(t, k: int) -> FatTreeTier:
    if isinstance(t, FatTreeTier):
        raw = tuple(t)
    elif isinstance(t, (tuple, list)) and 1 <= len(t) <= 3:
        raw = tuple(t)
    else:
        raise InvalidArgumentError(
            f"tiers[{k}] = {t!r}: expected (fan_in, oversubscription) or (fan_in, oversubscription, uplink_gbps)",
            "cluster")
    fan_in = raw[0]
    if isinstance(fan_in, bool) or not isinstance(fan_in, int) or fan_in < 1:
        raise InvalidArgumentError(f"tiers[{k}] fan_in {fan_in!r} must be an integer >= 1", "cluster")
    r = _positive(raw[1], f"tiers[{k}] oversubscription") if len(raw) > 1 and raw[1] is not None else 1.0
    up = _positive(raw[2], f"tiers[{k}] uplink_gbps") if len(raw) > 2 and raw[2] is not None else None
    return FatTreeTier(fan_in, r, up)


def fat_tree_cluster(
    num_hosts: int,
    gpus_per_host: int = 8,
    intra: str = "nvswitch",
    intra_bandwidth_gbps: float | None = None,
    nic_bandwidth_gbps: float = 50.0,
    tiers: Sequence[FatTreeTier | tuple] = (),
    host_names: Iterable[str] | None = None,
    *,
    nics_per_host: int | None = None,
    nvlink_ports: int | None = None,
    nvlink_port_gbps: float = 25.0,
    pcie_bandwidth_gbps: float = 32.0,
    gpu: str | None = None,
) -> nx.Graph:
    """Build a common cluster graph: hosts of GPUs under a tree of switches, physical links.

    Parameters
    ----------
    num_hosts : int
    gpus_per_host : int
    intra : str
        How the GPUs of a host are joined:

        * ``"nvswitch"``: every GPU to one ``{host}/nvswitch`` node by one edge of
          ``intra_bandwidth_gbps`` = the sum of the GPU's NVLink ports (default 450 GB/s:
          H100 NVLink 4, 18 links x 25 GB/s per direction);
        * ``"nvlink-pairs"``: GPUs 2i, 2i+1 joined directly by an NVLink bridge of
          ``intra_bandwidth_gbps``, every GPU on one ``{host}/pcie`` switch by its PCIe link
          of ``pcie_bandwidth_gbps``;
        * ``"pcie"``: every GPU on one ``{host}/pcie`` switch by a PCIe link of
          ``intra_bandwidth_gbps``.
    intra_bandwidth_gbps : float, optional
        GB/s per direction of the link described under ``intra``.  Default:
        ``nvlink_ports x nvlink_port_gbps`` when ``nvlink_ports`` is given, else 450.
    nic_bandwidth_gbps : float
        Port rate of one NIC, GB/s per direction (50 = 400 Gb/s, ConnectX-7 NDR).  Each NIC
        links to its leaf switch at this rate.
    tiers : sequence of :class:`FatTreeTier` or tuples
        Switch tiers above the hosts, leaf first, each ``(fan_in, oversubscription)`` or
        ``(fan_in, oversubscription, uplink_gbps)``.  ``[(4, 2.0)]``: 4 hosts per leaf, 2:1,
        so with 8 GPUs per host and one 50 GB/s NIC per GPU a leaf has 4 x 8 x 50 = 1600 GB/s
        of downlinks and one 800 GB/s edge (all its uplink ports, summed) up to the next tier.
        A tier's downlink capacity is nominal (``fan_in`` full children) even when the last
        switch of a tier has fewer children.  The last tier's switches link to one
        ``switch:root`` (the spine layer: parallel spines wired to every switch below behave,
        with ECMP, as one switch with summed capacities).  With no tiers all hosts hang off
        one switch ``switch:t0.0``.
    host_names : iterable of str, optional
        Defaults to ``node000``, ``node001``, ...
    nics_per_host : int, optional
        ``None`` (default) or ``gpus_per_host``: one rail NIC per GPU, ``{host}/nic{i}``,
        linked to GPU i at ``nic_bandwidth_gbps`` (the NIC sits on the GPU's PCIe switch; the
        NIC port, not PCIe, is the narrower) and to the leaf at ``nic_bandwidth_gbps``.
        ``k < gpus_per_host``: k shared NICs per host, NIC j serving GPUs ``i`` with
        ``i * k // gpus_per_host == j``; each NIC hangs off a PCIe switch by a
        ``pcie_bandwidth_gbps`` link (``"nvswitch"`` hosts: one ``{host}/pcie{j}`` switch per
        NIC, its GPUs linked to it at ``pcie_bandwidth_gbps``; other hosts: the host's
        ``{host}/pcie`` switch).
    nvlink_ports : int, optional
        NVLink ports per GPU (H100 18, A100 12, B200 18); with ``nvlink_port_gbps`` it gives
        ``intra_bandwidth_gbps``.  The edges then carry ``nvlinks=nvlink_ports``.
    nvlink_port_gbps : float
        One NVLink, GB/s per direction (NVLink 2/3/4: 25; NVLink 5: 50).
    pcie_bandwidth_gbps : float
        A GPU's or NIC's PCIe link where one is modelled (default 32, about PCIe Gen4 x16).
    gpu : str, optional
        The GPU model (``h100``, ``a100``, ``b200`` …, as ``rankmap cluster --gpu``), stored as
        the graph's ``gpu`` attribute: NCCL's per-generation NVLink rate, and NVLS / NVLSTree /
        tree all-reduce where the generation runs them (:mod:`rankmap.solver.fabric.rates`).
        None (default): no generation named (NVLink at 0.8 of nominal, ring all-reduce only).

    Returns
    -------
    networkx.Graph
        GPU ids ``{host}/gpu{i}``; hosts' switches ``{host}/nvswitch`` or ``{host}/pcie``;
        NICs ``{host}/nic{j}``; fabric switches ``switch:t{tier}.{i}`` and ``switch:root``.
        Every edge's ``bandwidth`` is a physical capacity in GB/s.  The non-GPU nodes form a
        forest (GPUs link to several of them).
    """
    _check_gpu(gpu)
    if num_hosts < 1 or gpus_per_host < 1:
        raise InvalidArgumentError(
            f"num_hosts and gpus_per_host must be >= 1, got {num_hosts} and {gpus_per_host}", "cluster"
        )
    if intra not in ("nvswitch", "nvlink-pairs", "pcie"):
        raise InvalidArgumentError(f"intra {intra!r} is not one of nvswitch, nvlink-pairs, pcie", "cluster")
    names = list(host_names) if host_names is not None else [f"node{h:03d}" for h in range(num_hosts)]
    if len(names) != num_hosts:
        raise InvalidArgumentError(f"{len(names)} host names given for {num_hosts} hosts", "cluster")
    nic_bw = _positive(nic_bandwidth_gbps, "nic_bandwidth_gbps")
    pcie_bw = _positive(pcie_bandwidth_gbps, "pcie_bandwidth_gbps")
    nvlinks = None
    if nvlink_ports is not None:
        if intra == "pcie":
            raise InvalidArgumentError("nvlink_ports given for intra='pcie' (no NVLink)", "cluster")
        if isinstance(nvlink_ports, bool) or not isinstance(nvlink_ports, int) or nvlink_ports < 1:
            raise InvalidArgumentError(f"nvlink_ports {nvlink_ports!r} must be an integer >= 1", "cluster")
        if intra_bandwidth_gbps is not None:
            raise InvalidArgumentError("give intra_bandwidth_gbps or nvlink_ports, not both", "cluster")
        nvlinks = nvlink_ports
        intra_bw = nvlink_ports * _positive(nvlink_port_gbps, "nvlink_port_gbps")
    else:
        intra_bw = _positive(450.0 if intra_bandwidth_gbps is None else intra_bandwidth_gbps,
                             "intra_bandwidth_gbps")
    nics = gpus_per_host if nics_per_host is None else nics_per_host
    if isinstance(nics, bool) or not isinstance(nics, int) or not 1 <= nics <= gpus_per_host:
        raise InvalidArgumentError(
            f"nics_per_host {nics_per_host!r} must be an integer between 1 and gpus_per_host ({gpus_per_host})",
            "cluster")
    rail = nics == gpus_per_host
    tiers = [_tier(t, k) for k, t in enumerate(tiers)]

    g = nx.Graph(name=f"{num_hosts}x{gpus_per_host} {intra}")
    if gpu is not None:
        g.graph["gpu"] = gpu
    # switch tiers: tier 0 = leaves; sizes[t + 1] = number of tier-t switches
    sizes = [num_hosts]
    for t in tiers:
        sizes.append(math.ceil(sizes[-1] / t.fan_in))
    nv_attrs = {"link": "nvlink", **({"nvlinks": nvlinks} if nvlinks else {})}
    for h, host in enumerate(names):
        hub = f"{host}/{'nvswitch' if intra == 'nvswitch' else 'pcie'}"
        g.add_node(hub, kind="nvswitch" if intra == "nvswitch" else "pcie_switch", host=host)
        leaf = f"switch:t0.{h // tiers[0].fan_in}" if tiers else "switch:t0.0"
        g.add_node(leaf, kind="switch", tier=0)
        for i in range(gpus_per_host):
            gpu = f"{host}/gpu{i}"
            g.add_node(gpu, kind="gpu", host=host, local_index=i)
            if intra == "nvswitch":
                g.add_edge(gpu, hub, bandwidth=intra_bw, **nv_attrs)
            elif intra == "nvlink-pairs":
                g.add_edge(gpu, hub, bandwidth=pcie_bw, link="pcie")
                if i % 2 == 1:
                    g.add_edge(f"{host}/gpu{i - 1}", gpu, bandwidth=intra_bw, **nv_attrs)
            else:
                g.add_edge(gpu, hub, bandwidth=intra_bw, link="pcie")
        for j in range(nics):
            nic = f"{host}/nic{j}"
            g.add_node(nic, kind="nic", host=host, port_bandwidth=nic_bw)
            g.add_edge(nic, leaf, bandwidth=nic_bw, link="net")
            if rail:
                g.add_edge(f"{host}/gpu{j}", nic, bandwidth=nic_bw, link="pcie")
            elif intra == "nvswitch":
                sw = f"{host}/pcie{j}"
                g.add_node(sw, kind="pcie_switch", host=host)
                g.add_edge(sw, nic, bandwidth=pcie_bw, link="pcie")
                for i in range(gpus_per_host):
                    if i * nics // gpus_per_host == j:
                        g.add_edge(f"{host}/gpu{i}", sw, bandwidth=pcie_bw, link="pcie")
            else:
                g.add_edge(hub, nic, bandwidth=pcie_bw, link="pcie")
    # uplinks: physical capacity = nominal downlink capacity / oversubscription
    child_link = nics * nic_bw  # one host's links into its leaf
    for t, tier in enumerate(tiers):
        down = tier.fan_in * child_link
        up = tier.uplink_gbps if tier.uplink_gbps is not None else down / tier.oversubscription
        for i in range(sizes[t + 1]):
            lower = f"switch:t{t}.{i}"
            upper = f"switch:t{t + 1}.{i // tiers[t + 1].fan_in}" if t + 1 < len(tiers) else "switch:root"
            g.add_node(upper, kind="switch", tier=t + 1)
            g.nodes[lower]["downlink_gbps"] = down
            g.nodes[lower]["oversubscription"] = down / up
            g.add_edge(lower, upper, bandwidth=float(up), link="fabric")
        child_link = up
    return g


def nvl72_cluster(racks: int, hosts_per_rack: int = 18, gpus_per_host: int = 4, nvlink_gbps: float = 900.0,
                  nic_gbps: float = 50.0, hosts_per_leaf: int = 9, leaf_oversubscription: float = 2.0,
                  gpu: str | None = None) -> nx.Graph:
    """GB200 NVL72-style racks: every rack one NVLink domain, per-GPU NICs to leaf switches.

    Parameters
    ----------
    racks : int
        Number of racks (NVLink domains), >= 1.
    hosts_per_rack : int
        Compute trays per rack (NVL72: 18).
    gpus_per_host : int
        GPUs per tray (GB200: 4, two Grace Blackwell superchips).
    nvlink_gbps : float
        Each GPU's link to its rack's NVLink switches, GB/s per direction: GB200 NVLink 5,
        18 links x 50 GB/s = 900 (NVIDIA's "1.8 TB/s bidirectional per GPU";
        ``bandwidths.md`` §1, src 3).
    nic_gbps : float
        One NIC port per GPU, GB/s per direction (ConnectX-7 NDR 400 Gb/s = 50).
    hosts_per_leaf : int
        Trays per leaf switch, counted over the whole cluster (a leaf may span two racks).
    leaf_oversubscription : float
        A leaf's downlink : uplink capacity (2.0: 9 hosts x 4 NICs x 50 = 1800 GB/s down,
        900 up).
    gpu : str, optional
        The GPU model, as :func:`fat_tree_cluster` (``"gb200"``: NCCL's Blackwell NVLink rate
        and NVLS); None: no generation named.

    Returns
    -------
    networkx.Graph
        Hosts ``r{rack}t{tray:02d}``, GPUs ``{host}/gpu{i}`` with ``nvlink_domain="rack{r}"``;
        per rack one node ``nvlink:rack{r}`` (kind ``nvswitch``, ``role="nvlink_domain"``)
        linked to each of its GPUs at ``nvlink_gbps``; NIC ``{host}/nic{i}`` linked to GPU i
        and to leaf ``switch:leaf{h // hosts_per_leaf}`` at ``nic_gbps``; every leaf linked to
        ``switch:spine`` by one edge of its downlink capacity / ``leaf_oversubscription``.
        The NVLink nodes and the NIC tree are separate trees of the switch forest.

    Raises
    ------
    InvalidArgumentError
        A count < 1 or a rate that is not finite and > 0.
    """
    for what, v in (("racks", racks), ("hosts_per_rack", hosts_per_rack), ("gpus_per_host", gpus_per_host),
                    ("hosts_per_leaf", hosts_per_leaf)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise InvalidArgumentError(f"nvl72_cluster: {what} {v!r} must be an integer >= 1", "cluster")
    _check_gpu(gpu)
    nv = _positive(nvlink_gbps, "nvlink_gbps")
    nic_bw = _positive(nic_gbps, "nic_gbps")
    ratio = _positive(leaf_oversubscription, "leaf_oversubscription")
    g = nx.Graph(name=f"{racks} x NVL{hosts_per_rack * gpus_per_host}")
    if gpu is not None:
        g.graph["gpu"] = gpu
    down: dict[int, float] = {}
    for r in range(racks):
        dom = f"rack{r}"
        sw = f"nvlink:{dom}"
        g.add_node(sw, kind="nvswitch", role="nvlink_domain", nvlink_domain=dom)
        for t in range(hosts_per_rack):
            h = r * hosts_per_rack + t
            host = f"r{r}t{t:02d}"
            leaf = h // hosts_per_leaf
            lid = f"switch:leaf{leaf}"
            if lid not in g:
                g.add_node(lid, kind="switch", tier=0)
            for i in range(gpus_per_host):
                gpu = f"{host}/gpu{i}"
                g.add_node(gpu, kind="gpu", host=host, local_index=i, nvlink_domain=dom)
                g.add_edge(gpu, sw, bandwidth=nv, link="nvlink")
                nic = f"{host}/nic{i}"
                g.add_node(nic, kind="nic", host=host, port_bandwidth=nic_bw)
                g.add_edge(gpu, nic, bandwidth=nic_bw, link="pcie")
                g.add_edge(nic, lid, bandwidth=nic_bw, link="net")
                down[leaf] = down.get(leaf, 0.0) + nic_bw
    g.add_node("switch:spine", kind="switch", tier=1)
    for leaf, d in sorted(down.items()):
        lid = f"switch:leaf{leaf}"
        g.nodes[lid]["downlink_gbps"] = d
        g.add_edge(lid, "switch:spine", bandwidth=d / ratio, link="fabric")
    return g
