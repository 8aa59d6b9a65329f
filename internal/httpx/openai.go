package httpx

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"
)

// Error is an error in OpenAI's JSON shape, {"error": {"message", "type", "param", "code"}}, with the HTTP
// status it is sent with. Param and Code are null when empty, as OpenAI sends them.
type Error struct {
	Status  int     `json:"-"`
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
	// RetryAfter, when positive, is sent as a Retry-After header (whole seconds, at least 1).
	RetryAfter time.Duration `json:"-"`
}

func (e *Error) Error() string { return e.Message }

// The error types OpenAI's API uses.
const (
	TypeInvalidRequest = "invalid_request_error"
	TypeServer         = "server_error"
	TypeRateLimit      = "rate_limit_error"
)

// NewError returns an Error; empty param and code become null.
func NewError(status int, typ, code, param, format string, args ...any) *Error {
	return &Error{Status: status, Type: typ, Code: strp(code), Param: strp(param), Message: fmt.Sprintf(format, args...)}
}

// BadRequest is a 400 invalid_request_error naming the offending field.
func BadRequest(param, code, format string, args ...any) *Error {
	return NewError(http.StatusBadRequest, TypeInvalidRequest, code, param, format, args...)
}

// Unauthorized is the 401 OpenAI answers for a missing or wrong API key.
func Unauthorized() *Error {
	return NewError(http.StatusUnauthorized, TypeInvalidRequest, "invalid_api_key", "",
		"Incorrect or missing API key: send Authorization: Bearer <key>.")
}

// NotFound is a 404 for an unknown route.
func NotFound(r *http.Request) *Error {
	return NewError(http.StatusNotFound, TypeInvalidRequest, "not_found", "", "no route %s %s", r.Method, r.URL.Path)
}

func strp(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// StringOrNil returns a pointer to s, or nil when s is empty (OpenAI's null param and code).
func StringOrNil(s string) *string { return strp(s) }

// WriteError sends e as JSON with its status (and Retry-After when set).
func WriteError(w http.ResponseWriter, e *Error) {
	if e.RetryAfter > 0 {
		w.Header().Set("Retry-After", RetryAfterSeconds(e.RetryAfter))
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(e.Status)
	_ = json.NewEncoder(w).Encode(ErrorBody(e))
}

// Reject sends e without reading r's body. Unless the body is known to be empty the connection is closed
// after the answer: net/http would otherwise read up to 256 KiB of the unread body before sending anything,
// waiting on a client that sends it slowly, and the refusal would come only when the read timeout fires.
func Reject(w http.ResponseWriter, r *http.Request, e *Error) {
	if r.ContentLength != 0 && r.Body != nil && r.Body != http.NoBody {
		w.Header().Set("Connection", "close")
	}
	WriteError(w, e)
}

// ErrorBody is the JSON value OpenAI sends for e: {"error": e}. Streams send it as an event.
func ErrorBody(e *Error) any { return map[string]*Error{"error": e} }

// RetryAfterSeconds formats d for a Retry-After header: whole seconds, rounded up, at least 1.
func RetryAfterSeconds(d time.Duration) string {
	s := int64((d + time.Second - 1) / time.Second)
	return strconv.FormatInt(max(s, 1), 10)
}
