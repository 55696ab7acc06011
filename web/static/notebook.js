// notebook.js: the page's notebook as nbformat 4.5 (.ipynb) and its copy in
// localStorage. No DOM here: the page hands over plain cell models
//
//   { id, type: 'code'|'markdown'|'raw', language: 'python'|'javascript',
//     source, outputs: [nbformat output], execution_count, running }
//
// with multi-line strings as strings; toIpynb writes them as arrays of
// lines, as Jupyter does, and fromIpynb reads either.
//
// Loaded by the page as window.AiodNotebook, and by Node.js tests with require().
'use strict';

(function (root) {
  const LANGS = {
    python: {
      kernelspec: { name: 'python3', display_name: 'Python 3 (ipykernel)', language: 'python' },
      info: { name: 'python', mimetype: 'text/x-python', file_extension: '.py', pygments_lexer: 'ipython3', codemirror_mode: { name: 'ipython', version: 3 }, nbconvert_exporter: 'python' },
    },
    javascript: {
      kernelspec: { name: 'javascript', display_name: 'JavaScript (Node.js)', language: 'javascript' },
      info: { name: 'javascript', mimetype: 'application/javascript', file_extension: '.js', pygments_lexer: 'javascript', codemirror_mode: 'javascript' },
    },
  };

  function text(v) {
    if (Array.isArray(v)) return v.map((x) => String(x)).join('');
    return v == null ? '' : String(v);
  }

  // lines splits s the way nbformat writes multi-line strings: each line
  // keeps its "\n", and "" is [].
  function lines(s) {
    s = text(s);
    const out = [];
    let i = 0;
    while (i < s.length) {
      const j = s.indexOf('\n', i);
      if (j < 0) {
        out.push(s.slice(i));
        break;
      }
      out.push(s.slice(i, j + 1));
      i = j + 1;
    }
    return out;
  }

  function isJSONMime(m) {
    return m === 'application/json' || /\+json$/.test(m);
  }

  function isObject(v) {
    return v !== null && typeof v === 'object' && !Array.isArray(v);
  }

  // bundle normalizes a MIME bundle: JSON types keep their value, the
  // others become strings (or arrays of lines, with asLines).
  function bundle(data, asLines) {
    const out = {};
    if (!isObject(data)) return out;
    for (const m of Object.keys(data)) {
      const v = data[m];
      if (v === undefined) continue;
      if (isJSONMime(m)) out[m] = v;
      else if (asLines) out[m] = /^text\/|\+xml$/.test(m) ? lines(v) : text(v);
      else out[m] = text(v);
    }
    return out;
  }

  function count(v) {
    return Number.isInteger(v) && v >= 0 ? v : null;
  }

  // output normalizes one output (from /v2/code/ws, a result, or a file) to
  // exactly the fields nbformat 4.5 allows. It returns null for what is not
  // a stored output (clear_output, update_display_data, junk).
  function output(o, asLines) {
    if (!isObject(o)) return null;
    const ml = asLines ? lines : text;
    switch (o.output_type) {
      case 'stream':
        return { output_type: 'stream', name: o.name === 'stderr' ? 'stderr' : 'stdout', text: ml(o.text) };
      case 'execute_result':
        return { output_type: 'execute_result', execution_count: count(o.execution_count), data: bundle(o.data, asLines), metadata: isObject(o.metadata) ? o.metadata : {} };
      case 'display_data':
        return { output_type: 'display_data', data: bundle(o.data, asLines), metadata: isObject(o.metadata) ? o.metadata : {} };
      case 'error':
        return {
          output_type: 'error', ename: text(o.ename), evalue: text(o.evalue),
          traceback: Array.isArray(o.traceback) ? o.traceback.map((l) => text(l)) : [],
        };
    }
    return null;
  }

  // appendOutput adds o to a list of stored outputs as a notebook keeps
  // them: consecutive chunks of one stream merge.
  function appendOutput(list, o) {
    const n = output(o, false);
    if (!n) return list;
    const last = list[list.length - 1];
    if (n.output_type === 'stream' && last && last.output_type === 'stream' && last.name === n.name) last.text += n.text;
    else list.push(n);
    return list;
  }

  const ID_OK = /^[a-zA-Z0-9-_]{1,64}$/;

  function newId() {
    const a = new Uint8Array(6);
    (root.crypto || globalThis.crypto).getRandomValues(a);
    return Array.from(a, (b) => b.toString(16).padStart(2, '0')).join('');
  }

  // toIpynb writes cells as an nbformat 4.5 notebook. info is /v2/code/info
  // (for the interpreters' versions); extra goes to metadata.aiod. The
  // notebook's kernel is the first code cell's language; each code cell
  // also names its own in metadata.aiod.language, since a page mixes
  // Python and JavaScript cells and nbformat has one kernel per notebook.
  function toIpynb(cells, info, extra) {
    const first = cells.find((c) => c.type === 'code');
    const lang = LANGS[(first && first.language) || 'python'] ? (first && first.language) || 'python' : 'python';
    const li = Object.assign({}, LANGS[lang].info);
    const have = info && Array.isArray(info.languages) ? info.languages.find((l) => l.language === lang) : null;
    if (have && have.version) li.version = String(have.version);
    const seen = new Set();
    const out = cells.map((c) => {
      let id = ID_OK.test(c.id || '') && !seen.has(c.id) ? c.id : newId();
      while (seen.has(id)) id = newId();
      seen.add(id);
      const md = Object.assign({}, isObject(c.metadata) ? c.metadata : {});
      if (c.type === 'code') {
        const a = { language: LANGS[c.language] ? c.language : 'python' };
        if (c.running) a.running = true;
        md.aiod = Object.assign({}, isObject(md.aiod) ? md.aiod : {}, a);
        if (!c.running) delete md.aiod.running;
        return {
          id, cell_type: 'code', metadata: md, source: lines(c.source),
          outputs: (c.outputs || []).map((o) => output(o, true)).filter(Boolean),
          execution_count: count(c.execution_count),
        };
      }
      const cell = { id, cell_type: c.type === 'raw' ? 'raw' : 'markdown', metadata: md, source: lines(c.source) };
      if (isObject(c.attachments)) cell.attachments = c.attachments;
      return cell;
    });
    const meta = { kernelspec: Object.assign({}, LANGS[lang].kernelspec), language_info: li };
    if (extra) meta.aiod = extra;
    return { cells: out, metadata: meta, nbformat: 4, nbformat_minor: 5 };
  }

  // fromIpynb reads a notebook (the parsed JSON) into cell models. It
  // throws an Error that names what is wrong for anything but nbformat 4.
  function fromIpynb(nb) {
    if (!isObject(nb)) throw new Error('not a notebook: the file is not a JSON object');
    if (nb.nbformat !== 4) {
      throw new Error(nb.nbformat === undefined ? 'not a notebook: no "nbformat" field'
        : 'nbformat ' + nb.nbformat + ' is not supported: only nbformat 4 (open and save it in Jupyter to convert it)');
    }
    if (!Array.isArray(nb.cells)) throw new Error('not a notebook: "cells" is not a list');
    const meta = isObject(nb.metadata) ? nb.metadata : {};
    const ks = isObject(meta.kernelspec) ? meta.kernelspec : {};
    const li = isObject(meta.language_info) ? meta.language_info : {};
    const nbLang = /javascript|node/i.test(String(li.name || ks.language || ks.name || '')) ? 'javascript' : 'python';
    const cells = nb.cells.map((c, i) => {
      if (!isObject(c)) throw new Error('cells[' + i + '] is not an object');
      const type = c.cell_type;
      if (type !== 'code' && type !== 'markdown' && type !== 'raw') throw new Error('cells[' + i + '].cell_type is ' + JSON.stringify(type) + ': want code, markdown or raw');
      const md = isObject(c.metadata) ? c.metadata : {};
      const a = isObject(md.aiod) ? md.aiod : {};
      const cell = { id: ID_OK.test(c.id || '') ? c.id : newId(), type, source: text(c.source), metadata: md };
      if (type === 'code') {
        cell.language = LANGS[a.language] ? a.language : nbLang;
        cell.outputs = (Array.isArray(c.outputs) ? c.outputs : []).map((o) => output(o, false)).filter(Boolean);
        cell.execution_count = count(c.execution_count);
        cell.running = a.running === true;
      } else if (isObject(c.attachments)) {
        cell.attachments = c.attachments;
      }
      return cell;
    });
    return { cells, language: nbLang, languageName: String(li.name || ks.language || ''), aiod: isObject(meta.aiod) ? meta.aiod : {} };
  }

  // ---- the copy in localStorage ----
  //
  // One key per session id ("aiod.nb." + id) holds that session's notebook
  // as .ipynb JSON; "aiod.nb-index" lists them with when they were saved.
  // Bounds: a notebook takes at most maxChars characters (past it the
  // largest outputs are dropped, and the notebook says so), and at most
  // maxNotebooks are kept: the least recently saved go first, also when
  // the browser's quota is full.

  const PREFIX = 'aiod.nb.';
  const INDEX = 'aiod.nb-index';

  class Store {
    constructor(storage, opts) {
      opts = opts || {};
      this.s = storage;
      this.maxChars = opts.maxChars || 2 * 1024 * 1024;
      this.maxNotebooks = opts.maxNotebooks || 20;
    }

    index() {
      try {
        const v = JSON.parse(this.s.getItem(INDEX) || '[]');
        return Array.isArray(v) ? v.filter((e) => isObject(e) && typeof e.id === 'string') : [];
      } catch (_) {
        return [];
      }
    }

    writeIndex(list) {
      list.sort((a, b) => b.saved - a.saved);
      this.s.setItem(INDEX, JSON.stringify(list));
    }

    // evictOne drops the least recently saved notebook other than keep; it
    // returns false when there is none.
    evictOne(keep) {
      const list = this.index();
      const old = list.filter((e) => e.id !== keep).sort((a, b) => a.saved - b.saved)[0];
      if (!old) return false;
      this.s.removeItem(PREFIX + old.id);
      this.writeIndex(list.filter((e) => e !== old));
      return true;
    }

    // save stores nb (an .ipynb object) for session id and returns
    // { chars, dropped }: how big it is and how many cells lost their
    // outputs to the bounds. It throws only if even the cells without
    // outputs do not fit.
    save(id, nb, now) {
      now = now || Date.now();
      let body = JSON.stringify(nb);
      let dropped = 0;
      const shrink = () => {
        // the cell whose outputs take the most room loses them
        let big = null;
        let size = 0;
        for (const c of nb.cells) {
          if (c.cell_type !== 'code' || !c.outputs.length) continue;
          const n = JSON.stringify(c.outputs).length;
          if (n > size) { size = n; big = c; }
        }
        if (!big) return false;
        big.outputs = [];
        big.metadata.aiod = Object.assign({}, big.metadata.aiod, { outputs_dropped: size });
        dropped++;
        body = JSON.stringify(nb);
        return true;
      };
      while (body.length > this.maxChars && shrink()) { /* shrink until it fits */ }
      if (body.length > this.maxChars) throw new Error('the notebook is ' + body.length + ' characters without outputs, over the page\'s limit of ' + this.maxChars);
      for (;;) {
        try {
          this.s.setItem(PREFIX + id, body);
          break;
        } catch (e) {
          if (!isQuota(e)) throw e;
          if (this.evictOne(id)) continue;
          if (!shrink()) throw new Error('the browser\'s storage is full: ' + e.message);
        }
      }
      let list = this.index().filter((e) => e.id !== id);
      list.push({ id, saved: now, chars: body.length });
      list.sort((a, b) => b.saved - a.saved);
      for (const e of list.slice(this.maxNotebooks)) this.s.removeItem(PREFIX + e.id);
      list = list.slice(0, this.maxNotebooks);
      for (;;) {
        try {
          this.writeIndex(list);
          break;
        } catch (e) {
          if (!isQuota(e) || list.length <= 1) throw e;
          const old = list.pop();
          this.s.removeItem(PREFIX + old.id);
        }
      }
      return { chars: body.length, dropped };
    }

    // load returns the .ipynb object saved for session id, or null.
    load(id) {
      const body = this.s.getItem(PREFIX + id);
      if (!body) return null;
      try {
        return JSON.parse(body);
      } catch (_) {
        return null;
      }
    }

    remove(id) {
      this.s.removeItem(PREFIX + id);
      this.writeIndex(this.index().filter((e) => e.id !== id));
    }
  }

  function isQuota(e) {
    return e && (e.name === 'QuotaExceededError' || e.code === 22 || e.code === 1014 || /quota/i.test(e.message || ''));
  }

  const api = { toIpynb, fromIpynb, output, appendOutput, lines, text, newId, Store, LANGS };
  if (typeof module === 'object' && module.exports) module.exports = api;
  else root.AiodNotebook = api;
})(typeof window !== 'undefined' ? window : globalThis);
