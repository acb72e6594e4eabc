/* traceinsight report: sortable tables, row limits, filters, the Markdown summary.
   No network, no eval, no HTML built from data: text goes through textContent only. */
(function () {
  "use strict";
  var data = {};
  try {
    data = JSON.parse(document.getElementById("ti-data").textContent || "{}");
  } catch (e) {
    data = {};
  }

  function rowsOf(table) {
    var body = table.tBodies[0];
    return body ? Array.prototype.slice.call(body.rows) : [];
  }

  function cellKey(row, col, numeric) {
    var c = row.cells[col];
    if (!c) return numeric ? null : "";
    var v = c.getAttribute("data-v");
    if (numeric) {
      if (v === null || v === "") return null;
      var x = parseFloat(v);
      return isNaN(x) ? null : x;
    }
    return (v !== null ? v : c.textContent).trim().toLowerCase();
  }

  /* Show the rows matching the filter; past the limit only when expanded. */
  function refresh(table) {
    var limit = parseInt(table.getAttribute("data-limit") || "0", 10);
    var expanded = table.getAttribute("data-expanded") === "1";
    var q = (table.getAttribute("data-q") || "").toLowerCase();
    var shown = 0;
    rowsOf(table).forEach(function (r) {
      var match = !q || r.textContent.toLowerCase().indexOf(q) >= 0;
      var visible = match && (expanded || q || !limit || shown < limit);
      if (visible) shown += 1;
      r.classList.toggle("hid", !visible);
    });
  }

  function sortBy(table, th, btn) {
    var col = parseInt(btn.getAttribute("data-col"), 10);
    var numeric = btn.getAttribute("data-type") === "num";
    var cur = th.getAttribute("aria-sort");
    /* numbers sort largest first, text A to Z first; a second click reverses */
    var dir = cur === "none" || !cur ? (numeric ? -1 : 1) : (cur === "ascending" ? -1 : 1);
    var heads = table.tHead ? table.tHead.rows[0].cells : [];
    Array.prototype.forEach.call(heads, function (h) {
      if (h.hasAttribute("aria-sort")) h.setAttribute("aria-sort", "none");
    });
    th.setAttribute("aria-sort", dir === 1 ? "ascending" : "descending");
    var rows = rowsOf(table).map(function (r, i) {
      return { r: r, k: cellKey(r, col, numeric), i: i };
    });
    rows.sort(function (a, b) {
      if (a.k === b.k) return a.i - b.i;
      if (a.k === null || a.k === "") return 1;  /* missing values last either way */
      if (b.k === null || b.k === "") return -1;
      return (a.k < b.k ? -1 : 1) * dir;
    });
    var body = table.tBodies[0];
    var frag = document.createDocumentFragment();
    rows.forEach(function (x) { frag.appendChild(x.r); });
    body.appendChild(frag);
    refresh(table);
  }

  Array.prototype.forEach.call(document.querySelectorAll("table.data"), function (table) {
    if (table.classList.contains("sortable")) {
      Array.prototype.forEach.call(table.querySelectorAll("thead th button"), function (btn) {
        btn.addEventListener("click", function () { sortBy(table, btn.parentNode, btn); });
      });
    }
    refresh(table);
  });

  Array.prototype.forEach.call(document.querySelectorAll("button[data-expand]"), function (btn) {
    var table = document.getElementById(btn.getAttribute("data-expand"));
    if (!table) return;
    var label = btn.textContent;
    btn.hidden = false;
    btn.addEventListener("click", function () {
      var on = table.getAttribute("data-expanded") !== "1";
      table.setAttribute("data-expanded", on ? "1" : "0");
      btn.textContent = on ? "Show fewer rows" : label;
      refresh(table);
    });
  });

  Array.prototype.forEach.call(document.querySelectorAll("input[data-filter]"), function (inp) {
    var table = document.getElementById(inp.getAttribute("data-filter"));
    if (!table) return;
    inp.addEventListener("input", function () {
      table.setAttribute("data-q", inp.value.trim());
      refresh(table);
    });
  });

  /* the Markdown ticket body: shown in the Run section, copied by the nav button */
  var md = typeof data.markdown === "string" ? data.markdown : "";
  var pre = document.getElementById("ticket-md");
  if (pre) pre.textContent = md;
  var copy = document.getElementById("copy-md");
  if (copy && md) {
    copy.hidden = false;
    copy.addEventListener("click", function () {
      function done(ok) {
        copy.textContent = ok ? "Copied" : "Copy failed: see Run › Ticket summary";
        setTimeout(function () { copy.textContent = "Copy ticket summary"; }, 2000);
      }
      function fallback() {
        var ta = document.createElement("textarea");
        ta.value = md;
        ta.setAttribute("readonly", "");
        ta.style.position = "fixed";
        ta.style.opacity = "0";
        document.body.appendChild(ta);
        ta.select();
        var ok = false;
        try { ok = document.execCommand("copy"); } catch (e) { ok = false; }
        document.body.removeChild(ta);
        done(ok);
      }
      if (navigator.clipboard && navigator.clipboard.writeText) {
        navigator.clipboard.writeText(md).then(function () { done(true); }, fallback);
      } else {
        fallback();
      }
    });
  }
})();
