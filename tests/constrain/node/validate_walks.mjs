// The constraint engine checked by a third party: hand-written cases (../cases.json, every
// supported keyword and tool_choice) plus schemas generated at random from the supported subset
// are walked by constrain_walks (uniform random choices among the allowed tokens of real
// vocabularies until the end of generation), and every output is validated with ajv
// (draft 2020-12, ajv-formats). Fails unless every walk ended within its bound, every output
// parses and validates, and every tool call names a declared function with valid arguments.
//   node validate_walks.mjs --walker PATH [--random N] [--vocab NAME[:LIMIT[:SEEDS]]]...
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const kHere = path.dirname(fileURLToPath(import.meta.url));

// ---- npm ci when node_modules is missing or older than the lock file -----------------------

function ensure_node_modules() {
  const lock = fs.readFileSync(path.join(kHere, 'package-lock.json'));
  const hash = createHash('sha256').update(lock).digest('hex');
  const marker = path.join(kHere, 'node_modules', '.ferry-lock-sha256');
  if (fs.existsSync(marker) && fs.readFileSync(marker, 'utf8').trim() === hash) return;
  const npm = process.env.FERRY_NPM || 'npm';
  const r = spawnSync(npm, ['ci', '--no-audit', '--no-fund', '--loglevel=error'],
                      { cwd: kHere, stdio: 'inherit', timeout: 200000 });
  if (r.error || r.status !== 0) throw new Error(`npm ci failed in ${kHere}`);
  fs.writeFileSync(marker, hash + '\n');
}

// ---- random schemas from the supported subset --------------------------------------------

function mulberry32(seed) {
  return () => {
    seed = (seed + 0x6D2B79F5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const kWords = ['id', 'name', 'city', 'count', 'tags', 'note', 'x', 'y', 'ok', 'kind', 'v\u00e4lue'];
const kPatterns = ['^[a-z]{1,8}$', '^\\d{3}-\\d{4}$', '^(red|green|blue)$',
                   '^[A-Z][a-z]*( [A-Z][a-z]*)?$', '^\\w+@\\w+\\.com$', '^[0-9a-f]{2,}$'];
const kFormats = ['date', 'time', 'date-time', 'uuid', 'email'];

function random_schema(rng, depth, defs) {
  const pick = (a) => a[Math.floor(rng() * a.length)];
  const int = (lo, hi) => lo + Math.floor(rng() * (hi - lo + 1));
  const leaf = depth >= 3 || rng() < 0.45;
  if (leaf) {
    switch (int(0, 9)) {
      case 0: return { type: 'string' };
      case 1: { const lo = int(0, 4); return { type: 'string', minLength: lo, maxLength: lo + int(0, 6) }; }
      case 2: return { type: 'string', pattern: pick(kPatterns) };
      case 3: return { type: 'string', format: pick(kFormats) };
      case 4: return { type: 'integer' };
      case 5: { const lo = int(-500, 500); return { type: 'integer', minimum: lo, maximum: lo + int(0, 3000) }; }
      case 6: return rng() < 0.5 ? { type: 'number' } : { type: 'number', minimum: int(-9, 0), exclusiveMaximum: int(1, 99) };
      case 7: return { type: pick(['boolean', 'null']) };
      case 8: return { enum: [...new Set([pick(kWords), pick(kWords), int(-9, 9), pick([true, null, 1.5])])] };
      default: return { const: pick([pick(kWords), int(0, 99), { k: pick(kWords) }, [1, 'a']]) };
    }
  }
  switch (int(0, 5)) {
    case 0:
    case 1: {
      const props = {};
      for (let i = 0, n = int(0, 4); i < n; ++i) props[pick(kWords)] = random_schema(rng, depth + 1, defs);
      const names = Object.keys(props);
      const s = { type: 'object', properties: props, required: names.filter(() => rng() < 0.6) };
      if (rng() < 0.7) s.additionalProperties = false;
      if (names.length === 0 && rng() < 0.5) s.additionalProperties = random_schema(rng, depth + 1, defs);
      return s;
    }
    case 2: {
      const s = { type: 'array', items: random_schema(rng, depth + 1, defs) };
      if (rng() < 0.5) s.minItems = int(0, 2);
      if (rng() < 0.5) s.maxItems = (s.minItems ?? 0) + int(0, 3);
      return s;
    }
    case 3: {
      const alts = [];
      for (let i = 0, n = int(2, 3); i < n; ++i) alts.push(random_schema(rng, depth + 1, defs));
      return { anyOf: alts };
    }
    case 4: return { type: [pick(['string', 'integer', 'number', 'boolean']), 'null'] };
    default: {
      const name = 'd' + Object.keys(defs).length;
      defs[name] = null;  // reserved before the recursion names its own
      defs[name] = random_schema(rng, depth + 1, defs);
      return { $ref: '#/$defs/' + name, description: 'a reference' };
    }
  }
}

function random_cases(n, seed) {
  const rng = mulberry32(seed);
  const out = [];
  for (let i = 0; i < n; ++i) {
    const defs = {};
    const schema = random_schema(rng, 0, defs);
    if (Object.keys(defs).length) schema.$defs = defs;
    out.push({ id: `random-${i}`, schema });
  }
  return out;
}

// ---- checks --------------------------------------------------------------------------------

function check_tools(ajv, c, output) {
  const calls = [];
  const re = /<tool_call>([\s\S]*?)<\/tool_call>/g;
  let m;
  while ((m = re.exec(output)) !== null) calls.push(m[1]);
  const first = output.indexOf('<tool_call>');
  const choice = c.tool_choice;
  if (choice === 'none') return first < 0 ? null : 'tool_choice none, yet a call';
  const forced = choice === 'required' || typeof choice === 'object';
  if (forced && (calls.length === 0 || output.slice(0, first).trim() !== ''))
    return 'a forced call missing or preceded by text';
  if (c.parallel === false && calls.length > 1) return 'more than one call with parallel off';
  const rest = output.replace(re, '').slice(Math.max(0, first));
  if (first >= 0 && rest.trim() !== '') return 'text after the calls';
  for (const body of calls) {
    let call;
    try { call = JSON.parse(body); } catch (e) { return `call is not JSON: ${e.message}`; }
    const fn = c.tools.find((t) => t.name === call.name);
    if (!fn) return `undeclared function ${call.name}`;
    if (typeof choice === 'object' && call.name !== choice.name) return 'not the named function';
    const params = fn.parameters ?? { type: 'object', additionalProperties: false };
    if (!ajv.validate(params, call.arguments)) return `arguments: ${ajv.errorsText()}`;
  }
  return null;
}

function parse_args(args) {
  const opts = { walker: '', n_random: 300, vocabs: [] };
  for (let i = 0; i < args.length; i += 2) {
    if (args[i] === '--walker') opts.walker = args[i + 1];
    if (args[i] === '--random') opts.n_random = Number(args[i + 1]);
    if (args[i] === '--vocab') opts.vocabs.push(args[i + 1]);
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
console.log('every walk ended and every output validated');
