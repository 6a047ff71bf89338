// One trial: a small chart per metric, refreshed while the trial runs.
"use strict";
(function () {
  const d = document.body.dataset;
  const API = "/api/sweeps/" + encodeURIComponent(d.sweep);
  const live = ["running", "queued", "pending"].includes(d.state);
  async function draw(node) {
    const metric = node.dataset.metric;
    const c = await SS.json(API + "/curves?max_points=1000&trial=" + encodeURIComponent(d.trial) + "&metric=" + encodeURIComponent(metric));
    const t = c.trials[0];
    SS.chart(node).setOption({
      animation: false, grid: {left: 60, right: 16, top: 16, bottom: 30},
      tooltip: {trigger: "item", formatter: p => `step ${p.value[0]}: ${SS.fmt(p.value[1])}`},
      xAxis: {type: "value", name: "step"}, yAxis: {type: "value", scale: true},
      series: [{type: "line", showSymbol: t.points.length < 50, data: t.points.map(([s, v]) => [s, SS.num(v)]),
        markLine: t.resumes.length ? {symbol: "none", silent: true, lineStyle: {type: "dashed"},
          label: {formatter: p => "attempt " + p.data.attempt, fontSize: 10},
          data: t.resumes.map(([step, attempt]) => ({xAxis: step, attempt}))} : undefined}],
    }, {replaceMerge: ["series"]});
  }
  const refresh = () => Promise.all([...document.querySelectorAll("#trial-curves .chart")].map(draw))
    .then(() => { document.body.dataset.refreshed = "1"; });
  SS.poll(refresh, Number(d.poll), () => live);
})();
