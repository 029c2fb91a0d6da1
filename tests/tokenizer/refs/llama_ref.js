// Reference ids from llama.cpp's tokenizer through node-llama-cpp (npm 3.21.1, prebuilt
// binaries, CPU only). Usage: node llama_ref.js MODEL.gguf INPUT.json OUTPUT.json
// INPUT: JSON array of strings; OUTPUT: JSON array of id arrays, tokenized without BOS and
// without parsing special tokens.
'use strict';
const fs = require('fs');

async function main() {
  const args = process.argv.slice(2);
  const special = args.length === 4 && args[1] === 'special';
  const [model, input, output] = special ? [args[0], args[2], args[3]] : args;
  const { getLlama } = await import('node-llama-cpp');
  const llama = await getLlama({ gpu: false, build: 'never', logLevel: 'error' });
  const m = await llama.loadModel({ modelPath: model, vocabOnly: true });
  const texts = JSON.parse(fs.readFileSync(input, 'utf8'));
  const out = texts.map((t) => Array.from(m.tokenize(t, special)));
  fs.writeFileSync(output, JSON.stringify(out));
  await m.dispose();
  await llama.dispose();
}
main().catch((e) => { console.error(e); process.exit(1); });
