"""``ibnetdiscover`` output (InfiniBand subnet discovery) -> a :class:`~.slurm.Fabric` tree.

``ibnetdiscover`` (infiniband-diags, ``man 8 ibnetdiscover``) prints one block per node::

    vendid=0x2c9
    switchguid=0x2c5eab0300b87b40(2c5eab0300b87b40)
    Switch  65 "S-2c5eab0300b87b40"   # "MF0;leaf-04-04:MQM9701/U1" enhanced port 0 lid 73 lmc 0
    [1]     "H-e09d7303007a4bd8"[1](e09d7303007a4bd8)   # "node101 mlx5_5" lid 647 4xNDR
    [35]    "S-2c5eab0300c26280"[32]                   # "MF0;spine-02:MQM9701/U1" lid 236 4xNDR

    Ca      1 "H-e09d7303007a4bd8"    # "node101 mlx5_5"
    [1](e09d7303007a4bd8)  "S-2c5eab0300b87b40"[1]  # lid 647 lmc 0 "MF0;leaf-04-04:MQM9701/U1" lid 73 4xNDR

A node header is ``Switch|Ca|Router <ports> "<id>" # "<description>" ...``; a port line
``[port](guid) "<peer id>"[peer port](peer guid) # ... "<peer description>" ... <W>x<SPEED>``.
Every cable appears once per end; it is counted once.

What rankmap makes of it (physical capacities, DESIGN §2):

* **link rate** = width x per-lane data rate / 8: ``4xNDR`` = 4 x 100 Gb/s = 400 Gb/s =
  **50 GB/s** per direction (``bandwidths.md`` §3: SDR 2, DDR 4, QDR 8, FDR 13.64 (64b/66b),
  EDR 25, HDR 50, NDR 100, XDR 200 Gb/s per lane of data);
* **hosts**: a ``Ca`` whose description is ``"<host> <hca>"`` (the default ``nodedesc`` of
  rdma-core: host name, then the device, e.g. ``node101 mlx5_5``) belongs to ``<host>``; a
  Ca still reporting the vendor default (``MT4129 ConnectX7 Mellanox Technologies``), a
  machine calling itself ``localhost`` or a SHARP ``Aggregation Node`` names no host and is
  left out (with a warning);
* **switches**: named by the description's system name (``MF0;leaf-04-04:MQM9701/U1`` ->
  ``leaf-04-04``), else the description, else the id;
* **levels**: switches with hosts are leaves (level 0); every other switch's level is its
  hop distance from the nearest leaf; a cable between levels d and d+1 is an uplink of the
  level-d switch.  Switches of one level above the leaves that share a switch below them
  are one logical switch (ECMP over the spines of a Clos, even when a few cables are
  missing: ``spine-02+7`` for 8 spines), and all cables between two (logical) switches are
  summed into one trunk (``Switch.trunk_gbps``: a leaf with 2 NDR cables to each of 8
  spines has one 8 x 2 x 50 = 800 GB/s trunk).  Cables between switches of one level are
  ignored (with a warning: not a tree);
* a host's HCA ports cap its NIC links at their rate (``Switch.port_gbps``); a host on
  several leaves (rails) spreads its NICs over them, NIC i to the leaf of its i-th HCA in
  device-name order (``mlx5_0``, ``mlx5_1``, ...; ``Fabric.host_homes``).

Errors name the file and line.
"""

from __future__ import annotations

import re
from typing import Any

from ..errors import InvalidArgumentError
from .common import read_text
from .slurm import Fabric, Switch, _finish

__all__ = ["parse_ibnetdiscover", "read_ibnetdiscover", "LANE_GBPS", "link_gbps"]

_FIELD = "ibnetdiscover"

#: Data rate per lane, Gb/s, by InfiniBand speed name (``bandwidths.md`` §3; FDR10 is
#: 10.3125 Gb/s signalling with 64b/66b).
LANE_GBPS = {"SDR": 2.0, "DDR": 4.0, "QDR": 8.0, "FDR10": 10.0, "FDR": 13.64, "EDR": 25.0, "HDR": 50.0,
             "NDR": 100.0, "XDR": 200.0}

_HEADER = re.compile(r'^(Switch|Ca|Router)\s+([0-9]+)\s+"([^"]+)"\s*(?:#\s*"([^"]*)")?(.*)$')
_PORT = re.compile(r'^\[([0-9]+)\](?:\(([0-9a-fA-F]+)\))?\s+"([^"]+)"\[([0-9]+)\](?:\(([0-9a-fA-F]+)\))?\s*(?:#(.*))?$')
_RATE = re.compile(r"\b([0-9]+)x([A-Z]+[0-9]*)\b")
_KV = re.compile(r"^[a-z]+guid=|^vendid=|^devid=|^sysimgguid=|^[a-z]+=", re.I)
_DEFAULT_DESC = re.compile(r"^MT[0-9]+\b|Mellanox Technologies|Aggregation Node|^localhost(\.localdomain)?\b", re.I)


#: InfiniBand link widths (lanes).
WIDTHS = (1, 2, 4, 8, 12)


def link_gbps(token: str) -> float | None:
    """``"4xNDR"`` -> 50.0 GB/s per direction; None for an unknown speed or width."""
    m = _RATE.fullmatch(token.strip())
    if not m or m.group(2) not in LANE_GBPS or len(m.group(1)) > 2 or int(m.group(1)) not in WIDTHS:
        return None
    return int(m.group(1)) * LANE_GBPS[m.group(2)] / 8.0


def _natural(text: str) -> tuple:
    """Sort key: ``mlx5_2`` before ``mlx5_10``."""
    return tuple(int(t) if t.isdigit() else t for t in re.split(r"([0-9]+)", text))


def _switch_name(desc: str | None, ident: str) -> str:
    if desc:
        m = re.match(r"^[^;]*;([^:]+):", desc)
        return (m.group(1) if m else desc).strip() or ident
    return ident


def parse_ibnetdiscover(text: str, source: str = "ibnetdiscover") -> Fabric:
    """Read ``ibnetdiscover`` output into a ``"tree"`` Fabric (module docstring).

    Returns
    -------
    Fabric
        ``format="ibnetdiscover"``; leaf switches list their hosts (``port_gbps`` = the HCA
        link's GB/s), upper switches their children (``trunk_gbps`` = all cables summed, GB/s).

    Raises
    ------
    InvalidArgumentError
        ``<source> line N: ...``: a line that is neither a header, a port line nor a
        ``key=value`` line; a port line before any header; a link without a known rate
        (``4xNDR``); no host at all.
    """
    kind_of: dict[str, str] = {}
    desc_of: dict[str, str] = {}
    links: dict[tuple, tuple[float, int]] = {}  # frozenset of (id, port) ends -> (GB/s, line)
    current: str | None = None
    for ln, raw in enumerate(text.replace("\r", "").split("\n"), 1):
        line = raw.strip()
        if not line or line.startswith("#") or _KV.match(line):
            continue
        h = _HEADER.match(line)
        if h:
            current = h.group(3)
            kind_of[current] = h.group(1)
            if h.group(4) is not None:
                desc_of[current] = h.group(4)
            continue
        p = _PORT.match(line)
        if not p:
            raise InvalidArgumentError(f"{source} line {ln}: {line[:60]!r} is not an ibnetdiscover node header "
                                       "(Switch/Ca ... \"id\") or port line ([port] \"peer\"[port])", _FIELD)
        if current is None:
            raise InvalidArgumentError(f"{source} line {ln}: port line before any Switch/Ca header", _FIELD)
        peer = p.group(3)
        comment = p.group(6) or ""
        quoted = re.findall(r'"([^"]*)"', comment)
        if quoted and peer not in desc_of:
            desc_of[peer] = quoted[-1]
        kind_of.setdefault(peer, "Switch" if peer.startswith("S-") else "Ca")
        rates = _RATE.findall(comment)
        if not rates:
            raise InvalidArgumentError(f"{source} line {ln}: link {current}[{p.group(1)}] - {peer}[{p.group(4)}] has "
                                       "no rate (e.g. 4xNDR)", _FIELD)
        gbps = link_gbps(f"{rates[-1][0]}x{rates[-1][1]}")
        if gbps is None or gbps <= 0:
            raise InvalidArgumentError(f"{source} line {ln}: unknown link rate {rates[-1][0]}x{rates[-1][1]} (widths "
                                       f"{', '.join(map(str, WIDTHS))}; speeds {', '.join(LANE_GBPS)})", _FIELD)
        key = frozenset(((current, int(p.group(1))), (peer, int(p.group(4)))))
        links.setdefault(key, (gbps, ln))
    if not kind_of:
        raise InvalidArgumentError(f"{source}: no Switch or Ca block (not ibnetdiscover output?)", _FIELD)
    fab = Fabric(kind="tree", source=source, format="ibnetdiscover")
    # hosts of the Cas
    host_of: dict[str, str] = {}
    dev_of: dict[str, str] = {}
    nameless = 0
    for ident, kind in kind_of.items():
        if kind == "Switch":
            continue
        d = (desc_of.get(ident) or "").strip()
        words = d.split()
        if not words or _DEFAULT_DESC.search(d) or len(words) > 2:
            nameless += 1
            continue
        if "/" in words[0]:
            raise InvalidArgumentError(f"{source}: host name {words[0]!r} (HCA {ident}) contains '/'", _FIELD)
        host_of[ident] = words[0]
        dev_of[ident] = words[1] if len(words) > 1 else ""
    if nameless:
        fab.warnings.append(f"{source}: {nameless} HCAs report no host name (a vendor default description such as "
                            "'MT4129 ConnectX7 Mellanox Technologies', or a SHARP aggregation node); left out")
    names: dict[str, str] = {}
    used: dict[str, str] = {}
    for ident, kind in kind_of.items():
        if kind != "Switch":
            continue
        nm = _switch_name(desc_of.get(ident), ident)
        if nm in used and used[nm] != ident:
            nm = f"{nm}~{ident}"
        used[nm] = ident
        names[ident] = nm
    # host ports and switch trunks
    host_ports: dict[str, dict[str, float]] = {}  # switch id -> host -> GB/s (largest HCA link)
    host_devs: dict[str, list[tuple[str, str]]] = {}  # host -> [(switch id, HCA device name)]
    trunks: dict[tuple[str, str], float] = {}
    for key, (gbps, ln) in links.items():
        (a, _), (b, _) = sorted(key) if len(key) == 2 else (next(iter(key)), next(iter(key)))
        ka, kb = kind_of.get(a), kind_of.get(b)
        if ka == "Switch" and kb == "Switch":
            if a != b:
                pair = (a, b) if a < b else (b, a)
                trunks[pair] = trunks.get(pair, 0.0) + gbps
            continue
        sw, ca = (a, b) if ka == "Switch" else (b, a)
        if kind_of.get(sw) != "Switch" or ca not in host_of:
            continue
        hp = host_ports.setdefault(sw, {})
        hp[host_of[ca]] = max(hp.get(host_of[ca], 0.0), gbps)
        fab.host_links[host_of[ca]] = fab.host_links.get(host_of[ca], 0) + 1
        host_devs.setdefault(host_of[ca], []).append((sw, dev_of.get(ca, "")))
    if not host_ports:
        raise InvalidArgumentError(f"{source}: no HCA with a host name is linked to a switch", _FIELD)
    # levels: hop distance from the leaves
    adj: dict[str, list[str]] = {}
    for a, b in trunks:
        adj.setdefault(a, []).append(b)
        adj.setdefault(b, []).append(a)
    level = {s: 0 for s in host_ports}
    frontier = list(host_ports)
    while frontier:
        nxt = []
        for s in frontier:
            for t in adj.get(s, []):
                if t not in level:
                    level[t] = level[s] + 1
                    nxt.append(t)
        frontier = nxt
    order = {s: i for i, s in enumerate(kind_of)}
    # ECMP groups, level by level: switches of level L that share a child (group) of level L - 1
    # are one logical switch (the spines of a Clos, even with a few cables missing), so the
    # switch forest stays a tree with summed uplinks (DESIGN §2)
    group_of: dict[str, str] = {s: s for s in level if level[s] == 0}
    up: dict[str, set[str]] = {}
    flat = 0
    for a, b in trunks:
        if a not in level or b not in level:
            continue
        if level[a] == level[b]:
            flat += 1
            continue
        child, parent = (a, b) if level[a] < level[b] else (b, a)
        up.setdefault(child, set()).add(parent)
    top = max(level.values())
    for lvl in range(1, top + 1):
        parent_uf = {s: s for s in level if level[s] == lvl}

        def find(x: str) -> str:
            while parent_uf[x] != x:
                parent_uf[x] = parent_uf[parent_uf[x]]
                x = parent_uf[x]
            return x

        below: dict[str, set[str]] = {}
        for c, ps in up.items():
            if level[c] == lvl - 1:
                below.setdefault(group_of[c], set()).update(ps)
        for ps in below.values():
            first, *rest = sorted(ps, key=order.get)
            for q in rest:
                ra, rb = find(first), find(q)
                if ra != rb:
                    parent_uf[max(ra, rb, key=order.get)] = min(ra, rb, key=order.get)
        for sw in parent_uf:
            group_of[sw] = find(sw)
    members: dict[str, list[str]] = {}
    for sw in sorted(group_of, key=order.get):
        members.setdefault(group_of[sw], []).append(sw)
    gname: dict[str, str] = {}
    for rep, ms in members.items():
        if len(ms) == 1:
            gname[rep] = names[rep]
        else:
            by_name = sorted((names[m] for m in ms), key=_natural)
            gname[rep] = f"{by_name[0]}+{len(ms) - 1}"
            fab.warnings.append(
                f"{source}: {len(ms)} level-{level[rep]} switches ({by_name[0]} ... {by_name[-1]}) share the "
                f"switches below them (ECMP): one switch {gname[rep]!r} with their cables summed")
    switches: dict[str, Switch] = {}
    for rep in sorted(members, key=lambda r: (level[r], order[r])):
        switches[gname[rep]] = Switch(name=gname[rep], role=f"level{level[rep]}")
    for sw, hp in host_ports.items():
        s = switches[gname[group_of[sw]]]
        s.nodes = list(hp)
        s.port_gbps = dict(hp)
    for (a, b), gbps in trunks.items():
        if a not in level or b not in level or level[a] == level[b]:
            continue
        child, parent = (a, b) if level[a] < level[b] else (b, a)
        cg, pg = gname[group_of[child]], gname[group_of[parent]]
        ps = switches[pg]
        if cg not in ps.trunk_gbps:
            ps.switches.append(cg)
        ps.trunk_gbps[cg] = ps.trunk_gbps.get(cg, 0.0) + gbps
    # each host's leaves in the order of its HCAs (mlx5_0, mlx5_1, ... : NIC i -> the i-th)
    for h, devs in host_devs.items():
        ordered = sorted(devs, key=lambda sd: _natural(sd[1]))
        fab.host_homes[h] = list(dict.fromkeys(gname[group_of[sw]] for sw, _ in ordered))
    if flat:
        fab.warnings.append(f"{source}: {flat} switch-to-switch trunks join switches of the same level; ignored "
                            "(the fabric model needs a tree)")
    unreached = [names[s] for s in names if s not in level]
    if unreached:
        fab.warnings.append(f"{source}: {len(unreached)} switches are not connected to any host's switch; left out")
    fab.switches = switches
    return _finish(fab, source)


def read_ibnetdiscover(path: Any) -> Fabric:
    """:func:`parse_ibnetdiscover` on a file."""
    return parse_ibnetdiscover(read_text(path, _FIELD), source=str(path))
