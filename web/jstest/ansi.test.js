// Unit tests of web/static/ansi.js, on the cases it shares with the daemon's
// stream.StripANSI (web/testdata/ansi.json). Run by web/js_test.go:
//   node --test web/jstest/
'use strict';

const test = require('node:test');
const assert = require('node:assert/strict');
const path = require('node:path');
const fs = require('node:fs');
const { Parser, strip } = require('../static/ansi.js');

const cases = JSON.parse(fs.readFileSync(path.join(__dirname, '..', 'testdata', 'ansi.json'), 'utf8')).cases;

function shape(segments) {
  return segments.map((s) => ({
    text: s.text,
    classes: s.look ? s.look.classes.join(' ') : null,
    color: s.look ? s.look.color : '',
    background: s.look ? s.look.background : '',
  }));
}

function want(spans) {
  return spans.map((s) => ({ text: s.text, classes: s.classes, color: s.color || '', background: s.background || '' }));
}

for (const c of cases) {
  test('ansi: ' + c.name, () => {
    assert.equal(strip(c.in), c.plain, 'strip');
    const segs = new Parser().feed(c.in);
    assert.equal(segs.map((s) => s.text).join(''), c.plain, 'the segments\' text is the plain text');
    assert.deepEqual(shape(segs), want(c.spans));
  });
}

test('ansi: a sequence cut between two chunks waits for the rest', () => {
  const p = new Parser();
  assert.deepEqual(p.feed('before \x1b[3', true).map((s) => s.text), ['before ']);
  assert.deepEqual(shape(p.feed('1mred\x1b', true)), [{ text: 'red', classes: 'ansi-fg-1', color: '', background: '' }]);
  assert.deepEqual(shape(p.feed('[0m after', true)), [{ text: ' after', classes: null, color: '', background: '' }]);
});

test('ansi: the style carries from one call to the next, and clone copies it', () => {
  const p = new Parser();
  p.feed('\x1b[1;34m');
  assert.equal(p.plain(), false);
  const q = p.clone();
  assert.deepEqual(shape(q.feed('x')), [{ text: 'x', classes: 'ansi-fg-4 ansi-bold', color: '', background: '' }]);
  p.feed('\x1b[0m');
  assert.equal(p.plain(), true);
  assert.equal(q.plain(), false, 'the clone is separate');
});

test('ansi: an unterminated OSC is held back only up to a bound', () => {
  const p = new Parser();
  const long = '\x1b]8;;' + 'x'.repeat(400);
  const segs = p.feed(long, true);
  assert.equal(segs.map((s) => s.text).join(''), long, 'past 256 characters it is shown as text, as StripANSI leaves it');
});
