"""GPU generations: per-generation NVLink, PCIe and NIC defaults, and how a generation is named
or recognised (``--gpu`` names, CUDA ``sm`` numbers, Kubernetes ``nvidia.com/gpu.product``).

Every rate is GB/s in one direction, from ``tests/data/real-inputs/bandwidths.md`` (cited as
``[bw §N]``); re-exported by :mod:`.common`.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Iterable

from ..errors import InvalidArgumentError

__all__ = ["PCIE_X16_GBPS", "GENERATIONS", "GpuGeneration", "resolve_generation", "generation_from_sm",
           "generation_from_product"]


#: x16 rate by PCIe generation [bw §4]: Gen3 15.75, Gen4 31.5, Gen5 63.0, Gen6 ~121 GB/s.
PCIE_X16_GBPS = {3: 15.75, 4: 31.5, 5: 63.0, 6: 121.0}



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
    nvlink_domain : bool
        True for generations built as multi-host NVLink domains (GB200 NVL72): their hosts are
        normally placed in an ``nvlink_domain`` (see :mod:`.nvlink`).
    """

    name: str
    nvlink: float
    links: int
    topology: str
    pcie_gen: int
    sys: float
    nic: float
    note: str
    nvlink_domain: bool = False

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
_gen(["h100", "hopper", "sm90", "gh100"], nvlink=_NV2_3_4, links=18, topology="nvswitch", pcie_gen=5,
     sys=22.0, nic=_NDR,
     note="NVLink 4: 18 links x 50 GB/s bidir (src 1,3,4); PCIe Gen5; DGX H100 Sapphire Rapids (SRP_QPI_BW 22); NDR")
# H200: the H100's Hopper die with more HBM; its own name so that the cluster reports h200 (issue 27),
# the same links (HGX H200: NVLink 4, 18 links, NVSwitch; PCIe Gen5; DGX H200 Sapphire Rapids; NDR).
_gen(["h200"], nvlink=_NV2_3_4, links=18, topology="nvswitch", pcie_gen=5, sys=22.0, nic=_NDR,
     note="H200 (Hopper, as H100): NVLink 4: 18 links x 50 GB/s bidir (src 1,3,4); PCIe Gen5; Sapphire Rapids "
          "(SRP_QPI_BW 22); NDR")
_gen(["h800"], nvlink=_NV2_3_4, links=8, topology="nvswitch", pcie_gen=5, sys=22.0, nic=_NDR,
     note="NVLink 4 export part: 8 links x 50 GB/s bidir (inferred in bandwidths.md); as H100 otherwise")
_gen(["h20"], nvlink=_NV2_3_4, links=18, topology="nvswitch", pcie_gen=5, sys=22.0, nic=_NDR,
     note="Hopper export part with 18 NVLink 4 links; as H100")
_gen(["b200", "b100", "blackwell", "sm100"], nvlink=_NV5, links=18, topology="nvswitch", pcie_gen=5,
     sys=40.0, nic=_NDR,
     note="NVLink 5: 18 links x 100 GB/s bidir (src 3); PCIe Gen5; DGX B200 Emerald Rapids (ERP_QPI_BW 40); NDR")
# GB200 (Grace Blackwell superchip, NVL72 racks): a compute tray ("host") holds 2 Grace CPUs and
# 4 B200 GPUs; all 18 NVLink 5 ports of a GPU go to the rack's NVLink switch trays, so the GPUs
# of a rack form one NVLink domain (72 x 900 GB/s per direction, 1.8 TB/s bidir per GPU [bw §1,
# src 3]).  As a single host, its 4 GPUs reach each other over that switch at 18 x 50 = 900.
# Grace is Arm: NCCL's ARM_BW 6 between the tray's sockets [bw §2]; one ConnectX-7 NDR
# 400 Gb/s = 50 GB/s per GPU [bw §3] (the GB200 NVL72 reference design).
_gen(["gb200", "graceblackwell"], nvlink=_NV5, links=18, topology="nvswitch", pcie_gen=5, sys=6.0, nic=_NDR,
     nvlink_domain=True,
     note="GB200: NVLink 5, 18 links x 100 GB/s bidir = 900 GB/s per GPU per direction to the rack's NVLink "
          "switches (src 3); NVL72 = 18 trays x 4 GPUs in one NVLink domain; Grace Arm (ARM_BW 6); "
          "ConnectX-7 NDR 50 GB/s per GPU")
_gen(["b300", "sm103"], nvlink=_NV5, links=18, topology="nvswitch", pcie_gen=6, sys=40.0, nic=_XDR,
     note="NVLink 5: 18 links x 100 GB/s bidir (src 3); PCIe Gen6 (~121 GB/s x16, src 15,16); XDR 800 Gb/s (src 12)")
# GB300 NVL72: as GB200 (Grace Arm CPUs, 4 GPUs per tray, one NVLink domain per rack at 18 x 50 =
# 900 GB/s per GPU per direction [bw §1, src 3]) with Blackwell Ultra GPUs, PCIe Gen6 and a
# ConnectX-8 XDR 800 Gb/s = 100 GB/s NIC per GPU [bw §3, src 12].
_gen(["gb300"], nvlink=_NV5, links=18, topology="nvswitch", pcie_gen=6, sys=6.0, nic=_XDR, nvlink_domain=True,
     note="GB300: NVLink 5, 18 links x 100 GB/s bidir = 900 GB/s per GPU per direction to the rack's NVLink switches "
          "(src 3); NVL72 racks; Grace Arm (ARM_BW 6); PCIe Gen6; ConnectX-8 XDR 800 Gb/s (src 12)")
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
    try:  # a number as given (a negative exponent keeps its dash), else with dashes and underscores dropped
        rate = rate if rate is not None else float(text.removesuffix("gb/s").removesuffix("gbps"))
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


def generation_from_product(product: Any) -> GpuGeneration | None:
    """The generation named in a GPU product string, or None.

    For GPU Feature Discovery's ``nvidia.com/gpu.product`` label and ``nvidia-smi`` product
    names: ``"NVIDIA-H100-80GB-HBM3"`` -> h100, ``"NVIDIA-GB200"`` -> gb200,
    ``"NVIDIA-A100-SXM4-80GB"`` -> a100, ``"Tesla-V100-SXM2-16GB"`` -> v100,
    ``"NVIDIA-GeForce-RTX-4090"`` -> ada.  The words (split at ``-``, ``_``, blanks) are tried
    one by one, then adjacent pairs joined (``RTX`` + ``4090``); ``sm``-numbers and the
    ``generic`` entry are not matched.
    """
    if not isinstance(product, str) or not product.strip():
        return None
    words = [w for w in re.split(r"[-_\s]+", product.strip().lower()) if w]
    cands = words + [a + b for a, b in zip(words, words[1:])]
    for w in cands:
        if w in GENERATIONS and not w.startswith("sm") and w not in ("generic", "unknown"):
            return GENERATIONS[w]
    return None


