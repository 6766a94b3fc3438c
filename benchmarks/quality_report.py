"""The quality benchmark's report: tables, summaries, loss records and the plot."""

from __future__ import annotations

import math
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from quality_instances import ROOT
from quality_peers import PEERS, REL_TOL, SIM_REL_TOL, Outcome

def ratio(peer: dict | None, ref: float) -> float | None:
    if peer is None:
        return None
    if ref <= 0:
        return 1.0 if peer["cost"] <= 0 else math.inf
    return peer["cost"] / ref


def is_loss(peer_cost: float, rm_cost: float) -> bool:
    return peer_cost < rm_cost * (1 - REL_TOL) - 1e-30


def fmt_ratio(r: float | None, tol: float = REL_TOL) -> str:
    if r is None:
        return "—"
    s = f"{r:.3f}" if r < 100 else f"{r:.0f}"
    if r < 1 - tol:
        s = f"**{r:.4f}** ⚠"
    return s


def fmt_s(x: float) -> str:
    if x >= 1:
        return f"{x:.3f}"
    if x >= 1e-3:
        return f"{x * 1e3:.2f} ms"
    return f"{x * 1e6:.1f} µs"


def gap_of(x: dict) -> float:
    """(cost − bound) / cost of one rankmap solve (the MIP convention: 0 = proved optimal)."""
    return (x["cost"] - x["bound"]) / x["cost"] if x["cost"] > 0 else 0.0


def gap_and_record(outs: list[Outcome], max_w: int = 2048, time_limit: float = 6.0) -> str:
    """Wins / ties / losses per rankmap mode against every peer of the mode, the gap distribution, time limits."""
    lines = ["| rankmap mode | instances | wins | ties | losses | free ≤ launcher | within time limit | "
             f"gap median (W ≤ {max_w}) | gap max (W ≤ {max_w}) | gap > 25% | OPTIMAL |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for mode in ("launcher", "free"):
        wins = ties = losses = n = fl = inlim = opt = 0
        gaps = []
        for o in outs:
            x = o.rm.get(mode)
            if not x:
                continue
            n += 1
            peers = [o.peers[p]["cost"] for p, m in PEERS if m == mode and p in o.peers]
            best = min(peers) if peers else math.inf
            if is_loss(best, x["cost"]):
                losses += 1
            elif x["cost"] < best * (1 - REL_TOL):
                wins += 1
            else:
                ties += 1
            L, F = o.rm.get("launcher"), o.rm.get("free")
            fl += bool(L and F and not is_loss(L["cost"], F["cost"]))
            inlim += x["solve_s"] <= time_limit
            opt += x["status"] == "OPTIMAL"
            if o.W <= max_w:
                gaps.append(gap_of(x))
        med = statistics.median(gaps) if gaps else float("nan")
        mx = max(gaps) if gaps else float("nan")
        big = sum(g > 0.25 for g in gaps)
        lines.append(f"| {mode} | {n} | {wins} | {ties} | {losses} | {fl} / {n} | {inlim} / {n} | {100 * med:.1f}% | "
                     f"{100 * mx:.1f}% | {big} / {len(gaps)} | {opt} |")
    return "\n".join(lines)


def quality_table(outs: list[Outcome]) -> str:
    lp = [p for p, m in PEERS if m == "launcher"]
    fp = [p for p, m in PEERS if m == "free"]
    head = ("| # | instance | W | rankmap launcher | " + " | ".join(f"{p} / rm" for p in lp) + " | rankmap free | "
            + " | ".join(f"{p} / rm" for p in fp) + " | gap to bound (L / F) | status (L / F) | solve s (L / F) |")
    lines = [head, "|---:|---|---:|---:|" + "---:|" * (len(lp) + 1 + len(fp)) + "---:|---|---:|"]
    err = {"cost": float("nan"), "bound": float("nan"), "status": "ERROR", "solve_s": float("nan")}
    for i, o in enumerate(outs, 1):
        L, F = o.rm["launcher"] or err, o.rm["free"] or err
        cells = [str(i), f"`{o.inst.name}`", str(o.W), fmt_s(L["cost"]) if o.rm["launcher"] else "**ERROR**"]
        for p, mode in PEERS:
            if p == fp[0]:
                cells.append(fmt_s(F["cost"]) if o.rm["free"] else "**ERROR**")
            cells.append(fmt_ratio(ratio(o.peers.get(p), o.rm[mode]["cost"])) if o.rm[mode] else "—")

        def gap(x):
            return "—" if x is err else f"{100 * gap_of(x):.1f}%"

        def st(x):
            return "ERR" if x is err else x["status"][:3]

        def sec(x):
            return "—" if x is err else f"{x['solve_s']:.2f}"

        cells += [f"{gap(L)} / {gap(F)}", f"{st(L)} / {st(F)}", f"{sec(L)} / {sec(F)}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def summary(outs: list[Outcome]) -> tuple[str, list[dict], list[str]]:
    lines = ["| peer | compared with | instances | rankmap ≤ peer | peer < rankmap (losses) | "
             "median ratio | geo-mean ratio | max ratio |",
             "|---|---|---:|---:|---:|---:|---:|---:|"]
    losses = []
    for p, mode in PEERS:
        rs, n, wins = [], 0, 0
        for o in outs:
            peer = o.peers.get(p)
            if peer is None or o.rm[mode] is None:
                continue
            n += 1
            rm = o.rm[mode]
            if not is_loss(peer["cost"], rm["cost"]):
                wins += 1
            else:
                losses.append(loss_record(o, p, mode))
            r = ratio(peer, rm["cost"])
            if r is not None and math.isfinite(r) and r > 0:
                rs.append(r)
        med = statistics.median(rs) if rs else float("nan")
        geo = math.exp(sum(math.log(r) for r in rs) / len(rs)) if rs else float("nan")
        mx = max(rs) if rs else float("nan")
        lines.append(f"| {p} | rankmap {mode} | {n} | {wins} / {n} | {n - wins} | {med:.3f} | {geo:.3f} | {mx:.3f} |")
    # a free peer whose layout happens to be launchable also competes with rankmap launcher
    extra = 0
    for o in outs:
        if o.rm["launcher"] is None:
            continue
        for p, mode in PEERS:
            peer = o.peers.get(p)
            if mode == "free" and peer and peer["launcher_layout"] and is_loss(peer["cost"], o.rm["launcher"]["cost"]):
                losses.append(loss_record(o, p, "launcher"))
                extra += 1
    lines.append(f"\nFree-mode peer layouts that are launcher-compatible (blocks of G consecutive ranks per host) "
                 f"and cheaper than rankmap launcher: {extra} (listed as losses in mode launcher).")
    # sanity checks
    notes = []
    for o in outs:
        for e in o.errors:
            notes.append(f"`{o.inst.name}`: rankmap mode {e['mode']} raised {e['error']}")
        L, F = o.rm["launcher"], o.rm["free"]
        if L is None or F is None:
            continue
        for m, x in o.rm.items():
            if abs(x["cost"] - x["exact"]) > 1e-9 * max(x["cost"], 1e-30):
                notes.append(f"`{o.inst.name}`: rankmap {m} reports cost {x['cost']!r} but layout_cost gives "
                             f"{x['exact']!r}")
        if is_loss(L["cost"], F["cost"]):
            notes.append(f"`{o.inst.name}`: rankmap free ({F['cost']:.6g} s) is worse than rankmap launcher "
                         f"({L['cost']:.6g} s), although free mode's search space contains every launcher layout")
        costs = [("rankmap launcher", L["cost"]), ("rankmap free", F["cost"])] + \
                [(p, x["cost"]) for p, x in o.peers.items()]
        for who, c in costs:
            if c < o.bound * (1 - REL_TOL):
                notes.append(f"`{o.inst.name}`: {who} cost {c!r} is below the lower bound {o.bound!r}")
        for m, x in o.rm.items():
            if x["status"] == "OPTIMAL" and o.W > 8 and x["cost"] > x["bound"] * (1 + 1e-6) + 1e-30:
                notes.append(f"`{o.inst.name}`: rankmap {m} says OPTIMAL with cost {x['cost']!r} above its bound "
                             f"{x['bound']!r} (beyond 8 GPUs OPTIMAL needs the cost to meet the bound)")
            if x["bound"] > x["cost"] * (1 + 1e-9) + 1e-30:
                notes.append(f"`{o.inst.name}`: rankmap {m}'s bound {x['bound']!r} exceeds its cost {x['cost']!r}")
            if x["status"] == "OPTIMAL" and any(is_loss(o.peers[p]["cost"], x["cost"])
                                                for p, mm in PEERS if mm == m and p in o.peers):
                notes.append(f"`{o.inst.name}`: rankmap {m} says OPTIMAL but a peer is cheaper")
    return "\n".join(lines), losses, notes


def sim_table(outs: list[Outcome]) -> str:
    """Per instance: simulated times of rankmap's and the best peer's layouts (both modes)."""
    lines = ["| # | instance | W | rankmap launcher sim | best launcher peer | peer / rm (sim) | peer / rm (pred) | "
             "rankmap free sim | best free peer | peer / rm (sim) | peer / rm (pred) | max abs(pred / sim − 1) |",
             "|---:|---|---:|---:|---|---:|---:|---:|---|---:|---:|---:|"]
    for i, o in enumerate(outs, 1):
        cells = [str(i), f"`{o.inst.name}`", str(o.W)]
        errs = []
        for mode in ("launcher", "free"):
            x = o.sim.get(mode) or {}
            if "skipped" in x or "rankmap" not in x or "peer_sim" not in x:
                cells += ["—", f"({x.get('skipped', 'not simulated')})", "—", "—"]
                continue
            rm, pe = x["rankmap"], x["peer_sim"]
            cells += [fmt_s(rm["simulated"]), x["peer"], fmt_ratio(sim_ratio(pe["simulated"], rm["simulated"]), SIM_REL_TOL),
                      fmt_ratio(sim_ratio(pe["predicted"], rm["predicted"]))]
            errs += [rel_err(rm), rel_err(pe)]
        cells.append(f"{100 * max(errs):.2f}%" if errs else "—")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def rel_err(x: dict) -> float:
    """abs(predicted / simulated − 1) of one simulated layout (0 when both are 0)."""
    if x["simulated"] <= 0:
        return 0.0 if x["predicted"] <= 0 else math.inf
    return abs(x["predicted"] / x["simulated"] - 1.0)


def sim_ratio(peer: float, rm: float) -> float:
    if rm <= 0:
        return 1.0 if peer <= 0 else math.inf
    return peer / rm


def sim_summary(outs: list[Outcome]) -> tuple[str, list[dict]]:
    """Per mode: how rankmap fares against the best peer under simulation; model-vs-simulation error."""
    lines = ["| rankmap mode | vs best peer of | instances simulated | rankmap ≤ peer (simulated) | "
             "peer < rankmap (simulated) | median ratio (sim) | geo-mean ratio (sim) | min ratio (sim) | "
             "predicted and simulated winner agree |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    losses, errs = [], []
    for mode in ("launcher", "free"):
        peers = ", ".join(name for name, m in PEERS if m == mode)
        rs, n, wins, agree = [], 0, 0, 0
        for o in outs:
            x = o.sim.get(mode) or {}
            if "skipped" in x or "rankmap" not in x or "peer_sim" not in x:
                continue
            rm, pe = x["rankmap"], x["peer_sim"]
            errs += [(rel_err(rm), o.inst.name, mode, "rankmap"), (rel_err(pe), o.inst.name, mode, x["peer"])]
            n += 1
            sim_loss = pe["simulated"] < rm["simulated"] * (1 - SIM_REL_TOL)
            pred_loss = is_loss(pe["predicted"], rm["predicted"])
            wins += not sim_loss
            agree += sim_loss == pred_loss
            if sim_loss:
                losses.append(dict(instance=o.inst.name, mode=mode, peer=x["peer"],
                                   peer_simulated=pe["simulated"], rankmap_simulated=rm["simulated"],
                                   peer_predicted=pe["predicted"], rankmap_predicted=rm["predicted"]))
            r = sim_ratio(pe["simulated"], rm["simulated"])
            if math.isfinite(r) and r > 0:
                rs.append(r)
        med = statistics.median(rs) if rs else float("nan")
        geo = math.exp(sum(math.log(r) for r in rs) / len(rs)) if rs else float("nan")
        mn = min(rs) if rs else float("nan")
        lines.append(f"| {mode} | {peers} | {n} | {wins} / {n} | {n - wins} | {med:.3f} | {geo:.3f} | {mn:.4f} | "
                     f"{agree} / {n} |")
    skipped = sorted({f"`{o.inst.name}` ({o.sim[m]['skipped']})" for o in outs for m in ("launcher", "free")
                      if "skipped" in (o.sim.get(m) or {})})
    text = "\n".join(lines)
    if errs:
        e = sorted(errs, reverse=True)
        within = sum(x[0] <= 0.25 for x in errs)
        exact = sum(x[0] <= 1e-6 for x in errs)
        text += (f"\n\nModel against simulation, {len(errs)} simulated layouts (rankmap's and the best peer's, "
                 f"both modes; predicted = `layout_cost` total): median abs(predicted / simulated − 1) "
                 f"{100 * statistics.median(x[0] for x in errs):.3g}%, {exact} within 1e-6, {within} within "
                 f"25% (DESIGN §4's tolerance); largest: "
                 + "; ".join(f"{100 * v:.2f}% (`{name}`, {m}, {who})" for v, name, m, who in e[:3]) + ".")
    if skipped:
        text += "\n\nNot simulated: " + ", ".join(skipped) + "."
    return text, losses


def loss_record(o: Outcome, peer: str, mode: str) -> dict:
    p, rm = o.peers[peer], o.rm[mode]
    return {
        "instance": o.inst.name,
        "cluster": o.inst.spec.name,
        "cluster_recipe": o.inst.spec.recipe,
        "world_size": o.W,
        "sizes": o.cfg_sizes,
        "parallel_config_kwargs": o.inst.sizes,
        "traffic_mix": o.inst.mix,
        "traffic": o.traffic,
        "mode": mode,
        "peer": peer,
        "peer_cost_seconds": p["cost"],
        "rankmap_cost_seconds": rm["cost"],
        "ratio_peer_over_rankmap": p["cost"] / rm["cost"] if rm["cost"] else None,
        "rankmap_status": rm["status"],
        "rankmap_bound_seconds": rm["bound"],
        "rankmap_order": rm["order"],
        "rankmap_device_of_rank": rm["dev"],
        "peer_order": p["order"],
        "peer_device_of_rank": p["dev"],
        "peer_layout_is_launcher_compatible": p["launcher_layout"],
        "peer_beats_rankmap_launcher_too": bool(o.rm["launcher"] and is_loss(p["cost"], o.rm["launcher"]["cost"])),
        "rankmap_launcher_cost_seconds": o.rm["launcher"]["cost"] if o.rm["launcher"] else None,
        "cluster_devices": o.devices,
        "peer_note": p.get("note", ""),
        "replay": f"python benchmarks/bench_quality.py --instance '{o.inst.name}'",
    }


def run_sub(args: list[str]) -> tuple[str, float]:
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=ROOT)
    if p.returncode:
        return f"(failed, exit {p.returncode})\n\n```\n{p.stderr[-2000:]}\n```", time.perf_counter() - t0
    lines = [ln for ln in p.stdout.splitlines() if not ln.startswith("# done")]
    return "\n".join(lines).strip(), time.perf_counter() - t0


def parse_solve_table(text: str) -> list[tuple[int, float, float]]:
    """(GPUs, solve s, peak RSS MiB) rows of bench_solve's table."""
    rows = []
    for ln in text.splitlines():
        m = re.match(r"\|\s*([\d,]+)\s*\|\s*([\d.]+)\s*\|\s*([\d.]+)\s*\|\s*([\d.]+)\s*\|\s*([\d.]+)\s*\|", ln)
        if m:
            rows.append((int(m.group(1).replace(",", "")), float(m.group(4)), float(m.group(5))))
    return rows


def _log_axes(ax, xlabel: str, ylabel: str, title: str, legend_columns: int) -> None:
    """Log y scale, labels, title, the legend below the plot and a grid: the report's figure style."""
    ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=legend_columns, frameon=False)
    ax.grid(True, which="both", alpha=0.3)


def plot(outs: list[Outcome], solve_rows, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(15, 6.2), gridspec_kw=dict(width_ratios=[2.2, 1]))
    x = np.arange(1, len(outs) + 1)
    markers = {"Megatron": "o", "greedy": "s", "random": "x", "QAP faq": "^", "QAP 2opt": "v",
               "METIS tree": "D", "METIS tree free": "d", "Scotch": "P", "Scotch free": "p"}
    for p, mode in PEERS:
        xs, ys = [], []
        for i, o in zip(x, outs):
            r = ratio(o.peers.get(p), o.rm[mode]["cost"]) if o.rm[mode] else None
            if r is not None and math.isfinite(r) and r > 0:
                xs.append(i)
                ys.append(r)
        ax1.scatter(xs, ys, marker=markers.get(p, "."), s=22, label=f"{p} / rankmap {mode}", alpha=0.8)
    for mode, mk, col in (("launcher", "_", "k"), ("free", "|", "0.35")):
        xs, ys = [], []
        for i, o in zip(x, outs):
            s = o.sim.get(mode) or {}
            if "rankmap" in s and "peer_sim" in s:
                r = sim_ratio(s["peer_sim"]["simulated"], s["rankmap"]["simulated"])
                if math.isfinite(r) and r > 0:
                    xs.append(i)
                    ys.append(r)
        if xs:
            ax1.scatter(xs, ys, marker=mk, s=90, color=col, linewidths=1.4,
                        label=f"best {mode} peer / rankmap {mode}, SimGrid")
    ax1.axhline(1.0, color="k", lw=0.8)
    _log_axes(ax1, "instance # (see table)", "peer time / rankmap time  (> 1: rankmap better)",
              "Predicted communication time per step relative to rankmap (layout_cost; bars: simulated)", 4)
    for mode, mk in (("launcher", "o"), ("free", "s")):
        ok = [o for o in outs if o.rm[mode]]
        ax2.scatter([o.W for o in ok], [o.rm[mode]["solve_s"] for o in ok], marker=mk, s=20, alpha=0.6,
                    label=f"suite, mode {mode}")
    if solve_rows:
        ax2.plot([r[0] for r in solve_rows], [r[1] for r in solve_rows], "k-D", label="bench_solve.py (launcher)")
        for W, s, rss in solve_rows:
            ax2.annotate(f"{rss:.0f} MiB", (W, s), textcoords="offset points", xytext=(-30, 8), fontsize=8)
    ax2.set_xscale("log")
    _log_axes(ax2, "GPUs", "rankmap solve seconds (orders=all)", "Solve time vs cluster size", 2)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


