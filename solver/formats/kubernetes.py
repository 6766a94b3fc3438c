"""Kubernetes nodes (``kubectl get nodes -o json|yaml``) and Kueue ``Topology`` objects.

On Kubernetes the network topology lives in **node labels**: each topology level is a label
whose value names the node's switch (block, rack ...) at that level.  This module reads a
node list into a :class:`~.slurm.Fabric` tree: one switch per distinct label value per
level, the hosts under the lowest level they have.  Capacities are not in the labels: NIC
links get the host's NIC rate, switch uplinks the downlink capacity / the oversubscription
ratio (:mod:`.compose`; default non-blocking).

Input: the output of ``kubectl get nodes -o json`` (a ``List``/``NodeList`` with ``items``)
or ``-o yaml`` (the same, or one ``Node`` per ``---`` document); a bare list of nodes is
accepted too.  Per node (Kubernetes ``core/v1`` ``Node``):

* ``metadata.name`` -> the host name;
* ``metadata.labels`` -> the topology levels (below) and the NVLink domain;
* ``status.capacity["nvidia.com/gpu"]`` (the NVIDIA device plugin's extended resource; else
  ``status.allocatable``, else GPU Feature Discovery's ``nvidia.com/gpu.count`` label) -> GPUs
  per host; nodes with no GPU (control plane, CPU nodes) are left out when any node has GPUs;
* ``nvidia.com/gpu.product`` (GFD) -> the GPU generation when ``--gpu`` is not given.

Topology levels, top (widest) first -- named by ``levels`` (``--topology-labels a,b,c`` or a
Kueue ``Topology``'s ``spec.levels[].nodeLabel``, :func:`parse_kueue_topology`), else detected
from the first family of known keys any node has:

==============================  ==============================================================
family                          label keys (top first)
==============================  ==============================================================
Topograph                       ``fabric.topograph.run/tier-N``, N descending (tier-0 is the
                                switch closest to the node, NVIDIA/topograph label contract)
Topograph (before tier-N)       ``network.topology.nvidia.com/core``, ``.../spine``, ``.../leaf``
AWS EKS                         ``topology.k8s.aws/network-node-layer-N``, N ascending (layer 1
                                is the top of the EC2 instance-topology hierarchy)
GKE                             ``cloud.google.com/gce-topology-block``, ``-subblock``, ``-host``
==============================  ==============================================================

``kubernetes.io/hostname`` as a level (Kueue's lowest level) is the host itself, not a switch.

NVLink domain (:mod:`.nvlink`): ``accelerator.topograph.run/domain`` (Topograph), else
``nvidia.com/gpu.clique`` (GFD, ``<ClusterUUID>.<CliqueId>``).

Errors name the file and line (YAML: the node's line; JSON: the line of the node's name).
"""

from __future__ import annotations

import json
import re
from typing import Any

from ..errors import InvalidArgumentError
from .common import read_text
from .safe import MAX_JSON_BYTES, MAX_YAML_BYTES, load_json, load_yaml_all
from .slurm import MAX_TREE_LEVELS, Fabric, Switch

__all__ = ["parse_kubernetes_nodes", "read_kubernetes_nodes", "parse_kueue_topology", "read_kueue_topology",
           "split_labels", "detect_levels", "DOMAIN_LABELS", "HOSTNAME_LABEL"]

HOSTNAME_LABEL = "kubernetes.io/hostname"
GPU_RESOURCE = "nvidia.com/gpu"
GPU_COUNT_LABEL = "nvidia.com/gpu.count"
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
#: NVLink-domain labels, first present wins.
DOMAIN_LABELS = ("accelerator.topograph.run/domain", "nvidia.com/gpu.clique")

_TOPOGRAPH = re.compile(r"^fabric\.topograph\.run/tier-([0-9]+)$")
_AWS = re.compile(r"^topology\.k8s\.aws/network-node-layer-([0-9]+)$")
_LEGACY = ["network.topology.nvidia.com/core", "network.topology.nvidia.com/spine", "network.topology.nvidia.com/leaf"]
_GKE = ["cloud.google.com/gce-topology-block", "cloud.google.com/gce-topology-subblock",
        "cloud.google.com/gce-topology-host"]
_LINE = "__line__"
_LABEL_KEY = re.compile(r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")


def split_labels(value: Any, field: str = "topology_labels") -> list[str]:
    """``"a,b,c"`` or ``["a", "b"]`` -> label keys (top level first), each checked to be a
    Kubernetes label key (``[prefix/]name``)."""
    items = value.split(",") if isinstance(value, str) else list(value) if isinstance(value, (list, tuple)) else None
    if items is None:
        raise InvalidArgumentError(f"topology labels {value!r} must be comma-separated label keys", field)
    out = [str(x).strip() for x in items if str(x).strip()]
    if not out:
        raise InvalidArgumentError(f"topology labels {value!r} name no label", field)
    for k in out:
        if not _LABEL_KEY.match(k) or len(k) > 316:
            raise InvalidArgumentError(f"topology label {k!r} is not a Kubernetes label key ([prefix/]name)", field)
    if len(set(out)) != len(out):
        raise InvalidArgumentError(f"topology labels {value!r} name a label twice", field)
    return out


def detect_levels(label_sets: list[dict]) -> tuple[list[str], str]:
    """The topology label keys (top first) of the first known family any node has, and the
    family's name; ``([], "")`` when none (module docstring)."""
    keys: set[str] = set()
    for labels in label_sets:
        keys.update(labels)
    tg = sorted(((int(m.group(1)), k) for k in keys if (m := _TOPOGRAPH.match(k))), reverse=True)
    if tg:
        return [k for _, k in tg], "Topograph fabric.topograph.run/tier-N"
    legacy = [k for k in _LEGACY if k in keys]
    if legacy:
        return legacy, "Topograph network.topology.nvidia.com"
    aws = sorted((int(m.group(1)), k) for k in keys if (m := _AWS.match(k)))
    if aws:
        return [k for _, k in aws], "AWS topology.k8s.aws/network-node-layer-N"
    gke = [k for k in _GKE if k in keys]
    if gke:
        return gke, "GKE cloud.google.com/gce-topology-*"
    return [], ""


# ---------------------------------------------------------------- loading


def _documents(text: str, source: str, field: str) -> tuple[list, bool]:
    """The parsed documents of a JSON or YAML text and whether it was JSON."""
    head = text.lstrip()[:1]
    if head in ("{", "["):
        return [load_json(text, source, field, max_bytes=MAX_JSON_BYTES)], True
    if len(text.encode("utf-8", "surrogatepass")) > MAX_YAML_BYTES:
        raise InvalidArgumentError(
            f"{source}: YAML larger than {MAX_YAML_BYTES // (1 << 20)} MiB; use `kubectl get nodes -o json` for "
            "large clusters", field)
    return load_yaml_all(text, source, field, mark_lines=_LINE), False


class _Where:
    """Line numbers for messages: YAML mappings carry ``__line__``; in JSON the line of the
    first occurrence of a node's name (computed only when an error is raised)."""

    def __init__(self, text: str, source: str, is_json: bool):
        self.text, self.source, self.is_json = text, source, is_json

    def __call__(self, obj: Any, name: str | None = None, nth: int = 0) -> str:
        """``<source> line N`` for a mapping, or (JSON) for the ``nth`` ``"name": "<name>"``."""
        if isinstance(obj, dict) and isinstance(obj.get(_LINE), int):
            return f"{self.source} line {obj[_LINE]}"
        if self.is_json and name:
            hits = re.finditer(r'"name"\s*:\s*' + re.escape(json.dumps(name)), self.text)
            for k, m in enumerate(hits):
                if k == nth:
                    return f"{self.source} line {self.text.count(chr(10), 0, m.start()) + 1}"
        return self.source


def _node_items(docs: list, where: _Where, field: str) -> list[dict]:
    items: list = []
    for d in docs:
        if isinstance(d, list):
            items += d
        elif isinstance(d, dict) and isinstance(d.get("items"), list):
            items += d["items"]
        elif isinstance(d, dict) and d.get("kind") == "Node":
            items.append(d)
        elif isinstance(d, dict) and d.get("kind") in ("List", "NodeList"):
            raise InvalidArgumentError(f"{where(d)}: {d.get('kind')} without an 'items' list", field)
        else:
            kind = d.get("kind") if isinstance(d, dict) else type(d).__name__
            raise InvalidArgumentError(f"{where(d)}: expected `kubectl get nodes` output (a List of Node objects), "
                                       f"got {kind!r}", field)
    if not items:
        raise InvalidArgumentError(f"{where.source}: no nodes", field)
    return items


def _gpu_count(node: dict, labels: dict, where, field: str) -> int | None:
    status = node.get("status") if isinstance(node.get("status"), dict) else {}
    raw = None
    for part in ("capacity", "allocatable"):
        res = status.get(part)
        if isinstance(res, dict) and res.get(GPU_RESOURCE) is not None:
            raw = res[GPU_RESOURCE]
            break
    if raw is None:
        raw = labels.get(GPU_COUNT_LABEL)
    if raw is None:
        return None
    text = str(raw).strip()
    if isinstance(raw, bool) or not text.isdigit() or len(text) > 6:
        raise InvalidArgumentError(f"{where()}: GPU count {raw!r} ({GPU_RESOURCE}) is not a non-negative integer",
                                   field)
    return int(text)


def parse_kubernetes_nodes(text: str, source: str = "nodes", levels: list[str] | None = None,
                           field: str = "kubernetes_nodes") -> Fabric:
    """Read ``kubectl get nodes`` output into a ``"tree"`` :class:`~.slurm.Fabric`.

    Parameters
    ----------
    text : str
        JSON or YAML (module docstring).
    source : str
        The file name, for messages and ``Fabric.source``.
    levels : list of str, optional
        Topology label keys, top first; default: detected (:func:`detect_levels`).

    Returns
    -------
    Fabric
        ``format="kubernetes"``; switches named by their label value (qualified by the parent's
        name, ``parent>value``, where one value appears under several parents), ``role`` the
        label key; ``hosts`` the GPU nodes in file order; ``host_gpus``, ``host_products``,
        ``domains`` filled from the labels and capacities.  Nodes missing the top level label
        hang under one switch ``unlabelled`` (with a warning).

    Raises
    ------
    InvalidArgumentError
        ``<source> line N: ...`` for malformed JSON/YAML, a node without ``metadata.name``, a
        name listed twice, a name containing ``/``, non-string labels, a GPU count that is not
        an integer; a named level no node has.
    """
    if not text.strip():
        raise InvalidArgumentError(f"{source}: empty file", field)
    docs, is_json = _documents(text, source, field)
    where = _Where(text, source, is_json)
    items = _node_items(docs, where, field)
    names: list[str] = []
    seen: dict[str, str] = {}
    labels_of: dict[str, dict] = {}
    gpus: dict[str, int] = {}
    node_where: dict[str, str] = {}
    for i, node in enumerate(items):
        if not isinstance(node, dict):
            raise InvalidArgumentError(f"{where(None)}: item {i} is not a Node object", field)
        meta = node.get("metadata")
        name = meta.get("name") if isinstance(meta, dict) else None
        if not isinstance(name, str) or not name.strip():
            raise InvalidArgumentError(f"{where(meta if isinstance(meta, dict) else node)}: item {i} has no "
                                       "metadata.name", field)
        def w(meta=meta, name=name, nth=1 if name in seen else 0) -> str:  # only for a message
            return where(meta, name, nth)

        if name in seen:
            raise InvalidArgumentError(f"{w()}: node {name!r} is listed twice", field)
        if "/" in name:
            raise InvalidArgumentError(f"{w()}: node name {name!r} contains '/'", field)
        seen[name] = name
        labels = meta.get("labels") or {}
        if not isinstance(labels, dict):
            raise InvalidArgumentError(f"{w()}: node {name!r}: metadata.labels is not a mapping", field)
        labels = {k: v for k, v in labels.items() if k != _LINE}
        bad = [k for k, v in labels.items() if not isinstance(k, str) or not isinstance(v, (str, int, float))
               or isinstance(v, bool)]
        if bad:
            raise InvalidArgumentError(f"{w()}: node {name!r}: label {bad[0]!r} has value {labels[bad[0]]!r}; label "
                                       "values are strings", field)
        labels = {k: str(v) for k, v in labels.items()}
        n = _gpu_count(node, labels, w, field)
        names.append(name)
        labels_of[name] = labels
        node_where[name] = w
        if n is not None:
            gpus[name] = n
    fab = Fabric(kind="tree", source=source, format="kubernetes")
    with_gpus = [h for h in names if gpus.get(h, 0) > 0]
    hosts = with_gpus if with_gpus else names
    if with_gpus and len(with_gpus) < len(names):
        fab.warnings.append(f"{source}: {len(names) - len(with_gpus)} nodes without {GPU_RESOURCE} capacity left out")
    if levels is None:
        levels, family = detect_levels([labels_of[h] for h in hosts])
        if family:
            fab.name = family
    else:
        missing = [k for k in levels if k != HOSTNAME_LABEL and not any(k in labels_of[h] for h in hosts)]
        if missing:
            raise InvalidArgumentError(f"{source}: no node has the topology label {missing[0]!r}", field)
    levels = [k for k in levels if k != HOSTNAME_LABEL]
    if len(levels) > MAX_TREE_LEVELS:
        raise InvalidArgumentError(f"{source}: {len(levels)} topology levels; at most {MAX_TREE_LEVELS} are "
                                   "supported", "topology_labels")
    if not levels:
        fab.warnings.append(f"{source}: no topology labels found (none given and no known key); all nodes under "
                            "one switch")
    _build_tree(fab, hosts, labels_of, levels)
    for h in hosts:
        if h in gpus:
            fab.host_gpus[h] = gpus[h]
        p = labels_of[h].get(GPU_PRODUCT_LABEL)
        if p:
            fab.host_products[h] = p
        for k in DOMAIN_LABELS:
            d = labels_of[h].get(k, "").strip()
            if d:
                if len(d) > 256:
                    raise InvalidArgumentError(f"{node_where[h]()}: node {h!r}: {k} {d[:40]!r}... is longer than 256 "
                                               "characters", field)
                fab.domains[h] = d
                break
    fab.hosts = list(hosts)
    fab.node_labels = {h: labels_of[h] for h in names}
    return fab


def _build_tree(fab: Fabric, hosts: list[str], labels_of: dict[str, dict], levels: list[str]) -> None:
    """Switches per (level, path of values) and the hosts under their lowest labelled level."""
    paths: dict[str, tuple[str, ...]] = {}
    for h in hosts:
        path: list[str] = []
        for k in levels:
            v = labels_of[h].get(k, "").strip()
            if not v:
                break
            path.append(v)
        paths[h] = tuple(path)
    unlabelled = [h for h in hosts if not paths[h]]
    if unlabelled and levels:
        fab.warnings.append(f"{fab.source}: {len(unlabelled)} nodes have no {levels[0]!r} label (e.g. "
                            f"{unlabelled[0]!r}); they hang under one switch 'unlabelled'")
    # which values appear under several parents at a level (then qualified by the parent)
    parents_of: dict[tuple[int, str], set] = {}
    for p in set(paths.values()):
        for d in range(len(p)):
            parents_of.setdefault((d, p[d]), set()).add(p[:d])
    name_of: dict[tuple[str, ...], str] = {}

    def name(p: tuple[str, ...]) -> str:
        if p not in name_of:
            v = p[-1]
            nm = v if len(parents_of[(len(p) - 1, v)]) == 1 else f"{name(p[:-1])}>{v}"
            name_of[p] = nm
        return name_of[p]

    sw = fab.switches
    taken: dict[str, tuple[str, ...]] = {}

    def switch(p: tuple[str, ...]) -> Switch:
        nm = name(p) if p else "unlabelled"
        if nm in taken and taken[nm] != p:  # the same value at two levels
            nm = f"L{len(p)}:{nm}"
            name_of[p] = nm
        if nm not in sw:
            taken[nm] = p
            sw[nm] = Switch(name=nm, role=levels[len(p) - 1] if p else "unlabelled")
            if len(p) > 1:
                parent = switch(p[:-1])
                parent.switches.append(nm)
        return sw[nm]

    for h in hosts:
        switch(paths[h]).nodes.append(h)


def read_kubernetes_nodes(path: Any, levels: list[str] | None = None) -> Fabric:
    """:func:`parse_kubernetes_nodes` on a file."""
    return parse_kubernetes_nodes(read_text(path, "kubernetes_nodes"), source=str(path), levels=levels)


# ---------------------------------------------------------------- Kueue


def parse_kueue_topology(text: str, source: str = "topology", field: str = "kueue_topology") -> list[str]:
    """The node-label keys of a Kueue ``Topology`` object, top level first.

    Kueue's Topology API (``kueue.x-k8s.io/v1beta1`` / ``v1alpha1``, kind ``Topology``):
    ``spec.levels`` is a list of ``{nodeLabel: KEY}``, from the widest domain (e.g. a block)
    to the narrowest (often ``kubernetes.io/hostname``).  Other objects in the file
    (ResourceFlavor, ClusterQueue ...) are skipped.  JSON or multi-document YAML.

    Raises
    ------
    InvalidArgumentError
        ``<source> line N: ...``: no Topology, several, no levels, a level without a
        ``nodeLabel`` string, a key listed twice.
    """
    if not text.strip():
        raise InvalidArgumentError(f"{source}: empty file", field)
    docs, is_json = _documents(text, source, field)
    where = _Where(text, source, is_json)
    objs: list = []
    for d in docs:
        objs += d.get("items", []) if isinstance(d, dict) and isinstance(d.get("items"), list) else \
            (d if isinstance(d, list) else [d])
    topos = [o for o in objs if isinstance(o, dict) and o.get("kind") == "Topology"
             and str(o.get("apiVersion", "kueue.x-k8s.io/")).startswith("kueue.x-k8s.io/")]
    if not topos:
        raise InvalidArgumentError(f"{source}: no Kueue Topology object (kind: Topology, apiVersion "
                                   "kueue.x-k8s.io/...)", field)
    if len(topos) > 1:
        names = [str((t.get("metadata") or {}).get("name", "?")) for t in topos]
        raise InvalidArgumentError(f"{where(topos[1])}: {len(topos)} Topology objects ({', '.join(names)}); keep the "
                                   "one the ResourceFlavor uses", field)
    t = topos[0]
    spec = t.get("spec")
    lv = spec.get("levels") if isinstance(spec, dict) else None
    if not isinstance(lv, list) or not lv:
        raise InvalidArgumentError(f"{where(spec if isinstance(spec, dict) else t)}: Topology has no spec.levels list",
                                   field)
    out = []
    for i, item in enumerate(lv):
        key = item.get("nodeLabel") if isinstance(item, dict) else None
        if not isinstance(key, str) or not key.strip():
            raise InvalidArgumentError(f"{where(item if isinstance(item, dict) else spec)}: spec.levels[{i}] has no "
                                       "nodeLabel string", field)
        out.append(key.strip())
    try:
        return split_labels(out, field)
    except InvalidArgumentError as exc:
        raise InvalidArgumentError(f"{where(spec)}: {exc}", field) from None


def read_kueue_topology(path: Any) -> list[str]:
    """:func:`parse_kueue_topology` on a file."""
    return parse_kueue_topology(read_text(path, "kueue_topology", max_bytes=MAX_YAML_BYTES), source=str(path))
