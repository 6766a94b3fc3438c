"""An independent, pair-by-pair implementation of DESIGN §2–§4 for small clusters.

Written from the design text only (no rankmap.solver time-model code): routes
by enumerating every simple path with networkx, flows written out group by
group, loads summed per directed link in a dict.  Tests compare rankmap's
vectorised model and search against it.
"""

from __future__ import annotations

import itertools

import networkx as nx
import numpy as np

from rankmap.solver import InvalidArgumentError, cluster_from_graph, megatron_groups
from rankmap.solver.megatron.ranks import TOKENS

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


class Reference:
    """Pair routes cached for one graph."""

    def __init__(self, g: nx.Graph):
        self.g = g
        self.cache = {}

    def route(self, u, v):
        if (u, v) not in self.cache:
            self.cache[(u, v)] = routes(self.g, u, v)
        return self.cache[(u, v)]

    def flows(self, cfg, cls, payload):
        """[(src rank, dst rank, bytes)] of a class, group by group."""
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
        for a, b, nbytes in self.flows(cfg, cls, payload):
            u, v = device_of_rank[a], device_of_rank[b]
            if u == v:
                continue
            paths, bw = self.route(u, v)
            for path, share in paths:
                worst = max(worst, nbytes * share / (bw * 1e9))
                for x, y in zip(path, path[1:]):
                    load[(x, y)] = load.get((x, y), 0.0) + nbytes * share
        link = max((ld / (self.g[x][y]["bandwidth"] * 1e9) for (x, y), ld in load.items()), default=0.0)
        return max(worst, link)

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
