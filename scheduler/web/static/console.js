// The console's own script (the Content-Security-Policy allows no inline code): a form with
// data-confirm asks first; the overview's four charts, fed by /api/series (the console's own
// samples), redrawn every 5 s.
document.addEventListener("submit", function (event) {
  const question = event.target.dataset && event.target.dataset.confirm;
  if (question && !window.confirm(question)) event.preventDefault();
});

(function () {
  if (!document.getElementById("chart-throughput") || typeof uPlot === "undefined") return;
  const specs = [["chart-throughput", "succeeded_per_s", "runs/s", "#2b6cb0"],
                 ["chart-errors", "failed_per_s", "failed/s", "#c53030"],
                 ["chart-lag", "start_lag_s", "seconds", "#b7791f"],
                 ["chart-backlog", "backlog", "entries", "#2f855a"]];
  const charts = {};
  function draw(data) {
    for (const [id, key, label, color] of specs) {
      const el = document.getElementById(id);
      if (!el) continue;
      const cols = [data.t, data[key]];
      if (!charts[id]) {
        charts[id] = new uPlot({width: el.clientWidth || 420, height: 200,
          series: [{}, {label: label, stroke: color, width: 2}], scales: {x: {time: true}}},
          cols, el);
      } else {
        charts[id].setData(cols);
      }
    }
    document.body.dataset.samples = String(data.t.length);
  }
  function refresh() {
    fetch("/api/series", {credentials: "same-origin"}).then(r => r.json()).then(draw)
      .catch(() => {});
  }
  refresh();
  setInterval(refresh, 5000);
})();
