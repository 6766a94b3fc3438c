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

__all__ = ["expand", "compress", "MAX_HOSTS"]

#: Refuse expressions that expand to more names than this (a typo such as ``n[0-99999999]``).
MAX_HOSTS = 1 << 22

_NAME_RE = re.compile(r"^(.*?)(\d+)(\D*)$")


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


def _expand_group(body: str, expr: str, field: str) -> list[str]:
    out: list[str] = []
    parts = [p.strip() for p in body.split(",")]
    if not body.strip() or any(not p for p in parts):
        raise InvalidArgumentError(f"hostlist {expr!r}: empty entry in '[{body}]'", field)
    for part in parts:
        if "-" in part:
            lo_s, _, hi_s = part.partition("-")
            lo_s, hi_s = lo_s.strip(), hi_s.strip()
            if not (lo_s.isdigit() and hi_s.isdigit()):
                raise InvalidArgumentError(f"hostlist {expr!r}: range {part!r} is not numeric", field)
            lo, hi = int(lo_s), int(hi_s)
            if hi < lo:
                raise InvalidArgumentError(f"hostlist {expr!r}: range {part!r} is decreasing", field)
            if hi - lo + 1 > MAX_HOSTS:
                raise InvalidArgumentError(f"hostlist {expr!r}: range {part!r} has more than {MAX_HOSTS} names",
                                           field)
            width = len(lo_s)
            out.extend(str(n).zfill(width) for n in range(lo, hi + 1))
        else:
            if not part.isdigit():
                raise InvalidArgumentError(f"hostlist {expr!r}: {part!r} is not a number", field)
            out.append(part)
    return out


def _expand_item(item: str, expr: str, field: str) -> list[str]:
    pieces = re.split(r"(\[[^\]]*\])", item)
    names = [""]
    for piece in pieces:
        if not piece:
            continue
        if piece.startswith("["):
            values = _expand_group(piece[1:-1], expr, field)
            if len(names) * len(values) > MAX_HOSTS:
                raise InvalidArgumentError(f"hostlist {expr!r} expands to more than {MAX_HOSTS} names", field)
            names = [n + v for n in names for v in values]
        else:
            names = [n + piece for n in names]
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
        out: list[str] = []
        for e in expr:
            out.extend(expand(str(e), field))
        return out
    text = expr.strip()
    out = []
    for item in _split_top(text, expr, field):
        out.extend(_expand_item(item, expr, field))
        if len(out) > MAX_HOSTS:
            raise InvalidArgumentError(f"hostlist {expr!r} expands to more than {MAX_HOSTS} names", field)
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
