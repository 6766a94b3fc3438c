"""Volcano ``HyperNode`` objects -> a :class:`~.slurm.Fabric` tree (DESIGN §8).

Volcano's network-topology-aware scheduling describes the network as ``HyperNode`` custom
resources (``apiVersion: topology.volcano.sh/v1alpha1``, ``kind: HyperNode``; Volcano docs,
"Network Topology Aware Scheduling"):

.. code-block:: yaml

    apiVersion: topology.volcano.sh/v1alpha1
    kind: HyperNode
    metadata: {name: s0}
    spec:
      tier: 1                  # 1 = closest to the nodes; tiers count up towards the root
      members:
      - type: Node             # or HyperNode
        selector:
          exactMatch: {name: node-0}        # or regexMatch: {pattern: "^node-[0-3]$"}
                                            # or labelMatch: {matchLabels: {k: v}}

Each HyperNode becomes one switch (its ``tier`` kept as the switch's level), ``Node`` members
hang under it, ``HyperNode`` members are its child switches.  ``regexMatch`` (Go ``regexp``
``MatchString`` semantics: the pattern may match anywhere in the name; patterns that could
backtrack exponentially in Python's ``re`` are refused, see :func:`_check_pattern`) and ``labelMatch``
select among the nodes of ``--kubernetes-nodes``, which they need; ``exactMatch`` does not.
Capacities are not in the objects: NIC links get the host's NIC rate, uplinks the downlink
capacity / oversubscription (:mod:`.compose`).

Input: multi-document YAML (``---``) or ``kubectl get hypernodes -o json|yaml`` (a ``List``);
other kinds in the file are skipped, except another kind of Volcano's ``topology.volcano.sh`` group (a
misspelt ``HyperNodes``, say), which is refused.  Errors name the file and line.
"""

from __future__ import annotations

import re
import time
from typing import Any

from ..errors import InvalidArgumentError
from .common import read_text
from .safe import MAX_YAML_BYTES
from .kubernetes import _documents, _Where
from .slurm import Fabric, Switch, _finish

__all__ = ["parse_volcano_hypernodes", "read_volcano_hypernodes"]

_FIELD = "volcano_hypernodes"
#: Volcano's network-topology API group (``apiVersion: topology.volcano.sh/v1alpha1``).
API_GROUP = "topology.volcano.sh"
MAX_PATTERN = 1024


def _objects(docs: list) -> list:
    out: list = []
    for d in docs:
        if isinstance(d, dict) and isinstance(d.get("items"), list):
            out += d["items"]
        elif isinstance(d, list):
            out += d
        else:
            out.append(d)
    return out


def parse_volcano_hypernodes(text: str, source: str = "hypernodes",
                             node_labels: dict[str, dict[str, str]] | None = None) -> Fabric:
    """Read HyperNode objects into a ``"tree"`` Fabric (module docstring).

    Parameters
    ----------
    text : str
        YAML or JSON.
    source : str
        File name for messages.
    node_labels : dict, optional
        Kubernetes node name -> labels (from :func:`.kubernetes.parse_kubernetes_nodes`): the
        candidates of ``regexMatch`` / ``labelMatch`` selectors.

    Returns
    -------
    Fabric
        ``format="volcano"``; switches named after the HyperNodes, ``role="tier<N>"``.

    Raises
    ------
    InvalidArgumentError
        ``<source> line N: ...``: no HyperNode, a HyperNode without a name, listed twice, a
        missing or non-positive ``tier``, a member without a ``type`` of Node/HyperNode or
        without exactly one selector, an unknown HyperNode member, a child whose tier is not
        below its parent's, a regex/label selector without ``--kubernetes-nodes`` or matching
        no node, a bad regex, a cycle.
    """
    if not text.strip():
        raise InvalidArgumentError(f"{source}: empty file", _FIELD)
    docs, is_json = _documents(text, source, _FIELD)
    where = _Where(text, source, is_json)
    objs = [o for o in _objects(docs) if isinstance(o, dict) and o.get("kind") == "HyperNode"]
    for o in _objects(docs):  # Volcano's topology API group has HyperNode only: another kind is a typo
        api = o.get("apiVersion") if isinstance(o, dict) else None
        if isinstance(api, str) and api.startswith(API_GROUP + "/") and o.get("kind") != "HyperNode":
            meta = o.get("metadata")
            name = meta.get("name") if isinstance(meta, dict) else None
            raise InvalidArgumentError(
                f"{where(meta if isinstance(meta, dict) else o, name if isinstance(name, str) else None)}: "
                f"kind {o.get('kind')!r} is not a kind of {api} (HyperNode)", _FIELD)
    if not objs:
        raise InvalidArgumentError(f"{source}: no HyperNode object (kind: HyperNode, apiVersion "
                                   "topology.volcano.sh/v1alpha1)", _FIELD)
    switches: dict[str, Switch] = {}
    tiers: dict[str, int] = {}
    lines: dict[str, str] = {}
    pending: list[tuple[str, str, str]] = []  # (parent, child hypernode, where)
    for o in objs:
        meta = o.get("metadata")
        name = meta.get("name") if isinstance(meta, dict) else None
        w0 = where(meta if isinstance(meta, dict) else o, name if isinstance(name, str) else None)
        if not isinstance(name, str) or not name.strip():
            raise InvalidArgumentError(f"{w0}: HyperNode without metadata.name", _FIELD)
        if name in switches:
            raise InvalidArgumentError(f"{where(meta, name, 1)}: HyperNode {name!r} is defined twice (first at "
                                       f"{lines[name]})", _FIELD)
        spec = o.get("spec")
        if not isinstance(spec, dict):
            raise InvalidArgumentError(f"{w0}: HyperNode {name!r} has no spec", _FIELD)
        w = where(spec, name)
        tier = spec.get("tier")
        if isinstance(tier, str) and tier.strip().isdigit():
            tier = int(tier.strip())
        if isinstance(tier, bool) or not isinstance(tier, int) or tier < 1:
            raise InvalidArgumentError(f"{w}: HyperNode {name!r}: spec.tier {tier!r} must be an integer >= 1", _FIELD)
        members = spec.get("members")
        if not isinstance(members, list) or not members:
            raise InvalidArgumentError(f"{w}: HyperNode {name!r} has no spec.members", _FIELD)
        ln = re.search(r" line ([0-9]+)$", w0)
        sw = Switch(name=name, role=f"tier{tier}", line=int(ln.group(1)) if ln else 0)
        for i, m in enumerate(members):
            wm = where(m if isinstance(m, dict) else spec, name)
            what = f"HyperNode {name!r} member {i}"
            if not isinstance(m, dict) or m.get("type") not in ("Node", "HyperNode"):
                got = m.get("type") if isinstance(m, dict) else m
                raise InvalidArgumentError(f"{wm}: {what}: type {got!r} is not Node or HyperNode", _FIELD)
            sel = m.get("selector")
            kinds = [k for k in ("exactMatch", "regexMatch", "labelMatch") if isinstance(sel, dict) and k in sel]
            if len(kinds) != 1:
                raise InvalidArgumentError(f"{wm}: {what}: the selector needs exactly one of exactMatch, regexMatch, "
                                           f"labelMatch (found {', '.join(kinds) or 'none'})", _FIELD)
            kind, body = kinds[0], sel[kinds[0]]
            if not isinstance(body, dict):
                raise InvalidArgumentError(f"{wm}: {what}: {kind} must be a mapping", _FIELD)
            if kind == "exactMatch":
                target = body.get("name")
                if not isinstance(target, str) or not target.strip():
                    raise InvalidArgumentError(f"{wm}: {what}: exactMatch has no name", _FIELD)
                target = target.strip()
                if m["type"] == "HyperNode":
                    pending.append((name, target, wm))
                else:
                    sw.nodes.append(target)
                continue
            if m["type"] == "HyperNode":
                raise InvalidArgumentError(f"{wm}: {what}: a HyperNode member is selected by exactMatch only", _FIELD)
            if node_labels is None:
                raise InvalidArgumentError(f"{wm}: {what}: {kind} selects among the cluster's nodes; give "
                                           "--kubernetes-nodes (kubectl get nodes -o json) too", _FIELD)
            sw.nodes += _select(kind, body, node_labels, wm, what)
        switches[name] = sw
        tiers[name] = tier
        lines[name] = w0
    parent_of: dict[str, str] = {}
    for parent, child, wm in pending:
        if child in parent_of and parent_of[child] != parent:
            # a tree: a HyperNode in two parents would split its uplink between them
            raise InvalidArgumentError(f"{wm}: HyperNode {child!r} is a member of both {parent_of[child]!r} and "
                                       f"{parent!r}; a HyperNode has one parent", _FIELD)
        parent_of[child] = parent
        if child not in switches:
            raise InvalidArgumentError(f"{wm}: HyperNode {parent!r} lists HyperNode {child!r}, which is not defined",
                                       _FIELD)
        if tiers[child] >= tiers[parent]:
            raise InvalidArgumentError(f"{wm}: HyperNode {parent!r} (tier {tiers[parent]}) lists {child!r} of tier "
                                       f"{tiers[child]}; a member's tier must be lower", _FIELD)
        switches[parent].switches.append(child)
    for sw in switches.values():
        seen: set[str] = set()
        dup = [n for n in sw.nodes if n in seen or seen.add(n)]
        if dup:
            raise InvalidArgumentError(f"{lines[sw.name]}: HyperNode {sw.name!r} lists node {dup[0]!r} twice", _FIELD)
        if "/" in "".join(sw.nodes):
            bad = next(n for n in sw.nodes if "/" in n)
            raise InvalidArgumentError(f"{lines[sw.name]}: node name {bad!r} contains '/'", _FIELD)
    fab = Fabric(kind="tree", switches=switches, source=source, format="volcano")
    return _finish(fab, source)


#: Unbounded repeats (``*``, ``+``, ``{n,}``) a regexMatch pattern may hold.
MAX_UNBOUNDED_REPEATS = 2
#: Seconds all regexMatch selectors of one file may spend matching node names.
MATCH_BUDGET_SECONDS = 10.0


def _check_pattern(pattern: str) -> str | None:
    """Why ``pattern`` could take exponential time in Python's backtracking ``re`` (Volcano
    itself uses Go's linear-time RE2), or None: nested repeats, alternation inside a repeat,
    backreferences, lookarounds, more than :data:`MAX_UNBOUNDED_REPEATS` unbounded repeats."""
    try:
        from re import _constants as C, _parser as P  # Python >= 3.11
    except ImportError:  # pragma: no cover - Python 3.10
        import sre_constants as C  # type: ignore[no-redef]
        import sre_parse as P  # type: ignore[no-redef]
    unbounded = 0

    def walk(items, in_repeat: bool) -> str | None:
        nonlocal unbounded
        for op, av in items:
            if op in (C.MAX_REPEAT, C.MIN_REPEAT, getattr(C, "POSSESSIVE_REPEAT", None)):
                lo, hi, sub = av
                if in_repeat:
                    return "a repeat inside a repeat"
                if hi == C.MAXREPEAT:
                    unbounded += 1
                why = walk(sub, True)
                if why:
                    return why
            elif op == C.BRANCH:
                if in_repeat:
                    return "alternation inside a repeat"
                for alt in av[1]:
                    why = walk(alt, in_repeat)
                    if why:
                        return why
            elif op in (C.SUBPATTERN, getattr(C, "ATOMIC_GROUP", None)):
                why = walk(av[-1] if op == C.SUBPATTERN else av, in_repeat)
                if why:
                    return why
            elif op in (C.GROUPREF, C.GROUPREF_EXISTS, C.ASSERT, C.ASSERT_NOT):
                return "backreferences and lookarounds"
        return None

    why = walk(P.parse(pattern), False)
    if why is None and unbounded > MAX_UNBOUNDED_REPEATS:
        why = f"more than {MAX_UNBOUNDED_REPEATS} unbounded repeats"
    return why


def _select(kind: str, body: dict, node_labels: dict[str, dict[str, str]], where: str, what: str) -> list[str]:
    """Node names of ``node_labels`` a regexMatch / labelMatch selector picks (file order)."""
    if kind == "regexMatch":
        pattern = body.get("pattern")
        if not isinstance(pattern, str) or not pattern or len(pattern) > MAX_PATTERN:
            raise InvalidArgumentError(f"{where}: {what}: regexMatch needs a pattern of 1..{MAX_PATTERN} characters",
                                       _FIELD)
        try:
            rx = re.compile(pattern)
        except (re.error, RecursionError, OverflowError) as exc:
            raise InvalidArgumentError(f"{where}: {what}: regexMatch pattern {pattern!r} is not a valid regular "
                                       f"expression ({exc})", _FIELD) from None
        why = _check_pattern(pattern)
        if why:
            raise InvalidArgumentError(f"{where}: {what}: regexMatch pattern {pattern!r} uses {why}, which rankmap "
                                       "does not match (it could take exponential time); list the nodes with "
                                       "exactMatch or select them by labelMatch", _FIELD)
        out = []
        t0 = time.monotonic()
        for i, n in enumerate(node_labels):
            if rx.search(n):
                out.append(n)
            if not i & 255 and time.monotonic() - t0 > MATCH_BUDGET_SECONDS:
                raise InvalidArgumentError(f"{where}: {what}: regexMatch pattern {pattern!r} took more than "
                                           f"{MATCH_BUDGET_SECONDS:g} s on the node names", _FIELD)
        desc = f"pattern {pattern!r}"
    else:
        want = body.get("matchLabels")
        if not isinstance(want, dict) or not want:
            raise InvalidArgumentError(f"{where}: {what}: labelMatch needs a non-empty matchLabels mapping", _FIELD)
        want = {str(k): str(v) for k, v in want.items() if k != "__line__"}
        out = [n for n, lab in node_labels.items() if all(lab.get(k) == v for k, v in want.items())]
        desc = f"matchLabels {want}"
    if not out:
        raise InvalidArgumentError(f"{where}: {what}: {desc} matches no node of --kubernetes-nodes", _FIELD)
    return out


def read_volcano_hypernodes(path: Any, node_labels: dict[str, dict[str, str]] | None = None) -> Fabric:
    """:func:`parse_volcano_hypernodes` on a file."""
    return parse_volcano_hypernodes(read_text(path, _FIELD, max_bytes=MAX_YAML_BYTES), source=str(path), node_labels=node_labels)
