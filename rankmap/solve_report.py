"""The ``--format table`` report of ``rankmap solve`` and ``rankmap evaluate`` (issue 12 item 7).

Every line stays within :data:`TABLE_WIDTH` columns whatever the cluster size:
long host lists, group rows and cells are summarised (runs of one host, rank
ranges, "... N more"), and launch commands are wrapped at spaces with shell
line continuations so that they stay pasteable.
"""

from __future__ import annotations

import math
from typing import Mapping, Sequence

__all__ = ["TABLE_WIDTH", "algo_text", "cost_table", "solve_table", "wrap_command", "runs_text", "LAUNCHERS"]

#: Widest line of a table, columns.
TABLE_WIDTH = 160
#: Launch recipes the table can show (``--emit`` kind -> ``apply`` key).
LAUNCHERS = {"slurm-hostfile": "slurm", "torchrun": "torchrun", "rankfile": "mpirun", "kubernetes": "kubernetes"}
_HOST_ROWS = 16


def _fmt_s(x: float) -> str:
    """Seconds for people, 4 significant digits: ``180.0 ms``, ``2.749 s``, ``12.35 us``."""
    x = float(x)
    if x == 0:
        return "0"
    if not math.isfinite(x):
        return f"{x} s"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6), ("ns", 1e-9)):
        if abs(x) >= scale or unit == "ns":
            v = x / scale
            decimals = max(0, 3 - int(math.floor(math.log10(abs(v)))))
            return f"{v:.{decimals}f} {unit}"
    raise AssertionError("unreachable")


def _clip(text: str, width: int = TABLE_WIDTH) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."


def _exposure_note(cost) -> str:
    """``exposure tp 0.5, dp 0.2 (other classes 1)``, or "" when every class is fully exposed."""
    partial = [(c, cc.exposure) for c, cc in (cost.classes or {}).items() if cc.exposure != 1.0]
    if not partial:
        return ""
    return "exposure " + ", ".join(f"{c} {x:g}" for c, x in partial) + " (other classes 1)"


def algo_text(class_cost) -> str:
    """How NCCL runs a class (:class:`~rankmap.solver.results.ClassCost` ``algorithm`` and ``channels``):
    ``ring×8``, ``nvls``, ``p2p×4``: the algorithm, then ``×channels`` when more than one; ``-`` when
    the class moves no bytes (or the answer came from a server that does not say)."""
    algo = str(getattr(class_cost, "algorithm", "") or "")
    if not algo:
        return "-"
    channels = int(getattr(class_cost, "channels", 0) or 0)
    return _clip(algo, 8) + (f"×{channels}" if channels > 1 else "")


def cost_table(cost, traffic: Mapping[str, float], baseline=None) -> list[str]:
    """The per-class rows of a cost (DESIGN §4) and its total line.

    One row per class that moves bytes: bytes one rank sends per step, the
    class's time ``T_c`` (and the baseline's, when given), how NCCL runs it
    (``algo``: :func:`algo_text`, the chosen layout's) and what limits it
    (:meth:`~rankmap.solver.results.Bottleneck.describe`); then the predicted
    communication time per step, ``Σ_c x_c·T_c``.  Rows are clipped to
    :data:`TABLE_WIDTH` columns.
    """
    from rankmap.solver.traffic import format_bytes
    from rankmap.solver.results import ClassCost

    cols = [("class", "<10s"), ("bytes/rank", ">10s")]
    if baseline is None:
        cols.append(("time", ">10s"))
    else:
        cols += [("time (chosen)", ">13s"), ("time (baseline)", ">15s")]
    cols.append(("algo", "<11s"))

    def row(cells: list[str], tail: str) -> str:
        return _clip(("  ".join(format(c, f) for c, (_, f) in zip(cells, cols)) + "  " + tail).rstrip())

    lines = [row([name for name, _ in cols], "bottleneck" + (" (chosen)" if baseline is not None else ""))]
    classes = cost.classes or {}
    for c, t in cost.by_class.items():
        cc = classes.get(c) or ClassCost(float(t))
        tb = baseline.by_class.get(c, 0.0) if baseline is not None else 0.0
        if traffic.get(c, 0.0) == 0 and t == 0 and tb == 0 and cc.bytes_per_rank == 0:
            continue
        cells = [c, format_bytes(cc.bytes_per_rank), _fmt_s(t)]
        if baseline is not None:
            cells.append(_fmt_s(tb))
        cells.append(algo_text(cc))
        lines.append(row(cells, cc.bottleneck.describe()))
    note = _exposure_note(cost)
    cells = ["total/step", "", _fmt_s(cost.total_seconds)]
    if baseline is not None:
        cells.append(_fmt_s(baseline.total_seconds))
    cells.append("")
    lines.append(row(cells, "predicted communication time per step, Σ x_c·T_c" + (f"; {note}" if note else "")))
    return lines


def wrap_command(command: str, width: int = TABLE_WIDTH, indent: str = "  ") -> list[str]:
    """A shell command as lines of at most ``width`` columns joined by `` \\`` continuations.

    Breaks only at spaces outside double quotes, so the lines pasted into a
    shell (or inside a ``bash -c '...'`` string, whose shell also joins them)
    run the same command.  A single word longer than the width stays whole.
    """
    words, cur, quoted = [], [], False
    for ch in command:
        if ch == '"':
            quoted = not quoted
        if ch == " " and not quoted:
            words.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    words.append("".join(cur))
    lines, line = [], indent
    for w in words:
        if line.strip() and len(line) + 1 + len(w) + 2 > width:
            lines.append(line + " \\")
            line = indent + "  " + w
        else:
            line = line + (" " if line.strip() else "") + w
    lines.append(line)
    return lines


def runs_text(names: Sequence[str], width: int = 100) -> str:
    """``host01 x8, host03 x8, ... (32 lines, 4 hosts)``: a per-line host list, summarised."""
    parts: list[str] = []
    count = 0
    prev = None
    nruns = 0
    for name in names:
        if name == prev:
            count += 1
            continue
        if prev is not None:
            parts.append(f"{prev} x{count}" if count > 1 else prev)
            nruns += 1
        prev, count = name, 1
    if prev is not None:
        parts.append(f"{prev} x{count}" if count > 1 else prev)
    text = ""
    for i, p in enumerate(parts):
        nxt = (", " if text else "") + p
        if len(text) + len(nxt) > width:
            text += f", ... {len(parts) - i} more runs"
            break
        text += nxt
    return f"{text} ({len(names)} lines, {len(set(names))} hosts)"


def _range_text(ranks: Sequence[int], prefix: str = "") -> str:
    """``0-7`` for a contiguous ascending run, else ``0,8,16,...``."""
    r = [int(x) for x in ranks]
    if not r:
        return ""
    if len(r) > 1 and all(b - a == 1 for a, b in zip(r, r[1:])):
        return f"{prefix}{r[0]}-{prefix}{r[-1]}" if prefix else f"{r[0]}-{r[-1]}"
    text = ",".join(f"{prefix}{x}" for x in r[:8])
    return text + (f",...({len(r)})" if len(r) > 8 else "")


def _where(ranks: Sequence[int], placement: Mapping[int, tuple[str, int]]) -> str:
    """``host01:0-7`` / ``host01:0-3+host02:0-3``: the hosts and GPUs of a group, in rank order."""
    runs: list[tuple[str, list[int]]] = []
    for r in ranks:
        host, gpu = placement.get(int(r), ("?", -1))
        if runs and runs[-1][0] == host:
            runs[-1][1].append(gpu)
        else:
            runs.append((host, [gpu]))
    shown = "+".join(f"{h}:{_range_text(g)}" for h, g in runs[:3])
    return shown + (f"+{len(runs) - 3} more" if len(runs) > 3 else "")


def _group_cell(ranks, placement) -> str:
    return f"{_range_text(ranks, 'g')}@{_where(ranks, placement)}"


def _groups_summary(cfg, placement, max_replicas: int = 8, max_stages: int = 4) -> list[str]:
    """Replica x stage grid of TP groups and one line per group family, all within the table width."""
    from rankmap.solver.megatron.catalogue import megatron_groups

    groups = megatron_groups(cfg)
    tp_groups = groups["TENSOR_MODEL_PARALLEL_GROUP"]
    coords = cfg.decoder().coordinates(tp_groups[:, 0])
    replica = coords["dp"] * cfg.cp + coords["cp"]
    stage = coords["pp"]
    cell = {(int(r), int(s)): tp_groups[g] for g, (r, s) in enumerate(zip(replica.tolist(), stage.tolist()))}
    n_rep, n_st = cfg.dp * cfg.cp, cfg.pp
    shown_st = min(n_st, max_stages)
    name_w = 14
    cw = max(12, (TABLE_WIDTH - name_w - 3 * shown_st - 12) // shown_st)
    lines = ["where the TP groups sit (gRANKS@host:GPUs; rows = replicas, columns = pipeline stages):"]
    header = "replica".ljust(name_w) + "".join(" | " + f"PP stage {s}".ljust(cw) for s in range(shown_st))
    lines.append((header + (f" | ... {n_st - shown_st} more stages" if n_st > shown_st else "")).rstrip())
    for r in range(min(n_rep, max_replicas)):
        dp_i, cp_i = divmod(r, cfg.cp)
        name = f"DP={dp_i}" + (f" CP={cp_i}" if cfg.cp > 1 else "")
        cells = [_clip(_group_cell(cell[(r, s)], placement), cw).ljust(cw) for s in range(shown_st)]
        lines.append(_clip((name.ljust(name_w) + "".join(" | " + c for c in cells)).rstrip()))
    if n_rep > max_replicas:
        lines.append(f"... {n_rep - max_replicas} more replicas")
    lines.append("")
    nw = max(len(n) for n in groups)
    for name, arr in groups.items():
        head = f"{name.ljust(nw)}  {arr.shape[0]:>6d} x {arr.shape[1]:<5d} "
        room = TABLE_WIDTH - len(head)
        text = ""
        for i, row in enumerate(arr):
            item = ("  " if text else "") + f"[{_group_cell(row, placement)}]"
            if len(text) + len(item) > room - 16:
                text += f"  ... {arr.shape[0] - i} more"
                break
            text += item
        lines.append(_clip(head + text))
    return lines


def _launch_order_text(launch_order) -> str:
    if launch_order == "listed":
        return "hosts as listed in the cluster file"
    if launch_order == "sorted" or launch_order is None:
        return "hosts in sorted name order, as srun/torchrun"
    return "hosts in the given launch order"


def _recipe(result, launcher: str, written: Mapping[str, str]) -> list[str]:
    """The launch lines of one launcher (``apply`` key) for the table."""
    apply = result.apply or {}
    lines: list[str] = []
    why = (apply.get("unavailable") or {}).get(launcher, "")
    if launcher in ("torchrun", "kubernetes") and why:
        import textwrap

        return textwrap.wrap(f"launch ({launcher}): not possible: {why}", TABLE_WIDTH, subsequent_indent="  ")
    if launcher == "slurm":
        s = apply.get("slurm") or {}
        lines.append("launch (Slurm, srun --distribution=arbitrary): SLURM_HOSTFILE, one host per global rank:")
        lines.append(_clip("  " + runs_text(s.get("hostfile", []))))
        lines.extend(wrap_command(s.get("command", "")))
    elif launcher == "mpirun":
        m = apply.get("mpirun") or {}
        rf = m.get("rankfile", [])
        lines.append(f"launch (Open MPI rankfile, {len(rf)} lines: rank R=HOST slot=LOCAL_RANK):")
        lines.append(_clip("  " + "; ".join(rf[:3]) + (f"; ... {len(rf) - 3} more" if len(rf) > 3 else "")))
        lines.extend(wrap_command(m.get("command", "")))
    elif launcher == "torchrun":
        t = apply.get("torchrun") or []
        lines.append(f"launch (torchrun, one command per host, static rendezvous on {apply.get('rendezvous', '')}):")
        for i, item in enumerate(t):
            if i == 2 and len(t) > 3:
                lines.append(f"  ... {len(t) - 3} more hosts (node ranks 2..{len(t) - 2})" if len(t) > 4
                             else "  ... 1 more host (node rank 2)")
                continue
            if 2 <= i < len(t) - 1 and len(t) > 3:
                continue
            lines.append(_clip(f"  # node_rank {item['node_rank']} on {item['host']}"))
            lines.extend(wrap_command(item["command"]))
    elif launcher == "kubernetes":
        k = apply.get("kubernetes") or {}
        pods = k.get("pod_nodes", [])
        lines.append(f"launch (Kubernetes, one pod per host, pod index = node rank; {len(pods)} pods):")
        lines.append(_clip("  pod index -> node: " + ", ".join(f"{i}={n}" for i, n in enumerate(pods[:8]))
                           + (f", ... {len(pods) - 8} more" if len(pods) > 8 else "")))
        lines.extend(wrap_command(k.get("command", "")))
    if "gpus_file" in apply and launcher != "torchrun":
        lines.append("  (the hosts' GPU lists differ: CUDA_VISIBLE_DEVICES is read from FILE.gpus, "
                     "written by --emit next to FILE)")
    for path, text in written.items():
        lines.append(_clip(f"  wrote {path} ({text.count(chr(10))} lines)"))
    if not written:
        kind = {v: k for k, v in LAUNCHERS.items()}[launcher]
        lines.append(_clip(f"  write the file with: --emit {kind} -o FILE (other launchers: "
                           + ", ".join(k for k in LAUNCHERS if k != kind) + ")"))
    return lines


#: Measured links listed in the table (the JSON has all of them).
_MEASURED_ROWS = 8


def measured_lines(links) -> list[str]:
    """The table's lines for the measured links (issue 27) a layout relies on: link, measured and line
    GB/s, the classes crossing it, the measurement; nothing without any."""
    links = list(links or ())
    if not links:
        return []
    out = [f"measured links this layout relies on ({len(links)}; measured / line GB/s, classes, source):"]
    for d in links[:_MEASURED_ROWS]:
        u, v = d["link"]
        out.append(_clip(f"  {u}-{v}  {d['measured_gbps']:.4g} / {d['line_gbps']:.4g} GB/s  "
                         f"{','.join(d.get('classes', ()))}  {d.get('source', '')}"))
    if len(links) > _MEASURED_ROWS:
        out.append(f"  ... {len(links) - _MEASURED_ROWS} more (the JSON's measured.links)")
    return out


def solve_table(result, launcher: str = "slurm", written: Mapping[str, str] | None = None,
                launch_order=None) -> str:
    """Human-readable report of a :class:`~rankmap.solver.SolveResult`, at most :data:`TABLE_WIDTH` columns.

    ``launcher``: the ``apply`` key whose recipe is shown (``slurm``,
    ``torchrun``, ``mpirun``, ``kubernetes``); ``written``: files ``--emit``
    wrote (path -> text), listed under the recipe; ``launch_order``: the
    policy or host list the baseline used (for its label).
    """
    cfg = result.config
    lines = []
    lines.append(
        f"rankmap solve: {cfg.world_size} GPUs, "
        + " ".join(f"{k}={v}" for k, v in cfg.sizes.items())
        + f", mode {result.mode}"
    )
    stopped = getattr(result, "stopped_by", "")
    lines.append(f"status {result.status}" + (f" (stopped by the {stopped.replace('_', ' ')})" if stopped else "")
                 + f"   solve time {result.solve_seconds:.2f} s   orders searched: "
                 + ", ".join(result.orders_searched))
    lines.append("")
    lines.append(f"chosen order  {result.order}      (baseline {result.baseline.order})")
    lines.append(f"apply         {result.apply.get('note', '')}")
    if result.apply.get("hosts_inferred"):
        import textwrap

        lines += textwrap.wrap(str(result.apply["hosts_inferred"]), TABLE_WIDTH, initial_indent="hosts         ",
                               subsequent_indent=" " * 14)
    lines.append("")
    lines.append("node_rank  host                  CUDA_VISIBLE_DEVICES   global ranks")
    hosts = result.hosts
    shown = list(hosts[:_HOST_ROWS]) if len(hosts) <= _HOST_ROWS + 1 else list(hosts[:_HOST_ROWS - 1])
    for h in shown:
        r = h.global_ranks
        span = _range_text(r) if r else ""
        cvd = ",".join(map(str, h.cuda_visible_devices))
        lines.append(_clip(f"{h.node_rank:<9d}  {h.host:<20.20s}  {_clip(cvd, 21):<21s}  {span}"))
    if len(hosts) > len(shown):
        more = len(hosts) - len(shown) - 1
        if more:
            lines.append(f"...        {more} more hosts (node ranks {len(shown)}..{len(hosts) - 2})")
        h = hosts[-1]
        cvd = ",".join(map(str, h.cuda_visible_devices))
        lines.append(_clip(f"{h.node_rank:<9d}  {h.host:<20.20s}  {_clip(cvd, 21):<21s}  {_range_text(h.global_ranks)}"))
    lines.append("")
    lines.extend(cost_table(result.cost, result.traffic, baseline=result.baseline.cost))
    gap = (f" (gap {100 * (result.cost.total_seconds / result.bound_seconds - 1):.1f}%)"
           if result.bound_seconds > 0 else "")
    lines.append(_clip(
        f"improvement {100 * result.improvement:.1f}% over the baseline ("
        + ("default order" if result.baseline.order == "tp-cp-ep-dp-pp" else
           f"order {result.baseline.order}") + ", "
        f"{_launch_order_text(launch_order)}, GPUs by index);  lower bound "
        f"{_fmt_s(result.bound_seconds)}{gap}"))
    if tuple(result.orders_searched) == ("tp-cp-ep-dp-pp",) and cfg.pp > 1 and cfg.dp > 1:
        from rankmap.solver.megatron.orders import candidate_orders

        if len(candidate_orders(cfg, "megatron-cli")) > 1:
            lines.append("only the default order was searched: --orders megatron-cli also tries tp-cp-ep-pp-dp")
            lines.append("(Megatron-LM --use-tp-pp-dp-mapping), --orders all every order Megatron accepts")
        else:  # Megatron refuses the other stock order for these sizes (rankmap groups --order says why)
            lines.append("tp-cp-ep-pp-dp (--use-tp-pp-dp-mapping) is not valid for these sizes: "
                         "`rankmap groups --order tp-cp-ep-pp-dp` says why")
    lines.extend(measured_lines(getattr(result, "measured_links", ())))
    lines.append("")
    lines.extend(_recipe(result, launcher, written or {}))
    lines.append("")
    placement = {}
    for h in hosts:
        for lr, r in enumerate(h.global_ranks):
            placement[r - cfg.rank_offset] = (h.host, h.cuda_visible_devices[lr])
    lines.extend(_groups_summary(cfg, placement))
    return "\n".join(_clip(line) for line in lines)
