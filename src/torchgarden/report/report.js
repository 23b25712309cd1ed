// torchgarden report: draws each chart of the embedded data with uPlot (inlined above).
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
      axes: [{label: "step"}, {size: 72}],
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
