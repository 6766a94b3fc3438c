"""The jobs of a ``rankmap batch`` INPUT (a folder of job files, a YAML list or JSONL), read into
:class:`Entry` objects for :mod:`rankmap.batch` (the runner, also the Python API) and
the ``rankmap batch`` command)."""

from __future__ import annotations

import os
from typing import Any

from rankmap.solver.errors import InvalidArgumentError, RankmapError

__all__ = ["Entry", "job_from_entry", "load_entries"]

_YAML_SUFFIXES = (".yaml", ".yml")
_JSONL_SUFFIXES = (".jsonl", ".ndjson")
#: Keys that are batch-only (not job-file keys).
_BATCH_KEYS = ("name",)
#: Job-file keys that make no sense per batch entry and are ignored.
_IGNORED_KEYS = ("format", "server")


# --------------------------------------------------------------------------- input


class Entry:
    """One job of the batch: its index, name, and either a job dict or a load error."""

    __slots__ = ("index", "name", "job", "error")

    def __init__(self, index: int, name: str, job: dict | None = None, error: RankmapError | None = None):
        self.index = index
        self.name = name
        self.job = job
        self.error = error


def job_from_entry(entry: Any, base_dir: str, where: str) -> tuple[str | None, dict]:
    """``(name, job dict)`` of one entry, read as a ``rankmap solve`` job file would be.

    Relative ``cluster`` / ``host_topology`` / ``fabric`` / ``model_file`` paths
    are resolved against ``base_dir``.

    Raises
    ------
    InvalidArgumentError
        A non-mapping entry or an unknown key (named, with ``where``).
    """
    from rankmap.cli_solve import normalize_job

    if not isinstance(entry, dict):
        raise InvalidArgumentError(f"{where}: expected a mapping of job keys, got {type(entry).__name__}", "job")
    name = entry.get("name")
    name = None if name is None else str(name)
    rest = {k: v for k, v in entry.items() if str(k) != "name" and str(k).replace("-", "_") not in _IGNORED_KEYS}
    job = normalize_job(rest, base_dir, where, extra_known=("name",))
    return name, job


def _read_text(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as fh:
            return fh.read()
    except FileNotFoundError:
        raise InvalidArgumentError(f"batch input {path!r} does not exist", "input") from None
    except UnicodeDecodeError as exc:
        raise InvalidArgumentError(f"batch input {path!r} is not UTF-8 text (byte {exc.start})", "input") from None
    except OSError as exc:
        raise InvalidArgumentError(f"cannot read batch input {path!r}: {exc.strerror or exc}", "input") from None


def _yaml_load(text: str, path: str):
    """Strict YAML (depth, size, alias expansion, duplicate keys: rankmap.solver.formats.safe)."""
    from rankmap.solver.formats.safe import load_yaml

    return load_yaml(text, path, "input")


def load_entries(path: str) -> list[Entry]:
    """The jobs of a batch INPUT (folder, YAML list or JSONL), in input order.

    A job that cannot be read (bad YAML in one file of a folder, an unknown
    key, a malformed JSONL line) becomes an :class:`Entry` with ``error`` set,
    so that it is reported like any failed job.

    Raises
    ------
    InvalidArgumentError
        When INPUT itself is missing, unreadable, empty, or not a list of jobs.
    """
    entries: list[Entry] = []
    if os.path.isdir(path):
        files = sorted(f for f in os.listdir(path) if f.lower().endswith(_YAML_SUFFIXES))
        if not files:
            raise InvalidArgumentError(f"batch folder {path!r} has no .yaml/.yml job files", "input")
        for i, f in enumerate(files):
            full = os.path.join(path, f)
            stem = os.path.splitext(f)[0]
            doc = None
            try:
                doc = _yaml_load(_read_text(full), full)
                name, job = job_from_entry(doc if doc is not None else {}, os.path.dirname(os.path.abspath(full)), full)
                entries.append(Entry(i, name or stem, job))
            except RankmapError as exc:
                entries.append(Entry(i, _given_name(doc, stem), error=exc))
        return entries

    text = _read_text(path)
    from rankmap.solver.formats.safe import load_json

    base = os.path.dirname(os.path.abspath(path))
    stem = os.path.splitext(os.path.basename(path))[0]
    if path.lower().endswith(_JSONL_SUFFIXES):
        index = 0
        for lineno, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            where = f"{path} line {lineno}"
            obj = None
            try:
                obj = load_json(line, where, "input")  # depth, size, duplicate keys, finite numbers
                name, job = job_from_entry(obj, base, where)
                entries.append(Entry(index, name or f"{stem}:{lineno}", job))
            except RankmapError as exc:
                entries.append(Entry(index, _given_name(obj, f"{stem}:{lineno}"), error=exc))
            index += 1
        if not entries:
            raise InvalidArgumentError(f"batch input {path!r} has no jobs", "input")
        return entries

    doc = _yaml_load(text, path)
    if isinstance(doc, dict) and isinstance(doc.get("jobs"), list) and set(doc) == {"jobs"}:
        doc = doc["jobs"]
    if isinstance(doc, dict):
        doc = [doc]
    if not isinstance(doc, list) or not doc:
        raise InvalidArgumentError(
            f"batch input {path!r}: expected a list of jobs (or a folder of job files, or JSONL)", "input"
        )
    for i, obj in enumerate(doc):
        where = f"{path} job {i}"
        try:
            name, job = job_from_entry(obj, base, where)
            entries.append(Entry(i, name or f"{stem}[{i}]", job))
        except RankmapError as exc:
            entries.append(Entry(i, _given_name(obj, f"{stem}[{i}]"), error=exc))
    return entries


def _given_name(obj, fallback: str) -> str:
    """The entry's own ``name`` when it has a usable one (a job that failed to read keeps it), else ``fallback``."""
    name = obj.get("name") if isinstance(obj, dict) else None
    return name if isinstance(name, str) and name.strip() and len(name) <= 200 else fallback
