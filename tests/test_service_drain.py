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

from rankmap import wire
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


def long_solve() -> "pb.SolveRequest":
    """A solve that keeps one worker busy for seconds (2,048 GPUs, every order)."""
    req = pb.SolveRequest(cluster=cluster_proto(256, 8), omit_groups=True, time_limit_seconds=60)
    req.sizes.tp, req.sizes.pp = 8, 2
    req.orders.policy = pb.ORDER_POLICY_ALL
    return req


def busy(channel) -> bool:
    """The only worker is busy: two quick calls in a row cannot get through within their deadline."""
    small = wire.get_groups_request(8, tp=2)
    return all(raw_call(channel, "GetGroups", small, 0.3)[0] == grpc.StatusCode.DEADLINE_EXCEEDED for _ in range(2))


def test_sigterm_reports_not_serving_during_the_drain_delay():
    srv = ServeProcess("--workers", "1", "--drain-delay", "60", "--grace", "5")
    channel = grpc.insecure_channel(f"127.0.0.1:{srv.port}")
    try:
        assert health(channel) == "SERVING"
        srv.proc.send_signal(signal.SIGTERM)
        assert wait_until(lambda: health(channel) == "NOT_SERVING", 10)
        # still serving while load balancers take notice
        code, details, _ = raw_call(channel, "GetGroups", wire.get_groups_request(8, tp=2), 30)
        assert code == grpc.StatusCode.OK, details
        srv.proc.send_signal(signal.SIGTERM)  # a second signal skips the rest of the delay
        assert srv.proc.wait(30) == 0
        srv._reader.join(10)
        events = [e.get("event") for e in srv.entries() if "event" in e]
        assert events == ["serving", "draining", "stopped"]
    finally:
        channel.close()
        srv.close()


def test_sigterm_finishes_running_work_refuses_queued_and_exits_zero():
    srv = ServeProcess("--workers", "1", "--max-queued", "4", "--drain-delay", "0", "--grace", "120")
    channel = grpc.insecure_channel(f"127.0.0.1:{srv.port}")
    small = wire.get_groups_request(8, tp=2)
    try:
        assert health(channel) == "SERVING"
        with futures.ThreadPoolExecutor(4) as ex:
            running = ex.submit(raw_call, channel, "Solve", long_solve(), 300)
            assert wait_until(lambda: busy(channel), 60)
            started = threading.Event()

            def queued_call():
                started.set()
                return raw_call(channel, "GetGroups", small, 120)

            queued = ex.submit(queued_call)
            assert started.wait(10)
            srv.proc.send_signal(signal.SIGTERM)
            code, details, _ = queued.result(120)
            # queued (UNAVAILABLE from the pool), or refused by gRPC if it came after the signal; on a loaded
            # machine the call may still wait for one of gRPC's own threads when the server stops, and gRPC
            # then cancels it (CANCELLED): never run, never OK
            assert code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED), (code, details)
            # a call after the signal is refused: UNAVAILABLE, or CANCELLED when gRPC's shutdown races its start
            assert raw_call(channel, "GetGroups", small, 10)[0] in (grpc.StatusCode.UNAVAILABLE,
                                                                     grpc.StatusCode.CANCELLED)
            code, details, answer = running.result(300)
            assert code == grpc.StatusCode.OK, details  # the running solve kept its answer
            assert pb.SolveResponse.FromString(answer).assignment
        assert srv.proc.wait(60) == 0
        srv._reader.join(10)
        entries = srv.entries()  # every line is JSON
        assert not any("Traceback" in line for line in srv.lines)
        events = [e.get("event") for e in entries if "event" in e]
        assert events == ["serving", "draining", "stopped"]
        assert [e["code"] for e in entries if e.get("method") == "Solve"] == ["OK"]
    finally:
        channel.close()
        srv.close()


def test_stop_answers_queued_work_unavailable_in_process():
    """Deterministic: the queue is observed before the stop (no signal, no timing)."""
    from rankmap.server.service import serve

    server = serve(host="127.0.0.1", port=0, workers=1, max_queued=4)
    channel = grpc.insecure_channel(server.address)
    try:
        with futures.ThreadPoolExecutor(4) as ex:
            running = ex.submit(raw_call, channel, "Solve", long_solve(), 300)
            assert wait_until(lambda: server.servicer._pending == 1, 30)
            queued = ex.submit(raw_call, channel, "GetGroups", wire.get_groups_request(8, tp=2), 120)
            assert wait_until(lambda: server.servicer._pending == 2, 30)
            stopped = server.stop(grace=120, drain_delay=0)
            code, details, _ = queued.result(60)
            assert code == grpc.StatusCode.UNAVAILABLE and "shutting down" in details
            code, details, _ = running.result(300)
            assert code == grpc.StatusCode.OK, details
            assert stopped.wait(60)
    finally:
        channel.close()
        server.stop(grace=None).wait(10)
