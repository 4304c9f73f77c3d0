// The single page: routes (#/login, #/cluster, #/volumes, #/volume/NAME, #/hosts), the login form, and
// the life of a page (each gets an AbortSignal that ends its streams and timers when the user
// leaves it).
'use strict';

(() => {
  const view = document.getElementById('view');
  const topbar = document.getElementById('topbar');
  const live = document.getElementById('live');
  let current = null; // AbortController of the page on screen

  Api.onUnauthorized = () => {
    sessionStorage.setItem('weft.loginMessage', 'The token was refused: log in again.');
    if (location.hash !== '#/login') location.hash = '#/login';
  };

  document.getElementById('logout').addEventListener('click', () => {
    Api.setToken('');
    location.hash = '#/login';
  });

  window.addEventListener('hashchange', route);
  route();

  function route() {
    const hash = location.hash.replace(/^#\/?/, '');
    const [page, ...rest] = hash.split('/');
    const arg = rest.length ? decodeURIComponent(rest.join('/')) : null;
    if (current) current.abort();
    current = new AbortController();
    const signal = current.signal;
    setLive(false);
    if (!Api.token() || page === 'login') {
      if (page !== 'login') {
        location.hash = '#/login';
        return;
      }
      showLogin();
      return;
    }
    topbar.hidden = false;
    for (const a of topbar.querySelectorAll('[data-nav]')) {
      a.classList.toggle('active', a.dataset.nav === page || (page === 'volume' && a.dataset.nav === 'volumes'));
    }
    const pages = { cluster: ClusterPage, volumes: VolumesPage, volume: VolumePage, hosts: HostsPage };
    const p = pages[page];
    if (!p || (page === 'volume' && !arg)) {
      location.hash = '#/volumes';
      return;
    }
    view.replaceChildren(document.getElementById(p.template).content.cloneNode(true));
    window.weft.page = page;
    document.title = (arg ? arg + ' – ' : '') + 'weft';
    p.mount(view, arg, signal, setLive).catch((e) => {
      if (!(e instanceof Api.Unauthorized) && !signal.aborted) recordError(e && e.stack ? e.stack : e);
    });
  }

  function setLive(up) {
    live.classList.toggle('up', up);
    live.title = up ? 'live statistics: connected' : 'live statistics: not connected';
  }

  function showLogin() {
    topbar.hidden = true;
    window.weft.page = 'login';
    document.title = 'weft – log in';
    view.replaceChildren(document.getElementById('tpl-login').content.cloneNode(true));
    const form = document.getElementById('login-form');
    const input = document.getElementById('login-token');
    const error = document.getElementById('login-error');
    error.textContent = sessionStorage.getItem('weft.loginMessage') || '';
    sessionStorage.removeItem('weft.loginMessage');
    input.focus();
    form.addEventListener('submit', async (ev) => {
      ev.preventDefault();
      const candidate = input.value.trim();
      if (!candidate) {
        error.textContent = 'Paste the token first.';
        return;
      }
      error.textContent = '';
      try {
        if (await Api.tryToken(candidate)) {
          Api.setToken(candidate);
          location.hash = '#/volumes';
        } else {
          error.textContent = 'Wrong token: the server refused it.';
          input.select();
        }
      } catch (e) {
        error.textContent = 'Cannot reach the server: ' + e.message;
      }
    });
  }
})();
