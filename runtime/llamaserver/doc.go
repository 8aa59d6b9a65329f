// Package llamaserver is a runtime.Engine over llama.cpp's llama-server:
// Start supervises a llama-server binary (free loopback port, health wait,
// SIGTERM on Close) and Connect attaches to one that is already running
// (as on Acurast phones, whose processor starts it). Requests use
// llama-server's native endpoints, so tokenization, chat templates, sampling,
// stop sequences and the prompt cache are llama.cpp's own.
package llamaserver
