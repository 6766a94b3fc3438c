"""Which flows a layout's traffic makes as NCCL runs it, written out pair by pair for the SimGrid yardstick.

Independent of rankmap's time model (nothing of ``rankmap.solver.cost`` is imported): the
shapes of DESIGN §3 as NCCL runs them, and the subgroups of a class's parts, are computed
here with plain loops over the groups of the Megatron catalogue
(``rankmap.solver.megatron_groups``, oracle-tested).  Used by :mod:`simgrid_model`.

What NCCL sees of a GPU (:func:`nccl_view`, from the cluster graph alone):

* its **node**: the GPUs NCCL treats as one node: the GPU's ``nvlink_domain`` when it has
  one (a multi-node NVLink rack is one node), else its ``host`` (else the GPU itself);
* its **rail**: its nearest NIC, found breadth first from the GPU: the GPU's own neighbours
  first, then up to 3 hops through PCIe switches and CPUs of its host (or of no host), the
  first hop that finds NICs wins and among those the lowest ``nic_index`` (then node name);
  the NICs nearest to a node's GPUs are numbered 0, 1, … in the order (NIC's host,
  ``nic_index`` or else last, node name), and the GPU's rail is its NIC's number; ``None``
  when no NIC is that near.

Flows of one group, its members in ascending global rank, payload S, n members:

* ring collectives (``ring_all_reduce`` 2(n−1)/n·S per ring edge, ``ring_all_gather``
  (n−1)/n·S, ``ring_p2p`` S; call it fb):

  - one node: a ring over the members in rank order, fb per edge;
  - several nodes: the members grouped by node, nodes in order of first appearance (NCCL's
    node order), members of a node in rank order; c = the least over the group's nodes of
    the number of distinct rails of its members there; c channels of fb/c, each a path
    (not a ring) through every node's members, entering at the first member on its rail
    (the j-th smallest; no rail sorts first) and leaving from its exit member
    (:func:`_node_paths` says which, as NCCL's search picks it); the last member on rail j
    of node i sends to the first member on rail j of node i+1, the last node to the first.

* ``all_to_all``: S/n from every member to every other; ``p2p_chain``: S between
  consecutive members (rank order) each way, plus ``wrap``·S between the last and the
  first each way (interleaved pipeline).  With PXN (NCCL's default, ``ncclTopoGetNetDev``,
  ``src/graph/search.cc:1420-1477``) a flow to a member on another node first crosses to
  the relay on the sender's host: the group's member there with the receiver's device index
  (``local_index``, else position among the host's GPUs) if it has a NIC, or rather the
  member owning the NIC that one uses (its send/recv NIC ``p2p``: ``ncclTopoGetLocalNet``,
  ``topo.cc:2039-2075``; the owner: the member with the least device index whose NIC it is,
  ``ncclTopoGetLocalGpu``); directly when that relay is the sender, there is none, or it is not
  NVLink-connected to the sender (both on an NVSwitch, or a direct GPU-GPU link).  Both legs
  carry the flow's bytes.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

__all__ = ["CLASS_SPECS", "NIC_SEARCH_HOPS", "nccl_view", "group_flows", "class_parts", "class_part_triples"]

#: class -> (group name in the Megatron catalogue, collective shape)
CLASS_SPECS: dict[str, tuple[str, str]] = {
    "tp": ("TENSOR_MODEL_PARALLEL_GROUP", "ring_all_reduce"),
    "cp": ("CONTEXT_PARALLEL_GROUP", "ring_p2p"),
    "ep": ("EXPERT_MODEL_PARALLEL_GROUP", "all_to_all"),
    "etp": ("EXPERT_TENSOR_PARALLEL_GROUP", "ring_all_reduce"),
    "dp": ("DATA_PARALLEL_GROUP_WITH_CP", "ring_all_gather"),
    "edp": ("EXPERT_DATA_PARALLEL_GROUP", "ring_all_gather"),
    "pp": ("PIPELINE_MODEL_PARALLEL_GROUP", "p2p_chain"),
    "embedding": ("EMBEDDING_GROUP", "ring_all_reduce"),
}

#: How far (hops through PCIe switches and CPUs) a GPU's nearest NIC is looked for.
NIC_SEARCH_HOPS = 3

#: Sorts after any real ``nic_index``.
_NO_INDEX = 1 << 30


def _nic_index(data: Mapping) -> int:
    idx = data.get("nic_index")
    if isinstance(idx, int) and not isinstance(idx, bool):
        return idx
    return _NO_INDEX


class RailMap(dict):
    """GPU -> rail (its nearest NIC's number) or None; ``.all``: GPU -> every nearest NIC's number, ascending;
    ``.local``: GPU -> device index; ``.host``: GPU -> host; ``.p2p``: GPU -> its send/recv NIC's number."""

    all: dict = {}
    local: dict = {}
    host: dict = {}
    p2p: dict = {}
    nvs: dict = {}
    direct: set = set()


def nccl_view(graph) -> tuple[dict, dict]:
    """``(node_of, rail_of)``: each GPU's NCCL node and rail (the module doc says how).

    Returns
    -------
    node_of : dict GPU -> hashable
        ``("domain", name)`` or ``("host", name)``.
    rail_of : RailMap, GPU -> int or None
        With ``.all``: every NIC at the nearest distance per GPU (ring channels start at each).
    """
    nodes = graph.nodes
    node_of: dict[Any, Any] = {}
    nic_of: dict[Any, Any] = {}
    all_of: dict[Any, list] = {}
    for gpu, data in nodes(data=True):
        if data.get("kind", "gpu") != "gpu":
            continue
        dom = data.get("nvlink_domain")
        host = data.get("host")
        node_of[gpu] = ("domain", dom) if dom is not None else ("host", str(gpu) if host in (None, "") else str(host))
        # breadth first: hop 0 = the GPU's neighbours; PCIe switches and CPUs of its host are walked through
        frontier, seen, best = [gpu], {gpu}, None
        for _hop in range(NIC_SEARCH_HOPS):
            found, nxt = [], []
            for x in frontier:
                for y in graph.neighbors(x):
                    if y in seen:
                        continue
                    seen.add(y)
                    kind = nodes[y].get("kind", "gpu")
                    if kind == "nic":
                        found.append(y)
                    elif kind in ("pcie_switch", "cpu") and nodes[y].get("host") in (None, host):
                        nxt.append(y)
            if found:
                best = min(found, key=lambda y: (_nic_index(nodes[y]), str(y)))
                all_of[gpu] = found
                break
            frontier = nxt
        nic_of[gpu] = best
    # number the NICs of each NCCL node
    nics_of_node: dict[Any, set] = {}
    for gpu, nic in nic_of.items():
        if nic is not None:
            nics_of_node.setdefault(node_of[gpu], set()).update(all_of[gpu])
    number: dict[tuple, int] = {}
    for nd, nics in nics_of_node.items():
        ordered = sorted(nics, key=lambda y: (str(nodes[y].get("host", "")), _nic_index(nodes[y]), str(y)))
        for j, nic in enumerate(ordered):
            number[(nd, nic)] = j
    rail_of = {gpu: (None if nic is None else number[(node_of[gpu], nic)]) for gpu, nic in nic_of.items()}
    # every NIC at the nearest distance (a GPU with two PIX NICs is on both rails), for the ring channels
    rail_of = RailMap(rail_of)
    rail_of.all = {gpu: tuple(sorted(number[(node_of[gpu], y)] for y in all_of[gpu])) for gpu in all_of}
    # device index (local_index, else position among the host's GPUs) and host of each GPU
    seen_host: dict[Any, int] = {}
    for gpu in node_of:
        data = nodes[gpu]
        host = data.get("host")
        host = str(gpu) if host in (None, "") else str(host)
        pos = seen_host.get(host, 0)
        seen_host[host] = pos + 1
        li = data.get("local_index")
        rail_of.local[gpu] = int(li) if li is not None else pos
        rail_of.host[gpu] = host
    # NCCL's NICs per GPU (ncclTopoGetLocalNetType): nets = its nearest NICs ascending; GPUs near the first of them
    # share it; channel c uses nets[(dev % sharers, mirrored when len(nets) is a power of two) + c % ceil(len/sharers)],
    # at most as many as the GPU's PCIe link carries at the NIC's speed; channel 0's is its send/recv NIC
    caps = {gpu: _pcie_channels(graph, gpu, all_of[gpu]) for gpu, nets in rail_of.all.items() if len(nets) > 1}
    rail_of.all, rail_of.p2p = local_nets(rail_of.all, node_of, rail_of.local, caps)
    for gpu, nets in rail_of.all.items():
        rail_of[gpu] = nets[0] if nets else None
    # NVLink reach for PXN (search.cc:1465: the proxy must be NVLink-connected to the sender): on an NVSwitch, or a
    # direct GPU-GPU link
    rail_of.nvs = {gpu: any(nodes[y].get("kind") == "nvswitch" for y in graph.neighbors(gpu)) for gpu in node_of}
    rail_of.direct = {frozenset((gpu, y)) for gpu in node_of for y in graph.neighbors(gpu) if y in node_of}
    return node_of, rail_of


#: NCCL's PCIe rate over the graph's (Gen5 x16: 48 of 63 GB/s; ``src/graph/topo.cc:545-557,657``).
NCCL_PCIE_FACTOR = 0.75 * 130 / 128


def _pcie_channels(graph, gpu, nics) -> int:
    """Ring channels at the NIC's speed the GPU's PCIe link (to its PCIe switch, host bridge or CPU) carries: NCCL's
    search takes the channel's bandwidth on it (``ncclTopoFollowPath``); a large number when the GPU has none."""
    links = [d.get("bandwidth", 0.0) for y, d in graph[gpu].items()
             if graph.nodes[y].get("kind") in ("pcie_switch", "host_bridge", "cpu")]
    ports = []
    for x in nics:
        rates = [d.get("bandwidth", 0.0) * (0.96 if str(d.get("link", "")).startswith("net") else 1.0)
                 for y, d in graph[x].items() if graph.nodes[y].get("kind", "gpu") not in
                 ("gpu", "pcie_switch", "cpu", "nvswitch", "nic")]
        if rates:
            ports.append(max(rates))
    if not links or not ports or min(ports) <= 0:
        return 1 << 20
    return max(1, int(max(links) * NCCL_PCIE_FACTOR / min(ports) + 0.01))


def local_nets(nets_of: Mapping, node_of: Mapping, local: Mapping, caps: Mapping | None = None) -> tuple[dict, dict]:
    """``(GPU -> NICs it runs ring channels on, ascending; GPU -> its send/recv NIC)`` by NCCL's
    ``ncclTopoGetLocalNetType`` (``src/graph/topo.cc:2039-2075``), from every GPU's nearest NICs ``nets_of``."""
    out, p2p = {}, {}
    for gpu, nets in nets_of.items():
        nets = tuple(nets)
        if len(nets) <= 1:
            out[gpu], p2p[gpu] = nets, (nets[0] if nets else None)
            continue
        sharers = sum(1 for h, ns in nets_of.items() if node_of[h] == node_of[gpu] and nets[0] in ns)
        c = len(nets)
        base = local[gpu] % max(sharers, 1)
        if c & (c - 1) == 0:
            bits = c.bit_length() - 1
            base = int(format(base & (c - 1), f"0{bits}b")[::-1], 2) if bits else 0
        per = -(-c // max(sharers, 1))
        if caps is not None and gpu in caps:
            per = max(1, min(per, caps[gpu]))
        use = [nets[(base + j) % c] for j in range(per)]
        out[gpu], p2p[gpu] = tuple(sorted(use)), use[0]
    return out, p2p


def _ring(members, nbytes):
    n = len(members)
    return [(members[i], members[(i + 1) % n], nbytes) for i in range(n)]


def _ring_bytes(kind: str, n: int, payload: float) -> float:
    if kind == "ring_all_reduce":
        return 2.0 * (n - 1) / n * payload
    if kind == "ring_all_gather":
        return (n - 1) / n * payload
    if kind == "ring_p2p":
        return float(payload)
    raise ValueError(f"unknown collective kind {kind!r}")


def _rail_sort(r):
    return -1 if r is None else r


def _node_paths(blocks, rail_key, fb):
    """NCCL's channels across nodes, pair by pair: ``(src, dst, fb/c)`` flows.

    ``blocks``: each node's members in NCCL order; ``rail_key(d)``: a member's rail as a sortable
    key (no rail first).  Slots = a node's distinct rails, ascending; c = min slots over nodes.
    Channel t enters node i at slot t's first member and runs a path through all the node's
    members to its exit: the node's slots pair up in order (0-1, 2-3, ...; its own count, which may
    exceed c) and channel t exits at the last member of its partner's slot, then enters the next
    node at the partner's slot (or at slot t when the partner is beyond c); an unpaired slot exits at its own last member when it
    has several, else the path ends at the member before the entry (cyclically) and hands back
    to the entry; so does a channel whose exit member is its entry member (a member near two NICs).
    ``rail_key(d)`` may return a tuple of keys: a member near several NICs is on each of their rails.
    Between entry and exit: the other members in cyclic order from the entry.  Slot t's last
    member sends to node i+1's slot t first member (the last node to the first) when the exits pair within c,
    except the wrap of an odd number of nodes with an even c, which enters node 0 at the channel's own slot t
    (rails crossed, as NCCL's alternation leaves it).
    """
    slots = []
    for members in blocks:
        by = {}
        for d in members:
            keys = rail_key(d)
            for key in (keys if isinstance(keys, tuple) else (keys,)):
                by.setdefault(key, []).append(d)
        slots.append([by[r] for r in sorted(by)])
    c = min(len(s) for s in slots)
    out = []
    for i, members in enumerate(blocks):
        k = len(members)
        used = slots[i][:c]
        for t in range(c):
            e = used[t][0]
            back = False
            if t ^ 1 < len(slots[i]):  # the node pairs its own slots
                x = slots[i][t ^ 1][-1]
            elif len(used[t]) > 1:
                x = used[t][-1]
            else:
                x = members[(members.index(e) - 1) % k]
                back = k > 1
            if x == e and k > 1:  # the exit NIC is beside the entry member (a member near two NICs)
                x = members[(members.index(e) - 1) % k]
                back = True
            pe = members.index(e)
            path = [e] + [members[(pe + j) % k] for j in range(1, k) if members[(pe + j) % k] != x]
            if x != e:
                path.append(x)
            out += [(a, b, fb / c) for a, b in zip(path, path[1:])]
            if back:
                out.append((x, e, fb / c))
        nxt = slots[(i + 1) % len(blocks)]
        # NCCL swaps channels c <-> c^1 on odd nodes (connect.cc:401-411, even channel counts only): on an odd
        # number of nodes the wrap (last node -> node 0) joins two unswapped nodes and crosses rails
        wrap_cross = i == len(blocks) - 1 and len(blocks) % 2 == 1 and c % 2 == 0
        for t in range(c):
            xs = t ^ 1 if t ^ 1 < len(slots[i]) else t  # exit slot; a partner beyond c crosses to slot t
            out.append((slots[i][xs][-1], nxt[t if wrap_cross or xs >= c else xs][0], fb / c))
    return out


def group_flows(kind: str, devices: Sequence, payload: float, node_of: Mapping, rail_of: Mapping,
                wrap: float = 0.0, pxn: bool = True) -> list[tuple[Any, Any, float]]:
    """GPU-level flows ``(src, dst, bytes)`` of one group as NCCL runs it (module doc).

    Parameters
    ----------
    kind : str
        ``ring_all_reduce``, ``ring_all_gather``, ``ring_p2p``, ``all_to_all`` or ``p2p_chain``.
    devices : sequence
        The GPU of each member, members in ascending global rank.
    payload : float
        S, bytes.
    node_of, rail_of : mapping GPU -> node, GPU -> rail or None
        From :func:`nccl_view`.
    wrap : float
        ``p2p_chain`` only: the last ↔ first flows carry ``wrap``·S.
    pxn : bool
        Relay all-to-all and pipeline flows across nodes through the rail member (NCCL's default).
    """
    m = list(devices)
    n = len(m)
    if n < 2 or payload <= 0:
        return []
    if kind in ("ring_all_reduce", "ring_all_gather", "ring_p2p"):
        fb = _ring_bytes(kind, n, payload)
        blocks: dict[Any, list] = {}  # node -> its members in rank order; nodes by first appearance
        for d in m:
            blocks.setdefault(node_of[d], []).append(d)
        if len(blocks) == 1:
            return _ring(m, fb)
        every = getattr(rail_of, "all", {})
        return _node_paths(list(blocks.values()),
                           lambda d: tuple(_rail_sort(r) for r in every.get(d, (rail_of[d],))), fb)

    local = getattr(rail_of, "local", {})
    hosts = getattr(rail_of, "host", {})
    p2p = getattr(rail_of, "p2p", {})

    def send(a, b, nbytes):
        if pxn and node_of[a] != node_of[b]:
            if local:  # NCCL: the member with the receiver's device index on the sender's host, or its NIC's owner
                same = [d for d in m if hosts[d] == hosts[a] and local[d] == local[b] and rail_of[d] is not None]
                if not same:
                    return [(a, b, nbytes)]
                nic = p2p.get(same[0], rail_of[same[0]])
                owners = sorted((local[d], i, d) for i, d in enumerate(m)
                                if hosts[d] == hosts[a] and rail_of[d] is not None and p2p.get(d, rail_of[d]) == nic)
                relay = owners[0][2] if owners else same[0]
                nvs, direct = getattr(rail_of, "nvs", {}), getattr(rail_of, "direct", set())
                if nvs and not ((nvs[a] and nvs[relay]) or frozenset((a, relay)) in direct):
                    relay = a  # no NVLink to the proxy: the sender's own NIC
                return [(a, b, nbytes)] if relay == a else [(a, relay, nbytes), (relay, b, nbytes)]
            if rail_of[b] is not None:
                on_rail = [d for d in m if node_of[d] == node_of[a] and rail_of[d] == rail_of[b]]
                if on_rail and a not in on_rail:
                    return [(a, on_rail[0], nbytes), (on_rail[0], b, nbytes)]
        return [(a, b, nbytes)]

    if kind == "all_to_all":
        out = []
        for a in m:
            for b in m:
                if a != b:
                    out += send(a, b, payload / n)
        return out
    if kind == "p2p_chain":
        out = []
        for a, b in zip(m, m[1:]):
            out += send(a, b, float(payload))
            out += send(b, a, float(payload))
        if wrap > 0 and n > 1:
            out += send(m[-1], m[0], wrap * payload)
            out += send(m[0], m[-1], wrap * payload)
        return out
    raise ValueError(f"unknown collective kind {kind!r}")


#: rankmap's collective kind names -> this module's
_KIND = {"all_reduce": "ring_all_reduce", "all_gather": "ring_all_gather", "ring_p2p": "ring_p2p",
         "all_to_all": "all_to_all", "p2p_chain": "p2p_chain"}


def _subgroup_rows(row: Sequence[int], size: int, stride: int) -> list[list[int]]:
    """Members of each subgroup of one group: ``size`` members ``stride`` apart in group order.

    Written out position by position (Megatron-core ``create_hierarchical_groups``:
    position p = digit·stride + rest within blocks of size·stride).
    """
    m = sorted(int(x) for x in row)
    n = len(m)
    if not size or size == n:
        return [m]
    out = []
    for block in range(0, n, size * stride):
        for rest in range(stride):
            out.append([m[block + j * stride + rest] for j in range(size)])
    return out


def class_parts(traffic: Mapping[str, float], cls: str) -> list[tuple[str, float, int, int, float]]:
    """``(kind, payload, size, stride, wrap)`` of each part of a class (one part, its default shape,
    for plain byte counts; the parts of a model-derived ``Traffic`` otherwise)."""
    payload = float(traffic.get(cls, 0.0) or 0.0)
    parts = getattr(traffic, "collectives", {}).get(cls)
    if parts:
        return [(_KIND[p.kind], float(p.payload_bytes), int(p.size), int(p.stride), float(p.wrap))
                for p in parts if p.payload_bytes > 0]
    return [(CLASS_SPECS[cls][1], payload, 0, 1, 0.0)] if payload > 0 else []


def class_part_triples(graph, cfg, assignment: Sequence[Any], traffic: Mapping[str, float],
                       view: tuple[Mapping, Mapping] | None = None, pxn: bool = True) -> dict[str, list[list[tuple]]]:
    """GPU-level flows ``(src GPU, dst GPU, bytes)`` of each part of every class with a positive payload.

    ``assignment[r]`` is the GPU of global rank r; ``view`` a precomputed
    :func:`nccl_view` of ``graph``.  The parts of a class run one after the other (DESIGN
    §3: hierarchical cp, distributed-optimizer instances, node-limited dispatch), so each
    is simulated on its own and the class's time is their sum.
    """
    from rankmap.solver import megatron_groups

    node_of, rail_of = view if view is not None else nccl_view(graph)
    groups = megatron_groups(cfg)
    out: dict[str, list[list[tuple]]] = {}
    for cls in traffic:
        if cls not in CLASS_SPECS:
            raise ValueError(f"unknown traffic class {cls!r}")
        parts = class_parts(traffic, cls)
        if not parts:
            continue
        gname = CLASS_SPECS[cls][0]
        out[cls] = []
        for kind, payload, size, stride, wrap in parts:
            flows = []
            for row in groups[gname]:
                for sub in _subgroup_rows(row, size, stride):
                    devices = [assignment[r] for r in sub]
                    for a, b, nb in group_flows(kind, devices, payload, node_of, rail_of, wrap, pxn):
                        if a != b and nb > 0:
                            flows.append((a, b, nb))
            out[cls].append(flows)
    return out
