// Reference ids from HuggingFace tokenizers (npm @anush008/tokenizers, tokenizers 0.22).
// Usage: node hf_ref.js TOKENIZER_JSON INPUT.json OUTPUT.json
// INPUT: JSON array of strings; OUTPUT: JSON array of id arrays (no special tokens added;
// added tokens in the text are matched, as the library does).
'use strict';
const fs = require('fs');
const { Tokenizer } = require('@anush008/tokenizers');

async function main() {
  const [file, input, output] = process.argv.slice(2);
  const texts = JSON.parse(fs.readFileSync(input, 'utf8'));
  const tok = Tokenizer.fromFile(file);
  const out = [];
  for (const t of texts) {
    const enc = await tok.encode(t, null, { addSpecialTokens: false });
    out.push(enc.getIds());
  }
  fs.writeFileSync(output, JSON.stringify(out));
}
main().catch((e) => { console.error(e); process.exit(1); });
