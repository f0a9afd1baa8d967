// oncestream console: the only script. Pages work without it; it adds live refresh.
//
// <div id="X" data-live-ms="2000">: every N ms the page is fetched again and this element is
// replaced by the element with the same id in the new page (no other endpoint needed; the
// session cookie goes along, the server renders as usual). Paused while the tab is hidden or
// while a form control inside the element has focus (so typing is never interrupted).
// <form data-confirm="question">: asks before submitting.
"use strict";

(function () {
  function refresh(el) {
    var ms = parseInt(el.getAttribute("data-live-ms"), 10);
    if (!(ms > 0)) return;
    setTimeout(function tick() {
      if (document.hidden || el.contains(document.activeElement) && document.activeElement !== document.body) {
        setTimeout(tick, ms);
        return;
      }
      fetch(window.location.href, {credentials: "same-origin", headers: {"X-Requested-With": "console.js"}})
        .then(function (r) { return r.ok ? r.text() : null; })
        .then(function (html) {
          if (html === null) return;
          var fresh = new DOMParser().parseFromString(html, "text/html").getElementById(el.id);
          if (fresh) {
            el.replaceWith(fresh);
            el = fresh;
          }
        })
        .catch(function () { /* the next tick tries again */ })
        .finally(function () { setTimeout(tick, ms); });
    }, ms);
  }

  document.addEventListener("DOMContentLoaded", function () {
    document.querySelectorAll("[data-live-ms][id]").forEach(refresh);
    document.querySelectorAll("form[data-confirm]").forEach(function (form) {
      form.addEventListener("submit", function (event) {
        if (!window.confirm(form.getAttribute("data-confirm"))) event.preventDefault();
      });
    });
  });
})();
