// Package llamaserver is a runtime.Engine over llama.cpp's llama-server:
// Start supervises a llama-server binary (free loopback port, health wait,
// SIGTERM on Close) and Connect attaches to one that is already running
// (as on Acurast phones, whose processor starts it). Requests use
// llama-server's native endpoints, so tokenization, chat templates, sampling,
// stop sequences and the prompt cache are llama.cpp's own. A request's
// constraint goes as its GBNF source ("grammar": JSON schemas, choices and
// forced tool calls are grammars by then), its log-probabilities as
// "n_probs" (the model's distribution, as llama-server reports it by
// default), and the tools and template variables of a chat to
// /apply-template, which renders them with the model's Jinja template
// (--jinja). A 400 from llama-server is the request's fault (InputError).
package llamaserver
