"""The HTML report's inline stylesheet and script: one self-contained file, no network, opens from disk.

Kept apart from the markup so ``_html`` reads as what the page shows. The script only filters what the
page already holds (failed only, by tag, text search) and opens the case a ``#case-<id>`` link names;
it reads case data from the DOM and from one JSON blob embedded escaped, never through ``innerHTML``.
"""

from __future__ import annotations

__all__ = ["CSS", "JS"]

CSS = """
:root{--ok:#1a7f37;--bad:#cf222e;--warn:#9a6700;--mute:#57606a;--line:#d0d7de;--bg:#f6f8fa}
*{box-sizing:border-box}
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:0;color:#1f2328}
header,section,nav,main{padding:0 24px}
header{background:var(--bg);border-bottom:1px solid var(--line);padding-top:8px;padding-bottom:8px}
h1{font-size:20px;margin:8px 0}h2{font-size:16px;margin:18px 0 6px}h4{margin:6px 0 2px;font-size:13px}
.verdict{font-weight:600;font-size:16px}.verdict.pass{color:var(--ok)}.verdict.fail{color:var(--bad)}
.verdict.inconclusive{color:var(--warn)}
.grid{display:flex;flex-wrap:wrap;gap:8px 32px;align-items:flex-start}
table{border-collapse:collapse;margin:4px 0}td,th{border:1px solid var(--line);padding:2px 6px;text-align:left;
vertical-align:top}th{background:var(--bg)}
code,pre{font:12px/1.4 ui-monospace,SFMono-Regular,Menlo,Consolas,monospace}
pre{white-space:pre-wrap;word-break:break-word;margin:0;background:var(--bg);padding:6px;border-radius:4px}
.warn{color:var(--warn)}.ok{color:var(--ok)}.bad{color:var(--bad)}.mute{color:var(--mute)}
nav{position:sticky;top:0;background:#fff;border-bottom:1px solid var(--line);padding-top:8px;padding-bottom:8px;
z-index:1;display:flex;gap:16px;align-items:center}
nav input[type=search]{width:280px;padding:3px 6px}
[hidden]{display:none!important}
.case{border:1px solid var(--line);border-radius:6px;margin:8px 0;content-visibility:auto;
contain-intrinsic-size:auto 44px}
.case>details>summary{cursor:pointer;padding:6px 10px;list-style-position:inside}
.case>details>div{padding:0 12px 10px}
.case:target{outline:2px solid #0969da}
.b{display:inline-block;min-width:62px;text-align:center;border-radius:10px;padding:0 8px;font-size:12px;
font-weight:600;color:#fff;margin-right:6px}
[data-verdict=passed] .b{background:var(--ok)}[data-verdict=failed] .b{background:var(--bad)}
[data-verdict=errored] .b{background:#6e7781}[data-verdict=flaky] .b{background:var(--warn)}
.tag{display:inline-block;background:#ddf4ff;border-radius:8px;padding:0 6px;margin-left:4px;font-size:12px}
ul.checks{margin:4px 0;padding-left:18px}ul.checks li.f{color:var(--bad)}ul.checks li.n{color:var(--mute)}
.steps td{max-width:520px}.steps tr[data-first-divergence]{background:#fff1e5}
.steps tr[data-first-divergence] td:first-child::after{content:" \\25C0  first divergence";color:var(--bad);
font-weight:600;white-space:nowrap}
.steps i,.case summary i{color:var(--mute)}.st{font-size:11px;color:var(--mute)}.st.x{color:var(--bad)}
ul.diff{margin:2px 0;padding-left:16px}del{background:#ffebe9;text-decoration:none}ins{background:#dafbe1;
text-decoration:none}
.answers{display:grid;grid-template-columns:1fr 1fr;gap:12px}
"""

JS = """
(function () {
  "use strict";
  var data = JSON.parse(document.getElementById("harvester-data").textContent);
  var cases = Array.prototype.slice.call(document.querySelectorAll("[data-case-id]"));
  var failed = document.getElementById("f-failed");
  var tag = document.getElementById("f-tag");
  var text = document.getElementById("f-text");
  var count = document.getElementById("f-count");
  data.tags.forEach(function (t) {
    var o = document.createElement("option");
    o.value = t;
    o.textContent = t;
    tag.appendChild(o);
  });
  var tags = cases.map(function (c) { return JSON.parse(c.getAttribute("data-tags") || "[]"); });
  var texts = null;
  function apply() {
    var onlyFailed = failed.checked, want = tag.value, q = text.value.trim().toLowerCase(), shown = 0;
    if (q && texts === null) {
      texts = cases.map(function (c) { return c.textContent.toLowerCase(); });
    }
    cases.forEach(function (c, i) {
      var keep = (!onlyFailed || c.getAttribute("data-verdict") !== "passed") &&
        (!want || tags[i].indexOf(want) >= 0) && (!q || texts[i].indexOf(q) >= 0);
      c.hidden = !keep;
      if (keep) { shown += 1; }
    });
    count.textContent = shown + " of " + cases.length + " cases shown";
  }
  function openTarget() {
    var id = location.hash.slice(1);
    try { id = decodeURIComponent(id); } catch (err) { /* a malformed link: look it up as written */ }
    var el = id ? document.getElementById(id) : null;
    if (el && el.hasAttribute("data-case-id")) {
      el.hidden = false;
      el.querySelector("details").open = true;
      el.scrollIntoView();
    }
  }
  failed.addEventListener("change", apply);
  tag.addEventListener("change", apply);
  text.addEventListener("input", apply);
  window.addEventListener("hashchange", openTarget);
  apply();
  openTarget();
})();
"""
