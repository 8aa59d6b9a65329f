package hfhub

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/phonellm/phonellm/internal/httpx"
	"github.com/phonellm/phonellm/internal/retry"
)

// HubError is a non-success answer from the Hub, or from the storage a Hub answer pointed at: one type for
// downloads (this package) and uploads (pipeline/publish). What the remote said is kept on one line and
// capped (MaxMessage), since a Hub, a proxy or a CDN in between may send anything.
type HubError struct {
	Op        string // "resolve", "download", "preupload", "commit", "upload part 3 of x.gguf", …
	URL       string // the URL requested, when it helps (printed without its query, which may be a signature)
	Status    int
	Code      string // X-Error-Code: RepoNotFound, EntryNotFound, RevisionNotFound, GatedRepo, …
	Message   string // X-Error-Message, the JSON error or the body text
	RequestID string // X-Request-Id, for the Hub's support
	// RetryAfter is the delay the answer asked for (Retry-After, RateLimit).
	RetryAfter time.Duration
	// Write is set for publishing calls: the same status calls for different advice there.
	Write bool
}

// Caps on what a remote answer may put into an error.
const (
	MaxMessage = 300 // bytes of message
	maxCode    = 64
	maxBody    = 64 << 10 // bytes of an error body read to find its message
)

func (e *HubError) Error() string {
	var b strings.Builder
	b.WriteString("hub ")
	b.WriteString(e.Op)
	if e.URL != "" {
		b.WriteString(" ")
		b.WriteString(redact(e.URL))
	}
	fmt.Fprintf(&b, ": %d %s", e.Status, http.StatusText(e.Status))
	if e.Message != "" {
		b.WriteString(": " + e.Message)
	}
	if e.Code != "" {
		b.WriteString(" (" + e.Code + ")")
	}
	if e.RequestID != "" {
		b.WriteString(" [request " + e.RequestID + "]")
	}
	return b.String()
}

// NotFound reports whether the repo, revision or file does not exist (or is private and no valid token was
// given: the Hub answers 401 RepoNotFound then).
func (e *HubError) NotFound() bool {
	return e.Status == http.StatusNotFound || e.Code == "RepoNotFound" || e.Code == "EntryNotFound" || e.Code == "RevisionNotFound"
}

// InputError reports answers caused by what the user asked for rather than by the Hub: a file or revision
// that does not exist in the repo named (the reference is wrong), or a file too large for the Hub. A missing
// repo is not among them: it may be private, which is the token's business (RemoteError).
func (e *HubError) InputError() bool {
	switch {
	case e.Status == http.StatusRequestEntityTooLarge:
		return true
	case e.Status == http.StatusNotFound && (e.Code == "EntryNotFound" || e.Code == "RevisionNotFound"):
		return !e.Write
	}
	return false
}

// RemoteError reports that the Hub refused or failed (exit 5), for every answer that is not an input error.
func (e *HubError) RemoteError() bool { return !e.InputError() }

// Hint suggests what the user can do, for the CLI to print.
func (e *HubError) Hint() string {
	if e.Write {
		switch e.Status {
		case http.StatusUnauthorized:
			return "the Hub did not accept the token: set HF_TOKEN (or log in so $HF_HOME/token exists) with a write token"
		case http.StatusForbidden:
			return "the token may not write to this repo: use a token with write access to the namespace (fine-grained tokens need repo write permission)"
		case http.StatusPreconditionFailed:
			return "someone else committed to the branch meanwhile: run publish again to commit on top of it"
		case http.StatusTooManyRequests:
			return "the Hub rate-limited this account: wait a few minutes and run publish again (the upload resumes)"
		case http.StatusRequestEntityTooLarge:
			return "the Hub refused the file's size: check the repo's storage limits"
		}
		if e.Status >= 500 {
			return "the Hub failed: run publish again later (the upload resumes)"
		}
		return ""
	}
	switch {
	case e.Code == "GatedRepo" || e.Status == http.StatusForbidden:
		return "the repo is gated or forbidden: accept its conditions on its Hub page with the account whose token is in HF_TOKEN"
	case e.Code == "EntryNotFound":
		return "that revision has no such file: check the path (hf://org/name@revision/path/to/file)"
	case e.Code == "RevisionNotFound":
		return "the repo has no such branch, tag or commit"
	case e.Code == "RepoNotFound" || e.Status == http.StatusUnauthorized || e.Status == http.StatusNotFound:
		return "check the repo name; a private repo needs HF_TOKEN (or $HF_HOME/token) with read access"
	case e.Status == http.StatusTooManyRequests:
		return "the Hub rate-limited this machine: wait a few minutes and run again (downloads resume)"
	case e.Status >= 500:
		return "the Hub failed: run again later (downloads resume)"
	}
	return ""
}

// NewHubError builds the error for a non-success answer from its headers and body, in the shapes the Hub
// uses (huggingface_hub utils/_http.py hf_raise_for_status): X-Error-Code and X-Error-Message, a JSON error
// ({"error": "…"}, {"error": ["…"]}, {"message": "…"}, {"errors": [{"message": "…"}]}, with an
// error_description), or plain text. Everything taken from the answer is capped and made one line.
func NewHubError(op, url string, resp *http.Response, body []byte) *HubError {
	e := &HubError{Op: op, URL: url, Status: resp.StatusCode,
		Code:      httpx.CapText(resp.Header.Get("X-Error-Code"), maxCode),
		Message:   resp.Header.Get("X-Error-Message"),
		RequestID: httpx.CapText(resp.Header.Get("X-Request-Id"), maxCode)}
	e.RetryAfter, _ = retry.ServerDelay(resp.Header, time.Now())
	if e.Message == "" {
		e.Message = bodyMessage(body)
	}
	e.Message = httpx.CapText(e.Message, MaxMessage)
	return e
}

// bodyMessage finds the message of an error body.
func bodyMessage(body []byte) string {
	if len(body) > maxBody {
		body = body[:maxBody]
	}
	var j struct {
		Error       json.RawMessage `json:"error"`
		Message     string          `json:"message"`
		Description string          `json:"error_description"`
		Errors      []struct {
			Message string `json:"message"`
		} `json:"errors"`
	}
	if json.Unmarshal(body, &j) != nil {
		return string(body)
	}
	var msg, s string
	var list []string
	switch {
	case json.Unmarshal(j.Error, &s) == nil && s != "":
		msg = s
	case json.Unmarshal(j.Error, &list) == nil && len(list) > 0:
		msg = strings.Join(list, "; ")
	case j.Message != "":
		msg = j.Message
	case len(j.Errors) > 0:
		msg = j.Errors[0].Message
	}
	if j.Description != "" {
		msg = strings.TrimPrefix(msg+": "+j.Description, ": ")
	}
	return msg
}
