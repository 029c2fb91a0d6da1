// Error cases through the official client: each HTTP status reaches the SDK as its error
// class, with OpenAI's error body and a request id; streams that break surface as errors.
import assert from 'node:assert/strict';
import { test } from 'node:test';

import OpenAI from 'openai';

import { assert_openai_error, kMessages, make_client, rejection_of } from './helpers.mjs';

const client = make_client();
const chat = (body, options) =>
    client.chat.completions.create({ model: 'echo', messages: kMessages, ...body }, options);

test('401: a wrong API key is an AuthenticationError', async () => {
  const bad = make_client({ apiKey: 'sk-not-a-real-key' });
  const err = await rejection_of(bad.chat.completions.create({ model: 'echo', messages: kMessages }));
  assert.ok(err instanceof OpenAI.AuthenticationError, `got ${err.constructor.name}: ${err.message}`);
  assert_openai_error(err, 401);
});

test('401: a missing Authorization header is an AuthenticationError', async () => {
  const anonymous = make_client({ defaultHeaders: { Authorization: null } });
  const err = await rejection_of(anonymous.models.list());
  assert.ok(err instanceof OpenAI.AuthenticationError, `got ${err.constructor.name}: ${err.message}`);
  assert_openai_error(err, 401);
});

test('404: an unknown model is a NotFoundError', async () => {
  const err = await rejection_of(chat({ model: 'no-such-model' }));
  assert.ok(err instanceof OpenAI.NotFoundError, `got ${err.constructor.name}: ${err.message}`);
  assert_openai_error(err, 404);
  assert.match(err.message, /no-such-model/, 'the message names the model');
});

test('404: an unknown model on a stream fails before any chunk', async () => {
  const err = await rejection_of(chat({ model: 'no-such-model', stream: true }));
  assert.ok(err instanceof OpenAI.NotFoundError, `got ${err.constructor.name}: ${err.message}`);
});

test('400: wrong parameter types are a BadRequestError naming the field', async () => {
  const err = await rejection_of(chat({ messages: 'not a list' }));
  assert.ok(err instanceof OpenAI.BadRequestError, `got ${err.constructor.name}: ${err.message}`);
  assert_openai_error(err, 400);
  assert.ok(err.param === 'messages' || /messages/.test(err.message),
            `the error names 'messages' (param ${err.param}, message ${err.message})`);

  const no_model = await rejection_of(client.chat.completions.create({ messages: kMessages }));
  assert.ok(no_model instanceof OpenAI.BadRequestError,
            `got ${no_model.constructor.name}: ${no_model.message}`);
  assert.ok(no_model.param === 'model' || /model/.test(no_model.message));

  const bad_stream = await rejection_of(chat({ stream: 'yes' }));
  assert.ok(bad_stream instanceof OpenAI.BadRequestError,
            `got ${bad_stream.constructor.name}: ${bad_stream.message}`);
  assert.ok(bad_stream.param === 'stream' || /stream/.test(bad_stream.message));
});

test('400: a body that is not JSON is a BadRequestError', async () => {
  const err = await rejection_of(client.post('/chat/completions', {
    body: '{"model": "echo", "messages": [',
    headers: { 'Content-Type': 'application/json' },
  }));
  assert.ok(err instanceof OpenAI.BadRequestError, `got ${err.constructor.name}: ${err.message}`);
  assert_openai_error(err, 400);
});

// The Content-Length alone exceeds limits.max_body_bytes: refused before the body is read.
test('413: a body over the limit is refused with 413', async () => {
  const huge = 'x'.repeat(2 * 1024 * 1024);  // the conformance config allows 1 MiB
  const err = await rejection_of(chat({ messages: [{ role: 'user', content: huge }] }));
  assert.ok(err instanceof OpenAI.APIError, `got ${err.constructor.name}: ${err.message}`);
  assert.equal(err.status, 413, err.message);
});

test('429: a backend rate limit reaches the client as a RateLimitError', async () => {
  const err = await rejection_of(chat({ model: 'fail-429' }));
  assert.ok(err instanceof OpenAI.RateLimitError, `got ${err.constructor.name}: ${err.message}`);
  assert_openai_error(err, 429);
});

test('502: a backend answering 500 is an APIError with status 502', async () => {
  const err = await rejection_of(chat({ model: 'fail-500' }));
  assert.ok(err instanceof OpenAI.APIError, `got ${err.constructor.name}: ${err.message}`);
  assert.ok(err instanceof OpenAI.InternalServerError);
  assert_openai_error(err, 502);

  const on_stream = await rejection_of(chat({ model: 'fail-500', stream: true }));
  assert.ok(on_stream instanceof OpenAI.APIError);
  assert.equal(on_stream.status, 502);
});

test('503: a backend that refuses connections is an APIError with status 503', async () => {
  const err = await rejection_of(chat({ model: 'down' }));
  assert.ok(err instanceof OpenAI.APIError, `got ${err.constructor.name}: ${err.message}`);
  assert.ok(err instanceof OpenAI.InternalServerError);
  assert_openai_error(err, 503);

  const on_stream = await rejection_of(chat({ model: 'down', stream: true }));
  assert.ok(on_stream instanceof OpenAI.APIError);
  assert.equal(on_stream.status, 503);
});

test('504: a backend that never answers is an APIError with status 504', async () => {
  const err = await rejection_of(chat({ model: 'hang' }));
  assert.ok(err instanceof OpenAI.APIError, `got ${err.constructor.name}: ${err.message}`);
  assert.ok(err instanceof OpenAI.InternalServerError);
  assert_openai_error(err, 504);

  const on_stream = await rejection_of(chat({ model: 'hang', stream: true }));
  assert.ok(on_stream instanceof OpenAI.APIError);
  assert.equal(on_stream.status, 504);
});

test('a backend that resets mid-stream makes the stream fail, not end quietly', async () => {
  const stream = await chat({ model: 'reset-mid-stream', stream: true });
  const err = await rejection_of((async () => {
    for await (const chunk of stream) assert.equal(chunk.object, 'chat.completion.chunk');
  })());
  assert.ok(err instanceof Error, `got ${err}`);
});

test('a backend that sends malformed SSE gives an error or only well-formed chunks', async () => {
  // ferry may drop the broken event or turn it into an error; it must never hand the client
  // something the SDK cannot parse as a chunk.
  let chunks = 0;
  try {
    const stream = await chat({ model: 'malformed-sse', stream: true });
    for await (const chunk of stream) {
      assert.equal(chunk.object, 'chat.completion.chunk');
      assert.ok(Array.isArray(chunk.choices));
      chunks++;
    }
  } catch (e) {
    assert.ok(!(e instanceof SyntaxError), `the SDK met a chunk that is not JSON: ${e.message}`);
    assert.ok(!(e instanceof assert.AssertionError), e.message);
  }
});

test('after every error above, ferry still serves', async () => {
  const completion = await chat({});
  assert.equal(completion.object, 'chat.completion');
});

test('error responses carry a client-supplied x-request-id', async () => {
  const err = await rejection_of(chat({ model: 'no-such-model' },
                                      { headers: { 'x-request-id': 'conformance-err-42' } }));
  assert.equal(err.requestID, 'conformance-err-42');
});
