// Node-page charts. The first paint uses the figures the server embedded (app/fleet/charts.py);
// for rolling ranges the samples are re-read from /api/v1/nodes/{hostname}/samples and the
// traces rebuilt with Plotly.react. tracesFrom() mirrors _trace() in app/fleet/charts.py.
// Times are drawn on the wall clock of the viewer's zone (boot.tz, from ?tz=); the event marks
// (figure.overlay, layout.shapes) come from the server and are kept on refresh.
(function () {
  "use strict";

  var CONFIG = {
    displaylogo: false,
    responsive: true,
    modeBarButtonsToRemove: ["select2d", "lasso2d", "autoScale2d"],
  };
  var boot = null;
  var offsetMs = 0; // server clock minus browser clock, so a wrong desk clock moves nothing
  var current = {}; // figure id -> traces last drawn

  var wallFormat = null; // Intl formatter for boot.tz, null in UTC

  function pad(n) {
    return (n < 10 ? "0" : "") + n;
  }

  // Wall-clock parts of an instant (ms) in boot.tz: [year, month, day, hour, minute, second].
  function wallParts(ms) {
    var parts = {};
    wallFormat.formatToParts(new Date(ms)).forEach(function (p) {
      parts[p.type] = p.value;
    });
    return [+parts.year, +parts.month, +parts.day, +parts.hour % 24, +parts.minute, +parts.second];
  }

  function wallMs(ms) {
    if (!wallFormat) return ms;
    var w = wallParts(ms);
    return Date.UTC(w[0], w[1] - 1, w[2], w[3], w[4], w[5]) + (ms % 1000);
  }

  // As plotly_time() on the server: UTC wall time without a zone, other zones as ISO 8601 with
  // their offset (Plotly draws the wall time and ignores the offset).
  function plotlyTime(iso) {
    if (!wallFormat) return iso.replace("T", " ").replace(/(Z|[+-]00:00)$/, "");
    var ms = Date.parse(iso);
    var w = wallParts(ms);
    var offsetMin = Math.round((wallMs(ms) - ms) / 60000);
    var sign = offsetMin < 0 ? "-" : "+";
    var abs = Math.abs(offsetMin);
    return (
      w[0] + "-" + pad(w[1]) + "-" + pad(w[2]) + "T" + pad(w[3]) + ":" + pad(w[4]) + ":" +
      pad(w[5]) + sign + pad(Math.floor(abs / 60)) + ":" + pad(abs % 60)
    );
  }

  function clockText(ms) {
    if (!wallFormat) return new Date(ms).toISOString().slice(11, 19) + "Z";
    var w = wallParts(ms);
    return pad(w[3]) + ":" + pad(w[4]) + ":" + pad(w[5]) + " " + boot.tz;
  }

  function medianLow(values) {
    var sorted = values.slice().sort(function (a, b) {
      return a - b;
    });
    return sorted[Math.floor((sorted.length - 1) / 2)];
  }

  // Seconds between two points above which they are not joined (see gap_threshold_s).
  function gapThreshold(timesMs, stepS) {
    var spacings = [];
    for (var i = 1; i < timesMs.length; i++) spacings.push((timesMs[i] - timesMs[i - 1]) / 1000);
    var typical = spacings.length ? medianLow(spacings) : 0;
    return 2.5 * Math.max(stepS > 0 ? stepS : 0, typical);
  }

  function tracesFrom(samples, meta) {
    var series = samples.series.slice().sort(function (a, b) {
      return a.gpu_index - b.gpu_index;
    });
    return series.map(function (s) {
      var timesMs = s.t.map(Date.parse);
      var gap = gapThreshold(timesMs, samples.step_s);
      var values = s.values[meta.metric] || [];
      var xs = [];
      var ys = [];
      for (var i = 0; i < s.t.length; i++) {
        if (i > 0 && gap && (timesMs[i] - timesMs[i - 1]) / 1000 > gap) {
          xs.push(plotlyTime(new Date((timesMs[i] + timesMs[i - 1]) / 2).toISOString()));
          ys.push(null);
        } else if (i > 0 && wallMs(timesMs[i]) < wallMs(timesMs[i - 1])) {
          xs.push(plotlyTime(s.t[i])); // the wall clock went back (DST ended): break the line
          ys.push(null);
        }
        xs.push(plotlyTime(s.t[i]));
        ys.push(values[i] === null || values[i] === undefined ? null : values[i] * meta.scale);
      }
      return {
        type: "scatter",
        mode: "lines",
        uid: s.gpu_uuid,
        name: "GPU " + s.gpu_index,
        x: xs,
        y: ys,
        connectgaps: false,
        line: { width: 1.5 },
        hovertemplate: "%{y:.1f} " + meta.unit + "<extra>GPU " + s.gpu_index + "</extra>",
      };
    });
  }

  // The server's layout with the colours of the page's current theme.
  function themed(layout) {
    var css = window.getComputedStyle(document.documentElement);
    var fg = css.getPropertyValue("--fg").trim();
    var grid = css.getPropertyValue("--border").trim();
    var copy = JSON.parse(JSON.stringify(layout));
    copy.font = { color: fg, family: css.getPropertyValue("--font").trim(), size: 12 };
    ["xaxis", "yaxis"].forEach(function (axis) {
      copy[axis].gridcolor = grid;
      copy[axis].linecolor = grid;
    });
    return copy;
  }

  function draw(figure, traces) {
    current[figure.id] = traces;
    window.Plotly.react(figure.id, traces, themed(figure.figure.layout), CONFIG);
  }

  function setNote(text) {
    var note = document.getElementById("charts-live");
    if (note) note.textContent = text;
  }

  function refresh() {
    if (window.fleetwatch && window.fleetwatch.isPaused()) return;
    var end = new Date(Date.now() + offsetMs);
    var start = new Date(end.getTime() - boot.span_s * 1000);
    var url =
      boot.samples_url +
      "?start=" + encodeURIComponent(start.toISOString()) +
      "&end=" + encodeURIComponent(end.toISOString()) +
      "&tz=" + encodeURIComponent(boot.tz);
    fetch(url, { headers: { Accept: "application/json" } })
      .then(function (response) {
        if (!response.ok) throw new Error("HTTP " + response.status);
        return response.json();
      })
      .then(function (samples) {
        var hasData = samples.series.some(function (s) {
          return s.t.length > 0;
        });
        boot.figures.forEach(function (figure) {
          var layout = figure.figure.layout;
          layout.xaxis.range = [plotlyTime(samples.start), plotlyTime(samples.end)];
          layout.annotations = hasData ? [] : [figure.meta.empty_note];
          draw(figure, tracesFrom(samples, figure.meta).concat(figure.overlay || []));
        });
        setNote("rolling window, updated " + clockText(end.getTime()));
      })
      .catch(function (error) {
        setNote("refresh failed (" + error.message + "), retrying");
      });
  }

  document.addEventListener("DOMContentLoaded", function () {
    var source = document.getElementById("chart-boot");
    if (!source || !window.Plotly) return;
    boot = JSON.parse(source.textContent);
    if (boot.tz && boot.tz !== "UTC") {
      // A zone this browser does not know throws here: the page then fails loudly, not subtly.
      wallFormat = new Intl.DateTimeFormat("en-US", {
        timeZone: boot.tz,
        hourCycle: "h23",
        year: "numeric",
        month: "2-digit",
        day: "2-digit",
        hour: "2-digit",
        minute: "2-digit",
        second: "2-digit",
      });
    }
    offsetMs = Date.parse(boot.server_now) - Date.now();
    boot.figures.forEach(function (figure) {
      draw(figure, figure.figure.data.concat(figure.overlay || []));
    });
    document.addEventListener("fleetwatch:theme", function () {
      boot.figures.forEach(function (figure) {
        draw(figure, current[figure.id]);
      });
    });
    if (boot.live) {
      var everyMs = Math.min(60000, Math.max(10000, boot.step_s * 1000));
      window.setInterval(refresh, everyMs);
      document.addEventListener("fleetwatch:paused", function (evt) {
        if (!evt.detail.paused) refresh();
      });
    }
  });
})();
