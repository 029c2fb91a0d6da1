// Shared by the conformance runners: npm ci when needed, child servers that print a
// `listening on URL` line, loopback ports, logs, and running one node:test file.
import { spawn, spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import readline from 'node:readline';
import { fileURLToPath } from 'node:url';

const kHere = path.dirname(fileURLToPath(import.meta.url));
const kStartTimeoutMs = 20000;
const kStopTimeoutMs = 8000;

// ---------------------------------------------------------------------------------------------
// npm ci, only when needed. A marker in node_modules records the lock file it was installed
// from; a directory lock serialises concurrent runs (several build dirs share this folder).

function sha256_of_files(files) {
  const h = createHash('sha256');
  for (const f of files) h.update(fs.readFileSync(f));
  return h.digest('hex');
}

function sleep_ms(ms) {
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);
}

export function ensure_node_modules(dir = kHere) {
  const lock_hash = sha256_of_files([path.join(dir, 'package.json'),
                                     path.join(dir, 'package-lock.json')]);
  const marker = path.join(dir, 'node_modules', '.ferry-lock-sha256');
  const installed = () => fs.existsSync(marker) && fs.readFileSync(marker, 'utf8').trim() === lock_hash;
  if (installed()) return;

  const lock_dir = path.join(os.tmpdir(),
      'ferry-conformance-npm-' + createHash('sha256').update(dir).digest('hex').slice(0, 12));
  const deadline = Date.now() + 240000;
  for (;;) {
    try {
      fs.mkdirSync(lock_dir);
      break;
    } catch (e) {
      if (e.code !== 'EEXIST') throw e;
      const age_ms = Date.now() - fs.statSync(lock_dir, { throwIfNoEntry: false })?.mtimeMs;
      if (age_ms > 600000) fs.rmSync(lock_dir, { recursive: true, force: true });  // stale
      if (Date.now() > deadline) throw new Error(`timed out waiting for ${lock_dir}`);
      sleep_ms(500);
    }
  }
  try {
    if (installed()) return;
    console.log('conformance: node_modules missing or stale, running npm ci');
    const npm = process.env.FERRY_NPM || 'npm';
    const r = spawnSync(npm, ['ci', '--no-audit', '--no-fund', '--loglevel=error'],
                        { cwd: dir, stdio: 'inherit', timeout: 200000 });
    if (r.error || r.status !== 0) {
      throw new Error(`npm ci failed in ${dir}: ${r.error ?? 'exit ' + r.status}`);
    }
    fs.writeFileSync(marker, lock_hash + '\n');
  } finally {
    fs.rmSync(lock_dir, { recursive: true, force: true });
  }
}

// ---------------------------------------------------------------------------------------------
// Child servers.

// Starts `bin args...`, resolves with the URL of its `listening on URL` line. Everything it
// writes is appended to log_file. A server that does not listen within `timeout_ms` is killed.
export function start_server(name, bin, args, log_file, timeout_ms = kStartTimeoutMs) {
  const out = fs.createWriteStream(log_file);
  const child = spawn(bin, args, { stdio: ['ignore', 'pipe', 'pipe'] });
  child.stderr.pipe(out, { end: false });
  const lines = readline.createInterface({ input: child.stdout });
  return new Promise((resolve, reject) => {
    let url = null;
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`${name} printed no 'listening on' line in ${timeout_ms} ms`));
    }, timeout_ms);
    lines.on('line', (line) => {
      out.write(line + '\n');
      const m = /^listening on (https?:\/\/\S+)$/.exec(line);
      if (!url && m) {
        url = m[1];
        clearTimeout(timer);
        resolve({ name, child, url, log_file });
      }
    });
    child.on('error', (e) => {
      clearTimeout(timer);
      reject(new Error(`${name} could not start: ${e.message}`));
    });
    child.on('exit', (code, signal) => {
      if (!url) {
        clearTimeout(timer);
        reject(new Error(`${name} exited before listening (code ${code}, signal ${signal})`));
      }
    });
  });
}

export function stop_server(server) {
  return new Promise((resolve) => {
    const child = server.child;
    if (child.exitCode !== null || child.signalCode !== null) {
      resolve({ code: child.exitCode, signal: child.signalCode });
      return;
    }
    const kill_timer = setTimeout(() => child.kill('SIGKILL'), kStopTimeoutMs);
    child.on('exit', (code, signal) => {
      clearTimeout(kill_timer);
      resolve({ code, signal });
    });
    child.kill('SIGTERM');
  });
}

// A loopback port that nothing listens on (bound, then closed), for a backend that is down.
export function closed_port() {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.on('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const port = srv.address().port;
      srv.close(() => resolve(port));
    });
  });
}

export function print_tail(file, max_lines) {
  if (!fs.existsSync(file)) return;
  const lines = fs.readFileSync(file, 'utf8').split('\n');
  console.log(`---- last lines of ${file} ----`);
  console.log(lines.slice(-max_lines).join('\n'));
}

export function run_test_file(file, env) {
  return new Promise((resolve) => {
    const tests = spawn(process.execPath, ['--test', '--test-reporter=spec', file],
                        { cwd: kHere, env, stdio: 'inherit' });
    const timer = setTimeout(() => tests.kill('SIGKILL'), 120000);
    tests.on('error', (e) => console.error(`conformance: node --test failed: ${e.message}`));
    tests.on('exit', (code) => {
      clearTimeout(timer);
      resolve(code ?? 1);
    });
  });
}


// `--ferry PATH --upstream PATH [test files...]`; without files, every *.test.mjs in
// `default_dir`. Exits with 2 and the usage line when a binary is missing.
export function parse_runner_args(argv, usage, default_dir) {
  const args = { ferry: null, upstream: null, vocab_writer: null, files: [] };
  for (let i = 0; i < argv.length; i++) {
    if (argv[i] === '--ferry') args.ferry = argv[++i];
    else if (argv[i] === '--upstream') args.upstream = argv[++i];
    else if (argv[i] === '--vocab-writer') args.vocab_writer = argv[++i];
    else args.files.push(argv[i]);
  }
  if (!args.ferry || !args.upstream) {
    console.error(usage);
    process.exit(2);
  }
  if (args.files.length === 0) {
    args.files = fs.readdirSync(default_dir).filter((f) => f.endsWith('.test.mjs')).sort()
        .map((f) => path.join(default_dir, f));
  }
  return args;
}

// A local model an agent CLI can run on: random weights (one layer of width 64, so a prefill
// of ~10k tokens takes seconds), a real tokenizer's vocabulary (o200k_base's ranks as a
// Qwen-sized GGUF BPE with Qwen's added tokens, written by `vocab_writer`,
// tests/constrain/write_qwen_vocab.cpp) so the CLIs' ~40 kB prompts are ~10k tokens, and the
// Qwen3 chat template (tools as Hermes <tool_call>, an optional think block). `favor`: a token
// the model prefers everywhere (`ferry model synth --favor`), e.g. '<tool_call>' for a model
// whose answers under tool_choice auto call a tool. Returns its path.
export function synth_agent_model(ferry, vocab_writer, dir, name, favor = null) {
  const vocab = path.join(dir, 'qwen-vocab.gguf');
  const model = path.join(dir, `agent-${name}.gguf`);
  const steps = [];
  if (!fs.existsSync(vocab)) steps.push([vocab_writer, [vocab]]);
  steps.push([ferry, ['model', 'synth', '--arch', 'qwen2', '--embd', '64', '--layers', '1',
                      '--heads', '2', '--kv-heads', '1', '--ffn', '128', '--ctx', '32768',
                      '--type', 'F16', '--vocab-from', vocab, '--seed', '7',
                      ...(favor ? ['--favor', favor] : []), model]]);
  for (const [bin, argv] of steps) {
    const r = spawnSync(bin, argv, { stdio: 'inherit', timeout: 120000 });
    if (r.status !== 0) throw new Error(`${path.basename(bin)} ${argv.join(' ')} failed`);
  }
  return model;
}

// The two models of an agent run: `plain` (random weights) and `tools` (favoring <tool_call>,
// so its answers under tool_choice auto call a tool). Their paths.
export function synth_agent_models(ferry, vocab_writer, dir) {
  return { plain: synth_agent_model(ferry, vocab_writer, dir, 'plain'),
           tools: synth_agent_model(ferry, vocab_writer, dir, 'tools', '<tool_call>') };
}

// ferry config lines for them: a local backend each, configured models `agent-plain` and
// `agent-tools` (kAgentTargets names them as policy targets), the policy file in `dir`.
export const kAgentTargets = { plain: 'agent-plain', tools: 'agent-tools' };
export function agent_config_lines(models, dir) {
  const backend = (name, model) =>
    `  - { name: ${name}, kind: local, model: ${model}, threads: 2, context_length: 32768,
      max_sequences: 4, max_queue: 16 }\n`;
  return `backends:
${backend('cpu', models.plain)}${backend('cpu-tools', models.tools)}models:
  - { name: agent-plain, backend: cpu }
  - { name: agent-tools, backend: cpu-tools }
policy: { file: ${dir}/policies.yaml, watch: false }
`;
}

// A policy for agent runs: `targets` ({target: configured model}), `routes` ({model a client
// asks for: target}), max_tokens clamped and defaulted (Claude Code asks for tens of thousands,
// Codex for nothing: the rest of the context; random weights need no more). `first_turn`: { model, target, tokens }: that model's requests of at most `tokens`
// prompt tokens (its first turn: the ones after it carry the tool call and its result) go to
// `target` instead.
export function agent_policy(targets, routes, max_tokens, first_turn = null) {
  const names = Object.keys(routes);
  const clamp = `set: { max_tokens: { at_most: ${max_tokens}, default: ${max_tokens} } }`;
  const rules = [];
  if (first_turn) {
    rules.push(`  - { id: first-turn, when: { all: [{ model: ${first_turn.model} }, ` +
               `{ prompt_tokens: { lte: ${first_turn.tokens} } }] },\n` +
               `      route: [${first_turn.target}], ${clamp} }`);
  }
  for (const m of names) {
    rules.push(`  - { id: ${m}, when: { model: ${m} }, route: [${routes[m]}], ${clamp} }`);
  }
  return `targets: { ${Object.entries(targets).map(([t, m]) => `${t}: ${m}`).join(', ')} }
models: [${names.join(', ')}]
rules:
${rules.join('\n')}
default: { route: [${routes[names[0]]}] }
`;
}

// Offers a policy to a running ferry (PUT /admin/policy, not persisted).
export async function put_policy(ferry_url, admin_key, yaml) {
  const res = await fetch(`${ferry_url.replace(/\/+$/, '')}/admin/policy?persist=false`,
                          { method: 'PUT', headers: { authorization: `Bearer ${admin_key}` },
                            body: yaml });
  if (res.status !== 200) throw new Error(`PUT /admin/policy: ${res.status} ${await res.text()}`);
}

// Starts an agent run's servers into `held` (so the caller can stop what started): in local
// mode (args.vocab_writer) the two models and the policy routing `routes` with max_tokens
// clamped, else ferry_test_upstream (`upstream_lines(url)`: its backend and model lines); then
// ferry with `config(backend_lines)`, given time to load the models' vocabularies.
export async function start_agent_servers(args, work, routes, max_tokens, upstream_lines, config,
                                          held) {
  let backends;
  const local = args.vocab_writer !== null;
  if (local) {
    const models = synth_agent_models(args.ferry, args.vocab_writer, work);
    fs.writeFileSync(path.join(work, 'policies.yaml'),
                     agent_policy(kAgentTargets, routes, max_tokens));
    backends = agent_config_lines(models, work);
  } else {
    held.upstream = await start_server('ferry_test_upstream', args.upstream,
                                       ['--listen', '127.0.0.1:0'], path.join(work, 'upstream.log'));
    backends = upstream_lines(held.upstream.url.replace(/\/+$/, ''));
  }
  fs.writeFileSync(path.join(work, 'ferry.yaml'), config(backends));
  held.ferry = await start_server('ferry', args.ferry,
                                  ['serve', '--config', path.join(work, 'ferry.yaml')],
                                  path.join(work, 'ferry.log'),
                                  local ? 120000 : undefined);  // two 152k vocabularies to load
}
