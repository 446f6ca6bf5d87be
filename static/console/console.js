// Console behaviour: sortable tables and copy buttons. No framework; the pages work without it.
(function () {
  "use strict";

  function cellValue(row, index) {
    var cell = row.cells[index];
    if (!cell) return "";
    return cell.hasAttribute("data-sort") ? cell.getAttribute("data-sort") : cell.textContent.trim();
  }

  function compare(a, b) {
    var x = parseFloat(a), y = parseFloat(b);
    var numeric = a !== "" && b !== "" && !isNaN(x) && !isNaN(y) && isFinite(a) && isFinite(b);
    if (numeric) return x - y;
    return a.localeCompare(b, undefined, { numeric: true, sensitivity: "base" });
  }

  function sortBy(table, header, index) {
    var ascending = header.getAttribute("aria-sort") !== "ascending";
    table.querySelectorAll("thead th").forEach(function (th) { th.removeAttribute("aria-sort"); });
    header.setAttribute("aria-sort", ascending ? "ascending" : "descending");
    var body = table.tBodies[0];
    var rows = Array.prototype.slice.call(body.rows).filter(function (r) { return r.cells.length > 1; });
    rows.sort(function (r1, r2) {
      var result = compare(cellValue(r1, index), cellValue(r2, index));
      return ascending ? result : -result;
    });
    rows.forEach(function (row) { body.appendChild(row); });
  }

  function makeSortable(table) {
    var headers = table.querySelectorAll("thead th");
    headers.forEach(function (th, index) {
      var hidden = th.querySelector(".visually-hidden");
      var label = th.textContent.trim();
      if (!label || (hidden && hidden.textContent.trim() === label)) return;  // action columns: nothing to sort
      var button = document.createElement("button");
      button.type = "button";
      button.className = "sort";
      while (th.firstChild) button.appendChild(th.firstChild);
      var hint = document.createElement("span");
      hint.className = "visually-hidden";
      hint.textContent = ", sort";
      button.appendChild(hint);
      th.appendChild(button);
      button.addEventListener("click", function () { sortBy(table, th, index); });
    });
  }

  function copyFrom(button) {
    var source = document.getElementById(button.getAttribute("data-copy-target"));
    var status = document.querySelector(".copy-status");
    var done = function (text) { if (status) status.textContent = text; };
    if (navigator.clipboard && window.isSecureContext) {
      navigator.clipboard.writeText(source.value).then(
        function () { done("Copied to the clipboard."); },
        function () { source.select(); done("Press Ctrl+C (⌘C) to copy the selected secret."); });
    } else {
      source.select();
      done("Press Ctrl+C (⌘C) to copy the selected secret.");
    }
  }

  document.addEventListener("DOMContentLoaded", function () {
    document.querySelectorAll("table.sortable").forEach(makeSortable);
    document.querySelectorAll("button.copy").forEach(function (button) {
      button.addEventListener("click", function () { copyFrom(button); });
    });
  });
})();
