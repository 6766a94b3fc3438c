"""Cluster graph builders: common fabrics as networkx graphs of physical links (DESIGN §2)."""

from __future__ import annotations

import math
from typing import Iterable, Sequence

import networkx as nx

from .errors import InvalidArgumentError

__all__ = ["fat_tree_cluster"]


def fat_tree_cluster(
    num_hosts: int,
    gpus_per_host: int = 8,
    intra: str = "nvswitch",
    intra_bandwidth_gbps: float = 450.0,
    nic_bandwidth_gbps: float = 50.0,
    tiers: Sequence[tuple[int, float]] = (),
    host_names: Iterable[str] | None = None,
) -> nx.Graph:
    """Build a common cluster graph: hosts of GPUs under a tree of switches.

    Parameters
    ----------
    num_hosts : int
    gpus_per_host : int
    intra : str
        ``"nvswitch"`` (every GPU to one NVSwitch node at ``intra_bandwidth_gbps``,
        e.g. 450 GB/s for H100 NVLink 4 = 18 links × 25 GB/s),
        ``"nvlink-pairs"`` (GPUs 2i, 2i+1 joined by NVLink at
        ``intra_bandwidth_gbps``, all GPUs on a PCIe switch at 32 GB/s, i.e. PCIe
        Gen4 x16) or ``"pcie"`` (all GPUs on a PCIe switch at ``intra_bandwidth_gbps``).
    nic_bandwidth_gbps : float
        Per-GPU NIC rate to the first switch tier, GB/s (50 = 400 Gb/s).
    tiers : sequence of (fan_in, uplink_gbps)
        Switch tiers above the hosts, leaf first: ``(4, 25.0)`` puts 4 hosts
        under each leaf switch whose uplink to the next tier runs at 25 GB/s
        per GPU-equivalent path.  With no tiers all hosts hang off one switch.
    host_names : iterable of str, optional
        Defaults to ``node000``, ``node001``, ...

    Returns
    -------
    networkx.Graph
        GPU ids ``{host}/gpu{i}``, hosts' switches ``{host}/nvswitch`` or
        ``{host}/pcie``, fabric switches ``switch:t{tier}.{i}``.
    """
    if num_hosts < 1 or gpus_per_host < 1:
        raise InvalidArgumentError(
            f"num_hosts and gpus_per_host must be >= 1, got {num_hosts} and {gpus_per_host}", "cluster"
        )
    names = list(host_names) if host_names is not None else [f"node{h:03d}" for h in range(num_hosts)]
    if len(names) != num_hosts:
        raise InvalidArgumentError(f"{len(names)} host names given for {num_hosts} hosts", "cluster")
    g = nx.Graph(name=f"{num_hosts}x{gpus_per_host} {intra}")
    # switch tiers: tier 0 = leaves
    sizes = [num_hosts]
    for fan_in, _ in tiers:
        sizes.append(math.ceil(sizes[-1] / fan_in))
    for h, host in enumerate(names):
        hub = f"{host}/{'nvswitch' if intra == 'nvswitch' else 'pcie'}"
        g.add_node(hub, kind="nvswitch" if intra == "nvswitch" else "pcie_switch", host=host)
        leaf = f"switch:t0.{h // tiers[0][0]}" if tiers else "switch:t0.0"
        g.add_node(leaf, kind="switch")
        for i in range(gpus_per_host):
            gpu = f"{host}/gpu{i}"
            g.add_node(gpu, kind="gpu", host=host, local_index=i)
            if intra == "nvswitch":
                g.add_edge(gpu, hub, bandwidth=float(intra_bandwidth_gbps))
            elif intra == "nvlink-pairs":
                g.add_edge(gpu, hub, bandwidth=32.0)
                if i % 2 == 1:
                    g.add_edge(f"{host}/gpu{i - 1}", gpu, bandwidth=float(intra_bandwidth_gbps))
            elif intra == "pcie":
                g.add_edge(gpu, hub, bandwidth=float(intra_bandwidth_gbps))
            else:
                raise InvalidArgumentError(
                    f"intra {intra!r} is not one of nvswitch, nvlink-pairs, pcie", "cluster"
                )
            nic = f"{host}/nic{i}"
            g.add_node(nic, kind="nic", host=host)
            g.add_edge(gpu, nic, bandwidth=float(nic_bandwidth_gbps))
            g.add_edge(nic, leaf, bandwidth=float(nic_bandwidth_gbps))
    for t, (fan_in, uplink) in enumerate(tiers):
        upper_count = sizes[t + 2] if t + 2 < len(sizes) else None
        for i in range(sizes[t + 1]):
            lower = f"switch:t{t}.{i}"
            if t + 1 < len(tiers):
                upper = f"switch:t{t + 1}.{i // tiers[t + 1][0]}"
            else:
                upper = "switch:root"
            g.add_node(upper, kind="switch")
            g.add_edge(lower, upper, bandwidth=float(uplink))
        del upper_count
    return g
