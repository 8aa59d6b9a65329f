package deploy_test

// Acceptance test of the phone entrypoint: the bundle built by BuildBundle is unzipped and run under plain
// Node with the _STD_ stand-in (testdata/js/acurast/std-standin.cjs). The stand-in's llama.server.start runs
// testdata/js/acurast/fake-llama-server.cjs, or the command in PHONELLM_STD_LLAMA_CMD (e.g.
// "bin/phonellm serve") when set; its tunnel is a loopback TCP relay. The model comes from hubtest (a private
// repo, so the Hub token is needed on the API host and must not reach the storage host).

import (
	"archive/zip"
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/phonellm/phonellm/pipeline/deploy"
	"github.com/phonellm/phonellm/pipeline/deploy/acurast"
	"github.com/phonellm/phonellm/pipeline/publish/hubtest"
)

const standinDir = "../../testdata/js/acurast"

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// phoneProc is a running entrypoint with its captured output and stand-in events.
type phoneProc struct {
	cmd    *exec.Cmd
	mu     sync.Mutex
	out    bytes.Buffer
	events []map[string]any
}

func (p *phoneProc) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

func (p *phoneProc) eventsOf(kind string) []map[string]any {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []map[string]any
	for _, e := range p.events {
		if e["event"] == kind {
			out = append(out, e)
		}
	}
	return out
}

func startPhone(t *testing.T, bundleDir, storage string, env map[string]string) *phoneProc {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatal("node is required (scripts/setup.sh installs it):", err)
	}
	standin, _ := filepath.Abs(filepath.Join(standinDir, "std-standin.cjs"))
	envJSON, _ := json.Marshal(env)
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, node, "--require", standin, filepath.Join(bundleDir, "index.js"))
	cmd.Dir = t.TempDir()
	cmd.Env = append(os.Environ(), "PHONELLM_STD_ENV="+string(envJSON), "PHONELLM_STD_STORAGE="+storage)
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = 5 * time.Second
	stdout, _ := cmd.StdoutPipe()
	p := &phoneProc{cmd: cmd}
	cmd.Stderr = writerFunc(func(b []byte) { p.mu.Lock(); p.out.Write(b); p.mu.Unlock() })
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			line := sc.Text()
			p.mu.Lock()
			p.out.WriteString(line + "\n")
			if j, ok := strings.CutPrefix(line, "@@std "); ok {
				var ev map[string]any
				if json.Unmarshal([]byte(j), &ev) == nil {
					p.events = append(p.events, ev)
				}
			}
			p.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		cancel()
		cmd.Wait()
		if t.Failed() {
			t.Logf("entrypoint output:\n%s", p.output())
		}
	})
	return p
}

type writerFunc func([]byte)

func (f writerFunc) Write(b []byte) (int, error) { f(b); return len(b), nil }

func waitFor(t *testing.T, what string, timeout time.Duration, f func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !f() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func getJSON(url string, v any) (int, error) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	return resp.StatusCode, json.NewDecoder(resp.Body).Decode(v)
}

func unzip(t *testing.T, b []byte, dir string) {
	t.Helper()
	zr, err := zip.NewReader(bytes.NewReader(b), int64(len(b)))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range zr.File {
		rc, err := f.Open()
		if err != nil {
			t.Fatal(err)
		}
		data, _ := io.ReadAll(rc)
		rc.Close()
		if err := os.WriteFile(filepath.Join(dir, f.Name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

type phoneStatus struct {
	State string `json:"state"`
	Model struct {
		SHA256   string `json:"sha256"`
		Verified bool   `json:"verified"`
	} `json:"model"`
	Download struct {
		Bytes       int64 `json:"bytes"`
		ResumedFrom int64 `json:"resumed_from"`
	} `json:"download"`
	Settings *deploy.Settings `json:"settings"`
	TokS     float64          `json:"tok_s"`
	Bench    []map[string]any `json:"bench"`
	Restarts int              `json:"restarts"`
	Slots    int              `json:"slots"`
	Tunnel   struct {
		ClientID    string `json:"client_id"`
		ExpectedURL string `json:"expected_url"`
		URL         string `json:"url"`
	} `json:"tunnel"`
}

func TestPhoneEntrypointEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("runs Node processes")
	}
	// The model: a GGUF-magic file big enough to be streamed in several chunks, or, when the stand-in runs a
	// real server (PHONELLM_STD_LLAMA_CMD), the small valid GGUF named by PHONELLM_TEST_GGUF.
	fake := os.Getenv("PHONELLM_STD_LLAMA_CMD") == ""
	model := make([]byte, 3<<20)
	rand.Read(model)
	copy(model, "GGUF")
	if !fake {
		p := os.Getenv("PHONELLM_TEST_GGUF")
		if p == "" {
			t.Fatal("PHONELLM_STD_LLAMA_CMD is set: also set PHONELLM_TEST_GGUF to a small valid GGUF")
		}
		var err error
		if model, err = os.ReadFile(p); err != nil {
			t.Fatal(err)
		}
	}
	sum := sha256.Sum256(model)
	hub := hubtest.Start(t, hubtest.Config{})
	if _, err := hub.Seed("tester/tiny-gguf", "main", map[string][]byte{"tiny-q4_k_m.gguf": model}); err != nil {
		t.Fatal(err)
	}
	hub.SetPrivate("tester/tiny-gguf", true)
	// The first storage download breaks half-way: the entrypoint must resume with Range.
	hub.Inject(hubtest.Fault{Op: hubtest.OpCDN, Kind: hubtest.FaultTruncate})

	const apiKey = "sk-phonellm-test-0123456789abcdef"
	spec := deploy.Spec{
		Name: "tiny", Replicas: 1, Ctx: 1024, Slots: 2,
		Model: deploy.ModelRef{ID: "tester/tiny-gguf", URL: hub.URL + "/tester/tiny-gguf/resolve/main/tiny-q4_k_m.gguf", Size: int64(len(model)), SHA256: hex.EncodeToString(sum[:])},
		// The fake server never answers at 16 threads: the tuner must abandon that candidate, not wait for it.
		Candidates: []deploy.Settings{{Threads: 2}, {Threads: 4, Batch: 256, UBatch: 128}, {Threads: 8}, {Threads: 16}},
		APIKeyEnv:  "PHONELLM_API_KEY", HFTokenEnv: "HF_TOKEN",
	}
	if !fake {
		// A real engine on a small CI machine: oversubscribed threads (8 on 2 cores) spin for minutes, so the
		// real run tunes over what the machine has; which one wins is then the machine's answer.
		spec.Candidates = []deploy.Settings{{Threads: 1}, {Threads: 2, Batch: 256, UBatch: 128}, {Threads: 2}}
	} else {
		t.Setenv("PHONELLM_FAKE_STALL_THREADS", "16")
	}
	cfg := deploy.NewPhoneConfig(spec, "test")
	cfg.Listen, cfg.LlamaAddr = freeAddr(t), freeAddr(t)
	cfg.WatchdogMS = 300
	dir := t.TempDir()
	ref, err := deploy.BuildBundle(context.Background(), deploy.BundleOptions{Out: filepath.Join(dir, "bundle.zip"), Name: "tiny", Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	zb, _ := os.ReadFile(ref.Path)
	bdir := filepath.Join(dir, "bundle")
	os.Mkdir(bdir, 0o755)
	unzip(t, zb, bdir)
	storage := filepath.Join(dir, "storage")
	// The tunnel key phonellm generates for this replica: the phone must derive the URL recorded in the state.
	tk, err := acurast.NewTunnelKey("acu.run")
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"PHONELLM_API_KEY": apiKey, "HF_TOKEN": hub.Token(), acurast.TunnelKeyEnv: tk.Key}
	p := startPhone(t, bdir, storage, env)

	var base string
	waitFor(t, "the tunnel", 5*time.Minute, func() bool {
		if ev := p.eventsOf("tunnel"); len(ev) > 0 {
			base = ev[0]["url"].(string)
			return true
		}
		return false
	})
	var st phoneStatus
	// Hang guards, not speed requirements: on a loaded machine the real engine's candidates take a while.
	waitFor(t, "readiness", 5*time.Minute, func() bool {
		code, err := getJSON(base+"/status", &st)
		if err == nil && code == 200 && st.State == "failed" {
			t.Fatalf("entrypoint failed: %s", p.output())
		}
		code, _ = getJSON(base+"/health", &map[string]any{})
		return code == 200
	})
	if _, err := getJSON(base+"/status", &st); err != nil {
		t.Fatal(err)
	}
	if !st.Model.Verified || st.Model.SHA256 != spec.Model.SHA256 || st.Download.Bytes != spec.Model.Size {
		t.Errorf("model status %+v, download %+v", st.Model, st.Download)
	}
	if st.Download.ResumedFrom <= 0 {
		t.Errorf("download was not resumed after the truncated transfer (resumed_from = %d)", st.Download.ResumedFrom)
	}
	// The fake server is fastest at 4 threads; every candidate was timed, and the one that never answers was
	// abandoned (issue 13 item 9).
	if st.Settings == nil || len(st.Bench) != len(spec.Candidates) || st.TokS <= 0 || st.Slots != 2 ||
		fake && (st.Settings.Threads != 4 || st.Settings.Batch != 256 || st.TokS != 100) {
		t.Errorf("tuning: settings %+v, bench %v, tok/s %v, slots %d", st.Settings, st.Bench, st.TokS, st.Slots)
	}
	if fake {
		if b := st.Bench[len(st.Bench)-1]; b["abandoned"] != true || !strings.Contains(fmt.Sprint(b["error"]), "abandoned") {
			t.Errorf("the stalling candidate: %v, want abandoned", b)
		}
	}
	starts := p.eventsOf("llama.start")
	last := starts[len(starts)-1]["argv"].([]any)
	argv := fmt.Sprint(last...)
	wants := []string{"--ctx-size2048", "--parallel2", "--aliastester/tiny-gguf", "--cache-ram0"}
	if fake { // the fake server is fastest at its 4-thread candidate; a real engine picks what this machine favours
		wants = append(wants, "--threads4", "--batch-size256", "--ubatch-size128")
	} else {
		wants = append(wants, fmt.Sprintf("--threads%d", st.Settings.Threads))
	}
	for _, want := range wants {
		if !strings.Contains(strings.ReplaceAll(argv, " ", ""), want) {
			t.Errorf("llama-server argv %v lacks %s", last, want)
		}
	}
	// Tunnel: the phone, the stand-in and phonellm's Go side agree on the client ID and so on the URL.
	if ev := p.eventsOf("tunnel"); ev[0]["clientId"] != st.Tunnel.ClientID || st.Tunnel.URL != base ||
		st.Tunnel.ClientID != tk.ClientID || st.Tunnel.ExpectedURL != tk.URL {
		t.Errorf("tunnel status %+v vs event %v vs go %+v", st.Tunnel, ev[0], tk)
	}

	// The Hub token went to the API host only; the storage host (another host name) never saw it.
	for _, r := range hub.Requests() {
		if r.Op == hubtest.OpResolve && !r.Auth {
			t.Errorf("resolve without the token: %+v", r)
		}
		if r.Op == hubtest.OpCDN && r.Auth {
			t.Errorf("storage request carried an Authorization header: %+v", r)
		}
	}

	chat := func(key string, stream bool) (int, string) {
		body := fmt.Sprintf(`{"model":"tester/tiny-gguf","messages":[{"role":"user","content":"Review this transaction"}],"max_tokens":8,"stream":%v}`, stream)
		req, _ := http.NewRequest("POST", base+"/v1/chat/completions", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, _ := chat("", false); code != 401 {
		t.Errorf("no key: HTTP %d, want 401", code)
	}
	if code, _ := chat(apiKey+"x", false); code != 401 {
		t.Errorf("wrong key: HTTP %d, want 401", code)
	}
	code, body := chat(apiKey, false)
	var cc struct {
		Choices []struct {
			Message struct{ Content string } `json:"message"`
		} `json:"choices"`
	}
	if code != 200 || json.Unmarshal([]byte(body), &cc) != nil || len(cc.Choices) != 1 || cc.Choices[0].Message.Content == "" ||
		fake && !strings.HasPrefix(cc.Choices[0].Message.Content, "RISK_LEVEL: 5") {
		t.Fatalf("chat: HTTP %d %s", code, body)
	}
	if code, body := chat(apiKey, true); code != 200 || !strings.Contains(body, "data: [DONE]") || fake && !strings.Contains(body, `"content":"RISK_LEVEL:"`) {
		t.Errorf("streamed chat: HTTP %d %s", code, body)
	}

	// Kill llama-server: the entrypoint restarts it with the chosen settings.
	pid := int(starts[len(starts)-1]["pid"].(float64))
	proc, _ := os.FindProcess(pid)
	proc.Kill()
	waitFor(t, "the restart", 5*time.Minute, func() bool {
		var s phoneStatus
		getJSON(base+"/status", &s)
		return s.Restarts >= 1 && s.State == "ready" && len(p.eventsOf("llama.start")) > len(starts)
	})
	if code, _ := chat(apiKey, false); code != 200 {
		t.Errorf("chat after restart: HTTP %d", code)
	}

	// No secret in the logs, the bundle or the storage folder's small files.
	if deploy.ContainsSecret([]byte(p.output()), apiKey, hub.Token(), tk.Key) {
		t.Error("a secret appears in the entrypoint's output")
	}
	if deploy.ContainsSecret(zb, apiKey, hub.Token()) {
		t.Error("a secret appears in the bundle")
	}

	// A second start reuses the verified model: no new storage download.
	cdn := hub.Count(hubtest.OpCDN)
	p.cmd.Process.Signal(os.Interrupt)
	p.cmd.Wait()
	cfg2 := cfg
	cfg2.Listen, cfg2.LlamaAddr = freeAddr(t), freeAddr(t)
	b2, err := deploy.BundleBytes("tiny", cfg2)
	if err != nil {
		t.Fatal(err)
	}
	bdir2 := filepath.Join(dir, "bundle2")
	os.Mkdir(bdir2, 0o755)
	unzip(t, b2, bdir2)
	p2 := startPhone(t, bdir2, storage, env)
	waitFor(t, "readiness after restart of the job", 5*time.Minute, func() bool {
		ev := p2.eventsOf("tunnel")
		if len(ev) == 0 {
			return false
		}
		code, _ := getJSON(ev[0]["url"].(string)+"/health", &map[string]any{})
		return code == 200
	})
	if n := hub.Count(hubtest.OpCDN); n != cdn {
		t.Errorf("the model was downloaded again (%d storage requests, was %d)", n, cdn)
	}
}

func TestPhoneEntrypointRejectsCorruptModel(t *testing.T) {
	if testing.Short() {
		t.Skip("runs Node processes")
	}
	model := make([]byte, 256<<10)
	rand.Read(model)
	copy(model, "GGUF")
	hub := hubtest.Start(t, hubtest.Config{})
	if _, err := hub.Seed("tester/m", "main", map[string][]byte{"m.gguf": model}); err != nil {
		t.Fatal(err)
	}
	wrong := sha256.Sum256(append([]byte("x"), model...))
	spec := deploy.Spec{Name: "m", Replicas: 1, Ctx: 256, Slots: 1, Threads: 2,
		Model: deploy.ModelRef{URL: hub.URL + "/tester/m/resolve/main/m.gguf", Size: int64(len(model)), SHA256: hex.EncodeToString(wrong[:])}}
	cfg := deploy.NewPhoneConfig(spec, "test")
	cfg.Listen, cfg.LlamaAddr = freeAddr(t), freeAddr(t)
	b, err := deploy.BundleBytes("m", cfg)
	if err != nil {
		t.Fatal(err)
	}
	bdir := t.TempDir()
	unzip(t, b, bdir)
	storage := t.TempDir()
	p := startPhone(t, bdir, storage, map[string]string{})
	var st phoneStatus
	waitFor(t, "the failure", 5*time.Minute, func() bool {
		ev := p.eventsOf("tunnel")
		if len(ev) == 0 {
			return false
		}
		getJSON(ev[0]["url"].(string)+"/status", &st)
		return st.State == "failed"
	})
	if len(p.eventsOf("llama.start")) != 0 {
		t.Error("llama-server was started on an unverified model")
	}
	ents, _ := os.ReadDir(storage)
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".gguf") {
			t.Errorf("unverified model kept as %s", e.Name())
		}
	}
}

// TestPhoneDownloadFaults: a corrupted body (sha256 mismatch: download again), a dropped connection (resume
// with Range) and a server that ignores Range (start again from zero) in a row; the phone still ends up with
// the verified model, and never keeps a bad file.
func TestPhoneDownloadFaults(t *testing.T) {
	if testing.Short() {
		t.Skip("runs Node processes")
	}
	model := make([]byte, 1<<20)
	rand.Read(model)
	copy(model, "GGUF")
	sum := sha256.Sum256(model)
	hub := hubtest.Start(t, hubtest.Config{})
	if _, err := hub.Seed("tester/f", "main", map[string][]byte{"f.gguf": model}); err != nil {
		t.Fatal(err)
	}
	for _, k := range []hubtest.FaultKind{hubtest.FaultCorrupt, hubtest.FaultTruncate, hubtest.FaultIgnoreRange} {
		hub.Inject(hubtest.Fault{Op: hubtest.OpCDN, Kind: k})
	}
	spec := deploy.Spec{Name: "f", Replicas: 1, Ctx: 256, Slots: 1, Threads: 2, APIKeyEnv: "PHONELLM_API_KEY",
		Model: deploy.ModelRef{URL: hub.URL + "/tester/f/resolve/main/f.gguf", Size: int64(len(model)), SHA256: hex.EncodeToString(sum[:])}}
	cfg := deploy.NewPhoneConfig(spec, "test")
	cfg.Listen, cfg.LlamaAddr = freeAddr(t), freeAddr(t)
	b, err := deploy.BundleBytes("f", cfg)
	if err != nil {
		t.Fatal(err)
	}
	bdir := t.TempDir()
	unzip(t, b, bdir)
	storage := t.TempDir()
	p := startPhone(t, bdir, storage, map[string]string{"PHONELLM_API_KEY": "sk-phonellm-faults-0123456789"})
	var st phoneStatus
	waitFor(t, "readiness", 5*time.Minute, func() bool {
		ev := p.eventsOf("tunnel")
		if len(ev) == 0 {
			return false
		}
		getJSON(ev[0]["url"].(string)+"/status", &st)
		if st.State == "failed" {
			t.Fatalf("entrypoint failed:\n%s", p.output())
		}
		return st.State == "ready"
	})
	if n := hub.PendingFaults(); n != 0 {
		t.Errorf("%d faults never fired", n)
	}
	cdn := 0
	for _, r := range hub.Requests() {
		if r.Op == hubtest.OpCDN {
			cdn++
		}
	}
	if !st.Model.Verified || cdn != 3 { // corrupt, truncated, then the whole body again
		t.Errorf("verified %v after %d storage requests, want 3", st.Model.Verified, cdn)
	}
	got, err := os.ReadFile(filepath.Join(storage, "model-"+spec.Model.SHA256[:16]+".gguf"))
	if err != nil || !bytes.Equal(got, model) {
		t.Fatalf("stored model differs (%v)", err)
	}
	if !strings.Contains(p.output(), "sha256 mismatch") {
		t.Errorf("the corrupted download was not reported:\n%s", p.output())
	}
}
