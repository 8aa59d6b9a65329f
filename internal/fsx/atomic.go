package fsx

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"path/filepath"
	"syscall"
)

// File is an output file being written atomically. Write to it (it hashes what passes through), then Commit to
// publish it under its final name, or Abort to remove it. Abort after Commit is a no-op, so `defer f.Abort()`
// is the usual pattern.
type File struct {
	f    *os.File // not embedded: promoted ReadFrom/WriteString would bypass the hash
	path string
	hash hash.Hash
	n    int64
	done bool
}

// Create starts an atomic write of path. The temporary file lives in the same folder (so rename is atomic) and
// is named ".<base>.tmp-<pid>-*"; temporaries of path that killed runs left behind are removed first (see
// [RemoveStale]).
func Create(path string) (*File, error) {
	tmp, err := createTemp(path)
	if err != nil {
		return nil, fmt.Errorf("create %s: %w", path, err)
	}
	return &File{f: tmp, path: path, hash: sha256.New()}, nil
}

// TempName is the temporary file's path (where bytes go until Commit).
func (f *File) TempName() string { return f.f.Name() }

// SyscallConn gives access to the temporary file's descriptor (to switch on direct I/O, for example). Bytes
// written around the File's own methods are not hashed.
func (f *File) SyscallConn() (syscall.RawConn, error) { return f.f.SyscallConn() }

// Truncate sets the size of the temporary file (for callers that write bodies with WriteAt).
func (f *File) Truncate(size int64) error { return f.f.Truncate(size) }

// Path is the final path.
func (f *File) Path() string { return f.path }

// asyncHashBytes is the write size from which the sha256 of a write runs on another goroutine while the bytes
// go to the file (both only read p), so a large write costs max(hash, write) instead of their sum.
const asyncHashBytes = 256 << 10

// Write writes p and feeds the hash.
func (f *File) Write(p []byte) (int, error) {
	if f.hash == nil || len(p) < asyncHashBytes {
		n, err := f.f.Write(p)
		if f.hash != nil {
			f.hash.Write(p[:n])
		}
		f.n += int64(n)
		return n, err
	}
	done := make(chan struct{})
	go func() {
		f.hash.Write(p)
		close(done)
	}()
	n, err := f.f.Write(p)
	<-done
	if n < len(p) {
		// Short write: the hash saw bytes the file did not get; the sum is meaningless from here on.
		f.hash = nil
	}
	f.n += int64(n)
	return n, err
}

// WriteAt writes at an offset (for parallel bodies). Bytes written this way are not hashed; callers using it
// must hash the result with [HashFile] after Commit, or not rely on Sum.
func (f *File) WriteAt(p []byte, off int64) (int, error) {
	f.hash = nil
	return f.f.WriteAt(p, off)
}

// Size is the number of bytes written through Write.
func (f *File) Size() int64 { return f.n }

// Sum is the hex sha256 of the bytes written through Write, or "" when WriteAt was used.
func (f *File) Sum() string {
	if f.hash == nil {
		return ""
	}
	return hex.EncodeToString(f.hash.Sum(nil))
}

// Commit syncs the file, renames it to its final path and syncs the folder.
func (f *File) Commit() error {
	if f.done {
		return errors.New("fsx: commit of a finished file")
	}
	f.done = true
	tmp := f.f.Name()
	if err := f.f.Sync(); err != nil {
		f.f.Close()
		os.Remove(tmp)
		return fmt.Errorf("sync %s: %w", f.path, err)
	}
	if err := f.f.Close(); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("close %s: %w", f.path, err)
	}
	if err := os.Chmod(tmp, 0o644); err != nil {
		os.Remove(tmp)
		return err
	}
	if err := os.Rename(tmp, f.path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("rename to %s: %w", f.path, err)
	}
	return SyncDir(filepath.Dir(f.path))
}

// Abort removes the temporary file. It is safe to call after Commit.
func (f *File) Abort() {
	if f.done {
		return
	}
	f.done = true
	name := f.f.Name()
	f.f.Close()
	os.Remove(name)
}

// SyncDir fsyncs a folder so a rename in it is durable.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil && !errors.Is(err, os.ErrInvalid) {
		return fmt.Errorf("sync folder %s: %w", dir, err)
	}
	return nil
}

// WriteFile writes data to path atomically and returns its sha256.
func WriteFile(path string, data []byte) (string, error) {
	f, err := Create(path)
	if err != nil {
		return "", err
	}
	defer f.Abort()
	if _, err := f.Write(data); err != nil {
		return "", fmt.Errorf("write %s: %w", path, err)
	}
	sum := f.Sum()
	return sum, f.Commit()
}

// WriteJSON writes v as indented JSON (two spaces, a final newline) to path atomically, creating its folder,
// and returns the file's sha256: the state and cache files (workspace state, auto-tune results) are written so.
func WriteJSON(path string, v any) (string, error) {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return "", err
	}
	return WriteFile(path, append(b, '\n'))
}

// HashFile returns the size and hex sha256 of a file.
func HashFile(path string) (int64, string, error) { return hashFile(nil, path) }

// HashFileContext is HashFile for large files: it stops early, with ctx's error, when ctx is done.
func HashFileContext(ctx context.Context, path string) (int64, string, error) {
	return hashFile(ctx, path)
}

func hashFile(ctx context.Context, path string) (int64, string, error) {
	fh, err := Open(path) // a FIFO or a device would never end
	if err != nil {
		return 0, "", err
	}
	defer fh.Close()
	h := sha256.New()
	var r io.Reader = fh
	if ctx != nil {
		r = ctxReader{ctx, fh}
	}
	n, err := io.CopyBuffer(h, r, make([]byte, 1<<20))
	if err != nil {
		return 0, "", fmt.Errorf("hash %s: %w", path, err)
	}
	return n, hex.EncodeToString(h.Sum(nil)), nil
}

// ctxReader stops a long read when the context is done.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

// IsSHA256Hex reports whether s is a sha256 as HashFile and File.Sum write it: 64 lowercase hex digits.
func IsSHA256Hex(s string) bool {
	if len(s) != 64 {
		return false
	}
	for _, c := range s {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}
