// The real `claude` CLI (Claude Code, pinned in package-lock.json) through ferry's /v1/messages,
// translated to an OpenAI chat backend and back: `claude -p` with ANTHROPIC_BASE_URL pointed at
// ferry (through a relay that records each request and its answer), ferry in front of
// ferry_test_upstream scripted to answer as a model would: the first answer calls Claude Code's
// `Read` tool on a file of the run, the answer after the tool result echoes that result. So the
// CLI runs its whole turn loop through ferry: a tool_use it executes, a tool_result it sends,
// a final text it prints. Passes when the CLI exits 0 with is_error false and the file's text
// in its result, every request got a well-formed answer (200, a stream ending in
// message_stop), and the ledger has one row per request under the CLI's session id as task.
// With --vocab-writer (conformance.claude_code_local), the same CLI runs on local models instead:
// random-weight models with a real tokenizer's vocabulary (servers.mjs synth_agent_model) in
// ferry's engine, the CLI's whole prompt prefilled, its answers generated under the constraint
// engine (a policy clamps max_tokens). A text turn with the CLI's default tools; then a turn
// that calls a tool: with `--tools Read`, a first run on the plain model measures the first
// request's prompt (ferry's count in message_start), the policy then sends requests of up to
// that many tokens to a model that favors <tool_call> (`ferry model synth --favor`), so the
// second run's first answer is a Read call (its input constrained by the tool's schema), which
// the CLI executes and answers with a tool_result; the longer request after it goes to the plain
// model, whose text ends the turn. Each run: exit 0, is_error false, every answer well-formed,
// one ledger row per request under the CLI's session.
// Usage (ctest passes the paths): node run_claude_code.mjs --ferry PATH --upstream PATH
//        [--vocab-writer PATH]
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

import { agent_policy, ensure_node_modules, kAgentTargets, parse_runner_args, print_tail,
         put_policy, start_agent_servers, stop_server } from '../servers.mjs';

const kHere = path.dirname(fileURLToPath(import.meta.url));
const kAppKey = 'sk-ferry-claude-app';
const kAdminKey = 'sk-ferry-claude-admin';
const kModel = 'claude-ferry';
const kToolModel = 'claude-ferry-tools';  // local mode: its first turn goes to agent-tools
const kRoutes = { [kModel]: 'plain', [kToolModel]: 'plain' };
const kMaxTokens = 48;
const kSecret = 'ferry-tool-ran-5f1c';  // the text of the file the CLI reads

// `backends` are the config's backend, model (and policy) lines: the upstream scripted to call
// Read (upstream_lines), or local mode's models (servers.mjs agent_config_lines: the policy
// routes the CLI's model names to them).
function config(backends, dir) {
  return `server: { listen: 127.0.0.1:0, shutdown_grace_ms: 2000 }
limits: { max_body_bytes: 16777216 }
auth:
  keys:
    - { id: claude-app, key: ${kAppKey}, team: agents, project: claude-code, role: app }
    - { id: claude-admin, key: ${kAdminKey}, team: ops, role: admin }
${backends}ledger: { path: ${dir}/ledger.db }
`;
}

function upstream_lines(upstream_url) {
  return `backends:
  - { name: up, base_url: "${upstream_url}/v1", timeouts: { first_byte_ms: 20000 } }
models:
  - { name: ${kModel}, backend: up, upstream_model: call-tool-Read }
`;
}

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
      const record = seen.at(-1);
      const up = http.request({ host: target.hostname, port: target.port, path: req.url,
                                method: req.method, headers: req.headers }, (ures) => {
        res.writeHead(ures.statusCode, ures.headers);
        record.status = ures.statusCode;
        const answer = [];
        ures.on('data', (c) => { answer.push(c); res.write(c); });
        ures.on('end', () => { record.answer = Buffer.concat(answer).toString('utf8'); res.end(); });
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

function run_claude(base_url, home, cwd, prompt, model = kModel, cli_args = ['--max-turns', '4'],
                    extra_env = {}) {
  const env = {
    PATH: process.env.PATH,
    HOME: home,
    ANTHROPIC_BASE_URL: base_url,
    ANTHROPIC_API_KEY: kAppKey,
    ANTHROPIC_MODEL: model,
    ANTHROPIC_SMALL_FAST_MODEL: model,
    ANTHROPIC_DEFAULT_HAIKU_MODEL: model,
    ANTHROPIC_DEFAULT_SONNET_MODEL: model,
    ANTHROPIC_DEFAULT_OPUS_MODEL: model,
    DISABLE_TELEMETRY: '1',
    DISABLE_AUTOUPDATER: '1',
    DISABLE_ERROR_REPORTING: '1',
    CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: '1',
    CLAUDE_CODE_DISABLE_FEEDBACK_SURVEY: '1',
    CLAUDE_CODE_DISABLE_TERMINAL_TITLE: '1',
    ...extra_env,
  };
  return new Promise((resolve) => {
    const child = spawn(claude_binary(),
                        ['-p', prompt, '--output-format', 'json', '--model', model,
                         '--allowedTools', 'Read', ...cli_args],
                        { cwd, env, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    child.stdout.on('data', (d) => { out += d; });
    child.stderr.on('data', (d) => { err += d; });
    const timer = setTimeout(() => child.kill('SIGKILL'), 300000);
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
    return `  ${r.method} ${r.path} -> ${r.status}\n    headers: ${headers.join(' ')}\n` +
           `    body: ${fields}`;
  }).join('\n');
}

// The answer to one /v1/messages request is well-formed: a 200 message, or a 200 stream of
// Anthropic's events from message_start to message_stop (pings aside), no error event.
function check_answer(r) {
  assert.equal(r.status, 200, `${r.path}: ${r.answer}`);
  if (!r.body.includes('"stream":true')) {
    assert.equal(JSON.parse(r.answer).type, 'message', r.answer);
    return;
  }
  const events = r.answer.split('\n').filter((l) => l.startsWith('event: '))
      .map((l) => l.slice(7)).filter((e) => e !== 'ping');
  assert.equal(events[0], 'message_start', r.answer);
  assert.equal(events.at(-1), 'message_stop', r.answer);
  assert.ok(!events.includes('error'), r.answer);
}

async function ledger_rows(ferry_url, task) {
  const res = await fetch(`${ferry_url.replace(/\/+$/, '')}/v1/ledger/export.csv?task=${task}`,
                          { headers: { authorization: `Bearer ${kAdminKey}` } });
  assert.equal(res.status, 200);
  return (await res.text()).trim().split('\n').slice(1).filter((l) => l.length > 0);
}

async function timed(promise) {
  const started = Date.now();
  const run = await promise;
  run.seconds = (Date.now() - started) / 1000;
  return run;
}

// One CLI run's checks: what it printed, every answer well-formed, the session's ledger rows.
// `expect`: secret (the final answer carries the tool result, which the CLI sent back),
// tools_at_least (the requests carried that many tools), calls_a_tool (a local model's
// tool_use the CLI executed: its tool_result went back). Returns ferry's prompt count of the first
// request that carried tools.
async function check_run(ferry, seen, work, name, run, expect) {
  console.log(`claude code (${name}): exit ${run.code}${run.signal ? ' signal ' + run.signal : ''}` +
              ` after ${run.seconds.toFixed(1)} s`);
  console.log(`claude code sent ${seen.length} request(s):\n${describe(seen)}`);
  fs.writeFileSync(path.join(work, `requests-${name}.json`), JSON.stringify(seen, null, 1));
  if (run.err.trim()) console.log(`claude code stderr:\n${run.err.slice(-4000)}`);
  const result = JSON.parse(run.out.trim().split('\n').at(-1));
  console.log(`claude code result: ${JSON.stringify(result).slice(0, 2000)}`);
  assert.equal(result.type, 'result');
  assert.ok(result.session_id, 'the result names its session');
  assert.equal(run.code, 0, 'the CLI ended its turn loop and exited 0');
  assert.equal(result.is_error, false, run.out);
  if (expect.secret) assert.ok(result.result.includes(expect.secret), 'the final answer carries the tool result');

  const messages = seen.filter((r) => /^\/v1\/messages(\?|$)/.test(r.path));
  for (const r of seen) check_answer(r);
  if (expect.tools_at_least) {
    assert.ok(messages.some((r) => JSON.parse(r.body).tools?.length >= expect.tools_at_least),
              `the CLI sent its tools (${expect.tools_at_least} or more)`);
  }
  if (expect.secret || expect.calls_a_tool) {
    assert.ok(messages.some((r) => /"type":"tool_use"/.test(r.answer ?? '')),
              'an answer called a tool');
    const with_tool_result = messages.filter((r) => r.body.includes('"tool_result"'));
    assert.ok(with_tool_result.length >= 1, 'the CLI sent the tool result back');
    const call = /"type":"tool_use"[^}]*"name":"([^"]*)"/.exec(
        messages.find((r) => /"type":"tool_use"/.test(r.answer ?? '')).answer)?.[1];
    const sent = JSON.parse(with_tool_result[0].body).messages.flatMap((m) =>
        Array.isArray(m.content) ? m.content : []).filter((b) => b.type === 'tool_result');
    console.log(`claude code (${name}): called ${call}; sent back ` +
                JSON.stringify(sent).slice(0, 300));
    if (expect.calls_a_tool) {
      assert.equal(call, expect.calls_a_tool, 'the call named the one tool offered');
      assert.ok(!JSON.stringify(sent).includes('No such tool'), 'the CLI ran the call');
    }
    if (expect.secret) assert.ok(with_tool_result.every((r) => r.body.includes(expect.secret)));
  }
  assert.ok(messages.every((r) => r.headers['x-claude-code-session-id'] === result.session_id));

  // One ledger row per /v1/messages request, under the session id as task.
  let rows = [];
  for (let i = 0; i < 200 && rows.length < messages.length; ++i) {
    rows = await ledger_rows(ferry.url, result.session_id);
    if (rows.length < messages.length) await new Promise((r) => setTimeout(r, 25));
  }
  console.log(`claude code (${name}): ${rows.length} ledger row(s) under task ` +
              `${result.session_id} for ${messages.length} request(s)`);
  assert.equal(rows.length, messages.length, 'a ledger row for each request, under the session');
  const with_tools = messages.find((r) => JSON.parse(r.body).tools?.length > 0);
  seen.length = 0;
  return Number(/"input_tokens":(\d+)/.exec(with_tools?.answer ?? '')?.[1] ?? 0);
}

async function main() {
  const args = parse_runner_args(process.argv.slice(2),
                                 'usage: node run_claude_code.mjs --ferry PATH --upstream PATH',
                                 kHere);
  ensure_node_modules(kHere);
  const work = fs.mkdtempSync(path.join(os.tmpdir(), 'ferry-claude-'));
  let ferry = null;
  let upstream = null;
  let relay = null;
  let exit_code = 1;
  const local = args.vocab_writer !== null;
  try {
    const held = {};
    try {
      await start_agent_servers(args, work, kRoutes, kMaxTokens, upstream_lines,
                                (backends) => config(backends, work), held);
    } finally {
      ({ ferry, upstream } = held);
    }
    const seen = [];
    relay = await start_relay(ferry.url, seen);
    const base_url = `http://127.0.0.1:${relay.address().port}`;
    const home = path.join(work, 'home');
    const project = path.join(work, 'project');
    fs.mkdirSync(home);
    fs.mkdirSync(project);
    const notes = path.join(project, 'notes.txt');
    fs.writeFileSync(notes, `${kSecret}\n`);

    if (local) {
      const fresh_home = (name) => {
        const dir = path.join(work, `home-${name}`);
        fs.mkdirSync(dir);
        return dir;
      };
      await check_run(ferry, seen, work, 'text',
                      await timed(run_claude(base_url, fresh_home('text'), project, 'Say hello.')),
                      { tools_at_least: 5 });
      // Read alone (tool search off: no DeferredToolPlaceholder beside it).
      const tool_run = (name) => timed(run_claude(base_url, fresh_home(name), project,
                                                  'Read my notes.', kToolModel,
                                                  ['--tools', 'Read', '--max-turns', '4'],
                                                  { ENABLE_TOOL_SEARCH: 'false' }));
      const first = await check_run(ferry, seen, work, 'measure', await tool_run('measure'),
                                    { tools_at_least: 1 });
      assert.ok(first > 0, 'message_start carried ferry\'s prompt count');
      await put_policy(ferry.url, kAdminKey,
                       agent_policy(kAgentTargets, kRoutes, kMaxTokens,
                                    { model: kToolModel, target: 'tools', tokens: first + 16 }));
      await check_run(ferry, seen, work, 'tool', await tool_run('tool'), { calls_a_tool: 'Read' });
    } else {
      await check_run(ferry, seen, work, 'upstream',
                      await timed(run_claude(base_url, home, project,
                                             `Read the notes and tell me what they say.\n` +
                                                 `tool-arg: ${notes}`)),
                      { secret: kSecret });
    }
    exit_code = 0;
    console.log('claude code: passed');
  } catch (e) {
    console.error(`claude code: FAILED: ${e.message}`);
    exit_code = 1;
  } finally {
    if (relay) relay.close();
    for (const server of [ferry, upstream]) {
      if (!server) continue;
      const { code } = await stop_server(server);
      if (code !== 0 && server === ferry) exit_code = 1;
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
