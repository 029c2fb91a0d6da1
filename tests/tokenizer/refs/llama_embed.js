// Reference embeddings from llama.cpp through node-llama-cpp (npm 3.21.1, prebuilt binaries, CPU
// only): model.createEmbeddingContext(), getEmbeddingFor(text) per input (node-llama-cpp wraps a
// WordPiece input in [CLS] ... [SEP]). Usage: node llama_embed.js MODEL.gguf INPUT.json OUTPUT.json
// INPUT: JSON array of strings; OUTPUT: {"vectors": [[...], ...], "tokens": [[ids], ...]}, the
// vectors as llama.cpp pools them (not normalized here).
'use strict';
const fs = require('fs');

async function main() {
  const [model, input, output] = process.argv.slice(2);
  const { getLlama } = await import('node-llama-cpp');
  const llama = await getLlama({ gpu: false, build: 'never', logLevel: 'error' });
  const m = await llama.loadModel({ modelPath: model });
  // node-llama-cpp's default ("auto") unless FERRY_LLAMA_FLASH_ATTENTION is "true" or "false".
  const fa = process.env.FERRY_LLAMA_FLASH_ATTENTION;
  const ctx = await m.createEmbeddingContext(
      fa === undefined ? { threads: 1 } : { threads: 1, flashAttention: fa === 'true' });
  const texts = JSON.parse(fs.readFileSync(input, 'utf8'));
  const vectors = [];
  const tokens = [];
  for (const t of texts) {
    vectors.push(Array.from((await ctx.getEmbeddingFor(t)).vector));
    tokens.push(Array.from(m.tokenize(t, false)));
  }
  fs.writeFileSync(output, JSON.stringify({ vectors, tokens }));
  await ctx.dispose();
  await m.dispose();
  await llama.dispose();
}
main().catch((e) => { console.error(e); process.exit(1); });
