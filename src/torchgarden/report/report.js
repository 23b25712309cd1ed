// torchgarden report: draws each chart of the embedded data with uPlot (inlined above).

// The y-axis labels: as many decimals as the step between two ticks needs, so ticks over a
// narrow range (0.0031, 0.0032, ...) never read alike (uPlot's default keeps 3 decimals).
function tgTickLabels(splits) {
  var gap = Infinity, big = 0;
  for (var i = 0; i < splits.length; i++) {
    big = Math.max(big, Math.abs(splits[i]));
    if (i > 0 && splits[i] !== splits[i - 1]) {
      gap = Math.min(gap, Math.abs(splits[i] - splits[i - 1]));
    }
  }
  if (!isFinite(gap)) { gap = big || 1; }
  if (big >= 1e7 || gap < 1e-9) {
    var digits = Math.min(15, Math.max(1, Math.ceil(Math.log10(big / gap)) + 1));
    return splits.map(function (v) { return v === 0 ? "0" : v.toPrecision(digits); });
  }
  var decimals = 0;  // Ticks are 1, 2, 2.5 or 5 times a power of ten apart.
  while (decimals < 12 &&
         Math.abs(Math.round(gap * Math.pow(10, decimals)) - gap * Math.pow(10, decimals)) >
         1e-6 * gap * Math.pow(10, decimals)) {
    decimals++;
  }
  return splits.map(function (v) { return v.toFixed(decimals); });
}

(function () {
  "use strict";
  var data = JSON.parse(document.getElementById("tg-data").textContent);
  var drawn = [];
  data.charts.forEach(function (chart) {
    var element = document.getElementById(chart.id);
    var few = chart.steps.length <= 60;
    var series = [{label: "step"}].concat(chart.series.map(function (s) {
      return {
        label: data.runs[s.run],
        stroke: data.palette[s.run % data.palette.length],
        width: 1.5,
        spanGaps: true,
        points: {show: few, size: 4},
      };
    }));
    var options = {
      width: Math.max(element.clientWidth, 280),
      height: 240,
      // Log y when every value is positive and they span more than 100x (losses).
      scales: {x: {time: false}, y: chart.log_y ? {distr: 3} : {}},
      axes: [{label: "step"}, {size: 72, values: function (u, splits) {
        return tgTickLabels(splits);
      }}],
      series: series,
      legend: {live: true},
    };
    var columns = [chart.steps].concat(chart.series.map(function (s) { return s.values; }));
    var plot = new uPlot(options, columns, element);
    drawn.push({
      id: chart.id,
      title: chart.title,
      plot: plot,
      points: chart.series.map(function (s, i) {
        return plot.data[i + 1].filter(function (v) { return v !== null; }).length;
      }),
    });
  });
  window.addEventListener("resize", function () {
    drawn.forEach(function (d) {
      var element = document.getElementById(d.id);
      d.plot.setSize({width: Math.max(element.clientWidth, 280), height: 240});
    });
  });
  // For tests and scripts: what was drawn, and how many points each series has.
  window.tgCharts = drawn.map(function (d) { return {id: d.id, title: d.title, points: d.points}; });
})();
