// Chat completions through ferry with the official client: non-streaming, streaming with and
// without usage, the request id, and fields the client sends that ferry must pass through.
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { assert_usage, kEchoed, kMessages, make_client, upstream_last_request } from './helpers.mjs';

const client = make_client();

async function collect(stream) {
  const chunks = [];
  for await (const chunk of stream) chunks.push(chunk);
  return chunks;
}

function content_of(chunks) {
  return chunks.map((c) => c.choices?.[0]?.delta?.content ?? '').join('');
}

test('chat: non-streaming result parses with content, usage and id', async () => {
  const completion = await client.chat.completions.create({ model: 'echo', messages: kMessages });
  assert.equal(typeof completion.id, 'string');
  assert.ok(completion.id.length > 0, 'id is not empty');
  assert.equal(completion.object, 'chat.completion');
  assert.equal(typeof completion.created, 'number');
  assert.equal(completion.choices.length, 1);
  const choice = completion.choices[0];
  assert.equal(choice.index, 0);
  assert.equal(choice.message.role, 'assistant');
  assert.equal(choice.message.content, kEchoed);
  assert.equal(choice.finish_reason, 'stop');
  assert_usage(completion.usage);
  // The test upstream counts words + 1 per message, and one token per streamed piece.
  assert.equal(completion.usage.prompt_tokens, (4 + 1) + (6 + 1));
  assert.equal(completion.usage.completion_tokens, kEchoed.split(' ').length);
});

test('chat: ferry forwards every field, rewriting only the model name', async () => {
  const tools = [{
    type: 'function',
    function: { name: 'get_weather', description: 'Weather for a city',
                parameters: { type: 'object', properties: { city: { type: 'string' } } } },
  }];
  const completion = await client.chat.completions.create({
    model: 'echo', messages: kMessages, n: 2, seed: 7, stop: ['\n\n'], temperature: 0.25,
    top_p: 0.9, max_tokens: 100, logprobs: true, top_logprobs: 2, tools, tool_choice: 'auto',
    response_format: { type: 'json_object' }, user: 'conformance',
    // Not in the SDK's types: a field only some backends know (vLLM's guided decoding).
    guided_choice: ['yes', 'no'],
  });
  assert.equal(completion.choices.length, 2, 'n=2 reached the backend');
  assert.deepEqual(completion.choices.map((c) => c.index), [0, 1]);

  const seen = (await upstream_last_request()).body;
  assert.equal(seen.model, 'echo', 'the upstream model name');
  assert.equal(seen.n, 2);
  assert.equal(seen.seed, 7);
  assert.deepEqual(seen.stop, ['\n\n']);
  assert.equal(seen.temperature, 0.25);
  assert.equal(seen.top_p, 0.9);
  assert.equal(seen.max_tokens, 100);
  assert.equal(seen.logprobs, true);
  assert.equal(seen.top_logprobs, 2);
  assert.deepEqual(seen.tools, tools);
  assert.equal(seen.tool_choice, 'auto');
  assert.deepEqual(seen.response_format, { type: 'json_object' });
  assert.equal(seen.user, 'conformance');
  assert.deepEqual(seen.guided_choice, ['yes', 'no']);
  assert.deepEqual(seen.messages, kMessages);
});

test('chat: x-request-id is generated, and a client-supplied one is honoured', async () => {
  const generated = await client.chat.completions
      .create({ model: 'echo', messages: kMessages }).withResponse();
  assert.equal(generated.response.status, 200);
  const id = generated.response.headers.get('x-request-id');
  assert.ok(id && id.length > 0, 'x-request-id on a generated response');
  assert.equal(generated.request_id, id);
  assert.equal(generated.data._request_id, id);

  const mine = 'conformance-req-0123456789';
  const echoed = await client.chat.completions
      .create({ model: 'echo', messages: kMessages }, { headers: { 'x-request-id': mine } })
      .withResponse();
  assert.equal(echoed.response.headers.get('x-request-id'), mine);

  const other = await client.chat.completions
      .create({ model: 'echo', messages: kMessages }).withResponse();
  assert.notEqual(other.request_id, id, 'request ids differ between requests');
});

test('chat: streaming with include_usage ends with one usage chunk', async () => {
  const plain = await client.chat.completions.create({ model: 'echo', messages: kMessages });
  const { data: stream, response } = await client.chat.completions.create({
    model: 'echo', messages: kMessages, stream: true, stream_options: { include_usage: true },
  }).withResponse();
  assert.match(response.headers.get('content-type') ?? '', /^text\/event-stream/);
  assert.ok(response.headers.get('x-request-id'), 'x-request-id on a stream');
  const chunks = await collect(stream);
  assert.ok(chunks.length >= 2, `at least a content chunk and a usage chunk, got ${chunks.length}`);
  for (const c of chunks) {
    assert.equal(c.object, 'chat.completion.chunk');
    assert.equal(c.id, chunks[0].id, 'every chunk has the same id');
  }
  assert.equal(content_of(chunks), plain.choices[0].message.content,
               'streamed content equals the non-streamed content');
  assert.ok(chunks.some((c) => c.choices?.[0]?.finish_reason), 'a chunk carries finish_reason');

  const last = chunks[chunks.length - 1];
  assert.deepEqual(last.choices, [], 'the usage chunk has no choices');
  assert_usage(last.usage);
  assert.deepEqual(last.usage, plain.usage, 'streamed usage equals the non-streamed usage');
  for (const c of chunks.slice(0, -1)) assert.ok(!c.usage, 'only the last chunk carries usage');
});

test('chat: streaming without include_usage shows no usage chunk', async () => {
  const chunks = await collect(await client.chat.completions.create({
    model: 'echo', messages: kMessages, stream: true,
  }));
  const seen = (await upstream_last_request()).body;
  assert.equal(seen.stream, true);
  assert.equal(seen.stream_options?.include_usage, true, 'ferry asks the backend for usage');
  assert.ok(chunks.length >= 1);
  for (const c of chunks) {
    assert.ok(!c.usage, 'no chunk carries usage');
    assert.ok(c.choices.length > 0, 'no chunk without choices (the stripped usage chunk)');
  }
  assert.equal(content_of(chunks), kEchoed);
  assert.ok(chunks.some((c) => c.choices[0].finish_reason), 'a chunk carries finish_reason');
});

test('chat: include_usage=false is treated like no stream_options', async () => {
  const chunks = await collect(await client.chat.completions.create({
    model: 'echo', messages: kMessages, stream: true, stream_options: { include_usage: false },
  }));
  for (const c of chunks) assert.ok(!c.usage, 'no chunk carries usage');
});

test('chat: a stream cut into many small pieces arrives whole', async () => {
  const plain = await client.chat.completions.create({ model: 'chunky', messages: kMessages });
  const chunks = await collect(await client.chat.completions.create({
    model: 'chunky', messages: kMessages, stream: true, stream_options: { include_usage: true },
  }));
  assert.equal(content_of(chunks), plain.choices[0].message.content);
  assert_usage(chunks[chunks.length - 1].usage);
});

test('chat: a backend that reports no usage still gives a well-formed answer', async () => {
  const completion = await client.chat.completions.create({ model: 'no-usage', messages: kMessages });
  assert.equal(completion.object, 'chat.completion');
  assert.equal(typeof completion.choices[0].message.content, 'string');
  const chunks = await collect(await client.chat.completions.create({
    model: 'no-usage', messages: kMessages, stream: true,
  }));
  assert.ok(content_of(chunks).length > 0);
});

test('chat: many requests on one client (keep-alive) all succeed', async () => {
  const results = await Promise.all(Array.from({ length: 16 }, (_, i) =>
      client.chat.completions.create({
        model: 'echo', messages: [{ role: 'user', content: `request ${i}` }],
      })));
  const ids = new Set(results.map((r) => r.id));
  assert.equal(results.length, 16);
  for (const r of results) assert.equal(r.object, 'chat.completion');
  assert.ok(ids.size >= 1);
});

test('chat: a stream the client abandons early does not disturb the next request', async () => {
  const stream = await client.chat.completions.create({
    model: 'chunky', messages: kMessages, stream: true,
  });
  for await (const chunk of stream) {
    assert.equal(chunk.object, 'chat.completion.chunk');
    break;  // the SDK aborts the request
  }
  const after = await client.chat.completions.create({ model: 'echo', messages: kMessages });
  assert.equal(after.object, 'chat.completion');
});
