// A spent hard budget through the official `openai` client at its default retry settings: one
// call is one request and one 429 that the SDK does not retry (x-should-retry: false), with the
// error code `budget_exceeded` and the reset time in x-ferry-budget-reset, not in Retry-After.
// Servers: tests/conformance/run_local.mjs (key local-broke, budget broke-monthly).
import assert from 'node:assert/strict';
import { test } from 'node:test';
import OpenAI from 'openai';

const kBaseUrl = process.env.FERRY_BASE_URL;
const kAdminKey = process.env.FERRY_ADMIN_KEY;
const kBrokeKey = process.env.FERRY_BROKE_KEY;
if (!kBaseUrl || !kBrokeKey) throw new Error('run through run_local.mjs (ctest -L conformance)');

async function ledger_rows(query) {
  const res = await fetch(`${kBaseUrl}/ledger/export.csv?${query}`,
                          { headers: { authorization: `Bearer ${kAdminKey}` } });
  assert.equal(res.status, 200);
  const lines = (await res.text()).trim().split('\n');
  const header = lines[0].split(',');
  return lines.slice(1).map((l) => {
    const cells = l.split(',');
    return Object.fromEntries(header.map((h, i) => [h, cells[i]]));
  });
}

test('a spent budget is one request and one 429 at the default retry settings', async () => {
  let sent = 0;
  const counting_fetch = (...args) => {
    ++sent;
    return fetch(...args);
  };
  // Default maxRetries (2) and timeout: only the server's answer keeps the SDK from retrying.
  const client = new OpenAI({ baseURL: kBaseUrl, apiKey: kBrokeKey, fetch: counting_fetch });
  const task = 'budget-no-retry';
  const err = await client.chat.completions
      .create({ model: 'remote', messages: [{ role: 'user', content: 'spend' }], max_tokens: 4 },
              { headers: { 'x-ferry-task': task } })
      .catch((e) => e);
  assert.equal(err.status, 429, String(err));
  assert.equal(err.code, 'budget_exceeded');
  assert.equal(err.param, 'broke-monthly');
  assert.equal(err.headers.get('x-should-retry'), 'false');
  assert.equal(err.headers.get('retry-after'), null);
  const reset = err.headers.get('x-ferry-budget-reset');
  assert.match(reset ?? '', /^\d{4}-\d\d-01T00:00:00\.000000Z$/, `reset ${reset}`);
  assert.ok(Date.parse(reset) > Date.now(), 'the reset is in the future');
  assert.equal(sent, 1, 'the SDK sent the request once');

  // A refusal's row is queued, not awaited before the 429 (it costs nothing): wait until the
  // ledger's writer has committed it, then there must be exactly one.
  let rows = [];
  for (let i = 0; i < 200 && rows.length === 0; ++i) {
    rows = await ledger_rows(`task=${task}`);
    if (rows.length === 0) await new Promise((r) => setTimeout(r, 25));
  }
  assert.equal(rows.length, 1, 'one ledger row for the one refused call');
  assert.equal(rows[0].http_status, '429');
});
