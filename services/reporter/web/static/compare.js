// Sweeps side by side (GET /api/compare?sweeps=A,B: services/reporter/web/compare.py):
// each sweep's best trial's objective on one chart (curves.js), and a table of
// their best values and params, those that differ first. Refreshed while a sweep runs.
"use strict";
(function () {
  const d = document.body.dataset;
  const API = "/api/compare?sweeps=" + encodeURIComponent(d.sweeps);
  let answer = null;
  function drawChart() {
    const c = answer, x = document.getElementById("curve-x").value;
    const metrics = [...new Set(c.sweeps.map(s => s.metric))];
    const tokens = [...new Set(c.sweeps.map(s => s.tokens_metric).filter(Boolean))];
    CURVES.offerX(document.getElementById("curve-x"), tokens.join(", "));
    const trials = c.sweeps.flatMap(s => s.trials.map(t => ({...t, label: `${s.name}: ${t.trial_name}`})));
    const shown = CURVES.draw("compare-curves", trials, {metric: metrics.join(" / "), x, tokensMetric: tokens.join(", "),
      logY: document.getElementById("curve-log").checked, weight: 0});
    const empty = c.sweeps.filter(s => !s.trials.length).map(s => `${s.name}: ${s.reason}`);
    document.getElementById("compare-note").textContent = (metrics.length > 1 ? `(each sweep's own: ${metrics.join(", ")}) ` : "") +
      `${shown.drawn} curve(s)` + (shown.missing ? `; ${shown.missing} without tokens not drawn` : "") +
      (empty.length ? "; " + empty.join("; ") : "");
  }
  function drawTable() {
    const c = answer, differs = new Set(c.differs);
    const head = document.createElement("tr");
    head.append(...["sweep", "id", "state", "objective", "best", "trial"].map(h => SS.el("th", h)),
                ...c.params.map(p => SS.el("th", p, differs.has(p) ? "differs" : "")));
    const rows = c.sweeps.flatMap(s => (s.trials.length ? s.trials : [null]).map(t => {
      const tr = document.createElement("tr"), name = SS.el("td"), link = SS.el("a", s.name), trial = SS.el("td");
      link.href = "/sweeps/" + encodeURIComponent(s.sweep_id); name.append(link);
      if (t) { const a = SS.el("a", t.trial_name); a.href = SS.trialUrl(s.sweep_id, t.trial_id); trial.append(a); }
      const value = SS.el("td", t ? SS.fmt(t.value) : "–", "num"); if (t) value.title = SS.exact(t.value);
      tr.dataset.sweep = s.sweep_id;
      tr.append(name, SS.el("td", s.sweep_id, "mono"), SS.el("td", s.state), SS.el("td", `${s.metric} (${s.mode})`), value, trial,
                ...c.params.map(p => { const v = t ? t.params[p] : undefined, td = SS.el("td", SS.fmt(v), "num");
                                       td.title = SS.exact(v); return td; }));
      return tr;
    }));
    document.querySelector("#compare-sweeps thead").replaceChildren(head);
    document.querySelector("#compare-sweeps tbody").replaceChildren(...rows);
  }
  async function refresh() {
    answer = await SS.json(API);
    drawTable(); drawChart();
    const running = answer.sweeps.some(s => s.state === "running");
    SS.live(document.getElementById("live"), running ? "· live, refreshed every " + Number(d.poll) / 1000 + " s" : "");
    d.refreshed = String(Number(d.refreshed || 0) + 1);
  }
  document.getElementById("curve-x").addEventListener("change", drawChart);
  document.getElementById("curve-log").addEventListener("change", drawChart);
  SS.poll(refresh, Number(d.poll), () => answer === null || answer.sweeps.some(s => s.state === "running"),
          document.getElementById("live"));
})();
