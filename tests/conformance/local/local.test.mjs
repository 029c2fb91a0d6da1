// The in-process engine through ferry's HTTP API, driven by the official `openai` client:
// streaming and not, 16 concurrent clients, hang-ups, a full queue, a prompt that does not fit,
// the prefix cache, a second ferry as the HTTP backend of the first, and fallbacks between
// HTTP backends and the local engine. Servers: tests/conformance/run_local.mjs.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import OpenAI from 'openai';

const kBaseUrl = process.env.FERRY_BASE_URL;
const kRootUrl = process.env.FERRY_ROOT_URL;
const kApiKey = process.env.FERRY_API_KEY;
const kAdminKey = process.env.FERRY_ADMIN_KEY;
const kBBaseUrl = process.env.FERRY_B_BASE_URL;
if (!kBaseUrl || !kApiKey) throw new Error('run through run_local.mjs (ctest -L conformance)');

const client = new OpenAI({ baseURL: kBaseUrl, apiKey: kApiKey, maxRetries: 0, timeout: 120000 });

function chat(model, user, extra = {}) {
  return { model, messages: [{ role: 'system', content: 'You are terse.' }, { role: 'user', content: user }],
           temperature: 0, max_tokens: 12, ...extra };
}

async function collect(stream) {
  let text = '';
  let finish = null;
  let usage = null;
  let role = null;
  for await (const chunk of stream) {
    if (chunk.usage) usage = chunk.usage;
    const c = chunk.choices?.[0];
    if (!c) continue;
    if (c.delta?.role) role = c.delta.role;
    if (c.delta?.content) text += c.delta.content;
    if (c.finish_reason) finish = c.finish_reason;
  }
  return { text, finish, usage, role };
}

async function metric(name) {
  const res = await fetch(`${kRootUrl}/metrics`);
  const body = await res.text();
  const line = body.split('\n').find((l) => l.startsWith(name + ' '));
  return line === undefined ? undefined : Number(line.slice(name.length + 1));
}

async function until(predicate, what, ms = 20000) {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    if (await predicate()) return;
    await new Promise((r) => setTimeout(r, 50));
  }
  assert.fail(`timed out waiting for ${what}`);
}

test('non-streaming and streaming answers from the local model agree (greedy)', async () => {
  const r = await client.chat.completions.create(chat('local', 'Tell me about boats.'));
  assert.equal(r.object, 'chat.completion');
  assert.equal(r.choices.length, 1);
  assert.equal(r.choices[0].message.role, 'assistant');
  assert.equal(typeof r.choices[0].message.content, 'string');
  assert.ok(['stop', 'length'].includes(r.choices[0].finish_reason));
  assert.ok(r.usage.prompt_tokens > 0);
  assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens);
  if (r.choices[0].finish_reason === 'length') assert.equal(r.usage.completion_tokens, 12);

  const s = await collect(await client.chat.completions.create(
      { ...chat('local', 'Tell me about boats.'), stream: true, stream_options: { include_usage: true } }));
  assert.equal(s.role, 'assistant');
  assert.equal(s.text, r.choices[0].message.content);
  assert.equal(s.finish, r.choices[0].finish_reason);
  assert.equal(s.usage.completion_tokens, r.usage.completion_tokens);
  assert.equal(s.usage.prompt_tokens, r.usage.prompt_tokens);
});

test('completions from the local model', async () => {
  const r = await client.completions.create({ model: 'local', prompt: 'Once upon a time', max_tokens: 8,
                                              temperature: 0 });
  assert.equal(r.object, 'text_completion');
  assert.equal(typeof r.choices[0].text, 'string');
  assert.ok(r.usage.completion_tokens <= 8 && r.usage.completion_tokens > 0);
});

test('16 concurrent clients each get exactly the output they get alone', async () => {
  const prompts = Array.from({ length: 16 }, (_, i) => `Question number ${i}: why is the sky ${'blue '.repeat(i % 4)}?`);
  const alone = [];
  for (const p of prompts) {
    const r = await client.chat.completions.create(chat('local', p, { max_tokens: 16 }));
    alone.push(r.choices[0].message.content);
  }
  const together = await Promise.all(prompts.map(async (p, i) => {
    if (i % 2 === 0) {
      const r = await client.chat.completions.create(chat('local', p, { max_tokens: 16 }));
      return r.choices[0].message.content;
    }
    const s = await collect(await client.chat.completions.create({ ...chat('local', p, { max_tokens: 16 }), stream: true }));
    return s.text;
  }));
  assert.deepEqual(together, alone);
});

test('a client that hangs up mid-stream frees its sequence while others continue', async () => {
  const cancelled_before = (await metric('ferry_local_sequences_cancelled_total{backend="cpu"}')) ?? 0;
  const other = client.chat.completions.create(
      { ...chat('local', 'keep going', { max_tokens: 64 }), stream: true });
  const controller = new AbortController();
  const stream = await client.chat.completions.create(
      { ...chat('local', 'a long answer please', { max_tokens: 2000, ignore_eos: true }), stream: true },
      { signal: controller.signal, headers: { 'x-ferry-task': 'hang-up-task' } });
  let chunks = 0;
  try {
    for await (const chunk of stream) {
      // Tokens the client saw (the role chunk's content is "": it is no token).
      if (chunk.choices?.[0]?.delta?.content) chunks++;
      if (chunks === 3) {
        controller.abort();  // the client hangs up: the connection closes
        break;
      }
    }
  } catch (e) {
    assert.equal(e.name, 'AbortError', String(e));
  }
  assert.equal(chunks, 3);
  const rest = await collect(await other);
  assert.ok(['stop', 'length'].includes(rest.finish), `finish ${rest.finish}`);
  await until(async () => (await metric('ferry_local_active_sequences{backend="cpu"}')) === 0,
              'the hung-up sequence to be freed');
  assert.ok((await metric('ferry_local_sequences_cancelled_total{backend="cpu"}')) > cancelled_before);

  // The ledger recorded what was generated before the hang-up.
  await until(async () => {
    const res = await fetch(`${kBaseUrl}/ledger/export.csv?task=hang-up-task`,
                            { headers: { authorization: `Bearer ${kAdminKey}` } });
    const lines = (await res.text()).trim().split('\n');
    if (lines.length < 2) return false;
    const header = lines[0].split(',');
    const row = lines[1].split(',');
    const get = (k) => row[header.indexOf(k)];
    assert.equal(get('status'), 'client_cancelled');
    assert.ok(Number(get('output_tokens')) >= 3, `output_tokens ${get('output_tokens')}`);
    assert.equal(get('pricing'), 'internal');
    return true;
  }, 'the ledger row of the hung-up request');
});

test('a full local engine answers 503 at once, and a route falls back to the next target', async () => {
  // `small` has one sequence slot and no queue; a streamed hog of up to 2000 tokens takes it.
  // The tiny model makes 2000 tokens in ~0.1 s, which a loaded machine (ctest -j2) can take to
  // answer the two requests below, so a round counts only when the hog was still generating
  // after both were answered (`small` active, and only the hog can be): then the slot was held
  // throughout and the answers must be the full engine's. A round the hog outran is run again.
  const active = () => metric('ferry_local_active_sequences{backend="cpu-small"}');
  for (let round = 1; round <= 6; ++round) {
    const hog = await client.chat.completions.create(
        { ...chat('small', 'hold the slot', { max_tokens: 2000, ignore_eos: true }), stream: true });
    const it = hog[Symbol.asyncIterator]();
    await it.next();  // the slot is taken
    const err = await client.chat.completions.create(chat('small', 'me too')).catch((e) => e);
    const fallback = await client.chat.completions.create(chat('full-then-remote', 'me too'))
                         .withResponse().catch((e) => e);
    const held = (await active()) === 1;
    let rest = 0;
    while (!(await it.next()).done) ++rest;
    if (!held) {
      console.log(`round ${round}: the hog ended before the checks (${rest} chunks left to read); again`);
      continue;
    }
    assert.equal(err.status, 503, String(err));
    assert.ok(Number(err.headers.get('retry-after')) >= 1);
    assert.ok(fallback.response, String(fallback));
    assert.equal(fallback.response.headers.get('x-ferry-target'), 'remote');
    assert.equal(fallback.response.headers.get('x-ferry-attempts'), '2');
    assert.equal(typeof fallback.data.choices[0].message.content, 'string');
    await until(async () => (await active()) === 0, 'the hog to free the slot');
    return;
  }
  assert.fail('in 6 rounds the hog never outlasted two short requests');
});

test('a prompt that does not fit the context gets a 400 naming the numbers', async () => {
  const long = 'word '.repeat(2200);
  const err = await client.chat.completions.create(chat('small', long, { max_tokens: 10 })).catch((e) => e);
  assert.equal(err.status, 400, String(err));
  assert.match(err.message, /2048/);
});

test('the prefix cache reuses a shared system prompt and changes nothing in the output', async () => {
  const system = 'You are a ship captain. ' + 'The sea is wide and the wind is strong. '.repeat(25);
  const ask = (model, user) => client.chat.completions.create({
    model, temperature: 0, max_tokens: 16,
    messages: [{ role: 'system', content: system }, { role: 'user', content: user }] });
  const first = await ask('local', 'Where do we sail?');
  const second = await ask('local', 'When do we sail?');
  assert.ok(first.usage.prompt_tokens > 500, `system prompt is ${first.usage.prompt_tokens} tokens`);
  const cached = second.usage.prompt_tokens_details?.cached_tokens ?? 0;
  assert.ok(cached >= first.usage.prompt_tokens - 32, `cached_tokens ${cached} of ${second.usage.prompt_tokens}`);
  const uncached = await ask('nocache', 'When do we sail?');
  assert.equal(uncached.usage.prompt_tokens_details?.cached_tokens ?? 0, 0);
  assert.equal(second.choices[0].message.content, uncached.choices[0].message.content);
});

test('a second ferry with only a local model serves as the HTTP backend of the first', async () => {
  const direct = new OpenAI({ baseURL: kBBaseUrl, apiKey: 'unused', maxRetries: 0 });
  const models = await direct.models.list();
  assert.deepEqual(models.data.map((m) => m.id), ['tiny']);
  const viaB = await direct.chat.completions.create(chat('tiny', 'hello over http'));
  const { data, response } = await client.chat.completions.create(chat('remote', 'hello over http')).withResponse();
  assert.equal(response.headers.get('x-ferry-target'), 'remote');
  assert.equal(data.choices[0].message.content, viaB.choices[0].message.content);
  const local = await client.chat.completions.create(chat('local', 'hello over http'));
  assert.equal(local.choices[0].message.content, viaB.choices[0].message.content);
  const s = await collect(await client.chat.completions.create({ ...chat('remote', 'hello over http'), stream: true }));
  assert.equal(s.text, viaB.choices[0].message.content);
});

test('a failing HTTP backend and a dead one fall back to the local model', async () => {
  const { data, response } = await client.chat.completions.create(chat('fallback-to-local', 'anyone there?')).withResponse();
  assert.equal(response.headers.get('x-ferry-target'), 'local');
  assert.equal(response.headers.get('x-ferry-attempts'), '3');
  assert.equal(response.headers.get('x-ferry-rule'), 'fallback-to-local');
  const local = await client.chat.completions.create(chat('local', 'anyone there?'));
  assert.equal(data.choices[0].message.content, local.choices[0].message.content);
});

test('every answer names the model the client asked for, and sending it back works', async () => {
  // `remote` goes to ferry B as `tiny`; `fallback-to-local` ends on the local target `local`.
  for (const alias of ['remote', 'fallback-to-local', 'local']) {
    const { data, response } = await client.chat.completions.create(chat(alias, 'name yourself')).withResponse();
    assert.equal(data.model, alias, `non-stream model for ${alias}`);
    assert.ok(response.headers.get('x-ferry-target'), 'x-ferry-target says where it went');
    const models = [];
    for await (const chunk of await client.chat.completions.create(
        { ...chat(alias, 'name yourself'), stream: true, stream_options: { include_usage: true } })) {
      models.push(chunk.model);
    }
    assert.ok(models.length > 1);
    assert.deepEqual([...new Set(models)], [alias], `stream model for ${alias}`);
    const again = await client.chat.completions.create(chat(data.model, 'name yourself'));
    assert.equal(again.model, alias);
    const completion = await client.completions.create({ model: alias, prompt: 'Once', max_tokens: 3 });
    assert.equal(completion.model, alias);
  }
  assert.equal((await client.models.retrieve('remote')).id, 'remote');
});

test('n = 3 on the local engine: three choices over one prompt, reproducible with a seed', async () => {
  const ask = { ...chat('local', 'Give me three names for a boat.'), temperature: 1, seed: 42,
                max_tokens: 8, ignore_eos: true };
  const one = await client.chat.completions.create(ask);
  const r = await client.chat.completions.create({ ...ask, n: 3 });
  assert.equal(r.choices.length, 3);
  assert.deepEqual(r.choices.map((c) => c.index), [0, 1, 2]);
  for (const c of r.choices) {
    assert.equal(c.message.role, 'assistant');
    assert.equal(c.finish_reason, 'length');
  }
  // Billed as one prompt plus every choice's output.
  assert.equal(r.usage.prompt_tokens, one.usage.prompt_tokens);
  assert.equal(r.usage.completion_tokens, 3 * one.usage.completion_tokens);
  assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens);
  // Choice 0 samples with the request's seed; the others with their own streams.
  assert.equal(r.choices[0].message.content, one.choices[0].message.content);
  assert.ok(new Set(r.choices.map((c) => c.message.content)).size > 1, 'the choices differ');
  const again = await client.chat.completions.create({ ...ask, n: 3 });
  assert.deepEqual(again.choices.map((c) => c.message.content), r.choices.map((c) => c.message.content));

  // The stream carries the same three choices, each with its role, text and finish.
  const text = ['', '', ''];
  const finish = [null, null, null];
  const roles = [null, null, null];
  let usage = null;
  for await (const chunk of await client.chat.completions.create(
      { ...ask, n: 3, stream: true, stream_options: { include_usage: true } })) {
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      if (c.delta?.role) roles[c.index] = c.delta.role;
      if (c.delta?.content) text[c.index] += c.delta.content;
      if (c.finish_reason) finish[c.index] = c.finish_reason;
    }
  }
  assert.deepEqual(roles, ['assistant', 'assistant', 'assistant']);
  assert.deepEqual(finish, ['length', 'length', 'length']);
  assert.deepEqual(text, r.choices.map((c) => c.message.content));
  assert.deepEqual(usage.prompt_tokens, r.usage.prompt_tokens);
  assert.deepEqual(usage.completion_tokens, r.usage.completion_tokens);

  // Completions too; and an n the engine cannot take is a clear 400.
  const cmpl = await client.completions.create({ model: 'local', prompt: 'Once upon a time', n: 2,
                                                 max_tokens: 4, seed: 7, temperature: 1 });
  assert.deepEqual(cmpl.choices.map((c) => c.index), [0, 1]);
  const err = await client.chat.completions.create({ ...ask, n: 500 }).catch((e) => e);
  assert.equal(err.status, 400);
  assert.equal(err.param, 'n');
});
