// Hand-written SVG charts for the console: a stacked bar chart. Every label is set with
// textContent, never parsed as markup.
"use strict";

const FerryCharts = (() => {
  const NS = "http://www.w3.org/2000/svg";
  const COLORS = ["#1d4ed8", "#f59e0b", "#10b981", "#ef4444", "#8b5cf6", "#06b6d4", "#84cc16",
                  "#ec4899", "#64748b", "#a16207"];

  function el(name, attrs) {
    const e = document.createElementNS(NS, name);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, String(v));
    return e;
  }

  // periods: ["2026-01-01", ...]; groups: ["team-a", ...]; value(period, group) -> number.
  function stackedBars(periods, groups, value, opts) {
    const width = (opts && opts.width) || 900, height = (opts && opts.height) || 260;
    const pad = { left: 70, right: 10, top: 10, bottom: 40 };
    const svg = el("svg", { class: "chart", width, height, viewBox: `0 0 ${width} ${height}`,
                            role: "img" });
    let max = 0;
    for (const p of periods) {
      let sum = 0;
      for (const g of groups) sum += Math.max(0, value(p, g));
      max = Math.max(max, sum);
    }
    if (max <= 0) max = 1;
    const plotW = width - pad.left - pad.right, plotH = height - pad.top - pad.bottom;
    const bw = periods.length ? plotW / periods.length : plotW;
    for (let t = 0; t <= 4; t++) {
      const y = pad.top + plotH - (plotH * t) / 4;
      svg.appendChild(el("line", { x1: pad.left, x2: width - pad.right, y1: y, y2: y,
                                   stroke: "#e5e7eb" }));
      const label = el("text", { x: pad.left - 6, y: y + 4, "text-anchor": "end",
                                 "font-size": 11, fill: "#6b7280" });
      label.textContent = ((max * t) / 4).toFixed(max < 1 ? 4 : 2);
      svg.appendChild(label);
    }
    periods.forEach((p, i) => {
      let y = pad.top + plotH;
      groups.forEach((g, gi) => {
        const v = Math.max(0, value(p, g));
        const h = (v / max) * plotH;
        if (h > 0) {
          const r = el("rect", { x: pad.left + i * bw + 1, y: y - h, width: Math.max(1, bw - 2),
                                 height: h, fill: COLORS[gi % COLORS.length] });
          const tip = el("title");
          tip.textContent = `${p} ${g}: ${v}`;
          r.appendChild(tip);
          svg.appendChild(r);
          y -= h;
        }
      });
      if (periods.length <= 16 || i % Math.ceil(periods.length / 16) === 0) {
        const label = el("text", { x: pad.left + i * bw + bw / 2, y: height - pad.bottom + 14,
                                   "text-anchor": "middle", "font-size": 10, fill: "#374151" });
        label.textContent = p;
        svg.appendChild(label);
      }
    });
    return svg;
  }

  function legend(groups) {
    const div = document.createElement("div");
    div.className = "legend";
    groups.forEach((g, gi) => {
      const s = document.createElement("span");
      const i = document.createElement("i");
      i.style.background = COLORS[gi % COLORS.length];
      s.appendChild(i);
      s.appendChild(document.createTextNode(g === "" ? "(none)" : g));
      div.appendChild(s);
    });
    return div;
  }

  return { stackedBars, legend };
})();
