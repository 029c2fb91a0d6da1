// Shared set-up for the conformance tests: an `openai` client pointed at the ferry that
// run_conformance.mjs started (FERRY_BASE_URL, FERRY_API_KEY), with retries off.
import assert from 'node:assert/strict';
import OpenAI from 'openai';

export const kBaseUrl = process.env.FERRY_BASE_URL;
export const kRootUrl = process.env.FERRY_ROOT_URL;
export const kApiKey = process.env.FERRY_API_KEY;
export const kUpstreamUrl = process.env.FERRY_UPSTREAM_URL;

if (!kBaseUrl || !kApiKey) {
  throw new Error('FERRY_BASE_URL and FERRY_API_KEY are unset: run these tests through ' +
                  'run_conformance.mjs (ctest -L conformance)');
}

export function make_client(options = {}) {
  return new OpenAI({ baseURL: kBaseUrl, apiKey: kApiKey, maxRetries: 0, timeout: 30000,
                      ...options });
}

export const kMessages = [
  { role: 'system', content: 'You are a test.' },
  { role: 'user', content: 'Say hello to the conformance suite.' },
];
// ferry_test_upstream's `echo` answers "echo: " + the last user message.
export const kEchoed = 'echo: Say hello to the conformance suite.';

// The request the test upstream received last (its /_last_request introspection endpoint).
export async function upstream_last_request() {
  const res = await fetch(`${kUpstreamUrl}/_last_request`);
  assert.equal(res.status, 200);
  return res.json();
}

export function assert_usage(usage) {
  assert.ok(usage, 'usage is present');
  assert.equal(typeof usage.prompt_tokens, 'number');
  assert.equal(typeof usage.completion_tokens, 'number');
  assert.equal(typeof usage.total_tokens, 'number');
  assert.ok(usage.prompt_tokens > 0, 'prompt_tokens > 0');
  assert.ok(usage.completion_tokens > 0, 'completion_tokens > 0');
  assert.equal(usage.total_tokens, usage.prompt_tokens + usage.completion_tokens);
}

// Runs `promise` and returns the error it rejects with; fails when it resolves.
export async function rejection_of(promise) {
  try {
    await promise;
  } catch (e) {
    return e;
  }
  assert.fail('expected the request to fail');
}

// Every error body has OpenAI's shape and every error response a request id.
export function assert_openai_error(err, status) {
  assert.equal(err.status, status, `status ${err.status}: ${err.message}`);
  assert.ok(err.error && typeof err.error === 'object', 'error body has an `error` object');
  assert.equal(typeof err.error.message, 'string');
  assert.ok(err.error.message.length > 0, 'error.message is not empty');
  assert.equal(typeof err.error.type, 'string');
  assert.ok('param' in err.error, 'error.param is present (may be null)');
  assert.ok('code' in err.error, 'error.code is present (may be null)');
  assert.ok(err.requestID, 'x-request-id on the error response');
}
