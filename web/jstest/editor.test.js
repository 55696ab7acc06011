// Unit tests of web/static/editor.js's pure parts: the conversion between
// the protocol's code points and CodeMirror's UTF-16 offsets, when Tab asks
// the kernel, and how a complete reply becomes CodeMirror's options. The
// browser tests (web/e2e/run.js, the complete and inspect scenarios) drive
// Tab and Shift+Tab against real kernels. Run by web/js_test.go.
'use strict';

const test = require('node:test');
const assert = require('node:assert/strict');
const E = require('../static/editor.js');

test('toPoints and toUnits convert offsets around astral characters', () => {
  const s = 'a😀b€c'; // 😀 is two UTF-16 units, € one
  assert.equal(s.length, 6);
  assert.deepEqual([0, 1, 3, 4, 5, 6].map((u) => E.toPoints(s, u)), [0, 1, 2, 3, 4, 5]);
  assert.deepEqual([0, 1, 2, 3, 4, 5].map((p) => E.toUnits(s, p)), [0, 1, 3, 4, 5, 6]);
  assert.equal(E.toUnits(s, 99), 6, 'clamped to the text');
  assert.equal(E.toPoints(s, 99), 5);
  assert.equal(E.toPoints('x\ud83d', 2), 2, 'a lone surrogate counts as one');
  for (let u = 0; u <= s.length; u++) {
    if (u === 2) continue; // inside the pair
    assert.equal(E.toUnits(s, E.toPoints(s, u)), u);
  }
});

test('Tab asks the kernel only after something other than blanks', () => {
  assert.equal(E.wantsKernel(''), false);
  assert.equal(E.wantsKernel('    '), false);
  assert.equal(E.wantsKernel('\t '), false);
  assert.equal(E.wantsKernel('import o'), true);
  assert.equal(E.wantsKernel('  x.'), true);
});

test('completionOptions keeps the kernel order, once each, with types', () => {
  const opts = E.completionOptions({
    matches: ['os', 'operator', 'os', '', 42, 'opcode'],
    metadata: { _jupyter_types_experimental: [{ text: 'os', type: 'module' }, { text: 'opcode', type: 'function', signature: '(x)' }] },
  });
  assert.deepEqual(opts.map((o) => o.label), ['os', 'operator', 'opcode']);
  assert.equal(opts[0].type, 'namespace');
  assert.equal(opts[1].type, undefined);
  assert.equal(opts[2].type, 'function');
  assert.equal(opts[2].detail, '(x)');
  assert.ok(opts[0].boost > opts[1].boost && opts[1].boost > opts[2].boost);
  assert.deepEqual(E.completionOptions(null), []);
  assert.deepEqual(E.completionOptions({ matches: 'os' }), []);
});

test('replaced maps the reply range to UTF-16 offsets around the cursor', () => {
  const code = 's = "😀"; imp';
  const pos = code.length; // UTF-16
  const points = E.toPoints(code, pos);
  assert.deepEqual(E.replaced(code, { cursor_start: points - 3, cursor_end: points }, pos), { from: pos - 3, to: pos });
  assert.deepEqual(E.replaced(code, {}, pos), { from: pos, to: pos });
  assert.deepEqual(E.replaced(code, { cursor_start: points + 5, cursor_end: -1 }, pos), { from: pos, to: pos }, 'a range that does not hold the cursor is clamped');
});
