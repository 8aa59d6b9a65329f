//go:build !linux

package fsx

// exchange is unavailable here: ReplaceDir falls back to renaming the earlier folder aside.
func exchange(tmp, path string) (bool, error) { return false, nil }
