// Package rsscheck holds the acceptance test of package fit against reality: it generates models (a tiny qwen3,
// a Qwen3-0.6B-shaped qwen3 and a Qwen3.5-0.8B-shaped hybrid qwen35, random Q4_0 weights), serves each in a
// child process with the goengine (runtime/goengine, the engine behind phonellm serve), sends one request per slot
// that fills the slot's whole context (all at once), reads the child's VmRSS, and requires fit.Estimate (Engine GoEngine, the same
// context, slots and batch) to be within ±10 % of it. Both numbers are printed.
//
// It is a separate package so that testing package fit does not compile the cgo engine:
//
//	go test ./pipeline/fit/rsscheck -v
//
// The tiny model runs one slot (its RSS is mostly the process itself: a few MiB of malloc arenas that appear when
// several slots run concurrently would be 20 % of it); the two large models run two slots, so the per-slot
// accounting (KV cells, recurrent state, 24 reserved checkpoints per slot) is what they check. -short skips the
// two large models (about 3 minutes each on 2 busy cores).
package rsscheck
