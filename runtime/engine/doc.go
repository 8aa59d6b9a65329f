// Package engine is the serving side's core: the Engine interface that
// every inference backend implements (load a GGUF, tokenize, apply the GGUF's
// chat template, decode with a sampler, stream tokens, cancel on context,
// report timings), the request and response types shared by the HTTP API and
// the benchmark, and the pieces every engine reuses: the sampler chain
// (penalties, top-k, top-p, min-p, temperature, seeded draw), the stop-sequence
// and UTF-8 hold-back stream, and the Jinja chat-template renderer. A request
// may carry a Constraint (a grammar, a JSON schema, a set of choices:
// runtime/grammar implements the interface) that the sampler applies before
// its chain, and ask for per-token log-probabilities (LogprobOptions,
// LogprobSource says which distribution they describe).
//
// Implementations live in subpackages: runtime/goengine (Ollama's Go engine
// over ggml, cgo) and runtime/enginetest (a deterministic in-memory fake used to
// test everything above the engine without cgo). runtime/api serves an Engine
// over an OpenAI-compatible HTTP API and runtime/bench measures one.
package engine
