package hubtest

import (
	"bytes"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"time"
)

// serveBytes serves a regular file with Range support.
func serveBytes(w http.ResponseWriter, r *http.Request, b []byte) {
	serveContent(w, r, bytes.NewReader(b), int64(len(b)))
}

// serveContent is http.ServeContent (Range, 206, 416, If-Range) plus the
// download faults.
func serveContent(w http.ResponseWriter, r *http.Request, rs io.ReadSeeker, size int64) {
	switch downloadFault(r) {
	case FaultIgnoreRange:
		r.Header.Del("Range")
	case FaultTruncate:
		w = &truncWriter{ResponseWriter: w, left: max(size/2, 1)}
	case FaultStall:
		w = &truncWriter{ResponseWriter: w, left: max(size/2, 1), stall: func() {
			select {
			case <-r.Context().Done():
			case <-time.After(30 * time.Second):
			}
		}}
	case FaultCorrupt:
		rs = &flipReader{rs: rs, at: size / 2}
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	http.ServeContent(w, r, "", time.Time{}, rs)
}

// truncWriter aborts the connection after left body bytes, after calling
// stall (if set) to hold the connection silent first.
type truncWriter struct {
	http.ResponseWriter
	left  int64
	stall func()
}

func (t *truncWriter) Write(b []byte) (int, error) {
	if int64(len(b)) >= t.left {
		n, _ := t.ResponseWriter.Write(b[:t.left])
		_ = n
		if f, ok := t.ResponseWriter.(http.Flusher); ok {
			f.Flush()
		}
		if t.stall != nil {
			t.stall()
		}
		panic(http.ErrAbortHandler)
	}
	t.left -= int64(len(b))
	return t.ResponseWriter.Write(b)
}

// flipReader inverts the byte at offset at.
type flipReader struct {
	rs  io.ReadSeeker
	off int64
	at  int64
}

func (f *flipReader) Read(p []byte) (int, error) {
	n, err := f.rs.Read(p)
	if f.at >= f.off && f.at < f.off+int64(n) {
		p[f.at-f.off] ^= 0xff
	}
	f.off += int64(n)
	return n, err
}

func (f *flipReader) Seek(o int64, whence int) (int64, error) {
	n, err := f.rs.Seek(o, whence)
	f.off = n
	return n, err
}

// cdn serves a stored LFS object from a presigned URL; the Hub token must
// not be sent here.
func (h *Hub) cdn(w http.ResponseWriter, r *http.Request, oid string) {
	if r.Header.Get("Authorization") != "" {
		s3Error(w, http.StatusBadRequest, "InvalidArgument", "Only one auth mechanism allowed; the Hub token must not be sent to a presigned URL")
		return
	}
	if !h.checkSig(w, r, http.MethodGet) {
		return
	}
	h.mu.Lock()
	size, ok := h.objects[oid]
	h.mu.Unlock()
	if !ok {
		s3Error(w, http.StatusNotFound, "NoSuchKey", "The specified key does not exist.")
		return
	}
	f, err := os.Open(filepath.Join(h.dir, "objects", oid))
	if err != nil {
		s3Error(w, http.StatusInternalServerError, "InternalError", err.Error())
		return
	}
	defer f.Close()
	w.Header().Set("ETag", `"`+oid+`"`)
	serveContent(w, r, f, size)
}
