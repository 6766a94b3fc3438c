"""The README's `rankmap batch` example: its jobs.yaml, run as written, prints the README's table
(every column but the solve times, which depend on the machine)."""

from __future__ import annotations

import re
from pathlib import Path

from cli_helpers import run

ROOT = Path(__file__).resolve().parent.parent


def _readme_jobs_and_table() -> tuple[str, list[list[str]]]:
    text = (ROOT / "README.md").read_text()
    jobs = re.search(r"cat > jobs\.yaml <<'YAML'\n(.*?)\nYAML\n", text, re.S).group(1)
    table = re.search(r"```text\n(#  name +status.*?)\n```", text, re.S).group(1)
    rows = [re.split(r"\s{2,}", line.strip()) for line in table.splitlines()[2:] if line[:1].isdigit() and "jobs:" not in line]
    return jobs, rows


def test_readme_batch_table_is_current(capsys, tmp_path):
    jobs, rows = _readme_jobs_and_table()
    assert [r[1] for r in rows] == ["lora-tp4-pp2", "dense-tp8"]
    path = tmp_path / "jobs.yaml"
    path.write_text(jobs.replace("cluster: examples/", f"cluster: {ROOT}/examples/") + "\n")
    code, out, err = run(capsys, "batch", path, "-o", tmp_path / "results.jsonl", "--workers", "1")
    assert code == 0, err
    got = [re.split(r"\s{2,}", line.strip()) for line in out.splitlines() if line[:1].isdigit() and "jobs:" not in line]
    # index, name, status, order, cost, baseline, improvement (solve time varies)
    assert [r[:7] for r in got] == [r[:7] for r in rows]
