package publish

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/phonellm/phonellm/internal/testkit/oracle"
	"github.com/phonellm/phonellm/pipeline/hfhub"
	"github.com/phonellm/phonellm/pipeline/publish/hubtest"
)

// jsDir holds the conformance script and its package.json; node_modules is
// installed by the set-up script (npm ci --prefix testdata/js/hub).
var jsDir = filepath.Join("..", "..", "testdata", "js", "hub")

// requireJS returns node when the official JS client is installed next to the script; otherwise the test is
// oracle.Unavailable (skipped, or failed with PHONELLM_REQUIRE_ORACLE=1).
func requireJS(t *testing.T) string {
	t.Helper()
	node, err := exec.LookPath("node")
	_, modErr := os.Stat(filepath.Join(jsDir, "node_modules", "@huggingface", "hub", "package.json"))
	if err == nil && modErr == nil {
		return node
	}
	oracle.Unavailable(t, "official JS client not installed: run `npm ci --prefix testdata/js/hub` (needs node >= 18)")
	return ""
}

// TestOfficialJSClientAgainstFakeHub: @huggingface/hub lists and downloads
// what phonellm uploaded (sizes and sha256 checked in the script), and its
// own multipart/basic/regular upload is accepted, then downloads back
// verified through pipeline/hfhub.
func TestOfficialJSClientAgainstFakeHub(t *testing.T) {
	node := requireJS(t)
	h := hubtest.Start(t, hubtest.Config{MultipartThreshold: 1 << 20, ChunkSize: 256 << 10})
	dir := t.TempDir()
	model, mb := writeRandom(t, dir, "fraud-9B-Q4_K_M.gguf", 1<<20+512<<10+3, 31)
	opts := testOptions(h, t.TempDir(), File{Local: model})
	opts.RequestTimeout = 10 * time.Second
	opts.Card = testCard()
	res, err := Run(context.Background(), opts, nil)
	if err != nil {
		t.Fatal(err)
	}
	type want struct {
		Path   string `json:"path"`
		Size   int64  `json:"size"`
		SHA256 string `json:"sha256"`
		LFS    bool   `json:"lfs"`
	}
	var expect []want
	for _, f := range res.Files {
		expect = append(expect, want{f.Path, f.Size, f.SHA256, f.LFS})
	}
	if expect[0].SHA256 != shaHex(mb) {
		t.Fatal("result sha256 wrong")
	}
	ej, _ := json.Marshal(expect)
	outDir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "conformance.mjs")
	cmd.Dir = jsDir
	cmd.Env = append(os.Environ(), "HUB_URL="+h.URL, "HF_TOKEN="+h.Token(), "REPO="+opts.Repo,
		"EXPECT="+string(ej), "JS_REPO=tester/js-upload", "OUT_DIR="+outDir)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("node conformance.mjs: %v\nstderr:\n%s\nhub requests: %+v", err, stderr.String(), h.Requests())
	}
	var rep struct {
		Listed     []map[string]any `json:"listed"`
		Downloaded []want           `json:"downloaded"`
		Uploaded   []want           `json:"uploaded"`
		Commit     string           `json:"commit"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatalf("report: %v\n%s", err, stdout.String())
	}
	if len(rep.Downloaded) != len(expect) {
		t.Fatalf("JS downloaded %d of %d files", len(rep.Downloaded), len(expect))
	}
	// The JS upload went through multipart and basic LFS and landed.
	if rep.Commit == "" || h.Head("tester/js-upload", "main") != rep.Commit {
		t.Fatalf("JS commit %q not head of tester/js-upload", rep.Commit)
	}
	var sawMultipart, sawBasic bool
	for _, r := range h.Requests() {
		sawMultipart = sawMultipart || r.Op == hubtest.OpComplete && r.Status == 200
		sawBasic = sawBasic || r.Op == hubtest.OpPutBasic && r.Status == 200
	}
	if !sawMultipart || !sawBasic {
		t.Fatalf("JS upload used multipart=%v basic=%v, want both", sawMultipart, sawBasic)
	}
	files := h.Files("tester/js-upload", "main")
	dl := &hfhub.Client{Endpoint: h.URL, Token: h.Token(), CacheDir: t.TempDir()}
	for _, u := range rep.Uploaded {
		local, err := os.ReadFile(filepath.Join(outDir, u.Path))
		if err != nil || shaHex(local) != u.SHA256 {
			t.Fatalf("%s: local copy: %v", u.Path, err)
		}
		if files[u.Path].SHA256 != u.SHA256 || files[u.Path].Size != u.Size {
			t.Fatalf("%s on hub: %+v, want %+v", u.Path, files[u.Path], u)
		}
		loc, err := dl.Download(context.Background(), "tester/js-upload", "main", u.Path, nil)
		if err != nil {
			t.Fatalf("%s: %v", u.Path, err)
		}
		got, _ := os.ReadFile(loc.Path)
		if !bytes.Equal(got, local) {
			t.Fatalf("%s: downloaded bytes differ", u.Path)
		}
	}
}
