"""Strict loaders for user input: JSON, YAML, XML, integers and numbers (issue 11, item 5).

Every place that reads a user's JSON or YAML (cluster graph files, assignment files, job
files, batch inputs, ``topology.yaml``, model files) goes through :func:`load_json` /
:func:`load_yaml`, every NCCL topology XML or GraphML file through :func:`~.safe_xml.parse_xml` /
:func:`~.safe_xml.check_xml`, and every integer the command line reads through :func:`strict_int`.
They turn hostile or malformed input into one :class:`~rankmap.solver.errors.InvalidArgumentError`
(the CLI prints one line and exits 2; the service answers ``INVALID_ARGUMENT``) instead of a
``RecursionError``, minutes of CPU or gigabytes of memory.

Limits (module constants, documented in the README "Input limits"):

======================  ==============  ===================================================
limit                   default         why
======================  ==============  ===================================================
:data:`MAX_DEPTH`       64              nesting of JSON arrays/objects and YAML
                                        collections (rankmap's own files nest <= 5 deep)
:data:`MAX_JSON_BYTES`  1 GiB           one JSON document (a 131,072-GPU graph is ~100 MB)
:data:`MAX_YAML_BYTES`  8 MiB           one YAML document (job files are a few KB)
:data:`MAX_YAML_NODES`  1,000,000       YAML values counted with every alias expanded
:data:`MAX_YAML_ALIASES` 10,000         ``*alias`` uses in one YAML document
======================  ==============  ===================================================

YAML aliases and merge keys (``defaults: &d {...}`` then ``<<: *d``) are allowed, because
batch files legitimately share settings that way, but bounded: a document whose values,
with every alias expanded, number more than :data:`MAX_YAML_NODES` ("billion laughs") is
refused before anything is built, as is a recursive alias.

Other rules:

* Duplicate keys in a JSON object or a YAML mapping are errors naming the key (YAML merge
  keys may still be overridden by the mapping's own keys, as the YAML spec says).
* JSON ``NaN`` / ``Infinity`` and numbers that overflow to infinity (``1e999``) are errors;
  YAML numbers likewise, and YAML ``.inf`` / ``.nan`` stay strings (then fail validation).
* YAML integers are ASCII decimal only (``[-+]?[0-9]+``): ``8_0``, ``0x10``, ``0o7``,
  ``1:20`` (YAML 1.1 sexagesimal) stay strings; ``010`` is ten, not octal eight.
* XML: DTD entity declarations and external references are refused (``defusedxml``).
* :func:`dump_json` writes JSON without ``NaN`` / ``Infinity`` (``allow_nan=False``): output
  is always valid JSON.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any, Callable

from ..errors import InvalidArgumentError

__all__ = [
    "MAX_DEPTH",
    "MAX_JSON_BYTES",
    "MAX_YAML_BYTES",
    "MAX_YAML_NODES",
    "MAX_YAML_ALIASES",
    "MAX_INT_DIGITS",
    "load_json",
    "load_yaml",
    "load_yaml_all",
    "dump_json",
    "strict_int",
    "strict_float",
    "is_strict_int_text",
]

#: Deepest nesting of JSON arrays/objects or YAML sequences/mappings accepted.
MAX_DEPTH = 64
#: Largest JSON document accepted, in bytes (characters).
MAX_JSON_BYTES = 1 << 30
#: Largest YAML document accepted, in bytes (characters).
MAX_YAML_BYTES = 8 << 20
#: Most YAML values (scalars, sequences, mappings) in one document, aliases expanded.
MAX_YAML_NODES = 1_000_000
#: Most ``*alias`` uses in one YAML document.
MAX_YAML_ALIASES = 10_000
#: Most digits of an integer the CLI reads (more is a typo or an attack: int() of a
#: 100,000-digit string is quadratic).
MAX_INT_DIGITS = 30


def _fail(message: str, field: str) -> InvalidArgumentError:
    return InvalidArgumentError(message, field)


def _size_check(text: str | bytes, what: str, field: str, limit: int, kind: str) -> None:
    if len(text) > limit:
        raise _fail(f"{what}: {kind} document of {len(text):,} bytes is larger than the {limit:,}-byte limit", field)


# --------------------------------------------------------------------------- integers / numbers

_INT_RE = re.compile(r"[0-9]+", re.ASCII)
_SIGNED_INT_RE = re.compile(r"[-+]?[0-9]+", re.ASCII)
_FLOAT_RE = re.compile(r"[-+]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?", re.ASCII)


def is_strict_int_text(text: str, signed: bool = False) -> bool:
    """True for ASCII decimal digits (with a leading ``-``/``+`` when ``signed``), at most
    :data:`MAX_INT_DIGITS` digits."""
    if not isinstance(text, str):
        return False
    rx = _SIGNED_INT_RE if signed else _INT_RE
    return rx.fullmatch(text) is not None and len(text.lstrip("+-")) <= MAX_INT_DIGITS


def strict_int(value: Any, what: str, field: str = "", *, signed: bool = False,
               minimum: int | None = None, maximum: int | None = None) -> int:
    """An integer from an ``int`` or from text of ASCII decimal digits.

    Underscores (``8_0``), non-ASCII digits (``٨``), ``0x``/``0o`` prefixes, floats, booleans
    and more than :data:`MAX_INT_DIGITS` digits are refused; a sign only when ``signed``
    (surrounding whitespace is ignored).  ``what`` names the value in the message.

    Raises
    ------
    InvalidArgumentError
        Not such an integer, or outside ``[minimum, maximum]``.
    """
    if isinstance(value, bool):
        raise _fail(f"{what} must be an integer, got {value!r}", field)
    if isinstance(value, int):
        n = value
    elif isinstance(value, str) and is_strict_int_text(value.strip(), signed=signed):
        n = int(value.strip())
    else:
        shown = value if not isinstance(value, str) or len(value) <= 40 else value[:40] + "..."
        kind = "an integer" if signed else "a non-negative integer"
        raise _fail(f"{what} must be {kind} written in ASCII digits, got {shown!r}", field)
    if minimum is not None and n < minimum:
        raise _fail(f"{what} must be >= {minimum}, got {n}", field)
    if maximum is not None and n > maximum:
        raise _fail(f"{what} must be <= {maximum}, got {n}", field)
    return n


def strict_float(value: Any, what: str, field: str = "") -> float:
    """A finite float from a number or from ASCII decimal text (``1.5``, ``4e9``, ``-2``).

    Underscores, non-ASCII digits, ``nan``/``inf`` and values that overflow are refused.
    """
    if isinstance(value, bool):
        raise _fail(f"{what} must be a number, got {value!r}", field)
    if isinstance(value, (int, float)):
        try:
            x = float(value)
        except OverflowError:
            raise _fail(f"{what} {value!r} is out of range", field) from None
    elif isinstance(value, str) and _FLOAT_RE.fullmatch(value.strip()) and len(value) <= 64:
        x = float(value.strip())
    else:
        shown = value if not isinstance(value, str) or len(value) <= 40 else value[:40] + "..."
        raise _fail(f"{what} must be a number written in ASCII digits, got {shown!r}", field)
    if not math.isfinite(x):
        raise _fail(f"{what} {value!r} is out of range (not a finite number)", field)
    return x


# --------------------------------------------------------------------------- JSON

def _json_depth(data: bytes) -> int:
    """Deepest bracket nesting of JSON text (UTF-8 bytes), brackets inside strings skipped.

    Vectorised (numpy), about 15 ms per MB: escaped backslashes and quotes are blanked, a
    bracket is inside a string when an odd number of quotes precede it."""
    if b"[" not in data and b"{" not in data:
        return 0
    import numpy as np

    data = data.replace(b"\\\\", b"__").replace(b'\\"', b"__")
    arr = np.frombuffer(data, dtype=np.uint8)
    quotes = np.flatnonzero(arr == ord('"'))
    opens = (arr == ord("[")) | (arr == ord("{"))
    at = np.flatnonzero(opens | (arr == ord("]")) | (arr == ord("}")))
    outside = (np.searchsorted(quotes, at) & 1) == 0
    step = np.where(opens[at], 1, -1)[outside]
    return int(np.cumsum(step).max()) if step.size else 0


def _reject_constant(name: str):
    raise ValueError(f"{name} is not a finite number")


class _JsonValueError(ValueError):
    pass


def load_json(text: str | bytes, what: str, field: str = "", *, max_depth: int = MAX_DEPTH,
              max_bytes: int = MAX_JSON_BYTES) -> Any:
    """Parse JSON strictly.

    ``what`` names the input in messages (``"cluster file x.json"``), ``field`` is the
    error's field.

    Raises
    ------
    InvalidArgumentError
        Larger than ``max_bytes``, nested deeper than ``max_depth``, malformed (line and
        column), a duplicate object key (named), ``NaN``/``Infinity`` or a number that
        overflows, an integer of more than :data:`MAX_INT_DIGITS` digits, not UTF-8.
    """
    _size_check(text, what, field, max_bytes, "JSON")
    data = bytes(text) if isinstance(text, (bytes, bytearray)) else text.encode("utf-8", "surrogatepass")
    depth = _json_depth(data)
    if isinstance(text, (bytes, bytearray)):
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise _fail(f"{what}: not UTF-8 text (byte {exc.start})", field) from None
    del data
    if text.startswith("\ufeff"):
        text = text[1:]
    if depth > max_depth:
        raise _fail(f"{what}: JSON nested {depth} levels deep; the limit is {max_depth}", field)

    def pairs_hook(pairs):
        d = dict(pairs)
        if len(d) != len(pairs):
            seen = set()
            for k, _ in pairs:
                if k in seen:
                    raise _JsonValueError(f"duplicate key {k!r}")
                seen.add(k)
        return d

    def parse_int(s: str) -> int:
        if len(s.lstrip("-")) > MAX_INT_DIGITS:
            raise _JsonValueError(f"integer {s[:20]}... has more than {MAX_INT_DIGITS} digits")
        return int(s)

    def parse_float(s: str) -> float:
        x = float(s)
        if not math.isfinite(x):
            raise _JsonValueError(f"number {s} is out of range")
        return x

    try:
        return json.loads(text, object_pairs_hook=pairs_hook, parse_float=parse_float, parse_int=parse_int,
                          parse_constant=_reject_constant)
    except json.JSONDecodeError as exc:
        where = f" line {exc.lineno}" if "\n" in text else ""  # JSONL callers name the line in ``what``
        raise _fail(f"{what}{where} column {exc.colno}: malformed JSON ({exc.msg})", field) from None
    except _JsonValueError as exc:
        raise _fail(f"{what}: {exc}", field) from None
    except ValueError as exc:  # parse_constant
        raise _fail(f"{what}: {str(exc).splitlines()[0] if str(exc) else 'invalid JSON value'}", field) from None
    except RecursionError:  # pragma: no cover - the depth scan comes first
        raise _fail(f"{what}: JSON nested too deeply; the limit is {max_depth}", field) from None


def dump_json(obj: Any, what: str = "the result", **kwargs: Any) -> str:
    """``json.dumps(obj, allow_nan=False, **kwargs)``; a NaN or infinity anywhere is an
    :class:`InvalidArgumentError` (an input value was out of range) instead of invalid JSON."""
    try:
        return json.dumps(obj, allow_nan=False, **kwargs)
    except ValueError as exc:
        if "out of range float" in str(exc).lower():
            raise _fail(f"{what} holds a non-finite number (an input value is out of range, e.g. a bandwidth "
                        "too small or too large); refusing to write invalid JSON", "") from None
        raise


# --------------------------------------------------------------------------- YAML

_YAML_LOADERS: dict = {}


def _yaml_loader(mark_lines: str | None):
    """A SafeLoader subclass with strict numbers, duplicate-key, depth and alias checks."""
    key = mark_lines
    if key in _YAML_LOADERS:
        return _YAML_LOADERS[key]
    import yaml
    from yaml.constructor import ConstructorError
    from yaml.nodes import MappingNode, ScalarNode, SequenceNode

    INT = "tag:yaml.org,2002:int"
    FLOAT = "tag:yaml.org,2002:float"
    MERGE = "tag:yaml.org,2002:merge"

    class Loader(yaml.SafeLoader):
        pass

    # strict implicit int/float resolution: ASCII decimal only, no YAML 1.1 forms
    Loader.yaml_implicit_resolvers = {
        ch: [(tag, rx) for tag, rx in resolvers if tag not in (INT, FLOAT)]
        for ch, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
    }
    Loader.add_implicit_resolver(INT, re.compile(r"^[-+]?[0-9]+$", re.ASCII), list("-+0123456789"))
    Loader.add_implicit_resolver(
        FLOAT, re.compile(r"^[-+]?(?:[0-9]+\.[0-9]*|\.[0-9]+|[0-9]+(?:\.[0-9]*)?[eE][-+]?[0-9]+"
                          r"|\.[0-9]+[eE][-+]?[0-9]+)$", re.ASCII),
        list("-+0123456789."))

    def compose_node(self, parent, index):
        self._rm_depth = getattr(self, "_rm_depth", 0) + 1
        try:
            if self._rm_depth > self._rm_max_depth:
                mark = self.peek_event().start_mark
                raise ConstructorError(None, None, f"nested more than {self._rm_max_depth} levels deep", mark)
            if self.check_event(yaml.AliasEvent):
                self._rm_aliases = getattr(self, "_rm_aliases", 0) + 1
                if self._rm_aliases > MAX_YAML_ALIASES:
                    mark = self.peek_event().start_mark
                    raise ConstructorError(None, None, f"more than {MAX_YAML_ALIASES:,} aliases", mark)
            return yaml.SafeLoader.compose_node(self, parent, index)
        finally:
            self._rm_depth -= 1

    def compose_document(self):
        node = yaml.SafeLoader.compose_document(self)
        _check_expansion(node)
        return node

    def _check_expansion(root):
        # values with every alias expanded, counted over the node DAG without expanding it
        size: dict[int, int] = {}
        on_path: set[int] = set()
        stack = [(root, False)]
        while stack:
            node, done = stack.pop()
            nid = id(node)
            if done:
                on_path.discard(nid)
                if isinstance(node, SequenceNode):
                    total = 1 + sum(size[id(c)] for c in node.value)
                elif isinstance(node, MappingNode):
                    total = 1 + sum(size[id(k)] + size[id(v)] for k, v in node.value)
                else:
                    total = 1
                if total > MAX_YAML_NODES:
                    raise ConstructorError(
                        None, None, f"aliases expand to more than {MAX_YAML_NODES:,} values", node.start_mark)
                size[nid] = total
                continue
            if nid in size:
                continue
            if nid in on_path:
                raise ConstructorError(None, None, "recursive alias", node.start_mark)
            on_path.add(nid)
            stack.append((node, True))
            if isinstance(node, SequenceNode):
                children = node.value
            elif isinstance(node, MappingNode):
                children = [x for kv in node.value for x in kv]
            else:
                children = []
            for c in children:
                if id(c) not in size:
                    stack.append((c, False))

    def construct_mapping(self, node, deep=False):
        if isinstance(node, MappingNode):
            seen: dict = {}
            for key_node, _ in node.value:
                if key_node.tag == MERGE or not isinstance(key_node, ScalarNode):
                    continue
                k = self.construct_object(key_node)
                try:
                    if k in seen:
                        raise ConstructorError(
                            "while constructing a mapping", node.start_mark, f"duplicate key {k!r}",
                            key_node.start_mark)
                except TypeError:
                    continue
                seen[k] = True
        mapping = yaml.SafeLoader.construct_mapping(self, node, deep=deep)
        if mark_lines:
            mapping[mark_lines] = node.start_mark.line + 1
        return mapping

    def construct_yaml_int(self, node):
        text = self.construct_scalar(node)
        if not isinstance(text, str) or not is_strict_int_text(text.strip(), signed=True):
            raise ConstructorError(None, None, f"integer {text!r} is not ASCII decimal digits", node.start_mark)
        return int(text.strip())

    def construct_yaml_float(self, node):
        text = self.construct_scalar(node)
        if not isinstance(text, str) or not _FLOAT_RE.fullmatch(text.strip()):
            raise ConstructorError(None, None, f"number {text!r} is not a finite decimal number", node.start_mark)
        x = float(text.strip())
        if not math.isfinite(x):
            raise ConstructorError(None, None, f"number {text!r} is out of range", node.start_mark)
        return x

    Loader.compose_node = compose_node
    Loader.compose_document = compose_document
    Loader.construct_mapping = construct_mapping
    Loader.add_constructor(INT, construct_yaml_int)
    Loader.add_constructor(FLOAT, construct_yaml_float)
    _YAML_LOADERS[key] = Loader
    return Loader


def load_yaml(text: str | bytes, what: str, field: str = "", *, max_depth: int = MAX_DEPTH,
              max_bytes: int = MAX_YAML_BYTES, mark_lines: str | None = None) -> Any:
    """Parse one YAML document strictly (a safe loader: plain data only).

    ``mark_lines``: when given, every mapping gets that key holding its 1-based line.

    Raises
    ------
    InvalidArgumentError
        Larger than ``max_bytes``, nested deeper than ``max_depth``, aliases expanding to
        more than :data:`MAX_YAML_NODES` values or a recursive alias, a duplicate key
        (named, with its line), a non-decimal integer tag, a number out of range, malformed
        YAML (with its line), several documents.
    """
    return _run_yaml_loader(text, what, field, max_depth, max_bytes, mark_lines,
                            lambda loader: loader.get_single_data())


def load_yaml_all(text: str | bytes, what: str, field: str = "", *, max_depth: int = MAX_DEPTH,
                  max_bytes: int = MAX_YAML_BYTES, mark_lines: str | None = None) -> list:
    """Parse a YAML stream of one or more documents (``---`` separated, as ``kubectl`` and
    Kubernetes manifests write them) with the same checks as :func:`load_yaml`, each document
    checked on its own; empty documents are dropped.

    Raises
    ------
    InvalidArgumentError
        As :func:`load_yaml` (except that several documents are allowed), with the line.
    """
    def documents(loader) -> list:
        docs = []
        while loader.check_data():
            d = loader.get_data()
            if d is not None:
                docs.append(d)
        return docs

    return _run_yaml_loader(text, what, field, max_depth, max_bytes, mark_lines, documents)


def _run_yaml_loader(text: str | bytes, what: str, field: str, max_depth: int, max_bytes: int,
                     mark_lines: str | None, read: Callable[[Any], Any]) -> Any:
    """``read(loader)`` on a strict loader over ``text`` (the checks of :func:`load_yaml`), the
    loader disposed of afterwards; a YAML error becomes an :class:`InvalidArgumentError` with its line.
    """
    import yaml

    _size_check(text, what, field, max_bytes, "YAML")
    Loader = _yaml_loader(mark_lines)
    loader = None
    try:
        loader = Loader(text)  # the reader refuses control characters here already
        loader._rm_max_depth = max_depth
        return read(loader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        if mark is None and isinstance(getattr(exc, "position", None), int) and isinstance(text, str):
            where = f" line {text.count(chr(10), 0, exc.position) + 1}"  # ReaderError: a control character
        problem = getattr(exc, "problem", None) or (str(exc).splitlines() or ["malformed YAML"])[0]
        if not isinstance(exc, yaml.constructor.ConstructorError) or problem.startswith(("found", "expected")):
            problem = f"malformed YAML ({problem})"
        raise _fail(f"{what}{where}: {problem}", field) from None
    except RecursionError:  # pragma: no cover - the depth check comes first
        raise _fail(f"{what}: YAML nested too deeply; the limit is {max_depth}", field) from None
    finally:
        if loader is not None:
            loader.dispose()
