// oncestream console, SQL page: a SELECT is sent to the console's /api/sql/query and its rows
// (one JSON object per line: header, row, final or error) are appended to the table as they
// arrive; Stop aborts the fetch, which ends the query on the SQL server. Other statements are
// submitted as the form (no script needed).
"use strict";

(function () {
  document.addEventListener("DOMContentLoaded", function () {
    var form = document.getElementById("sql-form");
    if (!form) return;
    var editor = document.getElementById("sql-editor");
    var stop = document.getElementById("sql-stop");
    var status = document.getElementById("sql-status");
    var result = document.getElementById("sql-query-result");
    var table = document.getElementById("sql-rows");
    var count = document.getElementById("sql-row-count");
    var running = null;
    var failed = false;

    function cell(tag, value) {
      var el = document.createElement(tag);
      el.textContent = value === null ? "null" : (typeof value === "string" ? value : JSON.stringify(value));
      return el;
    }

    function say(text, isError) {
      status.textContent = text;
      status.className = isError ? "error" : "hint";
    }

    function show(event) {
      if (event.header) {
        document.getElementById("sql-query-id").textContent = event.header.queryId || "";
        var head = table.tHead.rows[0];
        head.replaceChildren();
        event.header.columns.forEach(function (c) { head.appendChild(cell("th", c[0] + " " + c[1])); });
        result.hidden = false;
        say("streaming…", false);
      } else if (event.row) {
        var tr = document.createElement("tr");
        tr.className = "sql-row";
        event.row.forEach(function (v) { tr.appendChild(cell("td", v)); });
        table.tBodies[0].appendChild(tr);
        count.textContent = String(table.tBodies[0].rows.length);
      } else if (event.final) {
        say(event.final, false);
      } else if (event.error) {
        failed = true;
        say("Error: " + event.error, true);
      }
    }

    function finish(text, isError) {
      running = null;
      stop.disabled = true;
      if (text) say(text, isError);
    }

    stop.addEventListener("click", function () {
      if (running) running.abort();
    });

    form.addEventListener("submit", function (e) {
      if (!/^\s*select\b/i.test(editor.value)) return;   // statements: the ordinary form POST
      e.preventDefault();
      if (running) running.abort();
      running = new AbortController();
      failed = false;
      table.tHead.rows[0].replaceChildren();
      table.tBodies[0].replaceChildren();
      count.textContent = "0";
      say("starting…", false);
      stop.disabled = false;
      var body = new URLSearchParams();
      body.set("sql", editor.value);
      body.set("offset_reset", document.getElementById("offset-reset").value);
      var csrf = form.querySelector("input[name=csrf_token]").value;
      var decoder = new TextDecoder();
      var buffered = "";
      fetch("/api/sql/query", {method: "POST", body: body, credentials: "same-origin", signal: running.signal,
                               headers: {"X-CSRF-Token": csrf}})
        .then(function (response) {
          var reader = response.body.getReader();
          function pump() {
            return reader.read().then(function (chunk) {
              if (chunk.done) return;
              buffered += decoder.decode(chunk.value, {stream: true});
              var lines = buffered.split("\n");
              buffered = lines.pop();
              lines.forEach(function (line) { if (line.trim()) show(JSON.parse(line)); });
              return pump();
            });
          }
          return pump();
        })
        .then(function () { finish(failed ? null : "query ended", false); })
        .catch(function (err) {
          if (err.name === "AbortError") finish("stopped", false);
          else finish("failed: " + err, true);
        });
    });
  });
})();
