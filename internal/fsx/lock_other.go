//go:build !unix

package fsx

import "os"

func lockExclusive(*os.File) bool { return false }

func tryLock(*os.File) bool { return true }

// processAlive cannot tell on this system; temporaries are then never removed as stale.
func processAlive(int) bool { return true }
