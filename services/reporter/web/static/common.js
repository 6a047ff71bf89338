// spotsweep dashboard: helpers shared by the pages. Text from trials is only
// ever set with textContent, never as markup. In an offline report
// (`spotsweep report --html`) the API's answers are inlined in the page, in a
// script element of type application/json with the id spotsweep-data, and
// json() reads them from there instead of the network.
"use strict";
const SS = {
  // The report's inlined data, or null on the dashboard.
  offline() {
    if (SS._data === undefined) {
      const node = document.getElementById("spotsweep-data");
      SS._data = node ? JSON.parse(node.textContent) : null;
    }
    return SS._data;
  },
  // An API answer from the report's data: /api/sweeps/ID[/trials|/best|/importance|/seeds|/timeline|/cost|/resources|/curves?metric=M].
  fromReport(url) {
    const d = SS.offline(), u = new URL(url, "http://report.invalid/");
    const tail = u.pathname.replace(/^\/api\/sweeps\/[^/]+/, ""), metric = u.searchParams.get("metric");
    const curves = Object.prototype.hasOwnProperty.call(d.curves, metric) ? d.curves[metric] : undefined;
    const panels = {"": d.sweep, "/trials": d.trials, "/best": d.best, "/importance": d.importance, "/seeds": d.seeds,
                    "/timeline": d.timeline, "/cost": d.cost, "/resources": d.resources};
    const answer = tail === "/curves" ? curves : Object.prototype.hasOwnProperty.call(panels, tail) ? panels[tail] : undefined;
    if (answer === undefined) throw new Error("not in this report: " + url);
    return answer;
  },
  async json(url) {
    if (SS.offline()) return SS.fromReport(url);
    const r = await fetch(url, {cache: "no-store"});
    if (!r.ok) throw new Error(url + ": " + r.status);
    return r.json();
  },
  // The API keeps non-finite values as the strings "NaN", "Infinity", "-Infinity": charts draw them as gaps.
  num(v) { return typeof v === "number" ? v : null; },
  // Non-finite values read as the CLI, the report and the CSV write them: nan, inf, -inf.
  NONFINITE: {"NaN": "nan", "Infinity": "inf", "-Infinity": "-inf"},
  fmt(v) {
    if (v === null || v === undefined) return "";
    if (typeof v === "string" && Object.hasOwn(SS.NONFINITE, v)) return SS.NONFINITE[v];
    if (typeof v === "number") {  // by magnitude: 4 significant digits (SS.exact gives all of them)
      const a = Math.abs(v);
      if (Number.isInteger(v) && a < 1e6) return String(v);
      const text = a !== 0 && (a < 1e-3 || a >= 1e6) ? v.toExponential(3) : v.toPrecision(4);
      return text.replace(/\.?0+(e|$)/, "$1").replace(/\.(\d*?)0+(e|$)/, ".$1$2").replace("e+", "e");
    }
    if (typeof v === "object") return JSON.stringify(v);
    return String(v);
  },
  // The value as stored, every digit (a cell's or a point's hover text).
  exact(v) { return typeof v === "number" ? String(v) : SS.fmt(v); },
  // A time as the page shows it: UTC to the second ("2026-01-01 00:01:40").
  time(ms) { return new Date(ms).toISOString().replace("T", " ").replace(/\.\d+Z$/, ""); },
  // Axes every chart shares. A value axis's name runs along it, left of its
  // labels (formatted by magnitude), so a long name is never clipped and a
  // legend on top never covers it; a time axis never ticks below a second
  // and drops labels that would overlap.
  GRID: {left: 78, right: 24, top: 30, bottom: 40},
  valueAxis(name, more) {
    return {type: "value", scale: true, name, nameLocation: "middle", nameGap: 58,
            nameTextStyle: {width: 300, overflow: "truncate"}, axisLabel: {formatter: SS.fmt}, ...(more || {})};
  },
  stepAxis(name) { return {type: "value", name, nameLocation: "middle", nameGap: 24, axisLabel: {formatter: SS.fmt}}; },
  timeAxis() { return {type: "time", minInterval: 1000, axisLabel: {hideOverlap: true}}; },
  // ECharts tooltips are HTML: every name in one goes through this.
  esc(text) { return echarts.format.encodeHTML(String(text)); },
  el(tag, text, cls) {
    const e = document.createElement(tag);
    if (text !== undefined && text !== null) e.textContent = text;
    if (cls) e.className = cls;
    return e;
  },
  chart(id) {
    const node = typeof id === "string" ? document.getElementById(id) : id;
    const c = echarts.getInstanceByDom(node) || echarts.init(node, null, {renderer: "canvas"});
    window.addEventListener("resize", () => c.resize());
    return c;
  },
  trialUrl(sweep, trial) { return "/sweeps/" + encodeURIComponent(sweep) + "/trials/" + encodeURIComponent(trial); },
  // The page's live line: what it says while polling works.
  live(node, text) { if (node) { node.textContent = text; node.classList.remove("disconnected"); } },
  // Call fn every ms while keepGoing(); when a call fails, `status` (the live
  // line) says so, and polling goes on: the next success says live again.
  poll(fn, ms, keepGoing, status) {
    const tick = async () => {
      try { await fn(); } catch (e) {
        console.warn("refresh failed:", e.message);
        if (status) {
          status.textContent = `· disconnected: the dashboard did not answer (${e.message}); the page shows what it had at ` +
            SS.time(Date.now()) + ", retrying every " + ms / 1000 + " s";
          status.classList.add("disconnected");
        }
      }
      if (keepGoing()) setTimeout(tick, ms);
    };
    return tick();
  },
};
