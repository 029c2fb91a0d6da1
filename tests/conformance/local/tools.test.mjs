// Tool calls and structured outputs on the in-process engine, driven by the official `openai`
// client (issue 15): tools non-streaming and streaming (the client's stream helper and runTools
// assemble the deltas), tool_choice in all four forms, a multi-turn conversation with tool
// results, response_format json_object and json_schema strict, chat.completions.parse (a JSON
// Schema, and a zod schema through the client's zodResponseFormat). The
// model has random weights: whatever is valid is the constraint's doing. Servers: run_local.mjs
// (model local-tools: the synthesized model with a Hermes tool template).
import assert from 'node:assert/strict';
import { test } from 'node:test';
import OpenAI from 'openai';
import { zodResponseFormat } from 'openai/helpers/zod';
import { z } from 'zod';

const kBaseUrl = process.env.FERRY_BASE_URL;
const kApiKey = process.env.FERRY_API_KEY;
if (!kBaseUrl || !kApiKey) throw new Error('run through run_local.mjs (ctest -L conformance)');

const client = new OpenAI({ baseURL: kBaseUrl, apiKey: kApiKey, maxRetries: 0, timeout: 120000 });

const kTools = [
  { type: 'function', function: { name: 'get_weather', description: 'Weather in a city',
    parameters: { type: 'object', properties: { city: { type: 'string', maxLength: 12 },
      unit: { enum: ['c', 'f'] } }, required: ['city', 'unit'], additionalProperties: false } } },
  { type: 'function', function: { name: 'get_time', description: 'Time in a zone',
    parameters: { type: 'object', properties: { zone: { type: 'integer', minimum: -12, maximum: 12 } },
      required: ['zone'], additionalProperties: false } } },
];

function ask(extra = {}) {
  return { model: 'local-tools', messages: [{ role: 'user', content: 'What is the weather in Oslo?' }],
           temperature: 1, seed: 5, max_tokens: 600, tools: kTools, ...extra };
}

function check_call(call) {
  assert.equal(call.type, 'function');
  assert.match(call.id, /^call_/);
  const args = JSON.parse(call.function.arguments);
  if (call.function.name === 'get_weather') {
    assert.deepEqual(Object.keys(args), ['city', 'unit']);
    assert.equal(typeof args.city, 'string');
    assert.ok(['c', 'f'].includes(args.unit));
  } else {
    assert.equal(call.function.name, 'get_time');
    assert.ok(Number.isInteger(args.zone) && args.zone >= -12 && args.zone <= 12, JSON.stringify(args));
  }
  return args;
}

test('tool_choice required: declared functions, valid arguments, finish_reason tool_calls',
     async () => {
  const { data: r, response } = await client.chat.completions
    .create(ask({ tool_choice: 'required' })).withResponse();
  assert.equal(response.headers.get('x-ferry-constraint'), 'tools');
  const c = r.choices[0];
  assert.equal(c.finish_reason, 'tool_calls');
  assert.equal(c.message.content, null);
  assert.ok(c.message.tool_calls.length >= 1);
  for (const call of c.message.tool_calls) check_call(call);
});

test('a named tool_choice calls that function once with parallel_tool_calls false', async () => {
  const r = await client.chat.completions.create(ask({
    tool_choice: { type: 'function', function: { name: 'get_time' } }, parallel_tool_calls: false }));
  const calls = r.choices[0].message.tool_calls;
  assert.equal(calls.length, 1);
  assert.equal(calls[0].function.name, 'get_time');
  check_call(calls[0]);
});

test('tool_choice none never calls; auto answers in text or calls', async () => {
  const none = await client.chat.completions.create(ask({ tool_choice: 'none', max_tokens: 24 }));
  assert.equal(none.choices[0].message.tool_calls, undefined);
  assert.equal(typeof none.choices[0].message.content, 'string');
  assert.ok(!none.choices[0].message.content.includes('<tool_call>'));
  for (const seed of [1, 2, 3]) {
    const auto = await client.chat.completions.create(ask({ tool_choice: 'auto', seed, max_tokens: 64 }));
    const m = auto.choices[0].message;
    assert.ok(!(m.content ?? '').includes('<tool_call>'), 'the raw marker leaked');
    for (const call of m.tool_calls ?? []) {
      if (auto.choices[0].finish_reason === 'tool_calls') check_call(call);
    }
  }
});

test('streamed tool calls assemble (stream helper) into the same calls as the body', async () => {
  const body = ask({ tool_choice: 'required', seed: 9 });
  const whole = await client.chat.completions.create(body);
  const stream = client.chat.completions.stream({ ...body, stream: true });
  const final = await stream.finalChatCompletion();
  const a = whole.choices[0].message.tool_calls.map((c) => [c.function.name, c.function.arguments]);
  const b = final.choices[0].message.tool_calls.map((c) => [c.function.name, c.function.arguments]);
  assert.deepEqual(b, a);
  assert.equal(final.choices[0].finish_reason, 'tool_calls');
});

test('runTools runs the named function and sends its result back (multi-turn)',
     async () => {
  const seen = [];
  const runner = client.chat.completions.runTools({
    ...ask({ tool_choice: { type: 'function', function: { name: 'get_weather' } } }),
    tools: [{ type: 'function', function: { ...kTools[0].function, parse: JSON.parse,
      function: (args) => { seen.push(args); return { temperature: 21 }; } } }],
  });
  await runner.finalChatCompletion();
  assert.equal(seen.length >= 1, true);
  assert.equal(typeof seen[0].city, 'string');
  // The history with the call and its result goes back through the template.
  const call = { id: 'call_abc', type: 'function',
                 function: { name: 'get_weather', arguments: JSON.stringify(seen[0]) } };
  const next = await client.chat.completions.create({
    model: 'local-tools', temperature: 1, seed: 3, max_tokens: 600, tools: kTools, tool_choice: 'required',
    messages: [{ role: 'user', content: 'Weather?' }, { role: 'assistant', content: null, tool_calls: [call] },
               { role: 'tool', tool_call_id: 'call_abc', content: '{"temperature": 21}' }],
  });
  assert.ok(next.usage.prompt_tokens > 20);
  for (const c of next.choices[0].message.tool_calls) check_call(c);
});

test('response_format json_object and json_schema strict are valid by construction', async () => {
  const { data: obj, response } = await client.chat.completions.create({
    model: 'local', messages: [{ role: 'user', content: 'JSON please' }], temperature: 1, seed: 2,
    max_tokens: 4000, response_format: { type: 'json_object' } }).withResponse();
  assert.equal(response.headers.get('x-ferry-constraint'), 'json_object');
  if (obj.choices[0].finish_reason === 'stop') {
    const v = JSON.parse(obj.choices[0].message.content);
    assert.equal(typeof v, 'object');
    assert.ok(v !== null && !Array.isArray(v));
  }
  const schema = { type: 'object', properties: { n: { type: 'integer' }, ok: { type: 'boolean' },
    kind: { enum: ['a', 'b'] } }, required: ['n', 'ok', 'kind'], additionalProperties: false };
  for (const seed of [1, 2, 3, 4]) {
    const r = await client.chat.completions.create({
      model: 'local', messages: [{ role: 'user', content: 'JSON please' }], temperature: 1, seed,
      max_tokens: 200, response_format: { type: 'json_schema', json_schema: { name: 'x', strict: true, schema } } });
    assert.equal(r.choices[0].finish_reason, 'stop');
    const v = JSON.parse(r.choices[0].message.content);
    assert.deepEqual(Object.keys(v), ['n', 'ok', 'kind']);
    assert.ok(Number.isInteger(v.n) && typeof v.ok === 'boolean' && ['a', 'b'].includes(v.kind));
  }
});

test('chat.completions.parse gives the parsed object', async () => {
  if (typeof client.chat.completions.parse !== 'function') return;
  const r = await client.chat.completions.parse({
    model: 'local', messages: [{ role: 'user', content: 'JSON please' }], temperature: 1, seed: 8,
    max_tokens: 200, response_format: { type: 'json_schema', json_schema: { name: 'p', strict: true,
      schema: { type: 'object', properties: { name: { type: 'string', maxLength: 8 } },
                required: ['name'], additionalProperties: false } } } });
  assert.equal(typeof r.choices[0].message.parsed.name, 'string');
});

test('chat.completions.parse with a zod schema (zodResponseFormat) parses and validates', async () => {
  // String lengths: zod counts UTF-16 units, JSON Schema (ajv) code points; ferry counts a
  // character above U+FFFF as 2 toward maxLength and 1 toward minLength, so the random weights'
  // astral characters fit both: zod's parse below (UTF-16) and the code-point count after it.
  const Item = z.object({ name: z.string().min(2).max(6), count: z.number().int().min(0).max(5),
    kind: z.enum(['a', 'b']), tags: z.array(z.string()).max(3), note: z.string().nullable() });  // OpenAPI's `nullable: true`
  for (const seed of [1, 2, 3]) {
    const r = await client.chat.completions.parse({
      model: 'local', messages: [{ role: 'user', content: 'An item, please' }], temperature: 1,
      seed, max_tokens: 300, response_format: zodResponseFormat(Item, 'item') });
    assert.equal(r.choices[0].finish_reason, 'stop');
    const parsed = r.choices[0].message.parsed;
    assert.deepEqual(Item.parse(parsed), parsed);  // zod itself finds it valid
    const points = [...parsed.name].length;  // JSON Schema's length: code points
    assert.ok(points >= 2 && points <= 6, JSON.stringify(parsed.name));
    assert.deepEqual(Object.keys(parsed), ['name', 'count', 'kind', 'tags', 'note']);
  }
});

test('what the local engine cannot serve is a 400 naming the field', async () => {
  await assert.rejects(
    client.chat.completions.create({ ...ask({ tool_choice: 'required' }), model: 'local' }),
    (e) => e.status === 400 && e.param === 'tools' && e.code === 'unsupported_by_target');
  await assert.rejects(
    client.chat.completions.create({ model: 'local', messages: [{ role: 'user', content: 'x' }],
      response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'object',
        properties: { a: { type: 'string', not: {} } } } } } }),
    (e) => e.status === 400 && /'not' at '#\/properties\/a'/.test(e.message));
});
