// Package golden is the one -update flag of the test suite and the comparison every golden test uses: with
// `go test ./PKG -update` the golden files under the package's testdata/ are rewritten from what the code
// produces now (review the diff before committing); without it a difference fails the test and shows the
// first line that differs. Goldens copied from upstream tools (the llama.cpp vectors in
// pipeline/quantize/kquant/testdata/ggml-golden) are never rewritten and do not use it.
package golden
