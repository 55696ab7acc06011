// app.js: the notebook page. One WebSocket on /v2/code/ws carries the
// executions and the watch of the attached session; REST carries the rest
// (info, sessions, restart, the file plane). A token given as ?token=T in
// the page's URL goes on REST as "Authorization: Bearer T"; the WebSocket
// carries a single-use ticket from POST /tickets instead (ticketURL).
'use strict';

(function () {
  const { OutputArea } = window.AiodOutputs;
  const params = new URLSearchParams(location.search);
  const token = params.get('token') || '';
  const $ = (id) => document.getElementById(id);
  const LANGS = { python: 'Python', javascript: 'JavaScript' };

  const state = {
    session: '',
    watching: '',            // the session id the server confirmed a watch on
    cells: [],               // Cell, in page order (watched cells included)
    pending: new Map(),      // execution ref -> Cell waiting for its result
    watchedCells: new Map(), // msg_id of another caller's execution -> Cell
    watchedBusy: new Set(),  // msg_ids the watched session reports busy
    refs: 0,
    info: null,
  };

  function el(tag, cls, text) {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined) e.textContent = text;
    return e;
  }

  function toast(text, bad) {
    const t = el('div', 'toast' + (bad ? ' bad' : ''), text);
    $('toasts').append(t);
    setTimeout(() => t.remove(), bad ? 7000 : 3500);
  }

  // ---- REST ----

  function authHeaders(extra) {
    const h = Object.assign({}, extra);
    if (token) h.Authorization = 'Bearer ' + token;
    return h;
  }

  // request sends a REST call and returns the parsed JSON, or throws an
  // Error carrying the daemon's message and the HTTP status.
  async function request(method, path, body) {
    const opt = { method, headers: authHeaders(), cache: 'no-store' };
    if (body instanceof FormData) opt.body = body;
    else if (body !== undefined) {
      opt.headers['Content-Type'] = 'application/json';
      opt.body = JSON.stringify(body);
    }
    const r = await fetch(path, opt);
    let j = null;
    try { j = await r.json(); } catch (_) { /* not JSON: reported below */ }
    if (!r.ok || (j && j.success === false)) {
      const e = new Error((j && j.message) || method + ' ' + path + ': HTTP ' + r.status);
      e.status = r.status;
      throw e;
    }
    return j;
  }

  async function api(method, path, body) {
    return (await request(method, path, body)).data;
  }

  async function fetchBlob(path) {
    const r = await fetch(path, { headers: authHeaders(), cache: 'no-store' });
    if (!r.ok) {
      let msg = 'HTTP ' + r.status;
      try { msg = (await r.json()).message || msg; } catch (_) { /* keep the status */ }
      throw new Error(msg);
    }
    return r.blob();
  }

  const q = (v) => encodeURIComponent(v);

  // ---- the status light ----

  function updateLight() {
    const light = $('light');
    let s = 'idle';
    let text = 'idle';
    if (!sock.open) {
      s = 'disconnected';
      text = sock.retryIn ? 'disconnected · retry in ' + Math.ceil(sock.retryIn / 1000) + ' s' : 'disconnected';
    } else if (state.pending.size || state.watchedBusy.size) {
      s = 'busy';
      text = 'busy';
    }
    light.dataset.state = s;
    $('light-text').textContent = text;
  }

  // ticketURL is the WebSocket URL for path with a fresh single-use ticket
  // from POST /tickets (asked for with the page's token, when it has one),
  // so the long-lived token never travels in a WebSocket URL.
  async function ticketURL(path) {
    const { ticket } = await request('POST', 'tickets');
    const u = new URL(path, location.href);
    u.protocol = u.protocol === 'https:' ? 'wss:' : 'ws:';
    u.search = '?ticket=' + q(ticket);
    u.hash = '';
    return u.href;
  }

  // ---- the WebSocket, reconnected with exponential backoff ----

  const sock = {
    ws: null,
    open: false,
    backoff: 500,
    retryIn: 0,
    timer: null,

    connect() {
      clearTimeout(this.timer);
      ticketURL('v2/code/ws').then((href) => this.attach(new WebSocket(href)), (e) => {
        if (e.status) toast('Cannot open the WebSocket: ' + e.message, true);
        this.schedule();
      });
    },

    attach(ws) {
      this.ws = ws;
      ws.onopen = () => {
        this.open = true;
        this.backoff = 500;
        this.retryIn = 0;
        updateLight();
        if (state.session) sendWatch(state.session, true);
      };
      ws.onmessage = (e) => {
        let m;
        try { m = JSON.parse(e.data); } catch (_) { return; }
        onMessage(m);
      };
      ws.onclose = (e) => {
        if (this.ws !== ws) return;
        this.ws = null;
        const was = this.open;
        this.open = false;
        state.watching = '';
        state.watchedBusy.clear();
        showWatch();
        orphanPending();
        if (was && e.code !== 1000) toast('Connection lost (' + (e.reason || 'code ' + e.code) + '); reconnecting.', true);
        this.schedule();
      };
    },

    schedule() {
      const delay = Math.round(this.backoff * (0.8 + Math.random() * 0.4));
      this.backoff = Math.min(this.backoff * 2, 15000);
      this.retryIn = delay;
      updateLight();
      this.timer = setTimeout(() => { this.retryIn = 0; updateLight(); this.connect(); }, delay);
    },

    send(msg) {
      if (!this.ws || !this.open) return false;
      this.ws.send(JSON.stringify(msg));
      return true;
    },
  };

  // orphanPending ends the cells whose results went to a socket that is
  // gone. Their code goes on in the session; once the page is back and
  // watching, the rest of their output shows as a watched cell.
  function orphanPending() {
    for (const cell of state.pending.values()) {
      cell.area.notice('The connection dropped while this cell ran. The code goes on in the session; ' +
        'its remaining output appears below, as live output, once the page reconnects.');
      cell.setState('done');
      cell.setCount('?');
      cell.settle(false);
    }
    state.pending.clear();
    updateLight();
  }

  function nextRef() {
    state.refs += 1;
    return 'c' + state.refs;
  }

  // watchRefs maps a watch request's ref to its session id.
  const watchRefs = new Map();

  function sendWatch(id, quiet) {
    const ref = nextRef();
    watchRefs.set(ref, { id, quiet });
    sock.send({ type: 'watch', id: ref, session_id: id });
  }

  function onMessage(m) {
    const cell = m.id != null ? state.pending.get(m.id) : undefined;
    if (m.session_id != null && !cell) return onWatched(m);
    switch (m.type) {
      case 'output':
        if (cell) cell.area.add(m.output);
        return;
      case 'result':
        if (!cell) return;
        state.pending.delete(m.id);
        cell.finish(m);
        updateLight();
        if (state.watching !== state.session) sendWatch(state.session, true);
        refreshSessions();
        return;
      case 'ok':
        if (watchRefs.has(m.id)) {
          state.watching = watchRefs.get(m.id).id;
          watchRefs.delete(m.id);
          showWatch();
        } else if (m.request === 'interrupt') {
          toast('Interrupt sent.');
        }
        return;
      case 'error': {
        const w = watchRefs.get(m.id);
        watchRefs.delete(m.id);
        if (cell) {
          state.pending.delete(m.id);
          cell.area.notice(m.message || 'error');
          cell.setState('error');
          cell.setCount(' ');
          cell.settle(false);
          updateLight();
        } else if (w) {
          if (!(w.quiet && m.status === 404)) {
            toast(m.status === 404 ? 'Session "' + w.id + '" is not running yet: it starts with the first cell you run.' : m.message, m.status !== 404);
          }
        } else {
          toast(m.message || 'error', true);
        }
        return;
      }
    }
  }

  // onWatched handles what the watched session reports about executions of
  // other callers (REST, another page, a notebook on the kernels API).
  function onWatched(m) {
    if (m.session_id !== state.session) return;
    if (m.type === 'status') {
      if (m.state === 'busy') state.watchedBusy.add(m.id == null ? '' : m.id);
      else if (m.state === 'idle') {
        if (m.id == null) state.watchedBusy.clear();
        else state.watchedBusy.delete(m.id);
      }
      updateLight();
      return;
    }
    if (m.id == null) return;
    let cell = state.watchedCells.get(m.id);
    if (!cell) {
      cell = new Cell({ watched: true });
      state.watchedCells.set(m.id, cell);
      appendCell(cell);
    }
    if (m.type === 'output') cell.area.add(m.output);
    else if (m.type === 'result') {
      state.watchedBusy.delete(m.id);
      state.watchedCells.delete(m.id);
      cell.finish(m);
      updateLight();
    }
  }

  function showWatch() {
    const b = $('watch-badge');
    b.hidden = !state.watching || state.watching !== state.session;
    b.textContent = 'watching ' + state.watching;
    b.title = 'What other callers run in session ' + state.watching + ' shows up here live, marked in violet.';
  }

  // ---- cells ----

  class Cell {
    constructor(opts) {
      opts = opts || {};
      this.watched = !!opts.watched;
      this.root = el('div', 'cell' + (this.watched ? ' watched' : ''));
      this.root.dataset.state = this.watched ? 'running' : 'idle';
      this.count = el('div', 'count', this.watched ? '[*]' : '[ ]');
      const head = el('div', 'cell-head');
      this.outputs = el('div', 'outputs');
      this.area = new OutputArea(this.outputs);
      if (this.watched) {
        this.lang = el('span', 'lang-tag', '');
        head.append(el('span', 'badge', 'live · another caller · session ' + state.session), this.lang, el('span', 'grow'));
        this.code = el('pre', 'code', '(running: the code shows when it finishes)');
        this.root.append(this.count, head, this.code, this.outputs);
        return;
      }
      this.langSel = el('select', 'lang');
      this.langSel.setAttribute('aria-label', 'Language');
      for (const [v, name] of Object.entries(LANGS)) {
        const o = el('option', '', name);
        o.value = v;
        this.langSel.append(o);
      }
      this.langSel.value = opts.language || 'python';
      const run = el('button', 'run', '▶ Run');
      run.title = 'Run this cell (Shift+Enter)';
      run.onclick = () => this.run();
      const del = el('button', 'delete', '✕');
      del.title = 'Delete this cell';
      del.setAttribute('aria-label', 'Delete cell');
      del.onclick = () => removeCell(this);
      head.append(this.langSel, run, el('span', 'grow'), del);
      this.code = el('textarea', 'code');
      this.code.spellcheck = false;
      this.code.setAttribute('aria-label', 'Code');
      this.code.value = opts.code || '';
      this.code.addEventListener('input', () => this.grow());
      this.code.addEventListener('keydown', (e) => this.key(e));
      this.root.append(this.count, head, this.code, this.outputs);
    }

    get language() { return this.langSel ? this.langSel.value : ''; }

    grow() {
      this.code.style.height = 'auto';
      this.code.style.height = this.code.scrollHeight + 2 + 'px';
    }

    key(e) {
      if (e.key === 'Enter' && (e.shiftKey || e.ctrlKey || e.metaKey)) {
        e.preventDefault();
        this.run();
        if (e.shiftKey) focusNext(this);
      } else if (e.key === 'Tab' && !e.shiftKey) {
        e.preventDefault();
        this.code.setRangeText('    ', this.code.selectionStart, this.code.selectionEnd, 'end');
        this.grow();
      }
    }

    setCount(n) {
      this.count.textContent = '[' + (n == null ? ' ' : n) + ']';
    }

    setState(s) {
      this.root.dataset.state = s;
    }

    // run sends the cell; the returned promise settles with true when it
    // ran without error.
    run() {
      if (this.watched) return Promise.resolve(false);
      if (this.root.dataset.state === 'running') {
        toast('This cell is still running; interrupt it first.');
        return Promise.resolve(false);
      }
      if (!state.session) newSession();
      const ref = nextRef();
      const msg = { type: 'execute', id: ref, language: this.language, code: this.code.value, session_id: state.session };
      if (state.info && state.info.max_timeout) msg.timeout = state.info.max_timeout;
      if (!sock.send(msg)) {
        toast('Not connected; the page is reconnecting. Run the cell again once the light is green.', true);
        return Promise.resolve(false);
      }
      this.area.reset();
      this.setCount('*');
      this.setState('running');
      state.pending.set(ref, this);
      updateLight();
      return new Promise((resolve) => { this.settle = (ok) => { this.settle = null; resolve(ok); }; });
    }

    // finish shows an execution's result message.
    finish(m) {
      const d = m.data || {};
      if (this.watched) {
        this.code.textContent = d.code != null ? d.code : '';
        this.lang.textContent = LANGS[d.language] || d.language || '';
      }
      if (this.area.sawUpdate && Array.isArray(d.outputs)) this.area.replaceWith(d.outputs);
      this.setCount(d.execution_count != null ? d.execution_count : ' ');
      if (d.truncated) this.area.notice('Output truncated: ' + (m.message || 'the output budget was reached') + '.');
      else if (d.fresh_runtime) this.area.notice(m.message, 'info');
      else if (!m.success && !(d.status === 'error' && this.area.sawError)) this.area.notice(m.message || d.status || 'failed');
      const ok = !!m.success;
      this.setState(ok ? 'done' : 'error');
      if (this.settle) this.settle(ok);
    }
  }

  function appendCell(cell, after) {
    const i = after ? state.cells.indexOf(after) : -1;
    if (i >= 0) {
      state.cells.splice(i + 1, 0, cell);
      after.root.after(cell.root);
    } else {
      state.cells.push(cell);
      $('cells').append(cell.root);
    }
    if (!cell.watched) cell.grow();
    return cell;
  }

  function addCell(language, code, after) {
    const c = appendCell(new Cell({ language, code }), after);
    c.code.focus();
    return c;
  }

  function removeCell(cell) {
    state.cells = state.cells.filter((c) => c !== cell);
    cell.root.remove();
  }

  function focusNext(cell) {
    const i = state.cells.indexOf(cell);
    const next = state.cells.slice(i + 1).find((c) => !c.watched);
    if (next) next.code.focus();
    else addCell(cell.language, '', cell);
  }

  async function runAll() {
    for (const c of state.cells.slice()) {
      if (c.watched || !c.code.value.trim()) continue;
      if (!(await c.run())) {
        toast('Run all stopped at a cell that failed.', true);
        return;
      }
    }
  }

  // ---- sessions ----

  function randomId() {
    const a = new Uint8Array(4);
    crypto.getRandomValues(a);
    return 'nb-' + Array.from(a, (b) => b.toString(16).padStart(2, '0')).join('');
  }

  function setSession(id) {
    if (state.watching && state.watching !== id) {
      sock.send({ type: 'unwatch', id: nextRef(), session_id: state.watching });
      state.watching = '';
    }
    state.session = id;
    state.watchedBusy.clear();
    $('session-id').value = id;
    const u = new URL(location.href);
    u.searchParams.set('session', id);
    history.replaceState(null, '', u.href);
    showWatch();
    updateLight();
  }

  function newSession() {
    setSession(randomId());
  }

  function attach(id) {
    id = (id || '').trim();
    if (!id) return;
    setSession(id);
    sendWatch(id, false);
  }

  async function refreshSessions() {
    try {
      const d = await api('GET', 'v2/code/sessions');
      const sel = $('session-list');
      const keep = sel.value;
      const byId = new Map();
      for (const s of d.sessions || []) {
        const e = byId.get(s.session_id) || [];
        e.push(s);
        byId.set(s.session_id, e);
      }
      const opts = [new Option(byId.size ? 'running sessions (' + byId.size + ')…' : 'no running sessions', '')];
      for (const [id, list] of byId) {
        const desc = list.map((s) => s.language + (s.busy ? ', busy' : '')).join(' + ');
        opts.push(new Option(id + ' — ' + desc, id));
      }
      sel.replaceChildren(...opts);
      if (byId.has(keep)) sel.value = keep;
    } catch (e) {
      toast('Listing sessions failed: ' + e.message, true);
    }
  }

  function interrupt() {
    if (!state.session) return;
    if (!sock.send({ type: 'interrupt', id: nextRef(), session_id: state.session })) toast('Not connected.', true);
  }

  // restart restarts the session's kernels through the Jupyter kernels API,
  // which lists a REST session's kernel with its session_id. A session with
  // no kernel (a Node.js or native Python REPL) is ended instead; its next
  // run starts a fresh runtime.
  async function restart() {
    const id = state.session;
    try {
      const kernels = (await request('GET', 'api/kernels')) || [];
      const mine = kernels.filter((k) => k.session_id === id);
      for (const k of mine) await request('POST', 'api/kernels/' + q(k.id) + '/restart');
      if (mine.length) {
        toast('Restarted the kernel of session ' + id + '.');
      } else {
        await api('DELETE', 'v2/code/sessions/' + q(id));
        state.watching = '';
        showWatch();
        toast('Ended session ' + id + '; the next run starts a fresh runtime.');
      }
      for (const c of state.cells) if (!c.watched && c.root.dataset.state !== 'running') c.setCount(' ');
    } catch (e) {
      toast(e.status === 404 ? 'Session ' + id + ' is not running: nothing to restart.' : 'Restart failed: ' + e.message, e.status !== 404);
    }
  }

  // ---- header ----

  function bytes(n) {
    if (n >= 1 << 20) return (n / (1 << 20)).toFixed(n % (1 << 20) ? 1 : 0) + ' MiB';
    if (n >= 1 << 10) return (n / (1 << 10)).toFixed(0) + ' KiB';
    return n + ' B';
  }

  async function loadInfo() {
    const box = $('info');
    try {
      const d = await api('GET', 'v2/code/info');
      state.info = d;
      const parts = [['backend', d.backend + (d.remote ? ' (remote)' : '')]];
      for (const l of d.languages || []) {
        parts.push([LANGS[l.language] || l.language, l.available ? (l.version || '') + ' (' + (l.backend || l.runtime) + ')' : 'not available']);
      }
      parts.push(['timeout', d.default_timeout + ' s (cells ' + d.max_timeout + ' s)']);
      parts.push(['output', bytes(d.output_budget_bytes) + '/run']);
      parts.push(['body', bytes(d.max_body_bytes)]);
      parts.push(['idle', d.kernel_idle_seconds + ' s']);
      box.replaceChildren();
      parts.forEach(([k, v], i) => {
        if (i) box.append(' · ');
        box.append(el('span', 'k', k + ' '), v);
      });
      box.title = box.textContent;
    } catch (e) {
      box.textContent = 'info unavailable: ' + e.message;
    }
  }

  // ---- files ----

  const IMAGE_TYPES = { png: 'image/png', jpg: 'image/jpeg', jpeg: 'image/jpeg', gif: 'image/gif', webp: 'image/webp', svg: 'image/svg+xml' };
  let previewURL = '';

  function ext(name) {
    const i = name.lastIndexOf('.');
    return i < 0 ? '' : name.slice(i + 1).toLowerCase();
  }

  function parentOf(p) {
    const t = p.replace(/\/+$/, '');
    const i = t.lastIndexOf('/');
    return i <= 0 ? '/' : t.slice(0, i);
  }

  function fileStatus(text, bad) {
    const s = $('fs-status');
    s.textContent = text;
    s.style.color = bad ? 'var(--bad)' : '';
  }

  async function listDir(path) {
    path = (path || '/').trim() || '/';
    $('fs-path').value = path;
    const ul = $('fs-list');
    try {
      const d = await api('GET', 'v2/fs/list?path=' + q(path));
      const items = [];
      if (path !== '/') {
        const up = el('li', 'dir');
        const n = el('span', 'name', '..');
        n.onclick = () => listDir(parentOf(path));
        up.append(n);
        items.push(up);
      }
      for (const f of d.files || []) {
        const li = el('li', f.is_dir ? 'dir' : 'file');
        li.dataset.name = f.name;
        const n = el('span', 'name', f.name + (f.is_dir ? '/' : ''));
        n.title = f.path;
        li.append(n);
        if (f.is_dir) {
          n.onclick = () => listDir(f.path);
        } else {
          li.append(el('span', 'size', bytes(f.size)));
          if (IMAGE_TYPES[ext(f.name)]) {
            const v = el('button', 'view', 'view');
            v.title = 'Show ' + f.path;
            v.onclick = () => preview(f.path, f.name);
            li.append(v);
          }
          const dl = el('button', 'download', '⬇');
          dl.title = 'Download ' + f.path;
          dl.setAttribute('aria-label', 'Download ' + f.name);
          dl.onclick = () => download(f.path, f.name);
          li.append(dl);
        }
        items.push(li);
      }
      ul.replaceChildren(...items);
      fileStatus((d.files || []).length + ' entries in ' + path);
    } catch (e) {
      ul.replaceChildren();
      fileStatus(e.message, true);
    }
  }

  async function preview(path, name) {
    try {
      const blob = await fetchBlob('v2/fs/download?path=' + q(path));
      if (previewURL) URL.revokeObjectURL(previewURL);
      previewURL = URL.createObjectURL(new Blob([blob], { type: IMAGE_TYPES[ext(name)] || 'application/octet-stream' }));
      $('fs-preview-img').src = previewURL;
      $('fs-preview-img').alt = path;
      $('fs-preview-name').textContent = path;
      $('fs-preview').hidden = false;
    } catch (e) {
      fileStatus('Cannot show ' + path + ': ' + e.message, true);
    }
  }

  async function download(path, name) {
    try {
      const blob = await fetchBlob('v2/fs/download?path=' + q(path));
      const url = URL.createObjectURL(blob);
      const a = el('a');
      a.href = url;
      a.download = name;
      document.body.append(a);
      a.click();
      a.remove();
      setTimeout(() => URL.revokeObjectURL(url), 10000);
    } catch (e) {
      fileStatus('Cannot download ' + path + ': ' + e.message, true);
    }
  }

  async function upload() {
    const input = $('fs-file');
    const file = input.files && input.files[0];
    if (!file) {
      fileStatus('Choose a file first.', true);
      return;
    }
    const dir = $('fs-path').value.trim() || '/';
    const form = new FormData();
    form.append('file', file, file.name);
    form.append('path', dir.endsWith('/') ? dir : dir + '/');
    try {
      const d = await api('POST', 'v2/fs/upload', form);
      input.value = '';
      await listDir(dir);
      fileStatus('Uploaded ' + d.path + ' (' + bytes(d.size) + ').');
    } catch (e) {
      fileStatus('Upload failed: ' + e.message, true);
    }
  }

  // ---- wiring ----

  function init() {
    $('add-python').onclick = () => addCell('python');
    $('add-javascript').onclick = () => addCell('javascript');
    $('run-all').onclick = runAll;
    $('interrupt').onclick = interrupt;
    $('restart').onclick = restart;
    $('new-session').onclick = () => { newSession(); toast('New session ' + state.session + ': it starts with the first cell you run.'); };
    $('attach').onclick = () => attach($('session-id').value);
    $('session-id').addEventListener('keydown', (e) => { if (e.key === 'Enter') attach($('session-id').value); });
    $('session-list').onchange = (e) => { if (e.target.value) attach(e.target.value); };
    $('sessions-refresh').onclick = refreshSessions;
    $('fs-form').onsubmit = (e) => { e.preventDefault(); listDir($('fs-path').value); };
    $('fs-upload').onclick = upload;

    const sid = params.get('session');
    if (sid) setSession(sid);
    else newSession();
    addCell('python');
    updateLight();
    sock.connect();
    loadInfo();
    refreshSessions();
    if (params.get('files')) listDir(params.get('files'));
  }

  // A hook for the end-to-end tests and for debugging: the page's state,
  // and a way to drop the socket as a network failure would.
  window.aiod = {
    state,
    dropSocket() { if (sock.ws) sock.ws.close(4000, 'dropped on purpose'); },
  };

  init();
})();
