"""Links with capacities, routes and link loads (DESIGN §2, §4).

Every edge of the cluster graph is a physical link whose ``bandwidth`` (GB/s per
direction) all flows routed over it share.  A flow from GPU u to GPU v follows
the widest path whose interior nodes are not GPUs (NVLink peer-to-peer and
NICs do not forward through a third GPU, as NCCL's path search assumes); among
equally wide paths the fewest hops; remaining ties split the flow evenly
(ECMP).

Structure used to route at scale (never n×n):

* the *switch forest*: the graph's non-GPU nodes (NVSwitches, NICs, PCIe
  switches, CPUs, leaf/spine switches) must form a forest once *twins* (non-GPU
  nodes with the same neighbours, e.g. the spines of a two-tier Clos each wired
  to every leaf) are merged into one node with the summed capacities — the way
  ECMP over parallel spines behaves as one tree with summed uplinks.  Paths in a
  tree are unique, so a route is fixed by where it enters and leaves the forest.
* *attachments*: each GPU's links to forest nodes (e.g. to its host's NVSwitch
  and to its rail NIC), at most ``A`` per GPU.
* *direct links* between two GPUs (NVLink bridges, DGX-1 hybrid cube mesh).

For a batch of flows the route is chosen among the ``A²`` attachment pairs and
the direct link, vectorised; the load of every directed tree link follows from
subtree sums (bytes entering below a node minus bytes whose lowest common
ancestor is below it), so a whole traffic class costs
O(flows · A² · depth + forest nodes).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import InvalidArgumentError

__all__ = ["Fabric", "LinkLoads"]

#: Flows routed per vectorised batch (bounds memory for all-to-all classes).
ROUTE_CHUNK = 1 << 20


def _choose(bw: np.ndarray, hops: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The time model's route choice: ``(widest bandwidth (F,), chosen options (F, O))``, the widest
    options with the fewest hops (ECMP: the flow splits evenly over them)."""
    top = bw.max(axis=1)
    wide = (bw >= top[:, None] * (1 - 1e-12)) & (top[:, None] > 0)
    h = np.where(wide, hops, np.iinfo(np.int64).max)
    return top, wide & (h == h.min(axis=1)[:, None])


@dataclass(frozen=True)
class LinkLoads:
    """Bytes and flow counts per directed link for one set of flows.

    Attributes
    ----------
    load_bytes : numpy.ndarray of float64, shape (L,)
        Bytes crossing each directed link (see :meth:`Fabric.link_name`).
    flows : numpy.ndarray of float64, shape (L,)
        Number of flow parts (ECMP splits counted separately) crossing it.
    max_flow_seconds : float
        ``max over flow parts of bytes / B(route)`` in seconds (0 if none).
    max_flow_bytes, max_flow_gbps : float
        Bytes and route bottleneck (GB/s) of that flow part.
    max_latency_seconds : float
        Largest route latency (sum of the route's per-hop ``latency_us``), seconds.
    """

    load_bytes: np.ndarray
    flows: np.ndarray
    max_flow_seconds: float
    max_flow_bytes: float
    max_flow_gbps: float
    max_latency_seconds: float


@dataclass(frozen=True, eq=False)
class Fabric:
    """The cluster's links in a form that routes flows in bulk.

    Attributes
    ----------
    node_names : tuple of str
        Forest nodes (non-GPU nodes; a merged twin set is named ``a|b|…``), shape (N,).
    parent : numpy.ndarray of int64, shape (N,)
        Parent of each forest node, -1 for roots.
    depth : numpy.ndarray of int64, shape (N,)
    up_gbps : numpy.ndarray of float64, shape (N,)
        Capacity of the link to the parent, GB/s (inf for roots).
    up_latency_s : numpy.ndarray of float64, shape (N,)
        Latency of that link, seconds.
    anc : numpy.ndarray of int64, shape (N, D + 1)
        Ancestor of each node at each depth (-1 below the node's own depth).
    pmin : numpy.ndarray of float64, shape (N, D + 1)
        Narrowest capacity (GB/s) between a node and its ancestor at each depth.
    plat : numpy.ndarray of float64, shape (N, D + 1)
        Latency (s) between a node and its ancestor at each depth.
    att_node : numpy.ndarray of int64, shape (n, A)
        Forest node of each GPU attachment (-1 padding); GPUs in device order.
    att_gbps, att_latency_s : numpy.ndarray of float64, shape (n, A)
    direct_key : numpy.ndarray of int64, shape (E,)
        Sorted ``lo * n + hi`` of GPU-GPU links (device indices).
    direct_gbps, direct_latency_s : numpy.ndarray of float64, shape (E,)
    gpu_names : tuple of str
        GPU node ids in device order, shape (n,).
    node_index : dict
        Graph node id -> forest node index (merged twins share one).
    no_turn : numpy.ndarray of bool, shape (N,)
        Nodes a route may not enter and leave through GPU links (``kind``
        ``"nic"``: a NIC does not carry traffic from one PCIe neighbour to
        another).
    """

    node_names: tuple
    parent: np.ndarray
    depth: np.ndarray
    up_gbps: np.ndarray
    up_latency_s: np.ndarray
    anc: np.ndarray
    pmin: np.ndarray
    plat: np.ndarray
    att_node: np.ndarray
    att_gbps: np.ndarray
    att_latency_s: np.ndarray
    direct_key: np.ndarray
    direct_gbps: np.ndarray
    direct_latency_s: np.ndarray
    gpu_names: tuple
    node_index: dict = None  # type: ignore[assignment]
    no_turn: np.ndarray = None  # type: ignore[assignment]

    # ----------------------------------------------------------------- link ids

    def fair_share_gbps(self) -> np.ndarray:
        """Capacity of each node's up-link divided by the GPUs on its smaller side, GB/s, shape (N,).

        The per-GPU share of a link when every GPU on one side sends through it at
        once (a leaf uplink of 400 GB/s over 32 GPUs: 12.5 GB/s); the smaller side,
        since the forest may be rooted at a leaf (its spine's link then has the
        other leaves "below").  Used to build
        the nested domains of :mod:`.cluster` (surrogate bandwidth levels), not
        by the time model.
        """
        count = np.bincount(self.att_node[self.att_node >= 0], minlength=self.parent.size).astype(float)
        below = self._subtree(count)
        # the smaller side of the link: the tree is rooted anywhere (a leaf may be the root), and the GPUs
        # beyond a link are as many senders as those below it
        beyond = below[self.anc[:, 0]] - below if self.anc.size else np.zeros_like(below)
        side = np.where(beyond > 0, np.minimum(below, beyond), below)
        return self.up_gbps / np.maximum(side, 1.0)

    @property
    def num_nodes(self) -> int:
        return int(self.parent.size)

    @property
    def num_links(self) -> int:
        """Directed links: tree up/down, attachment out/in, direct both ways."""
        N, (n, A), E = self.parent.size, self.att_node.shape, self.direct_key.size
        return 2 * N + 2 * n * A + 2 * E

    def capacities_gbps(self) -> np.ndarray:
        """Capacity of every directed link, GB/s, shape (num_links,) (inf for unused slots)."""
        att = np.where(self.att_node >= 0, self.att_gbps, np.inf).ravel()
        return np.concatenate([self.up_gbps, self.up_gbps, att, att, self.direct_gbps, self.direct_gbps])

    def link_name(self, link: int) -> tuple[str, str]:
        """``(from node, to node)`` of a directed link id."""
        N, (n, A), E = self.parent.size, self.att_node.shape, self.direct_key.size
        if link < N:
            return self.node_names[link], self.node_names[self.parent[link]]
        if link < 2 * N:
            x = link - N
            return self.node_names[self.parent[x]], self.node_names[x]
        link -= 2 * N
        if link < 2 * n * A:
            out = link < n * A
            g, i = divmod(link % (n * A), A)
            gpu, node = str(self.gpu_names[g]), self.node_names[self.att_node[g, i]]
            return (gpu, node) if out else (node, gpu)
        link -= 2 * n * A
        e = link % E
        lo, hi = divmod(int(self.direct_key[e]), n)
        a, b = str(self.gpu_names[lo]), str(self.gpu_names[hi])
        return (a, b) if link < E else (b, a)

    def devices_behind(self, link: tuple[str, str]) -> np.ndarray:
        """Devices on the far side of a directed link from the rest of the forest, shape (k,), sorted.

        For a tree link, the devices attached below its lower node (an uplink
        carries what they send, a downlink what they receive); for a GPU's
        attachment or direct link, that GPU (the sender's for an outgoing one).
        Empty for a name this fabric does not know.
        """
        gpu = self.__dict__.get("_gpu_pos")
        if gpu is None:
            gpu = {str(g): i for i, g in enumerate(self.gpu_names)}
            self.__dict__["_gpu_pos"] = gpu
            self.__dict__["_node_pos"] = {str(x): i for i, x in enumerate(self.node_names)}
        node = self.__dict__["_node_pos"]
        a, b = (str(x) for x in link)
        if a in gpu:
            return np.array([gpu[a]], dtype=np.int64)
        if b in gpu:
            return np.array([gpu[b]], dtype=np.int64)
        if a not in node or b not in node:
            return np.zeros(0, dtype=np.int64)
        x = max(node[a], node[b], key=lambda i: int(self.depth[i]))
        att = np.maximum(self.att_node, 0)
        below = (self.anc[att, int(self.depth[x])] == x) & (self.att_node >= 0)
        return np.flatnonzero(below.any(axis=1))

    # ----------------------------------------------------------------- routing

    def _options(self, s: np.ndarray, t: np.ndarray):
        """Bandwidth, hops, latency and link ends of every route option, shapes (F, A²+1)."""
        n, A = self.att_node.shape
        F = s.size
        O = A * A + 1
        bw = np.zeros((F, O))
        hops = np.full((F, O), np.iinfo(np.int64).max, dtype=np.int64)
        lat = np.zeros((F, O))
        a_opt = np.full((F, O), -1, dtype=np.int64)
        b_opt = np.full((F, O), -1, dtype=np.int64)
        l_opt = np.full((F, O), -1, dtype=np.int64)
        for i in range(A if self.parent.size else 0):
            a = self.att_node[s, i]
            ca = self.att_gbps[s, i]
            for j in range(A):
                o = i * A + j
                b = self.att_node[t, j]
                cb = self.att_gbps[t, j]
                ok = (a >= 0) & (b >= 0)
                aa, bb = np.maximum(a, 0), np.maximum(b, 0)
                Aa, Ab = self.anc[aa], self.anc[bb]
                same = (Aa == Ab) & (Aa >= 0)
                ld = same.sum(axis=1) - 1  # depth of the lowest common ancestor, -1 if none
                ok &= ld >= 0
                if self.no_turn is not None:
                    # a NIC does not forward between its host-side neighbours (no GPU-NIC-GPU route)
                    ok &= ~((aa == bb) & self.no_turn[aa])
                ldc = np.maximum(ld, 0)
                rows = np.arange(F)
                path = np.minimum(self.pmin[aa, ldc], self.pmin[bb, ldc])
                w = np.minimum(np.minimum(ca, cb), path)
                bw[:, o] = np.where(ok, w, 0.0)
                h = 2 + self.depth[aa] + self.depth[bb] - 2 * ldc
                hops[:, o] = np.where(ok, h, hops[:, o])
                lat[:, o] = (self.att_latency_s[s, i] + self.att_latency_s[t, j]
                             + self.plat[aa, ldc] + self.plat[bb, ldc])
                a_opt[:, o] = np.where(ok, aa, -1)
                b_opt[:, o] = np.where(ok, bb, -1)
                l_opt[:, o] = np.where(ok, Aa[rows, ldc], -1)
        if self.direct_key.size:
            lo, hi = np.minimum(s, t), np.maximum(s, t)
            key = lo * n + hi
            pos = np.searchsorted(self.direct_key, key)
            posc = np.minimum(pos, self.direct_key.size - 1)
            hit = self.direct_key[posc] == key
            bw[:, -1] = np.where(hit, self.direct_gbps[posc], 0.0)
            hops[:, -1] = np.where(hit, 1, hops[:, -1])
            lat[:, -1] = np.where(hit, self.direct_latency_s[posc], 0.0)
            l_opt[:, -1] = np.where(hit, posc, -1)  # direct edge index
        return bw, hops, lat, a_opt, b_opt, l_opt

    def lone_rates_gbps(self, s: np.ndarray, t: np.ndarray) -> np.ndarray:
        """The fastest a single flow from ``s[f]`` to ``t[f]`` can go alone, GB/s, shape (F,) (lower bounds).

        The time model gives a flow split into ``p`` equal ECMP parts over
        routes of bottleneck ``B`` the time ``bytes / (p·B)``, and every link
        its load / capacity; the parts leaving over the same attachment of the
        sender (or arriving over one of the receiver) share that link, so the
        flow alone takes at least ``bytes · (parts on it / p) / capacity`` there.
        The rate is ``min(p·B, capacity / share)`` over both ends' attachments
        (e.g. a GPU with two 12.5 GB/s NICs and four routes: 25 GB/s, not 50).
        Links higher up are left out (a larger rate: still a valid bound).
        """
        return self.route_parts_and_lone_rates(s, t)[1]

    def route_parts_and_lone_rates(self, s: np.ndarray, t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(ECMP parts per flow, lone rate GB/s per flow)``, shapes (F,): :meth:`lone_rates_gbps` and its ``p``."""
        return self.route_summary(s, t)[:2]

    def route_summary(self, s: np.ndarray, t: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """One routing of flows ``s[f] -> t[f]`` (the time model's route choice), summarised.

        Returns
        -------
        (parts, rate, att_used, direct) : numpy.ndarray, shapes (F,), (F,), (F, A), (F,)
            ECMP parts and lone rate (GB/s) per flow (:meth:`lone_rates_gbps`);
            ``att_used[f, i]``: some chosen route leaves ``s[f]`` over its attachment
            ``i``; ``direct[f]``: the direct edge (index into ``direct_key``) the flow
            takes, -1 if none.  Every byte of a flow starts on one of those links.
        """
        bw, hops, _lat, _a, _b, l_opt = self._options(s, t)
        top, chosen = _choose(bw, hops)
        parts = chosen.sum(axis=1)
        rate = parts * top
        n, A = self.att_node.shape
        tree = chosen[:, :A * A].reshape(-1, A, A) if A else np.zeros((s.size, 0, 0), dtype=bool)  # (F, i, j)
        if A and self.parent.size:
            for ends, counts in ((s, tree.sum(axis=2)), (t, tree.sum(axis=1))):  # (F, A) parts per attachment
                cap = self.att_gbps[ends]
                with np.errstate(divide="ignore", invalid="ignore"):
                    lim = np.where(counts > 0, cap * parts[:, None] / np.maximum(counts, 1), np.inf)
                rate = np.minimum(rate, lim.min(axis=1))
        direct = np.where(chosen[:, -1] & (l_opt[:, -1] >= 0), l_opt[:, -1], -1)
        return parts, np.where(parts > 0, rate, 0.0), tree.any(axis=2), direct

    def route_loads(self, src: np.ndarray, dst: np.ndarray, nbytes: np.ndarray) -> LinkLoads:
        """Route flows and add up the bytes on every directed link.

        Parameters
        ----------
        src, dst : numpy.ndarray of int, shape (F,)
            Device indices (device order) of each flow's sender and receiver;
            flows with ``src == dst`` are dropped (same device: no wire).
        nbytes : numpy.ndarray of float, shape (F,) or scalar
            Bytes of each flow.

        Returns
        -------
        LinkLoads

        Raises
        ------
        InvalidArgumentError
            If a flow's two GPUs are joined only through another GPU.
        """
        src = np.asarray(src, dtype=np.int64).ravel()
        dst = np.asarray(dst, dtype=np.int64).ravel()
        nbytes = np.broadcast_to(np.asarray(nbytes, dtype=np.float64), src.shape).ravel()
        keep = (src != dst) & (nbytes > 0)
        src, dst, nbytes = src[keep], dst[keep], nbytes[keep]
        N = self.parent.size
        n, A = self.att_node.shape
        E = self.direct_key.size
        src_acc = np.zeros(N)
        dst_acc = np.zeros(N)
        lca_acc = np.zeros(N)
        src_cnt = np.zeros(N)
        dst_cnt = np.zeros(N)
        lca_cnt = np.zeros(N)
        att_out = np.zeros(n * A)
        att_in = np.zeros(n * A)
        att_out_c = np.zeros(n * A)
        att_in_c = np.zeros(n * A)
        dir_load = np.zeros(2 * E)
        dir_cnt = np.zeros(2 * E)
        best_t, best_b, best_g, best_lat = 0.0, 0.0, 0.0, 0.0
        for lo in range(0, src.size, ROUTE_CHUNK):
            s, t, w = src[lo:lo + ROUTE_CHUNK], dst[lo:lo + ROUTE_CHUNK], nbytes[lo:lo + ROUTE_CHUNK]
            bw, hops, lat, a_opt, b_opt, l_opt = self._options(s, t)
            top, chosen = _choose(bw, hops)
            if np.any(top <= 0):
                f = int(np.flatnonzero(top <= 0)[0])
                raise InvalidArgumentError(
                    f"GPUs {self.gpu_names[s[f]]!r} and {self.gpu_names[t[f]]!r} are joined only through another "
                    f"GPU; rankmap routes between GPUs over switches, NICs or a direct link (DESIGN §2)",
                    "cluster.edges",
                )
            parts = chosen.sum(axis=1)
            share = w / parts
            per_flow = share / (top * 1e9)
            k = int(np.argmax(per_flow))
            if per_flow[k] > best_t:
                best_t, best_b, best_g = float(per_flow[k]), float(share[k]), float(top[k])
            best_lat = max(best_lat, float(np.where(chosen, lat, 0.0).max()))
            for o in range(A * A):
                sel = chosen[:, o]
                if not sel.any():
                    continue
                i, j = divmod(o, A)
                ws = share[sel]
                src_acc += np.bincount(a_opt[sel, o], weights=ws, minlength=N)
                dst_acc += np.bincount(b_opt[sel, o], weights=ws, minlength=N)
                lca_acc += np.bincount(l_opt[sel, o], weights=ws, minlength=N)
                src_cnt += np.bincount(a_opt[sel, o], minlength=N)
                dst_cnt += np.bincount(b_opt[sel, o], minlength=N)
                lca_cnt += np.bincount(l_opt[sel, o], minlength=N)
                ko = s[sel] * A + i
                ki = t[sel] * A + j
                att_out += np.bincount(ko, weights=ws, minlength=n * A)
                att_in += np.bincount(ki, weights=ws, minlength=n * A)
                att_out_c += np.bincount(ko, minlength=n * A)
                att_in_c += np.bincount(ki, minlength=n * A)
            sel = chosen[:, -1]
            if E and sel.any():
                e = l_opt[sel, -1]
                fwd = s[sel] < t[sel]
                idx = np.where(fwd, e, E + e)
                dir_load += np.bincount(idx, weights=share[sel], minlength=2 * E)
                dir_cnt += np.bincount(idx, minlength=2 * E)
        up = self._subtree(src_acc) - self._subtree(lca_acc)
        down = self._subtree(dst_acc) - self._subtree(lca_acc)
        up_c = self._subtree(src_cnt) - self._subtree(lca_cnt)
        down_c = self._subtree(dst_cnt) - self._subtree(lca_cnt)
        load = np.concatenate([up, down, att_out, att_in, dir_load])
        cnt = np.concatenate([up_c, down_c, att_out_c, att_in_c, dir_cnt])
        load = np.where(np.abs(load) < 1e-6 * max(1.0, float(nbytes.max(initial=0.0))), 0.0, load)
        return LinkLoads(load, np.rint(cnt), best_t, best_b, best_g, best_lat)

    def _subtree(self, acc: np.ndarray) -> np.ndarray:
        """Sum of ``acc`` over each node's subtree, shape (N,)."""
        out = acc.astype(np.float64, copy=True)
        for nodes in self._by_depth_desc:
            p = self.parent[nodes]
            np.add.at(out, p, out[nodes])
        return out

    @property
    def _by_depth_desc(self) -> list:
        cached = self.__dict__.get("_levels")
        if cached is None:
            order = np.argsort(-self.depth, kind="stable")
            d = self.depth[order]
            cuts = np.flatnonzero(np.diff(d)) + 1
            cached = [g for g in np.split(order, cuts) if g.size and self.depth[g[0]] > 0]
            self.__dict__["_levels"] = cached
        return cached
