package main

import (
	"archive/zip"
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"

	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/phonellm/phonellm/pipeline/deploy"
)

// TestPhoneWarmUpWithServe runs the phone bundle's entrypoint under the _STD_ stand-in with `phonellm serve`
// (this test binary, re-executed as the CLI) standing in for llama-server: the entrypoint warms the
// deployment's rubric before it reports ready, and the first real review of that rubric is a cache hit, as the
// server reports it and as the entrypoint's /status counts it.
func TestPhoneWarmUpWithServe(t *testing.T) {
	if testing.Short() {
		t.Skip("runs Node and a serve process")
	}
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatal("node is required (scripts/setup.sh installs it):", err)
	}
	model := tinyGGUF(t)
	data, err := os.ReadFile(model)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	files := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.ServeContent(w, r, "model.gguf", time.Time{}, bytes.NewReader(data))
	}))
	defer files.Close()

	rubric := "Rubric: review the card payment below. " + strings.Repeat("Weigh the amount, the merchant and the device. ", 12)
	spec := deploy.Spec{Name: "tiny", Replicas: 1, Ctx: 1024, Slots: 1, Candidates: []deploy.Settings{{Threads: 1}},
		Model: deploy.ModelRef{ID: "tiny", URL: files.URL + "/model.gguf", Size: int64(len(data)), SHA256: hex.EncodeToString(sum[:])}}
	cfg := deploy.NewPhoneConfig(spec, "test")
	cfg.Warm = []string{rubric}
	cfg.Listen, cfg.LlamaAddr = freeLoopback(t), freeLoopback(t)
	zb, err := deploy.BundleBytes("tiny", cfg)
	if err != nil {
		t.Fatal(err)
	}
	bdir := t.TempDir()
	zr, err := zip.NewReader(bytes.NewReader(zb), int64(len(zb)))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range zr.File {
		rc, _ := f.Open()
		b, _ := io.ReadAll(rc)
		rc.Close()
		if err := os.WriteFile(filepath.Join(bdir, f.Name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	standin, _ := filepath.Abs("../../testdata/js/acurast/std-standin.cjs")
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, node, "--require", standin, filepath.Join(bdir, "index.js"))
	cmd.Dir = t.TempDir()
	cmd.Env = append(os.Environ(), "PHONELLM_STD_STORAGE="+t.TempDir(), "PHONELLM_STD_ENV={}",
		"PHONELLM_STD_LLAMA_CMD="+os.Args[0]+" serve", "PHONELLM_STD_LLAMA_DIALECT=phonellm-serve",
		cliSelfEnv+"=1", "PHONELLM_HOME="+t.TempDir())
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = 10 * time.Second
	var mu sync.Mutex
	var out strings.Builder
	cmd.Stderr = writerTo(&mu, &out)
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		_ = cmd.Wait()
		if t.Failed() {
			mu.Lock()
			t.Logf("entrypoint output:\n%s", out.String())
			mu.Unlock()
		}
	})
	urls := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			line := sc.Text()
			mu.Lock()
			out.WriteString(line + "\n")
			mu.Unlock()
			if j, ok := strings.CutPrefix(line, "@@std "); ok {
				var ev map[string]any
				if json.Unmarshal([]byte(j), &ev) == nil && ev["event"] == "tunnel" {
					urls <- ev["url"].(string)
				}
			}
		}
	}()
	var base string
	select {
	case base = <-urls:
	case <-time.After(60 * time.Second):
		t.Fatal("no tunnel")
	}
	type status struct {
		State string `json:"state"`
		Error string `json:"error"`
		Warm  []struct {
			Tokens int    `json:"tokens"`
			Error  string `json:"error"`
		} `json:"warm"`
		Cache struct {
			Requests     int `json:"requests"`
			Hits         int `json:"hits"`
			CachedTokens int `json:"cached_tokens"`
		} `json:"cache"`
	}
	get := func() status {
		var s status
		resp, err := http.Get(base + "/status")
		if err == nil {
			json.NewDecoder(resp.Body).Decode(&s)
			resp.Body.Close()
		}
		return s
	}
	var st status
	for deadline := time.Now().Add(3 * time.Minute); ; {
		st = get()
		if st.State == "ready" {
			break
		}
		if st.State == "failed" {
			t.Fatalf("entrypoint failed: %s", st.Error)
		}
		if time.Now().After(deadline) {
			t.Fatalf("not ready: %+v", st)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if len(st.Warm) != 1 || st.Warm[0].Error != "" || st.Warm[0].Tokens <= 0 {
		t.Fatalf("warm-up: %+v", st.Warm)
	}
	body, _ := json.Marshal(map[string]any{"model": "tiny", "max_tokens": 2, "temperature": 0, "messages": []map[string]string{
		{"role": "system", "content": rubric}, {"role": "user", "content": "Case 12: three refunds in an hour."}}})
	resp, err := http.Post(base+"/v1/chat/completions", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var ans struct {
		Usage struct {
			PromptTokens int `json:"prompt_tokens"`
			Details      struct {
				CachedTokens int `json:"cached_tokens"`
			} `json:"prompt_tokens_details"`
		} `json:"usage"`
	}
	if resp.StatusCode != 200 || json.Unmarshal(raw, &ans) != nil {
		t.Fatalf("review: %d %s", resp.StatusCode, raw)
	}
	t.Logf("warm-up: %d tokens; first review: %d prompt tokens, %d cached", st.Warm[0].Tokens, ans.Usage.PromptTokens, ans.Usage.Details.CachedTokens)
	if c := ans.Usage.Details.CachedTokens; 2*c < ans.Usage.PromptTokens {
		t.Fatalf("the first review was not a cache hit: %d of %d prompt tokens cached", c, ans.Usage.PromptTokens)
	}
	st = get()
	if st.Cache.Requests != 1 || st.Cache.Hits != 1 || st.Cache.CachedTokens != ans.Usage.Details.CachedTokens {
		t.Errorf("entrypoint cache counters %+v", st.Cache)
	}
}

func freeLoopback(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

type lockedWriter struct {
	mu *sync.Mutex
	b  *strings.Builder
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func writerTo(mu *sync.Mutex, b *strings.Builder) io.Writer { return lockedWriter{mu, b} }
