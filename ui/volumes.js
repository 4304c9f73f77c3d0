// The volume list: every export (volumes and snapshots) with its space, data reduction and
// hosts, a sparkline of its IOPS over the last minute and its rates, sortable, updated each
// second from the statistics stream (space, reduction and hosts every SPACE_POLL_MS from the
// catalog: they walk the block maps). Every sparkline has one scale, the busiest row's peak,
// printed in the column's header, so a quiet clone looks quiet beside a busy volume.
// In a cluster the rates are every c.node's (the server merges their answers) and each row
// names its shard and owner; a c.node that did not answer is named in the note, and the rates
// of the volumes it owns show `?` (unknown, not zero).
//
// Built for hundreds of volumes: each row is created once and its cells are updated in place
// (text only when it changed); sparklines are drawn on a small canvas per row, and only for rows
// on screen; a sort moves the existing rows instead of rebuilding them.
'use strict';

const VolumesPage = (() => {
  const SPARK_COLOUR = '#2563eb';
  // Seconds a sparkline spans (the API's spark_iops).
  const SPARK_SECONDS = 60;
  // Without the live stream, how often to poll /stats/volumes.
  const POLL_MS = 1000;
  // How often the space, reduction and host columns are read again (GET /volumes computes
  // space by walking every map: not a per-second call).
  const SPACE_POLL_MS = 10000;

  // Sort keys: a value per row, and whether bigger comes first.
  const SORTS = {
    name: { key: (r) => r.name, desc: false },
    size: { key: (r) => r.size, desc: true },
    allocated: { key: (r) => r.allocated, desc: true },
    reduction: { key: (r) => r.reduction, desc: true },
    iops: { key: (r) => r.iops, desc: true },
    mbps: { key: (r) => r.mbps, desc: true },
    p99: { key: (r) => r.p99, desc: true },
    iopsgb: { key: (r) => r.iopsgb, desc: true },
    owner: { key: (r) => r.owner, desc: false },
    shard: { key: (r) => r.shard, desc: false },
  };

  const template = 'tpl-volumes';

  async function mount(root, _arg, signal, setLive) {
    const tbody = root.querySelector('#vl-table tbody');
    const count = root.querySelector('#vl-count');
    const note = root.querySelector('#vl-note');
    const filter = root.querySelector('#vl-filter');
    const showSnapshots = root.querySelector('#vl-snapshots');
    const rows = new Map(); // name -> row state
    let order = []; // rows in display order
    let sort = loadSort();

    // Sparklines only for rows in view: a row scrolled away is redrawn when it comes back.
    const visible = new IntersectionObserver((entries) => {
      for (const e of entries) {
        const r = e.target.weftRow;
        if (!r) continue;
        r.onScreen = e.isIntersecting;
        if (r.onScreen && r.sparkDirty) drawSpark(r);
      }
    });
    signal.addEventListener('abort', () => visible.disconnect());

    for (const th of root.querySelectorAll('#vl-table th[data-sort]')) {
      th.addEventListener('click', () => {
        const col = th.dataset.sort;
        sort = sort.col === col ? { col, desc: !sort.desc } : { col, desc: SORTS[col].desc };
        sessionStorage.setItem('weft.volumeSort', JSON.stringify(sort));
        applySort();
      });
    }
    filter.addEventListener('input', applyFilter);
    showSnapshots.addEventListener('change', applyFilter);
    root.querySelector('#vl-create').addEventListener('submit', async (ev) => {
      ev.preventDefault();
      const errorLine = root.querySelector('#vl-create-error');
      errorLine.textContent = '';
      const name = root.querySelector('#vl-new-name').value.trim();
      const size = Fmt.parseSize(root.querySelector('#vl-new-size').value);
      if (!size) {
        errorLine.textContent = 'size: a number with K, M, G or T (powers of 1024), e.g. 100G';
        return;
      }
      try {
        const v = await Api.send('POST', '/volumes', { name, size_bytes: size });
        location.hash = '#/volume/' + encodeURIComponent(v.name);
      } catch (e) {
        errorLine.textContent = e.message || String(e);
      }
    });

    let sparkMax = 1; // the shared scale of the sparklines
    const sparkMaxLabel = root.querySelector('#vl-spark-max');
    let catalog = new Map(); // name -> its /volumes or /snapshots JSON

    window.weft.volumes = {
      rows: () => order.map((r) => r.name),
      sort: () => ({ ...sort }),
      sparkMax: () => sparkMax,
      catalogReads: 0,
      updates: 0,
    };
    readCatalog(signal);

    // First paint from the one-shot endpoint, then the 1 s stream; without a stream (an older
    // server), poll; without live statistics at all, list the volumes alone.
    let haveStats = true;
    try {
      update(await Api.get('/stats/volumes', signal));
    } catch (e) {
      if (!(e instanceof Api.ApiError) || e.status !== 404) throw e;
      haveStats = false;
      note.textContent = 'live statistics are not available on this server';
      update(await fallbackList(signal));
    }
    if (!haveStats) return;
    Api.stream('/stats/stream', signal, (name, data) => {
      if (name === 'volumes') update(data);
    }, setLive, () => poll(signal));

    async function poll(sig) {
      while (!sig.aborted) {
        await Api.sleep(POLL_MS, sig);
        if (sig.aborted) return;
        try {
          update(await Api.get('/stats/volumes', sig));
          setLive(true);
        } catch (e) {
          if (e instanceof Api.Unauthorized) return;
          setLive(false);
        }
      }
    }

    // Space, reduction and hosts of every export, now and every SPACE_POLL_MS.
    async function readCatalog(sig) {
      while (!sig.aborted) {
        try {
          const [vols, snaps] = await Promise.all([Api.get('/volumes', sig), Api.get('/snapshots', sig)]);
          catalog = new Map(vols.concat(snaps).map((v) => [v.name, v]));
          for (const r of order) fillCatalog(r);
          window.weft.volumes.catalogReads += 1;
          applySort(true);
        } catch (e) {
          if (e instanceof Api.Unauthorized || sig.aborted) return;
        }
        try {
          showGroups(await Api.get('/groups', sig));
        } catch (e) {
          // A server without consistency groups (404): the section stays hidden.
          if (e instanceof Api.Unauthorized || sig.aborted) return;
        }
        await Api.sleep(SPACE_POLL_MS, sig);
      }
    }

    // Consistency groups (GET /groups): one row each, with its members, the space over them,
    // its origin and its group snapshots (each GROUP@SNAP with its member snapshots).
    function showGroups(groups) {
      const section = root.querySelector('#vl-groups');
      const body = root.querySelector('#vl-groups-table tbody');
      section.hidden = groups.length === 0;
      body.replaceChildren(...groups.map((g) => Dom.el('tr', { 'data-group': g.name },
        Dom.el('td', { text: g.name }),
        Dom.el('td', { text: g.members.map((m) => m.volume).join(', ') }),
        Dom.el('td', { class: 'num', text: Fmt.bytes(g.space.mapped_bytes) }),
        Dom.el('td', { text: g.origin || '–' }),
        Dom.el('td', {
          text: g.snapshots.length ? g.snapshots.map((s) => s.name).join(', ') : '–',
          title: g.snapshots.map((s) => s.name + ': ' + s.members.join(', ')).join('\n'),
        }))));
      window.weft.volumes.groups = groups.map((g) => g.name);
    }

    function fillCatalog(r) {
      const v = catalog.get(r.name);
      if (!v) return;
      const space = v.space || {};
      const reduction = v.family && v.family.reduction ? v.family.reduction.ratio : null;
      r.allocated = space.mapped_bytes || 0;
      r.reduction = reduction || 0;
      Dom.setText(r.cells.allocated, Fmt.bytes(r.allocated));
      Dom.setText(r.cells.reduction, Fmt.ratio(reduction));
      const hosts = (v.hosts || []).map((h) => h.host + ' (LUN ' + h.lun + ')');
      Dom.setText(r.cells.hosts, hosts.length ? hosts.join(', ') : '–');
      r.cells.hosts.title = hosts.length ? 'mapped to ' + hosts.join(', ') : 'mapped to no host';
    }

    function update(data) {
      const cluster = data.volumes.some((v) => v.shard !== undefined && v.shard !== null);
      for (const th of root.querySelectorAll('#vl-table th.in-cluster')) th.hidden = !cluster;
      if (data.cnodes) {
        const silent = data.cnodes.filter((c) => !c.answered);
        Dom.setText(note, silent.map((c) => 'c.node ' + c.id + ' gave no answer of its own ('
          + (c.error || 'no answer') + '): the I/O that came in through it is missing').join('; '));
      }
      const seen = new Set();
      let added = false;
      for (const v of data.volumes) {
        seen.add(v.name);
        let r = rows.get(v.name);
        if (!r) {
          r = makeRow(v);
          rows.set(v.name, r);
          order.push(r);
          added = true;
        }
        fillRow(r, v);
      }
      let removed = false;
      for (const [name, r] of rows) {
        if (!seen.has(name)) {
          r.tr.remove();
          visible.unobserve(r.tr);
          rows.delete(name);
          removed = true;
        }
      }
      if (removed) order = order.filter((r) => rows.has(r.name));
      if (added) applyFilter();
      applySort(added);
      // One scale for every sparkline: the busiest export's peak over the minute.
      let peak = 1;
      for (const r of order) for (const x of r.sparkValues || []) if (x > peak) peak = x;
      if (peak !== sparkMax) {
        sparkMax = peak;
        for (const r of order) {
          r.sparkDirty = true;
          if (r.onScreen) drawSpark(r);
        }
      }
      Dom.setText(sparkMaxLabel, '(scale 0–' + Fmt.si(sparkMax) + ')');
      const volumes = order.filter((r) => !r.readOnly).length;
      Dom.setText(count, Fmt.count(volumes, 'volume') + ', ' + Fmt.count(order.length - volumes, 'snapshot'));
      window.weft.volumes.updates += 1;
      window.weft.volumes.time_ms = data.time_ms;
    }

    function makeRow(v) {
      const r = {
        name: v.name,
        readOnly: !!v.read_only,
        spark: Dom.el('canvas', { class: 'spark' }),
        cells: {},
        sparkDirty: true,
        onScreen: false,
      };
      const link = Dom.el('a', { href: '#/volume/' + encodeURIComponent(v.name), text: v.name });
      const nameCell = Dom.el('td', { class: 'name' }, link);
      if (r.readOnly) nameCell.append(' ', Dom.el('span', { class: 'tag small', text: 'snapshot' }));
      for (const k of ['size', 'allocated', 'reduction', 'iops', 'mbps', 'p99', 'iopsgb', 'shard']) {
        r.cells[k] = Dom.el('td', { class: 'num' });
      }
      r.cells.owner = Dom.el('td');
      r.cells.owner.hidden = r.cells.shard.hidden = v.shard === undefined || v.shard === null;
      r.cells.hosts = Dom.el('td', { class: 'hosts' });
      r.allocated = 0;
      r.reduction = 0;
      r.tr = Dom.el('tr', { 'data-name': v.name },
        nameCell, r.cells.size, r.cells.allocated, r.cells.reduction, r.cells.hosts,
        Dom.el('td', { class: 'sparkcell' }, r.spark),
        r.cells.iops, r.cells.mbps, r.cells.p99, r.cells.iopsgb, r.cells.owner, r.cells.shard);
      r.tr.weftRow = r;
      r.tr.addEventListener('click', (ev) => {
        if (ev.target.tagName !== 'A') location.hash = '#/volume/' + encodeURIComponent(v.name);
      });
      tbody.append(r.tr);
      visible.observe(r.tr);
      fillCatalog(r);
      return r;
    }

    function fillRow(r, v) {
      const read = v.read || {};
      const write = v.write || {};
      r.size = v.size_bytes || 0;
      r.iops = (read.iops || 0) + (write.iops || 0);
      r.mbps = ((read.bytes_per_s || 0) + (write.bytes_per_s || 0)) / 1e6;
      r.p99 = Math.max(read.p99_us || 0, write.p99_us || 0);
      r.iopsgb = v.iops_per_gb || 0;
      r.sparkValues = v.spark_iops || [];
      r.sparkDirty = true;
      r.tr.dataset.iops = r.iops.toFixed(1);
      Dom.setText(r.cells.size, Fmt.bytes(r.size));
      Dom.setText(r.cells.iops, Fmt.si(r.iops));
      Dom.setText(r.cells.mbps, Fmt.si(r.mbps));
      Dom.setText(r.cells.p99, Fmt.micros(read.p99_us) + ' / ' + Fmt.micros(write.p99_us));
      Dom.setText(r.cells.iopsgb, Fmt.si(r.iopsgb));
      r.owner = v.owner || '';
      r.shard = v.shard === undefined || v.shard === null ? -1 : v.shard;
      r.cells.owner.hidden = r.cells.shard.hidden = r.shard < 0;
      Dom.setText(r.cells.owner, v.owner ? v.owner + (v.owner_unreachable ? ' (no answer)' : '') : '–');
      Dom.setText(r.cells.shard, r.shard < 0 ? '–' : String(r.shard));
      if (v.owner_unreachable) {
        // Its owner's front ends' share is unknown: no number rather than a low one.
        for (const k of ['iops', 'mbps', 'p99', 'iopsgb']) Dom.setText(r.cells[k], '?');
      }
      r.tr.classList.toggle('busy', r.iops > 0);
      if (r.onScreen) drawSpark(r);
    }

    function drawSpark(r) {
      Dom.sparkline(r.spark, r.sparkValues, SPARK_COLOUR, SPARK_SECONDS, sparkMax);
      r.sparkDirty = false;
    }

    function applySort(force) {
      const s = SORTS[sort.col] ? sort : { col: 'name', desc: false };
      const key = SORTS[s.col].key;
      const sign = s.desc ? -1 : 1;
      const sorted = order.slice().sort((a, b) => {
        const ka = key(a);
        const kb = key(b);
        if (ka < kb) return -sign;
        if (ka > kb) return sign;
        return a.name < b.name ? -1 : a.name > b.name ? 1 : 0;
      });
      for (const th of root.querySelectorAll('#vl-table th[data-sort]')) {
        th.classList.toggle('sorted', th.dataset.sort === s.col);
        th.classList.toggle('desc', th.dataset.sort === s.col && s.desc);
      }
      const same = !force && sorted.length === order.length && sorted.every((r, i) => r === order[i]);
      order = sorted;
      if (same) return;
      // Move only the rows that are out of place (appending a row that is already last is a
      // no-op in effect, but still a DOM mutation: skip it).
      let prev = null;
      for (const r of order) {
        const want = prev ? prev.nextSibling : tbody.firstChild;
        if (want !== r.tr) tbody.insertBefore(r.tr, want);
        prev = r.tr;
      }
    }

    function applyFilter() {
      const text = filter.value.trim().toLowerCase();
      const snaps = showSnapshots.checked;
      for (const r of order) {
        r.tr.hidden = (text && !r.name.toLowerCase().includes(text)) || (!snaps && r.readOnly);
      }
    }
  }

  function loadSort() {
    try {
      const s = JSON.parse(sessionStorage.getItem('weft.volumeSort'));
      if (s && SORTS[s.col]) return s;
    } catch (_) { /* default */ }
    return { col: 'name', desc: false };
  }

  // Without /stats/volumes: the volumes and snapshots, with no rates.
  async function fallbackList(signal) {
    const [vols, snaps] = await Promise.all([Api.get('/volumes', signal), Api.get('/snapshots', signal)]);
    const zero = { iops: 0, bytes_per_s: 0, p50_us: 0, p99_us: 0, max_us: 0 };
    const row = (v, ro) => ({
      name: v.name, size_bytes: v.size_bytes, read_only: ro, read: zero, write: zero,
      iops_per_gb: 0, spark_iops: [],
    });
    return {
      time_ms: Date.now(),
      volumes: vols.map((v) => row(v, false)).concat(snaps.map((s) => row(s, true))),
    };
  }

  return { template, mount };
})();
