// editor.js: a cell's editor, CodeMirror 6 from web/static/vendor/codemirror.js.
// Highlighting per language (Python, JavaScript, Markdown) with
// @lezer/highlight's classHighlighter, so tokens carry stable class names
// (tok-keyword, tok-string, ...) that app.css colours; bracket matching and
// closing, undo history, auto-indent, and the notebook's keys.
//
// Tab and Shift+Tab ask the session's runtime, as Jupyter does:
//   - Tab after a name completes it from the kernel (POST /v2/code/complete,
//     through opts.complete): one match is inserted at once, several open
//     CodeMirror's completion list (Tab or Enter takes the selected one,
//     typing on narrows it, Esc closes it). Tab with only blanks (or
//     nothing) before the cursor, or with a selection, indents.
//   - Shift+Tab after (or inside) a name shows what the kernel knows of it
//     (POST /v2/code/inspect, through opts.inspect) in a tooltip: its
//     text/plain, ANSI colours as spans (ansi.js), never as markup. With
//     blanks before the cursor, or a selection, it dedents.
// A request that takes long (the session is running a cell: a kernel
// answers when the cell ends, aiod waits up to 10 s) shows a "waiting"
// note at the cursor; an error shows there too. An answer that comes after
// the text changed is dropped.
//
// The protocol counts positions in code points, CodeMirror in UTF-16 code
// units: toPoints and toUnits convert (also loadable by Node.js tests).
'use strict';

(function (root) {
  // toPoints is the code-point offset of the UTF-16 offset units in s.
  function toPoints(s, units) {
    let n = 0;
    for (let i = 0; i < units && i < s.length; i++) {
      const c = s.charCodeAt(i);
      if (c >= 0xd800 && c < 0xdc00 && i + 1 < units && i + 1 < s.length) {
        const d = s.charCodeAt(i + 1);
        if (d >= 0xdc00 && d < 0xe000) i++;
      }
      n++;
    }
    return n;
  }

  // toUnits is the UTF-16 offset of the code-point offset points in s,
  // clamped to s.
  function toUnits(s, points) {
    let i = 0;
    for (let n = 0; n < points && i < s.length; n++) {
      const c = s.charCodeAt(i);
      i += c >= 0xd800 && c < 0xdc00 && i + 1 < s.length && s.charCodeAt(i + 1) >= 0xdc00 && s.charCodeAt(i + 1) < 0xe000 ? 2 : 1;
    }
    return i;
  }

  // wantsKernel tells whether Tab at offset pos of line text (the line
  // up to the cursor) asks the kernel: something other than blanks is there.
  function wantsKernel(before) {
    return /\S/.test(before);
  }

  // JEDI_TYPES maps the kernel's completion types (ipykernel's
  // _jupyter_types_experimental) to CodeMirror's icon names.
  const JEDI_TYPES = {
    module: 'namespace', class: 'class', function: 'function', instance: 'variable', statement: 'variable',
    keyword: 'keyword', param: 'variable', property: 'property', path: 'text', magic: 'keyword',
  };

  // completionOptions turns a complete reply into CodeMirror's options:
  // the matches once each, in the kernel's order, with their types when
  // the kernel says them.
  function completionOptions(reply) {
    const types = new Map();
    const meta = reply && reply.metadata && reply.metadata._jupyter_types_experimental;
    if (Array.isArray(meta)) {
      for (const t of meta) if (t && typeof t.text === 'string') types.set(t.text, t);
    }
    const seen = new Set();
    const out = [];
    for (const m of (reply && Array.isArray(reply.matches) ? reply.matches : [])) {
      if (typeof m !== 'string' || !m || seen.has(m)) continue;
      seen.add(m);
      const o = { label: m, boost: -out.length / 1000 };
      const t = types.get(m);
      if (t && JEDI_TYPES[t.type]) o.type = JEDI_TYPES[t.type];
      if (t && t.signature) o.detail = String(t.signature);
      out.push(o);
    }
    return out;
  }

  // replaced is the range of code (UTF-16 offsets) a complete reply's
  // matches replace: [cursor_start, cursor_end], holding the cursor pos.
  function replaced(code, reply, pos) {
    const num = (v) => (Number.isInteger(v) && v >= 0 ? v : null);
    const start = num(reply && reply.cursor_start);
    const end = num(reply && reply.cursor_end);
    return {
      from: start == null ? pos : Math.min(toUnits(code, start), pos),
      to: end == null ? pos : Math.max(toUnits(code, end), pos),
    };
  }

  const pure = { toPoints, toUnits, wantsKernel, completionOptions, replaced };
  if (typeof module === 'object' && module.exports) {
    module.exports = pure;
    return;
  }

  const CM = root.AiodCM;
  const { render: renderAnsi } = root.AiodAnsi;
  const WAIT_NOTE_MS = 600;

  function languageSupport(lang) {
    switch (lang) {
      case 'python': return CM.python();
      case 'javascript': return CM.javascript();
      case 'markdown': return CM.markdown();
    }
    return [];
  }

  function el(tag, cls, text) {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined) e.textContent = text;
    return e;
  }

  // The hint tooltip: one per editor, at a position, gone when the text or
  // the selection changes, the editor loses the focus, or on Esc.
  const setHint = CM.StateEffect.define();
  const hintField = CM.StateField.define({
    create: () => null,
    update(v, tr) {
      for (const e of tr.effects) if (e.is(setHint)) return e.value;
      if (v && (tr.docChanged || tr.selection)) return null;
      return v;
    },
    provide: (f) => CM.showTooltip.from(f, (v) => (v ? {
      pos: v.pos,
      above: false,
      create: () => {
        const dom = el('div', 'aiod-hint' + (v.kind ? ' ' + v.kind : ''));
        dom.append(v.make());
        return { dom };
      },
    } : null)),
  });

  // Editor wraps one EditorView. keys holds the notebook's handlers:
  // runInPlace (Ctrl/Cmd+Enter), runNext (Shift+Enter), runInsert
  // (Alt+Enter) and command (Escape: leave the editor for command mode).
  // opts.canAsk() tells whether the cell asks a runtime (a code cell: else
  // Tab and Shift+Tab indent); opts.complete(code, cursorPoints) and
  // opts.inspect(code, cursorPoints) return a promise of the daemon's data.
  class Editor {
    constructor(parent, opts) {
      const keys = opts.keys || {};
      const bind = (f) => () => { if (f) f(); return true; };
      this.lang = new CM.Compartment();
      this.onChange = opts.onChange || (() => {});
      this.ask = {
        enabled: opts.canAsk || (() => false),
        complete: opts.complete || (() => null),
        inspect: opts.inspect || (() => null),
      };
      this.asks = 0;   // the latest request: older answers are dropped
      this.cached = null; // { doc, pos, result }: the completion Tab fetched, for the list
      this.view = new CM.EditorView({
        parent,
        state: CM.EditorState.create({
          doc: opts.doc || '',
          extensions: [
            CM.Prec.highest(CM.keymap.of([
              { key: 'Shift-Enter', run: bind(keys.runNext) },
              { key: 'Mod-Enter', run: bind(keys.runInPlace) },
              { key: 'Alt-Enter', run: bind(keys.runInsert) },
              { key: 'Tab', run: (v) => this.tab(v) },
              { key: 'Shift-Tab', run: (v) => this.shiftTab(v) },
              { key: 'Escape', run: (v) => this.escape(v, keys.command) },
            ])),
            CM.history(),
            CM.drawSelection(),
            CM.highlightSpecialChars(),
            CM.indentOnInput(),
            CM.bracketMatching(),
            CM.closeBrackets(),
            CM.autocompletion({
              override: [(ctx) => this.source(ctx)],
              activateOnTyping: false, // the kernel is asked on Tab only, not on every key
              filterStrict: true,
              icons: true,
              maxRenderedOptions: 200,
            }),
            hintField,
            CM.syntaxHighlighting(CM.classHighlighter),
            CM.indentUnit.of('    '),
            CM.EditorState.tabSize.of(4),
            CM.keymap.of([...CM.closeBracketsKeymap, ...CM.defaultKeymap, ...CM.historyKeymap, CM.indentWithTab]),
            this.lang.of(languageSupport(opts.language)),
            CM.EditorView.contentAttributes.of({ 'aria-label': opts.label || 'Code' }),
            CM.EditorView.updateListener.of((u) => {
              if (u.docChanged) this.onChange();
              if (u.focusChanged && u.view.hasFocus && opts.onFocus) opts.onFocus();
              if (u.focusChanged && !u.view.hasFocus && u.state.field(hintField)) {
                setTimeout(() => { if (!this.view.hasFocus) this.hint(null); }, 0);
              }
            }),
          ],
        }),
      });
    }

    get value() {
      return this.view.state.doc.toString();
    }

    set value(v) {
      const s = this.view.state;
      this.view.dispatch({ changes: { from: 0, to: s.doc.length, insert: String(v) } });
    }

    // cursor is the main selection's head, as an offset in the text.
    get cursor() {
      return this.view.state.selection.main.head;
    }

    setLanguage(lang) {
      this.view.dispatch({ effects: this.lang.reconfigure(languageSupport(lang)) });
    }

    focus(atEnd) {
      this.view.focus();
      if (atEnd) this.view.dispatch({ selection: { anchor: this.view.state.doc.length } });
    }

    hasFocus() {
      return this.view.hasFocus;
    }

    // hint shows a tooltip at pos (make builds its content), or none.
    hint(h) {
      this.view.dispatch({ effects: setHint.of(h) });
    }

    note(pos, text, kind) {
      this.hint({ pos, kind: kind || 'note', make: () => el('div', 'aiod-note', text) });
    }

    // asking tells whether Tab / Shift+Tab go to the kernel here: one empty
    // selection with something other than blanks before it on its line.
    asking(view) {
      const s = view.state;
      if (s.selection.ranges.length !== 1 || !s.selection.main.empty) return false;
      const head = s.selection.main.head;
      const line = s.doc.lineAt(head);
      return wantsKernel(s.sliceDoc(line.from, head));
    }

    // request sends one complete or inspect; it resolves with the answer,
    // or with null when the text or cursor moved on meanwhile (or the
    // cell is not code). A slow answer gets a waiting note; an error is
    // shown at the cursor and resolves null.
    async request(view, what) {
      const st = view.state;
      const pos = st.selection.main.head;
      const code = st.doc.toString();
      const p = this.ask[what](code, toPoints(code, pos));
      const id = ++this.asks;
      const fresh = () => id === this.asks && this.view.state.doc === st.doc && this.view.state.selection.main.head === pos;
      const waiting = setTimeout(() => {
        if (fresh()) this.note(pos, 'Waiting for the session: it is running a cell, and its runtime answers when that ends (up to 10 s)…', 'wait');
      }, WAIT_NOTE_MS);
      let r;
      try {
        r = await p;
      } catch (e) {
        clearTimeout(waiting);
        if (fresh()) this.note(pos, (what === 'complete' ? 'Completion' : 'Inspection') + ' failed: ' + e.message, 'bad');
        return null;
      }
      clearTimeout(waiting);
      if (!fresh()) return null;
      if (this.view.state.field(hintField)) this.hint(null);
      return { r: r || {}, code, pos, doc: st.doc };
    }

    tab(view) {
      if (CM.completionStatus(view.state) === 'active') {
        CM.acceptCompletion(view);
        return true;
      }
      if (!this.asking(view)) return CM.indentMore(view);
      if (!this.ask.enabled()) return CM.indentMore(view); // not a code cell: Tab indents
      this.complete(view);
      return true;
    }

    async complete(view) {
      const a = await this.request(view, 'complete');
      if (!a) return;
      const options = completionOptions(a.r);
      const { from, to } = replaced(a.code, a.r, a.pos);
      if (!options.length) {
        this.note(a.pos, 'No completions.', 'note');
        return;
      }
      if (options.length === 1) {
        const text = options[0].label;
        view.dispatch({ changes: { from, to, insert: text }, selection: { anchor: from + text.length }, userEvent: 'input.complete' });
        return;
      }
      this.cached = { doc: a.doc, pos: a.pos, result: { from, to, options, validFor: /^[\w$]*$/ } };
      CM.startCompletion(view);
    }

    // source is CodeMirror's completion source: the answer Tab fetched, or
    // (Ctrl+Space) a new request.
    source(ctx) {
      const c = this.cached;
      if (c && c.doc === ctx.state.doc && c.pos === ctx.pos) {
        this.cached = null;
        return c.result;
      }
      if (!ctx.explicit) return null;
      const code = ctx.state.doc.toString();
      if (!this.ask.enabled()) return null;
      return this.ask.complete(code, toPoints(code, ctx.pos)).then((r) => {
        if (ctx.aborted) return null;
        const options = completionOptions(r);
        if (!options.length) return null;
        return Object.assign(replaced(code, r, ctx.pos), { options, validFor: /^[\w$]*$/ });
      }, () => null);
    }

    shiftTab(view) {
      if (!this.asking(view)) return CM.indentLess(view);
      if (!this.ask.enabled()) return CM.indentLess(view);
      this.inspect(view);
      return true;
    }

    async inspect(view) {
      const a = await this.request(view, 'inspect');
      if (!a) return;
      const data = a.r.data || {};
      const text = data['text/plain'];
      if (!a.r.found || text == null || text === '') {
        this.note(a.pos, 'The session knows nothing about this name.', 'note');
        return;
      }
      this.hint({
        pos: a.pos,
        kind: 'inspect',
        make: () => renderAnsi(el('pre', 'aiod-inspect'), Array.isArray(text) ? text.join('') : String(text)),
      });
    }

    escape(view, command) {
      if (CM.completionStatus(view.state)) {
        CM.closeCompletion(view);
        return true;
      }
      if (view.state.field(hintField)) {
        this.hint(null);
        return true;
      }
      if (command) command();
      return true;
    }
  }

  root.AiodEditor = Object.assign({ Editor }, pure);
})(typeof window !== 'undefined' ? window : globalThis);
