// Compares ferry's local engine with llama.cpp (through node-llama-cpp) on the same GGUF files:
// greedy continuations of several prompts (same prompt token ids on both sides) and the
// next-token log-probabilities after each prompt. Not part of the test suite; see README.md.
//
//   node tools/llamacpp/compare.mjs --ferry build/gateway/ferry --tokens 32 model1.gguf ...
//
// node-llama-cpp must be importable: run from a directory where `npm i -E node-llama-cpp@3.21.1`
// was done, or set NODE_PATH to its node_modules.
import {execFileSync} from "node:child_process";
import {createRequire} from "node:module";
import path from "node:path";

const args = process.argv.slice(2);
let ferry = "build/gateway/ferry";
let nTokens = 32;
let threads = 2;
let topN = 10;
const models = [];
for (let i = 0; i < args.length; i++) {
  if (args[i] === "--ferry") ferry = args[++i];
  else if (args[i] === "--tokens") nTokens = Number(args[++i]);
  else if (args[i] === "--threads") threads = Number(args[++i]);
  else if (args[i] === "--top") topN = Number(args[++i]);
  else models.push(args[i]);
}
if (models.length === 0) {
  console.error("usage: compare.mjs [--ferry BIN] [--tokens N] [--threads N] MODEL.gguf...");
  process.exit(2);
}

const require = createRequire(path.join(process.env.LLREF_DIR ?? process.cwd(), "package.json"));
const {getLlama} = await import(require.resolve("node-llama-cpp"));
// The prebuilt library only: a llama.cpp built here from source (node-llama-cpp's fallback when
// its prebuilt package is missing, e.g. installed under a Node.js older than 20, which skips it)
// orders its float sums by this CPU's features and disagrees in the last digits.
let llama;
try {
  llama = await getLlama({gpu: false, build: "never", logLevel: "error"});
} catch (e) {
  console.error(`compare.mjs: node-llama-cpp's prebuilt library did not load (${e.message}); ` +
                "reinstall node_modules with Node.js 20 or newer (scripts/setup.sh installs it)");
  process.exit(1);
}

const kPromptTexts = [
  "The quick brown fox",
  "Once upon a time, in a land far away,",
  "def fibonacci(n):",
  "1, 2, 3, 4,",
];

function ferryIds(model, prompt, extra) {
  const out = execFileSync(ferry, ["engine", "generate", "--model", model, "--prompt-ids",
    prompt.join(","), "--threads", String(threads), ...extra], {encoding: "utf8",
    stdio: ["ignore", "pipe", "ignore"]});
  return out.trim();
}

const rows = [];
for (const modelPath of models) {
  const model = await llama.loadModel({modelPath, gpuLayers: 0});
  // Flash attention "auto", llama.cpp's own default, which picks it on the CPU; node-llama-cpp's
  // default is the same except for gemma2, which it forces to the other attention form (an
  // older llama.cpp rule, GgufInsights.flashAttentionSupported): ferry has the flash forms.
  const context = await model.createContext({contextSize: 256, threads, batchSize: 256,
    flashAttention: "auto"});
  const seq = context.getSequence();
  const eog = new Set([model.tokens.eos, model.tokens.eot].filter((t) => t != null).map(Number));
  let sameGreedy = 0, prompts = 0, minPrefix = Infinity, maxLogprobDiff = 0, topMatch = 0;
  const prefixes = [];  // first divergence per prompt (nTokens: none)
  for (const text of kPromptTexts) {
    const prompt = [...model.tokenize(text, true)].map(Number);
    if (model.tokens.bos !== null && model.tokens.bos !== undefined && prompt[0] !== model.tokens.bos) {
      prompt.unshift(Number(model.tokens.bos));
    }
    prompts++;
    // llama.cpp greedy continuation.
    await seq.clearHistory();
    const llamaTokens = [];
    for await (const token of seq.evaluate(prompt, {temperature: 0})) {
      llamaTokens.push(Number(token));
      if (llamaTokens.length >= nTokens) break;
    }
    // Next-token probabilities after the prompt.
    await seq.clearHistory();
    const input = prompt.slice(0, -1);
    input.push([prompt[prompt.length - 1], {generateNext: {probabilities: true}}]);
    const res = await seq.controlledEvaluate(input);
    const probs = res[prompt.length - 1].next.probabilities;

    const ferryTokens = ferryIds(modelPath, prompt, ["--ids", "--ignore-eos", "--max-tokens",
      String(nTokens)]).split(/\s+/).filter(Boolean).map(Number);
    let prefix = 0;
    while (prefix < llamaTokens.length && ferryTokens[prefix] === llamaTokens[prefix]) prefix++;
    // llama.cpp's iterator ends at an end-of-generation token; ferry (--ignore-eos) goes on, so
    // agreeing up to there and then picking that token counts as the same output.
    const endedTogether = prefix === llamaTokens.length && llamaTokens.length < nTokens &&
      eog.has(ferryTokens[prefix]);
    if (endedTogether) prefix = nTokens;
    if (prefix === nTokens) sameGreedy++;
    else console.error(`${path.basename(modelPath)}: "${text}" differs at ${prefix}: llama.cpp ${llamaTokens.slice(prefix, prefix + 4)} ferry ${ferryTokens.slice(prefix, prefix + 4)}`);
    minPrefix = Math.min(minPrefix, prefix);
    prefixes.push(prefix);

    const ferryLp = new Map(ferryIds(modelPath, prompt, ["--logprobs", String(topN)])
      .split("\n").filter(Boolean).map((line) => {
        const [id, lp] = line.split(" ");
        return [Number(id), Number(lp)];
      }));
    const llamaTop = [...probs.entries()].slice(0, topN);
    if (llamaTop.length > 0 && ferryLp.keys().next().value === Number(llamaTop[0][0])) topMatch++;
    for (const [id, p] of llamaTop) {
      if (p < 1e-4 || !ferryLp.has(Number(id))) continue;
      maxLogprobDiff = Math.max(maxLogprobDiff, Math.abs(Math.log(p) - ferryLp.get(Number(id))));
    }
  }
  rows.push({model: path.basename(modelPath), prompts, sameGreedy, minPrefix, prefixes, topMatch,
    maxLogprobDiff: maxLogprobDiff.toFixed(4)});
  await context.dispose();
  await model.dispose();
}

console.log(`| model | prompts | identical ${nTokens}-token greedy | first divergence per prompt | same top-1 | max abs logprob diff (top ${topN}, p >= 1e-4) |`);
console.log("| --- | --- | --- | --- | --- | --- |");
for (const r of rows) {
  console.log(`| ${r.model} | ${r.prompts} | ${r.sameGreedy}/${r.prompts} | ${r.prefixes.join(" ")} | ${r.topMatch}/${r.prompts} | ${r.maxLogprobDiff} |`);
}
