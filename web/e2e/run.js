#!/usr/bin/env node
// End-to-end tests of aiod's notebook page in headless Chromium.
//
//   node web/e2e/run.js URL SCREENSHOT_DIR [--only=a,b] [--proxy=URL --drop=URL]
//
// URL is the page (http://127.0.0.1:PORT/, with ?token=T when the daemon has
// a token). --proxy is the same page through a TCP proxy, and a POST to
// --drop cuts every connection through that proxy: the reconnect scenario
// needs both. gateway/e2e/web_test.go starts the daemon and the proxy and
// runs this file; it reads one line per scenario, "ok NAME (MS ms)" or
// "FAIL NAME: reason", and the exit status (0 only when all passed).
//
// Chromium is Debian's /usr/bin/chromium (apt-get install -y chromium); no
// browser is downloaded. playwright-core comes from package-lock.json:
// npm ci --prefix web/e2e --no-audit --no-fund --ignore-scripts. The ipynb
// scenario validates the notebook the page downloads with Debian's
// python3-nbformat, through /usr/bin/python3 (validate_ipynb.py).
'use strict';

const childProcess = require('child_process');
const fs = require('fs');
const os = require('os');
const path = require('path');
const { chromium } = require('playwright-core');

const CHROMIUM = process.env.AIOD_CHROMIUM || '/usr/bin/chromium';
const PYTHON = process.env.AIOD_SYSTEM_PYTHON || '/usr/bin/python3';
const TITLE = 'aiod notebook';
const VIEWPORT = { width: 1280, height: 800 };

const argv = process.argv.slice(2);
const flags = Object.fromEntries(argv.filter((a) => a.startsWith('--')).map((a) => {
  const i = a.indexOf('=');
  return i < 0 ? [a.slice(2), 'true'] : [a.slice(2, i), a.slice(i + 1)];
}));
const [pageURL, shotDir] = argv.filter((a) => !a.startsWith('--'));
if (!pageURL || !shotDir) {
  console.error('usage: node run.js URL SCREENSHOT_DIR [--only=a,b] [--proxy=URL --drop=URL]');
  process.exit(2);
}
const base = new URL(pageURL);
const token = base.searchParams.get('token') || '';
const origin = base.origin;

// ---- helpers ----

function assert(cond, msg) {
  if (!cond) throw new Error(msg);
}

// within is how long a wait for something the page must show may take:
// four times what a quiet machine needs, since the suite runs on two cores
// beside other packages' daemons and kernels, where a wait of 5 or 10 s
// for a cell's state ran out. A wait ends at its event; only a failure
// takes the whole bound.
function within(ms) {
  return 4 * ms;
}

function sleep(ms) {
  return new Promise((r) => setTimeout(r, ms));
}

function rand() {
  return Math.random().toString(16).slice(2, 8);
}

// rest calls the daemon directly, as an agent would.
async function rest(method, p, body) {
  const headers = { 'Content-Type': 'application/json' };
  if (token) headers.Authorization = 'Bearer ' + token;
  const r = await fetch(origin + p, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  const j = await r.json();
  return { status: r.status, body: j };
}

// pageURLFor builds the page's URL with extra query parameters, keeping the token.
function pageURLFor(baseURL, q) {
  const u = new URL(baseURL);
  for (const [k, v] of Object.entries(q || {})) u.searchParams.set(k, v);
  return u.href;
}

// openPage opens the notebook and records what must never happen: an
// uncaught exception, a console error from the page's own scripts, and a
// request to anything but the daemon.
async function openPage(ctx, q, baseURL) {
  const page = await ctx.newPage();
  const problems = [];
  const u = new URL(pageURLFor(baseURL || pageURL, q));
  page.on('pageerror', (e) => problems.push('uncaught exception: ' + e.message));
  page.on('console', (m) => {
    const loc = m.location() || {};
    if (m.type() === 'error' && (loc.url || '').startsWith(u.origin + '/static/')) {
      problems.push('console error from ' + loc.url + ':' + loc.lineNumber + ': ' + m.text());
    }
  });
  page.on('request', (r) => {
    const url = r.url();
    if (!url.startsWith(u.origin + '/') && !/^(data|blob|about):/.test(url) && !url.startsWith(u.origin.replace(/^http/, 'ws') + '/')) {
      problems.push('request outside the daemon: ' + url);
    }
  });
  page.problems = problems;
  // The page's own CSP violations (those inside sandboxed frames are the
  // frames' own, and expected: they are what keeps user HTML inert).
  await page.addInitScript(() => {
    window.__csp = [];
    document.addEventListener('securitypolicyviolation', (e) => window.__csp.push({ directive: e.violatedDirective, uri: e.blockedURI, source: e.sourceFile }));
  });
  const resp = await page.goto(u.href);
  page.response = resp;
  assert(resp.status() === 200, 'GET ' + u.href + ': status ' + resp.status());
  await waitLight(page, 'idle');
  return page;
}

async function waitLight(page, s, timeout) {
  await page.waitForSelector('#light[data-state="' + s + '"]', { timeout: within(timeout || 15000) });
}

function cell(page, i) {
  return page.locator('#cells > .cell:not(.watched)').nth(i);
}

function editor(page, i) {
  return cell(page, i).locator('.cm-content');
}

// setCell puts code in the i-th cell's editor, adding cells as needed.
// With typed, the code is typed key by key, as a person would (the editor
// closes brackets and indents as it goes: code typed must allow for that).
async function setCell(page, i, code, opts) {
  opts = opts || {};
  while (await page.locator('#cells > .cell:not(.watched)').count() <= i) {
    await page.click(opts.language === 'javascript' ? '#add-javascript' : opts.language === 'markdown' ? '#add-markdown' : '#add-python');
  }
  const c = cell(page, i);
  if (opts.language && await c.locator('select.lang').inputValue() !== opts.language) await c.locator('select.lang').selectOption(opts.language);
  if (await c.getAttribute('data-rendered')) await c.locator('.md-view').dblclick();
  const ed = editor(page, i);
  if (opts.typed) {
    await ed.fill('');
    await ed.pressSequentially(code);
  } else {
    await ed.fill(code);
  }
  const got = await page.evaluate((n) => window.aiod.state.cells.filter((x) => !x.watched)[n].source, i);
  assert(got === code, 'cell ' + i + ' holds ' + JSON.stringify(got) + ', not ' + JSON.stringify(code));
  return c;
}

// runCell runs the i-th cell with Shift+Enter and, unless told not to,
// waits for it to finish; it returns the outputs' text.
async function runCell(page, i, opts) {
  opts = opts || {};
  const c = cell(page, i);
  await editor(page, i).press('Shift+Enter');
  if (opts.wait === false) return '';
  await page.waitForFunction((el) => el.dataset.state !== 'running', await c.elementHandle(), { timeout: within(opts.timeout || 60000) });
  return c.locator('.outputs').innerText();
}

// outs is the i-th cell's outputs as [class, text] pairs, exactly.
async function outs(page, i) {
  return cell(page, i).locator('.outputs').evaluate((el) => [...el.children].map((o) => [o.className, o.textContent]));
}

async function cellState(page, i) {
  return cell(page, i).getAttribute('data-state');
}

// completions is what CodeMirror's completion list offers, in order.
async function completions(page) {
  const list = page.locator('.cm-tooltip-autocomplete');
  await list.waitFor({ state: 'visible', timeout: within(30000) });
  return list.locator('li .cm-completionLabel').allInnerTexts();
}

async function count(page, i) {
  return (await cell(page, i).locator('.count').innerText()).trim();
}

// observe records, in the page, when a cell's output text changes.
async function observe(page, i) {
  const h = await cell(page, i).locator('.outputs').elementHandle();
  await page.evaluate((el) => {
    window.__seen = [];
    const mo = new MutationObserver(() => window.__seen.push({ t: performance.now(), text: el.textContent }));
    mo.observe(el, { childList: true, subtree: true, characterData: true });
  }, h);
}

// checkClean fails on what openPage recorded and on the page's CSP
// violations. With purified, it lets pass the one kind a page that feeds
// event handlers to DOMPurify on purpose gets: Chromium reports a
// script-src-attr violation when DOMPurify's inert parser document reads an
// on* attribute (nothing runs: DOMPurify removes the attribute before the
// nodes reach the page, and the policy would block it anyway). It returns
// how many it let pass.
async function checkClean(page, purified) {
  const csp = await page.evaluate(() => window.__csp);
  const fromPurify = (v) => v.directive === 'script-src-attr' && /\/static\/vendor\/markdown\.js$/.test(new URL(v.source || 'about:blank', 'http://x').pathname);
  let passed = 0;
  for (const v of csp) {
    if (purified && fromPurify(v)) passed++;
    else page.problems.push('CSP violation in the page: ' + v.directive + ' ' + v.uri + ' (' + v.source + ')');
  }
  const problems = page.problems.filter((p) => !(purified && /^console error from \S+\/static\/vendor\/markdown\.js:\d+: Executing inline event handler violates/.test(p)));
  assert(problems.length === 0, problems.join('; '));
  return passed;
}

// snapshot is what a reader sees of the page's cells: type, language,
// source, execution count, output text and kinds, images, rendering.
async function snapshot(page) {
  return page.evaluate(() => {
    const models = window.aiod.state.cells.filter((x) => !x.watched);
    return [...document.querySelectorAll('#cells > .cell:not(.watched)')].map((c, i) => ({
      type: models[i].type,
      language: models[i].type === 'code' ? models[i].language : '',
      source: models[i].source,
      count: c.querySelector('.count').textContent,
      outputs: c.querySelector('.outputs').innerText,
      kinds: [...c.querySelectorAll('.outputs > .out')].map((o) => o.className),
      images: [...c.querySelectorAll('.outputs img')].map((im) => im.src),
      rendered: c.querySelector('.md-view').hidden ? '' : c.querySelector('.md-view').innerText,
    }));
  });
}

function sameSnapshot(a, b, what) {
  const ja = JSON.stringify(a);
  const jb = JSON.stringify(b);
  if (ja === jb) return;
  for (let i = 0; i < Math.max(a.length, b.length); i++) {
    if (JSON.stringify(a[i]) !== JSON.stringify(b[i])) {
      throw new Error(what + ': cell ' + i + ' was ' + JSON.stringify(a[i]) + ', is ' + JSON.stringify(b[i]));
    }
  }
  throw new Error(what + ': ' + ja + ' != ' + jb);
}

// mode is the page's mode and the index of the selected cell.
async function mode(page) {
  return page.evaluate(() => {
    const s = window.aiod.state;
    const cells = s.cells.filter((c) => !c.watched);
    const i = cells.indexOf(s.active);
    const focused = i >= 0 && (document.activeElement === cells[i].root ? 'cell' : cells[i].root.contains(document.activeElement) ? 'editor' : 'elsewhere');
    return { mode: document.body.dataset.mode, selected: i, focused, cells: cells.map((c) => c.type + ':' + c.source) };
  });
}

// validateIpynb runs nbformat's schema check on file and returns its summary.
function validateIpynb(file) {
  const r = childProcess.spawnSync(PYTHON, [path.join(__dirname, 'validate_ipynb.py'), file], { encoding: 'utf8', timeout: within(60000) });
  if (r.error) throw new Error('run ' + PYTHON + ' validate_ipynb.py: ' + r.error.message + ' (install Debian\'s python3-nbformat)');
  assert(r.status === 0, 'the downloaded .ipynb does not validate against nbformat\'s schema:\n' + r.stdout + r.stderr);
  return JSON.parse(r.stdout);
}

// dropFile drops a file on the page, as a drag from the desktop would.
async function dropFile(page, name, body) {
  const dt = await page.evaluateHandle(({ name, b64 }) => {
    const d = new DataTransfer();
    const bytes = Uint8Array.from(atob(b64), (ch) => ch.charCodeAt(0));
    d.items.add(new File([bytes], name, { type: 'application/x-ipynb+json' }));
    return d;
  }, { name, b64: Buffer.from(body).toString('base64') });
  await page.dispatchEvent('#cells', 'dragenter', { dataTransfer: dt });
  await page.dispatchEvent('#cells', 'dragover', { dataTransfer: dt });
  assert(await page.evaluate(() => document.body.classList.contains('dropping')), 'no drop hint while a file is dragged over the page');
  await page.dispatchEvent('#cells', 'drop', { dataTransfer: dt });
}

function validateIpynbVersion() {
  const r = childProcess.spawnSync(PYTHON, ['-c', 'import nbformat; print(nbformat.__version__)'], { encoding: 'utf8' });
  return (r.stdout || '').trim();
}

const PNG_1PX = 'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==';

// ---- scenarios ----

const SALES = 'month,revenue,cost\n2026-01,120,80\n2026-02,135,82\n2026-03,150,90\n' +
  '2026-04,142,95\n2026-05,168,99\n2026-06,180,104\n';

const scenarios = {
  // The page's analysis walkthrough, typed into cells: the CSV uploaded
  // through the file panel, describe(), df.head(3) as a table in a sandboxed
  // frame, a chart inline, the saved plot.png appearing in the file panel
  // by itself and shown from it.
  async walkthrough(ctx) {
    await rest('DELETE', '/v2/code/sessions/analysis');
    const page = await openPage(ctx, { session: 'analysis' });
    const csp = page.response.headers()['content-security-policy'] || '';
    assert(csp.includes("default-src 'self'") && csp.includes("script-src 'self'") && !csp.includes('unsafe-eval'), 'weak or missing CSP: ' + csp);

    await page.fill('#fs-path', '/tmp/analysis');
    await page.setInputFiles('#fs-file', { name: 'sales.csv', mimeType: 'text/csv', buffer: Buffer.from(SALES) });
    await page.click('#fs-upload');
    await page.waitForSelector('#fs-list li[data-name="sales.csv"]');
    const up = await rest('POST', '/v2/fs/read', { path: '/tmp/analysis/sales.csv' });
    assert(up.body.data && up.body.data.content === SALES, 'the uploaded CSV differs: ' + JSON.stringify(up.body));

    await setCell(page, 0, 'import pandas as pd\ndf = pd.read_csv("/tmp/analysis/sales.csv")\n' +
      'df["margin"] = df.revenue - df.cost\nprint(df.margin.describe())', { typed: true });
    let out = await runCell(page, 0);
    assert(/count\s+6\.0+/.test(out) && /mean\s+57\.50*/.test(out), 'describe() output: ' + out);
    assert(await count(page, 0) === '[1]', 'execution count of cell 1: ' + await count(page, 0));

    await setCell(page, 1, 'df.head(3)', { typed: true });
    await runCell(page, 1);
    const frame = cell(page, 1).locator('iframe');
    assert(await frame.count() === 1, 'df.head(3) is not shown in a frame');
    assert(await frame.getAttribute('sandbox') === '', 'the frame is not sandboxed without permissions: sandbox=' + await frame.getAttribute('sandbox'));
    const fr = await (await frame.elementHandle()).contentFrame();
    await fr.waitForSelector('table tbody tr');
    const rows = await fr.$$eval('table tbody tr', (rs) => rs.map((r) => r.innerText));
    assert(rows.length === 3 && rows[0].includes('2026-01') && rows[2].includes('2026-03'), 'table rows: ' + JSON.stringify(rows));
    assert(await count(page, 1) === '[2]', 'execution count of cell 2');

    await setCell(page, 2, '%matplotlib inline\nimport matplotlib.pyplot as plt\n' +
      'df.plot(x="month", y=["revenue", "cost"], kind="bar", figsize=(6, 3))\nplt.tight_layout()\n' +
      'plt.savefig("/tmp/analysis/plot.png", dpi=120)\nplt.show()', { typed: true });
    await runCell(page, 2);
    const img = cell(page, 2).locator('.out.image img');
    assert(await img.count() === 1, 'no chart image in cell 3: ' + await cell(page, 2).locator('.outputs').innerText());
    assert((await img.getAttribute('src')).startsWith('data:image/png;base64,iVBOR'), 'the chart is not a PNG data: URL');
    await page.waitForFunction((el) => el.complete && el.naturalWidth > 300, await img.elementHandle());

    await setCell(page, 3, 'const months = 6;\nconsole.log(`${months} months, ${[1, 2, 3].map((x) => x * 2).join(",")}`)', { language: 'javascript' });
    out = await runCell(page, 3);
    assert(out.includes('6 months, 2,4,6'), 'JavaScript cell: ' + out);

    // No click: the panel follows its folder (watch_files) and lists the
    // plot the cell saved by itself.
    assert(await page.getAttribute('#files', 'data-live') === 'true', 'the file panel does not follow its folder live');
    await page.waitForSelector('#fs-list li[data-name="plot.png"]');
    await page.click('#fs-list li[data-name="plot.png"] button.view');
    const prev = page.locator('#fs-preview-img');
    await page.waitForFunction((el) => el.src.startsWith('blob:') && el.complete && el.naturalWidth > 300, await prev.elementHandle());

    const [dl] = await Promise.all([page.waitForEvent('download'), page.click('#fs-list li[data-name="sales.csv"] button.download')]);
    assert(dl.suggestedFilename() === 'sales.csv', 'download name: ' + dl.suggestedFilename());
    assert(fs.readFileSync(await dl.path(), 'utf8') === SALES, 'downloaded CSV differs');

    await page.evaluate(() => window.scrollTo(0, 0));
    await page.screenshot({ path: path.join(shotDir, 'walkthrough.png'), fullPage: true });
    await checkClean(page);
    await rest('DELETE', '/v2/code/sessions/analysis');
  },

  // Cells: add, delete, run all (in order, stopping at an error), errors
  // with their traceback, and a JavaScript cell beside the Python ones.
  async cells(ctx) {
    const sid = 'cells-' + rand();
    const page = await openPage(ctx, { session: sid });
    await setCell(page, 0, 'n = 1\nn');
    await setCell(page, 1, 'n += 1\nn');
    await setCell(page, 2, 'print("deleted")');
    await setCell(page, 3, 'n * 10');
    await cell(page, 2).locator('button.delete').click();
    const all = page.locator('#cells > .cell:not(.watched)');
    assert(await all.count() === 3, 'cells after a delete: ' + await all.count());
    const settled = () => page.waitForFunction(() => [...document.querySelectorAll('#cells > .cell')].every((c) => c.dataset.state !== 'running' && c.dataset.state !== 'idle'), null, { timeout: within(60000) });
    await page.click('#run-all');
    await settled();
    const outs = [];
    for (let i = 0; i < 3; i++) outs.push([await count(page, i), (await cell(page, i).locator('.outputs').innerText()).trim()]);
    assert(JSON.stringify(outs) === JSON.stringify([['[1]', '1'], ['[2]', '2'], ['[3]', '20']]), 'run all: ' + JSON.stringify(outs));

    await setCell(page, 1, 'n / 0');
    await page.click('#run-all');
    await page.waitForSelector('.toast:has-text("Run all stopped")');
    const err = cell(page, 1).locator('pre.out.error');
    assert(await err.count() === 1, 'no error output');
    const tb = await err.innerText();
    assert(tb.includes('ZeroDivisionError') && tb.includes('Traceback') && !/\x1b\[/.test(tb), 'traceback: ' + tb);
    assert(await count(page, 0) === '[4]' && await count(page, 1) === '[5]' && await count(page, 2) === '[3]', 'run all did not stop at the error');

    await setCell(page, 3, 'function check(v) { if (v < 0) throw new TypeError("bad value " + v); }\ncheck(-1)', { language: 'javascript' });
    await runCell(page, 3);
    const jerr = await cell(page, 3).locator('pre.out.error').innerText();
    assert(jerr.includes('TypeError') && jerr.includes('bad value -1'), 'JavaScript error: ' + jerr);
    await checkClean(page);
    await rest('DELETE', '/v2/code/sessions/' + sid);
  },

  // An execution past the output budget ends with a truncation notice.
  async truncation(ctx) {
    const sid = 'trunc-' + rand();
    const page = await openPage(ctx, { session: sid });
    await setCell(page, 0, 'for i in range(30):\n    print(f"{i:04d} " + "x" * 60_000)\nprint("tail line")');
    const out = await runCell(page, 0);
    assert(out.includes('tail line'), 'the stream lost its tail');
    const note = await cell(page, 0).locator('.notice').allInnerTexts();
    assert(note.some((n) => n.startsWith('Output truncated') && /budget|bytes|MiB/i.test(n)), 'truncation notice: ' + JSON.stringify(note));
    await checkClean(page);
    await rest('DELETE', '/v2/code/sessions/' + sid);
  },

  // Three lines appear one by one: the cell prints a line, then waits for
  // a file the test writes (through the file plane) only once the page
  // shows that line, so each line is on the page while the next is not yet
  // printed, whatever the machine's speed.
  async streaming(ctx) {
    const sid = 'stream-' + rand();
    const gate = '/tmp/aiod-e2e-' + sid;
    const page = await openPage(ctx, { session: sid });
    await setCell(page, 0, 'import os, time\nfrom datetime import datetime\nfor i in range(3):\n' +
      '    print(f"line {i} at {datetime.now():%H:%M:%S.%f}"[:-3], flush=True)\n' +
      '    while not os.path.exists(f"' + gate + '-{i}"):\n        time.sleep(0.02)\nprint("done")');
    await observe(page, 0);
    await runCell(page, 0, { wait: false });
    for (let i = 0; i < 3; i++) {
      await page.waitForFunction((n) => (window.__seen || []).some((s) => s.text.includes('line ' + n)), i, { timeout: within(30000) });
      const seen = await page.evaluate(() => window.__seen.map((s) => s.text).join(''));
      assert(!seen.includes('line ' + (i + 1)), 'line ' + (i + 1) + ' was on the page before it was printed');
      assert(!seen.includes('done'), 'the cell ended before its lines were read');
      if (i === 1) {
        await waitLight(page, 'busy', 1000);
        await page.screenshot({ path: path.join(shotDir, 'streaming.png') });
      }
      const w = await rest('POST', '/v2/fs/write', { path: gate + '-' + i, content: 'go' });
      assert(w.status === 200 && w.body.success, 'write the gate file: ' + JSON.stringify(w));
    }
    await page.waitForFunction((el) => el.dataset.state !== 'running', await cell(page, 0).elementHandle(), { timeout: within(30000) });
    const out = await cell(page, 0).locator('.outputs').innerText();
    assert(out.includes('line 2') && out.includes('done'), 'the streamed cell: ' + out);
    await waitLight(page, 'idle');
    await checkClean(page);
    await rest('DELETE', '/v2/code/sessions/' + sid);
    await rest('POST', '/v2/code/execute', { language: 'python', code: 'import glob, os\nfor f in glob.glob("' + gate + '-*"): os.remove(f)' });
  },

  // A \r progress line is rewritten in place.
  async progress(ctx) {
    const sid = 'progress-' + rand();
    const page = await openPage(ctx, { session: sid });
    await setCell(page, 0, 'import time\nfor i in range(0, 101, 25):\n    print(f"\\rprogress {i:3d}%", end="", flush=True)\n    time.sleep(0.15)\nprint("\\ndone")');
    await observe(page, 0);
    const out = await runCell(page, 0);
    const seen = await page.evaluate(() => window.__seen.map((s) => s.text));
    const text = await cell(page, 0).locator('pre.stream').textContent();
    assert(text === 'progress 100%\ndone\n', 'final text: ' + JSON.stringify(text) + ' (shown: ' + JSON.stringify(out) + ')');
    assert(seen.every((s) => (s.match(/progress/g) || []).length <= 1), 'progress lines were appended, not overwritten: ' + JSON.stringify(seen));
    const shown = new Set(seen.map((s) => (s.match(/progress +\d+%/) || [''])[0]).filter(Boolean));
    assert(shown.size >= 3, 'the progress line was not updated live: ' + JSON.stringify([...shown]));

    // clear_output(wait=True) and a display updated by its id.
    await setCell(page, 1, 'import time\nfrom IPython.display import display, clear_output\n' +
      'for i in range(3):\n    clear_output(wait=True)\n    print(f"frame {i}", flush=True)\n    time.sleep(0.1)\n' +
      'h = display("first", display_id=True)\nh.update("updated")');
    const frames = (await runCell(page, 1)).trim().replace(/\n+/g, '\n');
    assert(frames === "frame 2\n'updated'", 'clear_output and update_display: ' + JSON.stringify(frames));
    await checkClean(page);
    await rest('DELETE', '/v2/code/sessions/' + sid);
  },

  // A REST call on the attached session shows up live, marked as watched.
  async watch(ctx) {
    const sid = 'agent-' + rand();
    let r = await rest('POST', '/v2/code/execute', { language: 'python', session_id: sid, code: 'x = 41' });
    assert(r.body.success, 'agent setup: ' + JSON.stringify(r.body));
    const page = await openPage(ctx);
    await page.click('#sessions-refresh');
    await page.waitForSelector('#session-list option[value="' + sid + '"]', { state: 'attached' });
    await page.selectOption('#session-list', sid);
    await page.waitForSelector('#watch-badge:not([hidden])');
    assert((await page.innerText('#watch-badge')).includes(sid), 'watch badge: ' + await page.innerText('#watch-badge'));

    let restDone = false;
    const call = rest('POST', '/v2/code/execute', {
      language: 'python', session_id: sid,
      code: 'import time\nfor i in range(3):\n    print("agent step", i, flush=True)\n    time.sleep(0.4)\nprint("answer", x + 1)',
    }).then((res) => { restDone = true; return res; });
    await page.waitForSelector('.cell.watched .outputs:has-text("agent step 0")', { timeout: within(30000) });
    assert(!restDone, 'the watched output showed only after the REST call had answered');
    await waitLight(page, 'busy', 2000);
    r = await call;
    assert(r.body.success, 'agent call: ' + JSON.stringify(r.body));
    const w = page.locator('.cell.watched').first();
    await page.waitForFunction((el) => el.dataset.state === 'done', await w.elementHandle());
    const wt = await w.innerText();
    assert(wt.includes('answer 42') && wt.includes('print("answer", x + 1)') && wt.includes('another caller'), 'watched cell: ' + wt);
    assert((await w.locator('.count').innerText()).trim() === '[2]', 'watched execution count');

    await setCell(page, 0, 'x');
    const out = await runCell(page, 0);
    assert(out.trim() === '41' && await count(page, 0) === '[3]', 'the page does not share the agent\'s session: ' + out);
    await checkClean(page);
    await rest('DELETE', '/v2/code/sessions/' + sid);
  },

  // Interrupt stops a busy loop; restart loses the session's state.
  async interrupt(ctx) {
    const sid = 'loop-' + rand();
    const page = await openPage(ctx, { session: sid });
    await setCell(page, 0, 'print("looping", flush=True)\nwhile True: pass');
    await runCell(page, 0, { wait: false });
    await waitLight(page, 'busy', 5000);
    await cell(page, 0).locator('.outputs:has-text("looping")').waitFor({ timeout: within(60000) });
    await sleep(300);
    const t0 = Date.now();
    await page.click('#interrupt');
    await page.waitForFunction((el) => el.dataset.state !== 'running', await cell(page, 0).elementHandle(), { timeout: within(10000) });
    const out = await cell(page, 0).locator('.outputs').innerText();
    assert(out.includes('KeyboardInterrupt'), 'interrupted cell: ' + out);
    await waitLight(page, 'idle', 5000);
    const took = Date.now() - t0;

    await setCell(page, 1, 'a = 5\na');
    assert((await runCell(page, 1)).trim() === '5', 'state before restart');
    await page.click('#restart');
    await page.waitForSelector('.toast:has-text("Restarted the kernel")');
    await setCell(page, 2, 'a');
    const after = await runCell(page, 2);
    assert(after.includes('NameError'), 'state survived the restart: ' + after);
    assert(await count(page, 2) === '[1]', 'execution count after restart: ' + await count(page, 2));
    await checkClean(page);
    await rest('DELETE', '/v2/code/sessions/' + sid);
    return 'interrupted in ' + took + ' ms';
  },

  // HTML from user code cannot run script in the page.
  async xss(ctx) {
    const sid = 'xss-' + rand();
    const page = await openPage(ctx, { session: sid });
    await page.evaluate(() => { window.__pwned = false; });
    await setCell(page, 0, 'from IPython.display import HTML\nHTML("<script>parent.document.title=\'pwned\'; parent.__pwned=true</script>' +
      '<img src=x onerror=\\"parent.document.title=\'pwned\'\\"><b>bold</b>")');
    await runCell(page, 0);
    const frame = cell(page, 0).locator('iframe');
    assert(await frame.count() === 1, 'the HTML output is not in a frame');
    assert(await frame.getAttribute('sandbox') === '', 'sandbox=' + await frame.getAttribute('sandbox'));
    const fr = await (await frame.elementHandle()).contentFrame();
    await fr.waitForSelector('b');
    await sleep(1000);
    assert(await page.title() === TITLE, 'the page title changed to ' + await page.title());
    assert(await page.evaluate(() => window.__pwned) === false, 'a script in the output reached the page');
    await setCell(page, 1, 'from IPython.display import display, HTML, Javascript\n' +
      'display(HTML("<a id=l href=\\"javascript:parent.document.title=\'pwned\'\\">x</a>"))\ndisplay(Javascript("document.title=\'pwned\'"))');
    await runCell(page, 1);
    const fr2 = await (await cell(page, 1).locator('iframe').elementHandle()).contentFrame();
    await fr2.click('#l').catch(() => {});
    await sleep(500);
    assert(await page.title() === TITLE, 'the page title changed to ' + await page.title());
    await checkClean(page);
    await rest('DELETE', '/v2/code/sessions/' + sid);
  },

  // The socket drops (every connection through the proxy is cut); the page
  // keeps its cells, reconnects and watches the session again.
  async reconnect(ctx) {
    assert(flags.proxy && flags.drop, 'needs --proxy=URL and --drop=URL');
    const sid = 'drop-' + rand();
    const page = await openPage(ctx, { session: sid }, flags.proxy);
    await setCell(page, 0, 'y = 1\nprint("before the drop")');
    await runCell(page, 0);
    await page.waitForSelector('#watch-badge:not([hidden])');

    const d = await fetch(flags.drop, { method: 'POST' });
    assert(d.ok, 'drop: HTTP ' + d.status);
    await waitLight(page, 'disconnected', 5000);
    await page.waitForSelector('#watch-badge', { state: 'hidden' });
    await waitLight(page, 'idle', 15000);
    await page.waitForSelector('#watch-badge:not([hidden])', { timeout: within(5000) });
    assert((await cell(page, 0).locator('.outputs').innerText()).includes('before the drop'), 'the page lost its outputs');

    // a cell running across a drop: the next socket resumes it from the
    // last output it saw; every line shows once, then the result
    await setCell(page, 1, 'import time\nfor i in range(6):\n    print(f"tick {i}", flush=True)\n    time.sleep(0.4)\ny * 7');
    await runCell(page, 1, { wait: false });
    await cell(page, 1).locator('.outputs:has-text("tick 1")').waitFor({ timeout: within(30000) });
    const d2 = await fetch(flags.drop, { method: 'POST' });
    assert(d2.ok, 'drop: HTTP ' + d2.status);
    await waitLight(page, 'disconnected', 5000);
    assert(await cellState(page, 1) === 'running', 'the cell stopped waiting when the socket dropped: ' + await cellState(page, 1));
    await page.waitForFunction((el) => el.dataset.state !== 'running', await cell(page, 1).elementHandle(), { timeout: within(30000) });
    const ticks = await outs(page, 1);
    const wantTicks = [['out stream stdout', [0, 1, 2, 3, 4, 5].map((i) => 'tick ' + i + '\n').join('')], ['out plain', '7']];
    assert(JSON.stringify(ticks) === JSON.stringify(wantTicks), 'the cell across the drop: ' + JSON.stringify(ticks));
    assert(await count(page, 1) === '[2]' && await page.locator('.cell.watched').count() === 0, 'count ' + await count(page, 1) + ', watched cells ' + await page.locator('.cell.watched').count());

    const r = await rest('POST', '/v2/code/execute', { language: 'python', session_id: sid, code: 'print("agent after the drop", y)' });
    assert(r.body.success, 'agent call: ' + JSON.stringify(r.body));
    await page.waitForSelector('.cell.watched .outputs:has-text("agent after the drop 1")', { timeout: within(10000) });
    await setCell(page, 2, 'y + 1');
    const out = await runCell(page, 2);
    assert(out.trim() === '2', 'run after reconnect: ' + out);
    await checkClean(page);
    await rest('DELETE', '/v2/code/sessions/' + sid);
  },

  // The editor: highlighting per language (token spans), bracket matching
  // and closing, undo and redo, Tab indenting, and the run keys.
  async editor(ctx) {
    const sid = 'editor-' + rand();
    const page = await openPage(ctx, { session: sid });
    await setCell(page, 0, 'import os\ndef f(x):\n    return [x, {"k": (1, 2)}]\n# a comment');
    const c0 = cell(page, 0);
    const kws = await c0.locator('.cm-line span.tok-keyword').allInnerTexts();
    assert(['import', 'def', 'return'].every((k) => kws.includes(k)), 'Python keyword spans: ' + JSON.stringify(kws));
    assert(await c0.locator('.cm-line span.tok-comment').innerText() === '# a comment', 'no comment span');
    assert((await c0.locator('.cm-line span.tok-string').allInnerTexts()).includes('"k"'), 'no string span');
    const [kwColor, plainColor] = await page.evaluate(() => {
      const k = document.querySelector('#cells .cell .tok-keyword');
      return [getComputedStyle(k).color, getComputedStyle(k.closest('.cm-line')).color];
    });
    assert(kwColor !== plainColor, 'a keyword looks like plain text: ' + kwColor);

    await setCell(page, 1, 'const n = `t${1}`; // note', { language: 'javascript' });
    const c1 = cell(page, 1);
    assert(await c1.locator('.cm-content').getAttribute('data-language') === 'javascript', 'the JavaScript cell is not in JavaScript mode');
    assert((await c1.locator('span.tok-keyword').allInnerTexts()).includes('const'), 'JavaScript keyword span');

    // bracket matching: the cursor after the "]" that ends line 3
    await editor(page, 0).press('Control+Home');
    await editor(page, 0).press('ArrowDown');
    await editor(page, 0).press('ArrowDown');
    await editor(page, 0).press('End');
    const match = await c0.locator('.cm-matchingBracket').allInnerTexts();
    assert(JSON.stringify(match) === '["[","]"]', 'matching brackets: ' + JSON.stringify(match));

    // closing brackets, undo and redo, Tab
    const ed2 = await setCell(page, 2, '');
    await editor(page, 2).pressSequentially('print(');
    const src = () => page.evaluate(() => window.aiod.state.cells.filter((x) => !x.watched)[2].source);
    assert(await src() === 'print()', 'the bracket was not closed: ' + await src());
    await editor(page, 2).press('Control+z');
    assert(await src() === '', 'undo left ' + JSON.stringify(await src()));
    await editor(page, 2).press('Control+Shift+z');
    assert(await src() === 'print()', 'redo gave ' + JSON.stringify(await src()));
    await editor(page, 2).press('Control+Home');
    await editor(page, 2).press('Tab');
    assert(await src() === '    print()', 'Tab did not indent: ' + JSON.stringify(await src()));
    assert(ed2, 'cell 2');

    // Ctrl+Enter runs in place, Alt+Enter runs and inserts a cell below,
    // Shift+Enter runs and moves to the next cell.
    await setCell(page, 2, '6 * 7');
    const n = await page.locator('#cells > .cell').count();
    await editor(page, 2).press('Control+Enter');
    await page.waitForFunction((el) => el.dataset.state === 'done', await cell(page, 2).elementHandle(), { timeout: within(60000) });
    const got = (await cell(page, 2).locator('.outputs').innerText()).trim();
    assert(got === '42', 'Ctrl+Enter output: ' + JSON.stringify(got.slice(0, 500)) + ', source ' + JSON.stringify(await src()));
    let m = await mode(page);
    assert(m.selected === 2 && m.focused === 'editor' && await page.locator('#cells > .cell').count() === n, 'Ctrl+Enter moved on: ' + JSON.stringify(m));
    await editor(page, 0).press('Alt+Enter');
    m = await mode(page);
    assert(m.cells.length === n + 1 && m.cells[1] === 'code:' && m.selected === 1 && m.focused === 'editor', 'Alt+Enter: ' + JSON.stringify(m));
    await page.waitForFunction((el) => el.dataset.state === 'done', await cell(page, 0).elementHandle(), { timeout: within(60000) });
    await editor(page, 2).press('Shift+Enter'); // the JavaScript cell, now third
    m = await mode(page);
    assert(m.selected === 3 && m.focused === 'editor', 'Shift+Enter did not move to the next cell: ' + JSON.stringify(m));
    await page.waitForFunction((el) => el.dataset.state === 'done', await cell(page, 2).elementHandle(), { timeout: within(60000) });
    await checkClean(page);
    await rest('DELETE', '/v2/code/sessions/' + sid);
    return 'keyword spans ' + kws.join(',');
  },

  // Tab completes from the session's runtime: `import o` offers os (a
  // click inserts it), a single match is inserted at once, a JavaScript cell
  // completes a Node global; Tab with blanks before the cursor indents, and
  // in a markdown cell; Esc closes the list and stays in the editor; a
  // completion while the session runs a cell waits for it, and says so.
  async complete(ctx) {
    const sid = 'complete-' + rand();
    const page = await openPage(ctx, { session: sid });
    const src = (i) => page.evaluate((n) => window.aiod.state.cells.filter((x) => !x.watched)[n].source, i);
    await setCell(page, 0, 'import o');
    await editor(page, 0).press('End');
    const t0 = Date.now();
    await editor(page, 0).press('Tab');
    const offered = await completions(page);
    const took = Date.now() - t0;
    await page.screenshot({ path: path.join(shotDir, 'complete.png') });
    assert(offered.includes('os') && offered.every((o) => o.startsWith('o')), 'import o offers: ' + JSON.stringify(offered));
    await page.locator('.cm-tooltip-autocomplete li', { has: page.locator('.cm-completionLabel', { hasText: /^os$/ }) }).click();
    assert(await src(0) === 'import os', 'picking os gave ' + JSON.stringify(await src(0)));
    await page.locator('.cm-tooltip-autocomplete').waitFor({ state: 'hidden' });

    // Esc closes an open list, and the editor keeps the focus
    await editor(page, 0).pressSequentially('\nos.pa');
    await editor(page, 0).press('Tab');
    const paths = await completions(page);
    assert(paths.includes('path') && paths.includes('pathsep'), 'os.pa offers: ' + JSON.stringify(paths));
    await editor(page, 0).press('Escape');
    await page.locator('.cm-tooltip-autocomplete').waitFor({ state: 'hidden' });
    let m = await mode(page);
    assert(m.mode === 'edit' && m.focused === 'editor', 'Esc with the list open left the editor: ' + JSON.stringify(m));
    // Tab, then Enter, takes the selected match; typing narrows the list first
    await editor(page, 0).press('Tab');
    await completions(page);
    await editor(page, 0).pressSequentially('th');
    const narrowed = await completions(page);
    assert(narrowed.length >= 1 && narrowed.every((o) => o.startsWith('path')), 'typing did not narrow the list: ' + JSON.stringify(narrowed));
    await page.waitForFunction(() => document.querySelector('.cm-tooltip-autocomplete li[aria-selected] .cm-completionLabel').textContent === 'path');
    // CodeMirror ignores Enter in a list it updated less than its
    // interactionDelay (75 ms) ago, so that a key meant for the text is not
    // taken as a pick: a person reads the list first.
    await page.waitForTimeout(200);
    await editor(page, 0).press('Enter');
    assert(await src(0) === 'import os\nos.path', 'Enter in the list gave ' + JSON.stringify(await src(0)));

    // one match: inserted at once
    await setCell(page, 1, 'isinst');
    await editor(page, 1).press('End');
    await editor(page, 1).press('Tab');
    await page.waitForFunction(() => window.aiod.state.cells.filter((x) => !x.watched)[1].source === 'isinstance', null, { timeout: within(30000) });
    assert(await page.locator('.cm-tooltip-autocomplete').count() === 0, 'one match opened the list');

    // blanks before the cursor: Tab indents, and never asks the kernel
    await setCell(page, 2, 'x = 1');
    await editor(page, 2).press('Home');
    await editor(page, 2).press('Tab');
    assert(await src(2) === '    x = 1', 'Tab at the line start: ' + JSON.stringify(await src(2)));
    await setCell(page, 3, 'Some text', { language: 'markdown' });
    await editor(page, 3).press('End');
    await editor(page, 3).press('Tab');
    assert(await src(3) === '    Some text', 'Tab in a markdown cell: ' + JSON.stringify(await src(3)));
    assert(await page.locator('.cm-tooltip-autocomplete, .aiod-hint').count() === 0, 'a markdown cell asked the kernel');

    // JavaScript: Node's own completer
    await setCell(page, 4, 'Mat', { language: 'javascript' });
    await editor(page, 4).press('End');
    await editor(page, 4).press('Tab');
    await page.waitForFunction(() => window.aiod.state.cells.filter((x) => !x.watched)[4].source === 'Math', null, { timeout: within(30000) });
    await editor(page, 4).pressSequentially('.fl');
    await editor(page, 4).press('Tab');
    await page.waitForFunction(() => window.aiod.state.cells.filter((x) => !x.watched)[4].source === 'Math.floor', null, { timeout: within(30000) });

    // the session runs a cell: the completion waits for it, with a note
    await setCell(page, 5, 'import time\ntime.sleep(4)\n"slept"');
    await runCell(page, 5, { wait: false });
    await waitLight(page, 'busy', 10000);
    await setCell(page, 6, 'import collections\ncollections.Ord');
    await editor(page, 6).press('End');
    const t1 = Date.now();
    await editor(page, 6).press('Tab');
    await page.locator('.aiod-hint.wait').waitFor({ timeout: within(5000) });
    const note = await page.locator('.aiod-hint.wait').innerText();
    assert(/running a cell/.test(note), 'the waiting note: ' + note);
    await page.waitForFunction(() => window.aiod.state.cells.filter((x) => !x.watched)[6].source === 'import collections\ncollections.OrderedDict', null, { timeout: within(15000) });
    const waited = Date.now() - t1;
    assert(await cellState(page, 5) === 'done', 'the completion answered before the running cell ended: ' + await cellState(page, 5));
    assert(await page.locator('.aiod-hint').count() === 0, 'the waiting note stayed');
    await checkClean(page);
    await rest('DELETE', '/v2/code/sessions/' + sid);
    return 'import o: ' + offered.length + ' matches in ' + took + ' ms (kernel start included); behind a 4 s cell: ' + waited + ' ms';
  },

  // Shift+Tab shows what the kernel knows of a name in a tooltip: len's
  // docstring (its ANSI colours as spans), a JavaScript function; Esc
  // closes it; with blanks before the cursor Shift+Tab dedents.
  async inspect(ctx) {
    const sid = 'inspect-' + rand();
    const page = await openPage(ctx, { session: sid });
    await setCell(page, 0, 'len');
    await editor(page, 0).press('End');
    await editor(page, 0).press('Shift+Tab');
    const tip = page.locator('.aiod-hint pre.aiod-inspect');
    await tip.waitFor({ timeout: within(30000) });
    const text = await tip.textContent();
    assert(text.includes('Return the number of items in a container.') && /Signature:\s+len\(obj, \/\)/.test(text), 'len: ' + JSON.stringify(text));
    assert(!text.includes('\x1b') && !text.includes('[0;31m'), 'escape codes in the tooltip: ' + JSON.stringify(text));
    assert(await tip.locator('span.ansi-fg-1').count() >= 2, 'no colour spans: ' + await tip.evaluate((e) => e.innerHTML));
    assert(await tip.locator('*:not(span)').count() === 0, 'the tooltip holds elements other than spans: ' + await tip.evaluate((e) => e.innerHTML));
    await page.screenshot({ path: path.join(shotDir, 'inspect.png') });
    await editor(page, 0).press('Escape');
    await tip.waitFor({ state: 'hidden' });
    let m = await mode(page);
    assert(m.mode === 'edit' && m.focused === 'editor', 'Esc with the tooltip open left the editor: ' + JSON.stringify(m));
    // typing closes it too
    await editor(page, 0).press('Shift+Tab');
    await tip.waitFor({ timeout: within(30000) });
    await editor(page, 0).pressSequentially('(');
    await tip.waitFor({ state: 'hidden' });
    // a name the kernel does not know
    await setCell(page, 1, 'no_such_name_here');
    await editor(page, 1).press('End');
    await editor(page, 1).press('Shift+Tab');
    await page.locator('.aiod-hint.note:has-text("knows nothing")').waitFor({ timeout: within(30000) });
    // blanks before the cursor: Shift+Tab dedents
    await setCell(page, 2, '        x = 1');
    await editor(page, 2).press('Home');
    await editor(page, 2).press('Shift+Tab');
    const src = await page.evaluate(() => window.aiod.state.cells.filter((x) => !x.watched)[2].source);
    assert(src === '    x = 1', 'Shift+Tab at the line start: ' + JSON.stringify(src));

    await setCell(page, 3, 'Math.max', { language: 'javascript' });
    await editor(page, 3).press('End');
    await editor(page, 3).press('Shift+Tab');
    await tip.waitFor({ timeout: within(30000) });
    const js = await tip.textContent();
    assert(js.includes('Math.max: function') && js.includes('max'), 'Math.max: ' + JSON.stringify(js));
    await checkClean(page);
    await rest('DELETE', '/v2/code/sessions/' + sid);
  },

  // Issue 15's acceptance in the browser: a cell prints a line every 0.5 s
  // for 5 s; the page reloads mid-run, re-attaches, and shows every line
  // once (the replay from the start, then live), then the result, while it
  // also watches the session. Then a run whose result the page missed
  // (finished and retained) is resumed on load, and one the daemon never
  // knew says so.
  async resume(ctx) {
    const sid = 'resume-' + rand();
    const page = await openPage(ctx, { session: sid });
    const lines = Array.from({ length: 10 }, (_, i) => 'line ' + i + '\n').join('');
    await setCell(page, 0, 'import time\nfor i in range(10):\n    print(f"line {i}", flush=True)\n    time.sleep(0.5)\n"all printed"');
    await runCell(page, 0, { wait: false });
    await cell(page, 0).locator('.outputs:has-text("line 2")').waitFor({ timeout: within(30000) });
    const execId = await page.evaluate(() => window.aiod.state.cells[0].execId);
    assert(/^nb-[0-9a-f]{18}$/.test(execId), 'execution id ' + execId);
    await page.reload();
    await page.waitForSelector('#watch-badge:not([hidden])', { timeout: within(15000) });
    const mid = await page.evaluate(() => ({ state: document.querySelector('#cells > .cell').dataset.state, text: document.querySelector('#cells > .cell .outputs').textContent }));
    assert(mid.state === 'running' && !mid.text.includes('line 9'), 'the reload was not mid-run: ' + JSON.stringify(mid));
    await observe(page, 0);
    await page.waitForFunction((el) => el.dataset.state !== 'running', await cell(page, 0).elementHandle(), { timeout: within(30000) });
    const got = await outs(page, 0);
    const want = [['out stream stdout', lines], ['out plain', "'all printed'"]];
    assert(JSON.stringify(got) === JSON.stringify(want), 'after a reload mid-run: ' + JSON.stringify(got));
    // mid (the page back, watching, line 9 not there yet) shows the last
    // lines came live; no state of the cell ever held a line twice
    const seen = await page.evaluate(() => window.__seen.map((x) => x.text));
    const twice = (t) => Array.from({ length: 10 }, (_, i) => t.split('line ' + i + '\n').length - 1).some((n) => n > 1);
    assert(seen.length > 0 && !seen.some(twice), 'a line showed twice: ' + JSON.stringify(seen.find(twice)));
    assert(await count(page, 0) === '[1]' && await page.locator('.cell.watched').count() === 0, 'count ' + await count(page, 0) + ', watched cells ' + await page.locator('.cell.watched').count());
    const ex = await rest('GET', '/v2/code/executions/' + execId);
    assert(ex.body.data.state === 'done' && ex.body.data.stdout === lines, 'GET /v2/code/executions: ' + JSON.stringify(ex.body.data).slice(0, 300));

    // the result missed: the page's copy says running, with no output
    await setCell(page, 1, 'print("short")\n6 * 7');
    await runCell(page, 1);
    await setCell(page, 2, '1 + 1');
    await runCell(page, 2);
    await page.goto(new URL('/static/favicon.svg', pageURL).href); // the page saves as it goes
    await page.evaluate((key) => {
      const nb = JSON.parse(localStorage.getItem(key));
      const [, c1, c2] = nb.cells;
      c1.outputs = [];
      c1.execution_count = null;
      c1.metadata.aiod.running = true;
      c2.metadata.aiod.running = true;
      c2.metadata.aiod.execution_id = 'nb-never-was';
      localStorage.setItem(key, JSON.stringify(nb));
    }, 'aiod.nb.' + sid);
    await page.goto(pageURLFor(pageURL, { session: sid }));
    await page.waitForFunction((els) => els.every((el) => el.dataset.state !== 'running'), [await cell(page, 1).elementHandle(), await cell(page, 2).elementHandle()], { timeout: within(30000) });
    const missed = await outs(page, 1);
    assert(JSON.stringify(missed) === JSON.stringify([['out stream stdout', 'short\n'], ['out plain', '42']]) && await count(page, 1) === '[2]',
      'the retained run: ' + JSON.stringify(missed) + ' ' + await count(page, 1));
    const unknown = await outs(page, 2);
    assert(unknown.length === 2 && unknown[0][1] === '2' && /does not know this cell's run nb-never-was/.test(unknown[1][1]), 'the unknown run: ' + JSON.stringify(unknown));
    await checkClean(page);
    await rest('DELETE', '/v2/code/sessions/' + sid);
    return 'execution ' + execId + ': 10 lines once after a reload at line 2-3';
  },

  // Native Python sessions (--code-backend native): Tab completes from
  // rlcompleter and the module list, Shift+Tab shows len's docstring.
  async native(ctx) {
    const sid = 'native-' + rand();
    const page = await openPage(ctx, { session: sid });
    await setCell(page, 0, 'import o');
    await editor(page, 0).press('End');
    await editor(page, 0).press('Tab');
    const offered = await completions(page);
    assert(offered.includes('os'), 'import o offers: ' + JSON.stringify(offered));
    await page.locator('.cm-tooltip-autocomplete li', { has: page.locator('.cm-completionLabel', { hasText: /^os$/ }) }).click();
    await setCell(page, 1, 'le');
    await editor(page, 1).press('End');
    await editor(page, 1).press('Tab');
    await page.waitForFunction(() => window.aiod.state.cells.filter((x) => !x.watched)[1].source === 'len', null, { timeout: within(30000) });
    await editor(page, 1).press('Shift+Tab');
    const tip = page.locator('.aiod-hint pre.aiod-inspect');
    await tip.waitFor({ timeout: within(30000) });
    const text = await tip.textContent();
    assert(text.includes('Return the number of items in a container.'), 'len: ' + JSON.stringify(text));
    await setCell(page, 2, 'import sys\nsys.version_info.major');
    assert((await runCell(page, 2)).trim() === '3', 'a native run');
    const sessions = (await rest('GET', '/v2/code/sessions')).body.data.sessions.filter((x) => x.session_id === sid);
    assert(sessions.length === 1 && sessions[0].backend !== 'kernel' && !/kernel/.test(sessions[0].backend), 'not a native session: ' + JSON.stringify(sessions));
    await checkClean(page);
    await rest('DELETE', '/v2/code/sessions/' + sid);
    return 'backend ' + sessions[0].backend + ', import o: ' + offered.length + ' matches';
  },

  // Markdown cells render through marked and DOMPurify: headings, tables,
  // links; no script, no event handler, no javascript: URL, no remote image.
  // text/markdown and text/latex outputs from the kernel too.
  async markdown(ctx) {
    const sid = 'md-' + rand();
    const page = await openPage(ctx, { session: sid });
    await page.evaluate(() => { window.__pwned = false; });
    const md = '# Results\n\nSome *emphasis* and `code`.\n\n<script>window.__pwned = "script"</script>\n\n' +
      '<img src="x" onerror="window.__pwned = \'onerror\'"> <svg><g onload="window.__pwned=\'svg\'"></g></svg>\n\n' +
      '<a href="javascript:window.__pwned=\'link\'">js link</a> and [docs](https://docs.example.org/x)\n\n' +
      '![remote chart](https://img.example.org/chart.png)\n\n<style>body{display:none}</style>\n\n| a | b |\n|---|---|\n| 1 | 2 |\n';
    await setCell(page, 0, md, { language: 'markdown' });
    await runCell(page, 0);
    const view = cell(page, 0).locator('.md-view');
    assert(await view.isVisible() && !(await cell(page, 0).locator('.cm-editor').isVisible()), 'the markdown cell did not render');
    assert(await view.locator('h1').innerText() === 'Results', 'no h1');
    assert(await view.locator('em').innerText() === 'emphasis' && await view.locator('td').count() === 2, 'emphasis or table missing');
    const html = await view.evaluate((v) => v.innerHTML);
    assert(await view.locator('script, style, [onerror], [onload]').count() === 0, 'a script, style or handler got through: ' + html);
    assert(await view.locator('a[href^="javascript:"]').count() === 0, 'a javascript: link got through: ' + html);
    const link = view.locator('a', { hasText: 'docs' });
    assert(await link.getAttribute('target') === '_blank' && /noopener/.test(await link.getAttribute('rel')), 'link attributes');
    assert(await view.locator('img[src^="https:"]').count() === 0 && await view.locator('a.remote-image').count() === 1, 'the remote image was not turned into a link: ' + html);
    await sleep(500);
    assert(await page.evaluate(() => window.__pwned) === false, 'markdown ran script: ' + await page.evaluate(() => window.__pwned));
    assert(await page.locator('body').isVisible(), 'a <style> in markdown restyled the page');

    // double-click edits again; Esc renders
    await view.dblclick();
    let m = await mode(page);
    assert(m.mode === 'edit' && m.selected === 0 && m.focused === 'editor', 'double-click: ' + JSON.stringify(m));
    await page.keyboard.press('Escape');
    assert(await view.isVisible(), 'Esc did not render the markdown');

    await setCell(page, 1, 'from IPython.display import display, Markdown, Latex\n' +
      'display(Markdown("## From the kernel\\n\\n- item <img src=x onerror=\\"window.__pwned=\'kernel\'\\">"))\n' +
      'display(Latex(r"$$\\int_0^1 x^2\\,dx = \\frac{1}{3}$$"))');
    await runCell(page, 1);
    const outs = cell(page, 1).locator('.outputs');
    assert(await outs.locator('.out.markdown h2').innerText() === 'From the kernel', 'text/markdown output: ' + await outs.innerText());
    assert(await outs.locator('[onerror]').count() === 0, 'the kernel markdown kept a handler');
    const tex = await outs.locator('pre.latex').innerText();
    assert(tex.includes('\\int_0^1 x^2') && tex.includes('\\frac{1}{3}'), 'text/latex output: ' + tex);
    await sleep(300);
    assert(await page.evaluate(() => window.__pwned) === false, 'kernel markdown ran script');
    const reports = await checkClean(page, true);
    await rest('DELETE', '/v2/code/sessions/' + sid);
    return reports + ' script-src-attr reports from DOMPurify\'s parser, nothing ran';
  },

  // Command mode: Esc, then a/b/m/y/dd/z/j/k/Enter/Shift+Enter and "?".
  async commands(ctx) {
    const sid = 'cmd-' + rand();
    const page = await openPage(ctx, { session: sid });
    await setCell(page, 0, 'a = 1');
    await setCell(page, 1, 'b = 2');
    await editor(page, 0).click();
    await page.keyboard.press('Escape');
    let m = await mode(page);
    assert(m.mode === 'command' && m.selected === 0 && m.focused === 'cell', 'Esc: ' + JSON.stringify(m));
    const steps = [
      ['b', ['code:a = 1', 'code:', 'code:b = 2'], 1],
      ['a', ['code:a = 1', 'code:', 'code:', 'code:b = 2'], 1],
      ['m', ['code:a = 1', 'markdown:', 'code:', 'code:b = 2'], 1],
      ['j', null, 2],
      ['ArrowDown', null, 3],
      ['k', null, 2],
      ['ArrowUp', null, 1],
      ['y', ['code:a = 1', 'code:', 'code:', 'code:b = 2'], 1],
      ['d', ['code:a = 1', 'code:', 'code:', 'code:b = 2'], 1],
      ['d', ['code:a = 1', 'code:', 'code:b = 2'], 1],
      ['z', ['code:a = 1', 'code:', 'code:', 'code:b = 2'], 1],
      ['k', null, 0],
    ];
    for (const [key, want, sel] of steps) {
      await page.keyboard.press(key);
      m = await mode(page);
      assert(m.mode === 'command' && m.focused === 'cell' && m.selected === sel && (!want || JSON.stringify(m.cells) === JSON.stringify(want)),
        'after ' + key + ': ' + JSON.stringify(m) + (want ? ', want cells ' + JSON.stringify(want) : '') + ' selected ' + sel);
    }
    assert(await cell(page, 1).getAttribute('data-type') === 'code', 'y did not make a code cell');
    await page.keyboard.press('Shift+Enter');
    await page.waitForFunction((el) => el.dataset.state === 'done', await cell(page, 0).elementHandle(), { timeout: within(60000) });
    assert(await count(page, 0) === '[1]', 'Shift+Enter in command mode did not run the cell');
    m = await mode(page);
    assert(m.selected === 1 && m.focused === 'editor', 'Shift+Enter did not go to the next cell: ' + JSON.stringify(m));
    await page.keyboard.press('Escape');
    await page.keyboard.press('Enter');
    m = await mode(page);
    assert(m.mode === 'edit' && m.focused === 'editor' && m.selected === 1, 'Enter did not edit: ' + JSON.stringify(m));
    await page.keyboard.press('Escape');
    await page.keyboard.press('?');
    const dlg = page.locator('#keys-dialog');
    await dlg.waitFor({ state: 'visible' });
    const keys = await dlg.innerText();
    assert(['Shift', 'Esc', 'insert a cell above', 'markdown', 'delete it'].every((k) => keys.includes(k)), 'the keys dialog: ' + keys);
    await page.screenshot({ path: path.join(shotDir, 'keys.png') });
    await page.keyboard.press('Escape');
    await dlg.waitFor({ state: 'hidden' });
    m = await mode(page);
    assert(m.mode === 'command' && m.focused === 'cell', 'closing the dialog lost the cell: ' + JSON.stringify(m));
    await checkClean(page);
    await rest('DELETE', '/v2/code/sessions/' + sid);
  },

  // Download .ipynb (validated with nbformat's schema), then open it with
  // the file picker and by dropping it: the same cells and outputs, and
  // nothing runs.
  async ipynb(ctx) {
    const sid = 'nbf-' + rand();
    const page = await openPage(ctx, { session: sid });
    await setCell(page, 0, '# Notebook test\n\nA *markdown* cell.', { language: 'markdown' });
    await runCell(page, 0);
    await setCell(page, 1, 'import base64, sys\nfrom IPython.display import Image, display\nprint("hello stdout")\n' +
      'print("to stderr", file=sys.stderr)\ndisplay(Image(data=base64.b64decode("' + PNG_1PX + '")))\n40 + 2');
    await runCell(page, 1);
    await setCell(page, 2, 'undefined_name');
    await runCell(page, 2);
    await setCell(page, 3, 'console.log("from node"); 6 * 7', { language: 'javascript' });
    await runCell(page, 3);
    const before = await snapshot(page);
    assert(before.length === 5 && before[1].kinds.length === 4 && before[1].images.length === 1 && before[2].kinds[0] === 'out error', 'setup: ' + JSON.stringify(before));

    const [dl] = await Promise.all([page.waitForEvent('download'), page.click('#nb-download')]);
    assert(dl.suggestedFilename() === sid + '.ipynb', 'download name: ' + dl.suggestedFilename());
    const file = path.join(os.tmpdir(), 'aiod-e2e-' + rand() + '.ipynb');
    await dl.saveAs(file);
    try {
      const sum = validateIpynb(file);
      const info = (await rest('GET', '/v2/code/info')).body.data;
      const py = info.languages.find((l) => l.language === 'python');
      assert(sum.kernelspec.name === 'python3' && sum.language_info.name === 'python' && sum.language_info.version === py.version, 'kernel metadata: ' + JSON.stringify([sum.kernelspec, sum.language_info]));
      const got = sum.cells.map((c) => [c.cell_type, c.language, c.execution_count, c.outputs.join(',')]);
      const want = [['markdown', null, null, ''], ['code', 'python', 1, 'stream,stream,display_data,execute_result'], ['code', 'python', 2, 'error'], ['code', 'javascript', 1, 'stream,execute_result'], ['code', 'javascript', null, '']];
      assert(JSON.stringify(got) === JSON.stringify(want), 'the .ipynb cells: ' + JSON.stringify(got));
      assert(sum.cells.every((c, i) => c.source === before[i].source), 'the .ipynb sources differ');
      const body = fs.readFileSync(file, 'utf8');

      // open it with the file picker: a new session, nothing run
      const page2 = await openPage(ctx);
      const sid2before = await page2.evaluate(() => window.aiod.state.session);
      await page2.setInputFiles('#nb-file', file);
      await page2.waitForSelector('.toast:has-text("Opened")');
      sameSnapshot(before, await snapshot(page2), 'opened with the file picker');
      const sid2 = await page2.evaluate(() => window.aiod.state.session);
      assert(sid2 !== sid && sid2 !== sid2before, 'the notebook did not open in a new session');
      const running = (await rest('GET', '/v2/code/sessions')).body.data.sessions.map((x) => x.session_id);
      assert(!running.includes(sid2), 'opening the notebook ran something in ' + sid2);
      await checkClean(page2);

      // and by dropping it on the page
      const page3 = await openPage(ctx);
      await dropFile(page3, 'dropped.ipynb', body);
      await page3.waitForSelector('.toast:has-text("Opened dropped.ipynb")');
      sameSnapshot(before, await snapshot(page3), 'opened by a drop');

      // a file that is not nbformat 4 is refused, and the page stays as it was
      const keep = await snapshot(page3);
      await dropFile(page3, 'old.ipynb', JSON.stringify({ nbformat: 3, nbformat_minor: 0, worksheets: [] }));
      await page3.waitForSelector('.toast:has-text("nbformat 3 is not supported")');
      sameSnapshot(keep, await snapshot(page3), 'after a refused file');

      // a markdown cell's attachment, as Jupyter stores a pasted image; it
      // shows, and goes out again in the .ipynb
      await dropFile(page3, 'att.ipynb', JSON.stringify({
        nbformat: 4, nbformat_minor: 4, metadata: {},
        cells: [{ cell_type: 'markdown', metadata: {}, source: ['# Pasted\n', '![dot](attachment:dot.png)'], attachments: { 'dot.png': { 'image/png': PNG_1PX } } }],
      }));
      await page3.waitForSelector('.toast:has-text("Opened att.ipynb")');
      const att = cell(page3, 0).locator('.md-view img');
      await page3.waitForFunction((im) => im.complete && im.naturalWidth === 1, await att.elementHandle());
      assert((await att.getAttribute('src')).startsWith('data:image/png;base64,'), 'attachment src');
      const [dl3] = await Promise.all([page3.waitForEvent('download'), page3.click('#nb-download')]);
      assert(dl3.suggestedFilename() === 'att.ipynb', 'the opened file keeps its name: ' + dl3.suggestedFilename());
      await dl3.saveAs(file);
      const sum3 = validateIpynb(file);
      assert(sum3.cells.length === 1 && sum3.cells[0].cell_type === 'markdown' && JSON.parse(fs.readFileSync(file, 'utf8')).cells[0].attachments['dot.png'], 'the attachment did not go out again');
      await checkClean(page3);
    } finally {
      fs.rmSync(file, { force: true });
    }
    await checkClean(page);
    await rest('DELETE', '/v2/code/sessions/' + sid);
    return 'nbformat ' + validateIpynbVersion();
  },

  // The notebook is kept in localStorage per session id: a reload shows the
  // same cells and outputs; a cell running at the reload keeps what it had
  // printed and says so; outputs over the bound are dropped with a notice.
  async persist(ctx) {
    const sid = 'keep-' + rand();
    let page = await openPage(ctx, { session: sid });
    await setCell(page, 0, '## Kept\n\nacross *reloads*', { language: 'markdown' });
    await runCell(page, 0);
    await setCell(page, 1, 'print("a line")\n{"k": [1, 2]}');
    await runCell(page, 1);
    await setCell(page, 2, '[1, 2].map((x) => x * 21)', { language: 'javascript' });
    await runCell(page, 2);
    const before = await snapshot(page);
    await sleep(600); // the page saves 400 ms after the last change
    await page.reload();
    await waitLight(page, 'idle');
    sameSnapshot(before, await snapshot(page), 'after a reload');
    assert(await page.evaluate(() => window.aiod.state.session) === sid, 'the session id changed');

    // a cell still running when the page reloads
    await setCell(page, 3, 'import time\nprint("started", flush=True)\ntime.sleep(2)\nprint("finished", flush=True)', { language: 'python' });
    await runCell(page, 3, { wait: false });
    await cell(page, 3).locator('.outputs:has-text("started")').waitFor({ timeout: within(30000) });
    await page.reload();
    await waitLight(page, 'idle');
    const out3 = await outs(page, 3);
    assert(JSON.stringify(out3) === JSON.stringify([['out stream stdout', 'started\nfinished\n']]), 'the running cell after a reload: ' + JSON.stringify(out3));
    assert(await page.locator('.cell.watched').count() === 0, 'the re-attached cell also showed as a watched one');

    // over the bound: the biggest outputs are dropped, and the page says so
    await setCell(page, 4, 'print("x" * 2_500_000)', { language: 'python' });
    await runCell(page, 4);
    await page.waitForSelector('.toast:has-text("without the outputs of 1 cell")', { timeout: within(10000) });
    await page.reload();
    await waitLight(page, 'idle');
    const out4 = await cell(page, 4).locator('.outputs').innerText();
    assert(out4.includes('not kept') && !out4.includes('xxxx'), 'the dropped outputs: ' + out4.slice(0, 200));
    assert((await cell(page, 1).locator('.outputs').innerText()).includes('a line'), 'the small outputs were dropped too');
    const stored = await page.evaluate(() => JSON.parse(localStorage.getItem('aiod.nb-index')));
    assert(stored.some((e) => e.id === sid && e.chars <= 2 * 1024 * 1024), 'the index: ' + JSON.stringify(stored));
    await checkClean(page);
    await rest('DELETE', '/v2/code/sessions/' + sid);
  },

  // ANSI colours in stream text (also split across chunks) and in a
  // traceback become spans; no escape character is left in the page.
  async ansi(ctx) {
    const sid = 'ansi-' + rand();
    const page = await openPage(ctx, { session: sid });
    await setCell(page, 0, 'import sys, time\n' +
      'print("\\x1b[1;31mbold red\\x1b[0m plain \\x1b[38;5;208morange\\x1b[0m \\x1b[42mon green\\x1b[0m \\x1b[38;2;10;20;30mtrue\\x1b[0m", flush=True)\n' +
      'sys.stdout.write("\\x1b[3"); sys.stdout.flush(); time.sleep(0.3)\n' +
      'sys.stdout.write("4msplit blue\\x1b[0m\\n"); sys.stdout.flush()\n' +
      'print("\\x1b[32mgreen\\x1b[2K still green\\x1b[0m", file=sys.stderr)');
    await runCell(page, 0);
    const check = async (what) => {
      const o = cell(page, 0).locator('.outputs');
      const spans = await o.evaluate((el) => [...el.querySelectorAll('span[class^="ansi"], span[style]')].map((s) => [s.className, s.style.color || s.style.backgroundColor, s.textContent]));
      const want = [['ansi-fg-1 ansi-bold', '', 'bold red'], ['', 'rgb(255, 135, 0)', 'orange'], ['ansi-bg-2', '', 'on green'], ['', 'rgb(10, 20, 30)', 'true'], ['ansi-fg-4', '', 'split blue'], ['ansi-fg-2', '', 'green still green']];
      assert(JSON.stringify(spans) === JSON.stringify(want), what + ': spans ' + JSON.stringify(spans));
      const text = await o.evaluate((el) => el.textContent);
      assert(!text.includes('\x1b') && !text.includes('[3') && text.includes('bold red plain orange on green true\nsplit blue\n'), what + ': text ' + JSON.stringify(text));
    };
    await check('live');
    await sleep(600);
    await page.reload();
    await waitLight(page, 'idle');
    await check('restored');

    // a traceback as Jupyter stores it, with its colours
    const nb = {
      nbformat: 4, nbformat_minor: 5, metadata: {},
      cells: [{
        id: 'tb1', cell_type: 'code', metadata: {}, execution_count: 3, source: ['1/0'],
        outputs: [{ output_type: 'error', ename: 'ZeroDivisionError', evalue: 'division by zero', traceback: ['\x1b[0;31m-----\x1b[0m', '\x1b[0;31mZeroDivisionError\x1b[0m: division by zero'] }],
      }],
    };
    await dropFile(page, 'tb.ipynb', JSON.stringify(nb));
    await page.waitForSelector('.toast:has-text("Opened tb.ipynb")');
    const err = cell(page, 0).locator('pre.out.error');
    assert(await err.locator('span.ansi-fg-1').count() === 2, 'traceback colours: ' + await err.evaluate((e) => e.innerHTML));
    assert(await err.textContent() === '-----\nZeroDivisionError: division by zero', 'traceback text: ' + JSON.stringify(await err.textContent()));
    await checkClean(page);
    await rest('DELETE', '/v2/code/sessions/' + sid);
  },

  // Usable at 1280x800 and in a narrow window; screenshots of both; and
  // what the page costs to load: its JavaScript and a cold first load.
  async layout(ctx) {
    const sid = 'tour-' + rand();
    const page = await openPage(ctx, { session: sid });
    await setCell(page, 0, '# Monthly margins\n\nRevenue minus cost, per month, from `sales.csv`. Run the cells with **Shift+Enter**.', { language: 'markdown' });
    await runCell(page, 0);
    await setCell(page, 1, 'import pandas as pd\n\ndef margin(df):\n    """Revenue minus cost."""\n    return df.revenue - df.cost\n\n' +
      'df = pd.DataFrame({"revenue": [120, 135, 150], "cost": [80, 82, 90]})\n' +
      'for m in margin(df):\n    print(("\\x1b[32m" if m > 50 else "\\x1b[33m") + f"margin {m}" + "\\x1b[0m")');
    await runCell(page, 1);
    await setCell(page, 2, 'const months = ["jan", "feb", "mar"];\nmonths.map((m, i) => `${m}: ${i + 1}`)', { language: 'javascript' });
    await runCell(page, 2);
    await editor(page, 1).click();
    await page.keyboard.press('Escape');
    const fits = (w) => page.evaluate((w) => {
      const bad = [];
      if (document.documentElement.scrollWidth > w + 1) bad.push('page scrolls sideways: ' + document.documentElement.scrollWidth + ' px');
      for (const b of document.querySelectorAll('.toolbar button, .cell-head button, .add-row button')) {
        const r = b.getBoundingClientRect();
        if (r.width === 0 || r.left < 0 || r.right > w + 1) bad.push((b.id || b.className || b.textContent) + ' at ' + Math.round(r.left) + '-' + Math.round(r.right));
      }
      const ed = [...document.querySelectorAll('#cells .cm-editor')].find((e) => e.offsetParent).getBoundingClientRect();
      if (ed.width < Math.min(w * 0.6, 500)) bad.push('the editor is ' + Math.round(ed.width) + ' px wide');
      return bad;
    }, w);
    let bad = await fits(VIEWPORT.width);
    assert(!bad.length, '1280x800: ' + bad.join('; '));
    const bar = await page.locator('.toolbar').boundingBox();
    assert(bar.height < 60, 'the toolbar takes ' + bar.height + ' px at 1280 wide: more than one row');
    await page.screenshot({ path: path.join(shotDir, 'notebook.png') });
    await page.setViewportSize({ width: 400, height: 800 });
    await sleep(200);
    bad = await fits(400);
    assert(!bad.length, '400x800: ' + bad.join('; '));
    await page.screenshot({ path: path.join(shotDir, 'narrow.png') });
    await page.setViewportSize(VIEWPORT);
    await checkClean(page);

    // a cold load: no cache
    const cold = await ctx.newPage();
    const cdp = await ctx.newCDPSession(cold);
    await cdp.send('Network.setCacheDisabled', { cacheDisabled: true });
    await cold.goto(pageURLFor(pageURL, { session: sid }));
    await cold.waitForFunction(() => performance.getEntriesByName('aiod-ready').length > 0 && document.readyState === 'complete');
    const perf = await cold.evaluate(() => {
      const nav = performance.getEntriesByType('navigation')[0];
      const js = performance.getEntriesByType('resource').filter((r) => r.initiatorType === 'script');
      return {
        files: js.length,
        bytes: js.reduce((n, r) => n + r.decodedBodySize, 0),
        wire: js.reduce((n, r) => n + r.encodedBodySize, 0),
        dcl: nav.domContentLoadedEventEnd,
        load: nav.loadEventEnd,
        ready: performance.getEntriesByName('aiod-ready')[0].startTime,
      };
    });
    assert(perf.files === 9 && perf.bytes > 0, 'scripts loaded: ' + JSON.stringify(perf));
    await rest('DELETE', '/v2/code/sessions/' + sid);
    return 'JavaScript ' + perf.files + ' files, ' + (perf.bytes / 1024).toFixed(0) + ' KiB (' + (perf.wire / 1024).toFixed(0) + ' KiB gzip on the wire); ' +
      'cold load: DOMContentLoaded ' + perf.dcl.toFixed(0) + ' ms, load ' + perf.load.toFixed(0) + ' ms, notebook ready ' + perf.ready.toFixed(0) + ' ms';
  },

  // The terminal panel: opened from the toolbar, a command typed and its
  // output seen, the terminal's size following the panel (stty size) when
  // the window shrinks; /v1/shell/terminal-url opens the page with it.
  async terminal(ctx) {
    const page = await openPage(ctx, {});
    await page.click('#terminal-toggle');
    await page.waitForSelector('#terminal:not([hidden]) .xterm-rows');
    await page.waitForFunction(() => document.getElementById('term-status').textContent === 'connected', null, { timeout: within(20000) });
    const screenText = () => page.evaluate(() => document.querySelector('#term-screen .xterm-rows').innerText);
    const waitScreen = async (re, what) => {
      const end = Date.now() + 15000;
      for (;;) {
        const text = await screenText();
        if (re.test(text)) return text;
        if (Date.now() > end) throw new Error('no ' + what + ' on the terminal: ' + JSON.stringify(text.slice(-600)));
        await sleep(50);
      }
    };
    await page.click('#term-screen');
    await page.keyboard.type('echo hi-$((6*7))\n');
    await waitScreen(/^hi-42\s*$/m, 'the command\'s output');
    const size = async () => page.evaluate(() => [window.AiodTerminal.state.term.rows, window.AiodTerminal.state.term.cols]);
    const [rows, cols] = await size();
    assert(rows >= 10 && cols >= 40, 'terminal size ' + rows + 'x' + cols);
    await page.keyboard.type('stty size\n');
    await waitScreen(new RegExp('^' + rows + ' ' + cols + '\\s*$', 'm'), 'stty size ' + rows + ' ' + cols);
    await page.screenshot({ path: path.join(shotDir, 'terminal.png') });
    await page.setViewportSize({ width: 1000, height: 560 });
    await page.waitForFunction((c) => window.AiodTerminal.state.term.cols < c, cols, { timeout: within(10000) });
    const [rows2, cols2] = await size();
    await page.keyboard.type('clear; stty size\n');
    await waitScreen(new RegExp('^' + rows2 + ' ' + cols2 + '\\s*$', 'm'), 'stty size after the resize');
    await page.setViewportSize(VIEWPORT);
    const name = await page.evaluate(() => window.AiodTerminal.state.name);
    await checkClean(page);
    await page.close();

    const url = (await rest('GET', '/v1/shell/terminal-url')).body.data;
    const page2 = await openPage(ctx, {}, url);
    await page2.waitForSelector('#terminal:not([hidden]) .xterm-rows');
    await page2.waitForFunction(() => document.getElementById('term-status').textContent === 'connected', null, { timeout: within(20000) });
    await checkClean(page2);
    const del = await fetch(origin + '/api/terminals/' + encodeURIComponent(name), { method: 'DELETE', headers: token ? { Authorization: 'Bearer ' + token } : {} });
    assert(del.status === 204 || del.status === 404, 'DELETE the terminal: ' + del.status);
  },

  // With a token, the page works from /?token=T: assets, REST and the socket.
  async token(ctx) {
    assert(token, 'the token scenario needs ?token=T in URL');
    const bare = await rest('GET', '/v2/code/info');
    assert(bare.status === 200, 'the token is not accepted as Bearer');
    const noTok = await fetch(origin + '/');
    assert(noTok.status === 401, 'GET / without the token: ' + noTok.status);
    const page = await openPage(ctx, { session: 'tok-' + rand(), files: '/tmp' });
    await page.waitForFunction(() => document.getElementById('info').textContent.includes('backend'));
    await setCell(page, 0, '1 + 1');
    assert((await runCell(page, 0)).trim() === '2', 'run with a token');
    await page.waitForSelector('#fs-list li');
    const unauth = await page.evaluate(async () => (await fetch('v2/code/info')).status);
    assert(unauth === 401, 'the page\'s origin works without the token: ' + unauth);
    await checkClean(page);
  },
};

// ---- main ----

async function main() {
  fs.mkdirSync(shotDir, { recursive: true });
  const names = flags.only ? flags.only.split(',') : Object.keys(scenarios).filter((n) => n !== 'token' && n !== 'truncation' && n !== 'native' && (n !== 'reconnect' || flags.proxy));
  for (const n of names) assert(scenarios[n], 'unknown scenario ' + n);
  const profile = fs.mkdtempSync(path.join(os.tmpdir(), 'aiod-e2e-chromium-'));
  let ctx;
  let failed = 0;
  try {
    ctx = await chromium.launchPersistentContext(profile, {
      executablePath: CHROMIUM,
      headless: true,
      viewport: VIEWPORT,
      acceptDownloads: true,
      args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
        '--disable-background-networking', '--disable-component-update', '--disable-sync'],
    });
    ctx.setDefaultTimeout(within(30000));
    for (const n of names) {
      const t0 = Date.now();
      try {
        const note = await scenarios[n](ctx);
        console.log('ok ' + n + ' (' + (Date.now() - t0) + ' ms)' + (note ? ' ' + note : ''));
      } catch (e) {
        failed++;
        console.log('FAIL ' + n + ': ' + String(e && e.message || e).split('\n').join(' | '));
      } finally {
        for (const p of ctx.pages()) await p.close().catch(() => {});
      }
    }
  } finally {
    if (ctx) await ctx.close().catch(() => {});
    fs.rmSync(profile, { recursive: true, force: true });
  }
  console.log('e2e summary: ' + (names.length - failed) + ' of ' + names.length + ' scenarios passed');
  process.exitCode = failed ? 1 : 0;
}

main().catch((e) => {
  console.error('e2e: ' + (e && e.stack || e));
  process.exitCode = 1;
});
