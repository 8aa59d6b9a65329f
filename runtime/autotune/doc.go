// Package autotune picks the thread count and batch size `phonellm serve
// --autotune` runs a model with. Tune loads the model once per candidate
// setting (the caller injects the loader), times a short prompt and decode,
// scores each setting by the time it would take for the fraud-review request
// shape (7,000 prompt tokens, 8 generated, extrapolated from the measured
// rates), logs the table and keeps the fastest. The result is cached as JSON
// per model and machine (model fingerprint, CPU model name, CPU count,
// phonellm version, candidates and measurement shape), so later start-ups on
// the same machine skip the measurement.
package autotune
