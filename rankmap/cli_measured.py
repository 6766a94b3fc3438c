"""``--measured`` and ``--exclude-slow`` (issue 27): measured link rates on ``cluster``, ``solve`` and ``evaluate``.

The files are read by :mod:`rankmap.solver.formats.measured` and applied to the cluster graph by
:func:`rankmap.solver.job.resolve.job_measured` (:mod:`rankmap.solver.fabric.measured`): each measured
pair caps the bottleneck links of its route.  Measurements naming unknown hosts are warnings.
"""

from __future__ import annotations

import argparse

__all__ = ["add_measured_arguments", "measured_cluster", "measured_doc"]


def add_measured_arguments(p: argparse.ArgumentParser, exclude_slow: bool = True) -> None:
    """Add ``--measured FILE`` (repeatable; job key ``measured``) and ``--exclude-slow F`` (job key ``exclude_slow``)."""
    from rankmap.cli import float_arg

    p.add_argument("--measured", action="append", default=None, metavar="FILE|A,B=FILE|HOST=FILE",
                   help="measured rates: CSV a,b,GB/s[,source] (hosts or GPUs), nccl-tests output between 2 hosts "
                        "(busbw at the largest size), ib_write_bw text/JSON (A,B=FILE), nvbandwidth JSON "
                        "(HOST=FILE); each caps the bottleneck links of its route (repeatable)")
    if exclude_slow:
        p.add_argument("--exclude-slow", type=float_arg, default=None, metavar="F",
                       help="leave out hosts measured below F x the model's rate (0 < F <= 1)")


def measured_cluster(args: argparse.Namespace, graph, drop_slow: bool = False):
    """The graph with the ``--measured`` caps (unknown hosts: warnings on stderr); ``args.measured_graph``
    keeps the :class:`~rankmap.solver.fabric.measured.MeasuredGraph` for :func:`measured_doc`."""
    from rankmap.cli import warn
    from rankmap.solver.job.resolve import job_measured

    mg = job_measured(vars(args), graph, warn, drop_slow=drop_slow)
    args.measured_graph = mg
    return mg.graph


def measured_doc(mg, links=()) -> dict | None:
    """The ``measured`` part of a JSON result: ``links`` the layout relies on, ``pairs`` (each
    measurement: gbps per flow, model_gbps, ratio, source), ``warnings``, ``excluded_slow_hosts``;
    None without measurements."""
    if mg is None or (not mg.pairs and not mg.warnings):
        return None
    return {"links": [dict(x) for x in links], "pairs": list(mg.pairs), "warnings": list(mg.warnings),
            "excluded_slow_hosts": list(mg.slow_hosts)}
