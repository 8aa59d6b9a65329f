// oracle.mjs — upstream llama.cpp (prebuilt, through node-llama-cpp) as a test oracle for phonellm.
//
// Protocol: one JSON request per line on stdin; one JSON response per line on stdout, each response line
// prefixed with "@@oracle " so that stray native output on stdout can never be mistaken for a response.
//
//   request:  {"id": 1, "op": "load", "model": "/abs/tiny.gguf", ...}
//   response: @@oracle {"id": 1, "ok": true, "result": {...}}
//             @@oracle {"id": 1, "ok": false, "error": "...", "log": ["llama.cpp log lines ..."]}
//
// Operations (see internal/testkit/oracle for the Go side): version, load, unload, tokenize, detokenize, logits,
// greedy, chat, bench. Logits are returned as base64 of little-endian float32 arrays (exact; llama.cpp's
// raw logits, no sampling applied).
//
// The script never downloads or builds anything: node-llama-cpp is told build:"never", skipDownload,
// gpu:false, and only the prebuilt @node-llama-cpp/linux-x64 binary is installed (scripts/setup-oracle.sh).
// node-llama-cpp is imported from $PHONELLM_ORACLE_DIR/node_modules when that is set, else from
// ~/.cache/phonellm/oracle/node_modules (the set-up cache) or this directory's node_modules.

import {createInterface} from "node:readline";
import {existsSync, readFileSync, statSync} from "node:fs";
import {join, dirname} from "node:path";
import {fileURLToPath, pathToFileURL} from "node:url";
import {performance} from "node:perf_hooks";
import {homedir} from "node:os";

// Everything that is not a protocol line goes to stderr.
const toStderr = (...args) => process.stderr.write(args.map(String).join(" ") + "\n");
console.log = toStderr;
console.info = toStderr;
console.warn = toStderr;
console.debug = toStderr;

const here = dirname(fileURLToPath(import.meta.url));
const debug = process.env.PHONELLM_ORACLE_DEBUG === "1";

function packageRoot() {
    const candidates = [];
    if (process.env.PHONELLM_ORACLE_DIR) {
        candidates.push(join(process.env.PHONELLM_ORACLE_DIR, "node_modules"));
    } else {
        candidates.push(join(homedir(), ".cache", "phonellm", "oracle", "node_modules"));
        candidates.push(join(here, "node_modules"));
    }
    for (const dir of candidates) {
        if (existsSync(join(dir, "node-llama-cpp", "package.json")))
            return dir;
    }
    throw new Error("node-llama-cpp is not installed in " + candidates.join(" or ") +
        "; run scripts/setup-oracle.sh");
}

const nodeModules = packageRoot();
const nlcPackage = JSON.parse(readFileSync(join(nodeModules, "node-llama-cpp", "package.json"), "utf8"));
const nlc = await import(pathToFileURL(join(nodeModules, "node-llama-cpp", nlcPackage.exports["."].import)).href);
const {getLlama, LlamaLogLevel} = nlc;

// Keep the last llama.cpp log lines so a failed load can say why llama.cpp rejected the file.
const logRing = [];
const maxLog = 200;
function logger(level, message) {
    const line = `[${level}] ${String(message).trimEnd()}`;
    logRing.push(line);
    if (logRing.length > maxLog)
        logRing.shift();
    if (debug)
        process.stderr.write(line + "\n");
}

// One thread by default: results do not depend on it, and ggml's spinning thread pool is pathologically slow
// when the cores are shared with other work (2 threads: 7 tok/s vs 1,800 tok/s on a loaded 2-core box).
const defaultThreads = Number(process.env.PHONELLM_ORACLE_THREADS || 1);

const llama = await getLlama({
    gpu: false,
    build: "never",
    usePrebuiltBinaries: true,
    skipDownload: true,
    progressLogs: false,
    existingPrebuiltBinaryMustMatchBuildOptions: false,
    logLevel: debug ? LlamaLogLevel.debug : LlamaLogLevel.warn,
    logger,
    maxThreads: 0, // no cap: each context uses exactly the threads it asks for
});

// models: path -> {model, contexts: Map(key -> context)}
const models = new Map();

function requireString(req, field) {
    const v = req[field];
    if (typeof v !== "string" || v === "")
        throw new Error(`request field "${field}" must be a non-empty string`);
    return v;
}

function requireTokens(req, field, nVocab) {
    const v = req[field];
    if (!Array.isArray(v) || v.length === 0)
        throw new Error(`request field "${field}" must be a non-empty array of token ids`);
    for (const [i, t] of v.entries()) {
        if (!Number.isInteger(t) || t < 0 || t >= nVocab)
            throw new Error(`${field}[${i}] = ${t} is not a token id in [0, ${nVocab})`);
    }
    return v;
}

function intOption(req, field, def, min, max) {
    const v = req[field] ?? def;
    if (!Number.isInteger(v) || v < min || v > max)
        throw new Error(`request field "${field}" = ${v} must be an integer in [${min}, ${max}]`);
    return v;
}

async function disposeModel(path) {
    const entry = models.get(path);
    if (entry == null)
        return false;
    for (const c of entry.contexts.values())
        await c.ctx.dispose();
    await entry.model.dispose();
    models.delete(path);
    return true;
}

// getModel loads a model once per path; a file that changed on disk (size or mtime) is loaded again.
async function getModel(req) {
    const path = requireString(req, "model");
    let st = null;
    try {
        st = statSync(path);
    } catch {
        // loadModel reports the missing file below
    }
    const version = st == null ? "" : `${st.size}/${st.mtimeMs}`;
    let entry = models.get(path);
    if (entry != null && entry.version !== version) {
        await disposeModel(path);
        entry = null;
    }
    if (entry == null) {
        const start = performance.now();
        logRing.length = 0;
        let model;
        try {
            model = await llama.loadModel({modelPath: path, gpuLayers: 0, useMmap: true});
        } catch (err) {
            // llama.cpp's own reason, e.g. "error loading model vocabulary: cannot find tokenizer merges".
            // Native log lines reach JS through the event loop, possibly after the rejection: wait for them.
            const findReason = () => logRing.find((l) => l.includes("error loading model")) ??
                logRing.find((l) => l.startsWith("[error]"));
            for (let waited = 0; st != null && findReason() == null && waited < 500; waited += 10)
                await new Promise((resolve) => setTimeout(resolve, 10));
            const log = logRing.filter((l) => !l.startsWith("[debug]"));
            const reason = findReason();
            const e = new Error(reason
                ? `llama.cpp rejected ${path}: ${err?.message ?? err}: ${reason.replace(/^\[error\] /, "")}`
                : `cannot load ${path}: ${err?.message ?? err}`);
            e.log = log;
            throw e;
        }
        entry = {model, version, contexts: new Map(), loadMs: performance.now() - start, nVocab: countVocab(model)};
        models.set(path, entry);
    }
    return entry;
}

// countVocab returns the vocabulary size: the token list length, or <arch>.vocab_size for a file without
// a tokenizer. Logits requests check it against the number of logits llama.cpp returns.
function countVocab(model) {
    const md = model.fileInfo.metadata ?? {};
    const toks = md.tokenizer?.ggml?.tokens;
    if (Array.isArray(toks))
        return toks.length;
    const arch = md.general?.architecture;
    return Number(md[arch]?.vocab_size ?? 0);
}

async function getSequence(entry, req) {
    const contextSize = intOption(req, "contextSize", 512, 16, 1 << 20);
    const batchSize = intOption(req, "batchSize", Math.min(512, contextSize), 1, contextSize);
    const threads = intOption(req, "threads", defaultThreads, 1, 256);
    const flashAttention = req.flashAttention === true;
    // KV cache element type: llama.cpp's default F16, or F32 for exactness checks against an f32 reference.
    const kvType = req.kvCacheType === "F32" ? "F32" : "F16";
    const key = `${contextSize}/${batchSize}/${threads}/${flashAttention}/${kvType}`;
    let cs = entry.contexts.get(key);
    if (cs == null) {
        for (const old of entry.contexts.values())
            await old.ctx.dispose();
        entry.contexts.clear();
        const ctx = await entry.model.createContext({
            contextSize,
            batchSize,
            threads: {ideal: threads, min: threads},
            flashAttention,
            sequences: 1,
            experimentalKvCacheKeyType: kvType,
            experimentalKvCacheValueType: kvType,
        });
        cs = {ctx, seq: ctx.getSequence()};
        entry.contexts.set(key, cs);
    }
    return cs;
}

function flattenMetadata(obj, prefix, out) {
    for (const [k, v] of Object.entries(obj ?? {})) {
        const key = prefix === "" ? k : `${prefix}.${k}`;
        if (Array.isArray(v)) {
            out[key] = v.length <= 16 ? v.map((x) => (typeof x === "bigint" ? Number(x) : x)) : {arrayLength: v.length};
        } else if (v !== null && typeof v === "object") {
            flattenMetadata(v, key, out);
        } else {
            out[key] = typeof v === "bigint" ? Number(v) : v;
        }
    }
    return out;
}

function encodeFloats(values) {
    const f = Float32Array.from(values);
    for (let i = 0; i < f.length; i++) {
        if (!Number.isFinite(f[i]))
            throw new Error(`llama.cpp returned a non-finite logit ${f[i]} at token ${i}`);
    }
    return Buffer.from(f.buffer, f.byteOffset, f.byteLength).toString("base64");
}

function denseLogits(map, nVocab) {
    if (map == null)
        throw new Error("llama.cpp returned no logits");
    if (map.size !== nVocab)
        throw new Error(`llama.cpp returned ${map.size} logits for a vocabulary of ${nVocab}`);
    const out = new Float32Array(nVocab);
    out.fill(Number.NaN);
    for (const [tok, v] of map) {
        if (tok < 0 || tok >= nVocab)
            throw new Error(`logit for token ${tok} is outside the vocabulary of ${nVocab}`);
        out[tok] = v;
    }
    return out;
}

async function evalLogits(entry, req) {
    const tokens = requireTokens(req, "tokens", entry.nVocab);
    const all = req.all === true;
    const {ctx, seq} = await getSequence(entry, req);
    if (tokens.length > ctx.contextSize)
        throw new Error(`${tokens.length} tokens do not fit the context of ${ctx.contextSize}`);
    await seq.clearHistory();
    const input = tokens.map((t, i) => (all || i === tokens.length - 1)
        ? [t, {generateNext: {logits: true, options: {temperature: 0}}}]
        : t);
    const out = await seq.controlledEvaluate(input);
    const rows = [];
    for (let i = 0; i < tokens.length; i++) {
        if (!(all || i === tokens.length - 1))
            continue;
        rows.push(encodeFloats(denseLogits(out[i]?.next?.logits, entry.nVocab)));
    }
    await seq.clearHistory();
    return {nVocab: entry.nVocab, positions: all ? tokens.length : 1, logits: rows};
}

// Greedy decoding through llama.cpp's own greedy sampler (temperature 0, no penalties, no top-k/p).
async function greedy(entry, tokens, n, stopAtEog, req) {
    const {ctx, seq} = await getSequence(entry, req);
    if (tokens.length + n > ctx.contextSize)
        throw new Error(`${tokens.length} prompt + ${n} generated tokens do not fit the context of ${ctx.contextSize}`);
    await seq.clearHistory();
    const gen = {generateNext: {token: true, options: {temperature: 0}}};
    const result = [];
    let next = [...tokens.slice(0, -1), [tokens[tokens.length - 1], gen]];
    const t0 = performance.now();
    let promptMs = 0;
    let eog = false;
    for (let step = 0; step < n; step++) {
        const out = await seq.controlledEvaluate(next);
        if (step === 0)
            promptMs = performance.now() - t0;
        const tok = out[next.length - 1]?.next?.token;
        if (tok == null)
            throw new Error(`llama.cpp sampled no token at step ${step}`);
        result.push(tok);
        if (stopAtEog && entry.model.isEogToken(tok)) {
            eog = true;
            break;
        }
        next = [[tok, gen]];
    }
    const totalMs = performance.now() - t0;
    await seq.clearHistory();
    return {tokens: result, promptMs, totalMs, eog};
}

function renderChat(entry, req) {
    const template = typeof req.template === "string" && req.template !== ""
        ? req.template
        : entry.model.fileInfo.metadata?.tokenizer?.chat_template;
    if (typeof template !== "string" || template === "")
        throw new Error("the model has no tokenizer.chat_template and the request gave no template");
    const messages = req.messages;
    if (!Array.isArray(messages) || messages.length === 0)
        throw new Error(`request field "messages" must be a non-empty array of {role, content}`);
    for (const [i, m] of messages.entries()) {
        if (typeof m?.role !== "string" || typeof m?.content !== "string")
            throw new Error(`messages[${i}] must have string role and content`);
    }
    // llama.cpp's own Jinja engine (common/jinja), the one llama-server uses with --jinja.
    const renderer = new llama._bindings.AddonJinjaRenderer(template);
    const vars = {
        messages: messages.map((m) => ({role: m.role, content: m.content})),
        add_generation_prompt: req.addGenerationPrompt !== false,
        bos_token: entry.model.tokens.bosString ?? "",
        eos_token: entry.model.tokens.eosString ?? "",
    };
    if (typeof req.enableThinking === "boolean")
        vars.enable_thinking = req.enableThinking;
    return renderer.render(vars);
}

// Sampling under a GBNF grammar with llama.cpp's own grammar parser and sampler (what llama-server's
// "grammar" field runs). A grammar llama.cpp cannot parse fails the request with its reason.
async function grammarSamples(entry, req) {
    const tokens = requireTokens(req, "tokens", entry.nVocab);
    const n = intOption(req, "n", 64, 1, 1 << 12);
    const count = intOption(req, "samples", 1, 1, 1000);
    const seed = intOption(req, "seed", 0, 0, 1 << 30);
    const temperature = typeof req.temperature === "number" ? req.temperature : 1;
    const grammar = await llama.createGrammar({grammar: requireString(req, "grammar")});
    const {seq} = await getSequence(entry, req);
    const samples = [];
    for (let s = 0; s < count; s++) {
        await seq.clearHistory();
        const state = new nlc.LlamaGrammarEvaluationState({model: entry.model, grammar});
        const gen = [];
        let eog = false;
        for await (const tok of seq.evaluate(tokens, {temperature, seed: seed + s, grammarEvaluationState: state, yieldEogToken: true})) {
            if (entry.model.isEogToken(tok)) {
                eog = true;
                break;
            }
            gen.push(tok);
            if (gen.length >= n)
                break;
        }
        samples.push({tokens: gen, eog});
    }
    await seq.clearHistory();
    return {samples};
}

const handlers = {
    async grammar(req) {
        return grammarSamples(await getModel(req), req);
    },
    async version() {
        return {
            nodeLlamaCpp: nlcPackage.version,
            llamaCppRelease: llama.llamaCppRelease,
            buildType: llama.buildType,
            gpu: llama.gpu,
            systemInfo: llama.systemInfo,
            cpuMathCores: llama.cpuMathCores,
        };
    },
    async load(req) {
        const entry = await getModel(req);
        const m = entry.model;
        const md = m.fileInfo.metadata ?? {};
        return {
            path: req.model,
            loadMs: entry.loadMs,
            architecture: md.general?.architecture ?? null,
            description: m.typeDescription,
            trainContextSize: m.trainContextSize,
            embeddingLength: m.embeddingVectorSize,
            vocabSize: entry.nVocab,
            vocabularyType: m.vocabularyType,
            sizeBytes: m.size,
            bos: m.tokens.bos,
            eos: m.tokens.eos,
            eot: m.tokens.eot,
            nl: m.tokens.nl,
            addBos: m.tokens.shouldPrependBosToken,
            chatTemplate: md.tokenizer?.chat_template ?? null,
            tensorCount: m.fileInfo.totalTensorCount ?? m.fileInfo.tensorCount ?? null,
            metadata: flattenMetadata(md, "", {}),
            warnings: m.getWarnings(),
        };
    },
    async unload(req) {
        return {unloaded: await disposeModel(requireString(req, "model"))};
    },
    async tokenize(req) {
        const entry = await getModel(req);
        if (typeof req.text !== "string")
            throw new Error(`request field "text" must be a string`);
        // common_tokenize(vocab, text, add_special=false, parse_special=special)
        return {tokens: entry.model.tokenize(req.text, req.special === true)};
    },
    async detokenize(req) {
        const entry = await getModel(req);
        const tokens = requireTokens(req, "tokens", entry.nVocab);
        return {text: entry.model.detokenize(tokens, req.special === true)};
    },
    async logits(req) {
        return evalLogits(await getModel(req), req);
    },
    async greedy(req) {
        const entry = await getModel(req);
        const tokens = requireTokens(req, "tokens", entry.nVocab);
        const n = intOption(req, "n", 16, 1, 1 << 16);
        const r = await greedy(entry, tokens, n, req.stopAtEog === true, req);
        return {tokens: r.tokens, eog: r.eog};
    },
    async chat(req) {
        const entry = await getModel(req);
        const prompt = renderChat(entry, req);
        const promptTokens = entry.model.tokenize(prompt, true);
        const n = intOption(req, "n", 0, 0, 1 << 16);
        const res = {prompt, promptTokens};
        if (n > 0) {
            const r = await greedy(entry, promptTokens, n, req.stopAtEog !== false, req);
            res.completionTokens = r.tokens;
            res.completion = entry.model.detokenize(r.tokens.filter((t) => !entry.model.isEogToken(t)), false);
        }
        return res;
    },
    async bench(req) {
        const entry = await getModel(req);
        const promptLen = intOption(req, "promptTokens", 128, 1, 1 << 20);
        const genLen = intOption(req, "genTokens", 32, 1, 1 << 16);
        // Deterministic non-special prompt: cycle through byte-ish ids, like llama-bench's random ids.
        const tokens = [];
        for (let i = 0; tokens.length < promptLen; i++) {
            const t = (i * 7919 + 13) % entry.nVocab;
            if (!entry.model.isSpecialToken(t))
                tokens.push(t);
        }
        const r = await greedy(entry, tokens, genLen, false, req);
        const genMs = r.totalMs - r.promptMs;
        return {
            promptTokens: promptLen,
            genTokens: genLen,
            threads: intOption(req, "threads", defaultThreads, 1, 256),
            promptMs: r.promptMs,
            genMs,
            // The first controlledEvaluate processes the prompt and samples token 1; the rest are n-1 decode steps.
            promptTokPerSec: promptLen / (r.promptMs / 1000),
            genTokPerSec: genLen > 1 ? (genLen - 1) / (genMs / 1000) : null,
        };
    },
};

function reply(obj) {
    process.stdout.write("@@oracle " + JSON.stringify(obj) + "\n");
}

async function handle(line) {
    let req;
    try {
        req = JSON.parse(line);
    } catch (err) {
        reply({id: null, ok: false, error: `bad request JSON: ${err.message}`});
        return;
    }
    const id = req?.id ?? null;
    const h = handlers[req?.op];
    if (h == null) {
        reply({id, ok: false, error: `unknown op ${JSON.stringify(req?.op)}`});
        return;
    }
    try {
        reply({id, ok: true, result: await h(req)});
    } catch (err) {
        const res = {id, ok: false, error: String(err?.message ?? err)};
        if (Array.isArray(err?.log))
            res.log = err.log;
        reply(res);
    }
}

reply({id: 0, ok: true, result: {ready: true, nodeLlamaCpp: nlcPackage.version}});

// Requests are handled strictly one after another, in order.
const rl = createInterface({input: process.stdin, crlfDelay: Infinity});
let chain = Promise.resolve();
rl.on("line", (line) => {
    if (line.trim() === "")
        return;
    chain = chain.then(() => handle(line));
});
rl.on("close", () => {
    chain.then(async () => {
        for (const entry of models.values()) {
            for (const c of entry.contexts.values())
                await c.ctx.dispose();
            await entry.model.dispose();
        }
        await llama.dispose();
        process.exit(0);
    });
});
