// llamacpp.mjs: times upstream llama.cpp (prebuilt, via node-llama-cpp) on
// the same GGUF, threads and prompt tokens as phonellm's engine. Reads one
// JSON request on stdin:
//   {"dir": ORACLE_DIR, "model": PATH, "threads": T, "context": N,
//    "batch": B, "flash_attention": bool, "prompt": [ids], "generate": G}
// and prints {"prompt_seconds", "generate_seconds", "tokens": [ids]}: the
// time to the first generated token (prompt processing) and for the G-1
// decode steps after it, greedy, end-of-generation tokens ignored.
import {readFileSync} from "node:fs";
import {join} from "node:path";
import {pathToFileURL} from "node:url";

const req = JSON.parse(readFileSync(0, "utf8"));
const lib = await import(pathToFileURL(join(req.dir, "node_modules/node-llama-cpp/dist/index.js")).href);
const llama = await lib.getLlama({gpu: false, build: "never", logLevel: lib.LlamaLogLevel.error});
const model = await llama.loadModel({modelPath: req.model});
const ctx = await model.createContext({contextSize: req.context, batchSize: req.batch, threads: req.threads, flashAttention: req.flash_attention});
const seq = ctx.getSequence();
const tokens = [];
const t0 = performance.now();
let t1 = t0;
let input = req.prompt;
// With yieldEogToken an end-of-generation token is yielded like any other;
// if the generator still ends early, go on from the last token.
while (tokens.length < req.generate) {
	let n = 0;
	for await (const t of seq.evaluate(input, {temperature: 0, yieldEogToken: true})) {
		if (tokens.length === 0) t1 = performance.now();
		tokens.push(t);
		n++;
		if (tokens.length >= req.generate) break;
	}
	if (n === 0) throw new Error("llama.cpp generated nothing");
	input = [tokens[tokens.length - 1]];
}
const t2 = performance.now();
process.stdout.write(JSON.stringify({prompt_seconds: (t1 - t0) / 1e3, generate_seconds: (t2 - t1) / 1e3, tokens}) + "\n");
await ctx.dispose();
await model.dispose();
await llama.dispose();
