// The management API as the UI uses it: the token (kept in sessionStorage, sent as a bearer
// header with every call), JSON calls, and the statistics streams (fetch + a body reader,
// since EventSource cannot send a header), reconnected after an error.
'use strict';

// What the page exposes for tests and the curious: the page on screen, its data, and every
// error it met (uncaught exceptions, rejected promises, Content-Security-Policy violations).
window.weft = { page: null, errors: [] };

function recordError(what) {
  window.weft.errors.push(String(what));
  console.error(what);
}
window.addEventListener('error', (e) => recordError(e.message));
window.addEventListener('unhandledrejection', (e) => recordError(e.reason && e.reason.stack ? e.reason.stack : e.reason));
document.addEventListener('securitypolicyviolation', (e) => recordError('CSP: ' + e.violatedDirective + ' ' + e.blockedURI));

const Api = (() => {
  const TOKEN_KEY = 'weft.token';
  const RECONNECT_MS = 1000;

  // Thrown after a 401: the app has already gone back to the login page.
  class Unauthorized extends Error {}

  class ApiError extends Error {
    constructor(status, message) {
      super(message);
      this.status = status;
    }
  }

  let onUnauthorized = () => {};

  function token() {
    return sessionStorage.getItem(TOKEN_KEY) || '';
  }

  function setToken(t) {
    if (t) sessionStorage.setItem(TOKEN_KEY, t);
    else sessionStorage.removeItem(TOKEN_KEY);
    // The next answer says the new token's role.
    window.weft.role = null;
    delete document.body.dataset.role;
  }

  function headers(t) {
    return { Authorization: 'Bearer ' + (t === undefined ? token() : t) };
  }

  async function check(response) {
    // The token's role (admin, read-only): a read-only token's viewer sees no actions.
    const role = response.headers.get('x-weft-role');
    if (role && window.weft.role !== role) {
      window.weft.role = role;
      document.body.dataset.role = role;
    }
    if (response.status === 401) {
      setToken('');
      onUnauthorized();
      throw new Unauthorized('the token was refused');
    }
    if (!response.ok) {
      let message = response.statusText;
      try {
        const body = await response.json();
        if (body && body.error) message = body.error;
      } catch (_) { /* not JSON */ }
      throw new ApiError(response.status, message);
    }
    return response;
  }

  // GET /api/v1{path} as JSON.
  async function get(path, signal) {
    const r = await fetch('/api/v1' + path, { headers: headers(), signal });
    return (await check(r)).json();
  }

  // POST (or another method) to /api/v1{path} with a JSON body; the answer's JSON, or null
  // when it has none (204). Errors carry the API's own message (ApiError).
  async function send(method, path, body) {
    const h = headers();
    if (body !== undefined) h['Content-Type'] = 'application/json';
    const r = await fetch('/api/v1' + path, {
      method,
      headers: h,
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    await check(r);
    return r.status === 204 ? null : r.json();
  }

  // Whether `candidate` is accepted, without touching the stored token.
  async function tryToken(candidate) {
    const r = await fetch('/api/v1/stats', { headers: headers(candidate) });
    if (r.status === 401) return false;
    if (!r.ok) throw new ApiError(r.status, r.statusText);
    return true;
  }

  // Reads the server-sent events of GET /api/v1{path} and calls onEvent(name, data) for each,
  // until `signal` aborts; reconnects a second after the stream ends or fails. `onState(up)`
  // tells whether the stream is connected. A 404 (no such stream on this server) calls
  // onMissing() and stops.
  async function stream(path, signal, onEvent, onState, onMissing) {
    while (!signal.aborted) {
      try {
        const r = await check(await fetch('/api/v1' + path, { headers: headers(), signal }));
        onState(true);
        const reader = r.body.pipeThrough(new TextDecoderStream()).getReader();
        let buffer = '';
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          buffer += value.replace(/\r\n?/g, '\n');
          let end;
          while ((end = buffer.indexOf('\n\n')) >= 0) {
            const block = buffer.slice(0, end);
            buffer = buffer.slice(end + 2);
            dispatch(block, onEvent);
          }
        }
      } catch (e) {
        if (e instanceof Unauthorized || signal.aborted) return;
        if (e instanceof ApiError && e.status === 404) {
          onState(false);
          if (onMissing) onMissing();
          return;
        }
      }
      onState(false);
      await sleep(RECONNECT_MS, signal);
    }
  }

  function dispatch(block, onEvent) {
    let name = 'message';
    const data = [];
    for (const line of block.split('\n')) {
      if (line.startsWith(':')) continue;
      const colon = line.indexOf(':');
      const field = colon < 0 ? line : line.slice(0, colon);
      let value = colon < 0 ? '' : line.slice(colon + 1);
      if (value.startsWith(' ')) value = value.slice(1);
      if (field === 'event') name = value;
      else if (field === 'data') data.push(value);
    }
    if (data.length === 0) return;
    let parsed;
    try {
      parsed = JSON.parse(data.join('\n'));
    } catch (_) {
      return;
    }
    try {
      onEvent(name, parsed);
    } catch (e) {
      recordError(e && e.stack ? e.stack : e);
    }
  }

  function sleep(ms, signal) {
    return new Promise((resolve) => {
      const t = setTimeout(resolve, ms);
      if (signal) signal.addEventListener('abort', () => { clearTimeout(t); resolve(); }, { once: true });
    });
  }

  return {
    Unauthorized, ApiError, token, setToken, get, send, tryToken, stream, sleep,
    set onUnauthorized(f) { onUnauthorized = f; },
  };
})();
