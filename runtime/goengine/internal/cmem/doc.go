// Package cmem gives the goengine's per-pass C allocations back to the operating system. Ollama's ggml backend
// allocates every input of a forward pass (the attention mask: ubatch × KV cells float32, 16 MiB at 8192 cells)
// as a malloc'd buffer of its own and frees it when the pass ends. glibc raises its mmap threshold to the size of
// the largest freed mapping, so from the second pass on those buffers come from the malloc arenas, which keep them
// after free: serve's resident memory then depends on how many arenas (one per thread that called in, up to
// 8 × cores) happened to keep one — 236 to 256 MiB for the same run of a tiny model. Trim after a large pass
// returns them, and serve's peak is the pass's own buffers.
package cmem
