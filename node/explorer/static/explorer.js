// concilium explorer: the accuracy chart (uPlot) and the audit button. Text is only ever set with
// textContent, never parsed as HTML.
"use strict";

function drawAccuracy() {
  const box = document.getElementById("accuracy-chart");
  const data = document.getElementById("accuracy-data");
  if (!box || !data || typeof uPlot === "undefined") return;
  const rows = JSON.parse(data.textContent);
  const xs = rows.map(r => r.fl_round);
  const ys = rows.map(r => r.accuracy);
  const width = Math.min(880, box.clientWidth - 16 || 880);
  new uPlot({
    width: width, height: 260,
    scales: { x: { time: false }, y: { range: [0, 1] } },
    axes: [{ label: "FL round", incrs: [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000] }, { label: "accuracy" }],
    series: [{ label: "round" }, { label: "accuracy", stroke: "#2453a6", width: 2, points: { show: rows.length <= 60 } }],
  }, [xs, ys], box);
}

function showAudit(s) {
  const bar = document.getElementById("audit-progress");
  const count = document.getElementById("audit-count");
  const verdict = document.getElementById("audit-verdict");
  const button = document.getElementById("audit-start");
  bar.max = Math.max(1, s.total);
  bar.value = s.state === "done" && s.ok ? bar.max : s.done;
  count.textContent = s.state === "idle" ? "" : `${s.done} / ${s.total} blocks` + (s.seconds !== null ? `, ${s.seconds} s` : "");
  button.disabled = s.state === "running";
  verdict.className = "verdict";
  if (s.state === "running") {
    verdict.textContent = "auditing...";
  } else if (s.state === "done" && s.error) {
    verdict.textContent = "ERROR: " + s.error;
    verdict.classList.add("fail");
  } else if (s.state === "done") {
    verdict.textContent = s.line;
    // amber, never green, for a valid chain whose rounds were not re-executed (issue 32 item 3)
    verdict.classList.add(s.ok ? "ok" : s.status === "not_reexecuted" ? "warn" : "fail");
  } else {
    verdict.textContent = "";
  }
}

async function pollAudit() {
  const r = await fetch("/api/audit", { cache: "no-store" });
  const s = await r.json();
  showAudit(s);
  if (s.state === "running") setTimeout(pollAudit, 250);
}

async function startAudit() {
  document.getElementById("audit-start").disabled = true;
  await fetch("/api/audit", { method: "POST", headers: { "X-Concilium-Audit": "1" } });
  pollAudit();
}

document.addEventListener("DOMContentLoaded", () => {
  drawAccuracy();
  const button = document.getElementById("audit-start");
  if (button) {
    button.addEventListener("click", startAudit);
    pollAudit();
  }
});
