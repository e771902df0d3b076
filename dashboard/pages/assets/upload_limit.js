// dcc.Upload drops a file over its max_size without telling anyone: say so under the drop zone.
// The limit comes from the data-max-bytes attribute of the zone's wrapper (the dashboard's
// --max-upload-mb); the message goes into #traces-upload-limit, which no callback writes.
(function () {
  "use strict";
  function check(event) {
    var target = event.target;
    var wrapper = target && target.closest ? target.closest("[data-max-bytes]") : null;
    if (!wrapper) return;
    var files = event.dataTransfer ? event.dataTransfer.files : target.files;
    var box = document.getElementById("traces-upload-limit");
    if (!files || !files.length || !box) return;
    var limit = Number(wrapper.getAttribute("data-max-bytes"));
    var file = files[0];
    if (!(limit > 0) || file.size <= limit) {
      box.textContent = "";
      box.className = "";
      return;
    }
    var mb = function (n) { return (n / 1048576).toFixed(1) + " MB"; };
    box.textContent = file.name + " is " + mb(file.size) + ", over this dashboard's upload limit of " +
      mb(limit) + ": send it with `stallscope upload FILE --to " + window.location.origin +
      (wrapper.getAttribute("data-token") ? " --token $STALLSCOPE_DASHBOARD_TOKEN" : "") + "`.";
    box.className = "stallscope-error";
  }
  document.addEventListener("drop", check, true);
  document.addEventListener("change", check, true);
})();
