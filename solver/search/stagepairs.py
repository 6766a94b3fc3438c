"""Host orders that pair adjacent pipeline stages inside multi-host NCCL nodes (launcher-mode proposals).

When ``pp`` is the outermost axis of the order's block grid (``tp-cp-ep-dp-pp``), launcher mode cuts
the host order into ``pp`` runs of ``B`` hosts: run ``s`` is stage ``s`` and position ``j`` of every
run holds the same inner coordinates.  Host ``j`` of stage ``s`` sends the pipeline's activations and
gradients to host ``j`` of stages ``s ± 1`` and all-reduces the embedding with host ``j`` of the other
end stage.  On racks that are one NCCL node each (GB200 NVL72: an NVLink domain of many trays, NICs
on leaf switches whose uplinks are oversubscribed) a pair of hosts on one node talks over NVLink, and
a stage split over several nodes sends its data-parallel rings out of each piece; NCCL runs as many
channels as the ring's fewest members on one node (``src/init.cc``), so a piece of one or two hosts
caps the whole ring.

The proposals here pair the stages along the cycle that the pipeline and the embedding group make
(``(pp−1, 0), (1, 2), (3, 4), …``; ``(0, 1), (2, 3), …`` when the embedding moves no bytes) and give
each pair ``2B`` hosts of whole nodes where a subset of the nodes sums to ``2B`` (subset sum), else the rest from
one large node split so that both of its parts keep at least ``2m`` hosts.  Inside a pair, a node
piece of at least ``2m`` hosts is shared: the two stages take its hosts in tree order (so each stage
keeps to the node's first or second leaf) at the same positions, their pipeline pairs on the node;
a smaller piece goes whole to one stage.  Every host then has one pipeline neighbour off its node at
most, every split stage's pieces keep ``≥ m`` hosts (``m`` = 2, 3, 4: one proposal each) and no
leaf carries more than two stages' pieces of a pair.  The real objective scores each proposal.

On fragmented NVL72 racks (512 GPUs, racks of 18, 5, 12, 18, 9, 14, 18, 7, 11, 16 trays, tp4 pp8,
GPT): 23.58 ms with ``m = 4`` before any descent, against 26.63 ms from the other proposals; a
CP-SAT model of the same cells (``benchmarks/stage_cells.py``) reaches 21.74 ms in seconds more.
"""

from __future__ import annotations

import numpy as np

from ..fabric.cluster import Cluster
from ..megatron.config import ParallelConfig
from .tiling import _exact_fill, node_runs

__all__ = ["STAGE_PAIR_MAX_HOSTS", "STAGE_PAIR_MIN_PIECES", "stage_pair_host_orders"]

#: The least hosts of a split stage on one node, one proposal each.
STAGE_PAIR_MIN_PIECES = (2, 3, 4)
#: Largest host count proposed for: each pair's node subset is a subset sum over the nodes (a table of
#: ``2B`` sums per node, ``B`` hosts per stage), tried for each split size and node size when no subset
#: is exact; at 4,086 hosts (16,344 GPUs of NVL72 racks) the proposals took 25 ms.
STAGE_PAIR_MAX_HOSTS = 4096


def stage_pair_host_orders(cluster: Cluster, cfg: ParallelConfig, embedding: bool = True) -> list[np.ndarray]:
    """Host orders pairing adjacent stages on shared nodes (module doc): arrays of host indices, shape (H,).

    ``embedding``: whether the embedding all-reduce moves bytes: the pairs follow the cycle with the end
    stages paired, else the chain ``(0, 1), (2, 3), …``.

    Empty when the hosts are uneven or more than ``STAGE_PAIR_MAX_HOSTS``, ``pp`` is odd or not the
    order's outermost block axis, a stage holds one host, or every NCCL node is one host
    (:func:`~.tiling.node_runs`).  At most ``len(STAGE_PAIR_MIN_PIECES)`` orders, duplicates removed;
    deterministic.
    """
    H = len(cluster.hosts)
    pp = int(cfg.pp)
    runs_of = node_runs(cluster, cfg) if pp >= 2 and pp % 2 == 0 and H <= STAGE_PAIR_MAX_HOSTS else None
    if runs_of is None or runs_of[0][-1] != ("pp", pp) or runs_of[1] < 2:
        return []
    _grid, B, tree, node_of_host = runs_of
    nodes = np.unique(node_of_host)
    members = {int(n): tree[node_of_host == n].tolist() for n in nodes.tolist()}
    cycle = [(pp - 1, 0)] + [(2 * i - 1, 2 * i) for i in range(1, pp // 2)]
    chain = [(2 * i, 2 * i + 1) for i in range(pp // 2)]
    pairs = cycle if embedding and pp > 2 else chain
    out: list[np.ndarray] = []
    for m in STAGE_PAIR_MIN_PIECES:
        order = _pair_order(members, pairs, B, H, m)
        if order is not None and not any(np.array_equal(order, o) for o in out):
            out.append(order)
    return out


def _fill(sizes: list[int], room: int, m: int) -> tuple[list[int], int | None, int]:
    """Nodes for one pair: (indices of whole nodes, index of the node to split or None, hosts taken from it).

    Whole nodes summing to ``room`` exactly when a subset does; else whole nodes summing to
    ``room − take`` and ``take ≥ 2m`` hosts of a node that keeps ``≥ 2m`` after it (least ``take`` first,
    then the largest node size; one node per size); else the closest subset below ``room`` and no split (the caller
    splits the largest node left).
    """
    pick = _exact_fill(sizes, room)
    if sum(sizes[i] for i in pick) == room:
        return pick, None, 0
    # one node of each size is enough to try (the others of that size give the same subsets), largest first
    by_size = sorted({s: i for i, s in reversed(list(enumerate(sizes)))}.items(), reverse=True)
    for take in range(2 * m, min(room, max(sizes, default=0) - 2 * m) + 1):
        for size, j in by_size:
            if size < take + 2 * m:
                break
            rest = [0 if i == j else s for i, s in enumerate(sizes)]
            pk = _exact_fill(rest, room - take)
            if sum(rest[i] for i in pk) == room - take:
                return [i for i in pk if i != j], j, take
    return pick, None, 0


def _pair_order(members: dict, pairs: list[tuple[int, int]], B: int, H: int, m: int) -> np.ndarray | None:
    """One proposal: host index at each position of the host order, or None when a pair cannot be
    split into two stages of ``B`` hosts with pieces of ``≥ m`` hosts."""
    left = sorted(members, key=lambda n: (-len(members[n]), n))
    order = np.full(H, -1, dtype=np.int64)
    carry: list[int] = []
    for a, b in pairs:
        need = 2 * B
        pieces = []
        if carry:
            pieces.append(carry[:need])
            carry = carry[need:]
        room = need - sum(len(p) for p in pieces)
        if room > 0:
            pick, j, take = _fill([len(members[n]) for n in left], room, m)
            pieces += [members[left[i]] for i in pick]
            if j is not None:
                pieces.append(members[left[j]][:take])
                carry = members[left[j]][take:]
            used = set(pick) | ({j} if j is not None else set())
            left = [n for i, n in enumerate(left) if i not in used]
            got = sum(len(p) for p in pieces)
            if got < need:
                if not left:
                    return None
                big = left.pop(int(np.argmax([len(members[n]) for n in left])))
                pieces.append(members[big][:need - got])
                carry = members[big][need - got:]
        plan = _share(pieces, B, m)
        if plan is None:
            return None
        _place(order, plan, a, b, B)
    return order if (order >= 0).all() and np.unique(order).size == H else None


def _share(pieces: list[list[int]], B: int, m: int) -> list[tuple[list[int], list[int]]] | None:
    """Split a pair's node pieces between its two stages: (hosts of the first, hosts of the second) per
    piece, ``B`` each in all; pieces under ``2m`` hosts whole to the stage with fewer so far, the others
    shared with ``≥ m`` on each side (the last one settles the counts); None when that cannot give ``B``
    or would leave a stage fewer than ``m`` hosts on a node."""
    small = [p for p in pieces if len(p) < 2 * m]
    big = [p for p in pieces if len(p) >= 2 * m]
    na_total = nb_total = 0
    plan = []
    for pc in small:
        if na_total <= nb_total:
            plan.append((pc, []))
            na_total += len(pc)
        else:
            plan.append(([], pc))
            nb_total += len(pc)
    for k, pc in enumerate(big):
        n = len(pc)
        if k == len(big) - 1:
            na = B - na_total
        else:
            na = max(m, min(n - m, (n + nb_total - na_total) // 2))
        if not (na in (0, n) or m <= na <= n - m):
            return None  # the counts would leave a stage fewer than m hosts on this node
        plan.append((pc[:na], pc[na:]))
        na_total += na
        nb_total += n - na
    return plan if na_total == B and nb_total == B else None


def _place(order: np.ndarray, plan, a: int, b: int, B: int) -> None:
    """Positions of a pair's hosts in stages ``a`` and ``b``: the hosts a piece gives both stages at the same
    positions (their pipeline or embedding pair on one node), the rest paired across pieces."""
    pos = 0
    pending: dict[int, list[int]] = {a: [], b: []}
    for ha, hb in plan:
        k = min(len(ha), len(hb))
        for i in range(k):
            order[a * B + pos] = ha[i]
            order[b * B + pos] = hb[i]
            pos += 1
        for s, other, hosts in ((a, b, ha[k:]), (b, a, hb[k:])):
            for h in hosts:
                if pending[other]:
                    x = pending[other].pop(0)
                else:
                    x = pos
                    pos += 1
                    pending[s].append(x)
                order[s * B + x] = h
