// Writes HF tokenizer.json files in the shapes real models ship (Llama 3, Qwen2, GPT-2
// byte-level; Llama 2 / Mistral SentencePiece-style with byte fallback; Metaspace), built from
// the first ranks of cl100k_base so that nothing has to be downloaded.
// Usage: node make_hf_fixtures.js OUTPUT_DIR
'use strict';
const fs = require('fs');
const path = require('path');

const outDir = process.argv[2];
fs.mkdirSync(outDir, { recursive: true });

// cl100k_base token bytes by rank, from tiktoken's own encoder file.
function cl100kTokens(limit) {
  const j = require('tiktoken/encoders/cl100k_base.json');
  const tokens = [];
  for (const line of j.bpe_ranks.split('\n')) {
    const parts = line.split(' ');
    if (parts[0] !== '!') continue;
    let rank = Number(parts[1]);
    for (const b64 of parts.slice(2)) {
      if (rank < limit) tokens[rank] = Buffer.from(b64, 'base64');
      rank++;
    }
  }
  return tokens.slice(0, limit);
}

function bytesToUnicode() {
  const bs = [];
  for (let b = 33; b <= 126; b++) bs.push(b);
  for (let b = 161; b <= 172; b++) bs.push(b);
  for (let b = 174; b <= 255; b++) bs.push(b);
  const cs = bs.slice();
  let n = 0;
  for (let b = 0; b < 256; b++) {
    if (!bs.includes(b)) { bs.push(b); cs.push(256 + n); n++; }
  }
  const map = new Array(256);
  bs.forEach((b, i) => { map[b] = String.fromCodePoint(cs[i]); });
  return map;
}

// Merges for a vocabulary: every split of every token into two tokens, ranked by the token.
function mergesFor(vocabList) {
  const index = new Map(vocabList.map((t, i) => [t, i]));
  const merges = [];
  vocabList.forEach((t) => {
    const chars = Array.from(t);
    for (let cut = 1; cut < chars.length; cut++) {
      const a = chars.slice(0, cut).join('');
      const b = chars.slice(cut).join('');
      if (index.has(a) && index.has(b)) merges.push(`${a} ${b}`);
    }
  });
  return merges;
}

function byteLevelVocab(limit) {
  const map = bytesToUnicode();
  return cl100kTokens(limit).map((buf) => Array.from(buf).map((b) => map[b]).join(''));
}

const CL100K = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const QWEN2 = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

function added(id, content, special = true, extra = {}) {
  return { id, content, single_word: false, lstrip: false, rstrip: false, normalized: !special, special, ...extra };
}

function bpeModel(vocabList, extra = {}) {
  const vocab = Object.create(null);
  vocabList.forEach((t, i) => { if (!Object.prototype.hasOwnProperty.call(vocab, t)) vocab[t] = i; });
  return {
    type: 'BPE', dropout: null, unk_token: null, continuing_subword_prefix: null, end_of_word_suffix: null,
    fuse_unk: false, byte_fallback: false, ignore_merges: false, vocab, merges: mergesFor(vocabList), ...extra,
  };
}

function write(name, obj) {
  fs.writeFileSync(path.join(outDir, name), JSON.stringify(obj));
}

const byteVocab = byteLevelVocab(30000);
const n = byteVocab.length;

write('llama3.json', {
  version: '1.0', truncation: null, padding: null,
  added_tokens: [added(n, '<|begin_of_text|>'), added(n + 1, '<|end_of_text|>'), added(n + 2, '<|start_header_id|>'),
    added(n + 3, '<|end_header_id|>'), added(n + 4, '<|eot_id|>')],
  normalizer: null,
  pre_tokenizer: { type: 'Sequence', pretokenizers: [
    { type: 'Split', pattern: { Regex: CL100K }, behavior: 'Isolated', invert: false },
    { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: false }] },
  post_processor: null,
  decoder: { type: 'ByteLevel', add_prefix_space: true, trim_offsets: true, use_regex: true },
  model: bpeModel(byteVocab, { ignore_merges: true }),
});

write('qwen2.json', {
  version: '1.0', truncation: null, padding: null,
  added_tokens: [added(n, '<|endoftext|>'), added(n + 1, '<|im_start|>'), added(n + 2, '<|im_end|>')],
  normalizer: { type: 'NFC' },
  pre_tokenizer: { type: 'Sequence', pretokenizers: [
    { type: 'Split', pattern: { Regex: QWEN2 }, behavior: 'Isolated', invert: false },
    { type: 'ByteLevel', add_prefix_space: false, trim_offsets: false, use_regex: false }] },
  post_processor: null,
  decoder: { type: 'ByteLevel', add_prefix_space: false, trim_offsets: false, use_regex: false },
  model: bpeModel(byteVocab),
});

write('gpt2.json', {
  version: '1.0', truncation: null, padding: null,
  added_tokens: [added(n, '<|endoftext|>')],
  normalizer: null,
  pre_tokenizer: { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: true },
  post_processor: null,
  decoder: { type: 'ByteLevel', add_prefix_space: true, trim_offsets: true, use_regex: true },
  model: bpeModel(byteVocab),
});

// SentencePiece-style: U+2581 for spaces, <0xXX> byte fallback, character-level base.
function spmVocab(limit) {
  const list = ['<unk>', '<s>', '</s>'];
  for (let b = 0; b < 256; b++) list.push(`<0x${b.toString(16).toUpperCase().padStart(2, '0')}>`);
  const seen = new Set(list);
  const push = (t) => { if (!seen.has(t)) { seen.add(t); list.push(t); } };
  const texts = [];
  for (const buf of cl100kTokens(limit)) {
    const s = buf.toString('utf8');
    if (s.includes('\ufffd') || s.includes('<0x')) continue;
    texts.push(s.replace(/ /g, '\u2581'));
  }
  // Characters first (common scripts; the rest falls back to bytes), then the multi-char tokens.
  for (const s of texts) for (const ch of s) push(ch);
  for (const s of texts) push(s);
  return list;
}
const spm = spmVocab(20000);
const spmModel = bpeModel(spm, { unk_token: '<unk>', fuse_unk: true, byte_fallback: true });

write('llama2.json', {
  version: '1.0', truncation: null, padding: null,
  added_tokens: [added(0, '<unk>'), added(1, '<s>'), added(2, '</s>')],
  normalizer: { type: 'Sequence', normalizers: [{ type: 'Prepend', prepend: '\u2581' },
    { type: 'Replace', pattern: { String: ' ' }, content: '\u2581' }] },
  pre_tokenizer: null,
  post_processor: null,
  decoder: { type: 'Sequence', decoders: [{ type: 'Replace', pattern: { String: '\u2581' }, content: ' ' },
    { type: 'ByteFallback' }, { type: 'Fuse' }, { type: 'Strip', content: ' ', start: 1, stop: 0 }] },
  model: spmModel,
});

write('metaspace.json', {
  version: '1.0', truncation: null, padding: null,
  added_tokens: [added(0, '<unk>'), added(1, '<s>'), added(2, '</s>')],
  normalizer: null,
  pre_tokenizer: { type: 'Metaspace', replacement: '\u2581', prepend_scheme: 'first', split: false },
  post_processor: null,
  decoder: { type: 'Metaspace', replacement: '\u2581', prepend_scheme: 'first', split: false },
  model: spmModel,
});
