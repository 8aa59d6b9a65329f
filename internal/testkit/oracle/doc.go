// Package oracle drives upstream llama.cpp as a test oracle: a long-lived Node.js process running
// testdata/js/oracle/oracle.mjs on top of the prebuilt llama.cpp (release v0.5.0, CPU only) shipped in
// the npm packages node-llama-cpp@3.22.1 and @node-llama-cpp/linux-x64@3.22.1, pinned in
// testdata/js/oracle/package.json and installed by scripts/setup-oracle.sh into
// $PHONELLM_ORACLE_DIR (default ~/.cache/phonellm/oracle). Nothing is downloaded or built at test time.
//
// Tests use it to prove that the GGUF files phonellm writes load and decode in llama.cpp, and to compare
// tokenizers, logits, greedy decodes and chat-template rendering with it:
//
//	o := oracle.Start(t) // or oracle.Shared(t) to share one process per test binary
//	info, err := o.Load(path)                // *oracle.Error carries llama.cpp's reason on rejection
//	ids, err := o.Tokenize(path, text, true) // special tokens parsed
//	logits, err := o.Logits(path, ids)       // raw next-token logits after the last token, full vocabulary
//	rows, err := o.LogitsAll(path, ids)      // ... after every position, from one batch
//	next, err := o.Greedy(path, ids, 16)     // llama.cpp's greedy sampler, no penalties
//	chat, err := o.Chat(path, msgs, oracle.ChatOptions{N: 8})
//
// Start and Shared skip the test when the oracle is not installed, unless PHONELLM_REQUIRE_ORACLE=1 (set by
// scripts/test.sh, so in CI), in which case a missing oracle fails the test: Unavailable is that one rule,
// and every test that needs an npm oracle (RequireModule) goes through it. A process start costs about 0.8 s (node-llama-cpp
// imports and tests its prebuilt binary in a child process); loading a small model about 20 ms.
//
// Results do not depend on the thread count (checked bit for bit); the default is one thread, because
// ggml's spinning thread pool is very slow when the two cores are shared with other work.
package oracle
