"""``nvidia-smi topo -m`` matrices -> one host of the cluster graph.

Accepted variations (all seen in ``tests/data/real-inputs``): space- or tab-separated cells,
``" X "`` padding, ANSI underline codes around the header, NIC columns named ``NIC#`` (with
or without a ``NIC Legend`` mapping them to ``mlx5_#``) or named directly (``mlx5_2``,
in any order), optional ``CPU Affinity`` / ``NUMA Affinity`` / ``GPU NUMA ID`` columns,
old (``PIX = ... a single PCIe switch``) and new legends, and the pre-2017 ``SOC`` label
(read as ``SYS``).

How the matrix becomes a graph
------------------------------
*PCIe.*  The PCIe classes are distances in a tree: ``PIX`` (1) < ``PXB`` (2) < ``PHB`` (3)
< ``NODE`` (4) < ``SYS`` (5).  Devices (GPUs and NICs) are clustered by single linkage at
each level; a cluster first formed at level 1 or 2 becomes a ``pcie_switch`` node, at
level 3 a ``host_bridge`` node, and every level-4 cluster (devices within one NUMA node)
a ``cpu`` node.  Each edge is one PCIe link: from a child to the node where it first joins
others, at the rate of that level (``pix``, ``pxb``, ``phb``, ``node``: the x16 rate of the
GPU's PCIe generation unless overridden, e.g. Gen4 x16 = 31.5 GB/s), so the narrowest link
between two devices is the rate of their class.  ``cpu`` nodes are joined by the socket link
at ``sys`` (NCCL's constant for the CPU, e.g. Sapphire Rapids 22 GB/s); three or more
sockets hang off one ``sys`` node (:func:`~.common.link_sockets`).  When the matrix puts
GPUs of one ``NUMA Affinity`` into different level-4 clusters (every pair ``SYS`` on some
PCIe-only boxes), those clusters hang off one ``cpu`` node of that NUMA node through
``sys``-rate links instead (one ``cpu`` per NUMA node).  ``CPU Affinity`` alone is not
trusted for this (the DGX-1 dump shows the same CPU list on both sockets).  A pair shown as
``NV#`` says nothing about its PCIe class; two GPUs in that case are assumed to share a NUMA
node when their ``NUMA Affinity`` (else ``CPU Affinity``) agree and no other pair of their
clusters is ``SYS``.  With two or more NICs, GPUs are then linked to their nearest NICs
(:class:`~.common.HostTemplate`, module docstring of :mod:`.common`).

*NVLink.*  ``NV#`` is the number of bonded links, so the bundle's capacity is ``# x nvlink``
with the per-link rate of the GPU generation (``gpu=``; NVLink 2/3/4: 25 GB/s per link per
direction, NVLink 5: 50; see :mod:`.common`).  When every GPU pair of three or more shows the
same ``NV#`` and ``# x (GPUs - 1)`` exceeds the links a GPU has (the generation's count, 18
when unknown), the links cannot be direct: it is an NVSwitch board, where nvidia-smi shows
each GPU's full link count on every pair (A100 NV12: 12 x 25 = 300 GB/s; H100 NV18: 18 x 25 =
450 GB/s), and every GPU gets one edge of that capacity to one ``nvswitch`` node.
Otherwise each ``NV#`` pair gets a direct GPU-GPU edge of ``# x nvlink`` (a 4-GPU NV4 full
mesh, DGX-1 hybrid cube mesh, NVLink bridges); routes do not relay through a third GPU.

*Generation.*  Without ``gpu=``, the generation is guessed from the largest ``NV#``:
NV18 -> Hopper (use ``gpu="b200"`` for Blackwell, which also shows NV18), NV12 -> A100,
NV8 -> A800/H800, NV6/NV2/NV1 -> V100, otherwise an unknown GPU (25 GB/s per link, PCIe
Gen4).  The guess is recorded in the graph's ``warnings``.
"""

from __future__ import annotations

import re
from typing import Any

import networkx as nx

from ..errors import InvalidArgumentError
from .common import (
    GENERATIONS,
    HostTemplate,
    check_rate_overrides,
    default_rates,
    link_sockets,
    read_text,
    resolve_generation,
)
from .safe import is_strict_int_text

__all__ = ["parse_topo_matrix", "read_nvsmi", "looks_like_nvsmi", "CLASS_LEVELS"]

#: PCIe distance class -> level (SOC is the pre-2017 name of SYS).
CLASS_LEVELS = {"PIX": 1, "PXB": 2, "PHB": 3, "NODE": 4, "SYS": 5, "SOC": 5}
_LEVEL_RATE = {1: "pix", 2: "pxb", 3: "phb", 4: "node", 5: "sys"}
_LEVEL_NAME = {1: "PIX", 2: "PXB", 3: "PHB", 4: "NODE", 5: "SYS"}

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_AFFINITY = re.compile(r"GPU\s+NUMA\s+ID|CPU\s+Affinity|NUMA\s+Affinity|Affinity", re.I)
_GPU = re.compile(r"^GPU([0-9]{1,9})$", re.ASCII)
_NV = re.compile(r"^NV([0-9]{1,4})$", re.ASCII)
_LEGEND_NIC = re.compile(r"^\s*(NIC[0-9]+)\s*:\s*(\S+)\s*$", re.ASCII)

#: NVLinks per GPU when the generation is unknown: the most any GPU has (NVLink 4 and 5: 18).
MAX_NVLINKS_PER_GPU = 18


def looks_like_nvsmi(text: str) -> bool:
    """True when ``text`` has a ``topo -m`` header (a line of ``GPU0 GPU1 ...`` labels)."""
    for line in _ANSI.sub("", text).splitlines()[:200]:
        toks = line.split()
        if toks and _GPU.match(toks[0]) is None and any(_GPU.match(t) for t in toks):
            return True
        if toks and toks[0] == "GPU0" and len(toks) > 1 and _GPU.match(toks[1]):
            return True
    return False


def _is_value(tok: str) -> bool:
    return tok == "X" or tok in CLASS_LEVELS or _NV.match(tok) is not None


class _UF:
    def __init__(self, items):
        self.p = {i: i for i in items}

    def find(self, x):
        p = self.p
        while p[x] != x:
            p[x] = p[p[x]]
            x = p[x]
        return x

    def union(self, a, b):
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.p[rb] = ra


def _infer_generation(max_nv: int):
    if max_nv >= 18:
        return GENERATIONS["h100"], "NV18 (Hopper; Blackwell also shows NV18: pass gpu='b200' for it)"
    if max_nv == 12:
        return GENERATIONS["a100"], "NV12 (A100 SXM4)"
    if max_nv == 8:
        return GENERATIONS["a800"], "NV8 (A800/H800 export parts, 25 GB/s per link either way)"
    if max_nv in (1, 2, 6):
        return GENERATIONS["v100"], f"NV{max_nv} (V100: DGX-1 hybrid cube mesh or DGX-2)"
    return None, ""


def parse_topo_matrix(text: str, gpu: Any = None, source: str = "nvidia-smi topo -m", **rate_overrides: Any
                      ) -> HostTemplate:
    """Parse the text of ``nvidia-smi topo -m`` into a :class:`~.common.HostTemplate`.

    Parameters
    ----------
    text : str
        The command's output (the matrix, optionally followed by the legends).
    gpu : str or float, optional
        GPU generation (``"h100"``, ``"a100"``, ``"v100"``, ``"a30"``, ...) or an explicit
        per-link NVLink rate in GB/s.  Guessed from the ``NV#`` labels when omitted.
    source : str
        File name used in error messages (``"<source> line N: ..."``).
    **rate_overrides
        ``nvlink pcie pix pxb phb node sys nic`` in GB/s (see :mod:`.common`).

    Raises
    ------
    InvalidArgumentError
        No header line, a row with too few cells, an unknown cell value, ``NV#`` between a
        GPU and a NIC; the message names the line.
    """
    overrides = check_rate_overrides(rate_overrides)
    gen = resolve_generation(gpu)
    lines = _ANSI.sub("", text.replace("\r", "")).split("\n")

    # ---- header
    header_i = None
    for i, line in enumerate(lines):
        toks = line.split()
        if any(_GPU.match(t) for t in toks) and not any(_is_value(t) for t in toks):
            header_i = i
            break
    if header_i is None:
        raise InvalidArgumentError(f"{source}: no 'GPU0 GPU1 ...' header line found; not `nvidia-smi topo -m` output",
                                   "host_topology")
    header = lines[header_i]
    aff_cols = [m.group(0) for m in _AFFINITY.finditer(header)]
    first_aff = _AFFINITY.search(header)
    dev_part = header[: first_aff.start()] if first_aff else header
    devices = dev_part.split()
    if not devices or not any(_GPU.match(d) for d in devices):
        raise InvalidArgumentError(f"{source} line {header_i + 1}: header has no GPU columns", "host_topology")
    if len(set(devices)) != len(devices):
        raise InvalidArgumentError(f"{source} line {header_i + 1}: a column name is repeated", "host_topology")
    ndev = len(devices)
    col = {d: j for j, d in enumerate(devices)}

    # ---- rows and legend
    rows: dict[str, tuple[list[str], list[str], int]] = {}
    legend: dict[str, str] = {}
    in_legend = False
    for i in range(header_i + 1, len(lines)):
        line = lines[i]
        stripped = line.strip()
        if not stripped:
            continue
        if stripped.lower().startswith("legend") or stripped.lower().startswith("nic legend"):
            in_legend = True
            continue
        if in_legend:
            m = _LEGEND_NIC.match(line)
            if m:
                legend[m.group(1)] = m.group(2)
            continue
        toks = stripped.split()
        name = toks[0]
        if name not in col:
            if len(toks) > 1 and all(_is_value(t) for t in toks[1: min(len(toks), 4)]):
                raise InvalidArgumentError(
                    f"{source} line {i + 1}: row {name!r} is not one of the header columns", "host_topology")
            continue
        if name in rows:
            raise InvalidArgumentError(f"{source} line {i + 1}: row {name!r} appears twice", "host_topology")
        vals = toks[1: 1 + ndev]
        if len(vals) < ndev:
            raise InvalidArgumentError(
                f"{source} line {i + 1}: row {name} has {len(vals)} cells, expected {ndev}", "host_topology")
        for j, v in enumerate(vals):
            if not _is_value(v):
                raise InvalidArgumentError(
                    f"{source} line {i + 1}: row {name}, column {devices[j]}: unknown value {v!r} "
                    f"(expected X, NV#, PIX, PXB, PHB, NODE or SYS)", "host_topology")
            if (v == "X") != (devices[j] == name):
                raise InvalidArgumentError(
                    f"{source} line {i + 1}: row {name}, column {devices[j]}: {v!r} "
                    f"({'X must be on the diagonal' if v == 'X' else 'the diagonal must be X'})", "host_topology")
        rows[name] = (vals, toks[1 + ndev:], i + 1)
    gpu_names = [d for d in devices if _GPU.match(d)]
    missing = [g for g in gpu_names if g not in rows]
    if missing:
        raise InvalidArgumentError(f"{source}: no matrix row for {', '.join(missing)}", "host_topology")
    nic_names = [d for d in devices if not _GPU.match(d)]
    idx = {g: int(_GPU.match(g).group(1)) for g in gpu_names}
    if len(set(idx.values())) != len(idx):
        raise InvalidArgumentError(f"{source}: GPU indices repeat", "host_topology")

    warnings: list[str] = []

    # ---- pairwise classes
    def cell(a: str, b: str) -> str | None:
        r = rows.get(a)
        return r[0][col[b]] if r else None

    known: dict[tuple[str, str], int] = {}
    nvl: dict[tuple[str, str], int] = {}
    for ai, a in enumerate(devices):
        for b in devices[ai + 1:]:
            vals = [v for v in (cell(a, b), cell(b, a)) if v is not None]
            if not vals:  # two NICs without rows: no information
                continue
            if len(vals) == 2 and vals[0] != vals[1]:
                warnings.append(f"{a}-{b} is {vals[0]} one way and {vals[1]} the other; using the closer")

            def closeness(v):
                m = _NV.match(v)
                return (0, -int(m.group(1))) if m else (1, CLASS_LEVELS[v])

            v = min(vals, key=closeness)
            m = _NV.match(v)
            if m:
                if a not in idx or b not in idx:
                    raise InvalidArgumentError(f"{source} line {rows[a][2] if a in rows else rows[b][2]}: "
                                               f"{v} between {a} and {b}, but NVLink joins GPUs only", "host_topology")
                nvl[(a, b)] = int(m.group(1))
            else:
                known[(a, b)] = CLASS_LEVELS[v]

    # ---- generation and rates
    max_nv = max(nvl.values(), default=0)
    if gen is None:
        gen, why = _infer_generation(max_nv)
        if gen is not None:
            warnings.append(f"GPU generation not given; assumed {gen.name} from {why}")
        elif max_nv:
            warnings.append("GPU generation not given; NVLink rate of an unknown GPU assumed (25 GB/s per link)")
    rates = default_rates(gen, overrides)

    # ---- affinity (GPU rows only)
    aff_key: dict[str, Any] = {}
    numa_of: dict[str, int] = {}
    cpu_aff: dict[str, str] = {}
    for g in gpu_names:
        extra = rows[g][1]
        info = dict(zip([re.sub(r"\s+", " ", c).lower() for c in aff_cols], extra))
        numa = info.get("numa affinity")
        cpus = info.get("cpu affinity") or info.get("affinity")
        if cpus and cpus.upper() != "N/A":
            cpu_aff[g] = cpus
        if numa is not None and numa.upper() != "N/A":
            if is_strict_int_text(numa.strip(), signed=True):
                numa_of[g] = int(numa.strip())
        aff_key[g] = ("numa", numa_of[g]) if g in numa_of else (("cpu", cpus) if g in cpu_aff else None)

    # ---- PCIe clustering
    uf = {k: _UF(devices) for k in (1, 2, 3, 4)}
    for (a, b), lvl in known.items():
        for k in range(lvl, 5):
            uf[k].union(a, b)
    # NV pairs: no PCIe class shown; same NUMA node unless contradicted by a SYS pair
    for (a, b) in nvl:
        if aff_key.get(a) != aff_key.get(b):
            continue
        ra, rb = uf[4].find(a), uf[4].find(b)
        if ra == rb:
            continue
        ca = [d for d in devices if uf[4].find(d) == ra]
        cb = [d for d in devices if uf[4].find(d) == rb]
        if any(known.get((x, y), known.get((y, x))) == 5 for x in ca for y in cb):
            continue
        uf[4].union(a, b)

    t = HostTemplate(gpu=gen.name if gen else "generic", rates=rates, source=source, format="nvidia-smi topo -m",
                     warnings=warnings)
    for g in sorted(gpu_names, key=idx.get):
        attrs: dict[str, Any] = {"kind": "gpu", "local_index": idx[g]}
        if g in numa_of:
            attrs["numa"] = numa_of[g]
        if g in cpu_aff:
            attrs["cpu_affinity"] = cpu_aff[g]
        t.add_node(f"gpu{idx[g]}", **attrs)
    suffix = {g: f"gpu{idx[g]}" for g in gpu_names}
    for j, n in enumerate(nic_names):
        name = legend.get(n, n)
        suffix[n] = f"nic:{name}"
        t.add_node(suffix[n], kind="nic", name=name, nic_index=j, port_bandwidth=rates["nic"])
    if len(set(suffix.values())) != len(suffix):
        raise InvalidArgumentError(f"{source}: NIC names repeat after applying the NIC legend", "host_topology")

    # internal nodes: built with provisional ids, named at the end
    cur = {d: ("dev", d) for d in devices}  # current representative of each device's set
    first_level = {("dev", d): 0 for d in devices}
    kinds: dict[tuple, str] = {}
    edges: list[tuple[tuple, tuple, float, str, str]] = []
    members: dict[tuple, list[str]] = {}
    order = {d: i for i, d in enumerate(devices)}
    counter = 0
    tops: list[tuple[tuple, list[str]]] = []  # the node of each level-4 (NODE) cluster
    for k in (1, 2, 3, 4):
        comps: dict[str, list[str]] = {}
        for d in devices:
            comps.setdefault(uf[k].find(d), []).append(d)
        for comp in sorted(comps.values(), key=lambda c: min(order[d] for d in c)):
            reps = list(dict.fromkeys(cur[d] for d in comp))
            if k < 4:
                if len(reps) < 2:
                    continue
                counter += 1
                node = ("int", counter)
                kinds[node] = "pcie_switch" if k <= 2 else "host_bridge"
                first_level[node] = k
                for r in reps:
                    edges.append((r, node, rates[_LEVEL_RATE[k]], "pcie", _LEVEL_NAME[k]))
            else:
                if len(reps) >= 2:
                    counter += 1
                    node = ("int", counter)
                    first_level[node] = 4
                    kinds[node] = "cpu"
                    for r in reps:
                        edges.append((r, node, rates["node"], "pcie", "NODE"))
                elif reps[0][0] == "int" and first_level[reps[0]] == 3:
                    node = reps[0]  # devices joined through the host bridge = the whole NUMA node
                    kinds[node] = "cpu"
                elif reps[0][0] == "int":
                    counter += 1
                    node = ("int", counter)
                    first_level[node] = 4
                    kinds[node] = "cpu"
                    edges.append((reps[0], node, rates["phb"], "pcie", "PHB"))
                else:
                    node = reps[0]  # a device with no PCIe neighbour
                tops.append((node, comp))
            members[node] = comp
            for d in comp:
                cur[d] = node

    # Clusters the matrix separates by SYS although their GPUs report the same NUMA node
    # (e.g. an all-SYS PCIe box) hang off one cpu node through SYS-rate links.
    groups: dict[Any, list[tuple[tuple, list[str]]]] = {}
    for node, comp in tops:
        keys = {numa_of.get(d) for d in comp if d in idx} - {None}  # CPU affinity alone is unreliable
        key = ("aff", keys.pop()) if len(keys) == 1 else ("own", node)
        groups.setdefault(key, []).append((node, comp))
    cpu_nodes: list[tuple] = []
    for key, items in groups.items():
        if len(items) == 1:
            node, comp = items[0]
            if node[0] == "dev":
                counter += 1
                cpu = ("int", counter)
                kinds[cpu] = "cpu"
                members[cpu] = comp
                edges.append((node, cpu, rates["phb"], "pcie", "PHB"))
                node = cpu
            cpu_nodes.append(node)
            continue
        counter += 1
        cpu = ("int", counter)
        kinds[cpu] = "cpu"
        members[cpu] = [d for _, comp in items for d in comp]
        for node, comp in items:
            if node[0] == "int" and kinds[node] == "cpu":
                kinds[node] = "host_bridge"
                first_level.setdefault(node, 4)
            edges.append((node, cpu, rates["sys"], "sys", "SYS"))
        cpu_nodes.append(cpu)

    names: dict[tuple, str] = {("dev", d): suffix[d] for d in devices}
    count = {"cpu": 0, "pcie_switch": 0, "host_bridge": 0}
    prefix = {"cpu": "cpu", "pcie_switch": "pcie", "host_bridge": "hostbridge"}
    internal = sorted(kinds, key=lambda n: (0 if kinds[n] == "cpu" else 1,
                                              cpu_nodes.index(n) if n in cpu_nodes else n[1]))
    for node in internal:
        kind = kinds[node]
        names[node] = f"{prefix[kind]}{count[kind]}"
        count[kind] += 1
        attrs = {"kind": kind}
        if kind != "cpu":
            attrs["level"] = _LEVEL_NAME[first_level[node]]
        else:
            numas = {numa_of[d] for d in members[node] if d in numa_of}
            if len(numas) == 1:
                attrs["numa"] = numas.pop()
        t.add_node(names[node], **attrs)
    for a, b, rate, link, cls in edges:
        t.add_edge(names[a], names[b], rate, link=link, pcie_class=cls)
    link_sockets(t, [(names[c], rates["sys"]) for c in cpu_nodes], link="sys", pcie_class="SYS")

    # ---- NVLink
    if nvl:
        ordered = sorted(gpu_names, key=idx.get)
        all_pairs = [(a, b) for i, a in enumerate(ordered) for b in ordered[i + 1:]]
        counts = {nvl.get((a, b), nvl.get((b, a))) for a, b in all_pairs}
        per_gpu = gen.links if gen is not None and gen.links > 0 else MAX_NVLINKS_PER_GPU
        c = next(iter(counts)) if len(counts) == 1 else None
        if len(ordered) >= 3 and c is not None and c * (len(ordered) - 1) > per_gpu:
            # NV# on every pair, more links than a GPU has if they were direct: an NVSwitch board
            t.add_node("nvswitch", kind="nvswitch")
            for g in ordered:
                t.add_edge(suffix[g], "nvswitch", c * rates["nvlink"], link="nvlink", nvlinks=c)
        else:
            for (a, b), c in nvl.items():
                t.add_edge(suffix[a], suffix[b], c * rates["nvlink"], link="nvlink", nvlinks=c)
    return t.finish()


def read_nvsmi(path: Any, gpu: Any = None, host: str = "host0", **rate_overrides: Any) -> nx.Graph:
    """Read an ``nvidia-smi topo -m`` file into a one-host cluster graph (ids ``"<host>/gpu0"``)."""
    text = read_text(path, "host_topology")
    return parse_topo_matrix(text, gpu=gpu, source=str(path), **rate_overrides).to_graph(host)
