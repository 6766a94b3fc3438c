"""The ``rankmap`` command line (DESIGN §7).

Subcommands: ``groups``, ``solve``, ``evaluate``, ``cluster``, ``traffic``,
``serve``, ``batch``, ``check``, ``request``, ``repair``, ``compare``, ``view``.  Every failure caused by the input
exits with status 2
after printing exactly one line on stderr and nothing on stdout.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import time
from typing import Sequence

from rankmap.solver import RankmapError, megatron_groups
from rankmap.solver.formats.safe import dump_json

__all__ = ["main", "build_parser", "warn"]

#: Warnings of the running command, printed on stderr when it succeeds (a failing command prints
#: exactly its one error line, DESIGN §7).
_WARNINGS: list[str] = []


def _clip(text: str, limit: int = 2000) -> str:
    """``text`` on one line, at most ``limit`` characters (a 1 MB host name stays readable)."""
    text = " ".join(str(text).split("\n"))
    return text if len(text) <= limit else text[: limit - 30] + f"... ({len(text):,} characters)"


def warn(message: str) -> None:
    """Queue ``rankmap: warning: MESSAGE`` for stderr once the command succeeds (each text once)."""
    if message not in _WARNINGS:
        _WARNINGS.append(message)


class _UsageError(Exception):
    """argparse reported a usage problem (converted to exit 2, one line)."""


class _Parser(argparse.ArgumentParser):
    """ArgumentParser whose errors are one line on stderr and exit status 2.

    Abbreviated long options are refused (``--world`` is not ``--world-size``): job-file
    keys are exact, and a script's flags must not change meaning when a flag is added.
    """

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str):  # noqa: D401 - argparse API
        raise _UsageError(f"{self.prog}: error: {message}{self._did_you_mean(message)}")

    def _did_you_mean(self, message: str) -> str:
        """`` (did you mean --x?)`` for the first unrecognized option close to a known one."""
        import difflib

        if not message.startswith("unrecognized arguments:"):
            return ""
        known = set(self._option_string_actions)
        for action in self._actions:  # the subcommands' options too
            if isinstance(action, argparse._SubParsersAction):
                for sub in action.choices.values():
                    known |= set(sub._option_string_actions)
        for word in message.split(":", 1)[1].split():
            if word.startswith("--"):
                flag = word.split("=")[0]
                if flag in known:  # another command's flag: suggesting itself would not help
                    return f" ({flag} is not a flag of this command)"
                close = difflib.get_close_matches(flag, sorted(known), n=1, cutoff=0.75)
                return f" (did you mean {close[0]}?)" if close else ""
        return ""


def _ascii_int(text: str, signed: bool = False) -> int | None:
    """``int(text)`` for ASCII decimal digits only (no ``8_0``, no non-ASCII digits, at most
    30 digits; a leading sign only when ``signed``); None otherwise."""
    from rankmap.solver.formats.safe import is_strict_int_text

    t = text.strip() if isinstance(text, str) else ""
    return int(t) if is_strict_int_text(t, signed=signed) else None


def _int_arg(text: str) -> int:
    """argparse type: an integer in ASCII digits (sizes: the solver checks the range)."""
    value = _ascii_int(text)
    if value is None:
        _negative(text, 0)
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r} (ASCII digits only)")
    return value


def _negative(text: str, minimum: int) -> None:
    """Raise the range error for a negative integer ``text`` below ``minimum`` (not the digits error)."""
    value = _ascii_int(text, signed=True)
    if value is not None and value < minimum:
        raise argparse.ArgumentTypeError(f"expected an integer >= {minimum}, got {value}")


def int_at_least(minimum: int):
    """argparse type: an integer in ASCII digits, >= ``minimum`` (a sign only when ``minimum`` < 0)."""

    def parse(text: str) -> int:
        value = _ascii_int(text, signed=minimum < 0)
        if value is None:
            _negative(text, minimum)
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r} (ASCII digits only)")
        if value < minimum:
            raise argparse.ArgumentTypeError(f"expected an integer >= {minimum}, got {value}")
        return value

    return parse


def float_arg(text: str) -> float:
    """argparse type: a finite number in ASCII (``1.5``, ``4e9``; no ``1_0``, ``nan``, ``inf``)."""
    from rankmap.solver.formats.safe import strict_float

    try:
        return strict_float(text, "value")
    except RankmapError:
        raise argparse.ArgumentTypeError(f"expected a finite number (e.g. 1.5 or 4e9), got {text!r}") from None


def _int_list(text: str) -> list[int]:
    values = [_ascii_int(x) for x in text.split(",")]
    if any(v is None for v in values):
        raise argparse.ArgumentTypeError(f"expected integers separated by commas, got {text!r}")
    return values


def positive_int_arg(text: str) -> int:
    """argparse type: an integer >= 1 in ASCII digits."""
    value = _ascii_int(text)
    if value is None:
        _negative(text, 1)
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r} (ASCII digits only)")
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def port_arg(text: str) -> int:
    """argparse type: a TCP port 0..65535."""
    port = _ascii_int(text)
    if port is None:
        raise argparse.ArgumentTypeError(f"expected a port number, got {text!r}")
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"port {port} is outside 0..65535")
    return port


def server_arg(text: str) -> str:
    """argparse type: ``HOST:PORT`` of a rankmap server, port 1..65535
    (:func:`rankmap.solver.job.resolve.server_address`)."""
    from rankmap.solver.job.values import server_address

    try:
        return server_address(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def seconds_arg(minimum: float = 0.0, allow_equal: bool = False, maximum: float | None = None):
    """argparse type: a finite number of seconds greater than ``minimum`` (and at most ``maximum``)."""

    def parse(text: str) -> float:
        try:
            v = float_arg(text)
        except argparse.ArgumentTypeError:
            raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
        if v != v or v in (float("inf"), float("-inf")) or v < minimum or (v == minimum and not allow_equal):
            raise argparse.ArgumentTypeError(
                f"expected a finite number of seconds {'>=' if allow_equal else '>'} {minimum:g}, got {text!r}"
            )
        if maximum is not None and v > maximum:
            raise argparse.ArgumentTypeError(f"{text} seconds exceeds the limit of {maximum:g} s")
        return v

    return parse


def add_size_arguments(p: argparse.ArgumentParser, world_size_required: bool) -> None:
    """Add the parallel-size flags shared by ``groups``, ``solve`` and ``evaluate``."""
    if world_size_required:
        p.add_argument("--world-size", type=_int_arg, required=True, help="number of ranks (GPUs)")
    else:
        p.add_argument("--world-size", type=_int_arg, default=None, help="defaults to the GPUs in the cluster")
    p.add_argument("--tp", type=_int_arg, default=None, help="tensor-parallel size (default 1)")
    p.add_argument("--cp", type=_int_arg, default=None, help="context-parallel size (default 1)")
    p.add_argument("--ep", type=_int_arg, default=None, help="expert-parallel size (default 1)")
    p.add_argument("--etp", type=_int_arg, default=None, help="expert tensor-parallel size (default: tp)")
    p.add_argument("--pp", type=_int_arg, default=None, help="pipeline-parallel size (default 1)")
    p.add_argument(
        "--num-distributed-optimizer-instances",
        type=_int_arg,
        default=None,
        help="Megatron's num_distributed_optimizer_instances (default 1)",
    )
    p.add_argument(
        "--hierarchical-cp-sizes",
        type=_int_list,
        default=None,
        help="hierarchical_context_parallel_sizes, e.g. 2,4 (product = cp)",
    )


def config_from_args(args: argparse.Namespace, world_size: int | None = None, order: str | None = None):
    """Build a validated :class:`~rankmap.solver.ParallelConfig` from CLI flags
    (:func:`rankmap.solver.job.model.job_sizes`; ``world_size``, when given, replaces the flag's)."""
    from rankmap.solver.job.model import job_sizes

    sizes = job_sizes(vars(args))
    if world_size is not None:
        sizes = sizes.replace(world_size=world_size)
    return sizes.to_config(
        order if order is not None else (
            getattr(args, "order", None) if getattr(args, "order", None) is not None else "tp-cp-ep-dp-pp"
        )
    )


# ---------------------------------------------------------------- groups


def groups_document(cfg) -> dict:
    """The JSON document of ``rankmap groups`` (DESIGN §7)."""
    groups = megatron_groups(cfg)
    return {
        "order": cfg.order,
        "world_size": cfg.world_size,
        "sizes": cfg.sizes,
        "groups": {name: arr.tolist() for name, arr in groups.items()},
    }


#: Width of ``rankmap groups --format table`` lines (characters), whatever the world size.
TABLE_WIDTH = 160


def _fmt_group(row, max_members: int = 32) -> str:
    """``[g0,g1,...]``; a group longer than ``max_members`` shows its head, tail and size."""
    if len(row) > max_members:
        keep = max(1, min(16, max_members // 2))
        head = ",".join(f"g{int(r)}" for r in row[:keep])
        tail = ",".join(f"g{int(r)}" for r in row[-2:])
        return f"[{head},...({len(row)} ranks)...,{tail}]"
    return "[" + ",".join(f"g{int(r)}" for r in row) + "]"


def _fit(items: list[str], width: int, total: int | None = None, sep: str = " ") -> tuple[list[str], int]:
    """The leading ``items`` whose joined length (plus a "... N more" note) fits ``width``.

    ``total``: how many items there are in all (``items`` may be the first of them).
    Returns (shown, hidden count).
    """
    total = len(items) if total is None else total
    shown: list[str] = []
    used = 0
    for i, it in enumerate(items):
        note = len(f" ... {total - i - 1} more") if i < total - 1 else 0
        if shown and used + len(sep) + len(it) + note > width:
            break
        used += (len(sep) if shown else 0) + len(it)
        shown.append(it)
    return shown, total - len(shown)


def groups_table(cfg, max_rows: int = 32, max_groups: int = 32, placement=None, width: int = TABLE_WIDTH) -> str:
    """The seed article's pictures as text, at most ``width`` columns wide.

    A grid with one column per pipeline stage and one row per model replica
    (data- and context-parallel coordinates); each cell lists the GPUs of the
    tensor-parallel group holding that stage of that replica (``←TP→``).  Then
    every group family as one line of lists.  ``placement`` (optional) maps a
    global rank to a device label shown after the rank.  What does not fit
    (replicas beyond ``max_rows``, stages, groups, long groups' middles) is
    summarised ("... N more").
    """
    groups = megatron_groups(cfg)
    lines = [
        f"order {cfg.order}  world_size {cfg.world_size}  "
        + "  ".join(f"{k} {v}" for k, v in cfg.sizes.items())
    ]
    dec = cfg.decoder()
    tp_groups = groups["TENSOR_MODEL_PARALLEL_GROUP"]
    first = tp_groups[:, 0]
    coords = dec.coordinates(first)
    # replica = (dp, cp) coordinates, numbered with cp fastest as the dp-cp group does
    replica = coords["dp"] * cfg.cp + coords["cp"]
    stage = coords["pp"]
    n_rep = cfg.dp * cfg.cp
    cell = {}
    for g, (r, s) in enumerate(zip(replica.tolist(), stage.tolist())):
        cell[(r, s)] = tp_groups[g]

    def label(rank: int) -> str:
        return f"g{rank}" + (f"@{placement[rank]}" if placement is not None else "")

    def cell_text(ranks) -> str:
        labels = [label(int(x)) for x in ranks]
        if len(labels) > 8:  # a wide TP group: head, size and tail
            labels = labels[:4] + [f"...({len(labels)})..."] + labels[-1:]
        return " ".join(labels) + (" ←TP→" if cfg.tp > 1 else "")

    rows_idx = list(range(min(n_rep, max_rows)))
    names = [f"DP={r // cfg.cp}" + (f" CP={r % cfg.cp}" if cfg.cp > 1 else "") for r in rows_idx]
    cells = {(r, s): cell_text(cell[(r, s)]) for r in rows_idx for s in range(cfg.pp)}
    name_w = max([len("replica \\ stage")] + [len(n) for n in names])
    stage_w = [max([len(f"PP stage {s}")] + [len(cells[(r, s)]) for r in rows_idx]) for s in range(cfg.pp)]
    shown_stages, used = 0, name_w
    for s in range(cfg.pp):
        if shown_stages and used + 3 + stage_w[s] > width - 24:
            break
        used += 3 + stage_w[s]
        shown_stages += 1
    header = ["replica \\ stage"] + [f"PP stage {s}" for s in range(shown_stages)]
    widths = [name_w] + stage_w[:shown_stages]
    more_stages = f" | ... {cfg.pp - shown_stages} more stages" if shown_stages < cfg.pp else ""
    lines.append("")
    lines.append((" | ".join(h.ljust(w) for h, w in zip(header, widths)) + more_stages).rstrip())
    lines.append("-+-".join("-" * w for w in widths))
    for r, name in zip(rows_idx, names):
        lines.append(" | ".join(c.ljust(w) for c, w in zip([name] + [cells[(r, s)] for s in range(shown_stages)],
                                                            widths)).rstrip())
    if n_rep > max_rows:
        lines.append(f"... {n_rep - max_rows} more replicas")
    lines.append("")
    fam_w = max(len(n) for n in groups)
    room = width - fam_w - 2
    for name, arr in groups.items():
        texts = []
        for row in arr[:max_groups]:
            t = _fmt_group(row)
            if len(t) > room - 16:  # one group alone too wide: its head, size and tail
                t = _fmt_group(row, max_members=max(4, (room - 40) // 8))
            texts.append(t)
        shown, hidden = _fit(texts, room, total=int(arr.shape[0]))
        more = f" ... {hidden} more" if hidden else ""
        lines.append(f"{name.ljust(fam_w)}  {' '.join(shown)}{more}")
    return "\n".join(lines)


def _cmd_groups(args: argparse.Namespace) -> int:
    if args.compact and args.format == "table":
        from rankmap.solver.errors import InvalidArgumentError

        raise InvalidArgumentError("--compact shapes the JSON; it cannot be combined with --format table", "compact")
    cfg = config_from_args(args)
    if args.format == "table":
        out = groups_table(cfg)
    else:
        out = dump_json(groups_document(cfg), separators=(",", ":") if args.compact else (", ", ": "))
    sys.stdout.write(out + "\n")
    return 0


# ---------------------------------------------------------------- main

_OPTIONAL_COMMANDS = (
    "rankmap.cli_solve",
    "rankmap.cli_cluster",
    "rankmap.cli_traffic",
    "rankmap.cli_serve",
    "rankmap.cli_batch",
    "rankmap.cli_check",
    "rankmap.cli_repair",
    "rankmap.cli_view",
)


#: subcommand -> the module that registers it (``groups`` is built in)
_COMMAND_MODULES = {
    "solve": "rankmap.cli_solve", "evaluate": "rankmap.cli_solve", "cluster": "rankmap.cli_cluster",
    "traffic": "rankmap.cli_traffic", "serve": "rankmap.cli_serve", "batch": "rankmap.cli_batch",
    "check": "rankmap.cli_check", "request": "rankmap.cli_check",
    "repair": "rankmap.cli_repair", "compare": "rankmap.cli_repair",
    "view": "rankmap.cli_view",
}


def _command_of(argv: Sequence[str]) -> str | None:
    """The subcommand ``argv`` names (its first word that is not an option), or None."""
    for a in argv:
        if not a.startswith("-"):
            return a
        if a in ("-h", "--help", "--version"):
            return None
    return None


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The argument parser (subcommands registered from their modules).

    ``command``: the subcommand about to run.  ``groups`` then registers no
    other module (their imports, OR-Tools, scipy, networkx, gRPC, cost more
    than the catalogue itself); a known command registers only its module;
    None or anything else registers every subcommand (``rankmap --help``,
    misspelt commands).
    """
    from rankmap import __version__

    parser = _Parser(prog="rankmap", description="Place Megatron ranks onto a real cluster.")
    parser.add_argument("--version", action="version", version=f"rankmap {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    g = sub.add_parser("groups", help="print every Megatron process group for an order and sizes")
    add_size_arguments(g, world_size_required=True)
    g.add_argument("--order", default="tp-cp-ep-dp-pp", help="Megatron order string (default tp-cp-ep-dp-pp)")
    g.add_argument("--format", choices=("json", "table"), default="json")
    g.add_argument("--compact", action="store_true", help="JSON without spaces")
    g.set_defaults(func=_cmd_groups)
    if command == "groups":
        modules: Sequence[str] = ()
    elif command in _COMMAND_MODULES:
        modules = (_COMMAND_MODULES[command],)
    else:
        modules = _OPTIONAL_COMMANDS
    for modname in modules:
        try:
            mod = importlib.import_module(modname)
        except ImportError as exc:  # a module not written yet, or its extra not installed
            if exc.name == modname:
                continue
            raise
        mod.register(sub)
    return parser


def started() -> float:
    """``time.monotonic()`` when :func:`main` was entered (a command's wall-clock budget counts from it)."""
    return _STARTED[0]


_STARTED = [0.0]


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status (0 ok, 2 bad input)."""
    _STARTED[0] = time.monotonic()
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        _WARNINGS.clear()
        parser = build_parser(_command_of(argv))
        args = parser.parse_args(argv)
        code = int(args.func(args) or 0)
        for w in _WARNINGS:
            print(f"rankmap: warning: {_clip(w)}", file=sys.stderr)
        _WARNINGS.clear()
        return code
    except _UsageError as exc:
        print(_clip(str(exc)), file=sys.stderr)
        return 2
    except RankmapError as exc:
        field = f" [{_clip(str(exc.field), 160)}]" if exc.field else ""
        print(f"rankmap: error: {_clip(exc.message)}{field}", file=sys.stderr)
        return 2
    except Exception as exc:  # noqa: BLE001 - last line of defence: never a traceback
        name = type(exc).__name__
        if name == "RankmapRpcError":  # the server failed or is unreachable: not bad input
            print(f"rankmap: error: {exc}".splitlines()[0], file=sys.stderr)
            return 1
        if isinstance(exc, OSError):
            print(f"rankmap: error: {exc.strerror or exc}: {exc.filename or ''}".rstrip(": "), file=sys.stderr)
            return 2
        if isinstance(exc, MemoryError):
            print("rankmap: error: out of memory; the request is too large for this machine", file=sys.stderr)
            return 2
        if isinstance(exc, RecursionError):  # a nested input the strict loaders did not see
            print("rankmap: error: input nested too deeply (RecursionError)", file=sys.stderr)
            return 2
        if os.environ.get("RANKMAP_DEBUG"):
            raise
        print(f"rankmap: internal error: {name}: {exc} (set RANKMAP_DEBUG=1 for a traceback)".splitlines()[0],
              file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("rankmap: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
