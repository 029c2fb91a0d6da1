// The constraint engine over the served path: ferry serves random-weight models of the three
// architectures (`ferry model synth`, byte-level BPE) and the SentencePiece model
// ../shared/models/llama-2-tiny-random.gguf (skipped when absent), all with a Hermes tool
// template, and every case (../cases.json: every supported keyword and tool_choice, plus
// schemas generated at random from the subset) is asked through POST /v1/chat/completions at
// temperature 1 with several seeds: `response_format` json_schema strict, or `tools` with its
// tool_choice. Without the constraint a random model writes noise, so every valid answer is the
// constraint's doing. Fails unless every completed answer (finish_reason stop / tool_calls)
// validates with ajv, every tool call names a declared function with valid arguments, every
// answer carries x-ferry-constraint, and nothing is refused.
//   node validate_served.mjs --ferry PATH [--random N] [--seeds K] [--max-tokens M]
// The test command runs a small sample (ctest constrain.ajv_served); bench or FERRY_SERVED_FULL=1
// runs it with more schemas and seeds.
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

import { print_tail, start_server, stop_server } from '../../conformance/servers.mjs';
import { ensure_node_modules, random_cases } from './schemas.mjs';

const kHere = path.dirname(fileURLToPath(import.meta.url));
const kKey = 'sk-ferry-served-walks';

// Qwen2.5-style: tools in <tools>, calls in <tool_call> (the format ferry detects).
const kHermesTemplate =
  "{%- if tools %}<|im_start|>system\n<tools>\n{%- for tool in tools %}\n{{ tool | tojson }}\n" +
  "{%- endfor %}\n</tools>\nCall functions within <tool_call></tool_call> XML tags.<|im_end|>\n" +
  "{% endif %}{%- for message in messages %}<|im_start|>{{ message.role }}\n" +
  "{{ message.content }}<|im_end|>\n{%- endfor %}" +
  "{%- if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";

function parse_args(argv) {
  const full = process.env.FERRY_SERVED_FULL === '1';
  const o = { ferry: '', n_random: full ? 300 : 260, seeds: full ? 4 : 1, max_tokens: 320 };
  for (let i = 0; i < argv.length; i += 2) {
    if (argv[i] === '--ferry') o.ferry = argv[i + 1];
    if (argv[i] === '--random') o.n_random = Number(argv[i + 1]);
    if (argv[i] === '--seeds') o.seeds = Number(argv[i + 1]);
    if (argv[i] === '--max-tokens') o.max_tokens = Number(argv[i + 1]);
  }
  if (!o.ferry) throw new Error('usage: node validate_served.mjs --ferry PATH [--random N] [--seeds K]');
  return o;
}

function synth(ferry, arch, out) {
  const r = spawnSync(ferry, ['model', 'synth', '--preset', 'tiny', '--arch', arch, '--ctx', '2048',
                              '--type', 'Q8_0', '--seed', '11', out], { stdio: 'inherit', timeout: 120000 });
  if (r.status !== 0) throw new Error(`ferry model synth --arch ${arch} failed`);
}

function config(models) {
  let backends = '';
  let list = '';
  for (const [name, file] of models) {
    backends += `  - { name: ${name}, kind: local, model: ${file}, threads: 1, max_sequences: 8, ` +
                `context_length: 2048, chat_template: ${JSON.stringify(kHermesTemplate)} }\n`;
    list += `  - { name: ${name}, backend: ${name} }\n`;
  }
  return `server: { listen: 127.0.0.1:0, shutdown_grace_ms: 2000 }
auth:
  keys:
    - { id: walks, key: ${kKey}, team: t, role: app }
limits: { max_body_bytes: 4194304 }
backends:
${backends}models:
${list}`;
}

function request_body(c, model, seed, max_tokens) {
  const body = {
    model, seed, temperature: 1, max_tokens,
    messages: [{ role: 'user', content: 'Answer.' }],
  };
  if (c.tools) {
    body.tools = c.tools.map((t) => ({ type: 'function', function: { name: t.name,
      ...(t.parameters ? { parameters: t.parameters } : {}) } }));
    body.tool_choice = typeof c.tool_choice === 'object'
      ? { type: 'function', function: { name: c.tool_choice.name } } : (c.tool_choice ?? 'auto');
    if (c.parallel === false) body.parallel_tool_calls = false;
  } else {
    body.response_format = { type: 'json_schema', json_schema: { name: 'out', strict: true, schema: c.schema } };
  }
  return body;
}

// Why a served tool answer is wrong, or null.
function check_served_tools(ajv, c, choice) {
  const calls = choice.message.tool_calls ?? [];
  const choice_mode = c.tool_choice ?? 'auto';
  if (choice_mode === 'none') return calls.length === 0 ? null : 'tool_choice none, yet a call';
  const forced = choice_mode === 'required' || typeof choice_mode === 'object';
  if (forced && (calls.length === 0 || choice.message.content !== null)) return 'a forced call missing or with text';
  if (calls.length > 0 && choice.finish_reason !== 'tool_calls') return `finish_reason ${choice.finish_reason} with calls`;
  if (c.parallel === false && calls.length > 1) return 'more than one call with parallel off';
  for (const call of calls) {
    if (call.type !== 'function' || !/^call_/.test(call.id)) return `call shape ${JSON.stringify(call)}`;
    const fn = c.tools.find((t) => t.name === call.function.name);
    if (!fn) return `undeclared function ${call.function.name}`;
    if (typeof choice_mode === 'object' && fn.name !== choice_mode.name) return 'not the named function';
    let args;
    try { args = JSON.parse(call.function.arguments); } catch (e) { return `arguments not JSON: ${e.message}`; }
    const params = fn.parameters ?? { type: 'object', additionalProperties: false };
    if (!ajv.validate(params, args)) return `arguments: ${ajv.errorsText()}`;
  }
  return null;
}

async function ask(url, body) {
  const res = await fetch(url + '/v1/chat/completions', {
    method: 'POST', headers: { 'content-type': 'application/json', authorization: `Bearer ${kKey}` },
    body: JSON.stringify(body),
  });
  return { status: res.status, constraint: res.headers.get('x-ferry-constraint'), json: await res.json() };
}

async function run_all(url, jobs, ajv, stats, failures) {
  let next = 0;
  const worker = async () => {
    while (next < jobs.length) {
      const { c, model, seed, body } = jobs[next++];
      const s = (stats[model] ??= { asked: 0, completed: 0, truncated: 0, valid: 0, calls: 0 });
      ++s.asked;
      const fail = (why, out) => failures.push(`${model} ${c.id} seed ${seed}: ${why}\n  ${JSON.stringify(out).slice(0, 400)}`);
      const r = await ask(url, body);
      if (r.status !== 200) { fail(`status ${r.status}`, r.json); continue; }
      const want = c.tools ? 'tools' : 'json_schema';
      if (r.constraint !== want && !(c.tools && c.tool_choice === 'none')) {
        fail(`x-ferry-constraint ${r.constraint}`, r.json);
        continue;
      }
      const choice = r.json.choices[0];
      if (choice.finish_reason === 'length') { ++s.truncated; continue; }
      ++s.completed;
      let why = null;
      if (c.tools) {
        why = check_served_tools(ajv, c, choice);
        s.calls += (choice.message.tool_calls ?? []).length;
      } else {
        let value;
        try { value = JSON.parse(choice.message.content); } catch (e) { why = `not JSON: ${e.message}`; }
        if (!why && !ajv.validate(c.schema, value)) why = `invalid: ${ajv.errorsText()}`;
      }
      if (why) fail(why, choice); else ++s.valid;
    }
  };
  await Promise.all(Array.from({ length: 8 }, worker));
}

async function main() {
  const o = parse_args(process.argv.slice(2));
  ensure_node_modules();
  const { default: Ajv2020 } = await import('ajv/dist/2020.js');
  const { default: add_formats } = await import('ajv-formats');
  const ajv = new Ajv2020({ strict: false, allErrors: true });
  add_formats(ajv);

  const work = fs.mkdtempSync(path.join(os.tmpdir(), 'ferry-served-walks-'));
  const models = [];
  for (const arch of ['llama', 'qwen2', 'qwen3']) {
    const file = path.join(work, `${arch}.gguf`);
    synth(o.ferry, arch, file);
    models.push([`synth-${arch}`, file]);
  }
  const sp = path.join(process.env.FERRY_SHARED_DIR ?? path.join(kHere, '../../../../shared'),
                       'models', 'llama-2-tiny-random.gguf');
  if (fs.existsSync(sp)) models.push(['sentencepiece', sp]);
  else console.log(`${sp}: absent, the SentencePiece model is skipped`);
  fs.writeFileSync(path.join(work, 'ferry.yaml'), config(models));
  const server = await start_server('ferry', o.ferry, ['serve', '--config', path.join(work, 'ferry.yaml')],
                                    path.join(work, 'ferry.log'));
  const url = server.url.replace(/\/+$/, '');

  const hand = JSON.parse(fs.readFileSync(path.join(kHere, '..', 'cases.json'), 'utf8'));
  // OpenAI's response_format takes an object schema (a boolean one is a 400 naming it).
  const cases = [...hand, ...random_cases(o.n_random, 20261215)]
    .filter((c) => c.tools || (typeof c.schema === 'object' && c.schema !== null));
  const jobs = [];
  for (const c of cases) {
    for (const [model] of models) {
      for (let k = 0; k < o.seeds; ++k) {
        const seed = 1000 + k;
        jobs.push({ c, model, seed, body: request_body(c, model, seed, o.max_tokens) });
      }
    }
  }
  const stats = {};
  const failures = [];
  let code = 1;
  try {
    await run_all(url, jobs, ajv, stats, failures);
    console.log(`${cases.length} cases (${hand.length} hand-written, ${o.n_random} random) x ` +
                `${models.length} models x ${o.seeds} seeds, max_tokens ${o.max_tokens}`);
    for (const [m, s] of Object.entries(stats)) {
      console.log(`${m}: ${s.asked} asked, ${s.completed} completed (${s.valid} valid with ajv, ` +
                  `${s.calls} tool calls), ${s.truncated} truncated at max_tokens`);
    }
    const completed = Object.values(stats).reduce((a, s) => a + s.completed, 0);
    if (failures.length) {
      console.error(`${failures.length} failures:\n` + failures.slice(0, 20).join('\n'));
    } else if (completed * 2 < jobs.length) {
      console.error(`only ${completed} of ${jobs.length} answers completed: too few to show anything`);
    } else {
      console.log('every completed answer validated');
      code = 0;
    }
  } finally {
    const { code: exit } = await stop_server(server);
    if (exit !== 0 || code !== 0) print_tail(path.join(work, 'ferry.log'), 30);
    if (exit !== 0) code = 1;
    if (code === 0) fs.rmSync(work, { recursive: true, force: true });
  }
  process.exit(code);
}

main();
