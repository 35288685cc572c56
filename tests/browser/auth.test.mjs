// Signing in and out of the web UI of a 3-replica cell with auth on (run by tests/browser/run
// inside the cell's client namespace; the admin's token is the cell's, from scripts/cell up
// --auth on). The sign-in page; a wrong token refused with a clear message and not kept; the
// admin's token signing in; the token sent as a header and never in a URL; signing out stops the
// page's streams, and what the page asks the API after carries no token. Then a token whose role
// reads and watches only key:cfg/: the Keys page lists cfg/ and opens a key by name, and a watch
// refused (403) is said on the page and not asked again.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { artifacts, cell, eventually, openPage } from './harness.mjs';

const origin = new URL(cell.replicas[0].http).origin;
const token = cell.admin_token;
const requests = [];  // every request the page made, in order: {url, authorization}
// Chromium logs each 401 the page gets as a console error, and the refusals are the point here.
const expectedConsoleErrors = [/status of 401/];
const admin = (method, path, body) => fetch(`${origin}${path}`, {
  method, body: JSON.stringify(body), headers: { Authorization: `Bearer ${token}`, 'Content-Type': 'application/json' },
}).then(async (response) => {
  assert.ok(response.ok, `${method} ${path}: ${response.status}`);
  return response.json();
});
let browser;
let page;
let problems;

const storedToken = () => page.evaluate(() => sessionStorage.getItem('voltlock-token'));
const signInShown = () => page.getByRole('heading', { name: 'Sign in' }).waitFor();

before(async () => {
  ({ browser, page, problems } = await openPage(origin, { width: 1280, height: 860 }, expectedConsoleErrors));
  page.on('request', (request) => requests.push({ url: request.url(), authorization: request.headers().authorization }));
  await page.goto(`${origin}/ui/`);
});

after(async () => {
  if (browser) await browser.close();
});

test('the UI of a cell with auth on opens on the sign-in page', async () => {
  await signInShown();
  assert.equal(await page.locator('#sign-out').isVisible(), false);
  assert.equal(await page.locator('article.card').count(), 0);
});

test('a wrong token is refused with a clear message and is not kept', async () => {
  await page.getByLabel('Token').fill(`vl_${'0'.repeat(64)}`);
  await page.getByRole('button', { name: 'Sign in' }).click();
  const refusal = page.getByRole('alert');
  await refusal.waitFor();
  assert.match(await refusal.innerText(), /^The cell did not accept that token: .+\. Check it and try again\.$/);
  assert.equal(await storedToken(), null);
  await signInShown();
  await page.screenshot({ path: `${artifacts}/sign-in-refused.png` });
});

test("the admin's token signs in and the Cell page loads", async () => {
  await page.getByLabel('Token').fill(token);
  await page.getByRole('button', { name: 'Sign in' }).click();
  await page.locator('article.card').nth(2).waitFor();
  await page.locator('article[data-state="leader"]').waitFor();
  await page.getByRole('button', { name: 'Sign out' }).waitFor();
  assert.equal(await storedToken(), token);
  assert.ok(requests.some((r) => r.url.includes('/v1/cluster/replicas') && r.authorization === `Bearer ${token}`),
    'the Cell page polls with the token');
  await page.screenshot({ path: `${artifacts}/signed-in-laptop.png` });
  await page.setViewportSize({ width: 390, height: 844 });
  await page.screenshot({ path: `${artifacts}/signed-in-phone.png` });
  await page.setViewportSize({ width: 1280, height: 860 });
});

test('a watch stream sends the token as a header too', async () => {
  await page.evaluate(() => { location.hash = '#/keys'; });
  await eventually('the Keys page opened a watch with the token', () =>
    requests.some((r) => r.url.includes('/v1/watch/') && r.authorization === `Bearer ${token}`));
});

test('signing out shows the sign-in page, ends the watch, and later requests carry no token', async () => {
  await page.getByLabel('Prefix or key').fill('private/');
  await page.getByRole('button', { name: 'List' }).click();
  await eventually('the Keys page watches the prefix', () =>
    requests.some((r) => r.url.includes('/v1/watch/private%2F')));
  assert.equal(await page.evaluate(() => sessionStorage.getItem('key-prefix')), 'private/');
  const watchEnded = page.waitForEvent('requestfailed', (r) => r.url().includes('/v1/watch/'));
  const signedOutAt = requests.length;
  await page.getByRole('button', { name: 'Sign out' }).click();
  await signInShown();
  await watchEnded;
  assert.equal(await storedToken(), null);
  assert.equal(await page.evaluate(() => sessionStorage.length), 0, 'what the tab looked at is forgotten');
  assert.equal(await page.locator('#sign-out').isVisible(), false);
  // A page opened after signing out asks the API without a token, is refused, and the sign-in
  // page comes back.
  await page.evaluate(() => { location.hash = '#/locks'; });
  await eventually('the Locks page asked the API', () =>
    requests.slice(signedOutAt).some((r) => new URL(r.url).pathname === '/v1/locks'));
  await signInShown();
  const later = requests.slice(signedOutAt).filter((r) => new URL(r.url).pathname.startsWith('/v1/'));
  for (const r of later) assert.equal(r.authorization, undefined, `${r.url} carried a token`);
});

test('a token that reads only key:cfg/ lists cfg/ on the Keys page and is told what it lacks', async () => {
  await admin('PUT', '/v1/auth/roles/cfg-reader', { grants: [{ permissions: ['read', 'watch'], resource: 'key:cfg/' }] });
  await admin('PUT', '/v1/auth/users/cfg-reader', { roles: ['cfg-reader'] });
  const limited = (await admin('POST', '/v1/auth/tokens', { user: 'cfg-reader' })).token;
  await admin('PUT', '/v1/kv/cfg/a', { value: 'one' });
  await admin('PUT', '/v1/kv/other/b', { value: 'two' });
  expectedConsoleErrors.push(/status of 403/);
  await page.getByLabel('Token').fill(limited);
  await page.getByRole('button', { name: 'Sign in' }).click();
  await page.getByRole('button', { name: 'Sign out' }).waitFor();

  await page.evaluate(() => { location.hash = '#/keys'; });
  await page.locator('#key-tree', { hasText: "Cannot list all keys: user 'cfg-reader' lacks the read permission on key ''" }).waitFor();
  await page.getByLabel('Prefix or key').fill('cfg/a');
  await page.getByRole('button', { name: 'Open key' }).click();
  assert.equal(await page.locator('#key-value').inputValue(), 'one');
  await page.getByLabel('Prefix or key').fill('cfg/');
  await page.getByRole('button', { name: 'List' }).click();
  await page.locator('button[data-key="cfg/a"]').waitFor();
  await page.getByText('Live: changes appear as they commit.').waitFor();
  assert.equal(await page.locator('button[data-key="other/b"]').count(), 0);
});

test('a watch refused with 403 is said on the page and not asked again', async () => {
  // The Sessions page watches every space, which needs watch on every name.
  const before = requests.length;
  await page.evaluate(() => { location.hash = '#/sessions'; });
  await page.locator('.notice-error', { hasText: "Not live: the watch stream was refused: user 'cfg-reader' lacks the watch permission" }).waitFor();
  await page.waitForTimeout(2500);  // the old retry asked again every second
  const watches = requests.slice(before).filter((r) => r.url.includes('/v1/watch/'));
  assert.equal(watches.length, 1, watches.map((r) => r.url).join(', '));
});

test('no request URL the page made holds the token', () => {
  assert.ok(requests.length > 10, `only ${requests.length} requests were seen`);
  for (const r of requests) assert.ok(!r.url.includes(token), `the token is in ${r.url}`);
});

test('no console errors but the 401s, no failed requests, no request to another origin', () => {
  assert.deepEqual(problems, []);
});
