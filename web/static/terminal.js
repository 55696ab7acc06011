// terminal.js: the page's terminal panel. A shell on a pseudo-terminal
// from the Jupyter terminals API (POST /api/terminals), shown with
// xterm.js (window.AiodTerm, web/static/vendor/terminal.js, loaded the
// first time the panel opens, so a page that never opens it does not pay
// for it) and spoken to
// over terminado's WebSocket (/terminals/websocket/NAME): ["stdin", text]
// and ["set_size", rows, cols, height, width] out, ["setup", {}],
// ["stdout", text] and ["disconnect", 1] in. The panel sits beside the
// notebook and resizes with it; the terminal's size follows the panel. A
// dropped socket is dialled again and the server replays the recent
// screen; the terminal's name is kept for this tab (sessionStorage), so a
// reload reattaches to the same shell. /#terminal opens the panel.
'use strict';

(function () {
  const $ = (id) => document.getElementById(id);
  const token = new URLSearchParams(location.search).get('token') || '';
  const KEY = 'aiod-terminal';

  const t = {
    term: null,
    fit: null,
    ws: null,
    name: '',
    open: false,
    backoff: 500,
    timer: null,
    ended: false,
  };

  function headers(json) {
    const h = {};
    if (json) h['Content-Type'] = 'application/json';
    if (token) h.Authorization = 'Bearer ' + token;
    return h;
  }

  async function call(method, path, body) {
    const r = await fetch(path, { method, headers: headers(body !== undefined), cache: 'no-store',
      body: body === undefined ? undefined : JSON.stringify(body) });
    let j = null;
    try { j = await r.json(); } catch (_) { /* 204 or not JSON */ }
    if (!r.ok) throw new Error((j && j.message) || method + ' ' + path + ': HTTP ' + r.status);
    return j;
  }

  function status(text) {
    $('term-status').textContent = text;
  }

  // ensureTerminal returns the name of this tab's terminal, starting one
  // when there is none (or the one remembered has gone).
  async function ensureTerminal() {
    const known = t.name || sessionStorage.getItem(KEY) || '';
    if (known) {
      try {
        await call('GET', 'api/terminals/' + encodeURIComponent(known));
        return known;
      } catch (_) { /* gone: start another */ }
    }
    const m = await call('POST', 'api/terminals', {});
    sessionStorage.setItem(KEY, m.name);
    return m.name;
  }

  async function socketURL(name) {
    const { ticket } = (await call('POST', 'tickets'));
    const u = new URL('terminals/websocket/' + encodeURIComponent(name), location.href);
    u.protocol = u.protocol === 'https:' ? 'wss:' : 'ws:';
    u.search = '?ticket=' + encodeURIComponent(ticket);
    u.hash = '';
    return u.href;
  }

  function send(msg) {
    if (t.ws && t.ws.readyState === WebSocket.OPEN) t.ws.send(JSON.stringify(msg));
  }

  function resize() {
    if (!t.term || !t.open) return;
    try { t.fit.fit(); } catch (_) { return; }
    const box = $('term-screen');
    send(['set_size', t.term.rows, t.term.cols, box.clientHeight, box.clientWidth]);
  }

  async function connect() {
    clearTimeout(t.timer);
    if (!t.open) return;
    try {
      t.name = await ensureTerminal();
      $('term-name').textContent = 'terminal ' + t.name;
      const ws = new WebSocket(await socketURL(t.name));
      t.ws = ws;
      t.ended = false;
      ws.onmessage = (e) => {
        let m;
        try { m = JSON.parse(e.data); } catch (_) { return; }
        if (m[0] === 'setup') {
          t.term.reset(); // the recent screen follows: show it once
          t.backoff = 500;
          status('connected');
          resize();
        } else if (m[0] === 'stdout') {
          t.term.write(m[1]);
        } else if (m[0] === 'disconnect') {
          t.ended = true;
          sessionStorage.removeItem(KEY);
          t.name = '';
          status('the shell ended · press a key for a new one');
        }
      };
      ws.onclose = () => {
        if (t.ws !== ws || !t.open || t.ended) return;
        status('disconnected · reconnecting');
        schedule();
      };
    } catch (e) {
      status('cannot open the terminal: ' + e.message);
      schedule();
    }
  }

  function schedule() {
    clearTimeout(t.timer);
    t.timer = setTimeout(connect, t.backoff);
    t.backoff = Math.min(t.backoff * 2, 10000);
  }

  // loadXterm adds the xterm.js bundle to the page once.
  let loading = null;
  function loadXterm() {
    if (window.AiodTerm) return Promise.resolve();
    if (!loading) {
      loading = new Promise((resolve, reject) => {
        const s = document.createElement('script');
        s.src = 'static/vendor/terminal.js';
        s.onload = () => resolve();
        s.onerror = () => { loading = null; reject(new Error('cannot load static/vendor/terminal.js')); };
        document.head.appendChild(s);
      });
    }
    return loading;
  }

  async function show(on) {
    t.open = on;
    $('terminal').hidden = !on;
    document.querySelector('main').classList.toggle('with-terminal', on);
    $('terminal-toggle').setAttribute('aria-pressed', String(on));
    if (!on) {
      clearTimeout(t.timer);
      if (t.ws) { const ws = t.ws; t.ws = null; ws.close(1000); }
      if (location.hash === '#terminal') history.replaceState(null, '', location.pathname + location.search);
      return;
    }
    if (!t.term) {
      status('loading');
      try {
        await loadXterm();
      } catch (e) {
        status(e.message);
        return;
      }
      if (!t.open || t.term) return;
      const { Terminal, FitAddon, style } = window.AiodTerm;
      style();
      t.term = new Terminal({ cursorBlink: true, fontSize: 13, scrollback: 5000, convertEol: false,
        fontFamily: 'ui-monospace, SFMono-Regular, Menlo, Consolas, monospace' });
      t.fit = new FitAddon();
      t.term.loadAddon(t.fit);
      t.term.open($('term-screen'));
      t.term.onData((d) => {
        if (t.ended) { t.ended = false; connect(); return; }
        send(['stdin', d]);
      });
      new ResizeObserver(() => resize()).observe($('term-screen'));
    }
    status('connecting');
    connect().then(() => { resize(); t.term.focus(); });
  }

  function init() {
    $('terminal-toggle').addEventListener('click', () => show(!t.open));
    $('term-close').addEventListener('click', () => show(false));
    $('term-kill').addEventListener('click', async () => {
      const name = t.name;
      show(false);
      sessionStorage.removeItem(KEY);
      t.name = '';
      if (name) await call('DELETE', 'api/terminals/' + encodeURIComponent(name)).catch(() => {});
    });
    window.addEventListener('resize', resize);
    if (location.hash === '#terminal') show(true);
    window.addEventListener('hashchange', () => { if (location.hash === '#terminal' && !t.open) show(true); });
  }

  window.AiodTerminal = { state: t, show };
  if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', init);
  else init();
})();
