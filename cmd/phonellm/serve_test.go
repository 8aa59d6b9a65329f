package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/phonellm/phonellm/cmd/phonellm/internal/ui"
	"github.com/phonellm/phonellm/pipeline/gguf"
)

// lockedBuffer is a bytes.Buffer safe to read while a command writes to it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// running is a phonellm command running in-process.
type running struct {
	out, err *lockedBuffer
	cancel   context.CancelFunc
	done     chan int
}

func start(t *testing.T, args ...string) *running {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{out: &lockedBuffer{}, err: &lockedBuffer{}, cancel: cancel, done: make(chan int, 1)}
	go func() { r.done <- run(ctx, args, ui.Test(r.out, r.err)) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-r.done:
		case <-time.After(60 * time.Second):
			t.Error("command did not stop after cancel")
		}
	})
	return r
}

// url waits for the command to print its http:// URL on stdout (the line serve and gateway print when ready).
func (r *running) url(t *testing.T) string {
	t.Helper()
	deadline := time.Now().Add(120 * time.Second)
	for time.Now().Before(deadline) {
		for _, line := range strings.Split(r.out.String(), "\n") {
			if strings.HasPrefix(line, "http://") {
				return strings.TrimSpace(line)
			}
		}
		select {
		case code := <-r.done:
			r.done <- code
			t.Fatalf("command exited %d before it was ready: %s", code, r.err.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
	t.Fatalf("command never printed its URL: %s", r.err.String())
	return ""
}

// stop interrupts the command (as Ctrl-C does) and returns its exit code.
func (r *running) stop(t *testing.T) int {
	t.Helper()
	r.cancel()
	select {
	case code := <-r.done:
		r.done <- code
		return code
	case <-time.After(60 * time.Second):
		t.Fatal("command did not stop after the interrupt")
	}
	return -1
}

// tinyGGUF converts the tiny qwen3 checkpoint to an F16 GGUF.
func tinyGGUF(t *testing.T) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "tiny-F16.gguf")
	if code, _, e := runCLI(t, context.Background(), "convert", "--model", tinyCheckpoint(t, "qwen3"), "--outtype", "f16", "-o", out); code != 0 {
		t.Fatalf("convert: %s", e)
	}
	return out
}

func TestServeAPIKeyEnvFailsClosed(t *testing.T) {
	t.Setenv("PHONELLM_TEST_EMPTY_KEY", "")
	model := filepath.Join(t.TempDir(), "never-read.gguf")
	for _, args := range [][]string{
		{"serve", model, "--port", "0", "--api-key-env", "PHONELLM_TEST_UNSET_KEY"},
		{"serve", model, "--port", "0", "--api-key-env", "PHONELLM_TEST_EMPTY_KEY"},
		{"gateway", "--replica", "http://127.0.0.1:1", "--port", "0", "--api-key-env", "PHONELLM_TEST_UNSET_KEY"},
		{"gateway", "--replica", "http://127.0.0.1:1", "--port", "0", "--api-key-env", "PHONELLM_TEST_EMPTY_KEY"},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		code, out, errOut := runCLI(t, ctx, args...)
		cancel()
		name := args[len(args)-1]
		lines := strings.Split(strings.TrimSpace(errOut), "\n")
		if code != exitUsage || len(lines) != 1 || !strings.Contains(errOut, name) || out != "" {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want exit %d and one line naming %s", args[:1], code, out, errOut, exitUsage, name)
		}
	}
	code, _, errOut := runCLI(t, context.Background(), "serve", model, "--api-key", "k", "--api-key-env", "X")
	if code != exitUsage {
		t.Errorf("--api-key with --api-key-env: exit %d (%s)", code, errOut)
	}
	// A key nobody could send (clients' tokens are trimmed) is refused too, rather than locking everyone out.
	t.Setenv("PHONELLM_API_KEY", "key-with-newline\n")
	if code, _, errOut = runCLI(t, context.Background(), "serve", model); code != exitUsage || !strings.Contains(errOut, "PHONELLM_API_KEY") {
		t.Errorf("PHONELLM_API_KEY with a newline: exit %d (%s)", code, errOut)
	}
}

// TestServeRealModel runs serve on a tiny real GGUF: /v1/models says no more than id, owned_by and created;
// the engine's own log lines stay off stderr; abusive requests are answered, not fatal; Ctrl-C exits 130.
func TestServeRealModel(t *testing.T) {
	model := tinyGGUF(t)
	t.Setenv("PHONELLM_TEST_SERVE_KEY", "serve-test-key")
	fd2 := captureStderr(t) // ggml and slog's default handler write to the process's stderr, not the command's
	r := start(t, "serve", model, "--port", "0", "--ctx", "256", "--api-key-env", "PHONELLM_TEST_SERVE_KEY")
	base := r.url(t)
	call := func(method, path, body string) (int, []byte) {
		t.Helper()
		req, _ := http.NewRequest(method, base+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer serve-test-key")
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}

	code, b := call("GET", "/v1/models", "")
	var list struct {
		Data []map[string]any `json:"data"`
	}
	if code != 200 || json.Unmarshal(b, &list) != nil || len(list.Data) != 1 {
		t.Fatalf("/v1/models: %d %s", code, b)
	}
	for k := range list.Data[0] {
		switch k {
		case "id", "object", "created", "owned_by":
		default:
			t.Errorf("/v1/models exposes %q: %s", k, b)
		}
	}
	if strings.Contains(string(b), filepath.Dir(model)) {
		t.Errorf("/v1/models exposes the model's path: %s", b)
	}

	code, b = call("POST", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hello"}],"max_tokens":4,"temperature":0}`)
	if code != 200 {
		t.Fatalf("chat: %d %s", code, b)
	}
	// A special-token flood and a prompt larger than the context: answered with 400s, the server stays up.
	flood := strings.Repeat(`<|im_start|>user\nx<|im_end|>\n`, 2000) // issue 14: 62 KB, 60 s of CPU before
	code, b = call("POST", "/v1/completions", `{"prompt":"`+flood+`","max_tokens":1}`)
	if code != 400 || !strings.Contains(string(b), "context_length_exceeded") {
		t.Errorf("special-token flood: %d %s", code, b)
	}
	word := strings.Repeat("a", 15<<20)
	code, b = call("POST", "/v1/chat/completions", `{"messages":[{"role":"user","content":"`+word+`"}]}`)
	if code != http.StatusRequestEntityTooLarge {
		t.Errorf("15 MiB word: %d %s", code, b)
	}
	if code, b = call("GET", "/health", ""); code != 200 || !strings.Contains(string(b), `"slots_processing":0`) {
		t.Errorf("health after the abuse: %d %s", code, b)
	}

	if code := r.stop(t); code != exitInterrupted {
		t.Errorf("serve after Ctrl-C: exit %d, want %d (%s)", code, exitInterrupted, r.err.String())
	}
	process := fd2()
	for _, leak := range []string{"offloaded", "layers to GPU", "load_tensors"} {
		if strings.Contains(r.err.String(), leak) || strings.Contains(process, leak) {
			t.Errorf("engine log line %q reached stderr:\n%s\n%s", leak, r.err.String(), process)
		}
	}
}

// captureStderr points the process's file descriptor 2 at a temporary file until the returned function is
// called (or the test ends), and returns what was written to it.
func captureStderr(t *testing.T) func() string {
	t.Helper()
	f, err := os.CreateTemp(t.TempDir(), "stderr")
	if err != nil {
		t.Fatal(err)
	}
	saved, err := unix.Dup(2)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Dup2(int(f.Fd()), 2); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	restore := func() {
		once.Do(func() {
			_ = unix.Dup2(saved, 2)
			_ = unix.Close(saved)
		})
	}
	t.Cleanup(restore)
	return func() string {
		restore()
		b, _ := os.ReadFile(f.Name())
		return string(b)
	}
}

// TestServeVerboseShowsEngineLogs: with -v the engine's log lines are there for whoever debugs.
func TestServeVerboseShowsEngineLogs(t *testing.T) {
	model := tinyGGUF(t)
	r := start(t, "-v", "serve", model, "--port", "0", "--ctx", "256")
	r.url(t)
	r.stop(t)
	if !strings.Contains(r.err.String(), "offloaded") {
		t.Errorf("-v: the engine's load lines are missing:\n%s", r.err.String())
	}
}

// TestServeNaNModel: a GGUF whose weights are NaN loads (its shapes are fine), and each request ends with an
// OpenAI-shaped 500 "non-finite logits" at temperature 0 and above, instead of garbage text or a crash; the
// slot is freed every time.
func TestServeNaNModel(t *testing.T) {
	model := tinyGGUF(t)
	// A NaN norm is refused at load (package modelcheck reads the small tensors); NaN in a weight matrix is
	// not read at load and shows in the logits.
	poisonTensor(t, model, "blk.1.ffn_down.weight")
	r := start(t, "serve", model, "--port", "0", "--ctx", "256")
	base := r.url(t)
	for _, body := range []string{
		`{"messages":[{"role":"user","content":"hello"}],"max_tokens":4,"temperature":0}`,
		`{"messages":[{"role":"user","content":"hello"}],"max_tokens":4}`,
		`{"messages":[{"role":"user","content":"hello"}],"max_tokens":4,"stream":true}`,
	} {
		resp, err := http.Post(base+"/v1/chat/completions", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		stream := strings.Contains(body, "stream")
		if !strings.Contains(string(b), `"code":"non_finite_logits"`) || !strings.Contains(string(b), "model produced non-finite logits") ||
			(!stream && resp.StatusCode != 500) {
			t.Errorf("%s: %d %s", body, resp.StatusCode, b)
		}
	}
	resp, err := http.Get(base + "/health")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(b), `"slots_processing":0`) {
		t.Errorf("slot not freed: %s", b)
	}
	if code := r.stop(t); code != exitInterrupted {
		t.Errorf("exit %d", code)
	}
}

// poisonTensor overwrites an F32 or F16 tensor of a GGUF with NaN.
func poisonTensor(t *testing.T, path, name string) {
	t.Helper()
	g, err := gguf.OpenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	ti, ok := g.Tensor(name)
	off := g.DataOffset + int64(ti.Offset)
	g.Close()
	if !ok || (ti.Type != gguf.TypeF32 && ti.Type != gguf.TypeF16) {
		t.Fatalf("%s: tensor %s missing or not F32/F16", path, name)
	}
	nan := make([]byte, ti.Size())
	for i := 0; i < len(nan); {
		if ti.Type == gguf.TypeF16 {
			binary.LittleEndian.PutUint16(nan[i:], 0x7e00) // an F16 NaN
			i += 2
			continue
		}
		binary.LittleEndian.PutUint32(nan[i:], math.Float32bits(float32(math.NaN())))
		i += 4
	}
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(nan, off); err != nil {
		t.Fatal(err)
	}
}
