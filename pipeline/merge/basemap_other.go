//go:build !unix

package merge

import "errors"

func mmapFile(path string) ([]byte, error) { return nil, errors.New("merge: no mmap here") }

func munmap(b []byte) {}

func dropPages(data []byte, off, end int64) {}
