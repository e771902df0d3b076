// "Open in Perfetto UI" on a trace's overview: fetch the annotated trace from this dashboard, open
// ui.perfetto.dev in a new tab and hand it the file with Perfetto's documented postMessage API (PING until
// the tab answers PONG, then {perfetto: {buffer, title, fileName}}). The file goes from this page to that
// tab only. Without a network (or with pop-ups blocked) the status line says so; the download still works.
(function () {
  "use strict";
  var WAIT_MS = 20000;  // how long to wait for the tab's PONG (data-wait-ms overrides it)

  function say(text) {
    var box = document.getElementById("overview-perfetto-status");
    if (box) box.textContent = text;
  }

  function open(button) {
    var href = button.getAttribute("data-href");
    var origin = button.getAttribute("data-origin");
    var title = button.getAttribute("data-title") || "trace";
    var fileName = button.getAttribute("data-file") || "trace.json.gz";
    var wait = Number(button.getAttribute("data-wait-ms")) || WAIT_MS;
    var tab = window.open(origin + "/#!/", "_blank");
    if (!tab) {
      say("The browser blocked the new tab: allow pop-ups, or download the file and open it there.");
      return;
    }
    say("Preparing the annotated trace…");
    fetch(href).then(function (response) {
      if (!response.ok) throw new Error("the dashboard answered " + response.status);
      return response.arrayBuffer();
    }).then(function (buffer) {
      say("Waiting for Perfetto UI…");
      var started = Date.now();
      var timer = null;
      function onMessage(event) {
        if (event.source !== tab || event.data !== "PONG") return;
        window.clearInterval(timer);
        window.removeEventListener("message", onMessage);
        tab.postMessage({perfetto: {buffer: buffer, title: title, fileName: fileName}}, origin);
        say("Opened in Perfetto UI.");
      }
      window.addEventListener("message", onMessage);
      timer = window.setInterval(function () {
        if (Date.now() - started > wait || tab.closed) {
          window.clearInterval(timer);
          window.removeEventListener("message", onMessage);
          say("Could not reach " + origin + " (offline?): download the file and open it there.");
          return;
        }
        try { tab.postMessage("PING", origin); } catch (e) { /* not loaded yet */ }
      }, 250);
    }).catch(function (error) {
      tab.close();
      say("Could not prepare the annotated trace: " + error.message);
    });
  }

  document.addEventListener("click", function (event) {
    var button = event.target && event.target.closest ? event.target.closest("#overview-open-perfetto") : null;
    if (button) open(button);
  });
})();
