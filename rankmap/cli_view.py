"""``rankmap view RESULT.json -o layout.html``: a picture of a solve result (issue 27 deliverable 5).

::

    rankmap view RESULT.json -o layout.html [--cluster FILE | the cluster flags of `rankmap cluster`]
                 [--max-hosts N]

``RESULT.json`` is what ``rankmap solve`` prints (JSON).  The page (:mod:`rankmap.layout_view`,
:mod:`rankmap.layout_page`) is one self-contained HTML file: the fabric tree (spines, leaves,
hosts, GPUs), each GPU coloured by its TP group and labelled with its PP stage and DP index,
each class's bottleneck link marked, chosen and baseline side by side, per-class time bars.
With the cluster (a graph file, or the flags that build it) leaves and spines are drawn;
without, hosts hang under one ``network`` node.  ``rankmap solve ... --emit html -o FILE``
writes the same page with the solve's own cluster.  Bad input: one line on stderr, exit 2.
"""

from __future__ import annotations

import argparse
import json
import os
from typing import Any, Mapping

from rankmap.solver.errors import InvalidArgumentError

__all__ = ["register", "run", "write_html"]

#: Largest result file read, bytes (a 131,072-GPU result with its groups is ~60 MB).
MAX_RESULT_BYTES = 512 * 1024 * 1024


def write_html(path: str, result: Mapping[str, Any], graph=None, max_hosts: int | None = None) -> str:
    """Write the layout page of ``result`` (and ``graph``) to ``path``; returns the text written.

    Raises
    ------
    InvalidArgumentError
        Not a solve result (field ``result``) or ``path`` cannot be written (field ``output``).
    """
    from rankmap.layout_view import MAX_DRAWN_HOSTS, layout_html

    text = layout_html(result, graph, MAX_DRAWN_HOSTS if max_hosts is None else max_hosts)
    try:
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(text)
    except OSError as exc:
        raise InvalidArgumentError(f"cannot write {path!r}: {exc.strerror or exc}", "output") from None
    return text


def _read_result(path: str) -> dict:
    from rankmap.solver.formats.safe import load_json

    try:
        size = os.path.getsize(path)
        if size > MAX_RESULT_BYTES:
            raise InvalidArgumentError(f"result file {path!r} has {size:,} bytes; the limit is {MAX_RESULT_BYTES:,}",
                                       "result")
        with open(path, encoding="utf-8") as fh:
            text = fh.read(MAX_RESULT_BYTES + 1)
    except FileNotFoundError:
        raise InvalidArgumentError(f"result file {path!r} does not exist", "result") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidArgumentError(f"cannot read result file {path!r}: {exc}", "result") from None
    if not text.strip():
        raise InvalidArgumentError(f"result file {path!r} is empty (the JSON `rankmap solve` prints)", "result")
    doc = load_json(text, f"result file {path}", "result")
    if not isinstance(doc, dict):
        raise InvalidArgumentError(f"result file {path}: not a rankmap solve result (a JSON object)", "result")
    _check_shape(doc, path)
    if doc.get("baseline", 0) is None:
        del doc["baseline"]  # no baseline: the page shows the chosen layout alone
    return doc


#: The keys the page reads from a solve result, and the JSON type each must have when present (None allowed
#: where a solve writes it: no baseline, no improvement).
_SHAPE = {"assignment": (list,), "hosts": (list,), "sizes": (dict,), "cost": (dict,), "baseline": (dict, type(None)),
          "improvement": (int, float, type(None)), "order": (str,), "traffic_bytes": (dict,)}


def _check_shape(doc: Mapping[str, Any], path: str, where: str = "") -> None:
    """Each key the page reads has the type a ``rankmap solve`` result gives it, else a clear error naming it."""
    names = {list: "a list", dict: "an object", str: "a string", int: "a number", float: "a number",
             type(None): "null"}
    for key, types in _SHAPE.items():
        if key in doc and (not isinstance(doc[key], types) or isinstance(doc[key], bool)):
            want = " or ".join(dict.fromkeys(names[t] for t in types))
            raise InvalidArgumentError(f"result file {path}: {where}{key!r} is {json.dumps(doc[key])[:40]}, "
                                       f"expected {want} (the JSON `rankmap solve` prints)", "result")
    if isinstance(doc.get("baseline"), dict) and not where:
        _check_shape(doc["baseline"], path, "baseline.")
    for i, h in enumerate(doc.get("hosts") or []):
        if not isinstance(h, dict):
            raise InvalidArgumentError(f"result file {path}: hosts[{i}] is {json.dumps(h)[:40]}, expected an object",
                                       "result")


def run(args: argparse.Namespace) -> int:
    """Execute ``rankmap view``; returns the exit status."""
    from rankmap.cli_cluster import cluster_flags_given, cluster_from_args

    result = _read_result(args.result)
    graph = None
    if args.cluster and cluster_flags_given(args):
        raise InvalidArgumentError("give either --cluster FILE or the cluster flags, not both", "cluster")
    if args.cluster:
        from rankmap.solver.formats import load_graph

        graph = load_graph(args.cluster)
    elif cluster_flags_given(args):
        graph = cluster_from_args(args)
    write_html(args.output, result, graph, args.max_hosts)
    return 0


def register(subparsers) -> argparse.ArgumentParser:
    """Add the ``view`` subcommand to the main CLI's subparsers."""
    from rankmap.cli import positive_int_arg
    from rankmap.cli_cluster import add_cluster_arguments

    p = subparsers.add_parser(
        "view", help="draw a solve result as one self-contained HTML page (fabric tree, TP groups, bottlenecks)",
        description="Draw a `rankmap solve` JSON result: the fabric tree (spines, leaves, hosts, GPUs), GPUs coloured "
                    "by TP group and labelled with PP stage and DP index, each class's bottleneck link, chosen and "
                    "baseline side by side, per-class time bars; one HTML file with no network access.")
    p.add_argument("result", metavar="RESULT.json", help="the JSON `rankmap solve` prints")
    p.add_argument("-o", "--output", metavar="FILE", required=True, help="the HTML file to write")
    p.add_argument("--cluster", metavar="FILE", default=None,
                   help="the cluster graph the result was solved on (node-link JSON / GraphML): draws leaves and "
                        "spines; or give the cluster flags below")
    p.add_argument("--max-hosts", metavar="N", type=positive_int_arg, default=None,
                   help="draw every GPU up to N hosts (default 256); above, each leaf is one aggregate box")
    add_cluster_arguments(p)
    p.set_defaults(func=run)
    return p
