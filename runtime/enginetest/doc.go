// Package enginetest provides Fake, a deterministic in-memory
// runtime.Engine for testing the HTTP API and the benchmark without cgo, and
// Run, the conformance suite every runtime.Engine implementation (the fake
// and runtime/goengine alike) must pass.
package enginetest
