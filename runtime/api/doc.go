// Package api serves a runtime.Engine over an OpenAI-compatible HTTP API:
// POST /v1/chat/completions and /v1/completions (JSON or Server-Sent Events
// in OpenAI's chunk format ending with [DONE]), GET /v1/models, GET /health
// (503 "loading" until an engine is set) and GET /metrics (Prometheus text).
//
// Admission: Parallel requests generate at once, QueueSize more wait, the
// rest get 429 with Retry-After. Every request has a timeout, a client that
// disconnects cancels its generation (the engine frees the slot), an API key
// is checked in constant time, and every error has OpenAI's JSON shape
// {"error": {"message", "type", "param", "code"}}. The package is pure Go:
// its tests run on runtime/enginetest's fake engine.
package api
