"""Host templates (``rankmap cluster``): one host's topology read from a file or text (``nvidia-smi
topo -m``, NCCL topology XML, a one-host node-link JSON / GraphML graph; detected), or a synthetic
host of ``gpus_per_node`` GPUs of a generation; :mod:`.compose` places copies into a fabric.
"""

from __future__ import annotations

from typing import Any

from ..errors import InvalidArgumentError
from .common import GENERATIONS, HostTemplate, check_rate_overrides, default_rates, read_text, resolve_generation
from .graphfile import load_graph
from .nccl_xml import looks_like_nccl_xml, parse_nccl_xml
from .nvsmi import looks_like_nvsmi, parse_topo_matrix
from .safe import strict_int

__all__ = ["load_host_template", "host_template_from_text", "synthetic_host"]


def host_template_from_text(text: str, source: str = "host topology", gpu: Any = None,
                            **rate_overrides: Any) -> HostTemplate:
    """A host topology given as text (``nvidia-smi topo -m`` output or NCCL topology XML,
    detected) -> :class:`HostTemplate`; the gRPC service's way in (no file).

    Raises
    ------
    InvalidArgumentError
        Empty text, neither format, or the reader's own errors (naming ``source`` and the line).
    """
    if not text.strip():
        raise InvalidArgumentError(f"host topology {source!r} is empty", "host_topology")
    if looks_like_nccl_xml(text):
        return parse_nccl_xml(text, gpu=gpu, source=source, **rate_overrides)
    if looks_like_nvsmi(text):
        return parse_topo_matrix(text, gpu=gpu, source=source, **rate_overrides)
    raise InvalidArgumentError(f"host topology {source!r}: not `nvidia-smi topo -m` output or NCCL topology XML",
                               "host_topology")


def load_host_template(path: Any, gpu: Any = None, **rate_overrides: Any) -> HostTemplate:
    """Read a host topology file of any supported format into a :class:`HostTemplate`."""
    p = str(path)
    text = read_text(path, "host_topology")
    if not text.strip():
        raise InvalidArgumentError(f"host topology file {p!r} is empty", "host_topology")
    if "<graphml" in text[:65536].lower() or text.lstrip().startswith("{"):
        return _template_from_graph(p, gpu, rate_overrides)
    if looks_like_nccl_xml(text):
        return parse_nccl_xml(text, gpu=gpu, source=p, **rate_overrides)
    if looks_like_nvsmi(text):
        return parse_topo_matrix(text, gpu=gpu, source=p, **rate_overrides)
    raise InvalidArgumentError(
        f"host topology file {p!r}: not `nvidia-smi topo -m` output, NCCL topology XML, node-link JSON or GraphML",
        "host_topology")


def _template_from_graph(path: str, gpu: Any, overrides: dict) -> HostTemplate:
    G = load_graph(path)
    # the file describes one host: GPUs without a host attribute are on it (not one host per GPU)
    hosts = list(dict.fromkeys(d.get("host") for n, d in G.nodes(data=True)
                               if d.get("kind", "gpu") == "gpu" and d.get("host") not in (None, "")))
    if len(hosts) > 1:
        raise InvalidArgumentError(
            f"host topology graph {path!r} has {len(hosts)} hosts; a host topology must describe one host",
            "host_topology")
    host = hosts[0] if hosts else None
    prefix = f"{host}/" if host is not None else "\0"
    t = HostTemplate(gpu=str(G.graph.get("gpu", "generic")), rates=dict(G.graph.get("rates", {}) or {}),
                     source=path, format="graph file")
    if gpu is not None or overrides:
        t.warnings.append("--gpu and --rate overrides do not apply to a host given as a graph file; its bandwidths are "
                          "used as written")
    names = {}
    for i, (n, d) in enumerate(G.nodes(data=True)):
        s = str(n)
        s = s[len(prefix):] if s.startswith(prefix) else s
        names[n] = s
        attrs = {k: v for k, v in d.items() if k != "host"}
        attrs.setdefault("kind", "gpu")
        if attrs["kind"] == "gpu" and "local_index" not in attrs:
            attrs["local_index"] = i
        t.add_node(s, **attrs)
    for u, v, d in G.edges(data=True):
        a = dict(d)
        bw = a.pop("bandwidth")
        t.add_edge(names[u], names[v], bw, **a)
    return t.finish()


def synthetic_host(gpus_per_node: int, gpu: Any, **rate_overrides: Any) -> HostTemplate:
    """A DGX/HGX-like host of ``gpus_per_node`` GPUs of generation ``gpu``, physical links.

    * NVSwitch generations (V100 .. B300): every GPU -> one ``nvswitch`` node by one edge of
      all its NVLink ports, ``links x nvlink`` (A100 12 x 25 = 300, H100 18 x 25 = 450,
      B200 18 x 50 = 900 GB/s), one NIC per GPU on the GPU's own PCIe switch (rail-optimised,
      as on DGX systems; port = the generation's NIC, e.g. H100 ConnectX-7 400 Gb/s = 50 GB/s).
      With several NICs each GPU ends up linked to its own NIC (:mod:`.common`).
    * NVLink-bridge generations (A30, GA102): GPUs bridged in pairs (0-1, 2-3, ...) at
      ``links x nvlink``, one NIC for the host on ``cpu0``.
    * PCIe-only generations (Ada): no NVLink, one NIC for the host on ``cpu0``.

    Every GPU and NIC has its PCIe link (``pix``: the generation's x16 rate, e.g. Gen5 63 GB/s)
    to its switch, each switch its link to the CPU (``node``).  GPUs are split over two sockets
    (first half on ``cpu0``), joined by the ``sys`` link, when the count is even and > 1.
    """
    overrides = check_rate_overrides(rate_overrides)
    n = strict_int(gpus_per_node, "gpus_per_node", "gpus_per_node")
    if n <= 0 or n > 4096:
        raise InvalidArgumentError(f"gpus_per_node {gpus_per_node!r} must be between 1 and 4096", "gpus_per_node")
    gen = resolve_generation(gpu)
    if gen is None:
        raise InvalidArgumentError("--gpus-per-node needs a GPU generation (give --gpu GEN, e.g. --gpu h100) to know "
                                   "the NVLink layout", "gpu")
    if gen.name.startswith("nvlink") or gen.name == "generic":
        raise InvalidArgumentError(f"--gpu {gpu!r} is a bare NVLink rate; --gpus-per-node needs a generation name "
                                   "(e.g. --gpu h100)", "gpu")
    rates = default_rates(gen, overrides)
    t = HostTemplate(gpu=gen.name, rates=rates, source=f"synthetic {n}x{gen.name}", format="synthetic")
    sockets = 2 if n > 1 and n % 2 == 0 else 1
    for i in range(n):
        t.add_node(f"gpu{i}", kind="gpu", local_index=i, numa=i * sockets // n)
    for s in range(sockets):
        t.add_node(f"cpu{s}", kind="cpu", numa=s)
    if sockets == 2:
        t.add_edge("cpu0", "cpu1", rates["sys"], link="sys")
    rail = gen.topology == "nvswitch"
    for i in range(n):
        sw = f"pcie{i}"
        t.add_node(sw, kind="pcie_switch")
        t.add_edge(f"gpu{i}", sw, rates["pix"], link="pcie")
        t.add_edge(sw, f"cpu{i * sockets // n}", rates["node"], link="pcie")
        if rail:
            t.add_node(f"nic:nic{i}", kind="nic", name=f"nic{i}", nic_index=i, port_bandwidth=rates["nic"])
            t.add_edge(f"nic:nic{i}", sw, rates["pix"], link="pcie")
    if not rail:
        t.add_node("nic:nic0", kind="nic", name="nic0", nic_index=0, port_bandwidth=rates["nic"])
        t.add_edge("nic:nic0", "cpu0", rates["phb"], link="pcie")
    if gen.topology == "nvswitch" and n > 1:
        t.add_node("nvswitch", kind="nvswitch")
        for i in range(n):
            t.add_edge(f"gpu{i}", "nvswitch", gen.links * rates["nvlink"], link="nvlink", nvlinks=gen.links)
    elif gen.topology == "pairs":
        for i in range(0, n - 1, 2):
            t.add_edge(f"gpu{i}", f"gpu{i + 1}", gen.links * rates["nvlink"], link="nvlink", nvlinks=gen.links)
    return t.finish()


def _with_default_nic(t: HostTemplate) -> HostTemplate:
    """Give a host without a fabric NIC one synthetic NIC: on its first CPU (else on each GPU).

    One NIC, so it can stay in the host's PCIe tree without closing a cycle through the
    fabric.  Its PCIe link is ``phb``, its port the ``nic`` rate of the generation.
    """
    cpus = t.suffixes("cpu")
    t.add_node("nic:default", kind="nic", name="default", nic_index=0, synthetic=True, fabric_port=True,
               port_bandwidth=t.rates.get("nic", GENERATIONS["generic"].nic))
    for c in (cpus[:1] or t.suffixes("gpu")):
        t.add_edge("nic:default", c, t.rates.get("phb", GENERATIONS["generic"].pcie), link="pcie")
    t.warnings.append("the host topology lists no NIC that GPUs reach; a synthetic NIC 'nic:default' carries "
                      "inter-host traffic")
    return t
