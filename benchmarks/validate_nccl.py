"""Predicted nccl-tests bus bandwidth beside published measurements (DESIGN §4, "Checks").

Every row builds a published system the way a user does (``rankmap cluster``'s own
builder, :func:`rankmap.solver.job.resolve.build_job_cluster`: synthetic hosts of
``--gpus-per-node 8 --gpu h100`` under a Slurm ``topology.conf`` leaf, or a real
``nvidia-smi topo -m`` dump with ``--host-topology``), places Megatron's ranks on it in
launcher order (global rank r on device r), gives one traffic class exactly the
collective nccl-tests runs, and turns the predicted class time into nccl-tests' bus
bandwidth (NVIDIA/nccl-tests ``doc/PERFORMANCE.md``)::

    algbw = S / T_class            S = nccl-tests "size" (bytes per rank; all-gather: the gathered total)
    busbw = algbw * 2(n-1)/n       all-reduce
          = algbw * (n-1)/n        all-gather, reduce-scatter, all-to-all
          = algbw                  sendrecv

with n the ranks of one communicator (one Megatron group).  The collective runs as

=============== ===== ==================================================================
collective      class  group
=============== ===== ==================================================================
all-reduce      dp     DATA_PARALLEL_GROUP (tp=1: the whole world; tp=4: 2 members per
                       host; tp=8: 1 member per host), part ``Collective("all_reduce")``
all-gather      dp     as above, ``Collective("all_gather")`` (S = gathered total)
reduce-scatter  dp     ``Collective("reduce_scatter")`` when the model has that kind, else
                       ``all_gather`` (same ring bytes, (n-1)/n*S per edge)
all-to-all      ep     EXPERT_MODEL_PARALLEL_GROUP = the whole world (ep=W, etp=1)
sendrecv        pp     PIPELINE_MODEL_PARALLEL_GROUP, tp=8 pp=2 on 2 hosts: 8 pairs
                       (host1 GPU i <-> host2 GPU i), S each way, as nccl-tests sendrecv
=============== ===== ==================================================================

All groups of the class run at once (what rankmap predicts for a training step); in every
row here they use disjoint GPUs and NICs, so one group's busbw is what nccl-tests measures.

Published figures and their sources: ``/work/shared/references/nccl.md`` (sections 2.4, 3)
and the issue's measurement table.  A row passes when the prediction lies within 15 % of
the published value, for a range within 15 % of the range: ``0.85*lo <= predicted <=
1.15*hi``.  The ``ratio`` column is predicted / the nearest end of the range (1.00 inside
it), so a row passes when ``|ratio - 1| <= 0.15``.  Rows marked *derived* have no
published measurement: their figure is NCCL's own tuning model worked by hand
(nccl.md §2.4, ``src/graph/tuning.cc``).

The sweep (1 MiB .. 8 GiB, powers of 2) shows busbw rising out of the latency-bound
region for a few rows, with the published mid-size points where there are any (GB200
NVL72) and SimAI's measured-efficiency ratios (``aliyun/SimAI`` ``inputs/ratio/*.csv``,
provenance not stated; nccl.md §4) times the row's published peak, for orientation.

    python benchmarks/validate_nccl.py                # tables; exit 1 if a row is outside 15 %
    python benchmarks/validate_nccl.py --markdown     # the same tables in Markdown (RESULTS.md)
    python benchmarks/validate_nccl.py --only a2a     # rows whose id contains "a2a"
    python benchmarks/validate_nccl.py --no-sweep

``tests/test_validate_nccl.py`` runs every row in CI.
"""

from __future__ import annotations

import argparse
import functools
import math
import os
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REAL = os.path.join(REPO, "tests", "data", "real-inputs")
HGX_A100_NVSMI = os.path.join(REAL, "nvsmi-topo_hgx-a100-80gb-8gpu-8nic-roce_deepep-13.txt")
GB200_CONF = os.path.join(REPO, "examples", "clusters", "gb200-nvl72-2racks.topology.conf")

TOLERANCE = 0.15
GiB = 2 ** 30
MiB = 2 ** 20

# --------------------------------------------------------------------------- systems


@dataclass(frozen=True)
class System:
    """One cluster, as ``rankmap cluster`` flags (``job`` keys of ``build_job_cluster``).

    ``leaf_hosts``: write a Slurm ``topology.conf`` ``SwitchName=leaf1 Nodes=node[1-N]``
    and pass it as ``--fabric`` (0: no fabric, one host).
    """

    key: str
    title: str
    job: tuple = ()                # (key, value) pairs of rankmap cluster's options
    leaf_hosts: int = 0

    def command(self) -> str:
        """The equivalent ``rankmap cluster`` command line."""
        parts = ["rankmap cluster"]
        for k, v in self.job:
            flag = "--" + k.replace("_", "-")
            if k == "rate":
                for r in v:
                    parts.append(f"{flag} {r}")
            elif k == "host_topology":
                parts.append(f"{flag} {os.path.relpath(v, REPO)}")
            elif k == "fabric":
                parts.append(f"{flag} {os.path.relpath(v, REPO)}")
            else:
                parts.append(f"{flag} {v!s}" if not isinstance(v, str) or " " not in v else f"{flag} '{v}'")
        if self.leaf_hosts:
            parts.append(f"--fabric leaf.conf  # SwitchName=leaf1 Nodes=node[1-{self.leaf_hosts}]")
        return " ".join(parts)


def _h100(hosts: int) -> System:
    return System(f"h100x{hosts}", f"{hosts} x HGX H100 (8 GPUs, NVSwitch), 8 x 400G NICs" if hosts > 1
                  else "1 x HGX H100 (8 GPUs, NVSwitch)",
                  (("gpus_per_node", 8), ("gpu", "h100")), hosts if hosts > 1 else 0)


def _dgx_a100(hosts: int) -> System:
    return System(f"dgx-a100x{hosts}",
                  f"{hosts} x DGX A100 (real HGX A100 nvidia-smi topo), 8 x 200G NICs" if hosts > 1
                  else "1 x DGX A100 (real HGX A100 nvidia-smi topo)",
                  (("host_topology", HGX_A100_NVSMI), ("gpu", "a100"), ("rate", ("nic=25",))),
                  hosts if hosts > 1 else 0)


SYSTEMS: dict[str, System] = {s.key: s for s in [
    _h100(1), _h100(2), _h100(4), _h100(8), _h100(16), _h100(32),
    System("h200x1", "1 x HGX H200 (8 GPUs, NVSwitch)", (("gpus_per_node", 8), ("gpu", "h200"))),
    _dgx_a100(1), _dgx_a100(2), _dgx_a100(4),
    System("gb200-nvl72", "GB200 NVL72, one rack (18 trays x 4 GPUs, one NVLink domain)",
           (("gpus_per_node", 4), ("gpu", "gb200"), ("fabric", GB200_CONF), ("nodelist", "r1t[01-18]"))),
]}


@functools.lru_cache(maxsize=None)
def graph(key: str):
    """The cluster graph of system ``key``, built as ``rankmap cluster`` builds it (once)."""
    from rankmap.solver.job.resolve import build_job_cluster

    s = SYSTEMS[key]
    job: dict[str, Any] = {k: (list(v) if isinstance(v, tuple) else v) for k, v in s.job}
    with tempfile.TemporaryDirectory() as tmp:
        if s.leaf_hosts:
            conf = os.path.join(tmp, "leaf.conf")
            with open(conf, "w", encoding="utf-8") as fh:
                fh.write(f"SwitchName=leaf1 Nodes=node[1-{s.leaf_hosts}]\n")
            job["fabric"] = conf
        return build_job_cluster(job)


_CLUSTERS: dict = {}


def cluster(key: str, nccl=None):
    """``(Cluster, forced)`` of system ``key`` with NCCL settings ``nccl`` (a ``NcclModel`` or None).

    ``forced`` is False when ``nccl`` was given but ``cluster_from_graph`` takes no NCCL
    settings (the model's defaults then apply).
    """
    import inspect

    from rankmap.solver import cluster_from_graph

    takes = "nccl" in inspect.signature(cluster_from_graph).parameters
    mkey = (key, nccl.key() if nccl is not None and takes else None)
    if mkey not in _CLUSTERS:
        kw = {"nccl": nccl} if nccl is not None and takes else {}
        _CLUSTERS[mkey] = cluster_from_graph(graph(key), **kw)
    return _CLUSTERS[mkey], nccl is None or takes


# --------------------------------------------------------------------------- rows

#: nccl-tests busbw factor per collective, given n ranks (doc/PERFORMANCE.md).
BUSBW_FACTOR = {
    "all-reduce": lambda n: 2.0 * (n - 1) / n,
    "all-gather": lambda n: (n - 1) / n,
    "reduce-scatter": lambda n: (n - 1) / n,
    "all-to-all": lambda n: (n - 1) / n,
    "sendrecv": lambda n: 1.0,
}

#: collective -> (traffic class, collective kind in rankmap)
CLASS_OF = {
    "all-reduce": ("dp", "all_reduce"),
    "all-gather": ("dp", "all_gather"),
    "reduce-scatter": ("dp", "reduce_scatter"),
    "all-to-all": ("ep", "all_to_all"),
    "sendrecv": ("pp", "p2p_chain"),
}


@dataclass(frozen=True)
class Row:
    """One published figure and the Megatron configuration that runs its collective.

    ``sizes``: ``parallel_config`` keyword arguments besides ``world_size`` (the world is
    every GPU of the system).  ``lo``/``hi``: the published busbw (GB/s), a range or one
    value.  ``derived``: the figure is NCCL's tuning model by hand, not a measurement.
    ``nccl``: NCCL settings of the measurement (``NCCL_ALGO=Ring``: ``(("algorithm", "ring"),)``),
    ``rankmap.solver.NcclModel`` keyword arguments (:func:`nccl_model`).
    """

    id: str
    system: str
    collective: str
    sizes: tuple
    size_bytes: float
    lo: float
    hi: float
    source: str
    derived: bool = False
    nccl: tuple = ()
    note: str = ""

    @property
    def published(self) -> str:
        return f"{self.lo:g}" if self.lo == self.hi else f"{self.lo:g}-{self.hi:g}"


ISSUE = "issue table"
ROWS: tuple[Row, ...] = (
    # ---- one HGX H100 / H200 host
    Row("h100x1-ar", "h100x1", "all-reduce", (("tp", 1),), 4 * GiB, 470, 480,
        "sjeaugey nccl-tests#212 (~480 NVLS); nccl#1455 (480 at 8 GPUs, 2-4 GB); " + ISSUE),
    Row("h100x1-ar-ring", "h100x1", "all-reduce", (("tp", 1),), 4 * GiB, 360, 370,
        "nccl#1455 (NCCL_ALGO=RING 365-370); sjeaugey nccl#1442 (370 app-level); " + ISSUE,
        nccl=(("algorithm", "ring"),)),
    Row("h200x1-ar", "h200x1", "all-reduce", (("tp", 1),), 8 * GiB, 475, 480,
        "nccl-tests#272 (8xH200, 475 NVLS, user); " + ISSUE),
    Row("h100x1-ag", "h100x1", "all-gather", (("tp", 1),), 4 * GiB, 350, 350, "nccl#1281 (user)"),
    Row("h100x1-rs", "h100x1", "reduce-scatter", (("tp", 1),), 4 * GiB, 360, 360, "nccl#1281 (user)"),
    # ---- HGX H100 hosts with 8 x 400G, one leaf (rail-optimised, non-blocking)
    Row("h100x2-ar", "h100x2", "all-reduce", (("tp", 1),), 8 * GiB, 384, 470,
        "nccl-tests#309 (~470 NVLSTree, user); " + ISSUE),
    Row("h100x4-ar", "h100x4", "all-reduce", (("tp", 1),), 8 * GiB, 360, 384,
        "nccl-tests#309 (365.84, user); GTC'24 via nccl#1649 (~370-380); " + ISSUE),
    Row("h100x16-ar", "h100x16", "all-reduce", (("tp", 1),), 8 * GiB, 360, 384,
        "GTC'24 via nccl#1649 (multi-node ~370-380); " + ISSUE),
    Row("h100x8-dp-pp2", "h100x8", "all-reduce", (("tp", 1), ("pp", 2)), 8 * GiB, 360, 384,
        ISSUE + " (data-parallel ring, 8 GPUs/host, 4 hosts): 2 dp groups of 4 hosts at once", ),
    Row("h100x4-dp-tp4", "h100x4", "all-reduce", (("tp", 4),), 8 * GiB, 96, 96,
        ISSUE + " (dp ring 2 GPUs/host: NCCL 2 NICs x 48); H20 log nccl#1189 (4 ch x 24)"),
    Row("h100x4-dp-tp8", "h100x4", "all-reduce", (("tp", 8),), 8 * GiB, 44, 48,
        ISSUE + " (dp ring 1 GPU/host: one NIC); AddyLaddy nccl-tests#267 (CX-7 48-49)"),
    Row("h100x4-ag", "h100x4", "all-gather", (("tp", 1),), 8 * GiB, 384, 384,
        "derived: ring 8 ch x 48 (tuning.cc; nccl.md §2.4, §6.5)", derived=True),
    Row("h100x4-rs", "h100x4", "reduce-scatter", (("tp", 1),), 8 * GiB, 384, 384,
        "derived: ring 8 ch x 48 (tuning.cc; nccl.md §2.4, §6.5)", derived=True),
    Row("h100x2-a2a", "h100x2", "all-to-all", (("ep", 16), ("etp", 1)), 8 * GiB, 85, 96,
        "sjeaugey nccl-tests#130 (2 nodes: 2 x NIC per GPU); " + ISSUE),
    Row("h100x4-a2a", "h100x4", "all-to-all", (("ep", 32), ("etp", 1)), 8 * GiB, 57, 64,
        "sjeaugey nccl-tests#130 (N/(N-1) x NIC per GPU); " + ISSUE),
    Row("h100x16-a2a", "h100x16", "all-to-all", (("ep", 128), ("etp", 1)), 8 * GiB, 48, 51.2,
        "sjeaugey nccl-tests#267 (one NIC, 6 nodes) and #130 (16/15 x 48)"),
    Row("h100x2-sendrecv", "h100x2", "sendrecv", (("tp", 8), ("pp", 2)), 4 * GiB, 48, 49,
        "AddyLaddy nccl-tests#267 (CX-7 NDR 48-49 per NIC)"),
    # ---- DGX A100, 8 x 200G HDR
    Row("a100x1-ar", "dgx-a100x1", "all-reduce", (("tp", 1),), 8 * GiB, 232.5, 240,
        "nccl-tests#175 (232.5, user); derived 12 links x 20 = 240"),
    Row("a100x4-ar", "dgx-a100x4", "all-reduce", (("tp", 1),), 8 * GiB, 192, 192,
        "AddyLaddy nccl#812 (192 = 8 x 24); " + ISSUE),
    Row("a100x2-sendrecv", "dgx-a100x2", "sendrecv", (("tp", 8), ("pp", 2)), 4 * GiB, 24, 24,
        "sjeaugey nccl-tests#119 (24 GB/s peak per 200G NIC)"),
    # ---- GB200 NVL72, one rack (72 GPUs, MNNVL)
    Row("gb200-nvl72-ar", "gb200-nvl72", "all-reduce", (("tp", 1),), 8 * GiB, 835, 847,
        "coreweave/nccl-tests PR #43 (835-847 at 8 GB)"),
)

#: Rows of the sweep only (no published large-message figure to gate on).
SWEEP_ONLY_ROWS: tuple[Row, ...] = (
    Row("h100x32-ag", "h100x32", "all-gather", (("tp", 1),), 2 * GiB, 200, 200,
        "nccl#1218 (32 nodes / 256 GPUs: AG at 2 GiB only ~200 GB/s, user)"),
)

#: Rows swept over sizes, with published mid-size points {size bytes: busbw} where known.
SWEEP_ROWS: dict[str, dict[int, float]] = {
    "h100x1-ar": {},
    "h100x4-ar": {},
    "h100x16-ar": {},
    "h100x4-a2a": {},
    "a100x4-ar": {},
    "gb200-nvl72-ar": {512 * MiB: 586.0, 1 * GiB: 681.0, 2 * GiB: 758.0, 4 * GiB: 839.0},
    "h100x32-ag": {2 * GiB: 200.0},
}
#: What is published about a sweep row's mid-size region, in words.
SWEEP_NOTES: dict[str, str] = {
    "h100x1-ar": 'sjeaugey, nccl-tests#212: "256M is too small to reach peak"; NVLS 480 at 2-4 GB (nccl#1455)',
    "gb200-nvl72-ar": "published: coreweave/nccl-tests PR #43 (586 / 681 / 758 / 839 GB/s at 512 MB / 1 / 2 / 4 GB)",
    "h100x32-ag": "published: nccl#1218 (user), 32 nodes x 8 H100, AG at 2 GiB ~200 GB/s (ring latency regime)",
}
SWEEP_SIZES = tuple(MiB * 2 ** k for k in range(14))   # 1 MiB .. 8 GiB

#: SimAI's efficiency ratios (aliyun/SimAI inputs/ratio/{nvlink,nic,ata}_ratio.csv; nccl.md §4):
#: (table, nodes) -> {size: ratio of peak busbw}.
SIMAI_RATIO = {
    ("nvlink", 1): {16 * MiB: 0.45, 256 * MiB: 0.73, 1 * GiB: 0.77, 4 * GiB: 0.79},
    ("nic", 2): {16 * MiB: 0.32, 256 * MiB: 0.85, 1 * GiB: 0.92, 4 * GiB: 0.95},
    ("nic", 4): {16 * MiB: 0.24, 256 * MiB: 0.77, 1 * GiB: 0.93, 4 * GiB: 0.95},
    ("nic", 16): {16 * MiB: 0.05, 256 * MiB: 0.57, 1 * GiB: 0.76, 4 * GiB: 0.95},
    ("ata", 2): {16 * MiB: 0.52, 256 * MiB: 0.79, 1 * GiB: 0.81, 4 * GiB: 0.80},
    ("ata", 4): {16 * MiB: 0.67, 256 * MiB: 0.92, 1 * GiB: 0.94, 4 * GiB: 0.95},
    ("ata", 16): {16 * MiB: 0.62, 256 * MiB: 0.75, 1 * GiB: 0.85, 4 * GiB: 0.89},
}


# --------------------------------------------------------------------------- prediction


@dataclass
class Result:
    """One row's prediction."""

    row: Row
    size_bytes: float
    n: int                   # ranks of one communicator
    hosts: int               # hosts one communicator spans
    groups: int              # communicators of the class running at once
    seconds: float
    latency_seconds: float
    busbw: float             # GB/s
    algorithm: str
    channels: str
    bottleneck: str
    extra: dict = field(default_factory=dict)

    @property
    def ratio(self) -> float:
        """predicted / the nearest end of the published range (1.0 inside it)."""
        lo, hi = self.row.lo, self.row.hi
        if self.busbw < lo:
            return self.busbw / lo
        if self.busbw > hi:
            return self.busbw / hi
        return 1.0

    @property
    def ok(self) -> bool:
        return (1 - TOLERANCE) * self.row.lo <= self.busbw <= (1 + TOLERANCE) * self.row.hi


def _kind(kind: str) -> str:
    """rankmap's collective kind for ``kind``; reduce-scatter falls back to the all-gather ring."""
    from rankmap.solver.traffic import COLLECTIVE_KINDS

    if kind in COLLECTIVE_KINDS:
        return kind
    if kind == "reduce_scatter":
        return "all_gather"
    raise ValueError(kind)


def nccl_model(row: Row):
    """The time model's NCCL settings for ``row`` (``rankmap.solver.NcclModel(**row.nccl)``), or None.

    None when the model has no such settings (before NCCL's behaviour landed) or the row
    needs none; the row is then predicted with the model's default choices.
    """
    if not row.nccl:
        return None
    from rankmap.solver import NcclModel

    return NcclModel(**dict(row.nccl))


def _fmt_channels(cc) -> str:
    ch = getattr(cc, "channels", None)
    if ch is None or ch == "":
        return "-"
    if isinstance(ch, float) and ch.is_integer():
        ch = int(ch)
    return str(ch)


def predict(row: Row, size_bytes: float | None = None) -> Result:
    """Predicted busbw of ``row`` at ``size_bytes`` (default: the size of the published figure)."""
    from rankmap.solver import layout_cost, megatron_groups, parallel_config
    from rankmap.solver.traffic import CLASS_GROUP, Collective, Traffic

    s = float(size_bytes if size_bytes is not None else row.size_bytes)
    cl, forced = cluster(row.system, nccl_model(row))
    world = len(cl.devices)
    cfg = parallel_config(world_size=world, **dict(row.sizes))
    cls, kind = CLASS_OF[row.collective]
    traffic = Traffic({cls: s}, {cls: (Collective(_kind(kind), s),)})
    groups = megatron_groups(cfg)
    arr = np.asarray(groups[CLASS_GROUP[cls]])
    n = int(arr.shape[1])
    host_of = [cl.devices[i].split("/")[0] for i in range(world)]
    hosts = len({host_of[int(r)] for r in arr[0]})
    cost = layout_cost(cl, cfg, np.arange(world), traffic, groups=groups)
    cc = cost.classes[cls]
    t = float(cc.seconds)
    busbw = s / t * BUSBW_FACTOR[row.collective](n) / 1e9 if t > 0 else math.inf
    b = cc.bottleneck
    bott = (f"{b.kind}: {b.link[0]}->{b.link[1]}" if getattr(b, "link", None) else str(getattr(b, "kind", "-")))
    algo = str(getattr(cc, "algorithm", None) or "-")
    if row.nccl and not forced:
        algo += " (" + ",".join(f"{k}={v}" for k, v in row.nccl) + " not settable)"
    return Result(row, s, n, hosts, int(arr.shape[0]), t, float(getattr(cc, "latency_seconds", 0.0) or 0.0),
                  busbw, algo, _fmt_channels(cc), bott)


def run_rows(only: str | None = None) -> list[Result]:
    """Every row (or those whose id contains ``only``) at its published size."""
    return [predict(r) for r in ROWS if not only or only in r.id]


def row_by_id(row_id: str) -> Row:
    for r in ROWS + SWEEP_ONLY_ROWS:
        if r.id == row_id:
            return r
    raise KeyError(row_id)


def sweep(row_id: str, sizes=SWEEP_SIZES) -> list[Result]:
    """``row_id`` predicted at each size."""
    row = row_by_id(row_id)
    return [predict(row, sz) for sz in sizes]


# --------------------------------------------------------------------------- output


def _size(b: float) -> str:
    for unit, f in (("GiB", GiB), ("MiB", MiB)):
        if b >= f and b % f == 0:
            return f"{int(b // f)} {unit}"
    return f"{b:g} B"


ROW_HEADER = ("row", "system", "collective", "config", "GPUs", "hosts", "size", "predicted", "published", "ratio",
              "within 15%", "algorithm", "channels", "latency", "source")


def _row_cells(r: Result) -> tuple:
    row = r.row
    cfg = " ".join(f"{k}={v}" for k, v in row.sizes)
    if r.groups > 1:
        cfg += f" ({r.groups} groups)"
    if row.nccl:
        cfg += " " + " ".join(f"NCCL {k}={v}" for k, v in row.nccl)
    pub = row.published + (" (derived)" if row.derived else "")
    return (row.id, row.system, row.collective, cfg, str(r.n), str(r.hosts), _size(r.size_bytes),
            f"{r.busbw:.1f}", pub, f"{r.ratio:.2f}", "yes" if r.ok else "NO", r.algorithm, r.channels,
            f"{r.latency_seconds * 1e6:.0f} us", row.source)


def _text_table(header, rows) -> str:
    w = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
    line = lambda cells: "  ".join(str(c).ljust(w[i]) for i, c in enumerate(cells)).rstrip()  # noqa: E731
    return "\n".join([line(header), line(["-" * x for x in w]), *(line(r) for r in rows)])


def _md_table(header, rows) -> str:
    esc = lambda s: str(s).replace("|", "\\|")  # noqa: E731
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join(esc(c) for c in r) + " |" for r in rows]
    return "\n".join(out)


def _simai(row: Row, hosts: int) -> dict[int, float]:
    if row.collective == "all-to-all":
        return SIMAI_RATIO.get(("ata", hosts), {})
    if hosts == 1:
        return SIMAI_RATIO.get(("nvlink", 1), {})
    return SIMAI_RATIO.get(("nic", hosts), {})


def sweep_tables(rows=None):
    """[(row id, title, header, cells, half-peak size)] for the sweep rows."""
    out = []
    for rid, points in SWEEP_ROWS.items():
        if rows is not None and rid not in rows:
            continue
        res = sweep(rid)
        row = res[0].row
        peak = res[-1].busbw
        ref_peak = 0.5 * (row.lo + row.hi)
        ratios = _simai(row, res[0].hosts)
        cells = []
        half = next((r.size_bytes for r in res if r.busbw >= 0.5 * peak), None)
        for r in res:
            pub = points.get(int(r.size_bytes))
            sim = ratios.get(int(r.size_bytes))
            cells.append((_size(r.size_bytes), f"{r.busbw:.1f}", f"{r.busbw / peak:.2f}" if peak else "-",
                          r.algorithm, r.channels, f"{r.latency_seconds * 1e6:.0f}",
                          f"{pub:g}" if pub is not None else "",
                          f"{r.busbw / pub:.2f}" if pub else "",
                          f"{sim * ref_peak:.0f} ({sim:.2f})" if sim is not None else ""))
        header = ("size", "predicted busbw", "share of 8 GiB", "algorithm", "channels", "latency us", "published",
                  "ratio", "SimAI ratio x published peak")
        title = (f"{rid}: {row.collective}, {SYSTEMS[row.system].title}, n={res[0].n}; "
                 f"half of the 8 GiB busbw reached at {_size(half) if half else '-'}")
        if rid in SWEEP_NOTES:
            title += f" ({SWEEP_NOTES[rid]})"
        out.append((rid, title, header, cells, half))
    return out


def render(results: list[Result], sweeps, markdown: bool) -> str:
    table = _md_table if markdown else _text_table
    parts = []
    cells = [_row_cells(r) for r in results]
    if markdown:
        parts.append(table(ROW_HEADER, cells))
        parts.append("\nSystems (built as a user does):\n")
        used = sorted({r.row.system for r in results}, key=list(SYSTEMS).index)
        parts += [f"* `{k}`: {SYSTEMS[k].title}; `{SYSTEMS[k].command()}`" for k in used]
    else:
        parts.append(table(ROW_HEADER[:-1], [c[:-1] for c in cells]))
        parts.append("\nsources:")
        parts += [f"  {r.row.id}: {r.row.source}" for r in results]
        parts.append("\nsystems:")
        used = sorted({r.row.system for r in results}, key=list(SYSTEMS).index)
        parts += [f"  {k}: {SYSTEMS[k].title}\n      {SYSTEMS[k].command()}" for k in used]
    for rid, title, header, sc, _ in sweeps:
        parts.append(("\n**" + title + "**\n") if markdown else ("\n" + title))
        parts.append(table(header, sc))
    bad = [r for r in results if not r.ok]
    parts.append(f"\n{len(results) - len(bad)}/{len(results)} rows within {TOLERANCE:.0%}"
                 + (": outside: " + ", ".join(f"{r.row.id} ({r.ratio:.2f})" for r in bad) if bad else ""))
    return "\n".join(parts) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--markdown", action="store_true", help="Markdown tables (for benchmarks/RESULTS.md)")
    ap.add_argument("-o", "--output", metavar="FILE", help="write the tables to FILE instead of stdout")
    ap.add_argument("--only", metavar="TEXT", help="rows whose id contains TEXT (the sweep too)")
    ap.add_argument("--no-sweep", action="store_true", help="skip the 1 MiB .. 8 GiB sweeps")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    results = run_rows(args.only)
    sweeps = [] if args.no_sweep else sweep_tables(
        None if not args.only else [k for k in SWEEP_ROWS if args.only in k])
    text = render(results, sweeps, args.markdown)
    text += f"({time.perf_counter() - t0:.1f} s)\n" if not args.markdown else ""
    if args.output:
        with open(args.output, "w", encoding="utf-8") as fh:
            fh.write(text)
    else:
        sys.stdout.write(text)
    return 0 if all(r.ok for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
