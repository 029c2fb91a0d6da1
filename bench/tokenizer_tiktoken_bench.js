// OpenAI's tiktoken (npm 1.0.22, WASM) on the same files as tokenizer_bench, same method:
// median of 5 timed runs after a warm-up, single thread.
// Usage: node tokenizer_tiktoken_bench.js REALISTIC.txt PATHOLOGICAL.txt
'use strict';
const fs = require('fs');
const path = require('path');
const { get_encoding } = require(path.join(__dirname, '../tests/tokenizer/refs/node_modules/tiktoken'));

function median(fn, reps) {
  fn();
  const t = [];
  for (let i = 0; i < reps; i++) {
    const start = process.hrtime.bigint();
    fn();
    t.push(Number(process.hrtime.bigint() - start) / 1e9);
  }
  t.sort((a, b) => a - b);
  return t[Math.floor(t.length / 2)];
}

const [realFile, pathFile] = process.argv.slice(2);
const realistic = fs.readFileSync(realFile, 'utf8');
const pathological = fs.readFileSync(pathFile, 'utf8');
const realBytes = Buffer.byteLength(realistic);
const pathBytes = Buffer.byteLength(pathological);
for (const name of ['cl100k_base', 'o200k_base']) {
  const enc = get_encoding(name);
  let n1 = 0, n2 = 0;
  const r = median(() => { n1 = enc.encode_ordinary(realistic).length; }, 5);
  const p = median(() => { n2 = enc.encode_ordinary(pathological).length; }, 3);
  console.log(`tiktoken ${name.padEnd(11)} realistic ${(realBytes / r / 1e6).toFixed(1).padStart(7)} MB/s (${n1} tokens) | ` +
              `pathological ${(pathBytes / p / 1e6).toFixed(2).padStart(7)} MB/s (${n2} tokens)`);
  enc.free();
}
