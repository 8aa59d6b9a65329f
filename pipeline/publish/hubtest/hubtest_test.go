package hubtest

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
)

const repoID = "tester/m"

type tclient struct {
	t *testing.T
	h *Hub
}

func (c tclient) do(method, url string, body []byte, hdr map[string]string) (*http.Response, []byte) {
	c.t.Helper()
	req, err := http.NewRequest(method, url, bytes.NewReader(body))
	if err != nil {
		c.t.Fatal(err)
	}
	if body == nil {
		req.Body = http.NoBody
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	cl := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := cl.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, b
}

func (c tclient) auth() map[string]string {
	return map[string]string{"Authorization": "Bearer " + c.h.Token()}
}

func lfsHdr(auth bool, tok string) map[string]string {
	m := map[string]string{"Accept": "application/vnd.git-lfs+json", "Content-Type": "application/vnd.git-lfs+json"}
	if auth {
		m["Authorization"] = "Bearer " + tok
	}
	return m
}

type action struct {
	Href   string            `json:"href"`
	Header map[string]string `json:"header"`
}

func (c tclient) batch(oid string, size int) action {
	c.t.Helper()
	body, _ := json.Marshal(map[string]any{"operation": "upload", "transfers": []string{"basic", "multipart"}, "hash_algo": "sha256",
		"objects": []map[string]any{{"oid": oid, "size": size}}})
	resp, b := c.do("POST", c.h.URL+"/"+repoID+".git/info/lfs/objects/batch", body, lfsHdr(true, c.h.Token()))
	if resp.StatusCode != 200 {
		c.t.Fatalf("batch: %d %s", resp.StatusCode, b)
	}
	var a struct {
		Objects []struct {
			Actions *struct{ Upload action } `json:"actions"`
		} `json:"objects"`
	}
	json.Unmarshal(b, &a)
	if a.Objects[0].Actions == nil {
		return action{}
	}
	return a.Objects[0].Actions.Upload
}

func (c tclient) commit(lines ...string) (*http.Response, []byte) {
	return c.do("POST", c.h.URL+"/api/models/"+repoID+"/commit/main", []byte(strings.Join(lines, "\n")),
		map[string]string{"Authorization": "Bearer " + c.h.Token(), "Content-Type": "application/x-ndjson"})
}

func lfsLine(path, oid string, size int) string {
	return fmt.Sprintf(`{"key":"lfsFile","value":{"path":%q,"algo":"sha256","oid":%q,"size":%d}}`, path, oid, size)
}

const header = `{"key":"header","value":{"summary":"s"}}`

func data(n int, seed byte) ([]byte, string) {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7) ^ seed
	}
	s := sha256.Sum256(b)
	return b, hex.EncodeToString(s[:])
}

func start(t *testing.T) tclient {
	h := Start(t, Config{MultipartThreshold: 1000, ChunkSize: 400})
	h.CreateRepo(repoID, false)
	return tclient{t, h}
}

func TestBasicUploadIsVerified(t *testing.T) {
	c := start(t)
	b, oid := data(500, 1)
	up := c.batch(oid, 500)
	// Token on a presigned URL is refused.
	if resp, _ := c.do("PUT", up.Href, b, c.auth()); resp.StatusCode != 400 {
		t.Fatalf("token on presigned PUT: %d", resp.StatusCode)
	}
	// Wrong bytes are refused and not stored.
	bad := append([]byte(nil), b...)
	bad[0] ^= 1
	if resp, _ := c.do("PUT", up.Href, bad, nil); resp.StatusCode != 400 || c.h.HasObject(oid) {
		t.Fatalf("wrong bytes: %d stored=%v", resp.StatusCode, c.h.HasObject(oid))
	}
	// Chunked encoding (no Content-Length) is refused.
	req, _ := http.NewRequest("PUT", up.Href, io.MultiReader(bytes.NewReader(b)))
	req.ContentLength = -1
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != http.StatusLengthRequired {
		t.Fatalf("chunked PUT: %v %v", resp.StatusCode, err)
	}
	resp.Body.Close()
	// Tampered signature is refused.
	if resp, _ := c.do("PUT", strings.Replace(up.Href, "sig=", "sig=0", 1), b, nil); resp.StatusCode != 403 {
		t.Fatalf("bad signature: %d", resp.StatusCode)
	}
	if resp, _ := c.do("PUT", up.Href, b, nil); resp.StatusCode != 200 || !c.h.HasObject(oid) {
		t.Fatalf("good PUT: %d", resp.StatusCode)
	}
	// Known objects get no actions.
	if again := c.batch(oid, 500); again.Href != "" {
		t.Fatal("stored object offered for upload again")
	}
}

func TestMultipartIsStrict(t *testing.T) {
	c := start(t)
	b, oid := data(1100, 2) // 3 parts of 400, 400, 300
	up := c.batch(oid, 1100)
	if up.Header["chunk_size"] != "400" || up.Header["00001"] == "" || up.Header["00003"] == "" || up.Header["00004"] != "" {
		t.Fatalf("multipart header %v", up.Header)
	}
	// A commit naming the object before completion is refused.
	if resp, body := c.commit(header, lfsLine("m.gguf", oid, 1100)); resp.StatusCode != 400 || !bytes.Contains(body, []byte("does not exist")) {
		t.Fatalf("commit before upload: %d %s", resp.StatusCode, body)
	}
	// Wrong part length refused.
	if resp, _ := c.do("PUT", up.Header["00001"], b[:399], nil); resp.StatusCode != 400 {
		t.Fatalf("short part: %d", resp.StatusCode)
	}
	etags := map[int]string{}
	for n := 1; n <= 3; n++ {
		resp, _ := c.do("PUT", up.Header[fmt.Sprintf("%05d", n)], b[(n-1)*400:min(n*400, 1100)], nil)
		if resp.StatusCode != 200 || resp.Header.Get("ETag") == "" {
			t.Fatalf("part %d: %d", n, resp.StatusCode)
		}
		etags[n] = resp.Header.Get("ETag")
	}
	complete := func(parts []map[string]any, auth bool) int {
		body, _ := json.Marshal(map[string]any{"oid": oid, "parts": parts})
		resp, _ := c.do("POST", up.Href, body, lfsHdr(auth, c.h.Token()))
		return resp.StatusCode
	}
	p := func(n int, e string) map[string]any { return map[string]any{"partNumber": n, "etag": e} }
	for name, parts := range map[string][]map[string]any{
		"missing part": {p(1, etags[1]), p(2, etags[2])},
		"wrong etag":   {p(1, etags[1]), p(2, `"x"`), p(3, etags[3])},
		"out of order": {p(2, etags[2]), p(1, etags[1]), p(3, etags[3])},
		"duplicate":    {p(1, etags[1]), p(1, etags[1]), p(3, etags[3])},
	} {
		if st := complete(parts, false); st != 400 {
			t.Fatalf("%s: completion answered %d", name, st)
		}
	}
	good := []map[string]any{p(1, etags[1]), p(2, etags[2]), p(3, etags[3])}
	if st := complete(good, true); st != 400 {
		t.Fatalf("token on completion: %d", st)
	}
	if st := complete(good, false); st != 200 || !c.h.HasObject(oid) {
		t.Fatalf("completion: %d", st)
	}
	if resp, body := c.commit(header, lfsLine("m.gguf", oid, 1100)); resp.StatusCode != 200 {
		t.Fatalf("commit: %d %s", resp.StatusCode, body)
	}
	// Size in the commit must match the stored object.
	if resp, _ := c.commit(header, lfsLine("n.gguf", oid, 1101)); resp.StatusCode != 400 {
		t.Fatalf("size mismatch commit: %d", resp.StatusCode)
	}
}

func TestMultipartWrongBytesAreDiscarded(t *testing.T) {
	c := start(t)
	_, oid := data(1100, 3)
	other, _ := data(1100, 4)
	up := c.batch(oid, 1100)
	var parts []map[string]any
	for n := 1; n <= 3; n++ {
		resp, _ := c.do("PUT", up.Header[fmt.Sprintf("%05d", n)], other[(n-1)*400:min(n*400, 1100)], nil)
		parts = append(parts, map[string]any{"partNumber": n, "etag": resp.Header.Get("ETag")})
	}
	body, _ := json.Marshal(map[string]any{"oid": oid, "parts": parts})
	if resp, msg := c.do("POST", up.Href, body, lfsHdr(false, "")); resp.StatusCode != 400 || !bytes.Contains(msg, []byte("sha256")) {
		t.Fatalf("wrong assembled bytes: %d %s", resp.StatusCode, msg)
	}
	if c.h.HasObject(oid) {
		t.Fatal("wrong bytes stored")
	}
}

func TestCommitRules(t *testing.T) {
	c := start(t)
	head := c.h.Head(repoID, "main")
	file := func(p string, b []byte) string {
		return fmt.Sprintf(`{"key":"file","value":{"path":%q,"content":%q,"encoding":"base64"}}`, p, base64.StdEncoding.EncodeToString(b))
	}
	cases := map[string]struct {
		lines []string
		want  int
	}{
		"header not first": {[]string{file("a", []byte("x")), header}, 400},
		"empty summary":    {[]string{`{"key":"header","value":{"summary":""}}`}, 400},
		"stale parent":     {[]string{`{"key":"header","value":{"summary":"s","parentCommit":"` + strings.Repeat("a", 40) + `"}}`, file("a", []byte("x"))}, 412},
		"bad base64":       {[]string{header, `{"key":"file","value":{"path":"a","content":"@@","encoding":"base64"}}`}, 400},
		"binary regular":   {[]string{header, file("a.bin", []byte{0, 1, 2})}, 400},
		"delete missing":   {[]string{header, `{"key":"deletedFile","value":{"path":"nope"}}`}, 404},
		"bad path":         {[]string{header, file("../a", []byte("x"))}, 400},
		"unknown key":      {[]string{header, `{"key":"rename","value":{"path":"a"}}`}, 400},
	}
	for name, tc := range cases {
		resp, body := c.commit(tc.lines...)
		if resp.StatusCode != tc.want || resp.Header.Get("X-Error-Message") == "" {
			t.Errorf("%s: %d %s, want %d with X-Error-Message", name, resp.StatusCode, body, tc.want)
		}
	}
	if c.h.Head(repoID, "main") != head {
		t.Fatal("a refused commit changed main")
	}
	// Wrong content type.
	resp, _ := c.do("POST", c.h.URL+"/api/models/"+repoID+"/commit/main", []byte(header), c.auth())
	if resp.StatusCode != 400 {
		t.Fatalf("json content type accepted: %d", resp.StatusCode)
	}
	// Good commit with parent, trailing newline accepted.
	resp, body := c.commit(`{"key":"header","value":{"summary":"s","parentCommit":"`+head+`"}}`, file("README.md", []byte("# hi\n")), "")
	if resp.StatusCode != 200 {
		t.Fatalf("good commit: %d %s", resp.StatusCode, body)
	}
	var out struct{ CommitOid string }
	json.Unmarshal(body, &out)
	if out.CommitOid != c.h.Head(repoID, "main") || len(out.CommitOid) != 40 {
		t.Fatalf("commit oid %q", out.CommitOid)
	}
}

func TestAuthAndDownloads(t *testing.T) {
	c := start(t)
	b, oid := data(5000, 5)
	commitOid, err := c.h.Seed(repoID, "main", map[string][]byte{"w.gguf": b, "README.md": []byte("hi\n")})
	if err != nil {
		t.Fatal(err)
	}
	if resp, _ := c.do("POST", c.h.URL+"/"+repoID+".git/info/lfs/objects/batch", []byte(`{}`), lfsHdr(false, "")); resp.StatusCode != 401 {
		t.Fatalf("batch without token: %d", resp.StatusCode)
	}
	resp, _ := c.do("HEAD", c.h.URL+"/"+repoID+"/resolve/main/w.gguf", nil, nil)
	if resp.StatusCode != 302 || resp.Header.Get("X-Linked-Etag") != `"`+oid+`"` || resp.Header.Get("X-Linked-Size") != "5000" || resp.Header.Get("X-Repo-Commit") != commitOid {
		t.Fatalf("resolve: %d %v", resp.StatusCode, resp.Header)
	}
	loc := resp.Header.Get("Location")
	if !strings.HasPrefix(loc, c.h.StorageURL) || strings.HasPrefix(loc, c.h.URL) {
		t.Fatalf("location %s not on the storage host", loc)
	}
	if resp, _ := c.do("GET", loc, nil, c.auth()); resp.StatusCode != 400 {
		t.Fatalf("token on CDN: %d", resp.StatusCode)
	}
	resp, got := c.do("GET", loc, nil, map[string]string{"Range": "bytes=4000-"})
	if resp.StatusCode != 206 || !bytes.Equal(got, b[4000:]) || resp.Header.Get("Content-Range") != "bytes 4000-4999/5000" {
		t.Fatalf("range: %d %q", resp.StatusCode, resp.Header.Get("Content-Range"))
	}
	if resp, _ := c.do("GET", loc, nil, map[string]string{"Range": "bytes=6000-"}); resp.StatusCode != 416 {
		t.Fatalf("unsatisfiable range: %d", resp.StatusCode)
	}
	resp, _ = c.do("GET", c.h.URL+"/"+repoID+"/resolve/main/nope", nil, nil)
	if resp.StatusCode != 404 || resp.Header.Get("X-Error-Code") != "EntryNotFound" {
		t.Fatalf("missing file: %d %v", resp.StatusCode, resp.Header)
	}
	c.h.SetPrivate(repoID, true)
	if resp, _ := c.do("GET", c.h.URL+"/api/models/"+repoID+"/revision/main", nil, nil); resp.StatusCode != 401 {
		t.Fatalf("private repo without token: %d", resp.StatusCode)
	}
	resp, body := c.do("GET", c.h.URL+"/api/models/"+repoID+"/tree/main?recursive=true", nil, c.auth())
	var tree []struct {
		Path string
		Oid  string
		Size int64
		LFS  *struct {
			Oid         string
			PointerSize int
		}
	}
	json.Unmarshal(body, &tree)
	found := false
	for _, e := range tree {
		if e.Path == "w.gguf" {
			found = e.LFS != nil && e.LFS.Oid == oid && e.Size == 5000 && e.LFS.PointerSize == len(lfsPointer(oid, 5000)) && e.Oid == gitBlobID(lfsPointer(oid, 5000))
		}
	}
	if resp.StatusCode != 200 || !found {
		t.Fatalf("tree: %d %s", resp.StatusCode, body)
	}
}

func TestLFSPointerMatchesSpecExample(t *testing.T) {
	// A 1,048,576-byte file has a 132-byte pointer (reference hf-hub.md §4.1).
	if n := len(lfsPointer(strings.Repeat("a", 64), 1048576)); n != 132 {
		t.Fatalf("pointer size %d", n)
	}
}

func FuzzParseCommit(f *testing.F) {
	f.Add([]byte(header + "\n" + lfsLine("a.gguf", strings.Repeat("b", 64), 3)))
	f.Add([]byte(header + "\n{\"key\":\"file\",\"value\":{\"path\":\"x\",\"content\":\"aGk=\",\"encoding\":\"base64\"}}\n"))
	f.Add([]byte("{}"))
	f.Fuzz(func(t *testing.T, body []byte) {
		hdr, ops, err := ParseCommit(body)
		if err != nil {
			return
		}
		if strings.TrimSpace(hdr.Summary) == "" {
			t.Fatal("accepted an empty summary")
		}
		seen := map[string]bool{}
		for _, op := range ops {
			if seen[op.Path] || (op.Key == "lfsFile" && (len(op.Oid) != 64 || op.Size < 0)) {
				t.Fatalf("accepted bad op %+v", op)
			}
			seen[op.Path] = true
		}
	})
}
