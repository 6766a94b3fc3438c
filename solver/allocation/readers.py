"""Launch files read back into a layout: the GPU each global rank runs on (issue 26).

``rankmap solve --emit KIND -o FILE`` writes four launch files (:mod:`rankmap.solver.launch.files`);
each is read here with the launcher's own rule, so ``evaluate`` and ``check`` see the layout the
launcher will start:

* **hostfile** (``SLURM_HOSTFILE`` for ``srun --distribution=arbitrary``): line i is the host of
  task (global rank) i.  Slurm numbers the tasks of a node in task order (``SLURM_LOCALID``), so
  local rank k of a host is its k-th lowest global rank.
* **rankfile** (Open MPI ``mpirun --rankfile``): ``rank R=HOST slot=S``.  The slot binds CPU cores
  (users edit it for NUMA binding), so it is ignored; local rank k of a host is again its k-th
  lowest rank (``OMPI_COMM_WORLD_LOCAL_RANK``).
* **pod-map** (Kubernetes, ``--emit kubernetes``): line i is the node of pod index i, which runs
  torchrun node rank i: ranks ``base(i) .. base(i) + nproc(i) - 1``, ``base`` the sum of the
  ``nproc`` of lower pod indices.
* **torchrun** (the script ``--emit torchrun`` writes): one ``HOST) CUDA_VISIBLE_DEVICES=LIST exec
  torchrun ... --nproc-per-node G --node-rank R ...`` case per host; global rank
  ``base(R) + local_rank`` (torchrun's rule).

The GPU of local rank k on a host is ``CUDA_VISIBLE_DEVICES[k]`` (a CUDA device index, the graph's
``local_index``): from the GPU file ``FILE.gpus`` (``HOST LIST`` per host, which ``--emit`` writes
when hosts use different GPU orders), else one list for every host (the ``CUDA_VISIBLE_DEVICES``
of the emitted command), else the GPUs by index (k itself), as CUDA numbers them without the
variable.  The torchrun script carries each host's list itself.

Every function is O(lines + GPUs); errors name the file, the line and the value.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from typing import Mapping, Sequence

from ..errors import InvalidArgumentError

__all__ = ["LAUNCH_FILE_KINDS", "HostGpus", "host_gpus", "read_gpus_file", "read_launch_file",
           "parse_device_list"]

#: Launch-file kinds read here (the ``--emit`` kinds: ``kubernetes`` writes the pod map), and the
#: field an error names.
LAUNCH_FILE_KINDS = ("hostfile", "rankfile", "pod-map", "torchrun")
_FIELD = {"hostfile": "hostfile", "rankfile": "rankfile", "pod-map": "pod_map", "torchrun": "torchrun"}

#: Lines a launch file may have (a hostfile line per rank: the server's largest world, 4x over).
MAX_LINES = 1 << 20


@dataclass(frozen=True)
class HostGpus:
    """Each host's GPUs by CUDA index: ``gpus[host][local_index]`` is the GPU node id.

    Built by :func:`host_gpus` from a :class:`~rankmap.solver.fabric.cluster.Cluster`
    (O(GPUs)); ``hosts`` in the cluster's order.
    """

    gpus: Mapping[str, Mapping[int, str]]
    hosts: tuple[str, ...]

    def device(self, host: str, local_index: int, where: str, field: str) -> str:
        """The GPU id of ``host``'s CUDA device ``local_index``.

        Raises
        ------
        InvalidArgumentError
            The host is not in the cluster, or has no GPU of that index (``where`` names the line).
        """
        table = self.gpus.get(host)
        if table is None:
            raise InvalidArgumentError(f"{where}: host {host[:120]!r} is not a host of the cluster", field)
        dev = table.get(int(local_index))
        if dev is None:
            raise InvalidArgumentError(
                f"{where}: host {host} has no GPU of CUDA index {local_index} (its indices: "
                f"{_short(sorted(table))})", field)
        return dev


def _short(values: Sequence, n: int = 8) -> str:
    text = ",".join(map(str, list(values)[:n]))
    return text + (",..." if len(values) > n else "")


def host_gpus(cluster) -> HostGpus:
    """The :class:`HostGpus` of a cluster (its ``hosts``, ``host_of``, ``local_index``, ``devices``)."""
    table: dict[str, dict[int, str]] = {h: {} for h in cluster.hosts}
    hosts = cluster.hosts
    for dev, h, li in zip(cluster.devices, cluster.host_of.tolist(), cluster.local_index.tolist()):
        table[hosts[h]][int(li)] = str(dev)
    return HostGpus(table, tuple(hosts))


def _lines(text: str, source: str, field: str) -> list[tuple[int, str]]:
    """``(line number, stripped line)`` of the non-empty lines that are not ``#`` comments."""
    if not isinstance(text, str):
        raise InvalidArgumentError(f"{source}: expected text", field)
    raw = text.splitlines()
    if len(raw) > MAX_LINES:
        raise InvalidArgumentError(f"{source} has {len(raw):,} lines, more than the {MAX_LINES:,} read", field)
    return [(i + 1, s) for i, line in enumerate(raw) if (s := line.strip()) and not s.startswith("#")]


def parse_device_list(text: str, where: str, field: str) -> list[int]:
    """``"0,1,2,3"`` -> [0, 1, 2, 3] (CUDA device indices, ASCII digits, each once).

    Raises
    ------
    InvalidArgumentError
        An entry that is not a non-negative integer, or a repeated index (naming it and ``where``).
    """
    out: list[int] = []
    for part in text.split(","):
        p = part.strip()
        if not (p.isascii() and p.isdigit()) or len(p) > 10:
            raise InvalidArgumentError(f"{where}: {p[:40]!r} in CUDA_VISIBLE_DEVICES {text[:80]!r} is not a GPU index",
                                       field)
        out.append(int(p))
    if len(set(out)) != len(out):
        raise InvalidArgumentError(f"{where}: CUDA_VISIBLE_DEVICES {text[:80]!r} names a GPU twice", field)
    return out


def read_gpus_file(text: str, source: str = "GPU file") -> list[tuple[str, list[int]]]:
    """The GPU file ``--emit`` writes next to a launch file: ``HOST LIST`` per line, in node-rank order.

    Returns ``[(host, CUDA indices)]`` in line order.

    Raises
    ------
    InvalidArgumentError
        A line that is not ``HOST LIST``, a bad list (field ``gpus_file``).
    """
    out = []
    for n, line in _lines(text, source, "gpus_file"):
        parts = line.split()
        if len(parts) != 2:
            raise InvalidArgumentError(f"{source} line {n}: expected 'HOST GPU,GPU,...', got {line[:80]!r}",
                                       "gpus_file")
        out.append((parts[0], parse_device_list(parts[1], f"{source} line {n}", "gpus_file")))
    return out


def _gpu_order(host: str, per_host: Mapping[str, Sequence[int]] | None, uniform: Sequence[int] | None,
               k: int, where: str, field: str) -> int:
    """CUDA index of local rank ``k`` on ``host``: the host's list, else the uniform one, else k."""
    lst = per_host.get(host) if per_host else None
    if lst is None:
        lst = uniform
    if lst is None:
        return k
    if k >= len(lst):
        raise InvalidArgumentError(
            f"{where}: host {host} runs more ranks than its CUDA_VISIBLE_DEVICES lists GPUs ({len(lst)})", field)
    return int(lst[k])


def _by_local_rank(rank_hosts: Sequence[str], table: HostGpus, per_host, uniform, where_of, field: str) -> list[str]:
    """Device per rank when rank r runs on ``rank_hosts[r]`` and a host's local ranks follow its global ranks."""
    seen: dict[str, int] = {}
    out: list[str] = []
    used: dict[str, int] = {}
    for r, host in enumerate(rank_hosts):
        k = seen.get(host, 0)
        seen[host] = k + 1
        where = where_of(r)
        dev = table.device(host, _gpu_order(host, per_host, uniform, k, where, field), where, field)
        if dev in used:
            raise InvalidArgumentError(f"{where}: rank {r} and rank {used[dev]} run on the same GPU {dev}", field)
        used[dev] = r
        out.append(dev)
    return out


def _read_hostfile(text, source, table, per_host, uniform) -> list[str]:
    lines = _lines(text, source, "hostfile")
    hosts = []
    for n, line in lines:
        parts = line.split()
        if len(parts) != 1:
            raise InvalidArgumentError(
                f"{source} line {n}: expected one host name per line (a host per global rank), got {line[:80]!r}",
                "hostfile")
        hosts.append(parts[0])
    if not hosts:
        raise InvalidArgumentError(f"{source} is empty (expected one host per global rank)", "hostfile")
    return _by_local_rank(hosts, table, per_host, uniform, lambda r: f"{source} line {lines[r][0]}", "hostfile")


_RANKFILE_LINE = re.compile(r"^rank\s+(\d{1,10})\s*=\s*(\S+)\s+slot\s*=\s*(\S+)$")
#: Open MPI's slot forms: a core (``0``), a range or list (``0-3``, ``0,2``), a socket and its cores
#: (``1:0-2``), logical or physical (``p0:1``, ``s1:0``).
_SLOT = re.compile(r"^[ps]?\d{1,10}(?:[-,:]\d{1,10})*$")


def _read_rankfile(text, source, table, per_host, uniform) -> list[str]:
    entries: dict[int, tuple[str, int]] = {}
    for n, line in _lines(text, source, "rankfile"):
        m = _RANKFILE_LINE.match(line)
        if not m:
            raise InvalidArgumentError(f"{source} line {n}: expected 'rank R=HOST slot=S', got {line[:80]!r}",
                                       "rankfile")
        if not _SLOT.match(m.group(3)):
            raise InvalidArgumentError(
                f"{source} line {n}: slot {m.group(3)[:40]!r} is not an Open MPI slot (a core number, a range or list "
                f"such as 0-3 or 0,2, or SOCKET:CORES such as 1:0-2)", "rankfile")
        r = int(m.group(1))
        if r in entries:
            raise InvalidArgumentError(f"{source} line {n}: rank {r} is already on line {entries[r][1]}", "rankfile")
        entries[r] = (m.group(2), n)
    if not entries:
        raise InvalidArgumentError(f"{source} is empty (expected 'rank R=HOST slot=S' per global rank)", "rankfile")
    missing = next((r for r in range(len(entries)) if r not in entries), None)
    if missing is not None:
        raise InvalidArgumentError(
            f"{source}: rank {missing} is missing (ranks must be 0..{len(entries) - 1}, each once; "
            f"largest given {max(entries)})", "rankfile")
    hosts = [entries[r][0] for r in range(len(entries))]
    return _by_local_rank(hosts, table, per_host, uniform, lambda r: f"{source} line {entries[r][1]}", "rankfile")


def _blocks(source, field, nodes: Sequence[tuple[int, str, int, list[int] | None]], table: HostGpus) -> list[str]:
    """Ranks of torchrun node ranks in order: ``nodes`` = (line, host, nproc, CUDA list or None) by node rank."""
    out: list[str] = []
    used: dict[str, int] = {}
    hosts_seen: dict[str, int] = {}
    for line, host, nproc, cvd in nodes:
        where = f"{source} line {line}"
        if host in hosts_seen:
            raise InvalidArgumentError(f"{where}: host {host} is also on line {hosts_seen[host]} (one node rank per "
                                       "host)", field)
        hosts_seen[host] = line
        for k in range(nproc):
            idx = k if cvd is None else (cvd[k] if k < len(cvd) else None)
            if idx is None:
                raise InvalidArgumentError(
                    f"{where}: --nproc-per-node {nproc} but CUDA_VISIBLE_DEVICES lists {len(cvd)} GPUs", field)
            dev = table.device(host, idx, where, field)
            if dev in used:
                raise InvalidArgumentError(f"{where}: rank {len(out)} and rank {used[dev]} run on the same GPU {dev}",
                                           field)
            used[dev] = len(out)
            out.append(dev)
    return out


def _read_pod_map(text, source, table, gpus_lines, uniform, world_size) -> list[str]:
    lines = _lines(text, source, "pod_map")
    if not lines:
        raise InvalidArgumentError(f"{source} is empty (expected one node name per pod index)", "pod_map")
    for n, line in lines:
        if len(line.split()) != 1:
            raise InvalidArgumentError(f"{source} line {n}: expected one node name per line (pod index = line - 1), "
                                       f"got {line[:80]!r}", "pod_map")
    if gpus_lines is not None and len(gpus_lines) != len(lines):
        raise InvalidArgumentError(
            f"{source} has {len(lines)} pods but its GPU file has {len(gpus_lines)} lines (one per pod index)",
            "gpus_file")
    if gpus_lines is None and uniform is None and world_size is not None and world_size % len(lines):
        raise InvalidArgumentError(
            f"{source} has {len(lines)} pods, which do not divide world size {world_size} (each pod runs "
            f"--nproc-per-node ranks)", "pod_map")
    nodes = []
    for i, (n, host) in enumerate(lines):
        if gpus_lines is not None:
            ghost, cvd = gpus_lines[i]
            if ghost != host:
                raise InvalidArgumentError(f"{source} line {n}: pod index {i} runs on {host} but its GPU file's line "
                                           f"{i + 1} names {ghost}", "gpus_file")
        else:
            cvd = list(uniform) if uniform is not None else None
        if cvd is not None:
            nproc = len(cvd)
        elif world_size is not None:
            nproc = world_size // len(lines)
        else:
            if host not in table.gpus:
                raise InvalidArgumentError(f"{source} line {n}: host {host[:120]!r} is not a host of the cluster",
                                           "pod_map")
            nproc = len(table.gpus[host])  # a whole host, as the emitted torchrun --nproc-per-node
        nodes.append((n, host, nproc, cvd))
    return _blocks(source, "pod_map", nodes, table)


_CASE = re.compile(r"^(\S+?)\)\s*(.*?)\s*;;\s*$")


def _option(words: list[str], names: tuple[str, ...], where: str) -> str | None:
    for i, w in enumerate(words):
        for name in names:
            if w == name and i + 1 < len(words):
                return words[i + 1]
            if w.startswith(name + "="):
                return w[len(name) + 1:]
    return None


def _read_torchrun(text, source, table) -> list[str]:
    by_rank: dict[int, tuple[int, str, int, list[int] | None]] = {}
    nnodes: list[tuple[int, str]] = []  # (line, --nnodes as written)
    for n, line in _lines(text, source, "torchrun"):
        m = _CASE.match(line)
        if not m or m.group(1) == "*":
            continue  # the shebang's comments, 'case ... in', 'esac', the '*)' fallback
        host, body = m.group(1), m.group(2)
        where = f"{source} line {n}"
        try:
            words = shlex.split(body)
        except ValueError as exc:
            raise InvalidArgumentError(f"{where}: cannot split the command: {exc}", "torchrun") from None
        if "torchrun" not in words:
            raise InvalidArgumentError(f"{where}: the case of host {host} runs no torchrun", "torchrun")
        cvd = None
        for w in words[: words.index("torchrun")]:
            if w.startswith("CUDA_VISIBLE_DEVICES="):
                value = w.split("=", 1)[1]
                if value.startswith("$"):
                    raise InvalidArgumentError(f"{where}: CUDA_VISIBLE_DEVICES={value[:60]} is read at run time; "
                                               "give the GPU file instead", "torchrun")
                cvd = parse_device_list(value, where, "torchrun")
        nproc_text = _option(words, ("--nproc-per-node", "--nproc_per_node"), where)
        rank_text = _option(words, ("--node-rank", "--node_rank"), where)
        if nproc_text is None or rank_text is None:
            raise InvalidArgumentError(f"{where}: the torchrun of host {host} has no --nproc-per-node and "
                                       "--node-rank", "torchrun")
        if not (nproc_text.isascii() and nproc_text.isdigit() and rank_text.isascii() and rank_text.isdigit()) \
                or len(nproc_text) > 7 or len(rank_text) > 7:
            raise InvalidArgumentError(f"{where}: --nproc-per-node {nproc_text[:20]!r} / --node-rank "
                                       f"{rank_text[:20]!r} are not integers", "torchrun")
        node_rank = int(rank_text)
        nnodes_text = _option(words, ("--nnodes",), where)
        if nnodes_text is not None:
            nnodes.append((n, nnodes_text))
        if node_rank in by_rank:
            raise InvalidArgumentError(f"{where}: node rank {node_rank} is also on line {by_rank[node_rank][0]}",
                                       "torchrun")
        by_rank[node_rank] = (n, host, int(nproc_text), cvd)
    if not by_rank:
        raise InvalidArgumentError(f"{source}: no 'HOST) ... torchrun ... ;;' line (not a script rankmap wrote)",
                                   "torchrun")
    missing = next((r for r in range(len(by_rank)) if r not in by_rank), None)
    if missing is not None:
        raise InvalidArgumentError(f"{source}: node rank {missing} is missing (node ranks must be "
                                   f"0..{len(by_rank) - 1}, each once)", "torchrun")
    for n, value in nnodes:  # a static rendezvous waits for --nnodes nodes: more than the script runs would hang
        if value != str(len(by_rank)):
            raise InvalidArgumentError(f"{source} line {n}: --nnodes {value[:20]} but the script starts "
                                       f"{len(by_rank)} nodes (its torchrun would wait for the others)", "torchrun")
    return _blocks(source, "torchrun", [by_rank[r] for r in range(len(by_rank))], table)


def read_launch_file(kind: str, text: str, table: HostGpus, *, source: str | None = None,
                     gpus_text: str | None = None, gpus_source: str | None = None,
                     cuda_visible_devices: Sequence[int] | None = None,
                     world_size: int | None = None) -> list[str]:
    """The GPU node id of each global rank (length = the ranks the file starts) of a launch file.

    Parameters
    ----------
    kind : str
        One of :data:`LAUNCH_FILE_KINDS`: ``hostfile``, ``rankfile``, ``pod-map``, ``torchrun``.
    text : str
        The file's content.
    table : HostGpus
        The cluster's GPUs by host and CUDA index (:func:`host_gpus`).
    source : str
        The file's name in messages.
    gpus_text, gpus_source : str, optional
        The GPU file (``HOST LIST`` per line, :func:`read_gpus_file`) and its name: each host's
        ``CUDA_VISIBLE_DEVICES``; for the pod map, line i is pod index i's.
    cuda_visible_devices : sequence of int, optional
        One ``CUDA_VISIBLE_DEVICES`` for every host (the emitted command's), when there is no GPU file.
    world_size : int, optional
        Ranks of the job; only the pod map needs it (ranks per pod = world size / pods when no list
        says how many GPUs a pod uses; without it each pod runs its whole host).

    Raises
    ------
    InvalidArgumentError
        An unknown kind (field ``layout``); a malformed line, a host the cluster lacks, a GPU index a
        host lacks, two ranks on one GPU, a rank or node rank missing or repeated (naming the file,
        the line and the value; field ``hostfile``, ``rankfile``, ``pod_map``, ``torchrun`` or
        ``gpus_file``).
    """
    if kind not in LAUNCH_FILE_KINDS:
        raise InvalidArgumentError(f"launch file kind {kind!r} is not one of {', '.join(LAUNCH_FILE_KINDS)}",
                                   "layout")
    source = source or kind
    gpus_lines = None if gpus_text is None else read_gpus_file(gpus_text, gpus_source or f"{source}.gpus")
    uniform = None if cuda_visible_devices is None else [int(x) for x in cuda_visible_devices]
    if kind == "torchrun":
        return _read_torchrun(text, source, table)
    if kind == "pod-map":
        return _read_pod_map(text, source, table, gpus_lines, uniform, world_size)
    per_host = None
    if gpus_lines is not None:
        per_host = {}
        for h, lst in gpus_lines:
            if h in per_host:
                raise InvalidArgumentError(f"{gpus_source or 'GPU file'}: host {h} is listed twice", "gpus_file")
            per_host[h] = lst
    if kind == "hostfile":
        return _read_hostfile(text, source, table, per_host, uniform)
    return _read_rankfile(text, source, table, per_host, uniform)
