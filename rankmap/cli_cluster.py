"""``rankmap cluster``: build the cluster graph from real-world inputs (DESIGN §7).

::

    rankmap cluster [--host-topology FILE] [--gpu GEN] [--fabric FILE] [--nodelist HOSTLIST]
                    [--topology-name NAME] [--gpus-per-node N] [--rate KEY=GBPS ...]
                    [--oversubscription R] [--format json|table] [-o FILE]

* ``--host-topology``: ``nvidia-smi topo -m`` output or NCCL topology XML (detected).
* ``--gpu``: GPU generation (``h100``, ``a100``, ``v100``, ``a30``, ``b200`` ...) or a per-link
  NVLink rate in GB/s.
* ``--fabric``: Slurm ``topology.conf`` or ``topology.yaml`` (``--topology-name`` picks one
  topology of a YAML file); ``--nodelist``: the hosts to include, a Slurm hostlist.
* ``--rate KEY=GBPS``: override a link rate (keys ``nvlink pcie pix pxb phb node sys nic``),
  repeatable or comma-separated.
* ``--kubernetes-nodes FILE`` (with ``--topology-labels a,b,c`` or ``--kueue-topology FILE``),
  ``--volcano-hypernodes FILE``, ``--topograph-model FILE``, ``--ibnetdiscover FILE``: the
  other network sources of DESIGN §8 (:mod:`rankmap.solver.formats.sources`).
* ``--nvlink-domains FILE``, ``--nvlink-domain-rate GBPS``, ``--block-links nvlink|network``:
  multi-host NVLink domains (:mod:`rankmap.solver.formats.nvlink`).
* ``--oversubscription R``: the fabric's oversubscription ratio, downlink : uplink capacity of
  a switch whose uplinks the fabric file does not give (``2`` or ``2:1``; ``2,1`` = leaves 2:1,
  higher levels 1:1).  Default 1: non-blocking.  Every edge of the output is a physical link
  whose ``bandwidth`` is its capacity in GB/s per direction (DESIGN §2).

Output: node-link JSON (``networkx.node_link_data(G, edges="edges")``) on stdout or in
``-o FILE`` (``*.graphml`` writes GraphML), or with ``--format table`` a summary.  Bad
input raises :class:`~rankmap.solver.errors.InvalidArgumentError` (the main CLI prints
one line and exits 2).  ``solve`` can reuse :func:`add_cluster_arguments` and
:func:`cluster_from_args`.
"""

from __future__ import annotations

import argparse
import sys

from rankmap.solver.errors import InvalidArgumentError
from rankmap.solver.formats import RATE_KEYS, dump_graph, node_link_text, summarize
from rankmap.solver.job.resolve import CLUSTER_SOURCE_KEYS, build_job_cluster, cluster_keys_given
from rankmap.solver.job.values import parse_rates

__all__ = ["register", "run", "add_cluster_arguments", "cluster_from_args", "cluster_flags_given", "parse_rates",
           "SOURCE_FLAGS"]


def add_cluster_arguments(p: argparse.ArgumentParser) -> None:
    """The flags that describe a cluster (shared by ``cluster`` and ``solve``)."""
    from rankmap.cli import positive_int_arg

    p.add_argument("--host-topology", metavar="[HOSTLIST=]FILE", action="append", default=None,
                   help="one host: `nvidia-smi topo -m` output or NCCL topology XML; HOSTLIST=FILE gives those hosts "
                        "another topology (repeatable: hosts of several kinds)")
    p.add_argument("--gpu", metavar="GEN", default=None,
                   help="GPU generation (h100, a100, v100, a30, b200, ...) or per-link NVLink GB/s")
    p.add_argument("--fabric", metavar="FILE", default=None, help="Slurm topology.conf or topology.yaml")
    p.add_argument("--nodelist", metavar="HOSTLIST", default=None,
                   help="hosts to include, Slurm hostlist (e.g. node[001-016])")
    p.add_argument("--topology-name", metavar="NAME", default=None,
                   help="topology of a topology.yaml (default: the cluster_default one)")
    p.add_argument("--gpus-per-node", metavar="N", type=positive_int_arg, default=None,
                   help="without --host-topology: synthetic hosts of N GPUs of --gpu")
    p.add_argument("--rate", metavar="KEY=GBPS", action="append", default=None,
                   help=f"override a link rate in GB/s ({', '.join(RATE_KEYS)}); repeatable")
    p.add_argument("--oversubscription", metavar="R", default=None,
                   help="fabric oversubscription, a switch's downlink:uplink capacity where the fabric file gives no "
                        "LinkSpeed: 2 or 2:1, or per level leaf first (2,1); default 1 (non-blocking)")
    g = p.add_argument_group("other topology sources (DESIGN §8)")
    g.add_argument("--kubernetes-nodes", metavar="FILE", default=None,
                   help="`kubectl get nodes -o json|yaml`: topology labels, GPU counts, nvidia.com/gpu.clique")
    g.add_argument("--topology-labels", metavar="A,B,C", default=None,
                   help="node-label keys of the topology levels, top first (default: detected from known keys)")
    g.add_argument("--kueue-topology", metavar="FILE", default=None,
                   help="Kueue Topology object whose spec.levels name the node labels")
    g.add_argument("--volcano-hypernodes", metavar="FILE", default=None, help="Volcano HyperNode objects (YAML/JSON)")
    g.add_argument("--topograph-model", metavar="FILE", default=None, help="Topograph switch/block model (YAML)")
    g.add_argument("--ibnetdiscover", metavar="FILE", default=None, help="`ibnetdiscover` output (InfiniBand)")
    g.add_argument("--nvlink-domains", metavar="FILE", default=None,
                   help="NVLink domain per host: `pdsh nvidia-smi -q` output (ClusterUUID, CliqueId) or HOST DOMAIN "
                        "lines")
    g.add_argument("--nvlink-domain-rate", metavar="GBPS", default=None,
                   help="each GPU's link to its NVLink domain, GB/s per direction (default: the GPU's NVLink ports, "
                        "GB200 NVL72 900)")
    g.add_argument("--block-links", choices=("nvlink", "network"), default=None,
                   help="Slurm topology/block blocks are NVLink domains (default) or network switches only")


def cluster_from_args(args: argparse.Namespace, warn_on_stderr: bool = True):
    """Build the graph from the flags of :func:`add_cluster_arguments`
    (:func:`rankmap.solver.job.resolve.build_job_cluster`).

    The importers' guesses (a GPU generation assumed from an NVLink count, a synthetic NIC,
    ...) are in the graph's ``warnings`` and also printed on stderr as ``rankmap: warning:
    ...`` when the command succeeds (:func:`rankmap.cli.warn`): a silently wrong bandwidth
    would choose the layout.  Without ``warn_on_stderr`` only in the graph (``rankmap cluster
    --format table`` on stdout lists them under its notes).
    """
    from rankmap.cli import warn

    return build_job_cluster(vars(args), warn if warn_on_stderr else None)


#: Flags of :func:`add_cluster_arguments` beyond the Slurm ones (argparse dest names).
SOURCE_FLAGS = CLUSTER_SOURCE_KEYS


def cluster_flags_given(args: argparse.Namespace) -> bool:
    """True when any flag that describes a cluster (other than a CLUSTER graph file) is set."""
    return cluster_keys_given(vars(args))


def run(args: argparse.Namespace) -> int:
    """Execute ``rankmap cluster``; returns the exit status."""
    from rankmap.cli_measured import measured_cluster

    fmt = getattr(args, "format", "json") or "json"
    out = getattr(args, "output", None)
    # a table on stdout lists the graph's warnings under its notes: not twice (stderr too)
    G = measured_cluster(args, cluster_from_args(args, warn_on_stderr=not (fmt == "table" and not out)),
                         drop_slow=True)  # --measured caps (issue 27)
    if getattr(args, "exclude_slow", None) is not None and not any(
            d.get("kind") == "gpu" for _n, d in G.nodes(data=True)):
        from rankmap.solver.errors import InvalidArgumentError

        raise InvalidArgumentError(f"--exclude-slow {args.exclude_slow:g} drops every host (all measured below "
                                   f"{args.exclude_slow:g} x the model's rate): no GPU is left to write", "exclude_slow")
    if fmt == "table":
        text = summarize(G) + "\n"
        if out:
            try:
                with open(out, "w", encoding="utf-8") as fh:
                    fh.write(text)
            except OSError as exc:
                raise InvalidArgumentError(f"cannot write {out!r}: {exc.strerror or exc}", "output") from None
        else:
            sys.stdout.write(text)
        return 0
    if out:
        dump_graph(G, out)
    else:
        sys.stdout.write(node_link_text(G))
    return 0


def register(subparsers) -> argparse.ArgumentParser:
    """Add the ``cluster`` subcommand to the main CLI's subparsers."""
    p = subparsers.add_parser(
        "cluster",
        help="build the cluster graph (node-link JSON) from nvidia-smi / NCCL XML and a Slurm, Kubernetes, Volcano, "
             "Topograph or ibnetdiscover fabric",
        description="Build the cluster graph from `nvidia-smi topo -m` or NCCL topology XML (one host) "
                    "and optionally a fabric: Slurm topology.conf / topology.yaml, Kubernetes nodes (kubectl get "
                    "nodes), Volcano HyperNodes, a Topograph model or ibnetdiscover output (every host of it or of "
                    "--nodelist); multi-host NVLink domains from Slurm blocks, labels or --nvlink-domains.",
    )
    add_cluster_arguments(p)
    from rankmap.cli_measured import add_measured_arguments

    add_measured_arguments(p)
    p.add_argument("--format", choices=("json", "table"), default="json")
    p.add_argument("-o", "--output", metavar="FILE", default=None,
                   help="write here instead of stdout (*.graphml: GraphML)")
    p.set_defaults(func=run)
    return p
