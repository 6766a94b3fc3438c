"""An independent, pair-by-pair implementation of DESIGN §2–§4 for small clusters.

Written from the design text only (no rankmap.solver time-model code): routes
by enumerating every simple path with networkx, flows written out group by
group, loads summed per directed link in a dict.  Tests compare rankmap's
vectorised model and search against it.

Collectives run as NCCL runs them (DESIGN §3): a group's hosts in first-appearance
order; across hosts, c channels (c = min over the hosts of the distinct NICs
nearest the members) of fb/c, each a path through a host's members from the first member
on its rail to its exit member (:func:`_node_paths`), then from the last member on rail j
of a host to the first member on rail j of the next; all-to-all and pipeline sends relayed by PXN; NCCL's latency
added (the least over Simple/LL128/LL of latency + bandwidth time / efficiency).
Only the ring algorithm: graphs that name a GPU generation (``graph['gpu']``, which
enables NVLS/tree) and graphs with ``link`` attributes (calibrated rates) or
``latency_us`` are out of its scope.
"""

from __future__ import annotations

import itertools
import os
import sys

import networkx as nx
import numpy as np

from rankmap.solver import InvalidArgumentError, cluster_from_graph, megatron_groups
from rankmap.solver.megatron.ranks import TOKENS

# NCCL's channel paths pair by pair: the one rule the SimGrid flow writer uses too (one copy)
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks"))
from simgrid_flows import _node_paths, _pcie_channels, local_nets  # noqa: E402

GROUP = {
    "tp": "TENSOR_MODEL_PARALLEL_GROUP",
    "cp": "CONTEXT_PARALLEL_GROUP",
    "dp": "DATA_PARALLEL_GROUP_WITH_CP",
    "pp": "PIPELINE_MODEL_PARALLEL_GROUP",
    "ep": "EXPERT_MODEL_PARALLEL_GROUP",
    "etp": "EXPERT_TENSOR_PARALLEL_GROUP",
    "edp": "EXPERT_DATA_PARALLEL_GROUP",
    "embedding": "EMBEDDING_GROUP",
}
# ring all-reduce, ring all-gather/reduce-scatter, all-to-all, pipeline
SHAPE = {"tp": "ar", "cp": "ring", "dp": "ag", "edp": "ag", "etp": "ar", "embedding": "ar", "ep": "a2a", "pp": "p2p"}


def is_gpu(g, x):
    return g.nodes[x].get("kind", "gpu") == "gpu"


def routes(g: nx.Graph, u, v):
    """[(path as node list, share)] for the flow u -> v: widest, then fewest hops, ECMP on ties."""
    keep = [x for x in g.nodes if x in (u, v) or not is_gpu(g, x)]
    sub = g.subgraph(keep)
    best = []
    best_key = None
    for path in nx.all_simple_paths(sub, u, v):
        if any(g.nodes[x].get("kind") == "nic" and is_gpu(g, a) and is_gpu(g, b)
               for a, x, b in zip(path, path[1:], path[2:])):
            continue  # a NIC does not forward from one GPU to another
        bw = min(sub[a][b]["bandwidth"] for a, b in zip(path, path[1:]))
        key = (bw, -len(path))
        if best_key is None or key > best_key:
            best_key, best = key, [path]
        elif key == best_key:
            best.append(path)
    if not best:
        raise ValueError(f"no route between {u} and {v} avoiding other GPUs")
    return [(p, 1.0 / len(best)) for p in best], best_key[0]


# NCCL latencies, microseconds, per protocol (DESIGN §4, NCCL tuning.cc): ring base, NVLink step, network step
LAT_BASE = {"simple": 8.4, "ll128": 14.0, "ll": 6.6}
LAT_INTRA = {"simple": 3.4, "ll128": 1.9, "ll": 0.6}
LAT_NET = {"simple": 14.0, "ll128": 4.0, "ll": 2.7}
PROTOCOL_EFFICIENCY = {"simple": 1.0, "ll128": 0.92, "ll": 0.5}


def nccl_latency_us(shape: str, protocol: str, n: int, nodes: int) -> float:
    """NCCL's latency of one collective of ``n`` ranks over ``nodes`` hosts, microseconds (ring algorithm)."""
    base, intra, net = LAT_BASE[protocol], LAT_INTRA[protocol], LAT_NET[protocol]
    if shape in ("a2a", "p2p"):  # one step: over NVLink inside a host, over the network across hosts
        return base + (net if nodes > 1 else intra)
    steps = 2 * (n - 1) if shape == "ar" else n - 1  # all-reduce: reduce-scatter + all-gather
    net_steps = 0 if nodes == 1 else min(steps, (2 if shape == "ar" else 1) * (nodes - 1))
    lat = base + (steps - net_steps) * intra + net_steps * net
    if shape == "ar" and nodes > 1 and protocol == "simple":
        lat *= 1.4  # multi-node ring all-reduce, Simple: NCCL's plateau factor
    return lat


class Reference:
    """Pair routes cached for one graph.

    ``latency=False``: bandwidth terms only (``NcclModel(latency=False)``); ``pxn=False``:
    all-to-all and pipeline sends go directly (``NCCL_PXN_DISABLE=1``).
    """

    def __init__(self, g: nx.Graph, latency: bool = True, pxn: bool = True):
        if g.graph.get("gpu") or any("link" in d or "latency_us" in d for _, _, d in g.edges(data=True)):
            raise NotImplementedError("the reference covers graphs without a GPU generation, link kinds or latencies")
        self.g = g
        self.cache = {}
        self.latency = latency
        self.pxn = pxn
        self._rail = {}

    def node(self, d):
        """The NCCL node of a GPU: its NVLink domain, else its host (a host of its own when absent)."""
        data = self.g.nodes[d]
        if data.get("nvlink_domain") is not None:
            return ("domain", data["nvlink_domain"])
        return ("host", data.get("host", d))

    def nic(self, d):
        """The NIC nearest to GPU ``d``: fewest hops through PCIe switches / CPUs of its host, then nic_index, name."""
        g = self.g
        found = self.all_nics(d)
        return min(found, key=lambda x: (g.nodes[x].get("nic_index", 1 << 30), str(x))) if found else None

    def all_nics(self, d):
        """Every NIC at the nearest NIC's distance from GPU ``d`` (a GPU with two PIX NICs has both)."""
        g = self.g
        host = g.nodes[d].get("host")
        frontier, seen = [d], {d}
        for _ in range(3):
            found, nxt = [], []
            for x in frontier:
                for y in g[x]:
                    if y in seen:
                        continue
                    seen.add(y)
                    kind = g.nodes[y].get("kind", "gpu")
                    if kind == "nic":
                        found.append(y)
                    elif kind in ("pcie_switch", "cpu") and g.nodes[y].get("host") in (None, host):
                        nxt.append(y)
            if found:
                return found
            frontier = nxt
        return []

    def _numbers(self, d):
        g = self.g
        gpus = [x for x in g.nodes if is_gpu(g, x) and self.node(x) == self.node(d)]
        nics = sorted({y for x in gpus for y in self.all_nics(x)},
                      key=lambda x: (str(g.nodes[x].get("host", "")), g.nodes[x].get("nic_index", 1 << 30), str(x)))
        return {y: j for j, y in enumerate(nics)}

    def nearest_rails(self, d):
        """Rails of every NIC nearest GPU ``d``, ascending; ``()`` for none."""
        num = self._numbers(d)
        return tuple(sorted(num[y] for y in self.all_nics(d)))

    def _nets(self, d):
        """(rails NCCL runs GPU ``d``'s ring channels on, its send/recv rail), as ``ncclTopoGetLocalNetType``."""
        key = self.node(d)
        if key not in self._rail:
            gpus = [x for x in self.g.nodes if is_gpu(self.g, x) and self.node(x) == key]
            near = {x: self.nearest_rails(x) for x in gpus}
            caps = {x: _pcie_channels(self.g, x, self.all_nics(x)) for x in gpus if len(near[x]) > 1}
            self._rail[key] = local_nets(near, {x: key for x in gpus}, {x: self.local(x) for x in gpus}, caps)
        out, p2p = self._rail[key]
        return out[d], p2p[d]

    def rails(self, d):
        """Rails GPU ``d`` runs ring channels on (NCCL's NICs for it), ascending; ``(-1,)`` for none."""
        return self._nets(d)[0] or (-1,)

    def rail(self, d):
        """Rail of GPU ``d``: the least of :meth:`rails`; -1 none."""
        return self.rails(d)[0]

    def host(self, d):
        h = self.g.nodes[d].get("host")
        return str(d) if h in (None, "") else str(h)

    def local(self, d):
        """Device index: ``local_index``, else the position among the host's GPUs in graph order."""
        li = self.g.nodes[d].get("local_index")
        if li is not None:
            return int(li)
        return [x for x in self.g.nodes if is_gpu(self.g, x) and self.host(x) == self.host(d)].index(d)

    def p2p(self, d):
        """NCCL's send/recv NIC (rail) of GPU ``d`` (ncclTopoGetLocalNetType, NETDEVS_POLICY AUTO); -1 none."""
        p = self._nets(d)[1]
        return -1 if p is None else p

    def pxn_relay(self, a, b, devs):
        """NCCL's PXN proxy for a send a -> b: the member on a's host with b's device index (None: none with a
        NIC), or the member of least device index on that host whose send/recv NIC is the one it uses."""
        same = [x for x in devs if self.host(x) == self.host(a) and self.local(x) == self.local(b) and self.rail(x) >= 0]
        if not same:
            return None
        nic = self.p2p(same[0])
        owners = [x for x in devs if self.host(x) == self.host(a) and self.rail(x) >= 0 and self.p2p(x) == nic]
        relay = min(owners, key=self.local) if owners else same[0]

        def on_nvs(x):
            return any(self.g.nodes[y].get("kind") == "nvswitch" for y in self.g[x])

        # NCCL proxies only through a GPU NVLink-connected to the sender (search.cc:1465)
        if relay != a and not ((on_nvs(a) and on_nvs(relay)) or (relay in self.g[a] and is_gpu(self.g, relay))):
            return None
        return relay

    def nccl_flows(self, cfg, cls, payload, device_of_rank):
        """[(src device, dst device, bytes)] of a class as NCCL runs it (module doc), and the most hosts of a group."""
        out, most = [], 1
        shape = SHAPE[cls]
        for grp in megatron_groups(cfg)[GROUP[cls]].tolist():
            devs = [device_of_rank[r] for r in sorted(grp)]
            n = len(devs)
            if n < 2 or payload == 0:
                continue
            nodes = []  # hosts by first appearance, each with its members in rank order
            for d in devs:
                for nd in nodes:
                    if self.node(nd[0]) == self.node(d):
                        nd.append(d)
                        break
                else:
                    nodes.append([d])
            most = max(most, len(nodes))
            if shape in ("p2p", "a2a"):
                pairs = ([(a, b) for a, b in zip(devs, devs[1:])] + [(b, a) for a, b in zip(devs, devs[1:])]
                         if shape == "p2p" else [(a, b) for a in devs for b in devs if a != b])
                nbytes = payload if shape == "p2p" else payload / n
                for a, b in pairs:
                    relay = self.pxn_relay(a, b, devs) if self.pxn and self.node(a) != self.node(b) else None
                    if relay is None or relay == a:
                        out.append((a, b, nbytes))
                    else:  # PXN: over NVLink to the relay, out through its NIC
                        out += [(a, relay, nbytes), (relay, b, nbytes)]
                continue
            fb = payload if shape == "ring" else (2 if shape == "ar" else 1) * (n - 1) / n * payload
            if len(nodes) == 1:
                out += [(devs[i], devs[(i + 1) % n], fb) for i in range(n)]
                continue
            out += _node_paths(nodes, self.rails, fb)
        return out, most

    def route(self, u, v):
        if (u, v) not in self.cache:
            self.cache[(u, v)] = routes(self.g, u, v)
        return self.cache[(u, v)]

    def flows(self, cfg, cls, payload):
        """[(src rank, dst rank, bytes)] of a class, group by group, as one ring in rank order (no channels, no PXN).

        The rank-level traffic the search's surrogate weighs (test_polish); times use :meth:`nccl_flows`.
        """
        out = []
        for grp in megatron_groups(cfg)[GROUP[cls]].tolist():
            grp = sorted(grp)
            n = len(grp)
            if n < 2 or payload == 0:
                continue
            shape = SHAPE[cls]
            if shape == "p2p":
                for a, b in zip(grp, grp[1:]):
                    out += [(a, b, payload), (b, a, payload)]
            elif shape == "a2a":
                out += [(a, b, payload / n) for a in grp for b in grp if a != b]
            elif shape == "ring":  # ring attention: S to the ring successor
                out += [(grp[i], grp[(i + 1) % n], payload) for i in range(n)]
            else:
                per = (2 if shape == "ar" else 1) * (n - 1) / n * payload
                out += [(grp[i], grp[(i + 1) % n], per) for i in range(n)]
        return out

    def class_time(self, cfg, cls, payload, device_of_rank):
        load = {}
        worst = 0.0
        flows, nodes = self.nccl_flows(cfg, cls, payload, device_of_rank)
        for u, v, nbytes in flows:
            if u == v or nbytes == 0:
                continue
            paths, bw = self.route(u, v)
            for path, share in paths:
                worst = max(worst, nbytes * share / (bw * 1e9))
                for x, y in zip(path, path[1:]):
                    load[(x, y)] = load.get((x, y), 0.0) + nbytes * share
        link = max((ld / (self.g[x][y]["bandwidth"] * 1e9) for (x, y), ld in load.items()), default=0.0)
        t = max(worst, link)
        if not self.latency or t == 0:
            return t
        n = {c: len(v[0]) for c, v in megatron_groups(cfg).items()}[GROUP[cls]]
        return min(nccl_latency_us(SHAPE[cls], p, n, nodes) * 1e-6 + t / eff for p, eff in PROTOCOL_EFFICIENCY.items())

    def cost(self, cfg, traffic, device_of_rank):
        """Σ_c T_c (seconds) of a layout (device node id per global rank)."""
        return sum(self.class_time(cfg, c, s, device_of_rank) for c, s in traffic.items() if s > 0)


def all_orders(cfg):
    out, seen = [], set()
    for perm in itertools.permutations(TOKENS):
        try:
            c = cfg.with_order("-".join(perm))
        except InvalidArgumentError:
            continue
        key = tuple(tuple(map(tuple, v.tolist())) for v in megatron_groups(c).values())
        if key not in seen:
            seen.add(key)
            out.append(c)
    return out


def layouts(g, mode):
    """Every layout (tuple of device ids per rank) of a mode, in rankmap's baseline device order."""
    cl = cluster_from_graph(g)
    gpus = list(cl.devices)
    W = len(gpus)
    if mode == "fixed":
        return [tuple(gpus)]
    if mode == "free":
        return [tuple(gpus[i] for i in p) for p in itertools.permutations(range(W))]
    hosts = [[gpus[i] for i in np.flatnonzero(cl.host_of == h)] for h in range(len(cl.hosts))]
    out = []
    for horder in itertools.permutations(range(len(hosts))):
        for combo in itertools.product(*[list(itertools.permutations(hosts[h])) for h in horder]):
            out.append(tuple(d for block in combo for d in block))
    return out


def brute_force(g, cfg, traffic, mode):
    """Minimum Σ_c T_c over every valid order and every layout of the mode."""
    ref = Reference(g)
    best = np.inf
    lays = layouts(g, mode)
    for ocfg in all_orders(cfg):
        for lay in lays:
            best = min(best, ref.cost(ocfg, traffic, lay))
    return best
