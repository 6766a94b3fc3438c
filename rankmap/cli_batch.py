"""``rankmap batch``: solve many jobs in a process pool, on Ray, or on a server.

::

    rankmap batch INPUT [--executor process|ray] [--ray-address ADDR] [--server HOST:PORT]
                  [--workers N] [-o out.jsonl] [--omit-groups] [--timeout S] [--progress] [--quiet]

INPUT is

* a folder: every ``*.yaml`` / ``*.yml`` file in it (sorted by name) is one job;
* a YAML file: a list of jobs (or a mapping with a ``jobs:`` list, or one job);
* a JSONL file (``.jsonl`` / ``.ndjson``): one job object per line.

A job has the keys of a ``rankmap solve`` job file (``cluster`` — a node-link
JSON or GraphML path, relative to the file that names it —, ``world_size``,
``tp``, ``cp``, ``ep``, ``etp``, ``pp``, ``traffic`` (class -> bytes), ``model``
(a preset name or a mapping), ``exposure`` (class -> x in [0, 1], or
``"tp=0.5,dp=0.2"``), ``mode``, ``orders``, ``constraints``,
``exclude_hosts``, ``time_limit``, ``seed``, ...), plus an optional ``name``.
Each job is read exactly as ``rankmap solve JOB.yaml`` reads it.

Jobs run in a process pool (``--workers``, default: every CPU this process may use), as Ray tasks
(``--executor ray``: a local Ray instance, or the cluster at ``--ray-address``;
see :mod:`rankmap.batch`, which is also the Python API), or are streamed to a
``rankmap serve`` through BatchSolve with ``--server``.  One JSON line per job
is written and flushed as soon as it completes, in completion order::

    {"index": 3, "name": "llama-64", "ok": true, "result": {...rankmap solve JSON...}}
    {"index": 4, "name": "bad", "ok": false, "error": {"type": "InvalidArgumentError",
     "message": "...", "field": "tp"}}

A progress bar (jobs done, failures, rate, ETA) is kept on stderr when it is a
terminal or with ``--progress``, and a summary table is printed at the end: on stderr when the JSON lines go to stdout, on stdout
with ``-o``.  Exit status: 0 when every job succeeded, 1 when some failed, 2
when INPUT itself cannot be read.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Iterable, TextIO

from rankmap.solver.errors import InvalidArgumentError, RankmapError

__all__ = ["register", "run"]

# --------------------------------------------------------------------------- running jobs (rankmap.batch)

from rankmap.batch import EXECUTORS, error_document, iter_solve_many, prepare_job, ray_missing_message  # noqa: E402
from rankmap.batch_input import Entry, load_entries  # noqa: E402


# --------------------------------------------------------------------------- the server back end


def _on_server(entries: list[Entry], server: str, omit_groups: bool, timeout: float,
               tls_ca=None, token_file=None) -> Iterable[dict]:
    from rankmap.client import RankmapClient
    from rankmap import wire

    requests = []
    owners: list[Entry] = []
    for e in entries:
        if e.error is not None:
            continue
        try:
            graph, cfg, traffic, options = prepare_job(e.job)
            requests.append(wire.solve_request_from_config(graph, cfg, traffic, options, omit_groups=omit_groups))
            owners.append(e)
        except (RankmapError, OSError) as exc:
            yield {"index": e.index, "name": e.name, "ok": False, "error": error_document(exc)}
    if not requests:
        return
    with RankmapClient(server, timeout=timeout, tls_ca=tls_ca, token_file=token_file) as client:
        for pos, outcome in client.batch_solve(requests):
            e = owners[pos]
            if isinstance(outcome, Exception):
                yield {"index": e.index, "name": e.name, "ok": False, "error": error_document(outcome)}
            else:
                doc = outcome.to_dict()
                if omit_groups:
                    doc.pop("groups", None)
                yield {"index": e.index, "name": e.name, "ok": True, "result": doc}


# --------------------------------------------------------------------------- reporting


def _fmt_seconds(x: float | None) -> str:
    if x is None:
        return "-"
    if x == 0:
        return "0"
    if x >= 1:
        return f"{x:.3f} s"
    if x >= 1e-3:
        return f"{x * 1e3:.3f} ms"
    return f"{x * 1e6:.3f} us"


def summary_table(docs: list[dict], elapsed: float) -> str:
    """The end-of-batch table: one row per job, in input order, then totals."""
    header = ["#", "name", "status", "order", "cost", "baseline", "improvement", "solve time", "error"]
    rows = []
    for d in sorted(docs, key=lambda d: d["index"]):
        if d["ok"]:
            r = d["result"]
            rows.append([
                str(d["index"]), d["name"], r["status"], r["order"],
                _fmt_seconds(r["cost"]["total_seconds"]), _fmt_seconds(r["baseline"]["cost"]["total_seconds"]),
                f"{100 * r['improvement']:.1f}%", f"{r['solve_seconds']:.2f} s", "",
            ])
        else:
            msg = d["error"]["message"]
            rows.append([str(d["index"]), d["name"], "ERROR", "", "", "", "", "",
                         msg if len(msg) <= 100 else msg[:97] + "..."])
    widths = [max(len(x) for x in col) for col in zip(header, *rows)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths)).rstrip()]
    lines.append("  ".join("-" * w for w in widths))
    for row in rows:
        lines.append("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip())
    ok = sum(1 for d in docs if d["ok"])
    lines.append(f"{len(docs)} jobs: {ok} ok, {len(docs) - ok} failed, {elapsed:.1f} s")
    return "\n".join(lines)


# --------------------------------------------------------------------------- command




def register(subparsers) -> None:
    """Add ``batch`` to the ``rankmap`` subcommands."""
    p = subparsers.add_parser(
        "batch",
        help="solve many jobs (folder of YAML job files, YAML list or JSONL): process pool, Ray, or a server",
        description="Solve every job of INPUT; one JSON line per job as it completes, then a summary table.",
    )
    from rankmap.cli import positive_int_arg, seconds_arg, server_arg

    p.add_argument("input", help="folder of .yaml job files, a YAML list of jobs, or a .jsonl file")
    p.add_argument("--server", type=server_arg, default=None, metavar="HOST:PORT", help="solve on a rankmap server (BatchSolve)")
    p.add_argument("--tls-ca", default=None, metavar="FILE",
                   help="--server speaks TLS; FILE is the PEM CA that signed its certificate")
    p.add_argument("--token-file", default=None, metavar="FILE", help="bearer token for --server (first line of FILE)")
    p.add_argument("--executor", choices=EXECUTORS, default="process",
                   help="process: a local process pool (default); ray: one Ray task per job "
                        "(needs pip install 'rankmap[ray]')")
    p.add_argument("--ray-address", default=None, metavar="ADDR",
                   help="with --executor ray: join this Ray cluster ('auto': RAY_ADDRESS or the local "
                        "'ray start' cluster); default: start a local Ray instance on --workers CPUs")
    p.add_argument("--workers", type=positive_int_arg, default=None,
                   help="processes solving at once, or CPUs of the local Ray instance (default: the CPUs this process may use: affinity, cgroup quota)")
    p.add_argument("-o", "--output", default=None, help="write the JSON lines here instead of stdout")
    p.add_argument("--omit-groups", action="store_true", help="leave the group catalogue out of each result")
    p.add_argument("--timeout", type=seconds_arg(0.0), default=86400.0,
                   help="deadline of the whole batch on --server or --executor ray, seconds (default 1 day); "
                        "jobs not done by then are failed lines")
    p.add_argument("--progress", action="store_true",
                   help="progress bar on stderr even when it is not a terminal (default: only on a terminal)")
    p.add_argument("--quiet", action="store_true", help="no progress bar (unless --progress) and no summary table")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run ``rankmap batch``; the exit status (0 all ok, 1 some failed, 2 unreadable INPUT, 130 interrupted)."""
    from rankmap.progress import BatchProgress, progress_enabled

    executor = getattr(args, "executor", None) or "process"
    ray_address = getattr(args, "ray_address", None)
    if args.server and executor != "process":
        raise InvalidArgumentError("--server and --executor ray are two different back ends; give one", "executor")
    if ray_address is not None and executor != "ray":
        raise InvalidArgumentError("--ray-address needs --executor ray", "ray_address")
    if executor == "ray":
        try:
            import ray  # noqa: F401 - only whether it is there
        except ImportError:
            raise InvalidArgumentError(ray_missing_message(), "executor") from None
    entries = load_entries(args.input)
    out: TextIO
    close = False
    if args.output:
        try:
            out = open(args.output, "w", encoding="utf-8")
        except OSError as exc:
            raise InvalidArgumentError(
                f"cannot write {args.output!r}: {exc.strerror or exc}", "output"
            ) from None
        close = True
    else:
        out = sys.stdout
    t0 = time.monotonic()
    progress = BatchProgress(len(entries), progress_enabled(getattr(args, "progress", False), sys.stderr, args.quiet))
    docs: list[dict] = []

    def emit(doc: dict) -> None:
        docs.append(doc)
        out.write(json.dumps(doc, separators=(",", ":")) + "\n")
        out.flush()
        progress.update(doc["ok"])

    interrupted = False
    try:
        if args.server:
            for e in entries:
                if e.error is not None:
                    emit({"index": e.index, "name": e.name, "ok": False, "error": error_document(e.error)})
            source = _on_server(entries, args.server, args.omit_groups, args.timeout,
                                args.tls_ca, args.token_file)
        else:
            source = iter_solve_many(entries, executor, workers=args.workers, ray_address=ray_address,
                                     omit_groups=args.omit_groups,
                                     timeout=args.timeout if executor == "ray" else None)
        for doc in source:
            emit(doc)
    except KeyboardInterrupt:
        interrupted = True
    finally:
        progress.close()
        if close:
            out.close()
    if not args.quiet:
        table = summary_table(docs, time.monotonic() - t0)
        stream = sys.stdout if args.output else sys.stderr
        stream.write(table + "\n")
        stream.flush()
    if interrupted:
        print("rankmap: interrupted", file=sys.stderr)
        return 130
    return 0 if all(d["ok"] for d in docs) and len(docs) == len(entries) else 1
