"""Launch options of ``rankmap solve`` (issue 12): ``--launch-order`` and ``--emit KIND -o FILE``."""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

from rankmap.solver.errors import InvalidArgumentError
from rankmap.solver.types import LAUNCH_ORDER_POLICIES

__all__ = ["launch_order_from_value", "check_emit", "write_launch_files"]


def launch_order_from_value(value: Any) -> str | tuple[str, ...]:
    """``--launch-order`` / job key ``launch_order``: ``sorted`` (default), ``listed``, a host list file
    (:func:`~rankmap.solver.launch.parse_host_list`: one host or hostlist expression per line, e.g.
    ``scontrol show hostnames`` output or an MPI hostfile) or a list of host names.

    Raises
    ------
    InvalidArgumentError
        A file that does not exist or cannot be read, or one without hosts (field ``launch_order``).
    """
    from rankmap.solver.launch import parse_host_list
    from rankmap.solver.formats.safe import MAX_YAML_BYTES

    if value is None:
        return "sorted"
    if isinstance(value, (list, tuple)):
        return tuple(str(v) for v in value)
    if value in LAUNCH_ORDER_POLICIES:
        return value
    try:
        with open(value, encoding="utf-8") as fh:
            text = fh.read(MAX_YAML_BYTES + 1)
    except FileNotFoundError:
        raise InvalidArgumentError(
            f"launch order {value!r} is neither sorted, listed nor an existing host list file", "launch_order"
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidArgumentError(f"cannot read launch order file {value!r}: {exc}", "launch_order") from None
    if len(text) > MAX_YAML_BYTES:
        raise InvalidArgumentError(f"launch order file {value!r} is larger than {MAX_YAML_BYTES} bytes",
                                   "launch_order")
    return parse_host_list(text, f"launch order file {value}")


def check_emit(args: argparse.Namespace) -> None:
    """``--emit KIND`` needs ``-o FILE`` and a known kind; ``-o`` needs ``--emit`` (exit 2 before solving)."""
    from rankmap.solver.launch_files import EMIT_KINDS

    kind, path = getattr(args, "emit", None), getattr(args, "output", None)
    if kind is not None and kind not in EMIT_KINDS:
        raise InvalidArgumentError(f"--emit {kind!r} is not one of {', '.join(EMIT_KINDS)}", "emit")
    if kind is not None and not path:
        raise InvalidArgumentError(f"--emit {kind} needs -o FILE (the file to write)", "output")
    if path and kind is None:
        raise InvalidArgumentError(f"-o {path} needs --emit {'|'.join(EMIT_KINDS)}", "emit")
    if kind is not None:
        from rankmap.solver.launch_files import names_for

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
    from rankmap.solver.launch_files import emit_files, launch_files, names_for

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
