// Reference ids from OpenAI's tiktoken (npm 1.0.22, the WASM build of the Rust crate).
// Usage: node tiktoken_ref.js ENCODING INPUT.json OUTPUT.json
// INPUT is a JSON array of strings; OUTPUT is a JSON array of id arrays (encode_ordinary).
'use strict';
const fs = require('fs');
const { get_encoding } = require('tiktoken');

const [encoding, input, output] = process.argv.slice(2);
const texts = JSON.parse(fs.readFileSync(input, 'utf8'));
const enc = get_encoding(encoding);
const out = texts.map((t) => Array.from(enc.encode_ordinary(t)));
enc.free();
fs.writeFileSync(output, JSON.stringify(out));
