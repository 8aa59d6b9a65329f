package merge

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"runtime/debug"
	"sync"

	"github.com/phonellm/phonellm/pipeline/safetensors"
)

// baseMaps shares one read of the base's safetensors files between the provenance hash and the merge: each
// file is mapped read-only, the hasher walks it in order and the merge decodes and copies tensors straight
// from the same pages, with no read system call or copy of its own.
//
// Two cursors per file, how far the hasher is (h) and how far the merge's in-order output has used the file
// (m), pace the two readers and decide which pages stay mapped:
//   - the hasher waits when it is keep bytes ahead of the merge (until finish), and the merge waits when the
//     hasher, reading this file, lags lagBytes behind it: both hashes and the merge progress together and end
//     together, instead of one hash being left to run alone on one core at the end;
//   - mapped pages count towards the resident memory until dropped (MADV_DONTNEED only unmaps: the data stays
//     in the page cache and a later access maps it again, so a drop can only cost a page fault, never
//     correctness). Everything below both cursors is dropped, and a reader more than keep bytes ahead of the
//     other drops what it is done with beyond that distance, so the resident part of each file stays within
//     about 2·keep bytes plus the blocks in flight. Each drop also covers a margin below it, for pages that
//     fault-around (the kernel maps a few neighbouring pages on each fault) mapped again.
type baseMaps struct {
	files    map[string]*baseMap // by path, as TensorInfo.File names it
	finished chan struct{}       // closed when the merge no longer reads (see finish)
}

type baseMap struct {
	path string
	data []byte
	keep int64 // how far one reader's pages are kept mapped for the other (defaultKeepBytes)

	mu     sync.Mutex
	h      int64           // the hasher is past this offset (len(data) when it does not hash from this map)
	m      int64           // the merge is done with this file below this offset (in the order it uses the file)
	both   int64           // dropped below here: min(h, m) at the last sweep
	ahead  int64           // the merge's range [h+keep, ahead) is dropped
	behind int64           // the hasher's range [m, behind) is dropped
	moved  chan struct{}   // signalled when m grows
	hmoved chan struct{}   // signalled when h grows
	active bool            // the hasher is reading this file now
	done   <-chan struct{} // baseMaps.finished
}

// defaultKeepBytes bounds how far one reader's pages are kept mapped for the other.
const defaultKeepBytes int64 = 64 << 20

// dropMargin is how far below its range each drop reaches (more than the kernel's 64 KiB fault-around).
const dropMargin = 1 << 20

// hashChunk is how much the hasher hashes between two sweeps.
const hashChunk = 4 << 20

// mapBase maps every file of raw. It returns nil (and the merge reads with pread) where mapping is not
// possible.
func mapBase(raw *safetensors.Checkpoint) *baseMaps {
	m := &baseMaps{files: map[string]*baseMap{}, finished: make(chan struct{})}
	for _, f := range raw.Files() {
		data, err := mmapFile(f.Path())
		if err != nil {
			m.close()
			return nil
		}
		m.files[f.Path()] = &baseMap{path: f.Path(), data: data, keep: defaultKeepBytes, h: int64(len(data)), moved: make(chan struct{}, 1), hmoved: make(chan struct{}, 1), done: m.finished}
	}
	return m
}

// finish tells that the merge reads no more: the hasher no longer waits for it. Safe to call more than once.
func (m *baseMaps) finish() {
	if m == nil {
		return
	}
	select {
	case <-m.finished:
	default:
		close(m.finished)
	}
}

// close unmaps everything; no reader may use the maps afterwards.
func (m *baseMaps) close() {
	if m == nil {
		return
	}
	for _, bm := range m.files {
		munmap(bm.data)
	}
	m.files = nil
}

// file returns the map of path, or nil.
func (m *baseMaps) file(path string) *baseMap {
	if m == nil {
		return nil
	}
	return m.files[path]
}

// bytes returns [off, off+n) of the file.
func (b *baseMap) bytes(off, n int64) ([]byte, error) {
	if off < 0 || n < 0 || off > int64(len(b.data))-n {
		return nil, fmt.Errorf("merge: %s: bytes [%d, %d) are past its end (%d bytes; did it change?)", b.path, off, off+n, len(b.data))
	}
	return b.data[off : off+n : off+n], nil
}

// guard runs fn, which reads the map, turning a fault (the file was truncated or its disk failed while
// mapped) into an error instead of a crash.
func (b *baseMap) guard(fn func() error) (err error) {
	old := debug.SetPanicOnFault(true)
	defer func() {
		debug.SetPanicOnFault(old)
		if r := recover(); r != nil {
			if _, fault := r.(interface{ Addr() uintptr }); !fault {
				panic(r)
			}
			err = fmt.Errorf("merge: %s: reading it failed (%v): was it changed or truncated during the merge?", b.path, r)
		}
	}()
	return fn()
}

// claim tells that the hasher will read the file from the map (until then the merge drops what it used).
func (b *baseMap) claim() {
	b.mu.Lock()
	b.h = 0
	b.mu.Unlock()
}

// used tells that the merge's output is done with [off, end) and everything of the file it used before.
// It is called in output order, so a range below the cursor is a file read out of order: it is dropped
// right away (if the hasher is past it). When the hasher is reading this file and lags more than lagBytes
// behind, used waits for it: the merge and the two hashes then progress together and finish together,
// instead of one hash being left to run alone on one core at the end.
func (b *baseMap) used(ctx context.Context, off, end int64) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if end <= b.both {
		dropPages(b.data, off-dropMargin, end)
		return nil
	}
	if end > b.m {
		b.m = end
		select {
		case b.moved <- struct{}{}:
		default:
		}
	}
	b.sweep()
	for b.active && b.m-b.h > lagBytes {
		b.mu.Unlock()
		select {
		case <-b.hmoved:
		case <-ctx.Done():
			b.mu.Lock()
			return ctx.Err()
		}
		b.mu.Lock()
	}
	return nil
}

// lagBytes is how far the hasher may lag behind the merge in the file it reads.
const lagBytes = 32 << 20

// setH records the hasher's progress and wakes a merge waiting for it.
func (b *baseMap) setH(h int64, active bool) {
	b.mu.Lock()
	b.h, b.active = h, active
	b.sweep()
	b.mu.Unlock()
	select {
	case b.hmoved <- struct{}{}:
	default:
	}
}

// sweep drops what both readers are done with, and what one reader is done with too far ahead of the other.
func (b *baseMap) sweep() {
	if lo := min(b.h, b.m); lo > b.both {
		dropPages(b.data, b.both-dropMargin, lo)
		b.both = lo
	}
	if b.m > b.h+b.keep && b.m > b.ahead {
		dropPages(b.data, max(b.h+b.keep, b.ahead-dropMargin), b.m)
		b.ahead = b.m
	}
	if b.h > b.m+b.keep && b.h-b.keep > b.behind {
		dropPages(b.data, max(b.m, b.behind-dropMargin), b.h-b.keep)
		b.behind = b.h - b.keep
	}
}

// hash returns the file's size and sha256, read from the map in order. It stays within keep bytes of the
// merge's progress in the file (until finish): the two then share the pages, and the hash takes its CPU time
// alongside the merge instead of racing ahead of it and leaving the output's hash alone at the end, with
// one core idle.
func (b *baseMap) hash(ctx context.Context) (int64, string, error) {
	defer b.setH(int64(len(b.data)), false)
	h := sha256.New()
	size := int64(len(b.data))
	err := b.guard(func() error {
		for off := int64(0); off < size; off += hashChunk {
			if err := ctx.Err(); err != nil {
				return err
			}
			end := min(off+hashChunk, size)
			if err := b.wait(ctx, end); err != nil {
				return err
			}
			h.Write(b.data[off:end])
			b.setH(end, true)
		}
		return nil
	})
	if err != nil {
		return 0, "", err
	}
	return size, hex.EncodeToString(h.Sum(nil)), nil
}

// wait waits until the hasher may read up to end: the merge is within keep bytes of it, or finished.
func (b *baseMap) wait(ctx context.Context, end int64) error {
	for {
		b.mu.Lock()
		ok := end <= b.m+b.keep
		b.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-b.moved:
		case <-b.done:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
