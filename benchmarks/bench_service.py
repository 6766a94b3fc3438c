"""Load test of the gRPC service: N concurrent clients for a bounded time.

Starts ``rankmap serve`` in a subprocess on a free loopback port (or uses
``--server HOST:PORT``), then runs ``--clients`` threads, each with its own
:class:`rankmap.client.RankmapClient` (own channel), sending requests back to
back for ``--duration`` seconds.  Prints requests per second, latency
percentiles and failures by status code.

    python benchmarks/bench_service.py                      # 50 clients, 20 s, Solve on 16 GPUs
    python benchmarks/bench_service.py --duration 5 --gpus 64 --method evaluate
    python benchmarks/bench_service.py --server 10.0.0.5:50051 --clients 200 --json
    python benchmarks/bench_service.py --soak-seconds 600     # soak: mixed requests, server RSS before/after

Soak mode (``--soak-seconds S``): ``--clients`` threads (default 8 there) send a
mix for S seconds: Solve, Evaluate, GetGroups (small and 65,536 ranks),
BatchSolve of 4, requests with bad input (INVALID_ARGUMENT), requests with a
deadline too short to finish (DEADLINE_EXCEEDED), undecodable bytes.  It
prints the count and latency per kind, status codes, and the server's RSS after
a warm-up, its peak and at the end (a leak shows as an end RSS that keeps
growing with S); exit 1 on an unexpected status code (INTERNAL, UNKNOWN, ...).

Scale mode (``--scale``, the default from ``--gpus 65536`` up; issue 28.1): a server with one
worker, one Solve at a time on ``--gpus`` GPUs (default 131,072: hosts of 8, tp8 pp8), idle and
under load (``--load`` CPU-burning processes, default the CPU count): an 8 s deadline on a 30 s
limit (the answer or DEADLINE_EXCEEDED, and when the worker is free again: a tiny GetGroups sent at
the deadline waits for it), and a 30 s limit without deadline; ``--runs N`` repeats the 8 s case N times (the
30 s one N/3) and prints medians.  Prints per case the status, the
wall time and its overrun (against the deadline or the limit) and the server's peak RSS.

    python benchmarks/bench_service.py --gpus 131072             # scale mode
    python benchmarks/bench_service.py --gpus 131072 --load 0    # idle only

Clusters: hosts of ``--gpus-per-host`` GPUs on an NVSwitch (450 GB/s), 50 GB/s
NICs to leaves of 4 hosts, 25 GB/s to one spine.  Solve: tp=2, pp=2, the
default order policy and a 5 s (deterministic) time limit.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections import Counter


def make_cluster(gpus: int, gpus_per_host: int):
    """Hosts of ``gpus_per_host`` GPUs on an NVSwitch, leaves of 4 hosts, one spine."""
    import networkx as nx

    g = nx.Graph()
    hosts = max(1, gpus // gpus_per_host)
    g.add_node("spine", kind="spine")
    for h in range(hosts):
        sw = f"h{h}-nvs"
        g.add_node(sw, kind="nvswitch")
        leaf = f"leaf{h // 4}"
        g.add_node(leaf, kind="leaf")
        for i in range(gpus_per_host):
            node = f"h{h}g{i}"
            g.add_node(node, host=f"h{h}", local_index=i)
            g.add_edge(node, sw, bandwidth=450.0)
        g.add_edge(sw, leaf, bandwidth=50.0)
        g.add_edge(leaf, "spine", bandwidth=25.0)
    return g


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(workers: int | None, max_queued: int, log: list | None = None) -> tuple[subprocess.Popen, str]:
    """``rankmap serve`` in a subprocess on a free loopback port: (process, address).

    With ``log`` (a list), the server logs every request and a thread appends its JSON lines
    (dicts) to ``log``; else it runs ``--quiet``."""
    port = _free_port()
    cmd = [sys.executable, "-m", "rankmap", "serve", "--port", str(port), "--max-queued", str(max_queued),
           "--drain-delay", "0"] + ([] if log is not None else ["--quiet"])
    if workers:
        cmd += ["--workers", str(workers)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if log is not None:
        def read() -> None:  # drains the pipe (a full pipe would block the server)
            for line in proc.stderr:
                try:
                    log.append(json.loads(line))
                except ValueError:
                    pass

        threading.Thread(target=read, daemon=True).start()
    return proc, f"127.0.0.1:{port}"


def wait_ready(address: str, timeout: float = 60.0) -> None:
    """Block until the server at ``address`` reports SERVING."""
    from rankmap.client import RankmapClient

    with RankmapClient(address, timeout=timeout, retries=100, backoff_initial=0.05, backoff_max=0.5) as c:
        status = c.health()
    if status != "SERVING":
        raise SystemExit(f"server at {address} is {status}")


def percentile(sorted_values: list[float], q: float) -> float:
    """The ``q`` quantile of sorted values (linear interpolation), NaN when empty."""
    if not sorted_values:
        return float("nan")
    k = (len(sorted_values) - 1) * q
    lo = int(k)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (k - lo)


def run_load(address: str, args) -> dict:
    """``args.clients`` clients sending one kind of request for ``args.duration`` seconds."""
    import grpc

    from rankmap.client import RankmapClient, RankmapRpcError
    from rankmap.solver.errors import RankmapError

    graph = make_cluster(args.gpus, args.gpus_per_host)
    traffic = {"tp": 4e9, "dp": 1e9, "pp": 1e8}
    assignment = [n for n, d in graph.nodes(data=True) if d.get("kind", "gpu") == "gpu"]

    def call(client):
        if args.method == "solve":
            return client.solve(graph, tp=2, pp=2, traffic=traffic, time_limit_seconds=5.0, omit_groups=True,
                                timeout=args.timeout)
        if args.method == "evaluate":
            return client.evaluate(graph, assignment, tp=2, pp=2, traffic=traffic, timeout=args.timeout)
        return client.get_groups(len(assignment), tp=2, pp=2, timeout=args.timeout)

    latencies: list[list[float]] = [[] for _ in range(args.clients)]
    failures: list[Counter] = [Counter() for _ in range(args.clients)]
    start = threading.Barrier(args.clients + 1)
    stop_at = [0.0]

    def worker(i: int) -> None:
        with RankmapClient(address, timeout=args.timeout, retries=0) as client:
            try:
                client.wait_until_ready(30)
            except RankmapRpcError:
                failures[i]["UNAVAILABLE"] += 1
            start.wait()
            while time.monotonic() < stop_at[0]:
                t0 = time.perf_counter()
                try:
                    call(client)
                except RankmapRpcError as exc:
                    failures[i][exc.code.name] += 1
                    continue
                except RankmapError as exc:
                    failures[i][type(exc).__name__] += 1
                    continue
                except grpc.RpcError as exc:  # pragma: no cover - the client maps these
                    failures[i][exc.code().name] += 1
                    continue
                latencies[i].append(time.perf_counter() - t0)

    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(args.clients)]
    stop_at[0] = float("inf")  # until every client is connected and released together
    for t in threads:
        t.start()
    start.wait()
    t_begin = time.monotonic()
    stop_at[0] = t_begin + args.duration
    for t in threads:
        t.join(args.duration + args.timeout + 30)
    elapsed = time.monotonic() - t_begin
    lat = sorted(x for per in latencies for x in per)
    fails = sum((c for c in failures), Counter())
    return {
        "method": args.method,
        "clients": args.clients,
        "gpus": len(assignment),
        "duration_s": elapsed,
        "requests_ok": len(lat),
        "failures": int(sum(fails.values())),
        "failures_by_code": dict(fails),
        "rps": len(lat) / elapsed if elapsed > 0 else 0.0,
        "p50_ms": 1e3 * percentile(lat, 0.50),
        "p90_ms": 1e3 * percentile(lat, 0.90),
        "p99_ms": 1e3 * percentile(lat, 0.99),
        "max_ms": 1e3 * (lat[-1] if lat else float("nan")),
        "mean_ms": 1e3 * (statistics.fmean(lat) if lat else float("nan")),
    }


def rss_mib(pid: int) -> float:
    """Resident set size of process ``pid`` in MiB (Linux /proc), NaN when unknown."""
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return float("nan")


#: Soak request kinds and the status codes each may end with.
SOAK_EXPECTED = {
    "solve": {"OK"},
    "evaluate": {"OK"},
    "groups": {"OK"},
    "groups_64k": {"OK", "DEADLINE_EXCEEDED"},
    "batch": {"OK"},
    "invalid": {"INVALID_ARGUMENT"},
    "deadline": {"DEADLINE_EXCEEDED", "OK"},
    "garbage": {"INVALID_ARGUMENT"},
}


def run_soak(address: str, args, pid: int | None) -> dict:
    """Mixed requests for ``args.soak_seconds``; counts, latencies, codes and server RSS."""
    import random

    import grpc

    from rankmap import wire
    from rankmap.v1 import rankmap_pb2 as pb

    graph = make_cluster(args.gpus, args.gpus_per_host)
    gpus = [n for n, d in graph.nodes(data=True) if d.get("kind", "gpu") == "gpu"]
    traffic = {"tp": 4e9, "dp": 1e9, "pp": 1e8}
    solve = wire.solve_request(graph, tp=2, pp=2, traffic=traffic, time_limit_seconds=2.0, omit_groups=True)
    big = wire.solve_request(make_cluster(256, 8), tp=8, pp=2, traffic=traffic, orders="all",
                                time_limit_seconds=20.0, omit_groups=True)
    requests = {
        "solve": ("Solve", solve, 60.0),
        "evaluate": ("Evaluate", wire.evaluate_request(graph, gpus, tp=2, pp=2, traffic=traffic), 60.0),
        "groups": ("GetGroups", wire.get_groups_request(len(gpus), tp=2, pp=2), 60.0),
        "groups_64k": ("GetGroups", wire.get_groups_request(65536, tp=8, pp=8, cp=2, ep=4, etp=1), 60.0),
        "batch": ("BatchSolve", pb.BatchSolveRequest(requests=[solve] * 4), 120.0),
        "invalid": ("Solve", wire.solve_request(graph, tp=3, traffic=traffic), 60.0),
        "deadline": ("Solve", big, 0.2),
        "garbage": ("Solve", b"\xff\xff\xff\xff\x0f not a request", 60.0),
    }
    weights = {"solve": 4, "evaluate": 4, "groups": 4, "groups_64k": 1, "batch": 1, "invalid": 2, "deadline": 1,
               "garbage": 1}
    kinds = list(weights)
    lock = threading.Lock()
    codes: Counter = Counter()
    unexpected: Counter = Counter()
    latency: dict[str, list[float]] = {k: [] for k in kinds}
    stop_at = time.monotonic() + args.soak_seconds
    channels = [grpc.insecure_channel(address, options=[("grpc.max_receive_message_length", 1 << 30)])
                for _ in range(args.clients)]
    service = "/rankmap.v1.RankmapService/"

    def one(channel, kind: str) -> str:
        method, request, timeout = requests[kind]
        ser = (lambda b: b) if isinstance(request, bytes) else (lambda m: m.SerializeToString())
        try:
            if method == "BatchSolve":
                list(channel.unary_stream(service + method, request_serializer=ser,
                                          response_deserializer=lambda b: b)(request, timeout=timeout))
            else:
                channel.unary_unary(service + method, request_serializer=ser,
                                    response_deserializer=lambda b: b)(request, timeout=timeout)
            return "OK"
        except grpc.RpcError as err:
            return err.code().name

    def worker(i: int) -> None:
        rng = random.Random(i)
        while time.monotonic() < stop_at:
            kind = rng.choices(kinds, [weights[k] for k in kinds])[0]
            t0 = time.perf_counter()
            code = one(channels[i], kind)
            dt = time.perf_counter() - t0
            with lock:
                codes[code] += 1
                latency[kind].append(dt)
                if code not in SOAK_EXPECTED[kind] and code != "RESOURCE_EXHAUSTED":
                    unexpected[f"{kind}:{code}"] += 1

    # warm-up: one of each, then the baseline RSS
    for kind in kinds:
        one(channels[0], kind)
    rss_before = rss_mib(pid) if pid else float("nan")
    peak = [rss_before]
    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(args.clients)]
    t_begin = time.monotonic()
    for t in threads:
        t.start()
    while any(t.is_alive() for t in threads):
        time.sleep(1.0)
        if pid:
            peak[0] = max(peak[0], rss_mib(pid))
    elapsed = time.monotonic() - t_begin
    time.sleep(1.0)  # let the last answers be freed
    rss_after = rss_mib(pid) if pid else float("nan")
    for ch in channels:
        ch.close()
    per_kind = {
        k: {
            "count": len(v),
            "p50_ms": 1e3 * percentile(sorted(v), 0.5),
            "p99_ms": 1e3 * percentile(sorted(v), 0.99),
        }
        for k, v in latency.items()
    }
    return {
        "mode": "soak",
        "clients": args.clients,
        "duration_s": elapsed,
        "requests": int(sum(codes.values())),
        "rps": sum(codes.values()) / elapsed if elapsed > 0 else 0.0,
        "codes": dict(codes),
        "unexpected": dict(unexpected),
        "per_kind": per_kind,
        "rss_mib_after_warmup": rss_before,
        "rss_mib_peak": peak[0],
        "rss_mib_end": rss_after,
    }


def print_soak(stats: dict) -> None:
    """The soak figures for people."""
    print(f"rankmap service soak: {stats['clients']} clients x {stats['duration_s']:.0f} s, "
          f"{stats['requests']} requests ({stats['rps']:.1f}/s), server {stats['server']}")
    print(f"  {'kind':<11} {'count':>7} {'p50 ms':>9} {'p99 ms':>9}")
    for k, v in stats["per_kind"].items():
        print(f"  {k:<11} {v['count']:>7} {v['p50_ms']:>9.1f} {v['p99_ms']:>9.1f}")
    print(f"  status codes     {stats['codes']}")
    print(f"  unexpected       {stats['unexpected'] or 'none'}")
    print(f"  server RSS MiB   after warm-up {stats['rss_mib_after_warmup']:.0f}, peak {stats['rss_mib_peak']:.0f}, "
          f"end {stats['rss_mib_end']:.0f} ({stats['rss_mib_end'] - stats['rss_mib_after_warmup']:+.0f})")


def _burn(stop) -> None:  # pragma: no cover - runs in a child process
    x = 0
    while not stop.is_set():
        for i in range(100_000):
            x += i * i


class _PeakRss:
    """Samples a process's RSS every 50 ms between ``start()`` and ``stop()``: the peak in MiB."""

    def __init__(self, pid: int):
        self.pid, self.peak, self._stop = pid, 0.0, threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, rss_mib(self.pid))
            self._stop.wait(0.05)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


def run_scale(args) -> int:
    """Scale mode (module docstring): deadlines and limits at ``args.gpus`` GPUs, idle and under load."""
    import multiprocessing

    import grpc

    from rankmap import wire
    from rankmap.v1 import rankmap_pb2 as pb
    from rankmap.v1 import rankmap_pb2_grpc

    hosts = args.gpus // 8
    cluster = pb.Cluster()  # built as a message directly (a networkx graph of 131,072 GPUs takes long)
    cluster.nodes.add(id="spine", kind="switch")
    for h in range(hosts):
        leaf = f"leaf{h // 32}"
        if h % 32 == 0:
            cluster.nodes.add(id=leaf, kind="switch")
            cluster.links.add(source=leaf, target="spine", bandwidth_gbps=800.0)
        sw = f"h{h}/nvs"
        cluster.nodes.add(id=sw, kind="nvswitch")
        cluster.links.add(source=sw, target=leaf, bandwidth_gbps=50.0)
        for i in range(8):
            cluster.devices.add(id=f"h{h}/g{i}", host=f"h{h}", local_index=i)
            cluster.links.add(source=f"h{h}/g{i}", target=sw, bandwidth_gbps=450.0)
    big = pb.SolveRequest(cluster=cluster, time_limit_seconds=30.0, omit_groups=False)
    big.sizes.tp, big.sizes.pp = 8, 8
    tiny = wire.solve_request(make_cluster(8, 4), tp=2, traffic={"tp": 1e9}, time_limit_seconds=1.0)
    probe = pb.GetGroupsRequest()  # answered in milliseconds once the one worker is free
    probe.sizes.world_size, probe.sizes.tp = 8, 2
    print(f"rankmap service at scale: {args.gpus:,} GPUs (tp8 pp8), request {big.ByteSize() / 1e6:.1f} MB, "
          f"one worker, load: {args.load} CPU-burning processes")
    print("| case | load (1-min load average) | status | wall s | overrun s | worker free at s | server peak RSS MiB |")
    print("|---|---|---|---:|---:|---:|---:|")
    log: list = []
    proc, address = start_server(1, 4, log)
    worst = float("-inf")
    rows: dict = {}
    stages: dict = {}  # (case, load) -> the big Solves' stage ends (the server's log line)
    try:
        wait_ready(address)
        channel = grpc.insecure_channel(address, options=[("grpc.max_send_message_length", 256 << 20),
                                                          ("grpc.max_receive_message_length", 256 << 20)])
        stub = rankmap_pb2_grpc.RankmapServiceStub(channel)
        stub.Solve(tiny, timeout=60)  # warm-up: the server imports the solver
        for load in ([0, args.load] if args.load else [0]):
            stop = multiprocessing.Event()
            burners = [multiprocessing.Process(target=_burn, args=(stop,), daemon=True) for _ in range(load)]
            for b in burners:
                b.start()
            try:
                cases = [("8 s deadline, 30 s limit", 8.0, 8.0)] * args.runs + [("30 s limit", 120.0, 30.0)] * max(
                    1, args.runs // 3)
                for case, deadline, target in cases:
                    with _PeakRss(proc.pid) as peak:
                        t0 = time.monotonic()
                        fut = stub.Solve.future(big, timeout=deadline)
                        try:
                            res = fut.result()
                            status = f"{pb.Status.Name(res.status)} {res.stopped_by or ''}".strip()
                        except grpc.RpcError as exc:
                            status = exc.code().name
                        wall = time.monotonic() - t0
                        stub.GetGroups(probe, timeout=120)  # queued behind the big solve until its worker is free
                        free = time.monotonic() - t0
                    rows.setdefault((case, load), []).append((wall, free))
                    time.sleep(0.2)  # the log line of the big Solve
                    big_lines = [e for e in log if e.get("method") == "Solve" and e.get("gpus") == args.gpus]
                    if big_lines:
                        stages.setdefault((case, load), []).append(
                            {**big_lines[-1].get("stages", {}), "end": big_lines[-1]["seconds"]})
                    over = wall - target
                    worst = max(worst, over)
                    print(f"| {case} | {f'+{load} burners' if load else 'as is'} (load {os.getloadavg()[0]:.1f}) | {status} | {wall:.2f} | {over:+.2f} | "
                          f"{free:.2f} | {peak.peak:.0f} |", flush=True)
            finally:
                stop.set()
                for b in burners:
                    b.join(10)
        channel.close()
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    names = ("queued", "request", "cluster_model", "baseline_bound", "solve", "encode", "end")
    print("\nserver side, median seconds since the call's start at which each stage ended (n runs that reached it):")
    print("| case | " + " | ".join(names) + " |")
    print("|---|" + "---:|" * len(names))
    for (case, load), got in stages.items():
        cells = []
        for nm in names:
            v = [g[nm] for g in got if nm in g]
            cells.append(f"{statistics.median(v):.2f} ({len(v)})" if v else "-")
        print(f"| {case}, {'+' + str(load) + ' burners' if load else 'as is'} | " + " | ".join(cells) + " |")
    for (case, load), got in rows.items():
        walls, frees = [w for w, _ in got], [f for _, f in got]
        print(f"{case}, {'+' + str(load) + ' burners' if load else 'as is'}: {len(got)} runs, wall median "
              f"{statistics.median(walls):.2f} s (max {max(walls):.2f}), worker free median "
              f"{statistics.median(frees):.2f} s (max {max(frees):.2f})")
    print(f"worst overrun {worst:+.2f} s (targets: the 8 s deadline's worker free by 9 s, the 30 s limit by 31.5 s)")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Run the load test (or the soak with ``--soak-seconds``) and print the figures."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", type=int, default=50, help="concurrent clients (default 50)")
    ap.add_argument("--duration", type=float, default=20.0, help="seconds of load (default 20)")
    ap.add_argument("--method", choices=("solve", "evaluate", "groups"), default="solve")
    ap.add_argument("--gpus", type=int, default=16, help="GPUs in the cluster (default 16)")
    ap.add_argument("--gpus-per-host", type=int, default=4)
    ap.add_argument("--timeout", type=float, default=30.0, help="per-request deadline, seconds")
    ap.add_argument("--server", default=None, help="use this HOST:PORT instead of starting a server")
    ap.add_argument("--workers", type=int, default=None, help="server solve workers (default: CPU count)")
    ap.add_argument("--max-queued", type=int, default=64, help="server queue bound (default 64)")
    ap.add_argument("--json", action="store_true", help="print the numbers as one JSON object")
    ap.add_argument("--soak-seconds", type=float, default=None,
                    help="soak mode: mixed requests for this long, server RSS before/after (e.g. 600)")
    ap.add_argument("--scale", action="store_true",
                    help="scale mode: deadlines and limits on --gpus GPUs (default from --gpus 65536 up)")
    ap.add_argument("--runs", type=int, default=1,
                    help="scale mode: runs of the 8 s case per load (the 30 s case runs max(1, runs/3) times)")
    ap.add_argument("--load", type=int, default=os.cpu_count() or 2,
                    help="scale mode: CPU-burning processes for the loaded runs (0: idle only)")
    args = ap.parse_args(argv)
    if args.soak_seconds is not None and "--clients" not in (argv if argv is not None else sys.argv[1:]):
        args.clients = 8
    if args.scale or (args.gpus >= 65536 and args.soak_seconds is None):
        return run_scale(args)

    proc = None
    address = args.server
    if address is None:
        proc, address = start_server(args.workers, args.max_queued)
    try:
        wait_ready(address)
        if args.soak_seconds is not None:
            stats = run_soak(address, args, proc.pid if proc is not None else None)
        else:
            stats = run_load(address, args)
    finally:
        if proc is not None:
            proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    stats["server"] = address if args.server else f"local subprocess ({args.workers or os.cpu_count()} workers)"
    if args.json:
        print(json.dumps(stats))
        return 0 if not stats.get("unexpected") else 1
    if args.soak_seconds is not None:
        print_soak(stats)
        return 0 if not stats["unexpected"] else 1
    print(f"rankmap service load test: {stats['clients']} clients x {stats['duration_s']:.1f} s, "
          f"{stats['method']} on {stats['gpus']} GPUs, server {stats['server']}")
    print(f"  requests ok      {stats['requests_ok']}")
    print(f"  requests/second  {stats['rps']:.1f}")
    print(f"  latency p50      {stats['p50_ms']:.1f} ms")
    print(f"  latency p90      {stats['p90_ms']:.1f} ms")
    print(f"  latency p99      {stats['p99_ms']:.1f} ms")
    print(f"  latency max      {stats['max_ms']:.1f} ms")
    print(f"  failures         {stats['failures']}"
          + (f"  {stats['failures_by_code']}" if stats["failures"] else ""))
    return 0 if stats["failures"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
