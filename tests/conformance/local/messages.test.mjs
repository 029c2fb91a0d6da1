// Anthropic Messages through ferry, driven by the official `@anthropic-ai/sdk`: messages.create,
// messages.stream with its event helpers and finalMessage(), countTokens, and the SDK's error
// classes, against the in-process engine (translated), ferry B as an OpenAI chat backend
// (translated) and ferry B as a backend that speaks Messages natively (passed through).
// Servers: tests/conformance/run_local.mjs.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import Anthropic from '@anthropic-ai/sdk';

const kRootUrl = process.env.FERRY_ROOT_URL;
const kApiKey = process.env.FERRY_API_KEY;
const kAdminKey = process.env.FERRY_ADMIN_KEY;
if (!kRootUrl || !kApiKey) throw new Error('run through run_local.mjs (ctest -L conformance)');

// The SDK appends /v1/messages to the base URL, as Claude Code does with ANTHROPIC_BASE_URL.
const client = new Anthropic({ baseURL: kRootUrl, apiKey: kApiKey, maxRetries: 0,
                               timeout: 120000 });

// local: the engine; remote: ferry B as an OpenAI chat backend; remote-native: ferry B's own
// /v1/messages (the backend lists `messages` in its `apis`).
const kModels = ['local', 'remote', 'remote-native'];

function request(model, text, extra = {}) {
  return { model, max_tokens: 8, temperature: 0, system: 'You are terse.',
           messages: [{ role: 'user', content: text }], ...extra };
}

function text_of(message) {
  return message.content.filter((b) => b.type === 'text').map((b) => b.text).join('');
}

for (const model of kModels) {
  test(`messages.create on ${model}`, async () => {
    const m = await client.messages.create(request(model, 'Say hello.'));
    assert.equal(m.type, 'message');
    assert.equal(m.role, 'assistant');
    assert.equal(m.model, model, 'the reply names the model the client asked for');
    assert.match(m.id, /^msg_/);
    assert.ok(['end_turn', 'max_tokens', 'stop_sequence'].includes(m.stop_reason), m.stop_reason);
    assert.ok(m.content.length >= 1);
    assert.ok(m.usage.input_tokens > 0, JSON.stringify(m.usage));
    assert.ok(m.usage.output_tokens > 0 && m.usage.output_tokens <= 8, JSON.stringify(m.usage));
    if (m.stop_reason === 'max_tokens') assert.equal(m.usage.output_tokens, 8);
  });

  test(`messages.stream with its event helpers on ${model}`, async () => {
    const seen = [];
    let streamed = '';
    const stream = client.messages.stream(request(model, 'Count to three.'));
    stream.on('streamEvent', (e) => seen.push(e.type));
    stream.on('text', (delta) => { streamed += delta; });
    const final = await stream.finalMessage();
    assert.equal(seen[0], 'message_start');
    assert.equal(seen.at(-1), 'message_stop');
    assert.ok(seen.includes('message_delta'));
    assert.equal(streamed, text_of(final), 'the text events add up to the final message');
    assert.equal(final.model, model);
    assert.ok(final.usage.output_tokens > 0, JSON.stringify(final.usage));
    assert.ok(final.usage.input_tokens > 0, JSON.stringify(final.usage));
  });

  // Only where ferry itself answers is the answer's count ferry's (a test upstream's usage is
  // its own). Anthropic's input_tokens leave out the tokens read from the cache.
  test(`countTokens equals the answer's prompt count on ${model}`,
       { skip: model !== 'local' && 'the answer\'s usage is the test upstream\'s own count' },
       async () => {
         const req = request(model, 'How many tokens is this prompt?');
         const counted = await client.messages.countTokens(
             { model: req.model, system: req.system, messages: req.messages });
         const answered = await client.messages.create(req);
         const u = answered.usage;
         assert.equal(counted.input_tokens, u.input_tokens + (u.cache_read_input_tokens ?? 0) +
                                                (u.cache_creation_input_tokens ?? 0));
       });

  // Tools need a template that renders them: the local-tools model (Hermes); the others route
  // to the demo model, whose template ignores tools (a 400 that falls back, tested elsewhere).
  test(`a tool with tool_choice auto on ${model}: text or a well-formed call`,
       { skip: model !== 'local' && 'tools run on local-tools only' }, async () => {
    const m = await client.messages.create(request('local-tools', 'What is the weather in Paris?', {
      tools: [{ name: 'get_weather', description: 'Weather of a city',
                input_schema: { type: 'object', properties: { city: { type: 'string' } },
                                required: ['city'] } }],
      tool_choice: { type: 'auto' },
    }));
    for (const b of m.content) {
      assert.ok(b.type === 'text' || b.type === 'tool_use', b.type);
      if (b.type === 'tool_use') {
        assert.equal(b.name, 'get_weather');
        assert.equal(typeof b.input, 'object');
      }
    }
    if (m.stop_reason === 'tool_use') assert.ok(m.content.some((b) => b.type === 'tool_use'));
  });

  // Random weights may run past max_tokens inside the call: then, as Anthropic answers, the
  // tool_use block holds what was generated and stop_reason is max_tokens.
  test(`tool_choice any on ${model} is a tool call, never plain text`,
       { skip: model !== 'local' && 'tools run on local-tools only' }, async () => {
         const params = request('local-tools', 'Weather in Paris?', {
           max_tokens: 64,
           tools: [{ name: 'get_weather', input_schema: { type: 'object',
                                                          properties: { city: { type: 'string' } } } }],
           tool_choice: { type: 'any' },
         });
         const m = await client.messages.create(params);
         assert.ok(['tool_use', 'max_tokens'].includes(m.stop_reason), m.stop_reason);
         assert.ok(m.content.every((b) => b.type === 'tool_use'), JSON.stringify(m.content));
         if (m.stop_reason === 'tool_use') assert.ok(m.content.length >= 1);
         for (const b of m.content) {
           assert.equal(b.name, 'get_weather');
           assert.equal(typeof b.input, 'object');
         }
         // Streamed: the SDK's helpers assemble the same kind of message from the events.
         const final = await client.messages.stream(params).finalMessage();
         assert.ok(['tool_use', 'max_tokens'].includes(final.stop_reason), final.stop_reason);
         assert.ok(final.content.every((b) => b.type === 'tool_use' && b.name === 'get_weather'));
       });
}

test('a multi-turn conversation with a tool result is accepted and answered', async () => {
  const m = await client.messages.create({
    model: 'local-tools', max_tokens: 8,
    tools: [{ name: 'get_weather', input_schema: { type: 'object' } }],
    messages: [
      { role: 'user', content: 'Weather in Paris?' },
      { role: 'assistant', content: [{ type: 'tool_use', id: 'toolu_01', name: 'get_weather',
                                        input: { city: 'Paris' } }] },
      { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_01', content: 'sunny' }] },
    ],
  });
  assert.equal(m.type, 'message');
  assert.ok(m.usage.input_tokens > 0);
});

test('errors are the SDK error classes with Anthropic statuses', async () => {
  const unknown = await client.messages.create(request('no-such-model', 'x')).catch((e) => e);
  assert.ok(unknown instanceof Anthropic.NotFoundError, String(unknown));
  assert.equal(unknown.status, 404);
  assert.equal(unknown.error?.error?.type, 'not_found_error');

  const bad_key = new Anthropic({ baseURL: kRootUrl, apiKey: 'sk-wrong', maxRetries: 0 });
  const unauth = await bad_key.messages.create(request('local', 'x')).catch((e) => e);
  assert.ok(unauth instanceof Anthropic.AuthenticationError, String(unauth));
  assert.equal(unauth.status, 401);

  const bad = await client.messages.create({ model: 'local', messages: [] , max_tokens: 4 })
      .catch((e) => e);
  assert.ok(bad instanceof Anthropic.BadRequestError, String(bad));
  assert.equal(bad.error?.error?.type, 'invalid_request_error');
  assert.match(bad.message, /messages/);

  const orphan = await client.messages.create({
    model: 'local', max_tokens: 4,
    messages: [{ role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_x' }] }],
  }).catch((e) => e);
  assert.ok(orphan instanceof Anthropic.BadRequestError, String(orphan));

  // Still serving.
  const ok = await client.messages.create(request('local', 'still there?'));
  assert.equal(ok.type, 'message');
});

test('the ledger has the rows under Claude Code\'s session id', async () => {
  const session = `sdk-session-${Date.now()}`;
  await client.messages.create(request('local', 'row please'),
                               { headers: { 'X-Claude-Code-Session-Id': session } });
  let rows = '';
  for (let i = 0; i < 200; ++i) {
    const res = await fetch(`${kRootUrl}/v1/ledger/export.csv?task=${session}`,
                            { headers: { authorization: `Bearer ${kAdminKey}` } });
    rows = (await res.text()).trim().split('\n').slice(1).join('\n');
    if (rows.length > 0) break;
    await new Promise((r) => setTimeout(r, 25));
  }
  assert.equal(rows.split('\n').length, 1, rows);
  assert.ok(rows.includes(session));
});
