// OpenAI Responses through ferry with the official client, translated for an HTTP backend that
// speaks only chat (the test upstream): responses.create, responses.stream and its
// finalResponse(), function calls and their outputs over turns (sent whole, and continued with
// previous_response_id), and errors in OpenAI's shape.
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { assert_openai_error, make_client, rejection_of, upstream_last_request } from './helpers.mjs';

const client = make_client();

const kTools = [{
  type: 'function', name: 'get_weather', description: 'Weather for a city', strict: false,
  parameters: { type: 'object', properties: { q: { type: 'string' } }, required: ['q'] },
}];

test('responses: create returns a response object with output_text and usage', async () => {
  const response = await client.responses.create({
    model: 'echo', input: 'Say hello to the responses suite.', instructions: 'You are a test.',
    max_output_tokens: 64, temperature: 0.25,
  });
  assert.equal(response.object, 'response');
  assert.match(response.id, /^resp_/);
  assert.equal(response.status, 'completed');
  assert.equal(response.model, 'echo');
  assert.equal(response.output_text, 'echo: Say hello to the responses suite.');
  assert.equal(response.output[0].type, 'message');
  assert.equal(response.output[0].role, 'assistant');
  assert.equal(response.instructions, 'You are a test.');
  assert.equal(response.temperature, 0.25);
  assert.equal(response.max_output_tokens, 64);
  assert.ok(response.usage.input_tokens > 0);
  assert.equal(response.usage.output_tokens, 7);
  assert.equal(response.usage.total_tokens, response.usage.input_tokens + 7);
  const seen = (await upstream_last_request()).body;
  assert.deepEqual(seen.messages.map((m) => m.role), ['system', 'user']);
  assert.equal(seen.max_tokens, 64);
  assert.equal(seen.temperature, 0.25);
});

test('responses: stream() events and finalResponse()', async () => {
  const stream = client.responses.stream({ model: 'chunky', input: 'stream these words please' });
  const types = [];
  let text = '';
  stream.on('response.output_text.delta', (e) => { text += e.delta; });
  for await (const event of stream) types.push(event.type);
  const final = await stream.finalResponse();
  assert.equal(types[0], 'response.created');
  assert.equal(types[1], 'response.in_progress');
  assert.equal(types.at(-1), 'response.completed');
  for (const t of ['response.output_item.added', 'response.content_part.added',
                   'response.output_text.done', 'response.output_item.done']) {
    assert.ok(types.includes(t), t);
  }
  assert.equal(text, 'echo: stream these words please');
  assert.equal(final.output_text, 'echo: stream these words please');
  assert.ok(final.usage.input_tokens > 0);
});

test('responses: a function call and its output over two turns, sent whole', async () => {
  const first = await client.responses.create({
    model: 'caller', input: 'weather in Oslo?', tools: kTools, store: false,
  });
  const call = first.output.find((i) => i.type === 'function_call');
  assert.ok(call, JSON.stringify(first.output));
  assert.equal(call.name, 'get_weather');
  assert.deepEqual(JSON.parse(call.arguments), { q: 'weather in Oslo?' });
  assert.equal(first.store, false);
  const second = await client.responses.create({
    model: 'caller', tools: kTools, store: false,
    input: [{ role: 'user', content: 'weather in Oslo?' }, call,
            { type: 'function_call_output', call_id: call.call_id, output: 'rain, 4 C' }],
  });
  assert.equal(second.output_text, 'echo: rain, 4 C');
  const seen = (await upstream_last_request()).body;
  assert.equal(seen.messages[1].tool_calls[0].id, call.call_id);
  assert.equal(seen.messages[2].role, 'tool');
});

test('responses: previous_response_id continues a stored conversation, streamed too', async () => {
  const first = await client.responses.create({ model: 'caller', input: 'weather in Bergen?',
                                                tools: kTools });
  const call = first.output.find((i) => i.type === 'function_call');
  const stream = client.responses.stream({
    model: 'caller', tools: kTools, previous_response_id: first.id,
    input: [{ type: 'function_call_output', call_id: call.call_id, output: 'sun' }],
  });
  const second = await stream.finalResponse();
  assert.equal(second.output_text, 'echo: sun');
  assert.equal(second.previous_response_id, first.id);
  const third = await client.responses.create({ model: 'echo', input: 'thanks',
                                                previous_response_id: second.id });
  assert.equal(third.output_text, 'echo: thanks');
  const seen = (await upstream_last_request()).body;
  assert.deepEqual(seen.messages.map((m) => m.role), ['user', 'assistant', 'tool', 'assistant',
                                                      'user']);
});

test('responses: errors are OpenAI errors the client raises as such', async () => {
  let err = await rejection_of(client.responses.create({ model: 'echo', input: [] }));
  assert_openai_error(err, 400);
  assert.equal(err.param, 'input');
  err = await rejection_of(client.responses.create({ model: 'echo', input: 'x',
                                                     temperature: 9 }));
  assert_openai_error(err, 400);
  assert.equal(err.code, 'decimal_above_max_value');
  err = await rejection_of(client.responses.create({
    model: 'echo', input: [{ type: 'function_call_output', call_id: 'call_x', output: 'y' }],
  }));
  assert_openai_error(err, 400);
  assert.match(err.message, /No tool call found for function call output with call_id call_x/);
  err = await rejection_of(client.responses.create({ model: 'echo', input: 'x',
                                                     tools: [{ type: 'web_search' }] }));
  assert_openai_error(err, 400);
  assert.equal(err.param, 'tools[0]');
  err = await rejection_of(client.responses.create({ model: 'echo', input: 'x',
                                                     previous_response_id: 'resp_missing' }));
  assert_openai_error(err, 404);
  assert.equal(err.code, 'previous_response_not_found');
  err = await rejection_of(client.responses.create({ model: 'fail-500', input: 'x' }));
  assert.ok(err.status >= 500, `status ${err.status}`);
  // Still serving.
  const ok = await client.responses.create({ model: 'echo', input: 'still here' });
  assert.equal(ok.output_text, 'echo: still here');
});
