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
  document.addEventListener("htmx:afterSwap", function (evt) {
    if (isLive(evt.detail.elt) && !paused) {
      setStatus("live", "Live, updated " + utcClock(new Date()));
    }
  });
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
