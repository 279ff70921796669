// The time zone picker (templates/components/_tz_picker.html): offers the browser's own zone,
// submits the GET form on change (so ?tz= lands in the URL), remembers the choice in a cookie,
// and carries the URL's tz on every htmx request so partial refreshes keep the viewer's zone.
(function () {
  "use strict";

  function browserZone() {
    try {
      return Intl.DateTimeFormat().resolvedOptions().timeZone || "";
    } catch (e) {
      return "";
    }
  }

  function setup(form) {
    var select = form.querySelector("[data-tz-select]");
    if (!select) return;
    var own = browserZone();
    if (own) {
      var found = null;
      for (var i = 0; i < select.options.length; i++) {
        if (select.options[i].value === own) found = select.options[i];
      }
      if (!found) {
        found = document.createElement("option");
        found.value = own;
        select.insertBefore(found, select.options[1] || null);
      }
      found.textContent = own + " (this browser)";
    }
    select.addEventListener("change", function () {
      document.cookie =
        form.dataset.cookie + "=" + encodeURIComponent(select.value) +
        "; path=/; max-age=31536000; samesite=lax";
      if (form.requestSubmit) form.requestSubmit();
      else form.submit();
    });
  }

  document.addEventListener("DOMContentLoaded", function () {
    document.querySelectorAll("[data-tz-picker]").forEach(setup);
  });

  document.addEventListener("htmx:configRequest", function (evt) {
    var tz = new URLSearchParams(window.location.search).get("tz");
    if (!tz || /[?&]tz=/.test(evt.detail.path) || "tz" in evt.detail.parameters) return;
    evt.detail.parameters.tz = tz;
  });
})();
