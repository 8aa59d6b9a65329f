// Package phone holds the files that run on a phone, embedded into the phonellm binary: the Acurast Node.js
// entrypoint (index.js), which the runtime bundle (pipeline/deploy) zips together with its config.json.
//
// index.js starts the Acurast tunnel, downloads the model into the job's storage with resume and a sha256
// check, starts the processor's llama.cpp server (_STD_.llama.server.start) with each candidate thread/batch
// setting and keeps the fastest, proxies /v1/* with Bearer API-key auth (constant-time compare), answers
// /health and /status, and restarts llama-server when it fails. It needs only Node (>= 18) built-ins.
// Tests run it under plain Node with the _STD_ stand-in in testdata/js/acurast.
package phone
