"""Shared test helpers and fixtures.

* ``tests/`` is put on ``sys.path`` so test modules import the helper modules next to them
  (``cli_helpers``, ``service_helpers``, ``reference_model``) however pytest is started.
* :func:`cli_helpers.run` / :func:`cli_helpers.bad_input` run the command line and check the
  bad-input contract (exit 2, one line on stderr, nothing on stdout, no traceback).
* ``cluster_file``: a node-link JSON of 2 hosts × 8 GPUs (NVSwitch 450 GB/s, 50 GB/s NICs).
* ``example_cluster``: the path of ``examples/clusters/hgx-a100-2nodes.json`` (2 real HGX A100 hosts).
* ``client`` / ``channel``: a :class:`~rankmap.client.RankmapClient` (60 s timeout) and an insecure
  gRPC channel to the module's ``server`` fixture (:func:`service_helpers.live_server`).
* ``small_trees``: tiny oversubscribed trees with every free layout of each
  (:func:`exact_optimum.small_oversubscribed_trees`), built once per session.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent
if str(TESTS) not in sys.path:
    sys.path.insert(0, str(TESTS))


@pytest.fixture()
def cluster_file(tmp_path):
    """2 hosts × 8 GPUs (fat_tree_cluster: NVSwitch 450 GB/s, one 50 GB/s NIC per GPU), as a file."""
    import networkx as nx

    from rankmap.solver import fat_tree_cluster

    g = fat_tree_cluster(2, 8, intra_bandwidth_gbps=450, nic_bandwidth_gbps=50)
    path = tmp_path / "two-hosts.json"
    path.write_text(json.dumps(nx.node_link_data(g, edges="edges")))
    return path


@pytest.fixture()
def example_cluster() -> str:
    """examples/clusters/hgx-a100-2nodes.json (2 HGX A100 hosts from real nvidia-smi output)."""
    return str(REPO / "examples" / "clusters" / "hgx-a100-2nodes.json")


@pytest.fixture(scope="module")
def client(server):
    """A RankmapClient (60 s timeout) to the module's ``server``."""
    from rankmap.client import RankmapClient

    with RankmapClient(server.address, timeout=60) as c:
        yield c


@pytest.fixture(scope="module")
def channel(server):
    """An insecure gRPC channel to the module's ``server``."""
    import grpc

    ch = grpc.insecure_channel(server.address)
    yield ch
    ch.close()


@pytest.fixture(scope="session")
def small_trees():
    """Tiny oversubscribed trees and every free layout of each: name -> (cluster, layouts)."""
    from exact_optimum import small_oversubscribed_trees

    return small_oversubscribed_trees()
