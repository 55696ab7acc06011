// markup.js: markdown (cells and text/markdown outputs) rendered with marked
// and sanitized with DOMPurify (web/static/vendor/markdown.js). DOMPurify
// returns a DocumentFragment, so sanitized markup is appended as nodes: the
// page never parses a string into its own document.
//
// On top of DOMPurify's defaults: no <style>, no style attribute, no forms
// or frames; images only from data:, blob: or the daemon itself (the page
// loads nothing from outside; a remote image shows as a link to it); links
// open in a new tab without a referrer. LaTeX (text/latex, and $...$ in
// markdown) stays as source: see docs/notebook.md for why.
'use strict';

(function () {
  const { Marked, DOMPurify } = window.AiodMarkdown;

  const marked = new Marked({ gfm: true, breaks: false, async: false });

  const PURIFY = {
    RETURN_DOM_FRAGMENT: true,
    FORBID_TAGS: ['style', 'form', 'input', 'button', 'textarea', 'select', 'iframe', 'frame', 'object', 'embed', 'link', 'meta', 'base'],
    FORBID_ATTR: ['style', 'srcset', 'action', 'formaction'],
    ALLOW_DATA_ATTR: false,
  };

  function sameOrigin(url) {
    try {
      const u = new URL(url, location.href);
      return u.protocol === 'data:' || u.protocol === 'blob:' || u.origin === location.origin;
    } catch (_) {
      return false;
    }
  }

  // "attachment:NAME" (a pasted image in a notebook's markdown cell) becomes
  // that attachment's data: URL before DOMPurify checks the URL.
  DOMPurify.addHook('uponSanitizeAttribute', (node, data) => {
    if (node.nodeName !== 'IMG' || data.attrName !== 'src' || !/^attachment:/.test(data.attrValue)) return;
    let name = data.attrValue.slice(11);
    try { name = decodeURIComponent(name); } catch (_) { /* keep it as written */ }
    const a = Object.prototype.hasOwnProperty.call(attachments, name) ? attachments[name] : null;
    const type = a && Object.keys(a).find((t) => /^image\/(png|jpeg|gif|webp)$/.test(t));
    if (type) data.attrValue = 'data:' + type + ';base64,' + String(Array.isArray(a[type]) ? a[type].join('') : a[type]).replace(/\s/g, '');
  });

  DOMPurify.addHook('afterSanitizeAttributes', (node) => {
    if (node.nodeName === 'A' && node.hasAttribute('href')) {
      node.setAttribute('target', '_blank');
      node.setAttribute('rel', 'noopener noreferrer');
    }
    if (node.nodeName === 'IMG' && node.hasAttribute('src') && !sameOrigin(node.getAttribute('src'))) {
      const src = node.getAttribute('src');
      const a = node.ownerDocument.createElement('a');
      a.href = src;
      a.target = '_blank';
      a.rel = 'noopener noreferrer';
      a.className = 'remote-image';
      a.textContent = '[image: ' + (node.getAttribute('alt') || src) + ']';
      a.title = 'Not loaded: the page loads nothing from outside the daemon. ' + src;
      node.replaceWith(a);
    }
  });

  // attachments are the images of the markdown cell being rendered
  // (nbformat's cell attachments, by name), for "attachment:NAME" sources.
  let attachments = {};

  // render returns a DocumentFragment of the sanitized markdown.
  function render(md, atts) {
    const html = marked.parse(String(md));
    attachments = atts && typeof atts === 'object' ? atts : {};
    try {
      return DOMPurify.sanitize(html, PURIFY);
    } finally {
      attachments = {};
    }
  }

  // markdownBlock is a rendered markdown block, with the class the page styles.
  function markdownBlock(md, cls, atts) {
    const d = document.createElement('div');
    d.className = 'markdown-body' + (cls ? ' ' + cls : '');
    d.append(render(md, atts));
    return d;
  }

  // latexBlock shows LaTeX as source, marked as such.
  function latexBlock(tex, cls) {
    const d = document.createElement('pre');
    d.className = 'latex' + (cls ? ' ' + cls : '');
    d.title = 'LaTeX, shown as source';
    d.textContent = String(tex);
    return d;
  }

  window.AiodMarkup = { render, markdownBlock, latexBlock };
})();
