// weft bench report: draws the result files embedded in #weft-data with uPlot (inlined beside
// this script, as in the web UI) and builds ORION's grid tables. No network.
// uPlot draws on a canvas, so each chart's container <div class="plot"> says what it holds, for
// tests and for readers of the DOM: data-chart (its kind), data-series and data-points (counts
// of series and of non-empty values), data-labels (series names, "|"-separated), data-x-min,
// data-x-max, data-y-min, data-y-max (extents of the data), data-y-axes (1 or 2) and
// data-scales (each series' y scale, "|"-separated), and, once uPlot has drawn it,
// data-drawn="true" and data-width (pixels).
"use strict";
(function () {
  var COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b",
    "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"];
  var CHART_HEIGHT_PX = 320;
  // Wide enough for "1.25 ms" and "250k" at the axis font.
  var Y_AXIS_PX = 78;
  // Room one category label on the x axis needs ("<512µs", "#12").
  var X_LABEL_PX = 58;
  var runs = JSON.parse(document.getElementById("weft-data").textContent);
  var plots = [];

  function html(tag, text, parent, cls) {
    var e = document.createElement(tag);
    if (text !== undefined && text !== null) e.textContent = text;
    if (cls) e.className = cls;
    if (parent) parent.appendChild(e);
    return e;
  }

  // Counts and rates: 950, 9.5k, 50k, 1.2M.
  function fmt(v) {
    if (v === null || v === undefined || isNaN(v)) return "-";
    var a = Math.abs(v);
    if (a >= 1e9) return +(v / 1e9).toFixed(a >= 1e10 ? 0 : 1) + "G";
    if (a >= 1e6) return +(v / 1e6).toFixed(a >= 1e7 ? 0 : 1) + "M";
    if (a >= 1e4) return +(v / 1e3).toFixed(0) + "k";
    if (a >= 1e3) return +(v / 1e3).toFixed(1) + "k";
    if (a >= 100) return v.toFixed(0);
    if (a >= 10) return +v.toFixed(1) + "";
    if (a === 0) return "0";
    return +v.toPrecision(2) + "";
  }
  // Latencies given in µs: 85 µs, 850 µs, 1.2 ms, 35 ms, 2.5 s.
  function fmtUs(us) {
    if (us === null || us === undefined || isNaN(us)) return "-";
    var a = Math.abs(us);
    if (a >= 1e6) return +(us / 1e6).toPrecision(3) + " s";
    if (a >= 1e3) return +(us / 1e3).toPrecision(3) + " ms";
    if (a >= 1) return +us.toPrecision(3) + " µs";
    if (a === 0) return "0";
    return +(us * 1e3).toPrecision(3) + " ns";
  }
  function fmtPct(v) { return v === null || v === undefined ? "-" : (+v.toFixed(v >= 10 ? 0 : 1)) + "%"; }
  function fmtBytes(b) {
    var u = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"], i = 0;
    while (b >= 1024 && i < u.length - 1 && b % 1024 === 0) { b /= 1024; i++; }
    return b + " " + u[i];
  }
  // Sizes as the CLI prints them: 512 B, 8.5 GiB.
  function fmtSize(b) {
    if (b === null || b === undefined) return "-";
    var u = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"], i = 0;
    while (b >= 1024 && i < u.length - 1) { b /= 1024; i++; }
    return (i ? b.toFixed(1) : b) + " " + u[i];
  }
  function uniq(a) { return a.filter(function (v, i) { return a.indexOf(v) === i; }); }
  function num(a, b) { return a - b; }
  function multi() { return runs.length > 1; }
  function runName(run, extra) { return (multi() ? run.label + ": " : "") + extra; }
  function pointsOf(run, kind) {
    return run.points.filter(function (p) { return p.kind === kind && p.total.ios > 0; });
  }
  function writePcts(pts) { return uniq(pts.map(function (p) { return p.write_pct; })).sort(num); }
  function qdOf(p) { return p.small_qd || p.large_qd; }

  // Puts series given as [[x, y], ...] on one sorted x axis, as uPlot wants: [xs, ys1, ys2...],
  // with null where a series has no value at an x.
  function align(series) {
    var xs = [];
    series.forEach(function (s) { s.xy.forEach(function (p) { xs.push(p[0]); }); });
    xs = uniq(xs).sort(num);
    var data = [xs];
    series.forEach(function (s) {
      var ys = xs.map(function () { return null; });
      s.xy.forEach(function (p) { ys[xs.indexOf(p[0])] = p[1]; });
      data.push(ys);
    });
    return data;
  }

  function extent(values) {
    var v = values.filter(function (x) { return x !== null && x !== undefined && !isNaN(x); });
    if (v.length === 0) return [0, 0];
    return [Math.min.apply(null, v), Math.max.apply(null, v)];
  }

  // spec: {kind, title, xLabel, yLabel, series: [{label, xy: [[x, y]], dash, bars, scale}],
  //        xLog2, xFmt (axis), xLegendFmt (legend; default xFmt), yFmt, y2: {label, fmt}, xSplits (fn: min, max -> ticks), xRange,
  //        hline: {y, label}, gaps (keep lines broken at nulls)}
  function chart(parent, spec) {
    var fig = html("figure", null, parent, "chart");
    var box = html("div", null, fig, "plot");
    var data = align(spec.series);
    var ys = [], points = 0;
    data.slice(1).forEach(function (col) {
      col.forEach(function (v) { if (v !== null) { ys.push(v); points++; } });
    });
    var xe = extent(data[0]), ye = extent(ys);
    box.setAttribute("data-chart", spec.kind);
    box.setAttribute("data-series", spec.series.length);
    box.setAttribute("data-points", points);
    box.setAttribute("data-labels", spec.series.map(function (s) { return s.label; }).join("|"));
    box.setAttribute("data-x-min", xe[0]);
    box.setAttribute("data-x-max", xe[1]);
    box.setAttribute("data-y-min", ye[0]);
    box.setAttribute("data-y-max", ye[1]);
    // Two y axes when a series has its own scale (IOPS and MB/s over time: neither hides
    // the other), and which scale each series is drawn on.
    box.setAttribute("data-y-axes", spec.y2 ? 2 : 1);
    box.setAttribute("data-scales", spec.series.map(function (s) { return s.scale || "y"; }).join("|"));
    if (points === 0) {
      html("p", spec.title + ": no data", box, "hint");
      return null;
    }
    var xFmt = spec.xFmt || fmt, yFmt = spec.yFmt || fmt;
    var barPaths = uPlot.paths.bars({ size: [0.9, 80], align: 0 });
    var xLegend = spec.xLegendFmt || xFmt;
    var series = [{ label: spec.xLabel, value: function (u, v) { return v === null ? "-" : xLegend(v); } }];
    spec.series.forEach(function (s, i) {
      var color = s.color || COLORS[i % COLORS.length];
      var fmtS = s.scale === "y2" ? spec.y2.fmt : yFmt;
      series.push({
        label: s.label, stroke: color, width: s.bars ? 1 : 2, dash: s.dash,
        scale: s.scale || "y", spanGaps: !spec.gaps,
        fill: s.bars ? color + "cc" : undefined,
        paths: s.bars ? barPaths : undefined,
        points: { show: !s.bars, size: 5 },
        value: function (u, v) { return v === null ? "-" : fmtS(v); }
      });
    });
    // Latency spans more than ten-fold between mean and p99.9; start every y axis at zero so
    // heights compare honestly.
    var yRange = function (u, min, max) { return [0, max > 0 ? max * 1.08 : 1]; };
    var scales = { x: { time: false }, y: { range: yRange }, y2: { range: yRange } };
    if (spec.xLog2) { scales.x.distr = 3; scales.x.log = 2; }
    if (spec.xRange) scales.x.range = function () { return spec.xRange(xe); };
    var xAxis = {
      label: spec.xLabel, size: 46,
      values: function (u, splits) { return splits.map(function (v) { return v === null ? "" : xFmt(v); }); }
    };
    if (spec.xSplits) {
      xAxis.splits = function (u) {
        // Integer ticks, thinned so that labels of about X_LABEL_PX never overlap.
        var all = spec.xSplits(u.scales.x.min, u.scales.x.max);
        var fit = Math.max(1, Math.floor(u.bbox.width / uPlot.pxRatio / X_LABEL_PX));
        var step = Math.ceil(all.length / fit);
        return all.filter(function (k, i) { return i % step === 0; });
      };
    }
    var axes = [xAxis, {
      label: spec.yLabel, size: Y_AXIS_PX,
      values: function (u, splits) { return splits.map(yFmt); }
    }];
    if (spec.y2) {
      axes.push({
        scale: "y2", side: 1, label: spec.y2.label, size: Y_AXIS_PX, grid: { show: false },
        values: function (u, splits) { return splits.map(spec.y2.fmt); }
      });
    }
    var opts = {
      title: spec.title, width: Math.max(box.clientWidth, 300), height: CHART_HEIGHT_PX,
      scales: scales, axes: axes, series: series, legend: { live: true },
      cursor: { points: { size: 7 } },
      hooks: {
        draw: [function (u) {
          if (spec.hline) drawHline(u, spec.hline);
          box.setAttribute("data-drawn", "true");
          box.setAttribute("data-width", Math.round(u.width));
        }]
      }
    };
    var u = new uPlot(opts, data, box);
    plots.push({ u: u, box: box });
    return u;
  }

  // A dashed threshold line across the plot, with its label (only when inside the y range).
  function drawHline(u, h) {
    if (h.y > u.scales.y.max) return;
    var ctx = u.ctx, y = Math.round(u.valToPos(h.y, "y", true));
    ctx.save();
    ctx.strokeStyle = "#c00";
    ctx.lineWidth = 1.5 * uPlot.pxRatio;
    ctx.setLineDash([6 * uPlot.pxRatio, 4 * uPlot.pxRatio]);
    ctx.beginPath();
    ctx.moveTo(u.bbox.left, y);
    ctx.lineTo(u.bbox.left + u.bbox.width, y);
    ctx.stroke();
    ctx.fillStyle = "#c00";
    ctx.font = Math.round(11 * uPlot.pxRatio) + "px system-ui, sans-serif";
    ctx.textAlign = "right";
    ctx.fillText(h.label, u.bbox.left + u.bbox.width - 4, y - 4);
    ctx.restore();
  }

  function resizeAll() {
    plots.forEach(function (p) {
      var w = Math.max(p.box.clientWidth, 300);
      if (Math.abs(w - p.u.width) > 1) p.u.setSize({ width: w, height: CHART_HEIGHT_PX });
    });
  }

  var DASH = { mean: undefined, p99: [6, 4], p999: [2, 3] };
  var STAT_NAME = { mean: "mean", p99: "p99", p999: "p99.9" };

  // Mean, p99 and p99.9 latency against outstanding I/Os, one chart per class and write %.
  function drawLatencyVsLoad(root) {
    ["small_random", "large_sequential"].forEach(function (kind) {
      var all = [];
      runs.forEach(function (run) { all = all.concat(pointsOf(run, kind)); });
      writePcts(all).forEach(function (w) {
        var series = [], color = 0;
        runs.forEach(function (run) {
          var pts = pointsOf(run, kind).filter(function (p) { return p.write_pct === w; });
          if (pts.length === 0) return;
          var c = COLORS[color++ % COLORS.length];
          ["mean", "p99", "p999"].forEach(function (stat) {
            series.push({
              label: runName(run, STAT_NAME[stat]), color: c, dash: DASH[stat],
              xy: pts.map(function (p) { return [qdOf(p), p.total.latency_us[stat]]; })
            });
          });
        });
        chart(root, {
          kind: "latency-qd",
          title: (kind === "small_random" ? "Small random" : "Large sequential") + " I/O, " + w +
            "% writes: latency against outstanding I/Os",
          xLabel: "outstanding I/Os", yLabel: "latency", xLog2: true, yFmt: fmtUs,
          series: series
        });
      });
    });
  }

  function drawIopsLatency(root) {
    var series = [];
    runs.forEach(function (run) {
      var kind = pointsOf(run, "small_random").length ? "small_random" : "large_sequential";
      var pts = pointsOf(run, kind);
      writePcts(pts).forEach(function (w) {
        series.push({
          label: runName(run, (kind === "small_random" ? "" : "large ") + w + "% writes"),
          xy: pts.filter(function (p) { return p.write_pct === w; }).map(function (p) {
            return [p.total.iops, p.total.latency_us.mean];
          })
        });
      });
    });
    var thr = runs[0].config.latency_threshold_us;
    chart(root, {
      kind: "iops-latency", title: "IOPS against mean latency (small random I/O)",
      xLabel: "IOPS", yLabel: "mean latency", yFmt: fmtUs, series: series,
      hline: { y: thr, label: "threshold " + fmtUs(thr) }
    });
  }

  // A metric against outstanding I/Os of one class, one series per run and write %.
  function drawVsQd(root, kind, metric, title, yLabel, chartKind) {
    var series = [];
    runs.forEach(function (run) {
      var pts = pointsOf(run, kind);
      writePcts(pts).forEach(function (w) {
        series.push({
          label: runName(run, w + "% writes"),
          xy: pts.filter(function (p) { return p.write_pct === w; }).map(function (p) {
            return [qdOf(p), metric(p)];
          })
        });
      });
    });
    if (series.length === 0) return;
    chart(root, { kind: chartKind, title: title, xLabel: "outstanding I/Os", yLabel: yLabel,
      xLog2: true, series: series });
  }

  // Bucket k holds latencies below 2^k µs: "<512µs", "<1.0ms", "<16ms", "<1.1s".
  function bucketLabel(k) {
    var us = Math.pow(2, k);
    if (us < 1000) return "<" + us + "µs";
    if (us < 1e6) return "<" + +(us / 1e3).toPrecision(2) + "ms";
    return "<" + +(us / 1e6).toPrecision(2) + "s";
  }
  function integerSplits(min, max) {
    var t = [];
    for (var k = Math.ceil(min); k <= Math.floor(max); k++) t.push(k);
    return t;
  }

  // Power-of-two latency buckets as grouped bars: one bar per point, side by side per bucket.
  function drawHistograms(root) {
    runs.forEach(function (run) {
      ["small_random", "large_sequential", "mixed"].forEach(function (kind) {
        var pts = pointsOf(run, kind);
        writePcts(pts).forEach(function (w) {
          var group = pts.filter(function (p) { return p.write_pct === w; });
          var n = group.length, slot = 0.84 / n;
          var series = group.map(function (p, i) {
            var h = p.total.histogram_pow2_us, total = p.total.ios, xy = [];
            var off = (i - (n - 1) / 2) * slot;
            h.forEach(function (c, k) { if (c > 0) xy.push([k + off, 100 * c / total]); });
            return { label: p.name, xy: xy, bars: true };
          });
          chart(root, {
            kind: "histogram",
            title: runName(run, kind.replace("_", " ") + ", " + w + "% writes: latency histogram"),
            xLabel: "latency bucket", yLabel: "% of I/Os", series: series,
            xFmt: function (v) { return bucketLabel(Math.round(v)); },
            yFmt: function (v) { return fmt(v) + "%"; },
            xSplits: integerSplits,
            xRange: function (e) { return [Math.round(e[0]) - 0.6, Math.round(e[1]) + 0.6]; }
          });
        });
      });
    });
  }

  // The measured windows one after another on the run's clock, broken between points.
  function timeline(run, value) {
    var xy = [];
    run.points.forEach(function (p) {
      var series = p.series || [];
      series.forEach(function (s) { xy.push([s.t_s, value(s)]); });
      if (series.length) xy.push([series[series.length - 1].t_s + 1e-3, null]);
    });
    return xy;
  }

  function drawTimeSeries(root) {
    runs.forEach(function (run) {
      if (!run.points.some(function (p) { return p.series && p.series.length; })) return;
      var secs = function (v) { return +v.toFixed(v >= 10 ? 0 : 1) + " s"; };
      chart(root, {
        kind: "time-io", title: runName(run, "IOPS and MB/s over time"), gaps: true,
        xLabel: "time since start", yLabel: "IOPS", xFmt: secs,
        y2: { label: "MB/s", fmt: fmt },
        series: [
          { label: "IOPS", xy: timeline(run, function (s) { return s.iops; }) },
          { label: "MB/s", xy: timeline(run, function (s) { return s.mb_per_s; }), scale: "y2" }
        ]
      });
      chart(root, {
        kind: "time-latency", title: runName(run, "latency over time"), gaps: true,
        xLabel: "time since start", yLabel: "latency", xFmt: secs, yFmt: fmtUs,
        series: [
          { label: "mean", xy: timeline(run, function (s) { return s.ios ? s.latency_us_mean : null; }) },
          { label: "max", xy: timeline(run, function (s) { return s.ios ? s.latency_us_max : null; }), dash: [6, 4] }
        ]
      });
      var cpu = [{ label: "client CPU", xy: timeline(run, function (s) { return s.client_cpu_pct; }) }];
      if (run.config.server_pid) {
        cpu.push({ label: "server CPU (pid " + run.config.server_pid + ")",
          xy: timeline(run, function (s) { return s.server_cpu_pct; }) });
      }
      chart(root, {
        kind: "time-cpu", title: runName(run, "CPU over time (100% = one core)"), gaps: true,
        xLabel: "time since start", yLabel: "CPU", xFmt: secs, yFmt: fmtPct, series: cpu
      });
    });
  }

  // Client and server CPU of each point, as grouped bars over the point numbers.
  function drawCpu(root) {
    runs.forEach(function (run) {
      var pts = run.points.filter(function (p) { return p.cpu; });
      // Files from before CPU was measured load with zeroes: no chart for them.
      if (!pts.some(function (p) { return p.cpu.client_pct > 0; })) return;
      var server = run.config.server_pid && pts.some(function (p) { return p.cpu.server_pct !== null; });
      var off = server ? 0.21 : 0;
      var series = [{ label: "client CPU", bars: true,
        xy: pts.map(function (p) { return [p.index - off, p.cpu.client_pct]; }) }];
      if (server) {
        series.push({ label: "server CPU (pid " + run.config.server_pid + ")", bars: true,
          xy: pts.filter(function (p) { return p.cpu.server_pct !== null; })
            .map(function (p) { return [p.index + off, p.cpu.server_pct]; }) });
      }
      var names = {};
      pts.forEach(function (p) { names[p.index] = p.name; });
      chart(root, {
        kind: "cpu-point", title: runName(run, "CPU per point (100% = one core)"),
        xLabel: "point", yLabel: "CPU", yFmt: fmtPct, series: series,
        xFmt: function (v) { return "#" + Math.round(v); },
        xLegendFmt: function (v) { var i = Math.round(v); return "#" + i + (names[i] ? " " + names[i] : ""); },
        xSplits: integerSplits,
        xRange: function (e) { return [Math.round(e[0]) - 0.6, Math.round(e[1]) + 0.6]; }
      });
    });
  }

  // ORION's matrix tables: rows are small outstanding I/Os, columns large outstanding I/Os.
  // As ORION's _iops, _mbps and _lat files: IOPS and latency of the small I/O, MB/s of the
  // large I/O, each where that class ran.
  function drawGrids(root) {
    runs.forEach(function (run, ri) {
      var pts = run.points.filter(function (p) { return p.total.ios > 0; });
      writePcts(pts).forEach(function (w) {
        var at = pts.filter(function (p) { return p.write_pct === w; });
        var rows = uniq(at.map(function (p) { return p.small_qd; })).sort(num);
        var cols = uniq(at.map(function (p) { return p.large_qd; })).sort(num);
        var cell = function (s, l) {
          return at.filter(function (p) { return p.small_qd === s && p.large_qd === l; })[0];
        };
        html("h3", runName(run, w + "% writes"), root);
        var wrap = html("div", null, root, "grids");
        [
          { key: "iops", title: "IOPS (small I/O)", small: true, value: function (p) { return p.small && p.small.total.ios ? fmt(p.small.total.iops) : null; } },
          { key: "mbps", title: "MB/s (large I/O)", value: function (p) { return p.large && p.large.total.ios ? p.large.total.mb_per_s.toFixed(1) : null; } },
          { key: "latency", title: "mean latency (small I/O)", small: true, value: function (p) { return p.small && p.small.total.ios ? fmtUs(p.small.total.latency_us.mean) : null; } }
        ].forEach(function (g) {
          if (!at.some(function (p) { return g.value(p) !== null; })) return;
          var t = html("table", null, wrap, "grid");
          t.setAttribute("data-grid", g.key);
          t.setAttribute("data-run", ri);
          t.setAttribute("data-write-pct", w);
          html("caption", g.title, t);
          // Small I/O figures have no row without small I/O; large ones no column without large.
          var gRows = g.small ? rows.filter(function (s) { return s > 0; }) : rows;
          var gCols = g.small ? cols : cols.filter(function (l) { return l > 0; });
          // Without large I/O (oltp mode) the matrix is one column: lay it out as one row, a
          // column per small outstanding I/Os, as ORION's oltp output reads.
          if (g.small && gCols.length === 1 && gCols[0] === 0) {
            t.setAttribute("data-layout", "row");
            var hr = html("tr", null, t), vr = html("tr", null, t);
            html("th", "small outstanding I/Os", hr);
            html("th", g.key === "latency" ? "latency" : "IOPS", vr);
            gRows.forEach(function (s) {
              html("th", s, hr);
              var p = cell(s, 0), v = p ? g.value(p) : null;
              var td = html("td", v === null ? "" : v, vr);
              if (p) td.title = p.name;
            });
            return;
          }
          var head = html("tr", null, t);
          html("th", "small \\ large", head);
          gCols.forEach(function (l) { html("th", l, head); });
          gRows.forEach(function (s) {
            var tr = html("tr", null, t);
            html("th", s, tr);
            gCols.forEach(function (l) {
              var p = cell(s, l), v = p ? g.value(p) : null;
              var td = html("td", v === null ? "" : v, tr);
              if (p) td.title = p.name;
            });
          });
        });
      });
    });
  }

  function drawKnees(root) {
    var t = html("table", null, root);
    var head = html("tr", null, t);
    ["run", "series", "threshold", "outstanding I/Os", "IOPS", "MB/s", "mean latency"].forEach(function (h) { html("th", h, head); });
    runs.forEach(function (run) {
      run.knees.forEach(function (k) {
        var tr = html("tr", null, t, "knee");
        var none = k.point_index === null;
        [run.label, k.kind.replace("_", " ") + " " + k.write_pct + "% writes", fmtUs(k.latency_threshold_us),
          none ? "none under threshold" : k.qd, none ? "-" : fmt(k.iops), none ? "-" : k.mb_per_s.toFixed(1),
          none ? "-" : fmtUs(k.latency_us_mean)].forEach(function (v) { html("td", v, tr); });
      });
    });
  }

  // Reads of never-written ranges measure no disk: say so at the top, one line per run.
  function drawWarnings(root) {
    runs.forEach(function (run) {
      var w = run.unwritten && run.unwritten.warning;
      if (w) html("p", runName(run, "Unwritten ranges: " + w), root, "warning unwritten");
    });
  }

  function unwrittenText(u) {
    if (!u) return "";
    if (!u.method) return "; unwritten ranges not checked (" + (u.not_checked || "-") + ")";
    var t = "; unwritten before the run " + fmtSize(u.before_bytes) + " of " + fmtSize(u.region_bytes) +
      " (" + u.method + ")";
    if (u.prefilled_bytes) t += ", prefilled " + fmtSize(u.prefilled_bytes) + " in " + u.prefill_s.toFixed(1) + " s";
    else if (u.prefill_skipped && u.before_bytes) t += ", not prefilled: " + u.prefill_skipped;
    return t + ", unwritten when measured " + fmtSize(u.measured_bytes);
  }

  function patternText(c) {
    var d = c.data_pattern || { compressible_pct: 0, dedupable_pct: 0 };
    if (!d.compressible_pct && !d.dedupable_pct) return "unique, incompressible data";
    return d.compressible_pct + "% compressible, " + d.dedupable_pct + "% duplicate 4 KiB blocks";
  }

  function drawTables(root) {
    runs.forEach(function (run) {
      html("h3", run.label, root);
      var m = run.machine, c = run.config, tg = run.target;
      html("p", tg.kind + " target " + tg.uri + " (" + fmtSize(tg.size_bytes) + "), mode " + c.mode +
        ", small " + fmtBytes(c.small_io_bytes) + ", large " + fmtBytes(c.large_io_bytes) +
        ", region " + c.region_spec + ", " + c.duration_s + " s per point after " + c.warmup_s +
        " s warm-up, written data: " + patternText(c) + unwrittenText(run.unwritten) +
        (c.server_pid ? ", server CPU from pid " + c.server_pid : "") + "; " + run.tool.name + " " +
        run.tool.version + " on " + m.hostname + " (" + m.cpus + " CPUs, " + m.cpu_model + ", " +
        m.kernel + "), started " + run.started_at, root, "meta pattern");
      var t = html("table", null, root, "points");
      var head = html("tr", null, t);
      ["#", "point", "IOPS", "MB/s", "mean", "p50", "p95", "p99", "p99.9", "max", "read mean",
        "write mean", "client CPU", "client CPU/IO", "server CPU", "server CPU/IO"]
        .forEach(function (h) { html("th", h, head); });
      run.points.forEach(function (p) {
        var tr = html("tr", null, t), l = p.total.latency_us, cpu = p.cpu || {};
        [p.index, p.name, fmt(p.total.iops), p.total.mb_per_s.toFixed(1), fmtUs(l.mean), fmtUs(l.p50),
          fmtUs(l.p95), fmtUs(l.p99), fmtUs(l.p999), fmtUs(l.max),
          p.read.ios ? fmtUs(p.read.latency_us.mean) : "-", p.write.ios ? fmtUs(p.write.latency_us.mean) : "-",
          fmtPct(cpu.client_pct), cpu.client_us_per_io === undefined ? "-" : fmtUs(cpu.client_us_per_io),
          fmtPct(cpu.server_pct), cpu.server_us_per_io === undefined || cpu.server_us_per_io === null ? "-" : fmtUs(cpu.server_us_per_io)]
          .forEach(function (v) { html("td", v, tr); });
      });
    });
  }

  function byId(id) { return document.getElementById(id); }
  drawWarnings(byId("warnings"));
  drawLatencyVsLoad(byId("charts-latency"));
  drawIopsLatency(byId("charts-iops-latency"));
  var qd = byId("charts-qd");
  drawVsQd(qd, "large_sequential", function (p) { return p.total.mb_per_s; },
    "MB/s against outstanding I/Os (large sequential I/O)", "MB/s", "mbps-qd");
  drawVsQd(qd, "small_random", function (p) { return p.total.iops; },
    "IOPS against outstanding I/Os (small random I/O)", "IOPS", "iops-qd");
  drawVsQd(qd, "small_random", function (p) { return p.total.mb_per_s; },
    "MB/s against outstanding I/Os (small random I/O)", "MB/s", "mbps-qd-small");
  drawGrids(byId("grids"));
  drawCpu(byId("charts-cpu"));
  drawTimeSeries(byId("charts-time"));
  drawHistograms(byId("charts-hist"));
  drawKnees(byId("knees"));
  drawTables(byId("tables"));
  var pending = null;
  window.addEventListener("resize", function () {
    if (pending) cancelAnimationFrame(pending);
    pending = requestAnimationFrame(function () { pending = null; resizeAll(); });
  });
  document.body.setAttribute("data-rendered", "true");
})();
