"""The rates NCCL achieves on a cluster's links, and how a job asks NCCL to run (DESIGN §4).

A link moves what NCCL achieves on it, not its line rate: a NIC port 0.96 of its rate
(NCCL's inter-node speed ladder puts one 48 GB/s channel on a 400G NIC, 24 on a 200G one,
``NVIDIA/nccl:src/graph/search.cc:1051-1067``; "24GB/s is the peak performance per 200G NIC",
sjeaugey, nccl-tests#119), switch uplinks alike; an NVLink port NCCL's per-link figure over
the nominal 25/50 GB/s (``src/graph/topo.h:19-24``: SM80 20.0, SM90 20.6, SM100 40.1 GB/s),
so an H100 reaches its NVSwitch at 18 × 20.6 = 370.8 GB/s (measured ring 360–370,
nccl#1455).  Other links (PCIe, CPU) keep the graph's rate.  The cluster model
(:func:`rankmap.solver.fabric.cluster.cluster_from_graph`) applies these once, so the time
model, the bound and the search all see the same rates.  Sources: the design repository's
``references/nccl.md``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Mapping

from ..errors import InvalidArgumentError

__all__ = ["ALGORITHMS", "NCCL_RATE_KEYS", "NcclModel", "DEFAULT_NCCL", "gpu_arch", "link_efficiency",
           "NET_EFFICIENCY", "NVLINK_EFFICIENCY"]

#: Algorithms a user may force (``NCCL_ALGO``); ``auto`` lets the tuner choose.
ALGORITHMS = ("auto", "ring", "tree", "nvls", "nvlstree")
#: Keys of ``--nccl-rate KEY=GBPS``: ``nic`` GB/s one NIC port carries, ``nvlink`` GB/s one NVLink port carries.
NCCL_RATE_KEYS = ("nic", "nvlink")

#: NIC port (and switch link) efficiency: 48 of 50 GB/s per 400G NIC, 24 of 25 per 200G
#: (NCCL's inter-node speed ladder, ``src/graph/search.cc:1051-1067``; AddyLaddy, nccl-tests#267).
NET_EFFICIENCY = 0.96
#: NVLink per-port rate NCCL uses over the nominal per-port rate (``src/graph/topo.h:19-24``):
#: SM70/SM80 20.0 of 25, SM90 20.6 of 25, SM100 40.1 of 50.
NVLINK_EFFICIENCY = {"volta": 0.8, "ampere": 0.8, "hopper": 0.824, "blackwell": 0.802}
NVLINK_EFFICIENCY_DEFAULT = 0.8
#: ``--gpu`` names (and the aliases of ``formats/generations.py``) -> architecture family.
_ARCH = {**{n: "volta" for n in ("p100", "pascal", "sm60", "v100", "volta", "sm70")},
         **{n: "ampere" for n in ("a100", "ampere", "sm80", "a800", "a30", "ga102", "a40", "a6000", "rtx3090", "sm86")},
         **{n: "hopper" for n in ("h100", "h200", "hopper", "sm90", "gh100", "h800", "h20")},
         **{n: "blackwell" for n in ("b200", "b100", "blackwell", "sm100", "gb200", "graceblackwell", "b300", "sm103",
                                     "gb300")}}


@dataclass(frozen=True)
class NcclModel:
    """How the time model runs collectives, as NCCL's environment would set it.

    Attributes
    ----------
    algorithm : str
        ``auto`` (NCCL's tuner: the fastest at the payload) or one of ``ring``, ``tree``,
        ``nvls``, ``nvlstree`` for all-reduce (``NCCL_ALGO``); an algorithm a group cannot
        run falls back to ring, as NCCL does.
    pxn : bool
        PXN for all-to-all and send/recv across nodes (``NCCL_PXN_DISABLE=0``, NCCL's default).
    rates : mapping str -> float
        Overrides, GB/s: ``nic`` (one NIC port), ``nvlink`` (one NVLink port).
    latency : bool
        Add NCCL's latency model (on by default).

    Raises
    ------
    InvalidArgumentError
        An unknown algorithm or rate key, or a rate that is not a finite number > 0.
    """

    algorithm: str = "auto"
    pxn: bool = True
    rates: Mapping[str, float] = field(default_factory=dict)
    latency: bool = True

    def __post_init__(self) -> None:
        algo = str(self.algorithm).strip().lower()
        if algo not in ALGORITHMS:
            raise InvalidArgumentError(
                f"unknown NCCL algorithm {self.algorithm!r}; one of {', '.join(ALGORITHMS)}", "nccl_algo")
        object.__setattr__(self, "algorithm", algo)
        clean = {}
        for k, v in dict(self.rates or {}).items():
            key = str(k).strip().lower()
            if key not in NCCL_RATE_KEYS:
                raise InvalidArgumentError(
                    f"unknown NCCL rate key {k!r}; one of {', '.join(NCCL_RATE_KEYS)}", f"nccl_rate.{k}")
            try:
                val = float(v)
            except (TypeError, ValueError):
                raise InvalidArgumentError(f"NCCL rate {k}={v!r} is not a number (GB/s)", f"nccl_rate.{k}") from None
            if isinstance(v, bool) or not math.isfinite(val) or not 1e-6 <= val <= 1e9:
                raise InvalidArgumentError(
                    f"NCCL rate {k}={v!r} must be a finite number of GB/s in 1e-6..1e9", f"nccl_rate.{k}")
            clean[key] = val
        object.__setattr__(self, "rates", clean)

    def key(self) -> tuple:
        """Hashable identity (caches)."""
        return (self.algorithm, self.pxn, tuple(sorted(self.rates.items())), self.latency)

    def to_dict(self) -> dict:
        return {"algorithm": self.algorithm, "pxn": self.pxn, "rates": dict(self.rates), "latency": self.latency}


DEFAULT_NCCL = NcclModel()


#: GPU names without an architecture constant of NCCL's here (PCIe-only Ada parts, the generic GPU):
#: accepted in a graph's ``gpu`` attribute (``formats/generations.py`` lists them too; a test checks the two agree).
_OTHER_GPU_NAMES = ("ada", "l40", "l40s", "l4", "rtx4090", "rtx6000ada", "sm89", "generic", "unknown")


def known_gpu_names() -> list[str]:
    """Every GPU name a graph's ``gpu`` attribute may hold (lower case, sorted)."""
    return sorted(set(_ARCH) | set(_OTHER_GPU_NAMES))


def check_gpu_name(name) -> None:
    """Refuse a graph ``gpu`` attribute that names no known GPU (a typo would silently drop NCCL's
    per-architecture constants: NVLS, NVLink efficiency).  None or ``""``: no GPU named, accepted.

    Raises
    ------
    InvalidArgumentError
        Naming the value and the known names.
    """
    from ..errors import InvalidArgumentError

    if name is None or name == "":
        return
    if not isinstance(name, str) or name.strip().lower() not in set(_ARCH) | set(_OTHER_GPU_NAMES):
        raise InvalidArgumentError(
            f"graph attribute gpu: unknown GPU {name!r} (known: {', '.join(known_gpu_names())})", field="gpu")


def gpu_arch(name) -> str | None:
    """GPU architecture family (``volta``, ``ampere``, ``hopper``, ``blackwell``) of a ``--gpu`` name, or None."""
    if not isinstance(name, str) or not name:
        return None
    key = name.strip().lower()
    return _ARCH.get(key)


def link_efficiency(data: Mapping, arch: str | None, model: NcclModel = DEFAULT_NCCL) -> tuple[float, float | None]:
    """``(factor, absolute GB/s or None)`` NCCL achieves on a graph edge with attributes ``data``.

    ``link`` ``net`` (NIC port) and ``fabric`` (switch uplinks): x0.96; ``nvlink``: NCCL's
    per-port rate over the nominal one (:data:`NVLINK_EFFICIENCY`); others x1.  With
    ``model.rates['nic']`` a ``net`` edge carries that many GB/s per port (ports: the edge's
    ``ports`` attribute, else 1); with ``model.rates['nvlink']`` an ``nvlink`` edge that many
    per NVLink port (``nvlinks``, else its rate over 25 GB/s per port).
    """
    kind = str(data.get("link", "") or "").split("+")[0]
    if kind == "net":
        if "nic" in model.rates:
            ports = data.get("ports", 1)
            ports = ports if isinstance(ports, (int, float)) and not isinstance(ports, bool) and ports > 0 else 1
            return 1.0, model.rates["nic"] * float(ports)
        return NET_EFFICIENCY, None
    if kind == "fabric":
        return NET_EFFICIENCY, None
    if kind == "nvlink":
        if "nvlink" in model.rates:
            links = data.get("nvlinks")
            if isinstance(links, (int, float)) and not isinstance(links, bool) and links > 0:
                return 1.0, model.rates["nvlink"] * float(links)
            return model.rates["nvlink"] / 25.0, None
        return NVLINK_EFFICIENCY.get(arch or "", NVLINK_EFFICIENCY_DEFAULT), None
    return 1.0, None


