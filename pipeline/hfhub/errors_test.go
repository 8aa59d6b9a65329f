package hfhub

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/phonellm/phonellm/pipeline"
)

// TestHubErrorCapsRemoteText: a 900 KB X-Error-Message (or body) from the Hub, a proxy or a CDN is not
// echoed whole, and whatever it holds is printed on one line as valid UTF-8.
func TestHubErrorCapsRemoteText(t *testing.T) {
	huge := strings.Repeat("ünicode\n\x1b[2J", 900<<10/12)
	for _, c := range []struct {
		hdr  http.Header
		body string
	}{
		{http.Header{"X-Error-Message": {huge}, "X-Error-Code": {strings.Repeat("C", 1000)}, "X-Request-Id": {strings.Repeat("r", 1000)}}, ""},
		{http.Header{}, huge},
		{http.Header{}, `{"error":"` + strings.Repeat("x", 900<<10) + `"}`},
		{http.Header{}, "\xff\xfe" + huge},
	} {
		e := NewHubError("download", "https://cdn.example/x?sig=secret", &http.Response{StatusCode: 500, Header: c.hdr}, []byte(c.body))
		msg := e.Error()
		if len(msg) > 600 || !utf8.ValidString(msg) || strings.ContainsAny(msg, "\n\x1b") || strings.Contains(msg, "secret") {
			t.Errorf("error of %d bytes (valid UTF-8 %v): %.200q", len(msg), utf8.ValidString(msg), msg)
		}
		if len(e.Message) > MaxMessage+len("…") {
			t.Errorf("message of %d bytes", len(e.Message))
		}
	}
}

func TestHubErrorClassesAndHints(t *testing.T) {
	cases := []struct {
		status int
		code   string
		write  bool
		input  bool
		hint   string
	}{
		{404, "EntryNotFound", false, true, "no such file"},
		{404, "RevisionNotFound", false, true, "branch, tag or commit"},
		{404, "RepoNotFound", false, false, "private repo needs HF_TOKEN"},
		{401, "RepoNotFound", false, false, "private repo needs HF_TOKEN"},
		{403, "GatedRepo", false, false, "gated"},
		{429, "", false, false, "rate-limited"},
		{503, "", false, false, "run again later"},
		{401, "", true, false, "write token"},
		{403, "", true, false, "write access"},
		{412, "", true, false, "committed to the branch"},
		{413, "", true, true, "size"},
		{404, "RevisionNotFound", true, false, ""},
	}
	for _, c := range cases {
		e := &HubError{Op: "op", Status: c.status, Code: c.code, Write: c.write}
		err := fmt.Errorf("wrapped: %w", e)
		if pipeline.IsInputError(err) != c.input || pipeline.IsRemoteError(err) == c.input {
			t.Errorf("%d %s write=%v: input %v remote %v, want input %v", c.status, c.code, c.write,
				pipeline.IsInputError(err), pipeline.IsRemoteError(err), c.input)
		}
		if !strings.Contains(e.Hint(), c.hint) || (c.hint == "" && e.Hint() != "") {
			t.Errorf("%d %s write=%v: hint %q, want it to mention %q", c.status, c.code, c.write, e.Hint(), c.hint)
		}
		var he *HubError
		if !errors.As(err, &he) {
			t.Fatal("not a HubError")
		}
	}
}
