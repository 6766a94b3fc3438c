"""Time rankmap's full Megatron group catalogue against megatron-core's RankGenerator.

    python benchmarks/bench_catalogue.py [--worlds 1024,16384,131072] [--repeats 5]

rankmap column: ``parallel_config`` (validation, including the dense/expert
pipeline-group check) + ``megatron_groups`` (every family, numpy arrays).
megatron column: megatron-core's pure-Python ``RankGenerator.get_ranks`` for the
same families (decoder ``dp-cp dp cp tp-pp tp pp tp-dp-cp tp-dp tp-cp``, expert
``ep tp tp-ep tp-ep-pp dp``), as ``initialize_model_parallel`` computes them,
without creating process groups.  The "+tolist" column adds converting every
rankmap array to nested Python lists (what megatron returns), for fairness.
megatron-core is optional; without it its column is skipped.

Output: a Markdown table of median seconds and the speed-up, then the whole-process
start-up figure: ``rankmap groups --world-size 8`` against ``python -c "import numpy"``
(the floor any numpy program pays), median of ``--process-repeats`` runs each,
interleaved so a loaded machine slows both alike.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
import warnings

from rankmap.solver import megatron_groups, parallel_config

DECODER_TOKENS = ("dp-cp", "dp", "cp", "tp-pp", "tp", "pp", "tp-dp-cp", "tp-dp", "tp-cp")
EXPERT_TOKENS = ("ep", "tp", "tp-ep", "tp-ep-pp", "dp")


def _load_megatron():
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from megatron.core.parallel_state import RankGenerator
    except Exception:  # ImportError, or torch missing underneath
        return None
    return RankGenerator


def _median_time(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--worlds", default="1024,16384,131072", help="comma-separated world sizes")
    ap.add_argument("--tp", type=int, default=8)
    ap.add_argument("--pp", type=int, default=8)
    ap.add_argument("--cp", type=int, default=2)
    ap.add_argument("--ep", type=int, default=8)
    ap.add_argument("--etp", type=int, default=None, help="default: tp")
    ap.add_argument("--order", default="tp-cp-ep-dp-pp")
    ap.add_argument("--repeats", type=int, default=5, help="rankmap repeats (median)")
    ap.add_argument("--megatron-repeats", type=int, default=3, help="megatron repeats (median)")
    ap.add_argument("--no-megatron", action="store_true", help="skip megatron-core even if installed")
    ap.add_argument("--process-repeats", type=int, default=15,
                    help="whole-process runs of rankmap groups and of import numpy (median; 0 skips)")
    args = ap.parse_args(argv)

    RankGenerator = None if args.no_megatron else _load_megatron()
    worlds = [int(w) for w in args.worlds.split(",") if w.strip()]
    etp = args.tp if args.etp is None else args.etp

    header = ["world", "families", "rankmap s", "rankmap+tolist s"]
    if RankGenerator is not None:
        header += ["megatron s", "speed-up", "speed-up (+tolist)"]
    rows = []
    for world in worlds:
        kw = dict(tp=args.tp, pp=args.pp, cp=args.cp, ep=args.ep, etp=args.etp, order=args.order)

        def run_rankmap():
            return megatron_groups(parallel_config(world, **kw))

        def run_rankmap_lists():
            return {k: v.tolist() for k, v in run_rankmap().items()}

        families = len(run_rankmap())
        t_rm = _median_time(run_rankmap, args.repeats)
        t_rl = _median_time(run_rankmap_lists, args.repeats)
        row = [f"{world:,}", str(families), f"{t_rm:.4f}", f"{t_rl:.4f}"]

        if RankGenerator is not None:
            dp = world // (args.tp * args.cp * args.pp)
            edp = world // (etp * args.ep * args.pp)

            def run_megatron():
                dec = RankGenerator(tp=args.tp, ep=1, dp=dp, pp=args.pp, cp=args.cp, order=args.order)
                exp = RankGenerator(tp=etp, ep=args.ep, dp=edp, pp=args.pp, cp=1, order=args.order)
                out = [dec.get_ranks(t) for t in DECODER_TOKENS]
                out += [exp.get_ranks(t) for t in EXPERT_TOKENS]
                return out

            # same groups (sanity): megatron's lists equal rankmap's arrays
            ref = run_rankmap()
            got = run_megatron()
            assert got[DECODER_TOKENS.index("tp")] == ref["TENSOR_MODEL_PARALLEL_GROUP"].tolist()
            assert got[len(DECODER_TOKENS) + EXPERT_TOKENS.index("dp")] == ref["EXPERT_DATA_PARALLEL_GROUP"].tolist()
            t_mg = _median_time(run_megatron, args.megatron_repeats)
            row += [f"{t_mg:.3f}", f"{t_mg / t_rm:,.0f}x", f"{t_mg / t_rl:,.1f}x"]
        rows.append(row)
        print(f"# done world {world:,}", file=sys.stderr, flush=True)

    etp_txt = f"{etp}" + (" (= tp)" if args.etp is None else "")
    print(f"tp {args.tp}, pp {args.pp}, cp {args.cp}, ep {args.ep}, etp {etp_txt}, order {args.order}; "
          f"median of {args.repeats} (rankmap) / {args.megatron_repeats} (megatron) runs\n")
    print("| " + " | ".join(header) + " |")
    print("|" + "|".join("---:" for _ in header) + "|")
    for row in rows:
        print("| " + " | ".join(row) + " |")
    if RankGenerator is None:
        print("\n(megatron-core not installed: its column is skipped)")
    if args.process_repeats > 0:
        _process_startup(args.process_repeats)
    return 0


def _process_startup(repeats: int) -> None:
    """Whole-process wall time of ``rankmap groups --world-size 8`` vs ``import numpy`` (medians)."""
    cmds = {
        "python -c 'import numpy'": [sys.executable, "-c", "import numpy"],
        "rankmap groups --world-size 8": [sys.executable, "-m", "rankmap", "groups", "--world-size", "8"],
        "rankmap groups --world-size 131072 --tp 8 --pp 8 --cp 2 --ep 8 --compact":
            [sys.executable, "-m", "rankmap", "groups", "--world-size", "131072", "--tp", "8", "--pp", "8",
             "--cp", "2", "--ep", "8", "--compact"],
    }
    times: dict[str, list[float]] = {k: [] for k in cmds}
    for _ in range(repeats):
        for name, cmd in cmds.items():
            t0 = time.perf_counter()
            subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
            times[name].append(time.perf_counter() - t0)
    base = statistics.median(times["python -c 'import numpy'"])
    print(f"\nwhole process, median of {repeats} interleaved runs\n")
    print("| command | median s | ratio to import numpy |")
    print("|---|---:|---:|")
    for name, ts in times.items():
        med = statistics.median(ts)
        print(f"| `{name}` | {med:.3f} | {med / base:.2f}x |")


if __name__ == "__main__":
    sys.exit(main())
