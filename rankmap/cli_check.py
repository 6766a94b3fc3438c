"""``rankmap check`` (a granted allocation against placement requirements and rankmap's best) and
``rankmap request`` (the scheduler request that keeps TP/EP groups inside NVLink domains): issue 26.

``check`` exits 0 when it could check (whatever it found), 1 with ``--strict`` when a group
straddles a required domain (admission hooks, CI), 2 on bad input.
"""

from __future__ import annotations

import argparse
import sys

from rankmap.solver.errors import InvalidArgumentError
from rankmap.solver.formats.safe import dump_json

__all__ = ["register", "check_table", "request_table"]


def _fmt_seconds(s: float) -> str:
    from rankmap.solve_report import _fmt_s

    return _fmt_s(s)


def check_table(result) -> str:
    """``rankmap check --format table``: requirements, straddling groups (the first 20), cost vs best."""
    cfg = result.config
    lines = [f"rankmap check: {cfg.world_size} ranks on {len(result.hosts)} hosts, order {cfg.order}", ""]
    if result.requirements:
        lines.append("requirement           groups  straddling")
        for r in result.requirements:
            lines.append(f"{str(r.requirement):<20}  {r.groups:>6}  {r.violations:>10}")
    else:
        lines.append("no requirements (--within CLASS=LEVEL,...)")
    for v in result.violations[:20]:
        ranks = ",".join(map(str, v.group[:8])) + (",..." if len(v.group) > 8 else "")
        lines.append(f"  {v.traffic_class} group [{ranks}] spans {len(v.domains)} {v.level} domains: "
                     f"{', '.join(v.domains[:4])}{', ...' if len(v.domains) > 4 else ''}")
    if len(result.violations) > 20:
        lines.append(f"  ... {len(result.violations) - 20} more")
    lines.append("")
    lines.append(f"predicted communication time per step: {_fmt_seconds(result.cost.total_seconds)} (as granted)")
    if result.best is not None:
        d = result.to_dict()
        lines.append(f"rankmap's best on these hosts:         {_fmt_seconds(result.best.cost.total_seconds)} "
                     f"(order {result.best.order}; {100 * d['improvement']:.1f}% less)")
        if result.best_note:
            lines.append(f"note: {result.best_note}")
    lines.append("OK: every required group is inside one domain" if result.ok else
                 f"BROKEN: {len(result.violations)} group(s) straddle a required domain")
    return "\n".join(lines)


def _cmd_check(args: argparse.Namespace) -> int:
    from rankmap.cli_layout import evaluate_inputs
    from rankmap.solver.allocation.check import check_allocation, parse_within

    requirements = parse_within(args.within)
    if not args.time_limit > 0:  # refused with or without --no-best (the best layout's solve refused it only then)
        from rankmap.solver.errors import InvalidArgumentError

        raise InvalidArgumentError(f"--time-limit must be a positive number, got {args.time_limit!r}", "time_limit")
    job = evaluate_inputs(args)
    if getattr(args, "server", None):
        from rankmap.client import RankmapClient

        with RankmapClient(args.server, tls_ca=getattr(args, "tls_ca", None),
                           token_file=getattr(args, "token_file", None)) as client:
            result = client.check_config(job.graph, job.cfg, job.assignment, job.traffic, requirements,
                                         exposure=job.exposure, nccl=job.nccl, best=not args.no_best,
                                         time_limit_seconds=args.time_limit, seed=args.seed)
    else:
        result = check_allocation(job.graph, job.cfg, job.assignment, job.traffic, requirements,
                                  exposure=job.exposure, best=not args.no_best, time_limit_seconds=args.time_limit,
                                  seed=args.seed, cluster=job.cluster)
    if args.format == "table":
        sys.stdout.write(check_table(result) + "\n")
    else:
        sys.stdout.write(dump_json(result.to_dict()) + "\n")
    return 1 if args.strict and not result.ok else 0


def request_table(advice) -> str:
    """``rankmap request --format table``: the unit, the segment and each scheduler's request with its why."""
    lines = [f"rankmap request: {advice.world_size} ranks = {advice.nodes} nodes x {advice.gpus_per_node} GPUs; "
             f"NVLink domain {advice.nvlink_domain_gpus} GPUs ({advice.nodes_per_domain} nodes); "
             f"keep {', '.join(c.traffic_class for c in advice.requirements)} inside one",
             f"unit {advice.unit_ranks} ranks = {advice.unit_nodes} node(s); segment {advice.segment_nodes} nodes "
             f"(least {advice.min_segment_nodes})", ""]
    for r in advice.requests:
        if r.scheduler == "slurm":
            lines.append("slurm    sbatch " + " ".join(r.options))
        elif r.scheduler == "kueue":
            lines.append("kueue    " + "  ".join(f"{k}: \"{v}\"" for k, v in r.annotations.items()))
        else:
            lines.append("volcano  " + dump_json(r.to_dict()["spec"], separators=(", ", ": ")))
        lines.append(f"         why: {r.why}")
    return "\n".join(lines)


def _cmd_request(args: argparse.Namespace) -> int:
    from rankmap.cli import config_from_args
    from rankmap.solver.allocation.check import parse_within
    from rankmap.solver.allocation.request import SCHEDULERS, cluster_shape, recommend_allocation

    requirements = parse_within(args.within or "tp=nvlink")
    nodes_per_leaf = args.nodes_per_leaf
    if args.cluster is not None:
        if args.nvlink_domain_size is not None or args.gpus_per_node is not None:
            raise InvalidArgumentError("give either --cluster or --nvlink-domain-size with --gpus-per-node, not both",
                                       "cluster")
        from rankmap.solver.fabric.cluster import cluster_from_graph
        from rankmap.solver.formats.graphfile import load_graph

        graph = load_graph(args.cluster)
        cluster = cluster_from_graph(graph)
        g, d, leaf = cluster_shape(cluster, graph)
        nodes_per_leaf = nodes_per_leaf or leaf
        world = args.world_size if args.world_size is not None else cluster.num_devices
    else:
        if args.nvlink_domain_size is None or args.gpus_per_node is None:
            raise InvalidArgumentError("give --cluster CLUSTER, or --nvlink-domain-size N (GPUs per NVLink domain) "
                                       "and --gpus-per-node G", "cluster")
        if args.world_size is None:
            raise InvalidArgumentError("--world-size is required without --cluster (the GPUs the job asks for)",
                                       "world_size")
        g, d, world = args.gpus_per_node, args.nvlink_domain_size, args.world_size
    cfg = config_from_args(args, world_size=world)
    schedulers = SCHEDULERS if args.scheduler == "all" else (args.scheduler,)
    advice = recommend_allocation(cfg, g, d, requirements, schedulers, nodes_per_leaf=nodes_per_leaf,
                                  nvlink_label=args.nvlink_label, pack_label=args.pack_label,
                                  nvlink_tier=args.volcano_nvlink_tier, max_wait=args.max_wait)
    if args.format == "table":
        sys.stdout.write(request_table(advice) + "\n")
    else:
        sys.stdout.write(dump_json(advice.to_dict()) + "\n")
    return 0


_WITHIN_HELP = ("CLASS=LEVEL,... groups of CLASS (tp cp ep etp dp edp pp embedding) that must stay inside one domain "
                "of LEVEL (nvlink, host, leaf, spine, core, level:N: the levels of --constraint)")


def register(subparsers) -> None:
    """Add the ``check`` and ``request`` subcommands."""
    from rankmap.cli import add_size_arguments, float_arg, int_at_least, positive_int_arg, server_arg
    from rankmap.cli_cluster import add_cluster_arguments
    from rankmap.cli_layout import add_layout_arguments
    from rankmap.cli_solve import _EXPOSURE_HELP, add_nccl_arguments
    from rankmap.cli_traffic import add_model_arguments
    from rankmap.solver.allocation.check import DEFAULT_CHECK_SECONDS
    from rankmap.solver.allocation.request import DEFAULT_MAX_WAIT, DEFAULT_NVLINK_LABEL, SCHEDULERS

    c = subparsers.add_parser(
        "check", help="check a granted allocation: groups straddling required domains, cost vs rankmap's best",
        description="Reads the layout from an assignment or any launch file rankmap writes; --strict exits 1 "
                    "when a required group straddles a domain.")
    c.add_argument("cluster", nargs="?", default=None, help="cluster graph file")
    add_cluster_arguments(c)
    c.add_argument("--order", default=None,
                   help="order of the layout (default: the 'order' of a solve result file, else tp-cp-ep-dp-pp)")
    add_layout_arguments(c)
    add_size_arguments(c, world_size_required=False)
    add_model_arguments(c)
    c.add_argument("--within", default=None, metavar="CLASS=LEVEL,...", help=_WITHIN_HELP)
    c.add_argument("--strict", action="store_true", help="exit 1 when a required group straddles a domain")
    c.add_argument("--no-best", action="store_true", help="skip the search for rankmap's best on the same hosts")
    c.add_argument("--time-limit", type=float_arg, default=DEFAULT_CHECK_SECONDS,
                   help=f"seconds for the best-layout search (default {DEFAULT_CHECK_SECONDS:g})")
    c.add_argument("--seed", type=int_at_least(0), default=0, help="CP-SAT random seed of that search")
    c.add_argument("--exposure", default=None, metavar="CLASS=X,...", help=_EXPOSURE_HELP)
    add_nccl_arguments(c)
    from rankmap.cli_measured import add_measured_arguments

    add_measured_arguments(c, exclude_slow=False)  # measured link rates (issue 27), as evaluate
    c.add_argument("--format", choices=("json", "table"), default="json")
    c.add_argument("--server", type=server_arg, default=None, metavar="HOST:PORT",
                   help="check on a rankmap server (gRPC Check) instead of in process")
    c.add_argument("--tls-ca", default=None, metavar="FILE",
                   help="--server speaks TLS; FILE is the PEM CA that signed its certificate")
    c.add_argument("--token-file", default=None, metavar="FILE", help="bearer token for --server (first line of FILE)")
    c.set_defaults(func=_cmd_check)

    r = subparsers.add_parser(
        "request", help="the Slurm / Kueue / Volcano request that keeps TP (and EP) groups in one NVLink domain",
        description="Give --cluster CLUSTER, or --nvlink-domain-size N (GPUs per NVLink domain, 72 on GB200 "
                    "NVL72) and --gpus-per-node G.")
    add_size_arguments(r, world_size_required=False)
    r.add_argument("--order", default=None, help="Megatron order (default tp-cp-ep-dp-pp)")
    r.add_argument("--cluster", default=None, metavar="FILE", help="cluster graph file (its GPUs per node, NVLink "
                   "domains and leaves)")
    r.add_argument("--nvlink-domain-size", type=positive_int_arg, default=None, metavar="N",
                   help="GPUs per NVLink domain (GB200 NVL72: 72; HGX: the GPUs per node)")
    r.add_argument("--gpus-per-node", type=positive_int_arg, default=None, metavar="G", help="GPUs per node (pod)")
    r.add_argument("--nodes-per-leaf", type=positive_int_arg, default=None, metavar="N",
                   help="nodes under one leaf switch (Slurm --switches count when NVLink domains are single nodes)")
    r.add_argument("--within", default=None, metavar="CLASS=nvlink,...",
                   help="classes kept inside one NVLink domain (default tp=nvlink; e.g. tp=nvlink,ep=nvlink)")
    r.add_argument("--scheduler", choices=(*SCHEDULERS, "all"), default="all", type=str.lower)
    r.add_argument("--nvlink-label", default=DEFAULT_NVLINK_LABEL,
                   help=f"Kueue Topology level (node label) of the NVLink domain (default {DEFAULT_NVLINK_LABEL})")
    r.add_argument("--pack-label", default=None,
                   help="Kueue level the whole pod set prefers (podset-preferred-topology)")
    r.add_argument("--volcano-nvlink-tier", type=positive_int_arg, default=1, metavar="N",
                   help="Volcano HyperNode tier of the NVLink domains (default 1, nearest the nodes)")
    r.add_argument("--max-wait", default=DEFAULT_MAX_WAIT, metavar="TIME",
                   help=f"Slurm --switches max-time (default {DEFAULT_MAX_WAIT})")
    r.add_argument("--format", choices=("json", "table"), default="json")
    r.set_defaults(func=_cmd_request)
