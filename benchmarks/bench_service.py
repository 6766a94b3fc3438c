"""Load test of the gRPC service: N concurrent clients for a bounded time.

Starts ``rankmap serve`` in a subprocess on a free loopback port (or uses
``--server HOST:PORT``), then runs ``--clients`` threads, each with its own
:class:`rankmap.client.RankmapClient` (own channel), sending requests back to
back for ``--duration`` seconds.  Prints requests per second, latency
percentiles and failures by status code.

    python benchmarks/bench_service.py                      # 50 clients, 20 s, Solve on 16 GPUs
    python benchmarks/bench_service.py --duration 5 --gpus 64 --method evaluate
    python benchmarks/bench_service.py --server 10.0.0.5:50051 --clients 200 --json

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


def start_server(workers: int | None, max_queued: int) -> tuple[subprocess.Popen, str]:
    port = _free_port()
    cmd = [sys.executable, "-m", "rankmap", "serve", "--port", str(port), "--max-queued", str(max_queued), "--quiet"]
    if workers:
        cmd += ["--workers", str(workers)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    return proc, f"127.0.0.1:{port}"


def wait_ready(address: str, timeout: float = 60.0) -> None:
    from rankmap.client import RankmapClient

    with RankmapClient(address, timeout=timeout, retries=100, backoff_initial=0.05, backoff_max=0.5) as c:
        status = c.health()
    if status != "SERVING":
        raise SystemExit(f"server at {address} is {status}")


def percentile(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return float("nan")
    k = (len(sorted_values) - 1) * q
    lo = int(k)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (k - lo)


def run_load(address: str, args) -> dict:
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


def main(argv: list[str] | None = None) -> int:
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
    args = ap.parse_args(argv)

    proc = None
    address = args.server
    if address is None:
        proc, address = start_server(args.workers, args.max_queued)
    try:
        wait_ready(address)
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
        return 0
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
