"""Topograph's switch/block topology model (YAML) -> a :class:`~.slurm.Fabric` tree.

NVIDIA Topograph (github.com/NVIDIA/topograph) describes a cluster in a YAML *model*
(``tests/models/*.yaml``, read by ``pkg/models/model.go``) that its simulation providers turn
into Slurm, Kubernetes-label and Volcano output.  Two shapes exist; both are read:

Current (``switches`` is a mapping, ``blocks`` a list)::

    switches:
      spine-1: {switches: [leaf-1-1, leaf-1-2], labels: {...}}
    blocks:
    - switch: leaf-1-1                 # the network switch the block's nodes hang under
      nodes: [node[1101-1118]]         # Slurm hostlists
      annotations: {accelerator.topology.test/domain: nvl-1-1}

Earlier (``switches`` is a list, ``capacity_blocks`` separate)::

    switches:
    - {name: spine1, switches: [ibleaf1, ibleaf2]}
    - {name: ibleaf1, capacity_blocks: [cb1, cb2]}
    capacity_blocks:
    - {name: cb1, nvlink: nv1, type: H100, nodes: [n1-1, n1-2]}

A block (capacity block) is a set of nodes; its **NVLink domain** (:mod:`.nvlink`) is the
block's ``accelerator.topology.test/domain`` annotation (current), its
``accelerator.topograph.run/domain`` / ``accelerated.topology.nvidia.com/level-0`` /
``nvidia.com/gpu.clique`` label, or its ``nvlink`` field (earlier shape); a block naming
none is not an NVLink domain.  ``type`` (earlier shape) is the GPU product.  As in
Topograph, a switch has at most one parent and a node is in one block.  Capacities are not
in the model: NIC links get the host's NIC rate, uplinks the downlink capacity /
oversubscription (:mod:`.compose`).  Errors name the file and line.
"""

from __future__ import annotations

from typing import Any

from ..errors import InvalidArgumentError
from .common import read_text
from .safe import MAX_YAML_BYTES
from .hostlist import expand
from .safe import load_yaml
from .slurm import Fabric, Switch, _finish

__all__ = ["parse_topograph_model", "read_topograph_model", "BLOCK_DOMAIN_KEYS"]

_FIELD = "topograph_model"
_LINE = "__line__"
#: Where a block names its NVLink domain: (``annotations`` | ``labels``, key), first wins.
BLOCK_DOMAIN_KEYS = (("annotations", "accelerator.topology.test/domain"),
                     ("labels", "accelerator.topograph.run/domain"),
                     ("labels", "accelerated.topology.nvidia.com/level-0"),
                     ("labels", "nvidia.com/gpu.clique"))


def _at(source: str, obj: Any, fallback: Any = None) -> str:
    for o in (obj, fallback):
        if isinstance(o, dict) and isinstance(o.get(_LINE), int):
            return f"{source} line {o[_LINE]}"
    return source


def _names(value: Any, where: str, what: str) -> list[str]:
    if value is None:
        return []
    if isinstance(value, (str, int)):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(x, (str, int)) and not isinstance(x, bool) for x in value):
        raise InvalidArgumentError(f"{where}: {what} must be a list of names", _FIELD)
    out: list[str] = []
    for x in value:
        try:
            out += expand(str(x), field=_FIELD)
        except InvalidArgumentError as exc:
            raise InvalidArgumentError(f"{where}: {what}: {exc.message}", _FIELD) from None
    return out


def _str_map(value: Any, where: str, what: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise InvalidArgumentError(f"{where}: {what} must be a mapping", _FIELD)
    return {str(k): str(v) for k, v in value.items() if k != _LINE}


def parse_topograph_model(text: str, source: str = "model.yaml") -> Fabric:
    """Read a Topograph model into a ``"tree"`` Fabric (module docstring).

    Returns
    -------
    Fabric
        ``format="topograph"``; ``domains`` from the blocks that name an NVLink domain,
        ``host_products`` from ``type``.

    Raises
    ------
    InvalidArgumentError
        ``<source> line N: ...``: malformed YAML, neither shape, a switch or block entry
        that is not a mapping, an unknown switch or block reference, a switch with two
        parents, a node in two blocks, a block without nodes, a cycle.
    """
    if not text.strip():
        raise InvalidArgumentError(f"{source}: empty file", _FIELD)
    data = load_yaml(text, source, _FIELD, mark_lines=_LINE)
    if not isinstance(data, dict) or ("switches" not in data and "blocks" not in data
                                      and "capacity_blocks" not in data):
        raise InvalidArgumentError(f"{_at(source, data)}: not a Topograph model (expected 'switches' and 'blocks' or "
                                   "'capacity_blocks')", _FIELD)
    fab = Fabric(kind="tree", source=source, format="topograph")
    sw: dict[str, Switch] = {}
    parent_of: dict[str, str] = {}
    raw = data.get("switches")
    blocks: list[tuple[str, list[str], dict[str, str], str | None, str]] = []  # (switch, nodes, domain, type, where)
    if isinstance(raw, list):  # earlier shape
        cbs = data.get("capacity_blocks") or []
        if not isinstance(cbs, list):
            raise InvalidArgumentError(f"{_at(source, data)}: capacity_blocks must be a list", _FIELD)
        by_name: dict[str, dict] = {}
        for cb in cbs:
            if not isinstance(cb, dict) or not isinstance(cb.get("name"), (str, int)):
                raise InvalidArgumentError(f"{_at(source, cb, data)}: capacity block without a name", _FIELD)
            if str(cb["name"]) in by_name:
                raise InvalidArgumentError(f"{_at(source, cb)}: capacity block {cb['name']!r} is defined twice", _FIELD)
            by_name[str(cb["name"])] = cb
        used: set[str] = set()
        for s in raw:
            if not isinstance(s, dict) or not isinstance(s.get("name"), (str, int)):
                raise InvalidArgumentError(f"{_at(source, s, data)}: switch entry without a name", _FIELD)
            name, w = str(s["name"]), _at(source, s)
            if name in sw:
                raise InvalidArgumentError(f"{w}: switch {name!r} is defined twice", _FIELD)
            sw[name] = Switch(name=name, line=s.get(_LINE, 0), switches=_names(s.get("switches"), w, "switches"))
            for b in _names(s.get("capacity_blocks"), w, "capacity_blocks"):
                if b not in by_name:
                    raise InvalidArgumentError(f"{w}: switch {name!r} lists capacity block {b!r}, which is not "
                                               "defined", _FIELD)
                cb = by_name[b]
                used.add(b)
                dom = str(cb["nvlink"]).strip() if cb.get("nvlink") not in (None, "") else None
                typ = str(cb["type"]).strip() if cb.get("type") not in (None, "") else None
                blocks.append((name, _names(cb.get("nodes"), _at(source, cb), "nodes"), {"": dom} if dom else {},
                               typ, _at(source, cb)))
        for b, cb in by_name.items():
            if b not in used:
                dom = str(cb["nvlink"]).strip() if cb.get("nvlink") not in (None, "") else None
                blocks.append(("", _names(cb.get("nodes"), _at(source, cb), "nodes"), {"": dom} if dom else {},
                               str(cb["type"]) if cb.get("type") else None, _at(source, cb)))
    else:  # current shape
        if raw is not None and not isinstance(raw, dict):
            raise InvalidArgumentError(f"{_at(source, data)}: switches must be a mapping (or a list of switches)",
                                       _FIELD)
        for name, s in (raw or {}).items():
            if name == _LINE:
                continue
            name = str(name)
            w = _at(source, s, raw)
            if not isinstance(s, dict):
                raise InvalidArgumentError(f"{w}: switch {name!r} has an empty or non-mapping definition", _FIELD)
            if s.get("name") not in (None, name):
                raise InvalidArgumentError(f"{w}: switch key {name!r} does not match its name {s['name']!r}", _FIELD)
            sw[name] = Switch(name=name, line=s.get(_LINE, 0), switches=_names(s.get("switches"), w, "switches"))
        for s in list(sw.values()):  # leaves referenced but not defined (Topograph materializes them)
            for c in s.switches:
                sw.setdefault(c, Switch(name=c, line=s.line))
        items = data.get("blocks") or []
        if not isinstance(items, list):
            raise InvalidArgumentError(f"{_at(source, data)}: blocks must be a list", _FIELD)
        for i, b in enumerate(items):
            if not isinstance(b, dict):
                raise InvalidArgumentError(f"{_at(source, data)}: blocks[{i}] is not a mapping", _FIELD)
            w = _at(source, b)
            name = str(b.get("switch") or "")
            if name and name not in sw:
                raise InvalidArgumentError(f"{w}: block {i} references unknown switch {name!r}", _FIELD)
            doms = {}
            for part, key in BLOCK_DOMAIN_KEYS:
                v = _str_map(b.get(part), w, part).get(key, "").strip()
                if v:
                    doms = {key: v}
                    break
            blocks.append((name, _names(b.get("nodes"), w, "nodes"), doms, None, w))
    for s in sw.values():
        for c in s.switches:
            if c not in sw:
                raise InvalidArgumentError(f"{source} line {s.line}: switch {s.name!r} references unknown sub-switch "
                                           f"{c!r}", _FIELD)
            if c in parent_of and parent_of[c] != s.name:
                raise InvalidArgumentError(f"{source} line {s.line}: switch {c!r} has two parent switches "
                                           f"{parent_of[c]!r} and {s.name!r}", _FIELD)
            parent_of[c] = s.name
    seen: dict[str, str] = {}
    loose: list[str] = []
    for name, nodes, doms, typ, w in blocks:
        if not nodes:
            raise InvalidArgumentError(f"{w}: block must declare at least one node", _FIELD)
        for n in nodes:
            if n in seen:
                raise InvalidArgumentError(f"{w}: node {n!r} belongs to more than one block (also {seen[n]})", _FIELD)
            if "/" in n:
                raise InvalidArgumentError(f"{w}: node name {n!r} contains '/'", _FIELD)
            seen[n] = w
            if doms:
                fab.domains[n] = next(iter(doms.values()))
            if typ:
                fab.host_products[n] = typ
        if name:
            sw[name].nodes += nodes
        else:
            loose += nodes
    if loose:
        sw["unattached"] = Switch(name="unattached", nodes=loose)
        fab.warnings.append(f"{source}: {len(loose)} nodes are in blocks without a switch; they hang under one "
                            "switch 'unattached'")
    fab.switches = sw
    return _finish(fab, source)


def read_topograph_model(path: Any) -> Fabric:
    """:func:`parse_topograph_model` on a file."""
    return parse_topograph_model(read_text(path, _FIELD, max_bytes=MAX_YAML_BYTES), source=str(path))
