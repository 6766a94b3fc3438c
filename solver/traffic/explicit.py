"""Explicit payloads: byte counts given by the user (``--traffic tp=4e9,...``).

:func:`parse_bytes` reads one byte count with decimal or binary units,
:func:`parse_traffic` a ``CLASS=BYTES`` list, :func:`traffic_from_mapping` a
mapping (a YAML ``traffic:`` section); :func:`format_bytes` prints bytes for
people.  Explicit payloads move with each class's default shape
(:data:`~rankmap.solver.traffic.classes.CLASS_KIND`).
"""

from __future__ import annotations

import math
import re
from typing import Mapping

from ..errors import InvalidArgumentError
from .classes import CLASS_GROUP, TRAFFIC_CLASSES
from .fields import _is_int

__all__ = ["parse_bytes", "parse_traffic", "traffic_from_mapping", "format_bytes"]

_UNITS: dict[str, float] = {
    "": 1.0, "b": 1.0,
    "k": 1e3, "kb": 1e3, "m": 1e6, "mb": 1e6, "g": 1e9, "gb": 1e9, "t": 1e12, "tb": 1e12, "p": 1e15, "pb": 1e15,
    "ki": 2.0**10, "kib": 2.0**10, "mi": 2.0**20, "mib": 2.0**20, "gi": 2.0**30, "gib": 2.0**30,
    "ti": 2.0**40, "tib": 2.0**40, "pi": 2.0**50, "pib": 2.0**50,
}
_BYTES_RE = re.compile(r"^\s*([+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?)\s*([A-Za-z]*)\s*$")


def parse_bytes(text, field: str = "traffic") -> float:
    """A byte count: a number or a string such as ``"4e9"``, ``"4GB"``, ``"512MiB"``.

    Units (case-insensitive, all bytes): none or ``B``; decimal ``K/KB``,
    ``M/MB``, ``G/GB``, ``T/TB``, ``P/PB`` (powers of 1000, as DESIGN's GB/s);
    binary ``KiB``, ``MiB``, ``GiB``, ``TiB``, ``PiB`` (powers of 1024).

    Raises
    ------
    InvalidArgumentError
        For anything else, a negative or a non-finite value, naming it and ``field``.
    """
    if isinstance(text, bool):
        raise InvalidArgumentError(f"{field} must be a byte count, got {text!r}", field)
    if isinstance(text, (int, float)) or _is_int(text):
        value = float(text)
    elif isinstance(text, str):
        match = _BYTES_RE.match(text)
        if not match:
            try:
                value = float(text)  # 'inf', 'nan' and friends: reported below
            except ValueError:
                raise InvalidArgumentError(
                    f"{field}: {text!r} is not a byte count (e.g. 4e9, 4GB, 512MiB)", field
                ) from None
        else:
            unit = match.group(2).lower()
            if unit not in _UNITS:
                raise InvalidArgumentError(
                    f"{field}: unknown unit {match.group(2)!r} in {text!r} (use B, KB, MB, GB, TB, KiB, MiB, GiB, TiB)",
                    field,
                )
            value = float(match.group(1)) * _UNITS[unit]
    else:
        raise InvalidArgumentError(f"{field} must be a byte count, got {text!r}", field)
    if not math.isfinite(value):
        raise InvalidArgumentError(f"{field}: byte count {text!r} is not finite", field)
    if value < 0:
        raise InvalidArgumentError(f"{field}: byte count {text!r} is negative", field)
    return value


def _check_class(name, seen: set, original) -> str:
    cls = str(name).strip().lower()
    if cls not in CLASS_GROUP:
        raise InvalidArgumentError(
            f"unknown traffic class {str(name).strip()!r} in {original!r}; known: {', '.join(TRAFFIC_CLASSES)}",
            "traffic",
        )
    if cls in seen:
        raise InvalidArgumentError(f"traffic class {cls!r} given twice in {original!r}", f"traffic.{cls}")
    seen.add(cls)
    return cls


def parse_traffic(text: str) -> dict[str, float]:
    """Parse ``"tp=4e9,dp=1GB,pp=512MiB"`` into ``{class: bytes}``.

    Only the named classes are returned (in :data:`TRAFFIC_CLASSES` order), so
    the result can override a model's payloads.  Class names are
    case-insensitive; spaces around items are ignored; byte counts as in
    :func:`parse_bytes`.

    Raises
    ------
    InvalidArgumentError
        For an empty string or item, an item without ``=``, an unknown or
        repeated class, a bad, negative or non-finite byte count — naming it
        (field ``traffic`` or ``traffic.<class>``).
    """
    if not isinstance(text, str):
        raise InvalidArgumentError(f"traffic must be a string like 'tp=4e9,dp=1e9', got {text!r}", "traffic")
    if not text.strip():
        raise InvalidArgumentError("traffic is empty; expected e.g. 'tp=4e9,dp=1e9'", "traffic")
    seen: set[str] = set()
    values: dict[str, float] = {}
    for item in text.split(","):
        if not item.strip():
            raise InvalidArgumentError(f"empty item in traffic {text!r}", "traffic")
        if "=" not in item:
            raise InvalidArgumentError(
                f"traffic item {item.strip()!r} is not CLASS=BYTES (e.g. tp=4e9)", "traffic"
            )
        name, _, value = item.partition("=")
        cls = _check_class(name, seen, text)
        values[cls] = parse_bytes(value.strip(), f"traffic.{cls}")
    return {c: values[c] for c in TRAFFIC_CLASSES if c in values}


def traffic_from_mapping(d: Mapping | None) -> dict[str, float]:
    """Payloads from a mapping (e.g. a YAML ``traffic:`` section) of class -> bytes.

    Values are numbers or strings as in :func:`parse_bytes`.  ``None`` or an
    empty mapping gives ``{}``; only the named classes are returned.

    Raises
    ------
    InvalidArgumentError
        When ``d`` is not a mapping, or for an unknown class or a bad value, naming it.
    """
    if d is None:
        return {}
    if not isinstance(d, Mapping):
        raise InvalidArgumentError(
            f"traffic must be a mapping of class to bytes, got {type(d).__name__}", "traffic"
        )
    seen: set[str] = set()
    values: dict[str, float] = {}
    for name, value in d.items():
        if not isinstance(name, str):
            raise InvalidArgumentError(
                f"unknown traffic class {name!r}; known: {', '.join(TRAFFIC_CLASSES)}", "traffic"
            )
        cls = _check_class(name, seen, dict(d))
        values[cls] = parse_bytes(value, f"traffic.{cls}")
    return {c: values[c] for c in TRAFFIC_CLASSES if c in values}


def format_bytes(value: float) -> str:
    """Human-readable decimal bytes: ``3.22 GB``, ``134 MB``, ``0 B``."""
    value = float(value)
    if value == 0:
        return "0 B"
    for unit, scale in (("PB", 1e15), ("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if abs(value) >= scale:
            return f"{value / scale:.3g} {unit}"
    return f"{value:.3g} B"
