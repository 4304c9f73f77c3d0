// A host's edits in place, as `weft host add-initiator|remove-initiator|set-chap` make them:
// the hosts page's initiators cell (each initiator with its Remove… button, the NBD addresses
// and TLS names, a form adding an initiator) and its CHAP cell (what the host logs in as,
// never a secret; a form setting new secrets and a Remove CHAP… button). Removing an
// initiator, setting and removing CHAP are asked first; adding an initiator is not (it takes
// nothing away). Secrets go to the API once, in the body of PUT /hosts/{name}/chap, and the
// inputs that held them are rebuilt empty when the page reloads its hosts.
'use strict';

const HostEdits = (() => {
  const path = (h) => '/hosts/' + encodeURIComponent(h.name);

  // `page`: { ask(text, yes, action), act(action), clearError() } from the hosts page; an
  // action is an async function whose errors the page shows.
  function initiatorsCell(h, page) {
    const iqns = Dom.el('ul', { class: 'initiators' }, ...(h.iqns || []).map((iqn) => Dom.el('li', { 'data-iqn': iqn },
      Dom.el('span', { text: iqn + ' ' }),
      Dom.el('button', {
        type: 'button', class: 'danger remove-initiator', text: 'Remove…', 'data-iqn': iqn,
        onclick: () => askRemoveInitiator(h, iqn, page),
      }))));
    const others = (h.nbd_addresses || []).map((a) => 'nbd ' + a).concat((h.tls_names || []).map((n) => 'tls ' + n));
    const input = Dom.el('input', {
      class: 'add-iqn', placeholder: 'initiator name (iqn.…)', spellcheck: false, size: 24, required: true,
    });
    const add = Dom.el('form', { class: 'toolbar actions add-initiator' }, input,
      Dom.el('button', { type: 'submit', class: 'add-initiator', text: 'Add initiator' }));
    add.addEventListener('submit', (ev) => {
      ev.preventDefault();
      page.clearError();
      page.act(() => Api.send('POST', path(h) + '/initiators', { iqn: input.value.trim() }));
    });
    const none = !(h.iqns || []).length && !others.length;
    return Dom.el('td', { class: 'initiators' }, iqns,
      others.length ? Dom.el('div', { class: 'addresses', text: others.join(', ') }) : null,
      none ? Dom.el('div', { class: 'note', text: 'no initiator or address' }) : null,
      add);
  }

  // As `weft host remove-initiator`: its sessions lose their LUNs at once.
  function askRemoveInitiator(h, iqn, page) {
    page.ask('Remove initiator ' + iqn + ' from host ' + h.name +
      '? Its sessions from that initiator lose their LUNs at once.', 'Remove',
    () => Api.send('DELETE', path(h) + '/initiators/' + encodeURIComponent(iqn)));
  }

  function chapText(h) {
    if (!h.chap_user) return 'none';
    return 'user ' + h.chap_user + (h.mutual_chap_user ? ', mutual (target answers as ' + h.mutual_chap_user + ')' : '');
  }

  function chapCell(h, page) {
    // The placeholder is also the field's title: a filled-in field still says what it is.
    const field = (cls, placeholder, type, value) => Dom.el('input', {
      class: cls, placeholder, title: placeholder, ariaLabel: placeholder, type, value: value || '',
      spellcheck: false, size: 18, autocomplete: type === 'password' ? 'new-password' : 'off',
    });
    const user = field('chap-user', 'CHAP user', 'text', h.chap_user);
    const secret = field('chap-secret', 'new secret (12-255)', 'password');
    const mutualSecret = field('chap-mutual-secret', 'mutual secret (optional)', 'password');
    const mutualUser = field('chap-mutual-user', 'mutual user (default: CHAP user)', 'text', h.mutual_chap_user);
    user.required = true;
    secret.required = true;
    const form = Dom.el('form', { class: 'toolbar actions set-chap' }, user, secret, mutualSecret, mutualUser,
      Dom.el('button', { type: 'submit', class: 'set-chap', text: h.chap_user ? 'Change CHAP…' : 'Set CHAP…' }));
    form.addEventListener('submit', (ev) => {
      ev.preventDefault();
      const body = { chap_user: user.value.trim(), chap_secret: secret.value };
      if (mutualSecret.value) {
        body.mutual_chap_secret = mutualSecret.value;
        if (mutualUser.value.trim()) body.mutual_chap_user = mutualUser.value.trim();
      }
      const mutual = body.mutual_chap_secret
        ? ', mutual (target answers as ' + (body.mutual_chap_user || body.chap_user) + ')' : '';
      page.ask((h.chap_user ? 'Change the CHAP secrets of host ' : 'Require CHAP of host ') + h.name +
        ' (user ' + body.chap_user + mutual + ')? Sessions logged in go on; their next login needs the new secret.',
      'Set CHAP', () => Api.send('PUT', path(h) + '/chap', body));
    });
    const remove = h.chap_user ? Dom.el('button', {
      type: 'button', class: 'danger remove-chap', text: 'Remove CHAP…',
      onclick: () => page.ask('Remove CHAP from host ' + h.name +
        '? Its initiators log in without a secret from their next login.', 'Remove CHAP',
      () => Api.send('DELETE', path(h) + '/chap')),
    }) : null;
    return Dom.el('td', { class: 'chap' }, Dom.el('div', { class: 'chap-text', text: chapText(h) + ' ' }, remove), form);
  }

  return { initiatorsCell, chapCell };
})();
