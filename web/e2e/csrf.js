#!/usr/bin/env node
// What a hostile web page can make a browser send to aiod, in headless
// Chromium: gateway/security_e2e_test.go serves the attacking page from a
// second HTTP server on another loopback port, starts the gateways, runs
// this file, and then checks the file system for what the attacks would
// have written.
//
//   node web/e2e/csrf.js CONFIG_JSON
//
// CONFIG_JSON is {"resolve": "HOST IP", "scenarios": [...]}, each scenario
//   {"name", "kind": "attack", "page": URL}
//       open URL (the attacking page) and wait for its attempts to settle;
//   {"name", "kind": "notebook", "page": URL}
//       open aiod's notebook page and run one cell;
//   {"name", "kind": "reads", "page": URL}
//       open URL (a page that embeds aiod's answers: <script>, <img>),
//       wait for its attempts to settle, then click its link #dl, which
//       navigates to a download from aiod, and add what was downloaded
//       (as text) to what the page saw, under "download".
// "resolve" maps HOST to IP in Chromium's resolver (--host-resolver-rules),
// which is how the Go test emulates DNS rebinding: the attacker's name
// resolves to a loopback address where its server hands everything but
// its own page on to aiod, Host header and Origin unchanged.
// It prints one line per scenario: "ok NAME JSON" with what the page saw,
// or "FAIL NAME: reason". Judging is left to the Go test.
//
// Chromium is Debian's /usr/bin/chromium; playwright-core comes from
// package-lock.json (npm ci --prefix web/e2e --no-audit --no-fund --ignore-scripts).
'use strict';

const fs = require('fs');
const os = require('os');
const path = require('path');
const { chromium } = require('playwright-core');

const CHROMIUM = process.env.AIOD_CHROMIUM || '/usr/bin/chromium';
const cfg = JSON.parse(process.argv[2] || '{}');

async function attack(ctx, sc) {
  const page = await ctx.newPage();
  try {
    await page.goto(sc.page);
    await page.waitForFunction(() => window.__done === true, null, { timeout: 120000 });
    return await page.evaluate(() => window.__results);
  } finally {
    await page.close();
  }
}

async function reads(ctx, sc) {
  const page = await ctx.newPage();
  try {
    await page.goto(sc.page);
    await page.waitForFunction(() => window.__done === true, null, { timeout: 120000 });
    const seen = await page.evaluate(() => window.__results);
    const [dl] = await Promise.all([page.waitForEvent('download', { timeout: 30000 }), page.click('#dl')]);
    const file = await dl.path();
    seen.download = file ? fs.readFileSync(file, 'utf8') : 'failed: ' + (await dl.failure());
    return seen;
  } finally {
    await page.close();
  }
}

async function notebook(ctx, sc) {
  const page = await ctx.newPage();
  const sockets = [];
  page.on('websocket', (ws) => sockets.push(ws.url()));
  try {
    const resp = await page.goto(sc.page);
    if (resp.status() !== 200) throw new Error('GET ' + sc.page + ': ' + resp.status());
    await page.waitForSelector('#light[data-state="idle"]', { timeout: 30000 });
    const ta = page.locator('#cells .cm-content').first();
    await ta.fill('print(6 * 7)');
    await ta.press('Shift+Enter');
    await page.waitForFunction(() => (document.querySelector('#cells').innerText || '').includes('42'), null, { timeout: 90000 });
    const output = (await page.locator('#cells').innerText()).trim();
    return { output, sockets };
  } finally {
    await page.close();
  }
}

async function main() {
  const profile = fs.mkdtempSync(path.join(os.tmpdir(), 'aiod-e2e-csrf-'));
  const args = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
    '--disable-background-networking', '--disable-component-update', '--disable-sync'];
  if (cfg.resolve) args.push('--host-resolver-rules=MAP ' + cfg.resolve);
  let ctx;
  let failed = 0;
  try {
    ctx = await chromium.launchPersistentContext(profile, { executablePath: CHROMIUM, headless: true, acceptDownloads: true, args });
    for (const sc of cfg.scenarios || []) {
      try {
        const run = { notebook, reads, attack }[sc.kind] || attack;
        const seen = await run(ctx, sc);
        console.log('ok ' + sc.name + ' ' + JSON.stringify(seen));
      } catch (e) {
        failed++;
        console.log('FAIL ' + sc.name + ': ' + String(e && e.message || e).split('\n')[0]);
      }
    }
  } finally {
    if (ctx) await ctx.close();
    fs.rmSync(profile, { recursive: true, force: true });
  }
  process.exit(failed ? 1 : 0);
}

main().catch((e) => {
  console.error(e);
  process.exit(2);
});
