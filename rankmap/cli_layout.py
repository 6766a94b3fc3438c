"""Layouts read from files for ``rankmap evaluate`` and ``rankmap check`` (issue 26): an assignment
(a JSON list, a ``rankmap solve`` result, one GPU id per line) or any launch file ``rankmap solve
--emit`` writes (``--hostfile``, ``--rankfile``, ``--pod-map``, ``--torchrun-script``; readers in
:mod:`rankmap.solver.allocation.readers`), and the job they are evaluated for (sizes, order,
traffic and NCCL settings, from the flags or a solve result)."""

from __future__ import annotations

import argparse
import os
import re
import sys
from dataclasses import dataclass
from typing import Any

from rankmap.solver.errors import InvalidArgumentError
from rankmap.solver.formats.safe import dump_json, load_json
from rankmap.solver.job.values import exposure_from_value

__all__ = ["LAYOUT_FLAGS", "add_layout_arguments", "EvaluateInputs", "evaluate_inputs"]

#: Layout flags -> launch-file kind (``assignment``: a JSON list / solve result / GPU id per line).
LAYOUT_FLAGS = {"assignment": "assignment", "hostfile": "hostfile", "rankfile": "rankfile", "pod_map": "pod-map",
                "torchrun_script": "torchrun"}
_WHAT = {"assignment": "assignment file", "hostfile": "hostfile", "rankfile": "rankfile", "pod-map": "pod map",
         "torchrun": "torchrun script"}
_UNIT = {"assignment": "entries", "hostfile": "lines (one per global rank)", "rankfile": "ranks", "pod-map": "ranks",
         "torchrun": "ranks"}


def add_layout_arguments(p: argparse.ArgumentParser) -> None:
    """The layout flags of ``evaluate`` and ``check``: exactly one of ``--assignment``, ``--hostfile``,
    ``--rankfile``, ``--pod-map``, ``--torchrun-script``; ``--gpus-file`` and ``--cuda-visible-devices``
    for the GPU order a launch file's command sets."""
    from rankmap.cli import _int_list

    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--assignment", default=None, metavar="FILE",
                   help="GPU id per global rank: a JSON list, a 'rankmap solve' JSON result, or one id per line")
    g.add_argument("--hostfile", default=None, metavar="FILE",
                   help="SLURM_HOSTFILE (srun --distribution=arbitrary): the host of global rank i on line i+1")
    g.add_argument("--rankfile", default=None, metavar="FILE", help="Open MPI rankfile: 'rank R=HOST slot=S' lines")
    g.add_argument("--pod-map", default=None, metavar="FILE",
                   help="Kubernetes pod map (--emit kubernetes): the node of pod index i on line i+1")
    g.add_argument("--torchrun-script", default=None, metavar="FILE",
                   help="the per-host torchrun script 'rankmap solve --emit torchrun' writes")
    p.add_argument("--gpus-file", default=None, metavar="FILE",
                   help="CUDA_VISIBLE_DEVICES per host ('HOST LIST' lines, the FILE.gpus --emit writes; read "
                        "automatically when it sits next to the launch file)")
    p.add_argument("--cuda-visible-devices", type=_int_list, default=None, metavar="LIST",
                   help="one CUDA_VISIBLE_DEVICES for every host of a launch file (default: GPUs by index)")


def _read_text(path: str, what: str, field: str) -> str:
    try:
        with open(path, encoding="utf-8") as fh:
            return fh.read()
    except FileNotFoundError:
        raise InvalidArgumentError(f"{what} {path!r} does not exist", field) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidArgumentError(f"cannot read {what} {path!r}: {exc}", field) from None


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


def _exposure_from_result(result: dict, path: str) -> dict[str, float]:
    """The exposure x_c the result document was solved with (``cost.classes.CLASS.exposure``; the
    classes at 1 left out), so that evaluating a solve result gives its ``total_seconds``; ``{}``
    when the document has none."""
    classes = (result.get("cost") or {}).get("classes") if isinstance(result.get("cost"), dict) else None
    if not isinstance(classes, dict):
        return {}
    given = {c: d["exposure"] for c, d in classes.items() if isinstance(d, dict) and "exposure" in d
             and d["exposure"] != 1}
    try:
        return exposure_from_value(given)
    except InvalidArgumentError as e:
        raise InvalidArgumentError(f"{path}: cost.classes: {e.message}", e.field) from None


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


@dataclass
class EvaluateInputs:
    """What ``evaluate`` and ``check`` evaluate: the cluster (graph and model), the validated
    configuration (sizes and the layout's order), the GPU per global rank, the traffic, exposure and
    NCCL settings, and where the layout came from (``source`` path, launch-file ``kind``)."""

    graph: Any
    cluster: Any
    cfg: Any
    assignment: list[str]
    traffic: Any
    exposure: dict[str, float]
    nccl: Any
    source: str
    kind: str


def _layout_flag(args: argparse.Namespace) -> tuple[str, str]:
    for flag, kind in LAYOUT_FLAGS.items():
        if getattr(args, flag, None):
            return flag, kind
    raise InvalidArgumentError("give the layout: --assignment, --hostfile, --rankfile, --pod-map or "
                               "--torchrun-script FILE", "assignment")


def evaluate_inputs(args: argparse.Namespace) -> EvaluateInputs:
    """Read the cluster, the layout file and the job of ``evaluate`` / ``check`` flags.

    A ``rankmap solve`` result given as ``--assignment`` also gives the order, sizes, traffic and
    NCCL settings (flags that disagree are errors naming both); a launch file gives only the GPU
    of each rank (the sizes and traffic come from the flags, the order from ``--order``).  Without
    ``--world-size`` the layout must cover every GPU of the cluster.

    Raises
    ------
    InvalidArgumentError
        An unreadable file, a host or GPU the cluster lacks, a launch file whose rank count is not
        the world size ("hostfile F has 12 lines (one per global rank) but --world-size is 16"),
        bad sizes or traffic.
    """
    from rankmap.cli import config_from_args, warn
    from rankmap.cli_traffic import apply_megatron_sizes, megatron_from_args
    from rankmap.solver.allocation.readers import host_gpus, read_launch_file
    from rankmap.solver.fabric.cluster import cluster_from_graph
    from rankmap.solver.job.resolve import job_cluster, job_traffic
    from rankmap.solver.job.values import job_nccl

    exposure = exposure_from_value(args.exposure)
    nccl = job_nccl(vars(args))
    apply_megatron_sizes(args)
    from rankmap.cli_measured import measured_cluster

    graph = measured_cluster(args, job_cluster(vars(args), warn))  # --measured caps (issue 27)
    flag, kind = _layout_flag(args)
    path = getattr(args, flag)
    what, field = _WHAT[kind], flag
    result: dict = {}
    file_order = None
    if kind == "assignment":
        if args.gpus_file or args.cuda_visible_devices is not None:
            raise InvalidArgumentError("--gpus-file and --cuda-visible-devices go with a launch file (--hostfile, "
                                       "--rankfile, --pod-map), not --assignment, which names the GPUs", "gpus_file")
        assignment, file_order, result = _read_assignment(path)
        nccl = _nccl_from_result(args, result, path, nccl)
        if args.exposure is None:
            exposure = _exposure_from_result(result, path)
        _sizes_from_result(args, result, path)
        ws = result.get("world_size")
        if args.world_size is None and isinstance(ws, int) and not isinstance(ws, bool) and ws == len(assignment):
            args.world_size = ws  # a solve result on part of the cluster: its own world size
    elif kind == "torchrun" and re.search(r"--use-tp-pp-dp-mapping\b", _read_text(path, what, field)):
        file_order = "tp-cp-ep-pp-dp"  # the Megatron flag rankmap writes into the script for that order
    meg = megatron_from_args(args)
    order = args.order if args.order is not None else (file_order or (meg.order if meg else "tp-cp-ep-dp-pp"))
    cluster = cluster_from_graph(graph, nccl=nccl)
    if kind == "assignment":
        gpu_ids = cluster.device_index()
        unknown = next((a for a in assignment if a not in gpu_ids), None)
        if unknown is not None:
            raise InvalidArgumentError(
                f"assignment file {path}: {unknown[:80]!r} is not a GPU of the cluster (expected a JSON list "
                f"of GPU ids, a 'rankmap solve' JSON result, or one GPU id per line)", "assignment")
    else:
        if kind == "torchrun" and (args.gpus_file or args.cuda_visible_devices is not None):
            raise InvalidArgumentError("the torchrun script carries each host's CUDA_VISIBLE_DEVICES; drop "
                                       "--gpus-file / --cuda-visible-devices", "gpus_file")
        gpus_path = args.gpus_file
        if gpus_path is None and kind != "torchrun" and os.path.isfile(path + ".gpus"):
            gpus_path = path + ".gpus"  # what the emitted commands read CUDA_VISIBLE_DEVICES from
        gpus_text = None if gpus_path is None else _read_text(gpus_path, "GPU file", "gpus_file")
        assignment = read_launch_file(kind, _read_text(path, what, field), host_gpus(cluster), source=path,
                                      gpus_text=gpus_text, gpus_source=gpus_path,
                                      cuda_visible_devices=args.cuda_visible_devices, world_size=args.world_size)
    if args.world_size is None and len(assignment) != cluster.num_devices:
        raise InvalidArgumentError(
            f"{what} {path} has {len(assignment)} {_UNIT[kind]} but the cluster has {cluster.num_devices} GPUs; "
            f"pass --world-size to evaluate a job on part of the cluster", field)
    if args.world_size is not None and len(assignment) != args.world_size:
        raise InvalidArgumentError(
            f"{what} {path} has {len(assignment)} {_UNIT[kind]} but --world-size is {args.world_size}", field)
    ws = len(assignment)
    try:
        cfg = config_from_args(args, world_size=ws, order=order)
    except InvalidArgumentError as exc:
        if args.world_size is None:
            raise InvalidArgumentError(
                f"{what} {path} has {ws} {_UNIT[kind]} (the world size): {exc.message}", exc.field) from None
        raise
    traffic = _traffic_from_result(args, result, cfg, path)
    if traffic is None:
        traffic = job_traffic(vars(args), cfg)
    return EvaluateInputs(graph, cluster, cfg, assignment, traffic, exposure, nccl, path, kind)


def _cmd_evaluate(args: argparse.Namespace) -> int:
    from rankmap.solver import evaluate
    from rankmap.solve_report import cost_table

    job = evaluate_inputs(args)
    cfg, traffic = job.cfg, job.traffic
    if getattr(args, "server", None):
        from rankmap.client import RankmapClient

        with RankmapClient(args.server, tls_ca=getattr(args, "tls_ca", None),
                           token_file=getattr(args, "token_file", None)) as client:
            cost = client.evaluate_config(job.graph, cfg, job.assignment, traffic, job.exposure, nccl=job.nccl)
    else:
        cost = evaluate(job.cluster, cfg, job.assignment, traffic, exposure=job.exposure)
    doc = {"order": cfg.order, "world_size": cfg.world_size, "sizes": cfg.sizes, "traffic_bytes": dict(traffic),
           "cost": cost.to_dict()}
    mg = getattr(args, "measured_graph", None)
    if mg is not None and mg.pairs:
        from rankmap.cli_measured import measured_doc
        from rankmap.solver.cost.measured_use import measured_links_used

        index = job.cluster.device_index()
        dev = [index[a] for a in job.assignment]
        doc["measured"] = measured_doc(mg, measured_links_used(job.cluster, cfg, dev, traffic))
    if args.format == "table":
        from rankmap.solve_report import measured_lines

        lines = [f"order {cfg.order}  world_size {cfg.world_size}", ""]
        lines.extend(cost_table(cost, traffic))
        lines.extend(measured_lines((doc.get("measured") or {}).get("links", ())))
        sys.stdout.write("\n".join(lines) + "\n")
    else:
        sys.stdout.write(dump_json(doc) + "\n")
    return 0
