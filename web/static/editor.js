// editor.js: a cell's editor, CodeMirror 6 from web/static/vendor/codemirror.js.
// Highlighting per language (Python, JavaScript, Markdown) with
// @lezer/highlight's classHighlighter, so tokens carry stable class names
// (tok-keyword, tok-string, ...) that app.css colours; bracket matching and
// closing, undo history, auto-indent, and the notebook's keys.
//
// Tab indents for now. Kernel completion (Tab) and inspection (Shift+Tab)
// slot in here once the daemon has a completion route: the bundle already
// carries autocompletion() and the tooltip helpers, and app.js has the
// complete() and inspect() calls; they are not wired to keys yet.
'use strict';

(function () {
  const CM = window.AiodCM;

  function languageSupport(lang) {
    switch (lang) {
      case 'python': return CM.python();
      case 'javascript': return CM.javascript();
      case 'markdown': return CM.markdown();
    }
    return [];
  }

  // Editor wraps one EditorView. keys holds the notebook's handlers:
  // runInPlace (Ctrl/Cmd+Enter), runNext (Shift+Enter), runInsert
  // (Alt+Enter) and command (Escape: leave the editor for command mode).
  class Editor {
    constructor(parent, opts) {
      const keys = opts.keys || {};
      const bind = (f) => () => { if (f) f(); return true; };
      this.lang = new CM.Compartment();
      this.onChange = opts.onChange || (() => {});
      this.view = new CM.EditorView({
        parent,
        state: CM.EditorState.create({
          doc: opts.doc || '',
          extensions: [
            CM.Prec.highest(CM.keymap.of([
              { key: 'Shift-Enter', run: bind(keys.runNext) },
              { key: 'Mod-Enter', run: bind(keys.runInPlace) },
              { key: 'Alt-Enter', run: bind(keys.runInsert) },
              { key: 'Escape', run: bind(keys.command) },
            ])),
            CM.history(),
            CM.drawSelection(),
            CM.highlightSpecialChars(),
            CM.indentOnInput(),
            CM.bracketMatching(),
            CM.closeBrackets(),
            CM.syntaxHighlighting(CM.classHighlighter),
            CM.indentUnit.of('    '),
            CM.EditorState.tabSize.of(4),
            CM.keymap.of([...CM.closeBracketsKeymap, ...CM.defaultKeymap, ...CM.historyKeymap, CM.indentWithTab]),
            this.lang.of(languageSupport(opts.language)),
            CM.EditorView.contentAttributes.of({ 'aria-label': opts.label || 'Code' }),
            CM.EditorView.updateListener.of((u) => {
              if (u.docChanged) this.onChange();
              if (u.focusChanged && u.view.hasFocus && opts.onFocus) opts.onFocus();
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

    // cursor is the main selection's head, as an offset in the text: what a
    // completion or inspect request sends as cursor_pos.
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
  }

  window.AiodEditor = { Editor };
})();
