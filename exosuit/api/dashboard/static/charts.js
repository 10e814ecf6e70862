// Charts: a device's usage and the fleet's allocation over time, drawn by the console's
// own small SVG code. Inline SVG is built element by element (createElementNS) with
// presentation attributes only (no style attribute, no script, nothing fetched): the
// page's Content-Security-Policy has nothing to refuse. Text goes in as text nodes, as
// dom.js's h() does for HTML.
//
// The data is the public API at microversion 2.11: GET /v2/devices/{uuid}/usage_history
// and GET /v2/allocation_history (doc/dashboard.md, "Charts").

import * as api from "./api.js";
import { h, section } from "./dom.js";

export const HISTORY_VERSION = "2.11";
export const DEVICE_WINDOW = 6 * 3600; // seconds: the device page's "last 6 hours"
export const FLEET_WINDOW = 24 * 3600; // the fleet page's "last 24 hours"

const NS = "http://www.w3.org/2000/svg";
const WIDTH = 880;
const HEIGHT = 240;
const PLOT = { left: 64, top: 10, right: 12, bottom: 30 }; // margins around the plot
const COLORS = ["#2f6fb0", "#c2571a", "#3b8a3e", "#8a3b8a"];
const GIB = 2 ** 30;

// svg("path", {d: "M0 0"}, children…) → an SVG element (text children as text nodes).
function svg(tag, attrs = {}, ...children) {
  const element = document.createElementNS(NS, tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value !== null && value !== undefined && value !== false) element.setAttribute(name, String(value));
  }
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    element.appendChild(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return element;
}

// A figure's unit, from the suffix of its name (doc/drivers.md, "Usage figures").
export function unitOf(figure) {
  if (figure.endsWith("_percent")) return "percent";
  if (figure.endsWith("_bytes")) return "bytes";
  return "count";
}

// A value in human units: "42 %", "3.5 GiB", "12".
export function formatValue(value, unit) {
  if (unit === "percent") return `${Math.round(value)} %`;
  if (unit === "bytes") {
    const gib = value / GIB;
    return `${gib >= 10 || gib === 0 ? Math.round(gib) : gib.toFixed(1)} GiB`;
  }
  return Number.isInteger(value) ? String(value) : value.toFixed(1);
}

// A time on the x axis: "14:05", with the day for a window longer than 12 hours.
const clock = (ms, window) =>
  new Date(ms).toLocaleString([], { weekday: window > 12 * 3600 ? "short" : undefined, hour: "2-digit", minute: "2-digit" });

// The top of the y axis: ``max`` when given; for counts, a multiple of 4 at or above
// the largest value (whole numbers on every tick); else a tenth above the largest value.
function topOf(max, values, unit) {
  if (max !== undefined) return max;
  const largest = Math.max(0, ...values);
  if (unit === "count") return 4 * Math.max(1, Math.ceil(largest / 4));
  return largest > 0 ? largest * 1.1 : 1;
}

// A chart: ``series`` [{name, points: [{t: ms, v}], area}] over [now - window, now],
// the y axis from 0 to ``max`` (the data's largest value when not given) in ``unit``.
// The plot area is the <rect class="plot">; each series one <path class="series">
// (and, for an area, a filled <path class="area"> under it).
export function lineChart({ title, series, unit, max, window, now = Date.now() }) {
  const width = WIDTH - PLOT.left - PLOT.right;
  const height = HEIGHT - PLOT.top - PLOT.bottom;
  const start = now - window * 1000;
  const values = series.flatMap((s) => s.points.map((p) => p.v));
  const top = topOf(max, values, unit);
  const x = (t) => PLOT.left + ((t - start) / (now - start)) * width;
  const y = (v) => PLOT.top + (1 - Math.min(Math.max(v, 0), top) / top) * height;
  const ticks = [0, 0.25, 0.5, 0.75, 1].map((f) => f * top);
  const grid = ticks.map((v) => [
    svg("line", { x1: PLOT.left, x2: PLOT.left + width, y1: y(v), y2: y(v), stroke: "#ddd", "stroke-width": 1 }),
    svg("text", { x: PLOT.left - 6, y: y(v) + 4, "text-anchor": "end", "font-size": 12, fill: "currentColor" }, formatValue(v, unit)),
  ]);
  const times = [start, (start + now) / 2, now].map((t, i) =>
    svg("text", { x: x(t), y: HEIGHT - 10, "text-anchor": ["start", "middle", "end"][i], "font-size": 12, fill: "currentColor" }, clock(t, window)),
  );
  const drawn = series.map((s, i) => {
    const color = COLORS[i % COLORS.length];
    const runs = runsOf(s.points);
    const line = runs.map((run) => run.map((p, j) => `${j ? "L" : "M"}${x(p.t).toFixed(1)} ${y(p.v).toFixed(1)}`).join(" ")).join(" ");
    const shapes = [];
    if (s.area) {
      const fill = runs
        .map((run) => `M${x(run[0].t).toFixed(1)} ${y(0)} ${run.map((p) => `L${x(p.t).toFixed(1)} ${y(p.v).toFixed(1)}`).join(" ")} L${x(run[run.length - 1].t).toFixed(1)} ${y(0)} Z`)
        .join(" ");
      shapes.push(svg("path", { class: "area", d: fill, fill: color, "fill-opacity": 0.15, stroke: "none" }));
    }
    shapes.push(svg("path", { class: "series", "data-name": s.name, d: line, fill: "none", stroke: color, "stroke-width": 2, "stroke-linejoin": "round" }));
    // A point alone (no line to draw) is a dot.
    for (const run of runs) {
      if (run.length === 1) shapes.push(svg("circle", { cx: x(run[0].t), cy: y(run[0].v), r: 3, fill: color }));
    }
    return shapes;
  });
  const chart = svg(
    "svg",
    { viewBox: `0 0 ${WIDTH} ${HEIGHT}`, width: "100%", role: "img", "aria-label": title, preserveAspectRatio: "xMidYMid meet" },
    svg("title", {}, title),
    grid,
    svg("rect", { class: "plot", x: PLOT.left, y: PLOT.top, width, height, fill: "none", stroke: "#bbb", "stroke-width": 1 }),
    times,
    drawn,
  );
  const legend = h(
    "p",
    { class: "muted" },
    series.map((s, i) => {
      const last = s.points.length ? formatValue(s.points[s.points.length - 1].v, unit) : "—";
      return h("span", {}, i ? " · " : "", h("strong", {}, s.name), ` ${last} now`);
    }),
  );
  return h("figure", { class: "chart" }, h("figcaption", {}, h("strong", {}, title)), chart, legend);
}

// The points split where a gap is more than 2.5 times the usual step (a host that did
// not report): the line is not drawn across it.
function runsOf(points) {
  if (points.length < 3) return points.length ? [points] : [];
  const steps = points.slice(1).map((p, i) => p.t - points[i].t).sort((a, b) => a - b);
  const usual = steps[Math.floor(steps.length / 2)];
  const runs = [[points[0]]];
  for (let i = 1; i < points.length; i++) {
    if (points[i].t - points[i - 1].t > 2.5 * usual) runs.push([]);
    runs[runs.length - 1].push(points[i]);
  }
  return runs;
}

const pointsOf = (list, key = "value") =>
  (list || []).map((p) => ({ t: Date.parse(p.at), v: Number(p[key]) })).filter((p) => !Number.isNaN(p.t));

const hours = (seconds) => `${Math.round(seconds / 3600)} hours`;

function unavailable(history) {
  return h("p", { class: "muted" }, `History unavailable: ${history.error}`);
}

// -- the device page ----------------------------------------------------------------------

// The device's usage history ({error} when the API refused: shown, not thrown).
export async function deviceUsage(uuid) {
  const path = api.withQuery(`v2/devices/${encodeURIComponent(uuid)}/usage_history`, { window: DEVICE_WINDOW });
  try {
    return await api.get(path, HISTORY_VERSION);
  } catch (error) {
    return { error: error.message };
  }
}

// "Usage over the last 6 hours": utilisation (%), memory (used and total, GiB), then
// any other figure the driver reports; "No usage reported yet" when there is none.
export function deviceUsageSection(history) {
  const title = `Usage over the last ${hours(history.window || DEVICE_WINDOW)}`;
  if (history.error) return section(title, unavailable(history));
  const figures = history.figures || {};
  const charts = [];
  const options = { window: history.window };
  if (figures.utilization_percent) {
    charts.push(lineChart({ ...options, title: "Utilisation", unit: "percent", max: 100, series: [{ name: "utilisation", points: pointsOf(figures.utilization_percent), area: true }] }));
  }
  if (figures.memory_used_bytes || figures.memory_total_bytes) {
    const series = [];
    if (figures.memory_used_bytes) series.push({ name: "used", points: pointsOf(figures.memory_used_bytes), area: true });
    if (figures.memory_total_bytes) series.push({ name: "total", points: pointsOf(figures.memory_total_bytes) });
    charts.push(lineChart({ ...options, title: "Memory", unit: "bytes", series }));
  }
  const shown = ["utilization_percent", "memory_used_bytes", "memory_total_bytes"];
  for (const name of Object.keys(figures).filter((n) => !shown.includes(n)).sort()) {
    const unit = unitOf(name);
    charts.push(lineChart({ ...options, title: name, unit, max: unit === "percent" ? 100 : undefined, series: [{ name, points: pointsOf(figures[name]) }] }));
  }
  if (!charts.length) return section(title, h("p", { class: "muted empty-chart" }, "No usage reported yet."));
  return section(title, h("div", { class: "charts" }, charts), h("p", { class: "muted" }, `From the ${history.source}.`));
}

// -- the fleet page -----------------------------------------------------------------------

export async function fleetAllocation() {
  const path = api.withQuery("v2/allocation_history", { window: FLEET_WINDOW });
  try {
    return await api.get(path, HISTORY_VERSION);
  } catch (error) {
    return { error: error.message };
  }
}

// "Allocation over the last 24 hours": for each device model, its attach handles held
// (an area) and free (a line).
export function fleetAllocationSection(history) {
  const title = `Allocation over the last ${hours(history.window || FLEET_WINDOW)}`;
  if (history.error) return section(title, unavailable(history));
  const models = history.models || [];
  if (!models.length) return section(title, h("p", { class: "muted empty-chart" }, "No allocation recorded yet."));
  const charts = models.map((m) =>
    lineChart({
      title: `${m.type} ${m.vendor} ${m.model}`,
      unit: "count",
      window: history.window,
      series: [
        { name: "held", points: pointsOf(m.points, "held"), area: true },
        { name: "free", points: pointsOf(m.points, "free") },
      ],
    }),
  );
  return section(title, h("div", { class: "charts" }, charts), h("p", { class: "muted" }, `From the ${history.source}.`));
}
