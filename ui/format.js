// Number formatting and small DOM helpers shared by the pages.
'use strict';

const Fmt = (() => {
  // 1234 -> "1.23k", 50000 -> "50k", 0.5 -> "0.5".
  function si(v) {
    if (v === null || v === undefined || !isFinite(v)) return '–';
    const a = Math.abs(v);
    if (a >= 1e9) return trim(v / 1e9) + 'G';
    if (a >= 1e6) return trim(v / 1e6) + 'M';
    if (a >= 1e3) return trim(v / 1e3) + 'k';
    return trim(v);
  }

  function trim(v) {
    const a = Math.abs(v);
    const s = a >= 100 ? v.toFixed(0) : a >= 10 ? v.toFixed(1) : v.toFixed(2);
    return s.includes('.') ? s.replace(/\.?0+$/, '') : s;
  }

  // Bytes in binary units: "1.5 GiB".
  function bytes(v) {
    if (v === null || v === undefined) return '–';
    const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB', 'PiB'];
    let i = 0;
    let x = v;
    while (Math.abs(x) >= 1024 && i < units.length - 1) {
      x /= 1024;
      i += 1;
    }
    return trim(x) + ' ' + units[i];
  }

  // Microseconds: "850 µs", "1.2 ms", "2.5 s".
  function micros(us) {
    if (!us) return '–';
    if (us >= 1e6) return trim(us / 1e6) + ' s';
    if (us >= 1e3) return trim(us / 1e3) + ' ms';
    return trim(us) + ' µs';
  }

  // A heat-map bucket bound: "≤100 µs", "+inf".
  function bound(us) {
    return us >= 1e300 ? '+inf' : '≤' + micros(us);
  }

  function mbps(bytesPerS) {
    return si(bytesPerS / 1e6);
  }

  function ratio(r) {
    return r ? r.toFixed(2) + '×' : '–';
  }

  function seconds(s) {
    if (s === null || s === undefined) return '–';
    const parts = [];
    if (s >= 3600) parts.push(Math.floor(s / 3600) + 'h');
    if (s % 3600 >= 60) parts.push(Math.floor((s % 3600) / 60) + 'm');
    if (s % 60 || parts.length === 0) parts.push(Math.round(s % 60) + 's');
    return parts.join(' ');
  }

  // Every time the UI prints is UTC and says so, as the CLI does (a bare local time is
  // ambiguous in a team spread over zones): `11:42:27 UTC` for a time of day (ms since the
  // epoch), `2026-11-27 11:42:27 UTC` for a moment (seconds since the epoch).
  function pad(n) {
    return String(n).padStart(2, '0');
  }

  function clock(d) {
    return pad(d.getUTCHours()) + ':' + pad(d.getUTCMinutes()) + ':' + pad(d.getUTCSeconds());
  }

  function timeOfDay(ms) {
    return ms === null || ms === undefined ? '–' : clock(new Date(ms)) + ' UTC';
  }

  function moment(unixS) {
    if (!unixS) return '–';
    const d = new Date(unixS * 1000);
    return d.getUTCFullYear() + '-' + pad(d.getUTCMonth() + 1) + '-' + pad(d.getUTCDate()) + ' ' +
      clock(d) + ' UTC';
  }

  // An axis tick: the time of day alone (the axis is labelled UTC).
  function tick(unixS) {
    return clock(new Date(unixS * 1000));
  }

  // `100G`, `512M`, `1.5T`, `10GiB`, or bytes: the CLI's sizes (powers of 1024); 0 if not one.
  function parseSize(text) {
    const m = /^\s*(\d+(?:\.\d+)?)\s*([kmgtpe]?)(?:i?b)?\s*$/i.exec(text || '');
    if (!m) return 0;
    const shift = { '': 0, k: 10, m: 20, g: 30, t: 40, p: 50, e: 60 }[m[2].toLowerCase()];
    return Math.round(parseFloat(m[1]) * 2 ** shift);
  }

  // 1, "snapshot" -> "1 snapshot"; 3 -> "3 snapshots".
  function count(n, noun) {
    return n + ' ' + noun + (n === 1 ? '' : 's');
  }

  return { si, bytes, micros, bound, mbps, ratio, seconds, timeOfDay, moment, tick, parseSize, count };
})();

const Dom = (() => {
  // An element with text content (never innerHTML: names come from users).
  function el(tag, attrs, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === 'class') e.className = v;
      else if (k === 'text') e.textContent = v;
      else if (k.startsWith('data-')) e.setAttribute(k, v);
      else e[k] = v;
    }
    for (const c of children) if (c !== null && c !== undefined) e.append(c);
    return e;
  }

  // A description list from [label, value] pairs.
  function fillKv(dl, pairs) {
    dl.replaceChildren();
    for (const [k, v] of pairs) dl.append(el('dt', { text: k }), el('dd', { text: v }));
  }

  // Sets textContent only when it changes (no layout work for an unchanged cell).
  function setText(node, text) {
    if (node.textContent !== text) node.textContent = text;
  }

  // Sizes a canvas's backing store to its CSS box and the device pixel ratio; returns the 2d
  // context scaled to CSS pixels, with the box's width and height.
  function canvas2d(canvas) {
    const dpr = window.devicePixelRatio || 1;
    const w = canvas.clientWidth || canvas.width;
    const h = canvas.clientHeight || canvas.height;
    if (canvas.width !== Math.round(w * dpr) || canvas.height !== Math.round(h * dpr)) {
      canvas.width = Math.round(w * dpr);
      canvas.height = Math.round(h * dpr);
    }
    const ctx = canvas.getContext('2d');
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    return { ctx, w, h };
  }

  // A sparkline of the last `slots` values (oldest first; missing older ones count as 0)
  // filling the canvas, scaled to `scaleMax` when given (one scale for every row of a list, so
  // a quiet volume looks quiet), else to its own maximum.
  function sparkline(canvas, given, colour, slots, scaleMax) {
    const { ctx, w, h } = canvas2d(canvas);
    ctx.clearRect(0, 0, w, h);
    const have = (given || []).slice(-slots);
    const values = new Array(Math.max(2, slots - have.length)).fill(0).concat(have).slice(-Math.max(2, slots));
    let max = Math.max(1, scaleMax || 0);
    if (!scaleMax) for (const v of values) if (v > max) max = v;
    const dx = w / (values.length - 1);
    ctx.beginPath();
    ctx.moveTo(0, h);
    const y = (v) => h - 1 - (Math.min(v, max) / max) * (h - 2);
    for (let i = 0; i < values.length; i++) ctx.lineTo(i * dx, y(values[i]));
    ctx.lineTo(w, h);
    ctx.closePath();
    ctx.fillStyle = colour + '33';
    ctx.fill();
    ctx.beginPath();
    for (let i = 0; i < values.length; i++) {
      if (i === 0) ctx.moveTo(0, y(values[i]));
      else ctx.lineTo(i * dx, y(values[i]));
    }
    ctx.strokeStyle = colour;
    ctx.lineWidth = 1.25;
    ctx.stroke();
  }

  return { el, fillKv, setText, canvas2d, sparkline };
})();
