"""Measured link rates (issue 27): CSV, nccl-tests, ``ib_write_bw`` (text and JSON) and nvbandwidth JSON.

Each reader turns one file into :class:`Measurement` records, pairs of endpoints with the GB/s
(1e9 bytes/s) measured between them; :func:`rankmap.solver.fabric.measured.apply_measured` makes
each one cap the bottleneck links of its route in the cluster graph.  An endpoint is a host
name, a GPU node id (``node1/gpu3``) or ``HOST:N`` (the GPU of CUDA index N on HOST).

A ``--measured`` value (job key ``measured``, one string or a list) is ``FILE``, ``A,B=FILE``
(the two hosts of an ``ib_write_bw`` or nccl-tests run) or ``HOST=FILE`` (the host an
nvbandwidth run was made on).  The format follows from the content:

* **CSV** ``a,b,GB/s[,source]``, one pair a line (``#`` comments, blank lines and a header line
  whose third field is not a number are skipped).  The rate is what one flow reaches between
  the two endpoints: for two GPUs, their route; for two hosts, one flow between them (one GPU
  and NIC on each side, as ``ib_write_bw`` or ``sendrecv_perf -g 1`` on one GPU per host).
* **nccl-tests** (``all_reduce_perf``, ``sendrecv_perf``, ... text output between 2 hosts):
  the out-of-place ``busbw`` of the largest size (nccl-tests ``doc/PERFORMANCE.md``: the bus
  bandwidth is the per-rank link rate the collective reached); the two hosts and the GPUs per
  host come from its ``#  Rank  0 Group  0 Pid ... on HOST device N`` lines.  With k GPUs per
  host a collective's bus bandwidth is spread over the NCCL channels (one per NIC rail the k
  GPUs use, DESIGN §3), so a flow's rate is busbw / rails; a ``sendrecv_perf`` output (the
  file name says which test: ``sendrecv`` in it) is one flow's rate, its ring of sends crossing
  between the hosts one flow per direction.
* **ib_write_bw** (perftest) text: the ``BW average`` column of the largest message size, in
  the header's unit (``MB/sec`` and ``MiB/sec`` are 2^20 bytes/s in perftest, ``Gb/sec`` 1e9
  bits/s); JSON (``--out_json``): ``results.BW_average`` (perftest's default unit, MiB/s).
  perftest names no host: give them as ``A,B=FILE``.
* **nvbandwidth** JSON (``nvbandwidth -j``): the ``device_to_device`` unidirectional test cases'
  ``bandwidth_matrix`` (row: one GPU, column: its peer, GB/s); per GPU pair the fastest test
  case, the slower of the two directions.  nvbandwidth names no host: give it as ``HOST=FILE``.

Errors name the file and line (``InvalidArgumentError``, field ``measured``).
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass
from typing import Any

from ..errors import InvalidArgumentError

__all__ = ["Measurement", "MAX_MEASUREMENTS", "MAX_MEASURED_BYTES", "read_measured", "parse_measured",
           "measurements_from_value", "measurement_from_mapping", "absolute_spec"]

#: Measurements one job may carry (each is routed when the cluster model is built).
MAX_MEASUREMENTS = 100_000
#: Largest measurement file, bytes.
MAX_MEASURED_BYTES = 64 << 20
#: Accepted rates, GB/s (the graph's bandwidth range, :mod:`rankmap.solver.fabric.graph`).
_MIN_GBPS, _MAX_GBPS = 1e-6, 1e9
_MIB = float(1 << 20)

_FIELD = "measured"


@dataclass(frozen=True)
class Measurement:
    """One measured rate between two endpoints.

    Attributes
    ----------
    a, b : str
        Host names, GPU node ids or ``HOST:N`` (CUDA index N on HOST).
    gbps : float
        GB/s (1e9 bytes/s) one flow reached between them; with ``gpus_per_host`` > 0 the bus
        bandwidth of a collective that ran that many GPUs on each of the two hosts.
    source : str
        Where it came from (file and tool), shown in reports.
    gpus_per_host : int
        0: ``gbps`` is one flow's rate.  k > 0: nccl-tests' busbw with k GPUs per host (CUDA
        indices ``0..k-1`` unless ``devices_a``/``devices_b`` say which).
    devices_a, devices_b : tuple of int
        CUDA indices the nccl-tests run used on ``a`` / ``b`` (empty: the first ``gpus_per_host``).
    """

    a: str
    b: str
    gbps: float
    source: str = ""
    gpus_per_host: int = 0
    devices_a: tuple = ()
    devices_b: tuple = ()

    def to_dict(self) -> dict[str, Any]:
        """``{a, b, gbps, source}`` (and ``gpus_per_host`` when set): the job-file mapping form."""
        out = {"a": self.a, "b": self.b, "gbps": self.gbps, "source": self.source}
        if self.gpus_per_host:
            out["gpus_per_host"] = self.gpus_per_host
        return out


def _rate(value: Any, where: str) -> float:
    from .safe import _FLOAT_RE

    try:
        if isinstance(value, bool):
            raise TypeError
        if isinstance(value, str) and not _FLOAT_RE.fullmatch(value.strip()) and value.strip().lower().lstrip(
                "+-") not in ("nan", "inf", "infinity"):
            raise ValueError  # ASCII decimal only: no 1_0, no non-ASCII digits (nan/inf: refused below)
        v = float(value)
    except (TypeError, ValueError):
        raise InvalidArgumentError(f"{where}: rate {str(value)[:40]!r} is not a number of GB/s", _FIELD) from None
    if not math.isfinite(v) or not _MIN_GBPS <= v <= _MAX_GBPS:
        raise InvalidArgumentError(
            f"{where}: rate {str(value)[:40]!r} GB/s must be finite and in {_MIN_GBPS:g}..{_MAX_GBPS:g}", _FIELD)
    return v


def _endpoint(text: Any, where: str) -> str:
    s = str(text).strip() if text is not None else ""
    if not s or len(s) > 256 or any(c.isspace() for c in s):
        raise InvalidArgumentError(f"{where}: endpoint {str(text)[:60]!r} is not a host name, GPU id or HOST:N",
                                   _FIELD)
    return s


def measurement_from_mapping(doc: Any, where: str) -> Measurement:
    """A measurement from a mapping ``{a, b, gbps, source?, gpus_per_host?}`` (a job file's list entry).

    Raises
    ------
    InvalidArgumentError
        A missing or bad field, named with ``where``.
    """
    if not isinstance(doc, dict):
        raise InvalidArgumentError(f"{where}: expected a FILE string or a mapping {{a, b, gbps}}", _FIELD)
    unknown = set(doc) - {"a", "b", "gbps", "source", "gpus_per_host"}
    if unknown:
        raise InvalidArgumentError(f"{where}: unknown key {sorted(map(str, unknown))[0]!r} "
                                   "(known: a, b, gbps, source, gpus_per_host)", _FIELD)
    k = doc.get("gpus_per_host", 0) or 0
    if isinstance(k, bool) or not isinstance(k, int) or not 0 <= k <= 1 << 20:
        raise InvalidArgumentError(f"{where}: gpus_per_host {k!r} is not an integer >= 0", _FIELD)
    return Measurement(_endpoint(doc.get("a"), where), _endpoint(doc.get("b"), where),
                       _rate(doc.get("gbps"), where), str(doc.get("source") or "")[:256], k)


def measurements_from_value(value: Any, base_dir: str | None = None) -> tuple[Measurement, ...]:
    """The measurements of ``--measured`` (a list of strings) or the job key ``measured`` (a string, a
    mapping or a list of either).  ``None`` gives ``()``.

    Raises
    ------
    InvalidArgumentError
        A bad value or file (named), or more than :data:`MAX_MEASUREMENTS` measurements.
    """
    if value is None:
        return ()
    items = value if isinstance(value, (list, tuple)) else [value]
    out: list[Measurement] = []
    for i, item in enumerate(items):
        if isinstance(item, Measurement):
            out.append(item)
        elif isinstance(item, dict):
            out.append(measurement_from_mapping(item, f"measured entry {i}"))
        elif isinstance(item, str):
            out.extend(read_measured(item, base_dir))
        else:
            raise InvalidArgumentError(f"measured entry {i} ({item!r:.60}) is not FILE, A,B=FILE or HOST=FILE",
                                       _FIELD)
        if len(out) > MAX_MEASUREMENTS:
            raise InvalidArgumentError(f"more than {MAX_MEASUREMENTS} measurements; give fewer pairs", _FIELD)
    return tuple(out)


def absolute_spec(spec: str, base_dir: str) -> str:
    """A ``--measured`` value with its FILE made absolute against ``base_dir`` (a job file's folder)."""
    if os.path.isabs(spec) or os.path.exists(os.path.join(base_dir, spec)) or "=" not in spec:
        return spec if os.path.isabs(spec) else os.path.join(base_dir, spec)
    names, _, path = spec.partition("=")
    return f"{names}={path if os.path.isabs(path) else os.path.join(base_dir, path)}"


def _split_spec(spec: str, base_dir: str | None) -> tuple[tuple[str, ...], str]:
    """``(endpoints named before '=', path)`` of a ``--measured`` value."""
    def full(p: str) -> str:
        return p if base_dir is None or os.path.isabs(p) else os.path.join(base_dir, p)

    if os.path.exists(full(spec)) or "=" not in spec:
        return (), full(spec)
    names, _, path = spec.partition("=")
    ends = tuple(n.strip() for n in names.split(","))
    if not 1 <= len(ends) <= 2 or not all(ends):
        raise InvalidArgumentError(f"--measured {spec[:80]!r}: expected FILE, A,B=FILE or HOST=FILE", _FIELD)
    return tuple(_endpoint(e, f"--measured {spec[:80]!r}") for e in ends), full(path)


def read_measured(spec: str, base_dir: str | None = None) -> list[Measurement]:
    """Measurements of one ``--measured`` value (``FILE``, ``A,B=FILE`` or ``HOST=FILE``; module doc).

    Raises
    ------
    InvalidArgumentError
        A missing or unreadable file, an unrecognised or malformed one (file and line named), a
        perftest file without ``A,B=`` or an nvbandwidth file without ``HOST=``.
    """
    ends, path = _split_spec(spec, base_dir)
    try:
        with open(path, "rb") as fh:
            raw = fh.read(MAX_MEASURED_BYTES + 1)
    except FileNotFoundError:
        raise InvalidArgumentError(f"measured file {path!r} does not exist", _FIELD) from None
    except OSError as exc:
        raise InvalidArgumentError(f"cannot read measured file {path!r}: {exc.strerror or exc}", _FIELD) from None
    if len(raw) > MAX_MEASURED_BYTES:
        raise InvalidArgumentError(f"measured file {path} is larger than {MAX_MEASURED_BYTES >> 20} MiB", _FIELD)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidArgumentError(f"measured file {path} is not UTF-8 text", _FIELD) from None
    return parse_measured(text, os.path.basename(path), ends)


def parse_measured(text: str, name: str, ends: tuple[str, ...] = ()) -> list[Measurement]:
    """Measurements of one file's ``text`` (``name`` in messages and sources); ``ends``: the
    endpoints a ``A,B=`` / ``HOST=`` prefix named.  See the module doc for the formats.

    Raises
    ------
    InvalidArgumentError
        As :func:`read_measured`.
    """
    stripped = text.lstrip()
    if stripped.startswith("{"):
        from .safe import load_json

        doc = load_json(stripped, f"measured file {name}", _FIELD)
        if isinstance(doc, dict) and isinstance(doc.get("nvbandwidth"), dict):
            return _nvbandwidth(doc["nvbandwidth"], name, ends)
        if isinstance(doc, dict) and isinstance(doc.get("results"), dict):
            return [_perftest_json(doc, name, ends)]
        raise InvalidArgumentError(
            f"measured file {name}: a JSON file must be nvbandwidth's (key 'nvbandwidth') or perftest's "
            "--out_json (key 'results')", _FIELD)
    if re.search(r"BW average\[", text):
        return [_ib_text(text, name, ends)]
    if re.search(r"^(?:\[\d+,\d+\]<std\w+>:|\d+: )?#.*\bbusbw\b", text, re.M):
        return [_nccl_tests(text, name, ends)]
    if ends:
        raise InvalidArgumentError(
            f"measured file {name}: {','.join(ends)}= names the hosts of an ib_write_bw, nccl-tests or "
            "nvbandwidth file, and this one is none of those (a CSV names its pairs on each line)", _FIELD)
    return _csv(text, name)


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _csv(text: str, name: str) -> list[Measurement]:
    out: list[Measurement] = []
    data_seen = False
    for no, line in enumerate(text.splitlines(), 1):
        body = line.split("#", 1)[0].strip()
        if not body:
            continue
        where = f"measured file {name} line {no}"
        fields = [f.strip() for f in body.split(",")]
        if len(fields) not in (3, 4):
            raise InvalidArgumentError(f"{where}: expected a,b,GB/s[,source], got {len(fields)} fields", _FIELD)
        if not data_seen and not _is_number(fields[2]):
            data_seen = True
            continue  # a header line (a,b,gbps,source)
        data_seen = True
        src = fields[3] if len(fields) == 4 and fields[3] else f"{name} line {no}"
        out.append(Measurement(_endpoint(fields[0], where), _endpoint(fields[1], where), _rate(fields[2], where),
                               src[:256]))
        if len(out) > MAX_MEASUREMENTS:
            raise InvalidArgumentError(f"measured file {name}: more than {MAX_MEASUREMENTS} pairs", _FIELD)
    if not out:
        raise InvalidArgumentError(f"measured file {name} has no a,b,GB/s line", _FIELD)
    return out


# "#  Rank  0 Group  0 Pid  40001 on HOST device  0 [...]" (older versions: no "Group  N")
_RANK_LINE = re.compile(r"^#\s*Rank\s+(\d+)\s+(?:Group\s+\d+\s+)?Pid\s+\d+\s+on\s+(\S+)\s+device\s+(\d+)", re.M)
# Open MPI's --tag-output prefix ("[1,0]<stdout>:") and Slurm's --label ("0: ")
_TAG = re.compile(r"^(?:\[\d+,\d+\]<std(?:out|err)>:|\d+: )", re.M)


def _nccl_tests(text: str, name: str, ends: tuple[str, ...]) -> Measurement:
    """busbw (GB/s) of the largest size of an nccl-tests run between 2 hosts."""
    text = _TAG.sub("", text)
    hosts: dict[str, list[int]] = {}
    ranks: set[int] = set()
    for m in _RANK_LINE.finditer(text):
        r = int(m.group(1))
        if r in ranks:
            raise InvalidArgumentError(
                f"measured file {name}: rank {r} is listed twice, so the hosts ran separate tests (nccl-tests built "
                "without MPI=1 starts one communicator per process); rebuild with MPI=1 and run across both hosts",
                _FIELD)
        ranks.add(r)
        hosts.setdefault(m.group(2), []).append(int(m.group(3)))
    header = None
    best: tuple[int, float, int] | None = None
    for no, line in enumerate(text.splitlines(), 1):
        s = line.strip()
        if s.startswith("#"):
            tokens = s.lstrip("#").split()
            if "size" in tokens and "busbw" in tokens:
                header = tokens
            continue
        tokens = s.split()
        if header is None or not tokens or not tokens[0].isdigit():
            continue
        col = header.index("busbw")
        if len(tokens) <= col:
            raise InvalidArgumentError(f"measured file {name} line {no}: a result row without a busbw column",
                                       _FIELD)
        where = f"measured file {name} line {no}"
        size, bw = int(tokens[0]), _rate_or_zero(tokens[col], where)
        if best is None or size >= best[0]:
            best = (size, bw, no)
    if best is None:
        raise InvalidArgumentError(f"measured file {name}: an nccl-tests output without result rows", _FIELD)
    if best[1] <= 0:
        raise InvalidArgumentError(f"measured file {name} line {best[2]}: busbw 0 at the largest size", _FIELD)
    names = list(hosts)
    if ends:
        if len(ends) != 2:
            raise InvalidArgumentError(f"measured file {name}: nccl-tests output needs A,B= (two hosts)", _FIELD)
        a, b = ends
        per = min((len(v) for v in hosts.values()), default=1) if len(hosts) == 2 else 1
        devs = [tuple(hosts[h]) if h in hosts else () for h in (a, b)]
    else:
        if len(names) != 2:
            raise InvalidArgumentError(
                f"measured file {name}: nccl-tests output between 2 hosts expected, its '# Rank ... on HOST' lines "
                f"name {len(names)}" + (f" ({', '.join(names[:4])})" if names else "")
                + "; give the hosts as A,B=FILE", _FIELD)
        a, b = names
        per = min(len(hosts[a]), len(hosts[b]))
        devs = [tuple(hosts[a]), tuple(hosts[b])]
    src = f"nccl-tests {name} (busbw at {best[0]} B)"
    # sendrecv_perf's ring of sends crosses between the hosts at one flow per direction: its busbw is
    # one flow's rate whatever the GPUs per host; the collectives' busbw spreads over the rails
    point_to_point = re.search(r"send_?recv|hypercube", name, re.I) is not None
    k = per if per > 1 and not point_to_point else 0
    return Measurement(a, b, best[1], src, k, devs[0][:per] if k else (), devs[1][:per] if k else ())


def _rate_or_zero(text: str, where: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise InvalidArgumentError(f"{where}: {text[:40]!r} is not a number of GB/s", _FIELD) from None
    if not math.isfinite(v) or v < 0 or v > _MAX_GBPS:
        raise InvalidArgumentError(f"{where}: busbw {text[:40]!r} is not a rate in 0..{_MAX_GBPS:g} GB/s", _FIELD)
    return v


def _pair(ends: tuple[str, ...], name: str, tool: str) -> tuple[str, str]:
    if len(ends) != 2:
        raise InvalidArgumentError(
            f"measured file {name}: {tool} output names no hosts; give them as --measured HOSTA,HOSTB={name}",
            _FIELD)
    return ends[0], ends[1]


def _ib_text(text: str, name: str, ends: tuple[str, ...]) -> Measurement:
    """``BW average`` (GB/s) of the largest message size of an ``ib_write_bw`` text output."""
    a, b = _pair(ends, name, "ib_write_bw")
    lines = text.splitlines()
    unit = col = None
    best: tuple[int, float, int] | None = None
    for no, line in enumerate(lines, 1):
        m = re.search(r"BW average\[([^\]]+)\]", line)
        if m:
            unit = m.group(1).strip()
            col = 4 if "#sl" in line else 3  # perftest's RESULT_FMT / RESULT_FMT_QOS columns
            continue
        tokens = line.split()
        if col is None or not tokens or not tokens[0].isdigit() or len(tokens) <= col:
            continue
        where = f"measured file {name} line {no}"
        size, bw = int(tokens[0]), _rate_or_zero(tokens[col], where)
        if best is None or size >= best[0]:
            best = (size, bw, no)
    if best is None:
        raise InvalidArgumentError(f"measured file {name}: ib_write_bw output without a result row", _FIELD)
    factor = _ib_unit(unit, name)
    dev = re.search(r"Device\s*:\s*(\S+)", text)
    src = f"ib_write_bw {name}" + (f" ({dev.group(1)})" if dev else "")
    return Measurement(a, b, _rate(best[1] * factor, f"measured file {name} line {best[2]}"), src)


def _ib_unit(unit: str | None, name: str) -> float:
    """GB/s per unit of perftest's bandwidth column."""
    u = (unit or "").lower().replace(" ", "")
    if u in ("mb/sec", "mib/sec"):
        return _MIB / 1e9  # perftest divides bytes/s by 0x100000 for both labels
    if u == "gb/sec":
        return 1.0 / 8.0  # --report_gbits: 1e9 bits/s
    raise InvalidArgumentError(f"measured file {name}: unknown ib_write_bw unit {unit!r} (MB/sec, MiB/sec, Gb/sec)",
                               _FIELD)


def _perftest_json(doc: dict, name: str, ends: tuple[str, ...]) -> Measurement:
    a, b = _pair(ends, name, "ib_write_bw")
    res = doc["results"]
    val = res.get("BW_average", res.get("bw_avg"))
    if val is None:
        raise InvalidArgumentError(f"measured file {name}: perftest JSON without results.BW_average", _FIELD)
    gbps = _rate(val, f"measured file {name} results.BW_average") * _MIB / 1e9
    info = doc.get("test_info") if isinstance(doc.get("test_info"), dict) else {}
    dev = info.get("Device")
    src = f"ib_write_bw {name}" + (f" ({dev})" if isinstance(dev, str) and dev else "")
    return Measurement(a, b, _rate(gbps, f"measured file {name} results.BW_average"), src)


def _nvbandwidth(doc: dict, name: str, ends: tuple[str, ...]) -> list[Measurement]:
    if len(ends) != 1:
        raise InvalidArgumentError(
            f"measured file {name}: nvbandwidth output names no host; give it as --measured HOST={name}", _FIELD)
    host = ends[0]
    cases = doc.get("testcases")
    if not isinstance(cases, list):
        raise InvalidArgumentError(f"measured file {name}: nvbandwidth JSON without a testcases list", _FIELD)
    best: dict[tuple[int, int], float] = {}
    used = []
    for tc in cases:
        if not isinstance(tc, dict):
            continue
        tname = str(tc.get("name", ""))
        if not tname.startswith("device_to_device") or "bidirectional" in tname or tc.get("status") != "Passed":
            continue
        mat = tc.get("bandwidth_matrix")
        if not isinstance(mat, list):
            continue
        used.append(tname)
        for i, row in enumerate(mat):
            if not isinstance(row, list):
                continue
            for j, cell in enumerate(row):
                if i == j or cell in ("N/A", None, ""):
                    continue
                v = _rate_or_zero(str(cell), f"measured file {name} {tname}[{i}][{j}]")
                if v > 0:
                    best[(i, j)] = max(best.get((i, j), 0.0), v)
    if not best:
        raise InvalidArgumentError(
            f"measured file {name}: no passed device_to_device test case with a bandwidth_matrix", _FIELD)
    out = []
    for (i, j), v in sorted(best.items()):
        if i < j or (j, i) not in best:
            w = min(v, best.get((j, i), v))
            lo, hi = min(i, j), max(i, j)
            out.append(Measurement(f"{host}:{lo}", f"{host}:{hi}", w, f"nvbandwidth {name}"))
    return out
