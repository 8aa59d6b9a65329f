package httpx

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

func TestStatusWriter(t *testing.T) {
	rec := httptest.NewRecorder()
	w := &StatusWriter{ResponseWriter: rec}
	w.Write([]byte("x"))
	w.WriteHeader(http.StatusTeapot) // too late: the first status stays
	w.Flush()
	if w.Code != http.StatusOK || !rec.Flushed || http.NewResponseController(w).Flush() != nil {
		t.Fatalf("code %d flushed %v", w.Code, rec.Flushed)
	}
	w2 := &StatusWriter{ResponseWriter: httptest.NewRecorder()}
	w2.WriteHeader(http.StatusNotFound)
	if w2.Code != http.StatusNotFound {
		t.Fatalf("code %d", w2.Code)
	}
}
