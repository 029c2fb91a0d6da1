// The real `claude` CLI (Claude Code, pinned in package-lock.json) through ferry: makes a small
// model with `ferry model synth`, starts ferry with it on the in-process engine and a ledger,
// runs `claude -p "hello" --output-format json` with ANTHROPIC_BASE_URL pointed at ferry (through
// a logging relay that records what the CLI sends), and checks that the turn completed with no
// protocol error and that the ledger holds its rows under the CLI's session id as the task.
// Usage (ctest passes the paths): node run_claude_code.mjs --ferry PATH --upstream PATH
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

import { ensure_node_modules, parse_runner_args, print_tail, start_server,
         stop_server } from '../servers.mjs';
import { kHermesTemplate } from '../templates.mjs';

const kHere = path.dirname(fileURLToPath(import.meta.url));
const kAppKey = 'sk-ferry-claude-app';
const kAdminKey = 'sk-ferry-claude-admin';
const kModel = 'local';

function config(model, dir) {
  return `server: { listen: 127.0.0.1:0, shutdown_grace_ms: 2000 }
limits: { max_body_bytes: 16777216 }
auth:
  keys:
    - { id: claude-app, key: ${kAppKey}, team: agents, project: claude-code, role: app }
    - { id: claude-admin, key: ${kAdminKey}, team: ops, role: admin }
backends:
  - { name: cpu, kind: local, model: ${model}, threads: 1, context_length: 65536,
      max_sequences: 4, prefill_chunk: 512,
      chat_template: ${JSON.stringify(kHermesTemplate)} }
models:
  - { name: ${kModel}, backend: cpu }
policy: { file: ${dir}/policies.yaml, watch: false }
ledger: { path: ${dir}/ledger.db }
`;
}

// Claude Code asks for up to 32000 output tokens: the policy bounds the answer of a random-weight
// model that never stops, so a turn ends in seconds.
const kPolicy = `targets:
  local: ${kModel}
models: [${kModel}]
rules:
  - { id: claude, when: { model: ${kModel} }, route: [local], set: { max_tokens: { at_most: 16 } } }
default: { route: [local] }
`;

// A relay in front of ferry that records each request's method, path, headers and body.
function start_relay(target_url, seen) {
  const target = new URL(target_url);
  const server = http.createServer((req, res) => {
    const chunks = [];
    req.on('data', (c) => chunks.push(c));
    req.on('end', () => {
      const body = Buffer.concat(chunks);
      seen.push({ method: req.method, path: req.url, headers: req.headers,
                  body: body.toString('utf8') });
      const up = http.request({ host: target.hostname, port: target.port, path: req.url,
                                method: req.method, headers: req.headers }, (ures) => {
        res.writeHead(ures.statusCode, ures.headers);
        ures.pipe(res);
      });
      up.on('error', (e) => { res.writeHead(502); res.end(String(e)); });
      up.end(body);
    });
  });
  return new Promise((resolve) => server.listen(0, '127.0.0.1', () => resolve(server)));
}

function claude_binary() {
  return path.join(kHere, 'node_modules', '.bin', 'claude');
}

function run_claude(base_url, home, prompt) {
  const env = {
    PATH: process.env.PATH,
    HOME: home,
    ANTHROPIC_BASE_URL: base_url,
    ANTHROPIC_API_KEY: kAppKey,
    ANTHROPIC_MODEL: kModel,
    ANTHROPIC_SMALL_FAST_MODEL: kModel,
    ANTHROPIC_DEFAULT_HAIKU_MODEL: kModel,
    ANTHROPIC_DEFAULT_SONNET_MODEL: kModel,
    ANTHROPIC_DEFAULT_OPUS_MODEL: kModel,
    CLAUDE_CODE_MAX_OUTPUT_TOKENS: '32',
    DISABLE_TELEMETRY: '1',
    DISABLE_AUTOUPDATER: '1',
    DISABLE_ERROR_REPORTING: '1',
    CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: '1',
    CLAUDE_CODE_DISABLE_FEEDBACK_SURVEY: '1',
    CLAUDE_CODE_DISABLE_TERMINAL_TITLE: '1',
  };
  return new Promise((resolve) => {
    const child = spawn(claude_binary(),
                        ['-p', prompt, '--output-format', 'json', '--model', kModel],
                        { cwd: home, env, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    child.stdout.on('data', (d) => { out += d; });
    child.stderr.on('data', (d) => { err += d; });
    const timer = setTimeout(() => child.kill('SIGKILL'), 240000);
    child.on('exit', (code, signal) => {
      clearTimeout(timer);
      resolve({ code, signal, out, err });
    });
  });
}

// What the CLI sent, in a few lines per request (header names and top-level body fields).
function describe(seen) {
  return seen.map((r) => {
    let fields = '';
    try {
      const j = JSON.parse(r.body);
      fields = Object.keys(j).map((k) => k === 'tools' ? `tools[${j.tools.length}]`
                                      : k === 'model' ? `model=${j.model}`
                                      : k === 'stream' ? `stream=${j.stream}` : k).join(', ');
    } catch { fields = `${r.body.length} bytes`; }
    const headers = Object.keys(r.headers).filter((h) => h.startsWith('anthropic') ||
                                                       h.startsWith('x-') || h === 'authorization')
        .map((h) => h === 'x-api-key' || h === 'authorization' ? `${h}=<key>`
                                                                  : `${h}=${r.headers[h]}`);
    return `  ${r.method} ${r.path}\n    headers: ${headers.join(' ')}\n    body: ${fields}`;
  }).join('\n');
}

async function main() {
  const args = parse_runner_args(process.argv.slice(2),
                                 'usage: node run_claude_code.mjs --ferry PATH --upstream PATH',
                                 kHere);
  ensure_node_modules(kHere);
  const work = fs.mkdtempSync(path.join(os.tmpdir(), 'ferry-claude-'));
  let ferry = null;
  let relay = null;
  let exit_code = 1;
  try {
    const model = path.join(work, 'tiny.gguf');
    const synth = spawnSync(args.ferry, ['model', 'synth', '--preset', 'tiny', '--ctx', '65536',
                                         '--type', 'Q8_0', '--seed', '5', model],
                            { stdio: 'inherit', timeout: 120000 });
    if (synth.status !== 0) throw new Error('ferry model synth failed');
    fs.writeFileSync(path.join(work, 'policies.yaml'), kPolicy);
    fs.writeFileSync(path.join(work, 'ferry.yaml'), config(model, work));
    ferry = await start_server('ferry', args.ferry,
                               ['serve', '--config', path.join(work, 'ferry.yaml')],
                               path.join(work, 'ferry.log'));
    const seen = [];
    relay = await start_relay(ferry.url, seen);
    const base_url = `http://127.0.0.1:${relay.address().port}`;
    const home = path.join(work, 'home');
    fs.mkdirSync(home);

    const run = await run_claude(base_url, home, 'hello');
    console.log(`claude code: exit ${run.code}${run.signal ? ' signal ' + run.signal : ''}`);
    console.log(`claude code sent ${seen.length} request(s):\n${describe(seen)}`);
    fs.writeFileSync(path.join(work, 'requests.json'), JSON.stringify(seen, null, 1));
    if (run.err.trim()) console.log(`claude code stderr:\n${run.err.slice(-4000)}`);
    const result = JSON.parse(run.out.trim().split('\n').at(-1));
    console.log(`claude code result: ${JSON.stringify({ ...result, result: undefined })}`);
    // Random weights rarely end their turn: an answer cut at the output limit is the model's
    // outcome (Claude Code reports it as is_error), not a protocol error.
    const cut = /exceeded the \d+ output token maximum/.test(result.result ?? '');
    assert.ok(result.is_error === false || cut, run.out);
    assert.equal(result.type, 'result');
    assert.ok(result.session_id, 'the result names its session');
    const messages = seen.filter((r) => r.path.startsWith('/v1/messages'));
    assert.ok(messages.length >= 1, 'the CLI called /v1/messages');
    assert.ok(messages.every((r) => r.headers['x-claude-code-session-id'] === result.session_id ||
                                    r.headers['x-claude-code-session-id'] === undefined));

    // The ledger's rows for the session.
    let rows = [];
    for (let i = 0; i < 200 && rows.length === 0; ++i) {
      const res = await fetch(`${ferry.url.replace(/\/+$/, '')}/v1/ledger/export.csv?task=${
                                  result.session_id}`,
                              { headers: { authorization: `Bearer ${kAdminKey}` } });
      rows = (await res.text()).trim().split('\n').slice(1).filter((l) => l.length > 0);
      if (rows.length === 0) await new Promise((r) => setTimeout(r, 25));
    }
    const with_session = messages.filter(
        (r) => r.path.startsWith('/v1/messages?') || r.path === '/v1/messages');
    console.log(`claude code: ${rows.length} ledger row(s) under task ${result.session_id}`);
    assert.ok(rows.length >= 1, 'the ledger has the rows under the session id');
    assert.ok(rows.length <= with_session.length);
    exit_code = 0;
    console.log('claude code: passed');
  } catch (e) {
    console.error(`claude code: FAILED: ${e.message}`);
    exit_code = 1;
  } finally {
    if (relay) relay.close();
    if (ferry) {
      const { code } = await stop_server(ferry);
      if (code !== 0) exit_code = 1;
    }
    if (exit_code !== 0) {
      print_tail(path.join(work, 'ferry.log'), 40);
      console.log(`claude code: logs kept in ${work}`);
    } else {
      fs.rmSync(work, { recursive: true, force: true });
    }
  }
  process.exit(exit_code);
}

main();
