// ansi.js: terminal colours in kernel text (stream output, tracebacks) as
// styled spans. The text only ever goes into text nodes: a span gets a
// class name (ansi-fg-1, ansi-bold, ...) or a CSSOM colour for 256-colour
// and 24-bit codes, never markup.
//
// Which sequences count is the daemon's rule (stream.StripANSI): a CSI
// sequence "ESC [ params intermediates final" or an OSC sequence "ESC ] ...
// BEL|ESC \". SGR sequences (final "m") set the style; every other one is
// dropped. The plain text left is what StripANSI returns, and
// web/testdata/ansi.json holds the cases both sides are tested on.
//
// Loaded by the page as window.AiodAnsi, and by Node.js tests with require().
'use strict';

(function (root) {
  // Like the daemon's regexp, plus the two ways a sequence can be cut off
  // at the end of a chunk (see Parser.feed).
  const SEQ = /\x1b\[([0-9;?]*)([ -/]*)([@-~])|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)/g;
  const PARTIAL = /\x1b(?:\[[0-9;?]*[ -/]*|\][^\x07\x1b]*\x1b?)?$/;
  const MAX_PENDING = 256;

  function blank() {
    return { fg: null, bg: null, bold: false, dim: false, italic: false, underline: false, inverse: false, strike: false };
  }

  // xterm's 256-colour cube and grey ramp; 0-15 are left to the CSS classes.
  function color256(n) {
    if (n < 16) return n;
    if (n >= 232) {
      const v = 8 + (n - 232) * 10;
      return 'rgb(' + v + ',' + v + ',' + v + ')';
    }
    const i = n - 16;
    const c = (x) => (x ? 55 + x * 40 : 0);
    return 'rgb(' + c(Math.floor(i / 36)) + ',' + c(Math.floor(i / 6) % 6) + ',' + c(i % 6) + ')';
  }

  // extended reads "5;n" or "2;r;g;b" after a 38 or 48; it returns the
  // colour and how many parameters it used, or null when they are malformed.
  function extended(p, i) {
    if (p[i] === 5 && p[i + 1] >= 0 && p[i + 1] <= 255) return [color256(p[i + 1]), 2];
    if (p[i] === 2 && [1, 2, 3].every((k) => p[i + k] >= 0 && p[i + k] <= 255)) {
      return ['rgb(' + p[i + 1] + ',' + p[i + 2] + ',' + p[i + 3] + ')', 4];
    }
    return null;
  }

  // sgr applies one "ESC [ ... m" to style s.
  function sgr(s, params) {
    const p = params === '' ? [0] : params.split(';').map((x) => (x === '' ? 0 : parseInt(x, 10)));
    for (let i = 0; i < p.length; i++) {
      const n = p[i];
      if (Number.isNaN(n)) continue;
      if (n === 0) Object.assign(s, blank());
      else if (n === 1) s.bold = true;
      else if (n === 2) s.dim = true;
      else if (n === 3) s.italic = true;
      else if (n === 4) s.underline = true;
      else if (n === 7) s.inverse = true;
      else if (n === 9) s.strike = true;
      else if (n === 22) s.bold = s.dim = false;
      else if (n === 23) s.italic = false;
      else if (n === 24) s.underline = false;
      else if (n === 27) s.inverse = false;
      else if (n === 29) s.strike = false;
      else if (n >= 30 && n <= 37) s.fg = n - 30;
      else if (n === 39) s.fg = null;
      else if (n >= 40 && n <= 47) s.bg = n - 40;
      else if (n === 49) s.bg = null;
      else if (n >= 90 && n <= 97) s.fg = n - 90 + 8;
      else if (n >= 100 && n <= 107) s.bg = n - 100 + 8;
      else if (n === 38 || n === 48) {
        const e = extended(p, i + 1);
        if (!e) break; // the rest of a malformed sequence is ignored
        if (n === 38) s.fg = e[0];
        else s.bg = e[0];
        i += e[1];
      }
    }
  }

  function isPlain(s) {
    return s.fg === null && s.bg === null && !s.bold && !s.dim && !s.italic && !s.underline && !s.inverse && !s.strike;
  }

  // look is what a span needs for style s: class names, and CSS colours
  // for the codes past the 16 the stylesheet names.
  function look(s) {
    let fg = s.fg;
    let bg = s.bg;
    const cls = [];
    if (s.inverse) {
      [fg, bg] = [bg, fg];
      if (fg === null) cls.push('ansi-fg-inverse');
      if (bg === null) cls.push('ansi-bg-inverse');
    }
    const out = { classes: cls, color: '', background: '' };
    if (typeof fg === 'number') cls.push('ansi-fg-' + fg);
    else if (fg) out.color = fg;
    if (typeof bg === 'number') cls.push('ansi-bg-' + bg);
    else if (bg) out.background = bg;
    for (const k of ['bold', 'dim', 'italic', 'underline', 'strike']) if (s[k]) cls.push('ansi-' + k);
    return out;
  }

  // Parser turns text into segments { text, look } (look null for plain
  // text), carrying the style from one call to the next, as a terminal does.
  class Parser {
    constructor() {
      this.style = blank();
      this.pending = '';
    }

    // feed parses text. With streaming true, a sequence cut off at the end
    // of text is held back until the next call completes it.
    feed(text, streaming) {
      text = this.pending + text;
      this.pending = '';
      if (streaming) {
        const m = PARTIAL.exec(text);
        if (m && m[0].length <= MAX_PENDING) {
          this.pending = m[0];
          text = text.slice(0, m.index);
        }
      }
      const out = [];
      let last = 0;
      const push = (t) => {
        if (!t) return;
        const lk = isPlain(this.style) ? null : look(this.style);
        const prev = out[out.length - 1];
        if (prev && sameLook(prev.look, lk)) prev.text += t;
        else out.push({ text: t, look: lk });
      };
      if (text.indexOf('\x1b') < 0) {
        push(text);
        return out;
      }
      SEQ.lastIndex = 0;
      let m;
      while ((m = SEQ.exec(text)) !== null) {
        push(text.slice(last, m.index));
        last = SEQ.lastIndex;
        if (m[3] === 'm' && m[2] === '' && !/\?/.test(m[1])) sgr(this.style, m[1]);
      }
      push(text.slice(last));
      return out;
    }

    // plain reports whether text fed now would carry no style.
    plain() {
      return isPlain(this.style);
    }

    clone() {
      const p = new Parser();
      p.style = Object.assign({}, this.style);
      p.pending = this.pending;
      return p;
    }
  }

  function sameLook(a, b) {
    if (a === null || b === null) return a === b;
    return a.color === b.color && a.background === b.background && a.classes.join(' ') === b.classes.join(' ');
  }

  // strip is the plain text of s: what stream.StripANSI returns.
  function strip(s) {
    return String(s).replace(SEQ, '');
  }

  // toNodes makes DOM nodes for segments: text nodes for plain text, spans
  // with textContent for styled text.
  function toNodes(doc, segments) {
    return segments.map((sg) => {
      if (!sg.look) return doc.createTextNode(sg.text);
      const sp = doc.createElement('span');
      sp.className = sg.look.classes.join(' ');
      if (sg.look.color) sp.style.color = sg.look.color;
      if (sg.look.background) sp.style.backgroundColor = sg.look.background;
      sp.textContent = sg.text;
      return sp;
    });
  }

  // render appends text, with its colours, to el.
  function render(el, text) {
    el.append(...toNodes(el.ownerDocument, new Parser().feed(String(text))));
    return el;
  }

  const api = { Parser, strip, toNodes, render };
  if (typeof module === 'object' && module.exports) module.exports = api;
  else root.AiodAnsi = api;
})(typeof window !== 'undefined' ? window : globalThis);
