package hfhub_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/phonellm/phonellm/internal/retry"
	"github.com/phonellm/phonellm/pipeline/hfhub"
	"github.com/phonellm/phonellm/pipeline/publish/hubtest"
)

func randBytes(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func fastRetry() retry.Policy {
	return retry.Policy{Attempts: 4, Base: time.Millisecond, Max: 5 * time.Millisecond}
}

type fixture struct {
	hub    *hubtest.Hub
	client *hfhub.Client
	model  []byte
	readme []byte
	commit string
}

func setup(t *testing.T) *fixture {
	t.Helper()
	hub := hubtest.Start(t, hubtest.Config{})
	f := &fixture{hub: hub, model: randBytes(3<<20+123, 1), readme: []byte("---\nlicense: apache-2.0\n---\n# m\n")}
	c, err := hub.Seed("tester/m", "main", map[string][]byte{"m-Q4_K_M.gguf": f.model, "README.md": f.readme})
	if err != nil {
		t.Fatal(err)
	}
	f.commit = c
	f.client = &hfhub.Client{Endpoint: hub.URL, Token: hub.Token(), CacheDir: t.TempDir(), Retry: fastRetry(), RequestTimeout: 2 * time.Second}
	return f
}

func sha(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }

func cdnRequests(h *hubtest.Hub) (n int, auth bool) {
	for _, r := range h.Requests() {
		if r.Op == hubtest.OpCDN {
			n++
			auth = auth || r.Auth
		}
	}
	return
}

func TestDownloadLFSIntoCacheLayout(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	var progressed int64
	loc, err := f.client.Download(ctx, "tester/m", "main", "m-Q4_K_M.gguf", func(n int64) { progressed += n })
	if err != nil {
		t.Fatal(err)
	}
	if loc.Info.SHA256 != sha(f.model) || loc.Info.Size != int64(len(f.model)) || loc.Info.Commit != f.commit {
		t.Fatalf("info %+v", loc.Info)
	}
	got, err := os.ReadFile(loc.Path)
	if err != nil || !bytes.Equal(got, f.model) {
		t.Fatalf("snapshot content differs (err %v)", err)
	}
	repoDir := filepath.Join(f.client.CacheDir, "models--tester--m")
	if want := filepath.Join(repoDir, "blobs", sha(f.model)); loc.Blob != want {
		t.Fatalf("blob %s want %s", loc.Blob, want)
	}
	link, err := os.Readlink(filepath.Join(repoDir, "snapshots", f.commit, "m-Q4_K_M.gguf"))
	if err != nil || link != filepath.Join("..", "..", "blobs", sha(f.model)) {
		t.Fatalf("snapshot link %q err %v", link, err)
	}
	ref, err := os.ReadFile(filepath.Join(repoDir, "refs", "main"))
	if err != nil || string(ref) != f.commit {
		t.Fatalf("refs/main = %q err %v", ref, err)
	}
	if progressed != int64(len(f.model)) || loc.Fetched != int64(len(f.model)) {
		t.Fatalf("progress %d fetched %d", progressed, loc.Fetched)
	}
	if n, auth := cdnRequests(f.hub); n != 1 || auth {
		t.Fatalf("cdn requests %d auth %v", n, auth)
	}
	// Second call: served from cache, verified, nothing fetched.
	loc2, err := f.client.Download(ctx, "tester/m", "main", "m-Q4_K_M.gguf", nil)
	if err != nil || loc2.Fetched != 0 {
		t.Fatalf("cached download: fetched %d err %v", loc2.Fetched, err)
	}
}

func TestDownloadRegularFileVerifiedByGitSHA1(t *testing.T) {
	f := setup(t)
	loc, err := f.client.Download(context.Background(), "tester/m", f.commit, "README.md", nil)
	if err != nil {
		t.Fatal(err)
	}
	if loc.Info.GitSHA1 == "" || loc.Info.SHA256 != "" {
		t.Fatalf("regular file info %+v", loc.Info)
	}
	got, _ := os.ReadFile(loc.Path)
	if !bytes.Equal(got, f.readme) {
		t.Fatal("content differs")
	}
	// Revision given as a commit: no refs/<commit> file.
	if _, err := os.Stat(filepath.Join(f.client.CacheDir, "models--tester--m", "refs", f.commit)); !os.IsNotExist(err) {
		t.Fatalf("unexpected ref for a commit revision: %v", err)
	}
}

func TestDownloadResumesAfterDroppedConnection(t *testing.T) {
	f := setup(t)
	f.hub.Inject(hubtest.Fault{Op: hubtest.OpCDN, Kind: hubtest.FaultTruncate})
	loc, err := f.client.Download(context.Background(), "tester/m", "main", "m-Q4_K_M.gguf", nil)
	if err != nil {
		t.Fatal(err)
	}
	if loc.Fetched != int64(len(f.model)) {
		t.Fatalf("fetched %d bytes for a %d-byte file: resume re-sent data", loc.Fetched, len(f.model))
	}
	if n, _ := cdnRequests(f.hub); n != 2 {
		t.Fatalf("cdn requests %d, want 2", n)
	}
	got, _ := os.ReadFile(loc.Path)
	if !bytes.Equal(got, f.model) {
		t.Fatal("content differs")
	}
}

func TestDownloadResumesAfterStalledBody(t *testing.T) {
	f := setup(t)
	f.client.RequestTimeout = 300 * time.Millisecond
	f.hub.Inject(hubtest.Fault{Op: hubtest.OpCDN, Kind: hubtest.FaultStall})
	loc, err := f.client.Download(context.Background(), "tester/m", "main", "m-Q4_K_M.gguf", nil)
	if err != nil {
		t.Fatal(err)
	}
	if loc.Fetched != int64(len(f.model)) {
		t.Fatalf("fetched %d of %d: resume re-sent data", loc.Fetched, len(f.model))
	}
	got, _ := os.ReadFile(loc.Path)
	if !bytes.Equal(got, f.model) {
		t.Fatal("content differs")
	}
}

func TestDownloadRestartsWhenRangeIgnored(t *testing.T) {
	f := setup(t)
	f.hub.Inject(hubtest.Fault{Op: hubtest.OpCDN, Kind: hubtest.FaultTruncate})
	f.hub.Inject(hubtest.Fault{Op: hubtest.OpCDN, Kind: hubtest.FaultIgnoreRange})
	loc, err := f.client.Download(context.Background(), "tester/m", "main", "m-Q4_K_M.gguf", nil)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(loc.Path)
	if !bytes.Equal(got, f.model) {
		t.Fatal("content differs")
	}
}

func TestDownloadResumesIncompleteFromEarlierRun(t *testing.T) {
	f := setup(t)
	blobs := filepath.Join(f.client.CacheDir, "models--tester--m", "blobs")
	os.MkdirAll(blobs, 0o755)
	have := 1<<20 + 7
	os.WriteFile(filepath.Join(blobs, sha(f.model)+".incomplete"), f.model[:have], 0o644)
	loc, err := f.client.Download(context.Background(), "tester/m", "main", "m-Q4_K_M.gguf", nil)
	if err != nil {
		t.Fatal(err)
	}
	if loc.Fetched != int64(len(f.model)-have) {
		t.Fatalf("fetched %d, want %d", loc.Fetched, len(f.model)-have)
	}
}

func TestCorruptOrTruncatedCacheIsRefetched(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	loc, err := f.client.Download(ctx, "tester/m", "main", "m-Q4_K_M.gguf", nil)
	if err != nil {
		t.Fatal(err)
	}
	for name, damage := range map[string]func(string) error{
		"corrupt":   func(p string) error { b, _ := os.ReadFile(p); b[100] ^= 1; return os.WriteFile(p, b, 0o644) },
		"truncated": func(p string) error { return os.Truncate(p, 1000) },
		"missing":   os.Remove,
	} {
		if err := damage(loc.Blob); err != nil {
			t.Fatal(err)
		}
		again, err := f.client.Download(ctx, "tester/m", "main", "m-Q4_K_M.gguf", nil)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if again.Fetched != int64(len(f.model)) {
			t.Fatalf("%s: fetched %d", name, again.Fetched)
		}
		got, _ := os.ReadFile(again.Path)
		if !bytes.Equal(got, f.model) {
			t.Fatalf("%s: content differs after refetch", name)
		}
	}
}

func TestCorruptServedBytesAreRejected(t *testing.T) {
	f := setup(t)
	f.hub.Inject(hubtest.Fault{Op: hubtest.OpCDN, Kind: hubtest.FaultCorrupt, Times: -1})
	_, err := f.client.Download(context.Background(), "tester/m", "main", "m-Q4_K_M.gguf", nil)
	var ie *hfhub.IntegrityError
	if !errors.As(err, &ie) {
		t.Fatalf("want IntegrityError, got %v", err)
	}
	blob := filepath.Join(f.client.CacheDir, "models--tester--m", "blobs", sha(f.model))
	if _, err := os.Stat(blob); !os.IsNotExist(err) {
		t.Fatalf("corrupt bytes became a cache blob: %v", err)
	}
	if _, err := os.Stat(blob + ".incomplete"); !os.IsNotExist(err) {
		t.Fatalf("corrupt partial kept: %v", err)
	}
}

func TestExpiredSignedURLIsResolvedAgain(t *testing.T) {
	f := setup(t)
	f.hub.Inject(hubtest.Fault{Op: hubtest.OpCDN, Kind: hubtest.FaultExpired})
	if _, err := f.client.Download(context.Background(), "tester/m", "main", "m-Q4_K_M.gguf", nil); err != nil {
		t.Fatal(err)
	}
	if n := f.hub.Count(hubtest.OpResolve); n != 2 {
		t.Fatalf("resolve calls %d, want 2", n)
	}
}

func TestRateLimitedResolveIsRetried(t *testing.T) {
	f := setup(t)
	f.hub.Inject(hubtest.Fault{Op: hubtest.OpResolve, Kind: hubtest.FaultRateLimit, RetryAfter: time.Millisecond})
	f.hub.Inject(hubtest.Fault{Op: hubtest.OpResolve, Kind: hubtest.FaultStatus, Status: 502})
	if _, err := f.client.Download(context.Background(), "tester/m", "main", "m-Q4_K_M.gguf", nil); err != nil {
		t.Fatal(err)
	}
}

func TestPrivateRepoAndErrors(t *testing.T) {
	f := setup(t)
	f.hub.SetPrivate("tester/m", true)
	ctx := context.Background()
	anon := *f.client
	anon.Token = ""
	_, err := anon.Stat(ctx, "tester/m", "main", "m-Q4_K_M.gguf")
	var he *hfhub.HubError
	if !errors.As(err, &he) || he.Status != 401 || !he.NotFound() {
		t.Fatalf("anonymous on private repo: %v", err)
	}
	// With the token it works, and the token still never reaches the CDN.
	if _, err := f.client.Download(ctx, "tester/m", "main", "m-Q4_K_M.gguf", nil); err != nil {
		t.Fatal(err)
	}
	if _, auth := cdnRequests(f.hub); auth {
		t.Fatal("token sent to storage")
	}
	_, err = f.client.Stat(ctx, "tester/m", "main", "missing.gguf")
	if !errors.As(err, &he) || he.Code != "EntryNotFound" {
		t.Fatalf("missing file: %v", err)
	}
	_, err = f.client.Stat(ctx, "tester/m", "nope", "README.md")
	if !errors.As(err, &he) || he.Code != "RevisionNotFound" {
		t.Fatalf("missing revision: %v", err)
	}
}

func TestEnvAndURLs(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HF_HOME", home)
	t.Setenv("HF_TOKEN", "")
	t.Setenv("HUGGING_FACE_HUB_TOKEN", "")
	t.Setenv("HF_TOKEN_PATH", "")
	t.Setenv("HF_HUB_CACHE", "")
	t.Setenv("HF_ENDPOINT", "http://example.test/ ")
	if got := hfhub.Endpoint(); got != "http://example.test" {
		t.Fatalf("endpoint %q", got)
	}
	if hfhub.Token() != "" {
		t.Fatal("token without source")
	}
	os.WriteFile(filepath.Join(home, "token"), []byte("hf_file\n"), 0o600)
	if got := hfhub.Token(); got != "hf_file" {
		t.Fatalf("token from file %q", got)
	}
	t.Setenv("HF_TOKEN", "hf_env")
	if got := hfhub.Token(); got != "hf_env" {
		t.Fatalf("token from env %q", got)
	}
	if got := hfhub.CacheDir(); got != filepath.Join(home, "hub") {
		t.Fatalf("cache dir %q", got)
	}
	u := hfhub.ResolveURL("https://h.co", "org/m", "refs/pr/1", "dir/a b.gguf")
	if u != "https://h.co/org/m/resolve/refs%2Fpr%2F1/dir/a%20b.gguf" {
		t.Fatalf("resolve URL %s", u)
	}
	r, err := hfhub.ParseRef("hf://org/m@v1.0/dir/x.gguf")
	if err != nil || r != (hfhub.Ref{Repo: "org/m", Revision: "v1.0", File: "dir/x.gguf"}) {
		t.Fatalf("ParseRef: %+v %v", r, err)
	}
	for _, bad := range []string{"org/m/x", "hf://org", "hf://org/m", "hf://org/m/../x", "hf://o rg/m/x", "hf://org/m@/x"} {
		if _, err := hfhub.ParseRef(bad); err == nil {
			t.Errorf("ParseRef(%q) accepted", bad)
		}
	}
	if !strings.HasPrefix(hfhub.RepoFolderName("a/b"), "models--a--b") {
		t.Fatal("folder name")
	}
}

func FuzzParseRef(f *testing.F) {
	f.Add("hf://org/m@main/x.gguf")
	f.Add("hf://a/b/c/d")
	f.Fuzz(func(t *testing.T, s string) {
		r, err := hfhub.ParseRef(s)
		if err != nil {
			return
		}
		back, err := hfhub.ParseRef(r.String())
		if err != nil || back != r {
			t.Fatalf("%q → %+v → %q → %+v %v", s, r, r.String(), back, err)
		}
	})
}

func TestSnapshotPinsOneCommit(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	dir, files, err := f.client.Snapshot(ctx, "tester/m", "main", func(p string) bool { return p != ".gitattributes" }, nil)
	if err != nil {
		t.Fatal(err)
	}
	if dir != filepath.Join(f.client.CacheDir, "models--tester--m", "snapshots", f.commit) || len(files) != 2 {
		t.Fatalf("dir %s files %d", dir, len(files))
	}
	got, err := os.ReadFile(filepath.Join(dir, "m-Q4_K_M.gguf"))
	if err != nil || !bytes.Equal(got, f.model) {
		t.Fatalf("snapshot file: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, ".gitattributes")); !os.IsNotExist(err) {
		t.Fatal("unmatched file downloaded")
	}
	list, err := f.client.ListFiles(ctx, "tester/m", f.commit)
	if err != nil || len(list) != 3 {
		t.Fatalf("list %+v %v", list, err)
	}
	for _, e := range list {
		if e.Path == "m-Q4_K_M.gguf" && (e.SHA256 != sha(f.model) || e.Size != int64(len(f.model))) {
			t.Fatalf("tree entry %+v", e)
		}
	}
}

func TestTrustVerifiedSkipsRehashButCatchesTruncation(t *testing.T) {
	f := setup(t)
	f.client.TrustVerified = true
	ctx := context.Background()
	loc, err := f.client.Download(ctx, "tester/m", "main", "m-Q4_K_M.gguf", nil)
	if err != nil {
		t.Fatal(err)
	}
	// Same size, same mtime, different bytes: trusted (documented trade-off).
	st, _ := os.Stat(loc.Blob)
	b, _ := os.ReadFile(loc.Blob)
	b[10] ^= 1
	os.WriteFile(loc.Blob, b, 0o644)
	os.Chtimes(loc.Blob, st.ModTime(), st.ModTime())
	if again, err := f.client.Download(ctx, "tester/m", "main", "m-Q4_K_M.gguf", nil); err != nil || again.Fetched != 0 {
		t.Fatalf("trusted blob refetched: %d %v", again.Fetched, err)
	}
	// Any size or time change voids the trust: full check, refetch.
	os.Truncate(loc.Blob, 100)
	again, err := f.client.Download(ctx, "tester/m", "main", "m-Q4_K_M.gguf", nil)
	if err != nil || again.Fetched != int64(len(f.model)) {
		t.Fatalf("truncated blob: fetched %d err %v", again.Fetched, err)
	}
	got, _ := os.ReadFile(again.Path)
	if !bytes.Equal(got, f.model) {
		t.Fatal("content differs")
	}
	// Without TrustVerified the flipped byte is always found.
	f.client.TrustVerified = false
	b, _ = os.ReadFile(loc.Blob)
	b[10] ^= 1
	os.WriteFile(loc.Blob, b, 0o644)
	if again, err := f.client.Download(ctx, "tester/m", "main", "m-Q4_K_M.gguf", nil); err != nil || again.Fetched != int64(len(f.model)) {
		t.Fatalf("corrupt blob not refetched: %d %v", again.Fetched, err)
	}
}
