"""Slurm hostlist expressions: ``node[001-016,040]``, ``rack[1-2]-gpu[01-04]``, comma lists.

Semantics follow Slurm's hostlist parser (``scontrol show hostnames``):

* a comma (or whitespace) outside brackets separates items;
* a bracket group holds comma-separated numbers and ``lo-hi`` ranges; the zero padding of
  a range is the width of its low bound (``[08-10]`` -> ``08 09 10``, ``[8-10]`` ->
  ``8 9 10``);
* several bracket groups in one item multiply out, the leftmost varying slowest
  (``a[1-2]b[1-2]`` -> ``a1b1 a1b2 a2b1 a2b2``);
* order and duplicates are kept as written.

:func:`compress` is the inverse: ``expand(compress(hosts)) == list(hosts)`` for any list of
names without brackets, commas or whitespace.  It folds the last run of digits of each
name, as Slurm does.
"""

from __future__ import annotations

import re
from typing import Iterable

from ..errors import InvalidArgumentError

__all__ = ["expand", "compress", "count", "MAX_HOSTS"]

#: Refuse expressions that name more hosts than this (a typo such as ``n[0-99999999]``): the
#: names are counted before any is generated, so the refusal is immediate.  65,536 hosts is
#: 524,288 GPUs at 8 per host, four times the largest cluster rankmap is benchmarked on.
MAX_HOSTS = 65_536

_DIGITS = re.compile(r"[0-9]+", re.ASCII)

_NAME_RE = re.compile(r"^(.*?)([0-9]+)([^0-9]*)$")


def _split_top(text: str, expr: str, field: str) -> list[str]:
    items, depth, cur = [], 0, []
    for ch in text:
        if ch == "[":
            if depth:
                raise InvalidArgumentError(f"hostlist {expr!r}: nested '['", field)
            depth = 1
        elif ch == "]":
            if not depth:
                raise InvalidArgumentError(f"hostlist {expr!r}: ']' without '['", field)
            depth = 0
        if (ch == "," or ch.isspace()) and not depth:
            if cur:
                items.append("".join(cur))
            cur = []
            continue
        cur.append(ch)
    if depth:
        raise InvalidArgumentError(f"hostlist {expr!r}: '[' is never closed", field)
    if cur:
        items.append("".join(cur))
    return items


def _group_parts(body: str, expr: str, field: str) -> list[tuple[str, str | None]]:
    """``"001-016,040"`` -> ``[("001", "016"), ("040", None)]``, checked (ASCII digits,
    increasing ranges) without generating any name."""
    parts = [p.strip() for p in body.split(",")]
    if not body.strip() or any(not p for p in parts):
        raise InvalidArgumentError(f"hostlist {expr!r}: empty entry in '[{body}]'", field)
    out: list[tuple[str, str | None]] = []
    for part in parts:
        if "-" in part:
            lo_s, _, hi_s = part.partition("-")
            lo_s, hi_s = lo_s.strip(), hi_s.strip()
            if not (_DIGITS.fullmatch(lo_s) and _DIGITS.fullmatch(hi_s)) or max(len(lo_s), len(hi_s)) > 18:
                raise InvalidArgumentError(f"hostlist {expr!r}: range {part!r} is not numeric", field)
            if int(hi_s) < int(lo_s):
                raise InvalidArgumentError(f"hostlist {expr!r}: range {part!r} is decreasing", field)
            out.append((lo_s, hi_s))
        else:
            if not _DIGITS.fullmatch(part) or len(part) > 18:
                raise InvalidArgumentError(f"hostlist {expr!r}: {part!r} is not a number", field)
            out.append((part, None))
    return out


def _group_count(parts: list[tuple[str, str | None]]) -> int:
    return sum(1 if hi is None else int(hi) - int(lo) + 1 for lo, hi in parts)


def _expand_group(parts: list[tuple[str, str | None]]) -> list[str]:
    out: list[str] = []
    for lo_s, hi_s in parts:
        if hi_s is None:
            out.append(lo_s)
        else:
            width = len(lo_s)
            out.extend(str(n).zfill(width) for n in range(int(lo_s), int(hi_s) + 1))
    return out


def _item_pieces(item: str, expr: str, field: str) -> list[str | list[tuple[str, str | None]]]:
    """An item as literal strings and parsed bracket groups."""
    out: list[str | list[tuple[str, str | None]]] = []
    for piece in re.split(r"(\[[^\]]*\])", item):
        if not piece:
            continue
        out.append(_group_parts(piece[1:-1], expr, field) if piece.startswith("[") else piece)
    return out


def _too_many(expr: str, n: int, field: str) -> InvalidArgumentError:
    shown = expr if len(expr) <= 80 else expr[:77] + "..."
    return InvalidArgumentError(f"hostlist {shown!r} names {n:,} hosts; the limit is {MAX_HOSTS:,}", field)


def count(expr: str | Iterable[str], field: str = "nodelist") -> int:
    """How many names :func:`expand` would return, computed without generating them.

    Raises
    ------
    InvalidArgumentError
        As :func:`expand`, except the :data:`MAX_HOSTS` limit (the count is returned).
    """
    if not isinstance(expr, str):
        return sum(count(str(e), field) for e in expr)
    total = 0
    for item in _split_top(expr.strip(), expr, field):
        n = 1
        for piece in _item_pieces(item, expr, field):
            if not isinstance(piece, str):
                n *= _group_count(piece)
        total += n
    return total


def _expand_item(pieces: list) -> list[str]:
    names = [""]
    for piece in pieces:
        if isinstance(piece, str):
            names = [n + piece for n in names]
        else:
            values = _expand_group(piece)
            names = [n + v for n in names for v in values]
    return names


def expand(expr: str | Iterable[str], field: str = "nodelist") -> list[str]:
    """Expand a Slurm hostlist expression to the list of names, in order.

    ``expand("node[001-003,040],gpu7")`` -> ``['node001', 'node002', 'node003', 'node040',
    'gpu7']``.  A list of expressions is expanded and concatenated.

    Raises
    ------
    InvalidArgumentError
        Unbalanced or nested brackets, a non-numeric or decreasing range, an empty entry,
        or more than :data:`MAX_HOSTS` names; the message quotes the expression.
    """
    if not isinstance(expr, str):
        exprs = [str(e) for e in expr]
        n = sum(count(e, field) for e in exprs)
        if n > MAX_HOSTS:
            raise _too_many(",".join(exprs), n, field)
        out: list[str] = []
        for e in exprs:
            out.extend(expand(e, field))
        return out
    items = [_item_pieces(item, expr, field) for item in _split_top(expr.strip(), expr, field)]
    n = 0
    for pieces in items:  # count first: refuse before generating a single name
        k = 1
        for piece in pieces:
            if not isinstance(piece, str):
                k *= _group_count(piece)
        n += k
        if n > MAX_HOSTS:
            raise _too_many(expr, n if len(items) == 1 else count(expr, field), field)
    out = []
    for pieces in items:
        out.extend(_expand_item(pieces))
    return out


def _ranges(nums: list[int], width: int) -> str:
    parts = []
    i = 0
    while i < len(nums):
        j = i
        while j + 1 < len(nums) and nums[j + 1] == nums[j] + 1:
            j += 1
        a = str(nums[i]).zfill(width)
        parts.append(a if j == i else f"{a}-{str(nums[j]).zfill(width)}")
        i = j + 1
    return ",".join(parts)


def compress(hosts: Iterable[str], sort: bool = False, field: str = "nodelist") -> str:
    """The shortest-ish hostlist expression for ``hosts``.

    Consecutive names that differ only in their last number fold into one bracket group
    (``node1 node2 node3 node7`` -> ``node[1-3,7]``); zero padding is kept (``node[001-003]``).
    With ``sort=False`` (default) the order of ``hosts`` is preserved exactly, so
    ``expand(compress(h)) == list(h)``; ``sort=True`` sorts and removes duplicates first,
    like ``scontrol show hostlist``.
    """
    names = [str(h) for h in hosts]
    for h in names:
        if not h or any(c in h for c in "[],") or any(c.isspace() for c in h):
            raise InvalidArgumentError(f"host name {h!r} cannot appear in a hostlist", field)
    parsed = []
    for h in names:
        m = _NAME_RE.match(h)
        parsed.append((h, m.group(1), m.group(2), m.group(3)) if m else (h, None, None, None))
    if sort:
        seen = set()
        uniq = []
        for p in parsed:
            if p[0] not in seen:
                seen.add(p[0])
                uniq.append(p)

        def key(p):
            h, pre, dig, suf = p
            if pre is None:
                return (h, "", 0, 0)
            padded = len(dig) > 1 and dig[0] == "0"
            return (pre, suf, len(dig) if padded else 0, int(dig))

        parsed = sorted(uniq, key=key)

    out: list[str] = []
    group: dict | None = None

    def flush() -> None:
        nonlocal group
        if group is None:
            return
        if len(group["nums"]) == 1:
            out.append(group["first"])
        else:
            out.append(f"{group['pre']}[{_ranges(group['nums'], group['lo'])}]{group['suf']}")
        group = None

    for h, pre, dig, suf in parsed:
        if pre is None:
            flush()
            out.append(h)
            continue
        padded = len(dig) > 1 and dig[0] == "0"
        n = int(dig)
        if group is not None and group["pre"] == pre and group["suf"] == suf:
            lo, hi = group["lo"], group["hi"]
            if padded:
                lo, hi = max(lo, len(dig)), min(hi, len(dig))
            else:
                hi = min(hi, len(dig))
            if lo <= hi:
                group["lo"], group["hi"] = lo, hi
                group["nums"].append(n)
                continue
        flush()
        group = {
            "pre": pre,
            "suf": suf,
            "nums": [n],
            "first": h,
            "lo": len(dig) if padded else 1,
            "hi": len(dig),
        }
    flush()
    return ",".join(out)
