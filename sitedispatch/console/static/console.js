// The console's one script (no inline script: the Content-Security-Policy allows none). It draws the charts from
// the JSON a page carries, again each time htmx swaps a live part in; htmx itself does the polling.
(function () {
  "use strict";
  var charts = [];

  function draw() {
    charts.forEach(function (chart) { chart.destroy(); });
    charts = [];
    document.querySelectorAll("[data-chart]").forEach(function (target) {
      var source = target.parentElement.querySelector("script.chart-data");
      if (!source || typeof uPlot === "undefined") { return; }
      var data = JSON.parse(source.textContent);
      var width = Math.max(320, target.clientWidth || 800);
      charts.push(new uPlot({
        width: width,
        height: 240,
        scales: { x: { time: true } },
        axes: [{}, { label: "per minute" }],
        series: [
          {},
          { label: "succeeded", stroke: "#116329", width: 2 },
          { label: "dead", stroke: "#a40e26", width: 2 },
          { label: "attempts", stroke: "#0550ae", width: 1 },
          { label: "retries", stroke: "#7d4e00", width: 1 }
        ]
      }, [data.minutes, data.succeeded, data.dead, data.attempts, data.retries], target));
    });
  }

  document.addEventListener("DOMContentLoaded", draw);
  document.addEventListener("htmx:afterSettle", draw);
})();
