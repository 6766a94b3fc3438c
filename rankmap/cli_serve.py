"""``rankmap serve``: run the gRPC service (DESIGN §7).

::

    rankmap serve [--host 127.0.0.1] [--port 50051] [--workers N] [--max-queued N]
                  [--grace SECONDS] [--quiet]

Logs one JSON line per request on stderr.  SIGTERM (or Ctrl-C) drains: the
health service reports NOT_SERVING, new RPCs are refused, running ones get
``--grace`` seconds to finish, then the process exits 0.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading

__all__ = ["register", "run"]


def _int_at_least(minimum: int):
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"expected an integer >= {minimum}, got {value}")
        return value

    return parse


def register(subparsers) -> None:
    from rankmap.cli import port_arg, seconds_arg

    """Add ``serve`` to the ``rankmap`` subcommands."""
    p = subparsers.add_parser("serve", help="run the gRPC service (rankmap.v1.RankmapService)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1; 0.0.0.0 for all)")
    p.add_argument("--port", type=port_arg, default=50051, help="port (default 50051; 0 = any free port)")
    p.add_argument("--workers", type=_int_at_least(1), default=None, help="solves running at once (default: CPU count)")
    p.add_argument(
        "--max-queued",
        type=_int_at_least(0),
        default=None,
        help="solves waiting for a worker before RESOURCE_EXHAUSTED (default 64)",
    )
    p.add_argument("--grace", type=seconds_arg(0.0, allow_equal=True), default=30.0, help="seconds running RPCs get on SIGTERM (default 30)")
    p.add_argument("--quiet", action="store_true", help="no per-request log lines")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import os

    # gRPC C-core would add its own stderr line to a bind failure; rankmap reports it in one line.
    os.environ.setdefault("GRPC_VERBOSITY", "NONE")
    from rankmap.server.service import DEFAULT_MAX_QUEUED, serve

    logger = logging.getLogger("rankmap.server")
    if not logger.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(message)s"))
        logger.addHandler(handler)
        logger.propagate = False
    logger.setLevel(logging.WARNING if args.quiet else logging.INFO)

    server = serve(
        host=args.host,
        port=args.port,
        workers=args.workers,
        max_queued=DEFAULT_MAX_QUEUED if args.max_queued is None else args.max_queued,
    )
    stop = threading.Event()

    def on_signal(signum, _frame):
        stop.set()

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        while not stop.wait(0.5):
            pass
        logger.warning('{"event":"draining","grace_seconds":%s}', args.grace)
        server.stop(grace=args.grace).wait()
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
    return 0
