// weft bench report: draws SVG charts from the result files embedded in #weft-data.
// Self-contained on purpose: no libraries, no network. Each chart is an <svg class="weft-chart">
// carrying data-chart (its kind), data-series and data-points (counts), and one
// <circle class="pt" data-x data-y> per data point, so tests can check it drew real data.
"use strict";
(function () {
  var SVGNS = "http://www.w3.org/2000/svg";
  var COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b",
    "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"];
  var runs = JSON.parse(document.getElementById("weft-data").textContent);

  function el(tag, attrs, parent) {
    var e = document.createElementNS(SVGNS, tag);
    for (var k in attrs) e.setAttribute(k, attrs[k]);
    if (parent) parent.appendChild(e);
    return e;
  }
  function html(tag, text, parent, cls) {
    var e = document.createElement(tag);
    if (text !== undefined && text !== null) e.textContent = text;
    if (cls) e.className = cls;
    if (parent) parent.appendChild(e);
    return e;
  }
  function fmt(v) {
    var a = Math.abs(v);
    if (a >= 1e9) return (v / 1e9).toFixed(a >= 1e10 ? 0 : 1) + "G";
    if (a >= 1e6) return (v / 1e6).toFixed(a >= 1e7 ? 0 : 1) + "M";
    if (a >= 1e4) return (v / 1e3).toFixed(0) + "k";
    if (a >= 100) return v.toFixed(0);
    if (a >= 10) return Number.isInteger(v) ? String(v) : v.toFixed(1);
    return v.toPrecision(2).replace(/\.?0+$/, "");
  }
  function niceTicks(lo, hi, n) {
    if (hi <= lo) hi = lo + 1;
    var step = Math.pow(10, Math.floor(Math.log10((hi - lo) / n)));
    var err = (hi - lo) / n / step;
    if (err >= 7.5) step *= 10; else if (err >= 3.5) step *= 5; else if (err >= 1.5) step *= 2;
    var t = [];
    for (var v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) t.push(v);
    return t;
  }

  // spec: {kind, title, xLabel, yLabel, xLog2, xTickLabel(fn), series:[{name, points:[{x,y,tip}]}],
  //        hline: {y, label}}
  function chart(parent, spec) {
    var W = 530, H = 330, L = 70, R = 16, T = 30, B = 48;
    var box = html("figure", null, parent, "chart");
    var pts = [];
    spec.series.forEach(function (s) { s.points.forEach(function (p) { pts.push(p); }); });
    var svg = el("svg", {
      "class": "weft-chart", "data-chart": spec.kind, "data-series": spec.series.length,
      "data-points": pts.length, width: W, height: H, viewBox: "0 0 " + W + " " + H,
      role: "img", "aria-label": spec.title
    }, box);
    el("text", { x: W / 2, y: 18, "text-anchor": "middle", "class": "title" }, svg)
      .textContent = spec.title;
    if (pts.length === 0) {
      el("text", { x: W / 2, y: H / 2, "text-anchor": "middle" }, svg).textContent = "no data";
      return svg;
    }
    var fx = spec.xLog2 ? function (v) { return Math.log2(Math.max(v, 1e-9)); } : function (v) { return v; };
    var xs = pts.map(function (p) { return fx(p.x); });
    var ys = pts.map(function (p) { return p.y; });
    // Show the threshold when it is near the data; far above it would flatten every curve.
    var dataMax = Math.max.apply(null, ys);
    var showH = spec.hline && spec.hline.y <= dataMax * 3;
    if (showH) ys.push(spec.hline.y);
    var x0 = Math.min.apply(null, xs), x1 = Math.max.apply(null, xs);
    if (!spec.xLog2 && !spec.xCategorical) x0 = Math.min(0, x0);
    if (x1 === x0) { x0 -= 1; x1 += 1; }
    var y0 = 0, y1 = Math.max.apply(null, ys) * 1.08 || 1;
    var sx = function (v) { return L + (fx(v) - x0) / (x1 - x0) * (W - L - R); };
    var sy = function (v) { return H - B - (v - y0) / (y1 - y0) * (H - T - B); };
    var axes = el("g", { "class": "axes" }, svg);
    niceTicks(y0, y1, 5).forEach(function (v) {
      el("line", { x1: L, x2: W - R, y1: sy(v), y2: sy(v), "class": "grid" }, axes);
      el("text", { x: L - 6, y: sy(v) + 4, "text-anchor": "end" }, axes).textContent = fmt(v);
    });
    var xt;
    if (spec.xLog2 || spec.xCategorical) {
      xt = [];
      for (var k = Math.ceil(x0); k <= Math.floor(x1); k++) xt.push(spec.xLog2 ? Math.pow(2, k) : k);
    } else {
      xt = niceTicks(x0, x1, 6);
    }
    xt.forEach(function (v) {
      el("line", { x1: sx(v), x2: sx(v), y1: T, y2: H - B, "class": "grid" }, axes);
      el("text", { x: sx(v), y: H - B + 16, "text-anchor": "middle" }, axes)
        .textContent = spec.xTickLabel ? spec.xTickLabel(v) : fmt(v);
    });
    el("line", { x1: L, x2: W - R, y1: H - B, y2: H - B, "class": "axis" }, axes);
    el("line", { x1: L, x2: L, y1: T, y2: H - B, "class": "axis" }, axes);
    el("text", { x: (L + W - R) / 2, y: H - 10, "text-anchor": "middle", "class": "label" }, axes)
      .textContent = spec.xLabel;
    el("text", {
      x: 14, y: (T + H - B) / 2, "text-anchor": "middle", "class": "label",
      transform: "rotate(-90 14 " + (T + H - B) / 2 + ")"
    }, axes).textContent = spec.yLabel;
    if (spec.hline && !showH) {
      el("text", { x: W - R - 4, y: T + 10, "text-anchor": "end", "class": "hlabel" }, svg)
        .textContent = spec.hline.label + " (above the chart)";
    }
    if (showH) {
      el("line", { x1: L, x2: W - R, y1: sy(spec.hline.y), y2: sy(spec.hline.y), "class": "hline" }, svg);
      el("text", { x: W - R - 4, y: sy(spec.hline.y) - 4, "text-anchor": "end", "class": "hlabel" }, svg)
        .textContent = spec.hline.label;
    }
    spec.series.forEach(function (s, i) {
      var color = COLORS[i % COLORS.length];
      var g = el("g", { "class": "series", "data-name": s.name, "data-points": s.points.length }, svg);
      var sorted = s.points.slice().sort(function (a, b) { return (a.order || a.x) - (b.order || b.x); });
      el("polyline", {
        points: sorted.map(function (p) { return sx(p.x) + "," + sy(p.y); }).join(" "),
        fill: "none", stroke: color, "stroke-width": 2
      }, g);
      sorted.forEach(function (p) {
        var c = el("circle", {
          "class": "pt", cx: sx(p.x), cy: sy(p.y), r: 3.5, fill: color,
          "data-x": p.x, "data-y": p.y
        }, g);
        el("title", {}, c).textContent = s.name + ": " + (p.tip || (fmt(p.x) + ", " + fmt(p.y)));
      });
    });
    var legend = html("figcaption", null, box, "legend");
    spec.series.forEach(function (s, i) {
      var item = html("span", null, legend, "item");
      var sw = html("span", null, item, "swatch");
      sw.style.background = COLORS[i % COLORS.length];
      html("span", s.name, item);
    });
    return svg;
  }

  function uniq(a) { return a.filter(function (v, i) { return a.indexOf(v) === i; }); }
  function multi() { return runs.length > 1; }
  function seriesName(run, extra) { return (multi() ? run.label + " " : "") + extra; }
  function pointsOf(run, kind) {
    return run.points.filter(function (p) { return p.kind === kind && p.total.ios > 0; });
  }

  function drawIopsLatency(root) {
    var series = [];
    runs.forEach(function (run) {
      var kind = pointsOf(run, "small_random").length ? "small_random" : "large_sequential";
      var pts = pointsOf(run, kind);
      uniq(pts.map(function (p) { return p.write_pct; })).forEach(function (w) {
        series.push({
          name: seriesName(run, (kind === "small_random" ? "" : "large ") + w + "% writes"),
          points: pts.filter(function (p) { return p.write_pct === w; }).map(function (p) {
            var qd = p.small_qd || p.large_qd;
            return { x: p.total.iops, y: p.total.latency_us.mean / 1000, order: qd,
              tip: "qd " + qd + ": " + fmt(p.total.iops) + " IOPS, " +
                fmt(p.total.latency_us.mean) + " µs mean" };
          })
        });
      });
    });
    var thr = runs[0].config.latency_threshold_us / 1000;
    chart(root, {
      kind: "iops-latency", title: "IOPS vs mean latency (small random I/O)",
      xLabel: "IOPS", yLabel: "mean latency (ms)", series: series,
      hline: { y: thr, label: "threshold " + fmt(thr) + " ms" }
    });
  }

  function drawVsQd(root, kind, metric, title, yLabel, chartKind) {
    var series = [];
    runs.forEach(function (run) {
      var pts = pointsOf(run, kind);
      uniq(pts.map(function (p) { return p.write_pct; })).forEach(function (w) {
        series.push({
          name: seriesName(run, w + "% writes"),
          points: pts.filter(function (p) { return p.write_pct === w; }).map(function (p) {
            var qd = p.small_qd || p.large_qd;
            return { x: qd, y: metric(p), tip: "qd " + qd + ": " + fmt(metric(p)) };
          })
        });
      });
    });
    if (series.length === 0) return;
    chart(root, { kind: chartKind, title: title, xLabel: "outstanding I/Os (queue depth)",
      yLabel: yLabel, xLog2: true, series: series });
  }

  function bucketLabel(k) {
    var us = Math.pow(2, k);
    return us >= 1e6 ? "<" + us / 1048576 * 1.048576 + "s" : us >= 1024 ? "<" + fmt(us / 1000) + "ms" : "<" + us + "µs";
  }

  function drawHistograms(root) {
    runs.forEach(function (run) {
      ["small_random", "large_sequential", "mixed"].forEach(function (kind) {
        var pts = pointsOf(run, kind);
        uniq(pts.map(function (p) { return p.write_pct; })).forEach(function (w) {
          var series = pts.filter(function (p) { return p.write_pct === w; }).map(function (p) {
            var h = p.total.histogram_pow2_us, n = p.total.ios;
            var points = [];
            h.forEach(function (c, k) {
              if (c > 0) points.push({ x: k, y: 100 * c / n, tip: bucketLabel(k) + ": " + c + " I/Os (" + (100 * c / n).toFixed(2) + "%)" });
            });
            return { name: p.name, points: points };
          });
          chart(root, {
            kind: "histogram", title: (multi() ? run.label + ": " : "") + kind.replace("_", " ") + ", " + w + "% writes",
            xLabel: "latency bucket (power of two µs)", yLabel: "% of I/Os", xCategorical: true,
            xTickLabel: bucketLabel, series: series
          });
        });
      });
    });
  }

  function drawKnees(root) {
    var t = html("table", null, root);
    var head = html("tr", null, t);
    ["run", "series", "threshold µs", "queue depth", "IOPS", "MB/s", "mean µs"].forEach(function (h) { html("th", h, head); });
    runs.forEach(function (run) {
      run.knees.forEach(function (k) {
        var tr = html("tr", null, t);
        tr.className = "knee";
        [run.label, k.kind.replace("_", " ") + " " + k.write_pct + "% writes", fmt(k.latency_threshold_us),
          k.point_index === null ? "none under threshold" : k.qd,
          k.point_index === null ? "-" : fmt(k.iops), k.point_index === null ? "-" : k.mb_per_s.toFixed(1),
          k.point_index === null ? "-" : k.latency_us_mean.toFixed(1)].forEach(function (v) { html("td", v, tr); });
      });
    });
  }

  function drawTables(root) {
    runs.forEach(function (run) {
      html("h3", run.label, root);
      var m = run.machine, c = run.config, tg = run.target;
      html("p", tg.kind + " target " + tg.uri + " (" + fmt(tg.size_bytes) + "B), mode " + c.mode +
        ", small " + c.small_io_bytes + " B, large " + c.large_io_bytes + " B, region " + c.region_spec +
        ", " + c.duration_s + " s per point after " + c.warmup_s + " s warm-up; " + run.tool.name + " " +
        run.tool.version + " on " + m.hostname + " (" + m.cpus + " CPUs, " + m.cpu_model + ", " + m.kernel +
        "), started " + run.started_at, root, "meta");
      var t = html("table", null, root);
      var head = html("tr", null, t);
      ["#", "point", "IOPS", "MB/s", "mean µs", "p50", "p95", "p99", "p99.9", "max", "read mean", "write mean"]
        .forEach(function (h) { html("th", h, head); });
      run.points.forEach(function (p) {
        var tr = html("tr", null, t), l = p.total.latency_us;
        [p.index, p.name, fmt(p.total.iops), p.total.mb_per_s.toFixed(1), l.mean.toFixed(1), l.p50.toFixed(1),
          l.p95.toFixed(1), l.p99.toFixed(1), l.p999.toFixed(1), l.max.toFixed(1),
          p.read.ios ? p.read.latency_us.mean.toFixed(1) : "-", p.write.ios ? p.write.latency_us.mean.toFixed(1) : "-"]
          .forEach(function (v) { html("td", v, tr); });
      });
    });
  }

  drawIopsLatency(document.getElementById("charts-iops-latency"));
  var qd = document.getElementById("charts-qd");
  drawVsQd(qd, "large_sequential", function (p) { return p.total.mb_per_s; },
    "MB/s vs queue depth (large sequential I/O)", "MB/s", "mbps-qd");
  drawVsQd(qd, "small_random", function (p) { return p.total.mb_per_s; },
    "MB/s vs queue depth (small random I/O)", "MB/s", "mbps-qd-small");
  drawVsQd(qd, "small_random", function (p) { return p.total.iops; },
    "IOPS vs queue depth (small random I/O)", "IOPS", "iops-qd");
  drawHistograms(document.getElementById("charts-hist"));
  drawKnees(document.getElementById("knees"));
  drawTables(document.getElementById("tables"));
  document.body.setAttribute("data-rendered", "true");
})();
