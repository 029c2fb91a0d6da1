// Legacy completions and the model list through ferry with the official client.
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { assert_usage, make_client } from './helpers.mjs';

const client = make_client();
const kPrompt = 'Once upon a time, a gateway';

test('completions: non-streaming result parses with text, usage and id', async () => {
  const { data: completion, response } = await client.completions
      .create({ model: 'echo', prompt: kPrompt, max_tokens: 16 }).withResponse();
  assert.ok(response.headers.get('x-request-id'));
  assert.equal(typeof completion.id, 'string');
  assert.ok(completion.id.length > 0);
  assert.equal(completion.object, 'text_completion');
  assert.equal(completion.choices.length, 1);
  assert.equal(completion.choices[0].index, 0);
  assert.equal(typeof completion.choices[0].text, 'string');
  assert.ok(completion.choices[0].text.length > 0, 'text is not empty');
  assert_usage(completion.usage);
});

test('completions: streaming with include_usage', async () => {
  const plain = await client.completions.create({ model: 'echo', prompt: kPrompt, max_tokens: 16 });
  const stream = await client.completions.create({
    model: 'echo', prompt: kPrompt, max_tokens: 16, stream: true,
    stream_options: { include_usage: true },
  });
  const chunks = [];
  for await (const chunk of stream) chunks.push(chunk);
  assert.ok(chunks.length >= 2);
  for (const c of chunks) assert.equal(c.object, 'text_completion');
  const text = chunks.map((c) => c.choices?.[0]?.text ?? '').join('');
  assert.equal(text, plain.choices[0].text);
  const last = chunks[chunks.length - 1];
  assert.deepEqual(last.choices, []);
  assert_usage(last.usage);
});

test('completions: streaming without include_usage shows no usage chunk', async () => {
  const stream = await client.completions.create({
    model: 'echo', prompt: kPrompt, max_tokens: 16, stream: true,
  });
  let count = 0;
  for await (const chunk of stream) {
    count++;
    assert.ok(!chunk.usage, 'no chunk carries usage');
    assert.ok(chunk.choices.length > 0);
  }
  assert.ok(count >= 1);
});

test('models: list returns the configured public names', async () => {
  const ids = [];
  const now_s = Math.ceil(Date.now() / 1000);
  for await (const model of client.models.list()) {
    assert.equal(model.object, 'model');
    assert.equal(typeof model.id, 'string');
    // When ferry began serving it: after 2020, not in the future (not 0).
    assert.ok(model.created > 1577836800 && model.created <= now_s, `created ${model.created}`);
    ids.push(model.id);
  }
  for (const name of ['echo', 'chunky', 'fail-500', 'hang', 'down']) {
    assert.ok(ids.includes(name), `models.list includes ${name} (got ${ids.join(', ')})`);
  }
  assert.ok(!ids.includes('stream-slow-5'), 'only configured names are listed');
  const one = await client.models.retrieve('echo');
  assert.ok(one.created > 1577836800 && one.created <= now_s, `created ${one.created}`);
});

test('models: the list also answers with a request id', async () => {
  const { response } = await client.models.list().withResponse();
  assert.equal(response.status, 200);
  assert.ok(response.headers.get('x-request-id'));
});
