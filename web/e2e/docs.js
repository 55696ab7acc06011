#!/usr/bin/env node
// Opens aiod's /docs page (the OpenAPI document rendered by
// gateway/openapi/docs) in headless Chromium and prints one JSON line with
// what it shows: the operations rendered, the filter at work, console
// errors and CSP violations. gateway/e2e/docs_test.go judges it.
//
//   node web/e2e/docs.js URL SCREENSHOT.png
'use strict';

const { chromium } = require('playwright-core');

const CHROMIUM = process.env.AIOD_CHROMIUM || '/usr/bin/chromium';
const [url, shot] = process.argv.slice(2);

(async () => {
  const browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox'] });
  const out = { errors: [], violations: [], requests: [] };
  try {
    const page = await browser.newPage({ viewport: { width: 1280, height: 800 } });
    await page.addInitScript(() => {
      window.__csp = [];
      document.addEventListener('securitypolicyviolation', (e) => window.__csp.push(e.violatedDirective + ' ' + e.blockedURI));
    });
    page.on('console', (m) => { if (m.type() === 'error') out.errors.push(m.text()); });
    page.on('pageerror', (e) => out.errors.push(String(e)));
    page.on('request', (r) => out.requests.push(new URL(r.url()).origin));
    const resp = await page.goto(url);
    out.status = resp.status();
    await page.waitForSelector('body[data-ready]', { timeout: 30000 });
    out.operations = await page.locator('section.op').count();
    out.title = await page.locator('#title').innerText();
    out.version = await page.locator('#version').innerText();
    out.hasExecute = await page.locator('section.op h2', { hasText: '/v2/code/execute' }).count();
    out.executeSchema = await page.locator('section.op', { hasText: '/v2/code/execute' }).first().locator('pre').first().innerText();
    await page.fill('#filter', '/v1/nodejs');
    out.filtered = await page.locator('section.op:not(.hidden)').count();
    await page.fill('#filter', '');
    if (shot) await page.screenshot({ path: shot });
    out.violations = await page.evaluate(() => window.__csp);
  } catch (e) {
    out.failure = String(e && e.stack ? e.stack : e);
  } finally {
    await browser.close();
  }
  out.requests = [...new Set(out.requests)];
  console.log(JSON.stringify(out));
})();
