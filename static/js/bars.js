// Bar charts of a page: #bar-charts holds {element id: {x, y, title}}; drawn with the
// vendored Plotly in the page's theme colours.
(function () {
  "use strict";
  function draw() {
    var boot = document.getElementById("bar-charts");
    if (!boot || !window.Plotly) return;
    var charts = JSON.parse(boot.textContent);
    var css = window.getComputedStyle(document.documentElement);
    var fg = css.getPropertyValue("--fg").trim();
    var grid = css.getPropertyValue("--border").trim();
    var accent = css.getPropertyValue("--accent").trim();
    Object.keys(charts).forEach(function (id) {
      var chart = charts[id];
      if (!document.getElementById(id)) return;
      window.Plotly.newPlot(
        id,
        [{ type: "bar", x: chart.x, y: chart.y, marker: { color: accent } }],
        {
          margin: { l: 48, r: 12, t: 8, b: 64 },
          paper_bgcolor: "rgba(0,0,0,0)",
          plot_bgcolor: "rgba(0,0,0,0)",
          font: { color: fg, size: 12 },
          xaxis: { gridcolor: grid, linecolor: grid, type: "category" },
          yaxis: { gridcolor: grid, linecolor: grid, rangemode: "tozero" },
          height: 260,
        },
        { displayModeBar: false, responsive: true }
      );
    });
  }
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", draw);
  } else {
    draw();
  }
})();
