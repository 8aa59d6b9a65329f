package fsx

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Temporary names. An output path dir/base is written through a temporary sibling that names the process
// writing it: .<base>.tmp-<pid>-<random> (a file or folder being written) and .<base>.old-<pid>-<random> (an
// earlier output moved aside by [ReplaceDir]). The writer also holds an exclusive lock (flock) on it while it
// writes. A run killed with SIGKILL leaves its temporary behind; the next run writing the same path removes
// it ([RemoveStale]) once it is sure no live process owns it.
const (
	kindTmp = "tmp"
	kindOld = "old"
)

func tempPrefix(base, kind string) string { return "." + base + "." + kind + "-" }

func tempPattern(base, kind string) string {
	return tempPrefix(base, kind) + strconv.Itoa(os.Getpid()) + "-*"
}

// splitOutput splits an output path into its folder (never empty) and base name.
func splitOutput(path string) (dir, base string) {
	dir, base = filepath.Split(filepath.Clean(path))
	if dir == "" {
		dir = "."
	}
	return dir, base
}

// createTemp creates the temporary file for path, locked, after removing stale ones.
func createTemp(path string) (*os.File, error) {
	dir, base := splitOutput(path)
	RemoveStale(path) // best effort: a folder we cannot list is reported by CreateTemp below
	f, err := os.CreateTemp(dir, tempPattern(base, kindTmp))
	if err != nil {
		return nil, err
	}
	lockExclusive(f) // best effort: where locks are unsupported the pid check alone protects it
	return f, nil
}

// MkdirTemp creates the temporary folder an output folder path is built in (.<base>.tmp-<pid>-<random>, next to
// path), after removing stale temporaries of path left by killed runs. The folder is locked until release is
// called; call release after the folder was installed ([ReplaceDir]) or removed.
func MkdirTemp(path string) (tmp string, release func(), err error) {
	dir, base := splitOutput(path)
	RemoveStale(path)
	tmp, err = os.MkdirTemp(dir, tempPattern(base, kindTmp))
	if err != nil {
		return "", nil, err
	}
	release = func() {}
	if d, err := os.Open(tmp); err == nil {
		if lockExclusive(d) {
			release = func() { d.Close() }
		} else {
			d.Close()
		}
	}
	return tmp, release, nil
}

// RemoveStale removes the temporary files and folders that earlier runs writing path left behind when they were
// killed: names of the form .<base>.tmp-<pid>-* and .<base>.old-<pid>-* next to path whose process no longer
// exists and which nobody holds locked. Temporaries of live processes (this one included), names of any other
// form and symbolic links are left alone. It returns the paths it removed; errors stop nothing (the first is
// returned with whatever was removed).
func RemoveStale(path string) ([]string, error) {
	dir, base := splitOutput(path)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var removed []string
	var first error
	for _, e := range ents {
		pid, ok := stalePID(e.Name(), base)
		if !ok || pid == os.Getpid() || processAlive(pid) {
			continue
		}
		p := filepath.Join(dir, e.Name())
		st, err := os.Lstat(p)
		if err != nil || !(st.Mode().IsRegular() || st.IsDir()) {
			continue
		}
		if !unlocked(p) {
			continue
		}
		if err := os.RemoveAll(p); err != nil {
			if first == nil {
				first = fmt.Errorf("remove stale %s: %w", p, err)
			}
			continue
		}
		removed = append(removed, p)
	}
	if len(removed) > 0 {
		SyncDir(dir)
	}
	return removed, first
}

// stalePID parses the owner of a temporary name of base, or reports false for any other name.
func stalePID(name, base string) (int, bool) {
	for _, kind := range []string{kindTmp, kindOld} {
		rest, ok := strings.CutPrefix(name, tempPrefix(base, kind))
		if !ok {
			continue
		}
		digits, random, ok := strings.Cut(rest, "-")
		if !ok || digits == "" || random == "" || len(digits) > 10 {
			return 0, false
		}
		for _, c := range digits {
			if c < '0' || c > '9' {
				return 0, false
			}
		}
		pid, err := strconv.Atoi(digits)
		if err != nil || pid <= 0 {
			return 0, false
		}
		return pid, true
	}
	return 0, false
}

// unlocked reports whether no process holds the lock of p (a temporary file or folder).
func unlocked(p string) bool {
	f, err := openNonblock(p)
	if err != nil {
		return !errors.Is(err, fs.ErrPermission)
	}
	defer f.Close()
	return tryLock(f)
}

// ReplaceDir installs the finished folder tmp (created by [MkdirTemp]) at path. When nothing is at path it is a
// rename. When path exists it is replaced without a moment in which nothing is at path: on Linux the two are
// swapped atomically (renameat2 with RENAME_EXCHANGE) and the earlier folder, now at tmp, is removed. Where
// the exchange is not available (other systems, file systems without it) the earlier folder is renamed aside
// (.<base>.old-<pid>-*) first, then tmp renamed in, then the old one removed; that leaves a short window. The
// parent folder is synced either way.
func ReplaceDir(tmp, path string) error {
	dir, base := splitOutput(path)
	if _, err := os.Lstat(path); errors.Is(err, fs.ErrNotExist) {
		if err := os.Rename(tmp, path); err != nil {
			return err
		}
		return SyncDir(dir)
	}
	if exchanged, err := exchange(tmp, path); err != nil {
		return err
	} else if exchanged {
		if err := SyncDir(dir); err != nil {
			return err
		}
		os.RemoveAll(tmp) // the earlier output; a failure leaves a stale temporary for the next run
		return nil
	}
	old, err := os.MkdirTemp(dir, tempPattern(base, kindOld))
	if err != nil {
		return err
	}
	if err := os.Remove(old); err != nil {
		return err
	}
	if err := os.Rename(path, old); err != nil {
		return fmt.Errorf("move the earlier %s aside: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Rename(old, path)
		return err
	}
	if err := SyncDir(dir); err != nil {
		return err
	}
	os.RemoveAll(old)
	return nil
}
