// Renders /openapi.json as a page: no markup from the document is ever
// parsed (everything is text nodes), and nothing is loaded from elsewhere.
'use strict';

function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === 'class') e.className = v; else e.setAttribute(k, v);
  }
  for (const k of kids) if (k != null) e.append(k);
  return e;
}

function paragraphs(text) {
  const box = el('div', { class: 'intro' });
  for (const p of String(text || '').split(/\n\n+/)) box.append(el('p', null, p));
  return box;
}

// resolve follows a local $ref.
function resolve(doc, s) {
  let guard = 0;
  while (s && s.$ref && guard++ < 20) {
    s = s.$ref.replace(/^#\//, '').split('/').reduce((o, k) => (o ? o[k] : undefined), doc);
  }
  return s || {};
}

// schemaText shows a schema as an indented outline, expanding $refs up to
// a depth (a component used twice is named, not repeated forever).
function schemaText(doc, s, depth, seen) {
  depth = depth || 0; seen = seen || new Set();
  const pad = '  '.repeat(depth);
  if (!s) return pad + 'any';
  if (s.$ref) {
    const name = s.$ref.split('/').pop();
    if (seen.has(name) || depth > 6) return pad + name;
    const next = new Set(seen); next.add(name);
    return pad + name + ':\n' + schemaText(doc, resolve(doc, s), depth + 1, next);
  }
  for (const k of ['anyOf', 'oneOf', 'allOf']) {
    if (s[k]) return pad + k + ':\n' + s[k].map((x) => schemaText(doc, x, depth + 1, seen)).join('\n');
  }
  const type = Array.isArray(s.type) ? s.type.join(' | ') : (s.type || 'any');
  let line = pad + type;
  if (s.enum) line += ' ∈ {' + s.enum.join(', ') + '}';
  if (s.const !== undefined) line += ' = ' + JSON.stringify(s.const);
  if (s.description) line += '  — ' + s.description;
  const out = [line];
  if (s.properties) {
    const req = new Set(s.required || []);
    for (const [k, v] of Object.entries(s.properties)) {
      const sub = schemaText(doc, v, depth + 2, seen).trimStart();
      out.push(pad + '  ' + k + (req.has(k) ? '*' : '') + ': ' + sub);
    }
  }
  if (s.items) out.push(pad + '  items: ' + schemaText(doc, s.items, depth + 2, seen).trimStart());
  if (s.additionalProperties && typeof s.additionalProperties === 'object') {
    out.push(pad + '  {key}: ' + schemaText(doc, s.additionalProperties, depth + 2, seen).trimStart());
  }
  return out.join('\n');
}

function contentBlock(doc, title, content) {
  const box = el('div');
  for (const [type, media] of Object.entries(content || {})) {
    box.append(el('h4', null, title + ' (' + type + ')'), el('pre', null, schemaText(doc, media.schema)));
  }
  return box;
}

function operation(doc, path, method, op, id) {
  const sec = el('section', { class: 'op', id });
  sec.dataset.search = (method + ' ' + path + ' ' + (op.tags || []).join(' ') + ' ' + (op.summary || '')).toLowerCase();
  sec.append(el('h2', null, el('span', { class: 'method ' + method }, method), path),
    el('div', { class: 'summary' }, op.summary || ''));
  if (op.description) sec.append(el('p', null, op.description));
  if (op.parameters && op.parameters.length) {
    const t = el('table', null, el('tr', null, el('th', null, 'parameter'), el('th', null, 'in'), el('th', null, 'type'), el('th', null, 'about')));
    for (const p of op.parameters.map((x) => resolve(doc, x))) {
      t.append(el('tr', null, el('td', null, p.name + (p.required ? '*' : '')), el('td', null, p.in),
        el('td', null, schemaText(doc, p.schema).trim()), el('td', null, p.description || '')));
    }
    sec.append(el('h4', null, 'Parameters'), t);
  }
  if (op.requestBody) sec.append(contentBlock(doc, 'Request body', resolve(doc, op.requestBody).content));
  for (const [code, r0] of Object.entries(op.responses || {})) {
    const r = resolve(doc, r0);
    const d = el('details', code.startsWith('2') || code === '101' ? { open: '' } : null,
      el('summary', null, 'Response ' + code + ': ' + (r.description || '')));
    d.append(contentBlock(doc, 'Body', r.content));
    sec.append(d);
  }
  for (const [k, v] of Object.entries(op)) {
    if (k.startsWith('x-')) sec.append(el('h4', null, k), el('pre', null, JSON.stringify(v, null, 2)));
  }
  return sec;
}

async function main() {
  const main = document.getElementById('content');
  let doc;
  try {
    const r = await fetch('/openapi.json');
    doc = await r.json();
  } catch (e) {
    main.replaceChildren(el('p', null, 'Could not load /openapi.json: ' + e));
    return;
  }
  document.getElementById('title').textContent = (doc.info.title || 'API') + ' API';
  document.getElementById('version').textContent = 'version ' + doc.info.version + ' · OpenAPI ' + doc.openapi;
  const toc = document.getElementById('toc');
  const byTag = new Map();
  const sections = [];
  let n = 0;
  for (const [path, item] of Object.entries(doc.paths || {})) {
    for (const [method, op] of Object.entries(item)) {
      if (typeof op !== 'object' || !op.responses) continue;
      const id = 'op-' + (n++);
      const tag = (op.tags && op.tags[0]) || 'other';
      if (!byTag.has(tag)) byTag.set(tag, []);
      byTag.get(tag).push({ path, method, op, id });
    }
  }
  main.replaceChildren(paragraphs(doc.info.description));
  for (const [tag, ops] of byTag) {
    toc.append(el('h3', null, tag));
    main.append(el('h2', null, tag));
    for (const o of ops) {
      toc.append(el('a', { href: '#' + o.id }, o.method.toUpperCase() + ' ' + o.path));
      const s = operation(doc, o.path, o.method, o.op, o.id);
      sections.push(s);
      main.append(s);
    }
  }
  document.getElementById('filter').addEventListener('input', (e) => {
    const q = e.target.value.trim().toLowerCase();
    for (const s of sections) s.classList.toggle('hidden', q !== '' && !s.dataset.search.includes(q));
  });
  document.body.dataset.ready = String(sections.length);
}

main();
