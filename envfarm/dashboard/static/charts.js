// envfarm dashboard: DOM helper and small SVG charts (no dependencies).
"use strict";

const SVG_NS = "http://www.w3.org/2000/svg";
const PALETTE = ["#1f6feb", "#d97706", "#16a34a", "#dc2626", "#7c3aed", "#0891b2"];

// h("div", {class: "x", onclick: fn}, "text", child, [children]) -> element; text is never parsed as HTML.
function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else if (k === "text") el.textContent = v;
    else el.setAttribute(k, v === true ? "" : String(v));
  }
  appendAll(el, children);
  return el;
}

// Replace the children of ``el`` (null/false children are skipped).
function put(el, ...children) {
  el.replaceChildren();
  appendAll(el, children);
  return el;
}

function appendAll(el, children) {
  for (const c of children.flat(Infinity)) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
}

function svg(tag, attrs, ...children) {
  const el = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v !== null && v !== undefined) el.setAttribute(k, String(v));
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

function fmtNum(v, digits) {
  if (v === null || v === undefined || Number.isNaN(v)) return "–";
  const a = Math.abs(v);
  if (digits !== undefined) return v.toFixed(digits);
  if (a !== 0 && (a < 1e-3 || a >= 1e6)) return v.toExponential(1);
  if (Number.isInteger(v)) return String(v);
  return a >= 100 ? v.toFixed(0) : a >= 1 ? v.toFixed(2) : v.toFixed(3);
}

function niceTicks(lo, hi, n) {
  if (!(hi > lo)) { hi = lo + 1; }
  const raw = (hi - lo) / n;
  const mag = Math.pow(10, Math.floor(Math.log10(raw)));
  const step = [1, 2, 2.5, 5, 10].map((m) => m * mag).find((s) => s >= raw) || raw;
  const ticks = [];
  for (let t = Math.ceil(lo / step) * step; t <= hi + step * 1e-9; t += step) ticks.push(+t.toFixed(12));
  return ticks;
}

// lineChart({title, series: [{name, points: [[x, y], ...], color}], xLabel, yMin, yMax, height})
// -> a <figure> with an SVG line chart; points whose y is null are skipped (the line joins its neighbours).
function lineChart(opts) {
  const W = 440, H = opts.height || 180, L = 46, R = 10, T = 10, B = 28;
  const series = (opts.series || []).filter((s) => (s.points || []).some((p) => p[1] !== null && p[1] !== undefined));
  const pts = series.flatMap((s) => s.points.filter((p) => p[1] !== null && p[1] !== undefined));
  const fig = h("figure", {class: "chart", "data-title": opts.title || ""},
    h("figcaption", {}, opts.title || ""));
  if (!pts.length) {
    fig.append(h("div", {class: "chart-empty muted"}, opts.empty || "no data yet"));
    return fig;
  }
  let x0 = Math.min(...pts.map((p) => p[0])), x1 = Math.max(...pts.map((p) => p[0]));
  let y0 = opts.yMin !== undefined ? opts.yMin : Math.min(...pts.map((p) => p[1]));
  let y1 = opts.yMax !== undefined ? opts.yMax : Math.max(...pts.map((p) => p[1]));
  if (x1 === x0) { x0 -= 1; x1 += 1; }
  if (y1 === y0) {
    if (opts.yMin !== undefined) y1 = y0 + (Math.abs(y0) || 1);
    else { y0 -= Math.abs(y0) * 0.1 || 1; y1 += Math.abs(y1) * 0.1 || 1; }
  }
  const sx = (x) => L + (x - x0) / (x1 - x0) * (W - L - R);
  const sy = (y) => T + (1 - (y - y0) / (y1 - y0)) * (H - T - B);
  const root = svg("svg", {viewBox: `0 0 ${W} ${H}`, class: "chart-svg", role: "img"});
  for (const t of niceTicks(y0, y1, 4)) {
    root.append(svg("line", {x1: L, x2: W - R, y1: sy(t), y2: sy(t), class: "grid"}),
      svg("text", {x: L - 6, y: sy(t) + 4, class: "tick", "text-anchor": "end"}, fmtNum(t)));
  }
  for (const t of niceTicks(x0, x1, 5)) {
    root.append(svg("text", {x: sx(t), y: H - 10, class: "tick", "text-anchor": "middle"},
      opts.xFormat ? opts.xFormat(t) : fmtNum(t)));
  }
  root.append(svg("line", {x1: L, x2: W - R, y1: H - B, y2: H - B, class: "axis"}));
  if (opts.xLabel) root.append(svg("text", {x: W - R, y: H - 0.5, class: "tick", "text-anchor": "end"}, opts.xLabel));
  series.forEach((s, i) => {
    const color = s.color || PALETTE[i % PALETTE.length];
    const known = s.points.filter((p) => p[1] !== null && p[1] !== undefined);  // missing values are skipped
    const d = known.map(([x, y], j) => `${j ? "L" : "M"}${sx(x).toFixed(1)},${sy(y).toFixed(1)}`).join("");
    root.append(svg("path", {d, class: "line", stroke: color}));
    if (known.length <= 40 || s.dots) {
      for (const [x, y] of known) {
        root.append(svg("circle", {cx: sx(x), cy: sy(y), r: 2.4, fill: color},
          svg("title", {}, `${s.name}: ${fmtNum(y)} at ${fmtNum(x)}`)));
      }
    }
  });
  fig.append(root);
  if (series.length > 1 || opts.legend) {
    fig.append(h("div", {class: "legend"}, series.map((s, i) =>
      h("span", {}, h("i", {style: `background:${s.color || PALETTE[i % PALETTE.length]}`}), s.name))));
  }
  return fig;
}

// A horizontal stacked bar of fractions {name: share} with a legend.
function splitBar(parts, colors) {
  const names = Object.keys(parts);
  const bar = h("div", {class: "split-bar", id: "time-split"});
  const legend = h("div", {class: "legend"});
  names.forEach((n, i) => {
    const share = Math.max(0, parts[n] || 0);
    const color = (colors && colors[n]) || PALETTE[i % PALETTE.length];
    if (share > 0) bar.append(h("span", {style: `width:${(share * 100).toFixed(2)}%;background:${color}`,
      title: `${n} ${(share * 100).toFixed(1)}%`}));
    legend.append(h("span", {"data-part": n}, h("i", {style: `background:${color}`}),
      `${n} ${(share * 100).toFixed(1)}%`));
  });
  return h("div", {class: "split"}, bar, legend);
}

// Vertical bars [{label, value, lo, hi}] (an interval drawn as a whisker when given).
function barChart(opts) {
  const W = 440, H = opts.height || 180, L = 46, T = 10, B = 28;
  const bars = opts.bars || [];
  const fig = h("figure", {class: "chart"}, h("figcaption", {}, opts.title || ""));
  if (!bars.length) { fig.append(h("div", {class: "chart-empty muted"}, "no data yet")); return fig; }
  const top = 1.12 * Math.max(opts.yMax || 0, ...bars.map((b) => Math.max(b.value || 0, b.hi || 0))) || 1;
  const sy = (y) => T + (1 - y / top) * (H - T - B);
  const root = svg("svg", {viewBox: `0 0 ${W} ${H}`, class: "chart-svg"});
  for (const t of niceTicks(0, top, 4)) {
    root.append(svg("line", {x1: L, x2: W - 10, y1: sy(t), y2: sy(t), class: "grid"}),
      svg("text", {x: L - 6, y: sy(t) + 4, class: "tick", "text-anchor": "end"}, fmtNum(t)));
  }
  const slot = (W - L - 10) / bars.length;
  bars.forEach((b, i) => {
    const x = L + i * slot + slot * 0.2, w = slot * 0.6, color = b.color || PALETTE[i % PALETTE.length];
    root.append(svg("rect", {x, y: sy(b.value || 0), width: w, height: sy(0) - sy(b.value || 0), fill: color},
      svg("title", {}, `${b.label}: ${fmtNum(b.value)}`)));
    root.append(svg("text", {x: x + w / 2, y: sy(b.value || 0) - 4, class: "tick", "text-anchor": "middle"},
      fmtNum(b.value, 3)));
    if (b.lo !== undefined && b.hi !== undefined && b.lo !== null) {
      root.append(svg("line", {x1: x + w / 2, x2: x + w / 2, y1: sy(b.lo), y2: sy(b.hi), class: "whisker"}));
    }
    root.append(svg("text", {x: x + w / 2, y: H - 10, class: "tick", "text-anchor": "middle"}, b.label));
  });
  fig.append(root);
  return fig;
}
