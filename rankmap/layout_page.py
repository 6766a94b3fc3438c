"""The HTML page of a layout: inline CSS and a script that draws :func:`rankmap.layout_view.layout_data` as SVG.

Self-contained: one file, no network access (no fonts, scripts, styles or images fetched).
The data sits in ``<script type="application/json" id="rankmap-data">`` (``<`` escaped, so no
host or device name can close the script); the script draws, for the chosen layout and the
baseline side by side, the fabric tree (switches by level, hosts under their leaf, GPUs in
their host coloured by TP group and labelled ``p<PP stage> d<DP index>``), marks each class's
bottleneck (class ``bottleneck`` on the link, GPU, host, switch or leaf drawn, a ``bn-label``
naming the class) and draws per-class time bars.  Drawn elements carry ``data-key``:
``gpu:ID``, ``host:NAME``, ``switch:ID``, ``edge:host:NAME`` (a host's uplink),
``edge:switch:ID`` (a switch's link to its parent), ``leaf:ID`` (aggregated mode).
"""

from __future__ import annotations

import html
import json
from typing import Any, Mapping

__all__ = ["render_page"]

_CSS = """
body { font: 13px/1.4 system-ui, sans-serif; margin: 16px; color: #222; }
h1 { font-size: 18px; margin: 0 0 4px; } h2 { font-size: 15px; margin: 8px 0; }
.summary { color: #444; margin-bottom: 8px; }
.note { background: #fff6d6; border: 1px solid #e6c75a; padding: 6px 10px; margin: 8px 0; }
.panels { display: flex; flex-wrap: wrap; gap: 16px; align-items: flex-start; }
.panel { border: 1px solid #ccc; border-radius: 6px; padding: 8px; flex: 1 1 600px; min-width: 0; }
.scroll { overflow: auto; max-height: 80vh; border: 1px solid #eee; }
svg text { font: 10px system-ui, sans-serif; }
.switch rect { fill: #e8eef7; stroke: #5b7bb2; }
.host > rect { fill: #fafafa; stroke: #888; }
.gpu rect { stroke: #333; stroke-width: 0.5; }
.leaf-agg rect { fill: #f3f3f3; stroke: #888; }
.link { stroke: #999; stroke-width: 1.2; fill: none; }
.bottleneck > rect, rect.bottleneck { stroke: #d00 !important; stroke-width: 3 !important; }
line.bottleneck, polyline.bottleneck { stroke: #d00 !important; stroke-width: 4 !important; }
.bn-label { fill: #d00; font-weight: bold; }
table.bars { border-collapse: collapse; margin-top: 8px; width: 100%; }
table.bars td { padding: 2px 4px; vertical-align: middle; }
.bar { height: 10px; border-radius: 2px; }
.bar.chosen { background: #3a7bd5; } .bar.baseline { background: #aaa; }
.bn-list { color: #900; margin: 6px 0 0 18px; padding: 0; }
details { margin-top: 6px; }
"""

_JS = r"""
(function () {
  const D = JSON.parse(document.getElementById('rankmap-data').textContent);
  const NS = 'http://www.w3.org/2000/svg';
  function svg(tag, attrs, parent) {
    const e = document.createElementNS(NS, tag);
    for (const k in attrs) e.setAttribute(k, attrs[k]);
    if (parent) parent.appendChild(e);
    return e;
  }
  function html(tag, attrs, parent, text) {
    const e = document.createElement(tag);
    for (const k in attrs) e.setAttribute(k, attrs[k]);
    if (text !== undefined) e.textContent = text;
    if (parent) parent.appendChild(e);
    return e;
  }
  function colour(i) { return 'hsl(' + ((i * 137.508) % 360).toFixed(1) + ',65%,' + (55 + (i % 3) * 8) + '%)'; }
  function fmt(s) {
    if (s === 0) return '0';
    const u = [['s', 1], ['ms', 1e-3], ['us', 1e-6], ['ns', 1e-9]];
    for (const [n, f] of u) if (Math.abs(s) >= f || n === 'ns') return (s / f).toPrecision(4) + ' ' + n;
  }
  const CELL = 30, ROWS = 8, SW_H = 24, LEVEL_H = 56, GAP = 12;
  const sw = {}; let maxLevel = -1;
  for (const s of D.switches) { sw[s.id] = s; maxLevel = Math.max(maxLevel, s.level); }
  // leaves in tree order (parent chain, then name), then the hosts of each leaf
  const leafOf = D.host_leaf;
  const leafIds = Array.from(new Set(Object.values(leafOf)));
  function chain(id) { const out = []; let s = sw[id]; while (s) { out.unshift(s.id); s = sw[s.parent]; } return out.join('\u0000'); }
  leafIds.sort((a, b) => chain(a) < chain(b) ? -1 : chain(a) > chain(b) ? 1 : 0);
  const hostsOfLeaf = {};
  for (const l of leafIds) hostsOfLeaf[l] = [];
  if (!D.aggregated) for (const [h] of D.hosts) hostsOfLeaf[leafOf[h]].push(h);
  const gpusOf = {}; if (!D.aggregated) for (const [h, g] of D.hosts) gpusOf[h] = g;
  let hostW = 0, hostH = 0;
  if (!D.aggregated) for (const [h, g] of D.hosts) {
    const cols = Math.min(8, Math.max(1, g.length)), rows = Math.ceil(g.length / 8);
    hostW = Math.max(hostW, cols * CELL + 8, 8 * h.length + 8); hostH = Math.max(hostH, 18 + rows * CELL + 6);
  }
  if (D.aggregated) { hostW = 170; hostH = 64; }

  function draw(panel, L) {
    const top = (maxLevel + 1) * LEVEL_H + 10;
    const svgEl = svg('svg', {class: 'fabric'});
    const gLinks = svg('g', {}, svgEl), gNodes = svg('g', {}, svgEl), gLabels = svg('g', {}, svgEl);
    const pos = {}; let x = GAP, height = top;
    for (const l of leafIds) {
      const hs = hostsOfLeaf[l], nsub = D.aggregated ? 1 : Math.max(1, Math.ceil(hs.length / ROWS));
      const w = nsub * (hostW + GAP);
      pos[l] = [x + w / 2 - GAP / 2, top - LEVEL_H / 2];
      if (D.aggregated) {
        const [nh, ng] = D.leaves[l] || [0, 0];
        const g = svg('g', {class: 'leaf-agg', 'data-key': 'leaf:' + l, 'data-leaf': l}, gNodes);
        svg('rect', {x: x, y: top, width: hostW, height: hostH, rx: 4}, g);
        const split = (L.tp_split_by_leaf || {})[l] || 0;
        [nh + ' hosts, ' + ng + ' GPUs', split + ' TP groups leave a host', 'under ' + l].forEach((t, i) => {
          svg('text', {x: x + 6, y: top + 16 + 14 * i}, g).textContent = t;
        });
        height = Math.max(height, top + hostH + GAP);
        svg('line', {class: 'link', 'data-key': 'edge:leaf:' + l, x1: x + hostW / 2, y1: top, x2: pos[l][0], y2: pos[l][1] + SW_H / 2}, gLinks);
      }
      hs.forEach((h, i) => {
        const hx = x + Math.floor(i / ROWS) * (hostW + GAP), hy = top + (i % ROWS) * (hostH + GAP);
        const g = svg('g', {class: 'host', 'data-key': 'host:' + h, 'data-host': h}, gNodes);
        svg('rect', {x: hx, y: hy, width: hostW, height: hostH, rx: 4}, g);
        svg('text', {x: hx + 4, y: hy + 12}, g).textContent = h;
        gpusOf[h].forEach((gid, k) => {
          const info = L.gpus[gid];
          const cx = hx + 4 + (k % 8) * CELL, cy = hy + 18 + Math.floor(k / 8) * CELL;
          const c = svg('g', {class: 'gpu', 'data-key': 'gpu:' + gid, 'data-gpu': gid}, g);
          if (info) { c.setAttribute('data-rank', info[0]); c.setAttribute('data-tp', info[1]); }
          svg('rect', {x: cx, y: cy, width: CELL - 2, height: CELL - 2, rx: 3, fill: info ? colour(info[1]) : '#eee'}, c);
          if (info) {
            svg('text', {x: cx + 2, y: cy + 11}, c).textContent = 'p' + info[2];
            svg('text', {x: cx + 2, y: cy + 23}, c).textContent = 'd' + info[3];
            svg('title', {}, c).textContent = gid + ': rank ' + info[0] + ', TP group ' + info[1] + ', PP stage ' + info[2] + ', DP ' + info[3];
          } else svg('title', {}, c).textContent = gid + ': not used';
        });
        // the uplink runs up the gap beside the host's column (a trunk shared with the hosts above), then to the leaf
        const tx = hx + hostW + GAP / 2;
        svg('polyline', {class: 'link', 'data-key': 'edge:host:' + h, fill: 'none',
                         points: [hx + hostW - 6, hy + 6, tx, hy + 6, tx, top - 6, pos[l][0], pos[l][1] + SW_H / 2].join(' ')}, gLinks);
        height = Math.max(height, hy + hostH + GAP);
      });
      x += w + GAP;
    }
    // switches above the leaves: a parent sits over its children
    const byLevel = [];
    for (const s of D.switches) (byLevel[s.level] = byLevel[s.level] || []).push(s);
    let spare = x;
    for (let lv = 0; lv <= maxLevel; lv++) for (const s of byLevel[lv] || []) {
      if (!pos[s.id]) {
        const kids = D.switches.filter(k => k.parent === s.id && pos[k.id]);
        pos[s.id] = kids.length ? [kids.reduce((a, k) => a + pos[k.id][0], 0) / kids.length, 0] : [spare += 120, 0];
      }
      pos[s.id][1] = top - LEVEL_H / 2 - lv * LEVEL_H;
    }
    const names = D.switches.slice();
    if (leafIds.includes('network') && !sw['network']) names.push({id: 'network', parents: 0, parent: null});
    for (const s of names) {
      const [sx, sy] = pos[s.id] || [GAP, GAP];
      const g = svg('g', {class: 'switch', 'data-key': 'switch:' + s.id}, gNodes);
      const label = s.id + (s.parents > 1 ? ' (' + s.parents + ' uplinks)' : '');
      const w = Math.max(60, 6.2 * label.length);
      svg('rect', {x: sx - w / 2, y: sy - SW_H / 2, width: w, height: SW_H, rx: 4}, g);
      svg('text', {x: sx - w / 2 + 4, y: sy + 4}, g).textContent = label;
      if (s.parent && pos[s.parent]) svg('line', {class: 'link', 'data-key': 'edge:switch:' + s.id, x1: sx, y1: sy - SW_H / 2, x2: pos[s.parent][0], y2: pos[s.parent][1] + SW_H / 2}, gLinks);
    }
    svgEl.setAttribute('width', Math.max(x, spare + 120)); svgEl.setAttribute('height', height);
    const wrap = html('div', {class: 'scroll'}, panel); wrap.appendChild(svgEl);
    // bottlenecks
    const list = html('ul', {class: 'bn-list'}, null);
    const marked = [];
    for (const m of L.marks) {
      html('li', {class: 'bn-item', 'data-class': m.cls}, list, m.text);
      for (const key of m.keys) for (const e of svgEl.querySelectorAll('[data-key="' + CSS.escape(key) + '"]')) {
        if (!e.classList.contains('bottleneck')) marked.push(e);
        e.classList.add('bottleneck');
        e.setAttribute('data-bn', ((e.getAttribute('data-bn') || '') + ' ' + m.cls).trim());
      }
    }
    for (const e of marked) {  // one label per marked element naming its classes (GPUs: the outline and their host's label)
      if (e.classList.contains('gpu')) continue;
      const b = e.getBBox(), text = e.getAttribute('data-bn');
      const tag = e.tagName.toLowerCase(), edge = tag === 'line' || tag === 'polyline', agg = e.classList.contains('leaf-agg');
      let lx = edge ? b.x + b.width / 2 + 4 : b.x + b.width - 4, ly = edge ? b.y + b.height / 2 + 4 : (agg ? b.y + b.height - 5 : b.y + 12);
      if (tag === 'polyline') { const p = e.getAttribute('points').split(' ').map(Number); lx = p[2] + 3; ly = p[3] + 12; }  // beside its host
      const t = svg('text', {class: 'bn-label', 'data-class': text, 'text-anchor': edge ? 'start' : 'end', x: lx, y: ly}, gLabels);
      t.textContent = text;
    }
    html('div', {}, panel, 'Bottleneck of each class (red):');
    panel.appendChild(list);
  }

  function bars(panel) {
    const t = html('table', {class: 'bars'}, panel);
    const classes = Object.keys(D.chosen.classes).filter(c => D.chosen.classes[c] > 0 || (D.baseline.classes[c] || 0) > 0);
    for (const c of classes) for (const side of ['chosen', 'baseline']) {
      const max = Math.max(1e-30, D.chosen.classes[c] || 0, D.baseline.classes[c] || 0);  // scaled per class
      const v = D[side].classes[c] || 0;
      const r = html('tr', {class: 'bar-row', 'data-class': c, 'data-layout': side}, t);
      html('td', {}, r, side === 'chosen' ? c : '');
      html('td', {}, r, side);
      const cell = html('td', {style: 'width:60%'}, r);
      html('div', {class: 'bar ' + side, 'data-class': c, 'data-seconds': v, style: 'width:' + (100 * v / max).toFixed(2) + '%'}, cell);
      html('td', {}, r, fmt(v));
    }
  }

  const root = document.getElementById('panels');
  for (const side of ['chosen', 'baseline']) {
    const L = D[side];
    const p = html('section', {class: 'panel', 'data-layout': side}, root);
    html('h2', {}, p, (side === 'chosen' ? 'Chosen' : 'Baseline') + ': order ' + L.order + ', ' + fmt(L.total_seconds) + ' per step');
    draw(p, L);
  }
  bars(document.getElementById('bars'));
  document.body.setAttribute('data-rendered', 'yes');
})();
"""


def render_page(data: Mapping[str, Any]) -> str:
    """The HTML text of a layout page for :func:`rankmap.layout_view.layout_data`'s ``data``."""
    payload = json.dumps(data, separators=(",", ":"), sort_keys=False).replace("<", "\\u003c")
    sizes = " ".join(f"{k}={v}" for k, v in (data.get("sizes") or {}).items())
    imp = data.get("improvement")
    summary = (f"{data.get('world_size')} GPUs, {sizes}, mode {data.get('mode')}, status {data.get('status')}"
               + (f", {100 * float(imp):.1f}% less predicted communication time than the baseline" if imp is not None
                  else ""))
    notes = []
    if data.get("aggregated"):
        notes.append(f"{data.get('host_count')} hosts: more than {data.get('max_hosts')}, so each leaf is drawn as one "
                     "box (its hosts, GPUs and the TP groups that leave a host) instead of every GPU; the host names "
                     "are in the list below.")
    if not data.get("has_fabric"):
        notes.append("No cluster graph given: hosts hang under one 'network' node (give the cluster to see leaves "
                     "and spines).")
    host_list = ""
    if data.get("aggregated"):
        names = data.get("host_names") or []
        more = data.get("host_count", 0) - len(names)
        host_list = (f"<details><summary>{len(names)} host names</summary><p class=\"host-names\">"
                     + html.escape(" ".join(names)) + (f" ... and {more} more" if more > 0 else "")
                     + "</p></details>")
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
        "<title>rankmap layout</title><style>" + _CSS + "</style></head><body>"
        "<h1>rankmap layout: chosen vs baseline</h1>"
        f"<div class=\"summary\">{html.escape(summary)}. GPU colour = TP group; label p = PP stage, d = DP index; "
        "red = the bottleneck link of a class.</div>"
        + "".join(f"<div class=\"note\">{html.escape(n)}</div>" for n in notes)
        + host_list
        + "<noscript>This page draws the layout with JavaScript; enable it to see the picture.</noscript>"
        "<div id=\"panels\" class=\"panels\"></div>"
        "<h2>Predicted time per class (per step; each class's bars scaled to its slower layout)</h2><div id=\"bars\"></div>"
        "<script type=\"application/json\" id=\"rankmap-data\">" + payload + "</script>"
        "<script>" + _JS + "</script></body></html>\n"
    )
