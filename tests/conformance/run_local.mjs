// Local-engine conformance runner: makes a small model with `ferry model synth`, starts
//   ferry B: a complete OpenAI-compatible server with only an in-process model, and
//   ferry A: in-process models (one roomy, one with a single slot, no queue and a short
//            context, one without prefix cache), ferry B as an HTTP backend, the fault-injecting
//            test upstream, a routing policy and a ledger,
// then runs tests/conformance/local/*.test.mjs with the official `openai` client against A.
// Usage (ctest passes the paths): node run_local.mjs --ferry PATH --upstream PATH [files...]
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

import { closed_port, ensure_node_modules, parse_runner_args, print_tail, run_test_file,
         start_server, stop_server } from './servers.mjs';
import { kHermesTemplate } from './templates.mjs';

const kHere = path.dirname(fileURLToPath(import.meta.url));
const kAppKey = 'sk-ferry-local-app';
const kAdminKey = 'sk-ferry-local-admin';
const kBrokeKey = 'sk-ferry-local-broke';  // its team's monthly hard budget is spent at once

function parse_args(argv) {
  return parse_runner_args(argv, 'usage: node run_local.mjs --ferry PATH --upstream PATH [test files...]',
                           path.join(kHere, 'local'));
}

function local_backend(name, model, extra = '') {
  return `  - name: ${name}\n    kind: local\n    model: ${model}\n    threads: 1\n${extra}`;
}

function config_b(model) {
  return `server: { listen: 127.0.0.1:0, shutdown_grace_ms: 2000 }
backends:
${local_backend('cpu', model)}models:
  - { name: tiny, backend: cpu }
`;
}

function config_a(model, b_url, upstream_url, dead_port, dir) {
  return `server: { listen: 127.0.0.1:0, shutdown_grace_ms: 2000 }
auth:
  keys:
    - { id: local-app, key: ${kAppKey}, team: local, project: conformance, role: app }
    - { id: local-admin, key: ${kAdminKey}, team: ops, role: admin }
    - { id: local-broke, key: ${kBrokeKey}, team: broke, project: conformance, role: app }
backends:
${local_backend('cpu', model, '    max_sequences: 16\n    max_queue: 16\n')}\
${local_backend('cpu-small', model, '    max_sequences: 1\n    max_queue: 0\n    context_length: 2048\n')}\
${local_backend('cpu-nocache', model, '    prefix_cache: false\n')}\
${local_backend('cpu-tools', model, `    chat_template: ${JSON.stringify(kHermesTemplate)}\n`)}\
  - { name: b, base_url: "${b_url}/v1" }
  - { name: b-native, base_url: "${b_url}/v1", apis: [chat, completions, messages] }
  - { name: up, base_url: "${upstream_url}/v1" }
  - { name: nowhere, base_url: "http://127.0.0.1:${dead_port}/v1", timeouts: { connect_ms: 2000 } }
models:
  - { name: local, backend: cpu }
  - { name: small, backend: cpu-small }
  - { name: nocache, backend: cpu-nocache }
  - { name: local-tools, backend: cpu-tools }
  - { name: remote, backend: b, upstream_model: tiny }
  - { name: remote-native, backend: b-native, upstream_model: tiny }
  - { name: broken, backend: up, upstream_model: fail-500 }
  - { name: down, backend: nowhere }
policy: { file: ${dir}/policies.yaml, watch: false }
ledger: { path: ${dir}/ledger.db }
prices:
  - { model: local, effective_from: 2026-01-01, internal: true, input: 0.01, output: 0.02 }
  - { model: remote, effective_from: 2026-01-01, input: 1.00, output: 2.00 }
budgets:
  - { name: broke-monthly, scope: team, match: broke, amount: 0.000001, period: month, mode: hard }
`;
}

const kPolicy = `targets:
  local: local
  small: small
  nocache: nocache
  tools: local-tools
  remote: remote
  remote_native: remote-native
  broken: broken
  down: down
models: [local, small, nocache, local-tools, remote, remote-native, fallback-to-local, full-then-remote]
rules:
  - { id: small, when: { model: small }, route: [small] }
  - { id: nocache, when: { model: nocache }, route: [nocache] }
  - { id: tools, when: { model: local-tools }, route: [tools] }
  - { id: remote, when: { model: remote }, route: [remote] }
  - { id: remote-native, when: { model: remote-native }, route: [remote_native] }
  - { id: fallback-to-local, when: { model: fallback-to-local }, route: [broken, down, local] }
  - { id: full-then-remote, when: { model: full-then-remote }, route: [small, remote] }
default: { route: [local] }
`;

async function main() {
  const args = parse_args(process.argv.slice(2));
  ensure_node_modules();
  const work = fs.mkdtempSync(path.join(os.tmpdir(), 'ferry-local-'));
  const servers = [];
  let exit_code = 1;
  try {
    const model = path.join(work, 'tiny.gguf');
    const synth = spawnSync(args.ferry, ['model', 'synth', '--preset', 'tiny', '--ctx', '4096',
                                         '--type', 'Q8_0', '--seed', '3', model],
                            { stdio: 'inherit', timeout: 120000 });
    if (synth.status !== 0) throw new Error('ferry model synth failed');

    const upstream = await start_server('ferry_test_upstream', args.upstream,
                                        ['--listen', '127.0.0.1:0'], path.join(work, 'upstream.log'));
    servers.push(upstream);
    fs.writeFileSync(path.join(work, 'b.yaml'), config_b(model));
    const b = await start_server('ferry-b', args.ferry,
                                 ['serve', '--config', path.join(work, 'b.yaml')],
                                 path.join(work, 'b.log'));
    servers.push(b);
    fs.writeFileSync(path.join(work, 'policies.yaml'), kPolicy);
    fs.writeFileSync(path.join(work, 'a.yaml'),
                     config_a(model, b.url.replace(/\/+$/, ''), upstream.url.replace(/\/+$/, ''),
                              await closed_port(), work));
    const a = await start_server('ferry-a', args.ferry,
                                 ['serve', '--config', path.join(work, 'a.yaml')],
                                 path.join(work, 'a.log'));
    servers.push(a);
    console.log(`local conformance: ferry A ${a.url}, ferry B ${b.url}, work dir ${work}`);

    const env = {
      ...process.env,
      FERRY_BASE_URL: a.url.replace(/\/+$/, '') + '/v1',
      FERRY_ROOT_URL: a.url.replace(/\/+$/, ''),
      FERRY_B_BASE_URL: b.url.replace(/\/+$/, '') + '/v1',
      FERRY_API_KEY: kAppKey,
      FERRY_ADMIN_KEY: kAdminKey,
      FERRY_BROKE_KEY: kBrokeKey,
      FERRY_UPSTREAM_URL: upstream.url.replace(/\/+$/, ''),
    };
    const failed = [];
    for (const file of args.files) {
      const code = await run_test_file(file, env);
      if (code !== 0) failed.push(path.basename(file));
    }
    exit_code = failed.length === 0 ? 0 : 1;
    console.log(failed.length === 0 ? `local conformance: all ${args.files.length} files passed`
                                     : `local conformance: FAILED in ${failed.join(', ')}`);
  } catch (e) {
    console.error(`local conformance: ${e.message}`);
    exit_code = 1;
  } finally {
    for (const s of servers.reverse()) {
      const { code, signal } = await stop_server(s);
      if (code !== 0) {
        console.log(`local conformance: ${s.name} stopped with code ${code}, signal ${signal}`);
        exit_code = 1;
      }
    }
    if (exit_code !== 0) {
      for (const log of ['a.log', 'b.log']) print_tail(path.join(work, log), 40);
      console.log(`local conformance: logs kept in ${work}`);
    } else {
      fs.rmSync(work, { recursive: true, force: true });
    }
  }
  process.exit(exit_code);
}

main();
