package publish

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"github.com/phonellm/phonellm/pipeline"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/phonellm/phonellm/internal/retry"
	"github.com/phonellm/phonellm/pipeline/hfhub"
	"github.com/phonellm/phonellm/pipeline/publish/hubtest"
)

// Scaled-down sizes: multipart from 1 MiB in 256 KiB parts.
var smallHub = hubtest.Config{MultipartThreshold: 1 << 20, ChunkSize: 256 << 10, HangMax: 5 * time.Second}

func writeRandom(t testing.TB, dir, name string, size int, seed uint64) (string, []byte) {
	t.Helper()
	r := rand.New(rand.NewPCG(seed, 7))
	b := make([]byte, size)
	for i := 0; i+8 <= len(b); i += 8 {
		v := r.Uint64()
		for k := 0; k < 8; k++ {
			b[i+k] = byte(v >> (8 * k))
		}
	}
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p, b
}

func shaHex(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }

func testOptions(h *hubtest.Hub, journal string, files ...File) Options {
	return Options{
		Repo: "tester/fraud-9B-GGUF", Files: files, Endpoint: h.URL, Token: h.Token(), JournalDir: journal,
		Retry:          retry.Policy{Attempts: 4, Base: time.Millisecond, Max: 20 * time.Millisecond},
		RequestTimeout: time.Second, Parallel: 3,
	}
}

func testCard() *Card {
	return &Card{Name: "fraud-9B", BaseModel: "Qwen/Qwen3.5-9B", License: "apache-2.0",
		Files: []CardFile{{Name: "fraud-9B-Q4_K_M.gguf", Type: "Q4_K_M", Size: 1, BitsPerWeight: 4.89}}}
}

// recorder is a Reporter that checks Begin/End pairing and counts bytes.
type recorder struct {
	mu    sync.Mutex
	open  map[string]bool
	added int64
	notes []string
}

func (r *recorder) Begin(step string, total int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.open == nil {
		r.open = map[string]bool{}
	}
	r.open[step] = true
}
func (r *recorder) Add(n int64) { r.mu.Lock(); r.added += n; r.mu.Unlock() }
func (r *recorder) End(step string, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.open, step)
}
func (r *recorder) Note(level pipeline.Level, msg string) {
	r.mu.Lock()
	r.notes = append(r.notes, [...]string{"info", "warn"}[level]+": "+msg)
	r.mu.Unlock()
}

func TestPublishMultipartThenDownloadVerified(t *testing.T) {
	h := hubtest.Start(t, smallHub)
	dir := t.TempDir()
	model, modelBytes := writeRandom(t, dir, "fraud-9B-Q4_K_M.gguf", 1<<20+300<<10+17, 1) // 6 parts
	small, smallBytes := writeRandom(t, dir, "fraud-9B-Q8_0.gguf", 100<<10, 2)            // basic LFS
	cfg := []byte(`{"context": 8192}`)
	opts := testOptions(h, t.TempDir(), File{Local: model}, File{Local: small}, File{Path: "phonellm.json", Content: cfg})
	opts.Card = testCard()
	rep := &recorder{}
	res, err := Run(context.Background(), opts, rep)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Verified || res.CommitOid != h.Head("tester/fraud-9B-GGUF", "main") {
		t.Fatalf("result %+v", res)
	}
	if len(rep.open) != 0 {
		t.Fatalf("steps not ended: %v", rep.open)
	}
	if want := int64(len(modelBytes) + len(smallBytes)); res.BytesHashed != want {
		t.Fatalf("hashed %d bytes, want %d (each file once)", res.BytesHashed, want)
	}
	files := h.Files("tester/fraud-9B-GGUF", "main")
	for name, b := range map[string][]byte{"fraud-9B-Q4_K_M.gguf": modelBytes, "fraud-9B-Q8_0.gguf": smallBytes, "phonellm.json": cfg} {
		fe, ok := files[name]
		if !ok || fe.SHA256 != shaHex(b) || fe.Size != int64(len(b)) {
			t.Fatalf("%s on hub: %+v", name, fe)
		}
	}
	if !files["fraud-9B-Q4_K_M.gguf"].LFS || files["phonellm.json"].LFS || files["README.md"].LFS {
		t.Fatal("wrong LFS/regular split")
	}
	parts := h.AcceptedParts(shaHex(modelBytes))
	if len(parts) != 6 {
		t.Fatalf("accepted parts %v, want 6 once each", parts)
	}
	for _, r := range h.Requests() {
		switch r.Op {
		case hubtest.OpPutPart, hubtest.OpPutBasic, hubtest.OpComplete, hubtest.OpCDN:
			if r.Auth {
				t.Fatalf("token sent on %s %s", r.Op, r.Path)
			}
		}
	}
	for _, f := range res.Files {
		if f.ResolveURL != hfhub.ResolveURL(h.URL, "tester/fraud-9B-GGUF", res.CommitOid, f.Path) {
			t.Fatalf("resolve URL %q", f.ResolveURL)
		}
	}

	// Download back through the shared download side.
	dl := &hfhub.Client{Endpoint: h.URL, Token: h.Token(), CacheDir: t.TempDir()}
	loc, err := dl.Download(context.Background(), "tester/fraud-9B-GGUF", res.CommitOid, "fraud-9B-Q4_K_M.gguf", nil)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(loc.Path)
	if !bytes.Equal(got, modelBytes) || loc.Info.SHA256 != shaHex(modelBytes) {
		t.Fatal("downloaded model differs")
	}
	readme, err := dl.Download(context.Background(), "tester/fraud-9B-GGUF", "main", "README.md", nil)
	if err != nil {
		t.Fatal(err)
	}
	card, _ := os.ReadFile(readme.Path)
	if !bytes.Contains(card, []byte("base_model: Qwen/Qwen3.5-9B")) {
		t.Fatalf("card not committed:\n%s", card)
	}
}

func TestRerunIsUpToDateAndSkipsStoredObjects(t *testing.T) {
	h := hubtest.Start(t, smallHub)
	dir := t.TempDir()
	model, _ := writeRandom(t, dir, "m-Q4_K_M.gguf", 1<<20+5, 3)
	journal := t.TempDir()
	opts := testOptions(h, journal, File{Local: model})
	opts.Card = testCard()
	first, err := Run(context.Background(), opts, nil)
	if err != nil {
		t.Fatal(err)
	}
	h.ResetLog()
	second, err := Run(context.Background(), opts, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !second.UpToDate || second.CommitOid != first.CommitOid || !second.Verified {
		t.Fatalf("second run %+v", second)
	}
	if n := h.Count(hubtest.OpPutPart) + h.Count(hubtest.OpCommit) + h.Count(hubtest.OpBatch); n != 0 {
		t.Fatalf("second run sent %d uploads/commits", n)
	}
	// Change only the card: one commit, the model object is not re-sent.
	opts.Card.Description = "now with a description"
	third, err := Run(context.Background(), opts, nil)
	if err != nil {
		t.Fatal(err)
	}
	if third.UpToDate || h.Count(hubtest.OpPutPart) != 0 || h.Count(hubtest.OpCommit) != 1 {
		t.Fatalf("third run: %+v, parts %d commits %d", third, h.Count(hubtest.OpPutPart), h.Count(hubtest.OpCommit))
	}
	if _, err := os.Stat(journalPath(journal, h.URL, opts.Repo, "main")); !os.IsNotExist(err) {
		t.Fatalf("journal left after a verified commit: %v", err)
	}
}

func TestObjectStoredButNotCommittedIsNotResent(t *testing.T) {
	h := hubtest.Start(t, smallHub)
	dir := t.TempDir()
	model, b := writeRandom(t, dir, "m-Q4_K_M.gguf", 2<<20, 4)
	opts := testOptions(h, t.TempDir(), File{Local: model})
	h.Inject(hubtest.Fault{Op: hubtest.OpCommit, Kind: hubtest.FaultStatus, Status: 422})
	if _, err := Run(context.Background(), opts, nil); err == nil {
		t.Fatal("commit refusal not reported")
	}
	if !h.HasObject(shaHex(b)) || len(h.Commits(opts.Repo, "main")) != 1 {
		t.Fatal("want object stored and nothing committed")
	}
	h.ResetLog()
	if _, err := Run(context.Background(), opts, nil); err != nil {
		t.Fatal(err)
	}
	if n := h.Count(hubtest.OpPutPart); n != 0 {
		t.Fatalf("re-sent %d parts of a stored object", n)
	}
}

func TestWhoAmIFillsNamespaceAndErrorsCarryHubMessage(t *testing.T) {
	h := hubtest.Start(t, smallHub)
	dir := t.TempDir()
	f, _ := writeRandom(t, dir, "a.gguf", 1000, 5)
	opts := testOptions(h, t.TempDir(), File{Local: f})
	opts.Repo = "solo"
	res, err := Run(context.Background(), opts, nil)
	if err != nil || res.Repo != "tester/solo" {
		t.Fatalf("res %+v err %v", res, err)
	}
	opts.Repo = "someone-else/x"
	_, err = Run(context.Background(), opts, nil)
	var he *HubError
	if !errors.As(err, &he) || he.Status != 403 || he.Hint() == "" || !bytes.Contains([]byte(he.Error()), []byte("namespace")) {
		t.Fatalf("want 403 with the Hub's message and a hint, got %v", err)
	}
	opts.Repo, opts.Token = "tester/y", "wrong"
	_, err = Run(context.Background(), opts, nil)
	if !errors.As(err, &he) || he.Status != 401 || he.Hint() == "" {
		t.Fatalf("want 401 with hint, got %v", err)
	}
}

func TestDryRunHashesOnly(t *testing.T) {
	dir := t.TempDir()
	f, b := writeRandom(t, dir, "m-Q4_K_M.gguf", 5000, 6)
	res, err := Run(context.Background(), Options{Repo: "o/m", Files: []File{{Local: f}}, DryRun: true, Endpoint: "http://127.0.0.1:1", JournalDir: t.TempDir()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !res.DryRun || len(res.Files) != 1 || res.Files[0].SHA256 != shaHex(b) || !res.Files[0].LFS || res.Files[0].Action != "planned" {
		t.Fatalf("%+v", res)
	}
}

func TestValidate(t *testing.T) {
	bad := []Options{
		{},
		{Repo: "a/b/c", Files: []File{{Path: "x", Content: []byte("x")}}},
		{Repo: "o/m"},
		{Repo: "o/m", Files: []File{{Path: "../x", Content: []byte("x")}}},
		{Repo: "o/m", Files: []File{{Path: "x", Content: []byte("1")}, {Path: "x", Content: []byte("2")}}},
		{Repo: "o/m", Files: []File{{Path: "README.md", Content: []byte("x")}}, Card: &Card{Name: "n"}},
		{Repo: "o/m", Files: []File{{Path: "x"}}},
	}
	for i, o := range bad {
		if err := o.Validate(); err == nil {
			t.Errorf("case %d accepted: %+v", i, o)
		}
	}
	if err := (Options{Repo: "o/m", Files: []File{{Local: "/x/m.gguf"}}}).Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestConcurrentCommitIsAClearConflict(t *testing.T) {
	var h *hubtest.Hub
	var once sync.Once
	cfg := smallHub
	cfg.OnRequest = func(r hubtest.Request) {
		if r.Op == hubtest.OpBatch {
			// Someone else commits while we upload.
			once.Do(func() { h.Seed("tester/fraud-9B-GGUF", "main", map[string][]byte{"other.txt": []byte("hi\n")}) })
		}
	}
	h = hubtest.Start(t, cfg)
	dir := t.TempDir()
	f, _ := writeRandom(t, dir, "m-Q4_K_M.gguf", 300<<10, 8)
	opts := testOptions(h, t.TempDir(), File{Local: f})
	h.CreateRepo(opts.Repo, false)
	_, err := Run(context.Background(), opts, nil)
	var ce *ConflictError
	if !errors.As(err, &ce) || ce.Status != 412 || ce.Hint() == "" {
		t.Fatalf("want ConflictError, got %v", err)
	}
	if n := h.Count(hubtest.OpCommit); n != 0 {
		t.Fatalf("%d commits accepted after a conflict", n)
	}
	var commits int
	for _, r := range h.Requests() {
		if r.Op == hubtest.OpCommit {
			commits++
		}
	}
	if commits != 1 {
		t.Fatalf("commit sent %d times after a 412, want once", commits)
	}
	// Running again commits on top of the other commit.
	if _, err := Run(context.Background(), opts, nil); err != nil {
		t.Fatal(err)
	}
	if _, ok := h.Files(opts.Repo, "main")["other.txt"]; !ok {
		t.Fatal("the other commit was lost")
	}
}

func TestWhoAmIFaultIsRetried(t *testing.T) {
	h := hubtest.Start(t, smallHub)
	h.Inject(hubtest.Fault{Op: hubtest.OpWhoAmI, Kind: hubtest.FaultStatus, Status: 504})
	f, _ := writeRandom(t, t.TempDir(), "a.gguf", 1000, 9)
	opts := testOptions(h, t.TempDir(), File{Local: f})
	opts.Repo = "solo"
	if res, err := Run(context.Background(), opts, nil); err != nil || res.Repo != "tester/solo" {
		t.Fatalf("%+v %v", res, err)
	}
	if h.PendingFaults() != 0 {
		t.Fatal("fault did not fire")
	}
}

func TestNewBranchIsCreated(t *testing.T) {
	h := hubtest.Start(t, smallHub)
	f, b := writeRandom(t, t.TempDir(), "a-Q4_K_M.gguf", 2000, 10)
	opts := testOptions(h, t.TempDir(), File{Local: f})
	opts.Revision = "v1"
	res, err := Run(context.Background(), opts, nil)
	if err != nil {
		t.Fatal(err)
	}
	if h.Head(opts.Repo, "v1") != res.CommitOid || h.Files(opts.Repo, "v1")["a-Q4_K_M.gguf"].SHA256 != shaHex(b) {
		t.Fatal("not committed to the new branch")
	}
	if _, ok := h.Files(opts.Repo, "main")["a-Q4_K_M.gguf"]; ok {
		t.Fatal("committed to main")
	}
}
