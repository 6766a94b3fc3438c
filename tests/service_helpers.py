"""Shared by the tests/test_service_*.py files: small clusters, raw calls, a log collector."""

from __future__ import annotations

import json
import logging
import threading
import time

import grpc
import networkx as nx

from rankmap.v1 import rankmap_pb2 as pb
from rankmap.v1 import rankmap_pb2_grpc

__all__ = ["two_hosts", "cluster_proto", "LogLines", "raw_call", "code_of", "wait_until", "stub_for", "pb"]


def two_hosts(gpus: int = 4) -> nx.Graph:
    """2 hosts x ``gpus`` GPUs on an NVSwitch, a leaf between the hosts."""
    g = nx.Graph()
    for h in ("node1", "node2"):
        for i in range(gpus):
            g.add_node(f"{h}/gpu{i}", kind="gpu", host=h, local_index=i)
            g.add_edge(f"{h}/gpu{i}", f"{h}/nvswitch", bandwidth=450.0)
        g.nodes[f"{h}/nvswitch"]["kind"] = "nvswitch"
        g.add_edge(f"{h}/nvswitch", "leaf", bandwidth=50.0)
    g.nodes["leaf"]["kind"] = "switch"
    return g


def cluster_proto(hosts: int, gpus: int = 8) -> "pb.Cluster":
    """A ``rankmap.v1.Cluster`` of ``hosts`` x ``gpus`` GPUs built directly (fast at 100k+ GPUs)."""
    c = pb.Cluster()
    c.nodes.add(id="spine", kind="switch")
    for h in range(hosts):
        sw = f"h{h}/nvs"
        c.nodes.add(id=sw, kind="nvswitch")
        c.links.add(source=sw, target="spine", bandwidth_gbps=50.0)
        for i in range(gpus):
            d = f"h{h}/g{i}"
            c.devices.add(id=d, host=f"h{h}", local_index=i)
            c.links.add(source=d, target=sw, bandwidth_gbps=450.0)
    return c


class LogLines(logging.Handler):
    """Collects the ``rankmap.server`` log lines (JSON) while installed."""

    def __init__(self):
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []
        self._lock2 = threading.Lock()

    def emit(self, record):
        with self._lock2:
            self.lines.append(record.getMessage())

    def entries(self) -> list[dict]:
        """Every line parsed as JSON (a line that is not JSON fails the test)."""
        with self._lock2:
            return [json.loads(line) for line in self.lines]

    def __enter__(self):
        logger = logging.getLogger("rankmap.server")
        self._level = logger.level
        logger.setLevel(logging.INFO)
        logger.addHandler(self)
        return self

    def __exit__(self, *exc):
        logger = logging.getLogger("rankmap.server")
        logger.removeHandler(self)
        logger.setLevel(self._level)


def stub_for(channel) -> rankmap_pb2_grpc.RankmapServiceStub:
    """The generated stub on ``channel``."""
    return rankmap_pb2_grpc.RankmapServiceStub(channel)


def raw_call(channel, method: str, request, timeout: float | None = 30.0, metadata=None):
    """Call ``method`` with a message or raw bytes; return ``(code, details, error or response)``."""
    path = f"/{pb.DESCRIPTOR.services_by_name['RankmapService'].full_name}/{method}"
    serializer = (lambda b: b) if isinstance(request, bytes) else (lambda m: m.SerializeToString())
    if method == "BatchSolve":
        call = channel.unary_stream(path, request_serializer=serializer, response_deserializer=lambda b: b)
        try:
            out = list(call(request, timeout=timeout, metadata=metadata))
            return grpc.StatusCode.OK, "", out
        except grpc.RpcError as err:
            return err.code(), err.details() or "", err
    call = channel.unary_unary(path, request_serializer=serializer, response_deserializer=lambda b: b)
    try:
        return grpc.StatusCode.OK, "", call(request, timeout=timeout, metadata=metadata)
    except grpc.RpcError as err:
        return err.code(), err.details() or "", err


def code_of(result) -> grpc.StatusCode:
    """The status code of a :func:`raw_call` result."""
    return result[0]


def wait_until(predicate, timeout: float = 30.0, interval: float = 0.05) -> bool:
    """Poll ``predicate`` until it is true or ``timeout`` passes; its last value."""
    end = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() >= end:
            return value
        time.sleep(interval)
