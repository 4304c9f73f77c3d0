// What a volume's (or snapshot's) page can do, with the CLI's confirmations: a volume takes a
// snapshot, grows (resize), is renamed, rolled back to one of its snapshots, refreshed to a
// snapshot of its family, or deleted; a snapshot gives a clone or is deleted. Rollback, refresh
// and delete always ask first, with what the CLI's question says (size, own changes, when the
// snapshot was taken); any action that would cut clients off (rename too) names them in the
// question and then sends `force`, as `--force` does. Also the page's table of the clients that
// have the export open (as `weft volume sessions` lists them).
'use strict';

const VolumeActions = (() => {
  // Wires the page's forms; `info` is the export's JSON. Resolves when the choices (the
  // family's snapshots) are filled in.
  async function wire(q, name, info, signal) {
    const isSnapshot = name.includes('@');
    const errorLine = q('#vv-action-error');
    const confirmBox = q('#vv-confirm');
    const sessions = info.sessions || [];
    const snapshots = info.snapshots || [];
    const fail = (e) => { errorLine.textContent = e.message || String(e); };
    let pending = null; // what "yes" does

    // Asks `text`; on yes runs `action` (its errors shown on the page).
    function ask(text, yes, action) {
      errorLine.textContent = '';
      q('#vv-confirm-text').textContent = text;
      q('#vv-confirm-yes').textContent = yes;
      pending = action;
      confirmBox.hidden = false;
      window.weft.volume.asking = text;
    }
    q('#vv-confirm-no').addEventListener('click', () => {
      confirmBox.hidden = true;
      pending = null;
      window.weft.volume.asking = null;
    });
    q('#vv-confirm-yes').addEventListener('click', async () => {
      const action = pending;
      pending = null;
      window.weft.volume.asking = null;
      if (!action) return;
      try {
        await action();
      } catch (e) {
        confirmBox.hidden = true;
        fail(e);
      }
    });
    // ' and disconnect nbd 127.0.0.1:5000 (host db1)' for the clients, or ''.
    const clients = () => (sessions.length
      ? ' This disconnects ' + sessions.map(describe).join(', ') + '.'
      : '');
    const doIt = (what) => (sessions.length ? 'Disconnect and ' + what : what[0].toUpperCase() + what.slice(1));
    const path = (p) => (isSnapshot ? '/snapshots/' : '/volumes/') + encodeURIComponent(name) + p;
    const reload = () => window.dispatchEvent(new HashChangeEvent('hashchange'));

    // Snapshot or clone: the one-name form.
    const newName = q('#vv-new-name');
    newName.placeholder = isSnapshot ? 'clone name' : 'snapshot name';
    q('#vv-make').textContent = isSnapshot ? 'Clone' : 'Take snapshot';
    q('#vv-actions').addEventListener('submit', async (ev) => {
      ev.preventDefault();
      errorLine.textContent = '';
      const n = newName.value.trim();
      if (!n) { errorLine.textContent = 'give a name'; return; }
      try {
        const made = isSnapshot
          ? await Api.send('POST', path('/clones'), { name: n })
          : await Api.send('POST', path('/snapshots'), { name: n });
        location.hash = '#/volume/' + encodeURIComponent(made.name);
      } catch (e) { fail(e); }
    });

    // Delete.
    q('#vv-delete').textContent = isSnapshot ? 'Delete snapshot…' : 'Delete volume…';
    q('#vv-delete').addEventListener('click', () => {
      const parts = ['Delete ' + name + ' (' + Fmt.bytes(info.size_bytes) + ')'];
      if (snapshots.length) parts.push('with its ' + snapshots.length + ' snapshot(s)');
      ask(parts.join(' ') + '?' + clients(), doIt('delete'), async () => {
        const query = [];
        if (!isSnapshot && snapshots.length) query.push('with_snapshots=true');
        if (!isSnapshot && sessions.length) query.push('force=true');
        await Api.send('DELETE', path(query.length ? '?' + query.join('&') : ''));
        location.hash = '#/volumes';
      });
    });

    q('#vv-edit').hidden = isSnapshot;
    if (isSnapshot) {
      window.weft.volume.actionsReady = true;
      return;
    }

    // Resize: grows only, asks nothing (as the CLI), cuts nobody off.
    q('#vv-resize').addEventListener('click', async () => {
      errorLine.textContent = '';
      const size = Fmt.parseSize(q('#vv-size').value);
      if (!size) { errorLine.textContent = 'size: a number with K, M, G or T, e.g. 200G'; return; }
      if (size <= info.size_bytes) {
        errorLine.textContent = 'volumes only grow: ' + name + ' is ' + Fmt.bytes(info.size_bytes);
        return;
      }
      try {
        await Api.send('POST', path('/resize'), { size_bytes: size });
        reload();
      } catch (e) { fail(e); }
    });

    // Rename: asks only when it cuts clients off (the CLI refuses then without --force).
    q('#vv-rename').addEventListener('click', async () => {
      errorLine.textContent = '';
      const to = q('#vv-rename-to').value.trim();
      if (!to) { errorLine.textContent = 'give the new name'; return; }
      const go = async () => {
        const v = await Api.send('POST', path('/rename'), { name: to, force: sessions.length > 0 });
        location.hash = '#/volume/' + encodeURIComponent(v.name);
      };
      if (sessions.length) {
        ask('Rename volume ' + name + ' to ' + to + ' (its snapshots follow)?' + clients(), doIt('rename'), go);
      } else {
        try { await go(); } catch (e) { fail(e); }
      }
    });

    // Rollback (own snapshots) and refresh (any snapshot of the family): the CLI's questions.
    const all = await Api.get('/snapshots', signal);
    const family = all.filter((s) => s.family && info.family && s.family.id === info.family.id);
    const own = family.filter((s) => s.volume === name);
    fillSelect(q('#vv-rollback-to'), own, 'no snapshot of its own');
    fillSelect(q('#vv-refresh-to'), family, 'no snapshot in its family');
    const chosen = (sel, list) => list.find((s) => s.name === q(sel).value);
    q('#vv-rollback').addEventListener('click', () => {
      const s = chosen('#vv-rollback-to', own);
      if (!s) { errorLine.textContent = 'take a snapshot first'; return; }
      ask('Roll back volume ' + name + ' (' + Fmt.bytes(info.size_bytes) + ') to snapshot ' + s.name +
        ' (taken ' + Fmt.moment(s.created_unix_s) + ')? Its writes since then are discarded and its ' +
        'clients disconnected.' + clients(), doIt('roll back'), async () => {
        await Api.send('POST', path('/rollback'), { snapshot: s.name, force: sessions.length > 0 });
        reload();
      });
    });
    q('#vv-refresh').addEventListener('click', () => {
      const s = chosen('#vv-refresh-to', family);
      if (!s) { errorLine.textContent = 'no snapshot to refresh to'; return; }
      const ownBytes = (info.space && info.space.own_bytes) || 0;
      ask('Refresh volume ' + name + ' (' + Fmt.bytes(info.size_bytes) + ', ' + Fmt.bytes(ownBytes) +
        ' of its own changes) to snapshot ' + s.name + ' of ' + (s.volume || '–') + ' (taken ' +
        Fmt.moment(s.created_unix_s) + ')? Its changes are discarded and its clients disconnected.' +
        clients(), doIt('refresh'), async () => {
        await Api.send('POST', path('/refresh'), { snapshot: s.name, force: sessions.length > 0 });
        reload();
      });
    });
    window.weft.volume.actionsReady = true;
  }

  function fillSelect(select, snapshots, none) {
    select.replaceChildren(...(snapshots.length
      ? snapshots.map((s) => Dom.el('option', { value: s.name, text: s.name }))
      : [Dom.el('option', { value: '', text: none })]));
  }

  // `nbd 127.0.0.1:5000 (host db1)`, as the CLI names a client.
  function describe(s) {
    return s.protocol + ' ' + s.client + (s.host ? ' (host ' + s.host + ')' : '');
  }

  // The clients that have the export open.
  function showSessions(table, sessions) {
    const tbody = table.querySelector('tbody');
    if (!sessions.length) {
      tbody.replaceChildren(Dom.el('tr', {}, Dom.el('td', { colSpan: 6, class: 'note', text: 'no client has it open' })));
      return;
    }
    tbody.replaceChildren(...sessions.map((s) => Dom.el('tr', { 'data-client': s.client },
      Dom.el('td', { text: s.protocol }),
      Dom.el('td', { text: s.client }),
      Dom.el('td', { text: s.host || '–' }),
      Dom.el('td', { text: Fmt.moment(s.since_unix_s) }),
      Dom.el('td', { class: 'num', text: String(s.reads) }),
      Dom.el('td', { class: 'num', text: String(s.writes) }))));
  }

  return { wire, showSessions, describe };
})();
