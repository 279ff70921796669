// Runs in <head> before the first paint: the stored theme, else the system's.
(function () {
  "use strict";
  var theme = null;
  try {
    theme = window.localStorage.getItem("fleetwatch-theme");
  } catch (e) {
    theme = null; // storage disabled: follow the system
  }
  if (theme !== "light" && theme !== "dark") {
    theme = window.matchMedia("(prefers-color-scheme: dark)").matches ? "dark" : "light";
  }
  document.documentElement.setAttribute("data-theme", theme);
})();
