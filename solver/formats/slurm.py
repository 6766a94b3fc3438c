"""Slurm network topology files: ``topology.conf`` (tree, block, ring) and ``topology.yaml``.

``topology.conf`` (``man 5 topology.conf``): one definition per line, ``Key=Value`` words,
keys case-insensitive, ``#`` starts a comment, a trailing ``\\`` continues the line.

* topology/tree: ``SwitchName=s Switches=<hostlist> Nodes=<hostlist> [LinkSpeed=N]``.
  A switch may be listed under several parents; several top-level switches (no common
  root) are allowed.  ``LinkSpeed`` is "arbitrary units, currently not used" by Slurm;
  rankmap reads it as **Gb/s per physical link below that switch** (divided by 8 for GB/s):
  the cap of each NIC port of a host listed in ``Nodes=``, and the capacity of the whole
  trunk (all cables, summed) from each switch listed in ``Switches=``.  Without it, a
  switch's uplink capacity is its downlink capacity / the oversubscription ratio
  (:mod:`.compose`).
* topology/block: ``BlockName=b Nodes=<hostlist>`` and ``BlockSizes=8,16,32`` (base block
  size, then higher-level sizes that are the base times a power of two: a level of size
  ``k x base`` groups ``k`` consecutive base blocks, in file order).  Default sizes: the
  smallest block's node count doubled while that many blocks exist (Slurm's default).
* topology/ring: ``RingName=r Nodes=<hostlist>`` (each ring becomes one switch).

``topology.yaml`` (``man 5 topology.yaml``): a list of topologies, each with ``topology``
(name), ``cluster_default`` and exactly one of ``tree: {switches: [{switch, children,
nodes}]}``, ``block: {block_sizes, blocks: [{block, nodes}]}`` or ``flat: true``.  The one
named by ``topology_name`` is used, else the first with ``cluster_default: true``, else the
first.

Errors name the file and line (``topology.conf line 12: ...``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from ..errors import InvalidArgumentError
from .common import read_text
from .safe import MAX_YAML_BYTES
from .hostlist import expand
from .safe import load_yaml, strict_float, strict_int

__all__ = ["Switch", "Fabric", "parse_topology_conf", "parse_topology_yaml", "read_fabric", "looks_like_yaml"]


@dataclass
class Switch:
    """One switch, block or ring of the fabric file.

    ``switches`` are child switch names, ``nodes`` host names directly below it,
    ``link_speed`` the LinkSpeed value as written, read as Gb/s per link below the switch
    (None when absent), ``line`` its line.  Readers that know physical capacities
    (``ibnetdiscover``) set ``trunk_gbps`` (child switch -> GB/s of all its cables to this
    switch, summed) and ``port_gbps`` (host -> GB/s of each of its NIC ports on this switch);
    they take precedence over ``link_speed``.
    """

    name: str
    switches: list[str] = field(default_factory=list)
    nodes: list[str] = field(default_factory=list)
    link_speed: float | None = None
    line: int = 0
    role: str = "switch"  # "switch" (tree), "block", "ring"
    trunk_gbps: dict[str, float] = field(default_factory=dict)
    port_gbps: dict[str, float] = field(default_factory=dict)


@dataclass
class Fabric:
    """A parsed Slurm topology.

    ``kind`` is ``"tree"``, ``"block"``, ``"ring"`` or ``"flat"``; ``switches`` keeps file
    order; ``hosts`` lists every host once, in order of first appearance.  The other readers
    (:mod:`.kubernetes`, :mod:`.volcano`, :mod:`.topograph`, :mod:`.ibnetdiscover`) produce a
    ``"tree"`` Fabric too, and may fill ``domains`` (host -> NVLink domain name, see
    :mod:`.nvlink`), ``host_gpus`` (host -> GPU count, e.g. a node's ``nvidia.com/gpu``
    capacity), ``host_products`` (host -> GPU product name) and ``node_labels`` (Kubernetes node
    -> its labels, for Volcano selectors), ``host_links`` (host -> network ports the file shows,
    e.g. HCA cables in ``ibnetdiscover``), ``host_homes`` (host -> its switches in NIC order);
    ``format`` names the reader.
    """

    kind: str
    switches: dict[str, Switch] = field(default_factory=dict)
    block_sizes: list[int] = field(default_factory=list)
    name: str = ""
    source: str = ""
    hosts: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    domains: dict[str, str] = field(default_factory=dict)
    host_gpus: dict[str, int] = field(default_factory=dict)
    host_products: dict[str, str] = field(default_factory=dict)
    format: str = "slurm"
    node_labels: dict[str, dict[str, str]] = field(default_factory=dict)
    host_links: dict[str, int] = field(default_factory=dict)
    host_homes: dict[str, list[str]] = field(default_factory=dict)

    def host_set(self) -> set[str]:
        return set(self.hosts)

    def parents(self) -> dict[str, list[str]]:
        """Child switch name -> parent switch names."""
        out: dict[str, list[str]] = {}
        for s in self.switches.values():
            for c in s.switches:
                out.setdefault(c, []).append(s.name)
        return out

    def leaves_of(self) -> dict[str, list[str]]:
        """Host -> the switches (blocks, rings) it is directly attached to: in file order, or in
        the order ``host_homes`` gives (its NICs are spread over them in that order)."""
        out: dict[str, list[str]] = {}
        for s in self.switches.values():
            for n in s.nodes:
                out.setdefault(n, []).append(s.name)
        for h, homes in self.host_homes.items():
            if h in out and sorted(homes) == sorted(out[h]):
                out[h] = list(homes)
        return out


#: Most switch levels a fabric file may nest (real fabrics have 2-5; the tree code recurses per level).
MAX_TREE_LEVELS = 64


def _finish(fab: Fabric, label: str, sizes_line: int = 0) -> Fabric:
    seen: dict[str, None] = {}
    for s in fab.switches.values():
        for n in s.nodes:
            seen.setdefault(n, None)
    fab.hosts = list(seen)
    for s in fab.switches.values():
        for c in s.switches:
            if c not in fab.switches:
                raise InvalidArgumentError(
                    f"{label} line {s.line}: switch {c!r} listed in Switches= of {s.name!r} is never defined",
                    "fabric")
            if c == s.name:
                raise InvalidArgumentError(f"{label} line {s.line}: switch {s.name!r} lists itself", "fabric")
    # cycles and depth, iteratively (a hostile file may chain thousands of switches)
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done
    height: dict[str, int] = {}
    for root in fab.switches:
        if state.get(root):
            continue
        path: list[str] = [root]
        stack = [iter(fab.switches[root].switches)]
        state[root] = 1
        while stack:
            c = next(stack[-1], None)
            if c is None:
                done = path.pop()
                stack.pop()
                state[done] = 2
                kids = fab.switches[done].switches
                height[done] = 1 + max((height[k] for k in kids), default=-1)
                if height[done] >= MAX_TREE_LEVELS:
                    raise InvalidArgumentError(
                        f"{label} line {fab.switches[done].line}: the switch tree below {done!r} is more than "
                        f"{MAX_TREE_LEVELS} levels deep", "fabric")
                continue
            st = state.get(c, 0)
            if st == 1:
                cyc = path[path.index(c):] + [c]
                raise InvalidArgumentError(
                    f"{label} line {fab.switches[c].line}: switch cycle {' -> '.join(cyc)}", "fabric")
            if st == 0:
                state[c] = 1
                path.append(c)
                stack.append(iter(fab.switches[c].switches))
    if fab.kind != "flat" and not fab.hosts:
        raise InvalidArgumentError(f"{label}: no node is listed under any switch or block", "fabric")
    if fab.kind == "block":
        _check_block_sizes(fab, label, sizes_line)
    return fab


def _check_block_sizes(fab: Fabric, label: str, line: int = 0) -> None:
    blocks = list(fab.switches.values())
    owner: dict[str, str] = {}
    for b in blocks:  # a node is in one base block (Slurm topology/block)
        for n in b.nodes:
            if n in owner and owner[n] != b.name:
                raise InvalidArgumentError(
                    f"{label} line {b.line}: node {n!r} is in blocks {owner[n]!r} and {b.name!r}; a node belongs "
                    "to one block", "fabric")
            owner[n] = b.name
    smallest = min(len(b.nodes) for b in blocks)
    where = f"{label} line {line}" if line else label
    if not fab.block_sizes:
        base = max(smallest, 1)
        sizes, k = [base], 2
        while k <= len(blocks):
            sizes.append(base * k)
            k *= 2
        fab.block_sizes = sizes
        return
    sizes = fab.block_sizes
    if any(s <= 0 for s in sizes):
        raise InvalidArgumentError(f"{where}: BlockSizes {sizes} must be positive", "fabric")
    base = sizes[0]
    for a, b in zip(sizes, sizes[1:]):
        ratio = b / a
        if b <= a or ratio != int(ratio) or (int(ratio) & (int(ratio) - 1)):
            raise InvalidArgumentError(
                f"{where}: BlockSizes {','.join(map(str, sizes))}: {b} is not {a} times a power of two", "fabric")
    small = [b.name for b in blocks if len(b.nodes) < base]
    if small:
        fab.warnings.append(
            f"blocks {', '.join(small[:8])}{' ...' if len(small) > 8 else ''} have fewer than the base block "
            f"size {base} nodes (Slurm will not place jobs on them)")


# ---------------------------------------------------------------- topology.conf


def _logical_lines(text: str):
    buf, start = "", 0
    for i, raw in enumerate(text.replace("\r", "").split("\n"), 1):
        line = raw.split("#", 1)[0].rstrip()
        if not buf:
            start = i
        if line.endswith("\\"):
            buf += line[:-1] + " "
            continue
        buf += line
        if buf.strip():
            yield start, buf.strip()
        buf = ""
    if buf.strip():
        yield start, buf.strip()


def parse_topology_conf(text: str, source: str = "topology.conf") -> Fabric:
    """Parse a ``topology.conf`` text (tree, block or ring plugin)."""
    switches: dict[str, Switch] = {}
    kinds: set[str] = set()
    block_sizes: list[int] = []
    sizes_line = 0
    for ln, line in _logical_lines(text):
        words = line.split()
        kv: list[tuple[str, str]] = []
        for w in words:
            if "=" not in w:
                raise InvalidArgumentError(f"{source} line {ln}: {w!r} is not of the form Key=Value", "fabric")
            k, _, v = w.partition("=")
            if not v:
                raise InvalidArgumentError(f"{source} line {ln}: {k}= has no value", "fabric")
            kv.append((k.lower(), v))
        head = kv[0][0]
        if head == "blocksizes":
            if len(kv) > 1:
                raise InvalidArgumentError(f"{source} line {ln}: unexpected {kv[1][0]!r} after BlockSizes", "fabric")
            try:
                block_sizes = [strict_int(x, "BlockSizes") for x in kv[0][1].split(",") if x.strip()]
            except InvalidArgumentError:
                raise InvalidArgumentError(f"{source} line {ln}: BlockSizes={kv[0][1]!r} is not a list of integers",
                                           "fabric") from None
            sizes_line = ln
            kinds.add("block")
            continue
        if head not in ("switchname", "blockname", "ringname"):
            raise InvalidArgumentError(
                f"{source} line {ln}: expected SwitchName=, BlockName=, RingName= or BlockSizes=, got "
                f"{words[0]!r}", "fabric")
        role = {"switchname": "switch", "blockname": "block", "ringname": "ring"}[head]
        kinds.add({"switch": "tree", "block": "block", "ring": "ring"}[role])
        name = kv[0][1]
        if name in switches:
            raise InvalidArgumentError(
                f"{source} line {ln}: {role} {name!r} already defined on line {switches[name].line}", "fabric")
        sw = Switch(name=name, line=ln, role=role)
        allowed = {"switch": ("switches", "nodes", "linkspeed"), "block": ("nodes",), "ring": ("nodes",)}[role]
        for k, v in kv[1:]:
            if k not in allowed:
                raise InvalidArgumentError(
                    f"{source} line {ln}: unknown key {k!r} for {role} {name!r} (allowed: {', '.join(allowed)})",
                    "fabric")
            if k == "switches":
                sw.switches += expand(v, field=f"fabric line {ln}")
            elif k == "nodes":
                sw.nodes += expand(v, field=f"fabric line {ln}")
            else:
                try:
                    sp = strict_float(v, "LinkSpeed")
                except InvalidArgumentError:
                    sp = float("nan")
                if not math.isfinite(sp) or sp <= 0:
                    raise InvalidArgumentError(f"{source} line {ln}: LinkSpeed={v!r} is not a positive number",
                                               "fabric")
                sw.link_speed = sp
        switches[name] = sw
    if len(kinds) > 1:
        raise InvalidArgumentError(
            f"{source}: mixes {' and '.join(sorted(kinds))} definitions; one topology plugin per file", "fabric")
    if not kinds:
        raise InvalidArgumentError(f"{source}: no SwitchName=, BlockName= or RingName= line", "fabric")
    kind = kinds.pop()
    if kind == "block" and not switches:
        raise InvalidArgumentError(f"{source} line {sizes_line}: BlockSizes without any BlockName", "fabric")
    fab = Fabric(kind=kind, switches=switches, block_sizes=block_sizes, source=source)
    return _finish(fab, source, sizes_line)


# ---------------------------------------------------------------- topology.yaml


def looks_like_yaml(text: str) -> bool:
    """True when the first meaningful line starts a YAML list of topologies."""
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        return line.startswith("- ") or line.startswith("---") or line.lower().startswith("topology")
    return False


def _yaml_load(text: str, source: str):
    """Strict YAML (:func:`.safe.load_yaml`: depth, size, aliases, duplicate keys); every
    mapping gets its line as ``__line__``."""
    return load_yaml(text, source, "fabric", mark_lines="__line__")


def _hostlist_value(v: Any, source: str, line: int, what: str) -> list[str]:
    if v is None:
        return []
    if isinstance(v, (list, tuple)):
        out: list[str] = []
        for x in v:
            out += expand(str(x), field=f"fabric line {line}")
        return out
    if isinstance(v, (str, int)):
        return expand(str(v), field=f"fabric line {line}")
    raise InvalidArgumentError(f"{source} line {line}: {what} must be a hostlist string or a list", "fabric")


def parse_topology_yaml(text: str, source: str = "topology.yaml", topology_name: str | None = None) -> Fabric:
    """Parse a ``topology.yaml`` text and return the selected topology."""
    data = _yaml_load(text, source)
    if isinstance(data, dict) and "topology" in data:
        data = [data]
    if not isinstance(data, list) or not data or not all(isinstance(t, dict) for t in data):
        raise InvalidArgumentError(f"{source}: expected a list of topologies ('- topology: NAME ...')", "fabric")
    names = []
    for t in data:
        if "topology" not in t:
            raise InvalidArgumentError(f"{source} line {t['__line__']}: topology entry without a 'topology:' name",
                                       "fabric")
        names.append(str(t["topology"]))
    if topology_name is not None:
        if topology_name not in names:
            raise InvalidArgumentError(
                f"{source}: no topology named {topology_name!r} (has: {', '.join(names)})", "topology_name")
        topo = data[names.index(topology_name)]
    else:
        defaults = [t for t in data if t.get("cluster_default") is True]
        topo = defaults[0] if defaults else data[0]
    name = str(topo["topology"])
    line = topo["__line__"]
    types = [k for k in ("tree", "block", "flat", "ring", "torus3d") if k in topo]
    if len(types) != 1:
        raise InvalidArgumentError(
            f"{source} line {line}: topology {name!r} must define exactly one of tree, block, flat "
            f"(found {', '.join(types) or 'none'})", "fabric")
    kind = types[0]
    label = source
    if kind == "flat":
        if topo["flat"] is not True:
            raise InvalidArgumentError(f"{source} line {line}: topology {name!r}: 'flat' must be true", "fabric")
        return Fabric(kind="flat", name=name, source=source)
    if kind in ("ring", "torus3d"):
        raise InvalidArgumentError(f"{source} line {line}: topology {name!r} is {kind}, which rankmap does not read "
                                   "(use tree, block or flat)", "fabric")
    body = topo[kind]
    if not isinstance(body, dict):
        raise InvalidArgumentError(f"{source} line {line}: topology {name!r}: '{kind}' must be a mapping", "fabric")
    switches: dict[str, Switch] = {}
    sizes: list[int] = []
    if kind == "tree":
        for it, ln, sname in _yaml_entries(body, "tree", "switches", "switch", source, switches):
            unknown = set(it) - {"switch", "children", "nodes", "link_speed", "__line__"}
            if unknown:
                raise InvalidArgumentError(f"{source} line {ln}: unknown key(s) {', '.join(sorted(unknown))} "
                                           f"for switch {sname!r}", "fabric")
            sw = Switch(name=sname, line=ln, role="switch",
                        switches=_hostlist_value(it.get("children"), source, ln, "children"),
                        nodes=_hostlist_value(it.get("nodes"), source, ln, "nodes"))
            if it.get("link_speed") is not None:
                try:
                    sw.link_speed = strict_float(it["link_speed"], "link_speed")
                except InvalidArgumentError:
                    sw.link_speed = float("nan")
                if not math.isfinite(sw.link_speed) or sw.link_speed <= 0:
                    raise InvalidArgumentError(f"{source} line {ln}: link_speed {it['link_speed']!r} is not a "
                                               "positive number", "fabric")
            switches[sname] = sw
    else:  # block
        entries = _yaml_entries(body, "block", "blocks", "block", source, switches)
        raw = body.get("block_sizes")
        if raw is not None:
            try:
                sizes = [strict_int(x, "block_sizes") for x in (raw.split(",") if isinstance(raw, str) else raw)]
            except (TypeError, InvalidArgumentError):
                raise InvalidArgumentError(f"{source} line {body['__line__']}: block_sizes {raw!r} is not a list "
                                           "of integers", "fabric") from None
        for it, ln, bname in entries:
            switches[bname] = Switch(name=bname, line=ln, role="block",
                                     nodes=_hostlist_value(it.get("nodes"), source, ln, "nodes"))
    fab = Fabric(kind=kind, switches=switches, block_sizes=sizes, name=name, source=source)
    return _finish(fab, label)



def _yaml_entries(body: dict, kind: str, list_key: str, name_key: str, source: str, defined: dict):
    """The entries of a ``topology.yaml`` tree / block body, as ``(entry, line, name)``.

    ``body[list_key]`` must be a non-empty list (checked now); each entry, as it is reached, a
    mapping with ``name_key`` whose name is not yet in ``defined`` (the caller adds each one).

    Raises
    ------
    InvalidArgumentError
        Field ``fabric``, with the line: no list, an entry without a name, a name defined twice.
    """
    items = body.get(list_key)
    if not isinstance(items, list) or not items:
        raise InvalidArgumentError(f"{source} line {body['__line__']}: {kind} needs a non-empty '{list_key}' list",
                                   "fabric")

    def entries():
        for it in items:
            if not isinstance(it, dict) or name_key not in it:
                ln = it.get("__line__", body["__line__"]) if isinstance(it, dict) else body["__line__"]
                raise InvalidArgumentError(f"{source} line {ln}: {name_key} entry without '{name_key}:' name", "fabric")
            ln = it["__line__"]
            name = str(it[name_key])
            if name in defined:
                raise InvalidArgumentError(
                    f"{source} line {ln}: {name_key} {name!r} already defined on line {defined[name].line}", "fabric")
            yield it, ln, name

    return entries()

# ---------------------------------------------------------------- any


def read_fabric(path: Any, topology_name: str | None = None) -> Fabric:
    """Read ``topology.conf`` or ``topology.yaml`` (detected from the name or the text)."""
    text = read_text(path, "fabric", max_bytes=MAX_YAML_BYTES)
    p = str(path)
    is_yaml = p.lower().endswith((".yaml", ".yml")) or (not p.lower().endswith(".conf") and looks_like_yaml(text))
    if is_yaml:
        return parse_topology_yaml(text, source=p, topology_name=topology_name)
    if topology_name is not None:
        raise InvalidArgumentError(
            f"topology name {topology_name!r} given, but {p} is a topology.conf (one topology only)", "topology_name")
    return parse_topology_conf(text, source=p)

