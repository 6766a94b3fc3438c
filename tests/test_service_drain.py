"""Issue 11: ``rankmap serve`` drains on SIGTERM (a real subprocess).

NOT_SERVING first (while calls are still served for --drain-delay), then new
calls refused, queued work answered UNAVAILABLE, the running solve finishes
within --grace and gets its answer, exit status 0, no traceback in the log.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from concurrent import futures

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from rankmap.server import convert
from service_helpers import cluster_proto, pb, raw_call, wait_until


class ServeProcess:
    """``rankmap serve --port 0 ...`` in a subprocess, its stderr collected line by line."""

    def __init__(self, *args: str):
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "rankmap", "serve", "--port", "0", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        assert wait_until(lambda: self.port is not None or self.proc.poll() is not None, 60), self.lines
        assert self.port is not None, self.lines

    def _read(self):
        for line in self.proc.stderr:
            self.lines.append(line.rstrip("\n"))

    @property
    def port(self):
        for line in list(self.lines):
            if '"event":"serving"' in line:
                return json.loads(line)["port"]
        return None

    def entries(self) -> list[dict]:
        return [json.loads(line) for line in list(self.lines)]

    def close(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(30)


def health(channel) -> str:
    try:
        resp = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=5)
    except grpc.RpcError as err:
        return err.code().name
    return health_pb2.HealthCheckResponse.ServingStatus.Name(resp.status)


def test_sigterm_drains_then_exits_zero():
    srv = ServeProcess("--workers", "1", "--max-queued", "4", "--drain-delay", "1.5", "--grace", "120")
    channel = grpc.insecure_channel(f"127.0.0.1:{srv.port}")
    try:
        assert health(channel) == "SERVING"
        # a solve that runs for seconds (1,024 GPUs, every order) occupies the only worker
        long = pb.SolveRequest(cluster=cluster_proto(128, 8), omit_groups=True, time_limit_seconds=30)
        long.sizes.tp, long.sizes.pp = 8, 2
        long.orders.policy = pb.ORDER_POLICY_ALL
        small = convert.get_groups_request(8, tp=2)
        with futures.ThreadPoolExecutor(4) as ex:
            running = ex.submit(raw_call, channel, "Solve", long, 300)
            # the worker is busy once a quick call cannot get through within its deadline
            assert wait_until(lambda: raw_call(channel, "GetGroups", small, 0.3)[0] == grpc.StatusCode.DEADLINE_EXCEEDED, 60)
            started = threading.Event()

            def queued_call():
                started.set()
                return raw_call(channel, "GetGroups", small, 120)

            queued = ex.submit(queued_call)
            assert started.wait(10)
            srv.proc.send_signal(signal.SIGTERM)
            # health says NOT_SERVING while the server still answers (the drain delay)
            assert wait_until(lambda: health(channel) == "NOT_SERVING", 10)
            code, details, _ = queued.result(120)
            assert code == grpc.StatusCode.UNAVAILABLE, details
            assert "shutting down" in details
            # new calls are refused from now on
            assert raw_call(channel, "GetGroups", small, 10)[0] == grpc.StatusCode.UNAVAILABLE
            code, details, answer = running.result(300)
            assert code == grpc.StatusCode.OK, details
            assert pb.SolveResponse.FromString(answer).assignment
        assert srv.proc.wait(60) == 0
        srv._reader.join(10)
        entries = srv.entries()  # every line is JSON
        assert not any("Traceback" in line for line in srv.lines)
        events = [e.get("event") for e in entries if "event" in e]
        assert events[:1] == ["serving"] and "draining" in events and events[-1] == "stopped"
        codes = [e["code"] for e in entries if e.get("method") == "Solve"]
        assert codes == ["OK"]
        assert "UNAVAILABLE" in [e["code"] for e in entries if e.get("method") == "GetGroups"]
    finally:
        channel.close()
        srv.close()
