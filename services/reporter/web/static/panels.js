// The sweep page's further panels: mean and spread over seeds, best so far
// against GPU-hours, cost against on demand, the trials on the agents' slots,
// and resource use. Each draws one API answer (SS.json: the network, or the
// report's inlined data); sweep.js calls them on every refresh.
"use strict";
const PANELS = (function () {
  const OUTCOME_COLOURS = {completed: "#1a9850", failed: "#d73027", preempted: "#f28e2b", lost: "#9c755f",
                           pruned: "#edc948", cancelled: "#9ca3af", running: "#4e79a7", ended: "#bab0ac"};
  const note = (id, text) => { document.getElementById(id).textContent = text; };

  async function seeds(api) {
    const s = await SS.json(api + "/seeds");
    const card = document.getElementById("seeds-card");
    card.hidden = s.repeats <= 1;
    if (card.hidden) return;
    note("seeds-note", s.reason || `${s.configs.length} configs × ${s.repeats} seeds, best mean first; ` +
      `curves: the best ${s.curves.length}, mean ± one standard deviation`);
    document.querySelector("#seeds-table tbody").replaceChildren(...s.configs.slice(0, 200).map((c, i) => {
      const tr = document.createElement("tr");
      tr.append(SS.el("td", i + 1, "num"), SS.el("td", c.label), SS.el("td", SS.fmt(c.mean), "num"),
                SS.el("td", c.std === null ? "" : SS.fmt(c.std), "num"), SS.el("td", `${c.n}/${c.runs}`, "num"));
      return tr;
    }));
    const series = [];
    const palette = ["#5470c6", "#91cc75", "#fac858", "#ee6666", "#73c0de", "#3ba272", "#fc8452", "#9a60b4"];
    s.curves.forEach((c, i) => {
      const colour = palette[i % palette.length];
      const band = c.points.filter(p => typeof p[2] === "number" && typeof p[3] === "number");
      // the band: one polygon along the upper edge and back along the lower one
      series.push({name: c.label, type: "custom", silent: true, data: [0], z: 1, tooltip: {show: false},
        renderItem(params, api) {
          const edge = [...band.map(p => api.coord([p[0], p[3]])), ...band.slice().reverse().map(p => api.coord([p[0], p[2]]))];
          return {type: "polygon", shape: {points: edge}, style: {fill: colour, opacity: 0.15}};
        }});
      series.push({name: c.label, type: "line", symbol: "none", z: 2, itemStyle: {color: colour}, lineStyle: {color: colour},
                   data: c.points.map(p => [p[0], SS.num(p[1]), p[4]])});
    });
    SS.chart("seeds").setOption({
      animation: false, grid: SS.GRID, legend: {type: "scroll", top: 0, left: 80},
      tooltip: {trigger: "item", formatter: p => `${SS.esc(p.seriesName)}<br>step ${p.value[0]}: mean ${SS.exact(p.value[1])} (${p.value[2]} seeds)`},
      xAxis: {type: "value", name: "step", nameLocation: "middle", nameGap: 25}, yAxis: SS.valueAxis(s.metric), series,
    }, {replaceMerge: ["series"]});
  }

  function bestGpu(best) {
    const unit = best.unit || "GPU-hours";  // slot-hours for a CPU sweep
    document.getElementById("best-gpu-title").textContent = "Best so far against " + unit;
    const data = best.points.map(p => ({value: [p.gpu_hours, p.value], name: p.trial_name}));
    SS.chart("best-gpu").setOption({
      animation: false, grid: SS.GRID,
      tooltip: {trigger: "item", formatter: p => `${SS.esc(p.name)}<br>${SS.exact(p.value[1])} after ${SS.fmt(p.value[0])} ${unit}`},
      xAxis: {type: "value", name: unit, nameLocation: "middle", nameGap: 25, axisLabel: {formatter: SS.fmt}}, yAxis: SS.valueAxis(best.metric),
      series: [{type: "line", step: "end", data, symbolSize: 6}],
    }, {replaceMerge: ["series"]});
  }

  async function cost(api) {
    const c = await SS.json(api + "/cost");
    const money = v => v === null ? "–" : v.toFixed(2), unit = c.unit || "GPU-hours", h = unit.replace("hours", "h");
    note("cost-note", c.pricing === null ? `${c.gpu_hours.toFixed(2)} ${h}; ${c.reason}` :
      `${c.gpu_hours.toFixed(2)} ${h}: ${money(c.cost)} spot` + (c.on_demand === null ? ` (${c.reason})` :
        ` vs ${money(c.on_demand)} on demand, saved ${money(c.saving)} (${(100 * (c.saving_share || 0)).toFixed(0)}%)`));
    const line = (name, key) => ({name, type: "line", step: "end", symbol: "none", data: c.curve.map(p => [p.time, p[key]])});
    const series = c.pricing === null ? [line(unit, "gpu_hours")]
      : [line("spot", "cost"), ...(c.pricing.on_demand_gpu_hour === null ? [] : [line("on demand", "on_demand")])];
    SS.chart("cost").setOption({
      animation: false, grid: SS.GRID, legend: {top: 0, left: 80},
      tooltip: {trigger: "axis", valueFormatter: SS.exact}, xAxis: SS.timeAxis(),
      yAxis: SS.valueAxis(c.pricing === null ? unit : "cost", {scale: false}), series,
    }, {replaceMerge: ["series"]});
  }

  async function timeline(api) {
    const t = await SS.json(api + "/timeline");
    const lanes = t.lanes.map(l => `${l.agent} · slot ${l.slot + 1}`);
    const now = Date.parse(t.now);
    const data = t.runs.map(r => ({name: r.trial_name, itemStyle: {color: OUTCOME_COLOURS[r.outcome] || "#bab0ac"},
      value: [r.lane, Date.parse(r.start), r.end ? Date.parse(r.end) : now, r.attempt, r.note || r.outcome,
              Date.parse(r.start) - 1000 * (r.staging || 0)]}));
    const lost = t.runs.filter(r => r.outcome === "lost");
    note("timeline-note", t.total ? `${t.total} runs on ${t.lanes.length} slots` +
      (t.total > t.runs.length ? ` (the latest ${t.runs.length} drawn)` : "") +
      "; colour: the run's outcome (orange: preempted, yellow: pruned, brown: lost; pale: staging inputs)" +
      lost.slice(0, 3).map(r => `; ${r.trial_name} attempt ${r.attempt}: ${r.note}`).join("") : "no run has started yet");
    const chart = SS.chart("timeline");
    chart.getDom().style.height = Math.max(200, Math.min(900, 60 + 22 * lanes.length)) + "px";
    chart.resize();
    chart.setOption({
      animation: false, grid: {left: 180, right: 20, top: 10, bottom: 50},
      tooltip: {trigger: "item", formatter: p => `${SS.esc(p.name)} attempt ${p.value[3]}: ${p.value[4]}<br>` +
        `${SS.esc(lanes[p.value[0]])}<br>${SS.time(p.value[1])} – ${SS.time(p.value[2])}` +
        (p.value[5] < p.value[1] ? `<br>staging ${SS.fmt((p.value[1] - p.value[5]) / 1000)} s before` : "")},
      dataZoom: [{type: "inside", filterMode: "weakFilter"}, {type: "slider", height: 18, bottom: 4, filterMode: "weakFilter"}],
      xAxis: SS.timeAxis(), yAxis: {type: "category", data: lanes, inverse: true},
      series: [{type: "custom", encode: {x: [5, 2], y: 0}, data, progressive: 5000,
        renderItem(params, api) {
          const lane = api.value(0), h = api.size([0, 1])[1] * 0.7, sys = params.coordSys;
          const box = (from, to, style) => {
            const a = api.coord([from, lane]), b = api.coord([to, lane]);
            const shape = echarts.graphic.clipRectByRect({x: a[0], y: a[1] - h / 2, width: Math.max(1, b[0] - a[0]), height: h},
              {x: sys.x, y: sys.y, width: sys.width, height: sys.height});
            return shape && {type: "rect", shape, style};
          };
          const run = box(api.value(1), api.value(2), api.style());
          if (!(api.value(5) < api.value(1))) return run;
          const staging = box(api.value(5), api.value(1), api.style({opacity: 0.35}));
          return {type: "group", children: [staging, run].filter(Boolean)};
        }}],
    }, {replaceMerge: ["series"]});
  }

  async function resources(api) {
    const r = await SS.json(api + "/resources");
    const box = document.getElementById("resources");
    note("resources-note", r.metrics.length
      ? `${r.metrics.join(", ")} of ${r.trials.length} trial(s) (running ones first) against each trial's running seconds`
      : "no sys/ samples yet (agents send them while trials run)");
    for (const name of r.metrics) {
      let node = box.querySelector(`[data-metric="${CSS.escape(name)}"]`);
      if (!node) {
        node = SS.el("div", null, "chart small"); node.dataset.metric = name; node.style.flex = "1 1 420px";
        box.append(node);
      }
      const series = r.trials.filter(t => t.series[name]).map(t => ({
        name: t.trial_name, type: "line", showSymbol: t.series[name].length < 2, data: t.series[name].map(([s, v]) => [s, SS.num(v)])}));
      SS.chart(node).setOption({
        animation: false, title: {text: name, textStyle: {fontSize: 12}}, grid: SS.GRID,
        tooltip: {trigger: "item", formatter: p => `${SS.esc(p.seriesName)}<br>${p.value[0]} s: ${SS.exact(p.value[1])}`},
        xAxis: SS.stepAxis("running seconds"), yAxis: SS.valueAxis(""), series,
      }, {replaceMerge: ["series"]});
    }
  }

  return {seeds, bestGpu, cost, timeline, resources};
})();
