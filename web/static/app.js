// app.js: the notebook page. One WebSocket on /v2/code/ws carries the
// executions and the watch of the attached session; REST carries the rest
// (info, sessions, restart, the file plane). A token given as ?token=T in
// the page's URL goes on REST as "Authorization: Bearer T"; the WebSocket
// carries a single-use ticket from POST /tickets instead (socketURL).
//
// Every run has an execution id the page chooses (execution_id on the
// execute message), kept with the cell. When the socket drops, or the page
// reloads, a cell whose run has not answered is re-attached with a resume
// message: after a drop from the last output seq it saw, after a reload
// from the start (its outputs are replaced by the full replay, then live,
// then the result). The watch of the session leaves those executions out,
// so no output shows twice.
//
// The notebook (cells and outputs) is kept in localStorage under the
// session id (notebook.js) and restored when the page opens that session
// again; it goes out and comes in as .ipynb. Cells have an edit mode (the
// editor has focus, editor.js) and a command mode (Esc: the cell has focus,
// and single keys act on cells; "?" lists them).
'use strict';

(function () {
  const { OutputArea } = window.AiodOutputs;
  const { Editor } = window.AiodEditor;
  const NB = window.AiodNotebook;
  const { markdownBlock } = window.AiodMarkup;
  const params = new URLSearchParams(location.search);
  const token = params.get('token') || '';
  const $ = (id) => document.getElementById(id);
  const LANGS = { python: 'Python', javascript: 'JavaScript' };
  const TYPES = { python: 'Python', javascript: 'JavaScript', markdown: 'Markdown' };

  const state = {
    session: '',
    watching: '',            // the session id the server confirmed a watch on
    cells: [],               // Cell, in page order (watched cells included)
    pending: new Map(),      // message ref -> Cell waiting for its result (execute or resume)
    ownExec: new Set(),      // execution ids this page started or resumed: the watch leaves them out
    watchedCells: new Map(), // msg_id of another caller's execution -> Cell
    watchedBusy: new Set(),  // msg_ids the watched session reports busy
    refs: 0,
    info: null,
    active: null,            // the selected Cell
    mode: 'command',         // 'edit' (an editor has focus) or 'command'
    name: '',                // the notebook's file name, once opened or downloaded
    deleted: null,           // { cell, index }: the last cell dd deleted, for z
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

  // ---- the WebSocket, reconnected with exponential backoff ----

  // socketURL resolves to the WebSocket's address: /v2/code/ws on this
  // host with a fresh single-use ticket from POST /tickets (asked for with
  // the page's token, when it has one), so the long-lived token never
  // travels in a WebSocket URL. It is the one place that builds it.
  async function socketURL() {
    const { ticket } = await request('POST', 'tickets');
    const u = new URL('v2/code/ws', location.href);
    u.protocol = u.protocol === 'https:' ? 'wss:' : 'ws:';
    u.search = '?ticket=' + q(ticket);
    u.hash = '';
    return u.href;
  }

  const sock = {
    ws: null,
    open: false,
    backoff: 500,
    retryIn: 0,
    timer: null,
    attempt: 0,

    connect() {
      clearTimeout(this.timer);
      const attempt = ++this.attempt;
      Promise.resolve().then(socketURL).then((href) => {
        if (attempt === this.attempt) this.dial(href);
      }, (e) => {
        if (attempt !== this.attempt) return;
        if (e.status) toast('Cannot open the WebSocket: ' + e.message, true);
        this.schedule();
      });
    },

    dial(href) {
      const ws = new WebSocket(href);
      this.ws = ws;
      ws.onopen = () => {
        this.open = true;
        this.backoff = 500;
        this.retryIn = 0;
        updateLight();
        resumeDetached();
        if (state.session) sendWatch(state.session, true);
        if (fsLive.path) watchFolder(fsLive.path);
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
        fsLive.ref = ''; // the socket's watchers end with it
        showWatch();
        detachPending();
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

  // detachPending is called when the socket is gone: the cells whose
  // results went to it wait for the next socket, which resumes their
  // executions from the last output each saw (resumeDetached). The code
  // goes on in the session meanwhile.
  function detachPending() {
    for (const cell of state.pending.values()) cell.resume = { fresh: !!(cell.resume && cell.resume.fresh) };
    state.pending.clear();
    updateLight();
  }

  // resumeDetached sends a resume for every cell waiting to re-attach.
  function resumeDetached() {
    for (const c of state.cells) if (c.resume && !c.resume.sent) sendResume(c);
  }

  function sendResume(cell) {
    if (!sock.open) return;
    const ref = nextRef();
    const after = cell.resume.fresh ? 0 : cell.lastSeq;
    cell.resume.sent = true;
    state.pending.set(ref, cell);
    sock.send({ type: 'resume', id: ref, execution_id: cell.execId, after });
    updateLight();
  }

  function ownExecution(id) {
    if (!id || state.ownExec.has(id)) return;
    state.ownExec.add(id);
    if (state.ownExec.size > 4096) state.ownExec.delete(state.ownExec.values().next().value);
  }

  function newExecutionId() {
    const a = new Uint8Array(9);
    crypto.getRandomValues(a);
    return 'nb-' + Array.from(a, (b) => b.toString(16).padStart(2, '0')).join('');
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
    if (m.id != null && m.id === fsLive.ref) return onFolderEvent(m);
    const cell = m.id != null ? state.pending.get(m.id) : undefined;
    if (m.session_id != null && !cell) return onWatched(m);
    switch (m.type) {
      case 'accepted':
        if (cell) cell.accepted(m);
        return;
      case 'output':
        if (cell) cell.output(m);
        return;
      case 'result':
        if (!cell) return;
        state.pending.delete(m.id);
        cell.resume = null;
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
          if (cell.resume) cell.resumeFailed(m);
          else cell.area.notice(m.message || 'error');
          cell.setState('error');
          cell.setCount(' ');
          if (cell.settle) cell.settle(false);
          scheduleSave();
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
    if (m.execution_id && state.ownExec.has(m.execution_id)) return; // a cell of this page follows it
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
    // opts: { type: 'code'|'markdown'|'raw', language, source, outputs,
    // execution_count, id, metadata } or { watched: true }.
    constructor(opts) {
      opts = opts || {};
      this.watched = !!opts.watched;
      this.id = opts.id || NB.newId();
      this.metadata = opts.metadata || {};
      this.attachments = opts.attachments; // a markdown cell's images, from a notebook file
      this.execCount = null;
      const kept0 = this.metadata.aiod;
      this.execId = kept0 && typeof kept0.execution_id === 'string' ? kept0.execution_id : ''; // its last run
      this.lastSeq = 0;  // the last output seq shown of that run
      this.resume = null; // { fresh, sent }: waiting to re-attach to the run (sendResume)
      this.resumeNote = null; // the notice shown while it re-attaches
      this.root = el('div', 'cell' + (this.watched ? ' watched' : ''));
      this.root.tabIndex = -1;
      this.root.dataset.state = this.watched ? 'running' : 'idle';
      this.count = el('div', 'count', this.watched ? '[*]' : '[ ]');
      const head = el('div', 'cell-head');
      this.outputs = el('div', 'outputs');
      this.area = new OutputArea(this.outputs, scheduleSave);
      if (this.watched) {
        this.type = 'code';
        this.language = '';
        this.lang = el('span', 'lang-tag', '');
        head.append(el('span', 'badge', 'live · another caller · session ' + state.session), this.lang, el('span', 'grow'));
        this.code = el('pre', 'code', '(running: the code shows when it finishes)');
        this.root.append(this.count, head, this.code, this.outputs);
        return;
      }
      this.type = opts.type === 'markdown' || opts.type === 'raw' ? opts.type : 'code';
      this.language = LANGS[opts.language] ? opts.language : 'python';
      this.langSel = el('select', 'lang');
      this.langSel.setAttribute('aria-label', 'Cell type');
      const kinds = Object.assign({}, TYPES, this.type === 'raw' ? { raw: 'Raw' } : {});
      for (const [v, name] of Object.entries(kinds)) {
        const o = el('option', '', name);
        o.value = v;
        this.langSel.append(o);
      }
      this.langSel.value = this.kind;
      this.langSel.onchange = () => {
        const v = this.langSel.value;
        this.setType(v === 'markdown' || v === 'raw' ? v : 'code', v);
      };
      const run = el('button', 'run', '▶ Run');
      run.title = 'Run this cell (Shift+Enter)';
      run.onclick = () => this.run();
      const del = el('button', 'delete', '✕');
      del.title = 'Delete this cell (dd in command mode)';
      del.setAttribute('aria-label', 'Delete cell');
      del.onclick = () => removeCell(this);
      head.append(this.langSel, run, el('span', 'grow'), del);
      this.editorBox = el('div', 'code editor');
      this.editor = new Editor(this.editorBox, {
        doc: opts.source || '',
        language: this.editorLanguage,
        label: 'Cell source',
        onChange: scheduleSave,
        onFocus: () => { select(this); setMode('edit'); },
        canAsk: () => this.type === 'code',
        complete: (code, cursor) => complete(this.sessionFor(), code, cursor, this.language),
        inspect: (code, cursor) => inspect(this.sessionFor(), code, cursor, this.language),
        keys: {
          runNext: () => runAndAdvance(this, false),
          runInPlace: () => { this.run(); if (this.type !== 'code') commandMode(this); },
          runInsert: () => runAndAdvance(this, true),
          command: () => commandMode(this),
        },
      });
      this.view = el('div', 'md-view');
      this.view.title = 'Double-click (or Enter in command mode) to edit';
      this.view.hidden = true;
      this.view.ondblclick = () => editMode(this);
      this.root.append(this.count, head, this.editorBox, this.view, this.outputs);
      this.root.dataset.type = this.type;
      if (Array.isArray(opts.outputs) && opts.outputs.length) {
        this.area.replaceWith(opts.outputs);
        this.root.dataset.state = this.area.sawError ? 'error' : 'done';
      }
      if (opts.execution_count != null) {
        this.setCount(opts.execution_count);
        if (this.root.dataset.state === 'idle') this.root.dataset.state = 'done';
      }
      const kept = this.metadata.aiod;
      if (kept && kept.outputs_dropped) {
        this.area.notice('The outputs of this cell were not kept in the browser: at ' + bytes(kept.outputs_dropped) +
          ' they were over the page\'s storage limit. Run the cell again to see them.');
      }
      if (this.type === 'markdown' && this.source.trim()) this.renderMarkdown();
    }

    // kind is what the cell's picker shows: the language of a code cell,
    // or markdown / raw.
    get kind() { return this.type === 'code' ? this.language : this.type; }

    get editorLanguage() { return this.type === 'code' ? this.language : this.type === 'markdown' ? 'markdown' : ''; }

    get source() { return this.watched ? this.code.textContent : this.editor.value; }

    // sessionFor is the session a completion asks: the page's (a new one
    // if it has none yet).
    sessionFor() {
      if (!state.session) newSession();
      return state.session;
    }

    set source(v) { this.editor.value = v; }

    // setType makes the cell a code cell in language, or a markdown or raw
    // cell (m and y in command mode, or the picker).
    setType(type, language) {
      if (this.watched) return;
      if (this.root.dataset.state === 'running') {
        toast('This cell is still running.');
        this.langSel.value = this.kind;
        return;
      }
      if (type === 'code') this.language = LANGS[language] ? language : this.language;
      if (type !== this.type) {
        this.type = type;
        this.root.dataset.type = type;
        if (type !== 'code') {
          this.area.reset();
          this.setCount(null);
          this.setState('idle');
        }
        if (type !== 'markdown') this.showEditor();
      }
      this.langSel.value = this.kind;
      this.editor.setLanguage(this.editorLanguage);
      scheduleSave();
    }

    renderMarkdown() {
      const src = this.source;
      this.view.replaceChildren(src.trim() ? markdownBlock(src, '', this.attachments) : el('div', 'muted', 'Empty markdown cell: double-click to write in it.'));
      this.view.hidden = false;
      this.editorBox.hidden = true;
      this.root.dataset.rendered = 'true';
    }

    showEditor() {
      this.view.hidden = true;
      this.editorBox.hidden = false;
      delete this.root.dataset.rendered;
    }

    setCount(n) {
      this.execCount = Number.isInteger(n) ? n : null;
      this.count.textContent = '[' + (n == null ? ' ' : n) + ']';
    }

    setState(s) {
      this.root.dataset.state = s;
    }

    // run sends a code cell (markdown renders; raw does nothing); the
    // returned promise settles with true when it ran without error.
    run() {
      if (this.watched) return Promise.resolve(false);
      if (this.type === 'markdown') {
        this.renderMarkdown();
        scheduleSave();
        return Promise.resolve(true);
      }
      if (this.type === 'raw') return Promise.resolve(true);
      if (this.root.dataset.state === 'running') {
        toast('This cell is still running; interrupt it first.');
        return Promise.resolve(false);
      }
      if (this.metadata.aiod) delete this.metadata.aiod.outputs_dropped;
      if (!state.session) newSession();
      const ref = nextRef();
      const execId = newExecutionId();
      const msg = { type: 'execute', id: ref, execution_id: execId, language: this.language, code: this.source, session_id: state.session };
      if (state.info && state.info.max_timeout) msg.timeout = state.info.max_timeout;
      ownExecution(execId);
      if (!sock.send(msg)) {
        toast('Not connected; the page is reconnecting. Run the cell again once the light is green.', true);
        return Promise.resolve(false);
      }
      this.execId = execId;
      this.lastSeq = 0;
      this.resume = null;
      this.metadata.aiod = Object.assign({}, this.metadata.aiod, { execution_id: execId });
      this.area.reset();
      this.setCount('*');
      this.setState('running');
      state.pending.set(ref, this);
      updateLight();
      scheduleSave();
      return new Promise((resolve) => { this.settle = (ok) => { this.settle = null; resolve(ok); }; });
    }

    // accepted is the daemon's answer to an execute or a resume. A resume
    // from the start replaces what the cell showed by the replay.
    accepted(m) {
      if (m.execution_id && m.execution_id !== this.execId) {
        this.execId = m.execution_id;
        this.metadata.aiod = Object.assign({}, this.metadata.aiod, { execution_id: m.execution_id });
        ownExecution(m.execution_id);
      }
      if (this.resume && this.resume.fresh) {
        this.area.reset(); // the note "following again" goes too
        this.lastSeq = 0;
      }
      this.resumeNote = null;
      this.resume = null;
      this.setCount(m.state === 'queued' ? '…' : '*');
      this.setState('running');
    }

    // output shows one output of the cell's execution, once: an output the
    // cell already showed (a replay overlapping what it had) is skipped.
    output(m) {
      if (Number.isInteger(m.seq)) {
        if (m.seq <= this.lastSeq) return;
        this.lastSeq = m.seq;
      }
      if (this.execCount === null && this.count.textContent === '[…]') this.setCount('*');
      this.area.add(m.output);
    }

    // resumeFailed says why the cell could not re-attach to its execution:
    // the daemon no longer holds it (410, with when and why), or never had
    // it (404: the run never reached it, or the daemon restarted).
    resumeFailed(m) {
      this.resume = null;
      if (this.resumeNote) this.resumeNote.remove();
      this.resumeNote = null;
      const what = m.status === 410 ? 'The daemon no longer holds this cell\'s run (' + (m.message || 'gone') + ')'
        : m.status === 404 ? 'The daemon does not know this cell\'s run ' + this.execId + ' (it never got there, or the daemon restarted)'
          : 'This cell\'s run could not be followed again: ' + (m.message || 'error');
      this.area.notice(what + '. Above is the output that had arrived; run the cell again to see it all.');
    }

    // finish shows an execution's result message.
    finish(m) {
      const d = m.data || {};
      if (this.watched) {
        this.code.textContent = d.code != null ? d.code : '';
        this.language = d.language || '';
        this.lang.textContent = LANGS[d.language] || d.language || '';
        this.done = true;
      }
      if (this.area.sawUpdate && Array.isArray(d.outputs)) this.area.replaceWith(d.outputs);
      else if (Array.isArray(d.outputs)) this.area.records = d.outputs.map((o) => NB.output(o, false)).filter(Boolean);
      this.setCount(d.execution_count != null ? d.execution_count : ' ');
      if (d.truncated) this.area.notice('Output truncated: ' + (m.message || 'the output budget was reached') + '.');
      else if (d.fresh_runtime) this.area.notice(m.message, 'info');
      else if (!m.success && !(d.status === 'error' && this.area.sawError)) this.area.notice(m.message || d.status || 'failed');
      const ok = !!m.success;
      this.setState(ok ? 'done' : 'error');
      scheduleSave();
      if (this.settle) this.settle(ok);
    }

    // model is the cell for notebook.js; null for a watched cell still
    // running (its code is not known yet).
    model(forFile) {
      if (this.watched) {
        if (!this.done) return null;
        return {
          id: this.id, type: 'code', language: LANGS[this.language] ? this.language : 'python', source: this.source,
          outputs: this.area.records, execution_count: this.execCount, metadata: { aiod: { watched: true } },
        };
      }
      return {
        id: this.id, type: this.type, language: this.language, source: this.source, metadata: this.metadata,
        outputs: this.type === 'code' ? this.area.records : [], execution_count: this.type === 'code' ? this.execCount : null,
        running: !forFile && this.root.dataset.state === 'running',
        attachments: this.type === 'code' ? undefined : this.attachments,
      };
    }
  }

  function appendCell(cell, after, before) {
    const i = after ? state.cells.indexOf(after) : before ? state.cells.indexOf(before) : -1;
    if (after && i >= 0) {
      state.cells.splice(i + 1, 0, cell);
      after.root.after(cell.root);
    } else if (before && i >= 0) {
      state.cells.splice(i, 0, cell);
      before.root.before(cell.root);
    } else {
      state.cells.push(cell);
      $('cells').append(cell.root);
    }
    scheduleSave();
    return cell;
  }

  function addCell(language, code, after) {
    const type = language === 'markdown' ? 'markdown' : 'code';
    const c = appendCell(new Cell({ type, language, source: code }), after);
    editMode(c);
    return c;
  }

  function removeCell(cell) {
    const i = state.cells.indexOf(cell);
    state.cells = state.cells.filter((c) => c !== cell);
    cell.root.remove();
    if (state.active === cell) {
      state.active = null;
      const next = state.cells[Math.min(i, state.cells.length - 1)];
      if (next) select(next);
    }
    scheduleSave();
    return i;
  }

  // ---- selection, command mode and edit mode ----

  function select(cell, scroll) {
    if (state.active && state.active !== cell) state.active.root.classList.remove('selected');
    state.active = cell;
    if (!cell) return;
    cell.root.classList.add('selected');
    if (scroll) cell.root.scrollIntoView({ block: 'nearest' });
  }

  function setMode(m) {
    state.mode = m;
    document.body.dataset.mode = m;
  }

  // commandMode leaves the editor: the cell itself takes the focus, and
  // single keys act on cells (see onCommandKey). A markdown cell renders.
  function commandMode(cell) {
    cell = cell || state.active;
    if (!cell) return;
    select(cell, true);
    setMode('command');
    if (!cell.watched && cell.type === 'markdown' && cell.source.trim()) cell.renderMarkdown();
    cell.root.focus({ preventScroll: true });
  }

  function editMode(cell) {
    if (!cell || cell.watched) return commandMode(cell);
    select(cell, true);
    setMode('edit');
    if (cell.type === 'markdown') cell.showEditor();
    cell.editor.focus();
  }

  // runAndAdvance runs cell and moves on: to the next cell (a new one after
  // the last), or to a new cell right below with insert.
  function runAndAdvance(cell, insert) {
    cell.run();
    const i = state.cells.indexOf(cell);
    const next = insert ? null : state.cells.slice(i + 1).find((c) => !c.watched);
    if (next) editMode(next);
    else addCell(cell.type === 'code' ? cell.language : 'python', '', cell);
  }

  function move(by) {
    const list = state.cells;
    const i = list.indexOf(state.active);
    const j = Math.max(0, Math.min(list.length - 1, (i < 0 ? 0 : i) + by));
    if (list[j]) commandMode(list[j]);
  }

  function insertCell(cell, above) {
    const language = cell && cell.type === 'code' && LANGS[cell.language] ? cell.language : 'python';
    const c = appendCell(new Cell({ type: 'code', language }), above ? null : cell, above ? cell : null);
    commandMode(c);
  }

  let lastD = 0;

  // onCommandKey handles a key pressed while a cell (not its editor) has
  // the focus. The keys are the ones JupyterLab users know; the "?" dialog
  // (index.html) lists them.
  function onCommandKey(e) {
    const cell = state.cells.find((c) => c.root === e.target);
    if (!cell) return;
    select(cell);
    setMode('command');
    const k = e.key;
    const plain = !e.ctrlKey && !e.metaKey && !e.altKey;
    let done = true;
    if (k === 'Enter' && e.shiftKey) runAndAdvance(cell, false);
    else if (k === 'Enter' && (e.ctrlKey || e.metaKey)) { cell.run(); commandMode(cell); }
    else if (k === 'Enter' && e.altKey) runAndAdvance(cell, true);
    else if (k === 'Enter' && plain) editMode(cell);
    else if (!plain) done = false;
    else if (k === 'a') insertCell(cell, true);
    else if (k === 'b') insertCell(cell, false);
    else if (k === 'm') cell.setType('markdown');
    else if (k === 'y') { cell.setType('code'); commandMode(cell); }
    else if (k === 'j' || k === 'ArrowDown') move(1);
    else if (k === 'k' || k === 'ArrowUp') move(-1);
    else if (k === 'd') {
      const now = Date.now();
      if (now - lastD < 800) {
        lastD = 0;
        state.deleted = { cell, index: removeCell(cell) };
        if (state.active) commandMode(state.active);
      } else {
        lastD = now;
      }
    } else if (k === 'z' && state.deleted) {
      const { cell: c, index } = state.deleted;
      state.deleted = null;
      const at = state.cells[index];
      appendCell(c, null, at);
      commandMode(c);
    } else if (k === '?' || k === 'h') openKeys();
    else done = false;
    if (k !== 'd') lastD = 0;
    if (done) e.preventDefault();
  }

  function openKeys() {
    const d = $('keys-dialog');
    if (!d.open) d.showModal();
  }

  async function runAll() {
    for (const c of state.cells.slice()) {
      if (c.watched || (c.type === 'code' && !c.source.trim())) continue;
      if (!(await c.run())) {
        toast('Run all stopped at a cell that failed.', true);
        return;
      }
    }
  }

  // ---- the notebook: localStorage, .ipynb out and in ----

  const store = new NB.Store(window.localStorage);
  let saveTimer = 0;
  let saveFirst = 0;
  let saveWarned = false;

  function models(forFile) {
    return state.cells.map((c) => c.model(forFile)).filter(Boolean);
  }

  function notebookJSON(forFile) {
    const extra = { session: state.session };
    if (state.name) extra.name = state.name;
    return NB.toIpynb(models(forFile), state.info, extra);
  }

  // scheduleSave saves the notebook soon: 400 ms after the last change, and
  // at least every 2 s while outputs stream in.
  function scheduleSave() {
    if (restoring) return;
    const now = Date.now();
    if (!saveTimer) saveFirst = now;
    clearTimeout(saveTimer);
    saveTimer = setTimeout(saveNow, now - saveFirst > 2000 ? 0 : 400);
  }

  function saveNow() {
    clearTimeout(saveTimer);
    saveTimer = 0;
    if (!state.session) return;
    const nb = notebookJSON(false);
    if (nb.cells.every((c) => !c.source.length && !(c.outputs && c.outputs.length))) {
      store.remove(state.session); // nothing worth keeping, and no room taken from older notebooks
      return;
    }
    try {
      const r = store.save(state.session, nb);
      if (r.dropped && !saveWarned) {
        saveWarned = true;
        toast('The browser keeps this notebook without the outputs of ' + r.dropped + ' cell(s): they are over the page\'s storage limit. Download the .ipynb to keep them.', true);
      }
    } catch (e) {
      if (!saveWarned) toast('The notebook cannot be kept in the browser: ' + e.message, true);
      saveWarned = true;
    }
  }

  let restoring = false;

  // showNotebook replaces the page's cells with a notebook's. Nothing runs.
  // With resume (the page's own copy, on load), cells whose run had not
  // answered re-attach to it.
  function showNotebook(nb, resume) {
    const parsed = NB.fromIpynb(nb);
    restoring = true;
    try {
      for (const c of state.cells) c.root.remove();
      state.cells = [];
      state.active = null;
      state.watchedCells.clear();
      for (const m of parsed.cells) {
        const c = appendCell(new Cell(m));
        if (m.running) reattach(c, resume);
      }
    } finally {
      restoring = false;
    }
    if (!state.cells.length) appendCell(new Cell({ type: 'code', language: parsed.language }));
    commandMode(state.cells[0]);
    return parsed;
  }

  // reattach is called for a cell whose run had not answered when the page
  // went away. With its execution id (and the page's own copy of the
  // notebook) it is resumed from the start once the socket is open: still
  // running, or finished and retained with a result the page missed. A
  // cell without one (saved by an older page, or from a file) keeps the
  // output that had arrived and says so.
  function reattach(cell, resume) {
    if (resume && cell.execId) {
      ownExecution(cell.execId);
      cell.resume = { fresh: true };
      cell.setCount('*');
      cell.setState('running');
      if (cell.resumeNote) cell.resumeNote.remove();
      cell.resumeNote = cell.area.notice('The page was reloaded while this cell ran: following its run ' + cell.execId + ' again, from the start…', 'info');
      return;
    }
    cell.setCount(null);
    cell.setState('error');
    cell.area.notice('The page was reloaded while this cell ran: above is the output that had arrived. ' +
      'If the code still runs in session ' + state.session + ', what it prints next shows below as live output.');
  }

  // resumeListed re-attaches the cells whose run the daemon lists as
  // running or queued in the page's session though the page's copy did not
  // say so (the page went away before it could save that).
  function resumeListed(sessions) {
    const ids = new Set();
    for (const s of sessions || []) {
      if (s.session_id !== state.session) continue;
      if (s.executing && s.executing.execution_id) ids.add(s.executing.execution_id);
      for (const q of s.queued || []) if (q.execution_id) ids.add(q.execution_id);
    }
    if (!ids.size) return;
    const following = new Set(state.pending.values());
    for (const c of state.cells) {
      if (c.watched || !c.execId || !ids.has(c.execId) || c.resume || following.has(c)) continue;
      reattach(c, true);
      sendResume(c);
    }
  }

  function downloadNotebook() {
    const nb = notebookJSON(true);
    const name = state.name || (state.session || 'notebook') + '.ipynb';
    const blob = new Blob([JSON.stringify(nb, null, 1) + '\n'], { type: 'application/x-ipynb+json' });
    const url = URL.createObjectURL(blob);
    const a = el('a');
    a.href = url;
    a.download = name;
    document.body.append(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(url), 10000);
  }

  // openNotebook shows a .ipynb file's cells and outputs, in a new session:
  // the notebook on the page before stays saved under its own session id.
  async function openNotebook(file) {
    let nb;
    try {
      nb = JSON.parse(await file.text());
    } catch (e) {
      toast('Cannot open ' + file.name + ': it is not JSON (' + e.message + ').', true);
      return;
    }
    const before = state.session;
    saveNow();
    try {
      NB.fromIpynb(nb); // refuse a bad file before the page changes
    } catch (e) {
      toast('Cannot open ' + file.name + ': ' + e.message + '.', true);
      return;
    }
    newSession();
    state.name = file.name;
    const parsed = showNotebook(nb);
    saveNow();
    const other = parsed.languageName && !/^(python|javascript)$/i.test(parsed.languageName) ? ' Its language is ' + parsed.languageName + ': its code cells open as Python.' : '';
    toast('Opened ' + file.name + ' (' + parsed.cells.length + ' cells; nothing was run) in session ' + state.session + '. ' +
      'The notebook before is kept as session ' + before + '.' + other);
  }

  function restoreSaved() {
    const nb = store.load(state.session);
    if (!nb) return false;
    try {
      state.name = (nb.metadata && nb.metadata.aiod && nb.metadata.aiod.name) || '';
      showNotebook(nb, true);
      return true;
    } catch (e) {
      toast('The notebook saved for session ' + state.session + ' cannot be read: ' + e.message, true);
      return false;
    }
  }

  // ---- completion and inspection (Tab and Shift+Tab, editor.js) ----
  //
  // The session's runtime answers: the kernel's complete_request and
  // inspect_request, Node's REPL completer, native Python's rlcompleter.
  // cursor counts code points. A session running a cell answers when the
  // cell ends; the daemon waits up to 10 s, then answers 504.

  function complete(session, code, cursor, language) {
    return api('POST', 'v2/code/complete', { session_id: session, language: language || 'python', code, cursor_pos: cursor });
  }

  function inspect(session, code, cursor, language) {
    return api('POST', 'v2/code/inspect', { session_id: session, language: language || 'python', code, cursor_pos: cursor, detail_level: 0 });
  }

  // ---- sessions ----

  function randomId() {
    const a = new Uint8Array(4);
    crypto.getRandomValues(a);
    return 'nb-' + Array.from(a, (b) => b.toString(16).padStart(2, '0')).join('');
  }

  function setSession(id) {
    if (state.session && state.session !== id) saveNow();
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
      resumeListed(d.sessions);
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
      scheduleSave();
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

  // The panel follows the folder it shows: a watch_files on the page's
  // socket (one at a time; the last one is dropped), and a change in it
  // lists it again, a moment after the last of a burst.
  const fsLive = { path: '', ref: '', timer: null };

  function watchFolder(path) {
    if (fsLive.ref) sock.send({ type: 'unwatch_files', id: fsLive.ref });
    fsLive.path = path;
    fsLive.ref = '';
    if (!sock.open) return; // the socket's open watches it again
    fsLive.ref = nextRef();
    sock.send({ type: 'watch_files', id: fsLive.ref, path, recursive: false, debounce: 200 });
  }

  function onFolderEvent(m) {
    switch (m.type) {
      case 'watch_started':
        $('files').dataset.live = 'true';
        return;
      case 'file_change':
        clearTimeout(fsLive.timer);
        fsLive.timer = setTimeout(() => listDir(fsLive.path, true), 150);
        return;
      case 'error':
        fsLive.ref = '';
        $('files').dataset.live = 'false';
        fileStatus('Not refreshed live: ' + (m.message || 'the watch failed'), true);
    }
  }

  async function listDir(path, live) {
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
      if (!live && (path !== fsLive.path || !fsLive.ref)) watchFolder(path);
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
    form.append('overwrite', 'true'); // choosing the file here is the user's say-so to replace it
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

  function isNotebookFile(f) {
    return /\.ipynb$/i.test(f.name) || f.type === 'application/x-ipynb+json';
  }

  // Dropping a .ipynb anywhere on the page opens it; other files go to the
  // Files panel's upload (a drop on its file field works as browsers do).
  function wireDrop() {
    const hasFiles = (e) => e.dataTransfer && Array.from(e.dataTransfer.types || []).includes('Files') &&
      !(e.target && e.target.closest && e.target.closest('#fs-file'));
    let depth = 0;
    document.addEventListener('dragenter', (e) => {
      if (!hasFiles(e)) return;
      depth++;
      document.body.classList.add('dropping');
    });
    document.addEventListener('dragleave', () => {
      depth = Math.max(0, depth - 1);
      if (!depth) document.body.classList.remove('dropping');
    });
    document.addEventListener('dragover', (e) => {
      if (!hasFiles(e)) return;
      e.preventDefault();
      e.dataTransfer.dropEffect = 'copy';
    });
    document.addEventListener('drop', (e) => {
      depth = 0;
      document.body.classList.remove('dropping');
      if (!hasFiles(e)) return;
      e.preventDefault();
      const files = Array.from(e.dataTransfer.files || []);
      const nb = files.find(isNotebookFile);
      if (nb) openNotebook(nb);
      else if (files.length) toast('Drop a .ipynb notebook to open it; upload other files with the Files panel.', true);
    });
  }

  function init() {
    $('add-python').onclick = () => addCell('python');
    $('add-javascript').onclick = () => addCell('javascript');
    $('add-markdown').onclick = () => addCell('markdown');
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
    $('nb-download').onclick = downloadNotebook;
    $('nb-open').onclick = () => $('nb-file').click();
    $('nb-file').onchange = (e) => {
      const f = e.target.files && e.target.files[0];
      e.target.value = '';
      if (f) openNotebook(f);
    };
    $('keys-open').onclick = openKeys;
    $('keys-close').onclick = () => $('keys-dialog').close();
    $('keys-dialog').addEventListener('close', () => { if (state.active) commandMode(state.active); });
    const cells = $('cells');
    cells.addEventListener('keydown', onCommandKey);
    cells.addEventListener('click', (e) => {
      const cell = state.cells.find((c) => c.root.contains(e.target));
      if (!cell || e.target.closest('.cm-editor, button, select, a, iframe')) return;
      if (window.getSelection && String(window.getSelection())) {
        select(cell); // keep the text the reader selected
        return;
      }
      commandMode(cell);
    });
    wireDrop();
    addEventListener('pagehide', saveNow);
    document.addEventListener('visibilitychange', () => { if (document.visibilityState === 'hidden') saveNow(); });

    const sid = params.get('session');
    if (sid) setSession(sid);
    else newSession();
    if (!restoreSaved()) addCell('python');
    setMode(state.mode);
    updateLight();
    sock.connect();
    loadInfo();
    refreshSessions();
    if (params.get('files')) listDir(params.get('files'));
    performance.mark('aiod-ready');
  }

  // A hook for the end-to-end tests and for debugging: the page's state,
  // and a way to drop the socket as a network failure would.
  window.aiod = {
    state,
    store,
    dropSocket() { if (sock.ws) sock.ws.close(4000, 'dropped on purpose'); },
    notebook: () => notebookJSON(true),
    complete,
    inspect,
  };

  init();
})();
