package safetensors

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

// directChunk is the size of each direct write.
const directChunk = 16 << 20

// directChunks is how many chunks circulate: one being filled, the others being hashed or written.
const directChunks = 8

// directWriters is how many chunks are written at once (a queue depth of one leaves a virtual disk idle
// between requests).
const directWriters = 4

// directAlign is the buffer, offset and length alignment direct I/O asks for (the logical block size is 512
// or 4096 on every common disk; 4096 satisfies both).
const directAlign = 4096

// directWriter writes a file sequentially with direct I/O. The caller's goroutine only copies bytes into
// aligned chunks; a full chunk goes to a hashing goroutine (sha256, in file order), then to one of
// directWriters writing goroutines, and comes back for reuse, so producing, hashing and writing the file run
// in parallel. Flush sends the last, partial chunk padded to the alignment, waits for everything and cuts
// the padding off.
type directWriter struct {
	f      directFile
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

// directFile is what the direct writer needs of the output file (an *fsx.File or an *os.File).
type directFile interface {
	syscall.Conn
	io.WriterAt
	Truncate(size int64) error
}

// newDirectWriter switches f to direct I/O, or returns nil when that is not possible here.
func newDirectWriter(f directFile) *directWriter {
	if !setDirect(f, true) {
		return nil
	}
	d := &directWriter{f: f, free: make(chan []byte, directChunks), hashQ: make(chan chunk, directChunks),
		writeQ: make(chan chunk, directChunks), done: make(chan struct{}), h: sha256.New()}
	for range directChunks {
		d.free <- alignedBuf(directChunk)
	}
	go d.hashLoop()
	var wg sync.WaitGroup
	for range directWriters {
		wg.Go(d.writeLoop)
	}
	go func() {
		wg.Wait()
		close(d.done)
	}()
	return d
}

func alignedBuf(n int) []byte {
	b := make([]byte, n+directAlign)
	a := int(uintptr(unsafe.Pointer(&b[0])) % directAlign)
	if a != 0 {
		a = directAlign - a
	}
	return b[a : a+n : a+n]
}

func (d *directWriter) hashLoop() {
	for c := range d.hashQ {
		d.h.Write(c.buf[:c.n])
		d.writeQ <- c
	}
	close(d.writeQ)
}

func (d *directWriter) writeLoop() {
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

func (d *directWriter) failed() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.err
}

// writeAt writes buf at off. A file system that accepted O_DIRECT but refuses the write (EINVAL) gets it,
// and everything after it, through the page cache.
func (d *directWriter) writeAt(buf []byte, off int64) error {
	_, err := d.f.WriteAt(buf, off)
	if err != nil && isInvalid(err) && setDirect(d.f, false) {
		_, err = d.f.WriteAt(buf, off)
	}
	return err
}

// send queues the current chunk, its first n bytes being data and padded to padded bytes.
func (d *directWriter) send(n, padded int) {
	d.hashQ <- chunk{buf: d.cur[:padded], n: n, off: d.off}
	d.off += int64(n)
	d.cur, d.n = nil, 0
}

func (d *directWriter) Write(p []byte) (int, error) {
	if d.closed {
		return 0, fmt.Errorf("write after flush")
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
		if d.n == directChunk {
			d.send(directChunk, directChunk)
		}
	}
	return total, nil
}

// Flush writes the partial last chunk, zero-padded to the alignment, waits for every chunk to be hashed
// and written, and cuts the padding off. The writer cannot be used afterwards.
func (d *directWriter) Flush() error {
	if d.closed {
		return fmt.Errorf("flush after flush")
	}
	size := d.off + int64(d.n)
	if d.n > 0 {
		padded := (d.n + directAlign - 1) &^ (directAlign - 1)
		clear(d.cur[d.n:padded])
		d.send(d.n, padded)
	}
	d.stop()
	if err := d.failed(); err != nil {
		return err
	}
	if err := d.f.Truncate(size); err != nil {
		return fmt.Errorf("truncate to %d bytes: %w", size, err)
	}
	return nil
}

// stop ends the goroutines and waits for them.
func (d *directWriter) stop() {
	if !d.closed {
		d.closed = true
		close(d.hashQ)
	}
	<-d.done
}

// Sum is the hex sha256 of everything written (valid after Flush).
func (d *directWriter) Sum() string { return hex.EncodeToString(d.h.Sum(nil)) }
