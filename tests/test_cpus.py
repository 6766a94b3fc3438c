"""CPUs a process may use and the BLAS thread cap (rankmap/cpus.py, rankmap/entry.py)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from rankmap.cpus import BLAS_THREAD_VARIABLES, available_cpus, cap_blas_threads, cgroup_cpu_limit


@pytest.mark.parametrize("text,expected", [
    ("max 100000\n", None),              # no limit
    ("200000 100000\n", 2),              # 2 CPUs
    ("150000 100000\n", 2),              # 1.5 CPUs: a second thread still gets half a CPU
    ("50000 100000\n", 1),               # half a CPU: at least one
    ("100000\n", None),                  # malformed
    ("abc 100000\n", None),
    ("-1 100000\n", None),
    ("100000 0\n", None),
])
def test_cgroup_cpu_limit_reads_quota_over_period(tmp_path, text, expected):
    f = tmp_path / "cpu.max"
    f.write_text(text)
    assert cgroup_cpu_limit(str(f)) == expected


def test_cgroup_cpu_limit_missing_file_is_none(tmp_path):
    assert cgroup_cpu_limit(str(tmp_path / "absent")) is None


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity"), reason="Linux affinity")
def test_available_cpus_is_the_affinity_capped_by_the_quota(tmp_path):
    affinity = len(os.sched_getaffinity(0))
    none = tmp_path / "none"
    none.write_text("max 100000\n")
    assert available_cpus(str(none)) == affinity
    one = tmp_path / "one"
    one.write_text("100000 100000\n")
    assert available_cpus(str(one)) == 1
    many = tmp_path / "many"
    many.write_text(f"{(affinity + 7) * 100000} 100000\n")
    assert available_cpus(str(many)) == affinity  # a quota above the mask does not add CPUs


def test_cap_blas_threads_sets_only_unset_variables():
    env = {"OPENBLAS_NUM_THREADS": "4", "PATH": "/bin"}
    set_now = cap_blas_threads(env, cpus=2)
    assert env["OPENBLAS_NUM_THREADS"] == "4"  # the user's choice is kept
    assert set_now == {k: "2" for k in BLAS_THREAD_VARIABLES if k != "OPENBLAS_NUM_THREADS"}
    assert all(env[k] == "2" for k in set_now)
    assert cap_blas_threads(env, cpus=1) == {}  # all set now: nothing changes
    assert env["OMP_NUM_THREADS"] == "2"


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity"), reason="Linux affinity")
def test_the_rankmap_command_caps_blas_threads_before_numpy_loads():
    """Pinned to one CPU, the command sets the BLAS variables to 1 before anything imports numpy."""
    cpu = sorted(os.sched_getaffinity(0))[0]
    code = (
        "import os, sys, types\n"
        f"os.sched_setaffinity(0, {{{cpu}}})\n"
        "fake = types.ModuleType('rankmap.cli')\n"
        "fake.main = lambda argv=None: print(os.environ['OPENBLAS_NUM_THREADS'], os.environ['OMP_NUM_THREADS'],"
        " 'numpy' in sys.modules) or 0\n"
        "sys.modules['rankmap.cli'] = fake\n"
        "import rankmap.entry\n"
        "raise SystemExit(rankmap.entry.main([]))\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in BLAS_THREAD_VARIABLES}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["1", "1", "False"]


def test_console_script_and_module_run_through_the_entry():
    """pyproject's ``rankmap`` script and ``python -m rankmap`` both go through rankmap.entry.main."""
    import pathlib

    root = pathlib.Path(__file__).resolve().parents[1]
    assert 'rankmap = "rankmap.entry:main"' in (root / "pyproject.toml").read_text()
    assert "from rankmap.entry import main" in (root / "rankmap" / "__main__.py").read_text()


def test_serve_default_workers_follow_available_cpus(monkeypatch):
    from rankmap.server import servicer

    monkeypatch.setattr(servicer, "available_cpus", lambda: 3)
    s = servicer.RankmapServicer()
    try:
        assert s.workers == 3
    finally:
        s.shutdown()
    s = servicer.RankmapServicer(workers=5)
    try:
        assert s.workers == 5
    finally:
        s.shutdown()
