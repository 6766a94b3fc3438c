"""``rankmap repair`` and ``rankmap compare`` (issue 26): for schedulers and operators.

* ``rankmap repair CLUSTER --running RESULT.json --failed HOST[,HOST...] [--failed-gpus GPU,...]
  [--spares HOST,...] [--max-moves N]``: the ``patch``, ``pinned`` and ``full`` ways to go on
  after failures (:func:`rankmap.solver.job.repair.repair`).
* ``rankmap compare CLUSTER --allocation HOSTLIST --allocation HOSTLIST ... [job flags]``: the job
  solved on each allocation, best first (:func:`rankmap.solver.job.compare.compare`).

Both print JSON by default (``--format table`` for people); the algorithms are in the solver's job
layer, this module only reads flags and prints.
"""

from __future__ import annotations

import argparse
import sys

from rankmap.solver.errors import InvalidArgumentError
from rankmap.solver.formats.safe import dump_json

__all__ = ["register", "repair_from_args", "compare_from_args", "repair_table", "compare_table"]


def _hosts_arg(values: list[str] | None, field: str) -> list[str]:
    """Host names from repeatable ``HOST,HOST`` / hostlist (``node[01-04]``) flags, in the order given."""
    from rankmap.solver.formats.hostlist import expand

    out: list[str] = []
    for v in values or ():
        out += expand(v, field)
    return out


def _list_arg(values: list[str] | None) -> list[str]:
    return [x.strip() for v in values or () for x in v.split(",") if x.strip()]


def _names(hosts, width: int = 60) -> str:
    """Host names joined by commas, at most about ``width`` characters ("... N more")."""
    shown: list[str] = []
    for i, h in enumerate(hosts):
        if shown and len(", ".join(shown + [h])) > width:
            return ", ".join(shown) + f" ... {len(hosts) - i} more"
        shown.append(h)
    return ", ".join(shown)


def _check_running_doc(doc: dict, path: str, ranks: int) -> None:
    """A running layout given as a solve result: its fields have the types ``rankmap solve`` writes, its
    world size is its assignment's length, its mode one of the solver's (else one error naming the field)."""
    if not doc:
        return  # a plain list of GPU ids: the flags give the job
    kinds = {"sizes": dict, "traffic_bytes": dict, "traffic_model": dict, "traffic_explicit": dict, "nccl": dict,
             "order": str, "mode": str}
    for key, kind in kinds.items():
        if key in doc and not isinstance(doc[key], kind) and not (key in ("traffic_model", "traffic_explicit")
                                                                   and doc[key] is None):
            raise InvalidArgumentError(f"running layout {path}: {key!r} is {str(doc[key])[:40]!r}, expected "
                                       f"{'an object' if kind is dict else 'a string'} (as rankmap solve writes it)",
                                       "running")
    if "sizes" not in doc:
        raise InvalidArgumentError(f"running layout {path}: no 'sizes' (give the JSON rankmap solve prints, or a "
                                   f"plain list of GPU ids with the size flags)", "running")
    if "mode" in doc and doc["mode"] not in ("launcher", "free", "fixed"):
        raise InvalidArgumentError(f"running layout {path}: mode {doc['mode']!r} is not launcher, free or fixed",
                                   "running")
    ws = doc.get("world_size")
    if ws is not None and (isinstance(ws, bool) or not isinstance(ws, int) or ws != ranks):
        raise InvalidArgumentError(f"running layout {path}: world_size {ws!r} but its assignment has {ranks} ranks",
                                   "running")


def _running(args: argparse.Namespace):
    """``(graph, cfg, traffic, assignment, mode, nccl)`` of the running layout file and the flags."""
    from rankmap.cli import config_from_args, warn
    from rankmap.cli_layout import _nccl_from_result, _read_assignment, _sizes_from_result, _traffic_from_result
    from rankmap.cli_traffic import apply_megatron_sizes, megatron_from_args
    from rankmap.solver.job.resolve import job_cluster, job_traffic
    from rankmap.solver.job.values import job_nccl

    nccl = job_nccl(vars(args))
    apply_megatron_sizes(args)
    graph = job_cluster(vars(args), warn)
    try:
        assignment, file_order, doc = _read_assignment(args.running)
    except InvalidArgumentError as exc:
        raise InvalidArgumentError(exc.message.replace("assignment file", "running layout file"), "running") from None
    _check_running_doc(doc, args.running, len(assignment))
    if args.order is not None and file_order is not None and args.order != file_order:
        raise InvalidArgumentError(
            f"--order {args.order} disagrees with order {file_order} in {args.running} (the running layout's; "
            f"repair keeps the running job's groups)", "order")
    nccl = _nccl_from_result(args, doc, args.running, nccl)
    _sizes_from_result(args, doc, args.running)
    meg = megatron_from_args(args)
    order = args.order if args.order is not None else (file_order or (meg.order if meg else "tp-cp-ep-dp-pp"))
    if args.world_size is not None and args.world_size != len(assignment):
        raise InvalidArgumentError(
            f"--world-size {args.world_size} but the running layout {args.running} has {len(assignment)} ranks",
            "world_size")
    try:
        cfg = config_from_args(args, world_size=len(assignment), order=order)
    except InvalidArgumentError as exc:
        raise InvalidArgumentError(f"running layout {args.running} has {len(assignment)} ranks (the world size): "
                                   f"{exc.message}", exc.field) from None
    traffic = _traffic_from_result(args, doc, cfg, args.running)
    if traffic is None:
        traffic = job_traffic(vars(args), cfg)
    mode = args.mode or (doc.get("mode") if doc.get("mode") in ("launcher", "free") else None) or "launcher"
    return graph, cfg, traffic, assignment, mode, nccl


def repair_from_args(args: argparse.Namespace):
    """The :class:`~rankmap.solver.job.repair.RepairResult` of parsed ``repair`` flags."""
    from rankmap.solver.job.model import JOB_DEFAULTS
    from rankmap.solver.job.repair import repair
    from rankmap.solver.job.values import exposure_from_value
    from rankmap.solver.types import SolveOptions, parse_constraint

    graph, cfg, traffic, assignment, mode, nccl = _running(args)
    options = SolveOptions(
        mode=mode, exposure=exposure_from_value(args.exposure), nccl=nccl,
        constraints=tuple(parse_constraint(c) for c in args.constraint or ()),
        time_limit_seconds=args.time_limit if args.time_limit is not None else JOB_DEFAULTS["time_limit"],
        seed=args.seed if args.seed is not None else JOB_DEFAULTS["seed"])
    spares = None if args.spares is None else _hosts_arg(args.spares, "spare_hosts")
    kwargs = dict(failed_hosts=_hosts_arg(args.failed, "failed_hosts"), failed_gpus=_list_arg(args.failed_gpus),
                  spare_hosts=spares, max_moves=args.max_moves, options=options, orders=args.orders)
    if getattr(args, "server", None):
        with _client(args, graph, nccl) as client:
            return client.repair(graph, cfg, traffic, assignment, **kwargs)
    return repair(graph, cfg, traffic, assignment, **kwargs)


def _client(args: argparse.Namespace, graph, nccl):
    """A client of ``--server``, after checking the cluster here as an in-process call would (bad input is
    exit 2 before anything is sent)."""
    from rankmap.client import RankmapClient
    from rankmap.solver.fabric.cluster import cluster_from_graph

    cluster_from_graph(graph, nccl=nccl)
    return RankmapClient(args.server, tls_ca=getattr(args, "tls_ca", None),
                         token_file=getattr(args, "token_file", None))


def repair_table(result) -> str:
    """``rankmap repair --format table``: one line per option, then the recommendation (lines of at most
    :data:`~rankmap.solve_report.TABLE_WIDTH` columns)."""
    from rankmap.solve_report import _clip, _fmt_s

    lines = [f"failed hosts {', '.join(result.failed_hosts)}   spares considered {len(result.spare_hosts)}", "",
             f"{'option':<8}{'order':<18}{'time/step':>12}  {'ranks moved':>11}  hosts removed -> added"]
    for o in result.options:
        change = f"{_names(o.hosts_removed, 60) or '-'} -> {_names(o.hosts_added, 60) or '-'}"
        stop = "  (stopped by the time limit)" if o.stopped_by else ""
        lines.append(f"{o.kind:<8}{o.order:<18}{_fmt_s(o.cost.total_seconds):>12}  {o.ranks_moved:>11}  {change}{stop}")
    for kind, why in result.unavailable.items():
        lines.append(f"{kind:<8}unavailable: {why}")
    rec = result.option(result.recommended)
    lines += ["", f"recommended {result.recommended}: {_fmt_s(rec.cost.total_seconds)} per step, "
                  f"{rec.ranks_moved} ranks moved; hostfile (node-rank order): {_names(rec.apply['hostfile'], 60)}"]
    return "\n".join(_clip(line) for line in lines)


def _cmd_repair(args: argparse.Namespace) -> int:
    result = repair_from_args(args)
    if args.format == "table":
        sys.stdout.write(repair_table(result) + "\n")
    else:
        sys.stdout.write(dump_json(result.to_dict()) + "\n")
    return 0


def compare_from_args(args: argparse.Namespace):
    """The :class:`~rankmap.solver.job.compare.CompareResult` of parsed ``compare`` flags."""
    from rankmap.cli import warn
    from rankmap.cli_solve import _job_from_args
    from rankmap.solver.job.compare import compare, resolve_compare

    resolved, allocations = resolve_compare({}, _job_from_args(args), args.allocation, warn)
    for key, value in resolved.job.items():  # --format, --server ... from a job file
        setattr(args, key, value)
    if getattr(args, "server", None):
        with _client(args, resolved.graph, resolved.options.nccl) as client:
            return client.compare(resolved.graph, resolved.cfg, resolved.traffic, [a.text for a in allocations],
                                  resolved.options)
    from rankmap.cli_solve import process_deadline

    # --time-limit bounds the whole command (reading the cluster included), as rankmap solve's
    return compare(resolved.graph, resolved.cfg, resolved.traffic, allocations, resolved.options,
                   deadline=process_deadline(resolved.options, resolved.cfg.world_size))


def compare_table(result) -> str:
    """``rankmap compare --format table``: allocations best first, with what makes each slower (lines of at
    most :data:`~rankmap.solve_report.TABLE_WIDTH` columns)."""
    from rankmap.solve_report import _clip, _fmt_s

    lines = [f"{'rank':<5}{'time/step':>12}  {'order':<18}allocation"]
    for a in result.allocations:
        lines.append(f"{a.rank:<5}{_fmt_s(a.result.cost.total_seconds):>12}  {a.result.order:<18}"
                     f"{a.allocation.text[:60]} ({_names(a.allocation.hosts, 60)})")
        d = a.difference
        if d is not None and d["class"] is None:
            lines.append("     as fast as the best")
        elif d is not None:
            lines.append(f"     +{_fmt_s(d['seconds'])}: {d['class']} {_fmt_s(d['best_class_seconds'])} -> "
                         f"{_fmt_s(d['class_seconds'])}, {d['bottleneck']}")
    return "\n".join(_clip(line) for line in lines)


def _cmd_compare(args: argparse.Namespace) -> int:
    result = compare_from_args(args)
    fmt = args.format or "json"
    if fmt not in ("json", "table"):
        raise InvalidArgumentError(f"format {fmt!r} is not json or table", "format")
    if fmt == "table":
        sys.stdout.write(compare_table(result) + "\n")
    else:
        sys.stdout.write(dump_json(result.to_dict()) + "\n")
    return 0


def _job_flags(p: argparse.ArgumentParser) -> None:
    """The job flags ``repair`` and ``compare`` share with ``solve`` (``--server`` included)."""
    from rankmap.cli import float_arg, int_at_least, server_arg
    from rankmap.cli_solve import _EXPOSURE_HELP, add_nccl_arguments
    from rankmap.cli_traffic import add_model_arguments
    from rankmap.solver.job.model import JOB_DEFAULTS

    add_model_arguments(p)
    p.add_argument("--exposure", default=None, metavar="CLASS=X,...", help=_EXPOSURE_HELP)
    add_nccl_arguments(p)
    p.add_argument("--constraint", action="append", default=None,
                   help="e.g. 'tp within host' (repeatable; repair: the full solve's)")
    p.add_argument("--time-limit", type=float_arg, default=None,
                   help=f"seconds for the whole command (default {JOB_DEFAULTS['time_limit']:g})")
    p.add_argument("--seed", type=int_at_least(0), default=None, help="CP-SAT random seed (default 0)")
    p.add_argument("--server", type=server_arg, default=None, metavar="HOST:PORT",
                   help="run on a rankmap server (gRPC Repair / Compare) instead of in process")
    p.add_argument("--tls-ca", default=None, metavar="FILE",
                   help="--server speaks TLS; FILE is the PEM CA that signed its certificate")
    p.add_argument("--token-file", default=None, metavar="FILE", help="bearer token for --server (first line of FILE)")


def register(subparsers) -> None:
    """Add the ``repair`` and ``compare`` subcommands."""
    from rankmap.cli import add_size_arguments, int_at_least
    from rankmap.cli_cluster import add_cluster_arguments

    r = subparsers.add_parser(
        "repair", help="options after host or GPU failures: patch, pinned (few moves) or full re-solve",
        description="CLUSTER is the cluster graph the job runs on (node-link JSON / GraphML) or the cluster flags.")
    r.add_argument("cluster", nargs="?", default=None, help="cluster graph file")
    add_cluster_arguments(r)
    r.add_argument("--running", required=True, metavar="RESULT.json",
                   help="the running layout: a 'rankmap solve' JSON result (order, sizes, traffic, assignment), "
                        "a JSON list of GPU ids or one GPU id per line")
    r.add_argument("--failed", action="append", default=None, metavar="HOST,...",
                   help="failed hosts, comma-separated or a hostlist (node[01-02]); repeatable")
    r.add_argument("--failed-gpus", action="append", default=None, metavar="GPU,...",
                   help="failed GPU node ids, comma-separated (a host with a failed GPU is taken out); repeatable")
    r.add_argument("--spares", action="append", default=None, metavar="HOST,...",
                   help="hosts that may take ranks (default: the cluster's hosts not in the running layout)")
    r.add_argument("--max-moves", type=int_at_least(0), default=None, metavar="N",
                   help="pinned: surviving ranks that may move (default: one host's GPUs)")
    r.add_argument("--order", default=None, help="order of the running layout (default: the result file's)")
    r.add_argument("--mode", choices=("launcher", "free"), default=None, type=str.lower,
                   help="mode of the running layout (default: the result file's, else launcher)")
    r.add_argument("--orders", default=None, help="orders the full re-solve searches (default: the running order)")
    add_size_arguments(r, world_size_required=False)
    _job_flags(r)
    r.add_argument("--format", choices=("json", "table"), default="json")
    r.set_defaults(func=_cmd_repair)

    c = subparsers.add_parser(
        "compare", help="solve one job on several candidate allocations and rank them by predicted time",
        description="CLUSTER is a cluster graph file or a job YAML file; each --allocation a Slurm hostlist.")
    c.add_argument("cluster", nargs="?", default=None, help="cluster graph file or job YAML")
    add_cluster_arguments(c)
    c.add_argument("--allocation", action="append", required=True, metavar="HOSTLIST",
                   help="a candidate allocation, e.g. 'node[01-04]' (give at least two)")
    add_size_arguments(c, world_size_required=False)
    _job_flags(c)
    c.add_argument("--mode", choices=("launcher", "free", "fixed"), default=None, type=str.lower,
                   help="launcher (default), free or fixed, as for solve")
    c.add_argument("--orders", default=None, help="orders to search, as for solve")
    c.add_argument("--exclude-device", action="append", default=None, help="GPU node id not to use (repeatable)")
    from rankmap.cli_measured import add_measured_arguments

    add_measured_arguments(c)  # measured link rates, as for solve (job keys measured / exclude_slow)
    c.add_argument("--format", choices=("json", "table"), default=None, help="json (default) or table")
    c.set_defaults(func=_cmd_compare)
