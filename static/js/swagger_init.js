// Starts Swagger UI on /docs from a file, not an inline script (the Content-Security-Policy
// allows scripts from this server only).
window.addEventListener("DOMContentLoaded", function () {
  "use strict";
  window.ui = SwaggerUIBundle({
    url: "/openapi.json",
    dom_id: "#swagger-ui",
    layout: "BaseLayout",
    deepLinking: true,
    showExtensions: true,
    showCommonExtensions: true,
    presets: [SwaggerUIBundle.presets.apis, SwaggerUIBundle.SwaggerUIStandalonePreset]
  });
});
