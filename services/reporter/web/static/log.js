// An attempt's whole stdout and stderr (GET .../log, a page of at most 512 KiB
// at a time: services/reporter/web/logs.py), appended as they come; while the
// trial runs this attempt, asked again from where the last page ended.
"use strict";
(function () {
  const d = document.body.dataset;
  const API = "/api/sweeps/" + encodeURIComponent(d.sweep) + "/trials/" + encodeURIComponent(d.trial) + "/log?attempt=" + d.attempt;
  const at = {stdout: 0, stderr: 0};
  let running = true;
  // Every page from where this stream's last ended to the log's current end.
  async function follow(pre) {
    const stream = pre.dataset.stream;
    for (;;) {
      const p = await SS.json(API + "&stream=" + stream + "&offset=" + at[stream]);
      if (p.store_error) throw new Error(p.store_error);
      running = p.running;
      if (p.size < at[stream]) { pre.textContent = ""; at[stream] = 0; continue; }  // replaced by a shorter log: again
      if (p.text) pre.append(p.text);  // text, never markup
      at[stream] = p.next;
      document.getElementById(stream + "-note").textContent = p.size ? `(${SS.fmt(p.size)} bytes)` : "(none uploaded yet)";
      if (p.next >= p.size || !p.text) return;
    }
  }
  async function refresh() {
    await Promise.all([...document.querySelectorAll("pre.full")].map(follow));
    SS.live(document.getElementById("live"), running ? "· live, refreshed every " + Number(d.poll) / 1000 + " s" : "");
    d.refreshed = String(Number(d.refreshed || 0) + 1);
  }
  SS.poll(refresh, Number(d.poll), () => running, document.getElementById("live"));
})();
