// Package fleet makes the models `phonellm bench fleet` serves when it starts a local fleet itself: generated,
// converted and quantized once under $PHONELLM_HOME/bench (package benchdata's folder), nothing downloaded. It is
// apart from benchdata because it quantizes, and the quantizer's own benchmarks use benchdata.
package fleet
