// stallscope timeline: the launch <-> device-event link of a clicked bar (report and dashboard), and, in
// the HTML report, the bars themselves: merged to the screen's resolution again on every zoom, and the
// "show" links that open a claim's range with its events outlined. Trace text is escaped before plotly
// sees it (plotly renders a subset of HTML in labels).
(function () {
  "use strict";
  var T = (window.StallscopeTimeline = window.StallscopeTimeline || {});
  var INK = "#111827";
  var MIN_OPACITY = 0.3, TEXT_SHARE = 0.02;

  function esc(s) {
    return String(s).replace(/[&<>"']/g, function (c) {
      return { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c];
    });
  }
  function clip(s, n) {
    return s.length <= n ? s : s.slice(0, Math.floor((n * 2) / 3)) + "…" + s.slice(s.length - Math.floor(n / 3));
  }
  function fmt(ms) {
    var us = ms * 1000;
    return us >= 1000 ? (us / 1000).toFixed(2) + " ms" : us.toFixed(1) + " µs";
  }
  T.fmt = fmt;

  // The items of one row's columns in [x0, x1], merged as the dashboard's server does: at most `bins`
  // items are drawn as they are; past that, items shorter than a bin join the previous item of their
  // colour when they start in its bin or less than half a bin after its end. Each item keeps its span,
  // its count, its busy time and its longest event (index `rep`).
  T.merge = function (col, x0, x1, bins) {
    var n = col.s.length, maxd = col.maxd;
    if (!col.e) { col.e = col.s.map(function (s, k) { return s + col.d[k]; }); }
    if (maxd === undefined) {
      maxd = 0;
      for (var k = 0; k < n; k++) { maxd = Math.max(maxd, col.e[k] - col.s[k]); }
      col.maxd = maxd;
    }
    var lo = 0, hi = n;
    while (lo < hi) { var mid = (lo + hi) >> 1; if (col.s[mid] < x0 - maxd) { lo = mid + 1; } else { hi = mid; } }
    var vis = [];
    for (var i = lo; i < n && col.s[i] < x1; i++) { if (col.e[i] > x0) { vis.push(i); } }
    var w = (x1 - x0) / bins, out = [], open = {};
    var merge = vis.length > bins;
    for (var j = 0; j < vis.length; j++) {
      var at = vis[j], s = Math.max(col.s[at], x0), e = Math.min(col.e[at], x1), d = e - s;
      var c = col.c ? col.c[at] : 1, busy = Math.min(col.b ? col.b[at] : d, d), longest = col.l ? col.l[at] : d;
      var g = col.g[at], last = merge ? open[g] : undefined;
      if (last && (s - last.e < w / 2 || (d < w && Math.floor((s - x0) / w) === last.bin))) {
        last.e = Math.max(last.e, e); last.c += c; last.b += busy;
        if (longest > last.l) { last.l = longest; last.rep = at; }
        continue;
      }
      var item = { s: s, e: e, c: c, b: busy, l: longest, rep: at, g: g, bin: Math.floor((s - x0) / w) };
      out.push(item);
      if (merge) { open[g] = item; }
    }
    for (var m = 0; m < out.length; m++) { out[m].b = Math.min(out[m].b, out[m].e - out[m].s); }
    return out;
  };

  function hover(p, grp, it) {
    var name = clip(p.names[p.cur.n[it.rep]], 110), site = p.cur.t ? p.sites[p.cur.t[it.rep]] : "";
    var at = "at " + it.s.toFixed(3) + " ms", text;
    if (it.c === 1) {
      text = "<b>" + esc(name) + "</b><br>" + fmt(it.e - it.s) + " " + at;
    } else {
      var span = it.e - it.s, share = span > 0 ? " (" + Math.round((100 * it.b) / span) + "%)" : "";
      text = "<b>" + it.c + " " + esc(grp.plural) + "</b> (merged at this zoom)<br>span " + fmt(span) + " " + at +
        " · busy " + fmt(it.b) + share + "<br>longest " + fmt(it.l) + ": " + esc(name);
    }
    return site ? text + "<br>" + esc(clip(site, 110)) : text;
  }

  // One bar trace per legend group for the range [x0, x1].
  T.bars = function (p, x0, x1, bins) {
    var traces = p.groups.map(function (grp) {
      return {
        type: "bar", orientation: "h", name: grp.name, x: [], base: [], y: [], text: [], hovertext: [],
        customdata: [], width: 0.78, textposition: "inside", insidetextanchor: "start",
        textfont: { size: 10, color: "#1f2933" }, hovertemplate: "%{hovertext}<extra></extra>",
        marker: Object.assign({}, grp.marker, { opacity: [] }),
      };
    });
    var merged = false, count = 0;
    p.cols.forEach(function (col, row) {
      p.cur = col;
      var items = T.merge(col, x0, x1, bins);
      count += items.length;
      items.forEach(function (it) {
        var t = traces[it.g], grp = p.groups[it.g], span = it.e - it.s;
        merged = merged || it.c > 1;
        t.x.push(span); t.base.push(it.s); t.y.push(row);
        t.hovertext.push(hover(p, grp, it));
        var named = it.c === 1 && !grp.idle && span >= TEXT_SHARE * (x1 - x0);
        t.text.push(named ? esc(clip(p.names[col.n[it.rep]], 60)) : "");
        t.marker.opacity.push(it.c === 1 || span <= 0 ? 1 : MIN_OPACITY + (1 - MIN_OPACITY) * Math.min(it.b / span, 1));
        var place = it.c === 1 && col.p ? p.places[String(col.p[it.rep])] : undefined;
        t.customdata.push(place ? [-1, place[0], place[1], place[2]] : [-1, -1, 0, 0]);
      });
    });
    p.merged = merged; p.count = count;
    return traces.filter(function (t) { return t.x.length > 0; });
  };

  function others(div, name) {
    return ((div.layout && div.layout.shapes) || []).filter(function (s) { return s.name !== name; });
  }

  // A click on a bar outlines its partner (the kernel a launch call started, or the call that launched a
  // kernel) and draws a line to it; a click elsewhere clears it.
  T.link = function (div) {
    div.on("plotly_click", function (ev) {
      var pt = ev && ev.points && ev.points[0];
      var shapes = others(div, "link");
      var cd = pt && pt.customdata;
      if (pt && pt.data && pt.data.type === "bar" && cd && cd[1] >= 0) {
        var x = pt.base + pt.x / 2;
        shapes.push({ type: "line", name: "link", xref: "x", yref: "y", x0: x, y0: pt.y, x1: cd[2], y1: cd[1], line: { color: INK, width: 2 } });
        shapes.push({ type: "rect", name: "link", xref: "x", yref: "y", x0: cd[2], x1: cd[3], y0: cd[1] - 0.48, y1: cd[1] + 0.48, line: { color: INK, width: 2 }, fillcolor: "rgba(17, 24, 39, 0.15)" });
      }
      Plotly.relayout(div, { shapes: shapes });
    });
  };

  function status(div, text) {
    var el = document.getElementById(div.id + "-status");
    if (el) { el.textContent = text; }
  }

  // The report: draw the bars of [x0, x1] with the frame (syncs, counters, steps) and redraw them on
  // every zoom or pan.
  T.draw = function (div, fig, p, cfg, x0, x1) {
    var rest = fig.data;
    var bins = function () { return Math.max(100, Math.round((div.clientWidth || 1200) / 3)); };
    function layoutFor(r) {
      var lay = Object.assign({}, div.layout || fig.layout);
      lay.xaxis = Object.assign({}, lay.xaxis, { range: r, autorange: false });
      return lay;
    }
    function render(r) {
      var data = T.bars(p, r[0], r[1], bins()).concat(rest);
      div.setAttribute("data-range", r[0] + "," + r[1]);
      var merged = p.merged ? ", short events merged at this zoom (zoom in to split them)" : "";
      status(div, p.count.toLocaleString() + " items" + merged);
      return data;
    }
    var first = [x0, x1];
    Plotly.newPlot(div, render(first), layoutFor(first), cfg);
    div.__ssRange = first;
    div.on("plotly_relayout", function (ev) {
      var r;
      if (ev["xaxis.autorange"]) { r = [0, p.end_ms]; }
      else if (ev["xaxis.range"]) { r = ev["xaxis.range"]; }
      else if (ev["xaxis.range[0]"] !== undefined) { r = [ev["xaxis.range[0]"], ev["xaxis.range[1]"]]; }
      if (!r) { return; }
      r = [Math.max(0, Number(r[0])), Math.min(p.end_ms, Number(r[1]))];
      div.__ssRange = r;
      Plotly.react(div, render(r), layoutFor(r), cfg);
    });
    T.link(div);
  };

  // Open a claim: its range with a margin, the events it names outlined.
  T.show = function (div, claim, label) {
    var rows = div.__ssRows || {};
    var marks = claim.marks.filter(function (m) { return rows[m[0]] !== undefined; }).map(function (m) {
      var y = rows[m[0]];
      return { type: "rect", name: "highlight", xref: "x", yref: "y", x0: m[1], x1: m[2], y0: y - 0.48, y1: y + 0.48, line: { color: INK, width: 2 }, fillcolor: "rgba(17, 24, 39, 0.08)" };
    });
    var shapes = others(div, "highlight").filter(function (s) { return s.name !== "link"; }).concat(marks);
    div.setAttribute("data-claim", label);
    Plotly.relayout(div, { shapes: shapes, "xaxis.range": claim.range.slice() });
    var note = document.getElementById(div.id + "-claim");
    if (note) { note.textContent = "showing " + label + (claim.note ? ": " + claim.note : ""); }
  };

  // The dashboard: link the explorer's graph once it is on the page (Dash draws it after load).
  if (document.getElementById("react-entry-point")) {
    setInterval(function () {
      var g = document.querySelector("#explorer-graph .js-plotly-plot");
      if (g && g.on && !g.__ssLinked) { g.__ssLinked = true; T.link(g); }
    }, 400);
  }
})();
