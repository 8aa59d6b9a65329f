// greedy.mjs: upstream llama.cpp (prebuilt, via node-llama-cpp) as an oracle
// for goengine's tests. Reads one JSON request on stdin:
//   {"dir": ORACLE_DIR, "model": PATH, "prompt": TEXT, "n": N, "threads": T}
// and prints {"prompt": [ids], "tokens": [ids]}: the prompt tokenized with
// special tokens parsed, then up to N greedy tokens (stopping at EOG).
import {readFileSync} from "node:fs";
import {join} from "node:path";
import {pathToFileURL} from "node:url";

const req = JSON.parse(readFileSync(0, "utf8"));
const lib = await import(pathToFileURL(join(req.dir, "node_modules/node-llama-cpp/dist/index.js")).href);
const llama = await lib.getLlama({gpu: false, build: "never", logLevel: lib.LlamaLogLevel.error});
const model = await llama.loadModel({modelPath: req.model});
const ctx = await model.createContext({contextSize: 512, threads: req.threads ?? 1});
const seq = ctx.getSequence();
const prompt = model.tokenize(req.prompt, true);
const tokens = [];
if (req.n > 0) {
	for await (const t of seq.evaluate(prompt, {temperature: 0})) {
		if (model.isEogToken(t)) break;
		tokens.push(t);
		if (tokens.length >= req.n) break;
	}
}
process.stdout.write(JSON.stringify({prompt: Array.from(prompt), tokens}) + "\n");
await ctx.dispose();
await model.dispose();
await llama.dispose();
