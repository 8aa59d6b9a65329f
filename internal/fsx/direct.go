package fsx

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"io"
	"sync"
	"syscall"
	"unsafe"
)

// DirectAlign is the buffer, offset and length alignment direct I/O asks for (the logical block size is 512
// or 4096 on every common disk; 4096 satisfies both).
const DirectAlign = 4096

// DirectOptions size a DirectWriter. Its memory is Chunk × Chunks bytes.
type DirectOptions struct {
	// Chunk is the size of each write, a multiple of DirectAlign; default 16 MiB.
	Chunk int
	// Chunks is how many chunks circulate: one being filled, the others being hashed or written; default 8.
	Chunks int
	// Writers is how many chunks are written at once (a queue depth of one leaves a virtual disk idle
	// between requests); default 4.
	Writers int
}

// DirectWriter writes a file sequentially with direct I/O (O_DIRECT on Linux): the bytes go from aligned
// buffers to the disk, in the background, without passing through (and first allocating) the page cache,
// which for outputs of gigabytes costs more CPU than the data work and leaves a long fsync at Commit. The
// caller's goroutine only copies bytes into aligned chunks; a full chunk goes to a hashing goroutine
// (sha256, in file order), then to one of the writing goroutines, and comes back for reuse, so producing,
// hashing and writing the file run in parallel. Flush sends the last, partial chunk padded to the
// alignment, waits for everything and cuts the padding off. The bytes go to the file with WriteAt, so an
// *fsx.File does not hash them: use Sum and Size.
type DirectWriter struct {
	f      DirectFile
	chunk  int
	free   chan []byte // chunks ready to be filled
	hashQ  chan chunk
	writeQ chan chunk
	done   chan struct{} // closed when the writing goroutines are finished
	cur    []byte        // chunk being filled (nil: take one from free)
	n      int           // bytes in it
	off    int64         // file offset of its first byte
	h      hash.Hash
	mu     sync.Mutex
	err    error // first write error
	closed bool
}

type chunk struct {
	buf []byte // aligned, padded length
	n   int    // bytes of file data in it
	off int64
}

// DirectFile is what the direct writer needs of the output file (a *File or an *os.File).
type DirectFile interface {
	syscall.Conn
	io.WriterAt
	Truncate(size int64) error
}

// NewDirectWriter switches f to direct I/O, or returns nil when that is not possible here (then write
// through the page cache as usual).
func NewDirectWriter(f DirectFile, o DirectOptions) *DirectWriter {
	if o.Chunk <= 0 {
		o.Chunk = 16 << 20
	}
	if o.Chunks <= 0 {
		o.Chunks = 8
	}
	if o.Writers <= 0 {
		o.Writers = 4
	}
	if o.Chunk%DirectAlign != 0 {
		panic(fmt.Sprintf("fsx: direct chunk of %d bytes is not a multiple of %d", o.Chunk, DirectAlign))
	}
	if !setDirect(f, true) {
		return nil
	}
	d := &DirectWriter{f: f, chunk: o.Chunk, free: make(chan []byte, o.Chunks), hashQ: make(chan chunk, o.Chunks),
		writeQ: make(chan chunk, o.Chunks), done: make(chan struct{}), h: sha256.New()}
	for range o.Chunks {
		d.free <- alignedBuf(o.Chunk)
	}
	go d.hashLoop()
	var wg sync.WaitGroup
	for range o.Writers {
		wg.Go(d.writeLoop)
	}
	go func() {
		wg.Wait()
		close(d.done)
	}()
	return d
}

func alignedBuf(n int) []byte {
	b := make([]byte, n+DirectAlign)
	a := int(uintptr(unsafe.Pointer(&b[0])) % DirectAlign)
	if a != 0 {
		a = DirectAlign - a
	}
	return b[a : a+n : a+n]
}

func (d *DirectWriter) hashLoop() {
	for c := range d.hashQ {
		d.h.Write(c.buf[:c.n])
		d.writeQ <- c
	}
	close(d.writeQ)
}

func (d *DirectWriter) writeLoop() {
	for c := range d.writeQ {
		if d.failed() == nil {
			if err := d.writeAt(c.buf, c.off); err != nil {
				d.mu.Lock()
				d.err = err
				d.mu.Unlock()
			}
		}
		d.free <- c.buf[:cap(c.buf)]
	}
}

func (d *DirectWriter) failed() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.err
}

// writeAt writes buf at off. A file system that accepted O_DIRECT but refuses the write (EINVAL) gets it,
// and everything after it, through the page cache.
func (d *DirectWriter) writeAt(buf []byte, off int64) error {
	_, err := d.f.WriteAt(buf, off)
	if err != nil && isInvalid(err) && setDirect(d.f, false) {
		_, err = d.f.WriteAt(buf, off)
	}
	return err
}

// send queues the current chunk, its first n bytes being data and padded to padded bytes.
func (d *DirectWriter) send(n, padded int) {
	d.hashQ <- chunk{buf: d.cur[:padded], n: n, off: d.off}
	d.off += int64(n)
	d.cur, d.n = nil, 0
}

func (d *DirectWriter) Write(p []byte) (int, error) {
	if d.closed {
		return 0, fmt.Errorf("fsx: direct write after flush")
	}
	if err := d.failed(); err != nil {
		return 0, err
	}
	total := len(p)
	for len(p) > 0 {
		if d.cur == nil {
			d.cur = <-d.free
		}
		c := copy(d.cur[d.n:], p)
		d.n += c
		p = p[c:]
		if d.n == d.chunk {
			d.send(d.chunk, d.chunk)
		}
	}
	return total, nil
}

// Flush writes the partial last chunk, zero-padded to the alignment, waits for every chunk to be hashed
// and written, and cuts the padding off. The writer cannot be used afterwards.
func (d *DirectWriter) Flush() error {
	if d.closed {
		return fmt.Errorf("fsx: direct flush after flush")
	}
	size := d.off + int64(d.n)
	if d.n > 0 {
		padded := (d.n + DirectAlign - 1) &^ (DirectAlign - 1)
		clear(d.cur[d.n:padded])
		d.send(d.n, padded)
	}
	d.Stop()
	if err := d.failed(); err != nil {
		return err
	}
	if err := d.f.Truncate(size); err != nil {
		return fmt.Errorf("truncate to %d bytes: %w", size, err)
	}
	return nil
}

// Stop ends the background hashing and writing without flushing and waits for it (for an abandoned file:
// no background write may outlive it). The writer cannot be used afterwards.
func (d *DirectWriter) Stop() {
	if !d.closed {
		d.closed = true
		close(d.hashQ)
	}
	<-d.done
}

// Sum is the hex sha256 of everything written (valid after Flush).
func (d *DirectWriter) Sum() string { return hex.EncodeToString(d.h.Sum(nil)) }

// Size is the number of bytes written so far (the file's size after Flush).
func (d *DirectWriter) Size() int64 { return d.off + int64(d.n) }
