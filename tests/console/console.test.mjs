// Every console page in headless chromium (Debian's, through playwright-core), signed in with
// each role, against the ledger run_console.mjs prepared: the numbers on each page equal the
// JSON API and the CLI (`ferry ledger report`, `ferry policy replay`) for the same data; bad
// policy edits show line:column and do not apply; app keys, anonymous visitors and CSRF-less
// calls are refused; ledger strings are text, never markup; no key reaches a page or a URL.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';

import { chromium } from 'playwright-core';

import { kEditedPolicy, kHostileTask, kKeys } from './run_console.mjs';

const kUrl = process.env.FERRY_CONSOLE_URL;
const kExpected = JSON.parse(fs.readFileSync(process.env.FERRY_CONSOLE_EXPECTED, 'utf8'));
const kShots = process.env.FERRY_CONSOLE_SCREENSHOTS;
const kTimeout = 30000;

let browser;

before(async () => {
  browser = await chromium.launch({
    executablePath: process.env.FERRY_CONSOLE_CHROMIUM,
    headless: true,
    args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage'],
  });
});

after(async () => {
  if (browser) await browser.close();
});

// The JSON endpoint as a script calls it, with a key.
async function api(pathname, key) {
  const res = await fetch(kUrl + pathname, { headers: { authorization: 'Bearer ' + key } });
  assert.equal(res.status, 200, `${pathname}: ${res.status}`);
  return res.json();
}

// A fresh browser context (its own cookies), signed in with `key`.
async function signed_in(key) {
  const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
  const page = await context.newPage();
  page.setDefaultTimeout(kTimeout);
  const errors = [];
  page.on('pageerror', (e) => errors.push(String(e)));
  // A refused fetch (401, 403, 422: asserted where it happens) is logged by chromium; any
  // other console error is a defect of the page.
  page.on('console', (m) => {
    if (m.type() === 'error' && !/Failed to load resource: the server responded with a status of (401|403|422)/.test(m.text())) {
      errors.push(m.text());
    }
  });
  await page.goto(kUrl + '/console/');
  await page.waitForSelector('#signin-form');
  await page.fill('#signin-key', key);
  await page.click('#signin-form button[type=submit]');
  return { context, page, errors };
}

async function visit(page, hash, selector) {
  await page.evaluate((h) => { location.hash = h; }, hash);
  await page.waitForSelector(selector);
}

async function shot(page, name) {
  await page.screenshot({ path: path.join(kShots, name + '.png'), fullPage: true });
}

// No key in the page's markup or its URL.
async function assert_no_key(page) {
  const html = await page.content();
  for (const k of Object.values(kKeys)) {
    assert.ok(!html.includes(k), 'a key is in the page');
    assert.ok(!page.url().includes(k), 'a key is in the URL');
  }
}

async function cells(page, table, column) {
  return page.$$eval(`#${table} tbody td[data-col="${column}"]`, (tds) => tds.map((td) => td.textContent));
}

describe('the console in chromium', () => {
  test('an app key and a wrong key are refused at sign-in', async () => {
    const { context, page } = await signed_in(kKeys.alpha);
    await page.waitForFunction(() => document.querySelector('#signin-error').textContent !== '');
    assert.match(await page.textContent('#signin-error'), /finance and admin keys/);
    assert.equal(await page.isHidden('#nav'), true);
    assert.equal((await context.cookies()).length, 0, 'no session cookie for an app key');
    await shot(page, 'signin-refused');
    const anon = await page.evaluate(async () => (await fetch('/console/api/v1/ledger/report')).status);
    assert.equal(anon, 401);
    await context.close();
  });

  test('finance: spend equals `ferry ledger report`, cookie flags, no admin pages', async () => {
    const { context, page, errors } = await signed_in(kKeys.finance);
    await page.waitForSelector('#spend-total');
    const cookies = await context.cookies();
    assert.equal(cookies.length, 1);
    assert.equal(cookies[0].name, 'ferry_console');
    assert.equal(cookies[0].httpOnly, true);
    assert.equal(cookies[0].sameSite, 'Strict');
    assert.equal(cookies[0].path, '/console');
    assert.equal(await page.evaluate(() => document.cookie), '', 'the cookie is not readable by script');
    // Totals to the micro-unit, as the CLI reports them.
    assert.equal(await page.getAttribute('#spend-total', 'data-total'), kExpected.report_team.totals.cost.total);
    assert.equal(await page.textContent('#spend-requests'), String(kExpected.report_team.totals.requests));
    // Weekly and monthly buckets keep the total.
    for (const bucket of ['week', 'month', 'day']) {
      await page.selectOption('select >> nth=0', bucket);
      await page.waitForSelector(`#spend-total[data-bucket="${bucket}"]`);
      assert.equal(await page.getAttribute('#spend-total', 'data-total'), kExpected.report_team.totals.cost.total);
    }
    // A filter: team alpha equals `ferry ledger report --team alpha`.
    await page.fill('.controls input[type=text] >> nth=0', 'alpha');
    await page.dispatchEvent('.controls input[type=text] >> nth=0', 'change');
    await page.waitForSelector('#spend-total[data-team="alpha"]');
    assert.equal(await page.getAttribute('#spend-total', 'data-total'), kExpected.report_team_alpha.totals.cost.total);
    assert.notEqual(kExpected.report_team_alpha.totals.cost.total, kExpected.report_team.totals.cost.total);
    await shot(page, 'spend');
    // The CSV link is the CLI's own report (`--by day,team --team alpha --format csv`).
    const csv = await page.evaluate(async () => (await fetch(document.querySelector('a.csv').getAttribute('href'))).text());
    assert.equal(csv, kExpected.report_csv_day_team);
    // Admin pages are neither offered nor served.
    assert.equal(await page.$('a[href="#/policy"]'), null);
    const status = await page.evaluate(async () => (await fetch('/console/api/admin/keys')).status);
    assert.equal(status, 403);
    await assert_no_key(page);
    assert.deepEqual(errors, []);
    await context.close();
  });

  test('finance: local vs GPU, cost per task, top tasks and a drill-down equal the API', async () => {
    const { context, page, errors } = await signed_in(kKeys.finance);
    await page.waitForSelector('#spend-total');
    const local = await api('/v1/ledger/local', kKeys.finance);
    await visit(page, '#/local', '#local-request-share');
    assert.equal(await page.textContent('#local-request-share'), local.local_request_share_pct + ' %');
    assert.equal(await page.textContent('#local-saved'), local.local.saved);
    assert.ok(local.local.requests > 0, 'some requests were answered locally');
    await shot(page, 'local');

    const tasks = await api('/v1/ledger/tasks', kKeys.finance);
    await visit(page, '#/tasks', '#tasks-table');
    assert.deepEqual(await cells(page, 'tasks-table', 'status'), tasks.rows.map((r) => r.status));
    assert.deepEqual(await cells(page, 'tasks-table', 'cost_per_task'), tasks.rows.map((r) => r.cost_per_task));
    assert.ok(tasks.rows.some((r) => r.status === 'open'), 'a task never marked is open');
    await shot(page, 'tasks');

    const top = await api('/v1/ledger/top_tasks?limit=20', kKeys.finance);
    await visit(page, '#/top', '#top-tasks-table');
    const ids = await cells(page, 'top-tasks-table', 'task');
    assert.deepEqual(ids, top.tasks.map((t) => t.task));
    assert.deepEqual(await cells(page, 'top-tasks-table', 'cost'), top.tasks.map((t) => t.cost));
    // The hostile task id is text: no script ran, no element was made from it.
    assert.ok(ids.includes(kHostileTask));
    assert.equal(await page.evaluate(() => window.__ferry_xss), undefined);
    assert.equal(await page.$$eval('#top-tasks-table img, #top-tasks-table script', (e) => e.length), 0);
    await shot(page, 'top-tasks');

    // Drill down into the most expensive task.
    const drill = await api('/v1/ledger/task_requests?task=' + encodeURIComponent(top.tasks[0].task), kKeys.finance);
    await page.click('#top-tasks-table tbody tr >> nth=0');
    await page.waitForSelector('#task-requests-table');
    assert.deepEqual(await cells(page, 'task-requests-table', 'request_id'), drill.requests.map((r) => r.request_id));
    assert.deepEqual(await cells(page, 'task-requests-table', 'cost_total'), drill.requests.map((r) => r.cost_total));
    assert.ok((await cells(page, 'task-requests-table', 'chain')).every((c) => c === 'verifies'));
    await shot(page, 'task-drilldown');
    // The hostile task's own page.
    await page.evaluate((h) => { location.hash = h; }, '#/task/' + encodeURIComponent(kHostileTask));
    await page.waitForFunction((t) => document.querySelector('#page h1')?.textContent === t, 'Task ' + kHostileTask);
    assert.ok((await page.$$('#task-requests-table tbody tr')).length > 0);
    assert.equal(await page.evaluate(() => window.__ferry_xss), undefined);

    const budgets = await api('/v1/ledger/budgets', kKeys.finance);
    await visit(page, '#/budgets', '#budgets-table');
    assert.deepEqual(await cells(page, 'budgets-table', 'spent'), budgets.budgets.map((b) => b.spent));
    assert.deepEqual(await cells(page, 'budgets-table', 'limit'), budgets.budgets.map((b) => b.limit));
    await shot(page, 'budgets');
    await assert_no_key(page);
    assert.deepEqual(errors, []);
    await context.close();
  });

  test('admin: policy status, validation as you type, a bad edit does not apply', async () => {
    const { context, page, errors } = await signed_in(kKeys.admin);
    await page.waitForSelector('#policy-version');
    const status = await api('/admin/policy', kKeys.admin);
    assert.equal(await page.textContent('#policy-version'), status.version);
    // A bad edit: the server's loader finds it at line:column.
    const bad = 'targets:\n  gpu: gpt-test\nrules:\n  - id: x\n    when: { colour: red }\n    route: [gpu]\n';
    await page.fill('#policy-editor', bad);
    await page.waitForSelector('#policy-errors li');
    const shown = await page.textContent('#policy-errors li');
    const res = await fetch(kUrl + '/admin/policy/validate', { method: 'POST', body: bad,
                                                                headers: { authorization: 'Bearer ' + kKeys.admin } });
    const validated = await res.json();
    assert.equal(validated.valid, false);
    assert.ok(shown.startsWith(`${validated.errors[0].line}:${validated.errors[0].column}: `), shown);
    await shot(page, 'policy-invalid');
    await page.click('#policy-apply');
    await page.waitForSelector('#apply-errors li');
    assert.equal((await api('/admin/policy', kKeys.admin)).version, status.version, 'the bad edit did not apply');
    // A CSRF-less POST from the page is refused.
    const forged = await page.evaluate(async () => (await fetch('/console/api/admin/policy/validate',
                                                                 { method: 'POST', body: 'x' })).status);
    assert.equal(forged, 403);
    await assert_no_key(page);
    assert.deepEqual(errors, []);
    await context.close();
  });

  test('admin: the what-if shows `ferry policy replay`, then applies', async () => {
    const { context, page, errors } = await signed_in(kKeys.admin);
    await page.waitForSelector('#policy-editor');
    await page.fill('#policy-editor', kEditedPolicy);
    await page.waitForSelector('#policy-valid');
    await page.fill('#whatif-days', '3650');
    await page.click('#whatif-run');
    await page.waitForSelector('#whatif-moved');
    assert.equal(await page.textContent('#whatif-moved'), String(kExpected.replay.moved));
    assert.equal(await page.textContent('#whatif-replayed'), String(kExpected.replay.replayed));
    assert.equal(await page.textContent('#whatif-difference'), String(kExpected.replay.difference));
    assert.ok(kExpected.replay.moved > 0, 'the edit moves requests');
    await shot(page, 'policy-whatif');
    await page.click('#policy-apply');
    await page.waitForSelector('#apply-ok');
    const now = await api('/admin/policy', kKeys.admin);
    assert.match(await page.textContent('#apply-ok'), new RegExp(now.version));
    for (const [hash, selector, name] of [['#/explain', '#explain-run', 'explain'],
                                          ['#/backends', '#backends-table', 'backends'],
                                          ['#/keys', '#keys-table', 'keys']]) {
      await visit(page, hash, selector);
      if (name === 'explain') {
        await page.fill('#explain-body', JSON.stringify({ model: 'chat', max_tokens: 8,
                                                          messages: [{ role: 'user', content: 'hi' }] }));
        await page.click('#explain-run');
        await page.waitForSelector('#explain-decision');
        // Or a recent request: the policy over the facts its row recorded, as the API says.
        const recent = await api('/admin/route/recent', kKeys.admin);
        assert.ok(recent.requests.length > 0, 'recent requests with facts');
        await page.selectOption('#explain-recent', recent.requests[0].id);
        await page.evaluate(() => { document.getElementById('explain-out').replaceChildren(); });
        await page.click('#explain-run');
        await page.waitForSelector('#explain-decision');
        const recorded = await api('/admin/route/explain_recorded?request=' + encodeURIComponent(recent.requests[0].id), kKeys.admin);
        const d = recorded.decision || {};
        assert.equal(await page.textContent('#explain-decision'), JSON.stringify(d.targets || d.action || d));
      }
      if (name === 'backends') {
        // The page is /admin/backends: each target, its backend, health and breaker state.
        const backends = await api('/admin/backends', kKeys.admin);
        assert.ok(backends.backends.length > 0);
        for (const col of ['target', 'backend', 'kind', 'circuit']) {
          assert.deepEqual(await cells(page, 'backends-table', col), backends.backends.map((b) => String(b[col])));
        }
        assert.deepEqual(await cells(page, 'backends-table', 'healthy'),
                         backends.backends.map((b) => (b.healthy ? 'yes' : 'no')));
      }
      await shot(page, name);
    }
    const keys = await api('/admin/keys', kKeys.admin);
    assert.deepEqual(await cells(page, 'keys-table', 'id'), keys.keys.map((k) => k.id));
    // Keys in the store: created on the page (the secret shown once), working for scripts,
    // revoked from the page, then refused (every instance re-reads the keys each second).
    await page.fill('#key-id', 'console-made');
    await page.selectOption('#key-role', 'finance');
    await page.fill('#key-team', 'money');
    await page.click('#key-create');
    await page.waitForSelector('#key-secret');
    const secret = await page.textContent('#key-secret');
    assert.match(secret, /^fk-[0-9a-f]{48}$/);
    await shot(page, 'keys-created');
    const status_with = async (key) =>
      (await fetch(kUrl + '/v1/ledger/report?by=team', { headers: { authorization: 'Bearer ' + key } })).status;
    const until = async (key, want) => {
      for (let i = 0; i < 300; i++) {
        if ((await status_with(key)) === want) return true;
        await new Promise((r) => setTimeout(r, 100));
      }
      return false;
    };
    assert.ok(await until(secret, 200), 'the new key works');
    const listed = await api('/admin/keys', kKeys.admin);
    assert.ok(!JSON.stringify(listed).includes(secret), 'the list never holds the secret');
    await visit(page, '#/spend', '#spend-total');
    await visit(page, '#/keys', '#keys-table');
    assert.equal(await page.$('#key-secret'), null, 'shown once: not after a reload');
    await page.click('button.revoke[data-key="console-made"]');
    await page.waitForFunction(() => [...document.querySelectorAll('#keys-table td[data-col="state"]')]
      .some((td) => td.textContent.startsWith('revoked')));
    assert.ok(await until(secret, 401), 'the revoked key is refused');
    await shot(page, 'keys-revoked');
    await visit(page, '#/spend', '#spend-total');
    await shot(page, 'admin-spend');
    await assert_no_key(page);
    // Sign out: the session is gone.
    await page.click('#signout');
    await page.waitForSelector('#signin-form');
    const after_out = await page.evaluate(async () => (await fetch('/console/api/v1/ledger/report')).status);
    assert.equal(after_out, 401);
    assert.deepEqual(errors, []);
    await context.close();
  });
});
