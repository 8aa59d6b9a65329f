// Package benchdata makes the large generated inputs the benchmarks share, once per machine, under
// $PHONELLM_HOME/bench (default ~/.cache/phonellm/bench): nothing is downloaded.
package benchdata
