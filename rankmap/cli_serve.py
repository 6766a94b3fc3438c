"""``rankmap serve``: run the gRPC service (DESIGN §7).

::

    rankmap serve [--host 127.0.0.1] [--port 50051] [--workers N] [--max-queued N]
                  [--grace SECONDS] [--drain-delay SECONDS]
                  [--max-world-size N] [--max-request-bytes N] [--max-batch-length N]
                  [--max-time-limit SECONDS]
                  [--tls-cert FILE --tls-key FILE [--tls-client-ca FILE]]
                  [--auth-token-file FILE] [--quiet]

Logs one JSON line per request on stderr.  SIGTERM (or Ctrl-C) drains: the
health service reports NOT_SERVING at once, calls are still served for
``--drain-delay`` seconds (load balancers notice), then new calls are refused,
queued ones answered UNAVAILABLE, running ones get ``--grace`` seconds to
finish, and the process exits 0.  A second signal skips what is left.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import signal
import sys
import time

__all__ = ["register", "run"]


def _int_at_least(minimum: int):
    def parse(text: str) -> int:
        from rankmap.solver.formats.safe import is_strict_int_text

        t = text.strip()
        if not is_strict_int_text(t, signed=minimum < 0):  # ASCII digits only: no 8_0, no non-ASCII digits
            raise argparse.ArgumentTypeError(f"expected an integer in ASCII digits, got {text!r}")
        value = int(t)
        if value < minimum:
            raise argparse.ArgumentTypeError(f"expected an integer >= {minimum}, got {value}")
        return value

    return parse


def _max_time_limit(text: str) -> float:
    """argparse type of ``--max-time-limit``: seconds in (0, the solver's ``MAX_TIME_LIMIT_SECONDS``]
    (imported only when the flag is given: ``rankmap --help`` loads no numpy)."""
    from rankmap.cli import seconds_arg
    from rankmap.solver.types import MAX_TIME_LIMIT_SECONDS

    return seconds_arg(0.0, maximum=MAX_TIME_LIMIT_SECONDS)(text)


def register(subparsers) -> None:
    """Add ``serve`` to the ``rankmap`` subcommands."""
    from rankmap.cli import port_arg, seconds_arg

    p = subparsers.add_parser("serve", help="run the gRPC service (rankmap.v1.RankmapService)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1; 0.0.0.0 for all)")
    p.add_argument("--port", type=port_arg, default=50051, help="port (default 50051; 0 = any free port)")
    p.add_argument("--workers", type=_int_at_least(1), default=None, help="solves running at once (default: the CPUs this process may use: affinity, cgroup quota)")
    p.add_argument(
        "--max-queued",
        type=_int_at_least(0),
        default=None,
        help="solves waiting for a worker before RESOURCE_EXHAUSTED (default 64)",
    )
    p.add_argument("--grace", type=seconds_arg(0.0, allow_equal=True), default=30.0, help="seconds running RPCs get on SIGTERM (default 30)")
    p.add_argument("--drain-delay", type=seconds_arg(0.0, allow_equal=True), default=5.0,
                   help="seconds between health NOT_SERVING and refusing calls on SIGTERM (default 5)")
    lim = p.add_argument_group("per-request limits (over a limit: INVALID_ARGUMENT naming the field)")
    lim.add_argument("--max-world-size", type=_int_at_least(1), default=262_144,
                     help="ranks / GPUs of one request (default 262144)")
    lim.add_argument("--max-request-bytes", type=_int_at_least(1024), default=64 << 20,
                     help="serialized request size; larger: RESOURCE_EXHAUSTED (default 67108864 = 64 MiB)")
    lim.add_argument("--max-batch-length", type=_int_at_least(1), default=1024,
                     help="requests in one BatchSolve (default 1024)")
    lim.add_argument("--max-time-limit", type=_max_time_limit, default=600.0,
                     help="largest time_limit_seconds a client may ask for; requests without one "
                          "search min(30, this) seconds (default 600)")
    sec = p.add_argument_group("security (default: plaintext, no authentication, loopback only)")
    sec.add_argument("--tls-cert", default=None, metavar="FILE", help="PEM certificate chain: serve TLS")
    sec.add_argument("--tls-key", default=None, metavar="FILE", help="PEM private key of --tls-cert")
    sec.add_argument("--tls-client-ca", default=None, metavar="FILE",
                     help="PEM CA: require client certificates it signed (mutual TLS)")
    sec.add_argument("--auth-token-file", default=None, metavar="FILE",
                     help="file of bearer tokens, one per line: calls need 'authorization: Bearer TOKEN' "
                          "(the health service stays open)")
    p.add_argument("--quiet", action="store_true", help="no per-request log lines")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Serve until SIGTERM / SIGINT, then drain and return 0 (2 for a bad setup)."""
    import os

    # gRPC C-core would add its own stderr line to a bind failure; rankmap reports it in one line.
    os.environ.setdefault("GRPC_VERBOSITY", "NONE")
    from rankmap.server.auth import read_tokens
    from rankmap.server.limits import Limits
    from rankmap.server.service import DEFAULT_MAX_QUEUED, serve

    logger = logging.getLogger("rankmap.server")
    if not logger.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(message)s"))
        logger.addHandler(handler)
        logger.propagate = False
    logger.setLevel(logging.WARNING if args.quiet else logging.INFO)

    try:
        tokens = read_tokens(args.auth_token_file) if args.auth_token_file else None
        server = serve(
            **{k: getattr(args, k) for k in ("host", "port", "workers", "tls_cert", "tls_key", "tls_client_ca")},
            max_queued=DEFAULT_MAX_QUEUED if args.max_queued is None else args.max_queued,
            limits=Limits(**{f.name: getattr(args, f.name) for f in dataclasses.fields(Limits)}),  # --max-* flags
            auth_tokens=tokens,
        )
    except ValueError as exc:  # a TLS file that is not PEM, an empty token file
        print(f"rankmap: error: {exc}".splitlines()[0], file=sys.stderr)
        return 2
    signals = []

    def on_signal(signum, _frame):
        signals.append(signum)

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        while not signals:
            time.sleep(0.2)
        stopped = server.stop(grace=args.grace, drain_delay=args.drain_delay)
        seen = 1
        while not stopped.wait(0.2):
            if len(signals) > seen:  # a second signal: stop now
                seen = len(signals)
                server.stop(grace=0)
        # work that ignores its cancel (none should) must not keep the process past the grace period
        if not server.servicer.wait_idle(timeout=5.0):
            logger.warning('{"event":"exit","message":"work still running after the grace period; exiting"}')
            for h in logger.handlers:
                h.flush()
            os._exit(0)
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
    return 0
