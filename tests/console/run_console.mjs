// The console in a real browser. Installs the pinned playwright-core (npm ci when needed; it
// drives Debian's chromium, never downloads one), starts ferry_test_upstream and `ferry serve`
// on port 0 with a policy, a local (in-process) model and a ledger, prepares the ledger through
// the real binary (requests of several teams and tasks, task outcomes), then runs
// console.test.mjs, which signs in with each role and checks every page against the JSON API,
// `ferry ledger report` and `ferry policy replay`. Screenshots go to --out.
//   node run_console.mjs --ferry PATH --upstream PATH --chromium PATH --out DIR
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

import { spawn } from 'node:child_process';

import { ensure_node_modules, print_tail, start_server, stop_server } from '../conformance/servers.mjs';

const kHere = path.dirname(fileURLToPath(import.meta.url));
const kRepo = path.resolve(kHere, '..', '..');
export const kKeys = {
  alpha: 'sk-console-app-alpha-1111',
  research: 'sk-console-app-research-2222',
  finance: 'sk-console-finance-3333',
  admin: 'sk-console-admin-4444',
};
// A task id that would run as script if a page wrote it as markup.
export const kHostileTask = '<script>window.__ferry_xss=1</script><img src=x onerror="window.__ferry_xss=2">';

function parse_args(argv) {
  const args = { ferry: null, upstream: null, chromium: null, out: null };
  for (let i = 0; i < argv.length; i++) {
    const k = argv[i].replace(/^--/, '');
    if (k in args) args[k] = argv[++i];
  }
  for (const [k, v] of Object.entries(args)) {
    if (!v) {
      console.error('usage: node run_console.mjs --ferry PATH --upstream PATH --chromium PATH --out DIR');
      process.exit(2);
    }
  }
  return args;
}

const kPolicy = `description: console browser test
targets:
  local: small-local
  gpu: gpt-test
  gpu2: gpt-other
models:
  - chat
rules:
  - id: research-on-gpu
    when: { team: research }
    route: [gpu]
  - id: short-goes-local
    when: { max_tokens: { lte: 8 } }
    route: [local, gpu]
default:
  route: [gpu]
`;

// The what-if: research moves to the other GPU model.
export const kEditedPolicy = kPolicy.replace('    route: [gpu]\n  - id: short', '    route: [gpu2]\n  - id: short');

function make_config(upstream_url, work) {
  const v1 = upstream_url.replace(/\/+$/, '') + '/v1';
  const key = (id, k, team, role) => `    - { id: ${id}, key: ${k}, team: ${team}, project: ${team}-proj, role: ${role} }\n`;
  return `# Written by tests/console/run_console.mjs for one run.
server:
  listen: 127.0.0.1:0
  shutdown_grace_ms: 2000
auth:
  keys:
${key('alpha-app', kKeys.alpha, 'alpha', 'app')}${key('research-app', kKeys.research, 'research', 'app')}\
${key('finance-key', kKeys.finance, 'money', 'finance')}${key('admin-key', kKeys.admin, 'ops', 'admin')}\
backends:
  - name: upstream
    base_url: ${v1}
  - name: cpu
    kind: local
    model: ${path.join(kRepo, 'models', 'ferry-demo-1m.gguf')}
    threads: 1
models:
  - { name: gpt-test, backend: upstream, upstream_model: echo }
  - { name: gpt-other, backend: upstream, upstream_model: echo }
  - { name: small-local, backend: cpu }
policy:
  file: ${work}/policy.yaml
ledger:
  path: ${work}/ledger.db
  reference_model: gpt-test
prices:
  - { model: gpt-test, effective_from: 2026-01-01, input: 1.50, output: 10.00 }
  - { model: gpt-other, effective_from: 2026-01-01, input: 3.00, output: 15.00 }
  - { model: small-local, effective_from: 2026-01-01, input: 0.10, output: 0.20, internal: true }
budgets:
  - { name: alpha-monthly, scope: team, match: alpha, amount: 100, period: month, mode: hard }
  - { name: research-daily, scope: team, match: research, amount: 5, period: day, mode: soft }
`;
}

async function post(url, pathname, key, body, headers) {
  const res = await fetch(url + pathname, {
    method: 'POST',
    headers: Object.assign({ authorization: 'Bearer ' + key, 'content-type': 'application/json' }, headers || {}),
    body: JSON.stringify(body),
  });
  const text = await res.text();
  if (!res.ok) throw new Error(`${pathname}: ${res.status} ${text}`);
  return text;
}

// Requests of two teams over several tasks, some answered locally, then their outcomes.
async function prepare_ledger(url) {
  const chat = (key, task, text, max_tokens) => post(url, '/v1/chat/completions', key,
    { model: 'chat', messages: [{ role: 'user', content: text }], max_tokens, seed: 1 },
    { 'x-ferry-task': task });
  const plan = [
    [kKeys.alpha, 'checkout-1', 'one two three', 64], [kKeys.alpha, 'checkout-1', 'four five', 64],
    [kKeys.alpha, 'checkout-2', 'six', 8], [kKeys.alpha, 'search-1', 'seven eight nine ten', 64],
    [kKeys.alpha, kHostileTask, 'eleven', 64], [kKeys.alpha, 'open-1', 'twelve', 8],
    [kKeys.research, 'paper-1', 'a b c d e f', 64], [kKeys.research, 'paper-1', 'g h', 64],
    [kKeys.research, 'paper-2', 'i j k', 64], [kKeys.research, 'paper-3', 'l', 8],
  ];
  for (const [key, task, text, max] of plan) await chat(key, task, text, max);
  const mark = (key, task, status, labels) =>
    post(url, '/v1/tasks/' + encodeURIComponent(task), key, { status, labels: labels || {} });
  await mark(kKeys.alpha, 'checkout-1', 'completed', { feature: 'checkout' });
  await mark(kKeys.alpha, 'checkout-2', 'failed', { feature: 'checkout' });
  await mark(kKeys.alpha, 'search-1', 'completed', { feature: 'search' });
  await mark(kKeys.alpha, kHostileTask, 'abandoned', { feature: '<b>bold</b>' });
  await mark(kKeys.research, 'paper-1', 'completed', { feature: 'papers' });
  await mark(kKeys.research, 'paper-2', 'completed', { feature: 'papers' });
}

// node --test on one file, with a bound of its own (a browser on a busy machine is slow).
function run_tests(file, env) {
  return new Promise((resolve) => {
    const tests = spawn(process.execPath, ['--test', '--test-reporter=spec', file],
                        { cwd: kHere, env, stdio: 'inherit' });
    const timer = setTimeout(() => tests.kill('SIGKILL'), 480000);
    tests.on('exit', (code) => {
      clearTimeout(timer);
      resolve(code ?? 1);
    });
  });
}

function cli(ferry, args) {
  const r = spawnSync(ferry, args, { encoding: 'utf8', timeout: 60000 });
  if (r.status !== 0) throw new Error(`ferry ${args.join(' ')}: exit ${r.status}\n${r.stderr}`);
  return r.stdout;
}

async function main() {
  const args = parse_args(process.argv.slice(2));
  ensure_node_modules(kHere);
  fs.mkdirSync(args.out, { recursive: true });
  const work = fs.mkdtempSync(path.join(os.tmpdir(), 'ferry-console-'));
  let upstream = null, ferry = null, code = 1;
  try {
    upstream = await start_server('ferry_test_upstream', args.upstream,
                                  ['--listen', '127.0.0.1:0'], path.join(work, 'upstream.log'));
    fs.writeFileSync(path.join(work, 'policy.yaml'), kPolicy);
    fs.writeFileSync(path.join(work, 'edited.yaml'), kEditedPolicy);
    const config = path.join(work, 'ferry.yaml');
    fs.writeFileSync(config, make_config(upstream.url, work));
    ferry = await start_server('ferry', args.ferry, ['serve', '--config', config],
                               path.join(work, 'ferry.log'));
    await prepare_ledger(ferry.url);
    // What the CLI says about the same ledger, for the pages to match.
    const db = path.join(work, 'ledger.db');
    const expected = {
      report_team: JSON.parse(cli(args.ferry, ['ledger', 'report', '--db', db, '--by', 'team', '--format', 'json'])),
      report_team_alpha: JSON.parse(cli(args.ferry, ['ledger', 'report', '--db', db, '--by', 'day', '--team', 'alpha', '--format', 'json'])),
      replay: JSON.parse(cli(args.ferry, ['policy', 'replay', '--config', config, '--policy',
                                          path.join(work, 'edited.yaml'), '--ledger', db, '--format', 'json'])),
      report_csv_day_team: cli(args.ferry, ['ledger', 'report', '--db', db, '--by', 'day,team', '--team', 'alpha', '--format', 'csv']),
    };
    fs.writeFileSync(path.join(work, 'expected.json'), JSON.stringify(expected));
    code = await run_tests(path.join(kHere, 'console.test.mjs'), Object.assign({}, process.env, {
      FERRY_CONSOLE_URL: ferry.url,
      FERRY_CONSOLE_EXPECTED: path.join(work, 'expected.json'),
      FERRY_CONSOLE_SCREENSHOTS: args.out,
      FERRY_CONSOLE_CHROMIUM: args.chromium,
      FERRY_CONSOLE_EDITED_POLICY: path.join(work, 'edited.yaml'),
    }));
  } catch (e) {
    console.error('console: ' + (e.stack || e));
    code = 1;
  } finally {
    if (ferry) await stop_server(ferry);
    if (upstream) await stop_server(upstream);
    if (code !== 0) {
      print_tail(path.join(work, 'ferry.log'), 60);
    }
    fs.rmSync(work, { recursive: true, force: true });
  }
  process.exit(code);
}

if (process.argv[1] === fileURLToPath(import.meta.url)) main();
