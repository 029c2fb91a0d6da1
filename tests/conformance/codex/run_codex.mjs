// The real Codex CLI through ferry: `codex exec` (@openai/codex, pinned in package.json here and
// installed by `npm ci` on first use) with a custom model provider whose base_url is ferry and
// wire_api "responses", in a temporary CODEX_HOME, the key in the provider's env_key. ferry
// serves a synthesized local model (random weights: the words mean nothing, the protocol must
// be exact) with a ledger; the turn must end with exit code 0 and no protocol error, and the
// ledger must hold its rows under Codex's session (prompt_cache_key is the task).
// Codex sends its function tools (exec_command, ...) on every request; the config turns off its
// web_search and multi-agent tools, which are built-in tool types ferry refuses to translate.
// Usage (ctest passes the path): node run_codex.mjs --ferry PATH
import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

import { ensure_node_modules, print_tail, start_server, stop_server } from '../servers.mjs';
import { kHermesTemplate } from '../templates.mjs';

const kHere = path.dirname(fileURLToPath(import.meta.url));
const kKey = 'sk-ferry-codex-app';
const kAdminKey = 'sk-ferry-codex-admin';

function fail(message) {
  throw new Error(message);
}

function ferry_config(model, dir) {
  return `server: { listen: 127.0.0.1:0, shutdown_grace_ms: 2000 }
auth:
  keys:
    - { id: codex-app, key: ${kKey}, team: agents, project: codex, role: app }
    - { id: codex-admin, key: ${kAdminKey}, team: ops, role: admin }
backends:
  - name: cpu
    kind: local
    model: ${model}
    threads: 2
    context_length: 32768
    chat_template: ${JSON.stringify(kHermesTemplate)}
models:
  - { name: local, backend: cpu }
policy: { file: ${dir}/policies.yaml, watch: false }
ledger: { path: ${dir}/ledger.db }
prices:
  - { model: local, effective_from: 2026-01-01, internal: true, input: 0.01, output: 0.02 }
`;
}

// Codex sends no max_output_tokens: the policy bounds the answer of a model that never stops.
const kPolicy = `targets:
  local: local
models: [local]
rules:
  - { id: codex, when: { model: local }, route: [local], set: { max_tokens: { default: 16 } } }
default: { route: [local] }
`;

function codex_config(base_url) {
  return `model = "local"
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
    const timer = setTimeout(() => child.kill('SIGKILL'), 240000);
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
  const argv = process.argv.slice(2);
  const ferry_bin = argv[argv.indexOf('--ferry') + 1];
  if (!ferry_bin || argv.indexOf('--ferry') < 0) fail('usage: node run_codex.mjs --ferry PATH');
  ensure_node_modules(kHere);
  const work = fs.mkdtempSync(path.join(os.tmpdir(), 'ferry-codex-'));
  let server = null;
  let exit_code = 1;
  try {
    const model = path.join(work, 'tiny.gguf');
    // The demo model's vocabulary (BPE) keeps Codex's ~30 kB prompt to a few thousand tokens.
    const synth = spawnSync(ferry_bin, ['model', 'synth', '--preset', 'tiny', '--ctx', '32768',
                                        '--vocab-from',
                                        path.join(kHere, '..', '..', '..', 'models',
                                                  'ferry-demo-1m.gguf'),
                                        '--type', 'Q8_0', '--seed', '5', model],
                            { stdio: 'inherit', timeout: 120000 });
    if (synth.status !== 0) fail('ferry model synth failed');
    fs.writeFileSync(path.join(work, 'policies.yaml'), kPolicy);
    fs.writeFileSync(path.join(work, 'ferry.yaml'), ferry_config(model, work));
    server = await start_server('ferry', ferry_bin,
                                ['serve', '--config', path.join(work, 'ferry.yaml')],
                                path.join(work, 'ferry.log'));
    const url = server.url.replace(/\/+$/, '');
    const home = path.join(work, 'codex-home');
    const cwd = path.join(work, 'project');
    fs.mkdirSync(home);
    fs.mkdirSync(cwd);
    fs.writeFileSync(path.join(home, 'config.toml'), codex_config(`${url}/v1`));

    const run = await run_codex(home, cwd, 'Say hello.');
    console.log(`codex: exit ${run.code}\n---- stdout ----\n${run.out}\n---- stderr ----\n${run.err}`);
    if (run.code !== 0) fail(`codex exec exited with ${run.code}`);
    for (const bad of [/stream error/i, /unexpected status/i, /error decoding/i,
                       /stream disconnected/i]) {
      if (bad.test(run.err) || bad.test(run.out)) fail(`codex reported a protocol error: ${bad}`);
    }
    const rows = await ledger_rows(url);
    const session = /session id: ([0-9a-f-]+)/.exec(run.err + run.out)?.[1];
    const ours = rows.filter((r) => r.key_id === 'codex-app');
    if (ours.length === 0) fail('no ledger row for the Codex turn');
    if (!ours.every((r) => r.status === 'ok')) fail(`a Codex row did not succeed: ${JSON.stringify(ours)}`);
    if (session && !ours.some((r) => r.task_id === session)) {
      fail(`no ledger row under Codex's session ${session}: ${ours.map((r) => r.task_id)}`);
    }
    console.log(`codex: ${ours.length} ledger row(s) under task ${ours[0].task_id}`);
    console.log('codex: 1 passed, 0 failed');
    exit_code = 0;
  } catch (e) {
    console.error(`codex: ${e.message}`);
    if (server) print_tail(path.join(work, 'ferry.log'), 40);
  } finally {
    if (server) await stop_server(server);
    if (exit_code === 0) fs.rmSync(work, { recursive: true, force: true });
    else console.log(`codex: work dir kept in ${work}`);
  }
  process.exit(exit_code);
}

main();
