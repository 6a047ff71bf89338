// One sweep: leaderboard, learning curves (curves.js), best so far, parallel coordinates,
// importance, and the panels of panels.js (seeds, cost, timeline, resources). Everything comes from the JSON API and is refreshed every few
// seconds while the sweep runs (and once more when it ends); in an offline
// report from the data inlined in the page, drawn once.
"use strict";
(function () {
  const SWEEP = document.body.dataset.sweep;
  const POLL = Number(document.body.dataset.poll);
  const API = "/api/sweeps/" + encodeURIComponent(SWEEP);
  const MAX_ROWS = 500;
  const S = {sweep: null, trials: [], sortKey: "rank", sortDir: 1, filter: "", curveMetric: null,
             completed: -1, running: true, columns: [], pinned: new Set(), hideConstant: false};

  // -- leaderboard ---------------------------------------------------------------
  function columns() {
    const params = new Set(Object.keys(S.sweep.space || {})), metrics = new Set();
    for (const t of S.trials) {
      Object.keys(t.params).forEach(k => params.add(k));
      Object.keys(t.metrics).forEach(k => metrics.add(k)); Object.keys(t.latest || {}).forEach(k => metrics.add(k));
    }
    const ms = [...metrics].sort((a, b) => (a !== S.sweep.metric) - (b !== S.sweep.metric) || a.localeCompare(b));
    const varies = p => new Set(S.trials.map(t => JSON.stringify(t.params[p]))).size > 1;
    const shown = [...params].filter(p => !S.hideConstant || varies(p));
    return [{key: "pin", label: "pin", get: t => S.pinned.has(t.trial_id) ? 0 : 1, pin: true},
            {key: "rank", label: "#", get: t => t.rank},
            {key: "trial_name", label: "trial", get: t => t.trial_name, link: true},
            {key: "state", label: "state", get: t => t.state, badge: true},
            ...shown.map(p => ({key: "p:" + p, label: p, get: t => t.params[p], num: true})),
            ...ms.map(m => ({key: "m:" + m, label: params.has(m) ? "metric:" + m : m, get: t => t.metrics[m], num: true,
                             latest: t => t.metrics[m] === undefined && t.latest ? t.latest[m] : undefined})),
            {key: "attempts", label: "attempts", get: t => t.attempts, num: true},
            {key: "preemptions", label: "preemptions", get: t => t.preemptions, num: true},
            {key: "flags", label: "flags", get: t => t.flags.concat(t.smoke ? ["smoke"] : []).join(" "), flags: true}];
  }
  function compare(a, b) {
    // numbers before strings ("NaN" and other text sort last), missing values last
    const ka = a === undefined || a === null ? 2 : typeof a === "number" ? 0 : 1;
    const kb = b === undefined || b === null ? 2 : typeof b === "number" ? 0 : 1;
    if (ka !== kb) return ka - kb;
    if (ka === 0) return (a - b) * S.sortDir;
    if (ka === 1) return String(a).localeCompare(String(b)) * S.sortDir;
    return 0;
  }
  function drawHeader() {
    const tr = document.createElement("tr");
    for (const c of S.columns) {
      const th = SS.el("th", c.label);
      if (c.key === S.sortKey) th.className = S.sortDir > 0 ? "sorted-asc" : "sorted-desc";
      th.addEventListener("click", () => {
        S.sortDir = S.sortKey === c.key ? -S.sortDir : 1; S.sortKey = c.key; drawTable();
      });
      tr.append(th);
    }
    document.querySelector("#leaderboard thead").replaceChildren(tr);
  }
  function matches(t, words) {
    if (!words.length) return true;
    const hay = [t.trial_name, t.trial_id, t.state, ...t.flags, ...Object.entries(t.params).map(([k, v]) => k + "=" + v)]
      .join(" ").toLowerCase();
    return words.every(w => hay.includes(w));
  }
  function drawTable() {
    S.columns = columns();
    drawHeader();
    const col = S.columns.find(c => c.key === S.sortKey) || S.columns[0];
    const words = S.filter.toLowerCase().split(/\s+/).filter(Boolean);
    const rows = S.trials.filter(t => matches(t, words)).sort((a, b) => compare(col.get(a), col.get(b)));
    const body = document.querySelector("#leaderboard tbody");
    body.replaceChildren(...rows.slice(0, MAX_ROWS).map(t => {
      const tr = document.createElement("tr");
      tr.dataset.trial = t.trial_id;
      for (const c of S.columns) {
        const v = c.get(t), td = SS.el("td", null, c.num ? "num" : "");
        if (c.pin) {
          const box = SS.el("input"); box.type = "checkbox"; box.checked = S.pinned.has(t.trial_id);
          box.title = "pin: compare side by side, curves of the pinned trials only";
          box.addEventListener("change", () => { box.checked ? S.pinned.add(t.trial_id) : S.pinned.delete(t.trial_id); drawCompare(); drawCurves(); });
          td.append(box);
        } else if (c.link && !SS.offline()) { const a = SS.el("a", v); a.href = SS.trialUrl(SWEEP, t.trial_id); td.append(a); }
        else if (c.link) td.append(SS.el("span", v, "name"));  // a report has no trial pages
        else if (c.badge) td.append(SS.el("span", v, "state state-" + v));
        else if (c.flags) v.split(" ").filter(Boolean).forEach(f => td.append(SS.el("span", f, "flag")));
        else if (c.latest && c.latest(t) !== undefined) {  // a running trial: its latest value, not a final one
          td.textContent = SS.fmt(c.latest(t)); td.classList.add("latest"); td.title = `latest: ${SS.exact(c.latest(t))} (running)`;
        } else { td.textContent = SS.fmt(v); if (typeof v === "number") td.title = SS.exact(v); }
        tr.append(td);
      }
      return tr;
    }));
    document.getElementById("shown").textContent = rows.length > MAX_ROWS
      ? `showing ${MAX_ROWS} of ${rows.length} matching (${S.trials.length} trials): filter or sort to see others`
      : `${rows.length} of ${S.trials.length} trials`;
  }

  // The pinned trials side by side: params (those that differ first, marked), then metrics.
  function drawCompare() {
    const pinned = S.trials.filter(t => S.pinned.has(t.trial_id));
    const card = document.getElementById("compare-card");
    card.hidden = !pinned.length;
    if (!pinned.length) return;
    const keys = (get) => [...new Set(pinned.flatMap(t => Object.keys(get(t))))];
    const differs = (get, k) => new Set(pinned.map(t => JSON.stringify(get(t)[k]))).size > 1;
    const params = keys(t => t.params).sort((a, b) => differs(t => t.params, b) - differs(t => t.params, a) || a.localeCompare(b));
    const metric = t => Object.keys(t.metrics).length ? t.metrics : t.latest || {};
    const metrics = keys(metric).sort((a, b) => (a !== S.sweep.metric) - (b !== S.sweep.metric) || a.localeCompare(b));
    const head = document.createElement("tr");
    head.append(SS.el("th", ""), ...pinned.map(t => SS.el("th", t.trial_name)));
    const row = (label, get, k) => {
      const tr = document.createElement("tr");
      tr.append(SS.el("th", label, differs(get, k) ? "differs" : ""));
      pinned.forEach(t => { const v = get(t)[k], td = SS.el("td", SS.fmt(v), "num"); td.title = SS.exact(v); tr.append(td); });
      return tr;
    };
    document.querySelector("#compare thead").replaceChildren(head);
    document.querySelector("#compare tbody").replaceChildren(...params.map(k => row(k, t => t.params, k)),
                                                              ...metrics.map(k => row(k, metric, k)));
  }

  // -- charts ----------------------------------------------------------------------
  let curvesAsked = 0;  // a slower, older answer (pins since changed) must not overwrite a newer one
  async function drawCurves() {
    const metric = S.curveMetric;
    if (!metric) return;
    const asked = ++curvesAsked;
    const x = document.getElementById("curve-x").value, tokens = S.sweep.tokens_metric;
    const pins = [...S.pinned].map(id => "&trial=" + encodeURIComponent(id)).join("");
    const c = await SS.json(API + "/curves?max_points=400&limit=60&metric=" + encodeURIComponent(metric) +
      (x === "tokens" && tokens ? "&tokens=" + encodeURIComponent(tokens) : "") + (SS.offline() ? "" : pins));
    if (asked !== curvesAsked) return;
    const weight = Number(document.getElementById("curve-smooth").value);
    const shown = CURVES.draw("curves", c.trials.map(t => ({...t, label: t.trial_name})),
      {metric, x, tokensMetric: tokens, logY: document.getElementById("curve-log").checked, weight});
    document.getElementById("curve-note").textContent = `${shown.drawn} trial(s), at most ${c.max_points} points each` +
      (pins && !SS.offline() ? " (the pinned ones)" : S.trials.length > c.trials.length ? ` (the best ${c.trials.length} of ${S.trials.length})` : "") +
      (weight ? `; smoothed (${weight})` : "") + (shown.missing ? `; ${shown.missing} without ${tokens} not drawn` : "");
  }
  async function drawBest() {
    if (!S.sweep.metric) return;
    const b = await SS.json(API + "/best");
    const data = b.points.map(p => ({value: [p.time, p.value], name: p.trial_name}));
    SS.chart("best-chart").setOption({
      animation: false, grid: SS.GRID,
      tooltip: {trigger: "item", formatter: p => `${SS.esc(p.name)}<br>${SS.exact(p.value[1])}<br>${SS.time(p.value[0])}`},
      xAxis: SS.timeAxis(), yAxis: SS.valueAxis(b.metric),
      series: [{type: "line", step: "end", data, symbolSize: 6}],
    });
    PANELS.bestGpu(b);
  }
  // The leaderboard's rows that match the filter, every column, exact values: a CSV file.
  function downloadCsv() {
    const words = S.filter.toLowerCase().split(/\s+/).filter(Boolean);
    const quote = v => { const t = v === undefined || v === null ? "" : typeof v === "number" ? String(v) : SS.fmt(v);
                         return /[",\n]/.test(t) ? '"' + t.replace(/"/g, '""') + '"' : t; };
    const cols = S.columns.filter(c => !c.pin).concat([{label: "trial_id", get: t => t.trial_id}]);
    const lines = [cols.map(c => quote(c.label)).join(",")].concat(
      S.trials.filter(t => matches(t, words)).map(t => cols.map(c => quote(c.get(t))).join(",")));
    const a = SS.el("a");
    a.href = URL.createObjectURL(new Blob([lines.join("\n") + "\n"], {type: "text/csv"}));
    a.download = (S.sweep.name || SWEEP) + "-trials.csv";
    document.body.append(a); a.click(); a.remove();
  }
  function drawParallel() {
    const space = S.sweep.space || {}, metric = S.sweep.metric;
    const names = Object.keys(space);
    const done = S.trials.filter(t => t.state === "completed" && typeof t.metrics[metric] === "number");
    const axes = names.map((n, i) => {
      const p = space[n];
      if (p.values) return {dim: i, name: n, type: "category", data: p.values.map(String)};
      return {dim: i, name: n, type: p.log ? "log" : "value", scale: true};
    });
    axes.push({dim: names.length, name: metric, type: "value", scale: true, nameTextStyle: {fontWeight: "bold"}});
    const values = done.map(t => t.metrics[metric]);
    const data = done.map(t => ({name: t.trial_name,
      value: [...names.map(n => space[n].values ? String(t.params[n]) : t.params[n]), t.metrics[metric]]}));
    SS.chart("parallel").setOption({
      animation: false, parallelAxis: axes, parallel: {left: 50, right: 90, top: 40, bottom: 30},
      visualMap: values.length ? {type: "continuous", dimension: names.length, min: Math.min(...values), max: Math.max(...values),
        inRange: {color: S.sweep.mode === "min" ? ["#1a9850", "#fee08b", "#d73027"] : ["#d73027", "#fee08b", "#1a9850"]},
        right: 0, top: "middle", calculable: true} : undefined,
      tooltip: {trigger: "item", formatter: p => SS.esc(p.name)},
      series: [{type: "parallel", lineStyle: {width: 1, opacity: 0.5}, data, progressive: 1000}],
    }, {replaceMerge: ["series", "parallelAxis"]});
  }
  async function drawImportance() {
    const imp = await SS.json(API + "/importance");
    document.getElementById("importance-note").textContent = imp.reason
      ? imp.reason : `fANOVA over ${imp.trials} completed trials (shares summing to 1)`;
    document.getElementById("importance-caution").textContent = imp.caution || "";
    document.getElementById("interactions-note").textContent = imp.reason ? "" : (imp.interactions_note ||
      "share of the objective's variance a pair explains beyond the two alone");
    const bar = (id, rows, label, max) => SS.chart(id).setOption({
      animation: false, grid: {left: 10, right: 60, top: 10, bottom: 30, containLabel: true},
      tooltip: {trigger: "item", formatter: p => `${SS.esc(p.name)}: ${SS.exact(p.value)}`},
      xAxis: {type: "value", max, axisLabel: {formatter: SS.fmt}},
      yAxis: {type: "category", inverse: true, data: rows.map(label)},
      series: [{type: "bar", data: rows.map(r => r.importance), label: {show: true, position: "right", formatter: p => SS.fmt(p.value)}}],
    }, {replaceMerge: ["series"]});
    bar("importance", imp.params, r => r.name, 1);  // shares of 1
    bar("interactions", imp.interactions.slice(0, 8), r => r.params.join(" × "), v => Math.max(v.max, 0.01));
  }

  // -- refresh -------------------------------------------------------------------
  function drawHead() {
    const s = S.sweep;
    const state = document.getElementById("sweep-state");
    state.textContent = s.state; state.className = "state state-" + s.state;
    document.getElementById("counts").textContent =
      Object.entries(s.counts).map(([k, n]) => `${n} ${k}`).join(", ") || "no trials yet";
    document.getElementById("best").textContent = s.best === null ? "–" : SS.fmt(s.best);
    document.getElementById("age").textContent = s.age;
    const spec = document.getElementById("spec");
    if (s.spec && !spec.textContent) spec.textContent = JSON.stringify(s.spec, null, 2);
    SS.live(document.getElementById("live"), SS.offline() ? "" :
      s.state === "running" ? "· live, refreshed every " + POLL / 1000 + " s" : "· sweep over");
    const select = document.getElementById("curve-metric");
    if (select.options.length !== s.metrics.length) {
      select.replaceChildren(...s.metrics.map(m => { const o = SS.el("option", m); o.value = m; return o; }));
      // The objective until the user chooses: a metric that came first (sys/...) is no choice.
      if (!S.curveChosen) S.curveMetric = s.metrics.includes(s.metric) ? s.metric : s.metrics[0];
      if (S.curveMetric) select.value = S.curveMetric;
    }
    CURVES.offerX(document.getElementById("curve-x"), s.tokens_metric);
  }
  async function refresh() {
    const [sweep, trials] = await Promise.all([SS.json(API), SS.json(API + "/trials")]);
    const wasRunning = S.running;
    S.sweep = sweep; S.trials = trials; S.running = sweep.state === "running";
    drawHead();
    drawTable();
    drawCompare();
    drawParallel();
    const completed = sweep.counts.completed || 0;
    const jobs = [drawCurves(), drawBest(), PANELS.cost(API), PANELS.timeline(API), PANELS.resources(API)];
    if (completed !== S.completed || (wasRunning && !S.running)) {
      S.completed = completed; jobs.push(drawImportance(), PANELS.seeds(API));
    }
    await Promise.all(jobs);
    document.body.dataset.refreshed = String(Number(document.body.dataset.refreshed || 0) + 1);
  }

  document.getElementById("filter").addEventListener("input", e => { S.filter = e.target.value; drawTable(); });
  document.getElementById("csv").addEventListener("click", downloadCsv);
  document.getElementById("hide-constant").addEventListener("change", e => { S.hideConstant = e.target.checked; drawTable(); });
  document.getElementById("curve-log").addEventListener("change", drawCurves);
  document.getElementById("curve-smooth").addEventListener("change", drawCurves);
  document.getElementById("curve-x").addEventListener("change", drawCurves);
  document.getElementById("curve-metric").addEventListener("change", e => {
    S.curveMetric = e.target.value; S.curveChosen = true; drawCurves();
  });
  SS.poll(refresh, POLL, () => S.running && !SS.offline(), document.getElementById("live"));  // a report is drawn once
})();
