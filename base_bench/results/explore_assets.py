"""The style sheet and the script that explore.html carries inline (results/explore.py writes them).

The script reads the page's JSON block (`#bb-data`, built by `explore.build_page`), and only
filters, sorts and pages it: every number it shows is one of that block's. It builds every element
with `document.createElement` and puts text in with `textContent` (or an attribute set through the
DOM), never through `innerHTML`, so no text from a report or a data file can become markup. It
makes no request: no fetch, no image, no font; the page's Content-Security-Policy would block one
anyway. Rows are paged (25 to 500 a page), so a data file of ten thousand items stays quick; with
more than LIST_RUNS runs the list shows eight of them at a time (spread over all, or eight in a row).

With a grid (`page["grid"]`, two checkpoints or more) the script draws it on one <canvas>: the rows
that match the filters, in the list's order, one column per checkpoint, each cell one of the page's
cell codes (steps_grid.cell_code) coloured from GRID_COLOURS. Hovering on a cell shows its item,
step, outcome and margin in one tooltip; clicking it opens that item in the list. However many
items and checkpoints, the grid is a handful of elements.
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
details.runs{margin:.8em 0}
details.runs summary{cursor:pointer;font-weight:600}
#grid{margin:.6em 0 1em}
#grid h2{font-size:1.1em;margin:.2em 0 .3em}
#grid .legend{display:flex;flex-wrap:wrap;gap:.2em .9em;align-items:center;font-size:12px;color:#333;margin:.3em 0}
#grid .sw{display:inline-block;width:11px;height:11px;margin-right:1px;vertical-align:-1px;border:1px solid #0001}
#grid .gridwrap{max-height:70vh;overflow:auto;border:1px solid #dde;background:#fff;display:inline-block;max-width:100%}
#grid canvas{display:block;cursor:crosshair}
#grid-tip{position:fixed;z-index:5;background:#222;color:#fff;font-size:12px;padding:4px 7px;border-radius:3px;
 max-width:32em;pointer-events:none;overflow-wrap:anywhere}
#grid-tip[hidden]{display:none}
#grid-tip .ctx{color:#ccc;white-space:pre-wrap}
table.items td.meta .steps{color:#555}
table.items tbody.flash td.meta{background:#fff2a8}
""".strip()

LIST_RUNS = 8  # with more runs, the list shows this many at a time (the script's LIST_RUNS)

SCRIPT = r"""
(function () {
  "use strict";
  var D = JSON.parse(document.getElementById("bb-data").textContent);
  var I = D.items, R = D.runs, N = I.id.length, G = D.grid || null;
  var LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ";
  var LIST_RUNS = 8, MANY = R.length > LIST_RUNS;
  var S = {cat: -1, diff: -1, disagree: false, allWrong: false, flipA: 0, flipB: R.length > 1 ? 1 : 0,
           flip: "off", oRun: 0, outcome: "any", q: "", sort: "file", page: 0, size: MANY ? 25 : 50,
           listRuns: spread()};

  function spread() {  // LIST_RUNS runs from the first to the last (every run when there are few)
    if (!MANY) return R.map(function (r, k) { return k; });
    var out = [];
    for (var j = 0; j < LIST_RUNS; j++) out.push(Math.round(j * (R.length - 1) / (LIST_RUNS - 1)));
    return out;
  }
  function windowOf(k) {  // the LIST_RUNS runs in a row that hold run k
    var start = Math.min(k - k % LIST_RUNS, R.length - LIST_RUNS), out = [];
    for (var j = 0; j < LIST_RUNS; j++) out.push(start + j);
    return out;
  }

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
    } else if (S.sort === "learned" && G) {
      var never = G.steps.length;  // never learned: after every column
      out.sort(function (x, y) {
        var a = G.learned[x] === null ? never : G.learned[x], b = G.learned[y] === null ? never : G.learned[y];
        return a === b ? x - y : a - b;
      });
    } else if (S.sort === "forgotten" && G) {
      out.sort(function (x, y) { return G.forgotten[x] === G.forgotten[y] ? x - y : G.forgotten[y] - G.forgotten[x]; });
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
  if (G) {
    sorts.push(["learned", "learned at step, earliest first"]);
    sorts.push(["forgotten", "times forgotten, most first"]);
  }
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
  size.value = String(S.size);
  controls.appendChild(labelled("per page", size));
  if (MANY) {
    var wins = [["spread", LIST_RUNS + " runs from " + R[0].tag + " to " + R[R.length - 1].tag]];
    for (var w = 0; w < R.length; w += LIST_RUNS) {
      var win = windowOf(w);
      wins.push(["w" + win[0], R[win[0]].tag + "\u2013" + R[win[LIST_RUNS - 1]].tag]);
    }
    controls.appendChild(labelled("runs in the list", select("f-list-runs", wins, function (v) {
      S.listRuns = v === "spread" ? spread() : windowOf(+v.slice(1));
    })));
  }

  // ------------------------------------------------------------ the table
  var table = document.getElementById("items");
  function head() {
    var thead = el("thead"), tr = el("tr");
    tr.appendChild(el("th", "meta", "item"));
    tr.appendChild(el("th", "text", D.redacted ? "continuations (texts left out)" : "context and continuations"));
    S.listRuns.forEach(function (k) {
      var r = R[k], th = el("th", "run"); th.appendChild(el("div", "tag", r.tag));
      th.appendChild(el("div", "name", r.name + " · " + r.backend)); th.title = runName(k) + " · " + r.dtype + " · " + r.backend + " · " + r.bos;
      th.dataset.run = r.tag; tr.appendChild(th);
    });
    thead.appendChild(tr); return thead;
  }
  var shownRuns = null;  // the runs the table's head was made for

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
    if (G) {
      meta.appendChild(el("div", "steps learned", learnedText(i)));
      meta.appendChild(el("div", "steps forgotten", "forgotten " + G.forgotten[i] + "\u00d7"));
    }
    tr.appendChild(meta);
    tr.appendChild(el("td", "ctx", I.context ? I.context[i] : "(context left out)"));
    S.listRuns.forEach(function (k) {
      var r = R[k], c = r.correct[i], td = el("td", "sum " + (c === null ? "none" : c ? "right" : "wrong"));
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
      S.listRuns.forEach(function (k) {
        var r = R[k], td = el("td", "lp");
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

  // ------------------------------------------------------------ the item x step grid
  // colours of the cell codes (steps_grid.cell_code): 0 not scored; 1-4 right, 5-8 wrong, the wider
  // the margin the darker; 9 scored without per-choice numbers
  var GRID_COLOURS = ["#e4e4e4", "#c9ebc9", "#8fd18f", "#3fa34d", "#1b6e2a",
                      "#f7cccc", "#ee9191", "#d64545", "#9c1c1c", "#b9b9b9"];
  var GRID_TOP = 18, GRID_GAP = 6, GRID_BAR = 40;
  function learnedText(i) {
    return G.learned[i] === null ? "never learned" : "learned at step " + G.steps[G.learned[i]];
  }
  function stepText(n) {
    if (n < 10000) return String(n);
    if (n < 1e6) return (n % 1000 ? (n / 1e3).toFixed(1) : String(n / 1e3)) + "k";
    return Number((n / 1e6).toPrecision(3)) + "M";
  }
  var grid = null;  // {canvas, ctx, tip, rows, cw, rh, key}
  function gridSection() {
    var box = document.getElementById("grid");
    box.appendChild(el("h2", null, "Items \u00d7 checkpoints"));
    var nc = G.cols.length;
    box.appendChild(el("p", "note", "One row per item that matches the filters, in the list's order; one column per " +
      "checkpoint (" + nc + " runs with a training step, step " + G.steps[0] + " to " + G.steps[nc - 1] + "). " +
      "Green: right, red: wrong, darker the wider the margin over the runner-up; the bar on the right: times " +
      "forgotten. Sort by \u201clearned at step\u201d or \u201ctimes forgotten\u201d above. Hover on a cell for its " +
      "numbers, click it to open the item in the list."));
    var legend = el("div", "legend"), edges = G.margin_edges;
    function swatch(code, text) {
      var s = el("span"), sw = el("span", "sw"); sw.style.backgroundColor = GRID_COLOURS[code];
      s.appendChild(sw); s.appendChild(document.createTextNode(" " + text)); legend.appendChild(s);
    }
    var bands = ["< " + edges[0], edges[0] + "\u2013" + edges[1], edges[1] + "\u2013" + edges[2], "\u2265 " + edges[2]];
    var right = el("span"), wrong = el("span");
    for (var b = 0; b < 4; b++) { var sr = el("span", "sw"); sr.style.backgroundColor = GRID_COLOURS[1 + b]; right.appendChild(sr); }
    for (b = 0; b < 4; b++) { var sg = el("span", "sw"); sg.style.backgroundColor = GRID_COLOURS[5 + b]; wrong.appendChild(sg); }
    right.appendChild(document.createTextNode(" right")); wrong.appendChild(document.createTextNode(" wrong"));
    legend.appendChild(right); legend.appendChild(wrong);
    legend.appendChild(el("span", null, "margin bands (mean log-prob): " + bands.join(", ")));
    swatch(0, "not scored");
    if (G.cells.some(function (c) { return c.indexOf("9") >= 0; })) swatch(9, "no margin");
    box.appendChild(legend);
    var notes = [];
    if (G.left_out.length) {
      notes.push("Left out of the grid (no training step): " +
        G.left_out.map(function (k) { return runName(k); }).join(", ") + ".");
    }
    if (G.groups.length > 1) notes.push("The checkpoints come from " + G.groups.length + " groups (" +
      G.groups.join(", ") + "), put in one order by step.");
    if (notes.length) { var n = el("p", "note", notes.join(" ")); n.id = "grid-note"; box.appendChild(n); }
    var wrap = el("div", "gridwrap"), canvas = el("canvas"); canvas.id = "grid-canvas";
    canvas.setAttribute("role", "img");
    canvas.setAttribute("aria-label", "items by checkpoint: right or wrong, shaded by margin");
    wrap.appendChild(canvas); box.appendChild(wrap);
    var tip = el("div"); tip.id = "grid-tip"; tip.hidden = true; document.body.appendChild(tip);
    grid = {canvas: canvas, ctx: canvas.getContext("2d"), tip: tip, wrap: wrap, rows: [], cw: 1, rh: 1, key: null};
    canvas.addEventListener("mousemove", function (ev) { hover(ev.clientX, ev.clientY); });
    canvas.addEventListener("mouseleave", function () { tip.hidden = true; });
    canvas.addEventListener("click", function (ev) {
      var at = cellAt(ev.clientX, ev.clientY);
      if (at) openItem(at.row, G.cols[at.col]);
    });
    var resized = null;
    window.addEventListener("resize", function () {
      clearTimeout(resized);
      resized = setTimeout(function () { grid.key = null; drawGrid(grid.rows); }, 150);
    });
  }
  function cellAt(x, y) {
    var rect = grid.canvas.getBoundingClientRect();
    var c = Math.floor((x - rect.left) / grid.cw), r = Math.floor((y - rect.top - GRID_TOP) / grid.rh);
    if (y - rect.top < GRID_TOP || c < 0 || c >= G.cols.length || r < 0 || r >= grid.rows.length) return null;
    return {row: grid.rows[r], col: c};
  }
  function hover(x, y) {
    var at = cellAt(x, y), tip = grid.tip;
    if (!at) { tip.hidden = true; return; }
    var i = at.row, k = G.cols[at.col], r = R[k], c = r.correct[i];
    while (tip.firstChild) tip.removeChild(tip.firstChild);
    tip.appendChild(el("div", "id", I.id[i] + " \u00b7 " + D.categories[I.category[i]] + " \u00b7 " +
      D.difficulties[I.difficulty[i]]));
    tip.appendChild(el("div", null, "step " + G.steps[at.col] + " (" + runName(k) + ")"));
    tip.appendChild(el("div", "outcome", c === null ? "not scored" : (c ? "\u2713 right" : "\u2717 wrong") +
      ", chose " + LETTERS[r.pred[i]] + ", margin " + (r.margin[i] === null ? "n/a" : fixed(r.margin[i], 4))));
    tip.appendChild(el("div", null, learnedText(i) + "; forgotten " + G.forgotten[i] + "\u00d7"));
    if (I.context) tip.appendChild(el("div", "ctx", I.context[i].length > 160 ? I.context[i].slice(0, 160) + "\u2026" : I.context[i]));
    tip.dataset.row = String(i); tip.dataset.col = String(at.col);
    tip.hidden = false;
    tip.style.left = Math.min(x + 14, window.innerWidth - tip.offsetWidth - 8) + "px";
    tip.style.top = Math.min(y + 14, window.innerHeight - tip.offsetHeight - 8) + "px";
  }
  function openItem(i, k) {  // the list's page that holds item i, with run k among its columns
    if (S.listRuns.indexOf(k) < 0) {
      S.listRuns = windowOf(k);
      document.getElementById("f-list-runs").value = "w" + S.listRuns[0];
    }
    var rows = visible(), pos = rows.indexOf(i);
    if (pos < 0) return;
    S.page = Math.floor(pos / S.size);
    update();
    var tb = table.querySelector('tbody[data-row="' + i + '"]');
    if (tb) { tb.classList.add("flash"); tb.scrollIntoView({block: "start"}); }
  }
  function drawGrid(rows) {
    var key = [S.cat, S.diff, S.disagree, S.allWrong, S.flip, S.flipA, S.flipB, S.oRun, S.outcome, S.q, S.sort].join("|");
    if (grid.key === key) return;
    var t0 = performance.now(), nc = G.cols.length, nr = rows.length;
    var avail = Math.max(240, document.getElementById("grid").clientWidth - 24);
    var cw = Math.max(2, Math.min(32, Math.floor((avail - GRID_GAP - GRID_BAR) / nc)));
    var rh = nr <= 60 ? 10 : nr <= 200 ? 6 : nr <= 800 ? 4 : nr <= 3000 ? 2 : 1;
    var w = nc * cw, h = Math.max(1, nr * rh), W = w + GRID_GAP + GRID_BAR;
    var canvas = grid.canvas, ctx = grid.ctx;
    canvas.width = W; canvas.height = GRID_TOP + h;
    ctx.fillStyle = "#fff"; ctx.fillRect(0, 0, W, GRID_TOP + h);
    var rgb = GRID_COLOURS.map(function (c) { return [parseInt(c.slice(1, 3), 16), parseInt(c.slice(3, 5), 16), parseInt(c.slice(5, 7), 16)]; });
    var img = ctx.createImageData(w, h), px = img.data, line = w * 4;
    var gapX = cw >= 5 ? 1 : 0, gapY = rh >= 6 ? 1 : 0;
    for (var r = 0; r < nr; r++) {
      var cells = G.cells[rows[r]], o = r * rh * line;
      for (var c = 0; c < nc; c++) {
        var col = rgb[cells.charCodeAt(c) - 48];
        for (var x = 0; x < cw; x++) {
          var p = o + (c * cw + x) * 4, blank = x >= cw - gapX;
          px[p] = blank ? 255 : col[0]; px[p + 1] = blank ? 255 : col[1]; px[p + 2] = blank ? 255 : col[2]; px[p + 3] = 255;
        }
      }
      for (var y = 1; y < rh; y++) {
        if (y >= rh - gapY) { px.fill(255, o + y * line, o + (y + 1) * line); }
        else px.copyWithin(o + y * line, o, o + line);
      }
    }
    if (nr) ctx.putImageData(img, 0, GRID_TOP);
    var most = 0;
    rows.forEach(function (i) { if (G.forgotten[i] > most) most = G.forgotten[i]; });
    ctx.fillStyle = "#7a5aa6";
    for (r = 0; r < nr; r++) {
      var f = G.forgotten[rows[r]];
      if (f) ctx.fillRect(w + GRID_GAP, GRID_TOP + r * rh, Math.max(1, Math.round(GRID_BAR * f / most)), Math.max(1, rh - gapY));
    }
    ctx.fillStyle = "#333"; ctx.font = "10px system-ui, sans-serif"; ctx.textBaseline = "top";
    var every = Math.max(1, Math.ceil(44 / cw)), lastEnd = -1;
    for (c = 0; c < nc; c += every) {
      var label = stepText(G.steps[c]), tw = ctx.measureText(label).width;
      if (c * cw <= lastEnd || c * cw + tw > w + GRID_GAP + GRID_BAR) continue;
      ctx.fillText(label, c * cw, 3); lastEnd = c * cw + tw + 4;
      ctx.fillRect(c * cw, GRID_TOP - 3, 1, 3);
    }
    ctx.fillText("forgot", w + GRID_GAP, 3);
    grid.rows = rows; grid.cw = cw; grid.rh = rh; grid.key = key;
    canvas.dataset.rows = String(nr);
    canvas.dataset.order = rows.join(",");
    canvas.dataset.cell = cw + "x" + rh;
    canvas.dataset.top = String(GRID_TOP);
    canvas.dataset.drawMs = (performance.now() - t0).toFixed(1);
  }
  if (G) gridSection();

  function update() {
    var rows = visible(), pages = Math.max(1, Math.ceil(rows.length / S.size));
    if (shownRuns !== S.listRuns.join(",")) {
      var old = table.querySelector("thead");
      if (old) table.removeChild(old);
      table.insertBefore(head(), table.firstChild);
      shownRuns = S.listRuns.join(",");
    }
    if (G) drawGrid(rows);
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
