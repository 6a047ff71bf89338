// All sweeps: the table refreshes itself while any sweep runs; ticked sweeps open side by side (/compare).
"use strict";
(function () {
  const body = document.getElementById("sweeps").tBodies[0], button = document.getElementById("compare");
  const picked = new Set();
  let running = true;
  function pick(box) {
    box.checked = picked.has(box.value);
    box.addEventListener("change", () => {
      box.checked ? picked.add(box.value) : picked.delete(box.value);
      button.disabled = picked.size < 2;
    });
  }
  document.querySelectorAll("input.pick").forEach(pick);
  button.addEventListener("click", () => { location.href = "/compare?sweeps=" + encodeURIComponent([...picked].join(",")); });
  // as app.py's cost_text: GPU-hours, and the price (and on demand's) when the spec has pricing
  function costText(s) {
    if (s.gpu_hours === null || s.gpu_hours === undefined) return "";
    let text = s.gpu_hours.toFixed(2) + (s.unit === "slot-hours" ? " slot-h" : " GPU-h");
    if (s.cost !== null) text += " · " + s.cost.toFixed(2);
    if (s.on_demand_cost !== null) text += " (on demand " + s.on_demand_cost.toFixed(2) + ")";
    return text;
  }
  async function refresh() {
    const sweeps = await SS.json("/api/sweeps");
    running = sweeps.some(s => s.state === "running");
    if (!sweeps.length) return;
    body.replaceChildren(...sweeps.map(s => {
      const tr = document.createElement("tr"), box = SS.el("input", null, "pick"), tick = SS.el("td");
      box.type = "checkbox"; box.value = s.sweep_id; box.title = "compare"; pick(box); tick.append(box);
      const name = SS.el("td"); const a = SS.el("a", s.name); a.href = "/sweeps/" + encodeURIComponent(s.sweep_id); name.append(a);
      const state = SS.el("td"); state.append(SS.el("span", s.state, "state state-" + s.state));
      if (s.error) { const why = SS.el("div", s.error.length > 200 ? s.error.slice(0, 197) + "..." : s.error, "reason"); why.title = s.error; state.append(why); }
      const counts = SS.el("td");
      for (const [k, n] of Object.entries(s.counts)) { counts.append(SS.el("span", k + " " + n, "count state-" + k), " "); }
      tr.append(tick, name, SS.el("td", s.sweep_id, "mono"), state, counts,
                SS.el("td", s.best === null ? "" : s.metric + " " + SS.fmt(s.best), "num"), SS.el("td", costText(s), "num"),
                SS.el("td", s.age));
      return tr;
    }));
  }
  setTimeout(() => SS.poll(refresh, Number(document.body.dataset.poll), () => running), Number(document.body.dataset.poll));
})();
