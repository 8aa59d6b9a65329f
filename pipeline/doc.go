// Package pipeline holds the vocabulary shared by the phonellm stages (merge, convert, quantize, fit, publish,
// deploy): checkpoint tensor sources, artifacts with their hashes, and the progress Reporter.
//
// Every stage is a package with Run(ctx, Options, Reporter) (Result, error); Options have usable zero values and
// a Validate method, and a Result lists the artifacts it wrote with size and sha256.
package pipeline
