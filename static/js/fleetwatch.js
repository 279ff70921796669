// Fleetwatch page behaviour: theme toggle, and Pause/Resume of the htmx-refreshed [data-live]
// regions with a status line that says when the last refresh worked or failed.
(function () {
  "use strict";

  var STORAGE_KEY = "fleetwatch-theme";
  var paused = false;

  function utcClock(date) {
    return date.toISOString().slice(11, 19) + "Z";
  }

  function currentTheme() {
    return document.documentElement.getAttribute("data-theme") === "dark" ? "dark" : "light";
  }

  function showTheme() {
    var button = document.getElementById("theme-toggle");
    if (!button) return;
    var dark = currentTheme() === "dark";
    button.setAttribute("aria-pressed", dark ? "true" : "false");
    button.title = dark ? "Switch to the light theme" : "Switch to the dark theme";
  }

  function setTheme(theme, remember) {
    document.documentElement.setAttribute("data-theme", theme);
    if (remember) {
      try {
        window.localStorage.setItem(STORAGE_KEY, theme);
      } catch (e) {
        // storage disabled: the choice lasts for this page only
      }
    }
    showTheme();
    document.dispatchEvent(new CustomEvent("fleetwatch:theme", { detail: { theme: theme } }));
  }

  function setStatus(state, text) {
    var status = document.getElementById("live-status");
    if (!status) return;
    status.setAttribute("data-state", state);
    status.querySelector(".icon").textContent = { live: "●", paused: "❚❚", error: "⚠" }[state];
    status.querySelector(".live-text").textContent = text;
  }

  function setPaused(value) {
    paused = value;
    var button = document.getElementById("live-toggle");
    if (button) {
      button.setAttribute("aria-pressed", paused ? "true" : "false");
      button.textContent = paused ? "Resume refresh" : "Pause refresh";
    }
    setStatus(paused ? "paused" : "live", paused ? "Paused" : "Live, every 5 s");
    document.dispatchEvent(new CustomEvent("fleetwatch:paused", { detail: { paused: paused } }));
  }

  // Charts (static/js/charts.js) ask this before refreshing.
  window.fleetwatch = {
    isPaused: function () {
      return paused || document.hidden;
    },
  };

  function isLive(elt) {
    return elt && elt.hasAttribute && elt.hasAttribute("data-live");
  }

  document.addEventListener("htmx:beforeRequest", function (evt) {
    // Only the polling regions pause; a filter change still asks the server at once.
    if (isLive(evt.detail.elt) && window.fleetwatch.isPaused()) evt.preventDefault();
  });
  // A live region's server may answer 204 when nothing it shows changed since the version the
  // region holds (X-Live-Version of its last answer, sent back as "seen"): nothing to swap.
  document.addEventListener("htmx:configRequest", function (evt) {
    var elt = evt.detail.elt;
    if (isLive(elt) && elt.dataset.liveVersion) evt.detail.parameters.seen = elt.dataset.liveVersion;
  });
  document.addEventListener("htmx:afterRequest", function (evt) {
    var xhr = evt.detail.xhr;
    var target = evt.detail.target;
    if (!xhr || !target || !isLive(target) || !evt.detail.successful) return;
    var version = xhr.getResponseHeader("X-Live-Version");
    if (version) target.dataset.liveVersion = version;
    else delete target.dataset.liveVersion;
    if (xhr.status === 204 && !paused) {
      setStatus("live", "Live, no change at " + utcClock(new Date()));
    }
  });
  document.addEventListener("htmx:afterSwap", function (evt) {
    if (isLive(evt.detail.elt) && !paused) {
      setStatus("live", "Live, updated " + utcClock(new Date()));
    }
  });

  // A live region marked data-live-innerhtml (its hx-swap is innerHTML) is swapped with one
  // innerHTML assignment and htmx.process of the region: htmx's swap of a 1,000-node grid
  // (9,000 elements) took 0.4-0.6 s of script in Chromium, innerHTML 0.08 s
  // (bench/overview_browser.py). An answer that moves the history (a filter change:
  // HX-Push-Url) keeps htmx's own swap.
  // A button with data-swap-400 shows a 400 answer (the server's explanation, e.g. a test
  // message the channel refused) instead of treating it as an error. Here, not in an hx-on
  // attribute: the Content-Security-Policy allows no inline script.
  document.addEventListener("htmx:beforeSwap", function (evt) {
    var elt = evt.detail.elt;
    if (elt && elt.hasAttribute && elt.hasAttribute("data-swap-400") && evt.detail.xhr &&
        evt.detail.xhr.status === 400) {
      evt.detail.shouldSwap = true;
      evt.detail.isError = false;
    }
  });

  document.addEventListener("htmx:beforeSwap", function (evt) {
    var target = evt.detail.target;
    if (!evt.detail.shouldSwap || !isLive(target) || !target.hasAttribute("data-live-innerhtml")) {
      return;
    }
    if (evt.detail.xhr && evt.detail.xhr.getResponseHeader("HX-Push-Url")) return;
    evt.detail.shouldSwap = false;
    target.innerHTML = evt.detail.serverResponse;
    htmx.process(target);
    if (!paused) setStatus("live", "Live, updated " + utcClock(new Date()));
    updateAges();
  });

  // Ages (<time datetime data-ago="suffix">) as app.web.fmt_age writes them, counted from the
  // server's clock (the data-now of the last answer) so a skewed browser clock does not move
  // them; kept current every 5 s, also while the server answers "no change".
  var serverOffsetMs = 0;
  function fmtAge(s) {
    s = Math.max(0, s);
    if (s < 90) return Math.round(s) + " s";
    if (s < 5400) return Math.round(s / 60) + " min";
    if (s < 172800) return Math.round(s / 3600) + " h";
    return Math.round(s / 86400) + " d";
  }
  function updateAges() {
    var stamp = document.querySelector("[data-now]");
    if (stamp && stamp.dataset.nowSeen !== stamp.dataset.now) {
      serverOffsetMs = Date.parse(stamp.dataset.now) - Date.now();
      stamp.dataset.nowSeen = stamp.dataset.now;
    }
    var now = Date.now() + serverOffsetMs;
    document.querySelectorAll("time[data-ago]").forEach(function (t) {
      var at = Date.parse(t.getAttribute("datetime"));
      if (!isNaN(at)) t.textContent = fmtAge((now - at) / 1000) + t.dataset.ago;
    });
  }
  document.addEventListener("htmx:afterSettle", updateAges);
  window.setInterval(function () {
    if (!window.fleetwatch.isPaused()) updateAges();
  }, 5000);
  function onFailure(evt) {
    if (isLive(evt.detail.elt)) {
      setStatus("error", "Refresh failed at " + utcClock(new Date()) + ", retrying");
    }
  }
  document.addEventListener("htmx:sendError", onFailure);
  document.addEventListener("htmx:responseError", onFailure);

  document.addEventListener("click", function (evt) {
    var button = evt.target.closest && evt.target.closest("button");
    if (!button) return;
    if (button.id === "theme-toggle") setTheme(currentTheme() === "dark" ? "light" : "dark", true);
    if (button.id === "live-toggle") setPaused(!paused);
  });

  document.addEventListener("DOMContentLoaded", function () {
    showTheme();
    var media = window.matchMedia("(prefers-color-scheme: dark)");
    media.addEventListener("change", function (e) {
      var stored = null;
      try {
        stored = window.localStorage.getItem(STORAGE_KEY);
      } catch (err) {
        stored = null;
      }
      if (!stored) setTheme(e.matches ? "dark" : "light", false);
    });
  });
})();
