// llamacpp.mjs: times upstream llama.cpp (prebuilt, via node-llama-cpp) on
// the same GGUF, threads and prompt tokens as phonellm's engine. The first
// stdin line is the request:
//   {"dir": ORACLE_DIR, "model": PATH, "threads": T, "context": N,
//    "batch": B, "flash_attention": bool, "prompt": [ids], "generate": G}
// then every further line "run" runs it once from an empty context and
// prints one line {"prompt_seconds", "generate_seconds", "tokens": [ids]}:
// the time to the first generated token (prompt processing), the time of the
// G-1 decode steps after it, and the greedy tokens (end-of-generation tokens
// ignored). The script ends at the end of stdin. Keeping the model loaded
// between runs lets the caller alternate runs with its own engine.
import {readFileSync} from "node:fs";
import {join} from "node:path";
import {pathToFileURL} from "node:url";
import {createInterface} from "node:readline";

const lines = createInterface({input: process.stdin, crlfDelay: Infinity})[Symbol.asyncIterator]();
const first = await lines.next();
if (first.done) throw new Error("no request on stdin");
const req = JSON.parse(first.value);
const lib = await import(pathToFileURL(join(req.dir, "node_modules/node-llama-cpp/dist/index.js")).href);
const llama = await lib.getLlama({gpu: false, build: "never", logLevel: lib.LlamaLogLevel.error});
const model = await llama.loadModel({modelPath: req.model});
const ctx = await model.createContext({contextSize: req.context, batchSize: req.batch, threads: req.threads, flashAttention: req.flash_attention});
const seq = ctx.getSequence();

async function run() {
	await seq.clearHistory();
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
	return {prompt_seconds: (t1 - t0) / 1e3, generate_seconds: (t2 - t1) / 1e3, tokens};
}

for (;;) {
	const l = await lines.next();
	if (l.done) break;
	if (l.value.trim() !== "run") throw new Error(`unknown command ${JSON.stringify(l.value)}`);
	process.stdout.write(JSON.stringify(await run()) + "\n");
}
await ctx.dispose();
await model.dispose();
await llama.dispose();
