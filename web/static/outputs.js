// outputs.js: renders notebook outputs as they stream in. It never inserts
// markup from user code into the page: text goes into text nodes, images into
// <img> from data: URLs, and HTML into an <iframe srcdoc> whose sandbox
// attribute is empty: no permission at all, so the HTML gets an opaque
// origin, cannot run script, reach the page, or read its storage.
'use strict';

(function () {
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

  // nbformat allows multi-line strings as arrays of lines.
  function str(v) {
    return Array.isArray(v) ? v.join('') : String(v);
  }

  // foldLine is what a terminal shows for one line that holds carriage
  // returns: the text after the last \r that something followed.
  function foldLine(s) {
    s = s.replace(/\r+$/, '');
    const i = s.lastIndexOf('\r');
    return i < 0 ? s : s.slice(i + 1);
  }

  // StreamBlock is one run of consecutive chunks of one stream (stdout or
  // stderr). Finished lines are appended to one text node, so a long stream
  // costs no re-rendering; the line being written is a second text node
  // that \r rewrites in place.
  class StreamBlock {
    constructor(name) {
      this.name = name;
      this.el = el('pre', 'out stream ' + name);
      this.done = document.createTextNode('');
      this.line = document.createTextNode('');
      this.el.append(this.done, this.line);
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

    write(text) {
      if (this.capped) return;
      const parts = (this.tail + text).replace(/\r\n/g, '\n').split('\n');
      this.tail = parts.pop();
      if (parts.length) {
        const add = parts.map(foldLine).join('\n') + '\n';
        this.done.appendData(add);
        this.size += add.length;
      }
      const j = this.tail.lastIndexOf('\r', this.tail.length - 2);
      if (j >= 0) this.tail = this.tail.slice(j + 1);
      const shown = foldLine(this.tail);
      if (this.line.data !== shown) this.line.data = shown;
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

  // renderBundle picks the richest MIME type the page can show safely.
  function renderBundle(data) {
    data = data || {};
    const plain = data['text/plain'] !== undefined ? str(data['text/plain']) : '';
    if (data['text/html'] !== undefined) return htmlFrame(str(data['text/html']));
    if (data['image/png'] !== undefined) return image('data:image/png;base64,' + str(data['image/png']).replace(/\s/g, ''), plain);
    if (data['image/jpeg'] !== undefined) return image('data:image/jpeg;base64,' + str(data['image/jpeg']).replace(/\s/g, ''), plain);
    if (data['image/svg+xml'] !== undefined) return image('data:image/svg+xml;charset=utf-8,' + encodeURIComponent(str(data['image/svg+xml'])), plain);
    if (data['text/markdown'] !== undefined) return el('pre', 'out markdown', str(data['text/markdown']));
    if (data['application/json'] !== undefined) return el('pre', 'out json', JSON.stringify(data['application/json'], null, 2));
    if (data['text/plain'] !== undefined) return el('pre', 'out plain', plain);
    return notice('An output of type ' + Object.keys(data).join(', ') + ' that the page does not show.');
  }

  function renderError(o) {
    const tb = Array.isArray(o.traceback) && o.traceback.length ? o.traceback.join('\n') : '';
    return el('pre', 'out error', tb || (o.ename || 'Error') + ': ' + (o.evalue || ''));
  }

  // OutputArea is the outputs of one cell, fed one output at a time in the
  // shape /v2/code/ws sends them.
  class OutputArea {
    constructor(root) {
      this.root = root;
      this.stream = null;
      this.clearOnNext = false;
      this.sawUpdate = false;
      this.sawError = false;
    }

    clear() {
      this.root.replaceChildren();
      this.stream = null;
      this.clearOnNext = false;
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

    notice(text, kind) {
      this.stream = null;
      this.root.append(notice(text, kind));
    }
  }

  window.AiodOutputs = { OutputArea, foldLine };
})();
