// Package fsx writes files atomically: a temporary file in the destination folder is written, synced and
// renamed over the destination, and the folder is synced, so a crash or Ctrl-C never leaves a half-written file
// under the final name. Hashes are computed while writing (on another goroutine for large writes), and
// HashFile/HashFileContext hash an existing file. DirectWriter writes a large file with direct I/O (no page
// cache), hashing it on the way.
//
// It is the one home of these helpers for every tree (pipeline, runtime, cmd, internal): the safetensors
// writer, the quantized GGUF, the generated tiny models, the workspace state, the Hub cache and upload journal, the auto-tune
// cache and the deployment records all write through it.
package fsx
