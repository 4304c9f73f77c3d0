// One volume (or snapshot export): its figures, hosts and clients, its QoS (volume_qos.js), its
// actions (volume_actions.js), live charts of IOPS, MB/s and read and write latency percentiles
// (times in UTC), a latency heat map, and its snapshots and clones as a tree with their space.
//
// Data: the history of the chosen range from /volumes/{name}/stats?step=..., then at 100 ms the
// sample stream (/stats/stream?volume=...), at 1 s and 10 s a poll with since_ms. Samples are kept
// in columns (what uPlot draws) capped at the range's length; drawing happens at most once per
// animation frame, whatever the sample rate.
'use strict';

const VolumePage = (() => {
  const template = 'tpl-volume';

  // The ranges: history step, samples kept (the server keeps as many), poll period (0: stream).
  const RANGES = {
    '100ms': { stepMs: 100, keep: 600, pollMs: 0 },
    '1s': { stepMs: 1000, keep: 900, pollMs: 1000 },
    '10s': { stepMs: 10000, keep: 360, pollMs: 10000 },
  };
  const READ = '#16a34a';
  const WRITE = '#dc2626';
  const CHART_HEIGHT_PX = 190;
  // Axis width that fits "999.9k" and "100 ms" without clipping.
  const AXIS_SIZE_PX = 64;
  // Deepest clone-of-a-clone level the tree fetches.
  const TREE_DEPTH_MAX = 6;

  // Columns of samples, oldest first.
  function emptySeries() {
    return {
      t: [], rIops: [], wIops: [], rMb: [], wMb: [],
      rP50: [], rP99: [], rMax: [], wP50: [], wP99: [], wMax: [],
      heat: [], tMs: [],
    };
  }

  async function mount(root, name, signal, setLive) {
    const q = (sel) => root.querySelector(sel);
    q('#vv-name').textContent = name;
    const note = q('#vv-note');
    const errorLine = q('#vv-error');
    let range = sessionStorage.getItem('weft.volumeRange') || '100ms';
    if (!RANGES[range]) range = '100ms';
    let series = emptySeries();
    let heatBounds = [];
    let runAbort = null; // ends the current range's feed
    let dirty = false;
    let heatNonZero = 0;

    // The charts span the range's whole window, like the heat map, ending at the newest sample.
    const charts = makeCharts(q, () => (RANGES[range].stepMs * RANGES[range].keep) / 1000);
    const heat = q('#vv-heat');
    const onResize = () => {
      for (const c of Object.values(charts)) c.setSize({ width: chartWidth(c.root.parentNode), height: CHART_HEIGHT_PX });
      dirty = true;
    };
    window.addEventListener('resize', onResize);
    signal.addEventListener('abort', () => {
      window.removeEventListener('resize', onResize);
      if (runAbort) runAbort.abort();
      for (const c of Object.values(charts)) c.destroy();
    });

    window.weft.volume = {
      name,
      range: () => range,
      samples: () => series.t.length,
      lastIops: () => lastOf(series.rIops) + lastOf(series.wIops),
      lastTimeMs: () => lastOf(series.tMs),
      iops: () => series.rIops.map((r, i) => r + series.wIops[i]),
      heatNonZero: () => heatNonZero,
      heatBounds: () => heatBounds.slice(),
      draws: 0,
    };

    for (const b of root.querySelectorAll('button[data-range]')) {
      b.addEventListener('click', () => startRange(b.dataset.range));
    }

    frame();
    loadInfo(q, name, signal).catch(report);
    startRange(range);

    function report(e) {
      if (e instanceof Api.Unauthorized || signal.aborted) return;
      errorLine.textContent = e.message;
    }

    function startRange(r) {
      range = r;
      sessionStorage.setItem('weft.volumeRange', r);
      for (const b of root.querySelectorAll('button[data-range]')) b.classList.toggle('active', b.dataset.range === r);
      if (runAbort) runAbort.abort();
      runAbort = new AbortController();
      const sig = runAbort.signal;
      series = emptySeries();
      dirty = true;
      feed(RANGES[r], sig).catch((e) => {
        if (sig.aborted) return;
        if (e instanceof Api.ApiError && e.status === 404) {
          note.textContent = 'live statistics are not available for this export on this server';
          return;
        }
        report(e);
      });
    }

    async function feed(cfg, sig) {
      const path = '/volumes/' + encodeURIComponent(name) + '/stats?step=' + range;
      const history = await Api.get(path, sig);
      if (sig.aborted) return;
      heatBounds = history.heat_bounds_us || [];
      for (const s of history.samples) ingest(s, cfg);
      note.textContent = '';
      if (cfg.pollMs === 0) {
        Api.stream('/stats/stream?volume=' + encodeURIComponent(name), sig, (ev, data) => {
          if (ev === 'sample' && (!data.name || data.name === name)) ingest(data, cfg);
        }, setLive, () => pollLoop(cfg, sig, path));
      } else {
        await pollLoop(cfg, sig, path);
      }
    }

    async function pollLoop(cfg, sig, path) {
      const period = cfg.pollMs || cfg.stepMs;
      while (!sig.aborted) {
        await Api.sleep(period, sig);
        if (sig.aborted) return;
        try {
          const since = lastOf(series.tMs) || 0;
          const more = await Api.get(path + '&since_ms=' + since, sig);
          for (const s of more.samples) ingest(s, cfg);
          setLive(true);
        } catch (e) {
          if (e instanceof Api.Unauthorized) return;
          setLive(false);
        }
      }
    }

    function ingest(s, cfg) {
      const last = lastOf(series.tMs);
      if (last !== undefined && s.t_ms <= last) return;
      const r = s.read || {};
      const w = s.write || {};
      const lat = (op, v) => (op.iops > 0 && v > 0 ? v : null);
      series.tMs.push(s.t_ms);
      series.t.push(s.t_ms / 1000);
      series.rIops.push(r.iops || 0);
      series.wIops.push(w.iops || 0);
      series.rMb.push((r.bytes_per_s || 0) / 1e6);
      series.wMb.push((w.bytes_per_s || 0) / 1e6);
      series.rP50.push(lat(r, r.p50_us));
      series.rP99.push(lat(r, r.p99_us));
      series.rMax.push(lat(r, r.max_us));
      series.wP50.push(lat(w, w.p50_us));
      series.wP99.push(lat(w, w.p99_us));
      series.wMax.push(lat(w, w.max_us));
      series.heat.push(s.heat || []);
      const extra = series.t.length - cfg.keep;
      if (extra > 0) for (const k of Object.keys(series)) series[k].splice(0, extra);
      dirty = true;
    }

    // Draws what changed, once per animation frame.
    function frame() {
      if (signal.aborted) return;
      if (dirty) {
        dirty = false;
        draw();
      }
      requestAnimationFrame(frame);
    }

    function draw() {
      const s = series;
      charts.iops.setData([s.t, s.rIops, s.wIops]);
      charts.mbps.setData([s.t, s.rMb, s.wMb]);
      charts.latRead.setData([s.t, s.rP50, s.rP99, s.rMax]);
      charts.latWrite.setData([s.t, s.wP50, s.wP99, s.wMax]);
      const n = s.t.length;
      const iopsNow = n ? s.rIops[n - 1] + s.wIops[n - 1] : 0;
      q('#vv-iops').dataset.lastIops = iopsNow.toFixed(1);
      q('#vv-iops-now').textContent = n ? 'read ' + Fmt.si(s.rIops[n - 1]) + ' · write ' + Fmt.si(s.wIops[n - 1]) : '';
      q('#vv-mbps-now').textContent = n ? 'read ' + Fmt.si(s.rMb[n - 1]) + ' · write ' + Fmt.si(s.wMb[n - 1]) : '';
      q('#vv-lat-read-now').textContent = n ? 'p99 ' + Fmt.micros(s.rP99[n - 1]) : '';
      q('#vv-lat-write-now').textContent = n ? 'p99 ' + Fmt.micros(s.wP99[n - 1]) : '';
      heatNonZero = drawHeat(heat, s, heatBounds, RANGES[range]);
      heat.dataset.nonZero = String(heatNonZero);
      window.weft.volume.draws += 1;
    }
  }

  // The powers of ten within [min, max] (at least one), for a log axis's labels.
  function decades(min, max) {
    const out = [];
    const lo = Math.max(1, min || 1);
    for (let d = 10 ** Math.floor(Math.log10(lo)); d <= (max || 10) * 1.0001; d *= 10) {
      if (d >= lo * 0.9999) out.push(d);
    }
    return out.length ? out : [lo];
  }

  function lastOf(a) {
    return a.length ? a[a.length - 1] : undefined;
  }

  function chartWidth(box) {
    return Math.max(300, (box.clientWidth || 600) - 8);
  }

  function makeCharts(q, windowS) {
    // Wall-clock ticks at least 90 px apart (100 ms samples would otherwise get ".800" labels).
    // Times in UTC, as every time the UI prints (the axis says so).
    const timeAxis = {
      space: 90,
      label: 'UTC',
      labelSize: 14,
      values: (u, splits) => splits.map(Fmt.tick),
    };
    const siAxis = { size: AXIS_SIZE_PX, values: (u, vals) => vals.map(Fmt.si) };
    // A log axis labelled at powers of ten only, at least 24 px apart: the default also labels
    // 2..9 of each decade, and those labels collide.
    const latAxis = {
      size: AXIS_SIZE_PX,
      space: 24,
      splits: (u, axisIdx, min, max) => decades(min, max),
      // uPlot passes null for the splits it leaves unlabelled when they would crowd.
      values: (u, vals) => vals.map((v) => (v === null || v === undefined ? '' : Fmt.micros(v))),
    };
    const line = (label, stroke, dash) => ({
      label, stroke, width: 1.5, dash, spanGaps: false, points: { show: false },
      value: (u, v) => (v === null || v === undefined ? '–' : Fmt.si(v)),
    });
    const latLine = (label, stroke, dash) => ({
      label, stroke, width: 1.25, dash, spanGaps: false, points: { show: false },
      value: (u, v) => (v === null || v === undefined ? '–' : Fmt.micros(v)),
    });
    const logScale = {
      distr: 3,
      log: 10,
      range: (u, min, max) => (min === null || max === null || !(max > 0)
        ? [10, 10000]
        : uPlot.rangeLog(Math.max(1, min), Math.max(10, max), 10, true)),
    };
    const make = (id, series, yAxis, yScale) => {
      const box = q(id);
      return new uPlot({
        width: chartWidth(box.parentNode),
        height: CHART_HEIGHT_PX,
        // Ticks placed in UTC, the legend's time in the one format of the UI.
        tzDate: (ts) => uPlot.tzDate(new Date(ts * 1e3), 'Etc/UTC'),
        series: [{ value: (u, v) => (v === null || v === undefined ? '–' : Fmt.timeOfDay(v * 1000)) }, ...series],
        scales: {
          x: { time: true, range: (u, min, max) => (max === null ? [min, max] : [max - windowS(), max]) },
          y: yScale || { range: (u, min, max) => [0, Math.max(1, max || 0) * 1.1] } },
        axes: [timeAxis, yAxis],
        legend: { live: true },
        cursor: { drag: { x: false, y: false } },
      }, [[], ...series.map(() => [])], box);
    };
    return {
      iops: make('#vv-iops', [line('read', READ), line('write', WRITE)], siAxis),
      mbps: make('#vv-mbps', [line('read', READ), line('write', WRITE)], siAxis),
      // Reads and writes on charts of their own: three series each (p50, p99, max), not six on
      // one axis.
      latRead: make('#vv-lat-read', [
        latLine('p50', READ, [2, 3]), latLine('p99', READ), latLine('max', READ, [8, 4]),
      ], latAxis, logScale),
      latWrite: make('#vv-lat-write', [
        latLine('p50', WRITE, [2, 3]), latLine('p99', WRITE), latLine('max', WRITE, [8, 4]),
      ], latAxis, logScale),
    };
  }

  // The heat map: time across (the range's window, newest at the right edge), latency buckets
  // up (the fastest at the bottom), colour by count on a log scale. One pixel per (sample,
  // bucket) in an offscreen image, scaled up without smoothing. Returns the non-zero cells.
  function drawHeat(canvas, s, bounds, cfg) {
    const { ctx, w, h } = Dom.canvas2d(canvas);
    ctx.clearRect(0, 0, w, h);
    const left = AXIS_SIZE_PX;
    const bottom = 18;
    const plotW = Math.max(10, w - left - 8);
    const plotH = Math.max(10, h - bottom - 4);
    const nb = Math.max(bounds.length, ...s.heat.map((c) => c.length), 1);
    ctx.fillStyle = '#f3f4f6';
    ctx.fillRect(left, 4, plotW, plotH);
    ctx.fillStyle = '#4b5563';
    ctx.font = '11px system-ui, sans-serif';
    ctx.textAlign = 'right';
    ctx.textBaseline = 'middle';
    const every = Math.max(1, Math.ceil(nb / Math.max(1, Math.floor(plotH / 16))));
    for (let b = 0; b < nb; b += every) {
      const y = 4 + plotH - (b + 0.5) * (plotH / nb);
      ctx.fillText(bounds[b] !== undefined ? Fmt.bound(bounds[b]) : String(b), left - 4, y);
    }
    const n = s.t.length;
    if (n === 0) return 0;
    const cols = cfg.keep;
    const endMs = s.tMs[n - 1];
    let max = 0;
    for (const c of s.heat) for (const v of c) if (v > max) max = v;
    const img = new ImageData(cols, nb);
    let nonZero = 0;
    const logMax = Math.log1p(max || 1);
    for (let i = 0; i < n; i++) {
      const col = cols - 1 - Math.round((endMs - s.tMs[i]) / cfg.stepMs);
      if (col < 0) continue;
      const c = s.heat[i];
      for (let b = 0; b < c.length; b++) {
        const v = c[b];
        if (!v) continue;
        nonZero += 1;
        const [r, g, bl] = ramp(Math.log1p(v) / logMax);
        const p = ((nb - 1 - b) * cols + col) * 4;
        img.data[p] = r;
        img.data[p + 1] = g;
        img.data[p + 2] = bl;
        img.data[p + 3] = 255;
      }
    }
    const off = document.createElement('canvas');
    off.width = cols;
    off.height = nb;
    off.getContext('2d').putImageData(img, 0, 0);
    ctx.imageSmoothingEnabled = false;
    ctx.drawImage(off, left, 4, plotW, plotH);
    ctx.textAlign = 'left';
    ctx.textBaseline = 'alphabetic';
    ctx.fillStyle = '#4b5563';
    const span = (cols * cfg.stepMs) / 1000;
    ctx.fillText('−' + Fmt.seconds(span), left, h - 4);
    ctx.textAlign = 'right';
    ctx.fillText(Fmt.timeOfDay(endMs), left + plotW, h - 4);
    return nonZero;
  }

  // 0..1 -> a colour from pale yellow through orange to deep purple.
  function ramp(x) {
    const stops = [[255, 237, 160], [254, 178, 76], [240, 59, 32], [189, 0, 38], [84, 0, 90]];
    const f = Math.min(1, Math.max(0, x)) * (stops.length - 1);
    const i = Math.min(stops.length - 2, Math.floor(f));
    const t = f - i;
    return [0, 1, 2].map((k) => Math.round(stops[i][k] + (stops[i + 1][k] - stops[i][k]) * t));
  }

  // `pgdata@tue (rolled back to it)` for a volume's own snapshot, else the snapshot it reads as
  // (a clone's, or what a refresh pointed it to).
  function originText(name, origin) {
    return origin.startsWith(name + '@') ? origin + ' (rolled back to it)' : origin + ' (clone or refresh of it)';
  }

  // The export's figures, its clients and hosts, and the tree of its family.
  async function loadInfo(q, name, signal) {
    // A snapshot's full name has an '@' (no volume's does): ask for it as a snapshot at once,
    // not after a 404 from /volumes.
    const isSnapshot = name.includes('@');
    const info = await Api.get((isSnapshot ? '/snapshots/' : '/volumes/') + encodeURIComponent(name), signal);
    q('#vv-kind').textContent = isSnapshot ? 'snapshot (read-only)' : 'volume';
    if (!isSnapshot) {
      q('#vv-qos-box').hidden = false;
      VolumeQos.show(q('#vv-qos'), name, signal);
    }
    const sp = info.space || {};
    const pairs = [
      ['size', Fmt.bytes(info.size_bytes)],
      ['sector', info.logical_block_size + ' B'],
      ['allocated', Fmt.bytes(sp.mapped_bytes)],
      ['zeroes', Fmt.bytes(sp.zero_bytes)],
      ['own', Fmt.bytes(sp.own_bytes)],
      ['shared', Fmt.bytes(sp.shared_bytes)],
      ['unique stored', Fmt.bytes(sp.unique_stored_bytes)],
      ['family reduction', Fmt.ratio(info.family && info.family.reduction && info.family.reduction.ratio)],
      ['layers', String(info.chain_layers)],
      ['NBD', info.nbd_uri || ''],
    ];
    if (info.origin) pairs.splice(1, 0, ['origin', originText(name, info.origin)]);
    if (isSnapshot && info.volume) pairs.splice(1, 0, ['of volume', info.volume]);
    const hosts = (info.hosts || []).map((h) => h.host + ' (LUN ' + h.lun + ')');
    pairs.push(['hosts', hosts.length ? hosts.join(', ') : 'none (served to local clients)']);
    pairs.push(['created', Fmt.moment(info.created_unix_s)]);
    Dom.fillKv(q('#vv-info'), pairs);
    VolumeActions.showSessions(q('#vv-sessions'), info.sessions || []);
    window.weft.volume.sessions = (info.sessions || []).length;
    await VolumeActions.wire(q, name, info, signal);

    // The tree starts at the volume: the page's own, or the snapshot's.
    const rootVolume = isSnapshot ? info.volume : name;
    const tree = q('#vv-tree');
    if (!rootVolume) {
      tree.replaceChildren(Dom.el('ul', {}, node(info, 'snapshot', name)));
      return;
    }
    const rootInfo = isSnapshot ? await Api.get('/volumes/' + encodeURIComponent(rootVolume), signal) : info;
    const ul = Dom.el('ul', {});
    if (rootInfo.origin) {
      // Its own snapshot: it was rolled back to it; another volume's: a clone (or refreshed).
      const rolledBack = rootInfo.origin.startsWith(rootInfo.name + '@');
      const origin = Dom.el('li', { class: 'origin' },
        rolledBack ? 'rolled back to snapshot ' : 'cloned from (or refreshed to) snapshot ', link(rootInfo.origin));
      ul.append(origin);
    }
    ul.append(await volumeNode(rootInfo, name, signal, 0));
    tree.replaceChildren(ul);
  }

  async function volumeNode(vol, current, signal, depth) {
    const li = node(vol, 'volume', current);
    if (depth >= TREE_DEPTH_MAX) return li;
    const snaps = await Api.get('/snapshots?volume=' + encodeURIComponent(vol.name), signal);
    if (!snaps.length) return li;
    const ul = Dom.el('ul', {});
    for (const s of snaps) {
      const sli = node(s, 'snapshot', current);
      if (s.clones && s.clones.length) {
        const cul = Dom.el('ul', {});
        for (const c of s.clones) {
          try {
            const cv = await Api.get('/volumes/' + encodeURIComponent(c), signal);
            cul.append(await volumeNode(cv, current, signal, depth + 1));
          } catch (e) {
            if (e instanceof Api.Unauthorized) throw e;
            cul.append(Dom.el('li', {}, link(c)));
          }
        }
        sli.append(cul);
      }
      ul.append(sli);
    }
    li.append(ul);
    return li;
  }

  function link(n) {
    return Dom.el('a', { href: '#/volume/' + encodeURIComponent(n), text: n });
  }

  // One export in the tree: name, kind, and its space as a bar (unique stored of mapped) and
  // figures.
  function node(info, kind, current) {
    const sp = info.space || {};
    const mapped = sp.mapped_bytes || 0;
    const bar = Dom.el('span', { class: 'minibar', title: 'own of allocated' });
    const fill = Dom.el('span', { class: 'fill' });
    fill.style.width = (mapped ? Math.min(100, (100 * (sp.own_bytes || 0)) / mapped) : 0).toFixed(1) + '%';
    bar.append(fill);
    const created = info.created_unix_s ? Fmt.moment(info.created_unix_s) : '';
    const li = Dom.el('li', { class: kind + (info.name === current ? ' current' : ''), 'data-name': info.name },
      Dom.el('span', { class: 'kind', text: kind === 'snapshot' ? '◆' : '▣' }), ' ',
      link(info.name), ' ', bar,
      Dom.el('span', {
        class: 'space',
        text: 'allocated ' + Fmt.bytes(mapped) + ' · own ' + Fmt.bytes(sp.own_bytes) + ' · shared '
          + Fmt.bytes(sp.shared_bytes) + ' · unique ' + Fmt.bytes(sp.unique_stored_bytes),
      }),
      Dom.el('span', { class: 'when', text: created }));
    return li;
  }

  return { template, mount };
})();
