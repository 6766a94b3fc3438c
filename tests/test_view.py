"""``rankmap view`` / ``solve --emit html`` (issue 27 deliverable 5): the layout page, its data, and the
page rendered by headless Chromium (Debian's ``chromium``).

The Chromium tests skip when no ``chromium`` is installed, unless ``RANKMAP_REQUIRE_CHROMIUM=1``
(set by ``.ci/run`` after ``apt-get install chromium``): then they must run.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import struct
import subprocess
import sys

import pytest

from rankmap.layout_view import layout_data

from cli_helpers import bad_input, run
from format_helpers import ROOT, TREE

REQUIRE = os.environ.get("RANKMAP_REQUIRE_CHROMIUM", "") not in ("", "0")
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
JOB = ROOT / "examples" / "job-lora-hgx-a100.yaml"
CLUSTER = ROOT / "examples" / "clusters" / "hgx-a100-2nodes.json"


@pytest.fixture(scope="module")
def lora(tmp_path_factory):
    """The README's main job (2 HGX A100 hosts, tp4 pp2 dp2): its JSON result, written and parsed."""
    d = tmp_path_factory.mktemp("lora")
    out = subprocess.run([sys.executable, "-m", "rankmap", "solve", str(JOB)], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    (d / "result.json").write_text(out.stdout)
    return d / "result.json", json.loads(out.stdout)


def test_data_labels_and_bottlenecks(lora):
    path, res = lora
    from rankmap.solver.formats import load_graph

    data = layout_data(res, load_graph(CLUSTER))
    assert [h for h, _ in data["hosts"]] == ["node1", "node2"]
    assert data["hosts"][0][1] == [f"node1/gpu{i}" for i in range(8)]
    assert data["host_leaf"] == {"node1": "switch:leaf1", "node2": "switch:leaf1"}
    assert [s["id"] for s in data["switches"]] == ["switch:leaf1"]
    # chosen order tp-cp-ep-pp-dp: rank = tp_rank + 4 pp + 8 dp, rank r on node1/gpu r, node2/gpu (r-8):
    # node1/gpu5 is rank 5: TP group 1, PP stage 1, DP 0; node2/gpu2 is rank 10: TP group 2, stage 0, DP 1
    assert res["order"] == "tp-cp-ep-pp-dp"
    assert data["chosen"]["gpus"]["node1/gpu5"] == [5, 1, 1, 0]
    assert data["chosen"]["gpus"]["node2/gpu2"] == [10, 2, 0, 1]
    # baseline tp-cp-ep-dp-pp: rank = tp_rank + 4 dp + 8 pp: node1/gpu5 is rank 5: TP group 1, stage 0, DP 1
    assert data["baseline"]["gpus"]["node1/gpu5"] == [5, 1, 0, 1]
    # chosen: dp is limited by node1's NIC port to the leaf (the host's uplink in the picture);
    # tp and pp by one flow on node1/gpu0's NVSwitch port (the GPU and its host)
    marks = {m["cls"]: m["keys"] for m in data["chosen"]["marks"]}
    assert marks == {"tp": ["gpu:node1/gpu0", "host:node1"], "dp": ["edge:host:node1"],
                     "pp": ["gpu:node1/gpu0", "host:node1"]}
    assert data["chosen"]["classes"]["pp"] == pytest.approx(res["cost"]["by_class"]["pp"])
    assert not data["aggregated"]


def test_aggregated_above_max_hosts(lora):
    _, res = lora
    data = layout_data(res, None, max_hosts=1)
    # 2 hosts > 1: leaves drawn as aggregates; without a graph every host hangs under "network"
    assert data["aggregated"] and data["leaves"] == {"network": [2, 16]} and data["host_names"] == ["node1", "node2"]
    assert "gpus" not in data["chosen"] and data["chosen"]["tp_groups"] == 4
    assert {m["cls"]: m["keys"] for m in data["chosen"]["marks"]}["tp"] == ["leaf:network"]


def test_cli_view_and_emit(lora, tmp_path, capsys):
    path, res = lora
    page = tmp_path / "layout.html"
    code, out, err = run(capsys, "view", path, "--cluster", CLUSTER, "-o", page)
    assert code == 0 and out == "", err
    text = page.read_text()
    assert text.startswith("<!DOCTYPE html>") and 'id="rankmap-data"' in text
    # self-contained: nothing fetched (no src/href attributes, no URLs but the SVG namespace)
    assert not re.search(r"\b(src|href)\s*=", text)
    assert set(re.findall(r"https?://[^\s'\"]+", text)) == {"http://www.w3.org/2000/svg"}
    emitted = tmp_path / "emit.html"
    code, out, err = run(capsys, "solve", JOB, "--emit", "html", "-o", emitted)
    assert code == 0, err
    assert json.loads(out)["written"] == [str(emitted)]
    assert json.loads(emitted.read_text().split('id="rankmap-data">')[1].split("</script>")[0])["has_fabric"]


def test_cli_bad_input(lora, tmp_path, capsys):
    bad_input(capsys, "view", tmp_path / "none.json", "-o", tmp_path / "x.html", needle="does not exist")
    (tmp_path / "empty.json").write_text("")
    bad_input(capsys, "view", tmp_path / "empty.json", "-o", tmp_path / "x.html", needle="is empty")
    bad_input(capsys, "view", JOB, "-o", tmp_path / "x.html", needle="malformed JSON")
    (tmp_path / "other.json").write_text(json.dumps({"nodes": [{"id": "x/gpu0", "kind": "gpu"}], "edges": []}))
    bad_input(capsys, "view", lora[0], "--cluster", tmp_path / "other.json", "-o", tmp_path / "x.html",
              needle="the result's GPU 'node1/gpu0' is not a GPU of the cluster given (16 such)")
    (tmp_path / "list.json").write_text("[1, 2]")
    bad_input(capsys, "view", tmp_path / "list.json", "-o", tmp_path / "x.html", needle="not a rankmap solve result")
    (tmp_path / "obj.json").write_text('{"order": "tp-cp-ep-dp-pp"}')
    bad_input(capsys, "view", tmp_path / "obj.json", "-o", tmp_path / "x.html", needle="not a rankmap solve result")
    bad_input(capsys, "solve", JOB, "--emit", "html", needle="--emit html needs -o FILE")
    bad_input(capsys, "solve", JOB, "--emit", "png", "-o", tmp_path / "x", needle="html")


# ---------------------------------------------------------------- rendered by Chromium

@pytest.fixture(autouse=False)
def chromium():
    if CHROMIUM is None:
        if REQUIRE:
            pytest.fail("RANKMAP_REQUIRE_CHROMIUM=1 but no chromium on PATH; apt-get install chromium")
        pytest.skip("no chromium (apt-get install chromium); RANKMAP_REQUIRE_CHROMIUM=1 makes this a failure")
    return CHROMIUM


def _chromium(binary, tmp_path, page, *mode):
    cmd = [binary, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run",
           f"--user-data-dir={tmp_path / 'profile'}", "--window-size=1400,1000", *mode, page.as_uri()]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout


def _png_size(path) -> tuple[int, int]:
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n" and head[12:16] == b"IHDR"
    return struct.unpack(">II", head[16:24])


def test_rendered_page(chromium, lora, tmp_path):
    path, res = lora
    page = tmp_path / "layout.html"
    from rankmap.cli_view import write_html
    from rankmap.solver.formats import load_graph

    write_html(str(page), res, load_graph(CLUSTER))
    dom = _chromium(chromium, tmp_path, page, "--dump-dom")
    assert 'data-rendered="yes"' in dom  # the script ran to its end
    for side in ("chosen", "baseline"):
        assert f'data-layout="{side}"' in dom
    # every host drawn in both panels, every GPU with its TP group
    for h in ("node1", "node2"):
        assert len(re.findall(rf'<g class="host[^"]*" data-key="host:{h}" data-host="{h}"', dom)) == 2
    assert len(re.findall(r'<g class="gpu[^"]*" data-key="gpu:node\d/gpu\d" data-gpu="[^"]+" data-rank="\d+" '
                          r'data-tp="\d"', dom)) == 32
    # each class's bottleneck is marked in the picture: chosen dp on node1's uplink to the leaf
    assert re.search(r'<polyline class="link bottleneck" data-key="edge:host:node1"[^>]*data-bn="dp"', dom)
    for cls in ("tp", "dp", "pp"):
        assert re.search(rf'class="[^"]*bottleneck[^"]*"[^>]*data-bn="[^"]*\b{cls}\b', dom), cls
        assert f'<div class="bar chosen" data-class="{cls}"' in dom and f'<div class="bar baseline" data-class="{cls}"' in dom
    shot = tmp_path / "layout.png"
    _chromium(chromium, tmp_path, page, f"--screenshot={shot}")
    assert _png_size(shot) == (1400, 1000)
    assert shot.stat().st_size > 20_000  # a drawn page, not a blank one (a white 1400x1000 PNG is ~5 KB)


def test_rendered_tree_and_aggregate(chromium, tmp_path, capsys):
    # the 3-level Slurm tree (core -> 6 spines -> 12 leaves -> 96 hosts), 2 GPUs per host
    cluster = tmp_path / "tree.json"
    assert run(capsys, "cluster", "--fabric", TREE, "--gpus-per-node", "2", "--gpu", "h100", "-o", cluster)[0] == 0
    code, out, err = run(capsys, "solve", cluster, "--tp", "2", "--time-limit", "2")
    assert code == 0, err
    (tmp_path / "r.json").write_text(out)
    hosts = sorted({h["host"] for h in json.loads(out)["hosts"]})
    assert len(hosts) == 96
    page = tmp_path / "tree.html"
    assert run(capsys, "view", tmp_path / "r.json", "--cluster", cluster, "-o", page)[0] == 0
    dom = _chromium(chromium, tmp_path, page, "--dump-dom")
    for h in hosts:
        assert dom.count(f'data-host="{h}"') == 2, h
    # the fabric: the core, its 6 spines, 12 leaves, in both panels; spines with their link up
    assert dom.count('data-key="switch:switch:switch.3.1"') == 2
    assert len(re.findall(r'data-key="switch:switch:switch\.2\.\d"', dom)) == 12
    assert len(re.findall(r'data-key="edge:switch:switch:switch\.1\.\d+"', dom)) == 24
    # aggregated: one box per leaf, the host names in the collapsed list, the page says so
    agg = tmp_path / "agg.html"
    assert run(capsys, "view", tmp_path / "r.json", "--cluster", cluster, "--max-hosts", "10", "-o", agg)[0] == 0
    dom = _chromium(chromium, tmp_path, agg, "--dump-dom")
    assert len(re.findall(r'<g class="leaf-agg[^"]*" data-key="leaf:switch:switch\.1\.\d+"', dom)) == 24
    assert "96 hosts: more than 10, so each leaf is drawn as one box" in dom
    assert all(h in dom.split('class="host-names">')[1].split("</p>")[0] for h in hosts)
    assert re.search(r'class="leaf-agg bottleneck"', dom)
    shot = tmp_path / "agg.png"
    _chromium(chromium, tmp_path, agg, f"--screenshot={shot}")
    assert _png_size(shot) == (1400, 1000) and shot.stat().st_size > 20_000


@pytest.mark.parametrize("key, value", [("baseline", "x"), ("cost", -1), ("hosts", -1), ("assignment", -1),
                                        ("improvement", "x"), ("sizes", "x"), ("hosts", [1])])
def test_view_refuses_a_result_with_a_field_of_the_wrong_type(capsys, tmp_path, key, value):
    """A solve result whose field has another JSON type: one line naming the field, exit 2 (was AttributeError)."""
    doc = {"order": "tp-cp-ep-dp-pp", "assignment": ["a"], "sizes": {"tp": 1}, "cost": {}, key: value}
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(doc))
    err = bad_input(capsys, "view", str(path), "-o", str(tmp_path / "x.html"))
    assert repr(key) in err or f"{key}[0]" in err
