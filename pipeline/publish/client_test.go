package publish

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/phonellm/phonellm/pipeline/hfhub"
)

func TestErrorFromShapes(t *testing.T) {
	cases := []struct {
		hdr  http.Header
		body string
		want string
	}{
		{http.Header{"X-Error-Message": {"from header"}}, `{"error":"from body"}`, "from header"},
		{http.Header{}, `{"error":"plain"}`, "plain"},
		{http.Header{}, `{"error":["a","b"]}`, "a; b"},
		{http.Header{}, `{"error":"x","error_description":"y"}`, "x: y"},
		{http.Header{}, `{"errors":[{"message":"m"}]}`, "m"},
		{http.Header{}, `{"message":"lfs style"}`, "lfs style"},
		{http.Header{}, "<html>bad gateway</html>", "<html>bad gateway</html>"},
		{http.Header{}, strings.Repeat("z", 400), strings.Repeat("z", 300) + "…"},
	}
	for i, c := range cases {
		e := errorFrom("op", &http.Response{StatusCode: 502, Header: c.hdr}, []byte(c.body))
		if e.Message != c.want {
			t.Errorf("case %d: message %q, want %q", i, e.Message, c.want)
		}
	}
	e := errorFrom("op", &http.Response{StatusCode: 429, Header: http.Header{"Retry-After": {"3"}, "X-Request-Id": {"r1"}, "X-Error-Code": {"RepoNotFound"}}}, nil)
	if e.RetryAfter != 3*time.Second || !strings.Contains(e.Error(), "r1") || !strings.Contains(e.Error(), "RepoNotFound") || e.Hint() == "" {
		t.Fatalf("%+v %q", e, e.Error())
	}
}

func TestUploadIdentityAndLinks(t *testing.T) {
	if got := uploadIdentity("https://h/api/complete_multipart?uploadId=U1&signature=s"); got != "U1" {
		t.Fatal(got)
	}
	if got := uploadIdentity("http://h/lfs/complete/abc?exp=1&sig=2"); got != "http://h/lfs/complete/abc" {
		t.Fatal(got)
	}
	if got := hfhub.NextLink(`<https://h/api/x?cursor=2>; rel="next", <https://h/a>; rel="prev"`); got != "https://h/api/x?cursor=2" {
		t.Fatal(got)
	}
	if hfhub.NextLink("") != "" {
		t.Fatal("next from empty header")
	}
}

func TestCommitBodyIsHeaderFirstNDJSON(t *testing.T) {
	b, err := commitBody("s", "d", strings.Repeat("a", 40), []CommitOp{
		{Key: "lfsFile", Path: "m.gguf", Oid: strings.Repeat("b", 64), Size: 3},
		{Key: "file", Path: "README.md", Content: []byte("hi")},
		{Key: "deletedFile", Path: "old.gguf"},
	})
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	want := []string{
		`{"key":"header","value":{"description":"d","parentCommit":"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa","summary":"s"}}`,
		`{"key":"lfsFile","value":{"algo":"sha256","oid":"bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb","path":"m.gguf","size":3}}`,
		`{"key":"file","value":{"content":"aGk=","encoding":"base64","path":"README.md"}}`,
		`{"key":"deletedFile","value":{"path":"old.gguf"}}`,
	}
	if len(lines) != len(want) {
		t.Fatalf("%d lines:\n%s", len(lines), b)
	}
	for i := range want {
		if lines[i] != want[i] {
			t.Errorf("line %d:\n got %s\nwant %s", i, lines[i], want[i])
		}
	}
	if _, err := commitBody("s", "", "", []CommitOp{{Key: "rename"}}); err == nil {
		t.Fatal("unknown op accepted")
	}
}
