// llama.cpp's prompt-processing and generation speed on a GGUF file, through node-llama-cpp's
// prebuilt llama.cpp (CPU only), measured the way `ferry engine bench` measures ferry: a
// prompt of P random tokens in batches of 512, then N single-token decode steps from an empty
// context. Run by bench/engine_bench.sh; see bench/README.md.
//   LLREF_DIR=/tmp/llref node bench/engine_llamacpp.mjs MODEL.gguf [threads] [P] [N] [FA]
// FA: flash attention "off" (default), "on" or "auto" (node-llama-cpp's own default).
import {createRequire} from "node:module";
import path from "node:path";

const [modelPath, threadsArg = "2", pArg = "512", nArg = "128", faArg = "off"] = process.argv.slice(2);
const flashAttention = faArg === "auto" ? "auto" : faArg === "on";
const threads = Number(threadsArg), nPrompt = Number(pArg), nGen = Number(nArg);
const require = createRequire(path.join(process.env.LLREF_DIR ?? process.cwd(), "package.json"));
const {getLlama} = await import(require.resolve("node-llama-cpp"));
const llama = await getLlama({gpu: false, logLevel: "error"});
const model = await llama.loadModel({modelPath, gpuLayers: 0});
const context = await model.createContext({contextSize: nPrompt + nGen + 8, threads,
  batchSize: 512, flashAttention});

let seed = 1234;
const rand = () => (seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648;
const vocab = model.tokens.vocabularySize ?? 32000;
const pick = () => Math.floor(rand() * (vocab - 10)) + 5;

let pp = 0, tg = 0;
for (let rep = 0; rep < 2; rep++) {
  const seq = context.getSequence();
  const prompt = Array.from({length: nPrompt}, pick);
  let start = process.hrtime.bigint();
  await seq.evaluateWithoutGeneratingNewTokens(prompt);
  pp = Math.max(pp, nPrompt / (Number(process.hrtime.bigint() - start) / 1e9));
  await seq.clearHistory();
  start = process.hrtime.bigint();
  let count = 0;
  for await (const token of seq.evaluate([pick()], {temperature: 0})) {
    void token;
    if (++count >= nGen) break;
  }
  tg = Math.max(tg, nGen / (Number(process.hrtime.bigint() - start) / 1e9));
  seq.dispose();
}
console.log(`llama.cpp (node-llama-cpp 3.21.1 prebuilt, ${llama.cpuMathCores ?? "?"} cores, fa ${faArg}): ` +
  `pp${nPrompt}: ${pp.toFixed(2)} t/s  tg${nGen}: ${tg.toFixed(2)} t/s`);
await context.dispose();
await model.dispose();
