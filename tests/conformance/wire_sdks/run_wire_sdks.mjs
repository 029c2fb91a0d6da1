// The renderers of api/ checked by the official SDKs: ferry_api_wire_fixtures writes rendered
// answers and streams to a directory; this script serves those bytes on a loopback HTTP server
// (node:http, port 0) to @anthropic-ai/sdk (messages.create, messages.stream with its event
// helpers and finalMessage) and to openai (responses.create, responses.stream and
// finalResponse), and asserts that what each SDK accumulates equals the typed answer that was
// rendered (<case>.answer.json). The request's `model` names the case.
//   node run_wire_sdks.mjs --fixtures PATH_TO_ferry_api_wire_fixtures
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { test, after } from 'node:test';

import { ensure_node_modules } from '../servers.mjs';

function fixtures_bin() {
  const i = process.argv.indexOf('--fixtures');
  if (i < 0 || !process.argv[i + 1]) {
    console.error('usage: node run_wire_sdks.mjs --fixtures PATH');
    process.exit(2);
  }
  return process.argv[i + 1];
}

ensure_node_modules();
const { default: Anthropic } = await import('@anthropic-ai/sdk');
const { default: OpenAI } = await import('openai');

const kDir = fs.mkdtempSync(path.join(os.tmpdir(), 'ferry-wire-sdks-'));
const made = spawnSync(fixtures_bin(), [kDir], { stdio: 'inherit' });
assert.equal(made.status, 0, 'ferry_api_wire_fixtures failed');
const kCases = JSON.parse(fs.readFileSync(path.join(kDir, 'cases.json'), 'utf8'));
const read = (name) => fs.readFileSync(path.join(kDir, name));
const answer_of = (c) => JSON.parse(read(`${c}.answer.json`));

// ---------------------------------------------------------------------------------------------
// The server: /v1/messages -> <case>.anthropic.*, /v1/responses -> <case>.responses.*

const server = http.createServer((req, res) => {
  let body = '';
  req.on('data', (d) => { body += d; });
  req.on('end', () => {
    const api = req.url === '/v1/messages' ? 'anthropic' : req.url === '/v1/responses' ? 'responses'
                                                                                      : null;
    const request = JSON.parse(body || '{}');
    if (!api || !kCases.includes(request.model)) {
      res.writeHead(404, { 'content-type': 'application/json' });
      res.end('{"error":{"message":"no such fixture"}}');
      return;
    }
    if (request.stream) {
      res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
      res.end(read(`${request.model}.${api}.sse`));
      return;
    }
    const { status, body: json } = JSON.parse(read(`${request.model}.${api}.json`));
    res.writeHead(status, { 'content-type': 'application/json' });
    res.end(JSON.stringify(json));
  });
});
await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
const kUrl = `http://127.0.0.1:${server.address().port}`;
after(() => {
  server.close();
  fs.rmSync(kDir, { recursive: true, force: true });
});

const anthropic = new Anthropic({ baseURL: kUrl, apiKey: 'sk-fixture', maxRetries: 0 });
const openai = new OpenAI({ baseURL: `${kUrl}/v1`, apiKey: 'sk-fixture', maxRetries: 0 });

// ---------------------------------------------------------------------------------------------
// Anthropic: the typed answer in Messages' words

const kStopReason = { stop: 'end_turn', length: 'max_tokens', stop_sequence: 'stop_sequence',
                      tool_calls: 'tool_use', content_filter: 'refusal' };
const kAnthropicErrors = { unavailable: ['overloaded_error', 529] };

function assert_anthropic_content(content, blocks) {
  assert.equal(content.length, blocks.length, 'one content block per typed block');
  blocks.forEach((b, i) => {
    const c = content[i];
    if (b.kind === 'text') {
      assert.deepEqual({ type: c.type, text: c.text }, { type: 'text', text: b.text });
    } else if (b.kind === 'thinking') {
      assert.deepEqual({ type: c.type, thinking: c.thinking, signature: c.signature },
                       { type: 'thinking', thinking: b.text, signature: b.signature });
    } else {
      assert.equal(c.type, 'tool_use');
      assert.equal(c.name, b.name);
      assert.deepEqual(c.input, JSON.parse(b.arguments || '{}'));
      if (b.call_id) assert.equal(c.id, b.call_id);
      else assert.match(c.id, /^toolu_[A-Za-z0-9]{24}$/);
    }
  });
}

function assert_anthropic_message(msg, want) {
  assert.equal(msg.type, 'message');
  assert.equal(msg.role, 'assistant');
  assert.match(msg.id, /^msg_[A-Za-z0-9]{24}$/);
  assert.equal(msg.model, want.model);
  assert_anthropic_content(msg.content, want.blocks);
  assert.equal(msg.stop_reason, kStopReason[want.finish]);
  assert.equal(msg.stop_sequence, want.finish === 'stop_sequence' ? want.stop_sequence : null);
  const u = want.usage;
  assert.equal(msg.usage.input_tokens, u.prompt_tokens - u.cached_tokens);
  assert.equal(msg.usage.cache_read_input_tokens, u.cached_tokens);
  assert.equal(msg.usage.output_tokens, u.completion_tokens);
}

for (const c of kCases) {
  const want = answer_of(c);
  const params = { model: c, max_tokens: 256, messages: [{ role: 'user', content: 'hi' }] };

  test(`anthropic messages.create: ${c}`, async () => {
    if (want.error) {
      const err = await anthropic.messages.create(params).then(
          () => assert.fail('expected an error'), (e) => e);
      const [type, status] = kAnthropicErrors[want.error.code];
      assert.equal(err.status, status);
      assert.equal(err.error.type, 'error');
      assert.equal(err.error.error.type, type);
      assert.equal(err.error.error.message, want.error.message);
      return;
    }
    assert_anthropic_message(await anthropic.messages.create(params), want);
  });

  test(`anthropic messages.stream: ${c}`, async () => {
    const stream = anthropic.messages.stream(params);
    let text = '';
    let thinking = '';
    const json_parts = [];
    const blocks = [];
    stream.on('text', (delta) => { text += delta; });
    stream.on('thinking', (delta) => { thinking += delta; });
    stream.on('inputJson', (partial) => { json_parts.push(partial); });
    stream.on('contentBlock', (block) => { blocks.push(block); });
    stream.on('error', () => {});  // asserted through finalMessage below
    if (want.error) {
      const err = await stream.finalMessage().then(() => assert.fail('expected an error'),
                                                   (e) => e);
      assert.equal(err.error?.error?.type, kAnthropicErrors[want.error.code][0]);
      assert.equal(err.error?.error?.message, want.error.message);
      // What arrived before the error is what was rendered before it.
      assert.equal(text, want.blocks.filter((b) => b.kind === 'text').map((b) => b.text).join(''));
      return;
    }
    const msg = await stream.finalMessage();
    assert_anthropic_message(msg, want);
    assert.equal(text, want.blocks.filter((b) => b.kind === 'text').map((b) => b.text).join(''));
    assert.equal(thinking,
                 want.blocks.filter((b) => b.kind === 'thinking').map((b) => b.text).join(''));
    assert.equal(json_parts.join(''),
                 want.blocks.filter((b) => b.kind === 'tool_call').map((b) => b.arguments).join(''));
    assert_anthropic_content(blocks, want.blocks);
  });
}

// ---------------------------------------------------------------------------------------------
// OpenAI Responses: the typed answer in Responses' words (signatures have no place there)

const kOpenAIErrors = { unavailable: 503 };

function assert_response(resp, want) {
  assert.equal(resp.object, 'response');
  assert.match(resp.id, /^resp_[A-Za-z0-9]{48}$/);
  assert.equal(resp.model, want.model);
  const incomplete = { length: 'max_output_tokens', content_filter: 'content_filter' };
  if (want.error) {
    assert.equal(resp.status, 'failed');
    assert.equal(resp.error.message, want.error.message);
  } else if (incomplete[want.finish]) {
    assert.equal(resp.status, 'incomplete');
    assert.equal(resp.incomplete_details.reason, incomplete[want.finish]);
  } else {
    assert.equal(resp.status, 'completed');
    assert.equal(resp.incomplete_details, null);
  }
  assert.equal(resp.output.length, want.blocks.length, 'one output item per typed block');
  want.blocks.forEach((b, i) => {
    const item = resp.output[i];
    if (b.kind === 'text') {
      assert.equal(item.type, 'message');
      assert.equal(item.role, 'assistant');
      assert.deepEqual(item.content.map((p) => [p.type, p.text]), [['output_text', b.text]]);
    } else if (b.kind === 'thinking') {
      assert.equal(item.type, 'reasoning');
      assert.deepEqual(item.content.map((p) => [p.type, p.text]), [['reasoning_text', b.text]]);
    } else {
      assert.equal(item.type, 'function_call');
      assert.equal(item.name, b.name);
      assert.equal(item.arguments, b.arguments);
      if (b.call_id) assert.equal(item.call_id, b.call_id);
      else assert.match(item.call_id, /^call_[A-Za-z0-9]{24}$/);
    }
  });
  assert.equal(resp.output_text,
               want.blocks.filter((b) => b.kind === 'text').map((b) => b.text).join(''));
  if (want.error) return;
  const u = want.usage;
  assert.deepEqual(resp.usage, {
    input_tokens: u.prompt_tokens, input_tokens_details: { cached_tokens: u.cached_tokens },
    output_tokens: u.completion_tokens,
    output_tokens_details: { reasoning_tokens: u.reasoning_tokens },
    total_tokens: u.prompt_tokens + u.completion_tokens });
}

for (const c of kCases) {
  const want = answer_of(c);
  const params = { model: c, input: 'hi' };

  test(`openai responses.create: ${c}`, async () => {
    if (want.error) {
      const err = await openai.responses.create(params).then(
          () => assert.fail('expected an error'), (e) => e);
      assert.equal(err.status, kOpenAIErrors[want.error.code]);
      assert.equal(err.error.message, want.error.message);
      return;
    }
    assert_response(await openai.responses.create(params), want);
  });

  test(`openai responses.stream: ${c}`, async () => {
    const stream = openai.responses.stream(params);
    let text = '';
    let args = '';
    const types = [];
    stream.on('response.output_text.delta', (e) => { text += e.delta; });
    stream.on('response.function_call_arguments.delta', (e) => { args += e.delta; });
    stream.on('event', (e) => { types.push(e.type); });
    const resp = await stream.finalResponse();
    assert_response(resp, want);
    // Failed answers keep what was said before the error; the rest say it all.
    const blocks = want.error ? want.blocks.slice(0, 1) : want.blocks;
    assert.equal(text, blocks.filter((b) => b.kind === 'text').map((b) => b.text).join(''));
    assert.equal(args, blocks.filter((b) => b.kind === 'tool_call').map((b) => b.arguments).join(''));
    assert.equal(types[0], 'response.created');
    assert.equal(types[1], 'response.in_progress');
    const last = want.error ? 'response.failed'
                            : resp.status === 'incomplete' ? 'response.incomplete'
                                                           : 'response.completed';
    assert.equal(types.at(-1), last);
  });
}
