// Package autotune picks the thread count and batch size `phonellm serve
// --autotune` runs a model with. Tune loads the model once per candidate
// setting (the caller injects the loader), times a short prompt and decode,
// scores each setting by the time it would take for the fraud-review request
// shape (7,000 prompt tokens, 8 generated, extrapolated from the measured
// rates), logs the table and keeps the fastest. The result is cached as JSON
// per model and machine (model fingerprint, CPU model name, CPU count,
// phonellm version, candidates and measurement shape), so later start-ups on
// the same machine skip the measurement.
//
// The first candidate is the calibration: every later one runs under a
// deadline of Options.Slower (4) times the fastest warm-up or request seen so
// far, and one that passes it is abandoned — its context cancelled, so the
// engine stops at the end of its forward pass — instead of being waited for.
// An oversubscribed setting (more threads than free cores) spins in ggml's
// barriers and can take minutes (40.9 s against 0.06 s for one thread on a
// busy 2-core machine); it cannot win, so its exact time does not matter.
//
// Flash attention is not a tuned setting: the loader decides it. phonellm
// serve leaves it off unless asked, because the built-in engine's CPU flash
// attention is slower than its plain attention (a 2,000-token prompt on one
// thread: 449–456 tok/s plain, 222–239 tok/s with it), and fit's goengine
// estimate counts it the same way (pipeline/fit GoEngineFlashAttention).
package autotune
