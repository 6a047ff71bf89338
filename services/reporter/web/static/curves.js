// Learning curves on one chart, by step, by time or by tokens: the sweep page's
// and the cross-sweep comparison's. Each trial's curve (GET .../curves) carries
// its points [step, value], and point for point the seconds since the trial's
// start and, when the sweep reports a tokens metric, the tokens seen
// (services/reporter/web/curves.py); this picks the x, smooths and draws.
"use strict";
const CURVES = (function () {
  // TensorBoard's smoothing: an exponential moving average, debiased at the start; gaps stay gaps.
  function smooth(points, weight) {
    if (!weight) return points.map(([x, v, step]) => [x, v, v, step]);
    let last = 0, n = 0;
    return points.map(([x, v, step]) => {
      if (v === null) return [x, null, null, step];
      last = last * weight + (1 - weight) * v; n += 1;
      return [x, last / (1 - Math.pow(weight, n)), v, step];
    });
  }
  // Seconds for people: "42 s", "12.5 min", "3.2 h".
  function duration(s) {
    return s < 120 ? SS.fmt(Number(s.toFixed(1))) + " s" : s < 7200 ? SS.fmt(s / 60) + " min" : SS.fmt(s / 3600) + " h";
  }
  // The time axis's unit: seconds, minutes or hours, by the longest curve.
  function timeUnit(trials) {
    const most = Math.max(0, ...trials.flatMap(t => t.seconds || []));
    return most < 120 ? {div: 1, name: "s"} : most < 7200 ? {div: 60, name: "min"} : {div: 3600, name: "h"};
  }
  // A point's x on the chosen axis (null: this point has none, e.g. no tokens at its step).
  function xs(t, x, unit) {
    if (x === "time") return (t.seconds || []).map(s => s / unit.div);
    if (x === "tokens") return t.points.map((_, i) => (t.tokens || [])[i] ?? null);
    return t.points.map(p => p[0]);
  }
  function resumeX(r, x, unit) { return x === "time" ? r[2] / unit.div : x === "tokens" ? r[3] : r[0]; }
  function axisName(x, tokensMetric, unit) {
    return x === "time" ? `time since the trial's start (${unit.name})` : x === "tokens" ? tokensMetric : "step";
  }

  // Draw `trials` (each with a `label`) into the chart `id`; opts: metric (the y axis's
  // name), x ("step" | "time" | "tokens"), tokensMetric, logY, weight. Returns how many
  // curves were drawn and how many had no point on this x (no tokens reported).
  function draw(id, trials, opts) {
    const unit = timeUnit(trials), x = opts.x || "step";
    let missing = 0;
    const series = trials.filter(t => t.points.length).map(t => {
      const at = xs(t, x, unit);
      const points = t.points.map(([step, v], i) => [at[i], SS.num(v), step]).filter(p => p[0] !== null && p[0] !== undefined);
      if (!points.length) { missing += 1; return null; }
      const resumes = (t.resumes || []).map(r => ({xAxis: resumeX(r, x, unit), attempt: r[1]})).filter(r => r.xAxis !== null);
      return {
        name: t.label, type: "line", showSymbol: points.length < 2, symbolSize: 7, sampling: "none", connectNulls: false,
        data: smooth(points, opts.weight).map(([px, v, raw, step]) => [px, opts.logY && !(v > 0) ? null : v, raw, step]),
        markLine: resumes.length ? {symbol: "none", silent: true, lineStyle: {type: "dashed", width: 1},
          label: {formatter: p => "attempt " + p.data.attempt, fontSize: 10}, data: resumes} : undefined,
      };
    }).filter(Boolean);
    const where = p => x === "step" ? `step ${p.value[3]}` : x === "time"
      ? `step ${p.value[3]}, ${duration(p.value[0] * unit.div)}` : `step ${p.value[3]}, ${SS.fmt(p.value[0])} tokens`;
    SS.chart(id).setOption({
      animation: false, grid: {...SS.GRID, top: 36, bottom: 64},
      tooltip: {trigger: "item", formatter: p => `${SS.esc(p.seriesName)}<br>${where(p)}: ${SS.exact(p.value[2])}` +
        (opts.weight && p.value[1] !== null ? ` (smoothed ${SS.fmt(p.value[1])})` : "")},
      legend: {type: "scroll", top: 0, left: 80, right: 10}, dataZoom: [{type: "inside"}, {type: "slider", height: 18, bottom: 4}],
      xAxis: SS.stepAxis(axisName(x, opts.tokensMetric, unit)),
      yAxis: SS.valueAxis(opts.metric, opts.logY ? {type: "log", scale: false} : {}),
      series,
    }, {replaceMerge: ["series", "yAxis", "xAxis"]});
    return {drawn: series.length, missing};
  }

  // The x selector: tokens only where the sweep reports a tokens metric, saying so where it does not.
  function offerX(select, tokensMetric) {
    const option = select.querySelector("option[value=tokens]");
    option.disabled = !tokensMetric;
    option.textContent = tokensMetric ? `tokens (${tokensMetric})` : "tokens: none reported";
    option.title = tokensMetric ? "" : "no trial reports a tokens metric (tokens, tokens_seen, num_tokens, ...)";
    if (!tokensMetric && select.value === "tokens") select.value = "step";
  }
  return {draw, offerX, smooth, duration};
})();
