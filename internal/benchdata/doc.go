// Package benchdata makes the large generated inputs the benchmarks share, once per machine, under
// $PHONELLM_HOME/bench (default ~/.cache/phonellm/bench): nothing is downloaded. It is production code:
// `phonellm bench quantize` uses it (as do the Go benchmarks), generating its input with internal/tinymodel.
package benchdata
