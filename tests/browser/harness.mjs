// What the browser tier's tests share (tests/browser/run runs each inside the client namespace
// of its own cell, named by $VL_CELL_FILE): the cell, headless Chromium with a page that records
// everything that goes wrong, and waiting for a condition with a deadline, never a fixed sleep.
import { createRequire } from 'node:module';
import { readFileSync } from 'node:fs';

export const repo = new URL('../../', import.meta.url).pathname;
const { chromium } = createRequire(repo + 'webui/package.json')('playwright-core');
export const cell = JSON.parse(readFileSync(process.env.VL_CELL_FILE, 'utf8'));
export const artifacts = process.env.VL_BROWSER_ARTIFACTS;

export async function eventually(what, check, timeoutMs = 10000) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const result = await check();
    if (result) return result;
    if (Date.now() > deadline) throw new Error(`not within ${timeoutMs} ms: ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

// A page in headless Chromium, for the UI served by `origin`. `problems` collects console errors
// (but those matching a regex in `expectedConsoleErrors`, which a step may push to while it
// provokes one), page errors, failed requests (but a watch stream aborted on leaving a page) and
// requests to any other origin.
export async function openPage(origin, viewport, expectedConsoleErrors = []) {
  const browser = await chromium.launch({ executablePath: process.env.VL_CHROMIUM, args: ['--no-sandbox'] });
  const page = await browser.newPage({ viewport });
  const problems = [];
  page.on('console', (message) => {
    if (message.type() !== 'error') return;
    if (expectedConsoleErrors.some((pattern) => pattern.test(message.text()))) return;
    problems.push(`console: ${message.text()}`);
  });
  page.on('pageerror', (error) => problems.push(`page error: ${error.message}`));
  page.on('request', (request) => {
    const url = new URL(request.url());
    if (url.protocol !== 'data:' && url.origin !== origin) problems.push(`request to another origin: ${request.url()}`);
  });
  page.on('requestfailed', (request) => {
    if (request.failure().errorText === 'net::ERR_ABORTED' && request.url().includes('/v1/watch/')) return;
    problems.push(`request failed: ${request.url()} ${request.failure().errorText}`);
  });
  return { browser, page, problems };
}
