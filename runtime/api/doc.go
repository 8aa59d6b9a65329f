// Package api serves a runtime.Engine over an OpenAI-compatible HTTP API:
// POST /v1/chat/completions and /v1/completions (JSON or Server-Sent Events
// in OpenAI's chunk format ending with [DONE]), GET /v1/models (id, object,
// created and owned_by: nothing about the machine), GET /health (503
// "loading" until an engine is set) and GET /metrics (Prometheus text).
//
// Beyond plain text, a request may constrain the answer (response_format
// json_object or json_schema, llama-server's grammar and json_schema fields,
// and phonellm's choices extension: constraint.go), ask for the
// log-probabilities of the answer's tokens (logprobs, top_logprobs: the
// model's own distribution, before penalties and constraints, as OpenAI and
// llama-server report it; logprobs.go) and offer tools (tools, tool_choice,
// parallel_tool_calls): the definitions go through the model's chat
// template, the <tool_call> blocks of the answer (Qwen's JSON form or
// Qwen3.5's XML form) come back as tool_calls, streamed as deltas, and
// tool_choice "required" or a named function constrains the answer to calls
// whose arguments satisfy the tools' schemas (tools.go, toolparse.go). Bad
// schemas, grammars, choices and tool choices are 400s naming the field.
//
// Admission: Parallel requests generate at once, QueueSize more wait, the
// rest get 429 with Retry-After. Every error has OpenAI's JSON shape
// {"error": {"message", "type", "param", "code"}}, and an API key is checked
// in constant time.
//
// Requests come from strangers, so everything one can make the server do is
// bounded (Limits, house style §18): a request arriving when slots and queue
// are full is refused before its body is read; the body is read within
// MaxBodyBytes and a budget shared by all requests; the messages (count,
// bytes of each and in all) and stop sequences are checked before any
// template or tokenizer runs; decoding, templating and tokenizing run on one
// of PrepWorkers under the request's timeout, which counts from arrival, and
// stop when the client leaves. A template that exceeds its limits is a 500,
// text that cannot fit a 400 naming the field. Logits that are NaN or
// infinite end that request with a 500 ("model produced non-finite logits")
// and free its slot. Serve adds the connection-level limits of
// internal/httpx: header, body, idle and per-write timeouts, a header size
// cap and a cap on open connections.
//
// Prompt reuse: a chat request whose conversation starts with system (or developer) messages tells the engine
// how many of its tokens are that rendered system part (engine.Request.CacheBoundary, boundary.go): the prefix
// the next requests of the same task share, where an engine that resumes only at checkpoints (Qwen3.5) keeps one
// and which a slot is not given away for. Warm evaluates a deployment's shared prefixes before the server is
// made ready (phonellm serve --warm). Answers report the reused tokens as
// usage.prompt_tokens_details.cached_tokens (and llama-server's timings.cache_n), which gateways read.
//
// The package is pure Go: its tests run on runtime/enginetest's fake engine,
// including the abuse test of internal/testkit/abuse.
package api
