// Package fsx writes files atomically: a temporary file in the destination folder is written, synced and
// renamed over the destination, and the folder is synced, so a crash or Ctrl-C never leaves a half-written file
// under the final name. Hashes are computed while writing.
package fsx
