// The cluster page: capacity (GET /capacity: file systems, overcommit, days to full,
// warnings), data reduction and its parts, the write path (amplification,
// write-buffer backlog), GC, rebuild progress, the d.nodes and pools, and the IOPS of all volumes
// together. Refreshed every two seconds; the IOPS line from the 1 s statistics stream.
'use strict';

const ClusterPage = (() => {
  const template = 'tpl-cluster';
  const REFRESH_MS = 2000;
  const SPARK_SECONDS = 60;
  // The parts of the logical bytes, in the order the bar shows them.
  const REDUCTION_PARTS = [
    ['stored_bytes', 'stored', '#2563eb'],
    ['compression_saved_bytes', 'saved by compression', '#16a34a'],
    ['dedup_saved_bytes', 'saved by dedup', '#f59e0b'],
    ['zero_bytes', 'zeroes eliminated', '#9ca3af'],
  ];

  async function mount(root, _arg, signal, setLive) {
    const q = (sel) => root.querySelector(sel);
    const total = []; // IOPS of all exports per second, oldest first
    window.weft.cluster = { refreshes: 0 };

    const showRates = (data) => {
      // Sum the per-volume sparklines: the last 60 s of the whole datastore.
      const len = Math.max(0, ...data.volumes.map((v) => (v.spark_iops || []).length));
      total.length = 0;
      for (let i = 0; i < len; i++) total.push(0);
      for (const v of data.volumes) {
        const sp = v.spark_iops || [];
        const off = len - sp.length;
        for (let i = 0; i < sp.length; i++) total[off + i] += sp[i];
      }
      Dom.sparkline(q('#cl-throughput'), total, '#2563eb', SPARK_SECONDS);
      const iopsOf = (v) => (v.read ? v.read.iops : 0) + (v.write ? v.write.iops : 0);
      const now = data.volumes.reduce((a, v) => a + iopsOf(v), 0);
      const busiest = data.volumes.reduce((b, v) => (iopsOf(v) > b.iops ? { name: v.name, iops: iopsOf(v) } : b),
        { name: null, iops: 0 });
      q('#cl-throughput-now').textContent = Fmt.si(now) + ' IOPS now'
        + (busiest.name ? ' · busiest: ' + busiest.name + ' (' + Fmt.si(busiest.iops) + ')' : '');
    };
    const noRates = () => { q('#cl-throughput-card').hidden = true; };
    Api.get('/stats/volumes', signal).then(showRates, (e) => {
      if (e instanceof Api.ApiError && e.status === 404) noRates();
    });
    Api.stream('/stats/stream', signal, (name, data) => {
      if (name === 'volumes') showRates(data);
    }, setLive, noRates);

    while (!signal.aborted) {
      try {
        await refresh(q, signal);
        q('#cl-error').textContent = '';
      } catch (e) {
        if (e instanceof Api.Unauthorized || signal.aborted) return;
        q('#cl-error').textContent = e.message;
      }
      window.weft.cluster.refreshes += 1;
      await Api.sleep(REFRESH_MS, signal);
    }
  }

  async function refresh(q, signal) {
    const stats = await Api.get('/stats', signal);
    let cluster = null;
    try {
      cluster = await Api.get('/cluster', signal);
    } catch (e) {
      if (e instanceof Api.Unauthorized) throw e;
      // Single-process view from the engine's figures alone.
    }
    const single = !cluster || cluster.mode !== 'cluster';
    q('#cl-mode').textContent = single ? 'single process' : 'cluster';
    const healthy = single ? !stats.out_of_space && stats.corrupt_reads === 0 : cluster.healthy;
    const health = q('#cl-health');
    health.textContent = healthy ? 'healthy' : single ? (stats.out_of_space ? 'out of space' : 'corrupt reads seen') : 'degraded';
    health.classList.toggle('ok', !!healthy);
    health.classList.toggle('bad', !healthy);

    // Capacity: the report of the file systems (servers before it: the engine's figures).
    let capacity = null;
    try {
      capacity = await Api.get('/capacity', signal);
    } catch (e) {
      if (e instanceof Api.Unauthorized) throw e;
    }
    window.weft.cluster.capacity = capacity;
    showCapacity(q, stats, capacity);

    // Reduction: logical = stored + saved by compression + saved by dedup + zeroes.
    const red = stats.reduction || {};
    q('#cl-ratio').textContent = Fmt.ratio(red.ratio) + ' (' + Fmt.bytes(red.logical_bytes) + ' logical → '
      + Fmt.bytes(red.stored_bytes) + ' stored)';
    const stack = q('#cl-reduction-bar');
    const legend = q('#cl-reduction-legend');
    stack.replaceChildren();
    legend.replaceChildren();
    const whole = REDUCTION_PARTS.reduce((a, [k]) => a + (red[k] || 0), 0);
    for (const [k, label, colour] of REDUCTION_PARTS) {
      const part = Dom.el('span', { title: label + ': ' + Fmt.bytes(red[k] || 0) });
      part.style.width = (whole ? (100 * (red[k] || 0)) / whole : 0) + '%';
      part.style.background = colour;
      stack.append(part);
      const dot = Dom.el('span', { class: 'dot' });
      dot.style.background = colour;
      legend.append(Dom.el('li', {}, dot, label + ' ' + Fmt.bytes(red[k] || 0)));
    }

    Dom.fillKv(q('#cl-write'), [
      // Two figures, not one "write amplification": disk bytes per host byte (data reduction
      // brings it under 1) and what GC adds (moved bytes are written twice).
      ['disk bytes per host byte', stats.write_amplification ? stats.write_amplification.toFixed(2) + '× (after reduction)' : '–'],
      ['GC amplification', gcAmplification(stats)],
      ['written by hosts', Fmt.bytes(stats.host_written_bytes)],
      ['written to chunks', Fmt.bytes(stats.chunk_written_bytes)],
      ['write buffer backlog', Fmt.bytes(stats.buffer_bytes) + ' in ' + stats.buffer_records + ' records'],
      ['sealed segments', String(stats.sealed_segments)],
      ['metadata memory', Fmt.bytes(stats.metadata_memory_bytes)],
    ]);
    const gc = stats.gc || {};
    Dom.fillKv(q('#cl-gc'), [
      ['runs', String(gc.runs)],
      ['segments reclaimed', String(gc.segments_reclaimed)],
      ['bytes moved', Fmt.bytes(gc.bytes_moved)],
      ['bytes reclaimed', Fmt.bytes(gc.bytes_reclaimed)],
    ]);

    // Rebuild: only a cluster with redundancy has anything to rebuild.
    q('#cl-rebuild-card').hidden = single;
    const rep = (cluster && cluster.repair) || stats.repair || {};
    const todo = rep.chunks_to_rebuild || 0;
    const done = rep.chunks_rebuilt || 0;
    setBar(q('#cl-rebuild-bar'), todo ? done / todo : 0, false);
    q('#cl-rebuild').textContent = rep.running
      ? 'rebuilding: ' + done + ' of ' + todo + ' chunks (' + (todo ? ((100 * done) / todo).toFixed(1) : '0') + '%), '
        + Fmt.bytes(rep.rate_bytes_per_s) + '/s, ETA ' + Fmt.seconds(rep.eta_s)
        + (rep.chunks_failed ? ', ' + rep.chunks_failed + ' failed' : '')
      : (rep.caught_up ? 'nothing to rebuild' : 'idle') + ' · ' + (rep.scans || 0) + ' scans, '
        + (rep.chunks_rebuilt_total || 0) + ' chunks (' + Fmt.bytes(rep.bytes_rebuilt_total || 0) + ') rebuilt since start'
        + (stats.degraded_reads ? ' · ' + stats.degraded_reads + ' degraded reads' : '');

    // Nodes and pools.
    const nodes = cluster && cluster.nodes ? cluster.nodes
      : [{ id: 'local', state: 'up', capacity_bytes: stats.capacity_bytes, used_bytes: stats.used_bytes }];
    const tbody = q('#cl-nodes tbody');
    tbody.replaceChildren(...nodes.map((n) => {
      const bar = Dom.el('div', { class: 'bar small' });
      const fill = Dom.el('div', { class: 'fill' });
      bar.append(fill);
      setBar(bar, n.capacity_bytes ? n.used_bytes / n.capacity_bytes : 0, true);
      return Dom.el('tr', { 'data-node': n.id },
        Dom.el('td', { text: n.id }),
        Dom.el('td', { text: n.addr || '' }),
        Dom.el('td', { text: n.zone || '' }),
        Dom.el('td', {}, Dom.el('span', { class: 'tag ' + (n.state === 'up' ? 'ok' : 'bad'), text: n.state + (n.down_for_s ? ' ' + Fmt.seconds(n.down_for_s) : '') })),
        Dom.el('td', {}, bar, Dom.el('span', { text: Fmt.bytes(n.used_bytes) })),
        Dom.el('td', { class: 'num', text: n.capacity_bytes ? Fmt.bytes(n.capacity_bytes) : 'unlimited' }),
        Dom.el('td', { class: 'num', text: n.pg_positions === undefined ? '–' : String(n.pg_positions) }));
    }));
    const pools = (cluster && cluster.pools) || [];
    q('#cl-pools-section').hidden = pools.length === 0;
    q('#cl-pools tbody').replaceChildren(...pools.map((p) => Dom.el('tr', {},
      Dom.el('td', { text: p.name }),
      Dom.el('td', { text: p.redundancy }),
      Dom.el('td', { class: 'num', text: String(p.pg_count) }),
      Dom.el('td', { class: 'num', text: String(p.pgs_healthy) }),
      Dom.el('td', { class: 'num' + (p.pgs_degraded ? ' warn' : ''), text: String(p.pgs_degraded) }),
      Dom.el('td', { class: 'num' + (p.pgs_incomplete ? ' warn' : ''), text: String(p.pgs_incomplete) }))));
  }

  // Capacity: used of what weft can fill, usable after redundancy, overcommit, growth and
  // days to full, each file system once, and the 80 % / 90 % warnings.
  function showCapacity(q, stats, c) {
    const warnings = q('#cl-capacity-warnings');
    const fss = q('#cl-filesystems tbody');
    if (!c) {
      const cap = stats.capacity_bytes;
      const used = stats.used_bytes;
      setBar(q('#cl-capacity-bar'), cap ? used / cap : 0, true);
      q('#cl-capacity-pct').textContent = cap ? ((100 * used) / cap).toFixed(1) + '% used' : Fmt.bytes(used) + ' used';
      q('#cl-capacity').textContent = Fmt.bytes(used) + ' of ' + (cap ? Fmt.bytes(cap) : 'no limit');
      warnings.replaceChildren();
      fss.replaceChildren();
      return;
    }
    setBar(q('#cl-capacity-bar'), c.raw_bytes ? c.used_bytes / c.raw_bytes : 0, true);
    q('#cl-capacity-pct').textContent = c.used_percent.toFixed(1) + '% used';
    const growth = c.growth_bytes_per_day === null || c.growth_bytes_per_day === undefined
      ? 'growth not measured yet'
      : (c.growth_bytes_per_day >= 0 ? '+' : '−') + Fmt.bytes(Math.abs(c.growth_bytes_per_day)) + '/day'
        + (c.days_to_full ? ', full in ' + fullIn(c.days_to_full) : ', not growing');
    q('#cl-capacity').textContent = Fmt.bytes(c.used_bytes) + ' used, ' + Fmt.bytes(c.free_bytes) + ' free of '
      + Fmt.bytes(c.raw_bytes) + ' · ' + growth;
    Dom.fillKv(q('#cl-capacity-kv'), [
      ['usable (' + c.redundancy + ')', Fmt.bytes(c.usable_bytes) + ', ' + Fmt.bytes(c.usable_free_bytes) + ' free'],
      ['provisioned', Fmt.bytes(c.provisioned_bytes) + ' in ' + Fmt.count(stats.volumes, 'volume')],
      ['overcommit', c.overcommit === null || c.overcommit === undefined ? '–' : c.overcommit.toFixed(2) + '×'],
      ['kept for GC', Fmt.bytes(c.reserved_bytes)],
    ]);
    warnings.replaceChildren(...(c.warnings || []).map((w) => Dom.el('li', {
      class: c.level === 'critical' ? 'bad' : 'warn', text: w,
    })));
    fss.replaceChildren(...(c.filesystems || []).map((f) => {
      const bar = Dom.el('div', { class: 'bar small' });
      bar.append(Dom.el('div', { class: 'fill' }));
      setBar(bar, f.used_percent / 100, true);
      return Dom.el('tr', { 'data-fs': f.fs_id },
        Dom.el('td', { text: f.paths.join(', ') }),
        Dom.el('td', {}, bar, Dom.el('span', { text: f.used_percent.toFixed(0) + '%' })),
        Dom.el('td', { class: 'num', text: Fmt.bytes(f.free_bytes) }),
        Dom.el('td', { class: 'num', text: Fmt.bytes(f.size_bytes) }),
        Dom.el('td', { class: 'num', text: Fmt.bytes(f.weft_used_bytes) }));
    }));
  }

  // Chunk bytes per byte of new data: 1.00× when GC moved nothing.
  function gcAmplification(stats) {
    const chunk = stats.chunk_written_bytes || 0;
    const moved = (stats.gc && stats.gc.bytes_moved) || 0;
    return chunk > moved ? (chunk / (chunk - moved)).toFixed(2) + '×' : '–';
  }

  // `3.2 days`, or `5.0 hours` under a day.
  function fullIn(days) {
    return days >= 1 ? days.toFixed(1) + ' days' : (24 * days).toFixed(1) + ' hours';
  }

  // A fill bar; `fullIsBad`: red above 85% (space), else green when complete (progress).
  function setBar(bar, fraction, fullIsBad) {
    const f = Math.max(0, Math.min(1, fraction || 0));
    const fill = bar.querySelector('.fill');
    fill.style.width = (100 * f).toFixed(1) + '%';
    fill.classList.toggle('high', fullIsBad && f >= 0.8);
    fill.classList.toggle('done', !fullIsBad && f >= 1);
  }

  return { template, mount };
})();
