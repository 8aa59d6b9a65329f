package httpx

import "net/http"

// StatusWriter records the status code a handler sends (200 when it writes without one), for metrics and
// logs. Flush passes through, and Unwrap keeps the underlying writer reachable for http.ResponseController.
type StatusWriter struct {
	http.ResponseWriter
	Code int
}

// WriteHeader records the first status code and sends it.
func (w *StatusWriter) WriteHeader(c int) {
	if w.Code == 0 {
		w.Code = c
	}
	w.ResponseWriter.WriteHeader(c)
}

// Write records an implicit 200 and writes.
func (w *StatusWriter) Write(b []byte) (int, error) {
	if w.Code == 0 {
		w.Code = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// Flush flushes when the underlying writer can (SSE streams need it).
func (w *StatusWriter) Flush() { _ = w.FlushError() }

// FlushError flushes through http.ResponseController and reports a failed flush (a client gone).
func (w *StatusWriter) FlushError() error {
	if w.Code == 0 {
		w.Code = http.StatusOK
	}
	return http.NewResponseController(w.ResponseWriter).Flush()
}

// Unwrap returns the underlying writer.
func (w *StatusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
