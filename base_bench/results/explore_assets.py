"""The style sheet and the script that explore.html carries inline (results/explore.py writes them).

The script reads the page's JSON block (`#bb-data`, built by `explore.build_page`), and only
filters, sorts and pages it: every number it shows is one of that block's. It builds every element
with `document.createElement` and puts text in with `textContent` (or an attribute set through the
DOM), never through `innerHTML`, so no text from a report or a data file can become markup. It
makes no request: no fetch, no image, no font; the page's Content-Security-Policy would block one
anyway. Rows are paged (25 to 500 a page), so a data file of ten thousand items stays quick.
"""

CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;margin:1.5em;color:#1d1d1f;font-size:14px}
h1{font-size:1.4em;margin:0 0 .5em}
code{font-size:12px;overflow-wrap:anywhere}
.terms{background:#fff4e5;border:1px solid #f0b35a;padding:.5em .8em;border-radius:4px;max-width:110em}
.terms.redacted{background:#eef4ff;border-color:#8fb0e8}
.canary,.note{color:#555;margin:.4em 0}
table{border-collapse:collapse}
table.runs{margin:.8em 0;font-size:13px}
table.runs th,table.runs td{border:1px solid #ccc;padding:3px 8px;text-align:left}
table.runs td.num{text-align:right;font-variant-numeric:tabular-nums}
table.runs td.label{max-width:28em;overflow-wrap:anywhere}
table.runs th{background:#f3f3f3}
#controls{display:flex;flex-wrap:wrap;gap:.5em 1.2em;align-items:center;margin:1em 0 .5em;padding:.6em .8em;
 background:#f6f7f9;border:1px solid #dde;border-radius:4px}
#controls label{white-space:nowrap}
#controls fieldset{border:1px solid #ccd;border-radius:4px;padding:.2em .6em;margin:0;display:flex;gap:.5em;align-items:center}
#controls legend{font-size:12px;color:#555}
#controls input[type=search]{width:16em}
#pairinfo{margin:.3em 0;color:#333}
#pairinfo .refused{color:#a00}
#status{margin:.4em 0;font-weight:600}
.pager{display:flex;gap:.4em;align-items:center;margin:.4em 0}
.pager button{min-width:2.4em}
table.items{width:100%;font-size:13px;table-layout:fixed}
table.items th{background:#f3f3f3;position:sticky;top:0;z-index:1;border:1px solid #ccc;padding:4px 6px;text-align:left}
table.items td{border:1px solid #e1e1e1;padding:3px 6px;vertical-align:top;overflow-wrap:anywhere}
table.items th.meta{width:12em}
table.items th.run{width:8.5em}
table.items th.run .name{font-weight:400;font-size:11px;color:#555;overflow:hidden;text-overflow:ellipsis;white-space:nowrap}
table.items tbody{border-top:2px solid #999}
table.items td.meta .id{font-weight:600;font-family:ui-monospace,monospace;font-size:12px}
table.items td.meta div{margin-bottom:.15em}
table.items td.ctx{white-space:pre-wrap;background:#fafafa}
table.items td.cont{white-space:pre-wrap}
table.items td.cont .letter{font-weight:600;color:#555;margin-right:.4em}
table.items tr.correct td.cont{background:#e8f6e8;box-shadow:inset 4px 0 0 #2e8b3e}
table.items .badge{font-size:11px;font-weight:600;border-radius:3px;padding:0 .35em;margin-left:.4em;white-space:nowrap}
table.items .badge.ok{background:#2e8b3e;color:#fff}
table.items td.sum.right{background:#e8f6e8}
table.items td.sum.wrong{background:#fbeaea}
table.items td.sum.none{color:#888}
table.items td.lp{text-align:right;font-variant-numeric:tabular-nums;font-family:ui-monospace,monospace;font-size:12px}
table.items td.lp.chosen{font-weight:700;background:#fff6cc}
table.items td.lp.chosen.right{background:#d5f0d5}
table.items td.lp.chosen.wrong{background:#f6d5d5}
.muted{color:#888}
""".strip()

SCRIPT = r"""
(function () {
  "use strict";
  var D = JSON.parse(document.getElementById("bb-data").textContent);
  var I = D.items, R = D.runs, N = I.id.length;
  var LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ";
  var S = {cat: -1, diff: -1, disagree: false, allWrong: false, flipA: 0, flipB: R.length > 1 ? 1 : 0,
           flip: "off", oRun: 0, outcome: "any", q: "", sort: "file", page: 0, size: 50};

  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined && text !== null) e.textContent = String(text);
    return e;
  }
  function option(sel, value, text) {
    var o = el("option", null, text); o.value = String(value); sel.appendChild(o); return o;
  }
  function labelled(text, control) {
    var l = el("label", null, text + " "); l.appendChild(control); return l;
  }
  function runName(k) { return R[k].tag + " " + R[k].name; }
  function fixed(x, d) { return x === null || x === undefined ? "n/a" : x.toFixed(d); }

  var hay = null;  // lower-cased searchable text per item, made on the first search
  function haystack() {
    if (hay) return hay;
    hay = new Array(N);
    for (var i = 0; i < N; i++) {
      var parts = [I.id[i]];
      if (I.context) parts.push(I.context[i]);
      if (I.continuations) parts = parts.concat(I.continuations[i]);
      hay[i] = parts.join("\n").toLowerCase();
    }
    return hay;
  }

  function pairOf(a, b) {
    if (a === b) return null;
    var lo = Math.min(a, b), hi = Math.max(a, b);
    for (var k = 0; k < D.pairs.length; k++) {
      var p = D.pairs[k];
      if (p.a === lo && p.b === hi) {
        if (p.refused) return {refused: p.refused};
        var swap = a > b;
        return {ab: swap ? p.a_wrong_b_right : p.a_right_b_wrong,
                ba: swap ? p.a_right_b_wrong : p.a_wrong_b_right, p: p.p, n: p.n, discordant: p.discordant};
      }
    }
    return null;
  }

  function flipSet() {
    if (S.flip === "off" || R.length < 2) return null;
    var p = pairOf(S.flipA, S.flipB), set = {};
    if (!p || p.refused) return set;
    if (S.flip !== "ba") p.ab.forEach(function (i) { set[i] = true; });
    if (S.flip !== "ab") p.ba.forEach(function (i) { set[i] = true; });
    return set;
  }

  function visible() {
    var out = [], flips = flipSet(), q = S.q.trim().toLowerCase(), h = q ? haystack() : null;
    for (var i = 0; i < N; i++) {
      if (S.cat >= 0 && I.category[i] !== S.cat) continue;
      if (S.diff >= 0 && I.difficulty[i] !== S.diff) continue;
      if (S.disagree && !I.disagree[i]) continue;
      if (S.allWrong && !I.all_wrong[i]) continue;
      if (flips && !flips[i]) continue;
      if (S.outcome !== "any") {
        var c = R[S.oRun].correct[i];
        if (c === null || c !== (S.outcome === "right")) continue;
      }
      if (q && h[i].indexOf(q) < 0) continue;
      out.push(i);
    }
    var m = /^margin-(asc|desc):(\d+)$/.exec(S.sort);
    if (m) {
      var run = R[+m[2]], sign = m[1] === "asc" ? 1 : -1;
      out.sort(function (x, y) {
        var a = run.margin[x], b = run.margin[y];
        if (a === null && b === null) return x - y;
        if (a === null) return 1;
        if (b === null) return -1;
        return a === b ? x - y : sign * (a - b);
      });
    } else if (S.sort === "elo-desc" || S.sort === "elo-asc") {
      var s2 = S.sort === "elo-asc" ? 1 : -1;
      out.sort(function (x, y) { return I.item_elo[x] === I.item_elo[y] ? x - y : s2 * (I.item_elo[x] - I.item_elo[y]); });
    }
    return out;
  }

  // ------------------------------------------------------------ controls
  var controls = document.getElementById("controls");
  function select(id, entries, onchange) {
    var s = el("select"); s.id = id;
    entries.forEach(function (e) { option(s, e[0], e[1]); });
    s.addEventListener("change", function () { onchange(s.value); S.page = 0; update(); });
    return s;
  }
  var cats = [[-1, "all"]].concat(D.categories.map(function (c, k) { return [k, c]; }));
  var diffs = [[-1, "all"]].concat(D.difficulties.map(function (c, k) { return [k, c]; }));
  controls.appendChild(labelled("category", select("f-category", cats, function (v) { S.cat = +v; })));
  controls.appendChild(labelled("difficulty", select("f-difficulty", diffs, function (v) { S.diff = +v; })));
  function checkbox(id, text, key) {
    var c = el("input"); c.type = "checkbox"; c.id = id;
    c.addEventListener("change", function () { S[key] = c.checked; S.page = 0; update(); });
    var l = el("label"); l.appendChild(c); l.appendChild(document.createTextNode(" " + text)); return l;
  }
  if (R.length > 1) controls.appendChild(checkbox("f-disagree", "runs disagree", "disagree"));
  controls.appendChild(checkbox("f-allwrong", R.length > 1 ? "every run misses" : "missed", "allWrong"));
  var runs = R.map(function (r, k) { return [k, runName(k)]; });
  if (R.length > 1) {
    var fs = el("fieldset"); fs.appendChild(el("legend", null, "flips between two runs (as compare counts them)"));
    fs.appendChild(labelled("A", select("f-flip-a", runs, function (v) { S.flipA = +v; })));
    fs.appendChild(labelled("B", select("f-flip-b", runs, function (v) { S.flipB = +v; })));
    fs.appendChild(labelled("show", select("f-flip", [["off", "all items"], ["both", "flipped either way"],
      ["ab", "A right, B wrong"], ["ba", "A wrong, B right"]], function (v) { S.flip = v; })));
    controls.appendChild(fs);
    document.getElementById("f-flip-b").value = "1";
  }
  var fo = el("fieldset"); fo.appendChild(el("legend", null, "outcome"));
  fo.appendChild(select("f-outcome-run", runs, function (v) { S.oRun = +v; }));
  fo.appendChild(select("f-outcome", [["any", "right or wrong"], ["right", "right"], ["wrong", "wrong"]],
    function (v) { S.outcome = v; }));
  controls.appendChild(fo);
  var sorts = [["file", "data file order"], ["elo-desc", "item Elo, highest first"], ["elo-asc", "item Elo, lowest first"]];
  R.forEach(function (r, k) {
    sorts.push(["margin-asc:" + k, r.tag + " margin, closest first"]);
    sorts.push(["margin-desc:" + k, r.tag + " margin, widest first"]);
  });
  controls.appendChild(labelled("sort", select("f-sort", sorts, function (v) { S.sort = v; })));
  var search = el("input"); search.type = "search"; search.id = "f-search";
  search.placeholder = D.redacted ? "item id" : "id, context or continuation";
  var timer = null;
  search.addEventListener("input", function () {
    clearTimeout(timer);
    timer = setTimeout(function () { S.q = search.value; S.page = 0; update(); }, 120);
  });
  controls.appendChild(labelled("search", search));
  var size = select("f-size", [[25, "25"], [50, "50"], [100, "100"], [250, "250"], [500, "500"]],
    function (v) { S.size = +v; });
  size.value = "50";
  controls.appendChild(labelled("per page", size));

  // ------------------------------------------------------------ the table
  var table = document.getElementById("items");
  function head() {
    var thead = el("thead"), tr = el("tr");
    tr.appendChild(el("th", "meta", "item"));
    tr.appendChild(el("th", "text", D.redacted ? "continuations (texts left out)" : "context and continuations"));
    R.forEach(function (r, k) {
      var th = el("th", "run"); th.appendChild(el("div", "tag", r.tag));
      th.appendChild(el("div", "name", r.name + " · " + r.backend)); th.title = runName(k) + " · " + r.dtype + " · " + r.backend + " · " + r.bos;
      th.dataset.run = r.tag; tr.appendChild(th);
    });
    thead.appendChild(tr); return thead;
  }
  table.appendChild(head());

  function itemBody(i) {
    var tb = el("tbody", "item"), n = I.n_choices[i], label = I.label[i];
    tb.dataset.id = I.id[i]; tb.dataset.row = String(i);
    var tr = el("tr", "head");
    var meta = el("td", "meta"); meta.rowSpan = n + 1;
    meta.appendChild(el("div", "id", I.id[i]));
    meta.appendChild(el("div", "cat", D.categories[I.category[i]]));
    meta.appendChild(el("div", "diff", D.difficulties[I.difficulty[i]] + " · item Elo " + I.item_elo[i]));
    if (I.tags && I.tags[i].length) meta.appendChild(el("div", "muted tags", "tags: " + I.tags[i].join(", ")));
    if (I.disagree[i]) meta.appendChild(el("div", "muted", "runs disagree"));
    tr.appendChild(meta);
    tr.appendChild(el("td", "ctx", I.context ? I.context[i] : "(context left out)"));
    R.forEach(function (r) {
      var c = r.correct[i], td = el("td", "sum " + (c === null ? "none" : c ? "right" : "wrong"));
      td.dataset.run = r.tag;
      if (c === null) { td.textContent = "not scored"; }
      else {
        td.appendChild(el("div", "verdict", (c ? "\u2713 right" : "\u2717 wrong") + ", chose " + LETTERS[r.pred[i]]));
        var mg = el("div", "margin", r.margin[i] === null ? "margin n/a" : "margin " + fixed(r.margin[i], 4));
        if (r.margin[i] !== null) { mg.title = "margin over the runner-up: " + String(r.margin[i]); mg.dataset.margin = String(r.margin[i]); }
        td.appendChild(mg);
        if (r.truncated[i]) td.appendChild(el("div", "muted", "\u2702 context cut"));
      }
      tr.appendChild(td);
    });
    tb.appendChild(tr);
    for (var j = 0; j < n; j++) {
      var row = el("tr", j === label ? "choice correct" : "choice");
      row.dataset.choice = String(j);
      var cont = el("td", "cont");
      cont.appendChild(el("span", "letter", LETTERS[j]));
      cont.appendChild(document.createTextNode(I.continuations ? I.continuations[i][j] : "(text left out)"));
      if (j === label) cont.appendChild(el("span", "badge ok", "\u2713 correct"));
      row.appendChild(cont);
      R.forEach(function (r) {
        var td = el("td", "lp");
        td.dataset.run = r.tag;
        if (r.mean[i] === null) { td.textContent = r.correct[i] === null ? "" : "n/a"; }
        else {
          var chosen = r.pred[i] === j;
          if (chosen) td.className = "lp chosen " + (r.correct[i] ? "right" : "wrong");
          td.textContent = (chosen ? "\u25cf " : "") + fixed(r.mean[i][j], 4);
          td.dataset.mean = String(r.mean[i][j]);
          td.title = "mean log-prob " + String(r.mean[i][j]) + " (summed " + String(r.logprob[i][j]) +
            (r.ntok[i][j] === null ? "" : " over " + r.ntok[i][j] + " token(s)") + ")" + (chosen ? "; chosen" : "");
        }
        row.appendChild(td);
      });
      tb.appendChild(row);
    }
    return tb;
  }

  function pager(div, total, pages) {
    while (div.firstChild) div.removeChild(div.firstChild);
    function btn(text, to, off) {
      var b = el("button", null, text); b.type = "button"; b.disabled = off;
      b.addEventListener("click", function () { S.page = to; update(); if (div.id === "pager-bottom") table.scrollIntoView(); });
      div.appendChild(b);
    }
    btn("\u00ab", 0, S.page === 0); btn("\u2039", S.page - 1, S.page === 0);
    div.appendChild(el("span", "pos", "page " + (total ? S.page + 1 : 0) + " of " + pages));
    btn("\u203a", S.page + 1, S.page >= pages - 1); btn("\u00bb", pages - 1, S.page >= pages - 1);
  }

  function pairText() {
    var box = document.getElementById("pairinfo");
    while (box.firstChild) box.removeChild(box.firstChild);
    if (R.length < 2) return;
    var a = R[S.flipA].tag, b = R[S.flipB].tag;
    if (S.flipA === S.flipB) { box.appendChild(el("span", "refused", "Pick two different runs for A and B.")); return; }
    var p = pairOf(S.flipA, S.flipB);
    if (!p) return;
    if (p.refused) { box.appendChild(el("span", "refused", "compare refuses " + a + " and " + b + ": " + p.refused)); return; }
    var pt = p.p < 0.001 ? "< 0.001" : "= " + Number(p.p.toPrecision(2));
    var s = el("span", "counts", "compare " + a + " " + b + ": " + p.ab.length + " item(s) only " + a +
      " got right (A right, B wrong), " + p.ba.length + " only " + b + " (A wrong, B right); " +
      p.discordant + " discordant of " + p.n + " paired items; exact McNemar p " + pt);
    s.id = "pair-counts"; s.dataset.ab = String(p.ab.length); s.dataset.ba = String(p.ba.length);
    box.appendChild(s);
  }

  function update() {
    var rows = visible(), pages = Math.max(1, Math.ceil(rows.length / S.size));
    if (S.page >= pages) S.page = pages - 1;
    var start = S.page * S.size, shown = rows.slice(start, start + S.size);
    var bodies = table.querySelectorAll("tbody");
    for (var k = 0; k < bodies.length; k++) table.removeChild(bodies[k]);
    var frag = document.createDocumentFragment();
    shown.forEach(function (i) { frag.appendChild(itemBody(i)); });
    table.appendChild(frag);
    var st = document.getElementById("status");
    st.textContent = rows.length + " of " + N + " items match" +
      (rows.length ? "; showing " + (start + 1) + "\u2013" + (start + shown.length) : "");
    st.dataset.matches = String(rows.length);
    st.dataset.query = S.q;
    pager(document.getElementById("pager-top"), rows.length, pages);
    pager(document.getElementById("pager-bottom"), rows.length, pages);
    pairText();
  }
  update();
  document.body.dataset.ready = "1";
})();
""".strip()
