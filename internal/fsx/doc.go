// Package fsx writes files atomically: a temporary file in the destination folder is written, synced and
// renamed over the destination, and the folder is synced, so a crash or Ctrl-C never leaves a half-written file
// under the final name. Hashes are computed while writing (on another goroutine for large writes), and
// HashFile/HashFileContext hash an existing file. DirectWriter writes a large file with direct I/O (no page
// cache), hashing it on the way.
//
// It is the one home of these helpers for every tree (pipeline, runtime, cmd, internal): the safetensors
// writer, the quantized GGUF, the generated tiny models, the workspace state, the Hub cache and upload journal, the auto-tune
// cache and the deployment records all write through it.
//
// Temporaries name the process writing them and are locked while written, so a run killed with SIGKILL does not
// leave them behind for good: the next write of the same output removes them ([RemoveStale]). Output folders
// are built with [MkdirTemp] and installed with [ReplaceDir], which swaps an earlier folder out without a moment
// in which nothing is at the final name.
//
// Input files from strangers are opened with [Open] and [ReadFile], which refuse FIFOs, devices, sockets and
// folders instead of blocking on them or reading without end.
package fsx
