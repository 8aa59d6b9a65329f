package httpx

import (
	"context"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"time"
)

// ServerOptions bound what one client can hold of a server that faces strangers. Zero fields take the
// defaults below; a negative duration switches that timeout off.
type ServerOptions struct {
	// ReadHeaderTimeout bounds the request line and headers, so slowloris clients that trickle header bytes
	// are closed (default 10 s).
	ReadHeaderTimeout time.Duration
	// ReadTimeout bounds reading a request, body included, from its first byte (default 60 s), so a client
	// trickling its body is answered 408 and closed. It does not limit the answer: net/http lifts the
	// deadline once the body has been read to its end.
	ReadTimeout time.Duration
	// WriteTimeout bounds each write to the client, not the whole answer (default 60 s): a stream may last
	// as long as generation does, but a client that stops reading is disconnected after this long and its
	// request cancelled.
	WriteTimeout time.Duration
	// IdleTimeout closes keep-alive connections idle this long (default 60 s).
	IdleTimeout time.Duration
	// MaxHeaderBytes bounds the request headers (default 64 KiB).
	MaxHeaderBytes int
	// MaxConns bounds the open connections (default 1024; negative: no bound); further clients wait in the
	// accept queue.
	MaxConns int
	// ShutdownTimeout is how long Serve lets requests in flight finish once its context ends (default 10 s);
	// then their contexts are cancelled and the connections closed.
	ShutdownTimeout time.Duration
	// ErrorLog receives net/http's own errors (a handler's panic, accept failures); nil discards them.
	ErrorLog *log.Logger
}

// Default limits of ServerOptions.
const (
	DefaultReadHeaderTimeout = 10 * time.Second
	DefaultReadTimeout       = 60 * time.Second
	DefaultWriteTimeout      = 60 * time.Second
	DefaultIdleTimeout       = 60 * time.Second
	DefaultMaxHeaderBytes    = 64 << 10
	DefaultMaxConns          = 1024
	DefaultShutdownTimeout   = 10 * time.Second
)

// WithDefaults returns o with zero fields set to the defaults and negative durations as 0 (off).
func (o ServerOptions) WithDefaults() ServerOptions {
	def := func(d *time.Duration, v time.Duration) {
		switch {
		case *d == 0:
			*d = v
		case *d < 0:
			*d = 0
		}
	}
	def(&o.ReadHeaderTimeout, DefaultReadHeaderTimeout)
	def(&o.ReadTimeout, DefaultReadTimeout)
	def(&o.WriteTimeout, DefaultWriteTimeout)
	def(&o.IdleTimeout, DefaultIdleTimeout)
	def(&o.ShutdownTimeout, DefaultShutdownTimeout)
	if o.MaxHeaderBytes <= 0 {
		o.MaxHeaderBytes = DefaultMaxHeaderBytes
	}
	if o.MaxConns == 0 {
		o.MaxConns = DefaultMaxConns
	}
	return o
}

// NewServer returns an http.Server for h with o's limits: header, read and idle timeouts, the header size
// cap, and h wrapped by Harden for the per-write deadlines. Serve it on a LimitListener (Serve does both).
func NewServer(h http.Handler, o ServerOptions) *http.Server {
	o = o.WithDefaults()
	el := o.ErrorLog
	if el == nil {
		el = log.New(io.Discard, "", 0)
	}
	return &http.Server{
		Handler:           Harden(h, o),
		ReadHeaderTimeout: o.ReadHeaderTimeout,
		ReadTimeout:       o.ReadTimeout,
		IdleTimeout:       o.IdleTimeout,
		MaxHeaderBytes:    o.MaxHeaderBytes,
		ErrorLog:          el,
	}
}

// Serve serves h on ln (at most o.MaxConns connections) until ctx ends, then shuts down: no new
// connections, requests in flight get o.ShutdownTimeout to finish, after which their contexts are cancelled
// and every connection is closed. It returns nil after such a shutdown, or the error that stopped serving.
func Serve(ctx context.Context, ln net.Listener, h http.Handler, o ServerOptions) error {
	o = o.WithDefaults()
	srv := NewServer(h, o)
	base, cancelRequests := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelRequests()
	srv.BaseContext = func(net.Listener) context.Context { return base }
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(LimitListener(ln, o.MaxConns)) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), o.ShutdownTimeout)
	defer cancel()
	err := srv.Shutdown(sctx)
	if err != nil {
		// Requests still running after the grace period: cancel them, then drop their connections.
		cancelRequests()
		err = srv.Close()
	}
	if e := <-errc; e != nil && !errors.Is(e, http.ErrServerClosed) && err == nil {
		err = e
	}
	return err
}

// Harden wraps h for a server built with o: every write to the client gets its own o.WriteTimeout deadline
// (http.Server.WriteTimeout would bound the whole answer, cutting long streams).
func Harden(h http.Handler, o ServerOptions) http.Handler {
	o = o.WithDefaults()
	if o.WriteTimeout <= 0 {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		dw := &deadlineWriter{ResponseWriter: w, rc: http.NewResponseController(w), d: o.WriteTimeout}
		dw.extend()
		h.ServeHTTP(dw, r)
		dw.extend() // for what net/http writes after the handler: buffered bytes, the chunked trailer
	})
}

// deadlineWriter sets a fresh write deadline before every write and flush.
type deadlineWriter struct {
	http.ResponseWriter
	rc *http.ResponseController
	d  time.Duration
}

func (w *deadlineWriter) extend() { _ = w.rc.SetWriteDeadline(time.Now().Add(w.d)) }

func (w *deadlineWriter) WriteHeader(code int) {
	w.extend()
	w.ResponseWriter.WriteHeader(code)
}

func (w *deadlineWriter) Write(b []byte) (int, error) {
	w.extend()
	return w.ResponseWriter.Write(b)
}

// Flush flushes through http.ResponseController, so wrappers below are honoured too.
func (w *deadlineWriter) Flush() {
	w.extend()
	_ = w.rc.Flush()
}

// FlushError is Flush reporting the error (http.ResponseController prefers it).
func (w *deadlineWriter) FlushError() error {
	w.extend()
	return w.rc.Flush()
}

// Unwrap returns the underlying writer, for http.ResponseController.
func (w *deadlineWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
