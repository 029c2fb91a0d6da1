// The constraint engine checked by a third party: hand-written cases (../cases.json, every
// supported keyword and tool_choice) plus schemas generated at random from the supported subset
// are walked by constrain_walks (uniform random choices among the allowed tokens of real
// vocabularies until the end of generation), and every output is validated with ajv
// (draft 2020-12, ajv-formats). Fails unless every walk ended within its bound, every output
// parses and validates, and every tool call names a declared function with valid arguments.
// With --budget N every walk has a token budget of its shortest completion + 1 to + N (issue
// 15: generation always closes within max_tokens) and must end within it.
//   node validate_walks.mjs --walker PATH [--random N] [--budget N] [--vocab NAME[:LIMIT[:SEEDS]]]...
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

import { check_tools, ensure_node_modules, random_cases } from './schemas.mjs';

const kHere = path.dirname(fileURLToPath(import.meta.url));

function parse_args(args) {
  const opts = { walker: '', n_random: 300, vocabs: [], budget: 0 };
  for (let i = 0; i < args.length; i += 2) {
    if (args[i] === '--walker') opts.walker = args[i + 1];
    if (args[i] === '--random') opts.n_random = Number(args[i + 1]);
    if (args[i] === '--vocab') opts.vocabs.push(args[i + 1]);
    if (args[i] === '--budget') opts.budget = Number(args[i + 1]);
  }
  if (!opts.walker) {
    throw new Error('usage: node validate_walks.mjs --walker PATH [--random N] [--vocab SPEC]...');
  }
  if (opts.vocabs.length === 0) opts.vocabs.push('demo::5', 'synth::2', 'llama2::2', 'cl100k', 'o200k');
  return opts;
}

const opts = parse_args(process.argv.slice(2));
ensure_node_modules();
const { default: Ajv2020 } = await import('ajv/dist/2020.js');
const { default: add_formats } = await import('ajv-formats');
const ajv = new Ajv2020({ strict: false, allErrors: true });
add_formats(ajv);

const hand = JSON.parse(fs.readFileSync(path.join(kHere, '..', 'cases.json'), 'utf8'));
const cases = [...hand, ...random_cases(opts.n_random, 20261201)];
const by_id = new Map(cases.map((c) => [c.id, c]));
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ferry-constrain-walks-'));
const cases_path = path.join(dir, 'cases.json');
const out_path = path.join(dir, 'walks.jsonl');
fs.writeFileSync(cases_path, JSON.stringify(cases));
const walk_args = ['--cases', cases_path, '--out', out_path];
if (opts.budget > 0) walk_args.push('--budget', String(opts.budget));
for (const v of opts.vocabs) walk_args.push('--vocab', v);
const r = spawnSync(opts.walker, walk_args, { stdio: 'inherit', timeout: 540000 });
if (r.error || r.status !== 0) throw new Error(`constrain_walks failed: ${r.error ?? 'exit ' + r.status}`);

const failures = [];
const stats = {};
for (const line of fs.readFileSync(out_path, 'utf8').split('\n')) {
  if (!line) continue;
  const w = JSON.parse(line);
  if (w.skipped) {
    console.log(`vocabulary ${w.vocab}: absent, skipped`);
    continue;
  }
  const s = (stats[w.vocab] ??= { walks: 0, valid: 0, schemas: new Set(), tokens: 0 });
  const c = by_id.get(w.id);
  const fail = (why) => failures.push(`${w.vocab} ${w.id} seed ${w.seed}: ${why}\n  output: ${JSON.stringify(w.output)}`);
  ++s.walks;
  s.schemas.add(w.id);
  if (w.error) { fail(`compile error: ${w.error}`); continue; }
  s.tokens += w.steps;
  if (!w.ended) { fail(`did not end within ${w.steps} tokens`); continue; }
  if (opts.budget > 0 && !(w.budget > w.shortest)) { fail(`no budget given (${w.budget})`); continue; }
  if (opts.budget > 0 && w.steps > w.budget) { fail(`${w.steps} tokens over the budget of ${w.budget}`); continue; }
  let why = null;
  if (c.tools) {
    why = check_tools(ajv, c, w.output);
  } else {
    let value;
    try { value = JSON.parse(w.output); } catch (e) { why = `not JSON: ${e.message}`; }
    if (!why && !ajv.validate(c.schema, value)) why = `invalid: ${ajv.errorsText()}`;
  }
  if (why) fail(why); else ++s.valid;
}
for (const [v, s] of Object.entries(stats)) {
  console.log(`vocabulary ${v}: ${s.schemas.size} cases, ${s.walks} walks, ${s.valid} valid (ajv), ` +
              `${s.tokens} tokens`);
}
fs.rmSync(dir, { recursive: true, force: true });
if (failures.length) {
  console.error(`${failures.length} failures:\n` + failures.slice(0, 20).join('\n'));
  process.exit(1);
}
console.log(opts.budget > 0 ? 'every walk ended within its token budget and every output validated'
                            : 'every walk ended and every output validated');
