// Deployment page: refresh instance states and the progress bar from our JSON endpoint every few seconds.
(function () {
  "use strict";
  var INTERVAL_MS = 3000;

  function text(value, suffix) {
    return value === null || value === undefined ? "—" : String(value) + (suffix || "");
  }

  function updateRow(row, instance) {
    var badge = row.querySelector('[data-field="state"] .badge');
    if (badge) {
      badge.className = "badge badge-" + instance.state;
      badge.textContent = instance.state_label;
    }
    var role = row.querySelector('[data-field="role"] .badge');
    if (role) {
      role.className = "badge badge-" + instance.role;
      role.textContent = instance.role_label;
    }
    var fields = { health: text(instance.health), queue: text(instance.queue), running: text(instance.running),
                   kv_cache: instance.kv_cache === null || instance.kv_cache === undefined ? "—" : instance.kv_cache.toFixed(1) + " %", restarts: text(instance.restarts),
                   pending_reason: instance.pending_reason || "" };
    Object.keys(fields).forEach(function (name) {
      var cell = row.querySelector('[data-field="' + name + '"]');
      if (cell) cell.textContent = fields[name];
    });
  }

  function render(panel, data) {
    var progress = panel.querySelector("#ready-progress");
    var status = panel.querySelector("#progress-text");
    var s = data.summary;
    progress.max = Math.max(s.target, 1);
    progress.value = s.ready;
    var message = data.status === "deleting" ? "Deleting: draining " + s.live + " instance(s)"
                                             : s.ready + " of " + s.target + " ready" +
                  (s.waiting_for_capacity ? " · " + s.waiting_for_capacity + " waiting for host capacity" : "");
    if (status.textContent !== message) status.textContent = message;
    var known = {};
    panel.querySelectorAll("tr[data-instance]").forEach(function (row) { known[row.getAttribute("data-instance")] = row; });
    var unseen = data.instances.some(function (i) { return !known[String(i.id)]; });
    data.instances.forEach(function (i) { if (known[String(i.id)]) updateRow(known[String(i.id)], i); });
    panel.setAttribute("data-stale", unseen ? "true" : "false");
    var note = panel.querySelector(".poll-note");
    if (unseen && !note) {
      note = document.createElement("p");
      note.className = "poll-note note";
      note.innerHTML = 'New instances were started. <a href="">Reload the page</a> to see them.';
      panel.insertBefore(note, panel.querySelector("table"));
    }
  }

  function poll(panel) {
    var next = function () { window.setTimeout(function () { poll(panel); }, INTERVAL_MS); };
    if (document.hidden) { next(); return; }  // no requests from a background tab
    fetch(panel.getAttribute("data-poll-url"), { credentials: "same-origin", headers: { Accept: "application/json" } })
      .then(function (r) { if (!r.ok) throw new Error(String(r.status)); return r.json(); })
      .then(function (data) { render(panel, data); })
      .catch(function () { /* the next tick tries again */ })
      .finally(next);
  }

  // A server-rendered fragment (the rollout's live panel): swapped in whole; the buttons stay outside it, so
  // keyboard focus is never lost. When the state changed, the buttons may be stale: say so.
  function pollFragment(box) {
    var next = function () { window.setTimeout(function () { pollFragment(box); }, INTERVAL_MS); };
    if (document.hidden) { next(); return; }
    fetch(box.getAttribute("data-poll-fragment"), { credentials: "same-origin", headers: { Accept: "text/html" } })
      .then(function (r) { if (!r.ok) throw new Error(String(r.status)); return r.text(); })
      .then(function (html) {
        var fresh = document.createElement("div");
        fresh.innerHTML = html;
        var state = fresh.querySelector("[data-rollout-state]");
        box.replaceChildren.apply(box, Array.prototype.slice.call(fresh.childNodes));
        if (state && state.getAttribute("data-rollout-state") !== box.getAttribute("data-state") &&
            !document.getElementById("rollout-stale")) {
          var note = document.createElement("p");
          note.id = "rollout-stale";
          note.className = "poll-note note";
          note.innerHTML = 'The rollout\'s state changed. <a href="">Reload the page</a> for its buttons.';
          box.parentNode.insertBefore(note, box);
        }
      })
      .catch(function () { /* the next tick tries again */ })
      .finally(next);
  }

  document.addEventListener("DOMContentLoaded", function () {
    var panel = document.getElementById("instances-panel");
    if (panel) window.setTimeout(function () { poll(panel); }, INTERVAL_MS);
    document.querySelectorAll("[data-poll-fragment]").forEach(function (box) {
      window.setTimeout(function () { pollFragment(box); }, INTERVAL_MS);
    });
  });
})();
