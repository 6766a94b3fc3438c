"""Ask for the right allocation (issue 26, ``rankmap request``): the scheduler request that keeps
each required group (TP, and EP when asked) inside one NVLink domain and the job's hosts packed.

The arithmetic.  Launchers give each node a contiguous block of G ranks (one pod / one Slurm
node per G GPUs, torchrun's ``node_rank*G + local_rank``), so the ranks of a run of consecutive
nodes are one contiguous block.  Megatron's group of class c holds the ranks that differ only in
c's coordinate of the order (DESIGN §1, first token fastest), so every aligned block of
``span(c) = product of the sizes up to and including c`` consecutive ranks holds whole groups of c
(tp: ``tp``; cp: ``tp*cp``; ep in the expert generator ``etp-ep-...``: ``etp*ep``; dp in
``tp-cp-ep-dp-pp``: ``tp*cp*dp``).  The *unit* is ``U = lcm(span(c))`` over the required
classes, ``U/G`` nodes (at least 1; when ``U < G``, G must be a multiple of U so no group spans
two nodes).  A request whose segments (or slices, or sub-groups) are whole multiples of the unit,
each inside one NVLink domain of ``D`` GPUs (``D/G`` nodes), keeps every required group inside a
domain provided the ranks follow the segments (run ``rankmap solve`` on the granted nodes, or
``rankmap check``, when the node list is not in domain order).  The recommended segment is the
largest multiple of the unit that fits a domain and divides the job's nodes (packed: more of the
job on NVLink); the least one is reported beside it.

Sources:

* Slurm ``sbatch --segment=N`` (topology/block; https://slurm.schedmd.com/sbatch.html and
  https://slurm.schedmd.com/topology.html): the allocation is made of segments of N nodes, each in
  one base block; the job's node count must be a multiple of N.  ``--switches=N[@max-time]``
  (topology/tree): at most N leaf switches, waiting up to max-time for them.
* Kueue topology-aware scheduling (https://kueue.sigs.k8s.io/docs/concepts/topology_aware_scheduling/):
  pod-template annotations ``kueue.x-k8s.io/podset-required-topology`` (every pod in one domain of
  that level), ``kueue.x-k8s.io/podset-preferred-topology`` (as close as possible, going up the
  levels when needed), ``kueue.x-k8s.io/podset-slice-required-topology`` with
  ``kueue.x-k8s.io/podset-slice-size`` (consecutive slices of that many pods, each in one domain;
  the size needs the slice topology).
* Volcano network-topology-aware scheduling (https://volcano.sh/en/docs/network_topology_aware_scheduling/):
  ``networkTopology: {mode: hard|soft, highestTierAllowed: N}`` on the Job / PodGroup (hard: every
  pod under one HyperNode of tier <= N; tier 1 nearest the nodes), and per sub-group
  (``subGroupPolicy: [{name, subGroupSize, matchLabelKeys, networkTopology}]`` on the PodGroup).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np

from ..errors import InfeasibleError, InvalidArgumentError
from ..megatron.config import ParallelConfig
from ..megatron.ranks import parse_order
from ..types import Constraint

__all__ = ["SCHEDULERS", "REQUEST_CLASSES", "DEFAULT_NVLINK_LABEL", "DEFAULT_MAX_WAIT", "SEGMENT_LABEL",
           "AllocationAdvice", "SchedulerRequest", "group_span", "recommend_allocation", "cluster_shape"]

#: Schedulers ``rankmap request --scheduler`` answers for (``all``: every one).
SCHEDULERS = ("slurm", "kueue", "volcano")
#: Classes a request can keep inside one domain (their groups are aligned rank blocks).
REQUEST_CLASSES = ("tp", "cp", "ep", "etp", "dp", "edp", "pp")
#: Node label of the NVLink domain in Kueue Topology levels (GPU Feature Discovery's clique label).
DEFAULT_NVLINK_LABEL = "nvidia.com/gpu.clique"
#: The node label Kueue's packing preference uses when NVLink domains are single nodes.
HOSTNAME_LABEL = "kubernetes.io/hostname"
#: Slurm's wait for the leaf-switch count of ``--switches`` (its max-time, ``[days-]hours:minutes:seconds``).
DEFAULT_MAX_WAIT = "1:00:00"
#: A Slurm time value (``minutes``, ``minutes:seconds``, ``hours:minutes:seconds``, ``days-hours[:minutes[:seconds]]``).
_SLURM_TIME = re.compile(r"^(\d{1,5}-\d{1,2}(:\d{2}){0,2}|\d{1,6}(:\d{2}){0,2})$")
#: A Kubernetes label key (optional DNS prefix, ``/``, a name of letters, digits, ``-_.``).
_LABEL = re.compile(r"^([a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
#: Pod label whose value (pod index // segment pods) forms Volcano's sub-groups.
SEGMENT_LABEL = "rankmap.io/nvlink-segment"


def group_span(cfg: ParallelConfig, traffic_class: str) -> int:
    """Ranks of the aligned block that holds whole groups of ``traffic_class``: the product of the
    generator's sizes up to and including the class's token in ``cfg.order`` (DESIGN §1).

    Decoder generator: tp, cp, dp, pp (ep = 1); expert generator: etp (as ``tp``), ep, edp (as
    ``dp``), pp (cp = 1).  A class of size 1 spans 1.

    Raises
    ------
    InvalidArgumentError
        A class other than :data:`REQUEST_CLASSES` (field ``within``).
    """
    dense = {"tp": cfg.tp, "cp": cfg.cp, "ep": 1, "dp": cfg.dp, "pp": cfg.pp}
    expert = {"tp": cfg.etp, "cp": 1, "ep": cfg.ep, "dp": cfg.edp, "pp": cfg.pp}
    where = {"tp": (dense, "tp"), "cp": (dense, "cp"), "dp": (dense, "dp"), "pp": (dense, "pp"),
             "ep": (expert, "ep"), "etp": (expert, "tp"), "edp": (expert, "dp")}
    if traffic_class not in where:
        raise InvalidArgumentError(
            f"--within {traffic_class}: a request keeps only {', '.join(REQUEST_CLASSES)} groups in a domain",
            "within")
    sizes, token = where[traffic_class]
    if sizes[token] == 1:
        return 1
    span = 1
    for t in parse_order(cfg.order):
        span *= sizes.get(t, 1)
        if t == token:
            return span
    return span


@dataclass(frozen=True)
class SchedulerRequest:
    """One scheduler's request.

    Attributes
    ----------
    scheduler : str
        ``slurm``, ``kueue`` or ``volcano``.
    options : tuple of str
        Slurm: the ``sbatch``/``srun`` options (``--nodes=64``, ``--segment=16`` ...); empty otherwise.
    annotations : dict of str -> str
        Kueue: the pod-template annotations; empty otherwise.
    spec : dict
        Volcano: the PodGroup/Job spec fields (``networkTopology``, ``subGroupPolicy``); empty otherwise.
    why : str
        One line: why this request keeps the groups inside NVLink domains and the hosts packed.
    """

    scheduler: str
    options: tuple[str, ...] = ()
    annotations: Mapping[str, str] = field(default_factory=dict)
    spec: Mapping[str, Any] = field(default_factory=dict)
    why: str = ""

    def to_dict(self) -> dict[str, Any]:
        """``{"scheduler", "options" | "annotations" | "spec", "why"}`` (the field of its scheduler)."""
        out: dict[str, Any] = {"scheduler": self.scheduler}
        if self.scheduler == "slurm":
            out["options"] = list(self.options)
        elif self.scheduler == "kueue":
            out["annotations"] = dict(self.annotations)
        else:
            out["spec"] = _plain(self.spec)
        out["why"] = self.why
        return out


def _plain(value):
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


@dataclass(frozen=True)
class AllocationAdvice:
    """What ``rankmap request`` prints (JSON: :meth:`to_dict`).

    Attributes
    ----------
    world_size, gpus_per_node, nodes : int
        Ranks, GPUs per node (G), nodes of the job (world size / G).
    nvlink_domain_gpus, nodes_per_domain : int
        GPUs (D) and nodes (D / G) of one NVLink domain.
    requirements : tuple of Constraint
        The classes kept inside one NVLink domain.
    unit_ranks, unit_nodes : int
        U = lcm of the required classes' spans (ranks) and the nodes it takes (at least 1).
    segment_nodes, min_segment_nodes : int
        The recommended segment (the largest multiple of the unit that fits a domain and divides
        the job's nodes) and the least one (the unit).
    requests : tuple of SchedulerRequest
        One per scheduler asked for.
    """

    world_size: int
    gpus_per_node: int
    nodes: int
    nvlink_domain_gpus: int
    nodes_per_domain: int
    requirements: tuple[Constraint, ...]
    unit_ranks: int
    unit_nodes: int
    segment_nodes: int
    min_segment_nodes: int
    requests: tuple[SchedulerRequest, ...]
    order: str = "tp-cp-ep-dp-pp"

    def to_dict(self) -> dict[str, Any]:
        """The JSON of ``rankmap request``: the fields above, ``within`` as strings, ``requests`` by scheduler."""
        return {
            "world_size": self.world_size, "order": self.order, "gpus_per_node": self.gpus_per_node,
            "nodes": self.nodes, "nvlink_domain_gpus": self.nvlink_domain_gpus,
            "nodes_per_domain": self.nodes_per_domain,
            "within": [str(c) for c in self.requirements],
            "unit_ranks": self.unit_ranks, "unit_nodes": self.unit_nodes,
            "segment_nodes": self.segment_nodes, "min_segment_nodes": self.min_segment_nodes,
            "requests": {r.scheduler: r.to_dict() for r in self.requests},
        }


def cluster_shape(cluster, graph=None) -> tuple[int, int, int | None]:
    """``(GPUs per node, GPUs per NVLink domain, nodes per leaf or None)`` of a cluster model.

    The NVLink domain is the graph's ``nvlink_domain`` attribute when every GPU has one, else the
    solve's ``nvlink`` level (:meth:`~rankmap.solver.fabric.cluster.Cluster.level_labels`): the
    finest bandwidth level, a host on HGX clusters.  Nodes per leaf: the largest domain, in
    hosts, of the first level joining several hosts (``leaf``; every host when one switch joins them
    all; None for a single host).

    Raises
    ------
    InvalidArgumentError
        Hosts with different GPU counts, or NVLink domains of different sizes (field ``cluster``).
    """
    per_host = np.asarray(cluster.gpus_per_host)
    if np.unique(per_host).size != 1:
        raise InvalidArgumentError(
            f"the cluster's hosts have different GPU counts ({', '.join(map(str, np.unique(per_host)[:6]))}); "
            "a request asks for whole nodes of one size", "cluster")
    g = int(per_host[0])
    tags = None
    if graph is not None:
        tags = [graph.nodes[d].get("nvlink_domain") for d in cluster.devices]
        if any(t is None for t in tags):
            tags = None
    if tags is not None:
        _, counts = np.unique(np.array(tags, dtype=object).astype(str), return_counts=True)
    else:
        counts = np.bincount(cluster.level_labels("nvlink"))
    if np.unique(counts).size != 1:
        raise InvalidArgumentError(
            f"the cluster's NVLink domains have different sizes ({', '.join(map(str, np.unique(counts)[:6]))} "
            "GPUs); give --nvlink-domain-size", "cluster")
    d = int(counts[0])
    leaf = None
    inter = cluster.inter_host_levels()
    if inter:
        leaf = int(np.bincount(cluster.domains[inter[0]]).max()) // g  # one switch over all: every host
    return g, d, leaf


#: Largest size the service's ``RecommendAllocationRequest`` carries (its fields are int32): the CLI
#: refuses the same values, so an answer in process is one the service can give.
MAX_INT32 = 2**31 - 1


def _positive(value, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise InvalidArgumentError(f"{name.replace('_', '-')} must be a positive integer, got {value!r}", name)
    if value > MAX_INT32:
        raise InvalidArgumentError(f"--{name.replace('_', '-')} {int(value)} is above {MAX_INT32:,}, the largest "
                                   f"the service's int32 field holds", name)
    return int(value)


def recommend_allocation(cfg: ParallelConfig, gpus_per_node: int, nvlink_domain_gpus: int,
                         requirements: Sequence[Constraint] = (Constraint("tp", "nvlink"),),
                         schedulers: Sequence[str] = SCHEDULERS, *, nodes_per_leaf: int | None = None,
                         nvlink_label: str = DEFAULT_NVLINK_LABEL, pack_label: str | None = None,
                         nvlink_tier: int = 1, max_wait: str = DEFAULT_MAX_WAIT) -> AllocationAdvice:
    """The Slurm, Kueue and Volcano requests that keep the required groups inside NVLink domains.

    Parameters
    ----------
    cfg : ParallelConfig
        The job's sizes and order (world size = ranks = GPUs).
    gpus_per_node : int
        G, GPUs of one node (one Slurm node, one pod).
    nvlink_domain_gpus : int
        D, GPUs of one NVLink domain (GB200 NVL72: 72; an HGX host: G); a multiple of G.
    requirements : sequence of Constraint
        Classes to keep inside one NVLink domain (level ``nvlink``; ``host`` is accepted and means one
        node).  Default: tp.
    schedulers : sequence of str
        Any of :data:`SCHEDULERS`.
    nodes_per_leaf : int, optional
        Nodes under one leaf switch, for Slurm ``--switches`` when NVLink domains are single nodes.
    nvlink_label : str
        Kueue Topology level (node label) of the NVLink domain.
    pack_label : str, optional
        Kueue level the whole pod set should prefer (default: the NVLink label when domains span
        nodes, ``kubernetes.io/hostname``, the tightest packing, otherwise).
    nvlink_tier : int
        Volcano HyperNode tier of the NVLink domains (1: nearest the nodes).
    max_wait : str
        Slurm ``--switches`` max-time.

    Returns
    -------
    AllocationAdvice

    Raises
    ------
    InvalidArgumentError
        Non-positive sizes; D not a multiple of G; world size not a multiple of G; a requirement
        with another level or class; a scheduler name not in :data:`SCHEDULERS` (naming it).
    InfeasibleError
        A required group larger than an NVLink domain, or groups that straddle nodes whatever the
        allocation (U < G and U does not divide G).
    """
    g = _positive(gpus_per_node, "gpus_per_node")
    d = _positive(nvlink_domain_gpus, "nvlink_domain_size")
    tier = _positive(nvlink_tier, "nvlink_tier")
    if d % g:
        raise InvalidArgumentError(
            f"--nvlink-domain-size {d} is not a multiple of --gpus-per-node {g} (a domain holds whole nodes)",
            "nvlink_domain_size")
    if not isinstance(max_wait, str) or not _SLURM_TIME.match(max_wait):
        raise InvalidArgumentError(f"--max-wait {str(max_wait)[:40]!r} is not a Slurm time "
                                   "([days-]hours:minutes:seconds, minutes, ...)", "max_wait")
    for name, label in (("nvlink_label", nvlink_label), ("pack_label", pack_label)):
        if label is not None and (not isinstance(label, str) or not _LABEL.match(label)):
            raise InvalidArgumentError(f"--{name.replace('_', '-')} {str(label)[:80]!r} is not a Kubernetes label key",
                                       name)
    w = cfg.world_size
    if w % g:
        raise InvalidArgumentError(
            f"world size {w} is not a multiple of {g} GPUs per node (the job takes whole nodes)", "world_size")
    for s in schedulers:
        if s not in SCHEDULERS:
            raise InvalidArgumentError(f"--scheduler {s!r} is not one of {', '.join(SCHEDULERS)}, all", "scheduler")
    reqs = tuple(requirements) or (Constraint("tp", "nvlink"),)
    for c in reqs:
        if c.level not in ("nvlink", "host"):
            raise InvalidArgumentError(
                f"--within {c.traffic_class}={c.level}: a request keeps groups inside an NVLink domain (nvlink) or a "
                f"node (host); {c.level} domains are the scheduler's packing, which the request asks for anyway",
                "within")
    nodes = w // g
    dn = d // g
    unit = 1
    for c in reqs:
        span = group_span(cfg, c.traffic_class)
        cap = g if c.level == "host" else d
        if span > cap:
            where = "node" if c.level == "host" else "NVLink domain"
            raise InfeasibleError(
                f"{c.traffic_class} groups span {span} consecutive ranks in order {cfg.order}, more than the {cap} "
                f"GPUs of one {where}: no allocation keeps them inside one", "within")
        unit = math.lcm(unit, span)
    if unit < g and g % unit:
        raise InfeasibleError(
            f"groups of {unit} consecutive ranks do not divide the {g} GPUs of a node: some straddle two nodes "
            "whatever the allocation", "within")
    unit_nodes = max(1, unit // g)
    if unit > g and unit % g:
        raise InfeasibleError(
            f"groups of {unit} consecutive ranks are not whole nodes of {g} GPUs: some straddle two NVLink "
            "domains whatever the allocation", "within")
    if unit_nodes > dn:
        raise InfeasibleError(f"groups of {unit} ranks need {unit_nodes} nodes, more than the {dn} of one NVLink "
                              "domain", "within")
    segment = max(s for s in range(unit_nodes, min(dn, nodes) + 1, unit_nodes) if nodes % s == 0)
    what = " and ".join(f"{c.traffic_class} ({group_span(cfg, c.traffic_class)} ranks)" for c in reqs)
    fits = nodes <= dn
    out = []
    for s in SCHEDULERS:
        if s not in schedulers:
            continue
        if s == "slurm":
            out.append(_slurm(nodes, g, dn, segment, unit_nodes, what, nodes_per_leaf, max_wait))
        elif s == "kueue":
            out.append(_kueue(nodes, dn, segment, unit_nodes, what, fits, nvlink_label, pack_label))
        else:
            out.append(_volcano(nodes, dn, segment, what, fits, tier))
    return AllocationAdvice(w, g, nodes, d, dn, reqs, unit, unit_nodes, segment, unit_nodes, tuple(out), cfg.order)


def _slurm(nodes, g, dn, segment, unit_nodes, what, nodes_per_leaf, max_wait) -> SchedulerRequest:
    base = (f"--nodes={nodes}", f"--ntasks-per-node={g}", f"--gpus-per-node={g}")
    if dn > 1:
        why = (f"topology/block: {nodes // segment} segment(s) of {segment} nodes, each inside one NVLink block of "
               f"{dn} nodes, so every {what} group stays on NVLink; {segment} is the largest multiple of "
               f"{unit_nodes} node(s) that fits a block and divides {nodes} nodes (any such multiple works, "
               f"{unit_nodes} is the least); ranks follow the node list, so order it by block "
               "(rankmap solve/check on the granted nodes)")
        return SchedulerRequest("slurm", (*base, f"--segment={segment}"), why=why)
    leaves = 1 if nodes_per_leaf is None else -(-nodes // int(nodes_per_leaf))
    why = (f"topology/tree: each {what} group sits inside one node (NVLink domains are single nodes); "
           f"--switches asks for at most {leaves} leaf switch(es)"
           + (f" ({nodes} nodes, {nodes_per_leaf} per leaf)" if nodes_per_leaf else " (the fewest; give the nodes "
              "per leaf or the cluster for a count)")
           + f", waiting up to {max_wait} for them, so data-parallel and pipeline traffic stays under few leaves")
    return SchedulerRequest("slurm", (*base, f"--switches={leaves}@{max_wait}"), why=why)


def _kueue(nodes, dn, segment, unit_nodes, what, fits, nvlink_label, pack_label) -> SchedulerRequest:
    a: dict[str, str] = {}
    if dn > 1 and fits:
        a["kueue.x-k8s.io/podset-required-topology"] = nvlink_label
        why = (f"the {nodes} pods (one per node) fit one NVLink domain of {dn} nodes: requiring the {nvlink_label} "
               f"level keeps every {what} group, and the whole job, on NVLink")
    elif dn > 1:
        a["kueue.x-k8s.io/podset-slice-required-topology"] = nvlink_label
        a["kueue.x-k8s.io/podset-slice-size"] = str(segment)
        if pack_label:
            a["kueue.x-k8s.io/podset-preferred-topology"] = pack_label
        why = (f"slices of {segment} consecutive pods (pod index order = rank order), each inside one {nvlink_label} "
               f"domain of {dn} nodes, keep every {what} group on NVLink; {segment} is the largest multiple of "
               f"{unit_nodes} pod(s) that fits a domain and divides {nodes} pods"
               + (f"; the pod set prefers one {pack_label} domain" if pack_label else ""))
    else:
        level = pack_label or HOSTNAME_LABEL
        a["kueue.x-k8s.io/podset-preferred-topology"] = level
        why = (f"each {what} group sits inside one pod's node; preferring the {level} level asks Kueue for the "
               "tightest packing it can find, going up the topology levels only when it must")
    return SchedulerRequest("kueue", annotations=a, why=why)


def _volcano(nodes, dn, segment, what, fits, tier) -> SchedulerRequest:
    if fits or dn == 1:
        spec = {"networkTopology": {"mode": "hard" if fits else "soft", "highestTierAllowed": tier}}
        why = (f"the {nodes} pods fit one tier-{tier} HyperNode (an NVLink domain of {dn} nodes): hard keeps every "
               f"{what} group, and the whole job, on NVLink" if fits else
               f"each {what} group sits inside one node; soft with tier {tier} packs the pods under as few tier-{tier} "
               "HyperNodes as it can")
        return SchedulerRequest("volcano", spec=spec, why=why)
    spec = {
        "networkTopology": {"mode": "soft", "highestTierAllowed": tier + 1},
        "subGroupPolicy": [{"name": "nvlink-segment", "subGroupSize": segment, "matchLabelKeys": [SEGMENT_LABEL],
                            "networkTopology": {"mode": "hard", "highestTierAllowed": tier}}],
    }
    why = (f"sub-groups of {segment} pods (label pod i with {SEGMENT_LABEL}=i//{segment}), each hard inside one "
           f"tier-{tier} HyperNode (an NVLink domain of {dn} nodes), keep every {what} group on NVLink; the job "
           f"prefers (soft) one tier-{tier + 1} HyperNode")
    return SchedulerRequest("volcano", spec=spec, why=why)
