package httpx

import (
	"encoding/json"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"
)

func TestHistogram(t *testing.T) {
	h := Histogram{Bounds: []float64{0.1, 1, 10}}
	for _, v := range []float64{0.05, 0.1, 0.5, 3, 100} {
		h.Observe(v)
	}
	var b strings.Builder
	h.Write(&b, "x_seconds", Label("endpoint", `/v1/"q"`))
	want := `x_seconds_bucket{endpoint="/v1/\"q\"",le="0.1"} 2
x_seconds_bucket{endpoint="/v1/\"q\"",le="1"} 3
x_seconds_bucket{endpoint="/v1/\"q\"",le="10"} 4
x_seconds_bucket{endpoint="/v1/\"q\"",le="+Inf"} 5
x_seconds_sum{endpoint="/v1/\"q\""} 103.65
x_seconds_count{endpoint="/v1/\"q\""} 5
`
	if b.String() != want {
		t.Fatalf("got\n%s\nwant\n%s", b.String(), want)
	}
	var empty Histogram
	empty.Bounds = []float64{1}
	b.Reset()
	empty.Write(&b, "y", "")
	if b.String() != "y_bucket{le=\"1\"} 0\ny_bucket{le=\"+Inf\"} 0\ny_sum 0\ny_count 0\n" {
		t.Fatalf("empty: %q", b.String())
	}
	if FormatFloat(math.Inf(1)) != "+Inf" || FormatFloat(math.NaN()) != "NaN" || Label("a", "x\ny\\") != `a="x\ny\\"` {
		t.Fatal("format helpers")
	}
}

func TestWriteError(t *testing.T) {
	rec := httptest.NewRecorder()
	e := NewError(http.StatusTooManyRequests, TypeRateLimit, "rate_limited", "", "slow down %d", 1)
	e.RetryAfter = 1500 * time.Millisecond
	WriteError(rec, e)
	var body struct {
		Error map[string]any `json:"error"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
		t.Fatal(err)
	}
	if rec.Code != 429 || rec.Header().Get("Retry-After") != "2" || body.Error["message"] != "slow down 1" ||
		body.Error["type"] != "rate_limit_error" || body.Error["code"] != "rate_limited" || body.Error["param"] != nil {
		t.Fatalf("%d %v %v", rec.Code, rec.Header(), body)
	}
	if _, ok := body.Error["param"]; !ok {
		t.Fatal("param key missing (OpenAI sends null)")
	}
	if RetryAfterSeconds(10*time.Millisecond) != "1" || RetryAfterSeconds(3*time.Second) != "3" {
		t.Fatal("RetryAfterSeconds")
	}
}

func TestCapText(t *testing.T) {
	huge := strings.Repeat("é", 450_000) // 900 KB
	got := CapText(huge, 300)
	if len(got) > 300+len("…") || !strings.HasSuffix(got, "…") || !utf8.ValidString(got) {
		t.Fatalf("900 KB message capped to %d bytes, valid %v", len(got), utf8.ValidString(got))
	}
	for in, want := range map[string]string{
		"plain":                                 "plain",
		"two\nlines\r\n\tand\x1b[31mred\x1b[0m": "two lines and [31mred [0m",
		"bad \xff\xfe utf8":                     "bad \ufffd\ufffd utf8",
		"bidi \u202eevil\u202c end":             "bidi evil end",
		"  spaced   out  ":                      "spaced out",
		"":                                      "",
	} {
		if got := CapText(in, 100); got != want {
			t.Errorf("CapText(%q) = %q, want %q", in, got, want)
		}
	}
	if got := CapText("abcdef", 3); got != "abc…" {
		t.Errorf("cut: %q", got)
	}
	if got := CapText("ab€", 4); got != "ab…" { // € is 3 bytes: cut before it, never inside
		t.Errorf("cut at a rune boundary: %q", got)
	}
	// Mostly dropped characters still end in bounded work and output.
	got = CapText(strings.Repeat("\n", 1<<20)+"x", 10)
	if got != "…" {
		t.Errorf("control flood: %q", got)
	}
	for _, r := range CapText("a\u0085b\u2028c", 50) {
		if unicode.IsControl(r) || r == '\u2028' {
			t.Errorf("kept %U", r)
		}
	}
}

// FuzzCapText: whatever a remote party sends, the text kept is valid UTF-8, on one line, without control or
// format characters, and at most max bytes plus the ellipsis.
func FuzzCapText(f *testing.F) {
	f.Add("plain", 10)
	f.Add("two\nlines\x1b[2J\u202e", 5)
	f.Add("\xff\xfe\xfd", 1)
	f.Add(strings.Repeat("é", 100), 7)
	f.Fuzz(func(t *testing.T, s string, limit int) {
		limit %= 1024
		got := CapText(s, limit)
		if !utf8.ValidString(got) || len(got) > max(limit, 0)+len("…") {
			t.Fatalf("CapText(%q, %d) = %q", s, limit, got)
		}
		for _, r := range strings.TrimSuffix(got, "…") {
			if unicode.IsControl(r) || unicode.Is(unicode.Cf, r) || (r != ' ' && unicode.IsSpace(r)) {
				t.Fatalf("CapText(%q, %d) kept %U", s, limit, r)
			}
		}
	})
}
