"""Shared by the tests/test_service_*.py files: small clusters, raw calls, a log collector."""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time

import grpc
import networkx as nx

from rankmap.v1 import rankmap_pb2 as pb
from rankmap.v1 import rankmap_pb2_grpc
import numpy as np
import pytest

from rankmap.solver.results import Bottleneck, ClassCost, CostBreakdown

__all__ = ["TRAFFIC", "make_cluster", "comparable", "assert_same_result", "assert_exposed", "sample_cost", "two_hosts", "cluster_proto", "LogLines", "raw_call", "code_of", "wait_until", "stub_for", "served", "live_server", "pb"]


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


@contextlib.contextmanager
def served(**serve_kwargs):
    """``serve(host="127.0.0.1", port=0, **serve_kwargs)`` on a free loopback port, stopped on the way out."""
    from rankmap.server.service import serve

    srv = serve(host="127.0.0.1", port=0, **serve_kwargs)
    try:
        yield srv
    finally:
        srv.stop(grace=None).wait(10)


def live_server(**serve_kwargs):
    """A module-scoped fixture: a server :func:`served` for the whole module.

    ``server = live_server(workers=2, max_queued=8)`` in a test module; the ``client`` and
    ``channel`` fixtures of ``conftest.py`` talk to it.
    """

    @pytest.fixture(scope="module")
    def server():
        with served(**serve_kwargs) as srv:
            yield srv

    return server


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


# --------------------------------------------------------------------------- shared by test_service / test_wire

TRAFFIC = {"tp": 4e9, "cp": 0.0, "ep": 0.0, "etp": 0.0, "dp": 1e9, "edp": 0.0, "pp": 1e8, "embedding": 0.0}


def make_cluster(hosts: int = 2, gpus: int = 4, int_ids: bool = False) -> nx.Graph:
    """hosts x gpus GPUs behind an NVSwitch per host, leaves of 4 hosts, one spine."""
    g = nx.Graph()
    gid = 0
    for h in range(hosts):
        ids = []
        for i in range(gpus):
            node = gid if int_ids else f"h{h}g{i}"
            gid += 1
            ids.append(node)
            g.add_node(node, host=f"h{h}", local_index=i)
        sw = f"h{h}-nvs"
        g.add_node(sw, kind="nvswitch")
        for node in ids:
            g.add_edge(node, sw, bandwidth=450.0)
        leaf = f"leaf{h // 4}"
        g.add_node(leaf, kind="leaf")
        g.add_edge(sw, leaf, bandwidth=50.0, latency_us=2.0)
        g.add_node("spine", kind="spine")
        g.add_edge(leaf, "spine", bandwidth=25.0)
    return g


def comparable(result) -> str:
    d = result.to_dict()
    d.pop("solve_seconds")
    return json.dumps(d, sort_keys=True)


def assert_same_result(remote, local):
    assert comparable(remote) == comparable(local)
    assert remote.config == local.config
    assert remote.layout == local.layout
    assert remote.baseline == local.baseline
    assert remote.hosts == local.hosts
    assert remote.status == local.status
    assert remote.bound_seconds == local.bound_seconds
    assert remote.mode == local.mode
    assert remote.orders_searched == local.orders_searched
    assert dict(remote.traffic) == dict(local.traffic)
    assert list(remote.traffic) == list(local.traffic)
    assert list(remote.groups) == list(local.groups)
    for name in local.groups:
        assert np.array_equal(remote.groups[name], local.groups[name]), name
    assert json.loads(json.dumps(remote.apply)) == json.loads(json.dumps(local.apply))
    assert list(remote.apply) == list(local.apply)
    assert remote.solve_seconds > 0


def assert_exposed(cost, exposure):
    """total = Σ x_c·T_c, T_c = by_class = classes[c].seconds, x_c as asked (1 where not named)."""
    assert set(cost.classes) == set(cost.by_class)
    for c, cc in cost.classes.items():
        assert cc.seconds == cost.by_class[c], c
        assert cc.exposure == exposure.get(c, 1.0), c
    assert cost.total_seconds == pytest.approx(
        sum(cc.exposure * cost.by_class[c] for c, cc in cost.classes.items()), rel=1e-12, abs=1e-15
    )


def sample_cost() -> CostBreakdown:
    """A cost with every field set (no solver needed)."""
    link = Bottleneck("link", ("leaf0", "spine"), 72e9, 400.0, 1.0, 32, 2.25e9, 50.0)
    flow = Bottleneck("per-flow", ("h0g0", "h0-nvs"), 1e9, 450.0, 0.25, 1, 4e9, 450.0)
    classes = {
        "tp": ClassCost(0.0089, 0.5, 3e9, 4e9, 1e-5, flow, algorithm="nvls", channels=1),
        "cp": ClassCost(0.0),
        "dp": ClassCost(0.18, 0.2, 1.75e9, 1e9, 2e-6, link, algorithm="ring", channels=8),
        "pp": ClassCost(0.0, 1.0, 0.0, 0.0, 0.0, Bottleneck()),
    }
    by_class = {c: cc.seconds for c, cc in classes.items()}
    return CostBreakdown(sum(cc.exposure * cc.seconds for cc in classes.values()), by_class, classes)
