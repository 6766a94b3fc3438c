"""Shared pieces of the format readers: link-rate constants, GPU generations, host templates.

Every bandwidth here is **GB/s in one direction** (DESIGN §2), taken from the published
figures collected in ``tests/data/real-inputs/bandwidths.md`` (a copy of
``/work/shared/real-inputs/bandwidths.md``).  The section of that file is cited next to
each number as ``[bw §N]``; its numbered sources as ``[src N]``.

Rate keys (all overridable, ``build_cluster(..., nic=50)`` or ``--rate nic=50``):

========  =====================================================================
key       meaning
========  =====================================================================
nvlink    one NVLink, GB/s per direction (an ``NV#`` pair gets ``# * nvlink``)
pcie      a PCIe x16 link (sets ``pix pxb phb node`` unless those are given)
pix       GPU/NIC to its own PCIe switch (``PIX``)
pxb       PCIe switch to PCIe switch (``PXB``)
phb       PCIe switch to host bridge (``PHB``)
node      host bridge to host bridge inside one NUMA node (``NODE``)
sys       socket to socket (``SYS``: QPI / UPI / xGMI)
nic       one NIC port to its leaf switch
fabric    leaf to spine link, per GPU share (higher tiers: ``fabric / taper**k``)
taper     per-tier oversubscription of the switch fabric (default 2)
========  =====================================================================
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

import networkx as nx

from ..errors import InvalidArgumentError

__all__ = [
    "GENERATIONS",
    "GpuGeneration",
    "RATE_KEYS",
    "HostTemplate",
    "resolve_generation",
    "generation_from_sm",
    "default_rates",
    "check_rate_overrides",
    "pcie_rate",
    "nccl_inter_cpu_rate",
    "fmt_gbps",
]

# ---------------------------------------------------------------- PCIe

#: PCIe per-lane data rate, GB/s per direction, by transfer rate in GT/s.
#: Gen3/4/5: 0.985 / 1.97 / 3.94 GB/s per lane [bw §4, src 14, 15]; Gen6: the lower of
#: the published ~7.56-7.88 GB/s [bw §4, src 15, 16].  Gen1/Gen2 (2.5 / 5 GT/s, 8b/10b
#: line code) are not in bandwidths.md: 2.5 GT/s x 8/10 / 8 = 0.25 GB/s, 5 GT/s = 0.5 GB/s.
PCIE_LANE_GBPS = {2.5: 0.25, 5.0: 0.5, 8.0: 0.985, 16.0: 1.97, 32.0: 3.94, 64.0: 7.56}

#: x16 rate by PCIe generation [bw §4]: Gen3 15.75, Gen4 31.5, Gen5 63.0, Gen6 ~121 GB/s.
PCIE_X16_GBPS = {3: 15.75, 4: 31.5, 5: 63.0, 6: 121.0}


def pcie_rate(speed: str | None, width: Any, default_x16: float) -> float:
    """GB/s of a PCIe link given NCCL XML ``link_speed`` / ``link_width`` strings.

    ``"16.0 GT/s PCIe"`` / ``"16 GT/s"`` -> per-lane rate of that generation times the width.
    A width of 0 or a missing width counts as x16, as NCCL does (``if (width == 0) width =
    16;`` in ``src/graph/topo.cc``, ``ncclTopoAddPci``); a missing or unreadable speed gives
    ``default_x16`` scaled by the width.
    """
    try:
        w = int(str(width).strip()) if width is not None and str(width).strip() != "" else 0
    except ValueError:
        w = 0
    if w <= 0:
        w = 16
    lane = None
    if speed:
        m = re.search(r"([0-9]*\.?[0-9]+)\s*GT/s", str(speed), re.I)
        if m:
            gts = float(m.group(1))
            lane = PCIE_LANE_GBPS.get(gts)
            if lane is None:  # an unlisted rate: 8b/10b below 8 GT/s, 128b/130b from 8 GT/s
                lane = gts * (0.8 if gts < 8 else 128 / 130) / 8
    if lane is None:
        return default_x16 * w / 16
    return lane * w


# ---------------------------------------------------------------- CPUs

#: Socket-to-socket rates NCCL assumes (``src/graph/topo.h``) [bw §2, src 8], GB/s.
NCCL_INTER_CPU = {
    "BDW": 6.0,  # BDW_QPI_BW, Intel Broadwell and older
    "SKL": 10.0,  # SKL_QPI_BW, Skylake .. Ice Lake
    "SRP": 22.0,  # SRP_QPI_BW, Sapphire Rapids
    "ERP": 40.0,  # ERP_QPI_BW, Emerald / Granite Rapids
    "ZEN12": 16.0,  # AMD_ZEN12_BW, EPYC Naples / Rome
    "ZEN34": 24.0,  # AMD_ZEN34_BW, Milan / Genoa
    "ZEN5": 32.0,  # AMD_ZEN5_BW, Turin
    "P9": 32.0,  # P9_BW, POWER9
    "ARM": 6.0,  # ARM_BW
    "ZPI": 6.0,  # ZPI_BW, Zhaoxin
}


def nccl_inter_cpu_rate(arch: str | None, vendor: str | None, familyid: Any, modelid: Any) -> float | None:
    """The socket-to-socket GB/s NCCL picks for a ``<cpu>`` element, or None if unknown.

    Same decision as ``ncclTopoGetInterCpuBw`` / ``ncclTopoAddCpu`` in NCCL's
    ``src/graph/topo.cc``: Intel family 6 model >= 0xCF (or 0xAD-0xAF) -> ERP, >= 0x8F -> SRP,
    >= 0x55 -> SKL, else BDW; AMD family 26 -> Zen5, 25 -> Zen3/4, else Zen1/2.
    """

    def _int(v: Any) -> int | None:
        if v is None:
            return None
        try:
            return int(str(v), 0)
        except ValueError:
            return None

    a = (arch or "").lower()
    v = (vendor or "").strip()
    if a.startswith("ppc"):
        return NCCL_INTER_CPU["P9"]
    if a in ("arm64", "aarch64"):
        return NCCL_INTER_CPU["ARM"]
    if a and a != "x86_64":
        return None
    if v == "GenuineIntel":
        fam, mod = _int(familyid), _int(modelid)
        if fam == 6 and mod is not None:
            if mod >= 0xCF or mod in (0xAD, 0xAE, 0xAF):
                return NCCL_INTER_CPU["ERP"]
            if mod >= 0x8F:
                return NCCL_INTER_CPU["SRP"]
            if mod >= 0x55:
                return NCCL_INTER_CPU["SKL"]
        return NCCL_INTER_CPU["BDW"]
    if v == "AuthenticAMD":
        fam = _int(familyid)
        if fam in (26, 0xBF):
            return NCCL_INTER_CPU["ZEN5"]
        if fam in (25, 0xAF):
            return NCCL_INTER_CPU["ZEN34"]
        return NCCL_INTER_CPU["ZEN12"]
    if v in ("CentaurHauls", "Shanghai"):
        return NCCL_INTER_CPU["ZPI"]
    return None


# ---------------------------------------------------------------- GPU generations


@dataclass(frozen=True)
class GpuGeneration:
    """Per-generation defaults.

    Attributes
    ----------
    name : str
    nvlink : float
        One NVLink, GB/s per direction (0 = no NVLink).
    links : int
        NVLinks per GPU (what ``topo -m`` shows as ``NV#`` on an NVSwitch board).
    topology : str
        How a synthetic host of this generation is wired: ``"nvswitch"``, ``"pairs"``
        (2-GPU NVLink bridges) or ``"pcie"``.
    pcie_gen : int
        PCIe generation of the GPU's host link.
    sys : float
        Socket-to-socket GB/s of the reference platform (NCCL constant of its CPU).
    nic : float
        Default NIC port GB/s of the reference platform.
    note : str
        Where the numbers come from.
    """

    name: str
    nvlink: float
    links: int
    topology: str
    pcie_gen: int
    sys: float
    nic: float
    note: str

    @property
    def pcie(self) -> float:
        return PCIE_X16_GBPS[self.pcie_gen]


_NV2_3_4 = 25.0  # 50 GB/s per link bidirectional for NVLink 2, 3 and 4 [bw §1, src 1, 3, 4]
_NV5 = 50.0  # 100 GB/s per link bidirectional for NVLink 5 [bw §1, src 3]
_NV1 = 20.0  # 40 GB/s per link bidirectional for NVLink 1 (P100) [bw §1, src 2, secondary]
_GA102 = 14.0625  # GA102 bridge: 14.0625 GB/s per link per direction [bw §1, src 6]
_EDR, _HDR, _NDR, _XDR = 12.5, 25.0, 50.0, 100.0  # IB 4x 100/200/400/800 Gb/s / 8 [bw §3]

#: Known generations.  NVLink figures: bandwidths.md §1.  PCIe: §4.  ``sys`` is NCCL's
#: inter-CPU constant (§2) for the CPU of the generation's reference DGX/HGX platform, ``nic``
#: that platform's NIC port (§3).  The reference platforms (DGX-1: Broadwell + EDR; DGX A100:
#: EPYC Rome + HDR; DGX H100: Sapphire Rapids + NDR; DGX B200: Emerald Rapids + NDR; B300:
#: ConnectX-8 XDR) are this module's assumption, not in bandwidths.md.
GENERATIONS: dict[str, GpuGeneration] = {}


def _gen(names: Iterable[str], **kw: Any) -> None:
    names = list(names)
    g = GpuGeneration(name=names[0], **kw)
    for n in names:
        GENERATIONS[n] = g


_gen(["p100", "pascal", "sm60"], nvlink=_NV1, links=4, topology="nvswitch", pcie_gen=3, sys=6.0, nic=_EDR,
     note="NVLink 1: 4 links x 40 GB/s bidir (src 2, secondary); PCIe Gen3; DGX-1 Broadwell (BDW_QPI_BW 6); EDR")
_gen(["v100", "volta", "sm70"], nvlink=_NV2_3_4, links=6, topology="nvswitch", pcie_gen=3, sys=6.0, nic=_EDR,
     note="NVLink 2: 6 links x 50 GB/s bidir (src 1,3,4); PCIe Gen3; DGX-1 Broadwell (BDW_QPI_BW 6); EDR 100 Gb/s")
_gen(["a100", "ampere", "sm80"], nvlink=_NV2_3_4, links=12, topology="nvswitch", pcie_gen=4, sys=16.0, nic=_HDR,
     note="NVLink 3: 12 links x 50 GB/s bidir (src 1,3,4); PCIe Gen4; DGX A100 EPYC Rome (AMD_ZEN12_BW 16); HDR")
_gen(["a800"], nvlink=_NV2_3_4, links=8, topology="nvswitch", pcie_gen=4, sys=16.0, nic=_HDR,
     note="NVLink 3 export part: 8 links x 50 GB/s bidir (src 5); PCIe Gen4; as A100 otherwise")
_gen(["a30"], nvlink=_NV2_3_4, links=4, topology="pairs", pcie_gen=4, sys=16.0, nic=_EDR,
     note="A30 NVLink bridge (NV4): no published rate in bandwidths.md; A30 is GA100, assumed NVLink 3 "
          "(25 GB/s per link per direction); PCIe Gen4; 100 Gb/s NIC (NCCL NET_BW default)")
_gen(["ga102", "a40", "a6000", "rtx3090", "sm86"], nvlink=_GA102, links=4, topology="pairs", pcie_gen=4,
     sys=16.0, nic=_EDR, note="GA102 NVLink bridge: 4 x4 links, 14.0625 GB/s per link per direction (src 6)")
_gen(["h100", "h200", "hopper", "sm90", "gh100"], nvlink=_NV2_3_4, links=18, topology="nvswitch", pcie_gen=5,
     sys=22.0, nic=_NDR,
     note="NVLink 4: 18 links x 50 GB/s bidir (src 1,3,4); PCIe Gen5; DGX H100 Sapphire Rapids (SRP_QPI_BW 22); NDR")
_gen(["h800"], nvlink=_NV2_3_4, links=8, topology="nvswitch", pcie_gen=5, sys=22.0, nic=_NDR,
     note="NVLink 4 export part: 8 links x 50 GB/s bidir (inferred in bandwidths.md); as H100 otherwise")
_gen(["h20"], nvlink=_NV2_3_4, links=18, topology="nvswitch", pcie_gen=5, sys=22.0, nic=_NDR,
     note="Hopper export part with 18 NVLink 4 links; as H100")
_gen(["b200", "gb200", "b100", "blackwell", "sm100"], nvlink=_NV5, links=18, topology="nvswitch", pcie_gen=5,
     sys=40.0, nic=_NDR,
     note="NVLink 5: 18 links x 100 GB/s bidir (src 3); PCIe Gen5; DGX B200 Emerald Rapids (ERP_QPI_BW 40); NDR")
_gen(["b300", "gb300", "sm103"], nvlink=_NV5, links=18, topology="nvswitch", pcie_gen=6, sys=40.0, nic=_XDR,
     note="NVLink 5: 18 links x 100 GB/s bidir (src 3); PCIe Gen6 (~121 GB/s x16, src 15,16); XDR 800 Gb/s (src 12)")
_gen(["ada", "l40", "l40s", "l4", "rtx4090", "rtx6000ada", "sm89"], nvlink=0.0, links=0, topology="pcie",
     pcie_gen=4, sys=10.0, nic=_EDR, note="Ada: no NVLink; PCIe Gen4; SKL_QPI_BW 10; 100 Gb/s NIC")
_gen(["generic", "unknown"], nvlink=_NV2_3_4, links=0, topology="pcie", pcie_gen=4, sys=10.0, nic=_EDR,
     note="unknown GPU: NVLink 2/3/4 per-link rate 25 GB/s, PCIe Gen4 x16, SKL_QPI_BW 10 (NCCL), "
          "100 Gb/s NIC (NCCL NET_BW '100Gbit')")

_SM_TO_GEN = {60: "p100", 61: "ada", 70: "v100", 75: "ada", 80: "a100", 86: "ga102", 87: "ga102", 89: "ada",
              90: "h100", 100: "b200", 103: "b300", 110: "b200", 120: "ada", 121: "ada"}


def generation_from_sm(sm: Any) -> GpuGeneration | None:
    """The generation for an NCCL ``sm`` attribute (compute capability x 10), or None."""
    try:
        v = int(str(sm).strip())
    except (TypeError, ValueError):
        return None
    if v in _SM_TO_GEN:
        return GENERATIONS[_SM_TO_GEN[v]]
    if v >= 100:
        return GENERATIONS["b200"]
    return None


def resolve_generation(gpu: Any, field_name: str = "gpu") -> GpuGeneration | None:
    """Resolve the ``gpu`` parameter: a generation name (``"h100"``), ``"sm90"``, or a number.

    A number (``25`` or ``"25"``) is an explicit per-link NVLink rate in GB/s per direction;
    the other defaults are then those of an unknown GPU.  None -> None.
    """
    if gpu is None or (isinstance(gpu, str) and not gpu.strip()):
        return None
    if isinstance(gpu, GpuGeneration):
        return gpu
    raw = str(gpu).strip().lower()
    try:  # a number, sign included ("-5" must not lose its sign to the dash stripping below)
        rate = float(raw.removesuffix("gb/s").removesuffix("gbps"))
    except ValueError:
        rate = None
    if rate is not None and (not math.isfinite(rate) or rate <= 0):
        raise InvalidArgumentError(f"per-link NVLink rate {gpu!r} must be a positive number of GB/s", field_name)
    text = raw.replace("-", "").replace("_", "")
    text = text.removeprefix("nvidia")
    if text in GENERATIONS:
        return GENERATIONS[text]
    for suffix in ("sxm4", "sxm5", "sxm", "pcie", "nvl", "80gb", "40gb", "94gb"):
        if text.endswith(suffix) and text[: -len(suffix)] in GENERATIONS:
            return GENERATIONS[text[: -len(suffix)]]
    try:
        rate = float(text.removesuffix("gb/s").removesuffix("gbps"))
    except ValueError:
        known = sorted({g for g in GENERATIONS if not g.startswith("sm")})
        raise InvalidArgumentError(
            f"unknown GPU generation {gpu!r} (known: {', '.join(known)}; or a per-link NVLink GB/s number)",
            field_name,
        ) from None
    if not math.isfinite(rate) or rate <= 0:
        raise InvalidArgumentError(f"per-link NVLink rate {gpu!r} must be a positive number of GB/s", field_name)
    base = GENERATIONS["generic"]
    return GpuGeneration(name=f"nvlink{rate:g}", nvlink=rate, links=0, topology="pcie", pcie_gen=base.pcie_gen,
                         sys=base.sys, nic=base.nic, note=f"explicit NVLink rate {rate:g} GB/s per link; " + base.note)


RATE_KEYS = ("nvlink", "pcie", "pix", "pxb", "phb", "node", "sys", "nic", "fabric", "taper")


def check_rate_overrides(overrides: Mapping[str, Any] | None) -> dict[str, float]:
    """Validate ``**rate_overrides``: known keys, finite positive numbers (GB/s)."""
    out: dict[str, float] = {}
    for key, value in (overrides or {}).items():
        k = str(key).strip().lower()
        if k not in RATE_KEYS:
            raise InvalidArgumentError(
                f"unknown rate {key!r} (known: {', '.join(RATE_KEYS)})", f"rate.{key}"
            )
        if value is None:
            continue
        try:
            v = float(value)
        except (TypeError, ValueError):
            raise InvalidArgumentError(f"rate {key}={value!r} is not a number", f"rate.{key}") from None
        if not math.isfinite(v) or v <= 0:
            raise InvalidArgumentError(f"rate {key}={value!r} must be finite and > 0", f"rate.{key}")
        if k == "taper" and v < 1:
            raise InvalidArgumentError(f"rate taper={value!r} must be >= 1", f"rate.{key}")
        out[k] = v
    return out


def default_rates(gen: GpuGeneration | None, overrides: Mapping[str, float] | None = None) -> dict[str, float]:
    """All rate keys for a generation (None = unknown GPU), overrides applied.

    PCIe classes default to the generation's x16 rate (PIX = PXB = PHB = NODE; bandwidths.md
    gives no separate figure for a bridge hop, and NCCL models the same PCIe link rate on
    every hop).  Rates are then made non-increasing along PIX >= PXB >= PHB >= NODE >= SYS so
    that the widest path of a pair is the rate of its class.
    """
    g = gen or GENERATIONS["generic"]
    o = dict(overrides or {})
    pcie = o.get("pcie", g.pcie)
    r = {
        "nvlink": o.get("nvlink", g.nvlink if g.nvlink > 0 else GENERATIONS["generic"].nvlink),
        "pcie": pcie,
        "pix": o.get("pix", pcie),
        "pxb": o.get("pxb", pcie),
        "phb": o.get("phb", pcie),
        "node": o.get("node", pcie),
        "sys": o.get("sys", g.sys),
        "nic": o.get("nic", g.nic),
        "taper": o.get("taper", 2.0),
    }
    if "fabric" in o:
        r["fabric"] = o["fabric"]
    r["pxb"] = min(r["pxb"], r["pix"])
    r["phb"] = min(r["phb"], r["pxb"])
    r["node"] = min(r["node"], r["phb"])
    r["sys"] = min(r["sys"], r["node"])
    return r


def fmt_gbps(x: float) -> str:
    """Compact GB/s text: 450, 31.5, 0.985."""
    return f"{x:.4g}" if x < 1000 else f"{x:.0f}"


# ---------------------------------------------------------------- host templates


@dataclass
class HostTemplate:
    """One host's topology with host-relative node ids (``"gpu0"``, ``"nic:mlx5_0"``).

    ``instantiate(G, host)`` adds a copy to ``G`` with ids ``"<host>/<suffix>"`` and
    ``host=<host>`` on every node, so a fabric of many identical hosts is built without
    re-parsing.  ``nodes`` are ordered GPUs first (by ``local_index``), which fixes the
    baseline device order (DESIGN §2).
    """

    nodes: list[tuple[str, dict]] = field(default_factory=list)
    edges: list[tuple[str, str, dict]] = field(default_factory=list)
    gpu: str = "generic"
    rates: dict[str, float] = field(default_factory=dict)
    source: str = ""
    format: str = ""
    warnings: list[str] = field(default_factory=list)

    # -- building
    def add_node(self, suffix: str, **attrs: Any) -> str:
        self.nodes.append((suffix, attrs))
        return suffix

    def add_edge(self, u: str, v: str, bandwidth: float, **attrs: Any) -> None:
        if not (math.isfinite(bandwidth) and bandwidth > 0):
            raise InvalidArgumentError(f"{self.source}: link {u} - {v} has bandwidth {bandwidth!r}", "bandwidth")
        attrs["bandwidth"] = float(bandwidth)
        self.edges.append((u, v, attrs))

    def finish(self) -> "HostTemplate":
        """Order nodes GPUs first by local_index, keep the rest in insertion order; merge parallel edges."""
        gpus = [n for n in self.nodes if n[1].get("kind") == "gpu"]
        rest = [n for n in self.nodes if n[1].get("kind") != "gpu"]
        gpus.sort(key=lambda n: n[1]["local_index"])
        self.nodes = gpus + rest
        merged: dict[tuple[str, str], dict] = {}
        for u, v, a in self.edges:
            key = (u, v) if u <= v else (v, u)
            if key in merged:
                if a["bandwidth"] > merged[key][2]["bandwidth"]:
                    merged[key] = (u, v, a)
            else:
                merged[key] = (u, v, a)
        self.edges = list(merged.values())
        return self

    # -- queries
    @property
    def gpu_count(self) -> int:
        return sum(1 for _, a in self.nodes if a.get("kind") == "gpu")

    def suffixes(self, kind: str) -> list[str]:
        return [s for s, a in self.nodes if a.get("kind") == kind]

    def nic_rates(self) -> dict[str, float]:
        """NIC suffix -> port GB/s."""
        return {s: float(a.get("port_bandwidth", self.rates.get("nic", 12.5))) for s, a in self.nodes
                if a.get("kind") == "nic"}

    # -- output
    def instantiate(self, G: nx.Graph, host: str) -> None:
        p = f"{host}/"
        G.add_nodes_from((p + s, {**a, "host": host}) for s, a in self.nodes)
        G.add_edges_from((p + u, p + v, dict(a)) for u, v, a in self.edges)

    def to_graph(self, host: str = "host0", name: str | None = None) -> nx.Graph:
        G = nx.Graph()
        G.graph["name"] = name or f"{host} ({self.gpu_count} GPUs, {self.format} {self.source})"
        G.graph["gpu"] = self.gpu
        G.graph["rates"] = dict(self.rates)
        G.graph["sources"] = [self.source]
        if self.warnings:
            G.graph["warnings"] = list(self.warnings)
        self.instantiate(G, host)
        return G


def read_text(path: Any, what: str) -> str:
    """Read a text file or raise InvalidArgumentError naming it (no traceback)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return fh.read()
    except FileNotFoundError:
        raise InvalidArgumentError(f"{what} file {str(path)!r} does not exist", what) from None
    except IsADirectoryError:
        raise InvalidArgumentError(f"{what} file {str(path)!r} is a directory", what) from None
    except OSError as exc:
        raise InvalidArgumentError(f"cannot read {what} file {str(path)!r}: {exc.strerror or exc}", what) from None
