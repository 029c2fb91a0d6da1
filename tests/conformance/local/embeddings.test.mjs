// /v1/embeddings through ferry with the official `openai` client: `embeddings.create` against the
// local engine and against an HTTP backend (ferry B, the same model in-process), in float and in
// base64 (the client asks for base64 by default and decodes it itself), batches equal single
// inputs, and bad input answered with OpenAI's error shape. Servers: ../run_local.mjs.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import OpenAI from 'openai';

const kBaseUrl = process.env.FERRY_BASE_URL;
const kApiKey = process.env.FERRY_API_KEY;
if (!kBaseUrl || !kApiKey) throw new Error('run through run_local.mjs (ctest -L conformance)');

const client = new OpenAI({ baseURL: kBaseUrl, apiKey: kApiKey, maxRetries: 0, timeout: 120000 });

function norm(v) {
  return Math.sqrt(v.reduce((s, x) => s + x * x, 0));
}

for (const model of ['local', 'remote']) {
  test(`embeddings.create on ${model}: float and base64 agree, unit vectors, OpenAI shape`, async () => {
    const input = ['The quick brown fox.', 'Jumps over the lazy dog.'];
    const f = await client.embeddings.create({ model, input, encoding_format: 'float' });
    assert.equal(f.object, 'list');
    assert.equal(f.model, model);
    assert.equal(f.data.length, 2);
    for (const [i, d] of f.data.entries()) {
      assert.equal(d.object, 'embedding');
      assert.equal(d.index, i);
      assert.ok(Array.isArray(d.embedding) && d.embedding.length > 0);
      assert.ok(Math.abs(norm(d.embedding) - 1) < 1e-5);
    }
    assert.ok(f.usage.prompt_tokens > 0);
    assert.equal(f.usage.total_tokens, f.usage.prompt_tokens);
    // The client's default: base64 on the wire, decoded by the client into floats.
    const b = await client.embeddings.create({ model, input });
    assert.deepEqual(b.data.map((d) => d.embedding), f.data.map((d) => d.embedding));
    // A batch equals single requests.
    const one = await client.embeddings.create({ model, input: input[1], encoding_format: 'float' });
    assert.deepEqual(one.data[0].embedding, f.data[1].embedding);
  });
}

test('the HTTP backend passes through what the local engine computes', async () => {
  const input = [[1, 2, 3, 4], [5, 6]];
  const local = await client.embeddings.create({ model: 'local', input, encoding_format: 'float' });
  const remote = await client.embeddings.create({ model: 'remote', input, encoding_format: 'float' });
  assert.deepEqual(remote.data.map((d) => d.embedding), local.data.map((d) => d.embedding));
  assert.equal(remote.usage.prompt_tokens, 6);
  assert.equal(local.usage.prompt_tokens, 6);
});

test('bad embeddings input is an OpenAI-shaped 400 naming the field', async () => {
  for (const [body, param] of [
    [{ model: 'local', input: '' }, 'input'],
    [{ model: 'local', input: [] }, 'input'],
    [{ model: 'local', input: ['a', 7] }, 'input'],
    [{ model: 'local', input: 'a', encoding_format: 'hex' }, 'encoding_format'],
    [{ model: 'local', input: 'a', dimensions: 3 }, 'dimensions'],
  ]) {
    await assert.rejects(client.embeddings.create(body), (e) => {
      assert.equal(e.status, 400);
      assert.equal(e.param, param);
      return true;
    });
  }
  const ok = await client.embeddings.create({ model: 'local', input: 'still serving' });
  assert.equal(ok.data.length, 1);
});
