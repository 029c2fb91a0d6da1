// The real Codex CLI through ferry's /v1/responses, translated to an OpenAI chat backend and
// back: `codex exec` (@openai/codex, pinned in package.json here and installed by `npm ci` on
// first use) with a custom model provider whose base_url is ferry and wire_api "responses", in
// a temporary CODEX_HOME, the key in the provider's env_key. ferry is in front of
// ferry_test_upstream scripted to answer as a model would: the first answer calls Codex's
// `exec_command` tool (cmd `cat notes.txt`), the answer after the function_call_output echoes
// it. So Codex runs its whole turn loop through ferry: a function call it executes, its output
// sent back, a final message. Passes when codex exits 0 with no protocol error, the final
// message carries the command's output, and the ledger has one successful row per request
// under Codex's session (prompt_cache_key is the task). A second run calls Codex's create_goal
// (model local-goal): Codex then sends its goal's objective as an output of its own tool with no
// call (name and namespace, no call_id), and the turn must still complete.
// The config turns off Codex's web_search and multi-agent tools, built-in tool types ferry
// refuses to translate.
// With --vocab-writer (conformance.codex_cli_local), Codex runs on local models instead:
// random-weight models with a real tokenizer's vocabulary (servers.mjs synth_agent_model) in
// ferry's engine, Codex's whole prompt (instructions, its tools) prefilled, the answers
// generated under the constraint engine (a policy clamps max_tokens). First a text turn on the
// plain model, whose ledger row gives the first request's prompt count; then the policy sends
// requests up to that count to a model that favors <tool_call> (`ferry model synth --favor`),
// so the same prompt's first answer is a function call (one of Codex's tools, its arguments
// constrained by the tool's schema; Codex runs it in its read-only sandbox) and the request
// carrying its output goes to the plain model, whose text ends the turn. Each run: exit 0, no
// protocol error, successful ledger rows under Codex's session.
// Usage (ctest passes the paths): node run_codex.mjs --ferry PATH --upstream PATH
//        [--vocab-writer PATH]
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

import { agent_policy, ensure_node_modules, kAgentTargets, parse_runner_args, print_tail,
         put_policy, start_agent_servers, stop_server } from '../servers.mjs';

const kHere = path.dirname(fileURLToPath(import.meta.url));
const kKey = 'sk-ferry-codex-app';
const kAdminKey = 'sk-ferry-codex-admin';
const kSecret = 'ferry-exec-ran-8e2d';  // the text of the file the command prints

function fail(message) {
  throw new Error(message);
}

// `backends` are the config's backend, model (and policy) lines: the upstream scripted to call
// exec_command (upstream_lines), or local mode's models (servers.mjs agent_config_lines: the
// policy routes `local` to them, kRoutes).
function ferry_config(backends, dir) {
  const price = (model) =>
    `  - { model: ${model}, effective_from: 2026-01-01, internal: true, input: 0.01, output: 0.02 }`;
  return `server: { listen: 127.0.0.1:0, shutdown_grace_ms: 2000 }
auth:
  keys:
    - { id: codex-app, key: ${kKey}, team: agents, project: codex, role: app }
    - { id: codex-admin, key: ${kAdminKey}, team: ops, role: admin }
${backends}ledger: { path: ${dir}/ledger.db }
prices:
${['local', 'local-goal', ...Object.values(kAgentTargets)].map(price).join('\n')}
`;
}

function upstream_lines(upstream_url) {
  return `backends:
  - { name: up, base_url: "${upstream_url}/v1", timeouts: { first_byte_ms: 20000 } }
models:
  - { name: local, backend: up, upstream_model: call-tool-exec_command }
  - { name: local-goal, backend: up, upstream_model: call-tool-create_goal }
`;
}

const kRoutes = { local: 'plain' };
const kMaxTokens = 48;

function codex_config(base_url, model) {
  return `model = "${model}"
model_provider = "ferry"
web_search = "disabled"
approval_policy = "never"

[features]
multi_agent = false

[model_providers.ferry]
name = "ferry"
base_url = "${base_url}"
wire_api = "responses"
env_key = "FERRY_CODEX_KEY"
request_max_retries = 0
stream_max_retries = 0
`;
}

function run_codex(home, cwd, prompt) {
  const bin = path.join(kHere, 'node_modules', '.bin', 'codex');
  return new Promise((resolve) => {
    const child = spawn(bin, ['exec', '--skip-git-repo-check', '-s', 'read-only', prompt],
                        { cwd, env: { ...process.env, CODEX_HOME: home, FERRY_CODEX_KEY: kKey },
                          stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    child.stdout.on('data', (d) => { out += d; });
    child.stderr.on('data', (d) => { err += d; });
    const timer = setTimeout(() => child.kill('SIGKILL'), 300000);
    child.on('exit', (code) => {
      clearTimeout(timer);
      resolve({ code, out, err });
    });
  });
}

async function ledger_rows(ferry_url) {
  const res = await fetch(`${ferry_url}/v1/ledger/export.csv`,
                          { headers: { authorization: `Bearer ${kAdminKey}` } });
  if (res.status !== 200) fail(`ledger export: ${res.status}`);
  const [head, ...lines] = (await res.text()).trim().split('\n');
  const names = head.split(',');
  // The columns read here hold no commas.
  return lines.map((l) => Object.fromEntries(l.split(',').map((v, i) => [names[i], v])));
}

async function main() {
  const args = parse_runner_args(process.argv.slice(2),
                                 'usage: node run_codex.mjs --ferry PATH --upstream PATH', kHere);
  ensure_node_modules(kHere);
  const work = fs.mkdtempSync(path.join(os.tmpdir(), 'ferry-codex-'));
  let server = null;
  let upstream = null;
  let exit_code = 1;
  const local = args.vocab_writer !== null;
  try {
    const held = {};
    try {
      await start_agent_servers(args, work, kRoutes, kMaxTokens, upstream_lines,
                                (backends) => ferry_config(backends, work), held);
    } finally {
      ({ ferry: server, upstream } = held);
    }
    const url = server.url.replace(/\/+$/, '');
    const cwd = path.join(work, 'project');
    fs.mkdirSync(cwd);
    fs.writeFileSync(path.join(cwd, 'notes.txt'), `${kSecret}\n`);
    const codex_home = (name, model) => {
      const home = path.join(work, `codex-home-${name}`);
      fs.mkdirSync(home);
      fs.writeFileSync(path.join(home, 'config.toml'), codex_config(`${url}/v1`, model));
      return home;
    };
    const seen_rows = new Set();
    // One codex run and its checks; returns its rows (those not seen in an earlier run).
    const checked_run = async (name, prompt, model = 'local') => {
      const started = Date.now();
      const run = await run_codex(codex_home(name, model), cwd, prompt);
      console.log(`codex (${name}): exit ${run.code} after ` +
                  `${((Date.now() - started) / 1000).toFixed(1)} s\n` +
                  `---- stdout ----\n${run.out}\n---- stderr ----\n${run.err}`);
      if (run.code !== 0) fail(`codex exec exited with ${run.code}`);
      for (const bad of [/stream error/i, /unexpected status/i, /error decoding/i,
                         /stream disconnected/i]) {
        if (bad.test(run.err) || bad.test(run.out)) fail(`codex reported a protocol error: ${bad}`);
      }
      const session = /session id: ([0-9a-f-]+)/.exec(run.err + run.out)?.[1];
      if (!session) fail('codex printed no session id');
      const ours = (await ledger_rows(url)).filter((r) => r.key_id === 'codex-app' &&
                                                         !seen_rows.has(r.id));
      for (const r of ours) seen_rows.add(r.id);
      if (ours.length < 1) fail('no ledger row for Codex\'s requests');
      if (!ours.every((r) => r.status === 'ok')) {
        fail(`a Codex row did not succeed: ${JSON.stringify(ours)}`);
      }
      if (!ours.every((r) => r.task_id === session)) {
        fail(`rows not under Codex's session ${session}: ${ours.map((r) => r.task_id)}`);
      }
      console.log(`codex (${name}): ${ours.length} ledger row(s) under task ${session}: ` +
                  ours.map((r) => `${r.target} ${r.input_tokens} in (${r.cached_tokens} cached) ` +
                                  r.finish_reason).join('; '));
      return { run, rows: ours };
    };

    if (local) {
      const text = await checked_run('text', 'Say hello.');
      // A row's prompt: its input tokens and those read from the prefix cache.
      const prompt = (r) => Number(r.input_tokens) + Number(r.cached_tokens);
      const first = Math.max(...text.rows.map(prompt));
      await put_policy(url, kAdminKey, agent_policy(kAgentTargets, kRoutes, kMaxTokens,
                                                    { model: 'local', target: 'tools',
                                                      tokens: first + 16 }));
      const tool = await checked_run('tool', 'Say hello.');
      const call = tool.rows.find((r) => r.target === 'agent-tools');
      if (!call || call.finish_reason !== 'tool_calls') {
        fail('the first turn was not a function call from agent-tools');
      }
      if (!tool.rows.some((r) => r.target === 'agent-plain' && prompt(r) > first)) {
        fail('no request carried the function call\'s output back');
      }
    } else {
      const { run, rows: ours } = await checked_run('upstream',
                                                    'What do the notes say?\ntool-arg: cat notes.txt');
      if (!/exec_command|cat notes\.txt/.test(run.err + run.out)) fail('codex ran no command');
      if (!run.out.includes(kSecret)) fail('the final message does not carry the command\'s output');
      const stats = await (await fetch(`${upstream.url.replace(/\/+$/, '')}/_stats`)).json();
      if (ours.length !== stats.requests) {
        fail(`${ours.length} ledger row(s) for ${stats.requests} request(s) to the backend`);
      }
      if (ours.length < 2) fail('no second request: the function output never came back');
      // Codex's goal tool: after create_goal's output Codex sends its goal's objective as an
      // output of its own tool with no call (a name and a namespace, no call_id), which ferry
      // turns into a call and its result for the chat backend.
      const goal = await checked_run('goal', 'Set a goal.\ntool-arg: read the notes',
                                     'local-goal');
      if (goal.rows.length < 2) fail('no second request after create_goal');
    }
    console.log('codex: 1 passed, 0 failed');
    exit_code = 0;
  } catch (e) {
    console.error(`codex: ${e.message}`);
    if (server) print_tail(path.join(work, 'ferry.log'), 40);
  } finally {
    if (server) await stop_server(server);
    if (upstream) await stop_server(upstream);
    if (exit_code === 0) fs.rmSync(work, { recursive: true, force: true });
    else console.log(`codex: work dir kept in ${work}`);
  }
  process.exit(exit_code);
}

main();
