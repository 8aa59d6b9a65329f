// Package pipeline holds the vocabulary shared by the phonellm stages (merge, convert, quantize, fit, publish,
// deploy): checkpoint tensor sources ([TensorSource], [TensorInfo] — where a row is the last dimension, the
// one meaning of "row" in phonellm — and [DType]), artifacts with their hashes, the progress [Reporter], and
// the error classes every stage error reports itself as (errors.go: input, remote, failed check), from which
// cmd/phonellm derives exit codes.
//
// Every stage is a package with Run(ctx, Options, Reporter) (Result, error); Options have usable zero values and
// a Validate method, and a Result lists the artifacts it wrote with size and sha256. docs/architecture.md has
// the stage graph and the data paths.
package pipeline
