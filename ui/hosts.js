// The hosts page: every host with its initiators, NBD addresses and CHAP (never a secret), the
// LUNs mapped to it, and the actions of `weft host create|delete` and `weft volume map|unmap`:
// map an export (volume read-write, snapshot read-only) under the lowest free LUN or a chosen
// one, unmap it after asking (the host's sessions lose the LUN at their next command), and
// delete a host after asking (the API refuses while volumes are mapped to it). A host's
// initiators and CHAP are edited in place (see host_edits.js). Every question goes through
// one confirmation line (#hs-confirm), and every action reloads the hosts.
'use strict';

const HostsPage = (() => {
  const template = 'tpl-hosts';

  async function mount(root, _arg, signal) {
    const q = (sel) => root.querySelector(sel);
    const tbody = q('#hs-table tbody');
    const errorLine = q('#hs-error');
    const confirmBox = q('#hs-confirm');
    let pending = null;
    window.weft.hosts = { names: () => [], luns: () => [], initiators: () => [], chap: () => null, loads: 0 };

    const fail = (e) => { errorLine.textContent = e.message || String(e); };
    // What host_edits.js's cells act through: a question first (`ask`) or not (`act`); either
    // way the hosts are loaded again after the action.
    const edits = {
      ask,
      act: async (action) => {
        try {
          await action();
          await load();
        } catch (e) { fail(e); }
      },
      clearError: () => { errorLine.textContent = ''; },
    };
    q('#hs-confirm-no').addEventListener('click', () => { confirmBox.hidden = true; pending = null; });
    q('#hs-confirm-yes').addEventListener('click', async () => {
      const action = pending;
      pending = null;
      confirmBox.hidden = true;
      if (action) {
        try { await action(); } catch (e) { fail(e); }
      }
    });
    q('#hs-create').addEventListener('submit', async (ev) => {
      ev.preventDefault();
      errorLine.textContent = '';
      const body = { name: q('#hs-new-name').value.trim() };
      const iqn = q('#hs-new-iqn').value.trim();
      const addr = q('#hs-new-nbd').value.trim();
      body.iqns = iqn ? [iqn] : [];
      body.nbd_addresses = addr ? [addr] : [];
      try {
        await Api.send('POST', '/hosts', body);
        for (const id of ['#hs-new-name', '#hs-new-iqn', '#hs-new-nbd']) q(id).value = '';
        await load();
      } catch (e) { fail(e); }
    });

    await load();

    async function load() {
      const [hosts, volumes, snapshots] = await Promise.all([
        Api.get('/hosts', signal), Api.get('/volumes', signal), Api.get('/snapshots', signal),
      ]);
      const exports = volumes.map((v) => v.name).concat(snapshots.map((s) => s.name)).sort();
      tbody.replaceChildren(...hosts.map((h) => row(h, exports)));
      if (!hosts.length) {
        tbody.append(Dom.el('tr', {}, Dom.el('td', { colSpan: 4, class: 'note', text: 'no hosts yet: create one below' })));
      }
      const find = (name) => hosts.find((h) => h.name === name) || {};
      window.weft.hosts = {
        names: () => hosts.map((h) => h.name),
        luns: (name) => (find(name).luns || []).map((l) => [l.lun, l.export]),
        initiators: (name) => find(name).iqns || [],
        chap: (name) => [find(name).chap_user || null, find(name).mutual_chap_user || null],
        loads: window.weft.hosts.loads + 1,
      };
    }

    function row(h, exports) {
      const luns = Dom.el('ul', { class: 'luns' }, ...(h.luns || []).map((l) => Dom.el('li', { 'data-lun': String(l.lun) },
        'LUN ' + l.lun + ' ', Dom.el('a', { href: '#/volume/' + encodeURIComponent(l.export), text: l.export }),
        l.read_only ? ' (read-only) ' : ' ',
        Dom.el('button', {
          type: 'button', class: 'danger unmap', text: 'Unmap…', 'data-export': l.export,
          onclick: () => askUnmap(h.name, l),
        }))));
      const select = Dom.el('select', { class: 'map-export' },
        ...exports.map((e) => Dom.el('option', { value: e, text: e })));
      const lun = Dom.el('input', { class: 'map-lun', placeholder: 'LUN (lowest free)', size: 14 });
      const map = Dom.el('form', { class: 'toolbar actions' }, select, lun,
        Dom.el('button', { type: 'submit', class: 'map', text: 'Map' }));
      map.addEventListener('submit', async (ev) => {
        ev.preventDefault();
        errorLine.textContent = '';
        const body = { export: select.value };
        if (lun.value.trim()) body.lun = Number(lun.value.trim());
        try {
          await Api.send('POST', '/hosts/' + encodeURIComponent(h.name) + '/luns', body);
          await load();
        } catch (e) { fail(e); }
      });
      return Dom.el('tr', { 'data-host': h.name },
        Dom.el('td', { class: 'name' }, Dom.el('span', { text: h.name + ' ' }),
          Dom.el('button', {
            type: 'button', class: 'danger delete-host', text: 'Delete…',
            onclick: () => askDelete(h),
          })),
        HostEdits.initiatorsCell(h, edits),
        HostEdits.chapCell(h, edits),
        Dom.el('td', {}, luns, map));
    }

    // One question on the confirmation line; `yes` names the action, `action` runs on it.
    function ask(text, yes, action) {
      errorLine.textContent = '';
      q('#hs-confirm-text').textContent = text;
      q('#hs-confirm-yes').textContent = yes;
      confirmBox.hidden = false;
      window.weft.hosts.asking = text;
      pending = async () => {
        await action();
        await load();
      };
    }

    function askUnmap(host, l) {
      ask('Unmap ' + l.export + ' (LUN ' + l.lun + ') from host ' + host +
        '? Its sessions lose the LUN at their next command.', 'Unmap',
      () => Api.send('DELETE', '/hosts/' + encodeURIComponent(host) + '/luns/' + encodeURIComponent(l.export)));
    }

    // As `weft host delete`: the definition and its CHAP secrets go, no data.
    function askDelete(h) {
      const luns = (h.luns || []).length;
      ask('Delete host ' + h.name + '? Its definition and CHAP secrets go, no data'
        + (luns ? '; unmap its ' + luns + (luns === 1 ? ' LUN' : ' LUNs') + ' first.' : '.'), 'Delete',
      () => Api.send('DELETE', '/hosts/' + encodeURIComponent(h.name)));
    }
  }

  return { template, mount };
})();
