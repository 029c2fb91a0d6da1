// Conformance runner: makes sure the pinned `openai` client is installed (npm ci when
// node_modules is missing or older than package-lock.json), starts ferry_test_upstream and
// `ferry serve` on port 0 with a temporary config, runs the node:test files against ferry, and
// stops both servers. Usage (ctest passes the binaries' paths from CMake):
//   node run_conformance.mjs --ferry PATH --upstream PATH [test files...]
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
const kApiKey = 'sk-ferry-conformance-app';

function parse_args(argv) {
  const args = { ferry: null, upstream: null, files: [] };
  for (let i = 0; i < argv.length; i++) {
    if (argv[i] === '--ferry') args.ferry = argv[++i];
    else if (argv[i] === '--upstream') args.upstream = argv[++i];
    else args.files.push(argv[i]);
  }
  if (!args.ferry || !args.upstream) {
    console.error('usage: node run_conformance.mjs --ferry PATH --upstream PATH [test files...]');
    process.exit(2);
  }
  if (args.files.length === 0) {
    args.files = fs.readdirSync(kHere).filter((f) => f.endsWith('.test.mjs')).sort()
        .map((f) => path.join(kHere, f));
  }
  return args;
}

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

function ensure_node_modules() {
  const lock_hash = sha256_of_files([path.join(kHere, 'package.json'),
                                     path.join(kHere, 'package-lock.json')]);
  const marker = path.join(kHere, 'node_modules', '.ferry-lock-sha256');
  const installed = () => fs.existsSync(marker) && fs.readFileSync(marker, 'utf8').trim() === lock_hash;
  if (installed()) return;

  const lock_dir = path.join(os.tmpdir(),
      'ferry-conformance-npm-' + createHash('sha256').update(kHere).digest('hex').slice(0, 12));
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
                        { cwd: kHere, stdio: 'inherit', timeout: 200000 });
    if (r.error || r.status !== 0) {
      throw new Error(`npm ci failed in ${kHere}: ${r.error ?? 'exit ' + r.status}`);
    }
    fs.writeFileSync(marker, lock_hash + '\n');
  } finally {
    fs.rmSync(lock_dir, { recursive: true, force: true });
  }
}

// ---------------------------------------------------------------------------------------------
// Child servers.

// Starts `bin args...`, resolves with the URL of its `listening on URL` line. Everything it
// writes is appended to log_file.
function start_server(name, bin, args, log_file) {
  const out = fs.createWriteStream(log_file);
  const child = spawn(bin, args, { stdio: ['ignore', 'pipe', 'pipe'] });
  child.stderr.pipe(out, { end: false });
  const lines = readline.createInterface({ input: child.stdout });
  return new Promise((resolve, reject) => {
    let url = null;
    const timer = setTimeout(() => {
      reject(new Error(`${name} printed no 'listening on' line in ${kStartTimeoutMs} ms`));
    }, kStartTimeoutMs);
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

function stop_server(server) {
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
function closed_port() {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.on('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const port = srv.address().port;
      srv.close(() => resolve(port));
    });
  });
}

function print_tail(file, max_lines) {
  if (!fs.existsSync(file)) return;
  const lines = fs.readFileSync(file, 'utf8').split('\n');
  console.log(`---- last lines of ${file} ----`);
  console.log(lines.slice(-max_lines).join('\n'));
}

// ---------------------------------------------------------------------------------------------
// Config: one healthy backend (the test upstream), the same upstream with short timeouts (for
// the 504 case), and one backend at a closed port. Public model names pick the upstream's
// behaviour through upstream_model.

function make_config(upstream_url, dead_port) {
  const upstream_v1 = upstream_url.replace(/\/+$/, '') + '/v1';
  const model = (name, backend, upstream) =>
      `  - name: ${name}\n    backend: ${backend}\n    upstream_model: ${upstream}\n`;
  return `# Written by tests/conformance/run_conformance.mjs for one run.
server:
  listen: 127.0.0.1:0
  shutdown_grace_ms: 2000
limits:
  max_body_bytes: 1048576
auth:
  keys:
    - id: conformance-app
      key: ${kApiKey}
      team: conformance
      project: openai-node
      role: app
backends:
  - name: upstream
    base_url: ${upstream_v1}
    timeouts:
      connect_ms: 2000
      first_byte_ms: 20000
      idle_ms: 20000
      total_ms: 60000
  - name: upstream-impatient
    base_url: ${upstream_v1}
    timeouts:
      connect_ms: 2000
      first_byte_ms: 800
      idle_ms: 800
      total_ms: 5000
  - name: nowhere
    base_url: http://127.0.0.1:${dead_port}/v1
    timeouts:
      connect_ms: 2000
models:
${model('echo', 'upstream', 'echo')}${model('chunky', 'upstream', 'chunky')}\
${model('no-usage', 'upstream', 'no-usage')}${model('fail-500', 'upstream', 'fail-500')}\
${model('fail-429', 'upstream', 'fail-429')}${model('reset-mid-stream', 'upstream', 'reset-mid-stream')}\
${model('malformed-sse', 'upstream', 'malformed-sse')}${model('hang', 'upstream-impatient', 'hang')}\
${model('down', 'nowhere', 'echo')}`;
}

function run_test_file(file, env) {
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

// ---------------------------------------------------------------------------------------------

async function main() {
  const args = parse_args(process.argv.slice(2));
  ensure_node_modules();

  const work = fs.mkdtempSync(path.join(os.tmpdir(), 'ferry-conformance-'));
  const servers = [];
  let exit_code = 1;
  try {
    const upstream = await start_server('ferry_test_upstream', args.upstream,
                                        ['--listen', '127.0.0.1:0'],
                                        path.join(work, 'upstream.log'));
    servers.push(upstream);
    const config_file = path.join(work, 'ferry.yaml');
    fs.writeFileSync(config_file, make_config(upstream.url, await closed_port()));
    const ferry = await start_server('ferry', args.ferry,
                                     ['serve', '--config', config_file, '--listen', '127.0.0.1:0'],
                                     path.join(work, 'ferry.log'));
    servers.push(ferry);
    console.log(`conformance: upstream ${upstream.url}, ferry ${ferry.url}, work dir ${work}`);

    const env = {
      ...process.env,
      FERRY_BASE_URL: ferry.url.replace(/\/+$/, '') + '/v1',
      FERRY_ROOT_URL: ferry.url.replace(/\/+$/, ''),
      FERRY_API_KEY: kApiKey,
      FERRY_UPSTREAM_URL: upstream.url.replace(/\/+$/, ''),
      FERRY_ACCESS_LOG: ferry.log_file,
    };
    // One file at a time (tests that read the upstream's /_last_request must not race), and
    // asynchronously, so that the servers' output keeps being drained while the tests run.
    const failed = [];
    for (const file of args.files) {
      const code = await run_test_file(file, env);
      if (code !== 0) failed.push(path.basename(file));
    }
    exit_code = failed.length === 0 ? 0 : 1;
    console.log(failed.length === 0 ? `conformance: all ${args.files.length} files passed`
                                     : `conformance: FAILED in ${failed.join(', ')}`);
  } catch (e) {
    console.error(`conformance: ${e.message}`);
    exit_code = 1;
  } finally {
    for (const s of servers.reverse()) {
      const { code, signal } = await stop_server(s);
      if (code !== 0) console.log(`conformance: ${s.name} stopped with code ${code}, signal ${signal}`);
    }
    if (exit_code !== 0) {
      print_tail(path.join(work, 'ferry.log'), 40);
      print_tail(path.join(work, 'upstream.log'), 20);
      console.log(`conformance: logs kept in ${work}`);
    } else {
      fs.rmSync(work, { recursive: true, force: true });
    }
  }
  process.exit(exit_code);
}

main();
