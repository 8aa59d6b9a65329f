// Package memstat reads the process's peak resident memory for benchmarks (Linux /proc; 0 elsewhere).
package memstat
