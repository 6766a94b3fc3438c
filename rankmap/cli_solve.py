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
import os
import sys
import time
from typing import Any

from rankmap.solver.errors import InvalidArgumentError
from rankmap.solver.formats.safe import dump_json
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
    args.measured_graph = resolved.measured
    return tuple(resolved)


def solve_from_args(args: argparse.Namespace, keep: dict | None = None):
    """Run the solve described by parsed arguments (in process or via --server); ``keep["graph"]``
    receives the cluster graph when ``keep`` is a dict (``--emit html`` draws it)."""
    graph, cfg, traffic, options = prepare_args(args)
    if keep is not None:
        keep["graph"] = graph
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


def check_output_dir(path: str | None) -> None:
    """Refuse an output file whose directory does not exist or cannot be written (field ``output``).

    Raises
    ------
    InvalidArgumentError
        Naming the path and the reason.
    """
    if not path:
        return
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise InvalidArgumentError(f"cannot write {path!r}: directory {parent!r} does not exist", "output")
    if not os.access(parent, os.W_OK):
        raise InvalidArgumentError(f"cannot write {path!r}: directory {parent!r} is not writable", "output")


def _cmd_solve(args: argparse.Namespace) -> int:
    check_emit(args)
    keep: dict = {}
    html_path = None
    if getattr(args, "emit", None) == "html":  # the picture (rankmap.layout_view), not a launch file
        html_path, args.emit, args.output = args.output, None, None
    for path in (html_path, getattr(args, "output", None)):
        check_output_dir(path)  # before the solve: a bad path is refused at once, not after the search
    result = solve_from_args(args, keep)
    fmt = args.format or JOB_DEFAULTS["format"]
    if fmt not in ("json", "table"):
        raise InvalidArgumentError(f"format {fmt!r} is not json or table", "format")
    result, written = write_launch_files(args, result)
    if html_path:
        from rankmap.cli_view import write_html

        written[html_path] = write_html(html_path, result.to_dict(), keep.get("graph"))
    if fmt == "table":
        launcher = LAUNCHERS.get(args.emit or "slurm-hostfile", "slurm")
        sys.stdout.write(solve_table(result, launcher, written, getattr(args, "launch_order", None)) + "\n")
    else:
        from rankmap.cli_measured import measured_doc

        doc = result.to_dict()
        measured = measured_doc(getattr(args, "measured_graph", None), result.measured_links)
        if measured is not None:
            doc["measured"] = measured
        if written:
            doc["written"] = sorted(written)
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
    from rankmap.cli_layout import _cmd_evaluate, add_layout_arguments
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
                        "index), or html (a picture of the layout: fabric tree, TP groups, bottlenecks, chosen vs "
                        "baseline; one self-contained page); needs -o FILE")
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
    from rankmap.cli_measured import add_measured_arguments

    add_measured_arguments(s)
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
    add_layout_arguments(e)
    add_size_arguments(e, world_size_required=False)
    add_model_arguments(e)
    e.add_argument("--exposure", default=None, metavar="CLASS=X,...", help=_EXPOSURE_HELP)
    add_nccl_arguments(e)
    add_measured_arguments(e, exclude_slow=False)
    e.add_argument("--format", choices=("json", "table"), default="json")
    e.add_argument("--server", type=server_arg, default=None, metavar="HOST:PORT",
                   help="evaluate on a rankmap server instead of in process")
    e.add_argument("--tls-ca", default=None, metavar="FILE",
                   help="--server speaks TLS; FILE is the PEM CA that signed its certificate")
    e.add_argument("--token-file", default=None, metavar="FILE", help="bearer token for --server (first line of FILE)")
    e.set_defaults(func=_cmd_evaluate)
