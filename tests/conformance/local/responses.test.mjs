// OpenAI Responses answered by the in-process engine (a synthesized model: random weights, so
// the text means nothing but the protocol must be exact), and by a second ferry as an HTTP
// backend that speaks chat (the translate path), with the official `openai` client: create,
// stream/finalResponse, function tools with tool_choice auto over turns, previous_response_id,
// the ledger's rows, and errors. Servers: tests/conformance/run_local.mjs.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import OpenAI from 'openai';

const kBaseUrl = process.env.FERRY_BASE_URL;
const kRootUrl = process.env.FERRY_ROOT_URL;
const kApiKey = process.env.FERRY_API_KEY;
const kAdminKey = process.env.FERRY_ADMIN_KEY;
if (!kBaseUrl || !kApiKey) throw new Error('run through run_local.mjs (ctest -L conformance)');

const client = new OpenAI({ baseURL: kBaseUrl, apiKey: kApiKey, maxRetries: 0, timeout: 120000 });

const kTools = [{
  type: 'function', name: 'lookup', description: 'Looks a word up', strict: false,
  parameters: { type: 'object', properties: { word: { type: 'string' } }, required: ['word'] },
}];

function check_response(r, model) {
  assert.equal(r.object, 'response');
  assert.match(r.id, /^resp_/);
  assert.equal(r.model, model);
  assert.ok(['completed', 'incomplete'].includes(r.status), r.status);
  if (r.status === 'incomplete') assert.equal(r.incomplete_details.reason, 'max_output_tokens');
  assert.ok(r.output.length >= 1, JSON.stringify(r.output));
  for (const item of r.output) {
    assert.ok(['message', 'function_call', 'reasoning'].includes(item.type), item.type);
    if (item.type === 'function_call') {
      assert.equal(typeof item.call_id, 'string');
      assert.equal(typeof item.arguments, 'string');
    }
  }
  assert.ok(r.usage.input_tokens > 0);
  assert.ok(r.usage.output_tokens > 0 && r.usage.output_tokens <= 8, `${r.usage.output_tokens}`);
  assert.equal(r.usage.total_tokens, r.usage.input_tokens + r.usage.output_tokens);
}

for (const model of ['local', 'remote']) {
  test(`responses (${model}): create and stream agree on the protocol`, async () => {
    const r = await client.responses.create({ model, input: 'Tell me about boats.',
                                              instructions: 'Be terse.', max_output_tokens: 8,
                                              temperature: 0 });
    check_response(r, model);
    assert.equal(typeof r.output_text, 'string');
    const stream = client.responses.stream({ model, input: 'Tell me about boats.',
                                             instructions: 'Be terse.', max_output_tokens: 8,
                                             temperature: 0 });
    const types = [];
    for await (const event of stream) types.push(event.type);
    const final = await stream.finalResponse();
    check_response(final, model);
    assert.equal(types[0], 'response.created');
    assert.ok(['response.completed', 'response.incomplete'].includes(types.at(-1)), types.at(-1));
    // Greedy on the same engine: the same text either way.
    assert.equal(final.output_text, r.output_text);
  });

  // Tools need a template that renders them: local-tools (Hermes); `remote` routes to the demo
  // model, whose template ignores tools (a 400 the policy falls back on, tested elsewhere).
  test(`responses (${model}): tools with tool_choice auto over turns`,
       { skip: model !== 'local' && 'tools run on local-tools only' }, async () => {
    const first = await client.responses.create({ model: 'local-tools', input: 'Look up "ferry".',
                                                  tools: kTools, tool_choice: 'auto',
                                                  max_output_tokens: 8, temperature: 0 });
    check_response(first, 'local-tools');
    // Text is a valid answer to tool_choice auto; a call gets its output in the next turn.
    const call = first.output.find((i) => i.type === 'function_call');
    const next = call
      ? [{ type: 'function_call_output', call_id: call.call_id, output: 'a boat' }]
      : 'Thanks.';
    const second = await client.responses.create({ model: 'local-tools', input: next, tools: kTools,
                                                   previous_response_id: first.id,
                                                   max_output_tokens: 8, temperature: 0 });
    check_response(second, 'local-tools');
    assert.equal(second.previous_response_id, first.id);
  });
}

test('responses (local): errors are OpenAI errors, and every answer has its ledger row', async () => {
  for (const [body, param] of [[{ model: 'local', input: [] }, 'input'],
                               [{ model: 'local', input: 'x', tools: [{ type: 'web_search' }] },
                                'tools[0]'],
                               [{ model: 'local', input: 'x', max_output_tokens: 0 },
                                'max_output_tokens']]) {
    try {
      await client.responses.create(body);
      assert.fail('expected a 400');
    } catch (e) {
      assert.equal(e.status, 400, e.message);
      assert.equal(e.param, param);
    }
  }
  await client.responses.create({ model: 'local', input: 'ledger me', max_output_tokens: 4,
                                  prompt_cache_key: 'responses-local-task' });
  const res = await fetch(`${kRootUrl}/v1/ledger/export.csv?task=responses-local-task`, {
    headers: { authorization: `Bearer ${kAdminKey}` },
  });
  assert.equal(res.status, 200);
  const lines = (await res.text()).trim().split('\n');
  assert.ok(lines.length >= 2, lines.join('\n'));
  assert.ok(lines.slice(1).every((l) => l.includes('responses-local-task')));
});
