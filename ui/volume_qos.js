// A volume's quality of service on its page: the settings in force (limits, burst, minimum
// share, p99 latency target; a class's values under the user's fields) and whether they come
// from a class, the I/Os throttled and the time they waited, the latency controller's cap
// while it holds another volume's target, and the p99 the target is held to (the last 100 ms
// window with enough I/O). Read from /volumes/{name}/qos at once and every 2 s while the page
// is open.
'use strict';

const VolumeQos = (() => {
  const POLL_MS = 2000;

  // One line per setting in force: "IOPS ≤ 2,000 (burst 200)" and the like; none: "no limits".
  function describe(s) {
    const parts = [];
    const n = (v) => Number(v).toLocaleString('en-US');
    const limit = (label, v) => { if (v) parts.push(label + ' ≤ ' + n(v)); };
    limit('IOPS', s.iops_max);
    limit('read IOPS', s.read_iops_max);
    limit('write IOPS', s.write_iops_max);
    if (s.iops_burst) parts.push('IOPS burst ' + n(s.iops_burst));
    const mb = (label, v) => { if (v) parts.push(label + ' ≤ ' + Fmt.mbps(v) + ' MB/s'); };
    mb('throughput', s.bytes_per_s_max);
    mb('read', s.read_bytes_per_s_max);
    mb('write', s.write_bytes_per_s_max);
    if (s.bytes_burst) parts.push('burst ' + Fmt.mbps(s.bytes_burst) + ' MB');
    if (s.iops_min) parts.push('minimum ' + n(s.iops_min) + ' IOPS');
    if (s.latency_target_us) parts.push('p99 target ' + Fmt.micros(s.latency_target_us));
    return parts.length ? parts.join(' · ') : 'no limits';
  }

  // Fill `dl` now and every POLL_MS until `signal` aborts; the last answer is window.weft.volume.qos.
  async function show(dl, name, signal) {
    const path = '/volumes/' + encodeURIComponent(name) + '/qos';
    while (!signal.aborted) {
      try {
        const qos = await Api.get(path, signal);
        if (signal.aborted) return;
        const pairs = [['limits', describe(qos.effective || {})]];
        if (qos.settings && qos.settings.class) pairs.push(['class', qos.settings.class]);
        pairs.push(['throttled', Fmt.count(qos.throttled_ios || 0, 'I/O') + ', waited '
          + (qos.throttled_wait_seconds || 0).toFixed(3) + ' s']);
        if (qos.latency_cap_iops) {
          pairs.push(['capped', Fmt.si(qos.latency_cap_iops) + ' IOPS for another volume\'s target']);
        }
        if (qos.latency_p99_us) pairs.push(['p99 (target\'s measure)', Fmt.micros(qos.latency_p99_us)]);
        Dom.fillKv(dl, pairs);
        dl.dataset.throttledIos = String(qos.throttled_ios || 0);
        if (window.weft.volume) window.weft.volume.qos = qos;
      } catch (e) {
        if (e instanceof Api.Unauthorized || signal.aborted) return;
        // 404: a snapshot, or a volume of another c.node's making: nothing to show.
        dl.replaceChildren();
        return;
      }
      await Api.sleep(POLL_MS, signal);
    }
  }

  return { describe, show };
})();
