// What the constraint's validity checks share: npm ci of this folder, schemas generated at
// random from the supported subset, and the check of a Hermes-style tool-call output.
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const kHere = path.dirname(fileURLToPath(import.meta.url));

// ---- npm ci when node_modules is missing or older than the lock file -----------------------

export function ensure_node_modules() {
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

export function random_cases(n, seed) {
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

export function check_tools(ajv, c, output) {
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
