// One trial: a small chart per metric and, while the trial runs, its latest
// values and the tail of its log (GET /api/sweeps/ID/trials/TID), refreshed.
"use strict";
(function () {
  const d = document.body.dataset;
  const API = "/api/sweeps/" + encodeURIComponent(d.sweep);
  const live = ["running", "queued", "pending"].includes(d.state);
  async function draw(node) {
    const metric = node.dataset.metric;
    const c = await SS.json(API + "/curves?max_points=1000&trial=" + encodeURIComponent(d.trial) + "&metric=" + encodeURIComponent(metric));
    const t = c.trials[0];
    const chart = SS.chart(node);
    chart.setOption({
      animation: false, grid: {left: 10, right: 24, top: 16, bottom: 30, containLabel: true},
      tooltip: {trigger: "item", formatter: p => `step ${p.value[0]}: ${SS.exact(p.value[1])}`},
      xAxis: SS.stepAxis("step"), yAxis: {type: "value", scale: true, axisLabel: {formatter: SS.fmt}},
      series: [{type: "line", showSymbol: t.points.length < 50, symbolSize: 6, data: t.points.map(([s, v]) => [s, SS.num(v)]),
        markLine: t.resumes.length ? {symbol: "none", silent: true, lineStyle: {type: "dashed"},
          label: {formatter: p => "attempt " + p.data.attempt, fontSize: 10, position: "insideEndTop"},
          data: t.resumes.map(([step, attempt]) => ({xAxis: step, attempt}))} : undefined}],
    }, {replaceMerge: ["series"]});
    if (t.resumes.length) chart.setOption({series: [{markLine: {data: labelled(chart, t.resumes)}}]});
  }
  // Attempts close together (a sys/ chart's seconds, a quick requeue) would write their labels over each
  // other: each line keeps its dash, but a label only where LABEL_GAP px separate it from the last one shown.
  const LABEL_GAP = 16;  // the labels run up their lines: about one line of 10 px text apart
  function labelled(chart, resumes) {
    let last = -Infinity;
    return resumes.map(([step, attempt]) => {
      const x = chart.convertToPixel({xAxisIndex: 0}, step), show = !(x - last < LABEL_GAP);
      if (show) last = x;
      return {xAxis: step, attempt, label: {show}};
    });
  }
  // A running trial's latest values and log tail, as they come.
  async function details() {
    const t = await SS.json(API + "/trials/" + encodeURIComponent(d.trial));
    const values = Object.keys(t.metrics).length ? t.metrics : t.latest || {};
    if (Object.keys(values).length) {
      document.getElementById("metrics").replaceChildren(...Object.entries(values).map(([k, v]) => {
        const tr = document.createElement("tr"), td = SS.el("td", SS.fmt(v), "num");
        td.title = SS.exact(v); tr.append(SS.el("th", k), td); return tr;
      }));
    }
    if (t.log_tail.length) {
      const pre = document.getElementById("log-tail");
      if (pre) { pre.textContent = t.log_tail.join("\n"); pre.className = "log"; }
      document.getElementById("log-title").textContent = `(attempt ${t.log_attempt}, last ${t.log_tail.length} lines)`;
    }
  }
  const refresh = () => Promise.all([...document.querySelectorAll("#trial-curves .chart")].map(draw).concat(live ? [details()] : []))
    .then(() => { document.body.dataset.refreshed = String(Number(d.refreshed || 0) + 1); });
  SS.poll(refresh, Number(d.poll), () => live);
})();
