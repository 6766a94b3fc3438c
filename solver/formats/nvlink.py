"""Multi-host NVLink domains (GB200 NVL72 racks): the ``nvlink_domain`` GPU attribute.

An NVLink domain is a set of hosts whose GPUs reach each other over NVLink through shared
NVLink switches (GB200 NVL72: 18 compute trays x 4 GPUs, every GPU's 18 NVLink 5 ports on the
rack's 9 switch trays).  In the cluster graph (DESIGN §2) a domain is **one node** of kind
``"nvswitch"`` (``role="nvlink_domain"``, id ``nvlink:<domain>``) and every GPU of the domain
has one edge to it whose ``bandwidth`` is the GPU's NVLink capacity, GB/s per direction
(GB200: 18 links x 50 GB/s = **900 GB/s**, NVIDIA's "1.8 TB/s bidirectional per GPU",
``bandwidths.md`` §1, src 3).  The domain node links to GPUs only, so it is a tree of its own
in the switch forest (:mod:`rankmap.solver.fabric.links`), separate from the NIC -> leaf -> spine
tree: inter-domain traffic leaves through the NICs.  Each GPU also gets
``nvlink_domain=<domain>`` (a string).

A host placed in a domain loses its own NVSwitch node (a node of kind ``"nvswitch"`` linked
only to the host's GPUs): on an NVL72 tray the GPUs' NVLink ports *are* the domain's ports.
Direct GPU-GPU NVLink edges (bridges) are kept.

Where domains come from (each reader fills ``Fabric.domains``, host -> domain name):

* Slurm ``topology/block`` base blocks (``BlockName=``; SchedMD and CoreWeave describe blocks
  as NVLink domains, e.g. one NVL72 rack per block) -- unless ``block_links="network"``;
* Topograph model ``nvlink``/block domains (:mod:`.topograph`), Kubernetes labels
  ``nvidia.com/gpu.clique`` (GPU Feature Discovery: ``<ClusterUUID>.<CliqueId>``) and
  ``accelerator.topograph.run/domain`` (:mod:`.kubernetes`);
* ``nvidia-smi -q`` output per host (``--nvlink-domains FILE``, :func:`parse_nvsmi_query`):
  the ``Fabric`` section's ``ClusterUUID`` and ``CliqueId``.

The rate of a domain link (what no source says) is, in order: the ``nvlink_domain_rate``
argument (``--nvlink-domain-rate GBPS``); the GPU's NVLink capacity in the host topology
(its edge to the host's NVSwitch: NV18 x the generation's per-link rate); the generation's
links x per-link rate; else :data:`DEFAULT_NVLINK_DOMAIN_GBPS` = 900 (GB200 NVL72).
"""

from __future__ import annotations

import math
import re
from typing import Any, Mapping

import networkx as nx

from ..errors import InvalidArgumentError
from .common import GpuGeneration, HostTemplate, read_text
from .safe import strict_float

__all__ = ["DEFAULT_NVLINK_DOMAIN_GBPS", "apply_nvlink_domains", "domain_rate", "parse_nvsmi_query",
           "read_nvlink_domains", "check_domain_name", "check_domain_rate"]

#: GB200 NVL72: 18 NVLink 5 links x 50 GB/s per direction = 900 GB/s per GPU to the rack's
#: NVLink switches (``bandwidths.md`` §1: NVLink 5, 1800 GB/s bidir per GPU, src 3).
DEFAULT_NVLINK_DOMAIN_GBPS = 900.0

#: Longest accepted domain name (a ClusterUUID.CliqueId is 47 characters).
MAX_DOMAIN_NAME = 256


def check_domain_name(value: Any, where: str, field: str = "nvlink_domain") -> str:
    """An ``nvlink_domain`` value -> the stripped string; InvalidArgumentError naming ``where``
    when it is not a non-empty string of at most :data:`MAX_DOMAIN_NAME` printable characters."""
    if not isinstance(value, str) or not value.strip():
        raise InvalidArgumentError(f"{where}: nvlink_domain {value!r} must be a non-empty string", field)
    v = value.strip()
    if len(v) > MAX_DOMAIN_NAME or not v.isprintable():
        raise InvalidArgumentError(f"{where}: nvlink_domain {v[:40]!r} must be at most {MAX_DOMAIN_NAME} printable "
                                   "characters", field)
    return v


def check_domain_rate(value: Any, field: str = "nvlink_domain_rate") -> float | None:
    """``--nvlink-domain-rate`` (GB/s per GPU per direction) -> float, None when not given."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    try:
        v = strict_float(str(value).strip().lower().removesuffix("gb/s").removesuffix("gbps").strip(), field)
    except InvalidArgumentError:
        v = float("nan")
    if isinstance(value, bool) or not math.isfinite(v) or v <= 0:
        raise InvalidArgumentError(f"nvlink domain rate {value!r} must be a positive number of GB/s per GPU", field)
    return v


def domain_rate(template: HostTemplate, gen: GpuGeneration | None, explicit: float | None) -> tuple[float, str]:
    """The GB/s of one GPU's link to its domain node, and where the number came from.

    See the module docstring for the order: explicit, the host's GPU-NVSwitch edge, the
    generation's ``links x nvlink``, else :data:`DEFAULT_NVLINK_DOMAIN_GBPS`.
    """
    if explicit is not None:
        return explicit, "--nvlink-domain-rate"
    kind = {s: a.get("kind", "gpu") for s, a in template.nodes}
    widths = [float(a["bandwidth"]) for u, v, a in template.edges
              if {kind.get(u), kind.get(v)} == {"gpu", "nvswitch"}]
    if widths:
        return max(widths), "the GPUs' links to the host's NVSwitch"
    if gen is not None and gen.links > 0 and gen.nvlink > 0 and gen.topology == "nvswitch":
        return gen.links * gen.nvlink, f"{gen.name}: {gen.links} NVLinks x {gen.nvlink:g} GB/s"
    return DEFAULT_NVLINK_DOMAIN_GBPS, "the GB200 NVL72 default (18 NVLink 5 links x 50 GB/s)"


def _host_nvswitches(template: HostTemplate) -> list[str]:
    """Suffixes of the host's NVSwitch nodes linked to GPUs only (replaced by a domain)."""
    kind = {s: a.get("kind", "gpu") for s, a in template.nodes}
    out = []
    for s, k in kind.items():
        if k != "nvswitch":
            continue
        nbrs = [v if u == s else u for u, v, _ in template.edges if s in (u, v)]
        if nbrs and all(kind.get(n) == "gpu" for n in nbrs):
            out.append(s)
    return out


def apply_nvlink_domains(G: nx.Graph, template: HostTemplate, hosts: list[str], domains: Mapping[str, str],
                         rate_gbps: float, nvlinks: int | None = None) -> dict[str, int]:
    """Put the GPUs of ``hosts`` that ``domains`` maps to a domain on one node per domain.

    Parameters
    ----------
    G : networkx.Graph
        The cluster graph with every host instantiated from ``template`` (ids ``<host>/<suffix>``).
    template : HostTemplate
    hosts : list of str
        The hosts in the graph.
    domains : mapping str -> str
        Host -> domain name (hosts not in it, or not in ``hosts``, are left alone).
    rate_gbps : float
        Capacity of each GPU's link to its domain node, GB/s per direction.
    nvlinks : int, optional
        NVLink count written on those edges (``nvlinks`` attribute).

    Returns
    -------
    dict
        Domain name -> number of hosts placed in it (graph order of first host).
    """
    gpus = template.suffixes("gpu")
    drop = _host_nvswitches(template)
    node_of: dict[str, str] = {}
    count: dict[str, int] = {}
    attrs = {"link": "nvlink", **({"nvlinks": int(nvlinks)} if nvlinks else {})}
    for h in hosts:
        d = domains.get(h)
        if d is None:
            continue
        if d not in node_of:
            nid = f"nvlink:{d}"
            i = 1
            while nid in G:
                nid = f"nvlink:{d}~{i}"
                i += 1
            G.add_node(nid, kind="nvswitch", role="nvlink_domain", nvlink_domain=d)
            node_of[d] = nid
            count[d] = 0
        count[d] += 1
        G.remove_nodes_from(f"{h}/{s}" for s in drop)
        nid = node_of[d]
        for s in gpus:
            g = f"{h}/{s}"
            G.nodes[g]["nvlink_domain"] = d
            G.add_edge(g, nid, bandwidth=float(rate_gbps), **attrs)
    return count


# ---------------------------------------------------------------- nvidia-smi -q

_KV = re.compile(r"^\s*(ClusterUUID|Cluster UUID|CliqueId|Clique ID)\s*:\s*(.*?)\s*$", re.I)
_PREFIX = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*):\s?(.*)$")
_NO_VALUE = {"", "n/a", "none", "not supported", "[n/a]", "00000000-0000-0000-0000-000000000000"}


def parse_nvsmi_query(text: str, source: str = "nvlink domains", hosts: list[str] | None = None) -> dict[str, str]:
    """Host -> NVLink domain from ``nvidia-smi -q`` output of several hosts.

    Accepted lines (``#`` comments and blank lines are skipped):

    * ``HOST: <a line of nvidia-smi -q>`` -- the output of ``pdsh -w HOSTS nvidia-smi -q`` or
      ``clush``; only the ``Fabric`` section's ``ClusterUUID : <uuid>`` and ``CliqueId : <n>``
      lines count, every other line is ignored;
    * ``HOST DOMAIN`` -- an explicit two-column table.

    ``nvidia-smi -q`` prints the Fabric section per GPU; all GPUs of a host must agree.  The
    domain is ``<ClusterUUID>.<CliqueId>`` (the value GPU Feature Discovery writes into the
    ``nvidia.com/gpu.clique`` node label), or the ClusterUUID alone without a CliqueId.  A
    host whose ClusterUUID is ``N/A`` or all zeros is in no domain.  A single host's bare
    ``nvidia-smi -q`` (no ``HOST:`` prefix) is accepted when ``hosts`` has exactly one name.

    Raises
    ------
    InvalidArgumentError
        ``<source> line N: ...``: an unreadable line, a host whose GPUs report different
        ClusterUUIDs or CliqueIds, no domain at all.
    """
    uuid: dict[str, tuple[str, int]] = {}
    clique: dict[str, tuple[str, int]] = {}
    explicit: dict[str, str] = {}
    single = hosts[0] if hosts is not None and len(hosts) == 1 else None
    lines = [(ln, raw.rstrip()) for ln, raw in enumerate(text.replace("\r", "").split("\n"), 1)
             if raw.strip() and not raw.lstrip().startswith("#")]
    query = any(_KV.match(_PREFIX.match(x.strip()).group(2) if _PREFIX.match(x.strip()) else x) for _, x in lines)
    for ln, line in lines:
        if not query:  # a HOST DOMAIN table
            words = line.split()
            if len(words) != 2:
                raise InvalidArgumentError(
                    f"{source} line {ln}: {line.strip()[:60]!r} is not 'HOST DOMAIN' (and the file has no "
                    "nvidia-smi -q ClusterUUID line)", "nvlink_domains")
            if words[0] in explicit:
                raise InvalidArgumentError(f"{source} line {ln}: host {words[0]!r} is listed twice", "nvlink_domains")
            explicit[words[0]] = check_domain_name(words[1], f"{source} line {ln}")
            continue
        m = _PREFIX.match(line.strip())
        host, rest = (m.group(1), m.group(2)) if m and not _KV.match(line) else (single, line)
        kv = _KV.match(rest)
        if kv is None:
            continue  # another line of nvidia-smi -q
        if host is None:
            raise InvalidArgumentError(
                f"{source} line {ln}: a ClusterUUID line without a 'HOST:' prefix (pdsh/clush output) is only "
                "accepted for a single host", "nvlink_domains")
        key, value = kv.group(1).lower().replace(" ", ""), kv.group(2).strip()
        table = uuid if key == "clusteruuid" else clique
        old = table.get(host)
        if old is not None and old[0] != value:
            raise InvalidArgumentError(
                f"{source} line {ln}: host {host!r} reports {kv.group(1)} {value!r} here but {old[0]!r} on line "
                f"{old[1]}; the GPUs of one host are in one NVLink domain", "nvlink_domains")
        table.setdefault(host, (value, ln))
    out = dict(explicit)
    for host, (u, ln) in uuid.items():
        if u.lower() in _NO_VALUE:
            continue
        c = clique.get(host, ("", 0))[0]
        out[host] = check_domain_name(f"{u}.{c}" if c and c.lower() not in _NO_VALUE else u, f"{source} line {ln}")
    if not out:
        raise InvalidArgumentError(f"{source}: no host with an NVLink domain (no 'HOST DOMAIN' line and no "
                                   "ClusterUUID in nvidia-smi -q output)", "nvlink_domains")
    return out


def read_nvlink_domains(path: Any, hosts: list[str] | None = None) -> dict[str, str]:
    """:func:`parse_nvsmi_query` on a file (errors name the file and line)."""
    return parse_nvsmi_query(read_text(path, "nvlink_domains"), source=str(path), hosts=hosts)
