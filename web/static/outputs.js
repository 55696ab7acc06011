// outputs.js: renders notebook outputs as they stream in, and keeps them in
// nbformat's shape (OutputArea.records) for the .ipynb and the copy in
// localStorage. It never inserts markup from user code into the page: text
// goes into text nodes (ANSI colours as spans, ansi.js), images into <img>
// from data: URLs, markdown through DOMPurify (markup.js), and HTML into an
// <iframe srcdoc> whose sandbox attribute is empty: no permission at all, so
// the HTML gets an opaque origin, cannot run script, reach the page, or read
// its storage.
'use strict';

(function () {
  const { Parser, toNodes, render: renderAnsi } = window.AiodAnsi;
  const { markdownBlock, latexBlock } = window.AiodMarkup;
  const { appendOutput, text: str } = window.AiodNotebook;

  // Characters of stream text kept per stream block; past it the page drops
  // the rest and says so (the result's own budget is the daemon's).
  const STREAM_CAP = 2 * 1024 * 1024;

  // The document an HTML output is shown in: a small table style, and pandas'
  // own <style> block still applies.
  const FRAME_HEAD = '<!doctype html><html><head><meta charset="utf-8"><style>' +
    'body{font:13px/1.4 system-ui,"DejaVu Sans",sans-serif;margin:4px 6px;color:#1d2330}' +
    'table{border-collapse:collapse}th,td{padding:3px 10px;border-bottom:1px solid #e3e6ec;text-align:right}' +
    'thead th{border-bottom:2px solid #9aa3b2}tbody tr:nth-child(odd){background:#f6f8fb}' +
    '</style></head><body>';

  function el(tag, cls, text) {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined) e.textContent = text;
    return e;
  }

  // foldLine is what a terminal shows for one line that holds carriage
  // returns: the text after the last \r that something followed.
  function foldLine(s) {
    s = s.replace(/\r+$/, '');
    const i = s.lastIndexOf('\r');
    return i < 0 ? s : s.slice(i + 1);
  }

  // StreamBlock is one run of consecutive chunks of one stream (stdout or
  // stderr). Finished lines are appended once (plain text to one growing
  // text node, coloured text as spans), so a long stream costs no
  // re-rendering; the line being written is a span that \r rewrites in place.
  class StreamBlock {
    constructor(name) {
      this.name = name;
      this.el = el('pre', 'out stream ' + name);
      this.lineEl = el('span', 'line');
      this.lineText = document.createTextNode('');
      this.lineEl.append(this.lineText);
      this.el.append(this.lineEl);
      this.parser = new Parser(); // the style at the start of the current line
      this.tail = '';
      this.size = 0;
      this.capped = false;
      // A long stream scrolls inside its block; it follows new text unless
      // the reader has scrolled up.
      this.stick = true;
      this.raf = 0;
      this.el.addEventListener('scroll', () => {
        const e = this.el;
        this.stick = e.scrollTop + e.clientHeight >= e.scrollHeight - 8;
      });
    }

    // appendDone adds finished text before the current line.
    appendDone(segments) {
      for (const sg of segments) {
        const prev = this.lineEl.previousSibling;
        if (!sg.look && prev && prev.nodeType === 3) prev.appendData(sg.text);
        else this.lineEl.before(...toNodes(document, [sg]));
      }
    }

    write(text) {
      if (this.capped) return;
      const parts = (this.tail + text).replace(/\r\n/g, '\n').split('\n');
      this.tail = parts.pop();
      if (parts.length) {
        const segs = [];
        let n = 0;
        for (const line of parts) {
          let s = line.replace(/\r+$/, '');
          const i = s.lastIndexOf('\r');
          if (i >= 0) {
            this.parser.feed(s.slice(0, i)); // overwritten text: only its colours count
            s = s.slice(i + 1);
          }
          for (const sg of this.parser.feed(s + '\n')) segs.push(sg);
          n += s.length + 1;
        }
        this.appendDone(segs);
        this.size += n;
      }
      const j = this.tail.lastIndexOf('\r', this.tail.length - 2);
      if (j >= 0) {
        this.parser.feed(this.tail.slice(0, j));
        this.tail = this.tail.slice(j + 1);
      }
      const shown = foldLine(this.tail);
      if (shown.indexOf('\x1b') < 0 && this.parser.plain()) {
        if (this.lineEl.firstChild !== this.lineText || this.lineEl.childNodes.length !== 1) this.lineEl.replaceChildren(this.lineText);
        if (this.lineText.data !== shown) this.lineText.data = shown;
      } else {
        this.lineEl.replaceChildren(...toNodes(document, this.parser.clone().feed(shown, true)));
      }
      if (this.stick && !this.raf) {
        this.raf = requestAnimationFrame(() => {
          this.raf = 0;
          if (this.stick) this.el.scrollTop = this.el.scrollHeight;
        });
      }
      if (this.size > STREAM_CAP) {
        this.capped = true;
        this.el.after(notice('The page stopped showing this stream after ' + STREAM_CAP / 1024 / 1024 + ' MiB.'));
      }
    }
  }

  function notice(text, kind) {
    return el('div', 'out notice' + (kind ? ' ' + kind : ''), text);
  }

  // htmlFrame shows HTML from user code isolated from the page. A sandboxed
  // frame cannot tell us its height (no script runs in it), so the height is
  // estimated from the markup, and the user can drag the frame taller.
  function htmlFrame(html) {
    const wrap = el('div', 'out html frame-wrap');
    const f = document.createElement('iframe');
    f.setAttribute('sandbox', '');
    f.setAttribute('referrerpolicy', 'no-referrer');
    f.title = 'HTML output (sandboxed: no scripts)';
    f.srcdoc = FRAME_HEAD + html;
    const rows = (html.match(/<tr[\s>]/gi) || []).length;
    const blocks = (html.match(/<(br|p|div|li|h[1-6]|pre)[\s>/]/gi) || []).length;
    const lines = html.replace(/<[^>]*>/g, '').split('\n').filter((l) => l.trim()).length;
    const h = 16 + rows * 27 + Math.max(rows ? 0 : blocks, rows ? 0 : lines) * 20;
    wrap.style.height = Math.max(44, Math.min(h, 520)) + 'px';
    wrap.append(f);
    return wrap;
  }

  function image(src, alt) {
    const box = el('div', 'out image');
    const img = el('img');
    img.alt = alt || 'image output';
    img.src = src;
    box.append(img);
    return box;
  }

  function b64(v) {
    return str(v).replace(/\s/g, '');
  }

  // renderBundle picks the richest MIME type the page can show safely:
  // HTML (sandboxed frame), markdown (sanitized), images, LaTeX (as
  // source: no renderer is bundled, see docs/notebook.md), JSON, plain text.
  function renderBundle(data) {
    data = data || {};
    const plain = data['text/plain'] !== undefined ? str(data['text/plain']) : '';
    if (data['text/html'] !== undefined) return htmlFrame(str(data['text/html']));
    if (data['text/markdown'] !== undefined) return markdownBlock(str(data['text/markdown']), 'out markdown');
    if (data['image/svg+xml'] !== undefined) return image('data:image/svg+xml;charset=utf-8,' + encodeURIComponent(str(data['image/svg+xml'])), plain);
    if (data['image/png'] !== undefined) return image('data:image/png;base64,' + b64(data['image/png']), plain);
    if (data['image/jpeg'] !== undefined) return image('data:image/jpeg;base64,' + b64(data['image/jpeg']), plain);
    if (data['image/gif'] !== undefined) return image('data:image/gif;base64,' + b64(data['image/gif']), plain);
    if (data['text/latex'] !== undefined) return latexBlock(str(data['text/latex']), 'out');
    if (data['application/json'] !== undefined) return el('pre', 'out json', JSON.stringify(data['application/json'], null, 2));
    if (data['text/plain'] !== undefined) return renderAnsi(el('pre', 'out plain'), plain);
    return notice('An output of type ' + Object.keys(data).join(', ') + ' that the page does not show.');
  }

  function renderError(o) {
    const tb = Array.isArray(o.traceback) && o.traceback.length ? o.traceback.map(str).join('\n') : '';
    return renderAnsi(el('pre', 'out error'), tb || (o.ename || 'Error') + ': ' + (o.evalue || ''));
  }

  // OutputArea is the outputs of one cell, fed one output at a time in the
  // shape /v2/code/ws sends them (or as a notebook file stores them).
  // records holds them as nbformat outputs; onChange is called when they
  // change.
  class OutputArea {
    constructor(root, onChange) {
      this.root = root;
      this.onChange = onChange || (() => {});
      this.records = [];
      this.stream = null;
      this.clearOnNext = false;
      this.sawUpdate = false;
      this.sawError = false;
    }

    clear() {
      this.root.replaceChildren();
      this.records = [];
      this.stream = null;
      this.clearOnNext = false;
      this.onChange();
    }

    reset() {
      this.clear();
      this.sawUpdate = false;
      this.sawError = false;
    }

    add(o) {
      if (!o || typeof o !== 'object') return;
      if (o.output_type === 'clear_output') {
        if (o.wait) this.clearOnNext = true;
        else this.clear();
        return;
      }
      if (this.clearOnNext) this.clear();
      appendOutput(this.records, o);
      this.onChange();
      switch (o.output_type) {
        case 'stream':
          if (!this.stream || this.stream.name !== o.name) {
            this.stream = new StreamBlock(o.name || 'stdout');
            this.root.append(this.stream.el);
          }
          this.stream.write(str(o.text || ''));
          return;
        case 'update_display_data':
          // The streamed outputs do not carry display ids; the result
          // carries the outputs with the update applied (see finish).
          this.sawUpdate = true;
          return;
        case 'error':
          this.sawError = true;
          this.stream = null;
          this.root.append(renderError(o));
          return;
        default:
          this.stream = null;
          this.root.append(renderBundle(o.data));
      }
    }

    // replaceWith shows a result's folded outputs instead of the streamed ones.
    replaceWith(outputs) {
      this.reset();
      for (const o of outputs || []) this.add(o);
    }

    // notice shows a line from the page (not an output) and returns it.
    notice(text, kind) {
      this.stream = null;
      const n = notice(text, kind);
      this.root.append(n);
      return n;
    }
  }

  window.AiodOutputs = { OutputArea, foldLine };
})();
