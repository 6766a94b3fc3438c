"""Predicted nccl-tests bus bandwidth against published measurements (DESIGN §4, "Checks").

``benchmarks/validate_nccl.py`` is the full run (tables for ``benchmarks/RESULTS.md``);
here every one of its rows must lie within 15 % of its published figure, a few numbers
are derived by hand from NCCL's rules, and the size sweep must show the latency-bound
region.  Runs in about 2 s.
"""

from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks"))

import validate_nccl as vn  # noqa: E402

GiB = 2 ** 30


@pytest.mark.parametrize("row", vn.ROWS, ids=[r.id for r in vn.ROWS])
def test_row_within_15_percent_of_published(row):
    r = vn.predict(row)
    assert r.ok, (
        f"{row.id}: predicted busbw {r.busbw:.1f} GB/s vs published {row.published} GB/s "
        f"(ratio {r.ratio:.2f}; algorithm {r.algorithm}, channels {r.channels}; source: {row.source})"
    )
    assert abs(r.ratio - 1.0) <= vn.TOLERANCE + 1e-12


def test_dgx_a100_four_hosts_ring_is_eight_nics_of_24():
    # DGX A100, 4 hosts x 8 GPUs, one 200G HDR NIC per GPU, all-reduce over all 32 GPUs.
    # NCCL runs one ring channel per NIC: 8 channels.  A 200G port is 25 GB/s; NCCL's
    # pre-Hopper inter-node speed ladder puts one 24 GB/s channel on it (0.96 x 25;
    # "24GB/s is the peak performance per 200G NIC", sjeaugey, nccl-tests#119).
    #   busbw = 8 channels x 24 GB/s = 192 GB/s   (measured 192, AddyLaddy, nccl#812)
    # Latency (~0.4 ms) is < 0.5 % of the 8 GiB time: 2*(31/32)*8 GiB / (192 GB/s * 32/(2*31)) ~ 87 ms.
    r = vn.predict(vn.row_by_id("a100x4-ar"))
    assert r.busbw == pytest.approx(192.0, rel=0.02)


def test_one_gpu_per_host_ring_is_one_nic():
    # 4 hosts x 8 H100, tp=8: each data-parallel group has one member per host, so NCCL
    # sees one GPU and its one NIC per node: 1 channel.  400G = 50 GB/s, x0.96 = 48 GB/s
    # (Hopper ladder's top inter-node rate; "CX-7 ... should achieve up to 48-49GB/s", nccl-tests#267).
    #   busbw = 1 channel x 48 GB/s = 48 GB/s
    # The 8 groups run at once on 8 different rails, so they do not share a NIC.
    r = vn.predict(vn.row_by_id("h100x4-dp-tp8"))
    assert r.busbw == pytest.approx(48.0, rel=0.02)


def test_two_host_all_to_all_is_two_nics_per_gpu():
    # 2 hosts x 8 H100, all-to-all over 16 ranks, S bytes per rank: S/16 to each peer.
    # 8 of the 15 peers sit on the other host: (8/16) S = S/2 leaves the host per rank,
    # through PXN on the destination's rail, so every NIC carries S/2 at 48 GB/s:
    #   T = (S/2) / 48 GB/s  ->  algbw = S/T = 96 GB/s
    #   busbw = algbw x (n-1)/n = 96 x 15/16 = 90 GB/s   (sjeaugey, nccl-tests#130:
    #   "On 2 nodes ... BusBW = 2x network bandwidth per GPU" x (n-1)/n)
    r = vn.predict(vn.row_by_id("h100x2-a2a"))
    assert r.busbw == pytest.approx(90.0, rel=0.02)


def test_sweep_rises_out_of_the_latency_bound_region():
    for rid in ("h100x4-ar", "h100x16-ar", "a100x4-ar"):
        res = vn.sweep(rid)
        bw = [r.busbw for r in res]
        # busbw = S / T(S), T = min over algorithms of (latency + S / rate): never falls with S
        assert all(b2 >= b1 * (1 - 1e-9) for b1, b2 in zip(bw, bw[1:])), (rid, bw)
        # latency-bound at 1 MiB (NCCL's ring latency alone is ~0.4 ms on 4 hosts), near peak at 8 GiB
        assert bw[0] < 0.5 * bw[-1], (rid, bw[0], bw[-1])
        assert res[0].latency_seconds > 0


def test_ratio_and_range_rule():
    row = vn.Row("t", "h100x1", "all-reduce", (("tp", 1),), GiB, 100.0, 120.0, "test")
    mk = lambda bw: vn.Result(row, GiB, 8, 1, 1, 1.0, 0.0, bw, "-", "-", "-")  # noqa: E731
    assert mk(110.0).ratio == 1.0 and mk(110.0).ok
    assert mk(85.0).ratio == pytest.approx(0.85) and mk(85.0).ok
    assert not mk(84.9).ok
    assert mk(138.0).ok and not mk(138.1).ok
    assert mk(138.0).ratio == pytest.approx(1.15)


def test_markdown_output_and_exit_status(tmp_path):
    out = tmp_path / "nccl.md"
    rc = vn.main(["--markdown", "--no-sweep", "-o", str(out)])
    text = out.read_text()
    assert text.startswith("| row | system | collective |")
    assert all(f"| {r.id} |" in text for r in vn.ROWS)
    assert rc == (0 if all(vn.predict(r).ok for r in vn.ROWS) else 1)
