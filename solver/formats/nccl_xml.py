"""NCCL topology XML (``NCCL_TOPO_DUMP_FILE`` dumps and hand-written ``NCCL_TOPO_FILE``s).

Read as NCCL reads it (``src/graph/topo.cc``, ``ncclTopoGetSystemFromXml``); every edge is
one physical link with its capacity in GB/s per direction (DESIGN §2):

* ``<cpu numaid=...>`` -> a ``cpu`` node; the CPUs of the file are joined by socket links at
  the rate NCCL picks from ``arch``/``vendor``/``familyid``/``modelid`` (BDW 6, SKL 10,
  SRP 22, ERP 40, AMD Zen1/2 16, Zen3/4 24, Zen5 32 GB/s, ``src/graph/topo.h``), else the
  ``sys`` default (three or more sockets: a star through one ``sys`` node, see
  :func:`~.common.link_sockets`).
* ``<pci class="0x0604..">`` (bridge) -> a ``pcie_switch`` node.  Every ``<pci>`` is
  linked to its parent by one PCIe link of its own ``link_speed`` x ``link_width`` (per-lane
  rates of bandwidths.md §4: Gen4 x16 = 31.5, Gen5 x16 = 63 GB/s); ``link_width="0"`` counts
  as x16, as in NCCL.
* ``<pci class="0x03....">`` -> a GPU; ``local_index`` is ``<gpu dev=...>`` or, in
  hand-written files without ``<gpu>``, the order of appearance.
* ``<pci class="0x02....">`` and ``<nic>`` -> one ``nic`` node per ``<net>`` (or one per
  NIC device when there is no ``<net>``); its port rate ``port_bandwidth`` is ``speed`` in
  Mb/s / 8000 (``speed="400000"``: ConnectX-7 400 Gb/s = 50 GB/s; bandwidths.md §3); a
  missing or non-positive speed gives the ``nic`` default.  That port is the NIC's link to
  the leaf switch when hosts are placed in a fabric.  With two or more NICs in use, GPUs are
  linked to their nearest NICs (module docstring of :mod:`.common`).
* ``<nvlink target=... count=N tclass=...>``: to a GPU (``tclass 0x03..``) -> a direct
  GPU-GPU edge of ``N x nvlink`` (both ends list the same bundle: the larger count is
  used); to an NVSwitch (``0x068000``, or an unknown target) -> all such links of a GPU are
  summed onto one edge to one ``nvswitch`` node, as NCCL does (H100: 5 + 5 + 4 + 4 = 18
  links to four NVSwitch chips, 18 x 25 = 450 GB/s); to a CPU (``0x068001`` / ``0x06..``)
  -> an edge to the GPU's ``cpu`` node (summed with the GPU's PCIe link when that also ends
  at the CPU: parallel links are one edge).
* The per-link NVLink rate comes from ``gpu=`` or else from ``<gpu sm=...>`` (sm60 P100,
  sm70 V100, sm80 A100, sm86 GA102, sm90 Hopper, sm100 Blackwell): NVLink 2/3/4 25 GB/s,
  NVLink 5 50 GB/s per link per direction.

XML comments are ignored.  Virtual machines report odd PCIe values (the IBM H100 dump
has ``2.5 GT/s`` x1 bridges): they are kept as written, so such uplinks are slow, but no
GPU-GPU or GPU-NIC path in that file crosses them.  Pass ``pcie=`` to replace every PCIe
rate.  A file whose ``<cpu>`` elements carry different ``host_hash`` values describes
several hosts and is refused.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from typing import Any

import networkx as nx

from ..fabric.graph import MAX_LOCAL_INDEX
from ..errors import InvalidArgumentError
from .common import (
    GENERATIONS,
    HostTemplate,
    check_rate_overrides,
    default_rates,
    generation_from_sm,
    link_sockets,
    nccl_inter_cpu_rate,
    pcie_rate,
    read_text,
    resolve_generation,
)
from .safe import is_strict_int_text
from .safe_xml import parse_xml

__all__ = ["parse_nccl_xml", "read_nccl_xml", "looks_like_nccl_xml"]

#: Most NVLinks in one ``<nvlink count=...>`` bundle (a GB200 has 18; larger is a typo).
MAX_NVLINKS = 1024


def looks_like_nccl_xml(text: str) -> bool:
    """True for XML text whose root element is ``<system>``."""
    head = text.lstrip()[:4096]
    return head.startswith("<") and "<system" in text


def _busid(text: str | None) -> str:
    return (text or "").strip().lower()


#: GPU generations by compute capability family: ``--gpu`` may name another generation of the XML's
#: family (an H200 for an sm90 file, GB200 for sm100: README "NVLinks a file leaves out"), not another family.
_FAMILY = {"p100": "sm60", "v100": "sm70", "a100": "sm80", "a800": "sm80", "a30": "sm80", "ga102": "sm86",
           "h100": "sm90", "h200": "sm90", "h800": "sm90", "h20": "sm90", "b200": "sm100", "gb200": "sm100",
           "b300": "sm103", "gb300": "sm103"}


def _check_generation(gen, gpu, sm, source: str) -> None:
    """Refuse a ``gpu`` generation of another compute capability family than the XML's ``<gpu sm=...>``.

    Raises
    ------
    InvalidArgumentError
        Naming both (field ``gpu``).  An explicit NVLink rate (a number), an unknown ``sm`` or a
        generation outside :data:`_FAMILY` (Ada, generic) is not checked.
    """
    xml = generation_from_sm(sm)
    mine, theirs = _FAMILY.get(gen.name), _FAMILY.get(xml.name) if xml is not None else None
    if mine is None or theirs is None or mine == theirs:
        return
    same = sorted(n for n, f in _FAMILY.items() if f == theirs)
    raise InvalidArgumentError(
        f"--gpu {str(gpu)[:40]} ({gen.name.upper()}, {mine}) contradicts {source}, whose GPUs are sm={sm} "
        f"({xml.name.upper()}); give --gpu {' or '.join(same)}, or leave it out", "gpu")


def parse_nccl_xml(text: str, gpu: Any = None, source: str = "NCCL topology XML", **rate_overrides: Any
                   ) -> HostTemplate:
    """Parse NCCL topology XML into a :class:`~.common.HostTemplate`.

    Raises
    ------
    InvalidArgumentError
        Malformed XML (with its line number), no ``<system>`` root, no GPU, several hosts.
    """
    overrides = check_rate_overrides(rate_overrides)
    # defusedxml: entity declarations ("billion laughs") and external references are refused
    root = parse_xml(text, source, "host_topology")
    line_of = _line_numbers(text, root)
    if root.tag != "system":
        raise InvalidArgumentError(f"{source}: root element is <{root.tag}>, expected <system>", "host_topology")

    cpus = [c for c in root.iter("cpu")]
    hashes = {c.get("host_hash") for c in cpus if c.get("host_hash")}
    if len(hashes) > 1:
        raise InvalidArgumentError(
            f"{source}: <cpu> elements have {len(hashes)} different host_hash values ({', '.join(sorted(hashes))}); "
            "only single-host files are supported", "host_topology")

    # generation: explicit, else from the first GPU's sm
    gen = resolve_generation(gpu)
    warnings: list[str] = []
    sms = [g.get("sm") for g in root.iter("gpu") if g.get("sm")]
    if gen is not None and sms:
        _check_generation(gen, gpu, sms[0], source)
    if gen is None and sms:
        gen = generation_from_sm(sms[0])
        if gen is None:
            warnings.append(f"unknown sm={sms[0]!r}; NVLink rate of an unknown GPU assumed")
        elif gen.name in ("b200", "b300"):  # B200/GB200 (sm 100), B300/GB300 (sm 103): Grace is the Arm CPU
            grace = "g" + gen.name
            arm = any(str(c.get("arch", "")).lower() in ("arm64", "aarch64") for c in root.iter("cpu"))
            if arm:
                gen = GENERATIONS[grace]
                warnings.append(f"sm={sms[0]} GPUs with an Arm CPU: {grace.upper()} (Grace Blackwell) assumed; give "
                                "--gpu to override")
            else:
                warnings.append(f"sm={sms[0]} GPUs with an x86 CPU: {gen.name.upper()} assumed (a {grace.upper()} has "
                                "Arm Grace CPUs); give --gpu to override")
    rates = default_rates(gen, overrides)
    pcie_fixed = overrides.get("pcie")

    t = HostTemplate(gpu=gen.name if gen else "generic", rates=rates, source=source, format="NCCL XML",
                     warnings=warnings)
    gpu_by_bus: dict[str, str] = {}
    gpu_cpu: dict[str, str] = {}
    nvlinks: list[tuple[str, ET.Element, int]] = []
    counters = {"gpu": 0, "nic": 0, "pci": 0}
    used_gpu_idx: set[int] = set()
    pending_gpus: list[tuple[dict, str, str, float]] = []  # GPUs without dev=, numbered afterwards

    def rate_of(el: ET.Element) -> float:
        if pcie_fixed is not None:
            return pcie_fixed
        return pcie_rate(el.get("link_speed"), el.get("link_width"), rates["pcie"])

    def add_nics(nic_el: ET.Element, parent: str, bw: float, busid: str) -> int:
        n = 0
        for net in nic_el.iter("net"):
            name = net.get("name") or f"nic{counters['nic']}"
            try:
                mbps = float(net.get("speed", "0"))
            except ValueError:
                mbps = 0.0
            port = mbps / 8000.0 if mbps > 0 else rates["nic"]
            if "nic" in overrides:
                port = overrides["nic"]
            attrs = {"kind": "nic", "name": name, "nic_index": counters["nic"], "port_bandwidth": port}
            if busid:
                attrs["pci_bus_id"] = busid
            if net.get("dev") is not None:
                attrs["net_dev"] = net.get("dev")
            sfx = f"nic:{name}"
            if any(s == sfx for s, _ in t.nodes):
                sfx = f"nic:{name}.{counters['nic']}"
            t.add_node(sfx, **attrs)
            t.add_edge(sfx, parent, bw, link="pcie")
            counters["nic"] += 1
            n += 1
        return n

    def walk(el: ET.Element, parent: str, cpu: str) -> None:
        for child in el:
            if not isinstance(child.tag, str):
                continue
            if child.tag == "nic":  # <nic> directly under <cpu> (no PCI path known)
                add_nics(child, parent, rates["pcie"], "")
                continue
            if child.tag != "pci":
                continue
            cls = (child.get("class") or "").strip().lower()
            busid = _busid(child.get("busid"))
            bw = rate_of(child)
            gpu_el = child.find("gpu")
            nic_el = child.find("nic")
            if cls.startswith("0x03") or gpu_el is not None:
                attrs: dict[str, Any] = {"kind": "gpu", "pci_bus_id": busid}
                dev = None
                if gpu_el is not None:
                    dev_text = (gpu_el.get("dev") or "").strip()
                    dev = int(dev_text) if is_strict_int_text(dev_text) else None
                    if dev is not None and dev > MAX_LOCAL_INDEX:
                        raise InvalidArgumentError(
                            f"{source} line {line_of.get(id(gpu_el), 0)}: <gpu dev={dev_text!r}> is outside "
                            f"0..{MAX_LOCAL_INDEX}", "host_topology")
                    if gpu_el.get("sm"):
                        sm = gpu_el.get("sm").strip()
                        attrs["sm"] = int(sm) if is_strict_int_text(sm) else sm
                    if gpu_el.get("rank") is not None and is_strict_int_text(gpu_el.get("rank").strip()):
                        attrs["nccl_rank"] = int(gpu_el.get("rank").strip())
                if dev is None or dev in used_gpu_idx:
                    pending_gpus.append((attrs, parent, busid, bw))
                    key = f"pending{len(pending_gpus) - 1}"
                else:
                    used_gpu_idx.add(dev)
                    attrs["local_index"] = dev
                    key = f"gpu{dev}"
                    t.add_node(key, **attrs)
                    t.add_edge(key, parent, bw, link="pcie")
                gpu_by_bus[busid] = key
                gpu_cpu[key] = cpu
                if gpu_el is not None:
                    for nv in gpu_el.iter("nvlink"):
                        nvlinks.append((key, nv, line_of.get(id(nv), 0)))
                continue
            if cls.startswith("0x02") or nic_el is not None:
                if nic_el is not None and add_nics(nic_el, parent, bw, busid):
                    continue
                name = f"nic{counters['nic']}"
                t.add_node(f"nic:{name}", kind="nic", name=name, nic_index=counters["nic"],
                           port_bandwidth=overrides.get("nic", rates["nic"]), pci_bus_id=busid)
                t.add_edge(f"nic:{name}", parent, bw, link="pcie")
                counters["nic"] += 1
                continue
            if len(child) or cls.startswith("0x0604"):
                sfx = f"pci:{busid}" if busid else f"pci{counters['pci']}"
                counters["pci"] += 1
                t.add_node(sfx, kind="pcie_switch", pci_bus_id=busid, link_speed=child.get("link_speed", ""),
                           link_width=child.get("link_width", ""))
                t.add_edge(sfx, parent, bw, link="pcie")
                walk(child, sfx, cpu)
            # other endpoints (NVMe, NVSwitch management functions, ...) carry no GPU traffic

    cpu_nodes: list[tuple[str, float | None]] = []
    for i, c in enumerate(cpus):
        numa = c.get("numaid")
        numa_ok = numa is not None and is_strict_int_text(numa.strip(), signed=True)
        sfx = f"cpu{int(numa.strip())}" if numa_ok else f"cpu{i}"
        if any(s == sfx for s, _ in t.nodes):
            sfx = f"cpu{i}"
        attrs = {"kind": "cpu"}
        if numa_ok and int(numa.strip()) >= 0:
            attrs["numa"] = int(numa.strip())
        for k in ("arch", "vendor", "familyid", "modelid", "host_hash"):
            if c.get(k) is not None:
                attrs[k] = c.get(k)
        t.add_node(sfx, **attrs)
        cpu_nodes.append((sfx, nccl_inter_cpu_rate(c.get("arch"), c.get("vendor"), c.get("familyid"),
                                                    c.get("modelid"))))
        walk(c, sfx, sfx)

    # GPUs without a usable dev= are numbered after the others, in order of appearance
    for j, (attrs, parent, busid, bw) in enumerate(pending_gpus):
        dev = 0
        while dev in used_gpu_idx:
            dev += 1
        used_gpu_idx.add(dev)
        key = f"gpu{dev}"
        attrs["local_index"] = dev
        t.add_node(key, **attrs)
        t.add_edge(key, parent, bw, link="pcie")
        old = f"pending{j}"
        for b, k in list(gpu_by_bus.items()):
            if k == old:
                gpu_by_bus[b] = key
        gpu_cpu[key] = gpu_cpu.pop(old)
        nvlinks[:] = [(key if k == old else k, nv, ln) for k, nv, ln in nvlinks]

    if not gpu_by_bus:
        raise InvalidArgumentError(f"{source}: no GPU found (no <pci class=\"0x03....\"> or <gpu> element)",
                                   "host_topology")

    known = [r for _, r in cpu_nodes if r is not None]
    fallback = min(known) if known else rates["sys"]
    link_sockets(t, [(c, overrides.get("sys", r if r is not None else fallback)) for c, r in cpu_nodes], link="sys")

    # NVLinks
    direct_side: dict[tuple[str, str], int] = {}  # (GPU, peer GPU) -> links as listed by GPU
    to_switch: dict[str, int] = {}
    to_cpu: dict[str, int] = {}
    for key, nv, line in nvlinks:
        count_text = nv.get("count", "1").strip()
        if not is_strict_int_text(count_text, signed=True) or abs(int(count_text)) > MAX_NVLINKS:
            raise InvalidArgumentError(f"{source} line {line}: <nvlink count={nv.get('count')!r}> is not an integer "
                                       f"in 0..{MAX_NVLINKS}", "host_topology")
        count = int(count_text)
        if count <= 0:
            continue
        tclass = (nv.get("tclass") or "").strip().lower()
        target = _busid(nv.get("target"))
        if tclass.startswith("0x03") or target in gpu_by_bus:
            other = gpu_by_bus.get(target)
            if other is None:
                warnings.append(f"line {line}: NVLink from {key} to unknown GPU {target}; ignored")
                continue
            direct_side[(key, other)] = direct_side.get((key, other), 0) + count
        elif tclass in ("0x068001",) or tclass.startswith("0x0600") or tclass.startswith("0x0b"):
            to_cpu[key] = to_cpu.get(key, 0) + count
        else:
            to_switch[key] = to_switch.get(key, 0) + count
    # both ends list the same bundle: a pair's links = the larger of the two ends' counts
    direct: dict[tuple[str, str], int] = {}
    for (a, b), c in direct_side.items():
        pair = (a, b) if a <= b else (b, a)
        direct[pair] = max(direct.get(pair, 0), c)
    nvrate = rates["nvlink"]
    for (a, b), c in direct.items():
        t.add_edge(a, b, c * nvrate, link="nvlink", nvlinks=c)
    if to_switch:
        t.add_node("nvswitch", kind="nvswitch")
        for g, c in to_switch.items():
            t.add_edge(g, "nvswitch", c * nvrate, link="nvlink", nvlinks=c)
    for g, c in to_cpu.items():
        t.add_edge(g, gpu_cpu[g], c * nvrate, link="nvlink", nvlinks=c)
    if not (direct or to_switch or to_cpu) and len(gpu_by_bus) > 1:
        board = _nvswitch_board(gpu)
        if board is not None:
            links = board.links
            t.add_node("nvswitch", kind="nvswitch")
            for g in sorted(set(gpu_by_bus.values())):
                t.add_edge(g, "nvswitch", links * nvrate, link="nvlink", nvlinks=links)
            warnings.append(
                f"no <nvlink> elements: the {board.name.upper()} NVSwitch fabric of --gpu {gpu} added, each GPU's "
                f"{links} NVLinks to one NVSwitch at {links} x {nvrate:g} = {links * nvrate:g} GB/s (VM topology files "
                "such as Azure ND H100 v5's omit the NVLinks, which NCCL detects at run time)")
        else:
            warnings.append(
                "no <nvlink> elements: GPUs are joined by PCIe only (hand-written and VM topology files usually omit "
                "NVLinks, which NCCL detects at run time); for SXM GPUs on an NVSwitch board give --gpu GEN of their "
                f"generation ({', '.join(NVSWITCH_BOARDS)}) to add its NVSwitch fabric")
    return t.finish()


#: Generations whose SXM boards (HGX/DGX, GB200/GB300 trays) join every GPU through NVSwitches: ``--gpu``
#: of one of them adds that fabric to an NCCL XML without ``<nvlink>`` elements (DGX-1's P100/V100 are a
#: hybrid cube mesh, not an NVSwitch, and are not listed).
NVSWITCH_BOARDS = ("a100", "a800", "h100", "h200", "h800", "h20", "b200", "b300", "gb200", "gb300")


def _nvswitch_board(gpu: Any):
    """The :class:`~.common.GpuGeneration` of an explicit ``gpu`` that names an NVSwitch board, else None.

    A name ending in ``pcie`` or ``nvl`` (``h100-pcie``, ``h100nvl``: PCIe cards, NVLink bridges
    between pairs at most) or a bare NVLink rate names no board.
    """
    if gpu is None or not isinstance(gpu, str):
        return None
    raw = gpu.strip().lower().replace("-", "").replace("_", "")
    if raw.endswith("pcie") or raw.endswith("nvl"):
        return None
    try:
        gen = resolve_generation(gpu)
    except InvalidArgumentError:
        return None
    return gen if gen is not None and gen.name in NVSWITCH_BOARDS else None


def _line_numbers(text: str, root: ET.Element) -> dict[int, int]:
    """id(element) -> line of its start tag (expat start events come in document order)."""
    import xml.parsers.expat

    lines: list[int] = []
    p = xml.parsers.expat.ParserCreate()
    p.StartElementHandler = lambda name, attrs: lines.append(p.CurrentLineNumber)
    try:
        p.Parse(text, True)
    except xml.parsers.expat.ExpatError:  # pragma: no cover - ElementTree accepted it
        return {}
    return {id(el): ln for el, ln in zip(root.iter(), lines)}


def read_nccl_xml(path: Any, gpu: Any = None, host: str = "host0", **rate_overrides: Any) -> nx.Graph:
    """Read an NCCL topology XML file into a one-host cluster graph."""
    text = read_text(path, "host_topology")
    return parse_nccl_xml(text, gpu=gpu, source=str(path), **rate_overrides).to_graph(host)
