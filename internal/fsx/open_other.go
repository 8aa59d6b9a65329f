//go:build !unix

package fsx

import "os"

func openNonblock(path string) (*os.File, error) { return os.Open(path) }
