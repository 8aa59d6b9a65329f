// Package rsscheck holds the acceptance test of package fit against reality: it generates models, serves each
// in a child process with the goengine (runtime/goengine, the engine behind phonellm serve), sends one request
// per slot, reads the child's peak RSS (VmHWM), and requires fit.Estimate (Engine GoEngine, the same context,
// slots, batch and flash attention) to be within ±10 % of it. Both numbers and the estimate's parts are logged.
//
// It is a separate package so that testing package fit does not compile the cgo engine:
//
//	go test ./pipeline/fit/rsscheck -v
//
// What grows with the context (KV cache, the non-flash scores and their F16 copy in ggml's work buffer, the
// per-pass attention masks) is measured with the context filled, at ctx 1024, 4096 and 8192, flash attention
// on and off, on models built to make that cheap: a 131072-token F32 embedding holds most of the memory, as the
// weights do in a real model, around one light attention layer (and a Qwen3.5 hybrid with three delta-net
// layers), so the six fills cost a few CPU-seconds. A Qwen3.5-0.8B-shaped model with two slots checks weights,
// recurrent state and the 24 checkpoints per slot at realistic sizes with short requests (-short skips it).
// Each case runs in a process of its own: peak RSS is per process, and the Go and C heaps keep memory after an
// engine closes. The child samples its RSS and Go memory every 2 ms without allocating and logs the Go share at
// the peak; after a full context its Go heap must hold no more than the estimate's overhead (serve returns each
// prompt pass's masks), so the result does not depend on when the collector runs, on the core count or on
// GOMAXPROCS.
package rsscheck
