#!/usr/bin/env node
// End-to-end tests of aiod's notebook page in headless Chromium.
//
//   node web/e2e/run.js URL SCREENSHOT_DIR [--only=a,b] [--proxy=URL --drop=URL]
//
// URL is the page (http://127.0.0.1:PORT/, with ?token=T when the daemon has
// a token). --proxy is the same page through a TCP proxy, and a POST to
// --drop cuts every connection through that proxy: the reconnect scenario
// needs both. gateway/web_e2e_test.go starts the daemon and the proxy and
// runs this file; it reads one line per scenario, "ok NAME (MS ms)" or
// "FAIL NAME: reason", and the exit status (0 only when all passed).
//
// Chromium is Debian's /usr/bin/chromium (apt-get install -y chromium); no
// browser is downloaded. playwright-core comes from package-lock.json:
// npm ci --prefix web/e2e --no-audit --no-fund --ignore-scripts.
'use strict';

const fs = require('fs');
const os = require('os');
const path = require('path');
const { chromium } = require('playwright-core');

const CHROMIUM = process.env.AIOD_CHROMIUM || '/usr/bin/chromium';
const TITLE = 'aiod notebook';

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
    document.addEventListener('securitypolicyviolation', (e) => window.__csp.push(e.violatedDirective + ' ' + e.blockedURI));
  });
  const resp = await page.goto(u.href);
  page.response = resp;
  assert(resp.status() === 200, 'GET ' + u.href + ': status ' + resp.status());
  await waitLight(page, 'idle');
  return page;
}

async function waitLight(page, s, timeout) {
  await page.waitForSelector('#light[data-state="' + s + '"]', { timeout: timeout || 15000 });
}

function cell(page, i) {
  return page.locator('#cells > .cell:not(.watched)').nth(i);
}

// setCell puts code in the i-th cell, adding cells as needed. With typed,
// the code is typed key by key, as a person would.
async function setCell(page, i, code, opts) {
  opts = opts || {};
  while (await page.locator('#cells > .cell:not(.watched)').count() <= i) {
    await page.click(opts.language === 'javascript' ? '#add-javascript' : '#add-python');
  }
  const c = cell(page, i);
  if (opts.language) await c.locator('select.lang').selectOption(opts.language);
  const ta = c.locator('textarea');
  if (opts.typed) {
    await ta.fill('');
    await ta.pressSequentially(code);
  } else {
    await ta.fill(code);
  }
  return c;
}

// runCell runs the i-th cell with Shift+Enter and, unless told not to,
// waits for it to finish; it returns the outputs' text.
async function runCell(page, i, opts) {
  opts = opts || {};
  const c = cell(page, i);
  await c.locator('textarea').press('Shift+Enter');
  if (opts.wait === false) return '';
  await page.waitForFunction((el) => el.dataset.state !== 'running', await c.elementHandle(), { timeout: opts.timeout || 60000 });
  return c.locator('.outputs').innerText();
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

async function checkClean(page) {
  const csp = await page.evaluate(() => window.__csp);
  for (const v of csp) page.problems.push('CSP violation in the page: ' + v);
  assert(page.problems.length === 0, page.problems.join('; '));
}

// ---- scenarios ----

const SALES = 'month,revenue,cost\n2026-01,120,80\n2026-02,135,82\n2026-03,150,90\n' +
  '2026-04,142,95\n2026-05,168,99\n2026-06,180,104\n';

const scenarios = {
  // The page's analysis walkthrough, typed into cells: the CSV uploaded
  // through the file panel, describe(), df.head(3) as a table in a sandboxed
  // frame, a chart inline, the saved plot.png shown from the file panel.
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

    await page.click('#fs-form button');
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
    const settled = () => page.waitForFunction(() => [...document.querySelectorAll('#cells > .cell')].every((c) => c.dataset.state !== 'running' && c.dataset.state !== 'idle'), null, { timeout: 60000 });
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

  // Three lines printed 0.3 s apart appear one by one.
  async streaming(ctx) {
    const sid = 'stream-' + rand();
    const page = await openPage(ctx, { session: sid });
    await setCell(page, 0, 'import time\nfrom datetime import datetime\nfor i in range(3):\n    print(f"line {i} at {datetime.now():%H:%M:%S.%f}"[:-3], flush=True)\n    time.sleep(0.3)\nprint("done")');
    await observe(page, 0);
    await runCell(page, 0, { wait: false });
    await page.waitForFunction(() => (window.__seen || []).some((s) => s.text.includes('line 1')), null, { timeout: 30000 });
    await waitLight(page, 'busy', 1000);
    await page.screenshot({ path: path.join(shotDir, 'streaming.png') });
    await page.waitForFunction((el) => el.dataset.state !== 'running', await cell(page, 0).elementHandle(), { timeout: 30000 });
    const seen = await page.evaluate(() => window.__seen);
    const first = [0, 1, 2].map((i) => {
      const s = seen.find((x) => x.text.includes('line ' + i));
      return s ? s.t : NaN;
    });
    const gaps = [first[1] - first[0], first[2] - first[1]];
    assert(gaps.every((g) => g > 150 && g < 2000), 'lines did not arrive one by one, 0.3 s apart: gaps ' + gaps.map((g) => g.toFixed(0)).join(', ') + ' ms');
    assert(!seen.find((x) => x.t < first[1]).text.includes('line 1'), 'line 1 was there before it was printed');
    await waitLight(page, 'idle');
    await checkClean(page);
    await rest('DELETE', '/v2/code/sessions/' + sid);
    return 'gaps ' + gaps.map((g) => g.toFixed(0)).join(' ms, ') + ' ms';
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
    await page.waitForSelector('.cell.watched .outputs:has-text("agent step 0")', { timeout: 30000 });
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
    await cell(page, 0).locator('.outputs:has-text("looping")').waitFor({ timeout: 60000 });
    await sleep(300);
    const t0 = Date.now();
    await page.click('#interrupt');
    await page.waitForFunction((el) => el.dataset.state !== 'running', await cell(page, 0).elementHandle(), { timeout: 10000 });
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
    await page.waitForSelector('#watch-badge:not([hidden])', { timeout: 5000 });
    assert((await cell(page, 0).locator('.outputs').innerText()).includes('before the drop'), 'the page lost its outputs');

    const r = await rest('POST', '/v2/code/execute', { language: 'python', session_id: sid, code: 'print("agent after the drop", y)' });
    assert(r.body.success, 'agent call: ' + JSON.stringify(r.body));
    await page.waitForSelector('.cell.watched .outputs:has-text("agent after the drop 1")', { timeout: 10000 });
    await setCell(page, 1, 'y + 1');
    const out = await runCell(page, 1);
    assert(out.trim() === '2', 'run after reconnect: ' + out);
    await checkClean(page);
    await rest('DELETE', '/v2/code/sessions/' + sid);
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
  const names = flags.only ? flags.only.split(',') : Object.keys(scenarios).filter((n) => n !== 'token' && n !== 'truncation' && (n !== 'reconnect' || flags.proxy));
  for (const n of names) assert(scenarios[n], 'unknown scenario ' + n);
  const profile = fs.mkdtempSync(path.join(os.tmpdir(), 'aiod-e2e-chromium-'));
  let ctx;
  let failed = 0;
  try {
    ctx = await chromium.launchPersistentContext(profile, {
      executablePath: CHROMIUM,
      headless: true,
      viewport: { width: 1280, height: 860 },
      acceptDownloads: true,
      args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
        '--disable-background-networking', '--disable-component-update', '--disable-sync'],
    });
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
