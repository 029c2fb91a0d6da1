// Conformance runner: makes sure the pinned `openai` client is installed (npm ci when
// node_modules is missing or older than package-lock.json), starts ferry_test_upstream and
// `ferry serve` on port 0 with a temporary config, runs the node:test files against ferry, and
// stops both servers. Usage (ctest passes the binaries' paths from CMake):
//   node run_conformance.mjs --ferry PATH --upstream PATH [test files...]
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

import { closed_port, ensure_node_modules, parse_runner_args, print_tail, run_test_file,
         start_server, stop_server } from './servers.mjs';

const kHere = path.dirname(fileURLToPath(import.meta.url));
const kApiKey = 'sk-ferry-conformance-app';

function parse_args(argv) {
  return parse_runner_args(
      argv, 'usage: node run_conformance.mjs --ferry PATH --upstream PATH [test files...]', kHere);
}

// ---------------------------------------------------------------------------------------------
// Config: one healthy backend (the test upstream), the same upstream with short timeouts (for
// the 504 case), and one backend at a closed port. Public model names pick the upstream's
// behaviour through upstream_model.

function make_config(upstream_url, dead_port, work) {
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
${model('down', 'nowhere', 'echo')}${model('caller', 'upstream', 'call-tool')}\
ledger:
  path: ${work}/ledger.db
`;
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
    fs.writeFileSync(config_file, make_config(upstream.url, await closed_port(), work));
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
