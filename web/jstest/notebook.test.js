// Unit tests of web/static/notebook.js: nbformat in and out, and the bounds
// of the copy in localStorage. The browser tests (web/e2e/run.js) validate
// what the page downloads against nbformat's schema. Run by web/js_test.go.
'use strict';

const test = require('node:test');
const assert = require('node:assert/strict');
const NB = require('../static/notebook.js');

test('lines splits as nbformat writes multi-line strings', () => {
  assert.deepEqual(NB.lines(''), []);
  assert.deepEqual(NB.lines('a'), ['a']);
  assert.deepEqual(NB.lines('a\nb\n'), ['a\n', 'b\n']);
  assert.deepEqual(NB.lines('a\n\nb'), ['a\n', '\n', 'b']);
  assert.equal(NB.text(['a\n', 'b']), 'a\nb');
});

test('output keeps exactly the fields nbformat allows', () => {
  assert.deepEqual(NB.output({ output_type: 'stream', name: 'stdout', text: 'x', ename: null, seq: 3 }), { output_type: 'stream', name: 'stdout', text: 'x' });
  assert.deepEqual(NB.output({ output_type: 'display_data', data: { 'text/plain': ['a', 'b'], 'application/json': { k: 1 } }, transient: { display_id: 'd' } }),
    { output_type: 'display_data', data: { 'text/plain': 'ab', 'application/json': { k: 1 } }, metadata: {} });
  assert.deepEqual(NB.output({ output_type: 'execute_result', execution_count: 'x', data: {} }), { output_type: 'execute_result', execution_count: null, data: {}, metadata: {} });
  assert.deepEqual(NB.output({ output_type: 'error', ename: 'E', evalue: 'v', traceback: ['a', 'b'] }, true), { output_type: 'error', ename: 'E', evalue: 'v', traceback: ['a', 'b'] });
  assert.equal(NB.output({ output_type: 'clear_output', wait: true }), null);
  assert.equal(NB.output({ output_type: 'update_display_data', data: {} }), null);
  assert.equal(NB.output('junk'), null);
});

test('appendOutput merges consecutive chunks of one stream', () => {
  const l = [];
  NB.appendOutput(l, { output_type: 'stream', name: 'stdout', text: 'a' });
  NB.appendOutput(l, { output_type: 'stream', name: 'stdout', text: 'b' });
  NB.appendOutput(l, { output_type: 'stream', name: 'stderr', text: 'c' });
  NB.appendOutput(l, { output_type: 'clear_output' });
  assert.deepEqual(l.map((o) => o.name + ':' + o.text), ['stdout:ab', 'stderr:c']);
});

const cells = [
  { id: 'm1', type: 'markdown', source: '# T\n\ntext' },
  { id: 'c1', type: 'code', language: 'python', source: 'print(1)\n1', execution_count: 4,
    outputs: [{ output_type: 'stream', name: 'stdout', text: '1\n' }, { output_type: 'execute_result', execution_count: 4, data: { 'text/plain': '1', 'image/png': 'iVBOR' }, metadata: {} }] },
  { id: 'c1', type: 'code', language: 'javascript', source: '6 * 7', execution_count: null, outputs: [], running: true },
];

test('toIpynb writes nbformat 4.5 with the kernel and per-cell languages', () => {
  const info = { languages: [{ language: 'python', version: '3.11.2' }, { language: 'javascript', version: '20.20.2' }] };
  const nb = NB.toIpynb(cells, info, { session: 's1' });
  assert.equal(nb.nbformat, 4);
  assert.equal(nb.nbformat_minor, 5);
  assert.deepEqual(nb.metadata.kernelspec, { name: 'python3', display_name: 'Python 3 (ipykernel)', language: 'python' });
  assert.equal(nb.metadata.language_info.name, 'python');
  assert.equal(nb.metadata.language_info.version, '3.11.2');
  assert.deepEqual(nb.metadata.aiod, { session: 's1' });
  assert.deepEqual(Object.keys(nb.cells[0]).sort(), ['cell_type', 'id', 'metadata', 'source']);
  assert.deepEqual(nb.cells[1].source, ['print(1)\n', '1']);
  assert.deepEqual(nb.cells[1].outputs[0].text, ['1\n']);
  assert.deepEqual(nb.cells[1].outputs[1].data, { 'text/plain': ['1'], 'image/png': 'iVBOR' }, 'text as lines, base64 as one string');
  assert.equal(nb.cells[2].metadata.aiod.language, 'javascript');
  assert.equal(nb.cells[2].metadata.aiod.running, true);
  assert.notEqual(nb.cells[2].id, nb.cells[1].id, 'duplicate ids are replaced');
  assert.match(nb.cells[2].id, /^[a-zA-Z0-9-_]{1,64}$/);
});

test('fromIpynb reads what toIpynb wrote', () => {
  const back = NB.fromIpynb(JSON.parse(JSON.stringify(NB.toIpynb(cells, null))));
  assert.equal(back.language, 'python');
  const c = back.cells;
  assert.deepEqual(c.map((x) => [x.type, x.language, x.source, x.execution_count]),
    [['markdown', undefined, '# T\n\ntext', undefined], ['code', 'python', 'print(1)\n1', 4], ['code', 'javascript', '6 * 7', null]]);
  assert.deepEqual(c[1].outputs, cells[1].outputs);
  assert.equal(c[2].running, true);
});

test('fromIpynb: a JavaScript notebook, old minor versions, and refusals naming the field', () => {
  const js = NB.fromIpynb({ nbformat: 4, nbformat_minor: 2, metadata: { kernelspec: { name: 'javascript', display_name: 'JS' } },
    cells: [{ cell_type: 'code', source: ['1'], metadata: {}, outputs: [], execution_count: null }] });
  assert.equal(js.cells[0].language, 'javascript');
  assert.match(js.cells[0].id, /^[0-9a-f]{12}$/, 'a cell without an id gets one');
  assert.throws(() => NB.fromIpynb({ nbformat: 3, worksheets: [] }), /nbformat 3 is not supported/);
  assert.throws(() => NB.fromIpynb([]), /not a JSON object/);
  assert.throws(() => NB.fromIpynb({ nbformat: 4, cells: {} }), /"cells" is not a list/);
  assert.throws(() => NB.fromIpynb({ nbformat: 4, cells: [{ cell_type: 'heading' }] }), /cells\[0\]\.cell_type is "heading"/);
});

// memStorage is a localStorage with a quota counted in characters.
function memStorage(quota) {
  const m = new Map();
  const used = () => [...m].reduce((n, [k, v]) => n + k.length + v.length, 0);
  return {
    m,
    getItem: (k) => (m.has(k) ? m.get(k) : null),
    setItem: (k, v) => {
      const old = m.get(k);
      m.set(k, String(v));
      if (used() > quota) {
        if (old === undefined) m.delete(k); else m.set(k, old);
        const e = new Error('quota exceeded');
        e.name = 'QuotaExceededError';
        throw e;
      }
    },
    removeItem: (k) => m.delete(k),
  };
}

function bigNotebook(outputChars) {
  return NB.toIpynb([
    { type: 'code', language: 'python', source: 'small', outputs: [{ output_type: 'stream', name: 'stdout', text: 'kept\n' }] },
    { type: 'code', language: 'python', source: 'big', outputs: [{ output_type: 'stream', name: 'stdout', text: 'x'.repeat(outputChars) }] },
  ], null);
}

test('Store: save and load by session id', () => {
  const st = new NB.Store(memStorage(1e6));
  assert.equal(st.load('s'), null);
  const r = st.save('s', bigNotebook(10), 1);
  assert.equal(r.dropped, 0);
  assert.equal(st.load('s').cells[1].outputs[0].text.join(''), 'x'.repeat(10));
  assert.deepEqual(st.index().map((e) => e.id), ['s']);
  st.remove('s');
  assert.equal(st.load('s'), null);
  assert.deepEqual(st.index(), []);
});

test('Store: a notebook over maxChars loses its biggest outputs first, and says so', () => {
  const st = new NB.Store(memStorage(1e6), { maxChars: 5000 });
  const r = st.save('s', bigNotebook(20000));
  assert.equal(r.dropped, 1);
  assert.ok(r.chars <= 5000);
  const nb = st.load('s');
  assert.equal(nb.cells[0].outputs[0].text.join(''), 'kept\n', 'the small outputs stay');
  assert.deepEqual(nb.cells[1].outputs, []);
  assert.ok(nb.cells[1].metadata.aiod.outputs_dropped > 20000);
  assert.throws(() => st.save('t', NB.toIpynb([{ type: 'markdown', source: 'y'.repeat(9000) }], null)), /over the page's limit of 5000/);
});

test('Store: at most maxNotebooks, the least recently saved go first', () => {
  const s = memStorage(1e6);
  const st = new NB.Store(s, { maxNotebooks: 3 });
  for (let i = 0; i < 5; i++) st.save('n' + i, bigNotebook(10), 100 + i);
  assert.deepEqual(st.index().map((e) => e.id), ['n4', 'n3', 'n2']);
  assert.equal(st.load('n0'), null);
  assert.equal(st.load('n1'), null);
  assert.ok(st.load('n2'));
  st.save('n2', bigNotebook(10), 200); // saving again makes it the newest
  st.save('n5', bigNotebook(10), 201);
  assert.deepEqual(st.index().map((e) => e.id), ['n5', 'n2', 'n4']);
});

test('Store: a full quota evicts older notebooks, then outputs', () => {
  const s = memStorage(30000);
  const st = new NB.Store(s);
  st.save('old1', bigNotebook(9000), 1);
  st.save('old2', bigNotebook(9000), 2);
  const r = st.save('new', bigNotebook(15000), 3);
  assert.equal(r.dropped, 0);
  assert.equal(st.load('old1'), null, 'the oldest went first');
  assert.ok(st.load('old2'));
  assert.ok(st.load('new'));
  const r2 = st.save('new', bigNotebook(35000), 4);
  assert.equal(r2.dropped, 1, 'with no other notebook left to evict, the outputs go');
  assert.equal(st.load('old2'), null);
  assert.deepEqual(st.index().map((e) => e.id), ['new']);
});
