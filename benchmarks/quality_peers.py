"""The quality benchmark's peers and outcome record: the mappers rankmap is compared with
(Megatron's default, greedy, random, scipy QAP, METIS tree mapping, Scotch) and their helpers.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from rankmap.solver import candidate_orders, megatron_groups
from rankmap.solver.traffic import CLASS_GROUP, CLASS_KIND, TRAFFIC_CLASSES, pair_bytes_factor

from quality_instances import Instance

DEFAULT_ORDER = "tp-cp-ep-dp-pp"
REL_TOL = 1e-9
SIM_REL_TOL = 1e-6  # SimGrid's max-min solver works to ~1e-9 relative; a simulated loss must exceed this

def rank_pairs(cfg, traffic):
    """Per traffic class with bytes: ``(u, v, bytes)``, the rank pairs that exchange them (DESIGN §3).

    ``u``, ``v``: int arrays of ranks (without ``rank_offset``), one unordered pair each (consecutive
    members for a pipeline chain, every pair ``u < v`` in group position otherwise); ``bytes``: what
    each of the two ranks of a pair sends the other per step.
    """
    groups = megatron_groups(cfg)
    for c in TRAFFIC_CLASSES:
        s = float(traffic.get(c, 0.0) or 0.0)
        arr = groups[CLASS_GROUP[c]] - cfg.rank_offset
        n = arr.shape[1]
        if s <= 0 or n <= 1:
            continue
        pb = pair_bytes_factor(CLASS_KIND[c], n) * s
        if CLASS_KIND[c] == "p2p_chain":
            u, v = arr[:, :-1].ravel(), arr[:, 1:].ravel()
        else:
            iu, ju = np.nonzero(np.triu(~np.eye(n, dtype=bool)))
            u, v = arr[:, iu].ravel(), arr[:, ju].ravel()
        yield u, v, pb


def traffic_matrix(cfg, traffic) -> np.ndarray:
    """W x W bytes from rank i to rank j (DESIGN §3), for the order of ``cfg``."""
    A = np.zeros((cfg.world_size, cfg.world_size))
    for u, v, pb in rank_pairs(cfg, traffic):
        np.add.at(A, (u, v), pb)
        np.add.at(A, (v, u), pb)
    return A


def inverse_bandwidth_matrix(cluster) -> np.ndarray:
    """W x W seconds per byte, 0 on the diagonal."""
    idx = np.arange(cluster.num_devices)
    b = cluster.bandwidth_gbps(idx[:, None], idx[None, :]) * 1e9
    return np.where(np.isinf(b), 0.0, 1.0 / b)


def dim_weights(cfg, traffic) -> dict[str, float]:
    """Payload bytes per rank attributed to each order token (only non-trivial dims)."""
    s = {c: float(traffic.get(c, 0.0) or 0.0) for c in TRAFFIC_CLASSES}
    w = {
        "tp": (s["tp"] if cfg.tp > 1 else 0.0) + (s["etp"] if cfg.etp > 1 else 0.0),
        "cp": s["cp"] if cfg.cp > 1 else 0.0,
        "ep": s["ep"] if cfg.ep > 1 else 0.0,
        "dp": (s["dp"] if cfg.dp * cfg.cp > 1 else 0.0) + (s["edp"] if cfg.edp > 1 else 0.0),
        "pp": (s["pp"] + s["embedding"]) if cfg.pp > 1 else 0.0,
    }
    nontrivial = {
        "tp": cfg.tp > 1 or cfg.etp > 1, "cp": cfg.cp > 1, "ep": cfg.ep > 1,
        "dp": cfg.dp > 1 or cfg.edp > 1, "pp": cfg.pp > 1,
    }
    return {t: w[t] for t in ("tp", "cp", "ep", "dp", "pp") if nontrivial[t]}


def greedy_order(cfg, traffic) -> str:
    """Non-trivial dims sorted by bytes per rank, most first; the closest order Megatron accepts."""
    default_pos = {t: i for i, t in enumerate(DEFAULT_ORDER.split("-"))}
    w = dim_weights(cfg, traffic)
    want = sorted(w, key=lambda t: (-w[t], default_pos[t]))
    rank_of = {t: i for i, t in enumerate(want)}
    best, best_key = None, None
    for c in candidate_orders(cfg, "all"):
        seq = [t for t in c.order.split("-") if t in rank_of]
        key = [rank_of[t] for t in seq]
        if best_key is None or key < best_key:
            best, best_key = c.order, key
    return best


def domain_sorted_devices(cluster) -> np.ndarray:
    """Baseline device order with hosts sorted by their domains (coarsest level first, stable)."""
    H = len(cluster.hosts)
    first = np.zeros(H, dtype=np.int64)
    first[cluster.host_of[::-1]] = np.arange(cluster.num_devices)[::-1]
    keys = [np.arange(H)] + [cluster.domains[k][first] for k in range(cluster.domains.shape[0])]
    host_order = np.lexsort(keys)
    return np.concatenate([np.flatnonzero(cluster.host_of == h) for h in host_order])


# ============================================================== one instance



@dataclass
class Outcome:
    inst: Instance
    W: int
    cfg_sizes: dict
    traffic: dict
    rm: dict = field(default_factory=dict)  # mode -> {cost, bound, status, solve_s, order, dev}
    peers: dict = field(default_factory=dict)  # peer -> {cost, order, dev, ref, seconds, note}
    errors: list = field(default_factory=list)  # rankmap exceptions
    devices: list = field(default_factory=list)  # cluster.devices (index -> GPU node id)
    bound: float = float("nan")
    sim: dict = field(default_factory=dict)  # mode -> simulation of rankmap's and the best peer's layouts
    sim_s: float = 0.0  # wall-clock seconds spent simulating


PEERS = [  # (name, rankmap mode it is compared with); launcher peers first
    ("Megatron", "launcher"),
    ("greedy", "launcher"),
    ("METIS tree", "launcher"),
    ("Scotch", "launcher"),
    ("random", "free"),
    ("QAP faq", "free"),
    ("QAP 2opt", "free"),
    ("METIS tree free", "free"),
    ("Scotch free", "free"),
]


def best_peer(o: Outcome, mode: str) -> str | None:
    """The peer of ``mode`` with the lowest predicted time (ties: the first in ``PEERS``)."""
    cands = [(o.peers[p]["cost"], i, p) for i, (p, m) in enumerate(PEERS) if m == mode and p in o.peers]
    return min(cands)[2] if cands else None


