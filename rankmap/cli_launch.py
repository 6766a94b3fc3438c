"""Launch options of ``rankmap solve`` (issue 12): ``--launch-order`` and ``--emit KIND -o FILE``."""

from __future__ import annotations

import argparse
import dataclasses

from rankmap.solver.errors import InvalidArgumentError
from rankmap.solver.job.values import launch_order_from_value  # the job model's, re-exported

__all__ = ["launch_order_from_value", "check_emit", "write_launch_files"]


def check_emit(args: argparse.Namespace) -> None:
    """``--emit KIND`` needs ``-o FILE`` and a known kind; ``-o`` needs ``--emit`` (exit 2 before solving)."""
    from rankmap.solver.launch.files import EMIT_KINDS

    kind, path = getattr(args, "emit", None), getattr(args, "output", None)
    kinds = (*EMIT_KINDS, "html")  # html: the picture of the layout (rankmap.cli_view), not a launch file
    if kind is not None and kind not in kinds:
        raise InvalidArgumentError(f"--emit {kind!r} is not one of {', '.join(kinds)}", "emit")
    if kind is not None and not path:
        raise InvalidArgumentError(f"--emit {kind} needs -o FILE (the file to write)", "output")
    if path and kind is None:
        raise InvalidArgumentError(f"-o {path} needs --emit {'|'.join(kinds)}", "emit")
    if kind is not None and kind != "html":
        from rankmap.solver.launch.files import names_for

        names_for(kind, path)  # a path the commands can name unquoted, checked before the solve


def write_launch_files(args: argparse.Namespace, result):
    """Write the ``--emit`` files.

    Returns ``(result, written)``: the result with the commands of ``apply``
    naming the file written (unchanged without ``--emit``) and {path: text}.

    Raises
    ------
    InvalidArgumentError
        A file that cannot be written, or a launcher that cannot run the layout (field ``output``/``emit``).
    """
    from rankmap.solver.launch.files import emit_files, launch_files, names_for

    if getattr(args, "emit", None) is None:
        return result, {}
    files = emit_files(args.emit, dict(result.apply), result.hosts, result.config.world_size, args.output,
                       list(result.apply.get("megatron_args", [])), result.config.rank_offset)
    for path, text in files.items():
        try:
            with open(path, "w", encoding="utf-8") as fh:
                fh.write(text)
        except OSError as exc:
            raise InvalidArgumentError(f"cannot write {path!r}: {exc.strerror or exc}", "output") from None
    cfg = result.config
    names = names_for(args.emit, args.output)
    apply = {**result.apply, **launch_files(result.hosts, cfg.world_size, list(result.apply.get("megatron_args", [])),
                                            cfg.rank_offset, names)}
    return dataclasses.replace(result, apply=apply), files
