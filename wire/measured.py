"""Measured rates on the wire (issue 27): ``Measurement`` and ``MeasuredLink`` messages <-> plain types.

The client sends :class:`~rankmap.solver.formats.measured.Measurement` records (the command line
reads the files); the server applies them to the request's cluster
(:func:`~rankmap.solver.fabric.measured.apply_measured`) and answers with the measured links the
layout crosses (``SolveResult.measured_links`` dicts).
"""

from __future__ import annotations

import math
from typing import Iterable

from rankmap.solver.errors import InvalidArgumentError
from rankmap.v1 import rankmap_pb2 as pb

__all__ = ["measurements_to_proto", "measurements_from_proto", "measured_links_to_proto",
           "measured_links_from_proto"]


def measurements_to_proto(target, measurements: Iterable) -> None:
    """Append each measurement to the repeated ``Measurement`` field ``target``."""
    for m in measurements or ():
        target.add(a=str(m.a), b=str(m.b), gbps=float(m.gbps), source=str(m.source or ""),
                   gpus_per_host=int(m.gpus_per_host or 0), devices_a=[int(x) for x in m.devices_a],
                   devices_b=[int(x) for x in m.devices_b])


def measurements_from_proto(items, field: str = "measured") -> tuple:
    """The :class:`~rankmap.solver.formats.measured.Measurement` records of a repeated field.

    Raises
    ------
    InvalidArgumentError
        An empty endpoint, a rate that is not finite in 1e-6..1e9 GB/s or a negative
        ``gpus_per_host``, naming ``measured[i].FIELD``; more than ``MAX_MEASUREMENTS``.
    """
    from rankmap.solver.formats.measured import MAX_MEASUREMENTS, Measurement

    if len(items) > MAX_MEASUREMENTS:
        raise InvalidArgumentError(f"{len(items)} measurements; at most {MAX_MEASUREMENTS}", field)
    out = []
    for i, m in enumerate(items):
        for end in ("a", "b"):
            v = getattr(m, end)
            if not v.strip() or len(v) > 256:
                raise InvalidArgumentError(f"measurement {i}: endpoint {end} {v[:60]!r} is not a host or GPU id",
                                           f"{field}[{i}].{end}")
        if not math.isfinite(m.gbps) or not 1e-6 <= m.gbps <= 1e9:
            raise InvalidArgumentError(f"measurement {i}: rate {m.gbps!r} GB/s must be finite and in 1e-6..1e9",
                                       f"{field}[{i}].gbps")
        if m.gpus_per_host < 0:
            raise InvalidArgumentError(f"measurement {i}: gpus_per_host {m.gpus_per_host} is negative",
                                       f"{field}[{i}].gpus_per_host")
        out.append(Measurement(m.a.strip(), m.b.strip(), float(m.gbps), m.source[:256], int(m.gpus_per_host),
                               tuple(int(x) for x in m.devices_a), tuple(int(x) for x in m.devices_b)))
    return tuple(out)


def measured_links_to_proto(target, links: Iterable) -> None:
    """Append each measured-link dict (``link``, ``measured_gbps``, ``line_gbps``, ``source``, ``classes``)."""
    for d in links or ():
        u, v = d["link"]
        target.add(source_node=str(u), target_node=str(v), measured_gbps=float(d["measured_gbps"]),
                   line_gbps=float(d.get("line_gbps", 0.0)), source=str(d.get("source", "")),
                   classes=[str(c) for c in d.get("classes", ())])


def measured_links_from_proto(items) -> tuple:
    """The measured-link dicts of a repeated ``MeasuredLink`` field."""
    return tuple({"link": [m.source_node, m.target_node], "measured_gbps": m.measured_gbps,
                  "line_gbps": m.line_gbps, "source": m.source, "classes": list(m.classes)} for m in items)


_ = pb  # the messages this module converts
