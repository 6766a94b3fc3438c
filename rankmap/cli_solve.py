"""``rankmap solve`` and ``rankmap evaluate`` (DESIGN §7), and declarative job files.

``rankmap solve CLUSTER`` takes a cluster graph file (node-link JSON or
GraphML), or a job file (``.yaml``/``.yml``) naming the cluster, the sizes,
the traffic, constraints, mode, orders and solver options.  Every flag has a
job-file key (the flag's long name with ``_`` for ``-``; ``--no-pxn`` and
``--no-nccl-latency`` are ``pxn: false`` and ``nccl_latency: false``); flags
override the file; an unknown key is an error naming it.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any, Mapping

from rankmap.solver.errors import InvalidArgumentError
from rankmap.solver.formats.safe import dump_json, load_json
from rankmap.cli_launch import check_emit, write_launch_files
from rankmap.solve_report import LAUNCHERS, cost_table, solve_table  # the table output (re-exported here)

__all__ = [
    "register",
    "JOB_KEYS",
    "load_job_file",
    "normalize_job",
    "prepare_args",
    "solve_from_args",
    "parse_exposure",
    "exposure_from_value",
    "cost_table",
    "solve_table",
]

# The job model (keys, aliases, job files; the default world size and the traffic rule) is
# rankmap.solver.job.model, shared with batch and the server; re-exported here.
from rankmap.solver.job.model import (JOB_DEFAULTS, JOB_KEY_ALIASES, JOB_KEYS, load_job_file,  # noqa: E402,F401
                                normalize_job)
from rankmap.solver.job.values import exposure_from_value, parse_exposure  # noqa: E402,F401


def _job_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """The ``solve`` flags given, as job keys (a flag left unset is absent)."""
    keys = (*JOB_KEYS, "oversubscription")  # --oversubscription has no job-file key
    return {k: getattr(args, k) for k in keys if getattr(args, k, None) is not None}


def prepare_args(args: argparse.Namespace):
    """``(graph, cfg, traffic, options)`` of the parsed flags (:func:`rankmap.solver.job.resolve.resolve_job`:
    a job file named as CLUSTER fills the flags left unset, which ``args`` then carries too)."""
    from rankmap.cli import warn
    from rankmap.solver.job.resolve import resolve_job

    resolved = resolve_job({}, given=_job_from_args(args), warn=warn)
    for key, value in resolved.job.items():  # --format, --server, --launch-order ... from a job file
        setattr(args, key, value)
    return tuple(resolved)


def solve_from_args(args: argparse.Namespace):
    """Run the solve described by parsed arguments (in process or via --server)."""
    graph, cfg, traffic, options = prepare_args(args)
    if getattr(args, "server", None):
        from rankmap.client import RankmapClient
        from rankmap.solver.fabric.cluster import cluster_from_graph

        # validate the cluster here as an in-process solve would (local_index, bandwidth
        # ranges, ...): bad input is exit 2 before anything is sent, whatever the server says
        cluster_from_graph(graph, nccl=options.nccl)
        with RankmapClient(args.server, tls_ca=getattr(args, "tls_ca", None),
                           token_file=getattr(args, "token_file", None)) as client:
            result = client.solve_config(graph, cfg, traffic, options)
        import dataclasses

        # the same bytes, with the model they came from (the JSON's traffic_model, for evaluate)
        return dataclasses.replace(result, traffic=traffic)
    from rankmap.progress import SolveProgress, progress_enabled
    from rankmap.solver import solve

    with SolveProgress(progress_enabled(getattr(args, "progress", False))) as bar:
        return solve(graph, cfg, traffic, options, progress=bar, deadline=process_deadline(options, cfg.world_size))


#: Writing the answer after the solve (``SolveResult.to_dict`` and the JSON text), seconds per rank:
#: about 2 s at 131,072 ranks on this project's 2-core machine under load (issue 28.1), with margin.
WRITE_SECONDS_PER_RANK = 2.5e-5


def process_deadline(options, world_size: int):
    """The search's wall-clock stop for ``rankmap solve`` as a whole process: ``--time-limit`` counts
    from the start of the command (reading the cluster included), and the search keeps
    ``WRITE_SECONDS_PER_RANK`` per rank for writing the answer, so the command returns within the
    limit plus a small margin (issue 28.1: 35-37 s for ``--time-limit 30`` at 131,072 GPUs).

    Returns a :class:`~rankmap.solver.search.deadline.Deadline` of
    ``search_seconds(limit, world_size) - seconds since the command started - WRITE_SECONDS_PER_RANK
    * world_size`` (at least 0: then the baseline is the answer); the work budgets still come from
    the limit.
    """
    from rankmap.cli import started
    from rankmap.solver.search.deadline import Deadline, search_seconds

    spent = time.monotonic() - started()
    return Deadline(max(0.0, search_seconds(options.time_limit_seconds, world_size) - spent
                        - WRITE_SECONDS_PER_RANK * world_size))


def _cmd_solve(args: argparse.Namespace) -> int:
    check_emit(args)
    result = solve_from_args(args)
    fmt = args.format or JOB_DEFAULTS["format"]
    if fmt not in ("json", "table"):
        raise InvalidArgumentError(f"format {fmt!r} is not json or table", "format")
    result, written = write_launch_files(args, result)
    if fmt == "table":
        launcher = LAUNCHERS.get(args.emit or "slurm-hostfile", "slurm")
        sys.stdout.write(solve_table(result, launcher, written, getattr(args, "launch_order", None)) + "\n")
    else:
        doc = result.to_dict()
        if written:
            doc["written"] = sorted(written)
        sys.stdout.write(dump_json(doc) + "\n")
    return 0


def _read_assignment(path: str) -> tuple[list[str], str | None, dict]:
    """An assignment file: JSON list, a ``rankmap solve`` JSON result (its ``assignment``
    and ``order``), or one GPU id per line.  Returns (assignment, order or None, the
    result document or ``{}``)."""
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except FileNotFoundError:
        raise InvalidArgumentError(f"assignment file {path!r} does not exist", "assignment") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidArgumentError(f"cannot read assignment file {path!r}: {exc}", "assignment") from None
    order = None
    stripped = text.strip()
    if stripped.startswith(("[", "{")):
        doc = load_json(stripped, f"assignment file {path}", "assignment")  # depth, size, duplicate keys
        result: dict = {}
        if isinstance(doc, dict):
            result = doc
            order = doc.get("order") if isinstance(doc.get("order"), str) else None
            doc = doc.get("assignment")
        if not isinstance(doc, list):
            raise InvalidArgumentError(f"assignment file {path}: expected a list of GPU ids", "assignment")
        return [str(x) for x in doc], order, result
    lines = [line.strip() for line in stripped.splitlines() if line.strip() and not line.startswith("#")]
    if not lines:
        raise InvalidArgumentError(f"assignment file {path} is empty", "assignment")
    return lines, order, {}


def _sizes_from_result(args: argparse.Namespace, result: dict, path: str) -> None:
    """Size flags left unset take the result document's sizes; a flag that disagrees is an error
    naming both (evaluating a layout with other sizes than it was solved for is a different job)."""
    from rankmap.solver.job.model import SIZE_KEYS, fill_sizes

    sizes = result.get("sizes")
    if not isinstance(sizes, dict):
        return

    def conflict(key, given, value):
        return InvalidArgumentError(
            f"--{key} {given} disagrees with {key} {value} in {path} (the sizes it was solved for)", key)

    for key, value in fill_sizes({k: getattr(args, k, None) for k in SIZE_KEYS}, sizes, conflict).items():
        setattr(args, key, value)


def _traffic_from_result(args: argparse.Namespace, result: dict, cfg, path: str):
    """The result document's traffic (its model and explicit classes, else its bytes), or None when
    the command line gives traffic flags or the document has none."""
    from rankmap.solver.job.model import resolve_traffic
    from rankmap.solver.job.resolve import model_keys_given
    from rankmap.solver.traffic import model_from_mapping, traffic_from_mapping

    if getattr(args, "traffic", None) is not None or model_keys_given(vars(args)):
        return None
    model = result.get("traffic_model")
    explicit = result.get("traffic_explicit") or None
    if isinstance(model, dict):
        spec = model_from_mapping(model, source=f"{path} traffic_model")
        return resolve_traffic(cfg, traffic_from_mapping(explicit) if explicit else None, model=spec)
    if isinstance(result.get("traffic_bytes"), dict):
        return resolve_traffic(cfg, traffic_from_mapping(result["traffic_bytes"]))
    return None


def _nccl_from_result(args: argparse.Namespace, result: dict, path: str, given):
    """The result document's NCCL settings (``nccl``) when no NCCL flag is given, else ``given``."""
    from rankmap.solver.job.values import job_nccl

    flags = ("nccl_algo", "nccl_rate", "pxn", "nccl_latency")
    doc = result.get("nccl") if isinstance(result, dict) else None
    if any(vars(args).get(k) is not None for k in flags) or not isinstance(doc, dict):
        return given
    try:
        return job_nccl({"nccl_algo": doc.get("algorithm"), "nccl_rate": doc.get("rates") or None,
                         "pxn": doc.get("pxn"), "nccl_latency": doc.get("latency")})
    except InvalidArgumentError as e:
        raise InvalidArgumentError(f"{path}: nccl: {e}", e.field) from None


def _cmd_evaluate(args: argparse.Namespace) -> int:
    from rankmap.cli import config_from_args, warn
    from rankmap.solver.job.resolve import job_cluster, job_traffic
    from rankmap.solver.job.values import job_nccl
    from rankmap.solver import evaluate

    from rankmap.cli_traffic import apply_megatron_sizes

    exposure = exposure_from_value(args.exposure)
    nccl = job_nccl(vars(args))
    apply_megatron_sizes(args)
    graph = job_cluster(vars(args), warn)
    assignment, file_order, result = _read_assignment(args.assignment)
    nccl = _nccl_from_result(args, result, args.assignment, nccl)
    _sizes_from_result(args, result, args.assignment)
    from rankmap.cli_traffic import megatron_from_args

    meg = megatron_from_args(args)
    order = args.order if args.order is not None else (file_order or (meg.order if meg else "tp-cp-ep-dp-pp"))
    gpu_ids = {str(n) for n, d in graph.nodes(data=True) if d.get("kind", "gpu") == "gpu"}
    unknown = next((a for a in assignment if a not in gpu_ids), None)
    if unknown is not None:
        raise InvalidArgumentError(
            f"assignment file {args.assignment}: {unknown[:80]!r} is not a GPU of the cluster (expected a JSON list "
            f"of GPU ids, a 'rankmap solve' JSON result, or one GPU id per line)", "assignment")
    if args.world_size is None:
        gpus = len(gpu_ids)
        if len(assignment) != gpus:
            raise InvalidArgumentError(
                f"assignment file {args.assignment} has {len(assignment)} entries but the cluster has {gpus} GPUs; "
                f"pass --world-size to evaluate a job on part of the cluster",
                "assignment",
            )
    ws = args.world_size if args.world_size is not None else len(assignment)
    try:
        cfg = config_from_args(args, world_size=ws, order=order)
    except InvalidArgumentError as exc:
        if args.world_size is None:
            raise InvalidArgumentError(
                f"assignment file {args.assignment} has {len(assignment)} entries (the world size): {exc.message}",
                exc.field,
            ) from None
        raise
    traffic = _traffic_from_result(args, result, cfg, args.assignment)
    if traffic is None:
        traffic = job_traffic(vars(args), cfg)
    if getattr(args, "server", None):
        from rankmap.client import RankmapClient
        from rankmap.solver.fabric.cluster import cluster_from_graph

        cluster_from_graph(graph, nccl=nccl)  # bad cluster input is exit 2 before anything is sent, as for solve
        with RankmapClient(args.server, tls_ca=getattr(args, "tls_ca", None),
                           token_file=getattr(args, "token_file", None)) as client:
            cost = client.evaluate_config(graph, cfg, assignment, traffic, exposure, nccl=nccl)
    else:
        cost = evaluate(graph, cfg, assignment, traffic, exposure=exposure, nccl=nccl)
    doc = {"order": cfg.order, "world_size": cfg.world_size, "sizes": cfg.sizes, "traffic_bytes": dict(traffic),
           "cost": cost.to_dict()}
    if args.format == "table":
        lines = [f"order {cfg.order}  world_size {cfg.world_size}", ""]
        lines.extend(cost_table(cost, traffic))
        sys.stdout.write("\n".join(lines) + "\n")
    else:
        sys.stdout.write(dump_json(doc) + "\n")
    return 0


_EXPOSURE_HELP = (
    "share x of each class's time not overlapped with compute, in [0, 1], e.g. tp=0.5,dp=0.2 "
    "(classes not named: 1); the objective is the predicted communication time per step, sum of x*T per class"
)


def add_nccl_arguments(p: argparse.ArgumentParser) -> None:
    """``--nccl-algo``, ``--nccl-rate``, ``--no-pxn``, ``--no-nccl-latency``: how NCCL runs the collectives
    (:func:`rankmap.solver.job.values.job_nccl`; job keys ``nccl_algo``, ``nccl_rate``, ``pxn``,
    ``nccl_latency``).  Unset flags are None, so a job file's keys fill them."""
    from rankmap.solver.fabric.rates import ALGORITHMS

    p.add_argument("--nccl-algo", type=str.lower, choices=ALGORITHMS, default=None, metavar="ALGO",
                   help="all-reduce algorithm, as NCCL_ALGO: " + "|".join(ALGORITHMS)
                        + " (default auto: NCCL's tuner picks the fastest; one a group cannot run falls back to ring)")
    p.add_argument("--nccl-rate", action="append", default=None, metavar="KEY=GBPS",
                   help="GB/s NCCL achieves per NIC port (nic=45) or per NVLink port (nvlink=20.6) instead of the "
                        "calibrated rates (repeatable)")
    p.add_argument("--no-pxn", dest="pxn", action="store_const", const=False, default=None,
                   help="no PXN for all-to-all and send/recv across nodes (as NCCL_PXN_DISABLE=1)")
    p.add_argument("--no-nccl-latency", dest="nccl_latency", action="store_const", const=False, default=None,
                   help="leave NCCL's latency model out of the predicted times (bandwidth terms only)")


def register(subparsers) -> None:
    """Add the ``solve`` and ``evaluate`` subcommands."""
    from rankmap.cli import add_size_arguments, float_arg, int_at_least, server_arg
    from rankmap.cli_cluster import add_cluster_arguments
    from rankmap.cli_traffic import add_model_arguments

    s = subparsers.add_parser(
        "solve",
        help="find the order and rank-to-GPU assignment that minimise the predicted communication time",
        description="CLUSTER is a node-link JSON / GraphML cluster graph, or a job YAML file.",
    )
    s.add_argument("cluster", nargs="?", default=None, help="cluster graph file or job YAML")
    add_cluster_arguments(s)
    add_size_arguments(s, world_size_required=False)
    add_model_arguments(s)
    s.add_argument("--exposure", default=None, metavar="CLASS=X,...", help=_EXPOSURE_HELP)
    s.add_argument("--mode", choices=("launcher", "free", "fixed"), default=None, type=str.lower,
                   help="launcher (default: contiguous blocks of ranks per host, as torchrun/Slurm), "
                        "free (any bijection) or fixed (only the order is chosen)")
    s.add_argument("--launch-order", default=None, metavar="sorted|listed|FILE",
                   help="how the launcher numbers the hosts without rankmap, the baseline: sorted (default: "
                        "natural-sorted names, as srun/torchrun), listed (cluster file order) or FILE, a host list "
                        "in launch order (scontrol show hostnames, an MPI hostfile)")
    s.add_argument("--emit", default=None, metavar="KIND",
                   help="write a launch file: slurm-hostfile (SLURM_HOSTFILE for srun --distribution=arbitrary), "
                        "torchrun (a script run on every host), rankfile (Open MPI), kubernetes (node per pod "
                        "index); needs -o FILE")
    s.add_argument("-o", "--output", default=None, metavar="FILE", help="the file --emit writes")
    s.add_argument("--orders", default=None,
                   help="orders to search: default (tp-cp-ep-dp-pp only; the default) | megatron-cli "
                        "(+ tp-cp-ep-pp-dp) | all | O1,O2,...")
    s.add_argument("--constraint", action="append", default=None,
                   help="e.g. 'tp within host', 'ep within leaf' (repeatable)")
    s.add_argument("--exclude-host", action="append", default=None, help="host not to use (repeatable)")
    s.add_argument("--exclude-device", action="append", default=None, help="GPU node id not to use (repeatable)")
    # unset flags take the job model's defaults (JOB_DEFAULTS), as unset job-file keys do
    s.add_argument("--time-limit", type=float_arg, default=None,
                   help=f"search budget, seconds (default {JOB_DEFAULTS['time_limit']:g})")
    s.add_argument("--seed", type=int_at_least(0), default=None,
                   help=f"CP-SAT random seed (default {JOB_DEFAULTS['seed']})")
    add_nccl_arguments(s)
    s.add_argument("--format", choices=("json", "table"), default=None,
                   help=f"json or table (default {JOB_DEFAULTS['format']})")
    s.add_argument("--server", type=server_arg, default=None, metavar="HOST:PORT",
                   help="solve on a rankmap server instead of in process")
    s.add_argument("--tls-ca", default=None, metavar="FILE",
                   help="--server speaks TLS; FILE is the PEM CA that signed its certificate")
    s.add_argument("--token-file", default=None, metavar="FILE",
                   help="bearer token for --server (first line of FILE)")
    s.add_argument("--progress", action="store_true",
                   help="phase and best time so far on stderr for solves over ~1 s, even when stderr is not "
                        "a terminal (default: only on a terminal)")
    s.set_defaults(func=_cmd_solve)

    e = subparsers.add_parser("evaluate", help="predicted communication time of a given order and assignment")
    e.add_argument("cluster", nargs="?", default=None, help="cluster graph file")
    add_cluster_arguments(e)
    e.add_argument("--order", default=None,
                   help="order of the layout (default: the 'order' of a solve result file, else tp-cp-ep-dp-pp)")
    e.add_argument("--assignment", required=True,
                   help="GPU id per global rank: a JSON list, a 'rankmap solve' JSON result, or one id per line")
    add_size_arguments(e, world_size_required=False)
    add_model_arguments(e)
    e.add_argument("--exposure", default=None, metavar="CLASS=X,...", help=_EXPOSURE_HELP)
    add_nccl_arguments(e)
    e.add_argument("--format", choices=("json", "table"), default="json")
    e.add_argument("--server", type=server_arg, default=None, metavar="HOST:PORT",
                   help="evaluate on a rankmap server instead of in process")
    e.add_argument("--tls-ca", default=None, metavar="FILE",
                   help="--server speaks TLS; FILE is the PEM CA that signed its certificate")
    e.add_argument("--token-file", default=None, metavar="FILE", help="bearer token for --server (first line of FILE)")
    e.set_defaults(func=_cmd_evaluate)
